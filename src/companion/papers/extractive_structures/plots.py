"""The figures of the extractive-structures page."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from companion import plotting
from companion.papers.extractive_structures import ORDERS, CONTRAST_ORDERS, SCORE_KINDS
from companion.papers.extractive_structures.experiment import Results, logged_epochs

def plot_ordering(results: Results) -> Figure:
    """Fact (dashed) and implication (solid) ranks per epoch, one colour per order (facts-first,
    implications-first, forgetting-matched facts-first, retention-matched implications-first, joint): Stage A
    (train names; every 3rd epoch and each phase's last), Stage B (test names)."""
    fig, (ax_a, ax_b) = plotting.figure(2, 1, width=4.2, height=3.0)
    if not any(r.traj_a for r in results.per_seed):
        for ax in (ax_a, ax_b):
            ax.text(0.5, 0.5, "per-epoch ranks are logged by the toy only\n(see the OCR rank per seed)",
                    ha="center", transform=ax.transAxes)
        return fig
    per_phase = len(logged_epochs(results.params.epochs_phase, 1))
    for i, order in enumerate(ORDERS):
        colour = f"C{i}"
        for ax, key in ((ax_a, "traj_a"), (ax_b, "traj_b")):
            runs = np.stack([getattr(r, key)[order] for r in results.per_seed if order in r.traj_a])
            x = (logged_epochs(results.params.epochs_phase, runs.shape[1] // per_phase) if key == "traj_a"
                 else np.arange(runs.shape[1]))
            for j, style in ((0, "--"), (1, "-")):
                mean, sd = runs[..., j].mean(0), runs[..., j].std(0)
                ax.plot(x, mean, style, color=colour, label=f"{order} {'fact' if j == 0 else 'impl'}")
                ax.fill_between(x, mean - sd, mean + sd, color=colour, alpha=0.12, linewidth=0)
    for ax, title in ((ax_a, "Stage A: training names"), (ax_b, "Stage B: new facts only (test names)")):
        ax.axhline(results.chance, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="epoch", ylabel="mean rank (0 = best)", title=title)
    ax_b.legend(ncols=2, fontsize=6)
    return fig


def plot_grafting(results: Results) -> Figure:
    """Mean ± s.d. ranks of Impl(F'), Impl(F) and F' for W_F', the graft and the control graft."""
    fig, (ax,) = plotting.figure(1, 1, width=5.0, height=3.0)
    labels = ("W_F'", "graft", "control")
    names = ("W_F'", "W_F' + D_{F,Impl} (graft)", "W_F' + D_Impl (control)")
    cols = ("Impl(F')", "Impl(F)", "F'")
    vals = np.array([[r.graft[k] for k in labels] for r in results.per_seed if r.graft])
    if vals.size == 0:
        ax.text(0.5, 0.5, "run_grafting=False", ha="center", transform=ax.transAxes)
        return fig
    width = 0.27
    for j, col in enumerate(cols):
        ax.bar(np.arange(3) + (j - 1) * width, vals[..., j].mean(0), width, yerr=vals[..., j].std(0), label=col)
    ax.axhline(results.chance, color="grey", lw=0.8, ls=":")
    ax.set_xticks(np.arange(3), names, fontsize=8)
    ax.set(ylabel="mean rank (0 = best)")
    ax.legend(title="evaluated on")
    return fig


def plot_seeds(results: Results) -> Figure:
    """OCR rank of every seed and order (all five orders on every seed), with frozen and (if run) trainable name
    embeddings (facts-first and implications-first only)."""
    toy = "names frozen" if results.params.freeze_name_embeddings else "names trainable"
    panels = [("ocr", "pretrained LM" if results.on_lm else toy, ORDERS)]
    if any(r.trainable_ocr for r in results.per_seed):
        panels.append(("trainable_ocr", "names trainable (contrast)", CONTRAST_ORDERS))
    fig, axes = plotting.figure(len(panels), 1, width=3.4, height=2.8)
    for ax, (key, title, orders) in zip(axes, panels):
        for i, order in enumerate(orders):
            y = np.array([getattr(r, key)[order] for r in results.per_seed if order in getattr(r, key)])
            ax.scatter(np.full(len(y), i) + np.linspace(-0.15, 0.15, len(y)), y, color=f"C{i}", s=18)
            ax.hlines(y.mean(), i - 0.25, i + 0.25, color="k", lw=1.2)
        ax.axhline(results.chance, color="grey", lw=0.8, ls=":")
        ax.set_xticks(range(len(orders)), [o.replace("_", " ").replace("first ", "first\n") for o in orders],
                      fontsize=7)
        ax.set(title=title, ylabel="OCR rank on test names", ylim=(-0.5, 2 * results.chance + 0.5))
    return fig


def plot_scores(results: Results) -> Figure:
    """Heatmaps of the three extractive scores over (token position) x (block, MLP or attention)."""
    fig, axes = plotting.figure(3, 1, width=2.6, height=2.6)
    if not results.per_seed[0].scores:
        axes[0].text(0.5, 0.5, "no scores (run_scores=False,\nor the paper preset)", ha="center",
                     transform=axes[0].transAxes)
        return fig
    p = results.params
    rows = [f"L{l} {kind}" for l in range(p.n_layer) for kind in ("attn", "mlp")]
    for ax, kind in zip(axes, SCORE_KINDS):
        s = np.mean([r.scores[kind] for r in results.per_seed], axis=0).reshape(3, p.n_layer, 1 + p.n_head)
        grid = np.stack([s[:, :, 1:].sum(-1), s[:, :, 0]], axis=-1).reshape(3, -1).T
        lim = np.abs(grid).max() or 1.0
        im = ax.imshow(grid, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
        ax.set_xticks(range(3), ["BOS", "name", "zong"])
        ax.set_yticks(range(len(rows)), rows)
        ax.set_title(kind)
        ax.grid(False)
        fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


