"""Suitability Filter: A Statistical Framework for Classifier Evaluation in Real-World Deployment Settings.

Pouget, Yaghini, Rabanser, Papernot; ICML 2025 (oral); https://arxiv.org/abs/2505.22356.

Reproduced at small scale on simulated data: a torch MLP classifier on a 10-class Gaussian mixture
whose latent domains set the difficulty; the paper's 12 suitability signals computed from the
logits; a correctness estimator (StandardScaler + logistic regression, Platt-calibrated with
5-fold ``CalibratedClassifierCV``, as in the official code) fitted on one source fold; the one-sided
non-inferiority Welch t-test of mean estimated correctness between a test fold and an unlabeled
user set; the F(F-1) ordered fold-pair protocol over ID subpopulations and OOD shifts; decision
accuracy, FPR, ROC/PR AUC, the sensitivity curve, the single-signal ablation and the practical
margin adjustment m' = m + Delta_test - Delta_u. Every finding has two controls measured on the same
experiments: the MSP filter (conf_max alone) and the naive comparison of mean p_c without the test.

Layout: declarations here; the study in ``experiment``, figures in ``plots``, the test in
``noninferiority``, the simulated data in ``domain_mixture``. The ``paper`` preset
(:mod:`.paper_preset`) runs the same filter and protocol on the official pre-computed signals of the
paper's WILDS models (FMoW, RxRx1) from a local copy of the official ``results/``.

Written by hand because no maintained library provides them: the signal extraction, the
vectorized Welch non-inferiority test and the decision metrics (shared, in
``.noninferiority``; checked against scipy and statsmodels in the tests), the fold-pair
protocol and the margin adjustment. scikit-learn provides the estimator, calibration and
the AUC metrics; scipy provides the t distribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from companion.claims import Claim
from companion.contract import exports
from companion.fetch import Source
from companion.params import BaseParams, ParamError, local_default, param, require_path
from companion.papers.suitability_filter import paper_preset as wilds

SIGNALS = ("conf_max", "conf_std", "conf_entropy", "logit_mean", "logit_max", "logit_std",
           "logit_diff_top2", "loss", "margin_loss", "conf_ratio", "top_k_conf_sum", "energy")
LOGIT_SCALE = ("logit_mean", "logit_std", "energy")
SLUG = "suitability-filter"
PAPER_PRESET = ("the official pre-computed WILDS suitability signals (FMoW or RxRx1, ERM model seeds 0-2) from "
                "data_path, evaluated with the official protocol (ID subsets removed from their pool, 15 folds, "
                "210 pairs; the user subsets of one pool share its fold shuffle, which the official notebook redraws "
                "per subset); no model is trained")
_OFFICIAL = ("https://raw.githubusercontent.com/cleverhans-lab/suitability/"
             "6ff26729778decb18ff90ca4df6e883a27559af6/results/")  # the official main branch, pinned
_FILES = {  # the official pre-computed signals and user subsets (FMoW, RxRx1) and their SHA-256
    "features/fmow_ERM_last_0.pkl": "a90ff03f42d13b128b0573b96340798a1b87175b56c2b964d64f4112ffbf7fc7",
    "features/fmow_ERM_last_1.pkl": "503b68efcde632ce0a443474ef03c68b982582b8a42aa6b6b826f690cf514b04",
    "features/fmow_ERM_last_2.pkl": "2f42079dbb571453b2366ef75f9eac17d743936dd98ccdf0b6c6c858e1b0223f",
    "features/fmow_IRM_last_0.pkl": "9677bb94dd72d3fb5143b3628ace10f387aa5558ff8dc2c2f2c803e3b5de0591",
    "features/fmow_groupDRO_last_0.pkl": "f5a0023df11f5eb32c303d1d481ba1668703b6b575c8c5a5a8bd555f6d015c5d",
    "features/rxrx1_ERM_last_0.pkl": "945c0428e1a5b75b1704a310336b65a3faafd4a01a8680cccf248a51d70243af",
    "features/rxrx1_ERM_last_1.pkl": "5dcbb154a0a1e17006a3e76bab983babf9c28388abc845a8694c739ad8c1830f",
    "features/rxrx1_ERM_last_2.pkl": "1e5af13b75a8b4242c6903593bf003cde14e226b02280961ba5f80c382564d95",
    "features/rxrx1_IRM_last_0.pkl": "c4f849412d2919e4edca0eae6f018c3161e141aa8e8b5f0bc2f57f1a5b027d18",
    "features/rxrx1_groupDRO_last_0.pkl": "587293b12a08a085b58900fb43ce2414138c4249f6990c9b450773f696d5326f",
    "split_indices/fmow_id.pkl": "86c38da5481200845edf0e02da570aa0c21bc4b75f5a2c5fb55ad640ac11cabd",
    "split_indices/fmow_ood.pkl": "79fb7e50bddb7944f2c57998672ad5a125edf5e3f260e68d0a96d23c1f21b1bd",
    "split_indices/rxrx1.pkl": "98c232ec63dff9c9d84d0bf6f320579e9d20157caf1226f59618c38e2a520835",
}
SOURCES = tuple(Source("results/" + f.rsplit("/", 1)[0], f"official suitability signals: {f}",
                       "MIT (cleverhans-lab/suitability)", url=_OFFICIAL + f, sha256=h) for f, h in _FILES.items())


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the simulated deployment study (defaults = quick preset)."""

    seeds: int = param(6, lo=1, hi=64, help="number of seeds the claims are evaluated over")

    n_classes: int = param(10, lo=3, hi=50, help="classes K (>= 10 keeps top_k_conf_sum non-degenerate)")
    n_features: int = param(16, lo=2, hi=256, help="input dimension d")
    class_sep: float = param(0.8, lo=0.3, hi=3.0, help="scale of the class means")
    domain_sigmas: tuple[float, ...] = param((0.7, 0.9, 1.1, 1.3), lo=0.01, hi=10.0, help="noise scale per latent domain")
    n_train: int = param(3000, lo=500, hi=200_000, help="training samples of the model M")
    hidden: int = param(64, lo=8, hi=1024, help="MLP width")
    epochs: int = param(15, lo=1, hi=200, help="MLP training epochs")
    n_folds: int = param(5, lo=3, hi=20, help="source folds F (pairs = F(F-1))")
    fold_size: int = param(400, lo=100, hi=5000, help="samples per source fold")
    n_user_id: int = param(48, lo=4, hi=1000, help="ID user sets (Dirichlet domain mixes)")
    ood_noise_taus: tuple[float, ...] = param((0.2, 0.4, 0.6, 0.8, 1.0), lo=0.0, hi=10.0, help="OOD corruption noise levels")
    ood_shift_radii: tuple[float, ...] = param((0.5, 1.0, 1.5), lo=0.0, hi=20.0, help="OOD translation lengths")
    ood_novel_sigmas: tuple[float, ...] = param((0.5, 1.6), lo=0.01, hi=10.0, help="noise scales of unseen domains")
    ood_reps: int = param(3, lo=1, hi=50, help="user sets per OOD setting")
    user_size: tuple[int, ...] = param((500,), lo=50, hi=10_000, help="user set size n_u, or lo,hi drawn per set")
    margins: tuple[float, ...] = param((0.0,), lo=0.0, hi=0.49, help="margins m (0 is always added)")
    alphas: tuple[float, ...] = param((0.05,), lo=1e-4, hi=0.49, help="test levels (0.05 is always added)")
    calibrated: bool = param(True, help="Platt-calibrate the estimator (5-fold CalibratedClassifierCV)")
    estimator: str = param("logreg", choices=("logreg", "mlp", "gbm", "rf", "svm"), help="correctness estimator C")
    single_signal_ablation: bool = param(True, help="also run the 12 single-signal filters")
    n_labeled_user: int = param(100, lo=20, hi=1000, help="labeled user samples for the margin adjustment")
    bin_width: float = param(0.02, lo=0.005, hi=0.05, help="width of the sensitivity-curve bins")
    data_path: str = param(local_default(SLUG, "results"), help="paper preset: the official results/ folder "
                           "(features/<dataset>_<algorithm>_last_<seed>.pkl, split_indices/*.pkl)")
    dataset: str = param("fmow", choices=wilds.DATASETS, help="paper preset: the WILDS data set")
    algorithm: str = param("ERM", choices=wilds.ALGORITHMS, help="paper preset: the WILDS training algorithm "
                           "(model seeds 0-2 for ERM, 0 for IRM and groupDRO)")
    smoke: bool = param(False, help="paper preset on a tiny budget (first model seed, 3 folds, 2 source pools)")

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "full": {"seeds": 8, "n_features": 32, "class_sep": 0.6, "n_train": 10_000, "hidden": 128,
                 "epochs": 40, "n_folds": 15, "fold_size": 500, "n_user_id": 48,
                 "ood_shift_radii": (0.25, 0.5, 1.0, 1.5, 2.0), "ood_novel_sigmas": (0.4, 0.5, 1.5, 1.8),
                 "ood_reps": 4, "user_size": (300, 2000), "margins": (0.0, 0.01, 0.05),
                 "alphas": (0.05, 0.01, 0.001), "n_labeled_user": 200, "bin_width": 0.01},
        "paper": {"seeds": 3, "n_folds": 15, "margins": (0.0, 0.01, 0.05), "alphas": (0.05, 0.01, 0.001),
                  "n_labeled_user": 200, "bin_width": 0.01},
    }

    def __post_init__(self) -> None:
        if self.preset != "paper":
            return
        root = require_path("data_path", self.data_path, "the official results/ folder of "
                            "cleverhans-lab/suitability (features/, split_indices/)", "dir")
        seeds = self.seed_list()[:1] if self.smoke else self.seed_list()
        need = [wilds.features_file(root, self.dataset, self.algorithm, s) for s in seeds]
        for path in need + wilds.split_files(root, self.dataset):
            if not path.is_file():
                raise ParamError(f"parameter 'data_path': {path.relative_to(root)} is missing under "
                                 f"{self.data_path!r}; allowed: the official results/ folder (see data/README.md, "
                                 f"or `companion fetch {SLUG}`)")

    @classmethod
    def check(cls, name: str, value: Any) -> Any:
        """Validate as declared; ``user_size`` also takes at most two values with lo <= hi."""
        out = super().check(name, value)
        if name == "user_size" and (len(out) > 2 or out[0] > out[-1]):
            raise ParamError(f"parameter 'user_size': {list(out)} is out of range; allowed: one size or lo,hi with lo <= hi")
        return out


