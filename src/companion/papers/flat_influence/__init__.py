"""Towards Robust Influence Functions with Flat Validation Minima (Ye et al., ICML 2025).

arXiv: https://arxiv.org/abs/2505.19097 · OpenReview Um7XmQEWu5 · official code announced as
``Virusdoll/IF-FVM`` (not read: no snapshot was available, license unknown).

Reproduced at small scale: mislabeled-sample detection on a synthetic Gaussian task with 30 %
symmetric label noise and a smooth (tanh) MLP that memorizes the noisy labels. Scores: training
loss, TracIn, standard influence functions (IF, exact damped Hessian), the first-order IF at the
flat validation minimum (the paper's Fig. 3), and the paper's VM / FVM estimator
``g~_z^T H~_val^{-1} g~_z`` at a validation minimum reached from the trained model by ERM (VM) or
SAM / LPF (FVM) fine-tuning with the same budget; the n_val sweep linking validation accuracy to
detection AUC (Thm 3.2 / Fig. 2); relabeling accuracy (reported, exploratory). The ``paper``
preset runs the same scorer on the last layer of a ResNet-18 trained on CIFAR-10N (local data).

Written by hand, because no maintained library offers them on a flat float64 parameter vector:
the functional tanh MLP (``network.py``), exact Hessians via ``torch.func.hessian`` and per-sample
gradients via ``torch.func.vmap(grad)``, the PSD-clipped damped inverse, LiSSA and conjugate
gradients (``curvature.py``), SAM and LPF gradients under Adam (``optimize.py``), the scores
(``scores.py``; AUC is checked against scikit-learn in the tests), the CIFAR-10N loader and a
compact CIFAR ResNet-18 (``cifar.py``; torchvision is not a dependency).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy.stats import spearmanr
from tqdm import tqdm

from companion import claims, runtime
from companion.claims import Claim, Verdict
from companion.papers.flat_influence import scores as S
from companion.papers.flat_influence.experiment import (ABLATIONS, METHODS, RELABEL, VARIANTS, score_seed,
                                                       synthetic_setup)
from companion.params import BaseParams, ParamError, local_default, param, require_path
from companion.plotting import figure

SLUG = "flat-influence"


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the noisy-label detection study; defaults are the quick preset."""

    seeds: int = param(5, lo=1, hi=64, help="number of seeds (data, noise, init, fine-tunes); claims need >= 3")
    n_classes: int = param(5, lo=2, hi=20, help="classes K of the synthetic task")
    n_features: int = param(20, lo=2, hi=100, help="input dimension of the synthetic task")
    class_sep: float = param(1.0, lo=0.2, hi=3.0, help="scale s of the class means, mu_k ~ N(0, s^2 I)")
    n_train: int = param(600, lo=100, hi=50000, help="training points (noisy labels)")
    noise_rate: float = param(0.3, lo=0.0, hi=0.79, help="fraction of training labels flipped (exactly round(rate n))")
    noise_type: str = param("symmetric", choices=("symmetric", "pairflip"), help="label noise model")
    n_val: int = param(200, lo=10, hi=10000, help="clean validation points for the main comparison")
    n_val_sweep: tuple[int, ...] = param((25, 50, 100, 200, 400), lo=10, hi=10000, min_len=2,
                                         help="nested validation sizes of the Thm 3.2 / Fig. 2 sweep")
    n_test: int = param(2000, lo=100, hi=100000, help="clean test points (accuracy of the tuned models)")
    hidden: int = param(32, lo=4, hi=128, help="tanh hidden width; P = (d+1) h + (h+1) K, Hessian cost ~ P^3")
    train_steps: int = param(3000, lo=10, hi=20000, help="full-batch Adam steps on the noisy training set")
    train_lr: float = param(1e-2, lo=1e-5, hi=1.0, help="Adam learning rate of training")
    ft_steps: int = param(200, lo=4, hi=5000, help="Adam steps of every validation fine-tune (VM and FVM alike)")
    ft_lr: float = param(5e-3, lo=1e-5, hi=1.0, help="Adam learning rate of the validation fine-tunes")
    flat_method: str = param("sam", choices=("sam", "lpf"), help="flat optimizer of FVM")
    sam_rho: float = param(0.1, lo=1e-6, hi=10.0, help="SAM radius rho")
    lpf_sigma: float = param(0.1, lo=1e-6, hi=10.0, help="LPF noise, relative to |theta|")
    damping: float = param(1e-3, lo=1e-8, hi=10.0, help="damping lambda added to the clipped curvature")
    curvature: str = param("exact_psd", choices=("exact_psd", "ggn", "lissa"),
                           help="exact Hessian clipped to PSD, Gauss-Newton, or LiSSA iterations on the GGN")
    lissa_iters: int = param(1000, lo=1, hi=100000, help="LiSSA iterations (curvature = lissa)")
    tracin_checkpoints: int = param(1, lo=1, hi=50, help="TracIn checkpoints (evenly spaced, last ones)")
    do_relabel: bool = param(True, help="compute relabeling accuracy (reported, not gated)")
    label_set: str = param("aggre", choices=("aggre", "random1", "worst"),
                           help="paper preset: which CIFAR-10N human label set is the noisy label")
    epochs: int = param(40, lo=1, hi=400, help="paper preset: ResNet-18 training epochs on the noisy labels")
    data_path: str = param(local_default(SLUG), help="paper preset: folder with cifar-10-batches-py/ and "
                           "CIFAR-10_human.pt")
    smoke: bool = param(False, help="paper preset: the same pipeline on a tiny budget (CPU, < 2 min)")

    PRESETS = {
        "full": {"seeds": 10, "n_train": 1000, "ft_steps": 300, "n_val_sweep": (25, 50, 100, 200, 400, 800)},
        "paper": {"seeds": 3, "n_train": 49000, "n_val": 1000, "n_val_sweep": (125, 250, 500, 1000),
                  "n_test": 10000, "n_classes": 10, "ft_steps": 200, "ft_lr": 1e-3,
                  "damping": 1e-3, "do_relabel": True},
    }

    def __post_init__(self) -> None:
        if self.preset == "paper":
            require_path("data_path", self.data_path,
                         "CIFAR-10 python batches (cifar-10-batches-py/) plus CIFAR-10N's CIFAR-10_human.pt", "dir")
            return
        if max(self.n_val_sweep) + 0 > 10000 or self.n_val > 10000:
            raise ParamError(f"parameter 'n_val': {self.n_val!r}; allowed: <= 10000")
        if self.n_classes > self.n_train // 10:
            raise ParamError(f"parameter 'n_classes': {self.n_classes!r} with n_train={self.n_train}; "
                             "allowed: at most n_train / 10")
        if self.noise_rate > 0 and round(self.noise_rate * self.n_train) < 2:
            raise ParamError(f"parameter 'noise_rate': {self.noise_rate!r} flips fewer than 2 of "
                             f"n_train={self.n_train} labels; allowed: noise_rate * n_train >= 2")
        if self.noise_rate == 0:
            raise ParamError("parameter 'noise_rate': 0.0; allowed: > 0 (detection needs mislabeled points)")
        if self.ft_steps < 4:
            raise ParamError(f"parameter 'ft_steps': {self.ft_steps!r}; allowed: >= 4 (four checkpoints)")
        if self.train_steps < self.tracin_checkpoints:
            raise ParamError(f"parameter 'tracin_checkpoints': {self.tracin_checkpoints!r}; "
                             f"allowed: <= train_steps ({self.train_steps})")


