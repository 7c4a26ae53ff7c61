"""The experiment: Part A on the grid, the grid-vs-samples anchor, Part B over seeds, and the values of
every claim and control.

Part A is deterministic except for the aligned-noisy adversary's field (drawn from the base seed) and
the Monte-Carlo kernel of finite K > 2. Part B runs, per seed, the clean loop and every attack at
every budget from the same initial samples and random stream, so attack differences are paired.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from companion import runtime
from companion.papers.adversarial_curation import (
    ABOVE_HALF,
    ANCHOR_LAMBDA,
    BELOW_HALF,
    CLAIM_BUDGET,
    ROTATED_CONTROL_PHI,
    ROTATED_PHI,
    Params,
    _has,
)

from . import dynamics, ring
from .bradley_terry import RBF, fit_bt
from .dynamics import INF, Curator, parse_k, parse_lambda, run_dynamics, run_dynamics_batch
from .loop import LoopConfig, preference_pairs, run_loop, true_reward_loop

ANCHOR_KDE_H = 0.05  # KDE jitter of the grid-vs-samples loop
SIGN_MIN_STEP = 0.01  # the sign check uses rounds with |delta mean e^r| above this
OFFICIAL_ATTACKS = ("none", "random", "gap", "influence_alpha0.8")  # runs on the official curation
ALIGNED_K = ("2", "inf")  # the aligned-noise checks: the deterministic kernels (K > 2 uses Monte Carlo)


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

def loop_config(params: Params, attack: str, b: float, curation: str = "tournament") -> LoopConfig:
    """The loop configuration of one (attack, budget, curation) run."""
    return LoopConfig(
        n_samples=params.N_samples, n_pairs=params.N_pairs, k_curate=params.K_curate, curation=curation,
        keep=params.keep, rounds=params.T_loop,
        gamma=params.gamma_reward, reward_form=params.reward_form, r_min=params.r_min, s_mode=params.s_mode,
        density=params.density_model, kde_h=params.kde_h, lam=parse_lambda(params.lambda_loop),
        l2=params.l2_reward, rbf=RBF(params.rbf_grid, params.rbf_bw), attack=attack, budget=b,
        alpha=params.alpha, rank_by=params.rank_by,
        snapshots=(0, params.T_loop // 2, params.T_loop))


def runs_of(params: Params) -> list[tuple[str, str, float]]:
    """The (curation, attack, budget) runs of one seed: with K-wise tournaments the clean loop once and
    each attack at each budget; with the official curation the clean loop and its attacks at budget 0.25."""
    b = claim_budget(params)
    return ([("tournament", "none", 0.0)] * ("none" in params.attacks)
            + [("tournament", a, bb) for a in params.attacks if a != "none" for bb in params.budgets]
            + [("softmax", a, 0.0 if a == "none" else b) for a in OFFICIAL_ATTACKS])


def run_seed(params: Params, seed: int) -> tuple[list[dict], dict]:
    """Every loop of one seed: per-round rows, and the sample snapshots of the tournament runs."""
    rows, snaps = [], {}
    for curation, attack, b in runs_of(params):
        with threadpool_limits(1):  # small matrices: BLAS threads only contend for the cores
            out = run_loop(loop_config(params, attack, b, curation), seed)
        if curation == "tournament":
            snaps[(attack, b)] = out["snapshots"]
        for t in range(params.T_loop + 1):
            rows.append({"seed": seed, "curation": curation, "attack": attack, "budget": b, "round": t,
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


def final_rewards(results: Results, curation: str = "tournament") -> pd.DataFrame:
    """Final-round E[r] per seed (rows) and (attack, budget) (columns) of one curation, and the initial E[r]."""
    lp = results.loop[results.loop.curation == curation]
    final = lp[lp["round"] == results.params.T_loop].pivot_table(index="seed", columns=["attack", "budget"],
                                                                 values="reward")
    final[("initial", 0.0)] = lp[lp["round"] == 0].groupby("seed")["reward"].mean()
    return final


def sign_agreement(results: Results) -> pd.DataFrame:
    """Per (seed, attack, budget, round): the covariance, the next change of mean e^r, and agreement."""
    lp = results.loop.sort_values(["seed", "curation", "attack", "budget", "round"]).copy()
    lp["step"] = lp.groupby(["seed", "curation", "attack", "budget"])["exp_reward"].shift(-1) - lp["exp_reward"]
    lp = lp.dropna(subset=["step", "cov"])
    lp["counted"] = lp["step"].abs() > SIGN_MIN_STEP
    lp["agree"] = np.sign(lp["cov"]) == np.sign(lp["step"])
    return lp


def _phi_row(g: pd.DataFrame, adversary: str, K: str, lam: str, phi: float) -> pd.Series:
    """The Part A summary row of one (adversary, K, lam, phi) run."""
    sel = g[(g.adversary == adversary) & (g.K == K) & (g.lam == lam) & g.phi.apply(lambda p: _has((phi,), p))]
    return sel.iloc[0]


def reward_change(row: pd.Series) -> float:
    """E_T[r] - E_0[r] of one Part A run."""
    return float(row.reward_T - row.reward_0)


def anchor_gaps(results: Results) -> pd.Series:
    """Per seed of the sample loop: max over rounds of |E[r] - grid E[r]|."""
    anc = results.anchor
    grid_r = anc[anc.source == "grid"].set_index("round")["reward"]
    samples = anc[anc.source == "samples"].pivot(index="seed", columns="round", values="reward")
    return (samples - grid_r).abs().max(axis=1)


def claim_budget(params: Params) -> float:
    """The entry of ``params.budgets`` at which the attacks are compared."""
    return next(x for x in params.budgets if _has((CLAIM_BUDGET,), x))


def claim_values(results: Results) -> dict[str, Any]:
    """The value(s) of every claim's metric and of every finding's controls."""
    g = results.grid
    k2_anti = g[(g.K == "2") & (g.adversary == "anti") & (g.lam == "inf")].set_index("phi")
    pick = lambda phis: k2_anti.loc[[p for p in k2_anti.index if _has(phis, p)]]  # noqa: E731
    aligned = g[(g.adversary == "aligned-noisy") & (g.lam == "inf") & g.K.isin(ALIGNED_K)
                & g.phi.apply(lambda p: _has(results.params.phi_aligned, p))]
    anchored = g[(g.adversary == "anti") & (g.lam == ANCHOR_LAMBDA)]
    fr = final_rewards(results)
    b = claim_budget(results.params)
    initial, clean = fr[("initial", 0.0)], fr[("none", 0.0)]
    off = final_rewards(results, "softmax")
    off_initial = off[("initial", 0.0)]
    sa = sign_agreement(results)
    counted = sa[sa.counted]
    share = counted.groupby("seed")["agree"].mean().reindex(results.params.seed_list())
    return {
        "rotated-reverses": reward_change(_phi_row(g, "rotated", "2", "inf", ROTATED_PHI)),
        "rotated-reverses@aligned-noisy": reward_change(_phi_row(g, "aligned-noisy", "2", "inf", ROTATED_PHI)),
        "rotated-reverses@phi-0.1": reward_change(_phi_row(g, "rotated", "2", "inf", ROTATED_CONTROL_PHI)),
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
        "grid-matches-samples": list(anchor_gaps(results)),
        "cov-sign": list(share),
        "clean-improves": list(clean - initial),
        "influence-below-initial": list(fr[("influence", b)] - initial),
        "influence-below-initial@gap": list(fr[("gap", b)] - initial),
        "influence-below-initial@random": list(fr[("random", b)] - initial),
        "influence-vs-random": list(fr[("influence", b)] - fr[("random", b)]),
        "influence-vs-random@gap": list(fr[("gap", b)] - fr[("random", b)]),
        "random-robust": list(fr[("random", b)] - clean),
        "random-robust@gap": list(fr[("gap", b)] - clean),
        "official-below-initial": list(off[("influence_alpha0.8", b)] - off_initial),
        "official-below-initial@gap": list(off[("gap", b)] - off_initial),
        "official-below-initial@random": list(off[("random", b)] - off_initial),
        "official-vs-random": list(off[("influence_alpha0.8", b)] - off[("random", b)]),
        "official-vs-random@gap": list(off[("gap", b)] - off[("random", b)]),
    }


def threshold_table(results: Results) -> pd.DataFrame:
    """Part A, anti adversary, lam = inf: final mass near x* per phi (columns) and K (rows)."""
    g = results.grid
    g = g[(g.adversary == "anti") & (g.lam == "inf") & g.phi.apply(lambda p: _has(results.params.phi_grid, p))]
    return g.pivot_table(index="K", columns="phi", values="near_T").round(3)


def rotated_table(results: Results) -> pd.DataFrame:
    """Part A, lam = inf: E_T[r] - E_0[r] per adversary and K (rows) and phi (columns)."""
    g = results.grid[(results.grid.lam == "inf") & results.grid.phi.apply(lambda p: _has(results.params.phi_grid, p))]
    g = g.assign(change=g.reward_T - g.reward_0)
    return g.pivot_table(index=["adversary", "K"], columns="phi", values="change").round(2)


def attack_table(results: Results, curation: str = "tournament") -> pd.DataFrame:
    """Part B: mean (sd) over seeds of the final E[r] per attack (rows) and budget (columns)."""
    fr = final_rewards(results, curation)
    rows: dict[str, dict[float, str]] = {}
    for (attack, b) in fr.columns:
        rows.setdefault(attack, {})[b] = f"{fr[(attack, b)].mean():.2f} ({fr[(attack, b)].std():.2f})"
    df = pd.DataFrame(rows).T
    df.columns = [("any" if b == 0 else f"b = {b:g}") for b in df.columns]
    return df.fillna("")


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary: key Part A numbers, Part B final rewards, timings."""
    frs = final_rewards(results)
    fr = frs.mean()
    b = claim_budget(results.params)
    gap_minus_influence = frs[("gap", b)] - frs[("influence", b)]
    g = results.grid
    kinf = g[(g.adversary == "anti") & (g.lam == "inf") & (g.K == "inf")].set_index("phi")["near_T"]
    sa = sign_agreement(results)
    anc = results.anchor
    return {
        "part_a_runs": int(len(g)),
        "anti_K2_near_T": {f"{p:g}": float(v) for p, v in
                           g[(g.adversary == "anti") & (g.lam == "inf") & (g.K == "2")].set_index("phi")["near_T"].items()},
        "anti_Kinf_near_T": {f"{p:g}": float(v) for p, v in kinf.items()},
        "final_reward": {f"{a}@{bb:g}": float(v) for (a, bb), v in fr.items()},
        "final_reward_sd": {f"{a}@{bb:g}": float(v) for (a, bb), v in frs.std().items()},
        "official_final_reward": {f"{a}@{bb:g}": float(v)
                                  for (a, bb), v in final_rewards(results, "softmax").mean().items()},
        "gap_minus_influence": {"per_seed": [float(v) for v in gap_minus_influence],
                                "mean": float(gap_minus_influence.mean()),
                                "sd": float(gap_minus_influence.std()),
                                "seeds_gap_lower": int((gap_minus_influence < 0).sum())},
        "rotated_reward_change": {f"{k}@{p:g}": reward_change(_phi_row(g, "rotated", k, "inf", p))
                                  for k in results.params.K_list for p in results.params.phi_grid},
        "sign_rounds_counted": int(sa.counted.sum()),
        "sign_rounds_agree": int((sa.counted & sa.agree).sum()),
        "grid_reward": [float(v) for v in anc[anc.source == "grid"]["reward"]],
        "sample_reward": [float(v) for v in anc[anc.source == "samples"].groupby("round")["reward"].mean()],
        "seconds": {k: round(v, 2) for k, v in results.seconds.items()},
    }


