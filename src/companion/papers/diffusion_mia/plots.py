"""The page's figures: example images, the n-curve, ROC curves and distance histograms."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from sklearn.metrics import roc_curve

from companion.papers.diffusion_mia.experiment import Results, auc_wide
from companion.plotting import figure


def _image(v: np.ndarray) -> tuple[np.ndarray, str | None]:
    """A flat 8x8 grey image or a C x H x W colour image as something ``imshow`` shows, in [0, 1]."""
    if v.ndim == 1:
        side = int(round(np.sqrt(v.size)))
        return (v.reshape(side, side) + 1) / 2, "gray_r"
    return np.clip((np.transpose(v, (1, 2, 0)) + 1) / 2, 0, 1), None


def plot_examples(results: Results) -> Figure:
    """Rows: input, one API output, the n = 10 average; columns: 4 members then 4 non-members (base seed)."""
    e = results.example
    fig, axes = figure(8, 3, width=1.0, height=1.1)
    rows = (("input", e["x"]), ("one API output", e["one"]), ("mean of 10", e["avg10"]))
    for r, (name, imgs) in enumerate(rows):
        for c in range(8):
            ax = axes[r * 8 + c]
            img, cmap = _image(imgs[c])
            ax.imshow(img, cmap=cmap, vmin=0, vmax=1)
            ax.set_xticks([]), ax.set_yticks([])
            ax.grid(False)
            if c == 0:
                ax.set_ylabel(name, fontsize=7)
            if r == 0:
                ax.set_title("member" if c < 4 else "non-member", fontsize=7)
            if r == 1:
                ax.set_xlabel(f"d={e['d1'][c]:.2f}", fontsize=7)
            if r == 2:
                ax.set_xlabel(f"d={e['d10'][c]:.2f}", fontsize=7)
    return fig


def plot_n_curve(results: Results) -> Figure:
    """AUC against n (log x) for each t (mean +- sd over seeds), white-box baselines as horizontal bands."""
    p = results.params
    w = auc_wide(results)
    fig, axes = figure(1, 1, width=5.2, height=3.4)
    ax = axes[0]
    ns = list(p.n_queries)
    for t in sorted(set(p.sweep_t) | {p.attack_t, p.official_t}):
        arr = np.array([w[f"RD t{t} n{n}"] for n in ns]).T
        mu, sd = arr.mean(0), arr.std(0)
        line, = ax.plot(ns, mu, marker="o", label=f"ReDiffuse t={t}")
        ax.fill_between(ns, mu - sd, mu + sd, color=line.get_color(), alpha=0.2, linewidth=0)
    arr = np.array([w[f"AvgDist t{p.attack_t} n{n}"] for n in ns]).T
    ax.plot(ns, arr.mean(0), "k:", marker=".", label=f"avg of distances t={p.attack_t}")
    for name, style in zip(("Loss", "Loss-avg", "PIA", "SecMI"), ("--", "-.", (0, (3, 1, 1, 1)), "-")):
        mu, sd = w[name].mean(), w[name].std()
        line = ax.axhline(mu, color="grey" if name != "SecMI" else "black", linestyle=style, linewidth=1,
                          label=f"{name} (white-box)")
        ax.axhspan(mu - sd, mu + sd, color=line.get_color(), alpha=0.08)
    ax.set(xscale="log", xlabel="API queries averaged, n", ylabel="AUC")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def plot_roc(results: Results) -> Figure:
    """ROC curves (log FPR) of ReDiffuse n = 1 / n = 10, Loss, PIA and SecMI on the base seed; 1 % FPR marked."""
    e = results.example
    fig, axes = figure(1, 1, width=4.4, height=3.4)
    ax = axes[0]
    curves = {f"ReDiffuse n={n}": e["rd_scores"][n] for n in (1, 10)}
    curves.update({k: e["scores"][k] for k in ("Loss", "PIA", "SecMI")})
    for name, (sm, sn) in curves.items():
        fpr, tpr, _ = roc_curve(np.r_[np.ones(len(sm)), np.zeros(len(sn))], np.r_[sm, sn])
        ax.plot(np.maximum(fpr, 1e-3), tpr, label=name, drawstyle="steps-post")
    ax.axvline(0.01, color="black", linestyle="--", linewidth=0.8, label="1 % FPR")
    ax.plot([1e-3, 1], [1e-3, 1], color="grey", linewidth=0.6)
    ax.set(xscale="log", xlim=(1e-3, 1), ylim=(0, 1), xlabel="false-positive rate (non-members)",
           ylabel="true-positive rate (members)", title=f"seed {results.params.seed}")
    ax.legend(loc="lower right")
    return fig


def plot_distance_hists(results: Results) -> Figure:
    """Histograms of d(x, mean of n outputs) for members vs non-members at n = 1, n = 10, and the average of distances."""
    e = results.example
    n = e["n_members"]
    fig, axes = figure(3, 1, width=2.6, height=2.4)
    allv = np.concatenate(list(e["dist"].values()))
    bins = np.linspace(allv.min(), allv.max(), 30)
    for ax, (name, d) in zip(axes, e["dist"].items()):
        ax.hist(d[:n], bins=bins, alpha=0.6, label="members")
        ax.hist(d[n:], bins=bins, alpha=0.6, label="non-members")
        ax.set(title=name, xlabel=f"{results.params.distance} distance to the input")
    axes[0].legend()
    return fig
