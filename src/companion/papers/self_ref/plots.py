"""The figures: routing curves, score histograms, reliability diagrams, per-op bars and the UNK rejection ROC."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from companion import plotting
from companion.papers.self_ref import routing
from companion.papers.self_ref.experiment import Results, curves, per_op_table, sharp_condition

COLORS = {"Self-REF": "C0", "MSP (base)": "C1", "MSP (SFT)": "C2", "op-only": "C4", "random": "0.5", "oracle": "k"}


def plot_routing(results: Results) -> Figure:
    """Accuracy vs routing rate (mean over seeds): sharpened base and no sharpening."""
    conds = [c for c in ("sharp", "plain") if c in results.seeds[0].conditions]
    fig, axes = plotting.figure(len(conds), 1, width=5.0, height=3.6)
    for ax, cond in zip(axes, conds):
        cur = [curves(o, cond, results.rates) for o in results.seeds]
        for name in (n for n in COLORS if n in cur[0]):
            ax.plot(results.rates, np.mean([c[name] for c in cur], 0), label=name, color=COLORS[name],
                    ls="--" if name in ("random", "oracle") else "-")
        ax.axhline(np.mean([o.conditions[cond].ok_sr.mean() for o in results.seeds]), color="C0", lw=0.8, ls=":")
        ax.axhline(np.mean([o.strong_ok.mean() for o in results.seeds]), color="C3", lw=0.8, ls=":",
                   label="strong model")
        ax.set(xlabel="routing rate", ylabel="system accuracy",
               title="sharpened base" if cond == "sharp" else "no sharpening")
    axes[0].legend(fontsize=8)
    return fig


def plot_histograms(results: Results) -> Figure:
    """Self-REF confidence, MSP of the base and of the SFT model, split by right and wrong answers (sharpened
    base, pooled seeds)."""
    cond = sharp_condition(results)
    pairs = [("Self-REF", "conf", "ok_sr"), ("MSP (base)", "msp", "ok_base"), ("MSP (SFT)", "msp_sft", "ok_sft")]
    pairs = [q for q in pairs if getattr(results.seeds[0].conditions[cond], q[1]) is not None]
    fig, axes = plotting.figure(len(pairs), 1, width=4.2, height=3.2)
    bins = np.linspace(0, 1, 21)
    for ax, (name, score, ok) in zip(axes, pairs):
        s = np.concatenate([getattr(o.conditions[cond], score) for o in results.seeds])
        y = np.concatenate([getattr(o.conditions[cond], ok) for o in results.seeds])
        ax.hist(s[y], bins, alpha=0.6, label="right", color="C2")
        ax.hist(s[~y], bins, alpha=0.6, label="wrong", color="C3")
        ax.set(title=name, xlabel="score", ylabel="test answers")
    axes[0].legend()
    return fig


def plot_reliability(results: Results) -> Figure:
    """Reliability diagrams (15 equal-mass bins, pooled seeds) with ECE, sharpened base."""
    cond = sharp_condition(results)
    fig, (ax,) = plotting.figure(1, 1, width=4.2, height=3.8)
    for name, score, ok, color in (("Self-REF", "conf", "ok_sr", "C0"), ("MSP (base)", "msp", "ok_base", "C1")):
        s = np.concatenate([getattr(o.conditions[cond], score) for o in results.seeds])
        y = np.concatenate([getattr(o.conditions[cond], ok) for o in results.seeds])
        x, acc = routing.reliability(s, y)
        ax.plot(x, acc, "o-", color=color, label=f"{name} (ECE {routing.ece(s, y):.3f})")
    ax.plot([0, 1], [0, 1], color="0.6", ls="--", lw=0.8)
    ax.set(xlabel="mean score in bin", ylabel="accuracy in bin", xlim=(0, 1), ylim=(0, 1))
    ax.legend(fontsize=8)
    return fig


def plot_per_op(results: Results) -> Figure:
    """Per-op accuracy and mean confidence (bars), and the ROC of rejecting unanswerable (UNK) queries."""
    tab = per_op_table(results)
    fig, axes = plotting.figure(2, 1, width=5.0, height=3.4)
    x = np.arange(len(tab))
    w = 0.2
    for j, col in enumerate(("base acc", "MSP", "Self-REF acc", "Self-REF conf")):
        axes[0].bar(x + (j - 1.5) * w, tab[col], w, label=col)
    axes[0].set_xticks(x, tab.index, rotation=20, fontsize=8)
    axes[0].set(ylim=(0, 1.05), title="per operation (sharpened base)")
    axes[0].legend(fontsize=7)
    cond = sharp_condition(results)
    for name, score, unans, ok, color in (("Self-REF", "conf", "conf_unans", "ok_sr", "C0"),
                                         ("MSP (base)", "msp", "msp_unans", "ok_base", "C1")):
        pos = np.concatenate([getattr(o.conditions[cond], score)[getattr(o.conditions[cond], ok)] for o in results.seeds])
        neg = np.concatenate([getattr(o.conditions[cond], unans) for o in results.seeds])
        thr = np.unique(np.r_[pos, neg, np.inf])[::-1]
        tpr = [(pos >= t).mean() for t in thr]
        fpr = [(neg >= t).mean() for t in thr]
        s = np.r_[pos, neg]
        a = routing.auroc(s, np.r_[np.ones(len(pos), bool), np.zeros(len(neg), bool)])
        axes[1].plot(fpr, tpr, color=color, label=f"{name} (AUROC {a:.2f})")
    axes[1].plot([0, 1], [0, 1], color="0.6", ls="--", lw=0.8)
    axes[1].set(xlabel="unanswerable accepted", ylabel="right answers accepted", title="rejecting UNK queries")
    axes[1].legend(fontsize=8)
    return fig
