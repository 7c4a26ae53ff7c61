"""Unit checks of the win-rate reproduction: exact win rates, SFT, WRO optimum, DPO, KL shell, REINFORCE, E4."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import torch
from scipy.stats import kendalltau

from companion.papers import win_rate as paper
from companion.papers.win_rate import dpo, mlp_policy, paper_preset, sft, wro
from companion.papers.win_rate import experiment as ex
from companion.papers.win_rate import policy_gradient as pg
from companion.papers.win_rate import preferences as pr
from companion.params import ParamError


@pytest.fixture
def instance() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A BT prompt with K = 8: rewards, p_ref, P."""
    return pr.tabular_instance(np.random.default_rng(0), 8, 1.0)


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_preferences_antisymmetric_and_reference_wins_half(gamma: float) -> None:
    r, p_ref, P = pr.tabular_instance(np.random.default_rng(1), 10, 1.0, gamma)
    np.testing.assert_allclose(P + P.T, 1.0, atol=1e-15)
    np.testing.assert_allclose(np.diag(P), 0.5, atol=1e-15)
    assert abs(pr.win_rate(p_ref, P, p_ref) - 0.5) < 1e-15
    if gamma > 0:  # intransitive: not a BT matrix of any rewards
        assert np.abs(P - pr.bt_matrix(wro.bt_fit(P, np.outer(p_ref, p_ref)))).max() > 1e-3


def test_win_rate_is_linear_in_the_policy(instance) -> None:
    _, p_ref, P = instance
    rng = np.random.default_rng(2)
    a, b = pr.policy(rng.normal(size=(2, 8)))
    lam = 0.3
    assert np.isclose(pr.win_rate(lam * a + (1 - lam) * b, P, p_ref),
                      lam * pr.win_rate(a, P, p_ref) + (1 - lam) * pr.win_rate(b, P, p_ref), atol=1e-15)
    # the per-response win rate of a point mass is a row of P averaged under the anchor
    assert np.isclose(pr.win_rate(np.eye(8)[3], P, p_ref), P[3] @ p_ref)


def test_contextual_instance_shapes_and_scale() -> None:
    phi, r, p_ref, P = pr.contextual_instance(np.random.default_rng(3), 500, 6, 16)
    assert phi.shape == (500, 6) and p_ref.shape == (500, 16) and P.shape == (500, 16, 16)
    np.testing.assert_allclose(p_ref.sum(-1), 1.0)
    assert 0.7 < r.std() < 1.3  # unit-variance rewards per (x, y)


def test_sft_optimum_sums_to_one_and_identity(instance) -> None:
    _, p_ref, P = instance
    p_sft = sft.sft_optimum(P, p_ref)
    assert abs(p_sft.sum() - 1.0) < 1e-14
    assert abs(pr.win_rate(p_sft, P, p_ref) - sft.sft_identity(P, p_ref)) < 1e-14
    # below the WRO limit and above 1/2
    assert 0.5 < pr.win_rate(p_sft, P, p_ref) < sft.wro_limit(P, p_ref)


def test_trained_sft_matches_winner_distribution(instance) -> None:
    _, p_ref, P = instance
    p_hat = sft.trained_sft(np.random.default_rng(4), P, p_ref, 400_000)
    assert pr.tv(p_hat, sft.sft_optimum(P, p_ref)) < 0.005
    rounds = sft.iterated_sft(P, p_ref, 3)
    np.testing.assert_allclose(rounds[0], sft.sft_optimum(P, p_ref))
    np.testing.assert_allclose(rounds[1], sft.sft_optimum(P, rounds[0]))


@pytest.mark.parametrize("h", ["id", "log", "logit"])
def test_closed_form_optimum_is_the_gradient_ascent_fixed_point(instance, h: str) -> None:
    _, p_ref, P = instance
    R = pr.h_reward(P, p_ref, h)
    p_star = wro.closed_form_optimum(p_ref, R, 0.5)
    p_ga, iters = wro.gradient_ascent(p_ref, R, 0.5)
    assert iters < 200_000
    assert pr.tv(p_star, p_ga) < 1e-6
    # and it is the maximiser: random perturbations lower the objective
    rng = np.random.default_rng(5)
    others = pr.policy(np.log(p_star) + 0.1 * rng.normal(size=(50, 8)))
    assert np.all(wro.objective(others, R, p_ref, 0.5) < wro.objective(p_star, R, p_ref, 0.5))


