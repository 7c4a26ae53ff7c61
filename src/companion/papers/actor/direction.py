"""Refusal direction, projection-calibrated targets, the cosine loss and the choice of layer.

Follows the paper's equations as the spec gives them: r = mean_H a - mean_B a (difference in means
over anchor activations), Proj_r(a) = (a . r^) r^, targets t = a -/+ alpha Proj_r(a), and
L_PRD = mean [1 - cos(h, t)]. The projection origin is a parameter: ``zero`` is the literal formula,
``benign_mean`` measures the projection from the benign anchor mean (the toy's default, see the spec's
pitfall "Projection origin").
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.metrics import silhouette_score
from torch import Tensor

from companion.papers.actor import ORIGINS


def refusal_direction(harmful: Tensor, benign: Tensor) -> Tensor:
    """Unit difference in means of harmful and benign anchor activations, (d,)."""
    r = harmful.mean(0) - benign.mean(0)
    norm = r.norm()
    if not torch.isfinite(norm) or norm == 0:
        raise ValueError("harmful and benign anchors have the same mean: no refusal direction")
    return r / norm


def project(a: Tensor, r_hat: Tensor) -> Tensor:
    """Proj_r(a) = (a . r^) r^ for every row of ``a``."""
    return (a @ r_hat)[..., None] * r_hat


def coefficient(a: Tensor, r_hat: Tensor, origin: Tensor | None = None) -> Tensor:
    """c_q = (a_q - origin) . r^ (origin ``None``: zero, the literal formula), (n,)."""
    return (a if origin is None else a - origin) @ r_hat


def targets(a: Tensor, r_hat: Tensor, sign: Tensor, alpha: float, origin: Tensor | None = None,
            groups: Tensor | None = None, along: Tensor | None = None) -> Tensor:
    """t_q = a_q + sign_q alpha c_q r^ (sign +1 harmful, -1 benign / pseudo-harmful).

    ``groups`` (the uniform-shift baseline): every query is shifted by the mean c of its group (harmful,
    pseudo-harmful, benign) instead of its own c_q. Per group, so that the one size is the right one on
    average for the prompts it shifts; the per-query shift is the paper's "just enough" shift. Each group's
    mean is computed once. ``along`` (the random-direction control): the shift of the same per-query size
    c_q (still measured on r^) is applied along this unit vector instead of r^.
    """
    c = coefficient(a, r_hat, origin)
    if groups is not None:
        ids, inverse = torch.unique(groups, return_inverse=True)
        means = torch.stack([c[groups == g].mean() for g in ids])
        c = means[inverse]
    return a + (sign * alpha * c)[:, None] * (r_hat if along is None else along)


def random_unit(d: int, seed: int | list[int]) -> Tensor:
    """A unit vector drawn uniformly on the sphere in R^d from ``seed`` (the random-direction control)."""
    g = torch.Generator().manual_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]))
    u = torch.randn(d, generator=g)
    return u / u.norm()


def cosine_loss(h: Tensor, t: Tensor) -> Tensor:
    """Mean over rows of 1 - cos(h, t), in [0, 2]."""
    return (1 - torch.nn.functional.cosine_similarity(h, t, dim=-1)).mean()


def silhouettes(acts: list[np.ndarray], labels: np.ndarray) -> list[float]:
    """Silhouette score of the harmful/benign split of the anchors at every layer (Euclidean)."""
    return [float(silhouette_score(a, labels)) for a in acts]


def pick_layer(scores: list[float], candidates: list[int], tol: float = 0.02) -> int:
    """The candidate with the best score; near-ties (within ``tol``) go to the one nearest the middle."""
    if not candidates:
        raise ValueError("no candidate layer")
    best = max(scores[c] for c in candidates)
    tied = [c for c in candidates if scores[c] >= best - tol]
    middle = (len(scores) - 1) / 2
    return min(tied, key=lambda c: (abs(c - middle), c))


def candidate_layers(n_layer: int) -> list[int]:
    """The intermediate layers (1 .. n_layer-2); a two-layer model offers layer 0."""
    return list(range(1, n_layer - 1)) or [0]
