"""Figures of the win-rate page, one per experiment."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from companion.papers.win_rate.experiment import Results
from companion.plotting import figure


def plot_sft(results: Results) -> Figure:
    """Left: mean WR per tau of p_ref, SFT (closed form, trained), iterated SFT and the WRO limit.
    Right: SFT's gain over 1/2 against 2 Var_{p_ref}[w], one point per draw, on the diagonal."""
    e1, rounds = results.e1, results.params.sft_rounds
    fig, axes = figure(2, 1, width=4.2, height=3.0)
    taus = sorted(e1["tau"].unique())
    cols = [("p_ref", None), ("SFT (closed form)", "closed"), ("SFT (trained)", "trained"),
            *[(f"iterated, round {k}", f"round{k}") for k in range(2, rounds + 1)], ("WRO limit max w", "limit")]
    width = 0.85 / len(cols)
    for i, (label, col) in enumerate(cols):
        vals = [0.5 if col is None else e1.loc[e1["tau"] == t, col].mean() for t in taus]
        axes[0].bar(np.arange(len(taus)) + (i - len(cols) / 2 + 0.5) * width, vals, width, label=label)
    axes[0].set_xticks(np.arange(len(taus)), [f"tau={t:g}" for t in taus])
    axes[0].set(ylim=(0.45, 0.85), ylabel="win rate against p_ref")
    axes[0].legend(fontsize=6, ncols=2, loc="upper left")
    for t in taus:
        sub = e1[e1["tau"] == t]
        axes[1].scatter(sub["two_var"], sub["closed"] - 0.5, s=6, alpha=0.6, label=f"tau={t:g}")
    lim = float(e1["two_var"].max()) * 1.05
    axes[1].plot([0, lim], [0, lim], "k--", linewidth=0.8, label="y = x")
    axes[1].set(xlabel="2 Var_{p_ref}[w]", ylabel="WR(p_SFT) - 1/2")
    axes[1].legend(fontsize=7)
    return fig


def plot_shell(results: Results) -> Figure:
    """Left: population DPO loss vs WR on the KL shell (first seed). Middle: WRO objective vs WR.
    Right: per seed, the smallest discordance over h (id, log, logit) of DPO and of RLHF (the control)
    against the shell radius kappa (BT, claims' beta)."""
    s, p = results.shell, results.params
    fig, axes = figure(3, 1, width=3.3, height=2.9)
    axes[0].scatter(s.wr, s.dpo_loss, s=5, alpha=0.6)
    axes[0].set(xlabel="win rate against p_ref", ylabel="population DPO loss",
                title=f"KL = {p.kappa_shell:g}, beta = {p.beta_dpo:g}")
    axes[1].scatter(s.wr, s.wro_objective, s=5, alpha=0.6, color="C1")
    axes[1].set(xlabel="win rate against p_ref", ylabel="WRO objective WR - beta KL")
    t = results.e2[(results.e2["beta"] == p.beta_dpo) & (results.e2["gamma"] == 0.0)]
    axes[2].scatter(t["kappa"], t["dpo_every_h"], s=10, alpha=0.7, label="DPO")
    axes[2].scatter(t["kappa"], t["rlhf_every_h"], s=10, alpha=0.7, marker="x", label="RLHF (control)")
    axes[2].axhline(0.05, color="black", linestyle="--", linewidth=0.8, label="claim bar 0.05")
    axes[2].set(xscale="log", xlabel="shell radius kappa", ylabel="smallest discordance over h")
    axes[2].legend(fontsize=7)
    return fig


def plot_dpo_dynamics(results: Results) -> Figure:
    """DPO train loss (left axis, solid) and true WR (right axis, dashed) along training for four seeds:
    the two with the lowest Spearman(-loss, WR) and the two with the highest; dotted: true WR of WRO (h = id)
    trained on the same pairs (same seeds)."""
    c, w = results.e3["dpo"], results.e3["wro"]
    order = np.argsort(c.spearman)
    picks = [*order[:2], *order[-2:]]
    fig, axes = figure(4, 1, width=2.6, height=2.6)
    for ax, i in zip(axes, picks):
        ax.plot(c.steps, c.loss[i], color="C0")
        ax.set(xlabel="DPO step", title=f"Spearman {c.spearman[i]:.2f}")
        twin = ax.twinx()
        twin.plot(c.steps, c.wr[i], color="C3", linestyle="--")
        twin.plot(w.steps, w.wr[i], color="C2", linestyle=":")
        twin.tick_params(axis="y", colors="C3")
        twin.grid(False)
    axes[0].set_ylabel("train loss (solid)")
    twin.set_ylabel("true WR: DPO (dashed), WRO (dotted)", color="C3")
    return fig


