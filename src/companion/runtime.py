"""Run-time helpers shared by every paper: device choice, seeded generators, provenance."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import platform
import signal
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from importlib import metadata
from typing import Any, Callable, Sequence, TypeVar

import numpy as np
import torch

from companion.resources import cores, resolve_device, thread_budget  # noqa: F401  (papers call them here)

T = TypeVar("T")

KEY_PACKAGES = ("companion", "numpy", "scipy", "torch", "transformers", "scikit-learn",
                "statsmodels", "entmax", "matplotlib", "pandas", "papermill")
PR_SET_PDEATHSIG = 1  # linux/prctl.h
TERMINATE_GRACE_S = 2.0


def generators(seed: int) -> tuple[np.random.Generator, torch.Generator]:
    """A numpy and a torch CPU generator derived from ``seed``; also seeds torch's default."""
    torch.manual_seed(seed)
    return np.random.default_rng(seed), torch.Generator().manual_seed(seed)


def limit_threads(n: int | None = None) -> int:
    """Cap torch's intra-op threads: ``n``, else ``$COMPANION_THREADS``, else 1.

    One thread is fastest for the companion's tiny models (thread hand-offs cost more than the
    work); use the cores with :func:`parallel_map` over seeds instead.
    """
    n = n or int(os.environ.get("COMPANION_THREADS", "0")) or 1
    torch.set_num_threads(n)
    return n


def versions(packages: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that shape the results (missing ones are skipped)."""
    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def provenance(params: Any, device: torch.device | str) -> dict[str, Any]:
    """What a page shows about how it was produced (stable across reruns of the same inputs)."""
    return {
        "parameters": params.key_dict(),
        "seeds": params.seed_list(),
        "device": str(device),
        "torch threads": torch.get_num_threads(),
        "platform": platform.platform(terse=True),
        "versions": versions(),
    }


def _init_worker(parent: int) -> None:
    """Set up a pool worker: one torch thread, interrupts left to the parent, death with the parent."""
    torch.set_num_threads(1)  # the processes, not threads, share the cores
    # Ctrl-C signals the whole process group; the parent alone decides what an interrupt stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(parent)


def _die_with(parent: int) -> None:
    """On Linux, have the kernel SIGKILL this process when ``parent`` ends, however it ends."""
    # A parent that is killed (a kernel stopped by its runner) cannot terminate its pool itself.
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before prctl took effect
        os._exit(1)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """End a pool's workers now: SIGTERM, then SIGKILL for any still there after a grace."""
    processes = list(pool._processes.values())  # no public handle before Python 3.14's terminate_workers
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + TERMINATE_GRACE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def parallel_map(fn: Callable[..., T], jobs: Sequence[tuple], workers: int | None = None,
                 on_done: Callable[[], None] | None = None) -> list[T]:
    """``[fn(*job) for job in jobs]`` across worker processes (spawned, so safe inside Jupyter).

    ``fn`` must be importable (defined in a module). With one worker or one job it runs inline.
    The default number of workers is the run's :func:`thread_budget`, so a notebook on a Dask
    worker (``COMPANION_THREADS`` set to its share) starts no pool wider than that share. An
    interrupt or a failing job ends the workers at once instead of waiting for the other jobs.
    """
    workers = min(workers or thread_budget(), len(jobs))
    if workers <= 1:
        out = []
        for job in jobs:
            out.append(fn(*job))
            if on_done:
                on_done()
        return out
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(os.getpid(),))
    try:
        futures = [pool.submit(fn, *job) for job in jobs]
        for future in as_completed(futures):
            future.result()
            if on_done:
                on_done()
        return [f.result() for f in futures]
    except BaseException:
        _terminate(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def median_time(fn: Callable[[], object], repeats: int = 5, *, warmup: int = 1,
                clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds, by ``clock``, of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls.

    Benchmarks report ratios of two such medians taken in the same run; pass
    ``clock=time.process_time`` to time CPU rather than wall seconds on a shared machine.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)
