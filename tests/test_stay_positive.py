"""Unit checks of the Stay-Positive reproduction: projection, head retraining, data, metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.metrics import average_precision_score

from hf_tiny import run_paper_smoke

from companion.models import tv_resnet
from companion.papers.stay_positive import paper_preset as pdet
from companion.papers.stay_positive import photo_patches as pp
from companion.papers.stay_positive import experiment as sp
from companion.params import ParamError


@pytest.fixture(scope="module")
def images() -> tuple[np.ndarray, ...]:
    """The bundled photos, loaded once with sockets disabled (the offline guard)."""
    import socket

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("load_real_images tried to open a socket")

    pp.load_real_images.cache_clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket, "socket", no_network)
        return pp.load_real_images()


@pytest.fixture(scope="module")
def patches(images: tuple[np.ndarray, ...]) -> np.ndarray:
    """A few natural 32x32 patches from the bundled photos."""
    return pp.make_patches(images, 24, "train", np.random.default_rng(0), 32)


def small_head(seed: int = 0) -> torch.nn.Linear:
    """A linear head with mixed-sign weights."""
    torch.manual_seed(seed)
    head = torch.nn.Linear(6, 1)
    with torch.no_grad():
        head.weight.copy_(torch.linspace(-1, 1, 6)[None])
        head.bias.fill_(-0.3)
    return head


def test_project_nonneg_clamps_weights_only_and_is_idempotent() -> None:
    head = small_head()
    bias = head.bias.detach().clone()
    sp.project_nonneg_(head)
    once = head.weight.detach().clone()
    assert (once >= 0).all()
    assert torch.equal(head.bias.detach(), bias)
    assert torch.equal(once, torch.clamp(torch.linspace(-1, 1, 6), min=0)[None])
    sp.project_nonneg_(head)
    assert torch.equal(head.weight.detach(), once)


def features(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative toy features: feature 0 fires on fakes, feature 1 on reals."""
    real = np.abs(rng.normal(size=(n, 4)))
    fake = np.abs(rng.normal(size=(n, 4)))
    fake[:, 0] += 2.0
    real[:, 1] += 2.0
    return real, fake


def test_retrain_head_constrained_is_zero_at_start_and_nonneg_every_step() -> None:
    seen = []

    def hook(step: int, head: torch.nn.Linear) -> None:
        w, b = head.weight.detach(), head.bias.detach()
        if step == 0:
            assert (w == 0).all() and (b == 0).all()
        assert (w >= 0).all(), f"negative weight after step {step}"
        seen.append(step)

    real, fake = features(200, np.random.default_rng(1))
    head = sp.retrain_head(real, fake, True, 50, 1e-2, torch.Generator().manual_seed(0), hook)
    assert seen == list(range(51))
    assert head.weight[0, 0] > 0  # the fake feature is still used


def test_unconstrained_head_learns_negative_real_evidence() -> None:
    real, fake = features(200, np.random.default_rng(1))
    lp = sp.retrain_head(real, fake, False, 200, 1e-2, torch.Generator().manual_seed(0))
    assert lp.weight[0, 1] < 0  # the real feature gets a negative weight without the clamp


def test_sp_head_is_monotone_and_bounded_below_by_bias() -> None:
    real, fake = features(200, np.random.default_rng(2))
    w, b = sp.head_arrays(sp.retrain_head(real, fake, True, 100, 1e-2, torch.Generator().manual_seed(0)))
    rng = np.random.default_rng(3)
    z = np.abs(rng.normal(size=(500, 4)))
    delta = np.abs(rng.normal(size=(500, 4)))
    assert np.all((z + delta) @ w + b >= z @ w + b)
    assert np.all(z @ w + b >= b)


def test_frozen_backbone_is_unchanged_by_stage2(patches: np.ndarray) -> None:
    torch.manual_seed(0)
    model = sp.freeze_backbone(sp.Detector(width=4))
    before = [p.detach().clone() for p in model.body.parameters()]
    f = sp.extract_features(model, patches)
    sp.retrain_head(f[:12], f[12:], True, 20, 1e-2, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(before, model.body.parameters()))
    assert not any(p.requires_grad for p in model.body.parameters())
    assert not model.body.training
    assert f.min() >= 0 and f.shape == (len(patches), 16)


