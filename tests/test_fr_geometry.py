"""Unit checks of the fr-geometry reproduction: energy, stencils, renderer, triplet loss, macroscale, params."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from companion.papers import fr_geometry as p
from companion.papers.fr_geometry import embedder, experiment, faces, paper_preset
from companion.papers.fr_geometry import energy as en
from companion.params import ParamError
from hf_tiny import run_paper_smoke


def _cloud(rng: np.random.Generator, C: int = 200, D: int = 32) -> np.ndarray:
    return rng.normal(size=(C, D))


# ---------------------------------------------------------------- energy
@pytest.mark.parametrize("mode", en.NEIGHBORS)
def test_energy_constant_field_is_zero_and_random_field_is_one(mode: str) -> None:
    rng = np.random.default_rng(0)
    P = _cloud(rng)
    V = np.tile(rng.normal(size=32), (200, 1)) * rng.uniform(0.1, 3, (200, 1))
    assert en.energy(P, V, mode) == pytest.approx(0.0, abs=1e-12)
    assert abs(en.energy(P, rng.normal(size=(200, 32)), mode) - 1.0) < 0.05


def test_energy_two_for_antiparallel_neighbours() -> None:
    rng = np.random.default_rng(1)
    base = rng.normal(size=(20, 16))
    P = np.repeat(base, 2, axis=0) + np.tile([[0.0], [1.0]], (20, 1)) * 1e-3 * rng.normal(size=(40, 16))
    u = rng.normal(size=16)
    V = np.tile(np.stack([u, -u]), (20, 1))
    assert en.energy(P, V, "knn", k=1) == pytest.approx(2.0, abs=1e-12)


def test_energy_in_range_and_invariances() -> None:
    rng = np.random.default_rng(2)
    for trial in range(5):
        P, V = _cloud(rng, 60, 8), rng.normal(size=(60, 8)) + trial * rng.normal(size=8)
        e = en.energy(P, V)
        assert 0.0 <= e <= 2.0
        Q, _ = np.linalg.qr(rng.normal(size=(8, 8)))
        assert en.energy(P @ Q, V @ Q) == pytest.approx(e, abs=1e-10)
        assert en.energy(P, V * rng.uniform(0.01, 100, (60, 1))) == pytest.approx(e, abs=1e-10)


def test_vectorised_energy_matches_double_loop() -> None:
    rng = np.random.default_rng(3)
    P, V = _cloud(rng, 50, 12), rng.normal(size=(50, 12)) + rng.normal(size=12)
    assert en.energy(P, V, "knn", 10) == pytest.approx(en.energy_loop(P, V, 10), abs=1e-10)


def test_knn_excludes_self_even_with_duplicates() -> None:
    P = np.repeat(np.random.default_rng(4).normal(size=(10, 5)), 2, axis=0)
    nb = en.knn_indices(en.distances(P), 3)
    assert not np.any(nb == np.arange(20)[:, None])
    with pytest.raises(ValueError, match="knn_k"):
        en.knn_indices(en.distances(P), 20)


def test_null_vectors_are_dropped_and_reported() -> None:
    rng = np.random.default_rng(5)
    P, V = _cloud(rng, 30, 6), rng.normal(size=(30, 6))
    V[[3, 7]] = 0.0
    V[11] = 1e-14
    e, dropped = en.field_energy(P, V, "knn", 5)
    assert dropped == 3 and np.isfinite(e)
    keep = np.setdiff1d(np.arange(30), [3, 7, 11])
    assert e == pytest.approx(en.energy(P[keep], V[keep], "knn", 5), abs=1e-12)


def test_sensitivity_scales_with_step() -> None:
    V = np.full((4, 3), 0.2)
    assert en.sensitivity(V, 0.1) == pytest.approx(np.linalg.norm([0.2] * 3) / 0.2)


# ---------------------------------------------------------------- stencils and renderer
@pytest.mark.parametrize("attr", list(faces.ATTRIBUTES))
def test_stencil_differs_only_in_target_by_h(attr: str) -> None:
    s, h = faces.stencil(attr, 25, 0.1, np.random.default_rng(6))
    lo, hi = faces.ATTRIBUTES[attr]
    assert h == pytest.approx(0.1 * (hi - lo))
    minus, centre, plus = ({k: v[i * 25:(i + 1) * 25] for k, v in s.items()} for i in range(3))
    for k in faces.ATTRIBUTES:
        if k == attr:
            np.testing.assert_allclose(centre[k] - minus[k], h)
            np.testing.assert_allclose(plus[k] - centre[k], h)
            assert np.all(centre[k] >= lo + h) and np.all(centre[k] <= hi - h)
        else:
            np.testing.assert_array_equal(minus[k], centre[k])
            np.testing.assert_array_equal(plus[k], centre[k])


def _faces(n: int = 4, seed: int = 7) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    return faces.sample_identities(n, rng), faces.sample_attributes(n, rng)


def test_render_deterministic_shape_dtype_range() -> None:
    ids, attrs = _faces()
    a, b = faces.render(ids, attrs, 32), faces.render(ids, attrs, 32)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (4, 32, 32, 3) and a.dtype == np.float32
    assert a.min() >= 0.0 and a.max() <= 1.0


def test_neutral_photometric_is_identity_and_hue_keeps_luma() -> None:
    rng = np.random.default_rng(8)
    img = rng.uniform(0, 1, (3, 16, 16, 3))
    xs = np.linspace(-1, 1, 16)[None, :].repeat(16, 0)
    np.testing.assert_allclose(faces.photometric(img, faces.neutral_attributes(3), xs), img, atol=1e-12)
    rot = faces.hue_rotate(img, np.array([0.3, -1.2, np.pi]))
    y = lambda x: x @ np.array([0.299, 0.587, 0.114])  # noqa: E731
    np.testing.assert_allclose(y(rot), y(img), atol=1e-12)
    assert np.abs(rot - img).max() > 0.05


def test_identity_parameter_changes_image_and_pose_moves_eyes() -> None:
    ids, _ = _faces(1)
    neutral = faces.neutral_attributes(1)
    base = faces.render(ids, neutral, 48)
    for k in ("eye_sp", "skin_hue", "mouth_w"):
        other = dict(ids)
        lo, hi = faces.IDENTITY_RANGES[k]
        other[k] = np.array([hi if ids[k][0] < (lo + hi) / 2 else lo])
        assert np.abs(faces.render(other, neutral, 48) - base).max() > 0.05

    def eye_x(pose: float) -> float:
        a = faces.neutral_attributes(1)
        a["pose"] = np.array([pose])
        img = faces.render(ids, a, 48)[0]
        dark = (img.sum(-1) < 0.35) & (np.arange(48)[:, None] < 24)
        return float(np.nonzero(dark)[1].mean())

    assert eye_x(0.12) - eye_x(-0.12) > 2.0


# ---------------------------------------------------------------- model and loss
def test_triplet_loss_zero_when_separated_positive_otherwise_and_differentiable() -> None:
    labels = torch.tensor([0, 0, 1, 1])
    sep = torch.tensor([[1.0, 0.0], [0.99, 0.141], [-1.0, 0.0], [-0.99, 0.141]], dtype=torch.float64)
    assert float(embedder.batch_hard_triplet(sep, labels, 0.2)) == 0.0
    mixed = torch.randn(4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 0.1
    mixed.requires_grad_(True)
    loss = embedder.batch_hard_triplet(mixed, labels, 0.2)
    assert float(loss.detach()) > 0
    torch.autograd.gradcheck(lambda e: embedder.batch_hard_triplet(e, labels, 0.2), (mixed,))


def test_embeddings_unit_norm() -> None:
    torch.manual_seed(0)
    ids, attrs = _faces(6)
    E = embedder.embed(embedder.FaceCNN(8, 16), faces.render(ids, attrs, 32))
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-6)


# ---------------------------------------------------------------- macroscale
def test_ks_matches_scipy() -> None:
    rng = np.random.default_rng(9)
    for n, m in ((30, 45), (100, 7), (50, 50)):
        x, y = rng.normal(size=n), rng.normal(0.3, 1.2, m)
        x[:5] = y[:5]  # ties
        assert en.ks_statistic(x, y) == pytest.approx(stats.ks_2samp(x, y).statistic, abs=1e-12)
    z = rng.integers(0, 3, 40).astype(float)
    assert en.ks_statistic(z, z[::-1]) == pytest.approx(stats.ks_2samp(z, z[::-1]).statistic)


def test_macro_sets_one_image_per_identity_equal_sizes() -> None:
    rng = np.random.default_rng(10)
    owner = np.repeat(np.arange(30), 5)
    group = rng.choice([-1, 0, 1], size=150, p=[0.3, 0.3, 0.4])
    pos, neg = en.macro_sets(group, owner, rng)
    assert len(pos) == len(neg)
    assert len(np.unique(owner[pos])) == len(pos) and len(np.unique(owner[neg])) == len(neg)
    assert np.all(group[pos] == 1) and np.all(group[neg] == -1)
    with pytest.raises(ValueError):
        en.macro_sets(np.ones(150, int), owner, rng)


def test_entropies() -> None:
    owner = np.repeat(np.arange(10), 4)
    const = np.repeat(np.where(np.arange(10) < 5, 1, -1), 4)
    assert en.intra_entropy(const, owner) == 0.0
    half = np.tile([1, -1, 1, -1], 10)
    assert en.intra_entropy(half, owner) == pytest.approx(1.0)
    assert en.inter_entropy(half, owner) < en.inter_entropy(const, owner)


def test_random_embedding_auc_is_half() -> None:
    rng = np.random.default_rng(11)
    owner = np.repeat(np.arange(100), 4)
    assert abs(en.verification_auc(rng.normal(size=(400, 32)), owner) - 0.5) < 0.03


# ---------------------------------------------------------------- pipeline and params
def _tiny_config() -> p.Params:
    """A few-second seed: fields set past the presets' bounds on purpose (a test, not a run)."""
    return replace(p.Params.resolve("quick", device="cpu"), img_size=24, n_train_ids=50, n_test_ids=20, width=8,
                   emb_dim=16, P=4, K=2, base_steps=6, ft_steps=4, energy_ids=4, C=12, knn_k=5, macro_ids=30)


