"""Preference learning made easy: Everything should be understood through win rate (Zhang & Ranganath, ICML 2025).

arXiv: https://arxiv.org/abs/2502.10505 ; OpenReview UA8DESerfC. No official code was found.

Reproduced on simulated preferences over a finite response set, where every win rate is exact:
E1, SFT on preferred samples has a fixed optimum whose win rate is ``1/2 + 2 Var_{p_ref}[w]``,
far below what win-rate optimisation (WRO) reaches; iterating SFT helps. E2, on an exact KL shell
(all policies at the same regularisation cost) DPO's population loss orders policies differently
from their win rate, WRO's objective does not. E3, DPO's training loss along training need not
track the true win rate. E4, across 432 REINFORCE runs of WRO objectives (h in {id, logit, log},
several beta), how well the objective was optimised predicts the achieved win rate far better
than the choice of objective. The ``full`` preset adds intransitive preferences (DPO's BT-fit
optimum vs WRO vs NLHF by mirror descent); the ``paper`` preset is the largest simulated setting,
with a 2-layer MLP policy in E4 -- the paper's Pythia-2.8B / Anthropic-HH runs cannot run offline.

Written by hand, because no library does them: everything here (exact tabular win rates, DPO
loss and gradient in log-sigmoid form, the KL-shell bisection, the REINFORCE estimator, Nash
mirror descent, the BT Newton fit). The paper body was not readable; the formulas are our own
derivations in the paper's framework (see the page). Kendall discordance is checked against
``scipy.stats.kendalltau`` and the R^2 regressions against ``statsmodels`` in the tests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from tqdm import tqdm

from companion import claims, runtime
from companion.claims import Claim, Verdict
from companion.papers.win_rate import experiments as ex
from companion.papers.win_rate.experiments import DpoCurves, ParamGrid, Shell
from companion.params import BaseParams, ParamError, param
from companion.plotting import figure

SLUG = "win-rate"
H_CHOICES = ("id", "logit", "log")


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the four simulated experiments; defaults are the quick preset."""

    seeds: int = param(5, lo=3, hi=64, help="instance seeds of E2 (KL shell) and E4 (optimisation grid)")
    K_tab: int = param(12, lo=3, hi=200, help="E1/E2: responses per prompt (tabular)")
    tau_list: tuple[float, ...] = param((0.5, 1.0, 2.0), lo=1e-3, hi=100.0,
                                        help="E1: peakedness tau of p_ref = softmax(tau xi)")
    n_seeds_e1: int = param(100, lo=20, hi=5000, help="E1: random instances per tau")
    N_sft: int = param(20000, lo=1000, hi=10_000_000, help="E1: pairs whose winners train tabular SFT")
    sft_rounds: int = param(5, lo=2, hi=50, help="E1: rounds of iterated SFT")
    pref_models: tuple[str, ...] = param(("bt",), choices=("bt", "intransitive"),
                                         help="preference models: bt, and intransitive (adds E2 on it and E5/NLHF)")
    gamma_intrans: float = param(1.0, lo=0.0, hi=10.0, help="strength gamma of the intransitive part A")
    beta_dpo: float = param(0.1, lo=1e-3, hi=10.0, help="E2/E3: DPO's beta (the claims' value)")
    beta_sweep: tuple[float, ...] = param((), lo=1e-3, hi=10.0, min_len=0, help="E2: further DPO betas")
    kappa_shell: float = param(0.3, lo=1e-3, hi=5.0, help="E2: KL radius of the shell (the claims' value)")
    kappa_sweep: tuple[float, ...] = param((), lo=1e-3, hi=5.0, min_len=0, help="E2: further shell radii")
    n_shell: int = param(400, lo=50, hi=5000, help="E2: policies on the shell")
    K_dpo: int = param(20, lo=3, hi=200, help="E3: responses per prompt")
    N_pairs: int = param(100, lo=10, hi=1_000_000, help="E3: preference pairs DPO trains on")
    n_pairs_sweep: tuple[int, ...] = param((), lo=10, hi=1_000_000, min_len=0, help="E3: further pair counts")
    dpo_iters: int = param(4000, lo=40, hi=100_000, help="E3: full-batch DPO steps")
    dpo_lr: float = param(1.0, lo=1e-4, hi=100.0, help="E3: DPO step size")
    n_seeds_e3: int = param(400, lo=5, hi=5000, help="E3: DPO training runs (seeds)")
    X: int = param(64, lo=4, hi=100_000, help="E4: prompts")
    d_x: int = param(6, lo=1, hi=1024, help="E4: prompt feature dimension")
    K_par: int = param(16, lo=3, hi=1024, help="E4: responses per prompt")
    h_list: tuple[str, ...] = param(H_CHOICES, choices=H_CHOICES, help="E4: h of the h-win-rate objectives")
    beta_list: tuple[float, ...] = param((0.05, 0.1, 0.2), lo=1e-3, hi=10.0, help="E4: KL weights beta")
    steps_grid: tuple[int, ...] = param((10, 30, 100, 300), lo=1, hi=100_000, help="E4: REINFORCE step budgets")
    lr_grid: tuple[float, ...] = param((0.03, 0.1, 0.3), lo=1e-5, hi=100.0, help="E4: REINFORCE step sizes")
    batch_grid: tuple[int, ...] = param((4, 32), lo=2, hi=4096, help="E4: REINFORCE batch sizes (>= 2)")
    repeats_e4: int = param(2, lo=1, hi=50, help="E4: repeats of every budget cell")
    ref_steps: int = param(3000, lo=10, hi=100_000, help="E4: exact-gradient steps of the reference optimum")
    policy_class: str = param("linear", choices=("linear", "mlp"),
                              help="E4 policy: log-linear (numpy) or 2-layer MLP (torch)")
    mlp_hidden: int = param(64, lo=4, hi=4096, help="E4: hidden width of the MLP policy")
    smoke: bool = param(False, help="the same pipeline on a tiny budget (seconds)")

    PRESETS = {
        "full": {"seeds": 10, "tau_list": (0.25, 0.5, 1.0, 2.0, 4.0), "n_seeds_e1": 500, "N_sft": 100_000,
                 "pref_models": ("bt", "intransitive"), "beta_sweep": (0.05, 0.5), "kappa_sweep": (0.1, 1.0),
                 "n_shell": 600, "n_pairs_sweep": (50, 400), "dpo_iters": 4000, "n_seeds_e3": 200,
                 "X": 256, "d_x": 8, "K_par": 32, "beta_list": (0.02, 0.05, 0.1, 0.2, 0.5),
                 "steps_grid": (10, 30, 100, 300, 1000), "lr_grid": (0.03, 0.1, 0.3, 1.0),
                 "batch_grid": (4, 32, 128), "repeats_e4": 2},
        # not the paper's setting (Pythia-2.8B on Anthropic-HH cannot run offline): the largest simulated one
        "paper": {"seeds": 5, "K_tab": 32, "tau_list": (0.25, 0.5, 1.0, 2.0, 4.0), "n_seeds_e1": 500,
                  "N_sft": 100_000, "pref_models": ("bt", "intransitive"), "beta_sweep": (0.05, 0.5),
                  "kappa_sweep": (0.1, 1.0), "n_shell": 1000, "K_dpo": 32, "n_pairs_sweep": (50, 400),
                  "dpo_iters": 8000, "n_seeds_e3": 1000, "X": 1024, "d_x": 16, "K_par": 64,
                  "beta_list": (0.02, 0.05, 0.1, 0.2, 0.5), "steps_grid": (30, 100, 300, 1000),
                  "lr_grid": (0.03, 0.1, 0.3, 1.0), "batch_grid": (32, 128), "repeats_e4": 2,
                  "policy_class": "mlp", "mlp_hidden": 128},
    }

    def __post_init__(self) -> None:
        if len(self.h_list) * len(self.beta_list) < 2:
            raise ParamError(f"parameter 'beta_list': {list(self.beta_list)!r} with h_list {list(self.h_list)!r} "
                             "gives one objective; allowed: at least two (h, beta) cells for the E4 regression")
        if len(self.steps_grid) * len(self.lr_grid) * len(self.batch_grid) * self.repeats_e4 < 3:
            raise ParamError(f"parameter 'steps_grid': {list(self.steps_grid)!r} with lr_grid, batch_grid and "
                             "repeats_e4 gives fewer than 3 runs per objective; allowed: at least 3")
        if "intransitive" in self.pref_models and self.gamma_intrans == 0:
            raise ParamError("parameter 'gamma_intrans': 0.0 with pref_models 'intransitive'; allowed: > 0 "
                             "(gamma = 0 is the BT model)")
        if "bt" not in self.pref_models:
            raise ParamError(f"parameter 'pref_models': {list(self.pref_models)!r}; allowed: a list containing "
                             "'bt' (the claims are measured under BT preferences)")


