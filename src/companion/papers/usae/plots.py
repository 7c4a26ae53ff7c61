"""Figures of the USAE page: R² matrices, universality statistics, top-activating digits, CAM."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from companion.papers.usae import digits
from companion.papers.usae.experiment import MIN_FIRES, VARIANT_LABELS, Results
from companion.plotting import figure


def plot_r2_matrices(results: Results) -> Figure:
    """Cross-model R² (rows: encoder, columns: decoder), mean over seeds, one panel per variant."""
    variants = list(results.runs[0].variants)
    fig, axes = figure(len(variants), 1, 3.0, 2.8)
    short = [n.replace("_", "\n") for n in results.names]
    for ax, v in zip(axes, variants):
        mat = np.mean([r.variants[v].r2 for r in results.runs], axis=0)
        ax.imshow(mat, vmin=0, vmax=1, cmap="viridis")
        for (a, b), val in np.ndenumerate(mat):
            ax.text(b, a, f"{val:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if val < 0.5 else "black")
        ax.set(xticks=range(len(short)), yticks=range(len(short)), title=VARIANT_LABELS[v],
               xlabel="decoder (target model)", ylabel="encoder (source model)")
        ax.set_xticklabels(short, fontsize=7)
        ax.set_yticklabels(short, fontsize=7)
        ax.grid(False)
    return fig


def plot_universality(results: Results) -> Figure:
    """Left: firing entropy histogram per variant. Right: co-fire proportion against energy rank."""
    fig, (ax_h, ax_c) = figure(2, 1, 4.2, 3.0)
    bins = np.linspace(0, 1, 21)
    for v in results.runs[0].variants:
        fe = np.concatenate([r.variants[v].fe for r in results.runs])
        ax_h.hist(fe, bins=bins, histtype="step", density=True, label=VARIANT_LABELS[v], lw=1.5)
        prop = np.mean([r.variants[v].cofire.mean(0) for r in results.runs], axis=0)
        ax_c.plot(np.arange(1, len(prop) + 1), prop, label=VARIANT_LABELS[v], lw=1)
    ax_h.set(xlabel="firing entropy (1 = fires equally in every model)", ylabel="density",
             title=f"concepts with U >= {MIN_FIRES}, all seeds")
    ax_c.axvline(results.params.top_concepts + 0.5, color="grey", ls=":", lw=1)
    ax_c.set(xlabel="concept rank by energy", ylabel="co-fire proportion (mean over models)",
             xscale="log", title="co-firing by importance, mean over seeds")
    ax_h.legend(loc="upper left")
    return fig


def plot_top_images(results: Results) -> Figure:
    """For the first seed's highest-energy USAE concepts: each model's most activating held-out images."""
    run0 = results.runs[0]
    if results.setting != "digits":
        fig, (ax,) = figure(1, 1, 4.0, 1.0)
        ax.text(0.5, 0.5, "top-activating patches are not drawn for the vision backbones", ha="center")
        ax.set_axis_off()
        return fig
    n_c, n_m, n_s = run0.top_samples.shape
    fig, axes = figure(n_s, n_c * n_m, 0.62, 0.62)
    images = held_out_images()
    for c in range(n_c):
        for m in range(n_m):
            for s in range(n_s):
                ax = axes[(c * n_m + m) * n_s + s]
                ax.imshow(images[run0.top_samples[c, m, s]], cmap="Greys", vmin=0, vmax=1)
                ax.set(xticks=[], yticks=[])
                ax.grid(False)
                if s == 0:
                    ax.set_ylabel(f"c{run0.top_concepts[c]}\n{results.names[m]}", fontsize=6,
                                  rotation=0, ha="right", va="center")
    return fig


def held_out_images() -> np.ndarray:
    """The held-out images the top-activating figure indexes (the fixed digit split)."""
    return digits.split_digits()[2]


def plot_cam(results: Results) -> Figure:
    """CAM images of the first seed: one row per concept, one column per model."""
    run0 = results.runs[0]
    n_c, n_m = run0.cam.shape[:2]
    fig, axes = figure(n_m, n_c, 1.0, 1.0)
    for c in range(n_c):
        for m in range(n_m):
            ax = axes[c * n_m + m]
            ax.imshow(run0.cam[c, m], cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
            ax.set(xticks=[], yticks=[])
            ax.grid(False)
            if c == 0:
                ax.set_title(results.names[m], fontsize=7)
            if m == 0:
                ax.set_ylabel(f"concept {run0.cam_concepts[c]}", fontsize=6)
    return fig
