"""Suitability Filter: A Statistical Framework for Classifier Evaluation in Real-World Deployment Settings.

Pouget, Yaghini, Rabanser, Papernot; ICML 2025 (oral); https://arxiv.org/abs/2505.22356.

Reproduced at small scale on simulated data: a torch MLP classifier on a 10-class Gaussian mixture
whose latent domains set the difficulty; the paper's 12 suitability signals computed from the
logits; a correctness estimator (StandardScaler + logistic regression, Platt-calibrated with
5-fold ``CalibratedClassifierCV``, as in the official code) fitted on one source fold; the one-sided
non-inferiority Welch t-test of mean estimated correctness between a test fold and an unlabeled
user set; the F(F-1) ordered fold-pair protocol over ID subpopulations and OOD shifts; decision
accuracy, FPR, ROC/PR AUC, the sensitivity curve, the single-signal ablation and the practical
margin adjustment m' = m + Delta_test - Delta_u.

The ``paper`` preset (:mod:`.wilds`) runs the same filter and protocol on the official pre-computed
signals of the paper's WILDS models (FMoW, RxRx1) from a local copy of the official ``results/``.

Written by hand because no maintained library provides them: the signal extraction, the
vectorized Welch non-inferiority test and the decision metrics (shared, in
``companion.papers.suitability_filter.noninferiority``; checked against scipy and statsmodels in the tests), the fold-pair
protocol and the margin adjustment. scikit-learn provides the estimator, calibration and
the AUC metrics; scipy provides the t distribution.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from scipy import stats
from scipy.special import logsumexp
from sklearn.base import ClassifierMixin
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from threadpoolctl import threadpool_limits
from tqdm import tqdm

from companion import claims, plotting, runtime
from companion.claims import Claim, Verdict, evaluate_all
from companion.papers.suitability_filter.domain_mixture import MixtureTask, make_task, sample, unit_vector
from companion.models.mlp import FeatureMLP, fit, logits
from companion.papers.suitability_filter.noninferiority import (VAR_FLOOR, adjusted_margin, binned_rates, calibration_bias,  # noqa: F401
                                      decision_metrics, welch_moments, welch_noninferiority)
from companion.fetch import Source
from companion.params import BaseParams, ParamError, local_default, param, require_path, resolve_path
from companion.papers.suitability_filter import wilds

SIGNALS = ("conf_max", "conf_std", "conf_entropy", "logit_mean", "logit_max", "logit_std",
           "logit_diff_top2", "loss", "margin_loss", "conf_ratio", "top_k_conf_sum", "energy")
LOGIT_SCALE = ("logit_mean", "logit_std", "energy")
EPS = 1e-10
ACC_RANGE = (0.75, 0.92)
SLUG = "suitability-filter"
SMOKE_FOLDS, SMOKE_GROUPS = 3, 2
PAPER_PRESET = ("the official pre-computed WILDS suitability signals (FMoW or RxRx1, ERM model seeds 0-2) from "
                "data_path, evaluated with the official protocol (ID subsets removed from their pool, 15 folds, "
                "210 pairs); no model is trained")
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


# --- suitability signals and the correctness estimator ------------------------------------------

def signals(z: np.ndarray) -> np.ndarray:
    """The 12 suitability signals (n, 12) of logits ``z`` (n, K), in the order of ``SIGNALS``."""
    z = np.asarray(z, dtype=np.float64)
    zs = -np.sort(-z, axis=1)
    lse = logsumexp(z, axis=1)
    p = np.exp(z - lse[:, None])
    ps = -np.sort(-p, axis=1)
    top_k = max(1, z.shape[1] // 10)  # the official int(0.1 K) is 0, a constant signal, for K < 10
    return np.column_stack([
        ps[:, 0], p.std(axis=1, ddof=1), -(p * np.log(p + EPS)).sum(axis=1),
        z.mean(axis=1), zs[:, 0], z.std(axis=1, ddof=1), zs[:, 0] - zs[:, 1],
        lse - zs[:, 0], np.log(ps[:, 1] + EPS) - np.log(ps[:, 0] + EPS),
        ps[:, 0] / (ps[:, 1] + EPS), ps[:, :top_k].sum(axis=1), -lse,
    ])


def base_estimator(name: str, seed: int) -> ClassifierMixin:
    """The unfitted correctness classifier called ``name`` (logreg is the paper's default)."""
    return {
        "logreg": lambda: LogisticRegression(max_iter=1000),
        "mlp": lambda: MLPClassifier(max_iter=1000, random_state=seed),
        "gbm": lambda: GradientBoostingClassifier(random_state=seed),
        "rf": lambda: RandomForestClassifier(random_state=seed),
        "svm": lambda: SVC(probability=True, random_state=seed),
    }[name]()


def fit_correctness(s: np.ndarray, correct: np.ndarray, estimator: str = "logreg",
                    calibrated: bool = True, seed: int = 0) -> Pipeline:
    """Fit C: scaler + classifier of correctness on signals ``s`` (n, k) of D_sf only."""
    clf = base_estimator(estimator, seed)
    if calibrated:
        clf = CalibratedClassifierCV(clf, method="sigmoid", cv=5)
    return make_pipeline(StandardScaler(), clf).fit(s, correct)


def prob_correct(c: Pipeline, s: np.ndarray) -> np.ndarray:
    """Estimated probability of correctness p_c (n,) of signals ``s`` (n, k)."""
    return c.predict_proba(s)[:, 1]


# --- the protocol -------------------------------------------------------------------------------

def source_folds(n_folds: int, fold_size: int, rng: np.random.Generator) -> np.ndarray:
    """Disjoint source folds: a seeded permutation of ``n_folds * fold_size`` indices, (F, fold_size)."""
    return rng.permutation(n_folds * fold_size).reshape(n_folds, fold_size)


def ordered_pairs(n_folds: int) -> np.ndarray:
    """All ordered (sf fold, test fold) pairs with i != j, shape (F(F-1), 2)."""
    return np.array([(i, j) for i in range(n_folds) for j in range(n_folds) if i != j])


# --- simulated deployment -----------------------------------------------------------------------

@dataclass(frozen=True)
class UserSpec:
    """How one user set is drawn: its kind, domain weights, size and shift."""

    kind: str
    label: str
    weights: np.ndarray
    size: int
    sigma: float | None = None
    noise: float = 0.0
    shift: np.ndarray | None = None

    @property
    def ood(self) -> bool:
        """True for the shifted (out-of-distribution) user sets."""
        return self.kind != "id"


def user_specs(params: Params, task: MixtureTask, rng: np.random.Generator) -> list[UserSpec]:
    """ID subpopulations, then corruption, translation and novel-domain OOD sets."""
    g, d = len(task.sigmas), task.means.shape[1]
    lo, hi = params.user_size[0], params.user_size[-1]

    def size() -> int:
        return int(rng.integers(lo, hi + 1))

    specs = [UserSpec("id", f"id-{k}", rng.dirichlet(0.7 * np.ones(g)), size()) for k in range(params.n_user_id)]
    for _ in range(params.ood_reps):
        specs += [UserSpec("noise", f"noise-{t:g}", rng.dirichlet(np.ones(g)), size(), noise=t)
                  for t in params.ood_noise_taus]
        specs += [UserSpec("shift", f"shift-{r:g}", rng.dirichlet(np.ones(g)), size(), shift=r * unit_vector(d, rng))
                  for r in params.ood_shift_radii]
        specs += [UserSpec("novel", f"novel-{s:g}", np.ones(g) / g, size(), sigma=s) for s in params.ood_novel_sigmas]
    return specs


def draw(task: MixtureTask, spec: UserSpec, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` labelled points (x, y) from a user distribution."""
    x, y, _ = sample(task, n, spec.weights, rng, sigma=spec.sigma, noise=spec.noise, shift=spec.shift)
    return x, y


@dataclass
class SeedResult:
    """Everything one seed produced; p-value arrays are (margins, pairs, users).

    Test-fold quantities carry a last axis of users, because on real data an ID user set is removed
    from the source pool it comes from, so each such set has folds of its own: ``acc_test`` (F, users),
    ``mean_pc_test`` and ``delta_test`` (F, F, users).
    """

    seed: int
    class_sep: float
    acc_pool: float
    acc_test: np.ndarray
    acc_user: np.ndarray
    kinds: list[str]
    labels: list[str]
    pairs: np.ndarray
    pvals: dict[str, np.ndarray]
    p_adjusted: np.ndarray
    mean_pc_test: np.ndarray
    mean_pc_user: np.ndarray
    delta_test: np.ndarray
    delta_user: np.ndarray
    pc_example_test: np.ndarray
    pc_example_users: list[np.ndarray]
    scipy_max_diff: float
    n_floor: int
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def acc_diff(self) -> np.ndarray:
        """Acc(D_u) - Acc(D_test) per experiment, (pairs, users)."""
        return self.acc_user[None, :] - self.acc_test[self.pairs[:, 1]]


@dataclass
class Results:
    """Per-seed results and the parameters that made them."""

    params: Params
    margins: tuple[float, ...]
    alphas: tuple[float, ...]
    seeds: list[SeedResult]


def train_model(params: Params, rng: np.random.Generator, gen: torch.Generator
                ) -> tuple[MixtureTask, torch.nn.Module, float]:
    """Draw a task and train M; retune ``class_sep`` (+-0.15, at most 3 times) into the accuracy range."""
    sep = params.class_sep
    for attempt in range(4):
        task = make_task(params.n_classes, params.n_features, sep, params.domain_sigmas, rng)
        x, y, _ = sample(task, params.n_train, uniform(task), rng)
        net = fit(FeatureMLP((params.n_features, params.hidden, params.hidden), params.n_classes, gen),
                  x, y, params.epochs, gen)
        xv, yv, _ = sample(task, 2000, uniform(task), rng)
        acc = float(np.mean(logits(net, xv).argmax(1) == yv))
        if ACC_RANGE[0] <= acc <= ACC_RANGE[1] or attempt == 3:
            return task, net, sep
        sep = round(sep + (0.15 if acc < ACC_RANGE[0] else -0.15), 4)
    raise AssertionError("unreachable")


def uniform(task: MixtureTask) -> np.ndarray:
    """Uniform domain weights (the source distribution)."""
    return np.ones(len(task.sigmas)) / len(task.sigmas)


def _features(net: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Signals (n, 12) and correctness (n,) of M on labelled points."""
    z = logits(net, x)
    return signals(z), z.argmax(axis=1) == y


@dataclass
class PoolTests:
    """The tests of the user sets that share one source pool; p arrays are (margins, pairs, users)."""

    pvals: dict[str, np.ndarray]
    p_adjusted: np.ndarray
    mean_pc_test: np.ndarray
    mean_pc_user: np.ndarray
    delta_test: np.ndarray
    delta_user: np.ndarray
    pc_example_test: np.ndarray
    pc_example_users: list[np.ndarray]
    scipy_max_diff: float
    n_floor: int


def pool_tests(params: Params, s_pool: np.ndarray, c_pool: np.ndarray, s_user: np.ndarray, sizes: np.ndarray,
               s_lab: np.ndarray, c_lab: np.ndarray, margins: tuple[float, ...], seed: int,
               rng: np.random.Generator, lap: Callable[[str], None]) -> PoolTests:
    """Fit C on every source fold (per signal variant) and test every (D_sf, D_test) pair against every user set.

    ``s_pool`` (F, fs, 12) and ``c_pool`` (F, fs) are the folds; ``s_user`` the user sets' signals
    stacked (sizes ``sizes``); ``s_lab`` / ``c_lab`` (users, n_lab) the labeled user samples of m'.
    """
    n_f, fs = c_pool.shape
    n_u, n_lab, cuts = len(sizes), c_lab.shape[1], np.cumsum(sizes)[:-1]
    pairs = ordered_pairs(n_f)
    pi, pj = pairs.T
    ms = np.asarray(margins)[:, None, None]
    variants = {"all": list(range(len(SIGNALS)))}
    if params.single_signal_ablation:
        variants |= {name: [k] for k, name in enumerate(SIGNALS)}
    pvals, n_floor, kept = {}, 0, []
    for name, cols in variants.items():
        mt, vt, dt = (np.empty((n_f, n_f)) for _ in range(3))
        mu, vu, du = (np.empty((n_f, n_u)) for _ in range(3))
        for i in range(n_f):
            c = fit_correctness(s_pool[i][:, cols], c_pool[i], params.estimator, params.calibrated, seed)
            pc_pool = prob_correct(c, s_pool.reshape(-1, len(SIGNALS))[:, cols]).reshape(n_f, fs)
            segs = np.split(prob_correct(c, s_user[:, cols]), cuts)
            mt[i], vt[i] = pc_pool.mean(axis=1), pc_pool.var(axis=1, ddof=1)
            mu[i], vu[i] = [s.mean() for s in segs], [s.var(ddof=1) for s in segs]
            if name == "all":
                dt[i] = (pc_pool - c_pool).mean(axis=1)
                du[i] = (prob_correct(c, s_lab[:, cols]).reshape(n_u, n_lab) - c_lab).mean(axis=1)
                kept.append((pc_pool, segs))
        lap("fit C + predict")
        moments = (mt[pi, pj][:, None], vt[pi, pj][:, None], fs, mu[pi], vu[pi], sizes[None, :])
        pvals[name] = welch_moments(*moments, ms)[2]
        n_floor += int((vt < VAR_FLOOR).sum() + (vu < VAR_FLOOR).sum())
        if name == "all":
            p_adj = welch_moments(*moments, adjusted_margin(ms, dt[pi, pj][:, None], du[pi]))[2]
            kept_moments = mt, mu, dt, du
            scipy_diff = scipy_crosscheck(kept, pairs, pvals[name][0], rng)
        lap("tests")
    return PoolTests(pvals, p_adj, *kept_moments, kept[0][0][1], kept[0][1], scipy_diff, n_floor)


def stopwatch() -> tuple[dict[str, float], Callable[[str], None]]:
    """Timings per stage and the ``lap(name)`` that adds the time since the previous lap to ``name``."""
    clock = [time.perf_counter()]
    timings: dict[str, float] = {}

    def lap(name: str) -> None:
        clock.append(time.perf_counter())
        timings[name] = timings.get(name, 0.0) + clock[-1] - clock[-2]

    return timings, lap


def per_user(x: np.ndarray, n_u: int) -> np.ndarray:
    """A quantity of the test folds, (F,) or (F, F), repeated for each of ``n_u`` user sets (last axis)."""
    return np.repeat(x[..., None], n_u, axis=-1)


def run_seed(params: Params, seed: int, margins: tuple[float, ...]) -> SeedResult:
    """Train M, draw source folds and user sets, fit C per fold and run every test, for one seed."""
    rng, gen = runtime.generators(seed)
    timings, lap = stopwatch()
    task, net, sep = train_model(params, rng, gen)
    lap("train M")
    n_f, fs, n_lab = params.n_folds, params.fold_size, params.n_labeled_user
    xp, yp, _ = sample(task, n_f * fs, uniform(task), rng)
    folds = source_folds(n_f, fs, rng)
    specs = user_specs(params, task, rng)
    users = [_features(net, *draw(task, s, s.size, rng)) for s in specs]
    lab = [_features(net, *draw(task, s, n_lab, rng)) for s in specs]
    s_all, c_all = _features(net, xp, yp)
    s_pool, c_pool = s_all[folds], c_all[folds]
    s_user, sizes = np.concatenate([u[0] for u in users]), np.array([len(u[1]) for u in users])
    s_lab, c_lab = np.concatenate([u[0] for u in lab]), np.stack([u[1] for u in lab])
    lap("data + signals")
    g = pool_tests(params, s_pool, c_pool, s_user, sizes, s_lab, c_lab, margins, seed, rng, lap)
    n_u = len(specs)
    return SeedResult(seed, sep, float(c_all.mean()), per_user(c_pool.mean(axis=1), n_u),
                      np.array([u[1].mean() for u in users]), [s.kind for s in specs], [s.label for s in specs],
                      ordered_pairs(n_f), g.pvals, g.p_adjusted, per_user(g.mean_pc_test, n_u), g.mean_pc_user,
                      per_user(g.delta_test, n_u), g.delta_user, g.pc_example_test, g.pc_example_users,
                      g.scipy_max_diff, g.n_floor, timings)


def scipy_crosscheck(kept: list, pairs: np.ndarray, p0: np.ndarray, rng: np.random.Generator,
                     share: float = 0.05) -> float:
    """Largest |p - scipy p| over a random ``share`` of the m = 0 experiments (looped scipy calls)."""
    n_p, n_u = p0.shape
    pick = rng.choice(n_p * n_u, size=max(1, int(share * n_p * n_u)), replace=False)
    diffs = []
    for k in pick:
        (i, j), u = pairs[k // n_u], k % n_u
        ref = stats.ttest_ind(kept[i][0][j], kept[i][1][u], equal_var=False, alternative="less").pvalue
        diffs.append(abs(ref - p0[k // n_u, u]))
    return float(max(diffs))


def run_wilds_seed(params: Params, seed: int, margins: tuple[float, ...]) -> SeedResult:
    """The official signals of one WILDS model seed: every source pool's folds tested against its user sets."""
    rng = np.random.default_rng(seed)
    timings, lap = stopwatch()
    root = resolve_path(params.data_path)
    feats = wilds.load_features(wilds.features_file(root, params.dataset, params.algorithm, seed))
    groups = wilds.pool_groups(params.dataset, feats, wilds.load_subsets(wilds.split_files(root, params.dataset)))
    n_f = SMOKE_FOLDS if params.smoke else params.n_folds
    groups = groups[:SMOKE_GROUPS] if params.smoke else groups
    lap("data + signals")
    parts = []
    for g in groups:
        f = wilds.folds(len(g.correct), n_f, rng)
        n_lab = min(params.n_labeled_user, min(len(u.correct) for u in g.users))
        lab = [rng.choice(len(u.correct), n_lab, replace=False) for u in g.users]
        s_lab = np.concatenate([u.signals[i] for u, i in zip(g.users, lab)])
        c_lab = np.stack([u.correct[i] for u, i in zip(g.users, lab)])
        t = pool_tests(params, g.signals[f], g.correct[f], np.concatenate([u.signals for u in g.users]),
                       np.array([len(u.correct) for u in g.users]), s_lab, c_lab, margins, seed, rng, lap)
        parts.append((g, f, t))
    users = [u for g in groups for u in g.users]

    def joined(get, axis: int) -> np.ndarray:
        return np.concatenate([get(g, f, t) for g, f, t in parts], axis=axis)

    ids = wilds.ID_SPLITS[params.dataset]
    return SeedResult(
        seed, float("nan"), float(np.concatenate([feats[s][1] for s in ids]).mean()),
        joined(lambda g, f, t: per_user(g.correct[f].mean(axis=1), len(g.users)), 1),
        np.array([u.correct.mean() for u in users]), [u.kind for u in users], [u.label for u in users],
        ordered_pairs(n_f), {k: joined(lambda g, f, t: t.pvals[k], 2) for k in parts[0][2].pvals},
        joined(lambda g, f, t: t.p_adjusted, 2), joined(lambda g, f, t: per_user(t.mean_pc_test, len(g.users)), 2),
        joined(lambda g, f, t: t.mean_pc_user, 1), joined(lambda g, f, t: per_user(t.delta_test, len(g.users)), 2),
        joined(lambda g, f, t: t.delta_user, 1), parts[0][2].pc_example_test,
        [pc for *_, t in parts for pc in t.pc_example_users], max(t.scipy_max_diff for *_, t in parts),
        sum(t.n_floor for *_, t in parts), timings)


def run(params: Params) -> Results:
    """Run every seed of the simulated deployment study, or every WILDS model seed (``paper``)."""
    # Tiny models and 400 x 12 fits: extra threads only spin (10-25x more CPU on a loaded machine).
    runtime.limit_threads(1)
    margins = tuple(sorted(set(params.margins) | {0.0}))
    alphas = tuple(sorted(set(params.alphas) | {0.05}, reverse=True))
    one = run_wilds_seed if params.preset == "paper" else run_seed
    seed_list = params.seed_list()[:1] if params.preset == "paper" and params.smoke else params.seed_list()
    with threadpool_limits(1):
        seeds = [one(params, s, margins) for s in tqdm(seed_list, desc="seeds", disable=None)]
    return Results(params, margins, alphas, seeds)


# --- claims -------------------------------------------------------------------------------------

CLAIMS = [
    Claim("roc-auc", "ROC AUC of the score -p against the empirical ground truth (m = 0), pooled over seeds",
          "0.965-1.000 (Table 1)", 0.85, ">=", kind="exact"),
    Claim("roc-auc-every-seed", "ROC AUC in every seed: the smallest per-seed ROC AUC",
          "0.969 +- 0.023 over 3 model seeds (FMoW ID, Table 1)", 0.80, ">=", kind="exact"),
    Claim("decision-acc", "Decision accuracy at alpha = 0.05, m = 0, pooled over seeds", "81.8-100% (Table 1)",
          0.70, ">=", kind="exact"),
    Claim("fpr", "False-positive rate (SUITABLE although Acc(D_u) < Acc(D_test)) at alpha = 0.05, pooled",
          "0.000-0.031 (Table 1)", 0.05, "<=", kind="exact"),
    Claim("fpr-below-3pt", "SUITABLE rate when the user accuracy is more than 3 points below test, pooled",
          "0 of 8.4k experiments (Fig. 4)", 0.01, "<=", kind="exact"),
    Claim("sens-near-0", "SUITABLE rate for accuracy changes in [-2, 0) points, pooled",
          "2.6% in [-2,-1), 16.9% in [-1,0) (Fig. 4)", 0.10, "<=", kind="exact"),
    Claim("sens-gain-6", "SUITABLE rate for gains >= 6 points, pooled (0 when < 20 such experiments: not evaluable)",
          "100% (Fig. 4)", 0.80, ">=", kind="exact"),
    Claim("sens-monotone", "Largest drop of the pooled SUITABLE rate between adjacent accuracy-change bins",
          "non-decreasing (Fig. 4)", 0.05, "<=", kind="exact"),
    Claim("agg-vs-best", "ROC AUC(all 12 signals) minus the best single signal, pooled",
          "FMoW ID acc 81.8% vs best single 80.6% (appendix)", -0.01, ">=", kind="exact"),
    Claim("agg-vs-median", "ROC AUC(all 12 signals) minus the median single signal, pooled",
          "81.8% vs 62.3-80.6% (appendix)", 0.05, ">=", kind="exact"),
    Claim("logit-collapse", "log10 of (OOD FPR of the worst logit-scale signal / all-signal OOD FPR), pooled; "
          ">= log10 3", "logit_std 0.81 vs 0.018: log10 1.65 (FMoW OOD, appendix)", float(np.log10(3.0)), ">=",
          kind="exact"),
]
ALPHA, BELOW, NEAR, GAIN, MIN_BIN = 0.05, -0.03, (-0.02, 0.0), 0.06, 20


def bin_edges(width: float, reach: float = 0.16) -> np.ndarray:
    """Bin edges of acc_diff on [-reach, reach] with the given width."""
    n = int(round(reach / width))
    return np.arange(-n, n + 1) * width


def max_drop(rates: np.ndarray, counts: np.ndarray) -> float:
    """Largest decrease between consecutive bins that hold >= MIN_BIN experiments (0 if none)."""
    r = rates[counts >= MIN_BIN]
    return float(max(0.0, np.max(r[:-1] - r[1:]))) if len(r) > 1 else 0.0


def rate(suit: np.ndarray, mask: np.ndarray) -> float:
    """SUITABLE rate among the experiments in ``mask`` (NaN if none)."""
    return float(suit[mask].mean()) if mask.any() else float("nan")


def ood_mask(s: SeedResult) -> np.ndarray:
    """(pairs, users) mask of the experiments on OOD user sets."""
    return np.broadcast_to(np.array([k != "id" for k in s.kinds])[None, :], s.acc_diff.shape)


@dataclass
class Experiments:
    """Experiments of one seed or pooled over seeds (flat arrays, m = 0): acc_diff, p per filter, OOD flag."""

    diff: np.ndarray
    pvals: dict[str, np.ndarray]
    ood: np.ndarray

    @classmethod
    def of(cls, seeds: list[SeedResult]) -> "Experiments":
        """The m = 0 experiments of ``seeds``, concatenated (one seed: that seed's)."""
        return cls(np.concatenate([s.acc_diff.ravel() for s in seeds]),
                   {k: np.concatenate([s.pvals[k][0].ravel() for s in seeds]) for k in seeds[0].pvals},
                   np.concatenate([ood_mask(s).ravel() for s in seeds]))


def experiment_claim_values(e: Experiments, width: float) -> dict[str, float]:
    """Every claim's metric (except the per-seed minimum) on a set of experiments (all signals, m = 0)."""
    diff, p = e.diff, e.pvals["all"]
    gt, suit = diff >= 0, p <= ALPHA
    base = decision_metrics(p, gt, ALPHA)
    gain = diff >= GAIN
    out = {"roc-auc": base["roc"], "decision-acc": base["acc"], "fpr": base["fpr"],
           "fpr-below-3pt": rate(suit, diff < BELOW),
           "sens-near-0": rate(suit, (diff >= NEAR[0]) & (diff < NEAR[1])),
           "sens-gain-6": rate(suit, gain) if gain.sum() >= MIN_BIN else 0.0,
           "sens-monotone": max_drop(*binned_rates(diff, suit, bin_edges(width)))}
    singles = {k: decision_metrics(v, gt, ALPHA)["roc"] for k, v in e.pvals.items() if k != "all"}
    nan = float("nan")
    out["agg-vs-best"] = base["roc"] - max(singles.values()) if singles else nan
    out["agg-vs-median"] = base["roc"] - float(np.median(list(singles.values()))) if singles else nan
    neg = e.ood & ~gt
    if singles and neg.any():
        worst = max(rate(e.pvals[k] <= ALPHA, neg) for k in LOGIT_SCALE)
        # an all-signal FPR of 0 is read as "below one in the number of unsuitable experiments"
        out["logit-collapse"] = float(np.log10(max(worst, 1e-12) / max(rate(suit, neg), 1.0 / neg.sum())))
    else:
        out["logit-collapse"] = nan
    return out


def seed_claim_values(s: SeedResult, width: float) -> dict[str, float]:
    """Every claim's metric on one seed alone (the spread shown next to the pooled value)."""
    return experiment_claim_values(Experiments.of([s]), width)


def claim_values(results: Results) -> dict[str, float]:
    """Claim id -> one value: the metric on the experiments pooled over seeds, as the spec asks, and the
    smallest per-seed ROC AUC for the "in every seed" row."""
    out = experiment_claim_values(Experiments.of(results.seeds), results.params.bin_width)
    per_seed_roc = [seed_claim_values(s, results.params.bin_width)["roc-auc"] for s in results.seeds]
    out["roc-auc-every-seed"] = claims.worst(per_seed_roc, ">=")
    return {c.id: out[c.id] for c in CLAIMS}


def claim_spread(results: Results) -> pd.DataFrame:
    """Per claim: the pooled value (the claim's) and the smallest and largest value of single seeds."""
    pooled = claim_values(results)
    per = [seed_claim_values(s, results.params.bin_width) for s in results.seeds]
    rows = []
    for c in CLAIMS:
        key = "roc-auc" if c.id == "roc-auc-every-seed" else c.id
        v = np.array([d[key] for d in per], dtype=float)
        rows.append({"claim": c.id, "pooled (claim value)": pooled[c.id], "seed min": np.nanmin(v),
                     "seed max": np.nanmax(v), "test": f"{c.direction} {c.threshold:.3g}"})
    return pd.DataFrame(rows).set_index("claim")


def check(results: Results) -> list[Verdict]:
    """Evaluate every claim once on its pooled value (exact rows)."""
    return evaluate_all(CLAIMS, claim_values(results))


# --- summaries ----------------------------------------------------------------------------------

def subset_metrics(s: SeedResult, p: np.ndarray, m: float, alpha: float, which: str) -> dict[str, float]:
    """Decision metrics of p-values ``p`` (pairs, users) at margin m on all / id / ood experiments."""
    mask = {"all": np.ones_like(s.acc_diff, bool), "ood": ood_mask(s), "id": ~ood_mask(s)}[which]
    return decision_metrics(p[mask], (s.acc_diff >= -m)[mask], alpha)


def settings_table(results: Results) -> pd.DataFrame:
    """Mean (min-max over seeds) of accuracy, FPR, TPR, ROC and PR AUC per margin, alpha and subset."""
    rows = []
    for k, m in enumerate(results.margins):
        for alpha in results.alphas:
            for which in ("all", "id", "ood"):
                for rule in ("m", "m' (adjusted)") if which != "all" else ("m",):
                    per = [subset_metrics(s, s.pvals["all"][k] if rule == "m" else s.p_adjusted[k], m, alpha, which)
                           for s in results.seeds]
                    row = {"m": m, "alpha": alpha, "user sets": which, "margin rule": rule}
                    for key in ("acc", "fpr", "tpr", "roc", "pr"):
                        v = np.array([d[key] for d in per])
                        row[key] = f"{np.nanmean(v):.3f} ({np.nanmin(v):.3f}-{np.nanmax(v):.3f})"
                    rows.append(row)
    return pd.DataFrame(rows).set_index(["m", "alpha", "user sets", "margin rule"])


def ablation_values(results: Results) -> dict[str, dict[str, np.ndarray]]:
    """Variant -> '<metric>-<id|ood>' -> per-seed values (m = 0, alpha = 0.05)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for name in results.seeds[0].pvals:
        vals = {}
        for which in ("id", "ood"):
            per = [subset_metrics(s, s.pvals[name][0], 0.0, ALPHA, which) for s in results.seeds]
            vals |= {f"{key}-{which}": np.array([d[key] for d in per]) for key in ("roc", "acc", "fpr")}
        out[name] = vals
    return out


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary: claim means, ID/OOD rows, m' effect, calibration bias, timings."""
    cv = claim_values(results)
    out: dict[str, Any] = {f"claim/{k}": float(v) for k, v in cv.items()}
    for which in ("id", "ood"):
        for rule, key in (("m", "pvals"), ("adj", "p_adjusted")):
            per = [subset_metrics(s, s.pvals["all"][0] if key == "pvals" else s.p_adjusted[0], 0.0, ALPHA, which)
                   for s in results.seeds]
            out |= {f"{which}/{rule}/{k}": float(np.nanmean([d[k] for d in per])) for k in per[0]}
    out |= {f"roc/{k}": float(np.nanmean(v["roc-id"] + v["roc-ood"]) / 2) for k, v in ablation_values(results).items()}
    bias = [(s.delta_user[s.pairs[:, 0]] - s.delta_test[s.pairs[:, 0], s.pairs[:, 1]]).ravel()
            for s in results.seeds]
    diffs = [s.acc_diff.ravel() for s in results.seeds]
    pooled = Experiments.of(results.seeds)
    out |= {f"pooled-roc/{k}": decision_metrics(v, pooled.diff >= 0, ALPHA)["roc"] for k, v in pooled.pvals.items()}
    out["calib-bias-vs-accdiff-corr"] = float(np.mean([np.corrcoef(b, d)[0, 1] for b, d in zip(bias, diffs)]))
    out["acc-pool"] = float(np.mean([s.acc_pool for s in results.seeds]))
    if results.params.preset != "paper":  # the real signals have no simulated task
        out["class-sep-used"] = [s.class_sep for s in results.seeds]
    out["experiments-per-seed"] = int(results.seeds[0].acc_diff.size)
    out["scipy-max-abs-diff"] = max(s.scipy_max_diff for s in results.seeds)
    out["variance-floor-hits"] = sum(s.n_floor for s in results.seeds)
    out |= {f"seconds/{k}": float(np.mean([s.timings[k] for s in results.seeds])) for k in results.seeds[0].timings}
    return out


# --- figures ------------------------------------------------------------------------------------

def _pick(s: SeedResult, pair: int, suitable: bool) -> int:
    """A user set near the boundary, judged SUITABLE (and truly so) or truly UNSUITABLE."""
    diff, suit = s.acc_diff[pair], s.pvals["all"][0, pair] <= ALPHA
    ok = (suit & (diff >= 0)) if suitable else (diff < 0)
    target = 0.04 if suitable else -0.05
    cand = np.flatnonzero(ok) if ok.any() else np.arange(len(diff))
    return int(cand[np.argmin(np.abs(diff[cand] - target))])


def plot_densities(results: Results) -> Figure:
    """Fig. 1 analog: p_c on D_test and on a SUITABLE and an UNSUITABLE user set (first seed, pair (0, 1))."""
    s, m = results.seeds[0], max(results.margins)
    fig, (ax,) = plotting.figure(1, 1, width=6.0, height=3.2)
    sets = [("D_test (fold 1)", s.pc_example_test, None)]
    for suitable in (True, False):
        u = _pick(s, 0, suitable)
        word = "SUITABLE" if s.pvals["all"][0, 0, u] <= ALPHA else "INCONCLUSIVE"
        sets.append((f"{s.labels[u]}: acc diff {s.acc_diff[0, u]:+.3f}, {word}", s.pc_example_users[u], u))
    for label, pc, _ in sets:
        line = ax.hist(pc, bins=40, range=(0, 1), density=True, histtype="step", label=label)[2][0]
        ax.axvline(pc.mean(), color=line.get_edgecolor(), ls="--", lw=1)
    mt = s.pc_example_test.mean()
    ax.axvspan(mt - m, mt, color="grey", alpha=0.2, lw=0, label=f"margin band m = {m:g}")
    ax.set(xlabel="estimated probability of correctness p_c", ylabel="density",
           title="Suitability test: compare mean p_c (dashed) of user vs test data")
    ax.legend(loc="upper left")
    return fig


def plot_sensitivity(results: Results) -> Figure:
    """Fig. 4 analog: SUITABLE rate per acc-diff bin (ID and OOD, pooled over seeds) and acc-diff histogram."""
    edges = bin_edges(results.params.bin_width)
    centres = (edges[:-1] + edges[1:]) / 2 * 100
    fig, (ax, ax2) = plotting.figure(2, 1, width=4.6, height=3.2)
    for which in ("id", "ood"):
        diff = np.concatenate([s.acc_diff[(ood_mask(s) if which == "ood" else ~ood_mask(s))] for s in results.seeds])
        suit = np.concatenate([s.pvals["all"][0][(ood_mask(s) if which == "ood" else ~ood_mask(s))] <= ALPHA
                               for s in results.seeds])
        rates, counts = binned_rates(diff, suit, edges)
        keep = counts >= MIN_BIN
        ax.plot(centres[keep], 100 * rates[keep], "o-", ms=3, label=which.upper())
        for x, y, n in zip(centres[keep], 100 * rates[keep], counts[keep]):
            ax.annotate(str(n), (x, y), fontsize=5, xytext=(0, 4 if which == "id" else -8),
                        textcoords="offset points", ha="center")
        ax2.hist(100 * diff, bins=40, alpha=0.6, label=which.upper())
    ax.step([edges[0] * 100, 0, 0, edges[-1] * 100], [0, 0, 100, 100], where="post", color="k", ls=":",
            lw=1, label="ideal (m = 0)")
    ax.set(xlabel="Acc(D_u) - Acc(D_test) [points]", ylabel="% SUITABLE", title="Sensitivity (alpha = 0.05)")
    ax.legend(loc="upper left")
    ax2.axvline(0, color="k", lw=0.8)
    ax2.set(xlabel="Acc(D_u) - Acc(D_test) [points]", ylabel="experiments", title="Design coverage")
    ax2.legend()
    return fig


def plot_estimates(results: Results) -> Figure:
    """Fig. 3 analog: mean p_c vs true user accuracy, source-calibrated and with the m' correction."""
    s = results.seeds[0]
    i, j = s.pairs[0]
    fig, axes = plotting.figure(2, 1, width=3.8, height=3.4)
    decisions = (s.pvals["all"][0, 0] <= ALPHA, s.p_adjusted[0, 0] <= ALPHA)
    ests = (s.mean_pc_user[i], s.mean_pc_user[i] - s.delta_user[i] + s.delta_test[i, j])
    titles = ("source-calibrated C", "margin-adjusted (m' from labeled D^_u)")
    ood = np.array([k != "id" for k in s.kinds])
    lo = min(s.acc_user.min(), min(e.min() for e in ests)) - 0.02
    for ax, est, suit, title in zip(axes, ests, decisions, titles):
        for mask, marker, name in ((~ood, "o", "ID"), (ood, "^", "OOD")):
            for flag, colour, word in ((True, "C2", "SUITABLE"), (False, "C3", "INCONCLUSIVE")):
                sel = mask & (suit == flag)
                ax.scatter(s.acc_user[sel], est[sel], marker=marker, c=colour, s=18, alpha=0.8,
                           label=f"{name} {word}")
        ax.plot([lo, 1], [lo, 1], "k:", lw=1)
        ax.axvline(s.acc_test[j].mean(), color="grey", lw=0.8)
        ax.axhline(s.mean_pc_test[i, j].mean(), color="grey", lw=0.8, ls="--")
        ax.set(xlim=(lo, 1), ylim=(lo, 1), xlabel="true Acc(D_u)", title=title)
    axes[0].set_ylabel("mean p_c on D_u (adjusted: + Delta_test - Delta_u)")
    axes[1].legend(loc="lower right", fontsize=6)
    return fig


def plot_ablation(results: Results) -> Figure:
    """Signal ablation: ROC AUC, accuracy and FPR of each filter on ID and OOD sets (mean +- sd over seeds)."""
    vals = ablation_values(results)
    names = list(vals)
    y = np.arange(len(names))
    fig, axes = plotting.figure(3, 1, width=3.0, height=0.22 * len(names) + 1.2)
    for ax, key, title in zip(axes, ("roc", "acc", "fpr"), ("ROC AUC", "decision accuracy", "FPR")):
        for k, which in enumerate(("id", "ood")):
            v = np.array([vals[n][f"{key}-{which}"] for n in names])
            ax.barh(y + (k - 0.5) * 0.4, np.nanmean(v, axis=1), height=0.4, xerr=np.nanstd(v, axis=1),
                    label=which.upper(), error_kw={"lw": 0.7})
        ax.set(yticks=y, yticklabels=names if key == "roc" else [], title=title)
        ax.invert_yaxis()
    axes[2].axvline(ALPHA, color="k", ls=":", lw=1)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=2)
    return fig
