"""Unit checks of the JSAE reproduction: the efficient Jacobian, the SAE pair and the metrics."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from companion.papers.jsae.byte_lm import block_mlp, byte_gpt2, mean_ce, train_byte_lm
from companion.models.topk_sae import TopKSAE, constrained_step
from companion import claims
from companion.params import ParamError
from companion.papers import jsae
from companion.papers.jsae import experiment as ex
from hf_tiny import run_paper_smoke, save_word_tokenizer

D, M, N, K, B = 8, 32, 64, 4, 16


def random_setup(dtype: torch.dtype = torch.float32, act: str = "gelu_new", seed: int = 0):
    """A random MLP, two random TopK SAEs and a batch of inputs and outputs."""
    gen = torch.Generator().manual_seed(seed)
    mlp = ex.Mlp(torch.randn(D, M, generator=gen) / D**0.5, 0.1 * torch.randn(M, generator=gen),
                 torch.randn(M, D, generator=gen) / M**0.5, 0.1 * torch.randn(D, generator=gen), act)
    mlp = ex.Mlp(*(t.to(dtype) for t in (mlp.w_in, mlp.b_in, mlp.w_out, mlp.b_out)), act)
    sae_x, sae_y = TopKSAE(D, N, K, gen).to(dtype), TopKSAE(D, N, K, gen).to(dtype)
    with torch.no_grad():
        for sae in (sae_x, sae_y):
            sae.b_enc.add_(0.5)  # keep the kept pre-activations positive
            sae.W_enc.add_(0.1 * torch.randn(sae.W_enc.shape, generator=gen, dtype=dtype))
    x = torch.randn(B, D, generator=gen).to(dtype)
    return mlp, sae_x, sae_y, x, mlp(x)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_efficient_jacobian_equals_jacrev_at_reconstruction(dtype, tol):
    mlp, sae_x, sae_y, x, y = random_setup(dtype)
    with torch.no_grad():
        s_x, idx_x = sae_x.encode(x)
        idx_y = sae_y.encode(y)[1]
        fast = ex.active_jacobian(sae_x, sae_y, mlp, sae_x.decode(s_x), idx_x, idx_y)
    slow = ex.naive_jacobian(sae_x, sae_y, mlp, s_x, idx_x, idx_y)
    assert fast.shape == (B, K, K)
    assert (fast - slow).abs().max() < tol
    assert fast.abs().max() > 1e-3  # the comparison is not between two zero tensors


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_efficient_jacobian_equals_jacrev_of_the_map_linearised_at_the_true_input(dtype, tol):
    """phi' at x (what the metrics use) against autograd of s -> pre_y(f(x + (s - s_x) W_dec)), full and block."""
    mlp, sae_x, sae_y, x, y = random_setup(dtype)
    with torch.no_grad():
        s_x, idx_x = sae_x.encode(x)
        idx_y = sae_y.encode(y)[1]
        fast = ex.active_jacobian(sae_x, sae_y, mlp, x, idx_x, idx_y)
        at_hat = ex.active_jacobian(sae_x, sae_y, mlp, sae_x.decode(s_x), idx_x, idx_y)
    for naive in (ex.naive_jacobian, ex.naive_active_jacobian):
        assert (fast - naive(sae_x, sae_y, mlp, s_x, idx_x, idx_y, x_at=x)).abs().max() < tol
    assert (fast - at_hat).abs().max() > 1e-4  # the two linearisation points differ here
    acts = ex.Acts(x, y, x, y, mlp, 1.0, 1.0)
    assert ex.exactness_and_speed(sae_x, sae_y, acts, full_map=False)[0] < tol
    assert ex.exactness_and_speed(sae_x, sae_y, acts, full_map=False, phi_at_reconstruction=True)[0] < tol


def test_official_phi_point_is_the_reconstruction():
    mlp, sae_x, sae_y, x, y = random_setup(torch.float64)
    with torch.no_grad():
        s_x, idx_x = sae_x.encode(x)
        x_hat = sae_x.decode(s_x)
        idx_y = sae_y.encode(y)[1]
        at_x = ex.active_jacobian(sae_x, sae_y, mlp, x, idx_x, idx_y)
        at_hat = ex.active_jacobian(sae_x, sae_y, mlp, x_hat, idx_x, idx_y)
        lam = 0.7
        gap = (ex.pair_loss(sae_x, sae_y, mlp, x, y, lam, phi_at_reconstruction=True)
               - ex.pair_loss(sae_x, sae_y, mlp, x, y, lam, phi_at_reconstruction=False))
    assert (at_x - at_hat).abs().max() > 1e-4  # imperfect reconstruction: different points
    assert float(gap) == pytest.approx(lam * float(at_hat.abs().mean() - at_x.abs().mean()), abs=1e-12)
    assert abs(float(gap)) > 1e-6


