"""An offline OOD-detection benchmark from data bundled with scikit-learn (8x8 digits, sample photos).

In-distribution: digits ``0 .. id_classes-1``. OOD sets, all 8x8 images with values in [0, 16]:
``near`` (the held-out digits), ``photo`` (grey patches of the bundled photos, block-averaged),
``noise`` (uniform pixels) and ``invert`` (16 - x of the ID test digits).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from sklearn.datasets import load_digits, load_sample_images

from companion.papers.ood_dcc import OOD_SETS


@dataclass(frozen=True)
class DigitsSplit:
    """ID train/test images (n, 64) with labels, and the held-out digits (near-OOD)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_near: np.ndarray


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    d = load_digits()
    return d.data.astype(np.float64), d.target.astype(np.int64)


@lru_cache(maxsize=1)
def _grey_photos() -> tuple[np.ndarray, ...]:
    return tuple(img.astype(np.float64).mean(axis=2) for img in load_sample_images().images)


def split_digits(id_classes: int, rng: np.random.Generator, train_frac: float = 0.6) -> DigitsSplit:
    """Digits ``< id_classes`` split train/test by a seeded permutation; the rest are near-OOD."""
    X, y = _digits()
    is_id = y < id_classes
    Xi, yi = X[is_id], y[is_id]
    perm = rng.permutation(len(Xi))
    n_train = int(round(train_frac * len(Xi)))
    tr, te = perm[:n_train], perm[n_train:]
    return DigitsSplit(Xi[tr], yi[tr], Xi[te], yi[te], X[~is_id])


def photo_patches(n: int, rng: np.random.Generator, crop: int = 32) -> np.ndarray:
    """``n`` random grey crops of the bundled photos, block-averaged to 8x8 and rescaled to [0, 16]."""
    photos = _grey_photos()
    out = np.empty((n, 64))
    block = crop // 8
    for i in range(n):
        img = photos[rng.integers(len(photos))]
        r = rng.integers(img.shape[0] - crop + 1)
        c = rng.integers(img.shape[1] - crop + 1)
        small = img[r:r + crop, c:c + crop].reshape(8, block, 8, block).mean(axis=(1, 3))
        span = max(small.max() - small.min(), 1e-9)
        out[i] = 16.0 * (small - small.min()).ravel() / span
    return out


def uniform_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` images of i.i.d. U(0, 16) pixels, shape (n, 64)."""
    return rng.uniform(0.0, 16.0, size=(n, 64))


def invert(x: np.ndarray) -> np.ndarray:
    """``16 - x``: the same pixel statistics, the wrong structure."""
    return 16.0 - x


def rot90(x: np.ndarray) -> np.ndarray:
    """Each 8x8 image (rows of ``x``) rotated by 90 degrees."""
    return np.rot90(x.reshape(-1, 8, 8), axes=(1, 2)).reshape(-1, 64)


def ood_sets(split: DigitsSplit, names: tuple[str, ...], rng: np.random.Generator,
             n_far: int = 600) -> dict[str, np.ndarray]:
    """The requested OOD image sets, each (n, 64) in [0, 16]."""
    make = {
        "near": lambda: split.x_near,
        "photo": lambda: photo_patches(n_far, rng),
        "noise": lambda: uniform_noise(n_far, rng),
        "invert": lambda: invert(split.x_test),
    }
    unknown = set(names) - set(make)
    if unknown:
        raise ValueError(f"unknown OOD sets {sorted(unknown)}; allowed: {', '.join(OOD_SETS)}")
    return {name: make[name]() for name in names}
