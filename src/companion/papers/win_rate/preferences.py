"""Simulated preferences over a finite response set and exact win rates.

A "bandit" language model: for each prompt x a policy is a probability vector over K responses.
Preferences are a matrix ``P[y, y'] = p(y > y' | x)`` with ``P + P^T = 1`` (diagonal 1/2). All
functions broadcast over leading (prompt / instance) axes: ``P`` is (..., K, K), policies (..., K).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from scipy.special import expit, log_softmax, logit, softmax

CLIP = 1e-6
H_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "id": lambda q: q,
    "log": np.log,
    "logit": logit,
}


def bt_matrix(r: np.ndarray) -> np.ndarray:
    """Bradley-Terry preferences ``sigmoid(r_y - r_y')`` from rewards r (..., K): (..., K, K)."""
    return expit(r[..., :, None] - r[..., None, :])


def antisymmetric(G: np.ndarray) -> np.ndarray:
    """``(G - G^T) / sqrt(2)``: an antisymmetric matrix with unit-variance off-diagonal entries."""
    return (G - np.swapaxes(G, -1, -2)) / np.sqrt(2.0)


def intransitive_matrix(r: np.ndarray, A: np.ndarray, gamma: float) -> np.ndarray:
    """Non-BT preferences ``sigmoid(r_y - r_y' + gamma A[y, y'])`` with A antisymmetric."""
    return expit(r[..., :, None] - r[..., None, :] + gamma * A)


def policy(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis (stable for large logits)."""
    return softmax(logits, axis=-1)


def log_policy(logits: np.ndarray) -> np.ndarray:
    """Log-softmax over the last axis (stable for large logits)."""
    return log_softmax(logits, axis=-1)


def win_vector(P: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """Per-response win rate ``w(y) = sum_y' anchor(y') P[y, y']`` against ``anchor``: (..., K)."""
    return np.einsum("...ij,...j->...i", P, anchor)


def win_rate(p: np.ndarray, P: np.ndarray, anchor: np.ndarray) -> np.ndarray:
    """Win rate of p against anchor, averaged over the prompt axis if p is (X, K); per-instance otherwise."""
    return np.einsum("...i,...i->...", p, win_vector(P, anchor))


def h_reward(P: np.ndarray, anchor: np.ndarray, h: str) -> np.ndarray:
    """h-reward ``R_h(y) = sum_y' anchor(y') h(P[y, y'])``, P clipped to [1e-6, 1 - 1e-6]: (..., K)."""
    return win_vector(H_FUNCTIONS[h](np.clip(P, CLIP, 1 - CLIP)), anchor)


def kl(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``KL(p || q)`` over the last axis (0 log 0 = 0)."""
    ratio = np.where(p > 0, p, 1.0) / np.where(p > 0, q, 1.0)
    return np.sum(np.where(p > 0, p * np.log(ratio), 0.0), axis=-1)


def tv(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Total-variation distance over the last axis."""
    return 0.5 * np.abs(p - q).sum(axis=-1)


def tabular_instance(rng: np.random.Generator, K: int, tau: float, gamma: float = 0.0
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One prompt: rewards r ~ N(0,1) (K,), ``p_ref = softmax(tau xi)`` and P (K, K), BT when gamma = 0."""
    r = rng.standard_normal(K)
    p_ref = policy(tau * rng.standard_normal(K))
    A = antisymmetric(rng.standard_normal((K, K)))
    P = intransitive_matrix(r, A, gamma) if gamma > 0 else bt_matrix(r)
    return r, p_ref, P


def contextual_instance(rng: np.random.Generator, X: int, d: int, K: int, gamma: float = 0.0
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """X prompts with features phi (X, d), rewards ``phi U`` (X, K), ``p_ref = softmax(phi V)`` (X, K), P (X, K, K).

    U and V have N(0, 1/d) entries, so rewards and reference logits have unit variance per (x, y).
    """
    phi = rng.standard_normal((X, d))
    U, V = rng.standard_normal((2, d, K)) / np.sqrt(d)
    r = phi @ U
    A = antisymmetric(rng.standard_normal((X, K, K)))
    P = intransitive_matrix(r, A, gamma) if gamma > 0 else bt_matrix(r)
    return phi, r, policy(phi @ V), P
