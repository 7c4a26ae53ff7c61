"""Run-time helpers shared by every paper: device choice, seeded generators, provenance."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

import numpy as np
import torch

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


def limit_threads(n: int | None = None) -> int:
    """Cap torch's intra-op threads (default: the cores this process may use, at most 2 on CI)."""
    n = n or int(os.environ.get("COMPANION_THREADS", "0")) or len(os.sched_getaffinity(0))
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
