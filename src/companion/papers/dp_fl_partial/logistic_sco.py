"""Logistic-regression stochastic convex optimisation: a bounded, smooth, Lipschitz test problem.

Features are standard normal vectors pulled into the unit ball, labels are +-1 with
``P(y = 1 | x) = sigmoid(w_true . x)``. With ``||x|| <= 1`` the logistic loss is 1-Lipschitz
(G = 1) and 1/4-smooth (L = 1/4), the constants that private SCO methods need.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

LIPSCHITZ_G = 1.0
SMOOTHNESS_L = 0.25


def to_unit_ball(z: np.ndarray) -> np.ndarray:
    """Scale each vector (last axis) with norm above 1 back onto the unit sphere."""
    norm = np.sqrt((z * z).sum(-1, keepdims=True))
    return z / np.maximum(norm, 1.0)


def labels(x: np.ndarray, w_true: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Labels +-1 from uniforms ``u``: y = +1 when u < sigmoid(w_true . x); shapes broadcast on (..., d)."""
    return np.where(u < expit((x * w_true).sum(-1)), 1.0, -1.0)


def sample(rng: np.random.Generator, n: int, w_true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` labelled points: features (n, d) in the unit ball and labels (n,) in {-1, +1}."""
    x = to_unit_ball(rng.standard_normal((n, w_true.shape[-1])))
    return x, labels(x, w_true, rng.random(n))


def loss(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mean logistic loss of each row of ``w`` (R, d) on points x (N, d), y (N,); returns (R,)."""
    margins = (np.atleast_2d(w) @ x.T) * y
    return np.logaddexp(0.0, -margins).mean(-1)


def grad_batch(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample gradients at w (R, d) of points x (R, m, d), y (R, m); returns (R, m, d)."""
    margin = np.einsum("rmd,rd->rm", x, w)  # einsum: a sum over a short last axis is slow in numpy
    return (-y * expit(-y * margin))[..., None] * x


def newton_minimiser(x: np.ndarray, y: np.ndarray, iters: int = 50, tol: float = 1e-12) -> np.ndarray:
    """Unconstrained minimiser (d,) of the mean logistic loss on (x, y) by Newton's method."""
    w = np.zeros(x.shape[1])
    for _ in range(iters):
        p = expit(-y * (x @ w))
        g = -(x * (y * p)[:, None]).mean(0)
        h = (x * (p * (1 - p))[:, None]).T @ x / len(y)
        step = np.linalg.solve(h, g)
        w = w - step
        if np.linalg.norm(step) < tol:
            break
    return w
