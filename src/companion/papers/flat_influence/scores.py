"""Influence scores as *harm* scores (larger = more likely mislabeled) and detection metrics.

- IF (Koh & Liang 2017): ``h(z) = -g_val^T H_tr^{-1} g_z``: up-weighting z raises validation loss.
- TracIn (Pruthi et al. 2020): ``h(z) = -sum_c lr_c g_val(theta_c)^T g_z(theta_c)``.
- VM / FVM (this paper): ``I(z) = g~_z^T H~_val^{-1} g~_z >= 0`` at a (flat) validation minimum,
  from a Newton step with the validation Hessian and a second-order loss-change expansion; it is
  ``quad(G)`` of the damped inverse (:meth:`DampedInverse.quad`, ``Curvature.quad``), one path only.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from scipy.stats import rankdata
from torch import Tensor



class Solver(Protocol):
    """Anything that applies a damped inverse curvature: ``solve(b) = H^{-1} b``."""

    def solve(self, B: Tensor) -> Tensor: ...


def if_harm(g_val: Tensor, inv: Solver, G: Tensor) -> Tensor:
    """First-order influence harm ``-g_val^T H^{-1} g_z`` for every row g_z of G (n, P)."""
    return -(G @ inv.solve(g_val))


def tracin_harm(g_vals: list[Tensor], lrs: list[float], Gs: list[Tensor]) -> Tensor:
    """TracIn harm ``-sum_c lr_c g_val_c^T g_z_c`` over checkpoints c."""
    return -sum(lr * (G @ gv) for gv, lr, G in zip(g_vals, lrs, Gs))


def grad_norm(G: Tensor) -> Tensor:
    """``|g_z|^2``: the H = I limit of the VM/FVM score (``lambda * score -> |g|^2`` as lambda -> inf)."""
    return (G * G).sum(-1)


def auc(is_positive: np.ndarray, score: np.ndarray) -> float:
    """ROC AUC of ``score`` for the positives (Mann-Whitney with mid-ranks for ties)."""
    pos = np.asarray(is_positive, dtype=bool)
    r = rankdata(np.asarray(score, dtype=float))
    n1, n0 = int(pos.sum()), int((~pos).sum())
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def average_precision(is_positive: np.ndarray, score: np.ndarray) -> float:
    """Average precision: mean over positives of the precision at their rank (descending score)."""
    pos = np.asarray(is_positive, dtype=bool)[np.argsort(-np.asarray(score), kind="stable")]
    hits = np.cumsum(pos)
    return float((hits[pos] / (np.flatnonzero(pos) + 1)).mean())


def precision_at_k(is_positive: np.ndarray, score: np.ndarray, k: int | None = None) -> float:
    """Fraction of positives among the top ``k`` scores (default k = number of positives)."""
    pos = np.asarray(is_positive, dtype=bool)
    k = int(pos.sum()) if k is None else k
    return float(pos[np.argsort(-np.asarray(score), kind="stable")[:k]].mean())


def roc_curve(is_positive: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """False- and true-positive rates at every threshold, descending score (for plots)."""
    order = np.argsort(-np.asarray(score), kind="stable")
    pos = np.asarray(is_positive, dtype=bool)[order]
    tpr = np.concatenate([[0.0], np.cumsum(pos) / pos.sum()])
    fpr = np.concatenate([[0.0], np.cumsum(~pos) / (~pos).sum()])
    return fpr, tpr
