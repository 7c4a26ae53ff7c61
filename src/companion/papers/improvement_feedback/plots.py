"""Figures of the page: learnability per case, the indistinguishable pairs, ratio against n and against t."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from companion import plotting
from companion.papers.improvement_feedback import rankings as rk
from companion.papers.improvement_feedback.experiment import (
    CONSTANT,
    RULES,
    Results,
    methods,
)
from companion.papers.improvement_feedback.theory import (
    EXACT_TOL,
    borda,
    feedback_operator,
    score_matrix,
)


def plot_theory(res: Results) -> Figure:
    """Borda's distance from the learnable subspace per case, and s*_t against Borda."""
    fig, (ax1, ax2) = plotting.figure(2, 1, width=4.2, height=3.0)
    th = res.theory
    for kind, g in th.groupby("kind", sort=False):
        labels = [f"{m},{t}" for m, t in zip(g["m"], g["t"])]
        ax1.plot(labels, np.maximum(g["res borda"], 1e-16), "o-", label=f"Borda residual ({kind})")
    ax1.axhline(EXACT_TOL, color="k", lw=0.8, ls=":")
    ax1.set_yscale("log")
    ax1.set(xlabel="m, t", ylabel="distance of Borda from L_t", title="Borda learnable iff residual ~ 0")
    ax1.tick_params(axis="x", labelrotation=90)
    ax1.legend()
    m = max(res.s_star_curves) + 1
    for t, s in res.s_star_curves.items():
        ax2.plot(np.arange(1, m + 1), s / s.max(), "o-", label=f"s*_{t}")
    ax2.plot(np.arange(1, m + 1), borda(m) / (m - 1), "k--", label="Borda")
    ax2.set(xlabel="position", ylabel="normalised score", title=f"s*_t (uniform), m = {m}")
    ax2.legend()
    return fig


def plot_pairs(res: Results) -> Figure:
    """The Borda pair: scores under pi and pi' and their (identical) feedback heatmaps; the Condorcet pair margins."""
    p = res.params
    perms = rk.all_rankings(p.lp_m)
    pair = res.pairs[("borda", p.lp_m, p.lp_t_borda)]
    cpair = res.pairs[("condorcet", p.lp_m, p.lp_t_borda)]
    A = feedback_operator(perms, p.lp_t_borda, "unif")
    scores = score_matrix(borda(p.lp_m) / (p.lp_m - 1), perms)
    fig, axes = plotting.figure(5, 1, width=2.6, height=2.5)
    x = np.arange(p.lp_m)
    axes[0].bar(x - 0.2, scores @ pair.pi, 0.4, label="pi")
    axes[0].bar(x + 0.2, scores @ pair.pi2, 0.4, label="pi'")
    axes[0].set(xlabel="candidate", title=f"normalised Borda (t={p.lp_t_borda})")
    axes[0].legend()
    for ax, prof, name in ((axes[1], pair.pi, "pi"), (axes[2], pair.pi2, "pi'")):
        ax.imshow((A @ prof).reshape(p.lp_m, p.lp_m), cmap="viridis")
        ax.set(title=f"feedback of {name}", xlabel="answered", ylabel="shown")
    pos = rk.positions(perms)
    for ax, prof, name in ((axes[3], cpair.pi, "pi"), (axes[4], cpair.pi2, "pi'")):
        margin = np.einsum("k,kab->ab", prof, np.sign(pos[:, None, :] - pos[:, :, None]).astype(float))
        ax.imshow(margin, cmap="RdBu", vmin=-1, vmax=1)
        ax.set(title=f"Condorcet pair: margins {name}", xlabel="b", ylabel="a")
    return fig


def _band(ax, x, r: np.ndarray, label: str, ls: str = "-") -> None:
    """Mean over the last axis with a 95% normal band, one point per x."""
    mean, se = r.mean(axis=1), r.std(axis=1, ddof=1) / np.sqrt(r.shape[1])
    line, = ax.plot(x, mean, "o", ls=ls, ms=3, label=label)
    ax.fill_between(x, mean - 1.96 * se, mean + 1.96 * se, color=line.get_color(), alpha=0.2, lw=0)


def plot_ratios(res: Results) -> Figure:
    """Approximation ratio vs n (Borda top, Copeland bottom) per distribution, 95% bands over seeds x reps;
    the ablations of the uniform-weight estimator dashed."""
    p = res.params
    dists = p.distributions
    shown = [m for m in methods(p) if m != CONSTANT]
    fig, axes = plotting.figure(len(dists), 2, width=3.2, height=2.6)
    for ri, rule in enumerate(("borda", "copeland")):
        for di, dist in enumerate(dists):
            ax = axes[ri * len(dists) + di]
            for meth in shown:
                r = res.ratios[:, di, :, methods(p).index(meth), RULES.index(rule)]
                label = meth if meth in ("pairwise", *p.feedback_kinds, "unif") else f"unif, {meth}"
                _band(ax, p.n_list, np.moveaxis(r, 1, 0).reshape(len(p.n_list), -1), label,
                      "-" if label == meth else "--")
            ax.set(title=f"{dist}: {rule}", xlabel="n voters", ylabel="ratio")
    axes[0].legend()
    return fig


def plot_sweep(res: Results) -> Figure:
    """Borda approximation ratio vs window t at n = 500, 95% bands over sweep seeds x repetitions."""
    p = res.params
    fig, axes = plotting.figure(len(p.distributions), 1, width=3.2, height=2.6)
    kinds = [m for m in methods(p) if m == "pairwise" or m in (*p.feedback_kinds, "unif")]
    for di, dist in enumerate(p.distributions):
        if not res.sweep.size:
            axes[di].text(0.5, 0.5, "t_sweep is empty at this preset", ha="center", transform=axes[di].transAxes)
        for meth in kinds if res.sweep.size else ():
            r = res.sweep[:, di, :, methods(p).index(meth), RULES.index("borda")]
            _band(axes[di], p.t_sweep, r.transpose(1, 0, 2).reshape(len(p.t_sweep), -1), meth)
        axes[di].set(title=f"{dist}: Borda, n = 500", xlabel="t", ylabel="ratio")
    if res.sweep.size:
        axes[0].legend()
    return fig
