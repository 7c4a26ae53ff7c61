"""FairICP: Encouraging Equalized Odds via Inverse Conditional Permutation — Lai & Guan, ICML 2025.

https://arxiv.org/abs/2404.05678 · official code ``yuhenglai/FairICP`` (MIT).

Reproduced: the official simulation (setting 1 at alpha = 0.9, K in {5, 1} quick and {5, 1, 10} full;
alpha = 0.6 and setting 2 in ``paper``) with
adversarial equalized-odds training whose dummy attributes come from inverse conditional permutation
(FairICP: a Gaussian-linear or a mixture-density-network (MDN) estimate of Y | A, and the true
density), from a model of A | Y (FDL: the same MDN family, and a misspecified Gaussian kept as a
variant), from permuting A under the Gaussian model (FairCP-Gauss, ``paper``) or an HGR chi^2 penalty
(``paper``); KPC and the ICP test of EO; the analytic EO-fair linear optimum and plain OLS as the
anchor and the control of the price of fairness; FairICP-MDN against FDL-MDN per K in {1, 5, 10}, and
the trend from K = 1 to the largest K, each against the same comparison with an oracle FDL (the true
A | Y, sampled by resampling prior draws), the control that removes the K-dim estimation; their MSE at a
matched KPC, read off each method's loss-KPC curve over the lambda grid (K = 5, and 10 in full), with the
same oracle control; the
swap-odds estimation study of ``ICP_CP.R`` with linear-Gaussian estimators (every preset); the real
datasets (``paper``, from ``data_path``: FairICP against the unconstrained model only).

Written by hand: everything. The official code is TensorFlow (MAF densities) + PyTorch + R (``KPC``);
here the sampler is a vectorised numpy sweep, KPC a scipy cKDTree re-implementation, the flexible
densities small MDNs in torch instead of conditional MAFs.

This module holds the declarations; the experiment (:mod:`.experiment`), the figures (:mod:`.plots`)
and the paper preset (:mod:`.paper_preset`) load on first use.
"""

from __future__ import annotations

from dataclasses import dataclass

from companion import params
from companion.claims import Claim
from companion.contract import exports
from companion.params import BaseParams, ParamError, param

SLUG = "fairicp"
METHODS = ("unconstrained", "fairicp_est", "fairicp_oracle", "fdl_gauss", "fairicp_mdn", "fdl_mdn", "fdl_oracle",
           "faircp_gauss", "hgr")
REQUIRED = ("unconstrained", "fairicp_est", "fairicp_oracle", "fdl_gauss", "fairicp_mdn", "fdl_mdn", "fdl_oracle")
PER_K = ("fairicp_mdn", "fdl_mdn", "fdl_oracle")  # the methods of the per-K rows, fitted at every K
DATASETS = ("crimes", "compas", "adult", "acs_income")


