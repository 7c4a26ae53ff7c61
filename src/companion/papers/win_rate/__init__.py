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

This module holds the declarations only (``Params``, ``CLAIMS``); the experiment is in ``experiment.py``,
the figures in ``plots.py``, the ``paper`` preset's MLP policy in ``paper_preset.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from companion.claims import Claim
from companion.contract import exports
from companion.params import BaseParams, ParamError, param

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



CLAIMS = [
    Claim("sft-identity", "consistency check of our derivation: SFT's win rate equals 1/2 + 2 Var_{p_ref}[w] "
          "(largest |difference| over all draws)", "derived here (the paper: SFT's gain is set by the "
          "starting model)", 1e-10, "<=", kind="exact", role="check"),
    Claim("sft-trained", "tabular SFT trained on N_sft winners lands within 0.01 of the closed form "
          "(largest |difference| over all draws)", "spec prototype 0.5743 vs 0.5753", 0.01, "<=", kind="exact",
          role="check"),
    Claim("sft-gain-fraction", "SFT realises at most 40 % of the win-rate gain WRO can reach, "
          "(WR_SFT - 1/2) / (max_y w - 1/2), at the least favourable tau; control: SFT iterated on pairs from "
          "the current model (the mitigation), measured the same way", "bounded gain (Sec. on SFT); "
          "spec prototype 0.17-0.22", 0.4, "<=", controls=("iterated-sft",)),
    Claim("sft-gap", "SFT stays at least 0.1 win rate below the WRO limit max_y w, at the least favourable tau; "
          "control: iterated SFT", "spec prototype 0.23-0.25", 0.1, ">=", controls=("iterated-sft",)),
    Claim("iterated-sft", "corollary under BT (cannot fail: a BT matrix has a monotone likelihood ratio): SFT "
          "iterated on the current model's pairs gains win rate, round 5 beats round 1 (fraction of draws)",
          "suggested mitigation; spec prototype 300/300", 0.95, ">=", kind="exact", role="check"),
    Claim("dpo-discordance", "on an exact KL shell, DPO's population loss disagrees with every h-win rate "
          "(h = id, log, logit): the smallest discordance over h is at least 5 % of policy pairs (mean over "
          "seeds); control: RLHF's objective (WRO with h = logit) on the same shells", "DPO lacks "
          "correspondence; spec prototype mean 0.13 against h = id at kappa 0.3", 0.05, ">=",
          controls=("rlhf",)),
    Claim("dpo-discordance-every-seed", "the same, in every seed (smallest over seeds of the smallest over h); "
          "control: RLHF", "spec prototype min 0.086 against h = id", 0.05, ">=", kind="every",
          controls=("rlhf",)),
    Claim("wro-concordance", "consistency check (holds by construction on an exact shell): the WRO (h = id) "
          "objective orders the shell exactly as the win rate (largest discordance)",
          "WRO has correspondence", 1e-12, "<=", kind="exact", role="check"),
    Claim("dpo-dynamics", "along DPO training on N_pairs pairs, -train loss and the true win rate "
          "have Spearman correlation below 0.5 in at least 15 % of training runs (mean of the per-run "
          "indicator); controls: WRO (h = id) trained on the same pairs, and DPO on population pair weights",
          "lower DPO loss need not mean higher win rate (Fig. 3); spec prototype 5/20", 0.15, ">=",
          controls=("wro-same-pairs", "dpo-population")),
    Claim("success-vs-objective-fixed-budget", "with the budget held fixed (partial R^2 after one-hot(steps, "
          "lr, batch)), optimisation success explains the achieved win rate better than the objective (h, beta): "
          "partial R^2(success) - partial R^2(one-hot h, beta) per instance; control: success shuffled within "
          "budget cells", "optimisation success predicts WR better (the paper's runs vary budgets; "
          "no per-budget number is given)", 0.2, ">=", controls=("shuffled-success",)),
    Claim("success-vs-objective", "pooled over budgets (the spec's regression): R^2(success) - R^2(one-hot h, "
          "beta) per instance; control: the budget alone (one-hot steps, lr, batch) in place of success",
          "spec prototype 0.87-0.91 vs 0.19-0.25", 0.2, ">=", controls=("budget-alone",)),
    Claim("success-vs-expected", "corollary of the pooled row (expected WR is constant within an (h, beta) "
          "cell, so its R^2 cannot exceed the one-hot's): R^2(success) - R^2(expected WR) per instance",
          "spec prototype 0.87-0.91 vs 0.12-0.14", 0.2, ">=", role="check"),
    Claim("id-hardest", "precondition of the grid (one lr grid is shared across reward scales, and h = id has "
          "rewards in [0, 1]): mean success of the next-worst h minus that of h = id, per instance",
          "WRO underperforms through optimisation; spec prototype 0.12-0.21 vs 0.31-0.36", 0.0, ">=",
          role="check"),
]

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "claim_values", "Results", "budget", "grid", "primary_e2", "e4_cells"),
    "plots": ("plot_sft", "plot_shell", "plot_dpo_dynamics", "plot_success", "plot_nlhf"),
})