def test_linear_mlp_jacobian_is_product_of_weights():
    mlp, sae_x, sae_y, x, y = random_setup(torch.float64, act="identity")
    p, qt = ex.weight_products(sae_x, sae_y, mlp)
    with torch.no_grad():
        idx_x, idx_y = sae_x.encode(x)[1], sae_y.encode(y)[1]
        jac = ex.active_jacobian(sae_x, sae_y, mlp, x, idx_x, idx_y)
        other = ex.active_jacobian(sae_x, sae_y, mlp, 5 * x + 1, idx_x, idx_y)
    for b in range(B):
        expected = qt[idx_y[b]] @ p[idx_x[b]].T
        assert torch.allclose(jac[b], expected, atol=1e-12)
    assert torch.allclose(jac, other, atol=1e-12)  # independent of the linearisation point


def test_bmm_path_equals_einsum_path():
    mlp, sae_x, sae_y, x, y = random_setup()
    p, qt = ex.weight_products(sae_x, sae_y, mlp)
    with torch.no_grad():
        idx_x, idx_y = sae_x.encode(x)[1], sae_y.encode(y)[1]
        dphi = mlp.dphi(x)
        fast = ex.jacobian_from_products(p, qt, dphi, idx_x, idx_y)
        ref = torch.einsum("bia,ba,bja->bij", qt[idx_y], dphi, p[idx_x])
    assert (fast - ref).abs().max() < 1e-6


