"""Unit checks of improvement-feedback: samplers, exact operators, learnability, LP, estimators, simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from companion.papers.improvement_feedback import rankings as rk
from companion.papers import improvement_feedback as f
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
    A = f.feedback_operator(perms, t, kind)
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
        w = f.window_probs(4, kind)
        assert np.all(np.diff(w) > 0) and math.isclose(w.sum(), 1.0)
    np.testing.assert_allclose(f.window_probs(3, "unif"), 1 / 3)


@pytest.mark.parametrize("m", [4, 5, 6])
def test_s_star_properties(m):
    for kind in f.KINDS:
        for t in range(1, m):
            s = f.s_star(m, t, kind)
            assert s[-1] == 0 and math.isclose(s.sum(), m - 1)
    np.testing.assert_allclose(f.s_star(m, 1, "unif"), 1.0 - np.eye(m)[-1])
    harmonic = np.r_[0.0, np.cumsum(1.0 / np.arange(1, m))]
    np.testing.assert_allclose(f.s_star(m, m - 1, "unif"), harmonic[m - 1] - harmonic[:m])


# ------------------------------------------------------------------ learnability


@pytest.mark.parametrize("m", [4, 5])
def test_full_ranking_feedback_makes_every_rule_learnable(m):
    perms = rk.all_rankings(m)
    assert f.learnable_subspace(np.eye(len(perms)), perms, 1e-10).shape[1] == m


@pytest.mark.parametrize("m", [4, 5])
def test_pairwise_feedback_learns_only_borda(m):
    perms = rk.all_rankings(m)
    L = f.learnable_subspace(f.pairwise_operator(perms), perms, 1e-10)
    assert L.shape[1] == 2
    assert f.residual(np.arange(m, 0, -1.0), L) < 1e-8 and f.residual(np.ones(m), L) < 1e-8
    assert f.residual(np.eye(m)[0], L) > 0.5


def test_theory_row_finds_the_borda_coincidence_and_the_impossibility():
    assert f.theory_row(4, 2, "unif", 1e-10)["res borda"] < 1e-8
    row = f.theory_row(5, 2, "unif", 1e-10)
    assert row["dim L"] == 3 and row["predicted"] and row["res borda"] > 1e-3


# ------------------------------------------------------------------ LP pairs


def test_lp_pair_is_valid_and_separates_borda_winners():
    perms = rk.all_rankings(5)
    A = f.feedback_operator(perms, 2, "unif")
    pair = f.indistinguishable_pair(A, perms, "borda")
    for pi in (pair.pi, pair.pi2):
        assert pi.min() >= 0 and math.isclose(pi.sum(), 1.0)
    assert pair.eq_residual < 1e-9 and pair.delta > 0.05
    borda = f.score_matrix(np.arange(4, -1, -1.0), perms)
    assert np.argmax(borda @ pair.pi) == 0 and np.argmax(borda @ pair.pi2) == 1


@pytest.mark.parametrize("t", [1, 2, 3])
def test_lp_margin_is_zero_for_learnable_rules(t):
    perms = rk.all_rankings(4)
    A = f.feedback_operator(perms, t, "unif")
    for s in (np.eye(4)[0], f.s_star(4, t, "unif")):
        assert f.indistinguishable_pair(A, perms, s).delta < 1e-9
    assert f.indistinguishable_pair(f.pairwise_operator(perms), perms, "condorcet").delta < 1e-9


# ------------------------------------------------------------------ estimators and simulator


def test_borda_estimate_on_complete_data_and_true_scores():
    profiles = rk.impartial_culture((3, 40), 6, rng(5))
    truth = f.true_scores(profiles)
    np.testing.assert_allclose(truth["borda"].sum(axis=1), 40 * 6 * 5 / 2)
    pos = rk.positions(profiles)
    d = (pos[..., :, None] < pos[..., None, :]).sum(axis=1).astype(float)
    np.testing.assert_allclose(f.borda_estimate(d), truth["borda"] / 40)
    for rule in f.RULES:
        r = f.ratio(truth[rule], f.argmax_random(-truth[rule], rng(6)))
        assert np.all((r >= 0) & (r <= 1))


def test_estimators_are_equivariant_under_relabelling():
    d = rng(7).integers(0, 9, size=(1, 6, 6)).astype(float)
    perm = rng(8).permutation(6)
    dp = d[:, perm][:, :, perm]
    for est in (f.borda_estimate, f.copeland_estimate):
        np.testing.assert_allclose(est(dp), est(d)[:, perm])


def test_vectorised_simulator_matches_a_per_voter_loop():
    m, t, n, reps = 6, 2, 400, 60
    profiles = rk.mallows((reps, n), m, 0.6, rng(9))
    fast, _ = f.improvement_counts(*f.improvement_answers(profiles, t, "lin", rng(10)), m)
    slow_rng = rng(11)
    slow = np.zeros((reps, m, m))
    for r in range(reps):
        for ranking in profiles[r]:
            i = slow_rng.integers(m)
            if i == 0:
                slow[r, ranking[0]] += 1.0 - np.eye(m)[ranking[0]]
                continue
            k = min(i, t)
            j = i - k + slow_rng.choice(k, p=f.window_probs(k, "lin"))
            slow[r, ranking[j], ranking[i]] += 1
    se = np.sqrt(fast.var(axis=0, ddof=1) / reps + slow.var(axis=0, ddof=1) / reps) + 1e-9
    assert np.all(np.abs(fast.mean(axis=0) - slow.mean(axis=0)) < 4 * se + 1e-9)


def test_pairwise_answers_prefer_the_higher_position():
    profiles = rk.impartial_culture((5, 200), 7, rng(12))
    win, lose = f.pairwise_answers(profiles, rng(13))
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
    a = f.simulate("pl", 30, 3, p, np.random.default_rng([1, 2]))
    b = f.simulate("pl", 30, 3, p, np.random.default_rng([1, 2]))
    np.testing.assert_array_equal(a, b)
    assert np.isnan(a[0, 2]).all() and not np.isnan(a[1:]).any()


def test_claims_exact_rows_are_computed_once_and_statistical_rows_per_seed():
    p = f.Params.resolve("quick", seeds=2, m_theory=(4,), lp_m=4, n_pair_demo=200, reps_pair_demo=50, m_exp=6,
                         t_exp=2, n_list=(20, 200), reps_exp=50, t_sweep=(1, 3))
    res = f.run(p)
    assert res.sweep.shape[:3] == (1, len(p.distributions), 2)  # the t-sweep runs on sweep_seeds = 1 seed
    values = f.claim_values(res)
    verdicts = {v.id: v for v in f.check(res)}
    assert set(verdicts) == {c.id for c in f.CLAIMS} and "borda-success" not in verdicts
    for c in f.CLAIMS:
        v = verdicts[c.id]
        if c.kind == "exact":
            assert np.ndim(values[c.id]) == 0 and v.interval is None and v.per_seed == ()
        else:
            assert len(values[c.id]) == p.seeds and len(v.per_seed) == p.seeds
    assert verdicts["pairwise-control"].verdict == "HOLDS" and verdicts["plurality-equal"].verdict == "HOLDS"
    # at m = 4 the coincidence t = 2 makes Borda learnable: the min residual over t is 0 and the row fails
    assert verdicts["borda-residual"].verdict == "FAILS"
    assert set(f.metrics(res)) >= {"success-sum-max", "mallows-t1-n500-borda-improvement-minus-pairwise"}
