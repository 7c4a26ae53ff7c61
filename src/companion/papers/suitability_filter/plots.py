"""Figures of the suitability-filter page: densities, sensitivity, estimates, signal ablation."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from companion import plotting
from companion.papers.suitability_filter.experiment import (ALPHA, MIN_BIN, Results, SeedResult, ablation_values,
                                                            bin_edges, ood_mask)
from companion.papers.suitability_filter.noninferiority import binned_rates
def _pick(s: SeedResult, pair: int, suitable: bool) -> int:
    """A user set near the boundary, judged SUITABLE (and truly so) or truly UNSUITABLE."""
    diff, suit = s.acc_diff[pair], s.pvals["all"][0, pair] <= ALPHA
    ok = (suit & (diff >= 0)) if suitable else (diff < 0)
    target = 0.04 if suitable else -0.05
    cand = np.flatnonzero(ok) if ok.any() else np.arange(len(diff))
    return int(cand[np.argmin(np.abs(diff[cand] - target))])


def plot_densities(results: Results) -> Figure:
    """Fig. 1 analog: p_c on D_test and on a SUITABLE and an UNSUITABLE user set (first seed, pair (0, 1))."""
    s, m = results.seeds[0], max(results.margins)
    fig, (ax,) = plotting.figure(1, 1, width=6.0, height=3.2)
    sets = [("D_test (fold 1)", s.pc_example_test, None)]
    for suitable in (True, False):
        u = _pick(s, 0, suitable)
        word = "SUITABLE" if s.pvals["all"][0, 0, u] <= ALPHA else "INCONCLUSIVE"
        sets.append((f"{s.labels[u]}: acc diff {s.acc_diff[0, u]:+.3f}, {word}", s.pc_example_users[u], u))
    for label, pc, _ in sets:
        line = ax.hist(pc, bins=40, range=(0, 1), density=True, histtype="step", label=label)[2][0]
        ax.axvline(pc.mean(), color=line.get_edgecolor(), ls="--", lw=1)
    mt = s.pc_example_test.mean()
    ax.axvspan(mt - m, mt, color="grey", alpha=0.2, lw=0, label=f"margin band m = {m:g}")
    ax.set(xlabel="estimated probability of correctness p_c", ylabel="density",
           title="Suitability test: compare mean p_c (dashed) of user vs test data")
    ax.legend(loc="upper left")
    return fig


def plot_sensitivity(results: Results) -> Figure:
    """Fig. 4 analog: SUITABLE rate per acc-diff bin (ID and OOD, pooled over seeds) and acc-diff histogram."""
    edges = bin_edges(results.params.bin_width)
    centres = (edges[:-1] + edges[1:]) / 2 * 100
    fig, (ax, ax2) = plotting.figure(2, 1, width=4.6, height=3.2)
    for which in ("id", "ood"):
        diff = np.concatenate([s.acc_diff[(ood_mask(s) if which == "ood" else ~ood_mask(s))] for s in results.seeds])
        suit = np.concatenate([s.pvals["all"][0][(ood_mask(s) if which == "ood" else ~ood_mask(s))] <= ALPHA
                               for s in results.seeds])
        rates, counts = binned_rates(diff, suit, edges)
        keep = counts >= MIN_BIN
        ax.plot(centres[keep], 100 * rates[keep], "o-", ms=3, label=which.upper())
        for x, y, n in zip(centres[keep], 100 * rates[keep], counts[keep]):
            ax.annotate(str(n), (x, y), fontsize=5, xytext=(0, 4 if which == "id" else -8),
                        textcoords="offset points", ha="center")
        ax2.hist(100 * diff, bins=40, alpha=0.6, label=which.upper())
    ax.step([edges[0] * 100, 0, 0, edges[-1] * 100], [0, 0, 100, 100], where="post", color="k", ls=":",
            lw=1, label="ideal (m = 0)")
    ax.set(xlabel="Acc(D_u) - Acc(D_test) [points]", ylabel="% SUITABLE", title="Sensitivity (alpha = 0.05)")
    ax.legend(loc="upper left")
    ax2.axvline(0, color="k", lw=0.8)
    ax2.set(xlabel="Acc(D_u) - Acc(D_test) [points]", ylabel="experiments", title="Design coverage")
    ax2.legend()
    return fig


def plot_estimates(results: Results) -> Figure:
    """Fig. 3 analog: mean p_c vs true user accuracy, source-calibrated and with the m' correction."""
    s = results.seeds[0]
    i, j = s.pairs[0]
    fig, axes = plotting.figure(2, 1, width=3.8, height=3.4)
    decisions = (s.pvals["all"][0, 0] <= ALPHA, s.p_adjusted[0, 0] <= ALPHA)
    ests = (s.mean_pc_user[i], s.mean_pc_user[i] - s.delta_user[i] + s.delta_test[i, j])
    titles = ("source-calibrated C", "margin-adjusted (m' from labeled D^_u)")
    ood = np.array([k != "id" for k in s.kinds])
    lo = min(s.acc_user.min(), min(e.min() for e in ests)) - 0.02
    for ax, est, suit, title in zip(axes, ests, decisions, titles):
        for mask, marker, name in ((~ood, "o", "ID"), (ood, "^", "OOD")):
            for flag, colour, word in ((True, "C2", "SUITABLE"), (False, "C3", "INCONCLUSIVE")):
                sel = mask & (suit == flag)
                ax.scatter(s.acc_user[sel], est[sel], marker=marker, c=colour, s=18, alpha=0.8,
                           label=f"{name} {word}")
        ax.plot([lo, 1], [lo, 1], "k:", lw=1)
        ax.axvline(s.acc_test[j].mean(), color="grey", lw=0.8)
        ax.axhline(s.mean_pc_test[i, j].mean(), color="grey", lw=0.8, ls="--")
        ax.set(xlim=(lo, 1), ylim=(lo, 1), xlabel="true Acc(D_u)", title=title)
    axes[0].set_ylabel("mean p_c on D_u (adjusted: + Delta_test - Delta_u)")
    axes[1].legend(loc="lower right", fontsize=6)
    return fig


def plot_ablation(results: Results) -> Figure:
    """Signal ablation: ROC AUC, accuracy and FPR of each filter on ID and OOD sets (mean +- sd over seeds)."""
    vals = ablation_values(results)
    names = list(vals)
    y = np.arange(len(names))
    fig, axes = plotting.figure(3, 1, width=3.0, height=0.22 * len(names) + 1.2)
    for ax, key, title in zip(axes, ("roc", "acc", "fpr"), ("ROC AUC", "decision accuracy", "FPR")):
        for k, which in enumerate(("id", "ood")):
            v = np.array([vals[n][f"{key}-{which}"] for n in names])
            ax.barh(y + (k - 0.5) * 0.4, np.nanmean(v, axis=1), height=0.4, xerr=np.nanstd(v, axis=1),
                    label=which.upper(), error_kw={"lw": 0.7})
        ax.set(yticks=y, yticklabels=names if key == "roc" else [], title=title)
        ax.invert_yaxis()
    axes[2].axvline(ALPHA, color="k", ls=":", lw=1)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside upper center", ncol=2)
    return fig
