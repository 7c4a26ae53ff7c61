"""The figures of the Stay-Positive page."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from companion.papers.stay_positive import CLAIM_Q, HEAD_NAMES, HEADS, PARTS_SETS, TRACE_FAKE
from companion.papers.stay_positive.experiment import (WORLD_NAMES, Results, eval_inpaint_sizes, eval_qualities,
                                                       world_heads)
from companion.plotting import figure, mean_sd_line


def plot_examples(results: Results) -> Figure:
    """Example patches of each set, plus the mean log-spectrum of reals and fakes."""
    names = list(results.examples)
    fig, axes = figure(len(names) + 2, 1, width=1.7, height=1.9)
    titles = {"real_test": "real (test)", "clean": "fake", f"jpeg{CLAIM_Q}": f"fake, JPEG-{CLAIM_Q}",
              TRACE_FAKE: "fake + camera trace", "trace_real": "real + camera trace"}
    titles.update({k: f"inpaint {k[len('inpaint'):]}px" for k in names if k.startswith("inpaint")})
    for ax, k in zip(axes, names):
        ax.imshow(np.clip(results.examples[k][0], 0, 1), interpolation="nearest")
        ax.set_title(titles[k])
    for ax, k, t in zip(axes[len(names):], ("real_test", "clean"), ("log|FFT| real", "log|FFT| fake")):
        ax.imshow(results.spectra[k], cmap="magma")
        ax.set_title(t)
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.grid(False)
    return fig


def plot_recall_vs_quality(results: Results) -> Figure:
    """Recall of fakes at the fixed tau vs JPEG quality of the fakes, per head."""
    qs = eval_qualities(results.params)
    keys = ["clean"] + [f"jpeg{q}" for q in qs]
    fig, (ax,) = figure(1, 1, width=5.0, height=3.2)
    x = np.arange(len(keys))
    for name in HEADS:
        runs = [[s["heads"][name]["tpr"][k] for k in keys] for s in results.per_seed]
        mean_sd_line(ax, x, runs, HEAD_NAMES[name])
        ax.axhline(np.mean([r[0] for r in runs]), ls="--", lw=0.8, color=ax.lines[-1].get_color())
    ax.set_xticks(x, ["clean"] + [str(q) for q in qs])
    ax.set(xlabel="JPEG quality of the fakes", ylabel="TPR at tau (5% FPR on validation reals)")
    ax.legend()
    return fig


def plot_logit_parts(results: Results) -> Figure:
    """Per world, head and set: mean negative-weight part (below 0) and positive-weight part (above 0) of the logit."""
    worlds = {"JPEG reals (main world)": None}
    worlds |= {WORLD_NAMES[w]: w for w in results.per_seed[0].get("worlds", {})}
    fig, axes = figure(len(worlds), 1, width=4.2, height=3.0)
    labels = {"real_test": "real (test)", "clean": "clean fake", f"jpeg{CLAIM_Q}": f"fake JPEG-{CLAIM_Q}",
              TRACE_FAKE: "fake + trace"}
    x = np.arange(len(PARTS_SETS))
    for ax, (title, world) in zip(axes, worlds.items()):
        heads = world_heads(results.per_seed, world)
        for i, name in enumerate(HEADS):
            for sign, hatch in (("neg", "//"), ("pos", "")):
                vals = np.array([[h[name]["parts"].get(k, {}).get(sign, np.nan) for k in PARTS_SETS] for h in heads])
                ax.bar(x + (i - 1) * 0.27, vals.mean(axis=0), 0.25, yerr=vals.std(axis=0), hatch=hatch,
                       color=f"C{i}", alpha=0.8, label=HEAD_NAMES[name] if sign == "pos" else None)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(x, [labels[k] for k in PARTS_SETS])
        ax.set(ylabel="mean logit part (hatched: w < 0)", title=title)
    axes[0].legend()
    return fig


def plot_inpainting(results: Results) -> Figure:
    """AP of inpainted reals vs inpainted area, and score histograms (real vs inpaint16)."""
    sizes = sorted(eval_inpaint_sizes(results.params))
    area = [100.0 * s * s / results.params.patch ** 2 for s in sizes]
    fig, axes = figure(3, 1, width=3.2, height=2.8)
    for name in HEADS:
        runs = [[s["heads"][name]["ap"][f"inpaint{z}"] for z in sizes] for s in results.per_seed]
        mean_sd_line(axes[0], area, runs, HEAD_NAMES[name])
    axes[0].set(xlabel="inpainted area (%)", ylabel="AP (inpainted vs real)")
    axes[0].legend()
    s0 = results.per_seed[0]["heads"]
    key = results.per_seed[0]["keys"]["inpaint"]
    for ax, name in zip(axes[1:], ("base", "sp")):
        lg = s0[name]["logits"]
        if key not in lg:
            continue
        bins = np.histogram_bin_edges(np.r_[lg["real_test"], lg[key]], 40)
        ax.hist(lg["real_test"], bins, alpha=0.5, label="real (JPEG)")
        ax.hist(lg[key], bins, alpha=0.5, label=f"inpaint {key[len('inpaint'):]}px")
        ax.set(xlabel="logit", title=HEAD_NAMES[name])
        ax.legend()
    return fig
