"""Feedback from voters and winner estimation: improvement and pairwise answers, counts, estimators.

Vectorised over repetitions and voters: a batch of profiles is an integer array of shape
``(reps, n, m)`` (``r[p]`` = candidate at position p, 0 = top, see :mod:`companion.papers.improvement_feedback.rankings`).
Every voter gives one answer. Improvement feedback: the voter is shown a uniformly random
candidate and answers with a candidate at most ``t`` positions above it (itself if it is the top),
with position-only answer weights ``unif`` / ``lin`` / ``exp``. Pairwise feedback: the voter
compares two distinct uniformly random candidates. The estimators turn answer counts into Borda,
Copeland and plurality scores (Halpern et al. 2024 style win fractions).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from companion.papers.improvement_feedback import rankings as rk


def window_probs(k: int, kind: str) -> np.ndarray:
    """Answer probabilities over a window of k positions, farthest first, shape (k,)."""
    w = {"unif": np.ones(k), "lin": np.arange(1.0, k + 1), "exp": np.exp(np.arange(1.0, k + 1))}[kind]
    return w / w.sum()


def improvement_answers(rankings: np.ndarray, t: int, kind: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One improvement answer per voter: (answered, shown) candidates, each of shape rankings.shape[:-1]."""
    m = rankings.shape[-1]
    shape = rankings.shape[:-1]
    i = rng.integers(0, m, size=shape)
    k = np.minimum(i, t)
    cum = np.full((t, t), 2.0)  # padding above 1 is never reached by u < 1
    for kk in range(1, t + 1):
        cum[kk - 1, :kk] = np.cumsum(window_probs(kk, kind))
        cum[kk - 1, kk - 1] = 1.0
    u = rng.random(size=shape)
    q = (u[..., None] >= cum[np.maximum(k, 1) - 1]).sum(axis=-1)
    j = np.where(i == 0, 0, i - k + q)
    take = lambda idx: np.take_along_axis(rankings, idx[..., None], axis=-1)[..., 0]  # noqa: E731
    return take(j), take(i)


def pairwise_answers(rankings: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One pairwise answer per voter on two distinct uniform positions: (preferred, other)."""
    m = rankings.shape[-1]
    p1 = rng.integers(0, m, size=rankings.shape[:-1])
    p2 = rng.integers(0, m - 1, size=rankings.shape[:-1])
    p2 = p2 + (p2 >= p1)
    take = lambda idx: np.take_along_axis(rankings, idx[..., None], axis=-1)[..., 0]  # noqa: E731
    return take(np.minimum(p1, p2)), take(np.maximum(p1, p2))


def count_matrix(above: np.ndarray, below: np.ndarray, m: int) -> np.ndarray:
    """d[r, a, b] = number of answers 'a above b' in repetition r; inputs (reps, n), output (reps, m, m)."""
    reps = above.shape[0]
    flat = (np.arange(reps)[:, None] * m + above) * m + below
    return np.bincount(flat.ravel(), minlength=reps * m * m).reshape(reps, m, m).astype(float)


def improvement_counts(answered: np.ndarray, shown: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Pairwise counts with plurality answers added to every row entry (as the official code), and plurality counts."""
    d = count_matrix(answered, shown, m)
    plu = np.diagonal(d, axis1=1, axis2=2).copy()
    d += plu[:, :, None] * (1.0 - np.eye(m))
    d[:, np.arange(m), np.arange(m)] = 0.0
    return d, plu


def win_fractions(d: np.ndarray) -> np.ndarray:
    """f[a, b] = d[a, b] / (d[a, b] + d[b, a]), 0 where there is no data."""
    tot = d + np.swapaxes(d, -1, -2)
    return np.divide(d, tot, out=np.zeros_like(d), where=tot > 0)


def borda_estimate(d: np.ndarray) -> np.ndarray:
    """Estimated Borda scores, sum of win fractions, shape d.shape[:-1]."""
    return win_fractions(d).sum(axis=-1)


def copeland_estimate(d: np.ndarray) -> np.ndarray:
    """Estimated Copeland scores: win fractions of won pairs plus half of tied ones (official estimator)."""
    f, dt = win_fractions(d), np.swapaxes(d, -1, -2)
    return (f * (d > dt) + 0.5 * f * ((d == dt) & (d > 0))).sum(axis=-1)


def argmax_random(scores: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Argmax over the last axis with ties broken uniformly at random."""
    top = np.isclose(scores, scores.max(axis=-1, keepdims=True), rtol=0, atol=1e-12)
    return np.argmax(top * rng.random(scores.shape), axis=-1)


def true_scores(rankings: np.ndarray) -> dict[str, np.ndarray]:
    """Borda, Copeland (wins + half ties of the majority graph) and plurality of each profile, (reps, m)."""
    m = rankings.shape[-1]
    pos = rk.positions(rankings)
    borda = (m - 1 - pos).sum(axis=-2).astype(float)
    beats = np.stack([(pos[..., [a]] < pos).sum(axis=-2) for a in range(m)], axis=-2)
    off = 1.0 - np.eye(m)
    cope = ((beats > np.swapaxes(beats, -1, -2)) * off + 0.5 * (beats == np.swapaxes(beats, -1, -2)) * off).sum(-1)
    plu = (rankings[..., 0][..., None] == np.arange(m)).sum(axis=-2).astype(float)
    return {"borda": borda, "copeland": cope, "plurality": plu}


def ratio(scores: np.ndarray, winner: np.ndarray) -> np.ndarray:
    """Approximation ratio score(winner) / max score, shape (reps,)."""
    return np.take_along_axis(scores, winner[:, None], axis=1)[:, 0] / scores.max(axis=1)


def paired_z(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Mean of x - y and its z-score (paired)."""
    diff = np.asarray(x) - np.asarray(y)
    return float(diff.mean()), float(diff.mean() / (diff.std(ddof=1) / np.sqrt(diff.size)))


def two_sample_reject(c1: np.ndarray, c2: np.ndarray, level: float = 0.05) -> bool:
    """Chi-square test of homogeneity of two count vectors (empty cells dropped) rejects at ``level``."""
    keep = (c1 + c2) > 0
    return bool(stats.chi2_contingency(np.stack([c1[keep], c2[keep]]))[1] < level)
