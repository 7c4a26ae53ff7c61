"""DPO in the tabular case, the exact KL shell, and ordering discordance.

DPO's loss on pairs (y_w, y_l) with weights ``C[y_w, y_l]`` (empirical pair frequencies, or
``p_ref p_ref^T * P`` for the population) is ``sum C softplus(-beta (u_w - u_l))`` with
``u = log p_theta - log p_ref``; the log-normaliser cancels, so it depends on the logits only
through differences. Everything is vectorised over a leading axis of independent instances.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from companion.papers.win_rate.preferences import kl, policy


def pair_weights(winners: np.ndarray, losers: np.ndarray, K: int) -> np.ndarray:
    """Empirical frequency matrix ``C[w, l]`` of n (winner, loser) pairs: (K, K), sums to 1."""
    C = np.zeros((K, K))
    np.add.at(C, (winners, losers), 1.0)
    return C / len(winners)


def population_weights(P: np.ndarray, p_ref: np.ndarray) -> np.ndarray:
    """Population pair weights ``p_ref(y) p_ref(y') P[y, y']``: (..., K, K), sums to 1."""
    return p_ref[..., :, None] * p_ref[..., None, :] * P


def dpo_loss(log_p: np.ndarray, log_ref: np.ndarray, C: np.ndarray, beta: float) -> np.ndarray:
    """DPO loss ``sum C[w,l] softplus(-beta (u_w - u_l))`` (log-sigmoid form, no overflow): (...)."""
    u = log_p - log_ref
    z = beta * (u[..., :, None] - u[..., None, :])
    return np.sum(C * np.logaddexp(0.0, -z), axis=(-2, -1))


def pair_form(C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pair weights C (..., K, K) over the pairs a < b: the difference operator D (K, pairs) with
    ``(u D)_ab = u_a - u_b``, ``C_ab + C_ba`` and ``C_ba`` (both (..., pairs))."""
    K = C.shape[-1]
    a, b = np.triu_indices(K, 1)
    D = np.zeros((K, len(a)))
    D[a, np.arange(len(a))], D[b, np.arange(len(a))] = 1.0, -1.0
    return D, C[..., a, b] + C[..., b, a], C[..., b, a]


def dpo_grad(theta: np.ndarray, log_ref: np.ndarray, C: np.ndarray, beta: float,
             pairs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Gradient of :func:`dpo_loss` with respect to the softmax logits theta: (..., K).

    Summed over the pairs a < b only (``sigmoid(-z_ba) = 1 - sigmoid(-z_ab)``), half the sigmoids of the
    full K x K sum; ``pairs`` is :func:`pair_form` of C, computed when not given.
    """
    D, both, reverse = pair_form(C) if pairs is None else pairs
    t = both * expit(-beta * ((theta - log_ref) @ D)) - reverse
    return -beta * (t @ D.T)


def train_dpo(log_ref: np.ndarray, C: np.ndarray, beta: float, lr: float, steps: int, record_every: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Full-batch gradient descent on the logits from ``log p_ref``.

    Returns the final logits (..., K), the recorded step numbers (T,) and the recorded logits (T, ..., K),
    step 0 included.
    """
    theta = log_ref.copy()
    pairs = pair_form(C)
    steps_at, thetas = [0], [theta.copy()]
    for t in range(1, steps + 1):
        theta = theta - lr * dpo_grad(theta, log_ref, C, beta, pairs)
        if t % record_every == 0:
            steps_at.append(t)
            thetas.append(theta.copy())
    return theta, np.array(steps_at), np.stack(thetas)


def shell_policies(rng: np.random.Generator, p_ref: np.ndarray, kappa: float, n: int, iters: int = 200
                   ) -> tuple[np.ndarray, np.ndarray]:
    """n policies ``softmax(log p_ref + c xi)`` with c found by bisection so that ``KL(p || p_ref) = kappa``.

    Returns the policies (n, K) and their KL (n,). KL grows monotonically in c >= 0 along each ray,
    towards ``-log p_ref(argmax xi)`` (the point mass the ray tends to): a ray whose limit is <= kappa
    never meets the shell, so it is redrawn (random numbers are drawn only when there is such a ray).
    Raises ValueError when no ray can reach kappa (every response has p_ref >= exp(-kappa)).
    """
    log_ref = np.log(p_ref)
    if -log_ref.min() <= kappa:
        raise ValueError(f"KL shell at kappa = {kappa}: unreachable, the largest KL to a point mass is "
                         f"{-log_ref.min():.4g}")
    xi = rng.standard_normal((n, len(p_ref)))
    short = -log_ref[xi.argmax(axis=1)] <= kappa
    while short.any():
        xi[short] = rng.standard_normal((int(short.sum()), len(p_ref)))
        short = -log_ref[xi.argmax(axis=1)] <= kappa

    def kl_at(c: np.ndarray) -> np.ndarray:
        return kl(policy(log_ref + c[:, None] * xi), p_ref)

    lo, hi = np.zeros(n), np.ones(n)
    while np.any(kl_at(hi) < kappa):
        hi = np.where(kl_at(hi) < kappa, 2 * hi, hi)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        below = kl_at(mid) < kappa
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        if np.max(hi - lo) < 1e-15:
            break
    c = 0.5 * (lo + hi)
    p = policy(log_ref + c[:, None] * xi)
    return p, kl(p, p_ref)


def pair_signs(a: np.ndarray) -> np.ndarray:
    """``sign(a_i - a_j)`` over the pairs i < j (row-major): (n (n - 1) / 2,)."""
    i, j = np.triu_indices(len(a), 1)
    return np.sign(a[i] - a[j])


def discordance(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of pairs i < j that a and b order oppositely, ``(1 - Kendall tau_a) / 2`` without ties."""
    return float(np.mean(pair_signs(a) * pair_signs(b) < 0))
