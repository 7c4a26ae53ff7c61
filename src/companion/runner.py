"""Execute a paper's notebook with papermill into ``runs/<slug>/<run-id>/`` and record results.

The run folder holds ``notebook.ipynb`` (executed, volatile metadata stripped) and
``results.json`` (the contract in DESIGN.md). A run executes in a hidden temporary folder beside
its final place and is renamed into place when it ends, whether it succeeded, failed or was
interrupted (SIGINT/SIGTERM: status ``interrupted``, :class:`Interrupted` raised afterwards), so
no reader ever sees half a run. The cache key of :mod:`companion.keys` answers an identical
repeated run from the earlier folder.
"""

from __future__ import annotations

import ast
import atexit
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import nbformat

from companion import kernelspec, keys, numerics, registry
from companion.claims import OUTPUT_ENV, _jsonable
from companion.environment import lock_hash
from companion.params import BaseParams, ParamError

TIMEOUT_S = {"quick": 900, "full": 3600, "paper": 24 * 3600}
# ipykernel warns on every start that its local TCP sockets are unencrypted; the kernel only
# listens on 127.0.0.1 for this one process, so the warning is noise before every verdict table.
KERNEL_ARGS = ["--IPKernelApp.log_level=ERROR"]
# tqdm.auto warns inside every kernel without ipywidgets ("IProgress not found", with the venv's
# absolute path) when any library imports it; the stored pages show plain text progress instead.
KERNEL_WARNINGS = "ignore:IProgress not found"
# How long a stopped kernel has between SIGTERM and SIGKILL; an interrupted run waits twice that
# for papermill to notice and save the notebook.
STOP_GRACE_S = 2.0
# A kernel can die while starting, before it runs any cell: two processes starting kernels at
# once (the workers of a Dask cluster) can be handed the same free TCP port, and the loser exits
# (jupyter_client's port cache is per process). Nothing ran yet, so starting again is safe.
KERNEL_START_TRIES = 3
KERNEL_DIED_AT_START = "Kernel died before replying to kernel_info"


class Interrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM; its folder is recorded with status ``interrupted``."""


class RecordError(ValueError):
    """A results record that cannot be read (corrupt JSON, missing fields)."""


class PlanMismatch(RuntimeError):
    """A worker whose plan of a run differs from the client's (it imported older code)."""
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
    """Names assigned in the notebook's cell tagged ``parameters``; the cell must hold only the
    defaults (``preset = "quick"``, every other name ``None``), because the runner records the values
    it injects: a value edited into the cell would run without being recorded."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            try:
                body = ast.parse(cell.source).body
            except SyntaxError as err:
                raise ParamError(f"{path.name}: its parameters cell is not valid Python ({err.msg})") from None
            names = set()
            for node in body:
                if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name)):
                    raise ParamError(f"{path.name}: its parameters cell may only assign names, one per line")
                name, value = node.targets[0].id, node.value
                default = "quick" if name == "preset" else None
                if not (isinstance(value, ast.Constant) and value.value == default):
                    slug = path.stem
                    raise ParamError(
                        f"{path.name}: its parameters cell sets {name} = {ast.unparse(value)}, but a page's cell "
                        f"holds only defaults; pass -p {name}=VALUE instead, or edit a copy (companion open {slug})")
                names.add(name)
            return names
    raise ParamError(f"{path.name} has no cell tagged 'parameters'")


def run_records(root: Path, slug: str) -> list[Path]:
    """The results files of ``slug``'s run folders, newest first (hidden partial folders excluded)."""
    return sorted((root / "runs" / slug).glob("[!.]*/results.json"), reverse=True)


def find_cached(root: Path, slug: str, key: str) -> Path | None:
    """The newest earlier run folder of ``slug`` with status ok and this cache key."""
    for path in run_records(root, slug):
        try:
            res = read_record(path)
        except RecordError:
            continue
        if res["status"] == "ok" and res["provenance"].get("cache_key") == key:
            return path.parent
    return None


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write a file so that readers see the old file or the whole new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, payload: Mapping[str, Any]) -> None:
    """Write JSON atomically (see :func:`write_atomic`); NaN becomes null."""
    write_atomic(path, json.dumps(_jsonable(payload), indent=1) + "\n")


def write_notebook_atomic(nb: nbformat.NotebookNode, path: Path) -> None:
    """Write a notebook atomically."""
    write_atomic(path, nbformat.writes(nb) + "\n")


