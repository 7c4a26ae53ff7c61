"""FairICP: the ICP sampler, KPC and its test, the analytic anchor, the adversarial steps, loaders."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from companion.params import ParamError
from companion.papers import fairicp as paper
from companion.papers.fairicp import adversarial as adv
from companion.papers.fairicp import densities, fairness, kpc, paper_preset, sampler
from companion.papers.fairicp import simulation as sim
from hf_tiny import run_paper_smoke


def chain_states(L: np.ndarray, burn: int, keep: int, rng: np.random.Generator,
                 thin: int = 1) -> list[tuple[int, ...]]:
    """States of the vectorised chain after ``burn`` sweeps, one every ``thin`` sweeps."""
    pi = np.arange(L.shape[0])
    out = []
    for s in range(burn + keep * thin):
        pi = sampler.sweep(L, pi, *sampler.sweep_randoms(len(pi), rng))
        if s >= burn and (s - burn) % thin == 0:
            out.append(tuple(pi))
    return out


def test_chain_targets_the_permutation_law_n4():
    rng = np.random.default_rng(1)
    L = rng.normal(0, 1, (4, 4))
    perms = list(itertools.permutations(range(4)))
    w = np.array([np.exp(sampler.log_perm_weight(L, np.array(p))) for p in perms])
    exact = w / w.sum()
    states = chain_states(L, 500, 20000, rng)
    counts = np.array([states.count(p) for p in perms], dtype=float)
    tv = 0.5 * np.abs(counts / counts.sum() - exact).sum()
    assert tv < 0.03


def test_chain_is_uniform_for_constant_L():
    rng = np.random.default_rng(2)
    states = chain_states(np.zeros((4, 4)), 100, 3000, rng, thin=10)
    counts = [states.count(p) for p in itertools.permutations(range(4))]
    assert stats.chisquare(counts).pvalue > 0.01


@pytest.mark.parametrize("n, scale, transposed", [(2, 3, False), (7, 3, False), (101, 3, False),
                                                 (101, 400, False), (64, 3, True)])
def test_vectorised_sweep_equals_per_pair_loop(n, scale, transposed):
    # scale 400 puts most log-odds beyond the clip at -500 and exp(-ell) at 0 / overflow range;
    # a transposed (non-contiguous) L must give the same chain as well
    rng = np.random.default_rng(n)
    L = rng.normal(0, scale, (n, n))
    L = L.T if transposed else L
    pi_vec = pi_loop = np.arange(n)
    for _ in range(30):
        order, u = sampler.sweep_randoms(n, rng)
        pi_vec, pi_loop = sampler.sweep(L, pi_vec, order, u), sampler.sweep_loop(L, pi_loop, order, u)
        assert np.array_equal(pi_vec, pi_loop)
    assert not np.array_equal(pi_vec, np.arange(n)) or n == 2


def test_run_chain_gives_the_per_pair_loop_chain():
    n, sweeps = 50, 4
    L = np.random.default_rng(5).normal(0, 2, (n, n))
    states = sampler.run_chain(L, 3, sweeps, np.random.default_rng(9))
    rng, pi, ref = np.random.default_rng(9), np.arange(n), []
    for k in range(4 * sweeps):  # burn-in, then one state every `sweeps` sweeps
        pi = sampler.sweep_loop(L, pi, *sampler.sweep_randoms(n, rng))
        if k >= sweeps and (k + 1) % sweeps == 0:
            ref.append(pi)
    assert np.array_equal(states, np.stack(ref))


def test_inverse_step_pairs_and_multiset():
    rng = np.random.default_rng(3)
    n, K = 30, 3
    a, y = rng.normal(size=(n, K)), rng.normal(size=n)
    L = densities.GaussLinearYgivenA.fit(y, a).loglik_matrix(y, a)
    states = sampler.run_chain(L, 4, 10, rng)
    dummies = sampler.inverse_dummies(a, states)
    for pi, at in zip(states, dummies):
        got = sorted(map(tuple, np.column_stack([y, at]).round(12)))
        want = sorted(map(tuple, np.column_stack([y[pi], a]).round(12)))
        assert got == want
        assert sorted(map(tuple, at)) == sorted(map(tuple, a))
        assert np.array_equal(at[pi], a)


def test_swap_odds_from_y_given_a_equal_those_from_a_given_y():
    rng = np.random.default_rng(4)
    K = 3
    M = rng.normal(size=(K + 1, K + 1))
    cov = M @ M.T + np.eye(K + 1)
    data = rng.multivariate_normal(np.zeros(K + 1), cov, 40)
    y, a = data[:, 0], data[:, 1:]
    s_aa, s_ay, s_yy = cov[1:, 1:], cov[1:, 0], cov[0, 0]
    beta = np.linalg.solve(s_aa, s_ay)
    q = densities.GaussLinearYgivenA(np.r_[0.0, beta], float(s_yy - s_ay @ beta))
    p_ay = densities.GaussLinearAgivenY(np.vstack([np.zeros(K), s_ay / s_yy]), s_aa - np.outer(s_ay, s_ay) / s_yy)
    L_icp, L_cp = q.loglik_matrix(y, a), p_ay.loglik_matrix(a, y).T
    pi, i, j = np.arange(40), np.arange(20), np.arange(20, 40)
    np.testing.assert_allclose(sampler.swap_log_odds(L_icp, pi, i, j), sampler.swap_log_odds(L_cp, pi, i, j),
                               atol=1e-9)
    shifted = L_icp + rng.normal(size=(40, 1)) + rng.normal(size=(1, 40))
    np.testing.assert_allclose(sampler.swap_log_odds(shifted, pi, i, j), sampler.swap_log_odds(L_icp, pi, i, j),
                               atol=1e-9)


def test_density_matrices_match_scipy():
    rng = np.random.default_rng(5)
    y, a = rng.normal(size=25), rng.normal(size=(25, 2))
    q = densities.GaussLinearYgivenA.fit(y, a)
    diff = q.loglik_matrix(y, a) - stats.norm.logpdf(y[:, None], q.mean(a)[None, :], np.sqrt(q.var))
    np.testing.assert_allclose(diff, diff[0, 0], atol=1e-9)
    p = densities.GaussLinearAgivenY.fit(y, a)
    ref2 = np.array([[stats.multivariate_normal.logpdf(a[i], p.mean(y)[j], p.cov) for j in range(25)]
                     for i in range(25)])
    diff = p.loglik_matrix(a, y) - ref2
    np.testing.assert_allclose(diff, diff[0, 0], atol=1e-9)


def test_true_loglik_gives_the_design_swap_odds():
    rng = np.random.default_rng(6)
    d = sim.simulate(50, 2, 0.6, rng)
    var = 2 + 2 * 0.4 + d.eps2
    ref = stats.norm.logpdf(d.y[:, None], np.sqrt(0.6) * d.a.sum(1)[None, :], np.sqrt(var))
    pi, i, j = np.arange(50), np.arange(25), np.arange(25, 50)
    np.testing.assert_allclose(sampler.swap_log_odds(sim.true_loglik(d.y, d.a, 2, 0.6, d.eps2), pi, i, j),
                               sampler.swap_log_odds(ref, pi, i, j), atol=1e-9)


def kpc_loop(yhat: np.ndarray, y: np.ndarray, a: np.ndarray) -> float:
    """Slow reference: explicit loops for the 1-NN graphs and the kernel sums."""
    n = len(y)
    w = np.column_stack([y, a])
    d = [abs(yhat[i] - yhat[j]) for i in range(n) for j in range(i + 1, n)]
    s = 1.0 / (2 * np.median(d) ** 2)

    def t(points):
        total = 0.0
        for i in range(n):
            best, arg = np.inf, -1
            for j in range(n):
                dist = np.sum((points[i] - points[j]) ** 2)
                if j != i and dist < best:
                    best, arg = dist, j
            total += np.exp(-s * (yhat[i] - yhat[arg]) ** 2)
        return total / n

    ty = t(y[:, None])
    return (t(w) - ty) / (1 - ty)


def test_kpc_matches_loop_reference_and_is_order_invariant():
    rng = np.random.default_rng(7)
    y, a = rng.normal(size=50), rng.normal(size=(50, 2))
    yhat = y + a[:, 0] + 0.5 * rng.normal(size=50)
    ours = kpc.kpc(yhat, y, a, rng)
    assert ours == pytest.approx(kpc_loop(yhat, y, a), abs=1e-12)
    perm = rng.permutation(50)
    assert kpc.kpc(yhat[perm], y[perm], a[perm], rng) == pytest.approx(ours, abs=1e-12)


R_REFERENCE = Path(__file__).parent / "data" / "kpc_R_reference.json"


@pytest.mark.parametrize("case", range(4))
def test_kpc_agrees_with_the_R_package(case):
    """KPCgraph(Y = yhat, X = y, Z = a, Knn) of the R package KPC 0.1.2, the estimator the paper calls, on
    fixed inputs: written by tests/data/make_kpc_reference.R, inputs stored beside the values (no ties, so no
    random tie-breaking on either side); dependent and conditionally independent cases, 1-NN and K-NN
    graphs, a 1-D and a 2-D prediction."""
    ref = json.loads(R_REFERENCE.read_text())
    c = ref["cases"][case]
    yhat, a = np.array(c["yhat"]), np.array(c["a"])
    ours = kpc.kpc(yhat[:, 0] if yhat.shape[1] == 1 else yhat, np.array(ref["y"]), a,
                   np.random.default_rng(0), knn=c["knn"])
    assert ours == pytest.approx(c["kpc"], rel=1e-10, abs=1e-12), c["name"]


def test_kpc_near_zero_under_conditional_independence_and_large_under_dependence():
    rng = np.random.default_rng(8)
    n = 2000
    y, a = rng.normal(size=n), rng.normal(size=(n, 2))
    assert abs(kpc.kpc(y + rng.normal(size=n), y, a, rng)) < 0.05
    assert kpc.kpc(a[:, 0] + 0.1 * rng.normal(size=n), y, a, rng) > 0.5


def test_kpc_is_nan_when_ill_conditioned():
    y = np.linspace(0, 1, 200)
    with pytest.warns(UserWarning, match="1 - T"):
        assert np.isnan(kpc.kpc(np.sin(y), y, np.random.default_rng(0).normal(size=(200, 1)),
                                np.random.default_rng(0)))


def test_neighbour_ties_are_broken_at_random():
    w = np.array([[0.0], [1.0], [-1.0]])
    picks = {int(kpc.neighbours(w, np.random.default_rng(s))[0, 0]) for s in range(20)}
    assert picks == {1, 2}


@pytest.mark.slow
def test_icp_test_is_valid_for_the_fair_oracle_and_powerful_against_ols():
    rng = np.random.default_rng(9)
    a_star, c_star, _ = sim.fair_linear_oracle(5, 10.0)
    rejected = {"fair": 0, "ols": 0}
    reps = 40
    for _ in range(reps):
        te = sim.simulate(400, 5, 0.9, rng)
        copies = sampler.icp_dummies(sim.true_loglik(te.y, te.a, 5, 0.9, te.eps2), te.a, 100, 50, rng)
        test = kpc.ICPTest.build(te.y, te.a, copies, rng)
        rejected["fair"] += test.run(sim.linear_predictions(te.x, 5, a_star, c_star))[1] <= 0.05
        rejected["ols"] += test.run(sim.linear_predictions(te.x, 5, 1.0, 1.0))[1] <= 0.05
    assert rejected["fair"] / reps <= 0.12
    assert rejected["ols"] / reps >= 0.8


def test_fair_linear_oracle_and_zero_partial_covariance():
    assert sim.fair_linear_oracle(5, 10.0) == pytest.approx((1.2, 0.4, 12.0))
    a_star, c_star, _ = sim.fair_linear_oracle(3, 1.5)
    r = 3 / 4.5
    assert (a_star, c_star) == pytest.approx(((1 + r) / (1 + r * r), r * (1 + r) / (1 + r * r)))
    K = 3
    d = sim.simulate(200_000, K, 0.9, np.random.default_rng(10))
    fair = sim.linear_predictions(d.x, K, *sim.fair_linear_oracle(K, d.eps2)[:2])
    assert np.abs(sim.partial_cov(fair, d.a, d.y)).max() < 0.01
    assert np.abs(sim.partial_cov(sim.linear_predictions(d.x, K, 1, 1), d.a, d.y)).max() > 0.05


def test_generator_moments():
    rng = np.random.default_rng(11)
    g = sim.mixture_gamma(100_000, 1, rng)
    assert abs(g.mean()) < 0.02 and abs(g.std() - 1) < 0.02
    d = sim.simulate(100_000, 5, 0.9, rng)
    assert d.y.var() == pytest.approx(20.0, rel=0.03)
    assert sim.simulate(10, 1, 0.9, rng, n_noisy=3).a.shape == (10, 4)


def test_deo_on_a_hand_built_table():
    y = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    g = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    yhat = np.array([1, 0, 0, 0, 1, 1, 1, 0])
    # y=0: P(1)=1/4, groups 1/2 and 0 -> 1/4 + 1/4; y=1: P(1)=3/4, groups 1 and 1/2 -> 1/4 + 1/4
    assert fairness.deo(yhat, y, g) == pytest.approx(1.0)
    assert fairness.deo(y, y, g) == 0.0


def test_ks_is_zero_for_permutations_and_positive_for_gaussian_draws():
    rng = np.random.default_rng(12)
    a = sim.mixture_gamma(500, 2, rng)
    perms = np.stack([a[rng.permutation(500)] for _ in range(5)])
    assert fairness.ks_columns(a, perms).max() == 0.0
    assert fairness.ks_columns(a, rng.normal(size=(5, 500, 2))).min() > 0.1


def plumbing(lam: float):
    """A linear predictor, a small discriminator and one fixed batch (x, y, a, shifted dummies)."""
    gen = torch.Generator().manual_seed(0)
    pred = adv.make_predictor(4, 1, "linear", gen)
    dis = adv.make_discriminator(1 + 2 + 1, 16, gen)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)
    a = torch.randn(32, 2, generator=g)
    at = a[torch.randperm(32, generator=g)] + 1.0
    return pred, dis, x, y, a, at


def test_discriminator_step_lowers_bce_and_predictor_step_raises_it():
    pred, dis, x, y, a, at = plumbing(0.9)

    def bce() -> float:
        with torch.no_grad():
            return float(adv.dis_bce(dis, pred(x), y, a, at))

    before = bce()
    adv.d_step(pred, dis, torch.optim.Adam(dis.parameters(), lr=1e-2), x, y, a, at, 0.9)
    after = bce()
    assert after < before
    adv.f_step(pred, dis, torch.optim.Adam(pred.parameters(), lr=1e-2), x, y, a, at, 1.0, "regression")
    assert bce() > after


def test_lambda_zero_predictor_step_is_a_plain_mse_step():
    pred, dis, x, y, a, at = plumbing(0.0)
    twin = adv.make_predictor(4, 1, "linear", torch.Generator().manual_seed(0))
    opt, opt_twin = torch.optim.Adam(pred.parameters(), lr=1e-2), torch.optim.Adam(twin.parameters(), lr=1e-2)
    adv.f_step(pred, dis, opt, x, y, a, at, 0.0, "regression")
    loss = torch.nn.functional.mse_loss(twin(x), y)
    opt_twin.zero_grad()
    loss.backward()
    opt_twin.step()
    for p, q in zip(pred.parameters(), twin.parameters()):
        assert torch.equal(p, q)


def test_lambda_zero_skips_the_discriminator_and_the_dummies():
    rng = np.random.default_rng(13)
    d = sim.simulate(64, 2, 0.9, rng)
    calls = []
    fitted = adv.fit(d.x, d.y, d.a, lambda e: calls.append(e) or d.a, adv.TrainConfig(lam=0.0, epochs=3),
                     torch.Generator().manual_seed(0))
    assert calls == [] and fitted.dis_acc == []
    fitted = adv.fit(d.x, d.y, d.a, lambda e: calls.append(e) or d.a, adv.TrainConfig(lam=0.5, epochs=3),
                     torch.Generator().manual_seed(0))
    assert calls == [0, 1, 2] and len(fitted.dis_acc) == 3


def test_hgr_penalty_sees_dependence():
    g = torch.Generator().manual_seed(0)
    y, a = torch.randn(256, 1, generator=g), torch.randn(256, 1, generator=g)
    indep = fairness.hgr_penalty(y + torch.randn(256, 1, generator=g), a, y)
    dep = fairness.hgr_penalty(y + a, a, y)
    assert float(dep) > 2 * float(indep)


def tiny_params(**kw):
    base = dict(seeds=1, n_train=120, n_test=100, epochs=5, batch_size=32, mcmc_sweeps=5, n_test_perms=19)
    return paper.Params.resolve("quick", **{**base, **kw})


def test_a_seed_is_deterministic():
    from companion.papers.fairicp.experiment import run_seed

    p = tiny_params().to_dict()
    one, two = run_seed(p, 3), run_seed(p, 3)
    assert [r["mse"] for r in one["rows"]] == [r["mse"] for r in two["rows"]]
    assert [r["kpc"] for r in one["rows"]] == [r["kpc"] for r in two["rows"]]


def test_mdn_loglik_matrix_matches_paired_density_and_learns_a_bimodal_conditional():
    rng, gen = np.random.default_rng(21), torch.Generator().manual_seed(21)
    n = 600
    y = rng.standard_normal(n)
    # a bimodal attribute whose modes shift with y: a single Gaussian cannot fit it, a mixture can
    a = np.where(rng.random(n) < 0.5, -2.0, 2.0) + 0.5 * y + 0.3 * rng.standard_normal(n)
    mdn = densities.MDN(a, y, gen, components=3, steps=400)
    L = mdn.loglik_matrix(a, y)
    assert L.shape == (n, n)
    diag = np.diag(L)
    paired = mdn._logpdf(torch.as_tensor(((a - mdn.t_mu) / mdn.t_sd)[:, None], dtype=torch.float32),
                         mdn._cond(y)).detach().double().numpy() + 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(diag, paired, atol=1e-4)
    draws = mdn.sample(y, rng)
    assert draws.shape == (n, 1)
    # the draws keep the two modes (the Gaussian A | Y of FDL-Gauss puts its mass between them)
    assert stats.ks_2samp(a, draws[:, 0]).statistic < 0.1
    gauss = densities.GaussLinearAgivenY.fit(y, a[:, None]).sample(y, rng)
    assert stats.ks_2samp(a, gauss[:, 0]).statistic > 0.15


def test_icp_dummies_under_a_misspecified_density_keep_the_marginal_and_pairs():
    rng = np.random.default_rng(22)
    tr = sim.simulate(200, 3, 0.9, rng)
    # a badly wrong q(Y | A): slope of the wrong sign and a tiny variance
    wrong = densities.GaussLinearYgivenA(np.array([0.0, -2.0, -2.0, -2.0]), 0.5)
    L = wrong.loglik_matrix(tr.y, tr.a)
    states = sampler.run_chain(L, 5, 10, rng)
    dummies = sampler.inverse_dummies(tr.a, states)
    for pi, d in zip(states, dummies):
        np.testing.assert_array_equal(np.sort(d, 0), np.sort(tr.a, 0))
        np.testing.assert_array_equal(d[pi], tr.a)
    assert fairness.ks_columns(tr.a, dummies).max() == 0
    # the wrong density does change which permutations are likely: its swap odds differ from the truth's
    true_L = sim.true_loglik(tr.y, tr.a, 3, 0.9, tr.eps2)
    i, j = np.arange(0, 100), np.arange(100, 200)
    ident = np.arange(200)
    assert not np.allclose(sampler.swap_log_odds(L, ident, i, j), sampler.swap_log_odds(true_L, ident, i, j))


def test_claim_values_cover_every_claim_and_control():
    from companion.papers.fairicp import experiment

    p = tiny_params(K=(2, 1), sampler_dims=(0, 5), sampler_reps=2)  # one seed runs inline (no worker processes)
    res = experiment.run(p)
    values = experiment.claim_values(res)
    for c in paper.CLAIMS:
        assert c.id in values
        for ctrl in c.controls:
            assert c.control_key(ctrl) in values
    assert np.isnan(values["icp-vs-fdl-kpc-k10"]).all()  # K = 10 was not run: NaN, not an invented value
    assert values["icp-keeps-marginal"] == 0.0
    assert len(values["sampler-icp-closer"]) == 2 and np.isfinite(values["sampler-icp-closer@K0_1"]).all()
    verdicts = {v.id: v for v in paper.check(res)}
    assert set(verdicts) == {c.id for c in paper.CLAIMS}
    assert verdicts["icp-vs-fdl-kpc-k10"].verdict == "INCONCLUSIVE"
    m = experiment.metrics(res)
    assert "K1-a0.9.fdl_mdn@0.9.kpc" in m and "K2-a0.9.fairicp_oracle@0.9.kpc" in m
    table = experiment.gap_table(res)
    assert list(table.index) == [1, 2]
    kpc_of = lambda m: experiment.per_seed(res, m, 0.9, "kpc", "K2-a0.9")  # noqa: E731
    assert np.isclose(table.loc[2, "KPC gap (ICP - FDL)"], (kpc_of("fairicp_mdn") - kpc_of("fdl_mdn")).mean(), atol=1e-4)
    assert set(experiment.glue_values(res)) >= {"g_fairicp_mdn_kpc", "g_fdl_mdn_ks", "g_fresh_ks"}
    # the trend rows pair the seeds: (gap at the largest K) - (gap at K = 1), for FDL-MDN and the oracle FDL
    for suffix, fdl in (("", "fdl_mdn"), ("@fdl_oracle", "fdl_oracle")):
        gap = {K: experiment.per_seed(res, "fairicp_mdn", 0.9, "kpc", f"K{K}-a0.9")
               - experiment.per_seed(res, fdl, 0.9, "kpc", f"K{K}-a0.9") for K in (1, 2)}
        np.testing.assert_allclose(values["icp-gain-grows-kpc" + suffix], gap[2] - gap[1])
    assert np.isclose(table.loc[2, "KPC gap (ICP - FDL-oracle)"], (kpc_of("fairicp_mdn") - kpc_of("fdl_oracle")).mean(),
                      atol=1e-4)
    # K = 2 is not a K of the per-K rows: the matched rows are NaN, one per seed (K = 5 and 10 were not run)
    for K in experiment.SWEEP_KS:
        for key in (f"icp-vs-fdl-mse-matched-k{K}", f"icp-vs-fdl-mse-matched-k{K}@fdl_oracle"):
            assert len(values[key]) == 1 and np.isnan(values[key]).all()


def test_full_preset_runs_the_curve_methods_over_the_grid_at_k5_and_k10_only():
    from companion.papers.fairicp import experiment

    p = paper.Params.resolve("full")
    jobs = {s.K: experiment.jobs_for(s, main, p) for s, main in experiment.settings_of(p)}
    for K in (5, 10):
        for m in experiment.CURVE_METHODS:
            assert [lam for mm, lam in jobs[K] if mm == m] == [0.5, 0.9]
        assert ("unconstrained", 0.0) in jobs[K]  # the shared start of every curve
    assert [lam for m, lam in jobs[1] if m == "fairicp_mdn"] == [0.9]
    q = paper.Params.resolve("quick")  # quick fits nothing more: its matched K = 5 curves are segments
    assert [lam for m, lam in experiment.jobs_for(*experiment.settings_of(q)[0], q) if m == "fairicp_mdn"] == [0.9]


def test_oracle_a_given_y_keeps_the_joint_law_with_y_and_ignores_setting_2_columns():
    """Resampled prior draws given y: each column's marginal and its correlation with y are those of A, the
    regression of sum A on y is the data's, and setting 2's extra columns come out independent of y."""
    rng = np.random.default_rng(5)
    K, alpha = 3, 0.9
    d = sim.simulate(6000, K, alpha, rng, n_noisy=2)
    tilde = sim.a_given_y_sampler(d.y, d.a.shape[1], K, alpha, d.eps2, rng)(rng)
    assert tilde.shape == d.a.shape
    for k in range(K):
        assert stats.ks_2samp(tilde[:, k], d.a[:, k]).statistic < 0.05
        assert abs(np.corrcoef(tilde[:, k], d.y)[0, 1] - np.corrcoef(d.a[:, k], d.y)[0, 1]) < 0.04
    for k in range(K, d.a.shape[1]):
        assert abs(np.corrcoef(tilde[:, k], d.y)[0, 1]) < 0.04
    slope_data = np.polyfit(d.y, d.a_true.sum(1), 1)[0]
    slope_tilde = np.polyfit(d.y, tilde[:, :K].sum(1), 1)[0]
    assert slope_tilde == pytest.approx(slope_data, rel=0.1) and slope_data > 0.1


@pytest.mark.parametrize("y0", [-3.0, 0.0, 4.0])
def test_oracle_a_given_y_matches_the_posterior_mean_by_quadrature(y0):
    """K = 1: the mean of the oracle's draws at a fixed y equals E[A | Y = y0] integrated against the
    mixture-gamma prior (scipy's gamma density) and the design's Gaussian q(y | a)."""
    alpha, eps2 = 0.9, 2.0
    g = np.linspace(1e-6, 60, 200001)
    prior = 0.5 * stats.gamma.pdf(g, sim.GAMMA_SHAPES[0]) + 0.5 * stats.gamma.pdf(g, sim.GAMMA_SHAPES[1])
    a = (g - sim.MIX_MEAN) / sim.MIX_SD
    like = np.exp(-((y0 - np.sqrt(alpha) * a) ** 2) / (2 * (1 + (1 - alpha) + eps2)))
    exact = integrate.trapezoid(a * prior * like, g) / integrate.trapezoid(prior * like, g)
    rng = np.random.default_rng(11)
    draws = sim.a_given_y_sampler(np.full(5000, y0), 1, 1, alpha, eps2, rng, pool=10000)(rng)
    assert draws.mean() == pytest.approx(exact, abs=0.06)  # about 3 standard errors of pool and draws


def test_params_are_validated_before_compute(tmp_path):
    with pytest.raises(ParamError, match="'methods'"):
        paper.Params.resolve("quick", methods=("unconstrained", "fairicp_est"))
    with pytest.raises(ParamError, match="'lambdas'"):
        paper.Params.resolve("quick", lambdas=(0.5, 0.9))
    with pytest.raises(ParamError, match="'sweep_methods'.*fdl_oracle"):
        paper.Params.resolve("quick", sweep_methods=("fairicp_mdn", "fdl_mdn"))
    with pytest.raises(ParamError, match="'data_path'"):
        paper.Params.resolve("paper", data_path=str(tmp_path / "missing"))
    assert paper.Params.resolve("paper", data_path=str(tmp_path)).seeds == 10


def write_tiny_datasets(root: Path, rng: np.random.Generator, n: int = 160) -> None:
    """Files with the four datasets' schemas (random values), as paper_preset's loaders read them."""
    cols = ["state", "county", "community", "communityname", "fold", "population", "racepctblack",
            "racePctWhite", "racePctAsian", "racePctHisp", "medIncome", "ViolentCrimesPerPop"]
    (root / "communities.names").write_text("\n".join(f"@attribute {c} numeric" for c in cols))
    crimes = rng.uniform(0, 1, (n, len(cols))).round(2).astype(object)
    crimes[:, 3] = "town"
    crimes[::7, 5] = "?"
    (root / "communities.data").write_text("\n".join(",".join(map(str, r)) for r in crimes))
    import pandas as pd

    pd.DataFrame({"two_year_recid": rng.integers(0, 2, n), "race": rng.integers(0, 2, n),
                  "sex": rng.integers(0, 2, n), "age": rng.integers(18, 70, n),
                  "priors_count": rng.normal(size=n), "c_charge_degree": rng.integers(0, 2, n)}).to_csv(root / "compas.csv")
    rows = []
    for i in range(n):
        rows.append(", ".join([str(rng.integers(17, 90)), str(rng.choice(["Private", "State-gov", "?"])),
                               str(rng.integers(10**4, 10**6)), "Bachelors", "13", "Never-married",
                               str(rng.choice(["Sales", "Tech-support"])), "Husband",
                               str(rng.choice(["White", "Black"])), str(rng.choice(["Male", "Female"])),
                               "0", "0", "40", "United-States", str(rng.choice(["<=50K", ">50K"]))]))
    (root / "adult.data").write_text("\n".join(rows[: n // 2]))
    (root / "adult.test").write_text("|1x3 Cross validator\n" + "\n".join(r + "." for r in rows[n // 2:]))
    feats = pd.DataFrame({"AGEP": rng.integers(18, 90, n), "COW": rng.integers(1, 9, n), "SCHL": rng.integers(1, 25, n),
                          "MAR": rng.integers(1, 6, n), "OCCP": rng.integers(10, 9000, n), "POBP": rng.integers(1, 500, n),
                          "RELP": rng.integers(0, 18, n), "WKHP": rng.integers(1, 99, n), "SEX": rng.integers(1, 3, n),
                          "RAC1P": rng.integers(1, 10, n)})
    feats.to_csv(root / "ca_features.csv")
    pd.DataFrame({"PINCP": rng.integers(0, 2, n).astype(bool)}).to_csv(root / "ca_labels.csv")


def test_real_loaders_read_the_four_schemas(tmp_path):
    write_tiny_datasets(tmp_path, np.random.default_rng(14))
    shapes = {name: paper_preset.load(name, tmp_path) for name in paper_preset.LOADERS}
    assert shapes["crimes"].a.shape == (160, 3) and shapes["crimes"].task == "regression"
    assert np.isfinite(shapes["crimes"].x).all() and shapes["crimes"].x.shape[1] == 3
    assert shapes["compas"].a.shape == (160, 2) and set(shapes["compas"].y) <= {0, 1}
    adult = shapes["adult"]
    assert adult.a.shape[1] == 2 and len(adult.y) < 160 and set(np.unique(adult.a)) <= {0.0, 1.0}
    assert shapes["acs_income"].a.shape == (160, 3) and shapes["acs_income"].x.shape[1] == 7


@pytest.mark.slow
def test_paper_preset_smoke_runs_from_the_cli(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_tiny_datasets(data, np.random.default_rng(15))
    record = run_paper_smoke("fairicp", tmp_path / "run", data_path=data)
    assert record["status"] == "ok"
    assert {r["dataset"] for r in record["metrics"]["real"]} == set(paper_preset.LOADERS)


def test_rows_at_bar_names_intervals_that_contain_the_threshold():
    from companion.claims import Claim, evaluate_all
    from companion.papers.fairicp.experiment import rows_at_bar

    rows = [Claim("far", "s", "p", 0.0, "<=", controls=("c",)), Claim("near", "s", "p", 1.0, ">=", role="check"),
            Claim("exact", "s", "p", 0.5, ">=", kind="exact", role="check")]
    verdicts = evaluate_all(rows, {"far": [-1.0, -1.1, -0.9], "far@c": [0.1, -0.2, 0.05],
                                   "near": [0.9, 1.2, 1.0], "exact": 0.5})
    assert rows_at_bar(verdicts) == "far@c, near"
    assert rows_at_bar(verdicts[2:]) == "none"


def test_mse_at_kpc_interpolates_a_hand_made_curve_and_never_extrapolates():
    from companion.papers.fairicp.experiment import mse_at_kpc

    kpc, mse = [0.3, 0.1, 0.05], [10.0, 12.0, 15.0]
    assert mse_at_kpc(kpc, mse, 0.2) == pytest.approx(11.0)  # halfway along the first segment
    assert mse_at_kpc(kpc, mse, 0.075) == pytest.approx(13.5)  # halfway along the second
    assert mse_at_kpc(kpc, mse, 0.1) == pytest.approx(12.0)  # a grid point
    assert np.isnan(mse_at_kpc(kpc, mse, 0.01)) and np.isnan(mse_at_kpc(kpc, mse, 0.4))  # outside: NaN
    assert np.isnan(mse_at_kpc([0.3, np.nan], [10.0, 12.0], 0.3))
    # a curve that turns back crosses the level twice: the lower MSE (the method's best at that fairness)
    assert mse_at_kpc([0.3, 0.05, 0.1], [10.0, 12.0, 15.0], 0.08) == pytest.approx(10 + 0.88 * 2)


def test_matched_level_is_reached_by_every_curve_or_nan():
    from companion.papers.fairicp.experiment import matched_level

    assert matched_level([np.array([0.3, 0.1]), np.array([0.3, 0.2]), np.array([0.3, 0.05])], 0.3) == 0.2
    # a method that never gets below the unconstrained KPC leaves no fair level to match
    assert np.isnan(matched_level([np.array([0.3, 0.1]), np.array([0.3, 0.35])], 0.3))


def test_matched_rows_pair_finding_and_oracle_control_on_the_same_seeds_and_level():
    """Hand-made curves, two seeds: seed 0 has the answer worked out by hand (the oracle's curve sets the level
    0.2); seed 1's oracle never goes below the unconstrained KPC, so finding and control are both NaN."""
    import pandas as pd

    from companion.papers.fairicp import experiment

    p = paper.Params.resolve("quick", seeds=2, K=(5, 1), lambdas=(0.0, 0.5, 0.9))
    pts = {  # seed -> method -> [(lam, kpc, mse)]
        0: {"unconstrained": [(0.0, 0.4, 10.0)], "fairicp_mdn": [(0.5, 0.2, 11.0), (0.9, 0.1, 12.0)],
            "fdl_mdn": [(0.5, 0.25, 11.0), (0.9, 0.15, 13.0)], "fdl_oracle": [(0.5, 0.3, 10.5), (0.9, 0.2, 11.5)]},
        1: {"unconstrained": [(0.0, 0.4, 10.0)], "fairicp_mdn": [(0.5, 0.2, 11.0), (0.9, 0.1, 12.0)],
            "fdl_mdn": [(0.5, 0.25, 11.0), (0.9, 0.15, 13.0)], "fdl_oracle": [(0.5, 0.45, 10.2), (0.9, 0.5, 10.4)]},
    }
    seeds = p.seed_list()
    rows = [{"setting": "K5-a0.9", "method": m, "lam": lam, "kpc": k, "mse": e, "seed": seeds[i]}
            for i, by_m in pts.items() for m, ps in by_m.items() for lam, k, e in ps]
    res = experiment.Results(p, pd.DataFrame(rows), {}, {})
    t = experiment.matched_table(res, 5)
    assert list(t.index) == seeds and t.loc[seeds[0], "lambdas"] == "0 0.5 0.9"
    assert t.loc[seeds[0], "matched KPC"] == pytest.approx(0.2)
    assert t.loc[seeds[0], "ICP / FDL-MDN - 1"] == pytest.approx(11.0 / 12.0 - 1)
    assert t.loc[seeds[0], "ICP / FDL-oracle - 1"] == pytest.approx(11.0 / 11.5 - 1)
    assert t.loc[seeds[1]].drop("lambdas").drop("KPC unconstrained").isna().all()
    ten = experiment.matched_table(res, 10)  # K = 10 not run: one NaN per seed, not an invented value
    assert len(ten) == 2 and ten["ICP / FDL-MDN - 1"].isna().all()
