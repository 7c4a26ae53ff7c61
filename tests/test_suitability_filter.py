"""Unit checks of the suitability filter: the Welch test, signals, estimator, margin, metrics, protocol."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.special import logsumexp
from statsmodels.stats.weightstats import ttest_ind as sm_ttest_ind

from companion.papers.suitability_filter.domain_mixture import make_task, sample
from companion.models.mlp import FeatureMLP, fit, logits
from companion.params import ParamError
from companion.papers import suitability_filter as sf


@pytest.fixture(scope="module")
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.mark.parametrize("m", [0.0, 0.03, 0.1])
def test_welch_matches_scipy_and_statsmodels(m: float, rng: np.random.Generator) -> None:
    a, b = rng.beta(4, 2, 300), rng.beta(3, 2, 450)
    t, nu, p = sf.welch_noninferiority(a, b, m)
    ref = stats.ttest_ind(a, b + m, equal_var=False, alternative="less")
    assert abs(p - ref.pvalue) < 1e-12 and abs(t - ref.statistic) < 1e-12 and abs(nu - ref.df) < 1e-9
    sm_t, sm_p, sm_df = sm_ttest_ind(b, a, alternative="larger", usevar="unequal", value=-m)
    assert abs(p - sm_p) < 1e-12 and abs(t + sm_t) < 1e-12 and abs(nu - sm_df) < 1e-9


def test_vectorized_equals_looped(rng: np.random.Generator) -> None:
    tests = [rng.beta(4, 2, 200) for _ in range(3)]
    users = [rng.beta(4, 2, n) - rng.uniform(0, 0.1) for n in (100, 250, 400, 80)]
    moments = lambda xs: [np.array([f(x) for x in xs]) for f in (np.mean, lambda x: np.var(x, ddof=1), len)]
    mt, vt, nt = (v[:, None] for v in moments(tests))
    mu, vu, nu_ = (v[None, :] for v in moments(users))
    p = sf.welch_moments(mt, vt, nt, mu, vu, nu_, 0.02)[2]
    looped = [[sf.welch_noninferiority(a, b, 0.02)[2] for b in users] for a in tests]
    np.testing.assert_allclose(p, looped, rtol=0, atol=1e-14)


def test_monotone_and_identical_samples(rng: np.random.Generator) -> None:
    a, b = rng.beta(4, 2, 300), rng.beta(4, 2, 300)
    p0 = sf.welch_noninferiority(a, b, 0.0)[2]
    assert sf.welch_noninferiority(a, b + 0.01, 0.0)[2] < p0
    assert sf.welch_noninferiority(a, b, 0.02)[2] < p0
    assert sf.welch_noninferiority(a, a.copy(), 0.0)[2] == pytest.approx(0.5, abs=1e-12)


def test_level_under_the_null() -> None:
    rng = np.random.default_rng(1)
    m, n, sims = 0.03, 300, 4000
    test = rng.beta(4, 2, (sims, n))
    user = rng.beta(4, 2, (sims, n)) - m  # population user mean is exactly mu_test - m
    p = sf.welch_moments(test.mean(1), test.var(1, ddof=1), n, user.mean(1), user.var(1, ddof=1), n, m)[2]
    assert 0.04 <= np.mean(p <= 0.05) <= 0.06


def test_signals_properties(rng: np.random.Generator) -> None:
    k = 10
    z = rng.normal(0, 3, (500, k))
    s = sf.signals(z)
    assert s.shape == (500, 12)
    assert np.all((s[:, 0] >= 1 / k - 1e-12) & (s[:, 0] <= 1))
    assert np.all((s[:, 2] >= -1e-9) & (s[:, 2] <= np.log(k) + 1e-9))
    np.testing.assert_allclose(s[:, 11], -logsumexp(z, axis=1))
    np.testing.assert_allclose(s[:, 8], -s[:, 6], atol=1e-6)
    np.testing.assert_array_equal(s[:, 10], s[:, 0])
    probs = torch.softmax(torch.as_tensor(z), 1)
    np.testing.assert_allclose(s[:, 1], probs.std(1).numpy(), rtol=1e-10)


def test_signals_shift_invariance(rng: np.random.Generator) -> None:
    z = rng.normal(0, 2, (200, 10))
    s, s2 = sf.signals(z), sf.signals(z + 3.7)
    same = [0, 1, 2, 5, 6, 7, 8, 9, 10]
    np.testing.assert_allclose(s2[:, same], s[:, same], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(s2[:, [3, 4]], s[:, [3, 4]] + 3.7, atol=1e-10)
    np.testing.assert_allclose(s2[:, 11], s[:, 11] - 3.7, atol=1e-10)


def test_top_k_small_k_not_degenerate(rng: np.random.Generator) -> None:
    s = sf.signals(rng.normal(size=(50, 5)))
    np.testing.assert_array_equal(s[:, 10], s[:, 0])  # max(1, floor(0.1 K)) = 1 for K < 10


@pytest.fixture(scope="module")
def trained() -> tuple:
    rng, gen = np.random.default_rng(3), torch.Generator().manual_seed(3)
    task = make_task(10, 8, 1.0, (0.7, 0.9, 1.1, 1.3), rng)
    w = np.ones(4) / 4
    x, y, _ = sample(task, 2000, w, rng)
    net = fit(FeatureMLP((8, 32, 32), 10, gen), x, y, 5, gen)
    return task, net, w, rng


def _feats(net: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = logits(net, x)
    return sf.signals(z), z.argmax(1) == y


def test_estimator_only_sees_d_sf(trained: tuple) -> None:
    task, net, w, rng = trained
    s, c = _feats(net, *sample(task, 800, w, rng)[:2])
    c1 = sf.fit_correctness(s[:400], c[:400])
    s_other = s.copy()
    s_other[400:] += 5.0  # perturbing D_test / D_u must not change the fitted C
    c2 = sf.fit_correctness(s_other[:400], c[:400])
    np.testing.assert_array_equal(c1[0].mean_, c2[0].mean_)
    np.testing.assert_array_equal(c1[0].scale_, c2[0].scale_)
    np.testing.assert_array_equal(sf.prob_correct(c1, s), sf.prob_correct(c2, s))
    np.testing.assert_allclose(c1[0].mean_, s[:400].mean(0))
    pc = sf.prob_correct(c1, s)
    assert np.all((pc >= 0) & (pc <= 1))


def test_calibrated_estimate_tracks_accuracy(trained: tuple) -> None:
    task, net, w, rng = trained
    s, c = _feats(net, *sample(task, 20_000, w, rng)[:2])
    s_new, c_new = _feats(net, *sample(task, 20_000, w, rng)[:2])
    pc = sf.prob_correct(sf.fit_correctness(s, c), s_new)
    assert abs(pc.mean() - c_new.mean()) < 0.02


def test_margin_adjustment() -> None:
    pc, correct = np.array([0.9, 0.8, 0.7, 0.6]), np.array([1, 1, 0, 1])
    assert sf.calibration_bias(pc, correct) == pytest.approx(np.mean(pc - correct))
    assert sf.adjusted_margin(0.05, 0.02, 0.07) == pytest.approx(0.0)
    assert sf.adjusted_margin(0.05, 0.0, 0.0) == 0.05


def test_decision_metrics_by_hand() -> None:
    p = np.array([0.01, 0.2, 0.03, 0.5, 0.04, 0.9])
    gt = np.array([1, 1, 0, 0, 1, 0], bool)
    out = sf.decision_metrics(p, gt, 0.05)
    # SUITABLE = [1, 0, 1, 0, 1, 0]: correct on 0, 3, 4, 5; one FP of three negatives, two TPs of three
    assert out["acc"] == pytest.approx(4 / 6) and out["fpr"] == pytest.approx(1 / 3)
    assert out["tpr"] == pytest.approx(2 / 3)
    # score -p ranks 0.01, 0.03, 0.04, 0.2, 0.5, 0.9: positive-over-negative pairs 7 of 9
    assert out["roc"] == pytest.approx(7 / 9)
    assert out["pr"] == pytest.approx((1 + 2 / 3 + 3 / 4) / 3)
    perfect = sf.decision_metrics(np.array([0.01, 0.02, 0.6, 0.7]), np.array([1, 1, 0, 0], bool), 0.05)
    assert perfect["roc"] == 1.0 and perfect["pr"] == 1.0


def test_binned_rates_and_drop() -> None:
    diff = np.array([-0.03, -0.01, -0.01, 0.01, 0.03, 0.03])
    suit = np.array([0, 0, 1, 1, 1, 0], bool)
    rates, counts = sf.binned_rates(diff, suit, np.array([-0.04, -0.02, 0.0, 0.02, 0.04]))
    np.testing.assert_allclose(rates, [0, 0.5, 1, 0.5])
    np.testing.assert_array_equal(counts, [1, 2, 1, 2])
    assert sf.max_drop(np.array([0.1, 0.5, 0.4, 0.9]), np.full(4, 30)) == pytest.approx(0.1)
    assert sf.max_drop(np.array([0.1, 0.5, 0.4, 0.9]), np.array([30, 30, 5, 30])) == 0.0


TINY = dict(seeds=1, n_train=600, epochs=2, hidden=16, n_folds=3, fold_size=120, n_user_id=4,
            ood_noise_taus=(0.5,), ood_shift_radii=(1.0,), ood_novel_sigmas=(0.5,), ood_reps=1,
            user_size=(60, 90), n_labeled_user=30, class_sep=1.0)


@pytest.fixture(scope="module")
def tiny_run() -> sf.Results:
    return sf.run(sf.Params.resolve("quick", **TINY))


def test_protocol_bookkeeping(tiny_run: sf.Results) -> None:
    s = tiny_run.seeds[0]
    n_users = 4 + 3
    assert s.pvals["all"].shape == (1, 3 * 2, n_users)
    assert s.acc_diff.size == n_users * 3 * 2
    assert not np.any(s.pairs[:, 0] == s.pairs[:, 1])
    assert len({tuple(p) for p in s.pairs}) == 6
    assert np.all((s.acc_test > 0) & (s.acc_test <= 1)) and s.scipy_max_diff < 1e-12
    assert list(s.pvals) == ["all", *sf.SIGNALS, "naive"]
    # the stored moments and calibration biases are those of the all-signal C
    for arr in (s.mean_pc_test, s.mean_pc_user):
        assert np.all((arr > 0) & (arr < 1))
    assert np.all(np.abs(s.delta_user) <= 1) and np.all(np.abs(s.delta_test[~np.eye(3, dtype=bool)]) <= 1)


def test_source_folds_partition_the_pool_and_pairs_are_ordered_distinct() -> None:
    folds = sf.source_folds(5, 40, np.random.default_rng(0))
    assert folds.shape == (5, 40)
    assert np.array_equal(np.sort(folds.ravel()), np.arange(200))  # disjoint and covering
    again = sf.source_folds(5, 40, np.random.default_rng(0))
    other = sf.source_folds(5, 40, np.random.default_rng(1))
    assert np.array_equal(folds, again) and not np.array_equal(folds, other)
    pairs = sf.ordered_pairs(5)
    assert len(pairs) == 20 and len({tuple(p) for p in pairs}) == 20 and (pairs[:, 0] != pairs[:, 1]).all()


def test_determinism(tiny_run: sf.Results) -> None:
    again = sf.run(sf.Params.resolve("quick", **TINY))
    np.testing.assert_array_equal(again.seeds[0].pvals["all"], tiny_run.seeds[0].pvals["all"])
    np.testing.assert_array_equal(again.seeds[0].acc_user, tiny_run.seeds[0].acc_user)
    first, second = sf.check(tiny_run), sf.check(again)
    assert [v.verdict for v in first] == [v.verdict for v in second]
    np.testing.assert_array_equal([v.value for v in first], [v.value for v in second])


def test_params_reject_bad_values() -> None:
    with pytest.raises(ParamError, match="unknown parameter"):
        sf.Params.resolve("quick", n_clases=10)
    with pytest.raises(ParamError, match="is not an int"):
        sf.Params.resolve("quick", n_folds=2.5)
    with pytest.raises(ParamError, match="out of range"):
        sf.Params.resolve("quick", n_folds=2)
    with pytest.raises(ParamError, match="user_size"):
        sf.Params.resolve("quick", user_size=(900, 300))
    with pytest.raises(ParamError, match="out of range"):
        sf.Params.parse("estimator", "xgboost")
    assert sf.Params.parse("user_size", "300,2000") == (300, 2000)
    full = sf.Params.resolve("full")
    assert dataclasses.asdict(full)["n_folds"] == 15


def test_claims_are_pooled_over_seeds_and_the_every_seed_row_keeps_each_seed() -> None:
    res = sf.run(sf.Params.resolve("quick", **(TINY | {"seeds": 2})))
    values, verdicts = sf.claim_values(res), sf.check(res)
    assert all(v.kind == ("every" if v.id == "roc-auc-every-seed" else "exact") and v.interval is None
               for v in verdicts)
    pooled = sf.Experiments.of(res.seeds)
    assert pooled.diff.size == sum(s.acc_diff.size for s in res.seeds)
    gt = pooled.diff >= 0
    # the pooled ROC AUC is that of the concatenated experiments, not the mean of the seeds' AUCs
    assert values["roc-auc"] == pytest.approx(sf.decision_metrics(pooled.pvals["all"], gt, sf.ALPHA)["roc"])
    per_seed = [sf.seed_claim_values(s, res.params.bin_width)["roc-auc"] for s in res.seeds]
    assert values["roc-auc-every-seed"] == per_seed
    every = {v.id: v for v in verdicts}["roc-auc-every-seed"]
    assert every.value == min(per_seed) and all(len(c.per_seed) == 2 for c in every.controls)
    spread = sf.claim_spread(res)
    assert [spread.loc[("roc-auc", "filter"), f"seed {s.seed}"] for s in res.seeds] == per_seed
    table = sf.settings_table(res)
    assert {"m", "m' (adjusted)"} <= set(table.xs("id", level="user sets").index.get_level_values("margin rule"))


def _official_results(root, seeds=(0,)) -> None:
    """Tiny files in the official results/ layout: FMoW-like signals per model seed and user subsets."""
    import pickle

    rng = np.random.default_rng(5)
    (root / "features").mkdir(parents=True)
    (root / "split_indices").mkdir()

    def split(n: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
        z = rng.normal(0, scale, (n, 10))
        p = np.exp(z - logsumexp(z, axis=1, keepdims=True)).max(axis=1)
        return sf.signals(z).astype(np.float32), rng.random(n) < p  # correct with the model's confidence

    for seed in seeds:
        feats = {"id_val": split(300, 2.0), "id_test": split(300, 2.0), "val": split(200, 1.0), "test": split(200, 3.0)}
        with (root / "features" / f"fmow_ERM_last_{seed}.pkl").open("wb") as f:
            pickle.dump(feats, f)
    ids = {("id_val", "{'year': [2010]}"): list(range(0, 300, 4)), ("id_test", "{'region': ['Asia']}"): list(range(60))}
    ood = {("val", "{'year': [2013]}"): list(range(120)), ("test", "{'year': 2016}"): list(range(50, 200))}
    for name, d in (("fmow_id.pkl", ids), ("fmow_ood.pkl", ood)):
        with (root / "split_indices" / name).open("wb") as f:
            pickle.dump(d, f)


def test_wilds_pools_follow_the_official_protocol(tmp_path) -> None:
    from companion.papers.suitability_filter import paper_preset as wilds

    _official_results(tmp_path)
    feats = wilds.load_features(wilds.features_file(tmp_path, "fmow", "ERM", 0))
    subsets = wilds.load_subsets(wilds.split_files(tmp_path, "fmow"))
    groups = wilds.pool_groups("fmow", feats, subsets)
    # OOD subsets share the whole ID pool; each ID subset is removed from its own split's part of the pool
    assert [u.kind for u in groups[0].users] == ["ood", "ood"] and len(groups[0].correct) == 600
    assert [len(g.correct) for g in groups[1:]] == [600 - 75, 600 - 60]
    u = groups[1].users[0]
    np.testing.assert_array_equal(u.signals, feats["id_val"][0][0:300:4])
    assert not (groups[1].signals[:, None, :] == u.signals[None]).all(axis=2).any()
    f = wilds.folds(len(groups[1].correct), 15, np.random.default_rng(0))
    assert f.shape == (15, 35) and len(np.unique(f)) == f.size


def test_paper_preset_refuses_missing_official_files(tmp_path) -> None:
    with pytest.raises(ParamError, match="data_path"):
        sf.Params.resolve("paper", data_path=str(tmp_path / "nope"))
    _official_results(tmp_path)
    with pytest.raises(ParamError, match="fmow_ERM_last_1.pkl is missing"):
        sf.Params.resolve("paper", data_path=str(tmp_path))
    with pytest.raises(ParamError, match="rxrx1"):
        sf.Params.resolve("paper", data_path=str(tmp_path), dataset="rxrx1", smoke=True)
    assert sf.Params.resolve("paper", data_path=str(tmp_path), smoke=True).smoke


@pytest.mark.slow
def test_paper_preset_runs_through_the_cli_on_official_layout(tmp_path) -> None:
    import json

    from companion import cli

    _official_results(tmp_path / "results")
    assert cli.main(["run", "suitability-filter", "--preset", "paper", "-p", f"data_path={tmp_path / 'results'}",
                     "-p", "smoke=true", "-p", "device=cpu", "--out", str(tmp_path / "run")]) == 0
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["status"] == "ok" and res["params"]["preset"] == "paper"
    assert res["metrics"]["experiments-per-seed"] == 6 * 3  # 3 folds: 6 pairs; OOD pool (2 sets) + 1 ID set
    assert len(res["claims"]) == len(sf.CLAIMS)


def test_importing_the_package_loads_neither_torch_nor_the_experiment() -> None:
    import subprocess
    import sys

    code = ("import sys, companion.papers.suitability_filter as p; p.Params, p.CLAIMS; "
            "print('torch' in sys.modules, 'companion.papers.suitability_filter.experiment' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_naive_rule_is_the_mean_comparison_and_ranks_as_the_difference() -> None:
    mt = np.array([[0.80], [0.80], [0.80]])
    mu = np.array([[0.79, 0.80, 0.83]])
    p = sf.naive_pvalues(mt, mu, np.zeros((1, 1, 1)))[0]
    assert (p <= sf.ALPHA).tolist() == [[False, True, True]] * 3
    assert np.all(np.diff(p, axis=1) < 0)  # a larger user mean is more suitable
    # the margin moves the boundary: 0.79 >= 0.80 - 0.02
    assert sf.naive_pvalues(mt, mu, np.full((1, 1, 1), 0.02))[0][0, 0] <= sf.ALPHA


def test_every_finding_has_its_baseline_controls_measured_on_the_same_experiments(tiny_run: sf.Results) -> None:
    values, verdicts = sf.claim_values(tiny_run), sf.check(tiny_run)
    pooled = sf.Experiments.of(tiny_run.seeds)
    width = tiny_run.params.bin_width
    assert values["roc-auc@msp"] == sf.filter_values(pooled, width, "conf_max")["roc-auc"]
    assert values["fpr@naive"] == sf.filter_values(pooled, width, "naive")["fpr"]
    # the MSP filter is a different filter: its p-values are not the 12-signal filter's
    assert not np.allclose(pooled.pvals["conf_max"], pooled.pvals["all"])
    # the MSP control of "all beats the best single signal" compares conf_max with a set that holds it
    assert values["agg-vs-best@msp"] <= 1e-12
    acc = {k: sf.decision_metrics(v, pooled.diff >= 0, sf.ALPHA)["acc"] for k, v in pooled.pvals.items()}
    assert values["all-minus-msp"] == pytest.approx(acc["all"] - acc["conf_max"])
    assert values["all-minus-msp@median-single"] == pytest.approx(
        np.median([acc[k] for k in sf.SIGNALS]) - acc["conf_max"])
    by_id = {v.id: v for v in verdicts}
    assert by_id["welch-vs-scipy"].role == "check" and by_id["welch-vs-scipy"].verdict == "HOLDS"
    for c in sf.CLAIMS:
        if c.role == "finding":
            assert [k.name for k in by_id[c.id].controls] == list(c.controls) and c.controls
    per = sf.claim_spread(tiny_run)
    assert ("fpr", "naive") in per.index and ("all-minus-msp", "median-single") in per.index


def test_without_the_ablation_the_msp_baseline_is_still_fitted() -> None:
    res = sf.run(sf.Params.resolve("quick", **(TINY | {"single_signal_ablation": False})))
    assert list(res.seeds[0].pvals) == ["all", "conf_max", "naive"]
    values = sf.claim_values(res)
    assert np.isfinite(values["roc-auc@msp"]) and np.isnan(values["agg-vs-best"])


def test_metrics_report_the_worst_seed_of_the_every_row(tiny_run: sf.Results) -> None:
    m = sf.metrics(tiny_run)
    per_seed = m["per-seed/roc-auc-every-seed"]
    assert m["claim/roc-auc-every-seed"] == pytest.approx(min(per_seed))
    assert m["claim/roc-auc"] == pytest.approx(sf.claim_values(tiny_run)["roc-auc"])
