"""The four experiments of the win-rate page (E1-E4) and the full preset's NLHF extension (E5).

Each function takes plain settings and an explicit seed, returns pandas tables (or arrays), and is
deterministic given its arguments. Random streams are ``default_rng([experiment, base seed, i])``,
so two base seeds never share a draw.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import pandas as pd
from scipy.stats import spearmanr
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from companion import runtime
from companion.papers.win_rate import Params, dpo, sft, wro
from companion.papers.win_rate import policy_gradient as pg
from companion.papers.win_rate.preferences import (
    CLIP,
    H_FUNCTIONS,
    bt_matrix,
    contextual_instance,
    h_reward,
    kl,
    log_policy,
    policy,
    tabular_instance,
    win_rate,
    win_vector,
)

E1, E2, E3, E4, E5 = range(1, 6)
# Every matrix here is small: BLAS threads only contend with the processes that share the cores.
one_blas_thread = threadpool_limits.wrap(limits=1, user_api="blas")


def stream(experiment: int, seed: int, i: int) -> np.random.Generator:
    """The generator of draw ``i`` of ``experiment`` under base ``seed``."""
    return np.random.default_rng([experiment, seed, i])


# ----------------------------------------------------------------------------- E1: SFT's ceiling

def e1_sft(seed: int, n_draws: int, K: int, taus: Sequence[float], n_sft: int, rounds: int = 5) -> pd.DataFrame:
    """One row per (draw, tau): SFT win rates (closed form, identity, trained, rounds 1..5), WRO limit, 2 Var w."""
    rows = []
    for i in range(n_draws):
        rng = stream(E1, seed, i)
        r, xi = rng.standard_normal((2, K))
        P = bt_matrix(r)
        for tau in taus:
            p_ref = policy(tau * xi)
            wr = sft.sft_win_rates(P, p_ref, sft.trained_sft(rng, P, p_ref, n_sft), rounds)
            w = win_vector(P, p_ref)
            rows.append({"draw": i, "tau": tau, "closed": wr["closed"], "identity": wr["identity"],
                         "trained": wr["trained"], "limit": wr["limit"],
                         "two_var": 2 * np.sum(p_ref * (w - 0.5) ** 2),
                         **{f"round{k + 1}": v for k, v in enumerate(wr["iterated"])}})
    t = pd.DataFrame(rows)
    t["gain_fraction"] = (t["closed"] - 0.5) / (t["limit"] - 0.5)
    t["gap"] = t["limit"] - t["closed"]
    return t


# ----------------------------------------------------------------------------- E2: the KL shell

@dataclass
class Shell:
    """One E2 instance: shell policies' WR, DPO population loss, WRO/RLHF objectives, logit-WR and KL."""

    wr: np.ndarray
    dpo_loss: np.ndarray
    wro_objective: np.ndarray
    rlhf_objective: np.ndarray
    logit_wr: np.ndarray
    log_wr: np.ndarray
    kl: np.ndarray


