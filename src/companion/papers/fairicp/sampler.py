"""The inverse conditional permutation (ICP) sampler: log-likelihood matrices, swap sweeps, dummies.

L[i, j] = log q(Y_i | A_j) (row: response index, column: attribute index). The chain moves over
permutations pi with target P(pi) ∝ prod_i q(Y_pi(i) | A_i), by sweeps of parallel pairwise swaps
(Berrett et al.'s conditional permutation test with Y permuted given A), and the dummy attributes
are A[argsort(pi)] (the *inverse* step). :func:`sweep` handles all pairs of one sweep at once;
:func:`sweep_loop` is the per-pair reference that gives the same chain from the same random numbers.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

CLIP = -500.0
WARN_N = 5000


def sweep_randoms(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The random numbers of one sweep: a random pairing (first half vs second half) and uniforms."""
    return rng.permutation(n), rng.random(n // 2)


def swap_log_odds(L: np.ndarray, pi: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """log P(swap) - log P(stay) for the pairs (i, j): L[pi_i, j] + L[pi_j, i] - L[pi_i, i] - L[pi_j, j]."""
    return L[pi[i], j] + L[pi[j], i] - L[pi[i], i] - L[pi[j], j]


def sweep(L: np.ndarray, pi: np.ndarray, order: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One vectorised sweep of the n // 2 disjoint pairs given by ``order``; returns the new pi.

    About 25 numpy calls on arrays of n // 2, no Python loop over pairs: each of pi[i], pi[j] is
    gathered once, the four log-likelihoods are read from the flattened L (row * n + column), and
    the swaps are written with two ``where`` instead of boolean-mask indexing. The arithmetic is the
    per-pair loop's, in the same order, so both give the same chain from the same random numbers.
    """
    half = len(u)
    n = L.shape[1]
    i, j = order[:half], order[half : 2 * half]
    pi_i, pi_j = pi[i], pi[j]
    flat = L.reshape(-1)  # a view for a C-contiguous L (run_chain makes it one)
    row_i, row_j = pi_i * n, pi_j * n
    ell = flat[row_i + j] + flat[row_j + i] - flat[row_i + i] - flat[row_j + j]
    np.maximum(ell, CLIP, out=ell)
    swap = u < 1.0 / (1.0 + np.exp(-ell))
    out = pi.copy()
    out[i] = np.where(swap, pi_j, pi_i)
    out[j] = np.where(swap, pi_i, pi_j)
    return out


def sweep_loop(L: np.ndarray, pi: np.ndarray, order: np.ndarray, u: np.ndarray) -> np.ndarray:
    """The same sweep as :func:`sweep`, one pair at a time in Python (the benchmark's reference)."""
    half = len(u)
    out = [int(p) for p in pi]
    for k in range(half):
        i, j = int(order[k]), int(order[half + k])
        pi_i, pi_j = out[i], out[j]
        ell = max(CLIP, L[pi_i, j] + L[pi_j, i] - L[pi_i, i] - L[pi_j, j])
        if u[k] < 1.0 / (1.0 + math.exp(-ell)):
            out[i], out[j] = pi_j, pi_i
    return np.asarray(out, dtype=pi.dtype)


def run_chain(L: np.ndarray, n_states: int, sweeps: int, rng: np.random.Generator) -> np.ndarray:
    """(n_states, n) permutations: burn-in of ``sweeps`` sweeps from the identity, then one state
    every ``sweeps`` sweeps of a single chain (the official ``generate_X_CPT``)."""
    n = L.shape[0]
    if n > WARN_N:
        warnings.warn(f"ICP log-likelihood matrix is {n}x{n}; consider float32 or blocking", stacklevel=2)
    L = np.ascontiguousarray(L)
    pi = np.arange(n)
    for _ in range(sweeps):
        pi = sweep(L, pi, *sweep_randoms(n, rng))
    states = np.empty((n_states, n), dtype=np.int64)
    for m in range(n_states):
        for _ in range(sweeps):
            pi = sweep(L, pi, *sweep_randoms(n, rng))
        states[m] = pi
    return states


def inverse_dummies(a: np.ndarray, states: np.ndarray) -> np.ndarray:
    """(M, n, K) dummy attributes A[argsort(pi)] for every chain state (Ã_pi(i) = A_i)."""
    return a[np.argsort(states, axis=1)]


def icp_dummies(L: np.ndarray, a: np.ndarray, n_states: int, sweeps: int,
                rng: np.random.Generator) -> np.ndarray:
    """ICP: run the chain on L = log q(Y|A) and return the inverse-permuted copies of A."""
    return inverse_dummies(a, run_chain(L, n_states, sweeps, rng))


def cp_dummies(L_ay: np.ndarray, a: np.ndarray, n_states: int, sweeps: int,
               rng: np.random.Generator) -> np.ndarray:
    """FairCP ("vanilla" CPT): the chain on L[i, j] = log p(A_i | Y_j), copies A[pi] without inversion."""
    return a[run_chain(L_ay, n_states, sweeps, rng)]


def log_perm_weight(L: np.ndarray, pi: np.ndarray) -> float:
    """log of the unnormalised target weight of pi: sum_i L[pi(i), i]."""
    return float(L[pi, np.arange(len(pi))].sum())
