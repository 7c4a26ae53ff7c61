"""Part A: the exact population dynamics of retraining on (adversarially) curated data, on a grid.

A user shown ``K`` samples of the current model ``p`` keeps ``x_k`` with Luce probability
``e^{u(x_k)} / sum_j e^{u(x_j)}``; the kept-sample density is ``p(x) H_u^p(x)`` with
``H_u^p(x) = K E_{x_2..x_K ~ p}[e^{u(x)} / (e^{u(x)} + sum_{j>=2} e^{u(x_j)})]`` and ``E_p[H] = 1``.
A fraction ``phi`` of curators uses the adversary's reward, so the curated density is
``q = p [(1 - phi) H_r + phi H_adv]``, and the unrestricted maximum-likelihood refit on real data
mixed with curated data (weight ``lam / (1 + lam)`` on the curated part) is
``p' = (p_data + lam q) / (1 + lam)`` (``lam = inf``: ``p' = q``).

Derived here (the spec's identity, checked numerically every round): for any ``f``,
``E_q f - E_p f = (1 - phi) Cov_p(f, H_r) + phi Cov_p(f, H_adv)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

INF = math.inf


def parse_k(text: str) -> float:
    """A tournament size from its parameter text: an integer >= 2, or ``inf`` (softmax re-weighting)."""
    return INF if text == "inf" else float(int(text))


def parse_lambda(text: str) -> float:
    """A synthetic-data weight ``lam`` from its parameter text: a positive number or ``inf``."""
    return INF if text == "inf" else float(text)


def sigma_matrix(u: np.ndarray) -> np.ndarray:
    """``S[i, j] = sigmoid(u_i - u_j)``: the pairwise win probabilities of a K = 2 tournament."""
    return expit(u[:, None] - u[None, :])


def _col(v: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``v`` (n,) shaped to broadcast against ``like`` (n,) or (n, m)."""
    return v if like.ndim == 1 else v[:, None]