@dataclass(frozen=True)
class Params(BaseParams):
    """FairICP's parameters; defaults are the quick preset."""

    seeds: int = param(5, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    K: tuple[int, ...] = param((5, 1), lo=1, hi=20, help="attributes K; the first is the main setting, the rest a sweep "
                               "(K = 1 is the base of the trend rows)")
    alpha_leak: tuple[float, ...] = param((0.9,), lo=0.05, hi=0.99, help="leak of A into X_sens; first is the main setting")
    n_noisy_A: tuple[int, ...] = param((0,), lo=0, hi=20, help="setting 2: irrelevant extra A columns (K = 1); 0 = none")
    n_train: int = param(500, lo=100, hi=20000, help="training rows per setting")
    n_test: int = param(400, lo=100, hi=20000, help="test rows per setting")
    lambdas: tuple[float, ...] = param((0.0, 0.9), lo=0.0, hi=0.99, help="adversarial weights; the largest is the claims' lambda")
    methods: tuple[str, ...] = param(REQUIRED, choices=METHODS, help="methods fitted")
    grid_methods: tuple[str, ...] = param((), choices=METHODS, min_len=0, help="methods run over the whole lambda grid (others: largest lambda)")
    sweep_methods: tuple[str, ...] = param(PER_K, choices=METHODS,
                                           help="methods fitted in the settings other than the main one")
    hgr_mus: tuple[float, ...] = param((1.0, 4.0, 16.0), lo=0.0, hi=100.0, help="HGR penalty weights mu")
    epochs: int = param(60, lo=5, hi=300, help="training epochs (one ICP state per epoch)")
    batch_size: int = param(32, lo=8, hi=512, help="minibatch size")
    lr_pred: float = param(1e-3, lo=1e-5, hi=1e-1, help="predictor Adam learning rate")
    lr_dis: float = param(1e-4, lo=1e-5, hi=1e-1, help="discriminator Adam learning rate")
    dis_hidden: int = param(64, lo=8, hi=256, help="discriminator width (3 hidden layers)")
    mcmc_sweeps: int = param(50, lo=5, hi=200, help="swap sweeps between ICP states (and burn-in)")
    n_test_perms: int = param(100, lo=19, hi=1000, help="ICP copies B of the EO test")
    kpc_knn: int = param(1, lo=1, hi=10, help="neighbours of the KPC graph estimator")
    run_sampler_study: bool = param(True, help="swap-odds estimation study, ICP (Y|A) vs CP (A|Y)")
    sampler_dims: tuple[int, ...] = param((0, 5, 10, 20, 50), lo=0, hi=100, help="extra attribute dims of the sampler study")
    sampler_reps: int = param(5, lo=1, hi=50, help="repetitions per sampler-study cell")
    datasets: tuple[str, ...] = param(DATASETS, choices=DATASETS, help="paper preset: real datasets under data_path "
                                 "(fits FairICP and the unconstrained model only: no FDL, HGR, GerryFair or Reduction)")
    data_path: str = param(params.local_default(SLUG), help="paper preset: folder with the real datasets (data/README.md)")
    real_max_n: int = param(4000, lo=200, hi=200000, help="paper preset: rows subsampled per real dataset (n x n ICP matrix)")
    smoke: bool = param(False, help="paper pipeline on a tiny budget (tests)")

    PRESETS = {
        # quick (the defaults) is trimmed from the cost structure, before any verdict was read: one adversarial
        # fit costs about 7 CPU s at the official 100 epochs x batch 16 and 2.4 s at the spec's quick 60 x 32
        # (n = 500), and fits are nearly all of the run; the quick preset fits 10 models per seed (7 at K = 5,
        # the three per-K methods at K = 1; the oracle FDL was added after review, issue 47), at the largest lambda
        # only. Full uses the official epochs and batch, K in {1, 5, 10} on every seed (the per-K rows are paired per
        # seed) and 10 sampler-study repetitions; alpha = 0.6, setting 2, FairCP and HGR run in `paper` only (they
        # fed no claim and did not fit 10 minutes).
        # The per-K methods run the lambda grid at K = 5 and 10 in full (6 fits more per seed, sized from cost
        # before any verdict of the matched-KPC rows was read), so their MSE is read at a matched KPC.
        "full": {"seeds": 8, "K": (5, 1, 10), "lambdas": (0.0, 0.5, 0.9),
                 "grid_methods": ("fairicp_est", "fdl_gauss", *PER_K),
                 "sweep_methods": ("unconstrained", *PER_K), "epochs": 100, "batch_size": 16,
                 "sampler_reps": 10},
        "paper": {"seeds": 10, "K": (5, 1, 10), "alpha_leak": (0.9, 0.6), "n_noisy_A": (0, 1, 5, 10),
                  "lambdas": (0.0, 0.3, 0.5, 0.7, 0.8, 0.9), "methods": METHODS, "sweep_methods": METHODS,
                  "grid_methods": ("fairicp_est", "fairicp_oracle", "fdl_gauss", "faircp_gauss", "fairicp_mdn", "fdl_mdn",
                                   "fdl_oracle"),
                  "epochs": 100, "batch_size": 16, "n_test_perms": 200, "run_sampler_study": True, "sampler_reps": 20},
    }

    def __post_init__(self) -> None:
        missing = [m for m in REQUIRED if m not in self.methods]
        if missing:
            raise ParamError(f"parameter 'methods': {', '.join(self.methods)} lacks {', '.join(missing)}; "
                             f"allowed: any subset of {', '.join(METHODS)} that contains {', '.join(REQUIRED)}")
        lacking = [m for m in PER_K if m not in self.sweep_methods]
        if lacking:
            raise ParamError(f"parameter 'sweep_methods': {', '.join(self.sweep_methods)} lacks {', '.join(lacking)} "
                             f"(the per-K rows compare them at every K); allowed: any subset of {', '.join(METHODS)} "
                             f"that contains {', '.join(PER_K)}")
        if 0.0 not in self.lambdas or max(self.lambdas) <= 0:
            raise ParamError(f"parameter 'lambdas': {self.lambdas!r} needs 0 (the unconstrained model) and "
                             "one positive value; allowed: values in [0, 0.99] including 0")
        if self.preset == "paper":
            params.require_path("data_path", self.data_path,
                                "a folder with communities.data + communities.names, compas.csv, "
                                "adult.data + adult.test, ca_features.csv + ca_labels.csv", "dir")

    def effective(self) -> "Params":
        """The parameters actually run: the smoke budget shrinks the simulation to seconds."""
        if not self.smoke:
            return self
        small = {"seeds": 1, "K": self.K[:1], "alpha_leak": self.alpha_leak[:1], "n_noisy_A": (0,),
                 "n_train": 120, "n_test": 100, "lambdas": (0.0, max(self.lambdas)), "epochs": 5,
                 "batch_size": 32, "mcmc_sweeps": 5, "n_test_perms": 19, "sampler_dims": (0, 5),
                 "sampler_reps": 1, "real_max_n": 300, "methods": REQUIRED, "grid_methods": ()}
        merged = {**self.to_dict(), **small}
        return type(self)(**{k: tuple(v) if isinstance(v, list) else v for k, v in merged.items()})


CLAIMS: list[Claim] = [
    # --- findings (each with a control computed on the same seeds and test sets) ---
    Claim("eo-kpc-halved", "KPC(FairICP-est, largest lambda) - 0.5 KPC(unconstrained), per seed (<= 0: FairICP at "
          "least halves the unconstrained model's KPC); control: the unaware predictor (c = 0, no training)",
          "EO promoted (Fig. 2 curves)", 0.0, "<=", controls=("unaware",)),
    Claim("eo-test-fair-p", "ICP-test p-value of FairICP-est at the largest lambda, per seed (mean >= 0.05); "
          "controls: the unconstrained model (lambda = 0) and the unaware predictor",
          "p > 0.05 along the fair end of the curves", 0.05, ">=", controls=("unconstrained", "unaware")),
    Claim("price-near-optimum", "MSE(FairICP-est) / MSE of the analytic EO-fair linear predictor (a*, c*) on the "
          "same test set (<= 1.20; MSE* = 2.4 K in expectation); control: plain OLS (a = c = 1), which is not fair",
          "near the attainable trade-off (no number in the paper)", 1.20, "<=", controls=("ols",)),
    Claim("est-vs-oracle-kpc", "|KPC(FairICP-MDN) - KPC(FairICP-oracle)| per seed at the largest lambda (<= 0.03); "
          "control: |KPC(FDL-MDN) - KPC(FairICP-oracle)|", "estimated density tracks the true one (Fig. 2)", 0.03,
          "<=", controls=("fdl_mdn",)),
    Claim("est-vs-oracle-mse", "|MSE(FairICP-MDN) / MSE(FairICP-oracle) - 1| per seed (<= 0.10); control: the same "
          "for FDL-MDN", "estimated density tracks the true one (Fig. 2)", 0.10, "<=", controls=("fdl_mdn",)),
    Claim("icp-vs-fdl-kpc-k5", "K = 5: KPC(FairICP-MDN) - KPC(FDL-MDN) at the largest lambda, paired per seed "
          "(<= 0, judged on the interval: FairICP lower); control: FDL with the true A | Y in place of the MDN "
          "(the estimation of a K-dim conditional, the paper's cause, removed)",
          "FairICP matches or beats FDL, more so as K grows (Fig. 2)", 0.0, "<=", controls=("fdl_oracle",)),
    Claim("icp-vs-fdl-kpc-k10", "K = 10 (full preset only): KPC(FairICP-MDN) - KPC(FDL-MDN), paired per seed (<= 0); "
          "control: FDL with the true A | Y", "FairICP matches or beats FDL, more so as K grows (Fig. 2)", 0.0, "<=",
          controls=("fdl_oracle",)),
    Claim("icp-vs-fdl-mse-matched-k5", "K = 5, MSE at matched KPC: per seed, each of FairICP-MDN, FDL-MDN and "
          "FDL-oracle has a trade-off curve through (KPC, MSE) at lambda = 0 (the shared unconstrained model) and each "
          "positive lambda run (full: 0.5, 0.9; quick: 0.9 only, a segment), joined in lambda order; the matched "
          "level is the largest of the three curves' smallest KPC (NaN if not below the unconstrained KPC); each "
          "method's MSE there is interpolated linearly in KPC (lowest crossing; never extrapolated); value "
          "MSE(FairICP-MDN) / MSE(FDL-MDN) - 1 (<= 0: FairICP's MSE lower at the same fairness); control: the same "
          "against FDL with the true A | Y, at the same level", "FairICP's loss-KPC curve at or below FDL's (Fig. 2; "
          "curves, no number)", 0.0, "<=", controls=("fdl_oracle",)),
    Claim("icp-vs-fdl-mse-matched-k10", "K = 10 (full preset only; NaN at quick, which does not run K = 10): MSE "
          "at matched KPC as at K = 5, MSE(FairICP-MDN) / MSE(FDL-MDN) - 1 (<= 0); control: the same against FDL "
          "with the true A | Y", "FairICP's loss-KPC curve at or below FDL's, more so as K grows (Fig. 2)", 0.0,
          "<=", controls=("fdl_oracle",)),
    Claim("icp-gain-grows-kpc", "The trend in K, paired per seed: [KPC(FairICP-MDN) - KPC(FDL-MDN)] at the largest "
          "K run minus the same at K = 1 (<= 0: FairICP's KPC edge widens with K; no MSE twin: at equal lambda a "
          "worse FDL sampler penalises less and lowers FDL's MSE, so an MSE trend would read the paper's effect "
          "backwards); control: the same with FDL given the true A | Y",
          "the advantage grows with K (Fig. 2, K = 1, 5, 10)", 0.0, "<=", controls=("fdl_oracle",)),
    Claim("icp-vs-fdl-gauss-kpc", "variant with the misspecified Gaussian A | Y: KPC(FairICP-est) - KPC(FDL-Gauss) "
          "(<= 0); control: the same against FDL-MDN (if the gain comes from the Gaussian's misfit, it goes)",
          "FairICP matches or beats FDL", 0.0, "<=", controls=("fdl_mdn",)),
    Claim("icp-vs-fdl-gauss-mse", "variant: MSE(FairICP-est) / MSE(FDL-Gauss) (<= 1.05); control: the same "
          "against FDL-MDN", "FairICP matches or beats FDL", 1.05, "<=", controls=("fdl_mdn",)),
    Claim("sampler-icp-closer", "swap-odds study (after ICP_CP.R, linear-Gaussian estimators), K0 = 5 and the "
          "largest extra dims: log(median |Δ log-odds| of CP through A | Y (graphical lasso) / that of ICP through "
          "Y | A (ridge)), per repetition (>= 0: ICP closer to the truth); control: the same at K0 = 1 with no extra "
          "dims, where both conditionals are 1-D", "ICP's swap odds closer than CP's as dimensions grow (ICP_CP.R)",
          0.0, ">=", controls=("K0_1",)),
    # --- checks (preconditions, identities, rows true by construction) ---
    Claim("icp-vs-fdl-mse-k5", "K = 5: MSE(FairICP-MDN) / MSE(FDL-MDN) at the largest lambda (<= 1.05: not worse "
          "than FDL by more than 5 %); a check, not a finding: at equal lambda MSE is confounded with the fairness "
          "reached, and its only control (FDL with the true A | Y) passes by design", "FairICP matches or beats FDL "
          "(Fig. 2)", 1.05, "<=", role="check"),
    Claim("icp-vs-fdl-mse-k10", "K = 10 (full preset only): MSE(FairICP-MDN) / MSE(FDL-MDN) (<= 1.05); a check, as "
          "at K = 5", "FairICP matches or beats FDL (Fig. 2)", 1.05, "<=", role="check"),
    Claim("eo-test-unconstrained-rejects", "ICP-test p-value of the unconstrained model, per seed (mean <= 0.05; "
          "the design's precondition: the unconstrained model is not EO-fair)", "the unconstrained model violates EO",
          0.05, "<=", role="check"),
    Claim("unconstrained-near-bayes", "MSE(unconstrained) / MSE(Bayes predictor sum X) on the same test set "
          "(<= 1.10)", "loss at lambda = 0", 1.10, "<=", role="check"),
    Claim("price-nonnegative", "MSE(FairICP-est) / MSE(unconstrained) (>= 1: the unconstrained model is near "
          "Bayes, so any fair one costs)", "loss rises with lambda", 1.0, ">=", role="check"),
    Claim("est-vs-oracle-kpc-gauss", "|KPC(FairICP-est) - KPC(FairICP-oracle)| (<= 0.03); the Gaussian-linear "
          "model class contains the true Y | A, so this holds by design", "estimated density tracks the true one",
          0.03, "<=", role="check"),
    Claim("est-vs-oracle-mse-gauss", "|MSE(FairICP-est) / MSE(FairICP-oracle) - 1| (<= 0.10), by design as above",
          "estimated density tracks the true one", 0.10, "<=", role="check"),
    Claim("icp-keeps-marginal", "largest KS distance between A and the ICP dummies over seeds, columns and epochs "
          "(a permutation keeps the marginal exactly)", "Ã is a row permutation of A", 1e-12, "<=", kind="exact",
          role="check"),
    Claim("fdl-gauss-shifts-marginal", "mean KS distance of the FDL-Gauss dummies to A minus that of a fresh "
          "sample of A's own law (>= 0; a Gaussian cannot match the bimodal marginal)",
          "A | Y models can miss the marginal", 0.0, ">=", role="check"),
]

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "claim_values", "Results", "summary", "gap_table", "matched_table", "glue_values", "rows_at_bar", "main_setting",
                   "per_seed"),
    "plots": ("plot_tradeoff", "plot_pvalues", "plot_dummies", "plot_gap_by_k", "plot_settings",
              "plot_sampler_study", "METHOD_LABELS"),
})