def budget(params: Params) -> Params:
    """The parameters actually run: ``smoke`` shrinks every experiment to a few seconds."""
    if not params.smoke:
        return params
    from dataclasses import replace

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
    e3: DpoCurves
    e3_sweep: pd.DataFrame
    e4: pd.DataFrame
    e4_r2: pd.DataFrame
    e5: pd.DataFrame | None
    seconds: dict[str, float]


def grid(params: Params) -> ParamGrid:
    """The E4 grid of the parameters (the MLP reference uses Adam at 0.01, the linear one GD at 0.5)."""
    return ParamGrid(params.h_list, params.beta_list, params.steps_grid, params.lr_grid, params.batch_grid,
                     params.repeats_e4, params.ref_steps, 0.01 if params.policy_class == "mlp" else 0.5)


def run(params: Params) -> Results:
    """Run E1-E4 (and E5 when intransitive preferences are asked for) under ``params``."""
    runtime.limit_threads()
    p = budget(params)
    secs: dict[str, float] = {}
    tick = time.perf_counter()
    e1 = ex.e1_sft(p.seed, p.n_seeds_e1, p.K_tab, p.tau_list, p.N_sft, p.sft_rounds)
    secs["E1"], tick = time.perf_counter() - tick, time.perf_counter()
    kappas = (p.kappa_shell, *[k for k in p.kappa_sweep if k != p.kappa_shell])
    betas = (p.beta_dpo, *[b for b in p.beta_sweep if b != p.beta_dpo])
    gammas = [0.0] + ([p.gamma_intrans] if "intransitive" in p.pref_models else [])
    e2 = pd.concat([ex.e2_table(p.seed, p.seeds, p.K_tab, kappas, betas, p.n_shell, g) for g in gammas],
                   ignore_index=True)
    shell = ex.e2_shell(ex.stream(ex.E2, p.seed, 0), p.K_tab, p.kappa_shell, p.beta_dpo, p.n_shell)
    secs["E2"], tick = time.perf_counter() - tick, time.perf_counter()
    e3 = ex.e3_dpo(p.seed, p.n_seeds_e3, p.K_dpo, p.N_pairs, p.beta_dpo, p.dpo_lr, p.dpo_iters)
    sweep = [e3] + [ex.e3_dpo(p.seed, p.n_seeds_e3, p.K_dpo, n, p.beta_dpo, p.dpo_lr, p.dpo_iters)
                    for n in p.n_pairs_sweep if n != p.N_pairs]
    e3_sweep = pd.DataFrame([{"N_pairs": c.n_pairs, "frac_below_half": float(np.mean(c.spearman < 0.5)),
                              "frac_negative": float(np.mean(c.spearman < 0)),
                              "frac_wr_falls": float(np.mean(c.wr[:, -1] < c.wr.max(axis=1) - 0.005)),
                              "median_spearman": float(np.median(c.spearman))} for c in sweep])
    secs["E3"], tick = time.perf_counter() - tick, time.perf_counter()
    g = grid(p)
    if p.policy_class == "mlp":
        device = runtime.resolve_device(p.device)
        tables = [ex.e4_instance_mlp(s, p.X, p.d_x, p.K_par, g, p.mlp_hidden, device)
                  for s in tqdm(p.seed_list(), desc="E4 instances", disable=None, leave=False)]
    else:  # one process per core once an instance costs more than starting a process
        workers = runtime.cores() if p.X * p.K_par >= 4096 else 1
        tables = runtime.parallel_map(ex.e4_instance, [(s, p.X, p.d_x, p.K_par, g) for s in p.seed_list()],
                                      workers=workers)
    e4 = pd.concat(tables, ignore_index=True)
    e4_r2 = pd.DataFrame([{"seed": s, **ex.e4_r_squared(t)} for s, t in e4.groupby("seed")])
    secs["E4"], tick = time.perf_counter() - tick, time.perf_counter()
    e5 = (ex.e5_nlhf(p.seed, p.seeds, p.K_tab, betas, p.gamma_intrans)
          if "intransitive" in p.pref_models else None)
    secs["E5"] = time.perf_counter() - tick
    return Results(params, e1, e2, shell, e3, e3_sweep, e4, e4_r2, e5, secs)


