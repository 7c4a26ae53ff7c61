"""Stored evidence: the small results records a paper page cites, and whether each is current.

Each paper keeps, in ``data/results/<slug>/``, one record per stored run: ``quick-seed0.json`` (the
page's own run, whose executed notebook is ``notebooks/<slug>.ipynb``), ``quick-seed100.json``,
``quick-seed1000.json`` and ``full-seed0.json`` (the robustness table's columns), written by
``companion store SLUG [--preset P] [--seed S]``. A record is *current* when its code key equals the
code key of the same parameters under the code as it is now (:mod:`companion.keys`); its verdicts
are *judged* when its verdict key matches too, and ``companion rejudge`` makes them so from the stored
per-seed values, without compute. A record made in another environment (another lock file or
Python) is marked ``env-drift``: shown, not stale.
"""

from __future__ import annotations

import os
import platform
import re
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Iterator

from companion import keys, numerics, registry
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
    """One stored record (or the reason it cannot be read), whether it is current, whether its
    verdicts are today's, and whether it was made in another environment."""

    path: Path
    record: dict[str, Any] | None
    error: str | None = None
    current: bool | None = None
    judged: bool | None = None
    env_drift: bool | None = None

    @property
    def state(self) -> str:
        """``current``, ``stale`` or ``unjudged`` (current values, yesterday's verdicts), plus ``env-drift``."""
        base = "stale" if not self.current else "current" if self.judged else "unjudged"
        return f"{base}, env-drift" if self.env_drift else base

    @property
    def label(self) -> str:
        """``quick, seed 100`` style column heading."""
        return self.path.stem.replace("-seed", ", seed ")


def current_keys(slug: str, params: dict[str, Any], root: Path, extra: Iterable[str] = ()) -> keys.Keys:
    """The keys that the parameters of a stored record would get from today's code (``extra``: the
    modules its kernel imported beyond what the source names, as its provenance lists them)."""
    paper = registry.get(slug)
    cls = paper.module().Params
    resolved = cls.resolve(params.get("preset", "quick"),
                           **{k: v for k, v in params.items() if k in cls.names()})
    return keys.keys_of(paper.module_name, paper.notebook(root), keys.params_for_key(resolved), extra=extra)


def keys_now(record: dict[str, Any], slug: str, root: Path) -> keys.Keys:
    """Today's keys of a stored record: its parameters, widened by the modules its kernel imported."""
    return current_keys(slug, record["params"], root, record["provenance"].get("extra_modules", ()))


def env_drift(provenance: dict[str, Any], root: Path) -> bool:
    """Whether a record was made in another environment: another lock file, Python or numerics profile."""
    from companion.environment import lock_hash

    return (provenance.get("lock") != lock_hash(root)
            or provenance.get("versions", {}).get("python") != platform.python_version()
            or provenance.get("numerics") != numerics.profile_for(os.environ))


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
        current = judged = drift = None
        if check_current:
            prov = record["provenance"]
            try:
                now = keys_now(record, slug, root)
                current = prov.get("code_key") == now.code
                judged = prov.get("verdict_key") == now.verdict
            except Exception:  # parameters the schema no longer accepts: stale, not a crash
                current = judged = False
            drift = env_drift(prov, root)
        out.append(Stored(path, record, None, current, judged, drift))
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
          root: Path | None = None, progress: bool = False, verify: bool = False,
          expected_key: str | None = None) -> bool:
    """Run ``slug`` at ``preset`` and base ``seed`` and keep it as a stored record; the page's own
    run (quick, default seed) also becomes the stored notebook. Refuses uncommitted code; a failed
    run leaves the stored record and page as they were. With ``verify``, a run that measures exactly
    the stored values re-stamps the stored record (:func:`restamped`) instead of replacing it."""
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
    path = record_path(root, slug, preset, p.params.seed)
    with store_lock(root, slug):
        outcome = execute(slug, preset, raw, force=force, root=root, progress=progress, expected_key=expected_key)
        if outcome.cached and outcome.results["provenance"].get("dirty") is not False:
            outcome = execute(slug, preset, raw, force=True, root=root, progress=progress,
                              expected_key=expected_key)
        res = outcome.results
        print(f"{slug} {preset} seed {res['params']['seed']}: {res['status']} in "
              f"{res['provenance']['wall_seconds']:.1f} s" + (" (cached)" if outcome.cached else ""))
        if not outcome.ok:
            print(f"  {res['error']}; the stored record is left as it was")
            return False
        old = read_record(path) if verify and path.is_file() else None
        kept = restamped(old, res) if old is not None else None
        is_page = preset == "quick" and res["params"]["seed"] == p.paper.module().Params.resolve("quick").seed
        if is_page and (outcome.folder / "notebook.ipynb").is_file():
            nb = nbformat.read(outcome.folder / "notebook.ipynb", as_version=4)
            nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
            write_notebook_atomic(strip_volatile(nb), notebook)
        save(root, slug, kept or res)
    return True