def test_logit_reward_under_bt_is_centred_reward(instance) -> None:
    r, p_ref, P = instance
    np.testing.assert_allclose(pr.h_reward(P, p_ref, "logit"), r - r @ p_ref, atol=1e-9)


def test_population_dpo_minimiser_under_bt(instance) -> None:
    r, p_ref, P = instance
    beta = 0.5
    theta, _, _ = dpo.train_dpo(np.log(p_ref), dpo.population_weights(P, p_ref), beta, 50.0, 20_000, 20_000)
    assert pr.tv(pr.policy(theta), pr.policy(np.log(p_ref) + r / beta)) < 1e-5


def test_dpo_gradient_matches_finite_differences(instance) -> None:
    _, p_ref, P = instance
    rng = np.random.default_rng(6)
    C = dpo.population_weights(P, p_ref)
    theta = np.log(p_ref) + rng.normal(size=8)
    g = dpo.dpo_grad(theta, np.log(p_ref), C, 0.3)
    eps = 1e-6
    fd = [(dpo.dpo_loss(pr.log_policy(theta + eps * e), np.log(p_ref), C, 0.3)
           - dpo.dpo_loss(pr.log_policy(theta - eps * e), np.log(p_ref), C, 0.3)) / (2 * eps) for e in np.eye(8)]
    np.testing.assert_allclose(g, fd, atol=1e-8)


def test_bt_fit_recovers_rewards(instance) -> None:
    r, p_ref, P = instance
    r_hat = wro.bt_fit(P, np.outer(p_ref, p_ref))
    assert np.max(np.abs(r_hat - (r - r.mean()))) < 1e-6


def test_kl_shell_is_exact_and_discordance_matches_kendall() -> None:
    rng = np.random.default_rng(7)
    _, p_ref, P = pr.tabular_instance(rng, 12, 1.0)
    p, kls = dpo.shell_policies(rng, p_ref, 0.3, 30)
    assert np.max(np.abs(kls - 0.3)) < 1e-9
    np.testing.assert_allclose(kls, pr.kl(p, p_ref))
    a, b = pr.win_rate(p, P, p_ref), -dpo.dpo_loss(np.log(p), np.log(p_ref), dpo.population_weights(P, p_ref), 0.1)
    assert np.isclose(dpo.discordance(a, b), (1 - kendalltau(a, b).statistic) / 2, atol=1e-12)
    assert dpo.discordance(a, a) == 0.0 and dpo.discordance(a, -a) == 1.0


def test_kl_shell_redraws_rays_that_cannot_reach_kappa() -> None:
    # a peaked reference: rays towards the dominant response tend to KL = -log 0.6 < 1 and never meet
    # the shell at kappa = 1 (the full preset's instance that hung before the redraw); others do
    p_ref = np.array([0.6] + [0.4 / 11] * 11)
    p, kls = dpo.shell_policies(np.random.default_rng(3), p_ref, 1.0, 200)
    assert np.max(np.abs(kls - 1.0)) < 1e-9 and np.all(np.isfinite(p))
    with pytest.raises(ValueError, match="unreachable"):
        dpo.shell_policies(np.random.default_rng(3), np.full(4, 0.25), 1.5, 10)  # max KL log 4 = 1.386


def test_reinforce_estimator_is_unbiased() -> None:
    rng = np.random.default_rng(8)
    phi, _, p_ref, P = pr.contextual_instance(rng, 5, 3, 4)
    log_ref = np.log(p_ref)
    hP = pr.H_FUNCTIONS["logit"](np.clip(P, pr.CLIP, 1 - pr.CLIP))[None]
    theta = rng.normal(size=(3, 4)) * 0.5
    n = 20_000
    draws = pg.reinforce_gradient(np.broadcast_to(theta, (n, 3, 4)).copy(), phi, log_ref, hP,
                                  np.zeros(n, int), np.full(n, 0.1), 4, rng)
    exact = pg.exact_gradient(theta, phi, log_ref, pr.win_vector(hP[0], p_ref), np.array(0.1))
    se = draws.std(axis=0) / np.sqrt(n)
    assert np.all(np.abs(draws.mean(axis=0) - exact) < 4 * se)