# ----------------------------------------------------------------------------- claims

CLAIMS = [
    Claim("sft-identity", "consistency check of our derivation: SFT's win rate equals 1/2 + 2 Var_{p_ref}[w] "
          "(largest |difference| over all draws)", "derived here (the paper: SFT's gain is set by the "
          "starting model)", 1e-10, "<=", kind="exact"),
    Claim("sft-trained", "tabular SFT trained on N_sft winners lands within 0.01 of the closed form "
          "(largest |difference| over all draws)", "spec prototype 0.5743 vs 0.5753", 0.01, "<=", kind="exact"),
    Claim("sft-gain-fraction", "SFT realises at most 40 % of the win-rate gain WRO can reach, "
          "(WR_SFT - 1/2) / (max_y w - 1/2), at the least favourable tau", "bounded gain (Sec. on SFT); "
          "spec prototype 0.17-0.22", 0.4, "<="),
    Claim("sft-gap", "SFT stays at least 0.1 win rate below the WRO limit max_y w, at the least favourable tau",
          "spec prototype 0.23-0.25", 0.1, ">="),
    Claim("iterated-sft", "SFT iterated on the current model's pairs gains win rate: round 5 beats round 1 "
          "(fraction of draws)", "suggested mitigation; spec prototype 300/300", 0.95, ">=", kind="exact"),
    Claim("dpo-discordance", "on an exact KL shell, DPO's population loss and the win rate disagree on the order "
          "of at least 5 % of policy pairs (mean over seeds)", "DPO lacks correspondence; spec prototype "
          "mean 0.13 at kappa 0.3", 0.05, ">="),
    Claim("dpo-discordance-every-seed", "the same, in every seed (smallest discordance)",
          "spec prototype min 0.086", 0.05, ">=", kind="exact"),
    Claim("wro-concordance", "consistency check (holds by construction on an exact shell): the WRO (h = id) "
          "objective orders the shell exactly as the win rate (largest discordance)",
          "WRO has correspondence", 1e-12, "<=", kind="exact"),
    Claim("dpo-dynamics", "soft check: along DPO training, -train loss and the true win rate have Spearman "
          "correlation below 0.5 in at least 15 % of training runs (mean of the per-run indicator)",
          "lower DPO loss need not mean higher win rate (Fig. 3); spec prototype 5/20", 0.15, ">="),
    Claim("success-vs-objective", "optimisation success explains the achieved win rate better than the "
          "objective (h, beta) does: R^2(success) - R^2(one-hot h, beta) per instance",
          "optimisation success predicts WR better; spec prototype 0.87-0.91 vs 0.19-0.25", 0.2, ">="),
    Claim("success-vs-expected", "... and better than the objective's own optimum does: "
          "R^2(success) - R^2(expected WR) per instance", "spec prototype 0.87-0.91 vs 0.12-0.14", 0.2, ">="),
    Claim("id-hardest", "mechanism: the h = id objective (rewards in [0, 1]) is the hardest to optimise: "
          "mean success of the next-worst h minus that of h = id, per instance",
          "WRO underperforms through optimisation; spec prototype 0.12-0.21 vs 0.31-0.36", 0.0, ">="),
]


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
    """The measured value(s) of every claim: lists per seed (statistical) or one number (exact)."""
    e1, e2, r2 = results.e1, primary_e2(results), results.e4_r2
    return {
        "sft-identity": float((e1["closed"] - e1["identity"]).abs().max()),
        "sft-trained": float((e1["trained"] - e1["closed"]).abs().max()),
        "sft-gain-fraction": worst_tau(e1, "gain_fraction", "<=")[1],
        "sft-gap": worst_tau(e1, "gap", ">=")[1],
        "iterated-sft": float(np.mean(e1[f"round{results.params.sft_rounds}"] > e1["round1"])),
        "dpo-discordance": list(e2["dpo"]),
        "dpo-discordance-every-seed": claims.worst(e2["dpo"], ">="),
        "wro-concordance": float(e2["wro"].max()),
        "dpo-dynamics": list((results.e3.spearman < 0.5).astype(float)),
        "success-vs-objective": list(r2["success"] - r2["onehot"]),
        "success-vs-expected": list(r2["success"] - r2["expected"]),
        "id-hardest": id_margin(results.e4),
    }


