"""Privacy-Preserving Federated Convex Optimization: Balancing Partial-Participation and
Efficiency via Noise Cancellation — Roie Reshef, Kfir Y. Levy, ICML 2025.
arXiv: https://arxiv.org/abs/2506.02563

What is reproduced: differentially private federated SCO where only m of M machines take part in
each round. The method is mu^2-FL (anytime averaging + STORM-style corrected momentum, weights
alpha_t = t) whose machines add *noise cancellation*: each participation adds a fresh Gaussian
vector and subtracts the machine's previous one, so the server state carries one live noise
vector per machine instead of a random walk. It is compared at equal (epsilon, delta) with fresh
per-message noise (``naive``, the method without cancellation) and one-pass DP federated SGD
(``dpfedsgd``) on synthetic logistic regression, and against the untrained model x = 0, the
control of every utility finding. The noise-cancellation algorithm and its privacy calibration are
our reconstruction from the paper's abstract and its 2024 predecessor (the algorithm box could not
be read); the accountant cross-check uses ``opacus``.

The paper is synthetic here and has no ``paper_preset.py``: no data or weights are loaded. The
``paper`` preset is a larger synthetic setting of our choosing (M = 100, m = 10, d = 20, n up to
16000, delta = 1e-7, RDP calibration), not the paper's own scale, whose experiments we could not
read. This module holds the declarations; the experiment (:mod:`.experiment`), the simulator
(:mod:`.simulator`), the privacy calibration (:mod:`.privacy`) and the figures (:mod:`.plots`)
load on first use.
"""

from __future__ import annotations

from dataclasses import dataclass

from companion.claims import Claim
from companion.contract import exports
from companion.params import BaseParams, ParamError, param

