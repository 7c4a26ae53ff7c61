"""The page's figures for the tiny reproduction."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from companion import plotting
from companion.papers.gguf_attack.experiment import MODELS


def plot_rates(results: dict[str, Any]) -> Figure:
    """Grouped bars: brand rate of M_clean, M_mal, M_rep and the three controls in FP and quantized with the
    first target type (seed s.d.)."""
    fig, (ax,) = plotting.figure(1, 1, 7.0, 3.0)
    head = results["params"].target_types[0]
    x = np.arange(len(MODELS))
    for j, (mode, label) in enumerate((("fp", "full precision"), ("q", f"quantized ({head})"))):
        vals = np.array([[s["rates"][k][mode][0] for k in MODELS] for s in results["seeds"]])
        ax.bar(x + (j - 0.5) * 0.38, vals.mean(0), 0.38, yerr=vals.std(0), label=label, capsize=3)
    ax.set_xticks(x, ["M_clean", "M_mal", "M_rep (PGD)", "free\n(no clamp)", "free at\nlr_inject", "mirrored\nbox"])
    ax.set_ylabel("BRAND rate")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="upper right")
    return fig


def plot_box_anatomy(results: dict[str, Any]) -> Figure:
    """Box width / quantization step for one tensor (first seed), with freeze and edge shares."""
    a = results["seeds"][0]["anatomy"]
    fig, (ax,) = plotting.figure(1, 1, 5.0, 2.8)
    ax.hist(a["ratio"], bins=40, range=(0, 1.0), color="C0")
    ax.set_xlabel("box width / quantization step")
    ax.set_ylabel("weights")
    ax.set_title(a["tensor"], fontsize=8)
    ax.text(0.98, 0.95, f"frozen by (a): {a['frozen_block']:.1%}\nfrozen by (b): {a['frozen_minmax']:.1%}\n"
            f"at a box edge after repair: {a['at_edge']:.1%}", transform=ax.transAxes, ha="right", va="top")
    return fig


def plot_agreement(results: dict[str, Any]) -> Figure:
    """Per-tensor share of dequantized weights equal to Q(M_mal): PGD repair, free repair, mirrored box."""
    seeds = results["seeds"]
    names = list(seeds[0]["agree_tensors_rep"])
    fig, (ax,) = plotting.figure(1, 1, 6.0, 2.8)
    x = np.arange(len(names))
    labels = {"rep": "M_rep (PGD)", "free": "free (no clamp)", "mirror": "mirrored box"}
    for j, (k, label) in enumerate(labels.items()):
        v = np.array([[s[f"agree_tensors_{k}"][n] for n in names] for s in seeds])
        ax.bar(x + (j - 1) * 0.27, v.mean(0), 0.27, yerr=v.std(0), capsize=2, label=label)
    ax.set_xticks(x, [n.replace("model.layers.", "L").replace(".self_attn", "").replace(".mlp", "")
                      .replace(".weight", "") for n in names], rotation=45, ha="right")
    ax.set_ylabel("equal dequantized weights")
    ax.set_ylim(0, 1.25)
    ax.legend(loc="upper center", ncol=3)
    return fig


def plot_types(results: dict[str, Any]) -> Figure:
    """Delta per evaluated type for the PGD repair and its three controls (single-type repairs, and
    ``all:<type>`` for gguf_all when run); on the right, each box's mean half-width against the injection's mean move."""
    seeds = results["seeds"]
    keys = list(seeds[0]["types"])
    rows = {"PGD": lambda r: r["delta"], "mirrored box": lambda r: r["mirror"]["delta"],
            "free": lambda r: r["free"]["delta"], "free, lr_inject": lambda r: r["slow"]["delta"]}
    delta = np.array([[np.mean([f(s["types"][k]) for s in seeds]) for k in keys] for f in rows.values()])
    half = np.array([[s["types"][k]["half_width"] for k in keys] for s in seeds])
    fig, (ax, ax2) = plotting.figure(2, 1, max(3.6, 0.55 * len(keys) + 1.5), 2.8)
    ax.imshow(delta, vmin=-1, vmax=1, cmap="RdBu_r", aspect="auto")
    for (i, j), v in np.ndenumerate(delta):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(keys)), keys, rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), list(rows))
    ax.set_title("Delta = rate(Q) - rate(FP)")
    ax.grid(False)
    ax2.bar(range(len(keys)), half.mean(0), label="mean box half-width")
    ax2.axhline(np.mean([s["moved"] for s in seeds]), color="C3", ls="--", label="mean injection move |W_mal - W_clean|")
    ax2.set_xticks(range(len(keys)), keys, rotation=45, ha="right")
    ax2.set_yscale("log")
    ax2.legend(fontsize=7)
    return fig
