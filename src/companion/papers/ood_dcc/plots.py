"""The figures of ood-dcc: benchmark bars, score histograms, the mechanism of the update, the sweeps."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from companion.papers.ood_dcc.experiment import LADDER, METHODS, Results, per_seed_means
from companion.plotting import figure, mean_sd_line


def plot_benchmark(results: Results) -> Figure:
    """Grouped bars of AUROC and FPR95 per OOD set (mean +- sd over seeds); the ladder is outlined."""
    t = results.table
    t = pd.concat([t, t.groupby(["seed", "method"])[["auroc", "fpr95"]].mean().reset_index().assign(ood_set="mean")])
    sets = [*results.params.ood_sets, "mean"]
    fig, axes = figure(2, 1, width=5.2, height=2.8)
    w = 0.8 / len(METHODS)
    for ax, metric in zip(axes, ("auroc", "fpr95")):
        g = t.groupby(["method", "ood_set"])[metric].agg(["mean", "std"])
        for i, meth in enumerate(METHODS):
            mu = [g.loc[(meth, s), "mean"] for s in sets]
            sd = [g.loc[(meth, s), "std"] for s in sets]
            ladder = meth in LADDER
            ax.bar(np.arange(len(sets)) + (i - len(METHODS) / 2 + 0.5) * w, mu, w, yerr=sd, label=meth,
                   edgecolor="black" if ladder else "none", linewidth=1.2 if ladder else 0,
                   hatch="//" if meth == "DCC" else None, error_kw={"linewidth": 0.6})
        ax.set_xticks(np.arange(len(sets)), sets)
        ax.set_ylabel(metric.upper())
    axes[0].set_ylim(0.5, 1.0)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, ncols=len(METHODS), loc="outside lower center")
    return fig


def plot_score_hists(results: Results) -> Figure:
    """Histograms of log10 distance (-score) for ID test vs each OOD set, MahaRaw / MahaNorm / DCC, base seed."""
    fig, axes = figure(3, 1, width=3.2, height=2.6)
    for ax, meth in zip(axes, LADDER):
        s = results.example_scores[meth]
        logd = {k: np.log10(np.maximum(-v, 1e-3)) for k, v in s.items()}
        bins = np.linspace(min(x.min() for x in logd.values()), max(x.max() for x in logd.values()), 40)
        ax.hist(logd["id"], bins=bins, density=True, color="grey", alpha=0.5, label="ID test")
        for k in results.params.ood_sets:
            ax.hist(logd[k], bins=bins, density=True, histtype="step", label=k)
        ax.set_title(meth)
        ax.set_xlabel("log10 distance (min over classes)")
    axes[0].legend()
    return fig


def plot_mechanism(results: Results) -> Figure:
    """Left: d_Maha vs d_DCC (log-log, base seed) with y = x. Right: histogram of A on a log axis, A = 1 marked."""
    e = results.example_mechanism
    fig, axes = figure(2, 1, width=3.6, height=3.0)
    pos = e["d_dcc"] > 0
    for flag, label in ((True, "ID test"), (False, "OOD")):
        sel = pos & (e["is_id"] == flag)
        axes[0].scatter(e["d_maha"][sel], e["d_dcc"][sel], s=3, alpha=0.4, label=label)
    lim = [e["d_maha"].min(), e["d_maha"].max()]
    axes[0].plot(lim, lim, "k--", linewidth=0.8, label="y = x")
    axes[0].set(xscale="log", yscale="log", xlabel="d_Maha (normalised)", ylabel="d_DCC",
                title=f"{int((~pos).sum())} non-positive d_DCC not shown")
    axes[0].legend()
    logA = np.log10(np.maximum(e["A"], 1e-6))
    axes[1].hist(logA[e["is_id"]], bins=40, alpha=0.6, density=True, label="ID test")
    axes[1].hist(logA[~e["is_id"]], bins=40, alpha=0.6, density=True, label="OOD")
    axes[1].axvline(0.0, color="black", linestyle="--", label="A = 1")
    axes[1].set(xlabel="log10 A,  A = v^T Sigma^-1 v", ylabel="density")
    axes[1].legend()
    return fig


def plot_sweeps(results: Results) -> Figure:
    """Left: mean AUROC vs r/D for DCC, MahaNorm flat. Right: clean vs contaminated fits, MahaNorm and DCC."""
    fig, axes = figure(2, 1, width=3.6, height=2.8)
    sw = results.sweep.pivot(index="seed", columns="r_frac", values="auroc")
    mean_sd_line(axes[0], list(sw.columns), sw.to_numpy(), "DCC")
    base = per_seed_means(results).query("method == 'MahaNorm'")["auroc"].mean()
    axes[0].axhline(base, color="black", linestyle="--", label="MahaNorm (r = 0)")
    axes[0].set(xlabel="residual fraction r / D", ylabel="mean AUROC")
    axes[0].legend()
    c = results.contamination.groupby(["fit", "method"])["auroc"].agg(["mean", "std"])
    fits = ["clean", *results.params.contamination]
    for i, meth in enumerate(("MahaNorm", "DCC")):
        axes[1].bar(np.arange(len(fits)) + (i - 0.5) * 0.38, [c.loc[(f, meth), "mean"] for f in fits], 0.38,
                    yerr=[c.loc[(f, meth), "std"] for f in fits], label=meth)
    axes[1].set_xticks(np.arange(len(fits)), fits)
    axes[1].set(ylabel="mean AUROC", ylim=(0.85, 1.0))
    axes[1].legend()
    return fig
