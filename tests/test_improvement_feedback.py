"""Unit checks of improvement-feedback: samplers, exact operators, learnability, LP, estimators, simulator."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from companion.papers import improvement_feedback as f
from companion.papers.improvement_feedback import experiment as ex
from companion.papers.improvement_feedback import rankings as rk
from companion.papers.improvement_feedback import theory as th
from companion.papers.improvement_feedback import voting_feedback as vf
from companion.params import ParamError


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ------------------------------------------------------------------ samplers


def test_mallows_matches_exact_distribution():
    m, phi, n = 4, 0.5, 200_000
    perms = rk.all_rankings(m)
    exact = phi ** rk.kendall_tau(perms).astype(float)
    exact /= exact.sum()
    draws = rk.mallows((n,), m, phi, rng(1))
    index = {tuple(p): i for i, p in enumerate(perms)}
    counts = np.bincount([index[tuple(r)] for r in draws], minlength=len(perms))
    assert stats.chisquare(counts, exact * n).pvalue > 1e-3


def test_mallows_phi_one_is_uniform_and_rows_are_permutations():
    draws = rk.mallows((50_000,), 4, 1.0, rng(2))
    assert (np.sort(draws, axis=1) == np.arange(4)).all()
    index = {tuple(p): i for i, p in enumerate(rk.all_rankings(4))}
    counts = np.bincount([index[tuple(r)] for r in draws], minlength=24)
    assert stats.chisquare(counts).pvalue > 1e-3


def test_plackett_luce_first_place_frequencies():
    w = np.array([0.1, 0.3, 0.6, 1.0])
    n = 40_000
    draws = rk.plackett_luce((n,), w, rng(3))
    assert (np.sort(draws, axis=1) == np.arange(4)).all()
    freq = np.bincount(draws[:, 0], minlength=4) / n
    p = w / w.sum()
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n))
    assert (np.sort(rk.impartial_culture((100, 7), 7, rng(4)), axis=-1) == np.arange(7)).all()


# ------------------------------------------------------------------ exact operators


@pytest.mark.parametrize("kind", f.KINDS)
@pytest.mark.parametrize("m,t", [(4, 1), (4, 3), (5, 2), (5, 4)])
def test_feedback_operator_properties(m, t, kind):
    perms = rk.all_rankings(m)
    A = th.feedback_operator(perms, t, kind)
    np.testing.assert_allclose(A.sum(axis=0), 1.0, atol=1e-12)
    blocks = A.reshape(m, m, -1)
    np.testing.assert_allclose(blocks.sum(axis=1), 1.0 / m, atol=1e-12)
    top = (perms[:, 0][None, :] == np.arange(m)[:, None]).astype(float)
    np.testing.assert_allclose(m * blocks[np.arange(m), np.arange(m)], top, atol=1e-12)
    pos = rk.positions(perms)
    for col in range(len(perms)):
        shown, answered = np.nonzero(blocks[:, :, col] > 0)
        gap = pos[col, shown] - pos[col, answered]
        assert np.all((gap >= 1) & (gap <= t) | (shown == answered))


def test_window_weights_increase_toward_the_shown_candidate():
    for kind in ("lin", "exp"):
        w = vf.window_probs(4, kind)
        assert np.all(np.diff(w) > 0) and math.isclose(w.sum(), 1.0)
    np.testing.assert_allclose(vf.window_probs(3, "unif"), 1 / 3)


@pytest.mark.parametrize("m", [4, 5, 6])
def test_s_star_properties(m):
    for kind in f.KINDS:
        for t in range(1, m):
            s = th.s_star(m, t, kind)
            assert s[-1] == 0 and math.isclose(s.sum(), m - 1)
    np.testing.assert_allclose(th.s_star(m, 1, "unif"), 1.0 - np.eye(m)[-1])
    harmonic = np.r_[0.0, np.cumsum(1.0 / np.arange(1, m))]
    np.testing.assert_allclose(th.s_star(m, m - 1, "unif"), harmonic[m - 1] - harmonic[:m])


# ------------------------------------------------------------------ learnability


@pytest.mark.parametrize("m", [4, 5])
def test_full_ranking_feedback_makes_every_rule_learnable(m):
    perms = rk.all_rankings(m)
    assert th.learnable_subspace(np.eye(len(perms)), perms, 1e-10).shape[1] == m


@pytest.mark.parametrize("m", [4, 5])
def test_pairwise_feedback_learns_only_borda(m):
    perms = rk.all_rankings(m)
    L = th.learnable_subspace(th.pairwise_operator(perms), perms, 1e-10)
    assert L.shape[1] == 2
    assert th.residual(np.arange(m, 0, -1.0), L) < 1e-8 and th.residual(np.ones(m), L) < 1e-8
    assert th.residual(np.eye(m)[0], L) > 0.5


def test_theory_row_finds_the_borda_coincidence_and_the_impossibility():
    assert th.theory_row(4, 2, "unif", 1e-10)["res borda"] < 1e-8
    row = th.theory_row(5, 2, "unif", 1e-10)
    assert row["dim L"] == 3 and row["predicted"] and row["res borda"] > 1e-3


# ------------------------------------------------------------------ LP pairs


def test_lp_pair_is_valid_and_separates_borda_winners():
    perms = rk.all_rankings(5)
    A = th.feedback_operator(perms, 2, "unif")
    pair = th.indistinguishable_pair(A, perms, "borda")
    for pi in (pair.pi, pair.pi2):
        assert pi.min() >= 0 and math.isclose(pi.sum(), 1.0)
    assert pair.eq_residual < 1e-9 and pair.delta > 0.05
    borda = th.score_matrix(np.arange(4, -1, -1.0), perms)
    assert np.argmax(borda @ pair.pi) == 0 and np.argmax(borda @ pair.pi2) == 1


@pytest.mark.parametrize("t", [1, 2, 3])
def test_lp_margin_is_zero_for_learnable_rules(t):
    perms = rk.all_rankings(4)
    A = th.feedback_operator(perms, t, "unif")
    for s in (np.eye(4)[0], th.s_star(4, t, "unif")):
        assert th.indistinguishable_pair(A, perms, s).delta < 1e-9
    assert th.indistinguishable_pair(th.pairwise_operator(perms), perms, "condorcet").delta < 1e-9


# ------------------------------------------------------------------ estimators and simulator


def test_borda_estimate_on_complete_data_and_true_scores():
    profiles = rk.impartial_culture((3, 40), 6, rng(5))
    truth = vf.true_scores(profiles)
    np.testing.assert_allclose(truth["borda"].sum(axis=1), 40 * 6 * 5 / 2)
    pos = rk.positions(profiles)
    d = (pos[..., :, None] < pos[..., None, :]).sum(axis=1).astype(float)
    np.testing.assert_allclose(vf.borda_estimate(d), truth["borda"] / 40)
    for rule in ex.RULES:
        r = vf.ratio(truth[rule], vf.argmax_random(-truth[rule], rng(6)))
        assert np.all((r >= 0) & (r <= 1))


def test_estimators_are_equivariant_under_relabelling():
    d = rng(7).integers(0, 9, size=(1, 6, 6)).astype(float)
    perm = rng(8).permutation(6)
    dp = d[:, perm][:, :, perm]
    for est in (vf.borda_estimate, vf.copeland_estimate):
        np.testing.assert_allclose(est(dp), est(d)[:, perm])


def test_vectorised_simulator_matches_a_per_voter_loop():
    m, t, n, reps = 6, 2, 400, 60
    profiles = rk.mallows((reps, n), m, 0.6, rng(9))
    fast, _ = vf.improvement_counts(*vf.improvement_answers(profiles, t, "lin", rng(10)), m)
    slow_rng = rng(11)
    slow = np.zeros((reps, m, m))
    for r in range(reps):
        for ranking in profiles[r]:
            i = slow_rng.integers(m)
            if i == 0:
                slow[r, ranking[0]] += 1.0 - np.eye(m)[ranking[0]]
                continue
            k = min(i, t)
            j = i - k + slow_rng.choice(k, p=vf.window_probs(k, "lin"))
            slow[r, ranking[j], ranking[i]] += 1
    se = np.sqrt(fast.var(axis=0, ddof=1) / reps + slow.var(axis=0, ddof=1) / reps) + 1e-9
    assert np.all(np.abs(fast.mean(axis=0) - slow.mean(axis=0)) < 4 * se + 1e-9)


def test_pairwise_answers_prefer_the_higher_position():
    profiles = rk.impartial_culture((5, 200), 7, rng(12))
    win, lose = vf.pairwise_answers(profiles, rng(13))
    pos = rk.positions(profiles)
    pw = np.take_along_axis(pos, win[..., None], -1)[..., 0]
    pl = np.take_along_axis(pos, lose[..., None], -1)[..., 0]
    assert np.all(pw < pl)


# ------------------------------------------------------------------ params and determinism


@pytest.mark.parametrize("bad", [{"bogus": 1}, {"m_exp": "20"}, {"m_exp": 40}, {"feedback_kinds": ("cubic",)},
                                 {"null_tol": 1e-3}, {"lp_t_borda": 5}, {"t_exp": 20},
                                 {"m_exp": 10}, {"sweep_seeds": 6}])
def test_params_reject_bad_values(bad):
    with pytest.raises(ParamError):
        f.Params.resolve("quick", **bad)


def test_simulation_is_deterministic_under_a_seed():
    p = f.Params.resolve("quick", reps_exp=50, m_exp=8, t_exp=3, t_sweep=(1, 3))
    a = ex.simulate("pl", 30, 3, p, np.random.default_rng([1, 2]))
    b = ex.simulate("pl", 30, 3, p, np.random.default_rng([1, 2]))
    np.testing.assert_array_equal(a, b)
    names = ex.methods(p)
    no_plurality = [names.index(m) for m in ("pairwise", *ex.ABLATIONS)]
    assert np.isnan(a[no_plurality, 2]).all() and not np.isnan(np.delete(a[:, 2], no_plurality, 0)).any()
    assert not np.isnan(a[:, :2]).any()


@pytest.fixture(scope="module")
def small_run():
    p = f.Params.resolve("quick", seeds=2, m_theory=(4,), lp_m=4, n_pair_demo=200, reps_pair_demo=50, m_exp=6,
                         t_exp=2, n_list=(20, 200), reps_exp=50, t_sweep=(1, 3))
    return f.run(p)


def test_claims_exact_rows_are_computed_once_and_statistical_rows_per_seed(small_run):
    res, p = small_run, small_run.params
    assert res.sweep.shape[:3] == (1, len(p.distributions), 2)  # the t-sweep runs on sweep_seeds = 1 seed
    values = f.claim_values(res)
    verdicts = {v.id: v for v in f.check(res)}
    assert set(verdicts) == {c.id for c in f.CLAIMS}
    for c in f.CLAIMS:
        v = verdicts[c.id]
        for key in (c.id, *map(c.control_key, c.controls)):
            if c.kind == "exact":
                assert np.ndim(values[key]) == 0 and v.interval is None and v.per_seed == ()
            else:
                assert len(values[key]) == p.seeds and len(v.per_seed) == p.seeds
        assert (c.role == "finding") == bool(c.controls)
    assert verdicts["plurality-equal"].verdict == "HOLDS" and verdicts["borda-coincidence"].verdict == "HOLDS"
    # at m = 4 the coincidences t = 2 (unif) and t = 3 (lin) make Borda learnable: the min over t is 0
    assert verdicts["borda-residual"].verdict == "FAILS"
    assert f.metrics(res)["borda-coincidences"] == "m=4, t=2, unif; m=4, t=3, lin"
    assert "mallows-t1-n500-borda-unif-minus-pairwise" in f.metrics(res)


def test_exact_controls_remove_the_effect(small_run):
    values = f.claim_values(small_run)
    assert values["characterization"] == 1.0
    assert values["characterization@pairwise"] == 0.0 and values["characterization@full-ranking"] == 0.0
    for key in ("borda-residual@pairwise", "borda-residual@plurality"):
        assert values[key] < 1e-8
    for key in ("borda-lp@pairwise", "borda-lp@plurality", "condorcet-lp@pairwise"):
        assert abs(values[key]) < 1e-9
    assert values["condorcet-lp"] > 0.1
    assert abs(values["borda-lp"]) < 1e-9  # m = 4, t = 2 is a coincidence: Borda learnable, no LP pair


def test_simulation_controls_share_the_sample_but_differ_from_the_method(small_run):
    res, p = small_run, small_run.params
    names = ex.methods(p)
    assert names[:2] == ("pairwise", "unif") and names[-1] == ex.CONSTANT
    r = res.ratios[..., ex.RULES.index("borda"), :]
    for control in ex.ABLATIONS:
        assert not np.array_equal(r[..., names.index("unif"), :], r[..., names.index(control), :])
    values = f.claim_values(res)
    assert values["mallows-over-plurality"] != values["mallows-over-plurality@random-answers"]
    # the constant guess is candidate 0's true plurality ratio, what Mallows around the identity favours
    plu = res.ratios[:, p.distributions.index("mallows"), -1, names.index(ex.CONSTANT), ex.RULES.index("plurality")]
    np.testing.assert_allclose(values["plurality-mallows@constant-0"], plu.mean(axis=1))


def test_random_answers_keep_plurality_and_lose_the_ranking():
    profiles = rk.impartial_culture((4, 3000), 6, rng(14))
    answered, shown = vf.improvement_answers(profiles, 2, "unif", rng(15))
    noisy = vf.random_answers(answered, shown, 6, rng(16))
    top = answered == shown
    np.testing.assert_array_equal(noisy[top], answered[top])
    assert np.all(noisy[~top] != shown[~top])
    pos = rk.positions(profiles)
    at = lambda c: np.take_along_axis(pos, c[..., None], -1)[..., 0]
    assert np.all(at(answered)[~top] < at(shown)[~top])
    above = (at(noisy) < at(shown))[~top].mean()
    assert abs(above - 0.6) < 0.02  # a random other candidate is above the shown one (uniform over positions 1..5) w.p. 3/5
    d_no, plu_no = vf.improvement_counts(answered, shown, 6, inject=False)
    d, plu = vf.improvement_counts(answered, shown, 6)
    np.testing.assert_array_equal(plu, plu_no)
    np.testing.assert_array_equal(d - d_no, plu[:, :, None] * (1 - np.eye(6)))


def test_vectorised_chi2_agrees_with_scipy_row_by_row():
    gen = rng(17)
    for k, lam, scale in ((25, 30, 1.1), (3, 30, 1.3), (120, 3, 1.0)):  # many cells; one dof (Yates); sparse
        a, b = gen.poisson(lam, (300, k)), gen.poisson(lam * scale, (300, k))
        a[:, 0] = b[:, 0] = 0  # an empty cell, dropped
        ref = [stats.chi2_contingency(np.stack([x[x + y > 0], y[x + y > 0]]))[1] < 0.05 for x, y in zip(a, b)]
        np.testing.assert_array_equal(vf.two_sample_reject(a, b), ref)


def test_positions_and_majority_counts_against_a_voter_loop():
    profiles = rk.mallows((3, 50), 7, 0.7, rng(18))
    pos = rk.positions(profiles)
    np.testing.assert_array_equal(np.take_along_axis(profiles, pos, -1), np.broadcast_to(np.arange(7), pos.shape))
    loop = np.zeros((3, 7, 7), dtype=int)
    for r in range(3):
        for ranking in profiles[r]:
            for i, a in enumerate(ranking):
                loop[r, a, ranking[i + 1:]] += 1
    np.testing.assert_array_equal(vf.majority_counts(pos), loop)


def test_reading_the_declarations_imports_neither_the_experiment_nor_matplotlib():
    code = ("import sys, companion.papers.improvement_feedback as f; f.Params.resolve('full'); f.CLAIMS; "
            "print(sorted(m for m in sys.modules if m.startswith(('matplotlib', 'torch', "
            "'companion.papers.improvement_feedback.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