def read_record(path: Path) -> dict[str, Any]:
    """A results record; a corrupt or incomplete one raises :class:`RecordError` naming the file."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecordError(f"unreadable results record {path}: {err}") from None
    if not isinstance(record, dict) or not {"paper", "status", "claims", "params", "provenance"} <= set(record):
        raise RecordError(f"unreadable results record {path}: not a results record")
    return record


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
    # Opened in Jupyter, a page asks for the kernel that computes under the numerics profile.
    nb.metadata["kernelspec"] = dict(kernelspec.METADATA)
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


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def head_commit(root: Path) -> str | None:
    """The commit checked out at ``root`` (None outside git)."""
    try:
        return _git(root, "rev-parse", "HEAD").strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def git_state(root: Path, covered: list[Path], notebook: Path) -> tuple[str | None, bool | None]:
    """The current commit, and whether the source a code key covers differs from it.

    ``covered`` are the modules; of the notebook only the code cells count (storing a run
    rewrites its outputs, which is not a change of code). None, None outside git.
    """
    try:
        commit = _git(root, "rev-parse", "HEAD").strip()
        files = [str(p.relative_to(root)) for p in covered if p.is_relative_to(root)]
        changed = bool(_git(root, "status", "--porcelain", "--", *files).strip()) if files else False
        rel = str(notebook.relative_to(root))
        try:
            committed = nbformat.reads(_git(root, "show", f"HEAD:{rel}"), as_version=4)
            old = keys.result_cells(committed)
        except subprocess.CalledProcessError:
            old = None
        return commit, changed or old != keys.code_cells(notebook)
    except (OSError, ValueError, subprocess.CalledProcessError):
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
    from companion.resources import device_name

    try:
        return device_name(params.device)
    except RuntimeError as err:
        raise ParamError(f"parameter 'device': {err}") from None


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """Raise ``KeyboardInterrupt`` on SIGINT or SIGTERM for the duration, in the main thread.

    Python's default SIGINT handler would do for SIGINT, but SIGTERM's default ends the process
    without a record. Only the main thread receives signals: elsewhere (a Dask worker thread) this
    installs nothing.
    """
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class _Kernels:
    """The kernels of one run, so that an interrupt ends them, and whatever they started, at once."""

    def __init__(self) -> None:
        self.managers: list[Any] = []
        self.stopped = False

    def manager_class(self) -> type:
        """A kernel manager class that reports each kernel it starts here (and starts none once stopped)."""
        from jupyter_client.manager import AsyncKernelManager

        kernels = self

        class RunKernelManager(AsyncKernelManager):
            async def start_kernel(self, **kw: Any) -> None:
                if kernels.stopped:
                    raise RuntimeError("the run was interrupted before its kernel started")
                await super().start_kernel(**kw)
                kernels.managers.append(self)
                if kernels.stopped:  # the interrupt landed while this kernel was being launched
                    kernels.signal(signal.SIGKILL)

        return RunKernelManager

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process group of every kernel still running: the kernel and its pools."""
        for km in self.managers:
            provisioner = km.provisioner
            process = getattr(provisioner, "process", None)
            if process is None or process.poll() is not None:
                continue
            try:
                os.killpg(getattr(provisioner, "pgid", None) or process.pid, signum)
            except ProcessLookupError:
                pass

    def interrupt(self) -> None:
        """End the run's kernels from any thread, without waiting: SIGTERM now, SIGKILL after a grace."""
        self.stopped = True
        self.signal(signal.SIGTERM)
        timer = threading.Timer(STOP_GRACE_S, self.signal, (signal.SIGKILL,))
        timer.daemon = True
        timer.start()


# The runs under way in this process, by the thread that runs each, for stop_runs.
_RUNS: dict[int, _Kernels] = {}


def stop_runs(threads: Iterable[int] | None = None) -> int:
    """Interrupt the runs executed by ``threads`` (idents; None: every run in this process), from
    any thread and without waiting; each is then recorded as interrupted. Returns how many."""
    chosen = [k for ident, k in list(_RUNS.items()) if threads is None or ident in set(threads)]
    for kernels in chosen:
        kernels.interrupt()
    return len(chosen)


def _publish(tmp: Path, final: Path) -> None:
    """Move a finished run folder into place: a rename, or file by file into an existing folder."""
    if not final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, final)
        return
    for item in list(tmp.iterdir()):  # listed first: renaming entries out while scanning can skip some
        target = final / item.name
        if target.is_dir():
            shutil.rmtree(target)
        elif item.is_dir() and target.exists():
            target.unlink()
        os.replace(item, target)
    tmp.rmdir()


def new_run_id(started: datetime, key: str) -> str:
    """A run id unique per process and call: UTC time, cache-key prefix, a random suffix."""
    return f"{started:%Y%m%dT%H%M%SZ}-{key[:8]}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Plan:
    """A validated run, before any compute: the paper, its parameters and both keys."""

    paper: registry.Paper
    params: BaseParams
    overrides: dict[str, Any]
    device: str
    threads: int
    code_key: str
    verdict_key: str
    cache_key: str
    covered: tuple[Path, ...]
    modules: dict[str, Path]
    paths: dict[str, dict[str, str]]
    versions: dict[str, str]


