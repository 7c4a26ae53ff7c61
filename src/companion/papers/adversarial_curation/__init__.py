"""Self-Consuming Generative Models with Adversarially Curated Data (Wei & Zhang, ICML 2025).

arXiv: https://arxiv.org/abs/2505.09768 (PMLR 267); official code: osu-srml/Adversarial-Curation
(no licence file: read, not copied).

Reproduced at small scale on the paper's Gaussian-8 toy:

- Part A, exact population dynamics on a grid: users keep one of K samples by a Luce
  (Bradley-Terry) choice, a fraction phi of curators is malicious, and the model is refitted
  (unrestricted maximum likelihood) on curated data mixed with real data. We check every round
  the covariance identity that drives the paper's stability results, the robustness to an
  adversary whose reward co-varies positively with the users', the sharp phi = 1/2 threshold of
  the anti-aligned adversary with K = 2 (and its absence at K = inf), and the anchoring by real
  data (lam = 1).
- Part B, the sample-based self-consuming loop: the rival platform learns its curation reward
  (Bradley-Terry on RBF features, Newton; checked against scikit-learn's LogisticRegression) from
  pairwise labels that an attacker corrupts (random, largest-gap and influence-function flips at
  equal budgets), curates K-wise tournaments and refits a KDE or Gaussian-mixture density.
- The grid dynamics against the sample loop curated with the true reward (its infinite-sample
  limit).

Written by hand because no library does them: the grid dynamics, the Luce tournaments, the BT
Newton fit (with the exact Hessian the influence attack needs) and the three attacks. The
density model of the full preset is scikit-learn's GaussianMixture; the paper's DDPM is replaced
by a KDE / GMM (a CPU-sized density model; the curation and attack logic do not depend on it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from companion import claims, runtime
from companion.claims import Claim, Verdict
from companion.params import BaseParams, ParamError, param
from companion.plotting import figure, mean_sd_line

from . import dynamics, ring
from .attacks import ATTACKS
from .bradley_terry import RBF, fit_bt
from .dynamics import INF, Curator, parse_k, parse_lambda, run_dynamics, run_dynamics_batch
from .loop import LoopConfig, preference_pairs, run_loop, true_reward_loop

SLUG = "adversarial-curation"
BELOW_HALF = (0.1, 0.3)  # phi values of the anti-aligned threshold claim, below 1/2
ABOVE_HALF = (0.6, 0.8)  # ... and above 1/2
CLAIM_BUDGET = 0.25  # the budget at which the attacks are compared
ANCHOR_LAMBDA = "1"  # the real-data anchoring claim's lam
ANCHOR_KDE_H = 0.05  # KDE jitter of the grid-vs-samples loop
SIGN_MIN_STEP = 0.01  # the sign check uses rounds with |delta mean e^r| above this
ALIGNED_K = ("2", "inf")  # the aligned-noise claims: the deterministic kernels (K > 2 uses Monte Carlo)


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of both parts; defaults are the quick preset."""

    seeds: int = param(4, lo=3, hi=64, help="number of seeds of the sample-based loop (Part B)")
    grid_G: int = param(32, lo=16, hi=64, help="Part A: grid points per axis on [-3.2, 3.2]^2")
    K_list: tuple[str, ...] = param(("2", "inf"), help="Part A: tournament sizes, integers >= 2 or inf")
    phi_grid: tuple[float, ...] = param((0.0, 0.1, 0.3, 0.4, 0.5, 0.6, 0.8), lo=0.0, hi=0.95,
                                        help="Part A: malicious fractions phi")
    phi_aligned: tuple[float, ...] = param((0.1, 0.3, 0.5, 0.7, 0.9), lo=0.0, hi=0.95,
                                           help="Part A: phi values of the aligned-noise robustness check")
    lambda_list: tuple[str, ...] = param(("inf", "1"), help="Part A: synthetic-data weights lam > 0 or inf")
    T_exact: int = param(30, lo=5, hi=300, help="Part A: rounds of the grid dynamics")
    gamma_reward: float = param(1.5, lo=0.2, hi=5.0, help="reward scale: r(x) = -gamma |x - x*|")
    reward_form: str = param("distance", choices=("distance", "clamp"),
                             help="distance, or the official clamp -gamma max(0, |x - x*| - r_min)")
    r_min: float = param(0.5, lo=0.0, hi=3.0, help="radius of the clamp-form reward's plateau")
    s_mode_grid: float = param(0.3, lo=0.05, hi=0.5, help="Part A: mode std of the grid data density")
    s_mode: float = param(0.25, lo=0.05, hi=0.5, help="Part B: mode std of the Gaussian-8 data")
    noise_amp: float = param(0.7, lo=0.0, hi=3.0, help="aligned-noisy adversary: r + noise_amp * smooth field")
    mc_draws: int = param(4000, lo=200, hi=100000, help="Part A, finite K > 2: Monte-Carlo draws per round")
    N_samples: int = param(1500, lo=500, hi=100000, help="Part B: samples per round")
    N_pairs: int = param(800, lo=200, hi=50000, help="Part B: labelled preference pairs per round")
    K_curate: int = param(4, lo=2, hi=64, help="Part B: entrants per curation tournament")
    T_loop: int = param(8, lo=3, hi=100, help="Part B: retraining rounds")
    density_model: str = param("kde", choices=("kde", "gmm"), help="Part B: density model refitted each round")
    kde_h: float = param(0.1, lo=0.01, hi=0.5, help="Part B: KDE jitter std h")
    lambda_loop: str = param("inf", help="Part B: synthetic-data weight lam > 0 or inf (inf: no real data)")
    attacks: tuple[str, ...] = param(("none", "random", "gap", "influence"), choices=ATTACKS,
                                     help="Part B: attacks (none = clean loop)")
    budgets: tuple[float, ...] = param((0.1, 0.25), lo=0.0, hi=0.49, help="Part B: fractions of labels flipped")
    alpha: float = param(1.0, lo=0.0, hi=1.0, help="influence attack: weight of the covariance term")
    rank_by: str = param("signed", choices=("signed", "abs"),
                         help="influence attack: signed predicted decrease, or |change| as the official code")
    l2_reward: float = param(1e-2, lo=1e-6, hi=10.0, help="L2 weight of the BT reward fit")
    rbf_grid: int = param(5, lo=2, hi=12, help="RBF centres per axis of the reward features")
    rbf_bw: float = param(1.2, lo=0.1, hi=5.0, help="RBF bandwidth")
    anchor_n: int = param(20000, lo=1000, hi=500000, help="grid-vs-samples check: samples per round")
    anchor_rounds: int = param(5, lo=1, hi=30, help="grid-vs-samples check: rounds compared")
    anchor_seeds: int = param(10, lo=1, hi=64, help="grid-vs-samples check: seeds of the sample loop (cheap)")

    PRESETS = {
        "full": {"seeds": 10, "grid_G": 50, "K_list": ("2", "4", "inf"),
                 "phi_grid": tuple(round(0.05 * i, 2) for i in range(19)),
                 "lambda_list": ("inf", "4", "1", "0.25"), "T_exact": 60, "N_samples": 5000,
                 "N_pairs": 2000, "T_loop": 20, "density_model": "gmm",
                 "attacks": ("none", "random", "gap", "influence", "influence_alpha0.8"),
                 "budgets": (0.05, 0.1, 0.2, 0.25, 0.4), "anchor_seeds": 20},
        # the paper's own settings (a DDPM on Gaussian-8, CIFAR-10) need a GPU and downloads:
        # `paper` is the largest synthetic setting of this page, not the paper's experiment
        "paper": {"seeds": 20, "grid_G": 64, "K_list": ("2", "4", "inf"),
                  "phi_grid": tuple(round(0.05 * i, 2) for i in range(19)),
                  "lambda_list": ("inf", "4", "1", "0.25"), "T_exact": 100, "N_samples": 10000,
                  "N_pairs": 4000, "T_loop": 30, "density_model": "gmm",
                  "attacks": ("none", "random", "gap", "influence", "influence_alpha0.8"),
                  "budgets": (0.05, 0.1, 0.2, 0.25, 0.4), "anchor_seeds": 20},
    }

    def __post_init__(self) -> None:
        for k in self.K_list:
            if k != "inf" and not (k.isdigit() and int(k) >= 2):
                raise ParamError(f"parameter 'K_list': value {k!r}; allowed: integers >= 2 or inf")
        for name in ("lambda_list", "lambda_loop"):
            values = getattr(self, name)
            for v in (values,) if isinstance(values, str) else values:
                if not _positive_or_inf(v):
                    raise ParamError(f"parameter {name!r}: value {v!r}; allowed: a number > 0 or inf")
        needs = {
            "K_list": ("2" in self.K_list, "must contain 2 (the threshold claim is at K = 2)"),
            "phi_grid": (all(_has(self.phi_grid, v) for v in (*BELOW_HALF, 0.5, *ABOVE_HALF)),
                         "must contain 0.1, 0.3, 0.5, 0.6 and 0.8 (the threshold claim)"),
            "lambda_list": ("inf" in self.lambda_list and ANCHOR_LAMBDA in self.lambda_list,
                            "must contain inf and 1 (the threshold and anchoring claims)"),
            "attacks": ({"none", "random", "influence"} <= set(self.attacks),
                        "must contain none, random and influence (the attack claims)"),
            "budgets": (_has(self.budgets, CLAIM_BUDGET), "must contain 0.25 (the attack claims)"),
            "anchor_rounds": (self.anchor_rounds <= self.T_exact, "must be <= T_exact"),
        }
        for name, (ok, why) in needs.items():
            if not ok:
                raise ParamError(f"parameter {name!r}: value {getattr(self, name)!r}; allowed: {why}")


