"""Unit checks of the DCC reproduction (ood-dcc): closed form, reductions, baselines, metrics, data."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.covariance import EmpiricalCovariance
from sklearn.metrics import roc_auc_score
from sklearn.neighbors import NearestNeighbors

from companion.papers.ood_dcc import digits_ood
from companion.models.mlp import extract, train_mlp
from companion.papers import ood_dcc as p
from companion.params import ParamError


def _features(rng: np.random.Generator, n: int = 300, D: int = 12, C: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative class-structured features with two dead units (zero variance)."""
    y = rng.integers(0, C, n)
    centres = rng.uniform(0, 2, (C, D))
    f = np.maximum(centres[y] + rng.normal(0, 0.5, (n, D)) * rng.uniform(0.05, 1, D), 0)
    f[:, :2] = 0.0
    return f, y


@pytest.fixture
def fit() -> p.GaussianFit:
    f, y = _features(np.random.default_rng(0))
    return p.GaussianFit(f, y, 3, normalize=True, ridge=1e-6)


def test_closed_form_matches_explicit_inverse(fit: p.GaussianFit) -> None:
    test = _features(np.random.default_rng(1), n=40)[0] + np.random.default_rng(2).uniform(0, 0.3, (40, 12))
    r = 6
    d, d_maha, A = fit.dcc(test, r)
    np.testing.assert_allclose(d, fit.dcc_reference(test, r), rtol=1e-8)
    U, lam = fit.residual_basis(r)
    a, m = fit.prep(test) @ U, fit.means @ U
    B = (a / lam) @ m.T
    np.testing.assert_allclose(d, d_maha - (A[:, None] - B) ** 2 / (A[:, None] - 1), rtol=1e-12)
    v = fit.prep(test) @ U @ U.T
    np.testing.assert_allclose(A, np.einsum("nd,de,ne->n", v, fit.precision, v), rtol=1e-8)


def test_identity_principal_plus_mean_energy(fit: p.GaussianFit) -> None:
    """d_DCC = P + M - 1 - (1 - B)^2/(A - 1): the explicit inverse, and P is the Mahalanobis distance of the
    principal-subspace projection (the residual directions removed from Sigma)."""
    test = _features(np.random.default_rng(12), n=30)[0] + 0.1
    r = 5
    q = fit.dcc_parts(test, r)
    split = q["P"] + q["M"] - 1 - (1 - q["B"]) ** 2 / (q["A"][:, None] - 1)
    np.testing.assert_allclose(split, fit.dcc_reference(test, r), rtol=1e-8)
    V = fit.evecs[:, r:]
    prec = V @ np.diag(1 / fit.evals[r:]) @ V.T  # pinv of Sigma restricted to its principal subspace
    delta = fit.prep(test)[:, None, :] - fit.means[None]
    np.testing.assert_allclose(q["P"], np.einsum("ncd,de,nce->nc", delta, prec, delta), rtol=1e-8)
    # r = 0: the principal subspace is everything, so the static score is MahaNorm
    np.testing.assert_allclose(fit.principal(test, 0), fit.maha(test), rtol=1e-8)
    # the control differs from the method: DCC is not the static principal score
    assert not np.allclose(p.min_score(fit.dcc(test, r)[0]), p.min_score(q["P"]))


def test_r0_is_mahanorm_and_small_A_increases_distance(fit: p.GaussianFit) -> None:
    test = _features(np.random.default_rng(3), n=20)[0]
    d, d_maha, _ = fit.dcc(test, 0)
    np.testing.assert_array_equal(d, fit.maha(test))
    # a well-spread fit with Sigma >> I makes A = f^T Sigma^-1 f < 1: the positive-definite branch
    rng = np.random.default_rng(4)
    big = p.GaussianFit(rng.normal(0, 1, (500, 5)) * 10, np.zeros(500, int), 1, normalize=False, ridge=0.0)
    x = rng.normal(0, 1, (30, 5))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    d, d_maha, A = big.dcc(x, 5)
    assert np.all(A < 1)
    assert np.all(d >= d_maha)
    np.testing.assert_allclose(d, big.dcc_reference(x, 5), rtol=1e-8)