def check(results: Results) -> list[Verdict]:
    """Evaluate :data:`CLAIMS`."""
    return claims.evaluate_all(CLAIMS, claim_values(results))


def _r(x: float, n: int = 4) -> float:
    return round(float(x), n)


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary of the four experiments (and E5 when run)."""
    e1, e2, e4 = results.e1, results.e2, results.e4
    g1 = e1.groupby("tau")
    out: dict[str, Any] = {
        "sft_wr_by_tau": {str(k): _r(v) for k, v in g1["closed"].mean().items()},
        "sft_trained_wr_by_tau": {str(k): _r(v) for k, v in g1["trained"].mean().items()},
        "iterated_wr_by_tau": {str(k): _r(v) for k, v in g1[f"round{results.params.sft_rounds}"].mean().items()},
        "wro_limit_by_tau": {str(k): _r(v) for k, v in g1["limit"].mean().items()},
        "gain_fraction_by_tau": {str(k): _r(v) for k, v in g1["gain_fraction"].mean().items()},
        "gap_by_tau": {str(k): _r(v) for k, v in g1["gap"].mean().items()},
        "dpo_discordance": [_r(v) for v in primary_e2(results)["dpo"]],
        "e2_by_setting": [{k: _r(v) for k, v in row.items()} for row in
                          e2.groupby(["gamma", "kappa", "beta"])[["dpo", "wro", "rlhf_vs_wr", "rlhf_vs_logit_wr"]]
                          .mean().reset_index().to_dict("records")],
        "e2_max_kl_error": float(e2["kl_error"].max()),
        "e3_spearman": [_r(v, 3) for v in results.e3.spearman],
        "e3_by_n_pairs": results.e3_sweep.round(4).to_dict("records"),
        "e4_r2": results.e4_r2.round(4).to_dict("records"),
        "e4_success_by_h": {k: _r(v) for k, v in e4.groupby("h")["success"].mean().items()},
        "e4_max_success": _r(e4["success"].max()),
        "seconds": {k: round(v, 2) for k, v in results.seconds.items()},
    }
    if results.e5 is not None:
        out["e5_by_beta"] = results.e5.groupby("beta")[["wr_dpo", "wr_wro", "wr_nlhf", "nlhf_vs_wro"]].mean() \
            .round(4).reset_index().to_dict("records")
        out["e5_max_nlhf_residual"] = float(results.e5["nlhf_residual"].max())
    return out


def e4_cells(results: Results) -> pd.DataFrame:
    """Per (h, beta): mean expected WR, actual WR and success over runs and instances."""
    return results.e4.groupby(["h", "beta"])[["expected_wr", "actual_wr", "success"]].mean().round(3)


# ----------------------------------------------------------------------------- figures

def plot_sft(results: Results) -> Figure:
    """Left: mean WR per tau of p_ref, SFT (closed form, trained), iterated SFT and the WRO limit.
    Right: SFT's gain over 1/2 against 2 Var_{p_ref}[w], one point per draw, on the diagonal."""
    e1, rounds = results.e1, results.params.sft_rounds
    fig, axes = figure(2, 1, width=4.2, height=3.0)
    taus = sorted(e1["tau"].unique())
    cols = [("p_ref", None), ("SFT (closed form)", "closed"), ("SFT (trained)", "trained"),
            *[(f"iterated, round {k}", f"round{k}") for k in range(2, rounds + 1)], ("WRO limit max w", "limit")]
    width = 0.85 / len(cols)
    for i, (label, col) in enumerate(cols):
        vals = [0.5 if col is None else e1.loc[e1["tau"] == t, col].mean() for t in taus]
        axes[0].bar(np.arange(len(taus)) + (i - len(cols) / 2 + 0.5) * width, vals, width, label=label)
    axes[0].set_xticks(np.arange(len(taus)), [f"tau={t:g}" for t in taus])
    axes[0].set(ylim=(0.45, 0.85), ylabel="win rate against p_ref")
    axes[0].legend(fontsize=6, ncols=2, loc="upper left")
    for t in taus:
        sub = e1[e1["tau"] == t]
        axes[1].scatter(sub["two_var"], sub["closed"] - 0.5, s=6, alpha=0.6, label=f"tau={t:g}")
    lim = float(e1["two_var"].max()) * 1.05
    axes[1].plot([0, lim], [0, lim], "k--", linewidth=0.8, label="y = x")
    axes[1].set(xlabel="2 Var_{p_ref}[w]", ylabel="WR(p_SFT) - 1/2")
    axes[1].legend(fontsize=7)
    return fig


