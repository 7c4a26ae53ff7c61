"""The simulated deployment study and the paper preset: signals, estimator, fold-pair protocol, claim values."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
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

from companion import claims, runtime
from companion.models.mlp import FeatureMLP, fit, logits
from companion.params import resolve_path
from companion.papers.suitability_filter import CLAIMS, LOGIT_SCALE, SIGNALS, Params
from companion.papers.suitability_filter import paper_preset as wilds
from companion.papers.suitability_filter.domain_mixture import MixtureTask, make_task, sample, unit_vector
from companion.papers.suitability_filter.noninferiority import (VAR_FLOOR, adjusted_margin, binned_rates,
                                                                decision_metrics, welch_moments)

EPS = 1e-10
ACC_RANGE = (0.75, 0.92)
SMOKE_FOLDS, SMOKE_GROUPS = 3, 2
ALPHA, BELOW, NEAR, GAIN, MIN_BIN = 0.05, -0.03, (-0.02, 0.0), 0.06, 20
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
    # conf_max alone is the MSP baseline of every finding, so it is fitted even without the ablation
    variants = {"all": list(range(len(SIGNALS))), "conf_max": [0]}
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
            pvals["naive"] = naive_pvalues(mt[pi, pj][:, None], mu[pi], ms)
        lap("tests")
    pvals = {k: pvals[k] for k in ("all", *SIGNALS, "naive") if k in pvals}
    return PoolTests(pvals, p_adj, *kept_moments, kept[0][0][1], kept[0][1], scipy_diff, n_floor)


def naive_pvalues(mean_t: np.ndarray, mean_u: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The naive rule "SUITABLE iff mean p_c(D_u) >= mean p_c(D_test) - m" written as a score alpha * exp(-d),
    d = mean_u - mean_t + m: it is <= alpha exactly when d >= 0 and ranks experiments as d does."""
    return ALPHA * np.exp(-(mean_u - mean_t + m))


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


def filter_values(e: Experiments, width: float, key: str = "all") -> dict[str, float]:
    """Every claim's metric (except the per-seed minimum) for the filter ``key`` of ``e.pvals`` (m = 0)."""
    diff, p = e.diff, e.pvals[key]
    gt, suit = diff >= 0, p <= ALPHA
    base = decision_metrics(p, gt, ALPHA)
    gain = diff >= GAIN
    out = {"roc-auc": base["roc"], "decision-acc": base["acc"], "fpr": base["fpr"],
           "fpr-below-3pt": rate(suit, diff < BELOW),
           "sens-near-0": rate(suit, (diff >= NEAR[0]) & (diff < NEAR[1])),
           "sens-gain-6": rate(suit, gain) if gain.sum() >= MIN_BIN else 0.0,
           "sens-monotone": max_drop(*binned_rates(diff, suit, bin_edges(width)))}
    single = {k: decision_metrics(e.pvals[k], gt, ALPHA) for k in SIGNALS if k in e.pvals}
    nan = float("nan")
    complete = len(single) == len(SIGNALS)  # best and median need the whole ablation
    roc = [d["roc"] for d in single.values()]
    out["agg-vs-best"] = base["roc"] - max(roc) if complete else nan
    out["agg-vs-median"] = base["roc"] - float(np.median(roc)) if complete else nan
    out["all-minus-msp"] = base["acc"] - single["conf_max"]["acc"]
    out["median-acc"] = float(np.median([d["acc"] for d in single.values()])) if complete else nan
    neg = e.ood & ~gt
    if complete and neg.any():
        worst = max(rate(e.pvals[k] <= ALPHA, neg) for k in LOGIT_SCALE)
        # a filter FPR of 0 is read as "below one in the number of unsuitable experiments"
        out["logit-collapse"] = float(np.log10(max(worst, 1e-12) / max(rate(suit, neg), 1.0 / neg.sum())))
    else:
        out["logit-collapse"] = nan
    return out


def seed_claim_values(s: SeedResult, width: float, key: str = "all") -> dict[str, float]:
    """Every claim's metric for filter ``key`` on one seed alone (the spread shown next to the pooled value)."""
    return filter_values(Experiments.of([s]), width, key)


FILTERS = {"all": "all", "msp": "conf_max", "naive": "naive"}


