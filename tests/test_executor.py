"""Many notebooks as Dask tasks (companion.executor): a real scheduler and two real workers.

The cluster tests start ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1 (the
scheduler picks a free port and writes it to a scheduler file) and stop them at the end. Worker
processes do not see the ``toy_project`` monkeypatches, so each worker registers the same toy
paper through a Dask preload script; the run's project root travels with each task.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from companion import cli, executor, runtime

TESTS = Path(__file__).resolve().parent
DASK = Path(sys.executable).with_name("dask")
PRELOAD = f"""
import sys, types
sys.path.insert(0, {str(TESTS)!r})
from conftest import TOY_SLUG, ToyParams
from companion import registry

for slug in (TOY_SLUG, "toy-two"):
    module = types.ModuleType("companion.papers." + slug.replace("-", "_"))
    module.Params = ToyParams
    sys.modules[module.__name__] = module
    registry.PAPERS[slug] = registry.Paper(slug, "Toy", "A. B.", "https://x", "toy")
"""


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout} s")
        time.sleep(0.2)


class Cluster:
    """``dask scheduler`` and ``dask worker`` subprocesses, each in its own process group."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.preload = folder / "toy_preload.py"
        self.preload.write_text(PRELOAD)
        self.file = folder / "scheduler.json"
        self.env = {k: v for k, v in os.environ.items() if k != "COMPANION_THREADS"}  # tasks set it
        self.workers: list[subprocess.Popen] = []
        self.scheduler = self._spawn("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                     "--scheduler-file", str(self.file))
        try:
            _wait(lambda: self.file.is_file() and self.file.stat().st_size > 0, 60, "the scheduler file")
            self.address = json.loads(self.file.read_text())["address"]
        except BaseException:
            self.stop()
            raise

    def _spawn(self, *args: str) -> subprocess.Popen:
        with open(self.folder / f"{args[0]}-{time.monotonic_ns()}.log", "w") as log:  # the child keeps its copy
            return subprocess.Popen([str(DASK), *args], stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                    cwd=self.folder, start_new_session=True)

    def add_worker(self) -> subprocess.Popen:
        worker = self._spawn("worker", "--scheduler-file", str(self.file), "--host", "127.0.0.1",
                             "--nthreads", "1", "--no-nanny", "--no-dashboard", "--preload", str(self.preload),
                             "--local-directory", str(self.folder / "scratch"), "--death-timeout", "60")
        self.workers.append(worker)
        return worker

    def client(self):
        from distributed import Client

        return Client(self.address, timeout=30)

    def wait_for_workers(self, n: int) -> None:
        with self.client() as client:
            client.wait_for_workers(n, timeout=90)

    @staticmethod
    def send(proc: subprocess.Popen, sig: int) -> None:
        """Signal the process group of one of our subprocesses (gone already: nothing to do)."""
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self, proc: subprocess.Popen) -> None:
        self.send(proc, signal.SIGKILL)
        proc.wait(timeout=20)

    def stop(self) -> None:
        """SIGTERM to every process at once, SIGKILL to any still there after 5 s."""
        procs = [p for p in [*self.workers, self.scheduler] if p.poll() is None]
        for proc in procs:
            self.send(proc, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(proc)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler and two workers for this module's tests (the kill test runs last)."""
    c = Cluster(tmp_path_factory.mktemp("dask"))
    try:
        c.add_worker()
        c.add_worker()
        c.wait_for_workers(2)
        yield c
    finally:
        c.stop()


def _values(path: Path) -> list[dict[str, str]]:
    """sweep.csv without the column naming each run's folder."""
    with open(path) as f:
        return [{k: v for k, v in row.items() if k != "run"} for row in csv.DictReader(f)]


def _sweep(out: Path, *extra: str) -> int:
    return cli.main(["sweep", "toy-paper", "-p", "level=0.2,0.9", "--seeds", "2", "--out", str(out),
                     "--quiet", *extra])


# ---- fast: addresses, thread budget, refusals before compute ---------------------------------

def test_scheduler_address_from_flag_or_environment(monkeypatch):
    monkeypatch.delenv(executor.SCHEDULER_ENV, raising=False)
    assert executor.scheduler_address(None) is None
    assert executor.scheduler_address("tcp://127.0.0.1:8786") == "tcp://127.0.0.1:8786"
    monkeypatch.setenv(executor.SCHEDULER_ENV, "inline")
    assert executor.scheduler_address(None) == "inline"
    with pytest.raises(executor.SchedulerError, match="tcp://HOST:PORT"):
        executor.scheduler_address("localhost:8786")


def test_thread_env_sets_and_restores_the_budget(monkeypatch):
    monkeypatch.delenv("COMPANION_THREADS", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    with executor.thread_env(1):
        assert runtime.thread_budget() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
    assert "COMPANION_THREADS" not in os.environ and os.environ["OMP_NUM_THREADS"] == "7"


def test_parallel_map_on_a_one_thread_worker_starts_no_pool(monkeypatch):
    monkeypatch.setenv("COMPANION_THREADS", "1")
    assert runtime.parallel_map(os.getpid, [(), (), ()]) == [os.getpid()] * 3


def test_progress_counts_finished_running_and_failed():
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    live, log = Terminal(), io.StringIO()
    for stream in (live, log):
        progress = executor.Progress(3, quiet=False, stream=stream)
        progress.start("a")
        progress.start("b")
        progress.finish("a", ok=True)
        progress.finish("b", ok=False)
        progress.close()
    assert "1/3 finished, 1 running, 0 failed, 1 waiting" in live.getvalue() and "\r" in live.getvalue()
    assert log.getvalue().splitlines() == ["companion: 1/3 finished, 1 running, 0 failed, 1 waiting",
                                           "companion: 2/3 finished, 0 running, 1 failed, 1 waiting"]


@pytest.mark.parametrize("argv, words", [
    (["sweep", "toy-paper", "-p", "level=0.2,2.0", "--scheduler", "tcp://127.0.0.1:9"], ["'level'", "2.0"]),
    (["sweep", "toy-paper", "-p", "level=0.2,0.9", "--scheduler", "somewhere"], ["tcp://HOST:PORT"]),
    (["sweep", "toy-paper", "-p", "level=0.2,0.9", "--scheduler", "tcp://127.0.0.1:9"], ["cannot reach"]),
    (["sweep", "toy-paper", "-p", "level=0.2,0.9", "--threads", "0"], ["--threads"]),
    (["run-all", "-p", "nope=1"], ["'nope'"]),
    (["store", "toy-paper", "--seed", "1,x"], ["--seed"]),
])
def test_cluster_commands_refuse_bad_input_before_compute(toy_project, monkeypatch, capsys, argv, words):
    monkeypatch.setattr(executor, "CONNECT_TIMEOUT_S", 1)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("companion: error:") and all(w in err[-1] for w in words)
    assert not (toy_project / "runs").exists()


# ---- a real scheduler and two real workers ---------------------------------------------------

@pytest.mark.slow
def test_two_point_sweep_on_the_cluster_equals_the_local_sweep(toy_project, cluster, capsys):
    """The same sweep on the scheduler's workers and in this process (the embedded cluster: run-all)."""
    assert _sweep(toy_project / "on-cluster", "--scheduler", cluster.address) == 0
    assert _sweep(toy_project / "local", "--scheduler", "inline", "--threads", "1", "--force") == 0
    on_cluster, local = _values(toy_project / "on-cluster" / "sweep.csv"), _values(toy_project / "local" / "sweep.csv")
    assert on_cluster == local and [r["level"] for r in local] == ["0.2", "0.9"]
    assert (toy_project / "on-cluster" / "sweep.png").stat().st_size > 1000
    records = [json.loads(p.read_text()) for p in (toy_project / "runs" / "toy-paper").glob("*/results.json")]
    assert len(records) == 4 and all(r["status"] == "ok" for r in records)
    assert {r["provenance"]["threads"] for r in records} == {1}  # the task's budget, set on the worker


@pytest.mark.slow
def test_interrupted_sweep_resumes_from_the_cache(toy_project, cluster, monkeypatch, capsys):
    from companion import sweep as sweep_module

    out, real_write = toy_project / "sweep", sweep_module.write_atomic

    def write_then_interrupt(path, data):  # Ctrl-C right after the first finished point is recorded
        real_write(path, data)
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "write_atomic", write_then_interrupt)
    assert _sweep(out, "--scheduler", cluster.address) == 130
    first = _values(out / "sweep.csv")
    assert len({r["level"] for r in first}) == 1
    done_level = first[0]["level"]
    with open(out / "sweep.csv") as f:
        folder = next(csv.DictReader(f))["run"]
    monkeypatch.setattr(sweep_module, "write_atomic", real_write)
    capsys.readouterr()

    assert _sweep(out, "--scheduler", cluster.address) == 0
    assert f"level={done_level}: ok (from cache) ({folder})" in capsys.readouterr().out
    with open(out / "sweep.csv") as f:
        rows = {r["level"]: r["run"] for r in csv.DictReader(f)}
    assert rows[done_level] == folder and set(rows) == {"0.2", "0.9"}
    key = json.loads((Path(folder) / "results.json").read_text())["provenance"]["cache_key"]
    same = [p for p in (toy_project / "runs" / "toy-paper").glob("*/results.json")
            if json.loads(p.read_text())["provenance"]["cache_key"] == key]
    assert len(same) == 1  # the finished point was not recomputed


@pytest.mark.slow
def test_store_of_several_records_on_the_cluster(toy_project, cluster, capsys):
    assert cli.main(["store", "toy-paper", "--seed", "0,5", "--scheduler", cluster.address, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "toy-paper quick seed 0: ok" in out and "toy-paper quick seed 5: ok" in out
    for seed in (0, 5):
        record = json.loads((toy_project / "data" / "results" / "toy-paper" / f"quick-seed{seed}.json").read_text())
        assert record["status"] == "ok" and record["params"]["seed"] == seed
    stored = json.loads((toy_project / "notebooks" / "toy-paper.ipynb").read_text())
    assert any("HOLDS" in str(cell.get("outputs")) for cell in stored["cells"])  # the page's run, seed 0


@pytest.mark.slow
def test_a_failing_point_is_recorded_and_the_others_complete(toy_project, cluster, capsys):
    out = toy_project / "failing"
    assert cli.main(["sweep", "toy-paper", "-p", "fail=false,true", "--out", str(out), "--quiet",
                     "--scheduler", cluster.address]) == 1
    captured = capsys.readouterr()
    assert "failed: fail=true: cell" in captured.err and "boom from the toy paper" in captured.err
    assert {r["fail"] for r in _values(out / "sweep.csv")} == {"false"}
    statuses = sorted(json.loads(p.read_text())["status"] for p in (toy_project / "runs" / "toy-paper").glob("*/results.json"))
    assert statuses == ["failed", "ok"]


@pytest.mark.slow
def test_run_all_on_the_embedded_cluster_prints_every_papers_verdicts(toy_project, cluster, monkeypatch, capsys):
    """No scheduler named: a LocalCluster of two worker processes (given the toy papers by the preload)."""
    import dask

    from companion import registry

    paper = registry.PAPERS["toy-paper"]
    monkeypatch.setitem(registry.PAPERS, "toy-two", registry.Paper("toy-two", *[getattr(paper, f) for f in
                                                                              ("title", "authors", "url", "bib_key")]))
    monkeypatch.setitem(sys.modules, "companion.papers.toy_two", sys.modules["companion.papers.toy_paper"])
    (toy_project / "notebooks" / "toy-two.ipynb").write_text((toy_project / "notebooks" / "toy-paper.ipynb").read_text())
    monkeypatch.delenv(executor.SCHEDULER_ENV)
    with dask.config.set({"distributed.worker.preload": [str(cluster.preload)]}):
        assert cli.main(["run-all", "-p", "seeds=2", "--workers", "2"]) == 0
    captured = capsys.readouterr()
    assert "embedded Dask cluster, 2 worker processes" in captured.err and "2/2 finished" in captured.err
    out = captured.out
    for slug in ("toy-paper", "toy-two"):
        assert f"{slug}: ok in" in out
    assert out.count("HOLDS") >= 2


@pytest.mark.slow
def test_sweep_completes_when_a_worker_dies_mid_task(toy_project, cluster, capsys):
    """Runs last: it kills one of the module's two workers."""
    out, code = toy_project / "killed", []
    runner = threading.Thread(target=lambda: code.append(
        _sweep(out, "--scheduler", cluster.address, "-p", "sleep=4", "--force")))
    runner.start()
    with cluster.client() as client:
        def both_busy() -> bool:
            busy = client.processing()
            return sum(1 for keys in busy.values() if keys) == 2
        _wait(both_busy, 90, "both workers to take a point")
        time.sleep(1.0)  # the notebooks are under way
        cluster.kill(cluster.workers[0])
    runner.join(timeout=180)
    assert not runner.is_alive() and code == [0]
    rows = _values(out / "sweep.csv")
    assert {r["level"] for r in rows} == {"0.2", "0.9"} and {r["verdict"] for r in rows} == {"HOLDS", "FAILS"}