def test_exact_gradient_matches_finite_differences() -> None:
    rng = np.random.default_rng(9)
    phi, _, p_ref, P = pr.contextual_instance(rng, 7, 2, 5)
    R = pr.h_reward(P, p_ref, "log")
    theta, beta = rng.normal(size=(2, 5)), np.array(0.2)
    g = pg.exact_gradient(theta, phi, np.log(p_ref), R, beta)
    eps = 1e-6
    for i, j in [(0, 0), (1, 3), (0, 4)]:
        e = np.zeros_like(theta)
        e[i, j] = eps
        fd = (pg.objective(theta + e, phi, np.log(p_ref), R, beta)
              - pg.objective(theta - e, phi, np.log(p_ref), R, beta)) / (2 * eps)
        assert abs(g[i, j] - fd) < 1e-8


def test_softmax_and_dpo_loss_stable_for_large_logits() -> None:
    z = np.array([50.0, -50.0, 0.0, 49.0])
    assert np.all(np.isfinite(pr.log_policy(z))) and abs(pr.policy(z).sum() - 1) < 1e-15
    log_ref = pr.log_policy(np.zeros(4))
    C = np.full((4, 4), 1 / 16)
    for scale in (1e3, -1e3):
        theta = np.array([scale, 0.0, 0.0, -scale])
        assert np.isfinite(dpo.dpo_loss(pr.log_policy(theta), log_ref, C, 1.0))
        assert np.all(np.isfinite(dpo.dpo_grad(theta, log_ref, C, 1.0)))


def test_r_squared_matches_statsmodels() -> None:
    rng = np.random.default_rng(10)
    s = rng.uniform(size=60)
    labels = rng.choice(["a", "b", "c"], size=60)
    y = 0.3 * s + 0.2 * s ** 2 + (labels == "b") * 0.1 + rng.normal(0, 0.05, 60)
    X = np.column_stack([s, s ** 2])
    assert np.isclose(pg.r_squared(y, X), sm.OLS(y, sm.add_constant(X)).fit().rsquared, atol=1e-12)
    D = pg.one_hot(labels)
    assert D.shape == (60, 2)
    assert np.isclose(pg.r_squared(y, D), sm.OLS(y, sm.add_constant(D)).fit().rsquared, atol=1e-12)


def test_nlhf_equilibrium_is_wro_against_itself() -> None:
    _, p_ref, P = pr.tabular_instance(np.random.default_rng(11), 10, 1.0, gamma=1.0)
    pi, iters = wro.nash_mirror_descent(P, p_ref, 0.1)
    assert iters < 100_000
    assert wro.self_play_residual(pi, P, p_ref, 0.1) < 1e-9