def test_highpass_kills_constants() -> None:
    x = torch.full((2, 3, 16, 16), 0.37)
    assert torch.allclose(sp.highpass(x), torch.zeros_like(x), atol=1e-7)


def test_generator_nearest_is_blockwise_constant_and_quantized(patches: np.ndarray) -> None:
    g = pp.generator_nearest(patches)
    assert g.shape == patches.shape
    for di in (0, 1):
        for dj in (0, 1):
            assert np.array_equal(g[:, di::2, dj::2], g[:, 0::2, 0::2])
    for out in (g, pp.generator_tconv(patches, 0.5)):
        assert out.shape == patches.shape and out.min() >= 0 and out.max() <= 1
        assert np.allclose(out * 255, np.round(out * 255))


def test_tconv_with_eps_zero_keeps_smooth_images_and_border() -> None:
    x = np.full((1, 16, 16, 3), 0.5)
    assert np.allclose(pp.generator_tconv(x, 0.0), pp.q8(x))


def test_jpeg_is_deterministic_444_and_lossier_at_low_quality(patches: np.ndarray) -> None:
    x = pp.q8(patches)
    assert np.array_equal(pp.jpeg(x[0], 80), pp.jpeg(x[0], 80))
    assert pp.jpeg_sampling(x[0], 80) == 0  # 4:4:4
    err = {q: np.mean((pp.jpeg_batch(x, q) - x) ** 2) for q in (95, 75, 50)}
    assert err[95] < err[75] < err[50]


def test_pillow_default_would_subsample_chroma(patches: np.ndarray) -> None:
    """The pitfall the 4:4:4 setting avoids is real in this Pillow."""
    import io

    buf = io.BytesIO()
    Image.fromarray((patches[0] * 255).astype(np.uint8)).save(buf, format="JPEG", quality=80)
    from PIL import JpegImagePlugin

    assert JpegImagePlugin.get_sampling(Image.open(buf)) == 2


def test_train_and_test_columns_are_disjoint(images: tuple[np.ndarray, ...]) -> None:
    for img in images:
        w = img.shape[1]
        lo_tr, hi_tr = pp.column_ranges(w, "train", 32)
        lo_te, hi_te = pp.column_ranges(w, "test", 32)
        assert lo_tr == 0 and hi_tr > 0 and hi_te > lo_te
        assert hi_tr - 1 + 32 <= lo_te  # the last train crop ends before the first test column


def test_inpaint_replaces_only_the_centre(patches: np.ndarray) -> None:
    real = pp.jpeg_batch(pp.q8(patches), 80)
    fake = pp.generator_nearest(patches)
    out = pp.inpaint(real, fake, 16)
    mask = np.zeros(out.shape[1:3], bool)
    mask[8:24, 8:24] = True
    assert np.array_equal(out[:, mask], fake[:, mask])
    assert np.array_equal(out[:, ~mask], real[:, ~mask])


def test_average_precision_matches_sklearn_with_ties() -> None:
    rng = np.random.default_rng(0)
    neg = np.round(rng.normal(size=300), 1)
    pos = np.round(rng.normal(0.7, 1.0, size=200), 1)
    ref = average_precision_score(np.r_[np.zeros(300), np.ones(200)], np.r_[neg, pos])
    assert sp.average_precision(neg, pos) == pytest.approx(ref, abs=1e-12)


def test_threshold_and_separated_toy_data() -> None:
    val = np.arange(100.0)
    assert sp.threshold_at_fpr(val, 0.05) == pytest.approx(np.percentile(val, 95))
    neg, pos = np.linspace(-3, -1, 50), np.linspace(1, 3, 50)
    assert sp.tpr_at(sp.threshold_at_fpr(neg, 0.05), pos) == 1.0
    assert sp.average_precision(neg, pos) == 1.0