@contextmanager
def store_lock(root: Path, slug: str) -> Iterator[None]:
    """Hold ``slug``'s store lock (``data/results/<slug>/.lock``): two stores of a paper never interleave."""
    import fcntl

    folder = results_dir(root, slug)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Rejudged:
    """What ``rejudge`` did to one stored record: the verdicts that moved, or why it could not."""

    path: Path
    moved: list[tuple[str, str, str]]
    error: str | None = None


def rejudged_record(record: dict[str, Any], slug: str, root: Path) -> dict[str, Any]:
    """``record`` with its claims re-evaluated by today's declarations and its verdict key renewed;
    raises :class:`companion.claims.NotRejudgeable` when a declared claim was never measured."""
    from companion.claims import rejudge

    claims = rejudge(record["claims"], registry.get(slug).module().CLAIMS, record["params"].get("preset"))
    verdict_key = keys_now(record, slug, root).verdict
    return {**record, "claims": claims, "provenance": {**record["provenance"], "verdict_key": verdict_key}}


def moved_verdicts(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(claim, old verdict, new verdict) for each claim whose verdict or discrimination changed."""
    old = {c["id"]: c for c in before}

    def label(c: dict[str, Any] | None) -> str:
        if c is None:
            return "absent"
        return c["verdict"] + (", discriminates" if c.get("discriminates") else "")

    return [(c["id"], label(old.get(c["id"])), label(c)) for c in after if label(old.get(c["id"])) != label(c)]


def judged(root: Path, slug: str) -> list[Stored]:
    """Every stored record of ``slug`` with the verdicts today's declarations give (in memory; a
    record that cannot be re-judged is kept as stored): what the book shows."""
    from companion.claims import NotRejudgeable

    out = []
    for s in load(root, slug):
        if s.record is not None:
            try:
                s = replace(s, record=rejudged_record(s.record, slug, root), judged=True)
            except NotRejudgeable:
                pass
        out.append(s)
    return out


def rejudge_paper(root: Path, slug: str, write: bool = True) -> list[Rejudged]:
    """Re-evaluate every stored record of ``slug`` from its stored values; with ``write``, keep the
    result (and, for the page's record, the verdict table and verdict lines of the stored notebook)."""
    from companion.claims import NotRejudgeable

    out = []
    page = page_record_path(root, slug)
    for stored in load(root, slug, check_current=False):
        if stored.record is None:
            out.append(Rejudged(stored.path, [], stored.error))
            continue
        try:
            new = rejudged_record(stored.record, slug, root)
        except NotRejudgeable as err:
            out.append(Rejudged(stored.path, [], f"{err}: re-run it (companion verify {slug})"))
            continue
        if write and new != stored.record:
            write_json_atomic(stored.path, new)
            if stored.path == page:
                rewrite_page_verdicts(registry.get(slug).notebook(root), new["claims"])
        out.append(Rejudged(stored.path, moved_verdicts(stored.record["claims"], new["claims"])))
    return out


def rewrite_page_verdicts(notebook: Path, claims: list[dict[str, Any]]) -> None:
    """Put ``claims`` into the stored page file (see :func:`with_verdicts`)."""
    import nbformat

    from companion.runner import write_notebook_atomic

    write_notebook_atomic(with_verdicts(nbformat.read(notebook, as_version=4), claims), notebook)


def with_verdicts(nb: Any, claims: list[dict[str, Any]]) -> Any:
    """``nb`` with ``claims`` in the output of its ``claims.table`` cell and in the verdict lines of
    its ``claims.emit`` cell (what nbval compares); every other output stays as it was."""
    import nbformat

    from companion.claims import table

    tables = table(claims)
    lines = "".join(f"{c['id']}: {c['verdict']}\n" for c in claims)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if "claims.table(" in cell.source:
            cell.outputs = [nbformat.v4.new_output(
                "execute_result", data={"text/html": tables._repr_html_(), "text/plain": repr(tables)},
                execution_count=cell.execution_count)]
        elif "claims.emit(" in cell.source:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=lines)]
    return nb