def test_gelu_new_grad_matches_autograd_and_transformers():
    from transformers.activations import NewGELUActivation

    z = torch.linspace(-6, 6, 401, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(ex.gelu_new(z).sum(), z)
    assert torch.allclose(ex.gelu_new_grad(z), auto, atol=1e-12)
    assert torch.allclose(ex.gelu_new(z), NewGELUActivation()(z), atol=1e-12)


def test_folded_mlp_matches_gpt2_block():
    model = byte_gpt2(1, 32, 64, seed=0, context=16)
    _, mlp = block_mlp(model, 0)
    x = torch.randn(10, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(ex.folded_mlp(mlp, 1.0, 1.0)(x), mlp(x), atol=1e-5)
        assert torch.allclose(ex.folded_mlp(mlp, 2.0, 4.0)(x / 2.0), mlp(x) / 4.0, atol=1e-5)


def test_topk_encoder():
    _, sae_x, _, x, _ = random_setup()
    with torch.no_grad():
        pre = sae_x.pre(x)
        s, idx = sae_x.encode(x)
    kept = torch.gather(pre, 1, idx)
    assert (kept > 0).all()
    assert ((s != 0).sum(1) == K).all()
    assert (s >= 0).all()
    nz = [sorted(torch.nonzero(row).flatten().tolist()) for row in s]
    assert nz == [sorted(r.tolist()) for r in idx]
    assert torch.equal(torch.gather(s, 1, idx), kept)
    with torch.no_grad():
        assert torch.allclose(sae_x.decode_topk(*sae_x.topk(x)), sae_x.decode(s), atol=1e-5)


def test_decoder_stays_unit_norm_and_parallel_gradient_removed():
    mlp, sae_x, sae_y, x, y = random_setup()
    opt = torch.optim.Adam([*sae_x.parameters(), *sae_y.parameters()], lr=1e-2)
    before = [sae.W_dec.detach().clone() for sae in (sae_x, sae_y)]
    ex.pair_loss(sae_x, sae_y, mlp, x, y, 1.0).backward()
    raw_dot = max(float((s.W_dec.grad * w).sum(1).abs().max()) for s, w in zip((sae_x, sae_y), before))
    constrained_step([sae_x, sae_y], opt)
    assert raw_dot > 1e-3  # there was a parallel component to remove
    for sae, w in zip((sae_x, sae_y), before):
        assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(N), atol=1e-6)
        assert (sae.W_dec.grad * w).sum(1).abs().max() < 1e-6
        assert not torch.equal(sae.W_dec.detach(), w)


def test_lambda_zero_pair_equals_two_independent_saes():
    params = jsae.Params.resolve("quick", sae_steps=200, sae_batch=128, expansion=8, k=4)
    gen = torch.Generator().manual_seed(0)
    mlp = ex.Mlp(torch.randn(32, 64, generator=gen) / 6, torch.zeros(64),
                   torch.randn(64, 32, generator=gen) / 8, torch.zeros(32))
    x = torch.randn(300, 32, generator=gen)
    y = mlp(x)
    pair = ex.train_pair(x, y, mlp, 0.0, params, np.random.default_rng(5), torch.Generator().manual_seed(9))
    g = torch.Generator().manual_seed(9)
    saes = [TopKSAE(32, 256, 4, g), TopKSAE(32, 256, 4, g)]
    opts = [torch.optim.Adam(s.parameters(), lr=params.sae_lr) for s in saes]
    rng = np.random.default_rng(5)
    for step in range(params.sae_steps):
        idx = torch.from_numpy(rng.integers(0, len(x), size=params.sae_batch))
        for sae, opt, data in zip(saes, opts, (x, y)):
            opt.param_groups[0]["lr"] = params.sae_lr * ex.lr_factor(step, params.sae_steps)
            opt.zero_grad()
            torch.nn.functional.mse_loss(sae(data[idx]), data[idx]).backward()
            constrained_step([sae], opt)
    for ours, ref in zip(pair, saes):
        for a, b in zip(ours.parameters(), ref.parameters()):
            assert torch.allclose(a, b, atol=1e-6)


def test_normalisation_folding_scales_jacobian():
    gen = torch.Generator().manual_seed(2)
    raw = ex.Mlp(torch.randn(D, M, generator=gen), torch.zeros(M), torch.randn(M, D, generator=gen),
                   torch.zeros(D))
    c_x, c_y = 3.0, 0.05
    folded = ex.Mlp(raw.w_in * c_x, raw.b_in, raw.w_out / c_y, raw.b_out / c_y)
    _, sae_x, sae_y, _, _ = random_setup(torch.float32)
    x_raw = torch.randn(B, D, generator=gen)
    idx_x = torch.randint(0, N, (B, K), generator=gen)
    idx_y = torch.randint(0, N, (B, K), generator=gen)
    with torch.no_grad():
        j_norm = ex.active_jacobian(sae_x, sae_y, folded, x_raw / c_x, idx_x, idx_y)
        j_raw = ex.active_jacobian(sae_x, sae_y, raw, x_raw, idx_x, idx_y)
    assert torch.allclose(j_norm, (c_x / c_y) * j_raw, rtol=1e-4, atol=1e-4)


def test_pair_loss_penalty_is_lambda_times_mean_abs_jacobian_and_differentiable():
    mlp, sae_x, sae_y, x, y = random_setup(torch.float64)
    with torch.no_grad():
        idx_x, idx_y = sae_x.encode(x)[1], sae_y.encode(y)[1]
        jac = ex.active_jacobian(sae_x, sae_y, mlp, x, idx_x, idx_y)
        base = ex.pair_loss(sae_x, sae_y, mlp, x, y, 0.0)
        for lam in (0.5, 2.0):
            pen = ex.pair_loss(sae_x, sae_y, mlp, x, y, lam) - base
            assert float(pen) == pytest.approx(lam * float(jac.abs().mean()), rel=1e-10)
    w = sae_y.W_enc
    loss = ex.pair_loss(sae_x, sae_y, mlp, x, y, 1.0)
    (grad,) = torch.autograd.grad(loss, w)
    direction = torch.randn(w.shape, generator=torch.Generator().manual_seed(1), dtype=w.dtype)
    eps = 1e-6
    with torch.no_grad():
        w.add_(eps * direction)
        up = ex.pair_loss(sae_x, sae_y, mlp, x, y, 1.0)
        w.sub_(2 * eps * direction)
        down = ex.pair_loss(sae_x, sae_y, mlp, x, y, 1.0)
        w.add_(eps * direction)
    assert float((up - down) / (2 * eps)) == pytest.approx(float((grad * direction).sum()), rel=1e-5)


def test_ce_score_identity_and_zero_ablation():
    model = byte_gpt2(2, 32, 64, seed=0, context=16)
    windows = np.random.default_rng(0).integers(0, 256, size=(8, 16))
    ln, mlp = block_mlp(model, 1)
    clean = mean_ce(model, windows, {})
    zero = mean_ce(model, windows, {mlp: torch.zeros_like})
    identity = mean_ce(model, windows, {ln: lambda o: o.clone(), mlp: lambda o: o.clone()})
    assert zero != pytest.approx(clean)
    assert ex.ce_score(clean, identity, zero) == pytest.approx(1.0, abs=1e-6)
    assert ex.ce_score(clean, zero, zero) == 0.0


def test_random_lm_is_deterministic_and_differs_from_other_seeds():
    a, b, c = byte_gpt2(1, 32, 64, seed=7), byte_gpt2(1, 32, 64, seed=7), byte_gpt2(1, 32, 64, seed=8)
    wa, wb, wc = (m.transformer.h[0].mlp.c_fc.weight for m in (a, b, c))
    assert torch.equal(wa, wb)
    assert not torch.allclose(wa, wc)


def test_train_pair_is_deterministic_under_a_seed():
    params = jsae.Params.resolve("quick", sae_steps=200, sae_batch=128, k=4)
    mlp, *_ = random_setup()
    x = torch.randn(256, D, generator=torch.Generator().manual_seed(1))
    y = mlp(x)
    runs = [ex.train_pair(x, y, mlp, 1.0, params, np.random.default_rng(s), torch.Generator().manual_seed(s))
            for s in (3, 3, 4)]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][0].parameters(), runs[1][0].parameters()))
    assert not torch.equal(runs[0][0].W_dec, runs[2][0].W_dec)


@pytest.mark.parametrize("bad", [{"nope": 1}, {"k": 2.5}, {"k": 2}, {"jac_coef": -1.0},
                                 {"hook_layer": 2}, {"d_mlp": 1024}, {"thresholds": (0.0,)},
                                 {"frontier_coef": 1.0}])
def test_params_reject_bad_values(bad):
    with pytest.raises(ParamError):
        jsae.Params.resolve("quick", **bad)


