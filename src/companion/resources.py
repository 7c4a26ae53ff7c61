"""What a run may use, found without loading torch: the cores, the thread budget, the device.

The runner plans every run (and answers a cached one) with these, so that a cache hit costs no
torch import; :mod:`companion.runtime` re-exports them for the papers.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any


def cores() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0))


def thread_budget() -> int:
    """The cores a run may use: ``$COMPANION_THREADS`` when set (a Dask worker sets it), else all."""
    return int(os.environ.get("COMPANION_THREADS", "0")) or cores()


def cpu_only_torch() -> bool:
    """Whether the installed torch is a CPU build (``+cpu``), which can never see a CUDA device."""
    try:
        return metadata.version("torch").endswith("+cpu")
    except metadata.PackageNotFoundError:
        return True


def resolve_device(device: str) -> Any:
    """Map ``auto | cpu | cuda`` to a torch device; asking for CUDA without one is an error."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was asked for but torch sees no CUDA device; use device='cpu' or 'auto'")
    return torch.device(device)


def device_name(device: str) -> str:
    """The device a run will use, by name; a CPU build of torch answers without being imported."""
    if device in ("auto", "cpu") and cpu_only_torch():
        return "cpu"
    return str(resolve_device(device))
