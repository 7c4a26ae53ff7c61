"""Fairness measures besides KPC: the HGR chi^2 penalty (Mary et al. 2019), DEO and marginal KS distances."""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

HGR_BINS = 20


def _kde_weights(v: torch.Tensor, bins: int) -> torch.Tensor:
    """(n, bins) Gaussian-kernel weights of v on an even grid over its (detached) range, rows sum to 1."""
    lo, hi = float(v.detach().min()), float(v.detach().max())
    grid = torch.linspace(lo - 1e-3, hi + 1e-3, bins)
    bw = (grid[1] - grid[0]).clamp_min(1e-3)
    w = torch.exp(-0.5 * ((v[:, None] - grid[None, :]) / bw) ** 2)
    return w / w.sum(1, keepdim=True)


def chi2_conditional(yhat: torch.Tensor, a: torch.Tensor, y: torch.Tensor, bins: int = HGR_BINS) -> torch.Tensor:
    """E_Y chi^2(yhat, a | Y) from a Gaussian KDE of the joint on a bins^3 grid (one attribute column)."""
    wh, wa, wy = _kde_weights(yhat, bins), _kde_weights(a, bins), _kde_weights(y, bins)
    p = torch.einsum("bi,bj,bk->ijk", wh, wa, wy) / len(yhat)
    p_hy, p_ay, p_y = p.sum(1), p.sum(0), p.sum((0, 1))
    indep = p_hy[:, None, :] * p_ay[None, :, :] / p_y.clamp_min(1e-12)[None, None, :]
    return (p * p / indep.clamp_min(1e-12)).sum() - 1.0


def hgr_penalty(yhat: torch.Tensor, a: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean over attribute columns of E_Y chi^2(yhat, a_k | Y) (each attribute alone, as in HGR)."""
    return torch.stack([chi2_conditional(yhat[:, 0], a[:, k], y[:, 0]) for k in range(a.shape[1])]).mean()


def deo(yhat_bin: np.ndarray, y: np.ndarray, groups: np.ndarray) -> float:
    """sum_{y in {0,1}} sum_g |P(Yhat=1 | G=g, Y=y) - P(Yhat=1 | Y=y)|, groups = joint attribute values."""
    total = 0.0
    for label in (0, 1):
        in_y = y == label
        if not in_y.any():
            continue
        base = yhat_bin[in_y].mean()
        for g in np.unique(groups[in_y]):
            total += abs(yhat_bin[in_y & (groups == g)].mean() - base)
    return float(total)


def joint_groups(a: np.ndarray) -> np.ndarray:
    """One integer label per distinct row of binary attributes."""
    return np.unique(a, axis=0, return_inverse=True)[1].ravel()


def ks_columns(a: np.ndarray, dummies: np.ndarray) -> np.ndarray:
    """Per column, the two-sample KS distance between the attributes and the pooled dummy draws."""
    pooled = dummies.reshape(-1, a.shape[1])
    return np.array([stats.ks_2samp(a[:, k], pooled[:, k]).statistic for k in range(a.shape[1])])