def test_frontier_coef_is_checked_under_every_preset_and_the_page_rerun_example_resolves():
    """frontier_coef <= jac_coef is refused before the paper branch (which otherwise returns early), and the
    page's rerun example (jac_coef 3 needs a larger frontier_coef) resolves."""
    for preset in ("quick", "full", "paper"):
        with pytest.raises(ParamError, match="frontier_coef"):
            jsae.Params.resolve(preset, jac_coef=3.0)
    page = (Path(__file__).resolve().parents[1] / "notebooks" / "jsae.ipynb").read_text()
    examples = re.findall(r"companion run jsae((?: -p \w+=[\w.]+)+)", page)
    assert examples
    for example in examples:
        overrides = dict(arg.split("=") for arg in example.split(" -p ")[1:])
        p = jsae.Params.resolve("quick", **{k: (int if k == "seeds" else float)(v) for k, v in overrides.items()})
        assert p.frontier_coef > p.jac_coef


def test_params_presets_resolve():
    for preset in ("quick", "full"):
        p = jsae.Params.resolve(preset)
        assert p.k <= p.expansion * p.d_model and p.hook_layer < p.lm_layers


def test_lm_training_stops_at_the_target_loss():
    data = np.random.default_rng(0).integers(0, 256, size=5000)
    model = byte_gpt2(1, 32, 64, seed=0, context=ex.CONTEXT)
    rng = np.random.default_rng(1)
    loss, steps = train_byte_lm(model, data, 8, rng, 6.0, batch=2, window=3)
    assert steps == 3 and loss <= 6.0  # an untrained byte LM starts near ln 256 = 5.5
    _, steps = train_byte_lm(model, data, 8, rng, 0.0, batch=2, window=3)
    assert steps == 8  # an unreachable target: every allowed step is taken


def test_in_run_exactness_and_speed_check():
    mlp, sae_x, sae_y, x, y = random_setup()
    acts = ex.Acts(x, y, x, y, mlp, 1.0, 1.0)
    err, speedup = ex.exactness_and_speed(sae_x, sae_y, acts)
    assert err < 1e-5 and speedup > 1.0
    untimed = ex.exactness_and_speed(sae_x, sae_y, acts, timed=False)  # the seeds after the first: error only
    assert untimed[0] == err and np.isnan(untimed[1])


def oracle_pair_loss(sae_x: TopKSAE, sae_y: TopKSAE, mlp: ex.Mlp, x: torch.Tensor, y: torch.Tensor, lam: float,
                     at_reconstruction: bool) -> torch.Tensor:
    """The pair loss from autograd's dense n x n Jacobian of the latent map, one token at a time.

    phi' at x_hat: the map s -> pre_y(f(d_x(s))) itself. phi' at the true x (official): the map
    s -> pre_y(f(x + (s - s_x) W_dec)), whose linearisation point is x and does not move with the weights.
    """
    s_x, idx_x = sae_x.encode(x)
    s_y, idx_y = sae_y.encode(y)
    loss = F.mse_loss(sae_x.decode(s_x), x) + F.mse_loss(sae_y.decode(s_y), y)
    blocks = []
    for b in range(len(x)):
        if at_reconstruction:
            def latent_map(s):
                return sae_y.pre(mlp(sae_x.decode(s[None])))[0]
            point = s_x[b]
        else:
            def latent_map(s, b=b):
                return sae_y.pre(mlp(x[b][None] + (s - s_x[b].detach())[None] @ sae_x.W_dec))[0]
            point = s_x[b].detach()
        full = torch.autograd.functional.jacobian(latent_map, point, create_graph=True)  # (n_y, n_x)
        blocks.append(full[idx_y[b]][:, idx_x[b]])
    return loss + lam * torch.stack(blocks).abs().mean()


@pytest.mark.parametrize("at_reconstruction", [False, True])
def test_training_loss_and_gradients_equal_a_dense_jacrev_oracle(at_reconstruction):
    """The training step's loss (phi' cached or not) against :func:`oracle_pair_loss`, values and every gradient."""
    mlp, sae_x, sae_y, x, y = random_setup(torch.float64)
    params = [*sae_x.parameters(), *sae_y.parameters()]
    runs = []
    for fn in (lambda: oracle_pair_loss(sae_x, sae_y, mlp, x, y, 1.5, at_reconstruction),
               lambda: ex.pair_loss(sae_x, sae_y, mlp, x, y, 1.5, at_reconstruction),
               lambda: ex.pair_loss(sae_x, sae_y, mlp, x, y, 1.5, at_reconstruction, dphi=mlp.dphi(x))):
        loss = fn()
        runs.append([loss.detach(), *torch.autograd.grad(loss, params)])
    assert runs[0][0] > ex.pair_loss(sae_x, sae_y, mlp, x, y, 0.0) + 1e-3  # the penalty is not zero
    assert all(g.abs().max() > 1e-6 for g in runs[0][1:])
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)


def _pair(frac01: float, l1l2: float, dead: float = 0.0, ce: float = 0.9) -> ex.PairEval:
    """A pair's held-out metrics with the fields the claims read."""
    return ex.PairEval((frac01,) * 4, frac01, l1l2, 0.05, 0.03, dead, dead, ce)


