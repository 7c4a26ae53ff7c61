"""The official "NNs" scoring protocol at our scale: a classifier trained on the attacks' |difference| maps.

The official DDIM script scores every attacker by training a ResNet-18 on 20 % of the members' and
non-members' per-pixel maps (|x - x^| for ReDiffuse, |x^_t - x~_t| for SecMI, ...) and reporting its
metrics on the other 80 %. An 8x8 map does not need a ResNet-18: :class:`MapCNN` is two 3x3
convolutions, a global average and a linear head, trained full-batch with Adam.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from companion.models import optim
from companion.papers.diffusion_mia.attacks import mia_metrics


class MapCNN(nn.Module):
    """Conv3x3(c, 8), ReLU, Conv3x3(8, 16), ReLU, global average, Linear(16, 1): a member logit per map."""

    def __init__(self, channels: int = 1) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, 8, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (n,) of maps (n, c, h, w)."""
        return self.head(self.body(x)).squeeze(1)


def as_images(maps: torch.Tensor) -> torch.Tensor:
    """Flat square maps (n, side*side) as (n, 1, side, side); image maps (n, c, h, w) unchanged."""
    if maps.ndim == 2:
        side = int(round(math.sqrt(maps.shape[1])))
        return maps.reshape(len(maps), 1, side, side)
    return maps


def train_split(n_members: int, n_non: int, frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (into members then non-members) of the training ``frac`` of each group and of the held-out rest."""
    rng = np.random.default_rng([seed, 2])
    m, k = rng.permutation(n_members), rng.permutation(n_non) + n_members
    a, b = max(1, round(frac * n_members)), max(1, round(frac * n_non))
    return np.r_[m[:a], k[:b]], np.r_[m[a:], k[b:]]


def nn_metrics(maps: torch.Tensor, n_members: int, seed: int, frac: float = 0.2, steps: int = 100,
               lr: float = 1e-2) -> tuple[float, float, float]:
    """(AUC, ASR, TPR@1%FPR) on the held-out maps of a :class:`MapCNN` trained on ``frac`` of each group."""
    x = as_images(maps.detach().abs().float())
    x = x / x.std().clamp_min(1e-12)  # one global scale (no labels used), so one learning rate suits every attack
    y = torch.cat([torch.ones(n_members), torch.zeros(len(x) - n_members)])
    tr, te = train_split(n_members, len(x) - n_members, frac, seed)
    torch.manual_seed(seed)
    model = MapCNN(x.shape[1])
    opt = optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        loss = nn.functional.binary_cross_entropy_with_logits(model(x[tr]), y[tr])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    with torch.no_grad():
        s = model(x[te]).double().numpy()
    held = y[te].numpy() == 1
    return mia_metrics(s[held], s[~held])
