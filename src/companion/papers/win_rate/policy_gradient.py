"""Parametric WRO for experiment E4: a log-linear policy trained by REINFORCE and by exact gradients.

Policy ``p_Theta(.|x) = softmax(log p_ref(.|x) + phi(x)^T Theta)``, Theta (d, K), Theta = 0 is p_ref.
Objective ``J = E_x[E_p R_h - beta KL(p || p_ref)]``. Every function is vectorised over a leading
axis of runs (each run its own Theta, h-table and beta), so a whole budget cell of the grid steps
together.
"""

from __future__ import annotations

import numpy as np

from companion.papers.win_rate.preferences import log_policy


def logits(theta: np.ndarray, phi: np.ndarray, log_ref: np.ndarray) -> np.ndarray:
    """Policy logits ``log p_ref + phi Theta``: Theta (..., d, K) -> (..., X, K)."""
    return log_ref + np.einsum("xd,...dk->...xk", phi, theta)


def objective(theta: np.ndarray, phi: np.ndarray, log_ref: np.ndarray, R: np.ndarray, beta: np.ndarray
              ) -> np.ndarray:
    """``J(Theta)`` per run: R (..., X, K) the h-rewards, beta (...,): (...)."""
    logp = log_policy(logits(theta, phi, log_ref))
    p = np.exp(logp)
    per_x = np.sum(p * (R - beta[..., None, None] * (logp - log_ref)), axis=-1)
    return per_x.mean(axis=-1)


def exact_gradient(theta: np.ndarray, phi: np.ndarray, log_ref: np.ndarray, R: np.ndarray,
                   beta: np.ndarray) -> np.ndarray:
    """Exact ``dJ/dTheta`` per run: ``phi^T [p (a - E_p a)] / X``, a = R - beta log(p/p_ref): (..., d, K)."""
    logp = log_policy(logits(theta, phi, log_ref))
    p = np.exp(logp)
    a = R - beta[..., None, None] * (logp - log_ref)
    g = p * (a - np.sum(p * a, axis=-1, keepdims=True))
    return np.einsum("xd,...xk->...dk", phi, g) / len(phi)


def ascend_exact(phi: np.ndarray, log_ref: np.ndarray, R: np.ndarray, beta: np.ndarray, steps: int,
                 lr: float, theta: np.ndarray | None = None) -> np.ndarray:
    """Full-batch exact gradient ascent from Theta = 0 (or ``theta``) for ``steps`` steps: (..., d, K)."""
    shape = R.shape[:-2] + (phi.shape[1], R.shape[-1])
    theta = np.zeros(shape) if theta is None else theta.copy()
    for _ in range(steps):
        theta += lr * exact_gradient(theta, phi, log_ref, R, beta)
    return theta


def reinforce_gradient(theta: np.ndarray, phi: np.ndarray, log_ref: np.ndarray, hP: np.ndarray,
                       h_index: np.ndarray, beta: np.ndarray, batch: int, rng: np.random.Generator
                       ) -> np.ndarray:
    """One REINFORCE estimate of dJ/dTheta per run (runs,) from ``batch`` (prompt, y ~ p, y' ~ p_ref) draws.

    The reward is ``h(P[y, y']) - beta log(p(y)/p_ref(y))`` (oracle judge), ``hP`` (H, X, K, K) the h-tables,
    ``h_index`` (runs,) each run's table. The baseline is the mean of the *other* rewards in the batch
    (the batch mean times B/(B-1)), which keeps the estimator unbiased.
    """
    n_runs, (X, d), K = len(theta), phi.shape, log_ref.shape[-1]
    x = rng.integers(0, X, size=(n_runs, batch))
    logp = log_policy(log_ref[x] + np.einsum("rbd,rdk->rbk", phi[x], theta))
    p = np.exp(logp)
    y = (rng.random((n_runs, batch, 1)) > np.cumsum(p, axis=-1)).sum(axis=-1).clip(max=K - 1)
    q = np.exp(log_ref[x])
    y2 = (rng.random((n_runs, batch, 1)) > np.cumsum(q, axis=-1)).sum(axis=-1).clip(max=K - 1)
    lp_y = np.take_along_axis(logp, y[..., None], -1)[..., 0]
    lq_y = log_ref[x, y]
    reward = hP[h_index[:, None], x, y, y2] - beta[:, None] * (lp_y - lq_y)
    adv = (reward - reward.mean(axis=1, keepdims=True)) * batch / (batch - 1)
    score = -p
    np.put_along_axis(score, y[..., None], np.take_along_axis(score, y[..., None], -1) + 1.0, -1)
    return np.einsum("rbd,rbk->rdk", phi[x], adv[..., None] * score) / batch


def train_reinforce(phi: np.ndarray, log_ref: np.ndarray, hP: np.ndarray, h_index: np.ndarray,
                    beta: np.ndarray, lr: np.ndarray, batch: int, steps: int, rng: np.random.Generator
                    ) -> np.ndarray:
    """Stochastic ascent ``Theta += lr g_hat`` for ``steps`` steps from Theta = 0, all runs at once: (runs, d, K)."""
    theta = np.zeros((len(h_index), phi.shape[1], log_ref.shape[-1]))
    for _ in range(steps):
        theta += lr[:, None, None] * reinforce_gradient(theta, phi, log_ref, hP, h_index, beta, batch, rng)
    return theta


def r_squared(y: np.ndarray, X: np.ndarray) -> float:
    """R^2 of the least-squares fit of y (n,) on the columns of X (n, m) plus an intercept."""
    A = np.column_stack([np.ones(len(y)), X])
    coef = np.linalg.lstsq(A, y, rcond=None)[0]
    resid = y - A @ coef
    return float(1.0 - resid @ resid / np.sum((y - y.mean()) ** 2))


def one_hot(labels: np.ndarray) -> np.ndarray:
    """Indicator columns of every level of ``labels`` but the first (n, levels - 1)."""
    levels = np.unique(labels)
    return (labels[:, None] == levels[None, 1:]).astype(float)