def test_only_bundled_images_are_loaded(images: tuple[np.ndarray, ...]) -> None:
    import os

    import skimage

    assert pp.image_names() == ("china.jpg", "flower.jpg", "astronaut", "coffee", "chelsea",
                                "rocket", "immunohistochemistry", "hubble_deep_field", "retina",
                                "camera", "moon", "coins", "grass", "gravel", "brick")
    shipped = set(os.listdir(os.path.join(os.path.dirname(skimage.__file__), "data")))
    for name in pp.SKIMAGE_RGB + pp.SKIMAGE_GREY:
        stem = {"immunohistochemistry": "ihc"}.get(name, name)
        assert any(f.startswith(stem + ".") for f in shipped), name
    assert len(images) == len(pp.image_names())
    assert all(x.ndim == 3 and x.shape[2] == 3 and 0 <= x.min() and x.max() <= 1 for x in images)


def test_params_validation() -> None:
    assert sp.Params.resolve("quick").seeds >= 3
    with pytest.raises(ParamError, match="unknown parameter"):
        sp.Params.resolve("quick", widht=8)
    with pytest.raises(ParamError, match="is not an int"):
        sp.Params.resolve("quick", width=8.5)
    with pytest.raises(ParamError, match="out of range"):
        sp.Params.resolve("quick", n_train=10)
    with pytest.raises(ParamError, match="multiple of 8"):
        sp.Params.resolve("quick", patch=36)
    with pytest.raises(ParamError, match="inpaint_sizes"):
        sp.Params.resolve("quick", inpaint_sizes=(40,))
    with pytest.raises(ParamError, match="generator"):
        sp.Params.resolve("quick", generator="gan")
    sp.Params.resolve("full")
    with pytest.raises(ParamError, match="model_path.*detector checkpoint"):
        sp.Params.resolve("paper", model_path="/nonexistent/detector.pth")


def test_label_convention() -> None:
    assert (sp.REAL, sp.FAKE) == (0, 1)


def test_seed_determinism_of_data_and_training(images: tuple[np.ndarray, ...]) -> None:
    def once() -> tuple[np.ndarray, torch.Tensor, np.ndarray]:
        rng, gen = sp.runtime.generators(7)
        x = pp.make_patches(images, 32, "train", rng, 16)
        model = sp.train_stage1(sp.Detector(width=4), pp.jpeg_batch(pp.q8(x), 80),
                                pp.generator_nearest(x), 1, gen)
        f = sp.extract_features(sp.freeze_backbone(model), x)
        head = sp.retrain_head(f[:16], f[16:], True, 20, 1e-2, gen)
        return x, model.head.weight.detach().clone(), sp.head_arrays(head)[0]

    a, b = once(), once()
    assert np.array_equal(a[0], b[0])
    assert torch.equal(a[1], b[1])
    assert np.array_equal(a[2], b[2])


@pytest.mark.slow  # spawns worker processes (~20 s of CPU, mostly imports)
def test_run_in_worker_processes_matches_a_seed_run_inline() -> None:
    # jpeg_q_test without 85 also checks that the both-compressed AP set is always made
    params = sp.Params.resolve("quick", seed=5, seeds=2, n_train=500, n_test=200, width=4,
                               epochs=1, head_steps=100, jpeg_q_test=(75,), inpaint_sizes=(16,))
    res = sp.run(params)
    assert res.seeds == [5, 6] and [s["seed"] for s in res.per_seed] == [5, 6]
    inline, _ = sp.run_seed(params, 6)
    for h in sp.HEADS:
        assert np.array_equal(res.per_seed[1]["heads"][h]["w"], inline["heads"][h]["w"])
        assert res.per_seed[1]["heads"][h]["ap"] == inline["heads"][h]["ap"]
        assert res.per_seed[1]["worlds"][sp.NO_JPEG][h]["ap"] == inline["worlds"][sp.NO_JPEG][h]["ap"]
    assert res.spectra["clean"].shape == (32, 32) and len(res.examples["clean"]) == 4


