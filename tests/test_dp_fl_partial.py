"""Unit checks of the dp-fl-partial reproduction (mu2-FL with noise cancellation)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from companion.papers import dp_fl_partial as dp
from companion.papers.dp_fl_partial import experiment as ex
from companion.papers.dp_fl_partial import logistic_sco as lr
from companion.papers.dp_fl_partial import privacy as pv
from companion.papers.dp_fl_partial import simulator as sim
from companion.params import ParamError

B = np.array([0.6, -0.8, 0.0])  # optimum of the quadratic test objective (||B|| = 1 < D)


def quad_task(M: int = 4, d: int = 3, spread: float = 0.0) -> sim.Task:
    """A task object whose machine weights double as quadratic optima b_i = B + spread * e_i."""
    W = B + spread * np.eye(M, d)
    x = np.zeros((1, d))
    return sim.Task(W, x, np.ones(1), B, 0.0)


def quad_grads(task: sim.Task):
    """Exact gradients of F_i(w) = ||w - b_i||^2 / 8 (G <= 3/4, L = 1/4 on the ball D = 2)."""
    return lambda P, X, Y, S: (P[:, None, :] - task.W[S]) / 4.0


def run_quad(task: sim.Task, n: int, m: int, c: float, rows: int = 1, stop: int | None = None,
             method: str = "nonprivate_mu2", seed: int = 0) -> sim.SimOut:
    """Simulate noise-free mu2-FL with exact quadratic gradients on ``rows`` independent schedules."""
    rngs = [sim.stream_rng(seed + r, 0) for r in range(rows)]
    return sim.simulate(method, n, rngs, np.arange(rows), np.full(rows, c), np.zeros(rows), task, m, 2.0,
                       np.array([1]), grad_fn=quad_grads(task), stop=stop)


def test_telescoping_exact_gradients_homogeneous():
    task = quad_task()
    out = run_quad(task, n=30, m=2, c=0.5)
    T = 30 * 4 // 2
    grad = (out.x_query - B) / 4.0
    np.testing.assert_allclose(out.A, T * grad, rtol=0, atol=1e-10 * T)


def test_telescoping_heterogeneous_only_in_expectation():
    task = quad_task(spread=0.5)
    stop = 4 * 2 + 1  # mid-epoch: the participants so far do not cover every machine equally
    out = run_quad(task, n=6, m=2, c=0.5, rows=500, stop=stop)
    mean_grad = (out.x_query - task.W.mean(0)) / 4.0
    gap = out.A - stop * mean_grad
    assert np.abs(gap).max() > 1e-3  # a single schedule is biased ...
    se = gap.std(0, ddof=1) / math.sqrt(len(gap))
    assert np.all(np.abs(gap.mean(0)) <= 4 * se)  # ... but not on average over schedules


def test_stochastic_estimate_unbiased_on_fixed_trajectory():
    rng = np.random.default_rng(1)
    d, t_end, runs = 3, 6, 2000
    w_true = np.array([1.0, -0.5, 0.3])
    traj = 0.3 * rng.standard_normal((t_end + 1, d))  # traj[t] = x_t, traj[0] unused
    A = np.zeros((runs, d))
    for t in range(1, t_end + 1):
        x, y = lr.sample(rng, runs, w_true)
        now = lr.grad_batch(np.tile(traj[t], (runs, 1)), x[:, None], y[:, None])[:, 0]
        before = lr.grad_batch(np.tile(traj[t - 1], (runs, 1)), x[:, None], y[:, None])[:, 0]
        A += t * now - (t - 1) * before
    d_t = A / t_end
    xs, ys = lr.sample(rng, 400_000, w_true)
    exact = lr.grad_batch(traj[t_end][None], xs[None], ys[None])[0].mean(0)
    se = d_t.std(0, ddof=1) / math.sqrt(runs)
    assert np.all(np.abs(d_t.mean(0) - exact) <= 4 * se)


def test_anytime_average_is_explicit_weighted_sum():
    rng = np.random.default_rng(2)
    ws = rng.standard_normal((12, 3))
    x = ws[0].copy()  # x_1 = w_1
    for t in range(1, 12):
        x = sim.anytime_average(x, ws[t], t)
        weights = np.arange(1, t + 2) / ((t + 1) * (t + 2) / 2)
        np.testing.assert_allclose(x, weights @ ws[: t + 1], rtol=1e-12)
        assert math.isclose(weights.sum(), 1.0)


def test_increment_never_clipped_full_run():
    p = dp.Params.resolve("quick")
    task = sim.make_task(np.random.default_rng(0), p.M, p.d, p.w_star_norm, 1.0, 20_000)
    rngs = [sim.stream_rng(s, 0) for s in range(2)]
    for method in ("nc", "naive", "nonprivate_mu2"):
        sig = np.full(2, ex.method_sigma(method, 1.0, p, 100))
        out = sim.simulate(method, 100, rngs, np.arange(2), np.full(2, 3.0), sig, task, p.m, p.D, np.array([1]))
        assert out.clipped == 0
    assert pv.increment_bound(2.0) == 3.0


def test_projection():
    rng = np.random.default_rng(3)
    w = 5 * rng.standard_normal((100, 4))
    proj = sim.project(w, 2.0)
    assert np.all(np.linalg.norm(proj, axis=1) <= 2.0 + 1e-12)
    inside = w / (np.linalg.norm(w, axis=1, keepdims=True) + 1.0)
    np.testing.assert_array_equal(sim.project(inside, 2.0), inside)


def test_balanced_schedule():
    task = quad_task(M=20)
    n, m = 7, 5
    S, x, y, z = sim.draw_block(np.random.default_rng(4), task, m, n)
    assert S.shape == (n * 20 // m, m)
    assert all(len(set(row)) == m for row in S)
    np.testing.assert_array_equal(np.bincount(S.ravel(), minlength=20), np.full(20, n))
    assert np.all(np.linalg.norm(x, axis=-1) <= 1 + 1e-12) and set(np.unique(y)) <= {-1.0, 1.0}


def test_nc_messages_are_post_processing_of_noisy_prefix_sums():
    rng = np.random.default_rng(5)
    q, Y = rng.standard_normal((50, 3)), 40.0 * rng.standard_normal((50, 3))
    last, msgs = np.zeros(3), []
    for k in range(50):
        msgs.append(sim.nc_message(q[k], Y[k], last))
        last = Y[k]
    np.testing.assert_allclose(np.cumsum(msgs, 0), np.cumsum(q, 0) + Y, rtol=0, atol=1e-11)


def test_cancellation_identity_in_a_run():
    p = dp.Params.resolve("quick")
    task = sim.make_task(np.random.default_rng(0), p.M, p.d, p.w_star_norm, 0.0, 20_000)
    sig = np.full(2, ex.method_sigma("nc", 1.0, p, 60))
    out = sim.simulate("nc", 60, [sim.stream_rng(0, 0)], np.zeros(2, int), np.array([0.01, 0.1]), sig, task,
                      p.m, p.D, sim.checkpoint_rounds(240), track_clean=True)
    assert np.all(out.identity_err < 1e-9)


def test_calibration_monotone_and_inverts():
    for eps in (0.1, 0.5, 1.0, 4.0):
        for delta in (1e-5, 1e-8):
            rho = pv.zcdp_rho(eps, delta)
            assert abs(rho + 2 * math.sqrt(rho * math.log(1 / delta)) - eps) < 1e-12
    z = [pv.noise_multiplier(e, 1e-5, 1000) for e in (4.0, 2.0, 1.0, 0.5)]
    assert all(a < b for a, b in zip(z, z[1:]))
    ratio = pv.noise_multiplier(1.0, 1e-5, 4000) / pv.noise_multiplier(1.0, 1e-5, 1000)
    assert math.isclose(ratio, 2.0, rel_tol=1e-12)


@pytest.mark.parametrize("eps", [0.5, 1.0, 4.0])
def test_accounting_against_opacus(eps):
    n, delta = 1000, 1e-5
    z = pv.noise_multiplier(eps, delta, n)
    assert 0.7 * eps <= pv.rdp_epsilon(z, n, delta) <= eps
    z_rdp = pv.noise_multiplier(eps, delta, n, "rdp")
    assert 0.75 < z_rdp / z < 0.95  # the RDP accountant needs less noise for the same budget
    assert pv.rdp_epsilon(z_rdp, n, delta) <= eps * (1 + 1e-6)


def test_mu2_sgd_error_decreases_with_T():
    task = quad_task(M=1, d=3)
    errs = [np.linalg.norm(run_quad(task, n=T, m=1, c=1.0).x_out - B) for T in (10, 100, 1000)]
    assert errs[0] > errs[1] > errs[2]


def test_noise_variance_flat_and_linear():
    v_nc, v_naive = sim.noise_variance(np.random.default_rng(6), 8, 2, 4, 40, 4000)
    np.testing.assert_allclose(v_nc[4:], 8 / 4, rtol=0.1)
    np.testing.assert_allclose(v_naive[[9, 39]], np.array([10, 40]) / 2, rtol=0.1)


def test_batched_equals_per_seed_and_deterministic():
    p = dp.Params.resolve("quick")
    task = sim.make_task(np.random.default_rng(0), p.M, p.d, p.w_star_norm, 0.0, 20_000)
    sig = ex.method_sigma("nc", 1.0, p, 60)
    ck = np.array([10])

    def once(seeds):
        return sim.simulate("nc", 60, [sim.stream_rng(s, 0) for s in seeds], np.arange(len(seeds)),
                           np.full(len(seeds), 0.03), np.full(len(seeds), sig), task, p.m, p.D, ck).x_out

    batched = once([7, 8, 9])
    for j, s in enumerate([7, 8, 9]):
        np.testing.assert_allclose(once([s])[0], batched[j], rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(once([7, 8, 9]), batched)


def test_newton_minimiser_is_stationary():
    x, y = lr.sample(np.random.default_rng(8), 5000, np.array([1.0, 0.5]))
    w = lr.newton_minimiser(x, y)
    g = lr.grad_batch(w[None], x[None], y[None])[0].mean(0)
    assert np.linalg.norm(g) < 1e-10


@pytest.mark.parametrize("kwargs", [{"bogus": 1}, {"M": "20"}, {"m": 0}, {"delta": 0.01},
                                    {"m": 3}, {"n_claim": 123}, {"methods": ("nc", "naive")},
                                    {"methods": ("nc", "sgd")}, {"w_star_norm": 2.5}])
def test_params_reject(kwargs):
    with pytest.raises(ParamError):
        dp.Params.resolve("quick", **kwargs)


def test_params_presets_resolve():
    assert dp.Params.resolve("full").n_list[-1] == 8000
    assert dp.Params.resolve("paper").M == 100


def test_each_method_has_its_grid_and_edge_choices_are_found():
    p = dp.Params.resolve("quick")
    assert ex.method_grid("nc", p) == ex.method_grid("naive", p) == p.c_grid_mu2_private
    assert ex.method_grid("dpfedsgd", p) == p.c_grid_fedsgd
    assert ex.method_grid("nonprivate_mu2", p) == ex.method_grid("nonprivate_fedsgd", p) == p.c_grid_nonprivate
    res = ex.Results(p)
    res.chosen_c = {("nc", 250, 1.0): p.c_grid_mu2_private[2], ("naive", 250, 1.0): min(p.c_grid_mu2_private),
                    ("dpfedsgd", 250, 1.0): max(p.c_grid_fedsgd), ("nonprivate_mu2", 250, 1.0): p.c_grid_nonprivate[1]}
    assert sorted(ex.chosen_on_edge(res)) == [("dpfedsgd", 250, 1.0), ("naive", 250, 1.0)]


def test_claims_roles_and_controls():
    by_id = {c.id: c for c in dp.CLAIMS}
    constructions = ("noise-flat", "naive-noise-grows", "accounting", "cancel-identity", "release-noise")
    assert all(by_id[k].role == "check" for k in constructions)
    findings = [c for c in dp.CLAIMS if c.role == "finding"]
    assert findings and all("untrained" in c.controls for c in findings)


@pytest.fixture(scope="module")
def small_run():
    p = dp.Params.resolve("quick", seeds=3, n_tune_seeds=2, n_list=(250, 500), n_claim=500, n_test=20_000,
                          noise_mc_draws=200, noise_epochs=8, c_grid_mu2_private=(0.001, 0.01, 0.1),
                          c_grid_fedsgd=(0.1, 1.0), c_grid_nonprivate=(1.0, 10.0))
    return dp.run(p)


def test_exact_claims_take_one_value_and_every_seed_claims_their_seeds(small_run):
    res, p = small_run, small_run.params
    kinds = {c.id: c.kind for c in dp.CLAIMS}
    assert kinds["accounting"] == "exact" and kinds["cancel-identity"] == kinds["release-noise"] == "every"
    values = ex.claim_values(res)
    assert np.ndim(values["accounting"]) == 0 and values["cancel-identity"] == list(res.identity_err)
    verdicts = {v.id: v for v in dp.check(res)}
    identity = verdicts["cancel-identity"]
    assert identity.interval is None and identity.verdict == "HOLDS" and identity.value == res.identity_err.max()
    assert len(verdicts["nc-slope"].per_seed) == 3
    assert set(res.dist) == set(res.excess) and all(np.all(v >= 0) for v in res.dist.values())
    assert ex.chosen_c_table(res).shape == (len(p.methods), len(p.n_list) + 1)


def test_untrained_control_is_x_zero(small_run):
    res, p = small_run, small_run.params
    task = sim.make_task(np.random.default_rng(np.random.SeedSequence((p.seed, 3))), p.M, p.d, p.w_star_norm, 0.0,
                         p.n_test)
    zero_loss = lr.loss(np.zeros(p.d), task.x_test, task.y_test)[0]
    assert res.trivial == pytest.approx(zero_loss - task.f_opt, rel=1e-12) and res.trivial > 0
    values = ex.claim_values(res)
    np.testing.assert_array_equal(values["nc-slope@untrained"], np.zeros(p.seeds))
    at = {k: res.excess[(k, p.n_claim, p.eps_claim)] for k in ("naive", "dpfedsgd")}
    best = min(at.values(), key=np.mean)
    np.testing.assert_allclose(values["nc-beats-baselines@untrained"], res.trivial / best, rtol=1e-12)
    np.testing.assert_allclose(values["baselines-learn"], best / res.trivial, rtol=1e-12)
    verdicts = {v.id: v for v in dp.check(res)}
    assert verdicts["nc-slope"].controls[0].verdict == "FAILS"  # a flat slope never passes <= -0.8


def test_release_noise_matches_sigma_and_fails_when_undercalibrated(small_run):
    res, p = small_run, small_run.params
    sigma = ex.method_sigma("nc", p.eps_claim, p, p.n_claim)
    np.testing.assert_allclose(res.release_rms, sigma, rtol=0.03)
    assert max(ex.claim_values(res)["release-noise"]) <= 1.0
    res_low = ex.Results(p, release_rms=res.release_rms / np.sqrt(p.n_claim))  # sigma of one release, not n
    assert ex.release_epsilon(res_low).min() > 1.0


def test_optimal_rdp_order_beyond_opacus_default_is_inside_grid():
    z = pv.noise_multiplier(0.25, 1e-7, 16000)
    eps, order = pv.rdp_spent(z, 16000, 1e-7)
    assert 63 < order < max(pv.EXTRA_ORDERS) and eps <= 0.25
