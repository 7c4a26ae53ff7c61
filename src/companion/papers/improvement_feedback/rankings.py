"""Random rankings of m candidates: Mallows, impartial culture and Plackett-Luce, vectorised.

A ranking is an integer array ``r`` with ``r[p]`` = the candidate at position ``p`` (0 = top);
its inverse ``pos[c]`` is the position of candidate ``c``. Every sampler takes a leading
``shape`` (for example ``(reps, n)``) and returns an array of shape ``shape + (m,)``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def all_rankings(m: int) -> np.ndarray:
    """Every ranking of ``m`` candidates in lexicographic order, shape (m!, m)."""
    return np.array(list(itertools.permutations(range(m))), dtype=np.int64).reshape(math.factorial(m), m)


def positions(rankings: np.ndarray) -> np.ndarray:
    """Inverse permutations: ``pos[..., c]`` is the position of candidate c, same shape."""
    rankings = np.asarray(rankings)
    pos = np.empty_like(rankings)
    # a scatter, not an argsort: linear in m, and the simulation inverts millions of rankings
    np.put_along_axis(pos, rankings, np.broadcast_to(np.arange(rankings.shape[-1]), rankings.shape), axis=-1)
    return pos


def kendall_tau(rankings: np.ndarray, reference: np.ndarray | None = None) -> np.ndarray:
    """Number of discordant pairs with ``reference`` (identity by default), shape rankings.shape[:-1]."""
    m = rankings.shape[-1]
    ref_pos = np.arange(m) if reference is None else positions(np.asarray(reference))
    seq = ref_pos[rankings]
    return np.triu(seq[..., :, None] > seq[..., None, :], k=1).sum(axis=(-1, -2))


def mallows(shape: tuple[int, ...], m: int, phi: float, rng: np.random.Generator) -> np.ndarray:
    """Mallows rankings around the identity, P(r) proportional to phi**KT(r, id), by repeated insertion."""
    size = int(np.prod(shape))
    pos = np.zeros((size, m), dtype=np.int8)  # m <= 127; int8 cuts the memory traffic of the O(m^2) update
    for i in range(1, m):
        # slot j puts item i ahead of i - j earlier items, i.e. i - j new inversions
        w = phi ** (i - np.arange(i + 1, dtype=float))
        slot = rng.choice(i + 1, size=size, p=w / w.sum()).astype(np.int8)
        head = pos[:, :i]
        head += head >= slot[:, None]
        pos[:, i] = slot
    return positions(pos.astype(np.int64)).reshape(*shape, m)


def impartial_culture(shape: tuple[int, ...], m: int, rng: np.random.Generator) -> np.ndarray:
    """Uniformly random rankings (Mallows with phi = 1)."""
    return np.argsort(rng.random((*shape, m)), axis=-1)


def plackett_luce(shape: tuple[int, ...], weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Plackett-Luce rankings by the Gumbel trick: sort log(weight) + Gumbel noise, largest first."""
    keys = np.log(np.asarray(weights, dtype=float)) + rng.gumbel(size=(*shape, len(weights)))
    return np.argsort(-keys, axis=-1)
