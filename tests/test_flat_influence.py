"""Unit checks of flat-influence: influence vs leave-one-out, the second-order form, Hessian
utilities, LiSSA / CG, SAM, label noise, score signs, metrics, params and the CIFAR-10N loader."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import chisquare, pearsonr
from sklearn.metrics import average_precision_score, roc_auc_score

from companion.params import ParamError
from companion.papers import flat_influence as paper
from companion.papers.flat_influence import curvature as C, paper_preset as cifar, scores as S
from companion.papers.flat_influence.network import TanhMLP, ce_mean
from companion.papers.flat_influence.noisy_data import inject_noise
from companion.papers.flat_influence.optimize import adam_descent, newton_minimize, sam_gradient
from hf_tiny import run_paper_smoke

D = torch.float64


def _blobs(rng, n, d, k, sep=1.5):
    means = sep * rng.standard_normal((k, d))
    y = rng.integers(0, k, n)
    return torch.tensor(means[y] + rng.standard_normal((n, d))), torch.tensor(y)


def test_if_matches_leave_one_out_on_l2_logistic_regression():
    rng = np.random.default_rng(0)
    X, y = _blobs(rng, 200, 5, 3)
    Xv, yv = _blobs(rng, 100, 5, 3)
    net, lam, n = TanhMLP(5, 0, 3), 1e-2, 200

    def risk(t, w=None):
        return ce_mean(net, t, X, y, w) + lam / 2 * t @ t

    theta = newton_minimize(risk, torch.zeros(net.n_params, dtype=D))
    inv = C.DampedInverse.of(torch.func.hessian(risk)(theta), 0.0)
    g_val = C.mean_grad(net, theta, Xv, yv)
    G = C.per_sample_grads(net, theta, X, y)  # the regularizer stays when a sample is removed
    predicted = -S.if_harm(g_val, inv, G) / n  # removing i up-weights it by -1/n
    base = float(ce_mean(net, theta, Xv, yv))
    idx = rng.choice(n, 30, replace=False)
    actual = []
    for i in idx:
        w = torch.ones(n, dtype=D)
        w[i] = 0.0
        t_i = newton_minimize(lambda t: risk(t, w), theta)
        actual.append(float(ce_mean(net, t_i, Xv, yv)) - base)
    pred, act = predicted[idx].numpy(), np.array(actual)
    assert pearsonr(pred, act).statistic >= 0.98
    assert np.median(np.abs(pred - act) / np.abs(act)) <= 0.10


def test_second_order_form_is_exact_to_first_order_in_eps_on_least_squares():
    rng = np.random.default_rng(1)
    X, beta = rng.standard_normal((100, 5)), rng.standard_normal(5)
    y = X @ beta + 0.1 * rng.standard_normal(100)
    H = torch.tensor(X.T @ X / 100)
    theta = np.linalg.solve(X.T @ X, X.T @ y)
    x_z, y_z = rng.standard_normal(5), 5.0  # a deliberately wrong target
    g = torch.tensor(x_z * (x_z @ theta - y_z))[None]
    pred_unit = 0.5 * float(C.DampedInverse.of(H, 0.0).quad(g)[0])
    errs = []
    for eps in (1e-3, 1e-4):
        t_eps = np.linalg.solve(X.T @ X / 100 + eps * np.outer(x_z, x_z), X.T @ y / 100 + eps * x_z * y_z)
        d = t_eps - theta
        actual = 0.5 * d @ (X.T @ X / 100) @ d  # exact change of a quadratic at its minimum
        errs.append(abs(actual / (eps ** 2 * pred_unit) - 1))
    assert 8 <= errs[0] / errs[1] <= 12 and errs[1] < 1e-2


@pytest.fixture(scope="module")
def mlp_point():
    rng = np.random.default_rng(2)
    X, y = _blobs(rng, 60, 4, 3)
    net = TanhMLP(4, 6, 3)
    theta = net.init(torch.Generator().manual_seed(0))
    return net, theta, X, y


def test_exact_hessian_matches_finite_differences_and_is_symmetric(mlp_point):
    net, theta, X, y = mlp_point
    H = C.exact_hessian(net, theta, X, y, chunk=25)
    h = 1e-5
    fd = torch.stack([(C.mean_grad(net, theta + h * e, X, y) - C.mean_grad(net, theta - h * e, X, y)) / (2 * h)
                      for e in torch.eye(net.n_params, dtype=D)])
    assert torch.allclose(H, fd, rtol=1e-4, atol=1e-8)
    assert torch.equal(H, H.T)


def test_hvp_ggn_and_per_sample_grads_agree_with_explicit_forms(mlp_point):
    net, theta, X, y = mlp_point
    V = torch.randn(net.n_params, 3, dtype=D, generator=torch.Generator().manual_seed(1))
    H = C.exact_hessian(net, theta, X, y)
    assert torch.allclose(C.hvp_fn(net, theta, X, y)(V), H @ V, atol=1e-10)
    assert torch.allclose(C.ggn_vp_fn(net, theta, X)(V), C.ggn(net, theta, X) @ V, atol=1e-10)
    G = C.per_sample_grads(net, theta, X, y)
    assert torch.allclose(G.mean(0), C.mean_grad(net, theta, X, y), atol=1e-12)
    one = torch.func.grad(lambda t: ce_mean(net, t, X[7:8], y[7:8]))(theta)
    assert torch.allclose(G[7], one, atol=1e-12)
    lin = TanhMLP(4, 0, 3)  # for a linear softmax model the Gauss-Newton matrix is the Hessian
    t0 = lin.init(torch.Generator().manual_seed(3))
    assert torch.allclose(C.ggn(lin, t0, X), C.exact_hessian(lin, t0, X, y), atol=1e-12)


def test_psd_projection_and_large_damping_limit(mlp_point):
    net, theta, X, y = mlp_point
    H = C.exact_hessian(net, theta, X, y)
    assert float(torch.linalg.eigvalsh(H)[0]) < 0  # the raw network Hessian is indefinite here
    inv = C.DampedInverse.of(H, 1e-3)
    assert float(torch.linalg.eigvalsh(inv.matrix())[0]) >= 1e-3 - 1e-10
    G = C.per_sample_grads(net, theta, X, y)[:5]
    assert torch.allclose(inv.matrix() @ inv.solve(G).T, G.T, atol=1e-8)
    lam = 1e8
    big = C.DampedInverse.of(H, lam)
    assert torch.allclose(lam * big.quad(G), S.grad_norm(G), rtol=1e-6)  # the h-identity control
    from companion.papers.flat_influence import experiment as E  # the production damping sweep: redamped()
    curv = E.Curvature("exact_psd", net, theta, X, y, 1e-3)
    assert torch.allclose(lam * curv.redamped(lam).quad(G), S.grad_norm(G), rtol=1e-6)
    assert torch.allclose(curv.redamped(1e-2).quad(G), C.DampedInverse.of(H, 1e-2).quad(G), rtol=1e-8)


def test_lissa_and_cg_reach_the_exact_damped_solution():
    gen = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(50, 50, dtype=D, generator=gen))
    A = (Q * torch.linspace(0.1, 1.0, 50, dtype=D)) @ Q.T
    B = torch.randn(50, 4, dtype=D, generator=gen)
    exact = C.DampedInverse.of(A, 0.01).solve(B.T).T
    for approx in (C.lissa(C.matrix_matvec(A), B, 0.01, 1.1, 300),
                   C.conjugate_gradient(C.matrix_matvec(A), B, 0.01, 100)):
        assert float(C.cosine_rows(approx, exact).min()) >= 0.99
        assert float(((approx - exact).norm(dim=0) / exact.norm(dim=0)).max()) <= 0.05


def test_sam_gradient_on_a_quadratic_and_rho_zero_is_the_base_optimizer():
    gen = torch.Generator().manual_seed(0)
    M = torch.randn(6, 6, dtype=D, generator=gen)
    A = M @ M.T + torch.eye(6, dtype=D)
    theta = torch.randn(6, dtype=D, generator=gen)
    rho = 0.3
    got = sam_gradient(lambda t: 0.5 * t @ A @ t, theta, rho)
    assert torch.allclose(got, A @ (theta + rho * A @ theta / (A @ theta).norm()), atol=1e-12)
    loss = lambda t: 0.5 * t @ A @ t + torch.sin(t).sum()  # noqa: E731
    t_sam, _ = adam_descent(loss, theta, 25, 1e-2, "sam", rho=0.0)
    t_erm, _ = adam_descent(loss, theta, 25, 1e-2, "erm")
    assert torch.equal(t_sam, t_erm)
    t_sam2, _ = adam_descent(loss, theta, 25, 1e-2, "sam", rho=0.1)
    assert not torch.equal(t_sam2, t_erm)


@pytest.mark.parametrize("kind", ["symmetric", "pairflip"])
def test_noise_flips_exactly_round_rate_n_labels_to_other_classes(kind):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 30001)
    noisy, flipped = inject_noise(y, 0.3, kind, 5, rng)
    assert flipped.sum() == round(0.3 * 30001) and np.array_equal(flipped, noisy != y)
    if kind == "pairflip":
        assert np.array_equal(noisy[flipped], (y[flipped] + 1) % 5)
    else:  # every off-diagonal cell of the transition matrix equally likely
        T = np.zeros((5, 5))
        np.add.at(T, (y[flipped], noisy[flipped]), 1)
        off = T[~np.eye(5, dtype=bool)]
        assert np.all(np.diag(T) == 0) and chisquare(off).pvalue > 1e-3


def test_flipped_point_gets_the_largest_if_harm_and_fvm_score():
    rng = np.random.default_rng(3)
    X, y = _blobs(rng, 40, 2, 2, sep=3.0)
    Xv, yv = _blobs(np.random.default_rng(3), 40, 2, 2, sep=3.0)  # same class means, fresh draws
    Xv, yv = Xv[20:], yv[20:]
    y_noisy = y.clone()
    bad = int(torch.nonzero(y == 0)[0])
    y_noisy[bad] = 1
    net = TanhMLP(2, 0, 2)
    theta, _ = adam_descent(lambda t: ce_mean(net, t, X, y_noisy), torch.zeros(6, dtype=D), 2000, 0.05)
    h = S.if_harm(C.mean_grad(net, theta, Xv, yv), C.DampedInverse.of(C.exact_hessian(net, theta, X, y_noisy), 1e-3),
                  C.per_sample_grads(net, theta, X, y_noisy))
    t_val, _ = adam_descent(lambda t: ce_mean(net, t, Xv, yv), theta, 200, 0.01, "sam", rho=0.05)
    f = C.DampedInverse.of(C.exact_hessian(net, t_val, Xv, yv), 1e-3).quad(C.per_sample_grads(net, t_val, X, y_noisy))
    assert int(h.argmax()) == bad and int(f.argmax()) == bad and float(f.min()) >= 0


def test_detection_metrics_match_scikit_learn():
    rng = np.random.default_rng(4)
    pos = rng.random(300) < 0.3
    tied = np.round(rng.standard_normal(300) + pos, 1)  # many ties
    assert S.auc(pos, tied) == pytest.approx(roc_auc_score(pos, tied), abs=1e-12)
    cont = rng.standard_normal(300) + pos
    assert S.average_precision(pos, cont) == pytest.approx(average_precision_score(pos, cont), abs=1e-12)
    assert S.precision_at_k(pos, pos.astype(float)) == 1.0
    fpr, tpr = S.roc_curve(pos, cont)
    assert np.trapezoid(tpr, fpr) == pytest.approx(roc_auc_score(pos, cont), abs=1e-12)


def test_setup_is_deterministic_under_a_seed():
    p = paper.Params.resolve("quick", n_train=100, n_val=20, n_val_sweep=(10, 20), n_test=100, train_steps=30, hidden=4)
    from companion.papers.flat_influence.experiment import synthetic_setup

    a, b, c = synthetic_setup(p, 5), synthetic_setup(p, 5), synthetic_setup(p, 6)
    assert torch.equal(a.theta_star, b.theta_star) and np.array_equal(a.flipped, b.flipped)
    assert not torch.equal(a.theta_star, c.theta_star)


def test_bad_parameters_are_refused_before_compute(tmp_path):
    with pytest.raises(ParamError, match="n_classes"):
        paper.Params.resolve("quick", n_classes=20, n_train=100)
    with pytest.raises(ParamError, match="noise_rate"):
        paper.Params.resolve("quick", noise_rate=0.0)
    with pytest.raises(ParamError, match="curvature"):
        paper.Params.resolve("quick", curvature="kfac")
    with pytest.raises(ParamError, match="data_path"):
        paper.Params.resolve("paper", data_path=str(tmp_path / "missing"))


def fake_cifar10n(root: Path, n_per_batch: int = 100, n_test: int = 100) -> Path:
    """CIFAR-10 python pickles and a CIFAR-10_human.pt with random images and labels."""
    rng = np.random.default_rng(0)
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    clean = []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        n = n_test if name == "test_batch" else n_per_batch
        labels = rng.integers(0, 10, n).tolist()
        with open(base / name, "wb") as fh:
            pickle.dump({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": labels}, fh)
        if name != "test_batch":
            clean += labels
    clean = np.array(clean)
    noisy = {k: np.where(rng.random(len(clean)) < r, (clean + 1) % 10, clean)
             for k, r in (("aggre_label", 0.1), ("worse_label", 0.4), ("random_label1", 0.2))}
    torch.save({"clean_label": clean, **noisy}, root / "CIFAR-10_human.pt")
    return root


def test_cifar10n_loader_reads_the_batches_and_the_human_labels(tmp_path):
    root = fake_cifar10n(tmp_path)
    d = cifar.load_cifar10n(root, "worst")
    assert d.x_train.shape == (500, 3, 32, 32) and d.x_test.shape == (100, 3, 32, 32)
    human = torch.load(root / "CIFAR-10_human.pt", weights_only=False)
    assert np.array_equal(d.y_noisy, human["worse_label"]) and np.array_equal(d.y_clean, human["clean_label"])
    with open(root / "cifar-10-batches-py" / "data_batch_2", "rb") as fh:
        raw = pickle.load(fh, encoding="bytes")[b"data"][3]
    assert np.array_equal(d.x_train[103].reshape(-1), raw)
    assert cifar.ResNet18(10, 4)(cifar.normalize(d.x_train[:2], torch.device("cpu"))).shape == (2, 10)


@pytest.mark.slow
def test_paper_preset_smoke_runs_offline_through_the_cli(tmp_path):
    root = fake_cifar10n(tmp_path / "data")
    record = run_paper_smoke("flat-influence", tmp_path / "run", data_path=root, seeds=2)
    assert record["status"] == "ok" and '"label_set": "aggre"' in json.dumps(record)


def test_production_first_order_is_the_tested_if_harm_and_lissa_skips_the_eigendecomposition(mlp_point, monkeypatch):
    from companion.papers.flat_influence import experiment as E
    net, theta, X, y = mlp_point
    p = paper.Params.resolve("quick", curvature="exact_psd")
    su = E.Setup(net, theta, [(0.01, theta)], X, y, np.zeros(len(y), bool), y, X[:20], y[:20], X, y)
    h, H_tr = E.first_order(p, su, theta, 20)
    ref = S.if_harm(C.mean_grad(net, theta, X[:20], y[:20]), C.DampedInverse.of(C.exact_hessian(net, theta, X, y),
                    p.damping), C.per_sample_grads(net, theta, X, y))
    assert torch.allclose(h, ref, atol=1e-10)
    calls = []
    monkeypatch.setattr(C.DampedInverse, "of", classmethod(lambda cls, H, d: calls.append(1)))
    lis = E.Curvature("lissa", net, theta, X, y, 1e-1, lissa_iters=2000)
    assert not calls and not hasattr(lis, "exact")  # LiSSA: matrix-vector products and power iteration only
    assert lis.lambda_max == pytest.approx(float(torch.linalg.eigvalsh(C.ggn(net, theta, X))[-1]), rel=1e-4)
    b = torch.randn(net.n_params, dtype=D, generator=torch.Generator().manual_seed(1))
    monkeypatch.undo()
    exact = C.DampedInverse.of(C.ggn(net, theta, X), 1e-1).solve(b)
    assert torch.allclose(lis.solve(b), exact, rtol=1e-3, atol=1e-6)



@pytest.mark.parametrize("curvature", ["exact_psd", "ggn", "lissa"])
def test_score_seed_to_claims_runs_on_every_curvature_and_without_relabeling(curvature):
    """The production path end to end on a tiny task: every claim and control key exists (lissa: the damping
    sweep runs LiSSA at each damping), the sweep's H = I column is there, and no relabel table is faked."""
    from companion import claims
    from companion.papers.flat_influence import experiment as E

    p = paper.Params.resolve("quick", seeds=3, n_train=100, n_val=20, n_val_sweep=(10, 20), n_test=100,
                             train_steps=30, hidden=4, ft_steps=4, curvature=curvature, lissa_iters=20,
                             do_relabel=curvature != "ggn")
    outs = [E.score_seed(p, E.synthetic_setup(p, s), s) for s in p.seed_list()]
    res = E.collect(p, outs)
    values = E.claim_values(res)
    verdicts = claims.evaluate_all(paper.CLAIMS, values)
    assert {v.id for v in verdicts} == {c.id for c in paper.CLAIMS}
    for c in paper.CLAIMS:
        for ctrl in c.controls:
            assert c.control_key(ctrl) in values
    every = {v.id: v for v in verdicts}["nval-gain-every-seed"]
    assert every.kind == "every" and len(every.per_seed) == 3 and all(len(c.per_seed) == 3 for c in every.controls)
    assert not any("λ=0.001" in m for m in res.detection["method"])  # the run's own damping is plain "FVM"
    assert list(E.damping_table(res).columns[:3]) == ["FVM λ=0.0001", "FVM λ=0.001", "FVM λ=0.01"]
    assert {"auc_gnorm_fvm", "auc_gnorm_vm"} <= set(res.sweep.columns)
    assert {"abs_g_clean", "abs_g_noisy"} <= set(res.curve.columns)
    rel = E.relabel_summary(res)
    assert isinstance(rel, str) if curvature == "ggn" else len(rel) == len(E.RELABEL)