def plan(slug: str, preset: str = "quick", raw_params: Mapping[str, str] | None = None,
         root: Path | None = None) -> Plan:
    """Validate everything and compute the keys; raises :class:`ParamError` before any compute."""
    from companion.resources import thread_budget

    root = root or registry.project_root()
    paper, params, overrides = resolve(slug, preset, raw_params or {})
    notebook = paper.notebook(root)
    declared = notebook_parameters(notebook)
    missing = sorted(set(overrides) - declared)
    if missing:
        raise ParamError(f"parameter {missing[0]!r} is not in the parameters cell of {notebook.name}")
    device, threads = _device_of(params), thread_budget()
    values = keys.params_for_key(params)
    k = keys.keys_of(paper.module_name, notebook, values)
    fingerprints = keys.external_paths(params.to_dict())
    versions = keys.package_versions(k.third)
    cache = keys.cache_key(k.code, device, threads, fingerprints, versions, numerics.profile_for(os.environ))
    paths = {name: {"path": values[name], "sha256": fp} for name, fp in fingerprints.items()}
    return Plan(paper, params, overrides, device, threads, k.code, k.verdict, cache,
                tuple(k.modules.values()), k.modules, paths, versions)


def execute(
    slug: str,
    preset: str = "quick",
    raw_params: Mapping[str, str] | None = None,
    force: bool = False,
    out: Path | None = None,
    root: Path | None = None,
    log_output: bool = False,
    progress: bool = False,
    expected_key: str | None = None,
) -> RunOutcome:
    """Validate, then run (or answer from cache) one paper's notebook; never raises on a failing
    notebook. An interrupted run is recorded, then :class:`Interrupted` is raised. With
    ``expected_key`` (the client's plan, on a Dask worker) a different plan here is refused."""
    root = root or registry.project_root()
    p = plan(slug, preset, raw_params, root)
    if expected_key is not None and p.cache_key != expected_key:
        raise PlanMismatch(f"{slug}: this worker plans another run than the client (cache key "
                           f"{p.cache_key[:12]} here, {expected_key[:12]} there): its code, parameters or "
                           "environment differ; restart the worker processes after changing the code")
    if not force and out is None:
        hit = find_cached(root, slug, p.cache_key)
        if hit is not None:
            return RunOutcome(hit, read_record(hit / "results.json"), cached=True)
    started = datetime.now(timezone.utc)
    final = out or root / "runs" / slug / new_run_id(started, p.cache_key)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.partial-"))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700; run folders are meant to be shared
    try:
        status, error, emitted, wall, cpu = _execute_in(p, tmp, root, log_output, progress)
        ran, ran_keys, extra_modules = what_ran(p, emitted.get("kernel") or {}, root)
        if status == "ok" and ran != p.params.to_dict():
            moved = sorted(k for k in set(ran) | set(p.params.to_dict()) if ran.get(k) != p.params.to_dict().get(k))
            status, error = "failed", f"the kernel ran other parameters than the runner planned: {', '.join(moved)}"
        commit, dirty = git_state(root, list(p.covered), p.paper.notebook(root))
        results = {
            "paper": slug,
            "status": status,
            "error": error,
            # path parameters as the project spells them: a record reads the same on every machine
            "params": p.params.key_dict() if ran == p.params.to_dict() else ran,
            "claims": emitted["claims"],
            "metrics": emitted["metrics"],
            "provenance": {
                "commit": commit,
                "dirty": dirty,
                "versions": p.versions,
                "device": p.device,
                "threads": p.threads,
                "paths": p.paths,
                "started": started.isoformat(timespec="seconds"),
                "wall_seconds": round(wall, 2),
                "cpu_seconds": round(cpu, 2),
                "load_average": round(os.getloadavg()[0], 2),
                "cache_key": p.cache_key,
                "code_key": ran_keys.code,
                "verdict_key": ran_keys.verdict,
                # what a later key check must widen by too: the kernel imported them, the source names none
                "extra_modules": extra_modules,
                "lock": lock_hash(root),
                "numerics": numerics.active(),
                "cpu": numerics.cpu_model(),
            },
        }
        write_json_atomic(tmp / "results.json", results)
        _publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if status == "interrupted":
        raise Interrupted(str(final))
    return RunOutcome(final, results, cached=False)


def what_ran(p: Plan, kernel: Mapping[str, Any], root: Path) -> tuple[dict[str, Any], keys.Keys, list[str]]:
    """The parameters the kernel resolved (the plan's when it reported none), the keys over what it
    imported (the plan's, widened by any ``companion`` module the source never named) and those modules."""
    ran = kernel.get("params") or p.params.to_dict()
    missed = keys.uncovered(kernel.get("modules", []), p.modules)
    if not missed:
        return ran, keys.Keys(p.code_key, p.verdict_key, p.modules, set()), []
    return ran, keys.keys_of(p.paper.module_name, p.paper.notebook(root),
                             keys.params_for_key(p.params), extra=missed), missed