@dataclass
class Results:
    """Per-seed tables (detection, fine-tune curve, n_val sweep, flatness, relabeling) + seed-0 scores."""

    params: Params
    detection: pd.DataFrame  # seed, method, auc, ap, p_at_k
    curve: pd.DataFrame  # seed, step, auc_if1st, auc_fvm, abs_if1st_clean, abs_if1st_noisy, val_loss
    sweep: pd.DataFrame  # seed, n_val, auc/test_acc/lambda_max/val_loss for vm and fvm
    flat: pd.DataFrame  # seed, lambda_max/trace/val_loss/test_acc for erm and flat, train_acc
    relabel: pd.DataFrame  # seed, method, accuracy
    example_scores: dict[str, np.ndarray] = field(repr=False)
    example_flipped: np.ndarray = field(repr=False)


def _seed_job(params: Params, seed: int) -> dict[str, Any]:
    """One synthetic seed end to end (importable, for worker processes)."""
    runtime.limit_threads(1)
    return score_seed(params, synthetic_setup(params, seed), seed)


def collect(params: Params, outs: list[dict[str, Any]]) -> Results:
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


def run(params: Params) -> Results:
    """Every seed of ``params`` (synthetic seeds in parallel processes; ``paper``: CIFAR-10N)."""
    if params.preset == "paper":
        from companion.papers.flat_influence.cifar import run_paper

        return collect(params, run_paper(params))
    runtime.limit_threads(1)
    with tqdm(total=params.seeds, desc="seeds", disable=None, leave=False) as bar:
        outs = runtime.parallel_map(_seed_job, [(params, s) for s in params.seed_list()], on_done=bar.update)
    return collect(params, outs)