def test_run_seed_deterministic() -> None:
    a, b = experiment.run_seed(_tiny_config(), 3), experiment.run_seed(_tiny_config(), 3)
    for m in a.energies["knn"]:
        np.testing.assert_array_equal(a.energies["knn"][m], b.energies["knn"][m])
    assert a.auc == b.auc
    assert set(a.energies["knn"]) == {"random", "base", "ft_none", "ft_contrast"}
    row = experiment.summary_row(a, "knn")
    assert row["dE"] == pytest.approx(float((a.energies["knn"]["ft_contrast"] - a.energies["knn"]["ft_none"])[:, 5].mean()))


def test_macro_only_seed_is_the_seeds_own_base_model() -> None:
    """A macroscale-only seed trains the base model that the whole seed would: the same KS gap exactly."""
    cfg = _tiny_config()
    whole, alone = experiment.run_seed(cfg, 4), experiment.run_macro_seed(cfg, 4)
    assert alone.macro["base"] == whole.macro["base"]
    assert alone.macro["random"] == whole.macro["random"]  # the untrained control is the seed's own too
    assert experiment.ks_gap(alone.macro["base"]) == experiment.summary_row(whole, "knn")["ks_gap"]
    other = experiment.run_macro_seed(cfg, 5)
    assert experiment.ks_gap(other.macro["base"]) != experiment.ks_gap(alone.macro["base"])


