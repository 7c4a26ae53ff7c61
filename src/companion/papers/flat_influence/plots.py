"""Figures of the flat-influence page: ROC and AUC bars, the Fig. 3 fine-tune curve, the n_val sweep, histograms."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from scipy.stats import spearmanr

from companion.papers.flat_influence import scores as S
from companion.papers.flat_influence.experiment import ABLATIONS, METHODS, RELABEL, VARIANTS, Results
from companion.plotting import figure

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
    axes[1].axhline(0.5, color="grey", linewidth=0.8, linestyle=":")  # chance; bars below it rank clean points first
    axes[1].set(ylabel="ROC AUC (flipped vs clean)", ylim=(0.0, 1.0), title=f"mean ± sd over {results.params.seeds} seeds")
    return fig


def plot_finetune_curve(results: Results) -> Figure:
    """Fig. 3 analog: AUC along the flat fine-tune (left); mean |first-order IF| and, dashed, mean |g_z| of
    clean vs flipped points (right)."""
    fig, axes = figure(2, 1, width=3.8, height=3.0)
    c = results.curve.groupby("step").agg(["mean", "std"])
    steps = c.index.to_numpy()
    for col, label in (("auc_if1st", "first-order IF (H_tr at theta)"), ("auc_fvm", "FVM (H_val at theta)")):
        axes[0].errorbar(steps, c[(col, "mean")], yerr=c[(col, "std")].fillna(0), marker="o", label=label, capsize=2)
    axes[0].set(xlabel="SAM fine-tuning step on S_val (0 = theta*)", ylabel="ROC AUC")
    axes[0].legend()
    for i, (col, label) in enumerate((("abs_if1st_clean", "clean |IF|"), ("abs_if1st_noisy", "flipped |IF|"),
                                      ("abs_g_clean", "clean |g_z| (control)"), ("abs_g_noisy", "flipped |g_z| (control)"))):
        axes[1].errorbar(steps, c[(col, "mean")], yerr=c[(col, "std")].fillna(0), marker="o", label=label, capsize=2,
                         color=f"C{i % 2}", linestyle="-" if i < 2 else "--")
    axes[1].set(yscale="log", xlabel="SAM fine-tuning step on S_val", ylabel="mean |first-order IF| or |g_z|")
    axes[1].legend()
    return fig


def plot_nval_sweep(results: Results) -> Figure:
    """Fig. 2 analog: tuned model's test accuracy vs AUC over n_val (colour), VM and FVM; title: mean within-seed rho.

    The FVM panel's rho is the ``nval-spearman`` row's value; the VM panel's is shown for comparison, not gated.
    """
    sw = results.sweep
    fig, axes = figure(2, 1, width=3.8, height=3.2)
    sizes = sorted(sw["n_val"].unique())
    cmap = {n: f"C{i}" for i, n in enumerate(sizes)}
    for ax, tag in zip(axes, ("vm", "fvm")):
        rho = np.mean([spearmanr(g[f"test_acc_{tag}"], g[f"auc_{tag}"]).statistic for _, g in sw.groupby("seed")])
        for n in sizes:
            s = sw[sw.n_val == n]
            ax.scatter(s[f"test_acc_{tag}"], s[f"auc_{tag}"], color=cmap[n], s=18, label=f"n_val={n}")
        ax.set(xlabel="test accuracy of the tuned model", ylabel=f"ROC AUC ({tag.upper()})",
               title=f"{tag.upper()}: within-seed Spearman rho, mean {rho:.2f}"
               + (" (row nval-spearman)" if tag == "fvm" else " (not gated)"))
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
