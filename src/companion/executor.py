"""Run many notebooks at once: one Dask task per notebook, on an embedded or an existing cluster.

``companion sweep``, ``companion store`` (several papers or records) and ``companion run-all`` hand
their notebooks to :func:`run_many`. Every notebook is validated with :func:`runner.plan` before
anything is submitted (a bad parameter stops the command before any compute), then runs as one
task calling :func:`runner.execute` (or :func:`evidence.store`) on a worker:

- **where**: an embedded :class:`distributed.LocalCluster` by default (worker processes on
  127.0.0.1, one task at a time each, as many as the machine's cores allow at ``threads`` per
  task), or an existing scheduler given as ``--scheduler tcp://HOST:PORT`` or
  ``$COMPANION_SCHEDULER``. ``inline`` runs the notebooks one after another in this process,
  without Dask; a single notebook with no scheduler named runs inline too.
- **same results**: a task carries the paper, preset, parameters (the seed among them) and the
  thread count, so a point gives the same claims and metrics wherever it runs. The worker sets
  ``COMPANION_THREADS`` (and the BLAS thread variables) to that count for the notebook, so the
  paper's ``limit_threads`` and ``parallel_map`` use the task's share of the worker, not the
  whole machine.
- **nothing lost**: the worker writes each run folder (or stored record) when its notebook ends;
  a rerun of the same command answers finished points from the runner's cache. A task whose
  worker dies is rescheduled by Dask on another worker, and one that raises is retried
  (``RETRIES``); a failing notebook is recorded as failed and the others go on.
- **progress**: finished / running / failed counts on stderr (one live line on a terminal, a line
  per finished task otherwise), and the Dask dashboard's address when the scheduler has one.

Workers must see the project folder at the same path as the client (one machine, or a shared
filesystem) and have the same environment installed.
"""

from __future__ import annotations

import dataclasses
import io
import os
import sys
import threading
import time
import uuid
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from companion import registry
from companion.runner import Interrupted, signals_interrupt

