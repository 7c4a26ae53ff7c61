"""Label-flip attacks on the rival's pairwise preference data, at a budget of ``floor(b * n_pairs)`` flips.

Threat model: the attacker controls labels, not samples; ``gap`` and ``influence`` know the genuine
reward ``r`` and the rival's reward-model class (RBF features, BT loss, L2 weight).

- ``random``: flip uniformly chosen labels (baseline).
- ``gap``: flip the pairs with the largest gap ``|r_hat(x) - r_hat(y)|`` of the reward model fitted on
  the clean labels (the official ``attack_dist`` ranks by its reward model's gap); model-free in the
  sense that it predicts nothing about the retrained model. ``gap_true`` ranks by the genuine reward's
  gap ``|r(x) - r(y)|`` instead.
- ``influence``: predict, through the implicit function theorem, how flipping each label moves the
  misalignment objective ``O = alpha Cov(e^r, e^{r_hat}) + (1 - alpha) mean (r - r_hat)^2`` at the
  refitted reward model, and flip greedily in chunks, refitting between chunks. Ranked by the signed
  predicted decrease of ``O`` (our choice) or by ``|change|`` as the official code does.
"""

from __future__ import annotations

import math

import numpy as np

from .bradley_terry import bt_hessian, fit_bt


def budget(b: float, n_pairs: int) -> int:
    """The number of labels an attacker with budget fraction ``b`` may flip: ``floor(b n_pairs)``."""
    return int(math.floor(b * n_pairs + 1e-9))


def flip(o: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """A copy of labels ``o`` with the entries ``idx`` flipped."""
    out = o.copy()
    out[idx] = 1.0 - out[idx]
    return out


def attack_random(o: np.ndarray, n_flips: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``n_flips`` distinct uniformly chosen labels."""
    return rng.choice(len(o), size=n_flips, replace=False)


def attack_gap(s_x: np.ndarray, s_y: np.ndarray, n_flips: int) -> np.ndarray:
    """Indices of the ``n_flips`` pairs with the largest score gap ``|s_y - s_x|`` (stable order)."""
    return np.argsort(-np.abs(s_y - s_x), kind="stable")[:n_flips]


def misalignment(theta: np.ndarray, psi: np.ndarray, r: np.ndarray, alpha: float) -> tuple[float, np.ndarray]:
    """``O(theta)`` on evaluation samples (features ``psi``, genuine rewards ``r``) and its gradient."""
    s = psi @ theta
    a = np.exp(r) - np.exp(r).mean()
    es = np.exp(s)
    cov = float(np.mean(a * es))
    resid = r - s
    value = alpha * cov + (1 - alpha) * float(np.mean(resid**2))
    grad = alpha * psi.T @ (a * es) / len(r) - (1 - alpha) * 2 * psi.T @ resid / len(r)
    return value, grad


def predicted_changes(theta: np.ndarray, D: np.ndarray, o: np.ndarray, l2: float,
                      grad_o: np.ndarray) -> np.ndarray:
    """First-order change of ``O`` if label ``i`` alone were flipped: ``-grad_O^T H^-1 (2 o_i - 1) d_i / n``."""
    v = np.linalg.solve(bt_hessian(theta, D, l2), grad_o)
    return -(2 * o - 1) * (D @ v) / len(o)


def attack_influence(D: np.ndarray, o: np.ndarray, n_flips: int, l2: float, psi_eval: np.ndarray,
                     r_eval: np.ndarray, alpha: float = 1.0, chunks: int = 5, rank_by: str = "signed",
                     steps: int = 30) -> np.ndarray:
    """Indices of ``n_flips`` labels chosen greedily in ``chunks`` rounds by predicted change of ``O``."""
    flipped = np.zeros(len(o), dtype=bool)
    labels = o.copy()
    theta = None
    sizes = np.diff(np.linspace(0, n_flips, chunks + 1).round().astype(int))
    for size in sizes:
        if size == 0:
            continue
        theta = fit_bt(D, labels, l2, steps, theta)
        _, grad_o = misalignment(theta, psi_eval, r_eval, alpha)
        delta = predicted_changes(theta, D, labels, l2, grad_o)
        score = delta if rank_by == "signed" else -np.abs(delta)
        score[flipped] = np.inf
        pick = np.argsort(score, kind="stable")[:size]
        flipped[pick] = True
        labels = flip(labels, pick)
    return np.flatnonzero(flipped)
