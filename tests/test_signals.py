"""Interrupts end a run within seconds wherever they land: kernel start-up, a process pool, a Dask task.

A run is interrupted the way a terminal does it: SIGINT (or SIGTERM) to the command's whole process
group. What must hold: the command exits 130 within 10 s, its run folders are recorded as
``interrupted`` with nothing half-written beside them, and no process it started lives on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from companion import registry, runtime

ROOT = registry.project_root()
# The paper whose quick run is the cheapest (about 6 s on 2 cores); its GMM variant maps its seeds
# over a process pool (the quick KDE one runs them inline).
CHEAP = "adversarial-curation"
POOLED = ("-p", "density_model=gmm")


def _alive(procs: list[psutil.Process]) -> list[int]:
    """The pids among ``procs`` that still run (zombies count as gone: they no longer compute)."""
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _children(proc: psutil.Process, marker: str) -> list[psutil.Process]:
    """The child processes of ``proc`` whose command line holds ``marker``."""
    out = []
    for child in proc.children():
        try:
            if marker in " ".join(child.cmdline()):
                out.append(child)
        except psutil.NoSuchProcess:  # it ended while we looked
            pass
    return out


def _pool_workers() -> list[psutil.Process]:
    return _children(psutil.Process(), "multiprocessing.spawn")


def test_an_interrupted_pool_ends_its_workers_instead_of_waiting_for_them():
    workers: list[psutil.Process] = []

    def interrupt_soon() -> None:  # the main thread is then waiting on the two 30 s jobs
        workers.extend(_pool_workers())
        # To the main thread itself, so that the test does not depend on which thread the kernel picks
        # for a process-directed signal: in another thread it only sets Python's flag, which a main
        # thread blocked in its wait sees when a 30 s job ends.
        threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)).start()

    # A test suite started in the background by a non-interactive shell (`make test &`, `nohup ... &`)
    # inherits SIGINT ignored, and Python then leaves it ignored instead of installing its handler: what
    # is tested here is what an interrupt does, so install the handler a foreground Python has.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            runtime.parallel_map(time.sleep, [(0,), (30,), (30,)], workers=2, on_done=interrupt_soon)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - t0 < 15  # the spawned workers' start-up, then no wait for the jobs
    assert len(workers) == 2 and _alive(workers) == []


def _run(tmp_path: Path, *params: str) -> subprocess.Popen:
    """``companion run CHEAP --force`` into ``tmp_path/run``, in a process group of its own."""
    cmd = [sys.executable, "-m", "companion", "run", CHEAP, *params, "--force", "--quiet",
           "--out", str(tmp_path / "run")]
    return subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for(predicate, proc: subprocess.Popen, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[0][-2000:]}"
        time.sleep(0.05)
    raise TimeoutError(f"gave up waiting for {what} after {timeout} s")


@pytest.mark.slow
@pytest.mark.parametrize("phase, signum", [("kernel start-up", signal.SIGINT), ("kernel start-up", signal.SIGTERM),
                                           ("process pool", signal.SIGTERM)])
def test_an_interrupted_run_exits_130_within_10_s_recorded_and_leaves_no_process(tmp_path, phase, signum):
    proc = _run(tmp_path, *(POOLED if phase == "process pool" else ()))
    me = psutil.Process(proc.pid)
    try:
        kernel = _wait_for(lambda: _children(me, "ipykernel"), proc, 120, "the kernel started")[0]
        if phase == "process pool":
            _wait_for(lambda: _children(kernel, "multiprocessing.spawn"), proc, 120, "the notebook's pool started")
        tree = [kernel, *kernel.children(recursive=True)]
        os.killpg(proc.pid, signum)
        t0 = time.monotonic()
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGUSR1)  # the command prints every thread's stack before it is killed
            time.sleep(1)
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"still running 10 s after {signum.name}; its threads:\n{proc.communicate()[0][-6000:]}")
        assert time.monotonic() - t0 < 10
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out[-2000:]
    assert "interrupted" in out
    record = json.loads((tmp_path / "run" / "results.json").read_text())
    assert record["status"] == "interrupted" and record["claims"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no hidden partial folder beside it
    for path in (tmp_path / "run").iterdir():
        assert not path.name.startswith("."), path
        if path.suffix in (".json", ".ipynb"):
            json.loads(path.read_text())  # whole, not cut by the interrupt
    deadline = time.monotonic() + 5
    while _alive(tree) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(tree) == []


DRIVER = """
import sys, types
sys.path.insert(0, {tests!r})
from pathlib import Path

import dask

from conftest import TOY_SLUG, ToyParams
from companion import cli, registry

module = types.ModuleType("companion.papers.toy_paper")
module.Params = ToyParams
sys.modules[module.__name__] = module
registry.PAPERS = {{TOY_SLUG: registry.Paper(TOY_SLUG, "Toy", "A. B.", "https://x", "toy")}}
registry.project_root = lambda: Path({root!r})
if __name__ == "__main__":
    with dask.config.set({{"distributed.worker.preload": [{preload!r}]}}):
        sys.exit(cli.main(["sweep", TOY_SLUG, "-p", "sleep=60,61", "--seeds", "2", "--workers", "2",
                           "--out", {out!r}, "--quiet"]))
"""
PRELOAD = """
import sys, types
sys.path.insert(0, {tests!r})
from conftest import TOY_SLUG, ToyParams
from companion import registry

module = types.ModuleType("companion.papers.toy_paper")
module.Params = ToyParams
sys.modules[module.__name__] = module
registry.PAPERS[TOY_SLUG] = registry.Paper(TOY_SLUG, "Toy", "A. B.", "https://x", "toy")
"""


@pytest.mark.slow
def test_an_interrupted_sweep_on_the_embedded_cluster_exits_130_and_records_its_points(toy_project, tmp_path):
    """Both points' notebooks run as Dask tasks on worker processes when the whole group gets SIGINT."""
    tests = str(Path(__file__).resolve().parent)
    (tmp_path / "preload.py").write_text(PRELOAD.format(tests=tests))
    (tmp_path / "driver.py").write_text(DRIVER.format(tests=tests, root=str(toy_project),
                                                      preload=str(tmp_path / "preload.py"),
                                                      out=str(tmp_path / "sweep")))
    env = {k: v for k, v in os.environ.items() if k not in ("COMPANION_SCHEDULER", "COMPANION_THREADS")}
    proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py")], cwd=tmp_path, env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    me = psutil.Process(proc.pid)

    def kernels() -> list[psutil.Process]:
        return [k for worker in me.children() for k in _children(worker, "ipykernel")]

    try:
        _wait_for(lambda: len(kernels()) == 2, proc, 180, "both points' kernels started")
        tree = me.children(recursive=True)
        os.killpg(proc.pid, signal.SIGINT)
        t0 = time.monotonic()
        out, _ = proc.communicate(timeout=10)
        assert time.monotonic() - t0 < 10
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    runs = toy_project / "runs" / "toy-paper"
    records = [json.loads(p.read_text()) for p in runs.glob("*/results.json")]
    assert [r["status"] for r in records] == ["interrupted", "interrupted"]
    assert not [p for p in runs.iterdir() if p.name.startswith(".")]
    deadline = time.monotonic() + 5
    while _alive(tree) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(tree) == []