def test_every_seed_rows_are_judged_on_their_worst_seed() -> None:
    """The spec's "in every seed" conditions are exact rows on the worst seed, next to the statistical means."""
    from companion.claims import evaluate_all

    def head(tpr75: float, ap_clean: float, frac_neg: float) -> dict:
        return {"tpr": {"jpeg75": tpr75}, "ap": {"clean": ap_clean, "inpaint16": 0.7}, "frac_neg": frac_neg}

    gains = [0.2, -0.05, 0.1]
    keys = {"jpeg": "jpeg75", "inpaint": "inpaint16", "small": "inpaint8"}
    per_seed = [{"heads": {"base": head(0.5, 0.99, 0.4), "lp": head(0.5, 0.99, 0.4),
                           "sp": head(0.5 + g, 0.99 - 0.005 * i, 0.0)}, "keys": keys} for i, g in enumerate(gains)]
    values = sp.seed_claim_values(per_seed)
    verdicts = {v.id: v for v in evaluate_all(sp.CLAIMS, values)}
    every = verdicts["jpeg75-recall-every"]
    assert every.kind == "every" and every.interval is None and every.per_seed == pytest.approx(gains)
    assert every.value == pytest.approx(-0.05) and every.verdict == "FAILS"
    mean = verdicts["jpeg75-recall"]
    assert mean.kind == "statistical" and len(mean.per_seed) == 3 and mean.interval is not None
    assert verdicts["clean-ap-cost-every"].value == pytest.approx(-0.01)
    assert verdicts["clean-ap-cost-every"].verdict == "HOLDS"
    assert set(sp.EVERY_SEED) <= {c.id for c in sp.CLAIMS if c.kind == "every"}


def test_no_jpeg_world_shares_the_fakes_and_drops_only_the_jpeg_of_the_reals() -> None:
    """The control world: same crops and fakes, reals only quantized (train, val, test, inpainted)."""
    params = sp.Params.resolve("quick", n_train=500, n_test=200, jpeg_q_test=(75,), inpaint_sizes=(16,))
    sets, others = sp.make_sets(params, np.random.default_rng(3))
    plain = others[sp.NO_JPEG]
    assert set(plain) == {"train_real", "val_real", "real_test", "inpaint16"}
    assert np.array_equal(plain["real_test"], sets["real_clean"])
    assert np.array_equal(plain["real_test"], pp.q8(plain["real_test"]))  # quantized, not compressed
    assert not np.array_equal(plain["train_real"], sets["train_real"])
    # the training pairs stay aligned: the plain real and the fake come from the same crop (the fake is
    # made from the unquantized crop, so decoding the quantized real differs by at most one level)
    np.testing.assert_allclose(sp.generate(plain["train_real"], params), sets["train_fake"], atol=1.01 / 255)
    outside = np.ones((32, 32), bool)
    outside[8:24, 8:24] = False
    assert np.array_equal(plain["inpaint16"][:, outside], plain["real_test"][:, outside])
    assert np.array_equal(plain["inpaint16"][:, 8:24, 8:24], sets["inpaint16"][:, 8:24, 8:24])


def test_trace_world_puts_a_fixed_block_trace_on_the_reals_and_the_test_adds_it_to_the_fakes() -> None:
    """The camera trace: a function of the patch size only (its own fixed seed), zero-mean, unit s.d., constant on aligned 2x2 blocks, so the
    nearest decoder's fakes stay blockwise constant with it; the trace world's reals are the plain reals plus it."""
    params = sp.Params.resolve("quick", n_train=500, n_test=200, jpeg_q_test=(75,), inpaint_sizes=(16,))
    trace = pp.camera_trace(32)
    assert trace.mean() == pytest.approx(0.0, abs=1e-12) and trace.std() == pytest.approx(1.0)
    assert np.array_equal(trace[0::2], trace[1::2]) and np.array_equal(trace[:, 0::2], trace[:, 1::2])
    sets, others = sp.make_sets(params, np.random.default_rng(3))
    plain, traced = others[sp.NO_JPEG], others[sp.TRACE]
    assert set(traced) == set(plain)
    assert np.array_equal(traced["real_test"], pp.add_trace(plain["real_test"], params.trace_sd))
    assert np.array_equal(sets[sp.TRACE_FAKE], pp.add_trace(sets["clean"], params.trace_sd))
    fake = sets[sp.TRACE_FAKE]
    assert np.array_equal(fake[:, 0::2], fake[:, 1::2]) and np.array_equal(fake[:, :, 0::2], fake[:, :, 1::2])
    shift = traced["real_test"] - plain["real_test"]  # the trace, up to clipping at 0 and 1 and 8-bit rounding
    inside = (plain["real_test"] > 0.2) & (plain["real_test"] < 0.8)  # the trace stays within [0, 1] there
    np.testing.assert_allclose(shift[inside], np.broadcast_to(params.trace_sd / 255 * trace, shift.shape)[inside],
                               atol=0.51 / 255)