def test_mlp_policy_starts_at_reference_and_trains() -> None:
    rng = np.random.default_rng(12)
    phi_np, _, p_ref_np, P_np = pr.contextual_instance(rng, 16, 3, 5)
    phi, log_ref = torch.as_tensor(phi_np), torch.as_tensor(np.log(p_ref_np))
    model = mlp_policy.BatchedMLP(2, 3, 8, 5, torch.Generator().manual_seed(0))
    torch.testing.assert_close(mlp_policy.log_probs(model, phi, log_ref)[1], log_ref)
    R = torch.as_tensor(pr.h_reward(P_np, p_ref_np, "logit"))[None].expand(2, -1, -1)
    beta = torch.tensor([0.1, 0.1], dtype=torch.float64)
    star = mlp_policy.reference(phi, log_ref, R, beta, 8, 100, 0.02, torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.all(mlp_policy.objective(star, phi, log_ref, R, beta)
                         > mlp_policy.objective(model, phi, log_ref, R, beta) + 1e-3)


def test_e4_grid_shape_and_success_range() -> None:
    grid = ex.ParamGrid(("id", "logit"), (0.1, 0.2), (5, 20), (0.1,), (4,), 2, ref_steps=300)
    runs = ex.e4_instance(0, 16, 3, 6, grid)
    assert len(runs) == 2 * 2 * 2 * 1 * 1 * 2
    assert runs["success"].between(-0.5, 1.05).all()
    assert runs.groupby("steps")["success"].mean().is_monotonic_increasing


def test_params_validation() -> None:
    with pytest.raises(ParamError, match="gamma_intrans"):
        paper.Params.resolve("quick", pref_models=("bt", "intransitive"), gamma_intrans=0.0)
    with pytest.raises(ParamError, match="beta_list"):
        paper.Params.resolve("quick", h_list=("id",), beta_list=(0.1,))
    with pytest.raises(ParamError, match="pref_models"):
        paper.Params.resolve("quick", pref_models=("intransitive",))
    with pytest.raises(ParamError, match="batch_grid"):
        paper.Params.resolve("quick", batch_grid=(1,))
    with pytest.raises(ParamError, match="h_list"):
        paper.Params.resolve("quick", h_list=("sqrt",))
    assert paper.Params.resolve("full").seeds >= 3


def test_smoke_run_is_deterministic_and_checks() -> None:
    params = paper.Params.resolve("quick", smoke=True)
    a, b = paper.run(params), paper.run(params)
    assert paper.metrics(a)["e4_r2"] == paper.metrics(b)["e4_r2"]
    assert paper.metrics(a)["dpo_discordance_every_h"] == paper.metrics(b)["dpo_discordance_every_h"]
    verdicts = paper.check(a)
    assert [v.id for v in verdicts] == [c.id for c in paper.CLAIMS]
    ids = {v.id: v for v in verdicts}
    assert ids["sft-identity"].verdict == "HOLDS" and ids["sft-identity"].interval is None
    assert len(ids["dpo-discordance"].per_seed) == 3
    every = ids["dpo-discordance-every-seed"]
    assert every.per_seed == ids["dpo-discordance"].per_seed and every.value == min(every.per_seed)
    for claim in paper.CLAIMS:  # every finding's controls are measured on the same seeds
        for control in ids[claim.id].controls:
            assert len(control.per_seed) == len(ids[claim.id].per_seed)
    other = paper.run(dataclasses.replace(params, seed=7))
    assert paper.metrics(other)["dpo_discordance_every_h"] != paper.metrics(a)["dpo_discordance_every_h"]


@pytest.mark.slow
def test_paper_preset_smoke_runs_the_mlp_policy() -> None:
    params = paper.Params.resolve("paper", smoke=True, device="cpu")
    assert params.policy_class == "mlp" and params.K_par == 64
    results = paper.run(params)
    assert results.e5 is not None and results.e5["nlhf_residual"].max() < 1e-9
    assert results.e4["success"].notna().all() and len(results.e4_r2) == 3
    assert {v.id for v in paper.check(results)} == {c.id for c in paper.CLAIMS}


def test_importing_the_package_loads_neither_the_experiment_nor_torch() -> None:
    code = ("import sys, companion.papers.win_rate as p; p.CLAIMS; p.Params.resolve('full'); "
            "print(any(m == 'torch' or m.startswith('companion.papers.win_rate.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_every_finding_has_a_control_and_checks_have_none() -> None:
    for claim in paper.CLAIMS:
        assert bool(claim.controls) == (claim.role == "finding"), claim.id


def test_empirical_win_vector_is_unbiased_and_unseen_responses_sit_at_half(instance) -> None:
    _, p_ref, P = instance
    w, l = sft.sample_pairs(np.random.default_rng(13), P, p_ref, 400_000)
    w_hat = ex.empirical_win_vector(dpo.pair_weights(w, l, 8))
    np.testing.assert_allclose(w_hat, pr.win_vector(P, p_ref), atol=0.01)
    C = dpo.pair_weights(np.array([0, 0]), np.array([1, 1]), 4)
    np.testing.assert_allclose(ex.empirical_win_vector(C), [1.0, 0.0, 0.5, 0.5])


def test_e3_arms_share_instances_and_wro_ascends_its_own_objective() -> None:
    arms = ex.e3_dpo(0, 6, 8, 50, 0.1, 1.0, 400)
    assert set(arms) == set(ex.E3_ARMS)
    for c in arms.values():  # same start (p_ref: WR 1/2) and the same recorded steps
        np.testing.assert_allclose(c.wr[:, 0], 0.5, atol=1e-12)
        np.testing.assert_array_equal(c.steps, arms["dpo"].steps)
    assert np.all(np.diff(arms["wro"].loss, axis=1) <= 1e-12)  # ascent on the empirical WRO objective
    assert not np.allclose(arms["wro"].wr, arms["dpo"].wr)


def test_partial_r_squared_matches_statsmodels_and_the_shuffled_null_explains_little() -> None:
    rng = np.random.default_rng(14)
    base = pg.one_hot(rng.integers(0, 4, 300).astype(str))
    extra = rng.normal(size=(300, 1))
    y = base @ np.array([1.0, -1.0, 0.5]) + 2.0 * extra[:, 0] + rng.normal(size=300)
    full = sm.OLS(y, sm.add_constant(np.column_stack([base, extra]))).fit()
    reduced = sm.OLS(y, sm.add_constant(base)).fit()
    assert np.isclose(ex.partial_r_squared(y, base, extra), 1 - full.ssr / reduced.ssr, atol=1e-12)
    grid = ex.ParamGrid(("id", "logit"), (0.1, 0.2), (5, 30), (0.1, 0.3), (4,), 3, ref_steps=300)
    r2 = ex.e4_r_squared(ex.e4_instance(0, 16, 3, 6, grid), 0)
    assert r2["success_given_budget"] > r2["shuffled_given_budget"] + 0.2
    assert 0.0 <= r2["budget"] <= 1.0 and r2["expected"] <= r2["onehot"] + 1e-12


def test_e2_table_reads_zero_for_rlhf_against_the_logit_win_rate() -> None:
    t = ex.e2_table(0, 2, 10, (0.3,), (0.1,), 80)
    np.testing.assert_allclose(t["rlhf_vs_logit_wr"], 0.0)
    np.testing.assert_allclose(t["rlhf_every_h"], 0.0)
    np.testing.assert_allclose(t["wro_vs_wr"], 0.0)
    assert np.all(t["dpo_every_h"] <= t[["dpo_vs_wr", "dpo_vs_log_wr", "dpo_vs_logit_wr"]].min(axis=1) + 1e-15)
    assert np.all(t["dpo_every_h"] > 0)


def test_mlp_driver_shares_the_grid_table() -> None:
    grid = ex.ParamGrid(("id", "logit"), (0.1,), (3,), (0.1,), (4,), 2, ref_steps=20, ref_lr=0.01)
    mlp = paper_preset.e4_instance_mlp(0, 8, 3, 5, grid, 8, torch.device("cpu"))
    lin = ex.e4_instance(0, 8, 3, 5, grid)
    assert list(mlp.columns) == list(lin.columns) and len(mlp) == len(lin)
    assert mlp["ref_grad"].isna().all() and mlp["success"].notna().all()


def test_iterated_sft_never_lowers_the_win_rate_under_bt() -> None:
    """Why ``iterated-sft`` is a check: under BT the update ``p <- 2 p (P p)`` cannot lower the win rate."""
    rng = np.random.default_rng(15)
    r, xi = rng.standard_normal((2, 2000, 12))
    P, p_ref = pr.bt_matrix(r), pr.policy(xi * rng.uniform(0.25, 4.0, (2000, 1)))
    wr = pr.win_rate(sft.iterated_sft(P, p_ref, 5), P, p_ref)
    assert np.all(np.diff(np.concatenate([np.full((1, 2000), 0.5), wr]), axis=0) >= -1e-12)


def test_reinforce_blocks_of_runs_do_not_change_the_estimate(monkeypatch) -> None:
    """Runs are processed in cache-sized blocks; the estimate must not depend on the block size."""
    rng = np.random.default_rng(16)
    phi, _, p_ref, P = pr.contextual_instance(rng, 12, 3, 6)
    hP = np.stack([pr.H_FUNCTIONS[h](np.clip(P, pr.CLIP, 1 - pr.CLIP)) for h in ("id", "log")])
    theta = rng.normal(size=(10, 3, 6))
    args = (theta, phi, np.log(p_ref), hP, np.arange(10) % 2, np.linspace(0.05, 0.5, 10), 8)
    whole = pg.reinforce_gradient(*args, np.random.default_rng(17))
    monkeypatch.setattr(pg, "CACHE_ENTRIES", 3 * 8 * 6)  # blocks of 3 runs, the last one short
    np.testing.assert_array_equal(pg.reinforce_gradient(*args, np.random.default_rng(17)), whole)


def test_e2_shell_scored_at_several_betas_equals_one_beta_at_a_time() -> None:
    both = ex.e2_table(0, 2, 10, (0.3,), (0.1, 0.5), 60)
    for beta in (0.1, 0.5):
        alone = ex.e2_table(0, 2, 10, (0.3,), (beta,), 60)
        pd.testing.assert_frame_equal(both[both["beta"] == beta].reset_index(drop=True), alone)