# per seed, (frac, l1l2) of: SAE, JSAE, twin SAE, second twin SAE, frontier JSAE (lambda = 3), random-LM JSAE,
# random-LM SAE, second random LM's JSAE and SAE
CONDS = ("sae", "jsae", "sae-twin", "sae-twin2", "jsae-hi", "jsae-random", "sae-random", "jsae-random2", "sae-random2")
ROWS = [((0.9, 0.76), (0.5, 0.63), (0.88, 0.75), (0.89, 0.76), (0.3, 0.6), (0.85, 0.60), (0.95, 0.70), (0.84, 0.61),
         (0.95, 0.70)),
        ((0.9, 0.78), (0.52, 0.62), (0.91, 0.77), (0.9, 0.78), (0.31, 0.6), (0.86, 0.61), (0.93, 0.69), (0.85, 0.60),
         (0.94, 0.70)),
        ((0.8, 0.70), (0.48, 0.64), (0.82, 0.72), (0.80, 0.71), (0.28, 0.6), (0.84, 0.59), (0.94, 0.71), (0.86, 0.60),
         (0.93, 0.70))]
CE = {"sae": 0.97, "jsae": 0.95, "sae-twin": 0.965, "sae-twin2": 0.972, "jsae-hi": 0.90}  # per condition, every seed


def _results(rows: list, ce: dict | None = None) -> ex.Results:
    """Results whose per-seed pairs carry the given (frac, l1l2) of every condition and CE-loss scores ``ce``."""
    ce = CE if ce is None else ce
    res = ex.Results(jsae.Params.resolve("quick"), 2.6, 300, {"clean": 2.6, "zero_in": 2.8, "zero_out": 2.8})
    for row in rows:
        res.per_seed.append({c: _pair(f, l, {"sae": 0.3, "jsae": 0.5}.get(c, 0.0), ce.get(c, float("nan")))
                             for c, (f, l) in zip(CONDS, row)})
    res.exact_err, res.speedup = [1e-7, 3e-7, 2e-7], [400.0, 500.0, 450.0]
    return res


def test_claims_read_the_conditions_controls_and_every_seed_rows_take_the_worst_seed():
    v = {x.id: x for x in jsae.check(_results(ROWS))}
    assert list(v) == [c.id for c in jsae.CLAIMS]
    drop = v["penalty-drop"]
    np.testing.assert_allclose(drop.per_seed, [0.4, 0.38, 0.32], atol=1e-12)
    random, twin_drop = drop.controls
    np.testing.assert_allclose(random.per_seed, [0.10, 0.07, 0.10], atol=1e-12)  # random SAE - random JSAE
    np.testing.assert_allclose(twin_drop.per_seed, [0.02, -0.01, -0.02], atol=1e-12)  # SAE - twin SAE
    assert drop.verdict == "HOLDS" and random.verdict == "FAILS" and twin_drop.verdict == "FAILS"
    assert drop.discriminates
    l1l2_random = v["l1l2-sparser"].controls[1]
    np.testing.assert_allclose(l1l2_random.per_seed, [0.10, 0.08, 0.12], atol=1e-12)
    assert l1l2_random.verdict == "HOLDS" and not v["l1l2-sparser"].discriminates  # the random LM sparsifies too
    twin = v["jac-sparser"].controls[0]  # the twin SAE over this seed's SAE, same seed
    np.testing.assert_allclose(twin.per_seed, [0.88 / 0.9, 0.91 / 0.9, 0.82 / 0.8], atol=1e-12)
    np.testing.assert_allclose(v["l1l2-sparser"].controls[0].per_seed, [0.01, 0.01, -0.02], atol=1e-12)
    paired = v["drop-vs-random"]  # trained drop minus random drop; control: random minus second random
    np.testing.assert_allclose(paired.per_seed, [0.30, 0.31, 0.22], atol=1e-12)
    np.testing.assert_allclose(paired.controls[0].per_seed, [-0.01, -0.02, 0.03], atol=1e-12)
    assert paired.controls[0].name == "random2" and paired.controls[0].verdict == "FAILS"
    np.testing.assert_allclose(v["drop-vs-random-l1l2"].per_seed, [0.03, 0.08, -0.06], atol=1e-12)
    np.testing.assert_allclose(v["drop-vs-random-l1l2"].controls[0].per_seed, [0.01, -0.02, 0.02], atol=1e-12)
    every = v["jac-sparser-every"]  # judged on the worst seed, every seed's value kept, the control's too
    assert every.kind == "every" and every.interval is None and every.value == pytest.approx(0.48 / 0.8)
    np.testing.assert_allclose(every.per_seed, [0.5 / 0.9, 0.52 / 0.9, 0.48 / 0.8], atol=1e-12)
    np.testing.assert_allclose(every.controls[0].per_seed, twin.per_seed, atol=1e-12)
    assert every.controls[0].value == pytest.approx(0.82 / 0.8) and every.controls[0].verdict == "FAILS"
    assert v["l1l2-sparser-every"].value == pytest.approx(min(0.76 - 0.63, 0.78 - 0.62, 0.70 - 0.64))
    assert v["l1l2-sparser-every"].kind == "every" and len(v["l1l2-sparser-every"].controls[0].per_seed) == 3
    assert v["jac-exact"].value == 3e-7 and v["jac-exact"].per_seed == (1e-7, 3e-7, 2e-7)
    assert "jac-speedup" not in v
    checks = {c.id for c in jsae.CLAIMS if c.role == "check"}
    assert checks == {"ce-kept", "ce-jsae", "fvu-jsae", "jac-exact", "frontier"}
    assert all(c.kind != "exact" for c in jsae.CLAIMS)  # every worst-seed row keeps its seeds
    m = ex.metrics(_results(ROWS))
    assert m["jsae.dead_out"] == 0.5 and m["sae.dead_in"] == 0.3 and m["jsae-random.dead_in"] == 0.0
    table = claims.seed_table(list(v.values()), [0, 1, 2])
    assert table.loc[("drop-vs-random", "control random2")].tolist() == pytest.approx([-0.01, -0.02, 0.03])
    assert table.loc[("jac-sparser-every", "control sae-twin")].tolist() == pytest.approx(list(twin.per_seed))


