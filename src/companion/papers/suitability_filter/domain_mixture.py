"""A K-class Gaussian mixture whose samples carry a latent domain that sets their noise scale.

Class means are drawn once per task; a sample of class ``y`` in domain ``g`` is
``mu_y + sigma_g * xi`` with ``xi ~ N(0, I)``. Reweighting the domains changes difficulty (and so a
classifier's accuracy) without touching the labels, like strata of a deployment population; extra
isotropic noise, a translation or an unseen domain scale give covariate shifts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MixtureTask:
    """Class means (K, d) and the noise scale of each latent domain (G,)."""

    means: np.ndarray
    sigmas: np.ndarray

    @property
    def n_classes(self) -> int:
        """Number of classes K."""
        return self.means.shape[0]


def make_task(n_classes: int, n_features: int, class_sep: float, sigmas: tuple[float, ...],
              rng: np.random.Generator) -> MixtureTask:
    """Draw class means ``mu_k ~ N(0, class_sep^2 I_d)``."""
    means = rng.normal(0.0, class_sep, size=(n_classes, n_features))
    return MixtureTask(means, np.asarray(sigmas, dtype=float))


def sample(task: MixtureTask, n: int, weights: np.ndarray, rng: np.random.Generator, *,
           sigma: float | None = None, noise: float = 0.0,
           shift: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``n`` labelled points: x (n, d), y (n,), domain (n,); ``sigma`` forces one noise scale."""
    d = task.means.shape[1]
    y = rng.integers(0, task.n_classes, size=n)
    domain = rng.choice(len(task.sigmas), size=n, p=weights)
    scale = np.full(n, sigma) if sigma is not None else task.sigmas[domain]
    x = task.means[y] + scale[:, None] * rng.normal(size=(n, d))
    if noise > 0:
        x = x + noise * rng.normal(size=(n, d))
    if shift is not None:
        x = x + shift
    return x, y, domain


def unit_vector(d: int, rng: np.random.Generator) -> np.ndarray:
    """A direction drawn uniformly on the unit sphere in R^d."""
    v = rng.normal(size=d)
    return v / np.linalg.norm(v)