def plot_shell(results: Results) -> Figure:
    """Left: population DPO loss vs WR on the KL shell (first seed). Middle: WRO objective vs WR.
    Right: DPO discordance per seed against the shell radius kappa (BT, claims' beta)."""
    s, p = results.shell, results.params
    fig, axes = figure(3, 1, width=3.3, height=2.9)
    axes[0].scatter(s.wr, s.dpo_loss, s=5, alpha=0.6)
    axes[0].set(xlabel="win rate against p_ref", ylabel="population DPO loss",
                title=f"KL = {p.kappa_shell:g}, beta = {p.beta_dpo:g}")
    axes[1].scatter(s.wr, s.wro_objective, s=5, alpha=0.6, color="C1")
    axes[1].set(xlabel="win rate against p_ref", ylabel="WRO objective WR - beta KL")
    t = results.e2[(results.e2["beta"] == p.beta_dpo) & (results.e2["gamma"] == 0.0)]
    axes[2].scatter(t["kappa"], t["dpo"], s=10, alpha=0.7, label="DPO")
    axes[2].scatter(t["kappa"], t["wro"], s=10, alpha=0.7, marker="x", label="WRO (h = id)")
    axes[2].axhline(0.05, color="black", linestyle="--", linewidth=0.8, label="claim bar 0.05")
    axes[2].set(xscale="log", xlabel="shell radius kappa", ylabel="discordance with WR")
    axes[2].legend(fontsize=7)
    return fig


