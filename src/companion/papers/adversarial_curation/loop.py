"""Part B: the sample-based self-consuming loop with a learned (and attacked) curation reward.

Per round: draw ``n`` samples from the current density model; build random pairs and genuine
Bradley-Terry labels; let the attacker flip a budget of labels; fit the rival's reward
``r_hat = theta^T psi`` by Newton; curate ``n`` K-wise Luce tournaments with ``r_hat``; refit the
density model (a KDE, or scikit-learn's GaussianMixture) on the kept samples, mixed with real
ones when ``lam < inf``. The genuine reward is never seen by the rival.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.mixture import GaussianMixture

from . import ring
from .attacks import attack_gap, attack_influence, attack_random, budget, flip
from .bradley_terry import RBF, fit_bt


@dataclass(frozen=True)
class LoopConfig:
    """Everything one run of the loop needs besides its seed."""

    n_samples: int = 1500
    n_pairs: int = 800
    k_curate: int = 4
    curation: str = "tournament"
    keep: float = 0.5
    rounds: int = 8
    gamma: float = 1.5
    reward_form: str = "distance"
    r_min: float = 3.0
    s_mode: float = 0.25
    density: str = "kde"
    kde_h: float = 0.1
    lam: float = float("inf")
    l2: float = 1e-2
    rbf: RBF = field(default_factory=RBF)
    newton_steps: int = 30
    attack: str = "none"
    budget: float = 0.0
    alpha: float = 1.0
    rank_by: str = "signed"
    chunks: int = 5
    eval_max: int = 1000
    snapshots: tuple[int, ...] = ()


def luce_tournaments(u: np.ndarray, n: int, K: int, rng: np.random.Generator) -> np.ndarray:
    """Winners of ``n`` tournaments of ``K`` uniformly drawn entrants, won with probability ``softmax(u)``."""
    entrants = rng.integers(0, len(u), (n, K))
    logits = u[entrants]
    gumbel = -np.log(-np.log(rng.uniform(size=(n, K))))
    return entrants[np.arange(n), np.argmax(logits + gumbel, axis=1)]


def softmax_without_replacement(u: np.ndarray, n_keep: int, rng: np.random.Generator) -> np.ndarray:
    """``n_keep`` distinct indices drawn one after another with probability ``softmax(u)`` over those left
    (the official curation); the ``n_keep`` largest ``u + Gumbel`` have exactly that law."""
    gumbel = -np.log(-np.log(rng.uniform(size=len(u))))
    return np.argsort(-(u + gumbel), kind="stable")[:n_keep]


def curate(cfg: LoopConfig, r_hat: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices of the kept samples: ``n`` K-wise Luce tournaments, or the official softmax sampling of a
    ``keep`` share without replacement."""
    if cfg.curation == "softmax":
        return softmax_without_replacement(r_hat, int(round(cfg.keep * len(r_hat))), rng)
    return luce_tournaments(r_hat, len(r_hat), cfg.k_curate, rng)