def test_signed_parts_add_up_to_the_logit() -> None:
    rng = np.random.default_rng(0)
    f, w = rng.random((50, 12)), rng.normal(size=12)
    neg, pos = sp.signed_parts(f, w)
    assert neg <= 0 <= pos
    assert neg + pos == pytest.approx(float(np.mean(f @ w)))
    assert sp.signed_parts(f, np.abs(w))[0] == 0.0


def test_controls_come_from_lp_and_from_the_no_jpeg_world() -> None:
    """Each finding's controls: LP in SP's place, and the same metric on the no-JPEG world's heads
    (the every-seed row judged on its worst seed); without a control world they are NaN, never the main values."""
    from companion.claims import evaluate_all

    def head(tpr75: float, ap16: float) -> dict:
        return {"tpr": {"jpeg75": tpr75}, "ap": {"clean": 0.99, "inpaint16": ap16}, "frac_neg": 0.4}

    keys = {"jpeg": "jpeg75", "inpaint": "inpaint16", "small": "inpaint8"}
    per_seed = [{"heads": {"base": head(0.5, 0.6), "lp": head(0.5 + 0.01 * i, 0.6), "sp": head(0.7, 0.9)},
                 "worlds": {sp.NO_JPEG: {"base": head(0.5, 0.6), "lp": head(0.5, 0.6),
                                         "sp": head(0.5 - 0.02 * i, 0.85)}},
                 "keys": keys} for i in range(3)]
    values = sp.seed_claim_values(per_seed)
    assert values["jpeg75-recall@lp"] == pytest.approx([0.0, 0.01, 0.02])
    assert values["jpeg75-recall@no-jpeg"] == pytest.approx([0.0, -0.02, -0.04])
    assert values["jpeg75-recall-every@no-jpeg"] == values["jpeg75-recall@no-jpeg"]
    assert values["inpaint16-ap@no-jpeg"] == pytest.approx([0.25] * 3)
    verdicts = {v.id: v for v in evaluate_all(sp.CLAIMS, values)}
    assert verdicts["jpeg75-recall-every"].controls[0].value == pytest.approx(-0.04)
    assert verdicts["inpaint16-ap"].verdict == "HOLDS" and not verdicts["inpaint16-ap"].discriminates
    assert verdicts["jpeg75-recall"].discriminates  # holds; LP and the no-JPEG world both fail
    for s in per_seed:
        del s["worlds"]
    assert np.isnan(sp.seed_claim_values(per_seed)["inpaint16-ap@no-jpeg"]).all()
    findings = [c for c in sp.CLAIMS if c.role == "finding"]
    assert findings and all(sp.NO_JPEG in c.controls for c in findings)
    assert {c.id for c in sp.CLAIMS if c.role == "check"} == {"clean-ap-cost", "clean-ap-cost-every",
                                                            "base-neg-weights", "trace-fools-base"}


def test_trace_rows_are_read_in_the_trace_world_and_controlled_by_lp_there_and_by_the_plain_world() -> None:
    """trace-recall and trace-fools-base are judged on the trace world's heads; trace-recall's LP control is
    LP in that world, its no-JPEG control the same metric on the no-JPEG world's heads; without the worlds
    (the paper preset) all are NaN."""
    def head(clean: float, traced: float) -> dict:
        return {"tpr": {"jpeg75": 0.5, "clean": clean, sp.TRACE_FAKE: traced},
                "ap": {"clean": 0.99, "inpaint16": 0.6}, "frac_neg": 0.4}

    keys = {"jpeg": "jpeg75", "inpaint": "inpaint16", "small": "inpaint8"}
    per_seed = [{"heads": {"base": head(1.0, 1.0), "lp": head(1.0, 1.0), "sp": head(1.0, 1.0)},
                 "worlds": {sp.TRACE: {"base": head(1.0, 0.6 - 0.1 * i), "lp": head(1.0, 0.65),
                                       "sp": head(1.0, 0.9)},
                            sp.NO_JPEG: {"base": head(1.0, 0.95), "lp": head(1.0, 0.95), "sp": head(1.0, 0.97)}},
                 "keys": keys} for i in range(3)]
    values = sp.seed_claim_values(per_seed)
    assert values["trace-fools-base"] == pytest.approx([0.4, 0.5, 0.6])
    assert values["trace-recall"] == pytest.approx([0.3, 0.4, 0.5])
    assert values["trace-recall@lp"] == pytest.approx([0.05, 0.15, 0.25])
    assert values["trace-recall@no-jpeg"] == pytest.approx([0.02] * 3)
    for s in per_seed:
        del s["worlds"]
    values = sp.seed_claim_values(per_seed)
    assert all(np.isnan(values[k]).all() for k in ("trace-fools-base", "trace-recall", "trace-recall@lp",
                                                   "trace-recall@no-jpeg"))


