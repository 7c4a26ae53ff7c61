"""Routing and rejection metrics: rank-based routing curves, oracle and random routing, AUROC, ECE."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def route_mask(scores: np.ndarray, rate: float) -> np.ndarray:
    """Route the ``floor(rate n + 0.5)`` least confident queries; ties go by index (lower index first)."""
    scores = np.asarray(scores, dtype=float)
    n = len(scores)
    k = int(np.floor(rate * n + 0.5))
    order = np.lexsort((np.arange(n), scores))
    mask = np.zeros(n, dtype=bool)
    mask[order[:k]] = True
    return mask


def threshold_mask(scores: np.ndarray, val_scores: np.ndarray, rate: float) -> np.ndarray:
    """Route ``c < t`` with ``t`` the ``rate`` quantile of the validation scores (the deployment rule)."""
    t = np.quantile(np.asarray(val_scores, float), rate) if rate > 0 else -np.inf
    return np.asarray(scores, float) < t


def routed_accuracy(scores: np.ndarray, small_ok: np.ndarray, large_ok: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """System accuracy at each routing rate: the strong model's answer where routed, the small one's elsewhere."""
    small_ok, large_ok = np.asarray(small_ok, bool), np.asarray(large_ok, bool)
    out = []
    for r in rates:
        m = route_mask(scores, float(r))
        out.append(np.where(m, large_ok, small_ok).mean())
    return np.asarray(out)


def oracle_accuracy(small_ok: np.ndarray, large_ok: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """The best routing at each rate: small errors the strong model fixes first, small successes it breaks last."""
    small_ok, large_ok = np.asarray(small_ok, bool), np.asarray(large_ok, bool)
    priority = np.select([~small_ok & large_ok, ~small_ok & ~large_ok, small_ok & large_ok], [0.0, 1.0, 2.0], 3.0)
    return routed_accuracy(priority, small_ok, large_ok, rates)


def random_accuracy(small_ok: np.ndarray, large_ok: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """Expected accuracy of uniform random routing: the straight line between the r = 0 and r = 1 accuracies."""
    a0, a1 = np.mean(small_ok), np.mean(large_ok)
    return a0 + np.asarray(rates, float) * (a1 - a0)


def auc(rates: np.ndarray, acc: np.ndarray) -> float:
    """Area under an accuracy-vs-rate curve (trapezoid rule over the rate grid)."""
    r, a = np.asarray(rates, float), np.asarray(acc, float)
    return float(np.sum((r[1:] - r[:-1]) * (a[1:] + a[:-1]) / 2))


def rate_to_match(rates: np.ndarray, acc: np.ndarray, target: float) -> float:
    """``r*``: the smallest rate on the grid whose accuracy reaches ``target`` (1.0 when none does)."""
    hit = np.flatnonzero(np.asarray(acc) >= target - 1e-12)
    return float(np.asarray(rates)[hit[0]]) if len(hit) else 1.0


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` for ``positive`` (Mann-Whitney with mid-ranks for ties)."""
    s, y = np.asarray(scores, float), np.asarray(positive, bool)
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    ranks = rankdata(s)
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def ece(conf: np.ndarray, correct: np.ndarray, bins: int = 15) -> float:
    """Expected calibration error over ``bins`` equal-mass bins of the sorted confidences."""
    c, y = np.asarray(conf, float), np.asarray(correct, float)
    order = np.argsort(c, kind="stable")
    total = 0.0
    for part in np.array_split(order, bins):
        if len(part):
            total += len(part) * abs(c[part].mean() - y[part].mean())
    return float(total / len(c))


def reliability(conf: np.ndarray, correct: np.ndarray, bins: int = 15) -> tuple[np.ndarray, np.ndarray]:
    """Mean confidence and accuracy per equal-mass bin (for a reliability diagram)."""
    c, y = np.asarray(conf, float), np.asarray(correct, float)
    parts = [p for p in np.array_split(np.argsort(c, kind="stable"), bins) if len(p)]
    return np.array([c[p].mean() for p in parts]), np.array([y[p].mean() for p in parts])
