"""Coordinated activation maximisation (CAM): one input per model that drives the same concept.

For concept c, every model m gets its own input x_m, optimised by Adam to raise the concept's
pre-activation through model m's backbone, standardisation and encoder, with L2 and total-variation
penalties, clamped to the pixel range [0, 1] after every step. The paper uses CAM for qualitative
figures only.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from companion.models import optim

CAM_LR = 0.05
L2_WEIGHT = 0.05
TV_WEIGHT = 0.1


def total_variation(x: Tensor) -> Tensor:
    """Mean absolute difference of neighbouring pixels of images (n, h, w)."""
    return (x[:, 1:, :] - x[:, :-1, :]).abs().mean() + (x[:, :, 1:] - x[:, :, :-1]).abs().mean()


def maximise(pre_fn: Callable[[Tensor], Tensor], concept: int, steps: int, gen: torch.Generator,
             shape: tuple[int, int] = (8, 8)) -> tuple[Tensor, float, float]:
    """Optimised image (h, w) and the concept's pre-activation before and after the optimisation.

    ``pre_fn`` maps images (n, h, w) to pre-codes (n, n_concepts).
    """
    x = (0.5 + 0.05 * torch.randn(1, *shape, generator=gen)).requires_grad_(True)
    opt = optim.Adam([x], lr=CAM_LR)
    with torch.no_grad():
        start = float(pre_fn(x)[0, concept])
    for _ in range(steps):
        opt.zero_grad()
        objective = pre_fn(x)[0, concept] - L2_WEIGHT * (x ** 2).mean() - TV_WEIGHT * total_variation(x)
        (-objective).backward()
        opt.step()
        with torch.no_grad():
            x.clamp_(0.0, 1.0)
    with torch.no_grad():
        end = float(pre_fn(x)[0, concept])
    return x.detach()[0], start, end