# A metric whose name says it is a time (``seconds``, ``train_s``, ``timing``, ``wall_ratio``, ``speedup``): the
# machine's speed, not the method's result, so a re-run that moved only these reproduced the record.
TIMING = re.compile(r"second|timing|wall|speedup|_s$|(^|_)time")


def untimed(metrics: Any) -> Any:
    """``metrics`` without the entries whose name is a time (:data:`TIMING`), at any depth."""
    if isinstance(metrics, dict):
        return {k: untimed(v) for k, v in metrics.items() if not TIMING.search(str(k))}
    return metrics


def measured(record: dict[str, Any]) -> tuple[Any, Any]:
    """What a run measured, without its verdicts: each claim's (and control's) values, and the metrics
    except timings."""
    values = [(c["id"], c.get("value"), c.get("per_seed"),
               [(k["name"], k.get("value"), k.get("per_seed")) for k in c.get("controls", [])])
              for c in record["claims"]]
    return values, untimed(record.get("metrics"))


def restamped(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    """``old`` re-stamped with ``new``'s keys, commit and environment when ``new`` measured exactly the
    same values (its original timings kept, the verification appended); None when a value moved."""
    if new["status"] != "ok" or measured(old) != measured(new):
        return None
    prov, fresh = old["provenance"], new["provenance"]
    stamp = {name: fresh.get(name) for name in ("code_key", "verdict_key", "extra_modules", "cache_key", "commit",
                                                "dirty", "lock", "numerics", "versions")}
    check = {"verified_at": fresh["started"], "commit": fresh.get("commit"),
             "wall_seconds": fresh.get("wall_seconds"), "cpu_seconds": fresh.get("cpu_seconds"),
             "cpu": fresh.get("cpu"), "load_average": fresh.get("load_average")}
    return {**old, "claims": new["claims"],
            "provenance": {**prov, **stamp, "verified": [*prov.get("verified", []), check]}}


def verify_report(name: str, old: dict[str, Any], new: dict[str, Any]) -> str:
    """One line when a verified record reproduced; otherwise which claim values moved and by how much."""
    if new["status"] != "ok":
        return f"{name}: the re-run {new['status']}: {new.get('error')}"
    if new["provenance"].get("verified") and measured(old) == measured(new):
        return f"{name}: reproduced exactly; re-stamped"
    before = {c["id"]: c for c in old["claims"]}
    lines = [f"{name}: values moved; the new run is stored"]
    for c in new["claims"]:
        o = before.get(c["id"])
        if o is None:
            lines.append(f"  {c['id']}: new claim, {c['value']} {c['verdict']}")
        elif (o.get("value"), o.get("per_seed")) != (c.get("value"), c.get("per_seed")):
            delta = (c["value"] - o["value"]) if None not in (c.get("value"), o.get("value")) else float("nan")
            lines.append(f"  {c['id']}: {o.get('value')} -> {c.get('value')} ({delta:+.3g}); "
                         f"{o['verdict']} -> {c['verdict']}")
    if measured(old)[1] != measured(new)[1]:
        lines.append("  metrics moved too")
    return "\n".join(lines)


def to_verify(root: Path, slugs: list[str], preset: str | None = None,
              env: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """The stored records that ``verify`` re-runs: stale ones (with ``env``, env-drift ones too)."""
    out = []
    for slug in slugs:
        for s in load(root, slug):
            if s.record is None or (preset and s.record["params"].get("preset") != preset):
                continue
            if not s.current or (env and s.env_drift):
                out.append((slug, s.record))
    return out


def by_threads(todo: list[tuple[str, dict[str, Any]]]) -> dict[int, list[tuple[str, dict[str, Any]]]]:
    """Records grouped by the thread count they were stored with (each group runs at its count)."""
    out: dict[int, list[tuple[str, dict[str, Any]]]] = {}
    for slug, record in todo:
        out.setdefault(int(record["provenance"].get("threads") or 1), []).append((slug, record))
    return out