def test_residual_basis_is_smallest_eigenspace(fit: p.GaussianFit) -> None:
    U, lam = fit.residual_basis(5)
    evals = np.linalg.eigvalsh(fit.cov)
    np.testing.assert_allclose(lam, evals[:5], rtol=1e-10)
    np.testing.assert_allclose(U.T @ U, np.eye(5), atol=1e-12)
    P = U @ U.T
    np.testing.assert_allclose(P, P.T, atol=1e-14)
    np.testing.assert_allclose(P @ P, P, atol=1e-12)
    principal = fit.evecs[:, 5:]
    v = P @ fit.prep(np.random.default_rng(5).uniform(0, 1, (7, 12))).T
    np.testing.assert_allclose(principal.T @ v, 0, atol=1e-12)


def test_normalisation_means_and_covariance() -> None:
    f, y = _features(np.random.default_rng(6))
    g = p.GaussianFit(f, y, 3, normalize=True, ridge=1e-6)
    np.testing.assert_allclose(np.linalg.norm(g.prep(f), axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(g.means[1], p.l2n(f)[y == 1].mean(axis=0), rtol=1e-12)
    assert np.allclose(g.cov_raw, g.cov_raw.T)
    assert np.linalg.eigvalsh(g.cov_raw).min() > -1e-12
    assert np.linalg.eigvalsh(g.cov).min() > 0  # the ridge lifts the dead units


def test_maha_with_identity_is_squared_euclidean() -> None:
    rng = np.random.default_rng(7)
    g = p.GaussianFit(rng.normal(size=(50, 4)), rng.integers(0, 2, 50), 2, normalize=False)
    g.precision = np.eye(4)
    x = rng.normal(size=(9, 4))
    expect = ((x[:, None, :] - g.means[None]) ** 2).sum(-1)
    np.testing.assert_allclose(g.maha(x), expect, rtol=1e-12)
    np.testing.assert_allclose(p.min_score(g.maha(x)), -expect.min(axis=1))


def test_vim_origin_alpha_and_residual() -> None:
    rng = np.random.default_rng(8)
    W, b = rng.normal(size=(3, 10)), rng.normal(size=3)
    f = np.abs(rng.normal(size=(200, 10)))
    logits = f @ W.T + b
    vf = p.vim_fit(f, logits, W, b, pdim=4)
    np.testing.assert_allclose((f - vf.u) @ W.T, logits, rtol=1e-10)
    assert vf.alpha > 0
    cov = EmpiricalCovariance(assume_centered=True).fit(f - vf.u).covariance_
    principal = np.linalg.eigh(cov)[1][:, -4:]
    np.testing.assert_allclose(principal.T @ vf.residual, 0, atol=1e-10)
    np.testing.assert_allclose(p.vim_score(vf, f, logits), p.energy(logits) - vf.alpha * p.residual_norm(vf, f))


def test_knn_matches_sklearn_and_is_zero_on_train_point() -> None:
    rng = np.random.default_rng(9)
    tr, te = rng.uniform(size=(80, 6)), rng.uniform(size=(15, 6))
    nn = NearestNeighbors(n_neighbors=5).fit(p.l2n(tr))
    np.testing.assert_allclose(-p.knn_score(tr, te, 5), nn.kneighbors(p.l2n(te))[0][:, -1], rtol=1e-7)
    np.testing.assert_allclose(p.knn_score(tr, tr[:5], 1), 0, atol=1e-6)
    # a larger k-th distance never gives a higher score
    d = -p.knn_score(tr, te, 5)
    s = p.knn_score(tr, te, 5)
    assert np.all(np.diff(s[np.argsort(d)]) <= 1e-12)
    # query blocks (one row at a time, here) give the same scores as one block; k outside 1..N is refused
    np.testing.assert_allclose(p.knn_score(tr, te, 5, block=80), s, rtol=1e-12)
    np.testing.assert_allclose(p.knn_score(tr, te, 5, block=250), s, rtol=1e-12)
    with pytest.raises(ValueError, match="knn_k"):
        p.knn_score(tr, te, 81)


def test_fpr95_and_auroc() -> None:
    rng = np.random.default_rng(10)
    assert p.fpr_at_95_tpr(rng.uniform(2, 3, 500), rng.uniform(0, 1, 500)) == 0.0
    same = p.fpr_at_95_tpr(rng.normal(size=10_000), rng.normal(size=10_000))
    assert abs(same - 0.95) < 0.03
    # the threshold uses ID scores only: shifting OOD scores below every ID score drives FPR to 0
    s_id = rng.normal(size=1000)
    assert p.fpr_at_95_tpr(s_id, s_id - 100) == 0.0
    assert p.fpr_at_95_tpr(s_id, s_id) == pytest.approx(0.95, abs=0.002)
    s_ood = np.round(rng.normal(0.5, 1, 700), 1)
    s_id_r = np.round(s_id, 1)
    expect = roc_auc_score(np.r_[np.ones(1000), np.zeros(700)], np.r_[s_id_r, s_ood])
    assert p.auroc(s_id_r, s_ood) == pytest.approx(expect, rel=1e-12)


def test_ood_generators_shapes_range_determinism() -> None:
    split = digits_ood.split_digits(6, np.random.default_rng(0))
    assert split.x_train.shape[1] == 64 and set(np.unique(split.y_train)) == set(range(6))
    sets = digits_ood.ood_sets(split, digits_ood.OOD_SETS, np.random.default_rng(1))
    again = digits_ood.ood_sets(split, digits_ood.OOD_SETS, np.random.default_rng(1))
    for k, x in sets.items():
        assert x.ndim == 2 and x.shape[1] == 64
        assert x.min() >= 0 and x.max() <= 16
        np.testing.assert_array_equal(x, again[k])
    assert sets["photo"].shape == (600, 64) and sets["noise"].shape == (600, 64)
    np.testing.assert_array_equal(digits_ood.rot90(digits_ood.rot90(digits_ood.rot90(digits_ood.rot90(
        split.x_test)))), split.x_test)


def test_scores_finite_and_negatives_counted_not_nan() -> None:
    rng = np.random.default_rng(11)
    X = rng.uniform(0, 1, (120, 8))
    y = rng.integers(0, 3, 120)
    model = train_mlp(X, y, (8, 16, 8), 3, torch.Generator().manual_seed(0), epochs=10)
    logits, feats = extract(model, X)
    params = p.Params.resolve("quick", feat_dim=16, residual_frac=0.5)
    bank = p.Bank((logits, feats), y, (logits, feats), {"noise": extract(model, rng.uniform(0, 3, (50, 8)))},
                  model.head.weight.detach().double().numpy(), model.head.bias.detach().double().numpy(), 1.0)
    scores, norm = p.all_scores(bank, params)
    for method in p.METHODS:
        for s in scores[method].values():
            assert np.all(np.isfinite(s)), method
    # force the negative-distance branch: min_score stays finite where sqrt would give NaN
    assert np.isfinite(p.min_score(np.array([[-1.0, 2.0]]))).all()
    mech = p.mechanism(norm, bank, 4, rng, n_exact=10)
    assert 0 <= mech["frac_negative"] <= 1 and mech["exact_err"] < 1e-6


def test_training_is_deterministic() -> None:
    X = np.random.default_rng(0).uniform(size=(64, 8))
    y = np.arange(64) % 2
    a = extract(train_mlp(X, y, (8, 8), 2, torch.Generator().manual_seed(3), epochs=3), X)[1]
    b = extract(train_mlp(X, y, (8, 8), 2, torch.Generator().manual_seed(3), epochs=3), X)[1]
    np.testing.assert_array_equal(a, b)


def test_params_reject_bad_values() -> None:
    with pytest.raises(ParamError, match="unknown parameter"):
        p.Params.resolve("quick", feat_dimm=64)
    with pytest.raises(ParamError, match="is not an int"):
        p.Params.resolve("quick", feat_dim="64")
    with pytest.raises(ParamError, match="out of range"):
        p.Params.resolve("quick", residual_frac=1.0)
    with pytest.raises(ParamError, match="out of range"):
        p.Params.resolve("quick", ood_sets=("near", "mnist"))
    assert p.Params.resolve("full").seeds >= p.Params.resolve("quick").seeds >= 3


def _write_cached_features(folder, seed: int) -> None:
    """A features_dir of random cached features: train, test and one OOD set (textures), and a head."""
    rng = np.random.default_rng(seed)
    W, b = rng.normal(size=(3, 16)), rng.normal(size=3)
    for name, n in (("train", 150), ("test", 60), ("textures", 40)):
        f = np.abs(rng.normal(size=(n, 16))) + (name == "textures")
        np.save(folder / f"{name}_feats.npy", f)
        np.save(folder / f"{name}_logits.npy", f @ W.T + b)
    np.save(folder / "train_labels.npy", rng.integers(0, 3, 150))
    np.save(folder / "head_W.npy", W)
    np.save(folder / "head_b.npy", b)


def test_cached_features_path(tmp_path) -> None:
    _write_cached_features(tmp_path, 12)
    params = p.Params.resolve("paper", ood_sets=("textures",), features_dir=str(tmp_path), knn_k=5,
                              seeds=3)
    out = p.run_seed(params, 0)
    assert {r["method"] for r in out["rows"]} == set(p.METHODS)
    assert all(0 <= r["auroc"] <= 1 for r in out["rows"])
    with pytest.raises(ParamError, match="features_dir"):
        p.run(p.Params.resolve("paper"))


def _tiny_image_world(root, sets=("textures", "sun")):
    """A random tiny ResNet classifier saved with save_pretrained and a few generated images."""
    from PIL import Image
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    model = ResNetForImageClassification(ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16],
                                                      depths=[1, 1], num_labels=3, image_size=32))
    model.save_pretrained(root / "model")
    rng = np.random.default_rng(0)

    def write(folder, n, bias):
        folder.mkdir(parents=True)
        for i in range(n):
            arr = np.clip(rng.normal(bias, 40, size=(20, 24, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(arr).save(folder / f"{i}.png")

    for split, n in (("train", 30), ("test", 10)):
        for c in range(3):
            write(root / "images" / split / f"class{c}", n, 60 + 60 * c)
    for s in sets:
        write(root / "images" / "ood" / s, 12, 128)
    return model


def test_extraction_writes_the_features_dir_that_the_paper_preset_reads(tmp_path, capsys):
    from companion.papers.ood_dcc import paper_preset as extract

    model = _tiny_image_world(tmp_path)
    assert extract.main(["--model-dir", str(tmp_path / "model"), "--images", str(tmp_path / "images"),
                         "--out", str(tmp_path / "feats"), "--dataset", "cifar10", "--batch", "7"]) == 0
    feats = tmp_path / "feats"
    assert np.load(feats / "train_feats.npy").shape == (90, 16)
    assert np.load(feats / "textures_logits.npy").shape == (12, 3)
    assert np.array_equal(np.load(feats / "train_labels.npy"), np.repeat(np.arange(3), 30))
    W, b = np.load(feats / "head_W.npy"), np.load(feats / "head_b.npy")
    # the cached logits are the head applied to the cached features (the features are its input)
    assert np.allclose(np.load(feats / "test_feats.npy") @ W.T + b, np.load(feats / "test_logits.npy"), atol=1e-5)
    assert np.allclose(W, model.classifier[1].weight.detach().double().numpy())
    bank = p.cached_bank(str(feats), ("textures", "sun"))
    assert bank.train[1].shape == (90, 16) and set(bank.ood) == {"textures", "sun"}
    params = p.Params.resolve("paper", features_dir=str(feats), ood_sets=("textures", "sun"), knn_k=5)
    assert params.features_dir == str(feats)
    # streamed through the official transform: one image by hand gives the cached logits
    from PIL import Image

    first = sorted((tmp_path / "images" / "test" / "class0").iterdir())[0]
    x = extract.transform("cifar10", Image.open(first).convert("RGB"))
    with torch.no_grad():
        np.testing.assert_allclose(model.eval()(pixel_values=x[None]).logits.double().numpy()[0],
                                   np.load(feats / "test_logits.npy")[0], atol=1e-4)
    assert extract.main(["--model-dir", str(tmp_path / "nope"), "--images", str(tmp_path / "images"),
                         "--out", str(tmp_path / "f2")]) == 2
    assert "config.json" in capsys.readouterr().err


@pytest.mark.slow
def test_paper_preset_runs_through_the_cli_on_extracted_features(tmp_path, capsys):
    import json

    from companion import cli
    from companion.papers.ood_dcc import paper_preset

    _tiny_image_world(tmp_path)
    assert paper_preset.main(["--model-dir", str(tmp_path / "model"), "--images", str(tmp_path / "images"),
                              "--out", str(tmp_path / "f"), "--dataset", "cifar10"]) == 0
    assert cli.main(["run", "ood-dcc", "--preset", "paper", "-p", f"features_dir={tmp_path / 'f'}",
                     "-p", "ood_sets=textures,sun", "-p", "knn_k=5", "-p", "device=cpu",
                     "--out", str(tmp_path / "run")]) == 0
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["status"] == "ok" and res["params"]["preset"] == "paper"
    assert set(res["provenance"]["paths"]) == {"features_dir"}
    assert len(res["provenance"]["paths"]["features_dir"]["sha256"]) == 64


def test_every_finding_has_its_controls_measured_and_checks_have_none(tmp_path) -> None:
    """Each finding's controls are handed in under "<id>@<control>" with DCC replaced by MahaNorm or the
    static principal score (values that differ from DCC's); the "in every seed" rows are the worst seed."""
    import dataclasses

    from companion import claims

    _write_cached_features(tmp_path, 3)
    params = p.Params.resolve("paper", ood_sets=("textures",), features_dir=str(tmp_path), knn_k=5, seeds=3)
    res = p.run(params)
    assert res.timing["loop_s"] > 0 and res.timing["n_features"] == 100
    # the same results read as a digits run whose seeds differ
    table = res.table.copy()
    table.loc[table["method"] == "DCC", "auroc"] += table.loc[table["method"] == "DCC", "seed"] * 0.01
    digits = dataclasses.replace(res, table=table)
    values = p.claim_values(digits)
    verdicts = {v.id: v for v in p.check(digits)}
    for c in p.CLAIMS:
        assert (c.role == "check") == (not c.controls), c.id
        for name in c.controls if "fpr" not in c.id else ():  # DCC's AUROC was shifted above, not its FPR
            assert values[c.control_key(name)] != values[c.id], (c.id, name)
    gain = verdicts["dcc-vs-maharaw-auroc"]
    assert gain.kind == "statistical" and len(gain.per_seed) == 3 and np.ptp(gain.per_seed) > 0.015
    every = verdicts["dcc-vs-maharaw-auroc-every"]
    assert every.kind == "every" and every.value == min(gain.per_seed) and every.per_seed == gain.per_seed
    assert [c.value for c in every.controls] == [min(values[f"dcc-vs-maharaw-auroc@{n}"]) for n in p.CONTROLS]
    assert [c.per_seed for c in every.controls] == [tuple(values[f"dcc-vs-maharaw-auroc@{n}"]) for n in p.CONTROLS]
    assert verdicts["dcc-vs-maharaw-fpr-every"].value == claims.worst(values["dcc-vs-maharaw-fpr"], "<=")
    m = p.per_seed_means(digits).pivot(index="seed", columns="method", values="auroc")
    np.testing.assert_allclose(values["dcc-vs-mahanorm@principal"], m["MahaPrincipal"] - m["MahaNorm"])
    np.testing.assert_allclose(values["dcc-vs-knn@mahanorm"], m["MahaNorm"] - m["KNN"])
    for cid in ("update-exact", "update-identity", "indefinite-regime", "few-negatives"):
        assert verdicts[cid].role == "check" and verdicts[cid].interval is None
    assert verdicts["update-exact"].value == res.mechanism["exact_err"].max()
    assert verdicts["update-identity"].value < 1e-6


def test_package_import_loads_neither_torch_nor_the_experiment() -> None:
    import subprocess
    import sys

    code = ("import sys, companion.papers.ood_dcc as p; p.Params.resolve('quick', seeds=4); p.CLAIMS;"
            "print('torch' in sys.modules, 'companion.papers.ood_dcc.experiment' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
    paper = p.Params.PRESETS["paper"]  # ImageNet ResNet-50: ViM's official 1000 principal dimensions, r = 512
    assert round(paper["vim_pdim_frac"] * 2048) == 1000 and round(paper["residual_frac"] * 2048) == 512


def _torchvision_world(root, stem: str = "cifar"):
    """A random-init ResNet-18 in torchvision's layout (CIFAR or ImageNet stem, 3 classes), its state_dict
    saved with torch.save, and generated images."""
    from companion.models import tv_resnet

    torch.manual_seed(0)
    net = tv_resnet.ResNet("resnet18", 3, cifar_stem=stem == "cifar")
    torch.save(net.state_dict(), root / "weights.pth")
    _tiny_image_world(root)
    return net.eval()


def test_resnets_have_torchvisions_layout() -> None:
    """Parameter counts are torchvision's published num_params; names and shapes are torchvision's."""
    from companion.models import tv_resnet

    counts = {"resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50": 25_557_032}
    for arch, n in counts.items():
        net = tv_resnet.ResNet(arch)
        assert sum(p.numel() for p in net.parameters()) == n, arch
    sd = tv_resnet.ResNet("resnet50").state_dict()
    assert sd["layer1.0.downsample.0.weight"].shape == (256, 64, 1, 1)
    assert sd["layer4.2.conv3.weight"].shape == (2048, 512, 1, 1) and sd["fc.weight"].shape == (1000, 2048)
    assert "layer2.0.downsample.1.num_batches_tracked" in sd and len(sd) == 320
    assert len(tv_resnet.ResNet("resnet18").state_dict()) == 122
    # the transforms: Resize(int) matches the shorter side, CenterCrop rounds its offsets
    from PIL import Image

    img = Image.new("RGB", (300, 200))
    assert tv_resnet.resize(img, 256).size == (384, 256) and tv_resnet.center_crop(img, 100).size == (100, 100)


def test_torchvision_extraction_writes_the_features_dir(tmp_path, capsys):
    import json

    from companion.papers.ood_dcc import paper_preset as extract

    net = _torchvision_world(tmp_path)
    args = ["--images", str(tmp_path / "images"), "--out", str(tmp_path / "f"), "--backbone", "resnet18",
            "--weights", str(tmp_path / "weights.pth")]
    assert extract.main(args) == 0
    f = tmp_path / "f"
    assert np.load(f / "train_feats.npy").shape == (90, 512) and np.load(f / "sun_logits.npy").shape == (12, 3)
    assert np.array_equal(np.load(f / "train_labels.npy"), np.repeat(np.arange(3), 30))
    W, b = np.load(f / "head_W.npy"), np.load(f / "head_b.npy")
    np.testing.assert_allclose(W, net.fc.weight.detach().double().numpy())
    # the features are the pooled input of fc: the head reproduces the logits, and post-ReLU pooling is >= 0
    feats = np.load(f / "test_feats.npy")
    np.testing.assert_allclose(feats @ W.T + b, np.load(f / "test_logits.npy"), atol=1e-4)
    assert feats.min() >= 0
    # one image through the network by hand: the official CIFAR-10 transform (32 x 32, official mean and std)
    from PIL import Image

    first = sorted((tmp_path / "images" / "test" / "class0").iterdir())[0]
    x = extract.transform("cifar10", Image.open(first).convert("RGB"))
    assert x.shape == (3, 32, 32)
    with torch.no_grad():
        np.testing.assert_allclose(net(x[None]).double().numpy()[0], np.load(f / "test_logits.npy")[0], atol=1e-4)
    meta = json.loads((f / "extract.json").read_text())
    assert meta["dataset"] == "cifar10" and meta["feature_dim"] == 512 and meta["images"]["train"] == 90
    # CIFAR-10's KNN k = 50 at 50,000 training images, scaled to the 90 present; r and ViM: D / 2 (ours)
    assert meta["params"] == {"residual_frac": 0.5, "vim_pdim_frac": 0.5, "knn_k": 1}
    assert "knn_k=1" in capsys.readouterr().out
    assert extract.main([*args[:-1], str(tmp_path / "missing.pth")]) == 2


def test_extraction_settings_follow_the_official_scripts() -> None:
    from companion.papers.ood_dcc import paper_preset as extract

    full = extract.settings("imagenet", 2048, 1_281_167)  # ImageNet ResNet-50: r = 512, ViM 1000, k = 1000
    assert (full.residual_dim, full.vim_pdim, full.knn_k) == (512, 1000, 1000)
    assert full.params(2048) == {"residual_frac": 0.25, "vim_pdim_frac": 0.4883, "knn_k": 1000}
    assert extract.settings("imagenet", 2048, 128_117).knn_k == 100  # k scales with the training fraction
    assert extract.settings("cifar100", 512, 50_000).knn_k == 200
    from PIL import Image

    assert extract.transform("imagenet", Image.new("RGB", (300, 260))).shape == (3, 224, 224)


@pytest.mark.slow
def test_paper_preset_runs_on_torchvision_features(tmp_path) -> None:
    import json

    from companion import cli
    from companion.papers.ood_dcc import paper_preset as extract

    _torchvision_world(tmp_path, stem="imagenet")
    assert extract.main(["--images", str(tmp_path / "images"), "--out", str(tmp_path / "f"), "--backbone",
                         "resnet18", "--weights", str(tmp_path / "weights.pth")]) == 0  # 7x7 stem on 32 x 32
    meta = json.loads((tmp_path / "f" / "extract.json").read_text())
    flags = [x for k, v in meta["params"].items() for x in ("-p", f"{k}={v}")]
    assert cli.main(["run", "ood-dcc", "--preset", "paper", "-p", f"features_dir={tmp_path / 'f'}",
                     "-p", "ood_sets=textures,sun", *flags, "-p", "device=cpu", "--out", str(tmp_path / "run")]) == 0
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["status"] == "ok" and res["params"]["residual_frac"] == 0.5