def preference_pairs(r: np.ndarray, n_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random pairs ``(i, j)``, ``i != j``, of samples with rewards ``r`` and labels ``o ~ Bern(sigmoid(r_j - r_i))``."""
    n = len(r)
    i = rng.integers(0, n, n_pairs)
    j = (i + rng.integers(1, n, n_pairs)) % n
    o = (rng.uniform(size=n_pairs) < expit(r[j] - r[i])).astype(float)
    return i, j, o


class Density:
    """The generative model refitted every round: a KDE (resample + Gaussian jitter) or a GMM."""

    def __init__(self, kind: str, kde_h: float, seed: int) -> None:
        self.kind, self.kde_h = kind, kde_h
        self.points: np.ndarray | None = None
        self.gmm = (GaussianMixture(8, covariance_type="full", reg_covar=1e-4, warm_start=True,
                                    random_state=seed, means_init=ring.modes())
                    if kind == "gmm" else None)

    def fit(self, x: np.ndarray) -> "Density":
        """Refit on training points ``x`` (n, 2)."""
        if self.gmm is not None:
            self.gmm.fit(x)
        else:
            self.points = x.copy()
        return self

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` fresh samples, shape (n, 2)."""
        if self.gmm is not None:
            comp = rng.choice(len(self.gmm.weights_), size=n, p=self.gmm.weights_ / self.gmm.weights_.sum())
            chol = np.linalg.cholesky(self.gmm.covariances_)[comp]
            return self.gmm.means_[comp] + np.einsum("nij,nj->ni", chol, rng.standard_normal((n, 2)))
        return self.points[rng.integers(0, len(self.points), n)] + self.kde_h * rng.standard_normal((n, 2))


def choose_flips(cfg: LoopConfig, x: np.ndarray, r: np.ndarray, psi: np.ndarray, i: np.ndarray,
                 j: np.ndarray, o: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices of the labels the configured attack flips this round."""
    n_flips = budget(cfg.budget, len(o))
    if cfg.attack == "none" or n_flips == 0:
        return np.zeros(0, dtype=int)
    if cfg.attack == "random":
        return attack_random(o, n_flips, rng)
    if cfg.attack == "gap":
        s = psi @ fit_bt(psi[j] - psi[i], o, cfg.l2, cfg.newton_steps)
        return attack_gap(s[i], s[j], n_flips)
    if cfg.attack == "gap_true":
        return attack_gap(r[i], r[j], n_flips)
    alpha = 0.8 if cfg.attack == "influence_alpha0.8" else cfg.alpha
    ev = rng.choice(len(x), size=min(cfg.eval_max, len(x)), replace=False)
    return attack_influence(psi[j] - psi[i], o, n_flips, cfg.l2, psi[ev], r[ev], alpha,
                            cfg.chunks, cfg.rank_by, cfg.newton_steps)


def run_loop(cfg: LoopConfig, seed: int) -> dict[str, Any]:
    """One run of ``cfg.rounds`` rounds; per-round statistics of the samples at rounds 0..T."""
    rng = np.random.default_rng([seed, 1])
    attack_rng = np.random.default_rng([seed, 2, int(round(cfg.budget * 1000))])
    real_rng = np.random.default_rng([seed, 3])
    model = Density(cfg.density, cfg.kde_h, seed)
    x = ring.sample_ring(cfg.n_samples, cfg.s_mode, np.random.default_rng([seed, 0]))
    if cfg.density == "gmm":
        x = model.fit(x).sample(cfg.n_samples, rng)
    out: dict[str, list] = {k: [] for k in ("reward", "exp_reward", "near", "cov", "fit_agree")}
    snaps = {}
    for t in range(cfg.rounds + 1):
        r = ring.reward(x, cfg.gamma, cfg.reward_form, cfg.r_min)
        out["reward"].append(float(r.mean()))
        out["exp_reward"].append(float(np.exp(r).mean()))
        out["near"].append(ring.near_mass(x))
        if t in cfg.snapshots:
            snaps[t] = x.copy()
        if t == cfg.rounds:
            break
        psi = cfg.rbf(x)
        i, j, o = preference_pairs(r, cfg.n_pairs, rng)
        labels = flip(o, choose_flips(cfg, x, r, psi, i, j, o, attack_rng))
        theta = fit_bt(psi[j] - psi[i], labels, cfg.l2, cfg.newton_steps)
        r_hat = psi @ theta
        out["cov"].append(float(np.cov(np.exp(r), np.exp(r_hat))[0, 1]))
        out["fit_agree"].append(float(np.corrcoef(r, r_hat)[0, 1]))
        kept = x[curate(cfg, r_hat, rng)]
        if np.isfinite(cfg.lam):
            n_real = int(round(len(kept) / (1 + cfg.lam)))
            kept = np.concatenate([kept[: len(kept) - n_real],
                                   ring.sample_ring(n_real, cfg.s_mode, real_rng)])
        x = model.fit(kept).sample(cfg.n_samples, rng)
    return {**{k: np.array(v) for k, v in out.items()}, "snapshots": snaps}


def true_reward_loop(n: int, rounds: int, gamma: float, s_mode: float, h: float, seed: int,
                     K: int = 2, form: str = "distance", r_min: float = 3.0) -> np.ndarray:
    """Mean genuine reward at rounds 0..T of a KDE loop curated with the true reward (K-wise Luce)."""
    rng = np.random.default_rng([seed, 4])
    x = ring.sample_ring(n, s_mode, rng)
    means = []
    for t in range(rounds + 1):
        r = ring.reward(x, gamma, form, r_min)
        means.append(r.mean())
        if t < rounds:
            kept = x[luce_tournaments(r, n, K, rng)]
            x = kept[rng.integers(0, n, n)] + h * rng.standard_normal((n, 2))
    return np.array(means)
