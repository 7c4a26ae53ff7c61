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
    take = lambda idx: np.take_along_axis(rankings, idx[..., None], axis=-1)[..., 0]
    return take(j), take(i)


def pairwise_answers(rankings: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One pairwise answer per voter on two distinct uniform positions: (preferred, other)."""
    m = rankings.shape[-1]
    p1 = rng.integers(0, m, size=rankings.shape[:-1])
    p2 = rng.integers(0, m - 1, size=rankings.shape[:-1])
    p2 = p2 + (p2 >= p1)
    take = lambda idx: np.take_along_axis(rankings, idx[..., None], axis=-1)[..., 0]
    return take(np.minimum(p1, p2)), take(np.maximum(p1, p2))


def count_matrix(above: np.ndarray, below: np.ndarray, m: int) -> np.ndarray:
    """d[r, a, b] = number of answers 'a above b' in repetition r; inputs (reps, n), output (reps, m, m)."""
    reps = above.shape[0]
    flat = (np.arange(reps)[:, None] * m + above) * m + below
    return np.bincount(flat.ravel(), minlength=reps * m * m).reshape(reps, m, m).astype(float)


def improvement_counts(answered: np.ndarray, shown: np.ndarray, m: int,
                       inject: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Pairwise counts, with plurality answers added to every row entry when ``inject`` (as the official
    code), and plurality counts."""
    d = count_matrix(answered, shown, m)
    plu = np.diagonal(d, axis1=1, axis2=2).copy()
    if inject:
        d += plu[:, :, None] * (1.0 - np.eye(m))
    d[:, np.arange(m), np.arange(m)] = 0.0
    return d, plu


def random_answers(answered: np.ndarray, shown: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """The answers with every improvement (answered != shown) replaced by a uniform other candidate:
    the plurality answers stay, the improvement answers carry no information about the rankings."""
    other = (shown + 1 + rng.integers(0, m - 1, size=shown.shape)) % m
    return np.where(answered == shown, answered, other)


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
    beats = majority_counts(pos)
    off = 1.0 - np.eye(m)
    cope = ((beats > np.swapaxes(beats, -1, -2)) * off + 0.5 * (beats == np.swapaxes(beats, -1, -2)) * off).sum(-1)
    plu = (rankings[..., 0][..., None] == np.arange(m)).sum(axis=-2).astype(float)
    return {"borda": borda, "copeland": cope, "plurality": plu}


def majority_counts(pos: np.ndarray) -> np.ndarray:
    """beats[..., a, b] = number of voters ranking a above b, from positions of shape (..., n, m)."""
    *lead, n, m = pos.shape
    flat = pos.reshape(-1, n, m).astype(np.int8)  # int8 comparisons: a quarter of the memory traffic
    beats = np.empty((flat.shape[0], m, m), dtype=np.int64)
    chunk = max(1, 2**24 // (n * m * m))
    for s in range(0, flat.shape[0], chunk):
        part = flat[s:s + chunk]
        beats[s:s + chunk] = (part[:, :, :, None] < part[:, :, None, :]).sum(axis=1)
    return beats.reshape(*lead, m, m)


def ratio(scores: np.ndarray, winner: np.ndarray) -> np.ndarray:
    """Approximation ratio score(winner) / max score, shape (reps,)."""
    return np.take_along_axis(scores, winner[:, None], axis=1)[:, 0] / scores.max(axis=1)


def paired_z(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Mean of x - y and its z-score (paired)."""
    diff = np.asarray(x) - np.asarray(y)
    with np.errstate(divide="ignore", invalid="ignore"):  # identical samples: z is NaN, not a warning
        return float(diff.mean()), float(diff.mean() / (diff.std(ddof=1) / np.sqrt(diff.size)))


def two_sample_reject(c1: np.ndarray, c2: np.ndarray, level: float = 0.05) -> np.ndarray:
    """Chi-square test of homogeneity of two count vectors per row (empty cells dropped) rejects at ``level``:
    ``scipy.stats.chi2_contingency`` on each 2 x K table (Yates-corrected at one degree of freedom),
    vectorised over the leading axis of (reps, K) inputs."""
    c1, c2 = np.atleast_2d(c1).astype(float), np.atleast_2d(c2).astype(float)
    col = c1 + c2
    keep = col > 0
    tot1, tot2 = c1.sum(axis=1, keepdims=True), c2.sum(axis=1, keepdims=True)
    dof = keep.sum(axis=1) - 1
    stat = np.zeros(len(c1))
    for obs, tot in ((c1, tot1), (c2, tot2)):
        exp = np.where(keep, col * tot / (tot1 + tot2), 1.0)
        dev = np.abs(obs - exp)
        dev = np.where(dof[:, None] == 1, np.maximum(dev - np.minimum(0.5, dev), 0.0), dev)  # Yates
        stat += np.where(keep, dev ** 2 / exp, 0.0).sum(axis=1)
    pvalue = np.where(dof > 0, stats.chi2.sf(stat, np.maximum(dof, 1)), 1.0)
    return pvalue < level
