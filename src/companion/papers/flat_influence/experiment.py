"""One seed of the detection study: train on noisy labels, tune on the clean validation set, score.

:func:`synthetic_setup` trains the tanh MLP on the Gaussian task; the ``paper`` preset builds the
same :class:`Setup` from ResNet features (``cifar.py``) and reuses :func:`score_seed` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor

from companion.papers.flat_influence import scores as S
from companion.papers.flat_influence.curvature import (DampedInverse, exact_hessian, ggn, lissa,
                                                       matrix_matvec, mean_grad, per_sample_grads)
from companion.papers.flat_influence.network import TanhMLP, accuracy, ce_each, ce_mean
from companion.papers.flat_influence.noisy_data import make_task
from companion.papers.flat_influence.optimize import adam_descent

METHODS = ("loss@θ*", "TracIn", "IF", "IF-1st@θ̃", "VM", "FVM")
VARIANTS = ("FVM-SAM", "FVM-LPF")  # the flat method that is not ``flat_method``, same budget
ABLATIONS = ("loss@θ̃", "self-IF")
RELABEL = ("loss@θ̃", "TracIn", "IF", "VM", "FVM")


@dataclass
class Setup:
    """Everything scoring needs: data as tensors, the network and its trained parameters."""

    net: TanhMLP
    theta_star: Tensor
    tracin: list[tuple[float, Tensor]]  # (learning rate, checkpoint) pairs
    x_train: Tensor
    y_train: Tensor
    flipped: np.ndarray
    y_clean: Tensor
    x_val: Tensor  # nested pool: the first n rows are the n-point validation set
    y_val: Tensor
    x_test: Tensor
    y_test: Tensor


class Curvature:
    """A damped inverse of a training or validation curvature matrix (exact PSD, GGN, or LiSSA)."""

    def __init__(self, kind: str, net: TanhMLP, theta: Tensor, X: Tensor, y: Tensor, damping: float,
                 lissa_iters: int = 1000) -> None:
        H = exact_hessian(net, theta, X, y) if kind == "exact_psd" else ggn(net, theta, X)
        self.exact = DampedInverse.of(H, damping)
        self.trace = float(torch.trace(H))
        self.kind, self.H, self.iters = kind, H, lissa_iters

    @property
    def lambda_max(self) -> float:
        """Largest eigenvalue of the raw matrix."""
        return self.exact.lambda_max

    def solve(self, B: Tensor) -> Tensor:
        """``H^{-1} b`` for the rows of B (LiSSA on the GGN when kind == 'lissa')."""
        if self.kind != "lissa":
            return self.exact.solve(B)
        one = B.ndim == 1
        Bc = (B[None] if one else B).T
        X = lissa(matrix_matvec(self.H), Bc, self.exact.damping, 1.1 * (self.lambda_max + self.exact.damping),
                  self.iters).T
        return X[0] if one else X

    def quad(self, G: Tensor) -> Tensor:
        """``g^T H^{-1} g`` for every row of G."""
        return self.exact.quad(G) if self.kind != "lissa" else (G * self.solve(G)).sum(-1)


def synthetic_setup(p: Any, seed: int) -> Setup:
    """Draw the Gaussian task for ``seed`` and train the tanh MLP on the noisy labels (full-batch Adam)."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    pool = max((*p.n_val_sweep, p.n_val))
    task = make_task(rng, p.n_classes, p.n_features, p.class_sep, p.n_train, pool, p.n_test,
                     p.noise_rate, p.noise_type)
    t = lambda a, long=False: torch.as_tensor(a, dtype=torch.long if long else torch.float64)  # noqa: E731
    net = TanhMLP(p.n_features, p.hidden, p.n_classes)
    Xtr, ytr = t(task.x_train), t(task.y_train, True)
    every = max(1, p.train_steps // p.tracin_checkpoints)
    theta, marks = adam_descent(lambda th: ce_mean(net, th, Xtr, ytr), net.init(gen), p.train_steps,
                                p.train_lr, every=every)
    ckpts = [th for step, th in marks if step > 0][-p.tracin_checkpoints:]
    return Setup(net, theta, [(p.train_lr, c) for c in ckpts], Xtr, ytr, task.flipped,
                 t(task.y_train_clean, True), t(task.x_val), t(task.y_val, True), t(task.x_test),
                 t(task.y_test, True))


def _np(t: Tensor) -> np.ndarray:
    """A tensor as a float64 numpy array on the CPU."""
    return t.detach().cpu().double().numpy()


def detection(flipped: np.ndarray, score: Tensor | np.ndarray) -> dict[str, float]:
    """AUC, AP and precision@k (k = number flipped) of a harm score."""
    s = _np(score) if isinstance(score, Tensor) else np.asarray(score, dtype=float)
    return {"auc": S.auc(flipped, s), "ap": S.average_precision(flipped, s),
            "p_at_k": S.precision_at_k(flipped, s)}


def validation_minimum(p: Any, su: Setup, n_val: int, method: str, seed: int,
                       every: int = 0) -> tuple[Tensor, list[tuple[int, Tensor]]]:
    """Fine-tune from theta* on the first ``n_val`` validation points (ERM, SAM or LPF), same budget."""
    Xv, yv = su.x_val[:n_val], su.y_val[:n_val]
    gen = torch.Generator(su.x_val.device).manual_seed(seed * 7919 + n_val)
    return adam_descent(lambda th: ce_mean(su.net, th, Xv, yv), su.theta_star, p.ft_steps, p.ft_lr,
                        method, p.sam_rho, p.lpf_sigma, gen, every)


def val_score(p: Any, su: Setup, theta: Tensor, n_val: int) -> tuple[Tensor, Curvature]:
    """The VM/FVM score of every training point at ``theta`` with the validation curvature."""
    curv = Curvature(p.curvature, su.net, theta, su.x_val[:n_val], su.y_val[:n_val], p.damping, p.lissa_iters)
    G = per_sample_grads(su.net, theta, su.x_train, su.y_train)
    return curv.quad(G), curv


def first_order(p: Any, su: Setup, theta: Tensor, n_val: int,
                H_tr: Curvature | None = None) -> tuple[Tensor, Curvature]:
    """Standard first-order IF harm at ``theta`` with the training curvature there."""
    H_tr = H_tr or Curvature(p.curvature, su.net, theta, su.x_train, su.y_train, p.damping, p.lissa_iters)
    g_val = mean_grad(su.net, theta, su.x_val[:n_val], su.y_val[:n_val])
    G = per_sample_grads(su.net, theta, su.x_train, su.y_train)
    return -(G @ H_tr.solve(g_val)), H_tr


def relabel_accuracy(p: Any, su: Setup, H_star: Curvature, curv: dict[str, Curvature],
                     thetas: dict[str, Tensor]) -> dict[str, float]:
    """Top-1 accuracy of ``argmin_c score((x, c))`` against the clean label, on the flipped points."""
    idx = torch.as_tensor(np.flatnonzero(su.flipped), device=su.x_train.device)
    X, clean = su.x_train[idx], su.y_clean[idx]
    K = su.net.n_out
    per_label: dict[str, list[Tensor]] = {m: [] for m in RELABEL}
    g_val = mean_grad(su.net, su.theta_star, su.x_val[:p.n_val], su.y_val[:p.n_val])
    tr = [(lr, th, mean_grad(su.net, th, su.x_val[:p.n_val], su.y_val[:p.n_val])) for lr, th in su.tracin]
    for c in range(K):
        yc = torch.full((len(idx),), c, dtype=torch.long, device=X.device)
        G = per_sample_grads(su.net, su.theta_star, X, yc)
        per_label["loss@θ̃"].append(ce_each(su.net, thetas["FVM"], X, yc))
        per_label["IF"].append(-(G @ H_star.solve(g_val)))
        per_label["TracIn"].append(sum(-lr * (per_sample_grads(su.net, th, X, yc) @ gv) for lr, th, gv in tr))
        for m in ("VM", "FVM"):
            per_label[m].append(curv[m].quad(per_sample_grads(su.net, thetas[m], X, yc)))
    return {m: float((torch.stack(v, 1).argmin(1) == clean).double().mean()) for m, v in per_label.items()}


def score_seed(p: Any, su: Setup, seed: int, progress: Callable[[], None] | None = None) -> dict[str, Any]:
    """Every score, metric, checkpoint curve and n_val-sweep point of one seed."""
    net, flipped = su.net, su.flipped
    Xv, yv = su.x_val[:p.n_val], su.y_val[:p.n_val]
    out: dict[str, Any] = {"seed": seed, "train_acc": accuracy(net, su.theta_star, su.x_train, su.y_train),
                           "test_acc_star": accuracy(net, su.theta_star, su.x_test, su.y_test)}
    G_star = per_sample_grads(net, su.theta_star, su.x_train, su.y_train)
    h_if, H_star = first_order(p, su, su.theta_star, p.n_val)
    sc: dict[str, Tensor] = {
        "loss@θ*": ce_each(net, su.theta_star, su.x_train, su.y_train),
        "TracIn": S.tracin_harm([mean_grad(net, th, Xv, yv) for _, th in su.tracin], [lr for lr, _ in su.tracin],
                                [per_sample_grads(net, th, su.x_train, su.y_train) for _, th in su.tracin]),
        "IF": h_if,
        "self-IF": S.self_influence(H_star.exact, G_star),
    }
    every = max(1, p.ft_steps // 4)
    theta_vm, _ = validation_minimum(p, su, p.n_val, "erm", seed)
    theta_fvm, marks = validation_minimum(p, su, p.n_val, p.flat_method, seed, every)
    sc["VM"], c_vm = val_score(p, su, theta_vm, p.n_val)
    # Fig. 3 analog: first-order IF and FVM along the flat fine-tune (step 0 is theta*)
    curve = []
    for step, th in marks:
        h1, _ = first_order(p, su, th, p.n_val, H_star if step == 0 else None)
        fv, c_f = val_score(p, su, th, p.n_val)
        a = np.abs(_np(h1))
        curve.append({"step": step, "auc_if1st": S.auc(flipped, _np(h1)), "auc_fvm": S.auc(flipped, _np(fv)),
                      "abs_if1st_clean": float(a[~flipped].mean()), "abs_if1st_noisy": float(a[flipped].mean()),
                      "val_loss": float(ce_mean(net, th, Xv, yv))})
    sc["IF-1st@θ̃"], sc["FVM"], c_fvm = h1, fv, c_f
    sc["loss@θ̃"] = ce_each(net, theta_fvm, su.x_train, su.y_train)
    other = "lpf" if p.flat_method == "sam" else "sam"
    theta_alt, _ = validation_minimum(p, su, p.n_val, other, seed)
    sc[f"FVM-{other.upper()}"], c_alt = val_score(p, su, theta_alt, p.n_val)
    if progress:
        progress()
    out["detection"] = {m: detection(flipped, v) for m, v in sc.items()}
    out["curve"] = curve
    out["flat"] = {
        "lambda_max_erm": c_vm.lambda_max, "lambda_max_flat": c_fvm.lambda_max, "lambda_max_alt": c_alt.lambda_max,
        "trace_erm": c_vm.trace, "trace_flat": c_fvm.trace,
        "val_loss_erm": float(ce_mean(net, theta_vm, Xv, yv)), "val_loss_flat": float(ce_mean(net, theta_fvm, Xv, yv)),
        "test_acc_erm": accuracy(net, theta_vm, su.x_test, su.y_test),
        "test_acc_flat": accuracy(net, theta_fvm, su.x_test, su.y_test),
    }
    sweep = []
    for n in p.n_val_sweep:
        row: dict[str, Any] = {"seed": seed, "n_val": n}
        for tag, method in (("vm", "erm"), ("fvm", p.flat_method)):
            if n == p.n_val:
                th, s_, c = (theta_vm, sc["VM"], c_vm) if tag == "vm" else (theta_fvm, sc["FVM"], c_fvm)
            else:
                th, _ = validation_minimum(p, su, n, method, seed)
                s_, c = val_score(p, su, th, n)
            row.update({f"auc_{tag}": S.auc(flipped, _np(s_)), f"test_acc_{tag}": accuracy(net, th, su.x_test, su.y_test),
                        f"lambda_max_{tag}": c.lambda_max,
                        f"val_loss_{tag}": float(ce_mean(net, th, su.x_val[:n], su.y_val[:n]))})
        sweep.append(row)
    out["sweep"] = sweep
    if p.do_relabel:
        out["relabel"] = relabel_accuracy(p, su, H_star, {"VM": c_vm, "FVM": c_fvm}, {"VM": theta_vm, "FVM": theta_fvm})
    out["scores"] = {m: _np(v).astype(np.float32) for m, v in sc.items()}
    out["flipped"] = flipped
    if progress:
        progress()
    return out
