"""The Gaussian-8 toy world: the ring of eight modes, its grid density, and the rewards on it.

The genuine users prefer points close to mode 0 (``x* = (2, 0)``); the adversaries' rewards are
the reverse (``anti``), the genuine reward plus a smooth random field (``aligned-noisy``), or the
reward of another mode (``rotated``).
"""

from __future__ import annotations

import numpy as np

RADIUS = 2.0
N_MODES = 8
X_STAR = np.array([RADIUS, 0.0])
NEAR = 0.9  # "mass near x*": within this distance of x*
ADVERSARIES = ("anti", "aligned-noisy", "rotated")
ROTATED_MODE = 2  # the rotated adversary prefers the mode at angle pi/2


def modes() -> np.ndarray:
    """The eight mode centres on the circle of radius 2 at angles k*pi/4, shape (8, 2)."""
    angles = np.arange(N_MODES) * np.pi / 4
    return RADIUS * np.stack([np.cos(angles), np.sin(angles)], axis=1)


def sample_ring(n: int, s_mode: float, rng: np.random.Generator) -> np.ndarray:
    """``n`` points of the Gaussian-8 mixture (equal weights, isotropic std ``s_mode``), shape (n, 2)."""
    k = rng.integers(0, N_MODES, n)
    return modes()[k] + s_mode * rng.standard_normal((n, 2))


def grid_points(G: int, half_width: float = 3.2) -> np.ndarray:
    """The ``G x G`` grid on ``[-half_width, half_width]^2`` as points, shape (G*G, 2)."""
    ax = np.linspace(-half_width, half_width, G)
    xx, yy = np.meshgrid(ax, ax, indexing="xy")
    return np.stack([xx.ravel(), yy.ravel()], axis=1)


def ring_density(points: np.ndarray, s_mode: float) -> np.ndarray:
    """The Gaussian-8 density at ``points`` normalised to a probability vector over them."""
    d2 = ((points[:, None, :] - modes()[None]) ** 2).sum(-1)
    w = np.exp(-d2 / (2 * s_mode**2)).sum(1)
    return w / w.sum()


def reward(points: np.ndarray, gamma: float, form: str = "distance", r_min: float = 0.0,
           target: np.ndarray = X_STAR) -> np.ndarray:
    """Genuine reward ``-gamma |x - target|`` or the official clamp ``-gamma max(0, |x - target| - r_min)``."""
    d = np.linalg.norm(points - target, axis=-1)
    if form == "clamp":
        d = np.maximum(0.0, d - r_min)
    return -gamma * d


def smooth_field(points: np.ndarray, rng: np.random.Generator, n_bumps: int = 30,
                 length: float = 0.8, half_width: float = 3.2) -> np.ndarray:
    """A smooth random field (sum of Gaussian bumps with N(0,1) weights), scaled to max |.| = 1."""
    centres = rng.uniform(-half_width, half_width, (n_bumps, 2))
    weights = rng.standard_normal(n_bumps)
    d2 = ((points[:, None, :] - centres[None]) ** 2).sum(-1)
    f = np.exp(-d2 / (2 * length**2)) @ weights
    return f / np.abs(f).max()


def adversary_reward(kind: str, points: np.ndarray, r: np.ndarray, gamma: float,
                     noise: np.ndarray | None = None, noise_amp: float = 0.7) -> np.ndarray:
    """The malicious curators' reward on ``points``: ``anti``, ``aligned-noisy`` or ``rotated``."""
    if kind == "anti":
        return -r
    if kind == "aligned-noisy":
        if noise is None:
            raise ValueError("aligned-noisy needs a noise field")
        return r + noise_amp * noise
    if kind == "rotated":
        return reward(points, gamma, target=modes()[ROTATED_MODE])
    raise ValueError(f"unknown adversary {kind!r}; allowed: {', '.join(ADVERSARIES)}")


def near_mass(points: np.ndarray, p: np.ndarray | None = None) -> float:
    """Probability (weights ``p``, or the empirical share) within ``NEAR`` of ``x*``."""
    near = np.linalg.norm(points - X_STAR, axis=-1) <= NEAR
    return float(near.mean() if p is None else p[near].sum())