# ----------------------------------------------------------------------------- claims

CLAIMS = [
    Claim("fvm-vs-if", "FVM's detection AUC exceeds standard IF's by at least 0.10",
          "FVM 96.1 vs LiSSA-IF 59.7 AUC % (CIFAR-10N Aggre, Table 1)", 0.10),
    Claim("fvm-vs-if-every-seed", "FVM beats standard IF in every seed (worst seed's AUC gap)",
          "FVM > IF on every dataset (Table 1)", 0.0, kind="exact"),
    Claim("fvm-vs-tracin", "FVM's detection AUC exceeds TracIn's by at least 0.05",
          "FVM 96.1 vs TracIn 53.9 AUC % (CIFAR-10N Aggre, Table 1)", 0.05),
    Claim("fvm-vs-if1st-flat", "at the same flat validation minimum, FVM's AUC exceeds the first-order "
          "IF's by at least 0.05 (the loss-change step is what fails)",
          "Sec. 3 / Fig. 3a: first-order IF degrades at the flat validation minimum", 0.05),
    Claim("if1st-no-gain", "moving the first-order IF to the flat validation minimum does not raise its AUC "
          "(AUC(IF-1st at the flat minimum) - AUC(IF) <= 0)",
          "Fig. 3a: standard IF's AUC drops during SAM tuning on the validation set", 0.0, "<="),
    Claim("clean-collapse", "clean points' mean |first-order IF| at the flat minimum is at most half of "
          "theirs at theta* (g_val -> 0)", "Fig. 3b: clean samples' influence collapses towards 0", 0.5, "<="),
    Claim("nval-spearman", "Spearman rho between the tuned model's test accuracy and FVM's AUC over the "
          "n_val sweep (all sizes and seeds pooled) is at least 0.7",
          "Thm 3.2 / Fig. 2: IF detection tracks validation performance", 0.7, kind="exact"),
    Claim("nval-gain-every-seed", "FVM's AUC at the largest n_val exceeds that at the smallest in every seed "
          "(worst seed's gain)", "Thm 3.2: lower validation risk, more reliable IF", 0.0, kind="exact"),
    Claim("fvm-vs-vm", "flat (SAM) fine-tuning does not hurt: AUC(FVM) - AUC(VM) >= -0.005",
          "FVM beats VM by 0.5-1 AUC point (Table 1)", -0.005),
    Claim("flat-lowers-lambda-max", "the flat fine-tune's lambda_max(H_val) is at most ERM's in at least "
          "2/3 of the (seed, n_val) runs", "flat validation minima (Sec. 4)", 2 / 3, kind="exact"),
    Claim("fvm-vs-loss-flat", "FVM beats the plain training loss of its own validation-tuned model "
          "(AUC difference >= 0; the curvature-weighted second-order form adds something)",
          "not tested in the paper (our ablation)", 0.0),
]


def auc_table(results: Results) -> pd.DataFrame:
    """AUC per seed (rows) and method (columns)."""
    return results.detection.pivot(index="seed", columns="method", values="auc")


