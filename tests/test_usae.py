"""Unit checks of the USAE reproduction: metrics, SAE pieces, the update rule, controls, CAM, loader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import r2_score as sk_r2

from companion.models import optim
from companion.models.topk_sae import BatchNormTopKSAE, aux_codes, auxk_l1_loss
from companion.params import ParamError
from companion.papers import usae
from companion.claims import FAILS, HOLDS, evaluate_all
from companion.papers.usae import cam, concepts, digits, evaluate, experiment, paper_preset, universal
from hf_tiny import run_paper_smoke


def _cfg(**kw) -> universal.TrainConfig:
    base = dict(n_concepts=32, top_k=4, steps=30, lr=1e-3, batch_size=16, warmup_steps=3)
    return universal.TrainConfig(**{**base, **kw})


# --- metrics -----------------------------------------------------------------------------------

def test_r2_identities_and_scalar_mean():
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(0))
    assert concepts.r2(x, x) == pytest.approx(1.0)
    assert concepts.r2(x, torch.full_like(x, float(x.mean()))) == pytest.approx(0.0, abs=1e-5)  # eps 1e-6 off
    shifted = x + torch.arange(6.0) * 3  # per-column offsets: scalar-mean R² != per-feature R²
    x_hat = shifted + 0.5 * torch.randn(50, 6, generator=torch.Generator().manual_seed(1))
    ours = concepts.r2(shifted, x_hat)
    theirs = sk_r2(shifted.numpy(), x_hat.numpy(), multioutput="uniform_average")
    assert ours > theirs + 0.1


def test_firing_entropy_values():
    same = torch.tensor([[4.0], [4.0], [4.0]])
    alone = torch.tensor([[7.0], [0.0], [0.0]])
    two = torch.tensor([[3.0], [1.0]])
    assert float(concepts.firing_entropy(same)[0]) == pytest.approx(1.0, abs=1e-6)
    assert float(concepts.firing_entropy(alone)[0]) == pytest.approx(0.0, abs=1e-6)
    assert float(concepts.firing_entropy(two)[0]) == pytest.approx(0.8113, abs=1e-4)


def test_cofiring_hand_built():
    # 2 models, 4 samples, 2 concepts. Concept 0 fires together on samples 0 and 1; model 0 also on 2.
    fires = torch.zeros(2, 4, 2, dtype=torch.bool)
    fires[0, [0, 1, 2], 0] = True
    fires[1, [0, 1], 0] = True
    fires[1, 3, 1] = True
    assert concepts.cofire_counts(fires).tolist() == [2, 0]
    prop = concepts.cofire_proportion(concepts.cofire_counts(fires), concepts.firing_counts(fires))
    assert prop[:, 0].tolist() == pytest.approx([2 / 3, 1.0]) and prop[:, 1].tolist() == [0.0, 0.0]
    assert (prop <= 1 + 1e-9).all()


def test_vectorised_metrics_match_loops():
    rng = np.random.default_rng(3)
    codes = np.where(rng.random((3, 40, 12)) < 0.3, rng.random((3, 40, 12)), 0.0)
    codes[:, :, 5] = 0.0  # a dead concept
    fires = concepts.firing(torch.from_numpy(codes), 0.1)
    counts = concepts.firing_counts(fires).numpy()
    assert np.array_equal(counts, concepts.firing_counts_loop(codes, 0.1))
    assert np.array_equal(concepts.cofire_counts(fires).numpy(), concepts.cofire_counts_loop(codes, 0.1))
    fe = concepts.firing_entropy(torch.from_numpy(counts).double()).numpy()
    assert np.allclose(fe, concepts.firing_entropy_loop(counts), atol=1e-12)


# --- agreement with overcomplete (the library the official code uses) ---------------------------

REFERENCE = Path(__file__).parent / "data" / "usae_overcomplete_reference.json"


def test_agrees_with_overcomplete_reference():
    # tests/data/usae_overcomplete_reference.json, written by tests/data/make_usae_overcomplete_reference.py,
    # which runs overcomplete's own functions (unmodified) on the fixed inputs stored beside the outputs:
    # - "pypi": overcomplete 0.3.0, the PyPI wheel (sha256 4291a8fb...784fb): metrics.r2_score,
    #   metrics.energy_of_codes and sae.losses.top_k_auxiliary_loss (AuxK with squared errors);
    # - "official": the overcomplete bundled in YorkUCVIL/UniversalSAE at 8bfee2bd5eaa4355c2cb6543bb17f5c3ae7a3928
    #   (metrics.py and sae/losses.py last changed in 2c88dd0c9d73d025157145024c2c96fa8894c1a7): the same two
    #   metrics and sae.losses.top_k_auxiliary_loss_L1, the AuxK loss the USAE trains with.
    ref = json.loads(REFERENCE.read_text())
    t = torch.tensor
    assert ref["sources"]["epsilon"] == {"pypi": concepts.R2_EPS, "official": concepts.R2_EPS}
    for case in ref["r2"]:  # includes a zero-variance target, where only the epsilon keeps R² finite
        ours = concepts.r2(t(case["x"]), t(case["x_hat"]))
        assert ours == pytest.approx(case["official"], rel=1e-6, abs=1e-6), case["name"]
        assert ours == pytest.approx(case["pypi"], rel=1e-6, abs=1e-6), case["name"]
    e = ref["energy"]  # ours sums over models overcomplete's per-model energy_of_codes
    ours = concepts.energy(t(e["codes"]), [t(d) for d in e["dictionaries"]])
    assert ours.tolist() == pytest.approx(e["pypi_sum"], rel=1e-6, abs=1e-7)
    assert ours.tolist() == pytest.approx(e["official_sum"], rel=1e-6, abs=1e-7)
    for case in ref["auxk"]:
        x, x_hat, pre, z, d = (t(case[k]) for k in ("x", "x_hat", "pre", "z", "dictionary"))
        p = case["penalty"]
        assert float(auxk_l1_loss(x, x_hat, pre, z, d, p)) == pytest.approx(case["official_l1"], rel=1e-6)
        # the squared-error AuxK of overcomplete 0.3.0 from our aux_codes: the same auxiliary selection
        r = x - x_hat
        l2 = (r ** 2).mean() + p * ((r - aux_codes(pre, z) @ d) ** 2).mean()
        assert float(l2) == pytest.approx(case["pypi_l2"], rel=1e-6)
        assert case["official_l2"] == pytest.approx(case["pypi_l2"], rel=1e-6)


def test_overcomplete_reference_discriminates():
    # The fixture tells apart the variants a re-implementation could drift to: L1 from squared-error AuxK, the
    # aux term from plain L1, overcomplete's epsilon from 1e-8, and our energy from a mean over models.
    ref = json.loads(REFERENCE.read_text())
    t = torch.tensor
    for case in ref["auxk"]:
        x, x_hat, pre, z, d = (t(case[k]) for k in ("x", "x_hat", "pre", "z", "dictionary"))
        assert case["official_l1"] != pytest.approx(case["official_l2"], rel=1e-2)
        assert float((x - x_hat).abs().mean()) != pytest.approx(case["official_l1"], rel=1e-2)
        assert float(auxk_l1_loss(x, x_hat, pre, z, d, case["penalty"] * 1.01)) != pytest.approx(
            case["official_l1"], rel=1e-6)
    const = next(c for c in ref["r2"] if c["name"] == "zero-variance-x")
    x, x_hat = t(const["x"]), t(const["x_hat"])
    assert float(1 - ((x - x_hat) ** 2).mean() / (((x - x.mean()) ** 2).mean() + 1e-8)) != pytest.approx(
        const["official"], abs=1e-2)
    e = ref["energy"]
    assert (concepts.energy(t(e["codes"]), [t(d) for d in e["dictionaries"]]) / 3).tolist() != pytest.approx(
        e["pypi_sum"], rel=1e-3)

# --- SAE pieces --------------------------------------------------------------------------------

def test_topk_encoder_and_dictionary():
    sae = BatchNormTopKSAE(10, 40, 5, torch.Generator().manual_seed(0))
    x = torch.randn(64, 10, generator=torch.Generator().manual_seed(1))
    sae.train()
    sae(x)  # one batch of BatchNorm statistics
    sae.eval()
    pre, z = sae.encode(x)
    assert ((z != 0).sum(1) <= 5).all() and (z >= 0).all()
    assert torch.equal(z, sae.encode(x)[1])
    norms = sae.get_dictionary().norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=1e-6)


def test_auxk_l1_loss():
    gen = torch.Generator().manual_seed(0)
    sae = BatchNormTopKSAE(6, 16, 3, gen)
    x = torch.randn(20, 6, generator=gen)
    pre, z = sae.encode(x)
    x_hat = sae.decode(z)
    d = sae.get_dictionary()
    plain = auxk_l1_loss(x, x_hat, pre, z, d, 0.0).detach()
    assert float(plain) == pytest.approx(float((x - x_hat).abs().mean().detach()))
    # every positive pre-code already selected: the aux codes are zero, the aux term is mean|residual|
    pre_sel = torch.where(z > 0, pre, -torch.ones_like(pre))
    full = auxk_l1_loss(x, x_hat, pre_sel, z, d, 0.1).detach()
    assert float(full) == pytest.approx(1.1 * float(plain), rel=1e-6)


def test_cosine_schedule_matches_overcomplete_shape():
    lrs = [universal.cosine_lr(t, 100, 10, 1e-3, 1e-6, 1e-6) for t in range(101)]
    assert lrs[0] == pytest.approx(1e-6) and lrs[9] == pytest.approx(1e-3)
    assert lrs[10] == pytest.approx(1e-3) and lrs[100] == pytest.approx(1e-6)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))


# --- update rule and controls ------------------------------------------------------------------

def _toy_acts(n: int = 64) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(n, 5, generator=gen)
    return [base @ torch.randn(5, d, generator=gen) for d in (8, 6, 7)]


@pytest.mark.parametrize("update_all", [False, True])
def test_only_source_model_steps(update_all):
    acts = _toy_acts()
    cfg = _cfg(update_all_decoders=update_all)
    saes = universal.make_saes([a.shape[1] for a in acts], cfg, torch.Generator().manual_seed(0))
    opts = [torch.optim.AdamW(s.parameters(), lr=1e-2) for s in saes]
    before = [{n: p.detach().clone() for n, p in s.named_parameters()} for s in saes]
    universal.train_step(saes, opts, [a[:16] for a in acts], 1, cfg)
    for j, sae in enumerate(saes):
        same = {n: torch.equal(p, before[j][n]) for n, p in sae.named_parameters()}
        if j == 1:
            assert not any(same.values())
        elif update_all:  # dictionary j moved, encoder j did not
            assert not same.pop("weights") and all(same.values())
        else:
            assert all(same.values())


def test_one_model_usae_is_a_plain_topk_sae():
    # M = 1 against a plain TopK SAE loop written here (one fused AdamW, AuxK-L1, clipping, warm-up + cosine),
    # fed the same full-batch row orders from the same generator.
    x = _toy_acts()[0]
    cfg = _cfg(batch_size=len(x), steps=40)
    usae_one = universal.train([x], cfg, torch.Generator().manual_seed(4), np.random.default_rng(4))[0]
    sae = BatchNormTopKSAE(x.shape[1], cfg.n_concepts, cfg.top_k, torch.Generator().manual_seed(4))
    opt = optim.AdamW(sae.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(4)
    order = rng.permutation(len(x))
    for t in range(cfg.steps):
        if t:
            order = rng.permutation(len(x))
        assert rng.integers(1) == 0  # the source-model draw: always model 0
        for group in opt.param_groups:
            group["lr"] = universal.cosine_lr(t, cfg.steps, cfg.warmup_steps, cfg.lr, cfg.final_lr, cfg.warmup_lr)
        opt.zero_grad()
        xb = x[torch.from_numpy(order)]
        pre, z = sae.encode(xb)
        d = sae.get_dictionary()
        auxk_l1_loss(xb, z @ d, pre, z, d, cfg.aux_penalty).backward()
        torch.nn.utils.clip_grad_norm_(sae.parameters(), cfg.clip)
        opt.step()
    sae.eval()
    for (name, p), q in zip(usae_one.state_dict().items(), sae.state_dict().values()):
        assert torch.allclose(p.float(), q.float(), atol=1e-6), name


def test_training_is_deterministic_under_a_seed():
    acts = _toy_acts()
    runs = [universal.train(acts, _cfg(), torch.Generator().manual_seed(2), np.random.default_rng(2))
            for _ in range(2)]
    for s, t in zip(*runs):
        for p, q in zip(s.state_dict().values(), t.state_dict().values()):
            assert torch.equal(p, q)


def test_standardiser_uses_training_statistics():
    train = torch.randn(200, 4) * 3 + 2
    test = torch.randn(50, 4) * 3 + 10
    std = universal.Standardiser.fit(train)
    z = std(train)
    assert float(z.mean()) == pytest.approx(0.0, abs=1e-5) and float(z.std()) == pytest.approx(1.0, abs=1e-3)
    assert float(std(test).mean()) > 2  # held-out data keeps its shift: the statistics are not refitted
    assert torch.allclose(std.invert(z), train, atol=1e-5)


def test_shuffled_control_permutation():
    acts = _toy_acts(30)
    perms_a = universal.pair_permutations(30, len(acts), np.random.default_rng(7))
    perms_b = universal.pair_permutations(30, len(acts), np.random.default_rng(7))
    assert np.array_equal(perms_a[0], np.arange(30))
    assert all(np.array_equal(p, q) for p, q in zip(perms_a, perms_b))
    assert not np.array_equal(perms_a[1], np.arange(30))
    std, idx = universal.Standardiser.fit(acts[2]), torch.arange(30)
    assert torch.equal(universal.Rows(acts[2], std, perms_a[2])[idx], std(acts[2])[torch.from_numpy(perms_a[2])])


def test_energy_is_the_official_norm_of_mean_code_times_atom():
    gen = torch.Generator().manual_seed(0)
    codes = torch.rand(2, 30, 5, generator=gen) * (torch.rand(2, 30, 5, generator=gen) < 0.4)
    dicts = [torch.randn(5, 4, generator=gen), torch.randn(5, 3, generator=gen)]
    expected = [sum(float(torch.linalg.norm(codes[m, :, c].mean() * dicts[m][c])) for m in range(2)) for c in range(5)]
    assert concepts.energy(codes, dicts).tolist() == pytest.approx(expected, rel=1e-6)


def test_score_of_identical_models_is_perfectly_universal():
    # Two copies of one model under one SAE: every fire is a co-fire, FE = 1, the R² matrix is constant.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200, 6, generator=gen)
    sae = BatchNormTopKSAE(6, 24, 3, gen)
    sae.train()
    sae(x)
    stds = [universal.Standardiser.fit(x)] * 2
    ev, order = evaluate.score([sae, sae], [x, x], stds, 0.1, 4, 5, 0.0)
    assert ev.cofire_top == pytest.approx(1.0) and ev.cofire_rest == pytest.approx(1.0)
    assert np.allclose(ev.fe, 1.0, atol=1e-6) and len(ev.fe) > 4
    assert np.allclose(ev.r2, ev.r2[0, 0]) and ev.diag_margin == pytest.approx(0.0, abs=1e-9)
    codes = evaluate.concept_codes([sae, sae], [x, x], stds, order)
    assert torch.equal(codes[0], codes[1]) and sorted(order.tolist()) == list(range(24))


def test_diag_margin_is_the_worst_row():
    ev = evaluate.VariantEval(np.array([[0.9, 0.5, 0.2], [0.85, 0.8, 0.1], [0.3, 0.3, 0.7]]), np.zeros(0),
                              np.zeros((3, 1)), np.zeros(1), 0.0, 0.0, 0, 0.0)
    assert ev.diag_margin == pytest.approx(-0.05) and ev.offdiag == pytest.approx(0.375)


def _linear_views(n: int, seed: int) -> list[torch.Tensor]:
    """M = 3 random linear views (dims 12, 10, 14) of one sparse non-negative latent with 8 factors."""
    gen = torch.Generator().manual_seed(seed)
    latent = torch.rand(n, 8, generator=gen) * (torch.rand(n, 8, generator=gen) < 0.15)
    return [latent @ torch.randn(8, d, generator=gen) for d in (12, 10, 14)]


def test_linear_views_of_one_latent_cofire_unless_the_pairing_is_shuffled():
    # End to end: aligned views of one latent give concepts that fire in every view on the same samples;
    # breaking the pairing (or training independently) leaves almost none.
    views = _linear_views(1200, 0)
    cfg = _cfg(n_concepts=32, top_k=4, steps=400, lr=3e-3, batch_size=128, warmup_steps=20)
    out = evaluate.fit_variants([v[:1000] for v in views], [v[1000:] for v in views], cfg, 0, 0.1, 8, 5, True)[0]
    u, s, i = out["universal"], out["shuffled"], out["independent"]
    assert u.cofire_top > 0.2 and s.cofire_top < 0.1 and i.cofire_top < 0.1
    assert u.cofire_top > 5 * max(s.cofire_top, i.cofire_top)
    assert u.offdiag > s.offdiag + 0.15 and u.offdiag > i.offdiag + 0.3


def test_claim_values_feed_every_claim_and_control():
    def ev(offdiag: float, cofire: float, fe: float) -> evaluate.VariantEval:
        r2 = np.full((3, 3), offdiag)
        np.fill_diagonal(r2, 0.8)
        return evaluate.VariantEval(r2, np.full(9, fe), np.zeros((3, 8)), np.ones(8), cofire, 0.01, 0, 1.0)

    runs = [evaluate.SeedRun(s, {"universal": ev(0.7 + 0.01 * s, 0.5, 0.8), "shuffled": ev(0.2, 0.05, 0.6),
                                 "independent": ev(-0.3, 0.0, 0.3 + 0.01 * s)}) for s in range(4)]
    results = experiment.Results(usae.Params.resolve("quick"), digits.MODEL_NAMES, runs, "digits")
    values = experiment.claim_values(results)
    verdicts = {v.id: v for v in evaluate_all(usae.CLAIMS, values)}
    assert verdicts["cross-r2"].verdict == HOLDS and verdicts["cross-r2"].discriminates
    assert values["cross-r2@shuffled"] == pytest.approx([0.2] * 4)
    assert values["fe-gap@shuffled"] == pytest.approx([0.3 - 0.01 * s for s in range(4)])
    assert values["diag-highest@independent"] == pytest.approx([1.1] * 4)
    assert verdicts["energy-universal"].controls[0].verdict == HOLDS  # 0.05 - 0.01 >= 0: not discriminative
    assert verdicts["cross-r2"].controls[1].verdict == FAILS


def _assert_same_scores(a: evaluate.VariantEval, b: evaluate.VariantEval) -> None:
    assert np.allclose(a.r2, b.r2, rtol=0, atol=1e-5)
    assert np.array_equal(a.union, b.union) and a.dead == b.dead
    assert np.allclose(a.cofire, b.cofire, rtol=0, atol=1e-6) and np.allclose(a.fe, b.fe, rtol=0, atol=1e-6)
    assert a.cofire_top == pytest.approx(b.cofire_top, abs=1e-6)
    assert a.cofire_rest == pytest.approx(b.cofire_rest, abs=1e-6)


@torch.no_grad()
def _score_at_once(saes, test, stds, tau, top, min_fires):
    """The scores the direct way, every held-out row standardised and encoded at once: the reference for score."""
    xs = [std(a) for std, a in zip(stds, test)]
    codes = torch.stack([sae.eval().encode(x)[1] for sae, x in zip(saes, xs)])
    m = len(saes)
    r2 = np.array([[concepts.r2(xs[j], saes[j].decode(codes[i])) for j in range(m)] for i in range(m)])
    fires = concepts.firing(codes, tau)
    energy = concepts.energy(codes, [s.get_dictionary().detach() for s in saes])
    counts = concepts.firing_counts(fires)
    ev, order = evaluate._finish(r2, counts, concepts.cofire_counts(fires), energy, top, min_fires, 0.0)
    return ev, codes, order


@pytest.mark.parametrize("half", [False, True])
def test_chunked_scoring_equals_scoring_at_once(half):
    # score reads the held-out rows a chunk at a time (the paper preset's bounded memory; None: at once, the
    # toy). On trained SAEs, with chunks that do not divide the held-out set, every score and the energy order
    # agree with the direct computation to float rounding, for float32 and for the paper preset's float16 tokens.
    views = _linear_views(420, 2)
    train, test = [v[:300] for v in views], [v[300:] for v in views]
    test = [t.half() for t in test] if half else test
    stds = [universal.Standardiser.fit(a) for a in train]
    saes = universal.train([universal.Rows(a, s) for a, s in zip(train, stds)], _cfg(steps=60, batch_size=64),
                           torch.Generator().manual_seed(5), np.random.default_rng(5))
    once, codes, order = _score_at_once(saes, test, stds, 0.1, 8, 5)
    assert len(once.fe) > 8 and once.dead < 32  # enough live concepts for top and rest
    for chunk in (None, 7, 50, 120, 1000):
        chunked, order_c = evaluate.score(saes, test, stds, 0.1, 8, 5, 0.0, chunk)
        _assert_same_scores(chunked, once)
        assert torch.equal(order_c, order)
        ids = order[:6]
        sub = evaluate.concept_codes(saes, test, stds, ids, chunk)
        assert torch.allclose(sub, codes[:, :, ids], rtol=0, atol=1e-5)  # chunked matmuls round differently
        # the figure's picks hold the same top values (which of several tied zeros is picked may differ)
        picks = torch.from_numpy(evaluate.top_samples(sub, 8)).permute(1, 2, 0)  # (M, 8, concepts)
        top_once = codes[:, :, ids].sort(dim=1, descending=True).values[:, :8]
        assert torch.allclose(codes[:, :, ids].gather(1, picks), top_once, rtol=0, atol=1e-5)


def test_fit_variants_chunked_equals_at_once():
    views = _linear_views(300, 1)
    cfg = _cfg(steps=40, batch_size=64)
    args = ([v[:200] for v in views], [v[200:] for v in views], cfg, 3, 0.1, 8, 5, True)
    once, _, _, order = evaluate.fit_variants(*args)
    chunked, _, _, order_c = evaluate.fit_variants(*args, chunk=33)
    assert torch.equal(order, order_c)
    for name in ("universal", "shuffled", "independent"):
        _assert_same_scores(chunked[name], once[name])


def test_ablation_trains_the_all_decoders_variant_from_the_same_start():
    views = _linear_views(300, 1)
    cfg = _cfg(steps=40, batch_size=64)
    out = evaluate.fit_variants([v[:200] for v in views], [v[200:] for v in views], cfg, 3, 0.1, 8, 5,
                                False, True)[0]
    assert set(out) == {"universal", "all-decoders"}
    assert not np.allclose(out["universal"].r2, out["all-decoders"].r2)


def test_cam_raises_the_concept_for_every_model():
    gen = torch.Generator().manual_seed(0)
    split = digits.DigitSplit(*digits.split_digits())
    for m, name in enumerate(digits.MODEL_NAMES[:2]):
        model = digits.build_model(name, torch.Generator().manual_seed(m)).eval()
        sae = BatchNormTopKSAE(64 if name != "cnn_digit" else 48, 32, 4, gen).eval()
        std = universal.Standardiser.fit(digits.features(model, split.x_train[:200]))
        for p in (*model.parameters(), *sae.parameters()):
            p.requires_grad_(False)
        _, start, end = cam.maximise(experiment.concept_pre_fn(model, sae, std), 3, 50, gen)
        assert end > start


# --- parameters --------------------------------------------------------------------------------

def test_rows_equal_the_standardised_permuted_copy():
    # The training loop reads Rows per batch; the toy's numbers must not move: every batch is, entry for
    # entry, the batch of the standardised (and, for the shuffled control, permuted) copy used before.
    acts = _toy_acts(40)
    stds = [universal.Standardiser.fit(a) for a in acts]
    perms = universal.pair_permutations(40, len(acts), np.random.default_rng(3))
    copies = [s(a)[torch.from_numpy(p)] for s, a, p in zip(stds, acts, perms)]
    idx = torch.from_numpy(np.random.default_rng(4).permutation(40)[:16])
    for a, s, p, copy in zip(acts, stds, perms, copies):
        assert torch.equal(universal.Rows(a, s, p)[idx], copy[idx])
        assert torch.equal(universal.Rows(a, s)[idx], s(a)[idx])


def test_rows_cast_float16_tokens_per_batch():
    acts = torch.randn(300, 6, generator=torch.Generator().manual_seed(0)) * 4 + 3
    half = acts.half()
    std32, std16 = universal.Standardiser.fit(half.float()), universal.Standardiser.fit(half, chunk=64)
    assert std16.mean == pytest.approx(std32.mean, rel=1e-5) and std16.std == pytest.approx(std32.std, rel=1e-5)
    batch = universal.Rows(half, std16)[torch.arange(10)]
    assert batch.dtype == torch.float32 and torch.allclose(batch, std32(half[:10].float()), atol=1e-5)


@pytest.mark.parametrize("over, name", [({"top_k": 40}, "top_k"), ({"n_concepts": 32, "top_k": 4}, "n_concepts"),
                                        ({"top_concepts": 200}, "top_concepts")])
def test_bad_parameters_are_refused(over, name):
    with pytest.raises(ParamError, match=f"parameter '{name}'"):
        usae.Params.resolve("quick", **over)


def test_paper_preset_requires_local_paths(tmp_path):
    with pytest.raises(ParamError, match="parameter 'model_path'"):
        usae.Params.resolve("paper", model_path=str(tmp_path / "missing"), data_path=str(tmp_path))


# --- the paper preset's loader -----------------------------------------------------------------

def test_patch_tokens_drop_class_token_and_resize():
    hidden = torch.randn(2, 1 + 16 * 16, 8)
    out = paper_preset.patch_tokens(hidden, 16, 14)
    assert out.shape == (2, 196, 8)
    same = paper_preset.patch_tokens(hidden[:, :1 + 196], 14, 14)
    assert torch.equal(same, hidden[:, 1:197])


def _tiny_dinov2(folder: Path, vis: dict) -> None:
    """A tiny DINOv2 whose model config says 63 (a 9x9 grid, as the real one says 518) but whose processor
    crops 35 (5x5), as the real one crops 224."""
    import transformers as T

    T.Dinov2Model(T.Dinov2Config(image_size=63, patch_size=7, **vis)).save_pretrained(folder)
    T.BitImageProcessorPil(size={"shortest_edge": 40}, crop_size={"height": 35, "width": 35}).save_pretrained(folder)


def test_dinov2_input_is_the_processor_crop_not_the_config_size(tmp_path):
    _tiny_dinov2(tmp_path, dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2))
    model, prep, size, patch = paper_preset.load_backbone(tmp_path, torch.device("cpu"))
    assert (size, patch) == (35, 7)  # the config's 63 would give a 9x9 grid
    from PIL import Image

    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (50, 70, 3), dtype=np.uint8))
    x = torch.as_tensor(paper_preset.preprocess(image, prep, size))[None]
    with torch.no_grad():
        hidden = model(pixel_values=x).last_hidden_state
    assert hidden.shape[1] == 1 + 5 * 5  # class token + the 5x5 grid of the 35 crop


def test_non_square_image_is_cropped_not_squashed():
    from PIL import Image

    # 40 high, 80 wide: white outer quarters, black middle half. Resizing the shorter edge to 32 and
    # cropping the centre keeps only the black half; squashing to 32x32 would keep the white quarters.
    pixels = np.zeros((40, 80, 3), dtype=np.uint8)
    pixels[:, :20] = pixels[:, 60:] = 255
    prep = {"size": {"height": 32, "width": 32}, "rescale_factor": 1 / 255, "image_mean": [0, 0, 0],
            "image_std": [1, 1, 1]}
    x = paper_preset.preprocess(Image.fromarray(pixels), prep, 32)
    assert x.shape == (3, 32, 32)
    assert float(np.abs(x[:, :, 3:-3]).max()) < 0.05 and float(x.mean()) < 0.05
    squashed = np.asarray(Image.fromarray(pixels).resize((32, 32), Image.BICUBIC), dtype=np.float32) / 255
    assert float(squashed.mean()) > 0.4  # what the old resize to the square kept


def test_float16_cache_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    tokens = [{name: rng.normal(size=(4, d)).astype(np.float16) for name, d in zip(paper_preset.BACKBONES, (3, 5, 2))}
              for _ in range(2)]
    paths = []
    for i, t in enumerate(tokens):
        np.savez(tmp_path / f"{i}.npz", **t)
        paths.append(tmp_path / f"{i}.npz")
    loaded = paper_preset.load_cached(paths)
    for name, a in zip(paper_preset.BACKBONES, loaded):
        assert a.dtype == torch.float16
        assert np.array_equal(a.numpy(), np.concatenate([t[name] for t in tokens]))


def _tiny_backbones(root: Path) -> None:
    """Tiny random SigLIP, DINOv2 (a 5x5 grid, resized to 4x4) and ViT folders, plus images."""
    import transformers as T
    from PIL import Image

    vis = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    text = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=64,
                max_position_embeddings=16, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    sig = T.SiglipConfig(vision_config=dict(image_size=32, patch_size=8, **vis), text_config=text)
    T.SiglipModel(sig).save_pretrained(root / "backbones" / "siglip")
    T.SiglipImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(root / "backbones" / "siglip")
    _tiny_dinov2(root / "backbones" / "dinov2", vis)
    T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, **{**vis, "hidden_size": 48})).save_pretrained(
        root / "backbones" / "vit")
    T.ViTImageProcessorPil(size={"height": 32, "width": 32}).save_pretrained(root / "backbones" / "vit")
    (root / "images").mkdir()
    rng = np.random.default_rng(0)
    for i in range(10):
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(root / "images" / f"im{i}.png")


@pytest.mark.slow
def test_paper_preset_smoke_through_the_cli(tmp_path):
    _tiny_backbones(tmp_path)
    record = run_paper_smoke("usae", tmp_path / "run", model_path=tmp_path / "backbones",
                             data_path=tmp_path / "images", cache_path=tmp_path / "cache")
    assert record["status"] == "ok" and len(record["claims"]) == len(usae.CLAIMS)
    assert record["metrics"]["images.train"] == 7 and record["metrics"]["images.held_out"] == 1
    cached = list((tmp_path / "cache").rglob("*.npz"))
    assert len(cached) == 8
    with np.load(cached[0]) as z:
        assert z["siglip"].shape == (16, 32) and z["dinov2"].shape == (16, 32) and z["vit"].shape == (16, 48)
