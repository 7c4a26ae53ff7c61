"""Figures of the JSAE page."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from companion.papers.jsae import HI, TWIN, TWIN2
from companion.papers.jsae.experiment import CLAIM_TAU, Results, per_seed_metric
from companion.plotting import figure

# --- figures -----------------------------------------------------------------------------------

LABELS = {"sae": "SAE, trained LM", "jsae": "JSAE, trained LM", TWIN: "SAE twin, trained LM",
          TWIN2: "SAE twin 2, trained LM", HI: "JSAE at frontier_coef, trained LM",
          "jsae-random": "JSAE, random LM", "sae-random": "SAE, random LM", "jsae-random2": "JSAE, random LM 2",
          "sae-random2": "SAE, random LM 2"}


def plot_jacobian_hist(results: Results) -> Figure:
    """Histogram and CDF of |J| (first seed, held-out tokens), SAE vs JSAE, x cut at 0.1."""
    fig, (ax_h, ax_c) = figure(2, 1, 4.0, 2.8)
    bins = np.linspace(0, 0.1, 51)
    for name in ("sae", "jsae"):
        vals = results.abs_j[name]
        ax_h.hist(vals, bins=bins, histtype="step", density=True, label=LABELS[name])
        ax_c.plot(np.sort(vals), np.linspace(0, 1, len(vals)), label=LABELS[name])
    ax_h.set(xlabel="|J| element", ylabel="density", yscale="log", title="|J| histogram")
    ax_c.set(xlabel="|J| element", ylabel="fraction <= x", xlim=(0, 0.1), title="CDF")
    ax_c.axvline(CLAIM_TAU, color="grey", ls=":", lw=1)
    ax_h.legend()
    return fig


def plot_sparsity_bars(results: Results) -> Figure:
    """Fraction of |J| above each threshold and the scale-free l1/(k l2), mean and sd over seeds."""
    fig, (ax_f, ax_l) = figure(2, 1, 5.0, 3.2)
    conds = list(results.per_seed[0])
    taus = results.params.thresholds
    width = 0.8 / len(conds)
    for c, cond in enumerate(conds):
        fr = np.array([row[cond].frac for row in results.per_seed])
        ax_f.bar(np.arange(len(taus)) + c * width, fr.mean(0), width, yerr=fr.std(0), label=LABELS[cond])
        l12 = per_seed_metric(results, cond, "l1l2")
        ax_l.bar(c, np.mean(l12), 0.7, yerr=np.std(l12))
    ax_f.set(xticks=np.arange(len(taus)) + 0.4 - width / 2, xticklabels=[f"{t:g}" for t in taus],
             xlabel="threshold tau", ylabel="fraction |J| > tau", title="threshold metric (paper)")
    ax_l.set(xticks=range(len(conds)), ylabel="mean ||J||_1 / (k ||J||_2)", title="scale-free metric")
    ax_l.set_xticklabels([LABELS[c].replace(", ", "\n") for c in conds], fontsize=6, rotation=30)
    ax_f.set_ylim(0, 1.4)  # headroom for the legend above the bars
    ax_f.legend(fontsize=6, ncol=3, loc="upper center")
    return fig


def plot_example_jacobians(results: Results) -> Figure:
    """|J| of four held-out tokens, SAE (top) vs JSAE (bottom); rows and columns shuffled."""
    fig, axes = figure(4, 2, 1.7, 1.7)
    vmax = max(results.examples[n].max() for n in ("sae", "jsae"))
    for r, name in enumerate(("sae", "jsae")):
        for t in range(4):
            ax = axes[4 * r + t]
            im = ax.imshow(results.examples[name][t], cmap="Greys", vmin=0, vmax=vmax)
            ax.set(xticks=[], yticks=[], title=f"{name.upper()} token {t}" if r == 0 or t == 0 else "")
            ax.grid(False)
    fig.colorbar(im, ax=axes, shrink=0.7, label="|J|")
    return fig


def plot_tradeoff(results: Results) -> Figure:
    """CE-loss score (x) vs fraction |J| > 0.01 (y): every seed's pairs at lambda = 0, jac_coef and frontier_coef
    (the frontier check) and the sweep's pairs, coloured by lambda; the two twin pairs (lambda = 0, other SAE seeds)
    as crosses."""
    fig, (ax,) = figure(1, 1, 4.5, 3.0)
    p = results.params
    points = [(lam, row[c]) for row in results.per_seed for c, lam in (("sae", 0.0), ("jsae", p.jac_coef),
                                                                       (HI, p.frontier_coef)) if c in row]
    points += results.sweep
    for lam in sorted({lam for lam, _ in points}):
        sel = [ev for l_, ev in points if l_ == lam]
        ax.scatter([e.ce for e in sel], [e.frac01 for e in sel], label=f"lambda = {lam:g}")
    twins = [row[c] for row in results.per_seed for c in (TWIN, TWIN2) if c in row]
    ax.scatter([e.ce for e in twins], [e.frac01 for e in twins], marker="x", color="k",
               label="lambda = 0, twin pairs")
    ax.set(xlabel="CE-loss score (1 = perfect splice)", ylabel="fraction |J| > 0.01",
           title="sparsity / fidelity trade-off")
    ax.legend(fontsize=6)
    return fig