def _positive_or_inf(text: str) -> bool:
    """Whether ``text`` is ``inf`` or a positive finite number."""
    try:
        v = float(text)
    except ValueError:
        return False
    return text == "inf" or (math.isfinite(v) and v > 0)


def _has(values: tuple[float, ...], v: float) -> bool:
    """Whether ``v`` is among ``values`` (to 1e-9)."""
    return any(abs(x - v) < 1e-9 for x in values)


@dataclass
class Results:
    """Everything the page shows."""

    params: Params
    grid: pd.DataFrame  # Part A: one row per (adversary, K, lam, phi)
    traj: dict[tuple[str, str, str, float], dynamics.Trajectory] = field(repr=False)
    loop: pd.DataFrame  # Part B: one row per (seed, attack, budget, round)
    snapshots: dict[tuple[str, float], dict[int, np.ndarray]] = field(repr=False)
    anchor: pd.DataFrame  # grid vs sample loop, E[r] per round
    bt_check: dict[str, float]
    seconds: dict[str, float]


# ----------------------------------------------------------------------------- Part A

def grid_world(params: Params) -> dict[str, Any]:
    """The grid, data density, genuine reward, near-x* mask and the adversaries' rewards."""
    pts = ring.grid_points(params.grid_G)
    r = ring.reward(pts, params.gamma_reward, params.reward_form, params.r_min)
    noise = ring.smooth_field(pts, np.random.default_rng([params.seed, 7]))
    advs = {a: ring.adversary_reward(a, pts, r, params.gamma_reward, noise, params.noise_amp)
            for a in ring.ADVERSARIES}
    near = np.linalg.norm(pts - ring.X_STAR, axis=1) <= ring.NEAR
    return {"points": pts, "p_data": ring.ring_density(pts, params.s_mode_grid), "r": r,
            "adv": advs, "near": near}