def claim_values(results: Results) -> dict[str, float | list[float]]:
    """Claim id (and "<id>@<control>") -> its value: the metric on the experiments pooled over seeds, as the
    spec asks, and the per-seed ROC AUCs for the "in every seed" row (judged on its worst seed); the controls
    are the MSP filter and the naive comparison, on the same experiments."""
    width = results.params.bin_width
    pooled = Experiments.of(results.seeds)
    out: dict[str, float | list[float]] = {"welch-vs-scipy": max(s.scipy_max_diff for s in results.seeds)}
    for control, key in FILTERS.items():
        v = filter_values(pooled, width, key)
        v["roc-auc-every-seed"] = [seed_claim_values(s, width, key)["roc-auc"] for s in results.seeds]
        suffix = "" if control == "all" else f"@{control}"
        out |= {f"{c.id}{suffix}": v[c.id] for c in CLAIMS if c.role == "finding" and c.id != "all-minus-msp"}
        if control == "all":
            out["all-minus-msp"] = v["all-minus-msp"]
            out["all-minus-msp@median-single"] = v["median-acc"] - (v["decision-acc"] - v["all-minus-msp"])
    return out


def per_seed_values(results: Results) -> dict[str, list[float]]:
    """Every claim and control key of :func:`claim_values` -> its value on each seed alone."""
    width = results.params.bin_width
    per = {c: [seed_claim_values(s, width, k) for s in results.seeds] for c, k in FILTERS.items()}
    out: dict[str, list[float]] = {"welch-vs-scipy": [s.scipy_max_diff for s in results.seeds]}
    for control, vals in per.items():
        suffix = "" if control == "all" else f"@{control}"
        for c in CLAIMS:
            if c.role == "finding" and c.id != "all-minus-msp":
                key = "roc-auc" if c.id == "roc-auc-every-seed" else c.id
                out[c.id + suffix] = [float(d[key]) for d in vals]
    out["all-minus-msp"] = [float(d["all-minus-msp"]) for d in per["all"]]
    out["all-minus-msp@median-single"] = [float(d["median-acc"] - d["decision-acc"] + d["all-minus-msp"])
                                          for d in per["all"]]
    return out


def judged_value(key: str, value: float | list[float]) -> float:
    """The value a claim or control key is judged on: itself, or the worst seed of an "in every seed" row."""
    claim = next(c for c in CLAIMS if c.id == key.split("@")[0])
    return claims.worst(np.atleast_1d(value), claim.direction)


def claim_spread(results: Results) -> pd.DataFrame:
    """Per claim and control: the pooled value (the one judged), the test, and the value on each seed alone."""
    pooled, per = claim_values(results), per_seed_values(results)
    seeds = [s.seed for s in results.seeds]
    rows = []
    for c in CLAIMS:
        for key in (c.id, *map(c.control_key, c.controls)):
            name = "filter" if key == c.id else key.split("@")[1]
            judged = judged_value(key, pooled[key])
            rows.append({"claim": c.id, "filter": name, "pooled (judged)": judged,
                         "test": f"{c.direction} {c.threshold:.3g}"}
                        | {f"seed {s}": v for s, v in zip(seeds, per[key])})
    return pd.DataFrame(rows).set_index(["claim", "filter"])


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
    out: dict[str, Any] = {f"claim/{k}": judged_value(k, v) for k, v in cv.items()}
    out |= {f"per-seed/{k}": v for k, v in per_seed_values(results).items()}
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
    for which, mask in (("id", ~pooled.ood), ("ood", pooled.ood)):
        for k, v in pooled.pvals.items():
            d = decision_metrics(v[mask], pooled.diff[mask] >= 0, ALPHA)
            out |= {f"pooled-{key}-{which}/{k}": d[key] for key in ("roc", "acc", "fpr")}
    out["calib-bias-vs-accdiff-corr"] = float(np.mean([np.corrcoef(b, d)[0, 1] for b, d in zip(bias, diffs)]))
    out["acc-pool"] = float(np.mean([s.acc_pool for s in results.seeds]))
    if results.params.preset != "paper":  # the real signals have no simulated task
        out["class-sep-used"] = [s.class_sep for s in results.seeds]
    out["experiments-per-seed"] = int(results.seeds[0].acc_diff.size)
    out["scipy-max-abs-diff"] = max(s.scipy_max_diff for s in results.seeds)
    out["variance-floor-hits"] = sum(s.n_floor for s in results.seeds)
    out |= {f"seconds/{k}": float(np.mean([s.timings[k] for s in results.seeds])) for k in results.seeds[0].timings}
    return out