def test_frontier_is_the_smallest_fall_and_a_check_without_controls():
    """The frontier row takes, per seed, the smallest of the four successive falls (frac and CE along lambda = 0, 1,
    3). It is a check: where the CE fall from lambda 0 to 1 is the smallest, its value is minus ce-kept in that
    seed, so it says nothing beyond ce-kept; it carries no control."""
    v = {x.id: x for x in jsae.check(_results(ROWS))}
    front = v["frontier"]  # CE falls 0.02 then 0.05; frac falls at least 0.17 per step
    assert front.role == "check" and front.kind == "every" and front.controls == ()
    np.testing.assert_allclose(front.per_seed, [0.02, 0.02, 0.02], atol=1e-12)
    np.testing.assert_allclose(front.per_seed, [-x for x in v["ce-kept"].per_seed], atol=1e-12)
    assert front.verdict == "HOLDS"
    v = {x.id: x for x in jsae.check(_results(ROWS, {**CE, "jsae": 0.98}))}  # CE rises at lambda = 1
    assert v["frontier"].verdict == "FAILS" and v["frontier"].value == pytest.approx(-0.01)
    assert np.isnan(ex.frontier_falls([np.array([0.9]), np.array([0.5]), np.array([0.3])],
                                      [np.array([0.9]), np.array([np.nan]), np.array([0.8])])[0])
    assert "frontier" not in set(claims.seed_table(list(v.values()), [0, 1, 2]).index.get_level_values(0))


def test_conditions_carry_their_seed_offsets():
    p = jsae.Params.resolve("quick")
    rnd = ex.random_conditions(p)
    assert rnd == [("jsae-random", 1.0, 0, ex.RANDOM_LM_SEED), ("sae-random", 0.0, 0, ex.RANDOM_LM_SEED),
                   ("jsae-random2", 1.0, 0, ex.RANDOM_LM2_SEED), ("sae-random2", 0.0, 0, ex.RANDOM_LM2_SEED)]
    quick = {c.name: (c.lam, c.sae_offset, c.lm_offset) for c in ex.trained_conditions(p)}
    assert quick == {"sae": (0.0, 0, None), "jsae": (1.0, 0, None), "sae-twin": (0.0, ex.TWIN_SEED, None)}
    trained = {c.name: (c.lam, c.sae_offset, c.lm_offset)
               for c in ex.trained_conditions(jsae.Params.resolve("full"))}
    assert trained == {**quick, "jsae-hi": (3.0, 0, None), "sae-twin2": (0.0, ex.TWIN2_SEED, None)}
    assert set(ex.CONDITIONS) == set(trained) | {c.name for c in rnd}
    from companion.papers.jsae import plots

    assert set(plots.LABELS) == set(ex.CONDITIONS)


def test_the_twin_and_second_random_controls_can_hold():
    """Nothing ties a control to its finding: a twin as sparse as the JSAE, or two random LMs whose drops differ
    by more than the bar, make the controls hold and the findings stop discriminating."""
    rows = [list(r) for r in ROWS]
    for r in rows:
        r[2] = r[1]  # the twin SAE as sparse as the JSAE
    v = {x.id: x for x in jsae.check(_results(rows))}
    assert v["jac-sparser"].controls[0].verdict == "HOLDS" and not v["jac-sparser"].discriminates
    assert v["penalty-drop"].controls[1].verdict == "HOLDS" and not v["penalty-drop"].discriminates
    rows = [list(r) for r in ROWS]
    for r in rows:
        r[5] = (r[6][0] - 0.4, r[5][1])  # the first random LM's penalty removes as much as the trained LM's
    v = {x.id: x for x in jsae.check(_results(rows))}
    assert v["drop-vs-random"].controls[0].verdict == "HOLDS" and not v["drop-vs-random"].discriminates


def test_affine_r2_is_one_for_an_affine_map_and_low_for_a_nonlinear_one():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2000, 8, generator=gen)
    y = x @ torch.randn(8, 5, generator=gen) + 2.0
    assert ex.affine_r2(x, y) == pytest.approx(1.0, abs=1e-12)
    assert ex.affine_r2(x, x.abs()) < 0.2  # |x| has no linear part for symmetric x
    noisy = y + torch.randn(2000, 5, generator=gen) * y.std(0)
    assert 0.3 < ex.affine_r2(x, noisy) < 0.7  # signal and noise of equal variance: R^2 about 1/2


