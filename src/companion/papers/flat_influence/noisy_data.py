"""The synthetic noisy-label task: Gaussian classes, symmetric or pair-flip label noise.

Class means ``mu_k ~ N(0, s^2 I)``, inputs ``x = mu_y + N(0, I)``. Noise flips *exactly*
``round(rate * n)`` labels, chosen uniformly without replacement: symmetric noise sends each to a
uniformly chosen *different* class, pair-flip sends class k to k + 1 (mod K).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NoisyTask:
    """Noisy training set, nested clean validation pool, clean test set (inputs float64)."""

    x_train: np.ndarray
    y_train: np.ndarray  # observed (noisy) labels
    y_train_clean: np.ndarray
    flipped: np.ndarray  # bool mask of mislabeled training points
    x_val: np.ndarray  # the pool; the first n rows are the n-point validation set
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def gaussian_classes(rng: np.random.Generator, means: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points with uniform labels and ``x = means[y] + N(0, I)``."""
    y = rng.integers(0, len(means), size=n)
    return means[y] + rng.standard_normal((n, means.shape[1])), y


def inject_noise(y: np.ndarray, rate: float, kind: str, n_classes: int,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Flip exactly ``round(rate * n)`` labels; returns (noisy labels, flipped mask)."""
    if kind not in ("symmetric", "pairflip"):
        raise ValueError(f"noise kind must be symmetric or pairflip, not {kind!r}")
    n = len(y)
    idx = rng.choice(n, int(round(rate * n)), replace=False)
    noisy = y.copy()
    if kind == "symmetric":
        noisy[idx] = (y[idx] + rng.integers(1, n_classes, size=len(idx))) % n_classes
    else:
        noisy[idx] = (y[idx] + 1) % n_classes
    flipped = np.zeros(n, dtype=bool)
    flipped[idx] = True
    return noisy, flipped


def make_task(rng: np.random.Generator, n_classes: int, n_features: int, class_sep: float,
              n_train: int, n_val_pool: int, n_test: int, noise_rate: float, noise_type: str) -> NoisyTask:
    """Draw class means, the three splits, and the training label noise."""
    means = class_sep * rng.standard_normal((n_classes, n_features))
    x_tr, y_tr = gaussian_classes(rng, means, n_train)
    x_va, y_va = gaussian_classes(rng, means, n_val_pool)
    x_te, y_te = gaussian_classes(rng, means, n_test)
    noisy, flipped = inject_noise(y_tr, noise_rate, noise_type, n_classes, rng)
    return NoisyTask(x_tr, noisy, y_tr, flipped, x_va, y_va, x_te, y_te)
