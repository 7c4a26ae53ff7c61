"""Stored evidence: the small results records a paper page cites, and whether each is current.

Each paper keeps, in ``data/results/<slug>/``, one record per stored run: ``quick-seed0.json`` (the
page's own run, whose executed notebook is ``notebooks/<slug>.ipynb``), ``quick-seed100.json``,
``quick-seed1000.json`` and ``full-seed0.json`` (the robustness table's columns), written by
``companion store SLUG [--preset P] [--seed S]``. A record is *current* when its code key equals the
code key of the same parameters under the code as it is now (:mod:`companion.keys`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from companion import keys, registry
from companion.runner import RecordError, read_record, write_json_atomic

EVIDENCE = (("quick", 0), ("quick", 100), ("quick", 1000), ("full", 0))


def results_dir(root: Path, slug: str) -> Path:
    """The folder of ``slug``'s stored records."""
    return root / "data" / "results" / slug


def record_path(root: Path, slug: str, preset: str, seed: int) -> Path:
    """Where the stored record of ``slug`` at ``preset`` and base ``seed`` lives."""
    return results_dir(root, slug) / f"{preset}-seed{seed}.json"


def page_record_path(root: Path, slug: str) -> Path:
    """The record of the run the page shows: the quick preset at the paper's default seed."""
    paper = registry.get(slug)
    return record_path(root, slug, "quick", paper.module().Params.resolve("quick").seed)


@dataclass(frozen=True)
class Stored:
    """One stored record (or the reason it cannot be read) and whether it is current."""

    path: Path
    record: dict[str, Any] | None
    error: str | None = None
    current: bool | None = None

    @property
    def label(self) -> str:
        """``quick, seed 100`` style column heading."""
        return self.path.stem.replace("-seed", ", seed ")


def current_code_key(slug: str, params: dict[str, Any], root: Path) -> str:
    """The code key that the parameters of a stored record would get from today's code."""
    paper = registry.get(slug)
    cls = paper.module().Params
    resolved = cls.resolve(params.get("preset", "quick"),
                           **{k: v for k, v in params.items() if k in cls.names()})
    return keys.code_key(paper.module_name, paper.notebook(root), resolved.to_dict())[0]


def load(root: Path, slug: str, check_current: bool = True) -> list[Stored]:
    """Every stored record of ``slug``, in EVIDENCE order then others; unreadable ones with their error."""
    folder = results_dir(root, slug)
    order = {f"{p}-seed{s}": i for i, (p, s) in enumerate(EVIDENCE)}
    paths = sorted(folder.glob("*.json"), key=lambda q: (order.get(q.stem, len(order)), q.stem))
    out = []
    for path in paths:
        try:
            record = read_record(path)
        except RecordError as err:
            out.append(Stored(path, None, str(err)))
            continue
        current = None
        if check_current:
            key = record["provenance"].get("code_key")
            try:
                current = key is not None and key == current_code_key(slug, record["params"], root)
            except Exception:  # parameters the schema no longer accepts: stale, not a crash
                current = False
        out.append(Stored(path, record, None, current))
    return out


def page_record(root: Path, slug: str) -> dict[str, Any] | None:
    """The page's own stored record (None when missing); a corrupt one raises RecordError."""
    path = page_record_path(root, slug)
    return read_record(path) if path.is_file() else None


def save(root: Path, slug: str, results: dict[str, Any]) -> Path:
    """Write ``results`` as the stored record of its preset and seed."""
    params = results["params"]
    path = record_path(root, slug, params["preset"], params["seed"])
    write_json_atomic(path, results)
    return path


class UncommittedCode(ValueError):
    """Storing a record from code that differs from the commit it would name."""


def store(slug: str, preset: str = "quick", seed: int | None = None, force: bool = False,
          root: Path | None = None, progress: bool = False) -> bool:
    """Run ``slug`` at ``preset`` and base ``seed`` and keep it as a stored record; the page's own
    run (quick, default seed) also becomes the stored notebook. Refuses uncommitted code."""
    import nbformat

    from companion.runner import execute, git_state, plan, strip_volatile, write_notebook_atomic

    root = root or registry.project_root()
    raw = {} if seed is None else {"seed": str(seed)}
    p = plan(slug, preset, raw, root)
    notebook = p.paper.notebook(root)
    _, dirty = git_state(root, list(p.covered), notebook)
    if dirty:
        raise UncommittedCode(f"{slug}: the code this record would cover has uncommitted changes (its "
                              "package, the shared modules it imports or the notebook's code cells); "
                              "commit them first, stored records must come from committed code")
    outcome = execute(slug, preset, raw, force=force, root=root, progress=progress)
    if outcome.cached and outcome.results["provenance"].get("dirty") is not False:
        outcome = execute(slug, preset, raw, force=True, root=root, progress=progress)
    res = outcome.results
    print(f"{slug} {preset} seed {res['params']['seed']}: {res['status']} in "
          f"{res['provenance']['wall_seconds']:.1f} s" + (" (cached)" if outcome.cached else ""))
    if not outcome.ok:
        print(f"  {res['error']}")
    is_page = preset == "quick" and res["params"]["seed"] == p.paper.module().Params.resolve("quick").seed
    if is_page and outcome.ok and (outcome.folder / "notebook.ipynb").is_file():
        nb = nbformat.read(outcome.folder / "notebook.ipynb", as_version=4)
        nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
        write_notebook_atomic(strip_volatile(nb), notebook)
    save(root, slug, res)
    return outcome.ok