def claim_values(results: Results) -> dict[str, Any]:
    """The per-seed value (statistical claims) or the one value (exact claims) of every claim."""
    a = auc_table(results)
    c = results.curve
    first, last = c[c.step == 0].set_index("seed"), c[c.step == c.step.max()].set_index("seed")
    sw = results.sweep
    lo, hi = sw[sw.n_val == sw.n_val.min()].set_index("seed"), sw[sw.n_val == sw.n_val.max()].set_index("seed")
    rho = spearmanr(sw["test_acc_fvm"], sw["auc_fvm"]).statistic
    return {
        "fvm-vs-if": list(a["FVM"] - a["IF"]),
        "fvm-vs-if-every-seed": claims.worst(a["FVM"] - a["IF"], ">="),
        "fvm-vs-tracin": list(a["FVM"] - a["TracIn"]),
        "fvm-vs-if1st-flat": list(a["FVM"] - a["IF-1st@θ̃"]),
        "if1st-no-gain": list(a["IF-1st@θ̃"] - a["IF"]),
        "clean-collapse": list(last["abs_if1st_clean"] / first["abs_if1st_clean"]),
        "nval-spearman": float(rho),
        "nval-gain-every-seed": claims.worst(hi["auc_fvm"] - lo["auc_fvm"], ">="),
        "fvm-vs-vm": list(a["FVM"] - a["VM"]),
        "flat-lowers-lambda-max": float((sw["lambda_max_fvm"] <= sw["lambda_max_vm"]).mean()),
        "fvm-vs-loss-flat": list(a["FVM"] - a["loss@θ̃"]),
    }


def check(results: Results) -> list[Verdict]:
    """Evaluate :data:`CLAIMS`."""
    return claims.evaluate_all(CLAIMS, claim_values(results))


def summary(results: Results) -> pd.DataFrame:
    """Mean (sd) of AUC, AP and precision@k per method over seeds; ablations last."""
    g = results.detection.groupby("method")[["auc", "ap", "p_at_k"]]
    m, s = g.mean(), g.std().fillna(0.0)
    out = m.round(3).astype(str) + " ± " + s.round(3).astype(str)
    order = [x for x in (*METHODS, *VARIANTS, *ABLATIONS) if x in out.index]
    return out.loc[order].rename(columns={"auc": "ROC AUC", "ap": "AP", "p_at_k": "P@k"})


def relabel_summary(results: Results) -> pd.DataFrame:
    """Relabeling top-1 accuracy on the flipped points, mean ± sd over seeds (exploratory)."""
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


# ----------------------------------------------------------------------------- figures

def plot_detection(results: Results) -> Figure:
    """Left: ROC curves of every score (first seed). Right: AUC mean ± sd over seeds (ablations hatched)."""
    fig, axes = figure(2, 1, width=4.0, height=3.2)
    present = set(results.detection["method"])
    order = [m for m in (*METHODS, *VARIANTS, *ABLATIONS) if m in present]
    for m in order:
        fpr, tpr = S.roc_curve(results.example_flipped, results.example_scores[m])
        axes[0].plot(fpr, tpr, label=m, linestyle="--" if m in ABLATIONS else ":" if m in VARIANTS else "-",
                     linewidth=1.2)
    axes[0].plot([0, 1], [0, 1], color="grey", linewidth=0.6)
    axes[0].set(xlabel="false-positive rate (clean flagged)", ylabel="true-positive rate (flipped found)",
                title=f"ROC, seed {results.params.seed}")
    axes[0].legend(fontsize=7)
    g = results.detection.groupby("method")["auc"].agg(["mean", "std"]).reindex(order)
    colors = [f"C{i}" for i in range(len(order))]
    axes[1].bar(range(len(order)), g["mean"], yerr=g["std"].fillna(0), color=colors,
                hatch=None, edgecolor="black", linewidth=0.5)
    for i, m in enumerate(order):
        if m in ABLATIONS:
            axes[1].patches[i].set_hatch("//")
    axes[1].set_xticks(range(len(order)), order, rotation=45, ha="right")
    axes[1].set(ylabel="ROC AUC (flipped vs clean)", ylim=(0.5, 1.0), title=f"mean ± sd over {results.params.seeds} seeds")
    return fig


