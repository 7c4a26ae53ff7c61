"""Run-time helpers shared by every paper: device choice, seeded generators, provenance."""

from __future__ import annotations

import multiprocessing
import os
import platform
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from importlib import metadata
from typing import Any, Callable, Sequence, TypeVar

import numpy as np
import torch

T = TypeVar("T")

KEY_PACKAGES = ("companion", "numpy", "scipy", "torch", "transformers", "scikit-learn",
                "statsmodels", "entmax", "matplotlib", "pandas", "papermill")


def resolve_device(device: str) -> torch.device:
    """Map ``auto | cpu | cuda`` to a torch device; asking for CUDA without one is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was asked for but torch sees no CUDA device; use device='cpu' or 'auto'")
    return torch.device(device)


def generators(seed: int) -> tuple[np.random.Generator, torch.Generator]:
    """A numpy and a torch CPU generator derived from ``seed``; also seeds torch's default."""
    torch.manual_seed(seed)
    return np.random.default_rng(seed), torch.Generator().manual_seed(seed)


def cores() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0))


def thread_budget() -> int:
    """The cores a run may use: ``$COMPANION_THREADS`` when set (a Dask worker sets it), else all."""
    return int(os.environ.get("COMPANION_THREADS", "0")) or cores()


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
        "parameters": params.to_dict(),
        "seeds": params.seed_list(),
        "device": str(device),
        "torch threads": torch.get_num_threads(),
        "platform": platform.platform(terse=True),
        "versions": versions(),
    }


def _init_worker() -> None:
    """Each worker process uses one torch thread: the processes, not threads, share the cores."""
    torch.set_num_threads(1)


def parallel_map(fn: Callable[..., T], jobs: Sequence[tuple], workers: int | None = None,
                 on_done: Callable[[], None] | None = None) -> list[T]:
    """``[fn(*job) for job in jobs]`` across worker processes (spawned, so safe inside Jupyter).

    ``fn`` must be importable (defined in a module). With one worker or one job it runs inline.
    The default number of workers is the run's :func:`thread_budget`, so a notebook on a Dask
    worker (``COMPANION_THREADS`` set to its share) starts no pool wider than that share.
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
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker) as pool:
        futures = [pool.submit(fn, *job) for job in jobs]
        for future in as_completed(futures):
            future.result()
            if on_done:
                on_done()
        return [f.result() for f in futures]


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
