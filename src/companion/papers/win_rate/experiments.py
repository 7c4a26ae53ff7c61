"""The four experiments of the win-rate page (E1-E4) and the full preset's NLHF extension (E5).

Each function takes plain settings and an explicit seed, returns pandas tables (or arrays), and is
deterministic given its arguments. Random streams are ``default_rng([experiment, base seed, i])``,
so two base seeds never share a draw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from companion.papers.win_rate import dpo, mlp_policy, policy_gradient as pg, sft, wro
from companion.papers.win_rate.preferences import (H_FUNCTIONS, CLIP, contextual_instance, h_reward, kl,
                                                   log_policy, policy, tabular_instance, win_rate, win_vector)

E1, E2, E3, E4, E5 = range(1, 6)


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
        P = wro_bt(r)
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


def wro_bt(r: np.ndarray) -> np.ndarray:
    """BT preference matrix of one prompt (alias kept local for readability)."""
    from companion.papers.win_rate.preferences import bt_matrix

    return bt_matrix(r)


# ----------------------------------------------------------------------------- E2: the KL shell

@dataclass
class Shell:
    """One E2 instance: shell policies' WR, DPO population loss, WRO/RLHF objectives, logit-WR and KL."""

    wr: np.ndarray
    dpo_loss: np.ndarray
    wro_objective: np.ndarray
    rlhf_objective: np.ndarray
    logit_wr: np.ndarray
    kl: np.ndarray


def e2_shell(rng: np.random.Generator, K: int, kappa: float, beta: float, n: int, gamma: float = 0.0) -> Shell:
    """Random policies on ``KL(p || p_ref) = kappa`` scored by DPO's population loss and by WRO (h = id)."""
    r, p_ref, P = tabular_instance(rng, K, 1.0, gamma)
    p, kls = dpo.shell_policies(rng, p_ref, kappa, n)
    wr = win_rate(p, P, p_ref)
    loss = dpo.dpo_loss(np.log(p), np.log(p_ref), dpo.population_weights(P, p_ref), beta)
    logit_wr = p @ h_reward(P, p_ref, "logit")
    return Shell(wr, loss, wr - beta * kls, p @ r - beta * kls, logit_wr, kls)


def e2_table(seed: int, seeds: int, K: int, kappas: Sequence[float], betas: Sequence[float], n: int,
             gamma: float = 0.0) -> pd.DataFrame:
    """Discordance with the win rate of DPO, WRO (h = id) and RLHF, per (seed, kappa, beta)."""
    rows = []
    for i in range(seeds):
        for kappa in kappas:
            for beta in betas:
                s = e2_shell(stream(E2, seed, i * 1000 + int(gamma > 0)), K, kappa, beta, n, gamma)
                rows.append({"seed": seed + i, "kappa": kappa, "beta": beta, "gamma": gamma,
                             "dpo": dpo.discordance(-s.dpo_loss, s.wr),
                             "wro": dpo.discordance(s.wro_objective, s.wr),
                             "rlhf_vs_wr": dpo.discordance(s.rlhf_objective, s.wr),
                             "rlhf_vs_logit_wr": dpo.discordance(s.rlhf_objective, s.logit_wr),
                             "kl_error": float(np.max(np.abs(s.kl - kappa)))})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- E3: DPO dynamics

@dataclass
class DpoCurves:
    """E3: recorded steps (T,), train loss and true WR (seeds, T), Spearman(-loss, WR) per seed."""

    steps: np.ndarray
    loss: np.ndarray
    wr: np.ndarray
    spearman: np.ndarray
    n_pairs: int


def e3_dpo(seed: int, n_seeds: int, K: int, n_pairs: int, beta: float, lr: float, iters: int,
           record_every: int = 40) -> DpoCurves:
    """Full-batch DPO on n_pairs pairs per seed; train loss and exact WR (against p_ref) along training."""
    refs, Ps, Cs = [], [], []
    for i in range(n_seeds):
        rng = stream(E3, seed, i * 1000 + n_pairs)
        r, p_ref, P = tabular_instance(rng, K, 1.0)
        w, l = sft.sample_pairs(rng, P, p_ref, n_pairs)
        refs.append(p_ref), Ps.append(P), Cs.append(dpo.pair_weights(w, l, K))
    log_ref, P, C = np.log(np.array(refs)), np.array(Ps), np.array(Cs)
    _, steps, thetas = dpo.train_dpo(log_ref, C, beta, lr, iters, record_every)
    logp = log_policy(thetas)
    loss = np.stack([dpo.dpo_loss(lp, log_ref, C, beta) for lp in logp], axis=1)
    wr = np.stack([win_rate(np.exp(lp), P, np.exp(log_ref)) for lp in logp], axis=1)
    rho = np.array([spearmanr(-a, b).statistic for a, b in zip(loss, wr)])
    return DpoCurves(steps, loss, wr, rho, n_pairs)


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
    runs = [(c, lr, rep) for c in range(len(cells)) for lr in grid.lrs for rep in range(grid.repeats)]
    c_idx = np.array([u[0] for u in runs])
    lr_run = np.array([u[1] for u in runs])
    rows = []
    for steps in grid.steps:
        for batch in grid.batches:
            theta = pg.train_reinforce(phi, log_ref, hP, h_cell[c_idx], b_cell[c_idx], lr_run, batch, steps, rng)
            j_t = pg.objective(theta, phi, log_ref, R_h[h_cell[c_idx]], b_cell[c_idx])
            wr_t = win_rate(policy(pg.logits(theta, phi, log_ref)), P, p_ref).mean(axis=-1)
            for k, (c, lr, rep) in enumerate(runs):
                rows.append({"seed": seed, "h": grid.hs[h_cell[c]], "beta": b_cell[c], "steps": steps,
                             "batch": batch, "lr": lr, "repeat": rep,
                             "success": (j_t[k] - j_zero[c]) / (j_star[c] - j_zero[c]),
                             "actual_wr": wr_t[k], "expected_wr": wr_star[c], "J": j_t[k],
                             "J_star": j_star[c], "ref_grad": grad_star[c]})
    return pd.DataFrame(rows)


