"""Computing Voting Rules with Improvement Feedback (Micha & Varsamis, ICML 2025).

arXiv: https://arxiv.org/abs/2502.12542. A voter shown candidate ``a`` answers with a candidate at
most ``t`` positions above ``a`` in their ranking (or ``a`` itself when ``a`` is their top). The
paper characterises which positional scoring rules can be computed from the distribution of such
answers (plurality and one t-dependent vector, up to linear combination and constants), proves
that no Condorcet-consistent rule can, and compares improvement with pairwise feedback in
simulations (m = 20, t = 5; Mallows, impartial culture, Plackett-Luce voters).

Reproduced in three parts: (A) the characterisation, computed on the exact feedback operator for
small m (:mod:`.theory`); (B) pairs of profiles with identical feedback and different Borda or
Condorcet winners, by LP, with a finite-sample demo; (C) the simulation (:mod:`.experiment`), where
the official estimator is also run without its plurality injection, on plurality answers alone and
with its improvement answers randomised, to see what the improvement answers add. This module holds
the declarations; the experiment, figures (:mod:`.plots`), samplers (:mod:`.rankings`) and
estimators (:mod:`.voting_feedback`) load on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from companion.claims import Claim
from companion.contract import exports
from companion.params import BaseParams, ParamError, param

KINDS = ("unif", "lin", "exp")
DISTRIBUTIONS = ("mallows", "pl", "ic")


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the three parts; defaults are the quick preset."""

    seeds: int = param(5, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    m_theory: tuple[int, ...] = param((4, 5), lo=3, hi=6, help="numbers of candidates for the exact theory (m! columns)")
    feedback_kinds: tuple[str, ...] = param(("unif", "lin"), choices=KINDS, help="answer weights inside the t-window")
    null_tol: float = param(1e-10, lo=1e-13, hi=1e-6, help="relative singular-value tolerance for ranks")
    lp_m: int = param(5, lo=4, hi=6, help="m of the claimed LP constructions and the finite-sample demo")
    lp_t_borda: int = param(2, lo=1, hi=5, help="t of the Borda pair used in the finite-sample demo")
    n_pair_demo: int = param(2000, lo=200, hi=10**6, help="voters per sample in the demo")
    reps_pair_demo: int = param(500, lo=50, hi=10**5, help="repetitions of the demo per seed")
    m_exp: int = param(20, lo=5, hi=30, help="candidates in the simulation")
    t_exp: int = param(5, lo=1, hi=29, help="improvement window in the simulation")
    n_list: tuple[int, ...] = param((50, 200, 1000), lo=10, hi=10**5, help="numbers of voters")
    reps_exp: int = param(200, lo=50, hi=10**5, help="repetitions per (distribution, n) and seed")
    t_sweep: tuple[int, ...] = param((1, 5, 13), lo=1, hi=29, min_len=0, help="window sizes swept at n = 500 (empty: skip)")
    sweep_seeds: int = param(1, lo=1, hi=64, help="seeds the t-sweep (a figure, no claim) runs on, from the base seed")
    mallows_phi: float = param(1 / 3, lo=1e-6, hi=1.0, help="Mallows dispersion, P proportional to phi**KT")
    pl_weights: str = param("paper", choices=("paper", "uniform-seeded"), help="Plackett-Luce weights")
    distributions: tuple[str, ...] = param(DISTRIBUTIONS, choices=DISTRIBUTIONS, help="voter models")

    PRESETS = {
        "full": {"m_theory": (4, 5, 6), "feedback_kinds": KINDS, "n_pair_demo": 20000,
                 "reps_pair_demo": 1000, "n_list": tuple(range(50, 1001, 50)), "reps_exp": 500,
                 "t_sweep": (1, 4, 7, 10, 13), "sweep_seeds": 5},
        "paper": {"m_theory": (4, 5, 6), "feedback_kinds": KINDS, "n_pair_demo": 20000,
                  "reps_pair_demo": 1000, "n_list": tuple(range(50, 1001, 50)), "reps_exp": 500,
                  "t_sweep": (1, 4, 7, 10, 13), "sweep_seeds": 10, "seeds": 10},
    }

    @classmethod
    def resolve(cls, preset: str = "quick", **overrides: Any) -> Params:
        """Validate each value, then the windows against the numbers of candidates."""
        p = super().resolve(preset, **overrides)
        if p.lp_t_borda >= p.lp_m:
            raise ParamError(f"parameter 'lp_t_borda': {p.lp_t_borda} is out of range; allowed: < lp_m = {p.lp_m}")
        if p.t_exp >= p.m_exp or any(t >= p.m_exp for t in p.t_sweep):
            raise ParamError(f"parameters 't_exp' / 't_sweep': each must be < m_exp = {p.m_exp}")
        if p.sweep_seeds > p.seeds:
            raise ParamError(f"parameter 'sweep_seeds': {p.sweep_seeds} is out of range; allowed: <= seeds = {p.seeds}")
        return p


CLAIMS = [
    # Part A: the characterisation, computed on the exact operators
    Claim("characterization", "learnable scoring vectors = span{plurality, s*_t, 1}: fraction of (m, t, kind) "
          "cases with dim L = 3 and residuals < 1e-8 (computed once); controls: the same test on pairwise and "
          "on full-ranking feedback", "main theorem: only plurality and s*_t (no number)", 1.0, kind="exact",
          controls=("pairwise", "full-ranking")),
    Claim("borda-residual", "Borda is not learnable at m = lp_m, uniform feedback: min over t of its distance to "
          "L (computed once); controls: Borda under pairwise feedback, plurality under improvement feedback",
          "Borda not learnable in general (no number)", 1e-3, kind="exact", controls=("pairwise", "plurality")),
    Claim("borda-coincidence", "Borda is learnable exactly where span{plurality, s*_t, 1} contains it: number of "
          "cases where the computed residual disagrees (computed once)", "not in the paper (our corollary)", 0.0,
          "<=", kind="exact", role="check"),
    # Part B: indistinguishable pairs
    Claim("borda-lp", "LP pair with equal feedback, different Borda winners: min over t of margin delta* at "
          "m = lp_m (computed once); controls: the same LP under pairwise feedback, and for plurality",
          "Borda not computable: delta* > 0 (no number); bar is the spec's", 0.05, kind="exact",
          controls=("pairwise", "plurality")),
    Claim("condorcet-lp", "LP pair with equal feedback, different Condorcet winners: min over t of delta* at "
          "m = lp_m, 0 if feedback differs by > 1e-9 (computed once); control: pairwise feedback",
          "no Condorcet-consistent rule: delta* > 0 (no number); bar is the spec's", 0.15, kind="exact",
          controls=("pairwise",)),
    Claim("plurality-equal", "equal feedback fixes the plurality scores: max |plurality(pi) - plurality(pi')| of "
          "the Borda pair (computed once)", "plurality is learnable", 1e-12, "<=", kind="exact", role="check"),
    Claim("feedback-chi2", "calibration: samples of the Borda pair (equal feedback by construction): chi-square "
          "rejection rate of feedback counts at 5%", "identical feedback distributions", 0.10, "<=", role="check"),
    Claim("ranking-chi2", "power: same samples, rejection rate of full-ranking counts", "the profiles differ",
          0.95, role="check"),
    # Part C: the simulation; controls share each repetition's profiles and feedback sample
    Claim("mallows-gain", "Mallows, n = min(n_list): Borda ratio, official estimator on improvement (unif) "
          "feedback - pairwise, paired mean; controls: plurality answers only, the estimator without the "
          "plurality injection, the same gap under impartial culture",
          "improvement beats pairwise (Fig., m=20, t=5; no number in the text)", 0.03,
          controls=("plurality-only", "no-injection", "ic")),
    Claim("mallows-over-plurality", "same setting: Borda ratio, official estimator - plurality answers only "
          "(what the improvement answers add); control: improvement answers replaced by random candidates",
          "not in the paper (the question of issue 52)", 0.01, controls=("random-answers",)),
    Claim("pl-loss", "Plackett-Luce, n in n_list >= 200 pooled: Borda ratio, improvement (unif) - pairwise, "
          "paired mean; controls as for mallows-gain",
          "pairwise beats improvement under PL (Fig.; no number in the text)", -0.01, "<=",
          controls=("plurality-only", "no-injection", "ic")),
    Claim("plurality-mallows", "Mallows, n = max(n_list): plurality ratio from improvement feedback; control: "
          "the constant guess candidate 0 (the Mallows centre's top)", "plurality learnable", 0.99,
          controls=("constant-0",)),
]

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "claim_values", "Results", "comparison_table", "demo_table", "coincidences"),
    "plots": ("plot_theory", "plot_pairs", "plot_ratios", "plot_sweep"),
})
