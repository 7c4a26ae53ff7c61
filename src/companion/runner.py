"""Execute a paper's notebook with papermill into ``runs/<slug>/<run-id>/`` and record results.

The run folder holds ``notebook.ipynb`` (executed, volatile metadata stripped) and
``results.json`` (the contract in DESIGN.md), written atomically. A content hash over the
notebook's cells, the resolved parameters, the library source, shipped data and package versions
keys a cache: an identical repeated run is answered from the earlier folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import nbformat

from companion import registry
from companion.claims import OUTPUT_ENV, _jsonable
from companion.params import BaseParams, ParamError

TIMEOUT_S = {"quick": 900, "full": 3600, "paper": 24 * 3600}
VOLATILE_KEYS = ("papermill", "execution", "ExecuteTime", "collapsed", "scrolled")


@dataclass(frozen=True)
class RunOutcome:
    """What a run left behind: its folder, its results record and whether it came from cache."""

    folder: Path
    results: dict[str, Any]
    cached: bool

    @property
    def ok(self) -> bool:
        """True when the notebook ran to the end."""
        return self.results["status"] == "ok"


def params_class(paper: registry.Paper) -> type[BaseParams]:
    """The ``Params`` class of a paper (importing its module)."""
    return paper.module().Params


def resolve(slug: str, preset: str, raw: Mapping[str, str]) -> tuple[registry.Paper, BaseParams, dict[str, Any]]:
    """Validate slug, preset and ``name=value`` strings; return the paper, params and overrides."""
    paper = registry.get(slug)
    cls = params_class(paper)
    overrides = {name: cls.parse(name, text) for name, text in raw.items()}
    return paper, cls.resolve(preset, **overrides), overrides


def notebook_parameters(path: Path) -> set[str]:
    """Names assigned in the notebook's cell tagged ``parameters`` (a missing tag is an error)."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            names = set()
            for line in cell.source.splitlines():
                head = line.split("#", 1)[0]
                if "=" in head:
                    names.add(head.split("=", 1)[0].strip())
            return names
    raise ParamError(f"{path.name} has no cell tagged 'parameters'")


def _hash_tree(h: "hashlib._Hash", root: Path, suffixes: tuple[str, ...] | None = None,
               skip: Path | None = None) -> None:
    """Feed every file under ``root`` (path and bytes, sorted) into ``h``, except under ``skip``."""
    if not root.exists():
        return
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if "__pycache__" in path.parts or (suffixes and path.suffix not in suffixes):
            continue
        if skip is not None and path.is_relative_to(skip):
            continue
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())


def cache_key(paper: registry.Paper, params: BaseParams, root: Path) -> str:
    """Content hash of what determines a run: notebook cells, params, shared library and this
    paper's module (other papers' modules do not matter), shipped data, package versions."""
    h = hashlib.sha256()
    nb = nbformat.read(paper.notebook(root), as_version=4)
    for cell in nb.cells:
        h.update(cell.cell_type.encode())
        h.update(cell.source.encode())
    h.update(json.dumps(params.to_dict(), sort_keys=True).encode())
    library = Path(__file__).resolve().parent
    papers = library / "papers"
    _hash_tree(h, library, (".py",), skip=papers)
    own = papers / (paper.module_name.rsplit(".", 1)[-1] + ".py")
    h.update(own.read_bytes() if own.is_file() else b"")
    _hash_tree(h, root / "data")
    versions = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    h.update("\n".join(versions).encode())
    h.update(sys.version.encode())
    return h.hexdigest()


def find_cached(root: Path, slug: str, key: str) -> Path | None:
    """The newest earlier run folder of ``slug`` with status ok and this cache key."""
    runs = sorted((root / "runs" / slug).glob("*/results.json"), reverse=True)
    for path in runs:
        try:
            res = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if res.get("status") == "ok" and res.get("provenance", {}).get("cache_key") == key:
            return path.parent
    return None


def write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """Write JSON so that readers see the old file or the whole new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(_jsonable(payload), f, indent=1)
        f.write("\n")
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; results are meant to be shared
    os.replace(tmp, path)


def _umask() -> int:
    """The process umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def strip_volatile(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop timestamps and durations, number code cells 1..n, so that a rerun gives no diff.

    Execution counts stay (nbval treats a cell without one as unrun), renumbered so that a
    removed injected-parameters cell leaves no gap.
    """
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    count = 0
    for cell in nb.cells:
        for key in VOLATILE_KEYS:
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            count += 1
            cell.execution_count = count
            for out in cell.get("outputs", []):
                if "execution_count" in out:
                    out["execution_count"] = count
    return nb


def git_state(root: Path) -> tuple[str | None, bool | None]:
    """The current commit and whether the work tree has uncommitted changes (None outside git)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                    cwd=root, capture_output=True, text=True, check=True).stdout.strip())
        return commit, dirty
    except (OSError, subprocess.CalledProcessError):
        return None, None


