"""One seed of the detection study: train on noisy labels, tune on the clean validation set, score.

:func:`synthetic_setup` trains the tanh MLP on the Gaussian task; the ``paper`` preset builds the
same :class:`Setup` from ResNet features (``paper_preset.py``) and reuses :func:`score_seed` unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr
from torch import Tensor
from tqdm import tqdm

from companion import runtime

from companion.papers.flat_influence import scores as S
from companion.papers.flat_influence.curvature import (DampedInverse, exact_hessian, ggn, lissa, matrix_matvec,
                                                       mean_grad, per_sample_grads, power_lambda_max)
from companion.papers.flat_influence.network import TanhMLP, accuracy, ce_each, ce_mean
from companion.papers.flat_influence.noisy_data import make_task
from companion.papers.flat_influence.optimize import adam_descent

if TYPE_CHECKING:
    from companion.papers.flat_influence import Params

METHODS = ("loss@θ*", "TracIn", "IF", "IF-1st@θ̃", "VM", "FVM")
VARIANTS = ("FVM-SAM", "FVM-LPF")  # the flat method that is not ``flat_method``, same budget
ABLATIONS = ("loss@θ̃", "loss@θ_vm", "|g|²@θ̃", "|g|²@θ_vm", "IF-1st@θ̃,H̃val", "self-IF")
DAMPINGS = (1e-4, 1e-3, 1e-2)  # the spec's damping sweep of FVM, on one eigendecomposition (LiSSA: one run each)


def damped(lam: float, damping: float) -> str:
    """The AUC-table column of FVM at damping ``lam``: plain "FVM" when ``lam`` is the run's own damping."""
    return "FVM" if np.isclose(lam, damping, rtol=1e-9, atol=0.0) else f"FVM λ={lam:g}"
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
    """A damped inverse of a training or validation curvature matrix (exact PSD, GGN, or LiSSA).

    ``lissa`` builds the dense GGN (cheap at these sizes) but never decomposes it: it applies it as a
    matrix-vector product inside LiSSA's iterations and a power iteration for ``lambda_max``.
    """

    def __init__(self, kind: str, net: TanhMLP, theta: Tensor, X: Tensor, y: Tensor, damping: float,
                 lissa_iters: int = 1000) -> None:
        H = exact_hessian(net, theta, X, y) if kind == "exact_psd" else ggn(net, theta, X)
        self.trace = float(torch.trace(H))
        self.kind, self.H, self.iters, self.damping = kind, H, lissa_iters, damping
        if kind == "lissa":  # the dense GGN used only through mat-vecs; lambda_max by power iteration
            gen = torch.Generator().manual_seed(0)
            self._lambda_max = power_lambda_max(matrix_matvec(H), H.shape[0], gen, device=H.device)
        else:
            self.exact = DampedInverse.of(H, damping)
            self._lambda_max = self.exact.lambda_max

    @property
    def lambda_max(self) -> float:
        """Largest eigenvalue of the raw matrix."""
        return self._lambda_max

    def solve(self, B: Tensor) -> Tensor:
        """``H^{-1} b`` for the rows of B (LiSSA on the GGN when kind == 'lissa')."""
        if self.kind != "lissa":
            return self.exact.solve(B)
        one = B.ndim == 1
        Bc = (B[None] if one else B).T
        X = lissa(matrix_matvec(self.H), Bc, self.damping, 1.1 * (self.lambda_max + self.damping), self.iters).T
        return X[0] if one else X

    def quad(self, G: Tensor) -> Tensor:
        """``g^T H^{-1} g`` for every row of G."""
        return self.exact.quad(G) if self.kind != "lissa" else (G * self.solve(G)).sum(-1)

    def redamped(self, damping: float) -> "DampedInverse | Curvature":
        """The same curvature with another damping: the same eigendecomposition (exact kinds) or new LiSSA runs."""
        if self.kind != "lissa":
            return DampedInverse(self.exact.evecs, self.exact.evals, damping)
        other = object.__new__(Curvature)
        other.__dict__.update(self.__dict__, damping=damping)
        return other


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


def val_score(p: Any, su: Setup, theta: Tensor, n_val: int) -> tuple[Tensor, Curvature, Tensor]:
    """The VM/FVM score of every training point at ``theta`` with the validation curvature (and the gradients)."""
    curv = Curvature(p.curvature, su.net, theta, su.x_val[:n_val], su.y_val[:n_val], p.damping, p.lissa_iters)
    G = per_sample_grads(su.net, theta, su.x_train, su.y_train)
    return curv.quad(G), curv, G


