"""The ``paper`` preset's loaders: a local ``diffusers`` ``UNet2DModel`` and CIFAR-10 with the official half split.

``model_path``: a folder written by ``UNet2DModel.save_pretrained`` (``config.json`` plus the weights),
an epsilon-predictor trained on the members of the split. The official repository releases no
checkpoint; its DDIM models are pytorch-ddpm U-Nets, not this format, and no converter is provided:
the preset is the attacks on a ``UNet2DModel`` the user trained on the official split, not the paper's
model, judged by the digits-calibrated bars; the numbers to compare it with are the official code's
output (``DDIM/result_randomseed.csv``), quoted in the claims' paper column. ``data_path``: a folder holding
``cifar-10-batches-py/data_batch_1..5`` (the python pickles of the CIFAR-10 training set) and
``CIFAR10_train_ratio0.5.npz`` with ``mia_train_idxs`` (members) and ``mia_eval_idxs`` (non-members),
indices into those 50 000 training images. Nothing is downloaded.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from companion.papers.diffusion_mia.ddpm import EpsFn
from companion.params import resolve_path

SPLIT_FILE = "CIFAR10_train_ratio0.5.npz"


def load_unet_eps(model_path: str, device: torch.device, batch: int = 256) -> tuple[EpsFn, int]:
    """``eps(x, t)`` of a local ``UNet2DModel`` (batched, no gradients) and its parameter count."""
    from diffusers import UNet2DModel

    unet = UNet2DModel.from_pretrained(str(resolve_path(model_path)), local_files_only=True).to(device).eval()

    def eps(x: torch.Tensor, t: int) -> torch.Tensor:
        with torch.no_grad():
            parts = [unet(x[i:i + batch].to(device), int(t)).sample.to(x.device) for i in range(0, len(x), batch)]
        return torch.cat(parts)

    return eps, sum(p.numel() for p in unet.parameters())


def cifar_train_images(data_path: str) -> np.ndarray:
    """The 50 000 CIFAR-10 training images as float32 (n, 3, 32, 32) in [-1, 1]."""
    folder = resolve_path(data_path) / "cifar-10-batches-py"
    parts = []
    for i in range(1, 6):
        with open(folder / f"data_batch_{i}", "rb") as fh:
            parts.append(pickle.load(fh, encoding="bytes")[b"data"])
    data = np.concatenate(parts).reshape(-1, 3, 32, 32).astype(np.float32)
    return data / 255.0 * 2.0 - 1.0


def load_split(data_path: str) -> tuple[np.ndarray, np.ndarray]:
    """The official member / non-member indices (``mia_train_idxs``, ``mia_eval_idxs``)."""
    with np.load(Path(resolve_path(data_path)) / SPLIT_FILE) as z:
        return np.asarray(z["mia_train_idxs"]), np.asarray(z["mia_eval_idxs"])


def sample_members(data_path: str, n: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` members and ``n`` non-members drawn (without replacement, by ``rng``) from the official split."""
    images = cifar_train_images(data_path)
    mem, non = load_split(data_path)
    n = min(n, len(mem), len(non))
    pick_m = rng.choice(mem, n, replace=False)
    pick_n = rng.choice(non, n, replace=False)
    return torch.from_numpy(images[pick_m]), torch.from_numpy(images[pick_n])