def h_pair(S: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``H`` for K = 2: ``2 sum_j p_j sigmoid(u_i - u_j)`` (one mat-vec; ``p`` may hold densities as columns)."""
    return 2.0 * (S @ p)


def h_softmax(u: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``H`` for K = inf: ``e^u / E_p[e^u]`` (computed with the maximum shifted out)."""
    w = np.exp(u - u.max())
    return _col(w, p) / (w @ p)


def h_enumerate(u: np.ndarray, p: np.ndarray, K: int) -> np.ndarray:
    """``H`` for any K by enumerating every (K-1)-tuple of the support: exact, for tiny supports."""
    n = len(p)
    ev = np.exp(u - u.max())
    grids = np.meshgrid(*[np.arange(n)] * (K - 1), indexing="ij")
    idx = np.stack([g.ravel() for g in grids], axis=1)
    weight = np.prod(p[idx], axis=1)
    rest = ev[idx].sum(axis=1)
    return K * (ev[:, None] / (ev[:, None] + rest[None, :])) @ weight


def h_luce_mc(u: np.ndarray, p: np.ndarray, K: int, rng: np.random.Generator,
              draws: int = 4000, knots: int = 64) -> np.ndarray:
    """``H`` for finite K by Monte Carlo: ``draws`` sums of K-1 rivals' ``e^u``, interpolated over
    ``knots`` values of ``e^u``, and normalised so that ``E_p[H] = 1`` exactly."""
    ev = np.exp(u - u.max())
    idx = rng.choice(len(p), size=(draws, K - 1), p=p)
    rest = ev[idx].sum(axis=1)
    lo, hi = np.log(ev.min()), np.log(ev.max())
    grid = np.exp(np.linspace(lo, hi, knots)) if hi > lo else np.array([ev.max()])
    g = K * (grid[:, None] / (grid[:, None] + rest[None, :])).mean(axis=1)
    h = np.interp(np.log(ev), np.log(grid), g) if len(grid) > 1 else np.full(len(ev), g[0])
    return h / (p @ h)


@dataclass
class Curator:
    """One kind of curator (reward ``u`` on the grid, tournament size ``K``) that gives ``H_u^p``."""

    u: np.ndarray
    K: float
    rng: np.random.Generator | None = None
    draws: int = 4000
    S: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.K == 2:
            self.S = sigma_matrix(self.u)

    def h(self, p: np.ndarray) -> np.ndarray:
        """``H_u^p`` on the grid for the current density ``p``."""
        if self.K == INF:
            return h_softmax(self.u, p)
        if self.K == 2:
            return h_pair(self.S, p)
        if self.rng is None:
            raise ValueError("a finite K > 2 needs a Monte-Carlo generator")
        if p.ndim == 2:
            return np.stack([self.h(col) for col in p.T], axis=1)
        return h_luce_mc(self.u, p, int(self.K), self.rng, self.draws)


def cov(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``Cov_p(a, b) = E_p[a b] - E_p[a] E_p[b]`` for a probability vector ``p`` (or one per column)."""
    a, b = (_col(x, p) if x.ndim < p.ndim else x for x in (a, b))
    return (p * a * b).sum(axis=0) - (p * a).sum(axis=0) * (p * b).sum(axis=0)


def refit(p_data: np.ndarray, q: np.ndarray, lam: float) -> np.ndarray:
    """The unrestricted refit on real + curated data: ``(p_data + lam q) / (1 + lam)``; ``q`` if ``lam = inf``."""
    if lam == INF:
        return q
    return (_col(p_data, q) + lam * q) / (1.0 + lam)


def predicted_change(p: np.ndarray, p_data: np.ndarray, f: np.ndarray, h_r: np.ndarray,
                     h_adv: np.ndarray, phi: float | np.ndarray, lam: float) -> np.ndarray:
    """One-step change of ``E[f]`` from the covariance identity (with the real-data term if ``lam < inf``)."""
    curated = (1.0 - phi) * cov(p, f, h_r) + phi * cov(p, f, h_adv)
    if lam == INF:
        return curated
    return (lam * curated + (f @ p_data - f @ p)) / (1.0 + lam)


@dataclass
class Trajectory:
    """One run of the grid dynamics: per-round statistics, indexed by round 0..T."""

    exp_reward: np.ndarray  # E_{p_t}[e^r]
    reward: np.ndarray  # E_{p_t}[r]
    near: np.ndarray  # mass within NEAR of x*
    tv: np.ndarray  # TV(p_t, p_data)
    predicted: np.ndarray  # E_{p_t}[e^r] + predicted step, rounds 1..T (nan at 0)
    identity_err: np.ndarray  # |measured - predicted step|, rounds 1..T
    cov_adv: np.ndarray  # Cov_{p_t}(e^r, H_adv), rounds 0..T-1
    drift: float  # max |p_T - p_0|
    p_final: np.ndarray


def run_dynamics_batch(p0: np.ndarray, p_data: np.ndarray, r: np.ndarray, genuine: Curator,
                       adversary: Curator, phis: np.ndarray, lam: float, T: int,
                       near_mask: np.ndarray) -> list[Trajectory]:
    """Iterate ``p <- refit(p_data, p [(1-phi) H_r + phi H_adv], lam)`` for ``T`` rounds from ``p0``,
    for every ``phi`` at once (densities as columns, so K = 2 is one matrix product per round)."""
    f, near = np.exp(r), near_mask.astype(float)
    phis = np.asarray(phis, dtype=float)
    P = np.repeat(p0[:, None], len(phis), axis=1)
    stats = {k: [] for k in ("e", "r", "near", "tv", "pred", "err", "cov")}
    for t in range(T + 1):
        stats["e"].append(f @ P)
        stats["r"].append(r @ P)
        stats["near"].append(near @ P)
        stats["tv"].append(0.5 * np.abs(P - p_data[:, None]).sum(axis=0))
        if t == T:
            break
        h_r, h_adv = genuine.h(P), adversary.h(P)
        step = predicted_change(P, p_data, f, h_r, h_adv, phis, lam)
        Q = P * ((1.0 - phis) * h_r + phis * h_adv)
        Q /= Q.sum(axis=0)  # without it a rounding error in the total mass doubles every K = 2 round
        P_next = refit(p_data, Q, lam)
        stats["pred"].append(f @ P + step)
        stats["err"].append(np.abs((f @ P_next - f @ P) - step))
        stats["cov"].append(cov(P, f, h_adv))
        P = P_next
    arr = {k: np.array(v) for k, v in stats.items()}  # (rounds, len(phis))
    drift = np.abs(P - p0[:, None]).max(axis=0)
    nan = np.full((1, len(phis)), np.nan)
    pred = np.concatenate([nan, arr["pred"]])
    return [Trajectory(arr["e"][:, k], arr["r"][:, k], arr["near"][:, k], arr["tv"][:, k], pred[:, k],
                       arr["err"][:, k], arr["cov"][:, k], float(drift[k]), P[:, k]) for k in range(len(phis))]


def run_dynamics(p0: np.ndarray, p_data: np.ndarray, r: np.ndarray, genuine: Curator,
                 adversary: Curator, phi: float, lam: float, T: int, near_mask: np.ndarray) -> Trajectory:
    """One ``phi`` of :func:`run_dynamics_batch`."""
    return run_dynamics_batch(p0, p_data, r, genuine, adversary, np.array([phi]), lam, T, near_mask)[0]