def first_order(p: Any, su: Setup, theta: Tensor, n_val: int,
                H_tr: Curvature | None = None) -> tuple[Tensor, Curvature]:
    """Standard first-order IF harm at ``theta`` with the training curvature there."""
    H_tr = H_tr or Curvature(p.curvature, su.net, theta, su.x_train, su.y_train, p.damping, p.lissa_iters)
    g_val = mean_grad(su.net, theta, su.x_val[:n_val], su.y_val[:n_val])
    G = per_sample_grads(su.net, theta, su.x_train, su.y_train)
    return S.if_harm(g_val, H_tr, G), H_tr


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
        per_label["IF"].append(S.if_harm(g_val, H_star, G))
        per_label["TracIn"].append(S.tracin_harm([gv for _, _, gv in tr], [lr for lr, _, _ in tr],
                                                 [per_sample_grads(su.net, th, X, yc) for _, th, _ in tr]))
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
        "self-IF": H_star.quad(G_star),
    }
    every = max(1, p.ft_steps // 4)
    theta_vm, _ = validation_minimum(p, su, p.n_val, "erm", seed)
    theta_fvm, marks = validation_minimum(p, su, p.n_val, p.flat_method, seed, every)
    sc["VM"], c_vm, G_vm = val_score(p, su, theta_vm, p.n_val)
    # Fig. 3 analog: first-order IF and FVM along the flat fine-tune (step 0 is theta*)
    curve = []
    for step, th in marks:
        h1, _ = first_order(p, su, th, p.n_val, H_star if step == 0 else None)
        fv, c_f, G_f = val_score(p, su, th, p.n_val)
        a, gn = np.abs(_np(h1)), _np(G_f.norm(dim=1))  # |first-order IF| and ‖g_z‖ (the clean-vs-flipped control)
        curve.append({"step": step, "auc_if1st": S.auc(flipped, _np(h1)), "auc_fvm": S.auc(flipped, _np(fv)),
                      "abs_if1st_clean": float(a[~flipped].mean()), "abs_if1st_noisy": float(a[flipped].mean()),
                      "abs_g_clean": float(gn[~flipped].mean()), "abs_g_noisy": float(gn[flipped].mean()),
                      "gval_norm": float(mean_grad(net, th, Xv, yv).norm()),
                      "val_loss": float(ce_mean(net, th, Xv, yv))})
    sc["IF-1st@θ̃"], sc["FVM"], c_fvm = h1, fv, c_f
    # one change at a time from FVM: the first-order form with the same H~_val, H = I, plain loss, damping
    sc["IF-1st@θ̃,H̃val"] = S.if_harm(mean_grad(net, theta_fvm, Xv, yv), c_fvm, G_f)
    sc["|g|²@θ̃"] = S.grad_norm(G_f)
    sc["loss@θ̃"] = ce_each(net, theta_fvm, su.x_train, su.y_train)
    sc["loss@θ_vm"] = ce_each(net, theta_vm, su.x_train, su.y_train)
    sc["|g|²@θ_vm"] = S.grad_norm(G_vm)
    for lam in DAMPINGS:
        if damped(lam, p.damping) != "FVM":
            sc[damped(lam, p.damping)] = c_fvm.redamped(lam).quad(G_f)
    other = "lpf" if p.flat_method == "sam" else "sam"
    theta_alt, _ = validation_minimum(p, su, p.n_val, other, seed)
    sc[f"FVM-{other.upper()}"], c_alt, _ = val_score(p, su, theta_alt, p.n_val)
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
                th, s_, c, G = (theta_vm, sc["VM"], c_vm, G_vm) if tag == "vm" else (theta_fvm, sc["FVM"], c_fvm, G_f)
            else:
                th, _ = validation_minimum(p, su, n, method, seed)
                s_, c, G = val_score(p, su, th, n)
            row.update({f"auc_{tag}": S.auc(flipped, _np(s_)), f"test_acc_{tag}": accuracy(net, th, su.x_test, su.y_test),
                        f"auc_loss_{tag}": S.auc(flipped, _np(ce_each(net, th, su.x_train, su.y_train))),
                        f"auc_gnorm_{tag}": S.auc(flipped, _np(S.grad_norm(G))),
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

@dataclass
class Results:
    """Per-seed tables (detection, fine-tune curve, n_val sweep, flatness, relabeling) + seed-0 scores."""

    params: "Params"
    detection: pd.DataFrame  # seed, method, auc, ap, p_at_k
    curve: pd.DataFrame  # seed, step, auc_if1st/fvm, abs_if1st_clean/noisy, abs_g_clean/noisy, gval_norm, val_loss
    sweep: pd.DataFrame  # seed, n_val, auc/auc_loss/auc_gnorm/test_acc/lambda_max/val_loss for vm and fvm
    flat: pd.DataFrame  # seed, lambda_max/trace/val_loss/test_acc for erm and flat, train_acc
    relabel: pd.DataFrame  # seed, method, accuracy
    example_scores: dict[str, np.ndarray] = field(repr=False)
    example_flipped: np.ndarray = field(repr=False)


def _seed_job(params: "Params", seed: int) -> dict[str, Any]:
    """One synthetic seed end to end (importable, for worker processes)."""
    runtime.limit_threads(1)
    return score_seed(params, synthetic_setup(params, seed), seed)


def collect(params: "Params", outs: list[dict[str, Any]]) -> Results:
    """Assemble per-seed outputs into :class:`Results`."""
    det = [{"seed": o["seed"], "method": m, **d} for o in outs for m, d in o["detection"].items()]
    flat = [{"seed": o["seed"], "train_acc": o["train_acc"], "test_acc_star": o["test_acc_star"], **o["flat"]}
            for o in outs]
    rel = [{"seed": o["seed"], "method": m, "accuracy": a} for o in outs for m, a in o.get("relabel", {}).items()]
    return Results(params, pd.DataFrame(det),
                   pd.DataFrame([{"seed": o["seed"], **c} for o in outs for c in o["curve"]]),
                   pd.DataFrame([r for o in outs for r in o["sweep"]]), pd.DataFrame(flat),
                   pd.DataFrame(rel, columns=["seed", "method", "accuracy"]),
                   outs[0]["scores"], outs[0]["flipped"])


def run(params: "Params") -> Results:
    """Every seed of ``params`` (synthetic seeds in parallel processes; ``paper``: CIFAR-10N)."""
    if params.preset == "paper":
        from companion.papers.flat_influence.paper_preset import run_paper

        return collect(params, run_paper(params))
    runtime.limit_threads(1)
    with tqdm(total=params.seeds, desc="seeds", disable=None, leave=False) as bar:
        outs = runtime.parallel_map(_seed_job, [(params, s) for s in params.seed_list()], on_done=bar.update)
    return collect(params, outs)


def auc_table(results: Results) -> pd.DataFrame:
    """AUC per seed (rows) and method (columns)."""
    return results.detection.pivot(index="seed", columns="method", values="auc")


def _spearman_per_seed(sw: pd.DataFrame, x: str, y: str) -> list[float]:
    """Spearman rho of ``x`` vs ``y`` over the n_val sweep, one value per seed (within-seed only)."""
    return [float(spearmanr(g[x], g[y]).statistic) for _, g in sw.groupby("seed")]


def claim_values(results: Results) -> dict[str, Any]:
    """Every claim's per-seed values (one value for an exact claim; ``claims`` judges an ``every`` row on its
    worst seed), and each control's under ``id@control``."""
    a = auc_table(results)
    c = results.curve
    first, last = c[c.step == 0].set_index("seed"), c[c.step == c.step.max()].set_index("seed")
    later = c[c.step > 0].groupby("seed")
    sw = results.sweep
    lo, hi = sw[sw.n_val == sw.n_val.min()].set_index("seed"), sw[sw.n_val == sw.n_val.max()].set_index("seed")
    lr = lambda col: np.log10(last[col] / first[col])  # noqa: E731
    fvm, loss, hid = a["FVM"], a["loss@θ̃"], a["|g|²@θ̃"]
    out: dict[str, Any] = {}
    for cid, ref in (("fvm-vs-if", a["IF"]), ("fvm-vs-tracin", a["TracIn"]), ("fvm-vs-if1st-flat", a["IF-1st@θ̃,H̃val"])):
        out[cid], out[f"{cid}@loss-tilde"], out[f"{cid}@h-identity"] = list(fvm - ref), list(loss - ref), list(hid - ref)
    for key in ("", "@loss-tilde", "@h-identity"):
        out["fvm-vs-if-every-seed" + key] = out["fvm-vs-if" + key]
    out["if1st-no-gain"] = list(last["auc_if1st"] - first["auc_if1st"])
    out["if1st-no-gain@fvm-curve"] = list(last["auc_fvm"] - first["auc_fvm"])
    out["if1st-dip"] = list(later["auc_if1st"].min() - first["auc_if1st"])
    out["clean-collapse"] = list(lr("abs_if1st_clean"))
    out["clean-vs-flipped"] = list(lr("abs_if1st_clean") - lr("abs_if1st_noisy"))
    out["clean-vs-flipped@gnorm"] = list(lr("abs_g_clean") - lr("abs_g_noisy"))
    for key, col in (("", "auc_fvm"), ("@loss-tilde", "auc_loss_fvm"), ("@h-identity", "auc_gnorm_fvm")):
        out["nval-spearman" + key] = _spearman_per_seed(sw, "test_acc_fvm", col)
        out["nval-gain-every-seed" + key] = list(hi[col] - lo[col])
    out["fvm-gain-over-vm"] = list(fvm - a["VM"])
    out["fvm-gain-over-vm@loss"] = list(loss - a["loss@θ_vm"])
    out["fvm-gain-over-vm@h-identity"] = list(hid - a["|g|²@θ_vm"])
    out["fvm-vs-vm"] = list(fvm - a["VM"])
    damping = results.params.damping
    for cid, lam in (("fvm-vs-loss-flat", damping), ("fvm-vs-loss-flat-lam1e-4", 1e-4), ("fvm-vs-loss-flat-lam1e-2", 1e-2)):
        out[cid], out[f"{cid}@h-identity"] = list(a[damped(lam, damping)] - loss), list(hid - loss)
    out["flat-lowers-lambda-max"] = float((sw["lambda_max_fvm"] <= sw["lambda_max_vm"]).mean())
    out["train-memorized"] = list(results.flat.groupby("seed")["train_acc"].min())
    return out


def damping_table(results: Results) -> pd.DataFrame:
    """Per-seed AUC of FVM at every damping of the sweep, with loss@θ̃ and the H = I limit (|g|²@θ̃) beside."""
    a, damping = auc_table(results), results.params.damping
    cols = {damped(lam, damping): f"FVM λ={lam:g}" for lam in sorted({*DAMPINGS, damping})}
    return a[[*cols, "|g|²@θ̃", "loss@θ̃"]].rename(columns=cols).round(4)


def control_table(results: Results) -> pd.DataFrame:
    """Per-seed AUC of FVM and of everything a finding is compared with (one column per score)."""
    a = auc_table(results)
    cols = ["FVM", "loss@θ̃", "|g|²@θ̃", "IF", "TracIn", "IF-1st@θ̃,H̃val", "IF-1st@θ̃", "VM", "loss@θ_vm"]
    return a[[x for x in cols if x in a.columns]].round(4)


def summary(results: Results) -> pd.DataFrame:
    """Mean (sd) of AUC, AP and precision@k per method over seeds; ablations last."""
    g = results.detection.groupby("method")[["auc", "ap", "p_at_k"]]
    m, s = g.mean(), g.std().fillna(0.0)
    out = m.round(3).astype(str) + " ± " + s.round(3).astype(str)
    order = [x for x in (*METHODS, *VARIANTS, *ABLATIONS) if x in out.index]
    order += sorted(x for x in out.index if x.startswith("FVM λ="))
    return out.loc[order].rename(columns={"auc": "ROC AUC", "ap": "AP", "p_at_k": "P@k"})


def relabel_summary(results: Results) -> pd.DataFrame | str:
    """Relabeling top-1 accuracy on the flipped points, mean ± sd over seeds (exploratory); a note when not run."""
    if results.relabel.empty:
        return "Relabeling was not computed in this run (do_relabel = false)."
    g = results.relabel.groupby("method")["accuracy"].agg(["mean", "std"]).fillna(0.0)
    order = [x for x in RELABEL if x in g.index]
    return g.loc[order].round(3).rename(columns={"mean": "accuracy (mean)", "std": "sd"})


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary: mean AUC per method, flatness and accuracy diagnostics, relabeling."""
    a = auc_table(results).mean()
    f = results.flat.mean(numeric_only=True)
    return {
        "mean_auc": {k: round(float(v), 4) for k, v in a.items()},
        "train_acc_min": round(float(results.flat["train_acc"].min()), 4),
        "test_acc": {k: round(float(f[k]), 4) for k in ("test_acc_star", "test_acc_erm", "test_acc_flat")},
        "lambda_max": {k: round(float(f[k]), 5) for k in ("lambda_max_erm", "lambda_max_flat", "lambda_max_alt")},
        "val_loss": {k: float(f"{f[k]:.3g}") for k in ("val_loss_erm", "val_loss_flat")},
        "relabel_acc": {k: round(float(v), 4) for k, v in results.relabel.groupby("method")["accuracy"].mean().items()},
    }