def _fake_seed(rng: np.random.Generator) -> experiment.SeedResult:
    """A seed whose energies are random, with the contrast ΔE and a brightness ΔE set by hand."""
    n, a = 8, len(faces.ATTRIBUTES)
    E = {m: rng.uniform(0.2, 1.0, (n, a)) for m in ("random", "base", "ft_none", "ft_contrast")}
    E["ft_none"] = E["base"] + 0.01
    E["ft_contrast"] = E["ft_none"].copy()
    E["ft_contrast"][:, 5] += 0.3  # contrast
    E["ft_contrast"][:, 4] -= 0.4  # brightness, a photometric neighbour
    ks = {k: {"ks_max": v} for k, v in (("skin_hue (identity)", 0.3), ("expression (image)", 0.1),
                                        ("hair_hue (image)", 0.05))}
    return experiment.SeedResult(0, {"knn": E}, {m: np.ones((n, a)) for m in E}, {}, 0,
                                 {m: 0.9 for m in E}, {"base": ks, "random": ks}, {}, {}, {})


def test_summary_row_controls_and_specificity_over_every_attribute() -> None:
    r = _fake_seed(np.random.default_rng(0))
    row = experiment.summary_row(r, "knn")
    assert row["dE"] == pytest.approx(0.3)
    assert row["dE_noaug"] == pytest.approx(0.01)  # ft_none - base: the no-augmentation control
    assert row["frac_pos_noaug"] == 1.0
    # the brightness neighbour is not excluded: |ΔE| 0.4 > 0.3 makes the specificity negative
    assert row["max_abs_other"] == pytest.approx(0.4)
    assert row["specificity"] == pytest.approx(-0.1)
    E = r.energies["knn"]["random"].mean(0)
    assert row["gap_untrained"] == pytest.approx(E[[0, 1, 2]].mean() - E[[4, 5]].mean())