# ----------------------------------------------------------------------------- paper preset (real detector)


@pytest.fixture(scope="module")
def detector_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """A random ResNet-18 nodown saved as the official trainer does ({"model": DataParallel keys}),
    and a few generated PNG/JPEG images per folder of the documented layout."""
    root = tmp_path_factory.mktemp("sp_paper")
    torch.manual_seed(0)
    state = tv_resnet.ResNet("resnet18", 1, nodown=True).state_dict()
    torch.save({"model": {f"module.{k}": v for k, v in state.items()}, "optimizer": {}}, root / "det.pth")
    rng = np.random.default_rng(0)
    for folder in ("train/real", "train/fake", "val/real", "test/real", "test/genA", "test/genB"):
        (root / "img" / folder).mkdir(parents=True)
        for i in range(5):  # 40x48: smaller than the smoke crop (padded) in one side
            Image.fromarray(rng.integers(0, 256, (40, 72, 3), dtype=np.uint8)).save(
                root / "img" / folder / f"{i}.{'png' if i % 2 else 'jpg'}")
    return root / "det.pth", root / "img", state


def test_checkpoint_layouts_and_architecture_from_keys(detector_files: tuple[Path, Path, dict],
                                                       tmp_path: Path) -> None:
    ckpt, _, state = detector_files
    assert pdet.checkpoint_state(ckpt).keys() == state.keys()
    for wrap in ({"state_dict": state}, {"net": state}, state):
        torch.save(wrap, tmp_path / "x.pth")
        got = pdet.checkpoint_state(tmp_path / "x.pth")
        assert all(torch.equal(got[k], state[k]) for k in state)
    torch.save({"weights": state}, tmp_path / "bad.pth")
    with pytest.raises(ValueError, match="no ResNet state dict"):
        pdet.checkpoint_state(tmp_path / "bad.pth")
    assert pdet.arch_of(state) == "resnet18"
    assert pdet.arch_of(tv_resnet.ResNet("resnet34").state_dict()) == "resnet34"
    assert pdet.arch_of(tv_resnet.ResNet("resnet50").state_dict()) == "resnet50"


