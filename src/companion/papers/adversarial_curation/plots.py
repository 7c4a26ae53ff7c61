"""The page's figures: Part A heat maps and trajectories, Part B densities, rewards and covariance signs,
and the grid against the sample loop."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from companion.papers.adversarial_curation import _has
from companion.plotting import figure, mean_sd_line

from . import ring
from .experiment import ANCHOR_KDE_H, SIGN_MIN_STEP, Results, claim_budget, sign_agreement


def plot_threshold(results: Results) -> Figure:
    """Heat maps of the final mass near x* over phi x adversary, one panel per K (lam = inf)."""
    g = results.grid[(results.grid.lam == "inf")]
    g = g[g.phi.apply(lambda p: _has(results.params.phi_grid, p))]
    ks = list(results.params.K_list)
    fig, axes = figure(len(ks), 1, width=3.8, height=2.2)
    for ax, k in zip(axes, ks):
        tab = g[g.K == k].pivot_table(index="adversary", columns="phi", values="near_T")
        im = ax.imshow(tab.values, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(tab.columns)), [f"{p:g}" for p in tab.columns], fontsize=7)
        ax.set_yticks(range(len(tab.index)), tab.index)
        ax.set_xlabel(r"malicious fraction $\phi$")
        ax.set_title(f"K = {k}: mass near x* after {results.params.T_exact} rounds")
        ax.grid(False)
    fig.colorbar(im, ax=axes[-1], shrink=0.8)
    return fig


def plot_trajectories(results: Results, phis: tuple[float, ...] = (0.1, 0.3, 0.5, 0.6, 0.8)) -> Figure:
    """E_{p_t}[e^r] against t for the anti adversary (lam = inf), lines, with the covariance
    prediction of each step as markers; one panel per K."""
    ks = list(results.params.K_list)
    fig, axes = figure(len(ks), 1, width=3.4, height=2.8)
    for ax, k in zip(axes, ks):
        for phi in phis:
            tr = results.traj[("anti", k, "inf", next(p for p in results.params.phi_grid if _has((phi,), p)))]
            line, = ax.plot(tr.exp_reward, label=rf"$\phi$ = {phi:g}")
            ax.plot(np.arange(len(tr.predicted)), tr.predicted, "o", ms=3, mfc="none", color=line.get_color())
        ax.set_xlabel("round t")
        ax.set_title(f"K = {k}")
    axes[0].set_ylabel(r"$E_{p_t}[e^{r}]$ (lines), covariance prediction (o)")
    axes[0].legend()
    return fig


def plot_densities(results: Results, attacks_shown: tuple[str, ...] = ("none", "random", "gap", "influence")) -> Figure:
    """2-D histograms of the first seed's samples at rounds 0, T/2 and T, one row per attack (b = 0.25)."""
    b = claim_budget(results.params)
    keys = [(a, 0.0 if a == "none" else b) for a in attacks_shown if (a, 0.0 if a == "none" else b) in results.snapshots]
    rounds = sorted(results.snapshots[keys[0]])
    fig, axes = figure(len(rounds), len(keys), width=2.0, height=2.0)
    edges = np.linspace(-3.5, 3.5, 57)
    for row, key in enumerate(keys):
        for col, t in enumerate(rounds):
            ax = axes[row * len(rounds) + col]
            x = results.snapshots[key][t]
            ax.hist2d(x[:, 0], x[:, 1], bins=[edges, edges], cmap="magma", density=True)
            ax.plot(*ring.X_STAR, "c+", ms=8)
            ax.set_xticks([]), ax.set_yticks([])
            ax.grid(False)
            if row == 0:
                ax.set_title(f"round {t}")
            if col == 0:
                ax.set_ylabel("clean" if key[0] == "none" else f"{key[0]} (b = {key[1]:g})")
    return fig


def plot_loop_rewards(results: Results) -> Figure:
    """Mean genuine reward E[r] against round per attack (mean +- sd over seeds), one panel per budget."""
    lp = results.loop[results.loop.curation == "tournament"]
    fig, axes = figure(len(results.params.budgets), 1, width=3.2, height=2.6)
    rounds = np.arange(results.params.T_loop + 1)
    for ax, b in zip(axes, results.params.budgets):
        for attack in results.params.attacks:
            sel = lp[(lp.attack == attack) & (lp.budget == (0.0 if attack == "none" else b))]
            runs = sel.pivot(index="seed", columns="round", values="reward").values
            mean_sd_line(ax, rounds, runs, "clean" if attack == "none" else attack)
        ax.set_title(f"budget b = {b:g}")
        ax.set_xlabel("round")
    axes[0].set_ylabel("E[r] of the samples")
    axes[0].legend()
    return fig


def plot_cov_sign(results: Results) -> Figure:
    """Cov_samples(e^r, e^r_hat) against the next change of mean e^r, every round, attack and seed."""
    sa = sign_agreement(results)
    fig, (ax,) = figure(1, 1, width=4.6, height=3.4)
    for (curation, attack), s in sa.groupby(["curation", "attack"]):
        name = "clean" if attack == "none" else attack
        ax.scatter(s["cov"], s["step"], s=8, alpha=0.6, marker="o" if curation == "tournament" else "x",
                   label=name if curation == "tournament" else f"{name} (official curation)")
    ax.axhline(0, color="k", lw=0.6)
    ax.axvline(0, color="k", lw=0.6)
    ax.axhspan(-SIGN_MIN_STEP, SIGN_MIN_STEP, color="grey", alpha=0.2, lw=0)
    ax.set_xlabel(r"Cov$_{samples}(e^{r}, e^{\hat r_t})$")
    ax.set_ylabel(r"mean $e^r$ at t+1 minus at t")
    ax.legend()
    return fig


def plot_grid_vs_samples(results: Results) -> Figure:
    """E[r] per round: the K = 2 grid dynamics and the sample loop curated with the true reward."""
    anc = results.anchor
    fig, (ax,) = figure(1, 1, width=4.0, height=2.8)
    grid_r = anc[anc.source == "grid"]
    runs = anc[anc.source == "samples"].pivot(index="seed", columns="round", values="reward").values
    mean_sd_line(ax, grid_r["round"].values, runs, f"sample loop (N = {results.params.anchor_n}, KDE h = {ANCHOR_KDE_H})")
    ax.plot(grid_r["round"], grid_r["reward"], "ko", ms=4, mfc="none", label=f"grid, G = {results.params.grid_G}")
    ax.set_xlabel("round")
    ax.set_ylabel("E[r]")
    ax.legend()
    return fig