def _execute_in(p: Plan, folder: Path, root: Path, log_output: bool,
                progress: bool) -> tuple[str, str | None, dict[str, Any], float, float]:
    """Run the notebook into ``folder``: status, error, the emitted claims and metrics, wall and
    CPU time (the kernel and its subprocesses: exact when one notebook runs per process, which
    the embedded cluster and ``inline`` guarantee)."""
    import papermill as pm
    from jupyter_core.utils import ensure_event_loop

    notebook = p.paper.notebook(root)
    claims_file = folder / ".claims.json"
    executed = folder / "notebook.ipynb"
    injected = {"preset": p.params.preset, **p.overrides}
    injected = {k: list(v) if isinstance(v, tuple) else v for k, v in injected.items()}
    status, error = "ok", None
    saved = {name: os.environ.get(name) for name in (OUTPUT_ENV, "PYTHONWARNINGS")}
    os.environ[OUTPUT_ENV] = str(claims_file)
    numerics.apply()  # the kernel inherits it; set before it loads any numerical library
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, (saved["PYTHONWARNINGS"], KERNEL_WARNINGS)))
    t0 = time.perf_counter()
    cpu0 = _children_cpu()
    kernels = _Kernels()
    raised: list[Exception] = []

    def execute_notebook() -> None:
        try:
            for attempt in range(1, KERNEL_START_TRIES + 1):
                try:
                    pm.execute_notebook(
                        str(notebook), str(executed), parameters=injected, kernel_name="python3",
                        progress_bar=progress, log_output=log_output, cwd=str(notebook.parent),
                        execution_timeout=TIMEOUT_S[p.params.preset], extra_arguments=KERNEL_ARGS,
                        kernel_manager_class=kernels.manager_class(),
                    )
                    return
                except RuntimeError as exc:
                    if (KERNEL_DIED_AT_START not in str(exc) or kernels.stopped
                            or attempt == KERNEL_START_TRIES):
                        raise
        except Exception as exc:  # a failing notebook is a result to record, not a crash
            raised.append(exc)
        finally:
            ensure_event_loop().close()  # nbclient made one for this thread

    # papermill runs in a thread of its own, so that this thread keeps the signal handlers and an
    # interrupt never lands inside nbclient's event loop: nbclient swaps in handlers of its own
    # while a kernel runs (a graceful shutdown of several seconds, a failure and not an interrupt
    # in the record), and an exception raised inside that loop leaves the kernel running.
    thread = threading.Thread(target=execute_notebook, name=f"papermill {p.paper.slug}", daemon=True)
    _RUNS[threading.get_ident()] = kernels
    atexit.register(kernels.signal, signal.SIGKILL)  # a process that exits mid-run leaves no kernel behind
    try:
        with signals_interrupt():
            try:
                thread.start()
                thread.join()
            except KeyboardInterrupt:
                kernels.interrupt()
                try:
                    thread.join(2 * STOP_GRACE_S)  # nbclient sees the dead kernel within a second, then saves
                except KeyboardInterrupt:
                    pass  # a second interrupt: wait no longer
                # the grace timer is a daemon thread that dies with this process: a kernel that outlived
                # SIGTERM would outlive the run too
                kernels.signal(signal.SIGKILL)
        if kernels.stopped:
            status, error = "interrupted", "interrupted (SIGINT or SIGTERM) before the notebook ended"
        elif raised:
            status, error = "failed", _failure(raised[0])
    finally:
        atexit.unregister(kernels.signal)
        _RUNS.pop(threading.get_ident(), None)
        wall = time.perf_counter() - t0
        cpu = _children_cpu() - cpu0
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    if executed.exists():
        try:
            write_notebook_atomic(strip_volatile(nbformat.read(executed, as_version=4)), executed)
        except (ValueError, nbformat.ValidationError):
            executed.unlink()  # papermill's last write was cut short; the record says what happened
    emitted: dict[str, Any] = {"claims": [], "metrics": {}}
    if claims_file.exists() and status == "ok":
        emitted = json.loads(claims_file.read_text())
    elif status == "ok":
        status, error = "failed", "the notebook finished without emitting its claims (claims.emit)"
    claims_file.unlink(missing_ok=True)
    return status, error, emitted, wall, cpu


def _children_cpu() -> float:
    """User plus system CPU seconds of this process's reaped children (the kernels)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def last_run(root: Path, slug: str) -> dict[str, Any] | None:
    """The newest readable run record of ``slug`` under ``runs/`` (None when there is none)."""
    for path in run_records(root, slug):
        try:
            return read_record(path)
        except RecordError:
            continue
    return None