def plot_success(results: Results) -> Figure:
    """Left: actual WR vs optimisation success, coloured by h, marker by beta, with the R^2 in the legend.
    Right: expected (reference optimum) vs actual WR per (h, beta) cell: the analogue of the paper's Fig. 2."""
    e4, r2 = results.e4, results.e4_r2
    fig, axes = figure(2, 1, width=4.2, height=3.2)
    markers = "osD^vP*"
    hs, betas = list(dict.fromkeys(e4["h"])), sorted(e4["beta"].unique())
    for i, h in enumerate(hs):
        for j, b in enumerate(betas):
            sub = e4[(e4["h"] == h) & (e4["beta"] == b)]
            axes[0].scatter(sub["success"], sub["actual_wr"], s=6, alpha=0.5, color=f"C{i}",
                            marker=markers[j % len(markers)], label=f"h={h}" if j == 0 else None)
    axes[0].plot([], [], " ", label=f"R2 success {r2['success'].mean():.2f}")
    axes[0].plot([], [], " ", label=f"R2 one-hot(h, beta) {r2['onehot'].mean():.2f}")
    axes[0].set(xlabel="optimisation success s", ylabel="actual win rate")
    axes[0].legend(fontsize=7)
    cells = e4.groupby(["h", "beta"])[["expected_wr", "actual_wr"]].mean().reset_index()
    for i, h in enumerate(hs):
        sub = cells[cells["h"] == h]
        axes[1].scatter(sub["expected_wr"], sub["actual_wr"], color=f"C{i}", label=f"h={h}")
    lo = float(min(cells["actual_wr"].min(), 0.5))
    hi = float(cells["expected_wr"].max())
    axes[1].plot([lo, hi], [lo, hi], "k--", linewidth=0.8, label="y = x")
    axes[1].set(xlabel="expected WR (reference optimum)", ylabel="actual WR (mean over budgets)")
    axes[1].legend(fontsize=7)
    return fig


def plot_nlhf(results: Results) -> Figure:
    """Intransitive preferences (E5). Left: WR against p_ref of DPO's optimum (best BT fit), WRO (h = id) and
    NLHF by beta (equal beta is not equal KL). Middle: the same WR against each optimum's KL to p_ref, one point
    per beta, the comparison at equal regularisation cost. Right: how often NLHF's optimum beats WRO's."""
    fig, axes = figure(3, 1, width=3.3, height=2.8)
    if results.e5 is None:
        for ax in axes:
            ax.text(0.5, 0.5, "E5 runs with pref_models = bt, intransitive\n(the full preset)",
                    ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
        return fig
    m = results.e5.groupby("beta").mean(numeric_only=True)
    for arm, label in (("dpo", "DPO optimum (BT fit)"), ("wro", "WRO, anchor p_ref"), ("nlhf", "NLHF (self-play)")):
        axes[0].plot(m.index, m[f"wr_{arm}"], marker="o", label=label)
        axes[1].plot(m[f"kl_{arm}"], m[f"wr_{arm}"], marker="o", label=label)
    axes[0].set(xscale="log", xlabel="beta", ylabel="win rate against p_ref")
    axes[1].set(xscale="log", xlabel="KL(optimum || p_ref)", ylabel="win rate against p_ref")
    axes[0].legend(fontsize=7)
    axes[2].plot(m.index, m["nlhf_vs_wro"], marker="o", color="C2")
    axes[2].axhline(0.5, color="black", linestyle="--", linewidth=0.8)
    axes[2].set(xscale="log", xlabel="beta", ylabel="P(NLHF beats WRO optimum)")
    return fig