# --- the paper preset: a local GPT-NeoX checkpoint and corpus ----------------------------------

WORDS = ("the model reads a token and writes the next one while every layer adds a little to the "
         "residual stream so that sparse features can be read from it by an autoencoder").split()


def tiny_neox(vocab: int, layers: int = 4):
    """A tiny random GPT-NeoX (Pythia's architecture class), seeded."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    config = GPTNeoXConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                           intermediate_size=128, max_position_embeddings=128, hidden_act="gelu",
                           eos_token_id=1, bos_token_id=1)
    return GPTNeoXForCausalLM(config).eval()


@pytest.fixture(scope="module")
def neox_and_corpus(tmp_path_factory):
    """A tiny random GPT-NeoX with a word-level tokenizer, and a corpus of .txt and .jsonl files, saved offline."""
    import json


    root = tmp_path_factory.mktemp("jsae_paper")
    llm = root / "pythia"
    vocab = save_word_tokenizer(llm, ["[UNK]", "<|endoftext|>", *sorted(set(WORDS))], eos_token="<|endoftext|>")
    tiny_neox(len(vocab)).save_pretrained(llm)
    rng = np.random.default_rng(0)
    data = root / "pile"
    data.mkdir()
    for i in range(2):
        (data / f"doc{i}.txt").write_text(" ".join(rng.choice(WORDS, 1500)))
    (data / "part.jsonl").write_text("".join(json.dumps({"text": " ".join(rng.choice(WORDS, 400))}) + "\n"
                                             for _ in range(5)))
    return llm, data


def test_gelu_grad_matches_autograd():
    z = torch.linspace(-6, 6, 401, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(torch.nn.functional.gelu(z).sum(), z)
    assert torch.allclose(ex.gelu_grad(z), auto, atol=1e-12)


def test_folded_mlp_and_hooks_match_a_neox_block():
    from companion.papers.jsae.byte_lm import mlp_io

    model = tiny_neox(20, layers=2)
    ln, mlp = block_mlp(model, 1)
    assert ln is model.gpt_neox.layers[1].post_attention_layernorm
    x = torch.randn(10, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(ex.folded_mlp(mlp, 1.0, 1.0, "gelu")(x), mlp(x), atol=1e-5)
        assert torch.allclose(ex.folded_mlp(mlp, 2.0, 4.0, "gelu")(x / 2.0), mlp(x) / 4.0, atol=1e-5)
    windows = np.random.default_rng(0).integers(0, 20, size=(3, 16))
    xs, ys = mlp_io(model, 1, windows)
    assert xs.shape == ys.shape == (48, 32)
    with torch.no_grad():
        assert torch.allclose(mlp(xs), ys, atol=1e-5)  # the hooks read the MLP's own input and output


def test_active_block_jacrev_equals_the_full_map_jacrev():
    mlp, sae_x, sae_y, x, y = random_setup(torch.float64)
    with torch.no_grad():
        s_x, idx_x = sae_x.encode(x)
        idx_y = sae_y.encode(y)[1]
    full = ex.naive_jacobian(sae_x, sae_y, mlp, s_x, idx_x, idx_y)
    block = ex.naive_active_jacobian(sae_x, sae_y, mlp, s_x, idx_x, idx_y)
    assert block.shape == (B, K, K) and full.abs().max() > 1e-3
    torch.testing.assert_close(block, full, rtol=1e-12, atol=1e-12)
    acts = ex.Acts(x, y, x, y, mlp, 1.0, 1.0)
    err, speed = ex.exactness_and_speed(sae_x, sae_y, acts, full_map=False)
    assert err < 1e-10 and np.isnan(speed)


def test_corpus_is_read_tokenised_and_cut_into_contexts(neox_and_corpus, tmp_path):
    from transformers import AutoTokenizer

    from companion.papers.jsae import paper_preset

    llm, data = neox_and_corpus
    tok = AutoTokenizer.from_pretrained(llm, local_files_only=True)
    files = paper_preset.corpus_files(str(data))
    assert [f.name for f in files] == ["doc0.txt", "doc1.txt", "part.jsonl"]
    w = paper_preset.token_windows(tok, files, 50, 64)
    assert w.shape == (50, 64) and w.dtype == np.int64
    flat = w.flatten()
    assert flat[1500] == tok.eos_token_id and flat[3001] == tok.eos_token_id  # EOS after each document
    assert (flat[:1500] != tok.eos_token_id).all()
    first_doc = tok((data / "doc0.txt").read_text())["input_ids"]
    assert flat[:1500].tolist() == first_doc
    with pytest.raises(ValueError, match="tokens"):
        paper_preset.token_windows(tok, files, 100, 64)  # 5 000 tokens there, 6 400 asked
    (tmp_path / "notes.md").write_text("x")
    with pytest.raises(ValueError, match="no .txt or .jsonl"):
        paper_preset.corpus_files(str(tmp_path))


def test_reinitialised_neox_is_seeded_and_differs_from_the_checkpoint():
    from companion.papers.jsae import paper_preset

    model = tiny_neox(20, layers=2)
    a, b, c = (paper_preset.reinitialised(model, s) for s in (5, 5, 6))
    w = [m.gpt_neox.layers[0].mlp.dense_h_to_4h.weight for m in (model, a, b, c)]
    assert torch.equal(w[1], w[2]) and not torch.equal(w[1], w[3]) and not torch.equal(w[0], w[1])


def test_paper_preset_refuses_missing_paths_and_unfit_checkpoints(neox_and_corpus, tmp_path):
    llm, data = neox_and_corpus
    with pytest.raises(ParamError, match="model_path"):
        jsae.Params.resolve("paper", model_path=str(tmp_path / "none"), data_path=str(data))
    with pytest.raises(ParamError, match="data_path"):
        jsae.Params.resolve("paper", model_path=str(llm), data_path=str(tmp_path / "none"))
    with pytest.raises(ParamError, match="hook_layer"):
        jsae.Params.resolve("paper", model_path=str(llm), data_path=str(data), hook_layer=4)
    byte_gpt2(1, 32, 64, seed=0).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ParamError, match="gpt_neox"):
        jsae.Params.resolve("paper", model_path=str(tmp_path / "gpt2"), data_path=str(data))
    p = jsae.Params.resolve("paper", model_path=str(llm), data_path=str(data), smoke=True)
    assert (p.k, p.expansion, p.hook_layer, p.normalize_acts) == (32, 32, 3, True)


def test_paper_preset_without_a_checkpoint_exits_2(tmp_path, capsys):
    from companion import cli

    code = cli.main(["run", "jsae", "--preset", "paper", "-p", f"model_path={tmp_path / 'none'}",
                     "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "model_path" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_paper_preset_smoke_via_cli(neox_and_corpus, tmp_path):
    from companion import keys

    llm, data = neox_and_corpus
    record = run_paper_smoke("jsae", tmp_path / "run", model_path=llm, data_path=data)
    assert record["status"] == "ok"
    assert record["provenance"]["paths"]["model_path"] == {"path": str(llm), "sha256": keys.fingerprint(llm)}
    verdicts = {c["id"]: c for c in record["claims"]}
    assert set(verdicts) == {c.id for c in jsae.CLAIMS}
    assert verdicts["jac-exact"]["value"] < 1e-4  # the closed form against autograd on the active block
    notebook = next((tmp_path / "run").rglob("notebook.ipynb")).read_text()
    assert "local GPT-NeoX checkpoint" in notebook and "smoke budget" in notebook


def test_a_job_on_a_cached_lm_equals_one_on_a_fresh_lm():
    """The per-process cache of LMs and activations changes no value: a pair on the cached LM equals the same pair
    after the cache is emptied, on the random LM and on a trained LM's weights (with its CE baselines)."""
    p = jsae.Params.resolve("quick", sae_steps=200, sae_batch=128, n_tokens=8192, frontier_coef=3.0)
    state = byte_gpt2(p.lm_layers, p.d_model, p.d_mlp, seed=5, context=ex.CONTEXT).state_dict()
    for st in (None, state):
        ex._LM_CACHE.clear()
        fresh = ex._job(p, "sae", 1, 0.0, st, ex.RANDOM_LM_SEED, 0)
        twin = ex._job(p, "sae-twin", 1, 0.0, st, ex.RANDOM_LM_SEED, ex.TWIN_SEED)  # fills nothing new
        cached = ex._job(p, "sae", 1, 0.0, st, ex.RANDOM_LM_SEED, 0)
        assert len(ex._LM_CACHE) == 1 and twin.ev.frac01 != fresh.ev.frac01
        # train_s is a timing; affine_r2 is LAPACK's least squares, which can differ in the last bit between two
        # calls on the very same tensors (seen once in a full test run), so it is compared to round-off.
        same = [f for f in fields(ex.PairEval) if f.name not in ("train_s", "affine_r2")]
        np.testing.assert_equal([getattr(cached.ev, f.name) for f in same], [getattr(fresh.ev, f.name) for f in same])
        assert cached.ev.affine_r2 == pytest.approx(fresh.ev.affine_r2, rel=1e-12, abs=0)
        assert cached.ce_base == fresh.ce_base
    assert np.isfinite(cached.ev.ce)  # the trained LM: its CE baselines come from the cache too
    ex._LM_CACHE.clear()


def test_the_lm_trains_with_the_stored_thread_count_whatever_the_machine(monkeypatch):
    """The LM's bits depend on torch's thread count: a machine with more cores must still train it on two."""
    seen = []

    def stop(params):
        seen.append(torch.get_num_threads())
        raise KeyboardInterrupt

    before = torch.get_num_threads()
    monkeypatch.setattr("companion.resources.cores", lambda: 8)
    monkeypatch.setattr(ex, "train_lm", stop)
    try:
        with pytest.raises(KeyboardInterrupt):
            ex.run(jsae.Params.resolve("quick"), workers=8)
    finally:
        torch.set_num_threads(before)
    assert seen == [ex.LM_THREADS] == [2]
