"""The rival platform's curation reward: a Bradley-Terry model ``r_hat(x) = theta^T psi(x)`` on RBF features.

Fitted by Newton's method on the L2-regularised logistic loss of the pairwise labels (convex; the
exact Hessian is also what the influence attack needs). The same optimum as scikit-learn's
``LogisticRegression(fit_intercept=False, C=1/(l2 * n_pairs))`` on difference features.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, log_expit


@dataclass(frozen=True)
class RBF:
    """Gaussian radial basis features on a ``size x size`` grid of centres over ``[-3, 3]^2``."""

    size: int = 5
    bandwidth: float = 1.2
    half_width: float = 3.0

    def centres(self) -> np.ndarray:
        """The ``size**2`` centres, shape (size**2, 2)."""
        ax = np.linspace(-self.half_width, self.half_width, self.size)
        xx, yy = np.meshgrid(ax, ax, indexing="xy")
        return np.stack([xx.ravel(), yy.ravel()], axis=1)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Features ``exp(-|x - c|^2 / (2 bw^2))`` of points (n, 2), shape (n, size**2)."""
        d2 = ((x[:, None, :] - self.centres()[None]) ** 2).sum(-1)
        return np.exp(-d2 / (2 * self.bandwidth**2))


def bt_loss(theta: np.ndarray, D: np.ndarray, o: np.ndarray, l2: float) -> float:
    """Mean logistic loss of labels ``o`` (1: the second item preferred) on differences ``D`` + ``l2/2 |theta|^2``."""
    z = D @ theta
    return float(-np.mean(o * log_expit(z) + (1 - o) * log_expit(-z)) + 0.5 * l2 * theta @ theta)


def bt_grad(theta: np.ndarray, D: np.ndarray, o: np.ndarray, l2: float) -> np.ndarray:
    """Gradient of :func:`bt_loss`: ``mean((sigmoid(z) - o) d) + l2 theta``."""
    return D.T @ (expit(D @ theta) - o) / len(o) + l2 * theta


def bt_hessian(theta: np.ndarray, D: np.ndarray, l2: float) -> np.ndarray:
    """Hessian of :func:`bt_loss`: ``mean(s (1 - s) d d^T) + l2 I``."""
    s = expit(D @ theta)
    return (D * (s * (1 - s))[:, None]).T @ D / len(D) + l2 * np.eye(D.shape[1])


def fit_bt(D: np.ndarray, o: np.ndarray, l2: float, steps: int = 30,
           theta0: np.ndarray | None = None) -> np.ndarray:
    """Newton's method (step halved until the loss does not rise) for the regularised BT loss from
    ``theta0`` (zeros): ``theta`` (dim,)."""
    theta = np.zeros(D.shape[1]) if theta0 is None else theta0.copy()
    loss = bt_loss(theta, D, o, l2)
    for _ in range(steps):
        g = bt_grad(theta, D, o, l2)
        if np.abs(g).max() < 1e-12:
            break
        direction = np.linalg.solve(bt_hessian(theta, D, l2), g)
        t = 1.0
        while t > 1e-4:
            new_loss = bt_loss(theta - t * direction, D, o, l2)
            if new_loss <= loss + 1e-15:
                break
            t *= 0.5
        theta, loss = theta - t * direction, new_loss
    return theta