def _failure(exc: BaseException) -> str:
    """The failing cell and exception first, in a few lines (papermill's error, or any other)."""
    cell = getattr(exc, "exec_count", None)
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        where = f"cell [{cell}]" if cell is not None else "a cell"
        return f"{where} raised {ename}: {evalue}"
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _device_of(params: BaseParams) -> str:
    """The device a run will use, as recorded in provenance."""
    from companion.runtime import resolve_device

    try:
        return str(resolve_device(params.device))
    except RuntimeError as err:
        raise ParamError(f"parameter 'device': {err}") from None


def execute(
    slug: str,
    preset: str = "quick",
    raw_params: Mapping[str, str] | None = None,
    force: bool = False,
    out: Path | None = None,
    root: Path | None = None,
    log_output: bool = False,
) -> RunOutcome:
    """Validate, then run (or answer from cache) one paper's notebook; never raises on a failing notebook."""
    import papermill as pm

    root = root or registry.project_root()
    paper, params, overrides = resolve(slug, preset, raw_params or {})
    notebook = paper.notebook(root)
    declared = notebook_parameters(notebook)
    missing = sorted(set(overrides) - declared)
    if missing:
        raise ParamError(f"parameter {missing[0]!r} is not in the parameters cell of {notebook.name}")
    device = _device_of(params)
    key = cache_key(paper, params, root)
    if not force and out is None:
        hit = find_cached(root, slug, key)
        if hit is not None:
            return RunOutcome(hit, json.loads((hit / "results.json").read_text()), cached=True)

    started = datetime.now(timezone.utc)
    folder = out or root / "runs" / slug / f"{started:%Y%m%dT%H%M%SZ}-{key[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    claims_file = folder / ".claims.json"
    claims_file.unlink(missing_ok=True)
    executed = folder / "notebook.ipynb"
    injected = {"preset": preset, **overrides}
    injected = {k: list(v) if isinstance(v, tuple) else v for k, v in injected.items()}
    status, error = "ok", None
    previous = os.environ.get(OUTPUT_ENV)
    os.environ[OUTPUT_ENV] = str(claims_file)
    t0 = time.perf_counter()
    try:
        pm.execute_notebook(
            str(notebook), str(executed), parameters=injected, kernel_name="python3",
            progress_bar=False, log_output=log_output, cwd=str(notebook.parent),
            execution_timeout=TIMEOUT_S[preset],
        )
    except Exception as exc:  # a failing notebook is a result to record, not a crash
        status, error = "failed", _failure(exc)
    finally:
        wall = time.perf_counter() - t0
        if previous is None:
            os.environ.pop(OUTPUT_ENV, None)
        else:
            os.environ[OUTPUT_ENV] = previous
    if executed.exists():
        nbformat.write(strip_volatile(nbformat.read(executed, as_version=4)), executed)
    emitted: dict[str, Any] = {"claims": [], "metrics": {}}
    if claims_file.exists():
        emitted = json.loads(claims_file.read_text())
        claims_file.unlink()
    elif status == "ok":
        status, error = "failed", "the notebook finished without emitting its claims (claims.emit)"
    from companion.runtime import versions

    commit, dirty = git_state(root)
    results = {
        "paper": slug,
        "status": status,
        "error": error,
        "params": params.to_dict(),
        "claims": emitted["claims"],
        "metrics": emitted["metrics"],
        "provenance": {
            "commit": commit,
            "dirty": dirty,
            "versions": versions(),
            "device": device,
            "started": started.isoformat(timespec="seconds"),
            "wall_seconds": round(wall, 2),
            "cache_key": key,
        },
    }
    write_json_atomic(folder / "results.json", results)
    return RunOutcome(folder, results, cached=False)


def latest(root: Path, slug: str) -> dict[str, Any] | None:
    """The newest results record of ``slug``: its last run, else the stored notebook's record."""
    runs = sorted((root / "runs" / slug).glob("*/results.json"), reverse=True)
    for path in [*runs, root / "notebooks" / f"{slug}.results.json"]:
        if path.is_file():
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                continue
    return None


def store(slug: str, force: bool = False, root: Path | None = None) -> bool:
    """Run ``slug`` at the quick preset and keep it as the stored notebook and results record."""
    root = root or registry.project_root()
    outcome = execute(slug, "quick", {}, force=force, root=root)
    print(f"{slug}: {outcome.results['status']} in {outcome.results['provenance']['wall_seconds']:.1f} s"
          + (" (cached)" if outcome.cached else ""))
    if not outcome.ok:
        print(f"  {outcome.results['error']}", file=sys.stderr)
    elif (outcome.folder / "notebook.ipynb").is_file():
        nb = nbformat.read(outcome.folder / "notebook.ipynb", as_version=4)
        nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
        nbformat.write(strip_volatile(nb), registry.get(slug).notebook(root))
    write_json_atomic(root / "notebooks" / f"{slug}.results.json", outcome.results)
    return outcome.ok