def run_grid(params: Params) -> tuple[pd.DataFrame, dict]:
    """Part A over adversaries x K x lam x phi; a summary row per run and the trajectories."""
    w = grid_world(params)
    p_data, r = w["p_data"], w["r"]
    e_data = float(p_data @ np.exp(r))
    rows, traj = [], {}
    rng = np.random.default_rng([params.seed, 8])
    for k_text in params.K_list:
        K = parse_k(k_text)
        genuine = Curator(r, K, rng, params.mc_draws)
        for adv in ring.ADVERSARIES:
            adversary = Curator(w["adv"][adv], K, rng, params.mc_draws)
            phis = sorted(set(params.phi_grid) | (set(params.phi_aligned) if adv == "aligned-noisy" else set()))
            for lam_text in params.lambda_list:
                lam = parse_lambda(lam_text)
                runs = run_dynamics_batch(p_data, p_data, r, genuine, adversary, np.array(phis), lam,
                                          params.T_exact, w["near"])
                for phi, tr in zip(phis, runs):
                    traj[(adv, k_text, lam_text, phi)] = tr
                    steps = np.diff(tr.exp_reward)
                    rows.append({
                        "adversary": adv, "K": k_text, "lam": lam_text, "phi": phi,
                        "near_0": tr.near[0], "near_T": tr.near[-1], "reward_0": tr.reward[0],
                        "reward_T": tr.reward[-1], "exp_reward_T": tr.exp_reward[-1],
                        "identity_err": tr.identity_err.max(), "min_cov_adv": tr.cov_adv.min(),
                        "min_step": steps.min(), "drift": tr.drift, "max_tv": tr.tv.max(),
                        "min_exp_ratio": tr.exp_reward.min() / (e_data / (1 + lam)) if lam != INF else np.nan,
                    })
    return pd.DataFrame(rows), traj