SCHEDULER_ENV = "COMPANION_SCHEDULER"
INLINE = "inline"
RETRIES = 2
CONNECT_TIMEOUT_S = 10
STOP_WAIT_S = 3  # how long an interrupt waits for an existing cluster's workers to stop our notebooks
TOPIC = "companion-task"
# The thread count a task runs with: the companion's own, and the BLAS pools' (a Dask nanny sets
# the latter to 1 in its workers; an unset one would let numpy take every core of the machine).
THREAD_VARS = ("COMPANION_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# runner.execute points the kernel at its claims file through an environment variable, and the
# task sets the thread variables: one notebook at a time per worker process.
_RUN_LOCK = threading.Lock()


class SchedulerError(ValueError):
    """A scheduler address that is malformed or cannot be reached (reported before any compute)."""


@dataclass(frozen=True)
class Spec:
    """One notebook to run: ``kind`` is ``run`` (a run folder under runs/), ``store`` (a stored record)
    or ``verify`` (a stored record re-run and re-stamped where its values reproduce)."""

    slug: str
    preset: str = "quick"
    raw: Mapping[str, str] = field(default_factory=dict)
    kind: str = "run"
    force: bool = False
    label: str = ""
    progress: bool = False  # papermill's cell progress bar: only inline, never on a worker

    @property
    def name(self) -> str:
        """How progress lines and failures name this notebook."""
        return self.label or self.slug


@dataclass(frozen=True)
class Task:
    """What travels to a worker: a validated spec, the project root, the thread count, the keys."""

    spec: Spec
    root: str
    threads: int | None
    cache_key: str
    seed: int


@dataclass(frozen=True)
class Done:
    """A finished task: its results record, where it lies, and whether it came from the cache."""

    spec: Spec
    ok: bool
    record: dict[str, Any] | None
    path: str | None
    cached: bool = False
    error: str | None = None


@contextmanager
def thread_env(threads: int | None) -> Iterator[None]:
    """Set the thread variables to ``threads`` for the duration (None: leave them as they are)."""
    if threads is None:
        yield
        return
    before = {name: os.environ.get(name) for name in THREAD_VARS}
    os.environ.update({name: str(threads) for name in THREAD_VARS})
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def scheduler_address(given: str | None) -> str | None:
    """``--scheduler`` or ``$COMPANION_SCHEDULER``: an address, ``inline``, or None (embedded)."""
    address = (given or os.environ.get(SCHEDULER_ENV, "")).strip()
    if not address:
        return None
    if address != INLINE and "://" not in address:
        raise SchedulerError(f"scheduler {address!r}: expected tcp://HOST:PORT (or {INLINE!r})")
    return address


def default_threads(given: int | None) -> int:
    """Threads per notebook on a cluster: ``--threads``, else ``$COMPANION_THREADS``, else 1."""
    if given is not None:
        if given < 1:
            raise SchedulerError(f"--threads must be at least 1, got {given}")
        return given
    return int(os.environ.get("COMPANION_THREADS", "0") or 0) or 1


def prepare(spec: Spec, root: Path, threads: int | None) -> Task:
    """Validate one notebook as its worker will see it (``plan`` under the task's thread count);
    a store refuses uncommitted code here. Raises before any compute."""
    from companion.runner import git_state, plan

    with thread_env(threads):
        p = plan(spec.slug, spec.preset, spec.raw, root)
    if spec.kind in ("store", "verify"):
        from companion.evidence import UncommittedCode

        _, dirty = git_state(root, list(p.covered), p.paper.notebook(root))
        if dirty:
            raise UncommittedCode(f"{spec.slug}: the code this record would cover has uncommitted changes; "
                                  "commit them first, stored records must come from committed code")
    elif spec.kind != "run":
        raise ValueError(f"unknown task kind {spec.kind!r}")
    return Task(spec, str(root), threads, p.cache_key, p.params.seed)


def execute_task(task: Task) -> Done:
    """Run one task here (on a worker, or inline): set the thread count, run, return the record.

    A failing notebook is a result (``ok`` False); an exception (the disk, a lost project folder)
    propagates, so that Dask retries the task.
    """
    from companion import evidence
    from companion.runner import execute, read_record

    spec, root = task.spec, Path(task.root)
    if not (root / "notebooks").is_dir():
        raise FileNotFoundError(f"this worker cannot see the project folder {root}; workers need the "
                                "project at the same path as the client (a shared filesystem)")
    with _RUN_LOCK, thread_env(task.threads):
        _event("start", spec)
        if spec.kind in ("store", "verify"):
            seed = spec.raw.get("seed")
            t0 = datetime.now(timezone.utc).replace(microsecond=0)
            said = io.StringIO()
            with redirect_stdout(said):  # the client prints one line per record
                ok = evidence.store(spec.slug, spec.preset, None if seed is None else int(seed),
                                    force=spec.force or spec.kind == "verify", root=root,
                                    progress=spec.progress, verify=spec.kind == "verify",
                                    expected_key=task.cache_key)
            if not ok:  # the stored record, if any, is the old one: report the failed run instead
                return Done(spec, False, None, None, error=said.getvalue().strip())
            path = evidence.record_path(root, spec.slug, spec.preset, task.seed)
            record = read_record(path)
            cached = datetime.fromisoformat(record["provenance"]["started"]) < t0
            return Done(spec, ok, record, str(path), cached, record.get("error"))
        outcome = execute(spec.slug, spec.preset, spec.raw, force=spec.force, root=root,
                          progress=spec.progress, expected_key=task.cache_key)
        res = outcome.results
        return Done(spec, outcome.ok, res, str(outcome.folder), outcome.cached, res.get("error"))


def _event(what: str, spec: Spec) -> None:
    """Tell the client that a task started (only on a Dask worker; inline runs count themselves)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return
    worker.log_event(TOPIC, {"event": what, "label": spec.name, "worker": worker.address})


class Progress:
    """Finished / running / failed counts on stderr: one live line on a terminal, else a line per finish."""

    def __init__(self, total: int, quiet: bool, stream: Any = None) -> None:
        self.total, self.quiet = total, quiet
        self.stream = stream or sys.stderr
        self.live = not quiet and self.stream.isatty()
        self.finished = self.failed = 0
        self.running: set[str] = set()
        self.lock = threading.Lock()

    def line(self) -> str:
        waiting = self.total - self.finished - len(self.running)
        return (f"companion: {self.finished}/{self.total} finished, {len(self.running)} running, "
                f"{self.failed} failed, {max(waiting, 0)} waiting")

    def say(self, text: str) -> None:
        """A message of its own line (the live line is redrawn under it)."""
        if self.quiet:
            return
        with self.lock:
            if self.live:
                self.stream.write("\r\033[K")
            print(text, file=self.stream, flush=True)
            self._draw()

    def start(self, label: str) -> None:
        with self.lock:
            self.running.add(label)
            self._draw()

    def finish(self, label: str, ok: bool) -> None:
        with self.lock:
            self.running.discard(label)
            self.finished += 1
            self.failed += not ok
            if self.live:
                self._draw()
            elif not self.quiet:
                print(self.line(), file=self.stream, flush=True)

    def _draw(self) -> None:
        if self.live:
            self.stream.write("\r\033[K" + self.line())
            self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\r\033[K")
            self.stream.flush()


def run_many(
    specs: Sequence[Spec],
    scheduler: str | None = None,
    threads: int | None = None,
    workers: int | None = None,
    on_done: Callable[[Done], None] | None = None,
    quiet: bool = False,
    root: Path | None = None,
) -> list[Done]:
    """Validate every spec, then run them (cache first) and call ``on_done`` as each finishes.

    ``scheduler``: an address, ``inline``, or None for ``$COMPANION_SCHEDULER`` and then an
    embedded cluster (inline for a single notebook). ``threads``: per notebook on a cluster
    (default ``$COMPANION_THREADS`` or 1; inline without it, a notebook uses the whole machine).
    Returns the finished tasks in the order of ``specs``; an interrupt cancels what has not
    started, stops the notebooks under way (their runs are recorded as interrupted) and raises
    ``KeyboardInterrupt`` (finished tasks are already recorded).
    """
    from companion.runner import find_cached, read_record

    root = root or registry.project_root()
    address = scheduler_address(scheduler)
    inline = address == INLINE or (address is None and len(specs) <= 1)
    per_task = None if inline and threads is None else default_threads(threads)
    tasks = [prepare(spec, root, per_task) for spec in specs]  # every refusal before any compute

    done: dict[int, Done] = {}
    progress = Progress(len(tasks), quiet or len(tasks) == 1)  # one notebook: its own output says it all

    def finish(i: int, result: Done) -> None:
        done[i] = result
        if on_done is not None:
            on_done(result)
        progress.finish(result.spec.name, result.ok)

    todo = []
    for i, task in enumerate(tasks):
        hit = None if task.spec.force or task.spec.kind != "run" else find_cached(root, task.spec.slug, task.cache_key)
        if hit is not None:
            finish(i, Done(task.spec, True, read_record(hit / "results.json"), str(hit), cached=True))
        else:
            todo.append(i)
    try:
        with signals_interrupt():
            _run_todo(tasks, todo, inline or (address is None and len(todo) == 1), address, workers, per_task,
                      progress, finish)
    except KeyboardInterrupt:
        progress.close()
        if not quiet:
            print(f"companion: {len(done)} of {len(tasks)} finished and recorded; the same command "
                  "resumes from them", file=sys.stderr)
        raise
    progress.close()
    return [done[i] for i in range(len(tasks))]


def _run_todo(tasks: list[Task], todo: list[int], inline: bool, address: str | None, workers: int | None,
              threads: int | None, progress: Progress, finish: Callable[[int, Done], None]) -> None:
    """Run the tasks not answered from the cache: here one after another, or on a cluster."""
    if todo and inline:
        for i in todo:
            progress.start(tasks[i].spec.name)
            finish(i, execute_task(tasks[i]))
    elif todo:
        _on_cluster(tasks, todo, address, workers, threads or 1, progress, finish)


def _on_cluster(tasks: list[Task], todo: list[int], address: str | None, workers: int | None,
                threads: int, progress: Progress, finish: Callable[[int, Done], None]) -> None:
    """Submit the tasks in ``todo`` to a Dask client and collect them as they finish."""
    from distributed import as_completed

    from companion.runtime import cores  # torch: imported only when a cluster starts

    with _client(address, workers or max(1, cores() // threads), len(todo), progress) as client:
        client.subscribe_topic(TOPIC, lambda event: _started(event, progress))
        futures, index = [], {}
        for i in todo:
            key = f"companion-{tasks[i].spec.name}-{uuid.uuid4().hex[:8]}"
            task = dataclasses.replace(tasks[i], spec=dataclasses.replace(tasks[i].spec, progress=False))
            futures.append(client.submit(_worker_task, task, key=key, retries=RETRIES, pure=False))
            index[key] = i
        pending = as_completed(futures)
        try:
            while not pending.is_empty():
                batch = pending.next_batch(block=False)
                if not batch:
                    time.sleep(0.2)
                    continue
                for future in batch:
                    i = index[future.key]
                    finish(i, _collect(future, tasks[i].spec))
        except KeyboardInterrupt:
            # Cancelling does not stop a task that already runs: an existing cluster's workers are
            # told to stop our notebooks; an embedded cluster's stop theirs as they close.
            client.cancel(futures)
            if address is not None:
                _stop_remote(client, set(index))
            raise


def _worker_task(task: Task) -> Done:
    """:func:`execute_task` on a Dask worker; a notebook stopped there (the worker closes, the client
    was interrupted) comes back as a failed point, since a KeyboardInterrupt out of a task would
    shut the whole worker down."""
    try:
        return execute_task(task)
    except Interrupted as err:
        return Done(task.spec, False, None, str(err), error="interrupted")


def _stop_tasks(keys: set[str], dask_worker: Any) -> int:
    """On a worker: interrupt the notebooks of the tasks named by ``keys`` (client.run's callee)."""
    from companion.runner import stop_runs

    return stop_runs([ident for ident, key in list(dask_worker.active_threads.items()) if key in keys])


def _stop_remote(client: Any, keys: set[str]) -> None:
    """Interrupt our notebooks on an existing cluster (others' tasks run on), waiting a few seconds at most."""
    stopper = threading.Thread(target=client.run, args=(_stop_tasks, keys), kwargs={"on_error": "ignore"},
                               daemon=True)
    stopper.start()
    stopper.join(STOP_WAIT_S)


def _embedded_worker_plugin() -> Any:
    """A plugin for an embedded cluster's workers: Ctrl-C reaches them too (one process group), so
    they leave the interrupt to the client (else each prints a traceback and closes on its own), and
    a closing worker ends the notebooks it still runs (else it waits for them until its nanny kills
    it, leaving their kernels behind). Made here, so that importing this module does not import
    distributed (the class travels to the workers by value)."""
    from distributed import WorkerPlugin

    class EmbeddedWorker(WorkerPlugin):
        def setup(self, worker: Any) -> None:
            import signal

            signal.signal(signal.SIGINT, signal.SIG_IGN)

        def teardown(self, worker: Any) -> None:
            from companion.runner import stop_runs

            stop_runs()

    return EmbeddedWorker()


def _started(event: Any, progress: Progress) -> None:
    _, msg = event
    if msg.get("event") == "start":
        progress.start(msg.get("label", "?"))


def _collect(future: Any, spec: Spec) -> Done:
    """The task's result, or a failed Done naming why (an exception after retries, a lost worker)."""
    if future.status == "finished":
        return future.result()
    try:
        exc = future.exception()
        error = f"{type(exc).__name__}: {exc}"
    except BaseException as err:  # cancelled: the scheduler dropped it
        error = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
    return Done(spec, False, None, None, error=f"task failed on the cluster: {error}")


@contextmanager
def _client(address: str | None, workers: int, tasks: int, progress: Progress) -> Iterator[Any]:
    """A Dask client: connected to ``address``, or to an embedded local cluster of worker processes."""
    import logging

    from distributed import Client, LocalCluster

    if address is None:
        n = max(1, min(workers, tasks))
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=":0", memory_limit=0,
                          silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
            client.register_plugin(_embedded_worker_plugin(), name="companion-embedded-worker")
            progress.say(f"companion: embedded Dask cluster, {n} worker processes")
            _say_dashboard(client, progress)
            yield client
        return
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as err:
        raise SchedulerError(f"cannot reach the Dask scheduler at {address}: {err}") from None
    with client:
        n = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        progress.say(f"companion: Dask scheduler {address}, {n} workers"
                     + ("" if n else " (tasks wait until a worker joins)"))
        _say_dashboard(client, progress)
        yield client


def _say_dashboard(client: Any, progress: Progress) -> None:
    """Print the dashboard's address when it answers (the scheduler's web server runs without
    bokeh too, but then serves no dashboard pages)."""
    import urllib.request

    try:
        if "dashboard" not in client.scheduler_info(n_workers=0).get("services", {}):
            return
        link = client.dashboard_link
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the cluster's own network
        with opener.open(link, timeout=2) as reply:
            if reply.status == 200:
                progress.say(f"companion: Dask dashboard at {link}")
    except Exception:  # the dashboard is a convenience: never fail a run over it
        pass
