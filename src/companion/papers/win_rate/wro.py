"""Win-rate optimisation (WRO) in the tabular case: closed form, exact gradient ascent, NLHF, BT fit.

The KL-regularised h-win-rate objective of one prompt is
``J(p) = sum_y p(y) R_h(y) - beta KL(p || p_ref)``; its maximiser over all policies is
``p_ref exp(R_h / beta)`` normalised. Gradient ascent on the softmax logits reaches the same point
(the benchmark times both). NLHF is WRO against the model itself: its regularised self-play
equilibrium satisfies ``pi = softmax(log p_ref + (P pi) / beta)``, found by Nash mirror descent.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from companion.papers.win_rate.preferences import log_policy, policy, win_vector


def closed_form_optimum(p_ref: np.ndarray, R: np.ndarray, beta: float) -> np.ndarray:
    """The maximiser ``p_ref exp(R / beta) / Z`` of ``E_p[R] - beta KL(p || p_ref)``: (..., K)."""
    return policy(np.log(p_ref) + R / beta)


def objective(p: np.ndarray, R: np.ndarray, p_ref: np.ndarray, beta: float) -> np.ndarray:
    """``E_p[R] - beta KL(p || p_ref)`` over the last axis."""
    return np.sum(p * (R - beta * (np.log(p) - np.log(p_ref))), axis=-1)


def logit_gradient(z: np.ndarray, R: np.ndarray, log_ref: np.ndarray, beta: float) -> np.ndarray:
    """Exact gradient of the objective with respect to the softmax logits z: ``p (a - E_p a)``, a = R - beta log(p/p_ref)."""
    logp = log_policy(z)
    p = np.exp(logp)
    a = R - beta * (logp - log_ref)
    return p * (a - np.sum(p * a, axis=-1, keepdims=True))


def gradient_ascent(p_ref: np.ndarray, R: np.ndarray, beta: float, lr: float | None = None,
                    tol: float = 1e-12, max_iter: int = 200_000) -> tuple[np.ndarray, int]:
    """Exact-gradient ascent on the logits from ``log p_ref`` until max |grad| < tol; (policy, iterations).

    The default step ``1 / (beta max_y p(y))`` keeps the linearised map ``I - lr beta (diag p - p p^T)``
    contracting; coordinates with small p still converge slowly (the cost the closed form avoids).
    """
    log_ref = np.log(p_ref)
    z = log_ref.copy()
    for it in range(1, max_iter + 1):
        g = logit_gradient(z, R, log_ref, beta)
        z = z + (1.0 / (beta * policy(z).max()) if lr is None else lr) * g
        if np.max(np.abs(g)) < tol:
            return policy(z), it
    return policy(z), max_iter


def nash_mirror_descent(P: np.ndarray, p_ref: np.ndarray, beta: float, eta: float = 0.5,
                        tol: float = 1e-12, max_iter: int = 100_000) -> tuple[np.ndarray, int]:
    """Regularised self-play (NLHF) by mirror descent: ``pi <- pi^(1 - eta beta) p_ref^(eta beta) exp(eta P pi)``.

    Returns the last iterate and the number of iterations; the fixed point is exactly the
    regularised symmetric equilibrium ``pi = softmax(log p_ref + P pi / beta)``.
    """
    log_ref = np.log(p_ref)
    log_pi = log_ref.copy()
    for it in range(1, max_iter + 1):
        mix = (1 - eta * beta) * log_pi + eta * beta * log_ref
        new = log_policy(mix + eta * win_vector(P, np.exp(log_pi)))
        if np.max(np.abs(np.exp(new) - np.exp(log_pi))) < tol:
            return np.exp(new), it
        log_pi = new
    return np.exp(log_pi), max_iter


def self_play_residual(pi: np.ndarray, P: np.ndarray, p_ref: np.ndarray, beta: float) -> float:
    """TV between pi and the KL-regularised best response to itself (0 at the NLHF equilibrium)."""
    br = closed_form_optimum(p_ref, win_vector(P, pi), beta)
    return float(0.5 * np.abs(br - pi).sum(axis=-1).max())


def bt_fit(P: np.ndarray, weights: np.ndarray, iters: int = 100, tol: float = 1e-13) -> np.ndarray:
    """Bradley-Terry rewards (mean zero) maximising ``sum W[y,y'] P[y,y'] log sigmoid(r_y - r_y')`` by Newton.

    ``weights`` (K, K) symmetric: pair frequencies (``p_ref p_ref^T`` for population data). Single prompt.
    """
    K = P.shape[-1]
    r = np.zeros(K)
    for _ in range(iters):
        s = expit(r[:, None] - r[None, :])
        grad = -np.sum(weights * (P - s), axis=1)
        W = weights * s * (1 - s)
        H = np.diag(W.sum(axis=1)) - W
        step = np.linalg.lstsq(H + np.ones((K, K)) / K, grad, rcond=None)[0]
        r = r - step
        r -= r.mean()
        if np.max(np.abs(step)) < tol:
            break
    return r