def run_anchor(params: Params) -> pd.DataFrame:
    """E[r] per round of the K = 2 grid dynamics (true reward, no adversary, lam = inf) and of the
    KDE sample loop curated with the true reward, one row per (source, seed, round)."""
    w = grid_world(params)
    genuine = Curator(w["r"], 2.0)
    tr = run_dynamics(w["p_data"], w["p_data"], w["r"], genuine, genuine, 0.0, INF,
                      params.anchor_rounds, w["near"])
    rows = [{"source": "grid", "seed": -1, "round": t, "reward": v} for t, v in enumerate(tr.reward)]
    for s in range(params.seed, params.seed + params.anchor_seeds):
        means = true_reward_loop(params.anchor_n, params.anchor_rounds, params.gamma_reward,
                                 params.s_mode_grid, ANCHOR_KDE_H, s, 2, params.reward_form, params.r_min)
        rows += [{"source": "samples", "seed": s, "round": t, "reward": v} for t, v in enumerate(means)]
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- Part B

def loop_config(params: Params, attack: str, b: float) -> LoopConfig:
    """The loop configuration of one (attack, budget) run."""
    return LoopConfig(
        n_samples=params.N_samples, n_pairs=params.N_pairs, k_curate=params.K_curate, rounds=params.T_loop,
        gamma=params.gamma_reward, reward_form=params.reward_form, r_min=params.r_min, s_mode=params.s_mode,
        density=params.density_model, kde_h=params.kde_h, lam=parse_lambda(params.lambda_loop),
        l2=params.l2_reward, rbf=RBF(params.rbf_grid, params.rbf_bw), attack=attack, budget=b,
        alpha=params.alpha, rank_by=params.rank_by,
        snapshots=(0, params.T_loop // 2, params.T_loop))


def runs_of(params: Params) -> list[tuple[str, float]]:
    """The (attack, budget) runs of one seed: the clean loop once, each attack at each budget."""
    return [("none", 0.0)] * ("none" in params.attacks) + [
        (a, b) for a in params.attacks if a != "none" for b in params.budgets]


def run_seed(params: Params, seed: int) -> tuple[list[dict], dict]:
    """Every (attack, budget) loop of one seed: per-round rows and the sample snapshots."""
    rows, snaps = [], {}
    for attack, b in runs_of(params):
        with threadpool_limits(1):  # small matrices: BLAS threads only contend for the cores
            out = run_loop(loop_config(params, attack, b), seed)
        snaps[(attack, b)] = out["snapshots"]
        for t in range(params.T_loop + 1):
            rows.append({"seed": seed, "attack": attack, "budget": b, "round": t,
                         "reward": out["reward"][t], "exp_reward": out["exp_reward"][t],
                         "near": out["near"][t],
                         "cov": out["cov"][t] if t < params.T_loop else np.nan,
                         "fit_corr": out["fit_agree"][t] if t < params.T_loop else np.nan})
    return rows, snaps


def bt_agreement(params: Params) -> dict[str, float]:
    """Newton's BT fit against scikit-learn's LogisticRegression on one round of pairs (max |diff|)."""
    rng = np.random.default_rng([params.seed, 9])
    x = ring.sample_ring(params.N_samples, params.s_mode, rng)
    r = ring.reward(x, params.gamma_reward, params.reward_form, params.r_min)
    psi = RBF(params.rbf_grid, params.rbf_bw)(x)
    i, j, o = preference_pairs(r, params.N_pairs, rng)
    D = psi[j] - psi[i]
    ours = fit_bt(D, o, params.l2_reward)
    ref = sklearn_bt(D, o, params.l2_reward)
    return {"max_abs_diff": float(np.abs(ours - ref).max()), "theta_scale": float(np.abs(ref).max())}


def sklearn_bt(D: np.ndarray, o: np.ndarray, l2: float) -> np.ndarray:
    """The BT fit by scikit-learn: ``LogisticRegression(fit_intercept=False, C=1/(l2 n))``."""
    model = LogisticRegression(fit_intercept=False, C=1.0 / (l2 * len(o)), tol=1e-12, max_iter=10000)
    return model.fit(D, o.astype(int)).coef_.ravel()


def run(params: Params) -> Results:
    """Part A on the grid, the grid-vs-samples anchor, and Part B over seeds."""
    runtime.limit_threads(1)
    seconds = {}
    t0 = time.perf_counter()
    with threadpool_limits(1):  # one BLAS thread: the processes over seeds share the cores instead
        grid, traj = run_grid(params)
    seconds["part_a"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with threadpool_limits(1):
        anchor = run_anchor(params)
    seconds["anchor"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    work = params.seeds * len(runs_of(params)) * params.N_samples * params.T_loop
    workers = 1 if work < 5e6 and params.density_model == "kde" else None
    outs = runtime.parallel_map(run_seed, [(params, s) for s in params.seed_list()], workers=workers)
    seconds["part_b"] = time.perf_counter() - t0
    rows = [row for o in outs for row in o[0]]
    return Results(params, grid, traj, pd.DataFrame(rows), outs[0][1], anchor,
                   bt_agreement(params), seconds)


# ----------------------------------------------------------------------------- claims

CLAIMS = [
    Claim("identity", "Part A: the measured one-step change of E[e^r] equals the covariance formula "
          "(1-phi) Cov(e^r, H_r) + phi Cov(e^r, H_adv) (plus the real-data term) in every round of every "
          "setting (max abs error)", "derived here from the paper's curation model; theorem constants not read",
          1e-10, "<=", kind="exact"),
    Claim("aligned-cov", "Part A, aligned-noisy adversary (r + noise), lam = inf, every phi, K in {2, inf}: the "
          "sufficient condition Cov_p(e^r, H_adv) >= 0 holds in every round (min over rounds)",
          "non-negative covariance keeps retraining aligned (robustness result)", 0.0, ">=", kind="exact"),
    Claim("aligned-monotone", "Part A, same runs: the genuine E[e^r] never decreases (min one-step change, "
          "rounding allowance 1e-12)", "expected genuine reward increases under aligned curation",
          -1e-12, ">=", kind="exact"),
    Claim("anti-below-half", "Part A, K = 2, anti-aligned adversary, lam = inf: for phi in {0.1, 0.3} the final "
          "mass within 0.9 of x* is >= 0.95 (min over the two)", "phi < 1/2 stays aligned (prototype 1.000 / 0.999)",
          0.95, ">=", kind="exact"),
    Claim("anti-half-frozen", "Part A, K = 2, anti, phi = 1/2: the model does not move, max |p_T - p_0| "
          "(a consistency check: H_r + H_-r = 2)", "phi = 1/2 is the threshold (prototype 7.5e-17)",
          1e-12, "<=", kind="exact"),
    Claim("anti-above-half", "Part A, K = 2, anti, lam = inf: for phi in {0.6, 0.8} the final mass near x* "
          "is <= 0.05 (max over the two)", "phi > 1/2 is driven to the worst region (prototype 0.000 / 0.000)",
          0.05, "<=", kind="exact"),
    Claim("anti-above-half-reward", "Part A, same runs: E_T[r] - E_0[r] < 0 (max over phi in {0.6, 0.8})",
          "the genuine reward decreases (prototype -3.87 -> -6.23 / -7.18)", 0.0, "<=", kind="exact"),
    Claim("anchor-tv", "Part A, lam = 1, anti adversary, every phi and K: TV(p_t, p_data) <= lam/(1+lam) = 0.5 "
          "in every round (max over rounds and runs; a consistency check of the refit)",
          "real data keeps the model anchored", 0.5 + 1e-12, "<=", kind="exact"),
    Claim("anchor-reward", "Part A, same runs: E_{p_t}[e^r] / (E_{p_data}[e^r] / 2) >= 1 in every round "
          "(min; a consistency check of the refit)", "real data keeps the model anchored", 1.0, ">=",
          kind="exact"),
    Claim("bt-newton-sklearn", "Part B: the Newton BT fit equals scikit-learn's LogisticRegression "
          "(max abs coefficient difference on one round of pairs)", "reference implementation", 1e-4, "<=",
          kind="exact"),
    Claim("grid-matches-samples", "the K = 2 grid dynamics is the sample loop's limit: mean E[r] of a KDE loop "
          "curated with the true reward (N = anchor_n) within 0.05 of the grid in rounds 0..anchor_rounds "
          "(max abs difference of the seed-mean trajectory)", "spec prototype: max difference 0.03", 0.05, "<=",
          kind="exact"),
    Claim("cov-sign", "Part B: sign(Cov_samples(e^r, e^r_hat)) = sign(change of mean e^r) in the rounds with "
          "|change| > 0.01, all attacks and budgets (share per seed)",
          "covariance sign governs alignment (prototype 120/120)", 0.9, ">="),
    Claim("clean-improves", "Part B, clean loop: final E[r] - initial E[r] (the precondition of the attack "
          "comparison)", "curation with genuine preferences raises the reward (Ferbach et al.)", 0.0, ">="),
    Claim("random-robust", "Part B, budget 0.25: final E[r] of random flips - clean final E[r] (paired)",
          "random flips barely hurt (prototype -0.85 vs -0.66)", -0.5, ">="),
    Claim("influence-below-initial", "Part B, budget 0.25: final E[r] under the influence attack - initial "
          "E[r]", "targeted attacks misalign the model (prototype -4.68 vs -3.88)", 0.0, "<="),
    Claim("influence-vs-random", "Part B, budget 0.25: final E[r] influence - random (paired)",
          "targeted attacks misalign far more than random flips at equal budget (prototype -4.68 vs -0.85)",
          -2.0, "<="),
]


def final_rewards(results: Results) -> pd.DataFrame:
    """Final-round E[r] per seed (rows) and (attack, budget) (columns), and the initial E[r]."""
    lp = results.loop
    final = lp[lp["round"] == results.params.T_loop].pivot_table(index="seed", columns=["attack", "budget"],
                                                                 values="reward")
    final[("initial", 0.0)] = lp[lp["round"] == 0].groupby("seed")["reward"].mean()
    return final


def sign_agreement(results: Results) -> pd.DataFrame:
    """Per (seed, attack, budget, round): the covariance, the next change of mean e^r, and agreement."""
    lp = results.loop.sort_values(["seed", "attack", "budget", "round"]).copy()
    lp["step"] = lp.groupby(["seed", "attack", "budget"])["exp_reward"].shift(-1) - lp["exp_reward"]
    lp = lp.dropna(subset=["step", "cov"])
    lp["counted"] = lp["step"].abs() > SIGN_MIN_STEP
    lp["agree"] = np.sign(lp["cov"]) == np.sign(lp["step"])
    return lp


def claim_values(results: Results) -> dict[str, Any]:
    """The value(s) of every claim's metric."""
    g = results.grid
    k2_anti = g[(g.K == "2") & (g.adversary == "anti") & (g.lam == "inf")].set_index("phi")
    pick = lambda phis: k2_anti.loc[[p for p in k2_anti.index if _has(phis, p)]]  # noqa: E731
    aligned = g[(g.adversary == "aligned-noisy") & (g.lam == "inf") & g.K.isin(ALIGNED_K)
                & g.phi.apply(lambda p: _has(results.params.phi_aligned, p))]
    anchored = g[(g.adversary == "anti") & (g.lam == ANCHOR_LAMBDA)]
    anc = results.anchor
    grid_r = anc[anc.source == "grid"].set_index("round")["reward"]
    sample_r = anc[anc.source == "samples"].groupby("round")["reward"].mean()
    fr = final_rewards(results)
    b = next(x for x in results.params.budgets if _has((CLAIM_BUDGET,), x))
    sa = sign_agreement(results)
    counted = sa[sa.counted]
    share = counted.groupby("seed")["agree"].mean().reindex(results.params.seed_list())
    return {
        "identity": float(g.identity_err.max()),
        "aligned-cov": float(aligned.min_cov_adv.min()),
        "aligned-monotone": float(aligned.min_step.min()),
        "anti-below-half": float(pick(BELOW_HALF).near_T.min()),
        "anti-half-frozen": float(pick((0.5,)).drift.max()),
        "anti-above-half": float(pick(ABOVE_HALF).near_T.max()),
        "anti-above-half-reward": float((pick(ABOVE_HALF).reward_T - pick(ABOVE_HALF).reward_0).max()),
        "anchor-tv": float(anchored.max_tv.max()),
        "anchor-reward": float(anchored.min_exp_ratio.min()),
        "bt-newton-sklearn": results.bt_check["max_abs_diff"],
        "grid-matches-samples": float((sample_r - grid_r).abs().max()),
        "cov-sign": list(share.fillna(np.nan)),
        "clean-improves": list(fr[("none", 0.0)] - fr[("initial", 0.0)]),
        "random-robust": list(fr[("random", b)] - fr[("none", 0.0)]),
        "influence-below-initial": list(fr[("influence", b)] - fr[("initial", 0.0)]),
        "influence-vs-random": list(fr[("influence", b)] - fr[("random", b)]),
    }


def check(results: Results) -> list[Verdict]:
    """Evaluate every claim."""
    return claims.evaluate_all(CLAIMS, claim_values(results))


def threshold_table(results: Results) -> pd.DataFrame:
    """Part A, anti adversary, lam = inf: final mass near x* per phi (columns) and K (rows)."""
    g = results.grid
    g = g[(g.adversary == "anti") & (g.lam == "inf") & g.phi.apply(lambda p: _has(results.params.phi_grid, p))]
    return g.pivot_table(index="K", columns="phi", values="near_T").round(3)


def attack_table(results: Results) -> pd.DataFrame:
    """Part B: mean (sd) over seeds of the final E[r] per attack (rows) and budget (columns)."""
    fr = final_rewards(results)
    rows = {}
    for (attack, b) in fr.columns:
        rows.setdefault(attack, {})[b] = f"{fr[(attack, b)].mean():.2f} ({fr[(attack, b)].std():.2f})"
    df = pd.DataFrame(rows).T
    df.columns = [("any" if b == 0 else f"b = {b:g}") for b in df.columns]
    return df.fillna("")


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary: key Part A numbers, Part B final rewards, timings."""
    fr = final_rewards(results).mean()
    g = results.grid
    kinf = g[(g.adversary == "anti") & (g.lam == "inf") & (g.K == "inf")].set_index("phi")["near_T"]
    sa = sign_agreement(results)
    anc = results.anchor
    return {
        "part_a_runs": int(len(g)),
        "anti_K2_near_T": {f"{p:g}": float(v) for p, v in
                           g[(g.adversary == "anti") & (g.lam == "inf") & (g.K == "2")].set_index("phi")["near_T"].items()},
        "anti_Kinf_near_T": {f"{p:g}": float(v) for p, v in kinf.items()},
        "final_reward": {f"{a}@{b:g}": float(v) for (a, b), v in fr.items()},
        "sign_rounds_counted": int(sa.counted.sum()),
        "sign_rounds_agree": int((sa.counted & sa.agree).sum()),
        "grid_reward": [float(v) for v in anc[anc.source == "grid"]["reward"]],
        "sample_reward": [float(v) for v in anc[anc.source == "samples"].groupby("round")["reward"].mean()],
        "seconds": {k: round(v, 2) for k, v in results.seconds.items()},
    }


# ----------------------------------------------------------------------------- figures

def plot_threshold(results: Results) -> Figure:
    """Heat maps of the final mass near x* over phi x adversary, one panel per K (lam = inf)."""
    g = results.grid[(results.grid.lam == "inf")]
    g = g[g.phi.apply(lambda p: _has(results.params.phi_grid, p))]
    ks = list(results.params.K_list)
    fig, axes = figure(len(ks), 1, width=3.8, height=2.2)
    for ax, k in zip(axes, ks):
        tab = g[g.K == k].pivot_table(index="adversary", columns="phi", values="near_T")
        im = ax.imshow(tab.values, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(tab.columns)), [f"{p:g}" for p in tab.columns], fontsize=7)
        ax.set_yticks(range(len(tab.index)), tab.index)
        ax.set_xlabel(r"malicious fraction $\phi$")
        ax.set_title(f"K = {k}: mass near x* after {results.params.T_exact} rounds")
        ax.grid(False)
    fig.colorbar(im, ax=axes[-1], shrink=0.8)
    return fig


def plot_trajectories(results: Results, phis: tuple[float, ...] = (0.1, 0.3, 0.5, 0.6, 0.8)) -> Figure:
    """E_{p_t}[e^r] against t for the anti adversary (lam = inf), lines, with the covariance
    prediction of each step as markers; one panel per K."""
    ks = list(results.params.K_list)
    fig, axes = figure(len(ks), 1, width=3.4, height=2.8)
    for ax, k in zip(axes, ks):
        for phi in phis:
            tr = results.traj[("anti", k, "inf", next(p for p in results.params.phi_grid if _has((phi,), p)))]
            line, = ax.plot(tr.exp_reward, label=rf"$\phi$ = {phi:g}")
            ax.plot(np.arange(len(tr.predicted)), tr.predicted, "o", ms=3, mfc="none", color=line.get_color())
        ax.set_xlabel("round t")
        ax.set_title(f"K = {k}")
    axes[0].set_ylabel(r"$E_{p_t}[e^{r}]$ (lines), covariance prediction (o)")
    axes[0].legend()
    return fig


def plot_densities(results: Results, attacks_shown: tuple[str, ...] = ("none", "random", "gap", "influence")) -> Figure:
    """2-D histograms of the first seed's samples at rounds 0, T/2 and T, one row per attack (b = 0.25)."""
    b = next(x for x in results.params.budgets if _has((CLAIM_BUDGET,), x))
    keys = [(a, 0.0 if a == "none" else b) for a in attacks_shown if (a, 0.0 if a == "none" else b) in results.snapshots]
    rounds = sorted(results.snapshots[keys[0]])
    fig, axes = figure(len(rounds), len(keys), width=2.0, height=2.0)
    edges = np.linspace(-3.5, 3.5, 57)
    for row, key in enumerate(keys):
        for col, t in enumerate(rounds):
            ax = axes[row * len(rounds) + col]
            x = results.snapshots[key][t]
            ax.hist2d(x[:, 0], x[:, 1], bins=[edges, edges], cmap="magma", density=True)
            ax.plot(*ring.X_STAR, "c+", ms=8)
            ax.set_xticks([]), ax.set_yticks([])
            ax.grid(False)
            if row == 0:
                ax.set_title(f"round {t}")
            if col == 0:
                ax.set_ylabel("clean" if key[0] == "none" else f"{key[0]} (b = {key[1]:g})")
    return fig


def plot_loop_rewards(results: Results) -> Figure:
    """Mean genuine reward E[r] against round per attack (mean +- sd over seeds), one panel per budget."""
    lp = results.loop
    fig, axes = figure(len(results.params.budgets), 1, width=3.2, height=2.6)
    rounds = np.arange(results.params.T_loop + 1)
    for ax, b in zip(axes, results.params.budgets):
        for attack in results.params.attacks:
            sel = lp[(lp.attack == attack) & (lp.budget == (0.0 if attack == "none" else b))]
            runs = sel.pivot(index="seed", columns="round", values="reward").values
            mean_sd_line(ax, rounds, runs, "clean" if attack == "none" else attack)
        ax.set_title(f"budget b = {b:g}")
        ax.set_xlabel("round")
    axes[0].set_ylabel("E[r] of the samples")
    axes[0].legend()
    return fig


def plot_cov_sign(results: Results) -> Figure:
    """Cov_samples(e^r, e^r_hat) against the next change of mean e^r, every round, attack and seed."""
    sa = sign_agreement(results)
    fig, (ax,) = figure(1, 1, width=4.6, height=3.4)
    for attack in results.params.attacks:
        s = sa[sa.attack == attack]
        ax.scatter(s["cov"], s["step"], s=8, alpha=0.6, label="clean" if attack == "none" else attack)
    ax.axhline(0, color="k", lw=0.6)
    ax.axvline(0, color="k", lw=0.6)
    ax.axhspan(-SIGN_MIN_STEP, SIGN_MIN_STEP, color="grey", alpha=0.2, lw=0)
    ax.set_xlabel(r"Cov$_{samples}(e^{r}, e^{\hat r_t})$")
    ax.set_ylabel(r"mean $e^r$ at t+1 minus at t")
    ax.legend()
    return fig


def plot_grid_vs_samples(results: Results) -> Figure:
    """E[r] per round: the K = 2 grid dynamics and the sample loop curated with the true reward."""
    anc = results.anchor
    fig, (ax,) = figure(1, 1, width=4.0, height=2.8)
    grid_r = anc[anc.source == "grid"]
    runs = anc[anc.source == "samples"].pivot(index="seed", columns="round", values="reward").values
    mean_sd_line(ax, grid_r["round"].values, runs, f"sample loop (N = {results.params.anchor_n}, KDE h = {ANCHOR_KDE_H})")
    ax.plot(grid_r["round"], grid_r["reward"], "ko", ms=4, mfc="none", label=f"grid, G = {results.params.grid_G}")
    ax.set_xlabel("round")
    ax.set_ylabel("E[r]")
    ax.legend()
    return fig