METHODS = ("nc", "naive", "dpfedsgd", "nonprivate_mu2", "trusted_nc", "nonprivate_fedsgd")
NEEDED = ("nc", "naive", "dpfedsgd")


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the dp-fl-partial reproduction (defaults = quick preset)."""

    seeds: int = param(16, lo=2, hi=64, help="evaluation seeds (claims); tuning seeds are separate")
    M: int = param(20, lo=2, hi=1000, help="number of machines")
    m: int = param(5, lo=1, hi=1000, help="machines per round (must divide M)")
    d: int = param(5, lo=1, hi=200, help="dimension")
    n_list: tuple[int, ...] = param((250, 1000, 4000), lo=50, hi=100_000, min_len=2,
                                    help="samples per machine")
    n_claim: int = param(4000, lo=50, hi=100_000, help="n of the ratio findings (in n_list)")
    eps_list: tuple[float, ...] = param((4.0,), lo=0.01, hi=100.0, help="privacy epsilons")
    eps_claim: float = param(4.0, lo=0.01, hi=100.0, help="epsilon of the claims (in eps_list)")
    delta: float = param(1e-5, lo=1e-12, hi=0.1, help="privacy delta (< 1/n)")
    D: float = param(2.0, lo=0.1, hi=100.0, help="radius of the constraint ball")
    w_star_norm: float = param(1.5, lo=0.0, hi=100.0, help="norm of the true weights (< D)")
    hetero_zeta: float = param(1.0, lo=0.0, hi=10.0, help="heterogeneity of the hetero-nc-wins run")
    methods: tuple[str, ...] = param(("nc", "naive", "dpfedsgd", "nonprivate_mu2"), choices=METHODS,
                                     help="methods to run")
    c_grid_mu2_private: tuple[float, ...] = param((3e-5, 1e-4, 3e-4, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0),
                                                  lo=1e-6,
                                                  hi=1000.0, help="step grid of private mu2 methods (eta is c/T)")
    c_grid_fedsgd: tuple[float, ...] = param((0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0), lo=1e-6, hi=1000.0,
                                             help="step grid of DP-FedSGD (eta_t is c/sqrt(t))")
    c_grid_nonprivate: tuple[float, ...] = param((0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0), lo=1e-6, hi=1000.0,
                                                 help="step grid of the non-private references")
    n_tune_seeds: int = param(8, lo=2, hi=64, help="seeds used only to pick the step size")
    n_test: int = param(100_000, lo=20_000, hi=2_000_000, help="test points estimating F")
    calibration: str = param("zcdp", choices=("zcdp", "rdp"), help="noise calibration")
    noise_mc_draws: int = param(2000, lo=200, hi=100_000, help="draws per seed of the noise-only check")
    noise_epochs: int = param(50, lo=4, hi=10_000, help="epochs (of M/m rounds) of the noise-only check")

    PRESETS = {
        "full": {
            "seeds": 20, "n_tune_seeds": 8, "n_list": (250, 500, 1000, 2000, 4000, 8000),
            "eps_list": (0.5, 1.0, 2.0, 4.0), "n_test": 200_000, "noise_mc_draws": 5000, "noise_epochs": 100,
            "methods": METHODS,
            "c_grid_mu2_private": (1e-5, 3e-5, 1e-4, 3e-4, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0),
            "c_grid_fedsgd": (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
            "c_grid_nonprivate": (0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0),
        },
        "paper": {
            "seeds": 50, "n_tune_seeds": 16, "M": 100, "m": 10, "d": 20,
            "n_list": (500, 1000, 2000, 4000, 8000, 16000), "n_claim": 8000,
            "eps_list": (0.25, 0.5, 1.0, 2.0, 4.0), "delta": 1e-7, "n_test": 1_000_000,
            "noise_mc_draws": 20_000, "noise_epochs": 500, "methods": METHODS, "calibration": "rdp",
            "c_grid_mu2_private": (3e-5, 1e-4, 3e-4, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0),
            "c_grid_fedsgd": (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
            "c_grid_nonprivate": (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0),
        },
    }

    def __post_init__(self) -> None:
        if self.M % self.m:
            raise ParamError(f"parameter 'm': {self.m} does not divide M={self.M}; allowed: a divisor of M")
        if self.n_claim not in self.n_list:
            raise ParamError(f"parameter 'n_claim': {self.n_claim} is not in n_list {self.n_list}")
        if self.eps_claim not in self.eps_list:
            raise ParamError(f"parameter 'eps_claim': {self.eps_claim} is not in eps_list {self.eps_list}")
        if self.w_star_norm >= self.D:
            raise ParamError(f"parameter 'w_star_norm': {self.w_star_norm} must be < D={self.D}")
        if self.delta >= 1.0 / max(self.n_list):
            raise ParamError(f"parameter 'delta': {self.delta} must be < 1/n for every n in n_list")
        missing = [k for k in NEEDED if k not in self.methods]
        if missing:
            raise ParamError(f"parameter 'methods': must include {', '.join(NEEDED)} (missing {missing[0]})")


UTILITY_CONTROLS = ("untrained", "no-cancellation")

CLAIMS = [
    # findings: each with the untrained model x = 0 and NC without cancellation (naive) in NC's place
    Claim("nc-beats-baselines",
          "At equal (eps_claim, delta) and n = n_claim, NC's excess loss is at most 1/4 of the better baseline's "
          "(naive mu2-FL or DP-FedSGD): per-seed ratio NC / best baseline (bootstrap interval); controls: the "
          "untrained x = 0 and naive mu2-FL in NC's place",
          "optimal private rate under partial participation (abstract, main theorem); no number readable; "
          "bar 1/4 is the spec's", 0.25, "<=", interval="bootstrap", controls=UTILITY_CONTROLS),
    Claim("nc-slope", "Slope of log excess(NC) vs log n over n_list at eps_claim is <= -0.8; controls: x = 0 "
          "(slope 0) and naive mu2-FL",
          "privacy term sqrt(d)/(eps n sqrt(M)) (main theorem) -> slope -1; bar -0.8 is the spec's", -0.8, "<=",
          controls=UTILITY_CONTROLS),
    Claim("rate-gap", "Rate separation, paired per seed: slope(NC) - slope(DP-FedSGD) <= -1/2; controls: the "
          "same difference with x = 0 or naive mu2-FL in NC's place",
          "privacy term 1/n (NC) vs 1/sqrt(n) (one-pass baselines): slope gap -1/2", -0.5, "<=",
          controls=UTILITY_CONTROLS),
    Claim("fedsgd-slope", "Slope of log excess(DP-FedSGD) vs log n is >= -0.6 (one-pass noisy SGD ~ 1/sqrt(n)); "
          "controls: x = 0 and naive mu2-FL (slopes near 0 pass too: the row cannot tell -1/2 from no learning)",
          "baseline rate sqrt(d)/(eps sqrt(nM)) -> slope -1/2; bar -0.6 is the spec's", -0.6, ">=",
          controls=UTILITY_CONTROLS),
    Claim("hetero-nc-wins", "Heterogeneous machines (zeta = hetero_zeta), n = n_claim, eps_claim: NC / best "
          "baseline per seed (bootstrap interval); controls: x = 0 and naive mu2-FL in NC's place",
          "optimal for heterogeneous data too (abstract); bar 1/4 is the spec's", 0.25, "<=", interval="bootstrap",
          controls=UTILITY_CONTROLS),
    # checks: preconditions, constructions, identities and agreement with opacus
    Claim("baselines-learn", "Precondition of nc-beats-baselines: the best baseline's excess at n_claim, "
          "eps_claim is at most half the untrained model's F(0) - F*", "not in the paper (issue 44's gate)", 0.5,
          "<=", role="check"),
    Claim("hetero-baselines-learn", "Precondition of hetero-nc-wins: the same gate on the heterogeneous task",
          "not in the paper (issue 44's gate)", 0.5, "<=", role="check"),
    Claim("nc-off-ceiling", "Precondition of the slopes: NC's excess at the smallest n is at most half of "
          "F(0) - F* (a slope fitted from the untrained ceiling measures no rate)", "not in the paper", 0.5, "<=",
          role="check"),
    Claim("release-noise", "Empirical privacy of NC's transcript: opacus' RDP epsilon of n_claim releases with "
          "the noise measured in them (sum of a machine's messages minus its clean increments), over eps_claim; "
          "worst evaluation seed", "(eps, delta)-DP per machine (untrusted server)", 1.0, "<=", kind="every",
          role="check"),
    Claim("accounting", "opacus' RDP epsilon of the run's noise multiplier lies in [0.7, 1.0] x eps for every "
          "(n, eps): max |ratio - 0.85| (computed once)", "(eps, delta)-DP per machine (untrusted server)", 0.15,
          "<=", kind="exact", role="check"),
    Claim("accounting-order", "The optimal RDP order of every (n, eps) lies inside the searched orders (largest "
          "1024): max optimal order <= 512 (computed once)", "not in the paper (accountant precondition)", 512.0,
          "<=", kind="exact", role="check"),
    Claim("noise-flat", "Noise-only construction: NC's per-coordinate noise variance in A_t stays at "
          "M sigma^2/m^2 at T/4, T/2, T; metric max |Var/theory - 1|",
          "noise cancellation: noise does not accumulate", 0.1, "<=", role="check"),
    Claim("naive-noise-grows", "Noise-only construction: fresh-noise variance grows linearly, "
          "|Var(T)/Var(T/4) - 4| (a random walk's variance)", "naive extension breaks the rate (intro)", 0.4, "<=",
          role="check"),
    Claim("cancel-identity", "In a full NC run, A_t - C_t equals (1/m) sum_i Y_i^last: largest relative error "
          "over the evaluation seeds (an identity)", "telescoping noise cancellation (method)", 1e-9, "<=",
          kind="every", role="check"),
    Claim("no-clipping", "Increment bound S = G + 4LD: number of clipped increments over every run (must be 0)",
          "sensitivity 2S of a release (reconstructed)", 0.0, "<=", kind="exact", role="check"),
]

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "claim_values", "Results", "summary_table", "chosen_c_table", "accounting_frame"),
    "plots": ("plot_excess_vs_n", "plot_excess_vs_eps", "plot_noise_variance", "plot_training_curves"),
})