def plot_dpo_dynamics(results: Results) -> Figure:
    """DPO train loss (left axis, solid) and true WR (right axis, dashed) along training for four seeds:
    the two with the lowest Spearman(-loss, WR) and the two with the highest."""
    c = results.e3
    order = np.argsort(c.spearman)
    picks = [*order[:2], *order[-2:]]
    fig, axes = figure(4, 1, width=2.6, height=2.6)
    for ax, i in zip(axes, picks):
        ax.plot(c.steps, c.loss[i], color="C0")
        ax.set(xlabel="DPO step", title=f"Spearman {c.spearman[i]:.2f}")
        twin = ax.twinx()
        twin.plot(c.steps, c.wr[i], color="C3", linestyle="--")
        twin.tick_params(axis="y", colors="C3")
        twin.grid(False)
    axes[0].set_ylabel("train loss (solid)")
    twin.set_ylabel("true win rate (dashed)", color="C3")
    return fig


def plot_success(results: Results) -> Figure:
    """Left: actual WR vs optimisation success, coloured by h, marker by beta, with the R^2 in the legend.
    Right: expected (reference optimum) vs actual WR per (h, beta) cell: the analogue of the paper's Fig. 2."""
    e4, r2 = results.e4, results.e4_r2
    fig, axes = figure(2, 1, width=4.2, height=3.2)
    markers = "osD^vP*"
    hs, betas = list(dict.fromkeys(e4["h"])), sorted(e4["beta"].unique())
    for i, h in enumerate(hs):
        for j, b in enumerate(betas):
            sub = e4[(e4["h"] == h) & (e4["beta"] == b)]
            axes[0].scatter(sub["success"], sub["actual_wr"], s=6, alpha=0.5, color=f"C{i}",
                            marker=markers[j % len(markers)], label=f"h={h}" if j == 0 else None)
    axes[0].plot([], [], " ", label=f"R2 success {r2['success'].mean():.2f}")
    axes[0].plot([], [], " ", label=f"R2 one-hot(h, beta) {r2['onehot'].mean():.2f}")
    axes[0].set(xlabel="optimisation success s", ylabel="actual win rate")
    axes[0].legend(fontsize=7)
    cells = e4.groupby(["h", "beta"])[["expected_wr", "actual_wr"]].mean().reset_index()
    for i, h in enumerate(hs):
        sub = cells[cells["h"] == h]
        axes[1].scatter(sub["expected_wr"], sub["actual_wr"], color=f"C{i}", label=f"h={h}")
    lo = float(min(cells["actual_wr"].min(), 0.5))
    hi = float(cells["expected_wr"].max())
    axes[1].plot([lo, hi], [lo, hi], "k--", linewidth=0.8, label="y = x")
    axes[1].set(xlabel="expected WR (reference optimum)", ylabel="actual WR (mean over budgets)")
    axes[1].legend(fontsize=7)
    return fig


def plot_nlhf(results: Results) -> Figure:
    """Intransitive preferences (E5): WR against p_ref of DPO's optimum (best BT fit), WRO (h = id) and NLHF
    by beta, and NLHF's win rate against the WRO optimum."""
    fig, axes = figure(2, 1, width=3.6, height=2.8)
    if results.e5 is None:
        for ax in axes:
            ax.text(0.5, 0.5, "E5 runs with pref_models = bt, intransitive\n(the full preset)",
                    ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        return fig
    m = results.e5.groupby("beta").mean(numeric_only=True)
    for col, label in (("wr_dpo", "DPO optimum (BT fit)"), ("wr_wro", "WRO, anchor p_ref"),
                       ("wr_nlhf", "NLHF (self-play)")):
        axes[0].plot(m.index, m[col], marker="o", label=label)
    axes[0].set(xscale="log", xlabel="beta", ylabel="win rate against p_ref")
    axes[0].legend(fontsize=7)
    axes[1].plot(m.index, m["nlhf_vs_wro"], marker="o", color="C2")
    axes[1].axhline(0.5, color="black", linestyle="--", linewidth=0.8)
    axes[1].set(xscale="log", xlabel="beta", ylabel="P(NLHF beats WRO optimum)")
    return fig