def shell_instance(rng: np.random.Generator, K: int, kappa: float, n: int, gamma: float = 0.0
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One E2 instance: rewards r, p_ref, P, and n policies on ``KL(p || p_ref) = kappa`` with their KL."""
    r, p_ref, P = tabular_instance(rng, K, 1.0, gamma)
    return (r, p_ref, P, *dpo.shell_policies(rng, p_ref, kappa, n))


def score_shell(r: np.ndarray, p_ref: np.ndarray, P: np.ndarray, p: np.ndarray, kls: np.ndarray,
                beta: float) -> Shell:
    """The shell policies scored by DPO's population loss, WRO (h = id) and RLHF at ``beta``, and their h-WRs."""
    wr = win_rate(p, P, p_ref)
    loss = dpo.dpo_loss(np.log(p), np.log(p_ref), dpo.population_weights(P, p_ref), beta)
    logit_wr, log_wr = (p @ h_reward(P, p_ref, h) for h in ("logit", "log"))
    return Shell(wr, loss, wr - beta * kls, p @ r - beta * kls, logit_wr, log_wr, kls)


def e2_shell(rng: np.random.Generator, K: int, kappa: float, beta: float, n: int, gamma: float = 0.0) -> Shell:
    """Random policies on ``KL(p || p_ref) = kappa`` scored by DPO's population loss and by WRO (h = id)."""
    return score_shell(*shell_instance(rng, K, kappa, n, gamma), beta)


def e2_table(seed: int, seeds: int, K: int, kappas: Sequence[float], betas: Sequence[float], n: int,
             gamma: float = 0.0) -> pd.DataFrame:
    """Discordance of DPO, WRO (h = id) and RLHF with the h-win rates (id, log, logit), per (seed, kappa, beta).

    ``*_every_h`` is the smallest discordance over the three h: a method discordant with *every* h-win rate.
    The shell of an (instance, kappa) is drawn once and scored at every beta (the h-win rates do not depend on it).
    """
    rows = []
    for i in range(seeds):
        for kappa in kappas:
            instance = shell_instance(stream(E2, seed, i * 1000 + int(gamma > 0)), K, kappa, n, gamma)
            shells = [score_shell(*instance, beta) for beta in betas]
            wr_signs = {h: dpo.pair_signs(getattr(shells[0], h)) for h in ("wr", "log_wr", "logit_wr")}
            for beta, s in zip(betas, shells):
                row = {"seed": seed + i, "kappa": kappa, "beta": beta, "gamma": gamma}
                for name, score in (("dpo", -s.dpo_loss), ("wro", s.wro_objective), ("rlhf", s.rlhf_objective)):
                    signs = dpo.pair_signs(score)
                    d = {h: float(np.mean(signs * v < 0)) for h, v in wr_signs.items()}
                    row |= {f"{name}_vs_{h}": v for h, v in d.items()} | {f"{name}_every_h": min(d.values())}
                rows.append(row | {"kl_error": float(np.max(np.abs(s.kl - kappa)))})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- E3: DPO dynamics

E3_ARMS = ("dpo", "wro", "dpo_population")


@dataclass
class DpoCurves:
    """E3, one arm: recorded steps (T,), train loss and true WR (seeds, T), Spearman(-loss, WR) per seed."""

    steps: np.ndarray
    loss: np.ndarray
    wr: np.ndarray
    spearman: np.ndarray
    n_pairs: int
    arm: str = "dpo"


def empirical_win_vector(C: np.ndarray) -> np.ndarray:
    """Per-response win rate estimated from pair frequencies ``C[w, l]``: wins / appearances (1/2 if unseen).

    Each appearance of y in a pair from p_ref meets an opponent from p_ref, so this is unbiased for w(y).
    """
    wins = C.sum(axis=-1)
    seen = wins + C.sum(axis=-2)
    return np.where(seen > 0, wins / np.where(seen > 0, seen, 1.0), 0.5)


def train_wro(log_ref: np.ndarray, w_hat: np.ndarray, beta: float, lr: float, steps: int, record_every: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Full-batch ascent on the empirical WRO (h = id) objective ``p w_hat - beta KL`` from log p_ref.

    Returns the recorded step numbers (T,) and logits (T, ..., K), step 0 included (as :func:`dpo.train_dpo`).
    """
    theta = log_ref.copy()
    steps_at, thetas = [0], [theta.copy()]
    for t in range(1, steps + 1):
        theta = theta + lr * wro.logit_gradient(theta, w_hat, log_ref, beta)
        if t % record_every == 0:
            steps_at.append(t)
            thetas.append(theta.copy())
    return np.array(steps_at), np.stack(thetas)


@one_blas_thread
def e3_dpo(seed: int, n_seeds: int, K: int, n_pairs: int, beta: float, lr: float, iters: int,
           record_every: int = 40, arms: Sequence[str] = E3_ARMS) -> dict[str, DpoCurves]:
    """Per seed, n_pairs labelled pairs from p_ref; train loss and exact WR (against p_ref) along training of

    ``dpo``: full-batch DPO on those pairs; ``wro``: full-batch ascent on the empirical WRO (h = id) objective
    of the *same* pairs (its loss is minus that objective); ``dpo_population``: DPO on the population pair
    weights (infinite data). Same instances, step size and steps for every arm.
    """
    refs, Ps, Cs = [], [], []
    for i in range(n_seeds):
        rng = stream(E3, seed, i * 1000 + n_pairs)
        r, p_ref, P = tabular_instance(rng, K, 1.0)
        w, l = sft.sample_pairs(rng, P, p_ref, n_pairs)
        refs.append(p_ref), Ps.append(P), Cs.append(dpo.pair_weights(w, l, K))
    log_ref, P, C = np.log(np.array(refs)), np.array(Ps), np.array(Cs)
    p_ref = np.exp(log_ref)
    out = {}
    for arm in arms:
        if arm == "wro":
            w_hat = empirical_win_vector(C)
            steps, thetas = train_wro(log_ref, w_hat, beta, lr, iters, record_every)
            logp = log_policy(thetas)
            loss = -np.stack([wro.objective(np.exp(lp), w_hat, p_ref, beta) for lp in logp], axis=1)
        else:
            weights = C if arm == "dpo" else dpo.population_weights(P, p_ref)
            _, steps, thetas = dpo.train_dpo(log_ref, weights, beta, lr, iters, record_every)
            logp = log_policy(thetas)
            loss = np.stack([dpo.dpo_loss(lp, log_ref, weights, beta) for lp in logp], axis=1)
        wr = np.stack([win_rate(np.exp(lp), P, p_ref) for lp in logp], axis=1)
        rho = np.array([spearmanr(-a, b).statistic for a, b in zip(loss, wr)])
        out[arm] = DpoCurves(steps, loss, wr, rho, n_pairs, arm)
    return out


# ----------------------------------------------------------------------------- E4: success vs objective

@dataclass
class ParamGrid:
    """The E4 grid: objectives (h, beta) and budgets (steps, lr, batch, repeats)."""

    hs: tuple[str, ...]
    betas: tuple[float, ...]
    steps: tuple[int, ...]
    lrs: tuple[float, ...]
    batches: tuple[int, ...]
    repeats: int
    ref_steps: int = 3000
    ref_lr: float = 0.5


@one_blas_thread
def e4_instance(seed: int, X: int, d: int, K: int, grid: ParamGrid, gamma: float = 0.0) -> pd.DataFrame:
    """Every budget run of one instance: success, actual WR, expected WR (reference optimum's WR), J values."""
    rng = stream(E4, seed, 0)
    phi, r, p_ref, P = contextual_instance(rng, X, d, K, gamma)
    log_ref = np.log(p_ref)
    hP = np.stack([H_FUNCTIONS[h](np.clip(P, CLIP, 1 - CLIP)) for h in grid.hs])
    R_h = win_vector(hP, p_ref)  # (H, X, K)
    cells = [(hi, b) for hi in range(len(grid.hs)) for b in grid.betas]
    h_cell = np.array([c[0] for c in cells])
    b_cell = np.array([c[1] for c in cells])
    theta_star = pg.ascend_exact(phi, log_ref, R_h[h_cell], b_cell, grid.ref_steps, grid.ref_lr)
    j_star = pg.objective(theta_star, phi, log_ref, R_h[h_cell], b_cell)
    j_zero = pg.objective(np.zeros_like(theta_star), phi, log_ref, R_h[h_cell], b_cell)
    wr_star = win_rate(policy(pg.logits(theta_star, phi, log_ref)), P, p_ref).mean(axis=-1)
    grad_star = np.abs(pg.exact_gradient(theta_star, phi, log_ref, R_h[h_cell], b_cell)).max(axis=(-2, -1))
    runs = grid_runs(grid)
    c_idx = runs[:, 0].astype(int)

    def train(steps: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
        theta = pg.train_reinforce(phi, log_ref, hP, h_cell[c_idx], b_cell[c_idx], runs[:, 1], batch, steps, rng)
        j_t = pg.objective(theta, phi, log_ref, R_h[h_cell[c_idx]], b_cell[c_idx])
        return j_t, win_rate(policy(pg.logits(theta, phi, log_ref)), P, p_ref).mean(axis=-1)

    return grid_table(seed, grid, train, j_zero, j_star, wr_star, grad_star)


def grid_runs(grid: ParamGrid) -> np.ndarray:
    """The runs of one budget cell: (objective cell, lr, repeat) rows, objective cells as (h, beta) in grid order."""
    cells = len(grid.hs) * len(grid.betas)
    return np.array([(c, lr, rep) for c in range(cells) for lr in grid.lrs for rep in range(grid.repeats)], float)


def grid_table(seed: int, grid: ParamGrid, train, j_zero: np.ndarray, j_star: np.ndarray, wr_star: np.ndarray,
               grad_star: np.ndarray) -> pd.DataFrame:
    """Every (steps, batch) budget through ``train(steps, batch) -> (J, WR)`` per run, one row per run.

    ``j_zero``, ``j_star``, ``wr_star``, ``grad_star`` are per objective cell: J at the start and at the
    reference optimum, the optimum's WR and its largest exact-gradient entry (NaN where not computed).
    """
    cells = [(h, b) for h in grid.hs for b in grid.betas]
    runs = grid_runs(grid)
    rows = []
    for steps in grid.steps:
        for batch in grid.batches:
            j_t, wr_t = train(steps, batch)
            for k, (c, lr, rep) in enumerate(runs):
                c = int(c)
                rows.append({"seed": seed, "h": cells[c][0], "beta": float(cells[c][1]), "steps": steps,
                             "batch": batch, "lr": float(lr), "repeat": int(rep),
                             "success": (j_t[k] - j_zero[c]) / (j_star[c] - j_zero[c]),
                             "actual_wr": float(wr_t[k]), "expected_wr": float(wr_star[c]), "J": float(j_t[k]),
                             "J_star": float(j_star[c]), "ref_grad": float(grad_star[c])})
    return pd.DataFrame(rows)


def partial_r_squared(y: np.ndarray, base: np.ndarray, extra: np.ndarray) -> float:
    """The share of what ``base`` leaves unexplained that ``extra`` explains: (R^2_both - R^2_base) / (1 - R^2_base)."""
    r_base = pg.r_squared(y, base)
    return (pg.r_squared(y, np.column_stack([base, extra])) - r_base) / (1.0 - r_base)


def e4_r_squared(runs: pd.DataFrame, seed: int = 0) -> dict[str, float]:
    """R^2 of actual WR on (success, success^2), one-hot(h, beta), expected WR and one-hot(budget), pooled;
    the same with the budget held fixed (partial R^2 after one-hot(steps, lr, batch)), also for success
    shuffled within budget cells (the null, drawn from ``seed``); and both R^2 at the largest budget alone."""
    y = runs["actual_wr"].to_numpy()
    s = runs["success"].to_numpy()
    quad = np.column_stack([s, s ** 2])
    objective = pg.one_hot((runs["h"] + "/" + runs["beta"].astype(str)).to_numpy())
    budget_label = (runs["steps"].astype(str) + "/" + runs["lr"].astype(str) + "/" + runs["batch"].astype(str))
    budget = pg.one_hot(budget_label.to_numpy())
    rng = np.random.default_rng([E4, seed, 1])
    shuffled = s.copy()
    for idx in runs.groupby(budget_label.to_numpy()).indices.values():
        shuffled[idx] = rng.permutation(s[idx])
    top = ((runs["steps"] == runs["steps"].max()) & (runs["lr"] == runs["lr"].max())
           & (runs["batch"] == runs["batch"].max())).to_numpy()
    s_top = s[top]
    return {"success": pg.r_squared(y, quad),
            "onehot": pg.r_squared(y, objective),
            "expected": pg.r_squared(y, runs[["expected_wr"]].to_numpy()),
            "budget": pg.r_squared(y, budget),
            "success_given_budget": partial_r_squared(y, budget, quad),
            "onehot_given_budget": partial_r_squared(y, budget, objective),
            "shuffled_given_budget": partial_r_squared(y, budget, np.column_stack([shuffled, shuffled ** 2])),
            "success_top_budget": pg.r_squared(y[top], np.column_stack([s_top, s_top ** 2])),
            "onehot_top_budget": pg.r_squared(y[top], objective[top])}


# ----------------------------------------------------------------------------- E5: intransitive preferences, NLHF

def e5_nlhf(seed: int, seeds: int, K: int, betas: Sequence[float], gamma: float) -> pd.DataFrame:
    """Under non-BT preferences: the WR against p_ref of DPO's population optimum, WRO (h = id) and NLHF.

    DPO's population minimiser is ``p_ref exp(r_hat / beta)``, r_hat the best BT fit of P on p_ref pairs.
    NLHF's regularised self-play equilibrium is solved by mirror descent; it is WRO with the model as anchor.
    """
    rows = []
    for i in range(seeds):
        rng = stream(E5, seed, i)
        r, p_ref, P = tabular_instance(rng, K, 1.0, gamma)
        r_hat = wro.bt_fit(P, np.outer(p_ref, p_ref))
        for beta in betas:
            p_dpo = policy(np.log(p_ref) + r_hat / beta)
            p_wro = wro.closed_form_optimum(p_ref, win_vector(P, p_ref), beta)
            p_nlhf, iters = wro.nash_mirror_descent(P, p_ref, beta)
            rows.append({"seed": seed + i, "beta": beta,
                         "wr_dpo": win_rate(p_dpo, P, p_ref), "wr_wro": win_rate(p_wro, P, p_ref),
                         "wr_nlhf": win_rate(p_nlhf, P, p_ref),
                         "kl_dpo": kl(p_dpo, p_ref), "kl_wro": kl(p_wro, p_ref), "kl_nlhf": kl(p_nlhf, p_ref),
                         "nlhf_vs_wro": win_rate(p_nlhf, P, p_wro),
                         "nlhf_residual": wro.self_play_residual(p_nlhf, P, p_ref, beta),
                         "nlhf_iters": iters})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- the page's run

def budget(params: Params) -> Params:
    """The parameters actually run: ``smoke`` shrinks every experiment to a few seconds."""
    if not params.smoke:
        return params
    return replace(params, seeds=3, n_seeds_e1=20, N_sft=2000, n_shell=60, n_seeds_e3=20, dpo_iters=400,
                   X=min(params.X, 32), K_par=min(params.K_par, 8), steps_grid=params.steps_grid[:2],
                   lr_grid=params.lr_grid[:2], batch_grid=params.batch_grid[:1], ref_steps=200,
                   mlp_hidden=min(params.mlp_hidden, 16), n_pairs_sweep=(), kappa_sweep=(), beta_sweep=())


@dataclass
class Results:
    """Everything the page shows: one table per experiment, the example shell and the DPO curves."""

    params: Params
    e1: pd.DataFrame
    e2: pd.DataFrame
    shell: Shell
    e3: dict[str, DpoCurves]
    e3_sweep: pd.DataFrame
    e4: pd.DataFrame
    e4_r2: pd.DataFrame
    e5: pd.DataFrame | None
    seconds: dict[str, float]


def grid(params: Params) -> ParamGrid:
    """The E4 grid of the parameters (the MLP reference uses Adam at 0.01, the linear one GD at 0.5)."""
    return ParamGrid(params.h_list, params.beta_list, params.steps_grid, params.lr_grid, params.batch_grid,
                     params.repeats_e4, params.ref_steps, 0.01 if params.policy_class == "mlp" else 0.5)


@one_blas_thread
def run(params: Params) -> Results:
    """Run E1-E4 (and E5 when intransitive preferences are asked for) under ``params``."""
    runtime.limit_threads()
    p = budget(params)
    secs: dict[str, float] = {}
    tick = time.perf_counter()
    e1 = e1_sft(p.seed, p.n_seeds_e1, p.K_tab, p.tau_list, p.N_sft, p.sft_rounds)
    secs["E1"], tick = time.perf_counter() - tick, time.perf_counter()
    kappas = (p.kappa_shell, *[k for k in p.kappa_sweep if k != p.kappa_shell])
    betas = (p.beta_dpo, *[b for b in p.beta_sweep if b != p.beta_dpo])
    gammas = [0.0] + ([p.gamma_intrans] if "intransitive" in p.pref_models else [])
    e2 = pd.concat([e2_table(p.seed, p.seeds, p.K_tab, kappas, betas, p.n_shell, g) for g in gammas],
                   ignore_index=True)
    shell = e2_shell(stream(E2, p.seed, 0), p.K_tab, p.kappa_shell, p.beta_dpo, p.n_shell)
    secs["E2"], tick = time.perf_counter() - tick, time.perf_counter()
    # one process per core: each E3 arm and E4 instance costs seconds, far more than starting a process
    workers = 1 if p.smoke else None
    pair_counts = (p.N_pairs, *[n for n in p.n_pairs_sweep if n != p.N_pairs])
    e3_jobs = [(p.seed, p.n_seeds_e3, p.K_dpo, n, p.beta_dpo, p.dpo_lr, p.dpo_iters, 40, (arm,))
               for n in pair_counts for arm in (E3_ARMS if n == p.N_pairs else ("dpo", "wro"))]
    arms = [c for out in runtime.parallel_map(e3_dpo, e3_jobs, workers=workers) for c in out.values()]
    e3 = {c.arm: c for c in arms if c.n_pairs == p.N_pairs}
    e3_sweep = pd.DataFrame([{"N_pairs": c.n_pairs, "arm": c.arm, "frac_below_half": float(np.mean(c.spearman < 0.5)),
                              "frac_negative": float(np.mean(c.spearman < 0)),
                              "frac_wr_falls": float(np.mean(c.wr[:, -1] < c.wr.max(axis=1) - 0.005)),
                              "median_spearman": float(np.median(c.spearman))} for c in arms])
    secs["E3"], tick = time.perf_counter() - tick, time.perf_counter()
    g = grid(p)
    if p.policy_class == "mlp":
        device = runtime.resolve_device(p.device)
        from companion.papers.win_rate.paper_preset import e4_instance_mlp

        tables = [e4_instance_mlp(s, p.X, p.d_x, p.K_par, g, p.mlp_hidden, device)
                  for s in tqdm(p.seed_list(), desc="E4 instances", disable=None, leave=False)]
    else:
        tables = runtime.parallel_map(e4_instance, [(s, p.X, p.d_x, p.K_par, g) for s in p.seed_list()],
                                      workers=workers)
    e4 = pd.concat(tables, ignore_index=True)
    e4_r2 = pd.DataFrame([{"seed": s, **e4_r_squared(t, s)} for s, t in e4.groupby("seed")])
    secs["E4"], tick = time.perf_counter() - tick, time.perf_counter()
    e5 = (e5_nlhf(p.seed, p.seeds, p.K_tab, betas, p.gamma_intrans)
          if "intransitive" in p.pref_models else None)
    secs["E5"] = time.perf_counter() - tick
    return Results(params, e1, e2, shell, e3, e3_sweep, e4, e4_r2, e5, secs)


def worst_tau(e1: pd.DataFrame, column: str, direction: str) -> tuple[float, list[float]]:
    """The tau whose mean of ``column`` comes closest to failing ``direction``, and its per-draw values."""
    means = e1.groupby("tau")[column].mean()
    tau = float(means.idxmax() if direction == "<=" else means.idxmin())
    return tau, list(e1.loc[e1["tau"] == tau, column])


def primary_e2(results: Results) -> pd.DataFrame:
    """E2 rows at the claims' kappa, beta and BT preferences, one per seed."""
    p = results.params
    t = results.e2
    return t[(t["kappa"] == p.kappa_shell) & (t["beta"] == p.beta_dpo) & (t["gamma"] == 0.0)]


def id_margin(e4: pd.DataFrame) -> list[float]:
    """Per instance: mean success of the worst h other than id, minus that of id (NaN without id)."""
    out = []
    for _, t in e4.groupby("seed"):
        m = t.groupby("h")["success"].mean()
        out.append(float(m.drop("id").min() - m["id"]) if "id" in m and len(m) > 1 else float("nan"))
    return out


def claim_values(results: Results) -> dict[str, Any]:
    """Every claim's measured value(s) (lists per seed, one number for an exact claim) and each control's; an
    ``every`` row gets its per-seed list and ``claims`` judges the worst seed."""
    e1, e2, r2 = results.e1, primary_e2(results), results.e4_r2
    last = f"round{results.params.sft_rounds}"
    e1 = e1.assign(iterated_fraction=(e1[last] - 0.5) / (e1["limit"] - 0.5), iterated_gap=e1["limit"] - e1[last])
    e3 = results.e3
    return {
        "sft-identity": float((e1["closed"] - e1["identity"]).abs().max()),
        "sft-trained": float((e1["trained"] - e1["closed"]).abs().max()),
        "sft-gain-fraction": worst_tau(e1, "gain_fraction", "<=")[1],
        "sft-gain-fraction@iterated-sft": worst_tau(e1, "iterated_fraction", "<=")[1],
        "sft-gap": worst_tau(e1, "gap", ">=")[1],
        "sft-gap@iterated-sft": worst_tau(e1, "iterated_gap", ">=")[1],
        "iterated-sft": float(np.mean(e1[last] > e1["round1"])),
        "dpo-discordance": list(e2["dpo_every_h"]),
        "dpo-discordance@rlhf": list(e2["rlhf_every_h"]),
        "dpo-discordance-every-seed": list(e2["dpo_every_h"]),
        "dpo-discordance-every-seed@rlhf": list(e2["rlhf_every_h"]),
        "wro-concordance": float(e2["wro_vs_wr"].max()),
        "dpo-dynamics": list((e3["dpo"].spearman < 0.5).astype(float)),
        "dpo-dynamics@wro-same-pairs": list((e3["wro"].spearman < 0.5).astype(float)),
        "dpo-dynamics@dpo-population": list((e3["dpo_population"].spearman < 0.5).astype(float)),
        "success-vs-objective-fixed-budget": list(r2["success_given_budget"] - r2["onehot_given_budget"]),
        "success-vs-objective-fixed-budget@shuffled-success":
            list(r2["shuffled_given_budget"] - r2["onehot_given_budget"]),
        "success-vs-objective": list(r2["success"] - r2["onehot"]),
        "success-vs-objective@budget-alone": list(r2["budget"] - r2["onehot"]),
        "success-vs-expected": list(r2["success"] - r2["expected"]),
        "id-hardest": id_margin(results.e4),
    }


def _r(x: float, n: int = 4) -> float:
    return round(float(x), n)


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary of the four experiments (and E5 when run)."""
    e1, e2, e4 = results.e1, results.e2, results.e4
    g1 = e1.groupby("tau")
    top = e4.loc[e4["success"].idxmax()]
    columns = [c for c in e2.columns if c.startswith(("dpo_", "wro_", "rlhf_"))]
    out: dict[str, Any] = {
        "sft_wr_by_tau": {str(k): _r(v) for k, v in g1["closed"].mean().items()},
        "sft_trained_wr_by_tau": {str(k): _r(v) for k, v in g1["trained"].mean().items()},
        "iterated_wr_by_tau": {str(k): _r(v) for k, v in g1[f"round{results.params.sft_rounds}"].mean().items()},
        "wro_limit_by_tau": {str(k): _r(v) for k, v in g1["limit"].mean().items()},
        "gain_fraction_by_tau": {str(k): _r(v) for k, v in g1["gain_fraction"].mean().items()},
        "gap_by_tau": {str(k): _r(v) for k, v in g1["gap"].mean().items()},
        "dpo_discordance_every_h": [_r(v) for v in primary_e2(results)["dpo_every_h"]],
        "e2_by_setting": [{k: _r(v) for k, v in row.items()} for row in
                          e2.groupby(["gamma", "kappa", "beta"])[columns].mean().reset_index().to_dict("records")],
        "e2_max_kl_error": float(e2["kl_error"].max()),
        "e3_spearman": {arm: [_r(v, 3) for v in c.spearman] for arm, c in results.e3.items()},
        "e3_by_n_pairs": results.e3_sweep.round(4).to_dict("records"),
        "e4_r2": results.e4_r2.round(4).to_dict("records"),
        "e4_success_by_h": {k: _r(v) for k, v in e4.groupby("h")["success"].mean().items()},
        "e4_max_success": _r(top["success"]),
        "e4_max_success_run": {k: (v if isinstance(v, str) else _r(v, 6)) for k, v in top.items()},
        "e4_max_ref_grad": float(e4["ref_grad"].max()),
        "seconds": {k: round(v, 2) for k, v in results.seconds.items()},
    }
    if results.e5 is not None:
        cols = ["wr_dpo", "wr_wro", "wr_nlhf", "kl_dpo", "kl_wro", "kl_nlhf", "nlhf_vs_wro"]
        out["e5_by_beta"] = results.e5.groupby("beta")[cols].mean().round(4).reset_index().to_dict("records")
        out["e5_max_nlhf_residual"] = float(results.e5["nlhf_residual"].max())
    return out


def e4_cells(results: Results) -> pd.DataFrame:
    """Per (h, beta): mean expected WR, actual WR and success over runs and instances."""
    return results.e4.groupby(["h", "beta"])[["expected_wr", "actual_wr", "success"]].mean().round(3)