# Every finding is judged against the same rows of two baselines measured in the same run: "msp", the
# plain maximum-softmax filter (conf_max alone in place of the 12 signals, same estimator and Welch test),
# and "naive", the 12-signal estimator with the test replaced by "SUITABLE iff mean p_c(D_u) >= mean
# p_c(D_test) - m".
BASELINES = ("msp", "naive")
_ACC_NOTE = "the paper's ablation reports decision accuracy; ROC AUC here"
CLAIMS = [
    Claim("roc-auc", "ROC AUC of the score -p against the empirical ground truth (m = 0), pooled over seeds",
          "0.965-1.000 (Table 1)", 0.85, ">=", kind="exact", controls=BASELINES),
    Claim("roc-auc-every-seed", "ROC AUC in every seed: the smallest per-seed ROC AUC (worst seed, no interval)",
          "0.969 +- 0.023 over 3 model seeds (FMoW ID, Table 1)", 0.80, ">=", kind="every", controls=BASELINES),
    Claim("decision-acc", "Decision accuracy at alpha = 0.05, m = 0, pooled over seeds", "81.8-100% (Table 1)",
          0.70, ">=", kind="exact", controls=BASELINES),
    Claim("fpr", "False-positive rate (SUITABLE although Acc(D_u) < Acc(D_test)) at alpha = 0.05, pooled",
          "0.000-0.031 (Table 1)", 0.05, "<=", kind="exact", controls=BASELINES),
    Claim("fpr-below-3pt", "SUITABLE rate when the user accuracy is more than 3 points below test, pooled",
          "0 of 8.4k experiments (Fig. 4)", 0.01, "<=", kind="exact", controls=BASELINES),
    Claim("sens-near-0", "SUITABLE rate for accuracy changes in [-2, 0) points, pooled",
          "2.6% in [-2,-1), 16.9% in [-1,0) (Fig. 4)", 0.10, "<=", kind="exact", controls=BASELINES),
    Claim("sens-gain-6", "SUITABLE rate for gains >= 6 points, pooled (0 when < 20 such experiments: not evaluable)",
          "100% (Fig. 4)", 0.80, ">=", kind="exact", controls=BASELINES),
    Claim("sens-monotone", "Largest drop of the pooled SUITABLE rate between adjacent accuracy-change bins",
          "non-decreasing (Fig. 4)", 0.05, "<=", kind="exact", controls=BASELINES),
    Claim("agg-vs-best", "ROC AUC of the filter minus that of the best single-signal filter, pooled "
          "(non-inferiority: at most 0.01 below)",
          f"FMoW ID: all 81.8% vs best single (energy) 80.6% ({_ACC_NOTE})", -0.01, ">=", kind="exact",
          controls=BASELINES),
    Claim("agg-vs-median", "ROC AUC of the filter minus that of the median single-signal filter, pooled",
          f"FMoW ID: all 81.8% vs single signals 62.3-80.6% ({_ACC_NOTE})", 0.05, ">=", kind="exact",
          controls=BASELINES),
    Claim("all-minus-msp", "Decision accuracy of the 12-signal filter minus that of the MSP filter (conf_max alone), "
          "pooled; bar 0.05", "FMoW ID: 81.8% vs 67.9% = +13.9 points (appendix)", 0.05, ">=", kind="exact",
          controls=("median-single",)),
    Claim("logit-collapse", "log10 of (OOD FPR of the worst logit-scale single signal / OOD FPR of the filter), "
          "pooled; >= log10 3", "logit_std 0.81 vs 0.018: log10 1.65 (FMoW OOD, appendix)", float(np.log10(3.0)),
          ">=", kind="exact", controls=BASELINES),
    Claim("welch-vs-scipy", "Largest |p - scipy.stats.ttest_ind p| over a random 5% of the experiments",
          "identity (the official one-sided Welch test)", 1e-10, "<=", kind="exact", role="check"),
]

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "claim_values", "signals", "fit_correctness", "prob_correct", "base_estimator",
                   "source_folds", "ordered_pairs", "Results", "SeedResult", "Experiments", "filter_values",
                   "seed_claim_values", "claim_spread", "settings_table", "ablation_values", "max_drop",
                   "bin_edges", "naive_pvalues", "ALPHA"),
    "noninferiority": ("welch_noninferiority", "welch_moments", "decision_metrics", "binned_rates",
                       "calibration_bias", "adjusted_margin", "VAR_FLOOR"),
    "plots": ("plot_densities", "plot_sensitivity", "plot_estimates", "plot_ablation"),
})
