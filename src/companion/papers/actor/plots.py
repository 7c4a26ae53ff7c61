"""The figures of the ACTOR page: refusal per set and model, c_q before and after, utility against beta,
and the alpha trade-off."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from companion import plotting
from companion.papers.actor import CLAIMS
from companion.papers.actor.experiment import SETS, Results


def plot_refusal(results: Results) -> Figure:
    """Grouped bars: refusal rate per eval set and model, mean with s.d. over seeds."""
    fig, (ax,) = plotting.figure(width=8.0, height=3.2)
    models = list(dict.fromkeys(m for s in results.per_seed for m in s["rates"]))
    width = 0.8 / len(models)
    x = np.arange(len(SETS))
    for i, m in enumerate(models):
        vals = np.array([[s["rates"][m][k] for k in SETS] for s in results.per_seed if m in s["rates"]])
        ax.bar(x + (i - (len(models) - 1) / 2) * width, vals.mean(0), width, yerr=vals.std(0), label=m, capsize=2)
    ax.set_xticks(x, ["harmful", "pseudo-harmful ID", "pseudo-harmful OOD", "benign"])
    ax.set_ylabel("refusal rate")
    ax.set_ylim(0, 1.05)
    ax.legend(ncol=2, fontsize=7, loc="upper right")
    return fig


def plot_projections(results: Results) -> Figure:
    """Histograms of c_q at l* (base model's frame) before and after ACTOR, per eval set (first seed)."""
    s = results.per_seed[0]
    fig, axes = plotting.figure(ncols=len(SETS), width=2.3, height=2.3)
    if not s["coef_before"]:
        axes[0].text(0.05, 0.5, "not recorded in this setting", transform=axes[0].transAxes)
        return fig
    for ax, k in zip(axes, SETS):
        before, after = s["coef_before"][k], s["coef_after"][k]
        bins = np.linspace(min(before.min(), after.min()), max(before.max(), after.max()), 30)
        ax.hist(before, bins, alpha=0.6, label="base")
        ax.hist(after, bins, alpha=0.6, label="ACTOR")
        ax.set_title(k.replace("_", " "))
        ax.set_xlabel("c_q along r̂")
    axes[0].legend()
    return fig


def plot_alpha(results: Results) -> Figure:
    """Trade-off: compliance on held-out ID pseudo-harmful prompts (C.R.) against harmful refusal (S.S.) for
    each alpha, mean over seeds, T.S. = (C.R. + S.S.)/2 labelled (as :func:`.experiment.trade_off`)."""
    fig, (ax,) = plotting.figure(width=4.5, height=3.2)
    alphas = sorted({a for s in results.per_seed for a in s["alpha"]})
    cr = [np.mean([1 - s["alpha"][a]["pseudo_id"] for s in results.per_seed]) for a in alphas]
    ss = [np.mean([s["alpha"][a]["harmful"] for s in results.per_seed]) for a in alphas]
    ax.plot(cr, ss, "o-")
    for a, c, h in zip(alphas, cr, ss):
        ax.annotate(f"α={a:g}, T.S.={(c + h) / 2:.2f}", (c, h), fontsize=7, xytext=(3, -10), textcoords="offset points")
    base_cr = np.mean([1 - s["rates"]["base"]["pseudo_id"] for s in results.per_seed])
    base_ss = np.mean([s["rates"]["base"]["harmful"] for s in results.per_seed])
    ax.plot([base_cr], [base_ss], "s", color="grey", label="base")
    ax.set_xlabel("compliance on held-out pseudo-harmful ID prompts (C.R.)")
    ax.set_ylabel("harmful refusal (S.S.)")
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(min(ss + [base_ss]) - 0.1, 1.02)
    ax.legend()
    return fig


def plot_beta(results: Results) -> Figure:
    """Utility after ACTOR against the retain weight beta, one line per seed."""
    fig, (ax,) = plotting.figure(width=4.5, height=3.2)
    for s in results.per_seed:
        bs = sorted(s["beta"])
        ax.plot(bs, [s["beta"][b] for b in bs], "o-", alpha=0.5, color="C0")
    bar = next(c.at(results.params.preset).threshold for c in CLAIMS if c.id == "utility-kept")
    ax.axhline(bar, ls="--", color="grey", label=f"utility-kept bar {bar:.3g}")
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xlabel("β (retain weight; projection from the benign mean)")
    ax.set_ylabel("utility (teacher-forced accuracy)")
    ax.legend()
    return fig