def test_claim_values_cover_every_claim_and_control() -> None:
    params = p.Params.resolve("quick", seeds=2, macro_seeds=2)
    rs = [_fake_seed(np.random.default_rng(s)) for s in (0, 1)]
    values = experiment.claim_values(experiment.Results(params, rs, 0.0))
    verdicts = p.check(experiment.Results(params, rs, 0.0))
    assert {v.id for v in verdicts} == {c.id for c in p.CLAIMS}
    assert all(v.controls for v in verdicts if v.role == "finding")
    assert {v.id for v in verdicts if v.role == "check"} == {"guard-auc", "guard-sensitivity"}
    assert values["aug-energy-up@no-augmentation"] == pytest.approx([0.01, 0.01])
    assert values["invariance-gap@untrained"] != values["invariance-gap"]
    every = {v.id: v for v in verdicts}["invariance-gap-every"]
    assert every.kind == "every" and every.value == min(every.per_seed) and len(every.controls[0].per_seed) == 2
    unmeasured = experiment.claim_values(experiment.Results(params, [], 0.0))
    assert set(unmeasured) == set(values) and all(np.isnan(np.ravel(v)).all() for v in unmeasured.values())


@pytest.mark.parametrize("overrides, match", [
    ({"bogus": 1}, "unknown parameter 'bogus'"),
    ({"C": "thirty"}, "parameter 'C'"),
    ({"stencil_h": 0.5}, "parameter 'stencil_h'"),
    ({"C": 10, "knn_k": 10}, "parameter 'C'"),
    ({"energy_ids": 50}, "parameter 'energy_ids'"),
    ({"aug_attributes": ("pose",)}, "parameter 'aug_attributes'"),
    ({"macro_seeds": 2}, "parameter 'macro_seeds'"),
])
def test_bad_params_refused(overrides: dict, match: str) -> None:
    with pytest.raises(ParamError, match=match):
        p.Params.resolve("quick", **overrides)


def test_cli_exits_2_before_compute(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("companion")
    for args in (["--preset", "paper", "-p", f"model_path={tmp_path}/x.pt", "-p", "knn_k=abc"],):
        out = subprocess.run([str(exe), "run", "fr-geometry", *args, "--out", str(tmp_path / "o")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, out.stderr
        assert "parameter" in out.stderr


def _tiny_celeba(root: Path, n_ids: int = 6, per_id: int = 12) -> None:
    """A CelebA-format folder of rendered faces (jpg), identities and 40 random +-1 attributes."""
    from PIL import Image

    rng = np.random.default_rng(12)
    ids = faces.sample_identities(n_ids, rng)
    owner = np.repeat(np.arange(n_ids), per_id)
    img = faces.render(faces.take(ids, owner), faces.sample_attributes(len(owner), rng), 40)
    (root / "img_align_celeba").mkdir(parents=True)
    names = [f"{i:06d}.jpg" for i in range(len(owner))]
    for name, x in zip(names, img):
        Image.fromarray((x * 255).astype(np.uint8)).save(root / "img_align_celeba" / name)
    (root / "identity_CelebA.txt").write_text("".join(f"{n} {o + 1}\n" for n, o in zip(names, owner)))
    attrs = [f"Attr_{k}" for k in range(40)]
    vals = rng.choice([-1, 1], size=(len(owner), 40))
    vals[:, 0] = np.where(owner % 2 == 0, 1, -1)  # an identity-level attribute
    body = "".join(n + " " + " ".join(map(str, v)) + "\n" for n, v in zip(names, vals))
    (root / "list_attr_celeba.txt").write_text(f"{len(owner)}\n{' '.join(attrs)}\n{body}")


@pytest.mark.slow
def test_paper_preset_offline_on_tiny_checkpoint_and_data(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.jit.script(embedder.FaceCNN(8, 16))
    torch.jit.save(model, str(tmp_path / "model.pt"))
    _tiny_celeba(tmp_path / "celeba")
    real_out = paper_preset.run_real(p.Params.resolve("paper", model_path=str(tmp_path / "model.pt"),
                                                data_path=str(tmp_path / "celeba"), smoke=True, device="cpu",
                                                paper_img_size=32))
    assert real_out.energies["knn"].shape == (4, 4)
    assert np.all((real_out.energies["knn"] >= 0) & (real_out.energies["knn"] <= 2))
    assert "Attr_0" in real_out.macro.index
    run_paper_smoke("fr-geometry", tmp_path / "run", model_path=tmp_path / "model.pt",
                    data_path=tmp_path / "celeba", paper_img_size=32)