def plot_finetune_curve(results: Results) -> Figure:
    """Fig. 3 analog: AUC along the flat fine-tune (left) and mean |first-order IF| of clean vs flipped (right)."""
    fig, axes = figure(2, 1, width=3.8, height=3.0)
    c = results.curve.groupby("step").agg(["mean", "std"])
    steps = c.index.to_numpy()
    for col, label in (("auc_if1st", "first-order IF (H_tr at theta)"), ("auc_fvm", "FVM (H_val at theta)")):
        axes[0].errorbar(steps, c[(col, "mean")], yerr=c[(col, "std")].fillna(0), marker="o", label=label, capsize=2)
    axes[0].set(xlabel="SAM fine-tuning step on S_val (0 = theta*)", ylabel="ROC AUC")
    axes[0].legend()
    for col, label in (("abs_if1st_clean", "clean"), ("abs_if1st_noisy", "flipped")):
        axes[1].errorbar(steps, c[(col, "mean")], yerr=c[(col, "std")].fillna(0), marker="o", label=label, capsize=2)
    axes[1].set(yscale="log", xlabel="SAM fine-tuning step on S_val", ylabel="mean |first-order IF|")
    axes[1].legend()
    return fig


def plot_nval_sweep(results: Results) -> Figure:
    """Thm 3.2 / Fig. 2 analog: tuned model's test accuracy vs AUC over n_val (colour), VM and FVM."""
    sw = results.sweep
    fig, axes = figure(2, 1, width=3.8, height=3.2)
    sizes = sorted(sw["n_val"].unique())
    cmap = {n: f"C{i}" for i, n in enumerate(sizes)}
    for ax, tag in zip(axes, ("vm", "fvm")):
        rho = spearmanr(sw[f"test_acc_{tag}"], sw[f"auc_{tag}"]).statistic
        for n in sizes:
            s = sw[sw.n_val == n]
            ax.scatter(s[f"test_acc_{tag}"], s[f"auc_{tag}"], color=cmap[n], s=18, label=f"n_val={n}")
        ax.set(xlabel="test accuracy of the tuned model", ylabel=f"ROC AUC ({tag.upper()})",
               title=f"{tag.upper()}: Spearman rho = {rho:.2f}")
        twin = ax.twinx()
        lm = sw.groupby("n_val")[[f"test_acc_{tag}", f"lambda_max_{tag}"]].mean()
        twin.plot(lm[f"test_acc_{tag}"], lm[f"lambda_max_{tag}"], color="grey", linestyle=":", marker="x",
                  label="lambda_max(H_val), mean")
        twin.set_ylabel("lambda_max(H_val)", color="grey")
        twin.grid(False)
    axes[0].legend(fontsize=7, loc="lower right")
    return fig


def plot_score_hists(results: Results) -> Figure:
    """Clean vs flipped histograms of IF and FVM (first seed), and relabeling accuracy (exploratory)."""
    fig, axes = figure(3, 1, width=3.0, height=2.7)
    fl = results.example_flipped
    for ax, m, transform, xl in ((axes[0], "IF", lambda v: v, "IF harm score"),
                                 (axes[1], "FVM", lambda v: np.log10(np.maximum(v, 1e-12)), "log10 FVM score")):
        v = transform(np.asarray(results.example_scores[m], dtype=float))
        bins = np.linspace(np.quantile(v, 0.005), np.quantile(v, 0.995), 40)
        ax.hist(v[~fl], bins=bins, alpha=0.6, density=True, label="clean")
        ax.hist(v[fl], bins=bins, alpha=0.6, density=True, label="flipped")
        ax.set(xlabel=xl, ylabel="density", title=m)
        ax.legend()
    if len(results.relabel):
        r = results.relabel.groupby("method")["accuracy"].agg(["mean", "std"]).reindex(list(RELABEL))
        axes[2].bar(range(len(r)), r["mean"], yerr=r["std"].fillna(0), color="lightgrey", edgecolor="black", hatch="..")
        axes[2].set_xticks(range(len(r)), list(r.index), rotation=45, ha="right")
        axes[2].set(ylabel="relabel top-1 accuracy", ylim=(0, 1), title="relabeling (exploratory)")
    return fig