def e4_instance_mlp(seed: int, X: int, d: int, K: int, grid: ParamGrid, hidden: int, device: torch.device,
                    gamma: float = 0.0) -> pd.DataFrame:
    """:func:`e4_instance` with the 2-layer MLP policy (torch, float64) instead of the log-linear one."""
    rng = stream(E4, seed, 0)
    phi_np, r, p_ref_np, P_np = contextual_instance(rng, X, d, K, gamma)
    gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
    sampler = torch.Generator(device=device).manual_seed(int(rng.integers(2**31)))

    def t(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(a, dtype=torch.float64, device=device)

    phi, log_ref, P, p_ref = t(phi_np), t(np.log(p_ref_np)), t(P_np), t(p_ref_np)
    hP = torch.stack([t(H_FUNCTIONS[h](np.clip(P_np, CLIP, 1 - CLIP))) for h in grid.hs])
    R_h = torch.einsum("hxij,xj->hxi", hP, p_ref)
    cells = [(hi, b) for hi in range(len(grid.hs)) for b in grid.betas]
    h_cell = torch.tensor([c[0] for c in cells], device=device)
    b_cell = t(np.array([c[1] for c in cells]))

    def wr(model: mlp_policy.BatchedMLP) -> np.ndarray:
        p = mlp_policy.log_probs(model, phi, log_ref).exp()
        return torch.einsum("rxi,xij,xj->r", p, P, p_ref).cpu().numpy() / X

    def zero_j(h_idx: torch.Tensor) -> np.ndarray:
        return (p_ref * R_h[h_idx]).sum(-1).mean(-1).cpu().numpy()

    star = mlp_policy.reference(phi, log_ref, R_h[h_cell], b_cell, hidden, grid.ref_steps, grid.ref_lr, gen)
    with torch.no_grad():
        j_star = mlp_policy.objective(star, phi, log_ref, R_h[h_cell], b_cell).cpu().numpy()
        wr_star = wr(star)
    j_zero = zero_j(h_cell)
    runs = [(c, lr, rep) for c in range(len(cells)) for lr in grid.lrs for rep in range(grid.repeats)]
    c_idx = torch.tensor([u[0] for u in runs], device=device)
    lr_run = t(np.array([u[1] for u in runs]))
    rows = []
    for steps in grid.steps:
        for batch in grid.batches:
            model = mlp_policy.train_reinforce(phi, log_ref, hP, h_cell[c_idx], b_cell[c_idx], lr_run, batch,
                                               steps, hidden, gen, sampler)
            with torch.no_grad():
                j_t = mlp_policy.objective(model, phi, log_ref, R_h[h_cell[c_idx]], b_cell[c_idx]).cpu().numpy()
                wr_t = wr(model)
            for k, (c, lr, rep) in enumerate(runs):
                rows.append({"seed": seed, "h": grid.hs[int(h_cell[c])], "beta": float(b_cell[c]), "steps": steps,
                             "batch": batch, "lr": lr, "repeat": rep,
                             "success": (j_t[k] - j_zero[c]) / (j_star[c] - j_zero[c]),
                             "actual_wr": wr_t[k], "expected_wr": wr_star[c], "J": j_t[k],
                             "J_star": j_star[c], "ref_grad": float("nan")})
    return pd.DataFrame(rows)


def e4_r_squared(runs: pd.DataFrame) -> dict[str, float]:
    """R^2 of actual WR on (success, success^2), on one-hot(h, beta) cells, and on expected WR."""
    y = runs["actual_wr"].to_numpy()
    s = runs["success"].to_numpy()
    cell = (runs["h"] + "/" + runs["beta"].astype(str)).to_numpy()
    return {"success": pg.r_squared(y, np.column_stack([s, s ** 2])),
            "onehot": pg.r_squared(y, pg.one_hot(cell)),
            "expected": pg.r_squared(y, runs[["expected_wr"]].to_numpy())}


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