def test_detector_loads_strictly_and_its_features_are_the_forward_of_the_same_weights(
        detector_files: tuple[Path, Path, dict], tmp_path: Path) -> None:
    ckpt, img, state = detector_files
    net, arch = pdet.load_detector(ckpt)
    assert arch == "resnet18" and not any(p.requires_grad for p in net.parameters()) and not net.training
    ref = tv_resnet.ResNet("resnet18", 1, nodown=True)
    ref.load_state_dict(state)
    ref.eval()
    images = [pdet.load_crop(p, 32) for p in pdet.list_images(img / "test/real")]
    f = pdet.features(net, iter(images), batch=2)
    x = torch.from_numpy(np.stack(images).transpose(0, 3, 1, 2)).float()
    x = (x - torch.tensor(pdet.IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(pdet.IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        body = ref.layer4(ref.layer3(ref.layer2(ref.layer1(ref.maxpool(ref.relu(ref.bn1(ref.conv1(x))))))))
        assert body.shape[-1] == 32 // 8  # nodown: no stride in the stem, only layers 2-4 halve
        np.testing.assert_allclose(f, body.mean(dim=(2, 3)).numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(f @ net.fc.weight[0].numpy() + net.fc.bias.numpy(), ref(x)[:, 0].numpy(),
                                   rtol=1e-4, atol=1e-5)
    assert f.shape == (5, 512) and f.min() >= 0
    del state["layer4.1.bn2.running_var"]
    torch.save(state, tmp_path / "missing.pth")
    with pytest.raises(RuntimeError, match="Missing key"):
        pdet.load_detector(tmp_path / "missing.pth")


def test_a_stream_shared_by_two_sets_is_read_once(detector_files: tuple[Path, Path, dict]) -> None:
    """Without val/real the threshold set is the training reals, and the test reals double as the clean
    reals: extract_all reads such a shared stream once and gives both names the same features."""
    ckpt, img, _ = detector_files
    net, _ = pdet.load_detector(ckpt)
    files = pdet.layout(img)
    files["val_real"] = []
    sets = pdet.condition_sets(files, 32, (75,), (16,), 85)
    reads: dict[str, int] = {}

    def counted(name: str, make):
        def again():
            reads[name] = reads.get(name, 0) + 1
            return make()
        return again

    shared = {}
    counted_sets = {name: shared.setdefault(make, counted(name, make)) for name, make in sets.items()}
    feats, examples = pdet.extract_all(net, counted_sets)
    assert feats["val_real"] is feats["train_real"] and feats["real_clean"] is feats["real_test"]
    assert reads["train_real"] == reads["real_test"] == 2 and "val_real" not in reads and "real_clean" not in reads
    np.testing.assert_array_equal(examples["real_clean"], examples["real_test"])
    assert feats["real_test"].shape[0] == len(files["test_real"])

def test_centre_crop_pads_small_images_and_inpaint_pastes_a_fake_centre(detector_files: tuple[Path, Path, dict]
                                                                       ) -> None:
    _, img, _ = detector_files
    x = pdet.load_crop(pdet.list_images(img / "test/real")[0], 64)
    assert x.shape == (64, 64, 3) and 0 <= x.min() and x.max() <= 1
    files = pdet.cap(pdet.layout(img), 3, 2)
    assert list(files["generators"]) == ["genA", "genB"] and len(files["test_real"]) == 2
    sets = pdet.condition_sets(files, 32, (75,), (16,), 85)
    real, fake, pasted = (np.stack(list(sets[k]())) for k in ("real_test", "clean", "inpaint16"))
    assert len(fake) == 4 and np.array_equal(pasted[:, 8:24, 8:24], fake[:2, 8:24, 8:24])
    outside = np.ones((32, 32), bool)
    outside[8:24, 8:24] = False
    assert np.array_equal(pasted[:, outside], real[:, outside])


@pytest.mark.slow  # the CLI run of the paper preset (a notebook in a subprocess)
def test_paper_preset_runs_through_the_cli(detector_files: tuple[Path, Path, dict], tmp_path: Path) -> None:
    ckpt, img, _ = detector_files
    res = run_paper_smoke("stay-positive", tmp_path / "out", model_path=ckpt, data_path=img)
    m = res["metrics"]
    assert m["source"]["model_sha256"] == pdet.file_sha256(ckpt)
    assert m["source"]["arch"] == "resnet18 nodown" and m["source"]["images"]["test_genB"] == 4  # smoke: 4 per test folder
    assert m["heads"]["sp"]["frac_neg"] == 0.0  # SP's trained head has w >= 0
    assert m["heads"]["base"]["frac_neg"] > 0.2  # the random checkpoint's own fc has mixed signs
    assert set(m["ap_generator"]["Base"]) == {"genA", "genB"}
    # one backbone, one data set: the heads are trained once and every seed repeats that value
    measured = {k: v for k, v in m["claims_per_seed"].items() if not k.startswith("trace-")}
    assert all(len(v) > 1 and np.allclose(v, v[0], equal_nan=True) for v in measured.values())
    # no trace world on real images: its rows are not measured (NaN, stored as null), never a stand-in value
    assert m["claims_per_seed"]["trace-recall"] == [None] * len(m["claims_per_seed"]["trace-recall"])
    assert {c["id"] for c in res["claims"]} == {c.id for c in sp.CLAIMS}
