"""Unit checks of the adversarial-curation reproduction: curation kernels, dynamics, BT fit, attacks, loop."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from companion.papers import adversarial_curation as p
from companion.papers.adversarial_curation import attacks, bradley_terry as bt, dynamics as dy, loop, ring
from companion.params import ParamError


def _support(seed: int, n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """A random probability vector and reward on ``n`` points (one tie in the reward)."""
    rng = np.random.default_rng(seed)
    prob = rng.dirichlet(np.ones(n))
    u = rng.normal(0, 1.5, n)
    u[1] = u[0]
    return prob, u


# ----------------------------------------------------------------------------- curation kernels

def test_pair_kernel_matches_brute_force_and_enumeration() -> None:
    prob, u = _support(0)
    brute = np.array([2 * sum(prob[j] * np.exp(u[i]) / (np.exp(u[i]) + np.exp(u[j])) for j in range(5))
                      for i in range(5)])
    h = dy.h_pair(dy.sigma_matrix(u), prob)
    np.testing.assert_allclose(h, brute, rtol=1e-12)
    np.testing.assert_allclose(h, dy.h_enumerate(u, prob, 2), rtol=1e-12)
    assert prob @ h == pytest.approx(1.0, abs=1e-14)


def test_pair_kernels_of_opposite_rewards_sum_to_two() -> None:
    prob, u = _support(1, n=40)
    total = dy.h_pair(dy.sigma_matrix(u), prob) + dy.h_pair(dy.sigma_matrix(-u), prob)
    np.testing.assert_allclose(total, 2.0, atol=1e-14)


@pytest.mark.parametrize("K", [3, 4])
def test_enumerated_kernel_has_unit_mean_and_mc_agrees(K: int) -> None:
    prob, u = _support(2)
    exact = dy.h_enumerate(u, prob, K)
    assert prob @ exact == pytest.approx(1.0, abs=1e-12)
    mc = dy.h_luce_mc(u, prob, K, np.random.default_rng(3), draws=40000)
    np.testing.assert_allclose(mc, exact, rtol=0.02)


def test_large_K_approaches_softmax() -> None:
    prob, u = _support(4)
    soft = dy.h_softmax(u, prob)
    assert prob @ soft == pytest.approx(1.0, abs=1e-14)
    mc = dy.h_luce_mc(u, prob, 400, np.random.default_rng(5), draws=4000)
    np.testing.assert_allclose(mc, soft, rtol=0.02)


def test_luce_tournaments_keep_frequencies() -> None:
    prob = np.array([0.5, 0.3, 0.2])
    u = np.array([0.0, 1.0, -0.5])
    K, n = 4, 200000
    rng = np.random.default_rng(6)
    pool = rng.choice(3, size=60000, p=prob)  # a large sample standing for p
    winners = pool[loop.luce_tournaments(u[pool], n, K, rng)]
    freq = np.bincount(winners, minlength=3) / n
    expected = prob * dy.h_enumerate(u, prob, K)
    se = np.sqrt(expected * (1 - expected) / n) + np.sqrt(expected * (1 - expected) / len(pool)) * 2
    assert np.all(np.abs(freq - expected) < 4 * se)


# ----------------------------------------------------------------------------- dynamics

def test_refit_normalised_nonnegative_and_lambda_zero_is_data() -> None:
    prob, u = _support(7, n=30)
    p_data = np.random.default_rng(8).dirichlet(np.ones(30))
    q = prob * dy.h_pair(dy.sigma_matrix(u), prob)
    for lam in (0.25, 1.0, dy.INF):
        nxt = dy.refit(p_data, q, lam)
        assert nxt.sum() == pytest.approx(1.0, abs=1e-14)
        assert np.all(nxt >= 0)
    np.testing.assert_array_equal(dy.refit(p_data, q, 0.0), p_data)


@pytest.mark.parametrize("K,lam", [(2.0, dy.INF), (dy.INF, 1.0), (4.0, 4.0)])
def test_covariance_identity_every_round(K: float, lam: float) -> None:
    pts = ring.grid_points(16)
    p_data = ring.ring_density(pts, 0.3)
    r = ring.reward(pts, 1.5)
    rng = np.random.default_rng(9)
    noise = ring.smooth_field(pts, rng)
    near = np.linalg.norm(pts - ring.X_STAR, axis=1) <= ring.NEAR
    tr = dy.run_dynamics(p_data, p_data, r, dy.Curator(r, K, rng, 2000),
                         dy.Curator(r + 0.7 * noise, K, rng, 2000), 0.4, lam, 10, near)
    assert tr.identity_err.max() < 1e-12
    assert np.all(np.isfinite(tr.exp_reward))


def test_anti_adversary_threshold_at_half() -> None:
    pts = ring.grid_points(16)
    p_data = ring.ring_density(pts, 0.3)
    r = ring.reward(pts, 1.5)
    near = np.linalg.norm(pts - ring.X_STAR, axis=1) <= ring.NEAR
    g, a = dy.Curator(r, 2.0), dy.Curator(-r, 2.0)
    runs = {phi: dy.run_dynamics(p_data, p_data, r, g, a, phi, dy.INF, 20, near) for phi in (0.3, 0.5, 0.7)}
    assert runs[0.5].drift < 1e-12
    assert runs[0.3].reward[-1] > runs[0.3].reward[0] + 1
    assert runs[0.7].reward[-1] < runs[0.7].reward[0] - 1


# ----------------------------------------------------------------------------- Bradley-Terry fit

@pytest.mark.parametrize("seed,l2", [(0, 1e-2), (1, 1e-3), (2, 1.0)])
def test_newton_matches_sklearn(seed: int, l2: float) -> None:
    rng = np.random.default_rng(seed)
    x = ring.sample_ring(600, 0.25, rng)
    psi = bt.RBF()(x)
    i, j, o = loop.preference_pairs(ring.reward(x, 1.5), 400, rng)
    D = psi[j] - psi[i]
    ours = bt.fit_bt(D, o, l2)
    ref = LogisticRegression(fit_intercept=False, C=1 / (l2 * len(o)), tol=1e-12, max_iter=10000).fit(D, o).coef_[0]
    assert np.abs(ours - ref).max() < 1e-4
    np.testing.assert_allclose(bt.fit_bt(D, 1 - o, l2), -ours, atol=1e-9)
    np.testing.assert_allclose(p.sklearn_bt(D, o, l2), ref, atol=1e-8)


def test_bt_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(3)
    D = rng.normal(size=(50, 6))
    o = (rng.uniform(size=50) < 0.5).astype(float)
    theta = rng.normal(size=6)
    eps = 1e-6
    fd = np.array([(bt.bt_loss(theta + eps * e, D, o, 0.1) - bt.bt_loss(theta - eps * e, D, o, 0.1)) / (2 * eps)
                   for e in np.eye(6)])
    np.testing.assert_allclose(bt.bt_grad(theta, D, o, 0.1), fd, atol=1e-7)
    fdh = np.array([(bt.bt_grad(theta + eps * e, D, o, 0.1) - bt.bt_grad(theta - eps * e, D, o, 0.1)) / (2 * eps)
                    for e in np.eye(6)])
    np.testing.assert_allclose(bt.bt_hessian(theta, D, 0.1), fdh, atol=1e-6)


# ----------------------------------------------------------------------------- attacks

def _round_data(seed: int = 0, n: int = 1500, n_pairs: int = 800):
    rng = np.random.default_rng(seed)
    x = ring.sample_ring(n, 0.25, rng)
    r = ring.reward(x, 1.5)
    psi = bt.RBF()(x)
    i, j, o = loop.preference_pairs(r, n_pairs, rng)
    return x, r, psi, i, j, o


def test_misalignment_gradient_matches_finite_differences() -> None:
    _, r, psi, *_ = _round_data()
    theta = np.random.default_rng(1).normal(0, 0.5, psi.shape[1])
    for alpha in (1.0, 0.8):
        _, g = attacks.misalignment(theta, psi, r, alpha)
        eps = 1e-6
        fd = np.array([(attacks.misalignment(theta + eps * e, psi, r, alpha)[0]
                        - attacks.misalignment(theta - eps * e, psi, r, alpha)[0]) / (2 * eps)
                       for e in np.eye(len(theta))])
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-9)


def test_influence_predicts_single_flip_refits() -> None:
    _, r, psi, i, j, o = _round_data()
    D, l2 = psi[j] - psi[i], 1e-2
    theta = bt.fit_bt(D, o, l2, steps=50)
    o0, grad = attacks.misalignment(theta, psi, r, 1.0)
    pred = attacks.predicted_changes(theta, D, o, l2, grad)
    for k in np.random.default_rng(2).choice(len(o), 10, replace=False):
        refit = attacks.misalignment(bt.fit_bt(D, attacks.flip(o, np.array([k])), l2, 50, theta), psi, r, 1.0)[0]
        actual = refit - o0
        assert abs(pred[k] - actual) <= max(0.2 * abs(actual), 1e-4)


@pytest.mark.parametrize("attack", ["random", "gap", "gap_true", "influence", "influence_alpha0.8"])
@pytest.mark.parametrize("b", [0.0, 0.1, 0.25])
def test_attack_budget_is_exact(attack: str, b: float) -> None:
    x, r, psi, i, j, o = _round_data(n_pairs=400)
    cfg = loop.LoopConfig(attack=attack, budget=b, n_pairs=400)
    idx = loop.choose_flips(cfg, x, r, psi, i, j, o, np.random.default_rng(0))
    assert len(idx) == len(np.unique(idx)) == attacks.budget(b, 400) == int(np.floor(b * 400))
    flipped = attacks.flip(o, idx)
    assert int((flipped != o).sum()) == len(idx)


def test_gap_flips_largest_gaps_and_influence_lowers_covariance() -> None:
    x, r, psi, i, j, o = _round_data()
    idx = attacks.attack_gap(r[i], r[j], 100)
    gaps = np.abs(r[j] - r[i])
    assert gaps[idx].min() >= np.delete(gaps, idx).max()
    D = psi[j] - psi[i]
    clean = bt.fit_bt(D, o, 1e-2)
    flips = attacks.attack_influence(D, o, 200, 1e-2, psi, r)
    attacked = bt.fit_bt(D, attacks.flip(o, flips), 1e-2)
    rnd = bt.fit_bt(D, attacks.flip(o, attacks.attack_random(o, 200, np.random.default_rng(0))), 1e-2)
    cov = lambda th: attacks.misalignment(th, psi, r, 1.0)[0]  # noqa: E731
    assert cov(attacked) < 0 < cov(rnd) < cov(clean) * 1.5


def test_gap_attack_flips_the_clean_reward_models_most_confident_pairs() -> None:
    x, r, psi, i, j, o = _round_data(n_pairs=400)
    idx = loop.choose_flips(loop.LoopConfig(attack="gap", budget=0.25, n_pairs=400), x, r, psi, i, j, o,
                            np.random.default_rng(0))
    D = psi[j] - psi[i]
    ref = LogisticRegression(fit_intercept=False, C=1 / (1e-2 * len(o)), tol=1e-12, max_iter=10000).fit(D, o).coef_[0]
    gaps = np.abs(D @ ref)
    assert len(idx) == 100 and gaps[idx].min() >= np.delete(gaps, idx).max() - 1e-6
    attacked = bt.fit_bt(D, attacks.flip(o, idx), 1e-2)
    rnd = bt.fit_bt(D, attacks.flip(o, attacks.attack_random(o, 100, np.random.default_rng(0))), 1e-2)
    corr = lambda th: np.corrcoef(r, psi @ th)[0, 1]  # noqa: E731
    assert corr(attacked) < corr(rnd)


def test_softmax_without_replacement_matches_successive_sampling() -> None:
    u = np.array([0.0, 1.0, -0.5, 2.0])
    w = np.exp(u) / np.exp(u).sum()
    exact = np.array([w[i] + sum(w[j] * w[i] / (1 - w[j]) for j in range(4) if j != i) for i in range(4)])
    rng = np.random.default_rng(0)
    draws = np.array([loop.softmax_without_replacement(u, 2, rng) for _ in range(20000)])
    assert all(len(set(d)) == 2 for d in draws[:500])
    freq = np.bincount(draws.ravel(), minlength=4) / len(draws)
    se = np.sqrt(exact * (1 - exact) / len(draws))
    assert np.all(np.abs(freq - exact) < 4 * se)
    first = np.bincount(draws[:, 0], minlength=4) / len(draws)
    assert np.all(np.abs(first - w) < 4 * np.sqrt(w * (1 - w) / len(draws)))


def test_official_curation_keeps_a_share() -> None:
    cfg = loop.LoopConfig(n_samples=600, n_pairs=300, rounds=3, curation="softmax", keep=0.5)
    out = loop.run_loop(cfg, 1)
    assert out["reward"][-1] > out["reward"][0] + 1.0
    kept = loop.curate(cfg, np.linspace(-3, 0, 600), np.random.default_rng(0))
    assert len(kept) == 300 == len(np.unique(kept))


def test_official_clamp_reward() -> None:
    params = p.Params.resolve("quick", reward_form="clamp", gamma_reward=10.0)
    assert params.r_min == 3.0
    pts = np.array([[2.0, 0.0], [2.0, 2.9], [2.0, 4.0], [-2.0, 0.0]])
    np.testing.assert_allclose(ring.reward(pts, params.gamma_reward, "clamp", params.r_min), [0, 0, -10, -10])


def test_declarations_do_not_import_the_experiment() -> None:
    import subprocess
    import sys

    code = ("import sys; import companion.papers.adversarial_curation as a; a.CLAIMS; a.Params.resolve('quick'); "
            "print('companion.papers.adversarial_curation.experiment' in sys.modules, 'sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


# ----------------------------------------------------------------------------- data, loop, params

def test_ring_sampler_modes_and_gmm_refit() -> None:
    rng = np.random.default_rng(0)
    x = ring.sample_ring(16000, 0.25, rng)
    nearest = np.argmin(((x[:, None] - ring.modes()[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_allclose(np.bincount(nearest, minlength=8) / len(x), 1 / 8, atol=0.01)
    model = loop.Density("gmm", 0.1, 0).fit(x[:4000])
    means = model.gmm.means_
    dist = np.linalg.norm(means[:, None] - ring.modes()[None], axis=-1)
    assert np.all(dist.min(axis=0) < 0.1)
    sample = model.sample(4000, rng)
    assert sample.shape == (4000, 2) and ring.near_mass(sample) == pytest.approx(1 / 8, abs=0.03)


def test_loop_is_deterministic_and_clean_loop_improves() -> None:
    cfg = loop.LoopConfig(n_samples=600, n_pairs=300, rounds=4, attack="random", budget=0.1)
    a, b = loop.run_loop(cfg, 3), loop.run_loop(cfg, 3)
    np.testing.assert_array_equal(a["reward"], b["reward"])
    clean = loop.run_loop(loop.LoopConfig(n_samples=600, n_pairs=300, rounds=4), 3)
    assert clean["reward"][-1] > clean["reward"][0] + 1.5
    assert not np.array_equal(loop.run_loop(cfg, 4)["reward"], a["reward"])


def test_true_reward_loop_tracks_grid_dynamics() -> None:
    pts = ring.grid_points(32)
    p_data = ring.ring_density(pts, 0.3)
    r = ring.reward(pts, 1.5)
    g = dy.Curator(r, 2.0)
    tr = dy.run_dynamics(p_data, p_data, r, g, g, 0.0, dy.INF, 3, np.ones(len(r), bool))
    samples = np.mean([loop.true_reward_loop(20000, 3, 1.5, 0.3, 0.05, s) for s in range(2)], axis=0)
    np.testing.assert_allclose(samples, tr.reward, atol=0.06)


@pytest.mark.parametrize("override,name", [
    ({"K_list": ("2", "1")}, "K_list"), ({"K_list": ("inf",)}, "K_list"),
    ({"lambda_list": ("inf", "1", "0")}, "lambda_list"), ({"lambda_loop": "abc"}, "lambda_loop"),
    ({"budgets": (0.1,)}, "budgets"), ({"phi_grid": (0.1, 0.3)}, "phi_grid"),
    ({"attacks": ("none", "gap")}, "attacks"), ({"anchor_rounds": 20, "T_exact": 10}, "anchor_rounds"),
    ({"seeds": 2}, "seeds"), ({"budgets": (0.25, 0.6)}, "budgets"),
])
def test_bad_parameters_are_refused(override: dict, name: str) -> None:
    with pytest.raises(ParamError, match=f"parameter '{name}'"):
        p.Params.resolve("quick", **override)


def test_presets_resolve() -> None:
    for preset in ("quick", "full", "paper"):
        params = p.Params.resolve(preset)
        assert "2" in params.K_list and 0.25 in params.budgets


def test_batched_dynamics_equal_one_phi_at_a_time() -> None:
    pts = ring.grid_points(16)
    p_data = ring.ring_density(pts, 0.3)
    r = ring.reward(pts, 1.5)
    near = np.linalg.norm(pts - ring.X_STAR, axis=1) <= ring.NEAR
    g, a = dy.Curator(r, 2.0), dy.Curator(ring.adversary_reward("rotated", pts, r, 1.5), 2.0)
    phis = np.array([0.0, 0.3, 0.7])
    batch = dy.run_dynamics_batch(p_data, p_data, r, g, a, phis, 1.0, 8, near)
    for phi, tr in zip(phis, batch):
        one = dy.run_dynamics(p_data, p_data, r, g, a, phi, 1.0, 8, near)
        np.testing.assert_allclose(tr.exp_reward, one.exp_reward, rtol=1e-12)
        np.testing.assert_allclose(tr.p_final, one.p_final, atol=1e-15)
