"""Unit checks of the USAE reproduction: metrics, SAE pieces, the update rule, controls, CAM, loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import r2_score as sk_r2

from companion.models.topk_sae import BatchNormTopKSAE, auxk_l1_loss
from companion.params import ParamError
from companion.papers import usae
from companion.papers.usae import cam, concepts, digits, universal, vision
from hf_tiny import run_paper_smoke


def _cfg(**kw) -> universal.TrainConfig:
    base = dict(n_concepts=32, top_k=4, steps=30, lr=1e-3, batch_size=16, warmup_steps=3)
    return universal.TrainConfig(**{**base, **kw})


# --- metrics -----------------------------------------------------------------------------------

def test_r2_identities_and_scalar_mean():
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(0))
    assert concepts.r2(x, x) == pytest.approx(1.0)
    assert concepts.r2(x, torch.full_like(x, float(x.mean()))) == pytest.approx(0.0, abs=1e-6)
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
    prop = concepts.cofire_proportion(fires)
    assert prop[:, 0].tolist() == pytest.approx([2 / 3, 1.0])
    iou = concepts.cofire_iou(fires)
    assert float(iou[0]) == pytest.approx(2 / 5)
    assert (prop <= 1 + 1e-9).all() and (iou[None, :] <= prop + 1e-9).all()


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
    acts = _toy_acts()[:1]
    a = universal.train(acts, _cfg(), torch.Generator().manual_seed(4), np.random.default_rng(4), universal=True)
    b = universal.train(acts, _cfg(), torch.Generator().manual_seed(4), np.random.default_rng(4), universal=False)
    for p, q in zip(a[0].state_dict().values(), b[0].state_dict().values()):
        assert torch.equal(p, q)


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
    a, perms_a = universal.shuffle_pairs(acts, np.random.default_rng(7))
    _, perms_b = universal.shuffle_pairs(acts, np.random.default_rng(7))
    assert np.array_equal(perms_a[0], np.arange(30)) and torch.equal(a[0], acts[0])
    assert all(np.array_equal(p, q) for p, q in zip(perms_a, perms_b))
    assert not np.array_equal(perms_a[1], np.arange(30))
    assert torch.equal(a[2], acts[2][torch.from_numpy(perms_a[2])])


def test_cam_raises_the_concept_for_every_model():
    gen = torch.Generator().manual_seed(0)
    split = digits.DigitSplit(*digits.split_digits())
    for m, name in enumerate(digits.MODEL_NAMES[:2]):
        model = digits.build_model(name, torch.Generator().manual_seed(m)).eval()
        sae = BatchNormTopKSAE(64 if name != "cnn_digit" else 48, 32, 4, gen).eval()
        std = universal.Standardiser.fit(digits.features(model, split.x_train[:200]))
        for p in (*model.parameters(), *sae.parameters()):
            p.requires_grad_(False)
        _, start, end = cam.maximise(usae.concept_pre_fn(model, sae, std), 3, 50, gen)
        assert end > start


# --- parameters --------------------------------------------------------------------------------

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
    out = vision.patch_tokens(hidden, 16, 14)
    assert out.shape == (2, 196, 8)
    same = vision.patch_tokens(hidden[:, :1 + 196], 14, 14)
    assert torch.equal(same, hidden[:, 1:197])


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
    T.Dinov2Model(T.Dinov2Config(image_size=35, patch_size=7, **vis)).save_pretrained(root / "backbones" / "dinov2")
    T.BitImageProcessorPil(size={"shortest_edge": 40}, crop_size={"height": 35, "width": 35}).save_pretrained(
        root / "backbones" / "dinov2")
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
