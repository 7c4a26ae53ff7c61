"""The figures of the ERASE reproduction (each takes the experiment's ``Results``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from companion import plotting
from companion.papers.erase_unlearning.experiment import DISTR_ARMS, Results

def plot_accuracy(results: Results) -> Figure:
    """Test accuracy against k for the ICL methods (mean +- s.d.), FT and SISA as horizontal lines."""
    fig, (ax,) = plotting.figure(width=5.0, height=3.2)
    ks = list(results.params.k_grid)
    for name in ("ERASE", "random-k", "per-class ERASE"):
        plotting.mean_sd_line(ax, ks, [r.acc_k[name] for r in results.per_seed], name)
    for name, style in (("FT", "--"), ("SISA", ":")):
        ax.axhline(np.mean([r.acc[name] for r in results.per_seed]), color="grey", ls=style, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("in-context examples k")
    ax.set_ylabel("test accuracy")
    ax.legend()
    return fig


def plot_costs(results: Results) -> Figure:
    """Per-request cost on log axes: counted FLOPs and wall seconds, by method and ERASE path."""
    rows = []
    for r in results.per_seed:
        for d in r.deletions["ERASE"]:
            rows.append(("ERASE " + ("recluster" if d.path.startswith("recluster") else "certified"), d.flops, d.seconds))
        rows += [("random-k", d.flops, d.seconds) for d in r.deletions["random-k"]]
        rows += [("SISA", f, s) for f, s in zip(r.sisa_flops, r.sisa_seconds)]
        rows += [("FT retrain", r.ft_flops, s) for s in r.ft_seconds]
    df = pd.DataFrame(rows, columns=["method", "flops", "seconds"])
    order = [m for m in ("ERASE certified", "ERASE recluster", "random-k", "SISA", "FT retrain") if m in set(df.method)]
    fig, axes = plotting.figure(ncols=2, width=4.2, height=3.2)
    import seaborn as sns

    for ax, col, label in zip(axes, ("flops", "seconds"), ("counted FLOPs per request", "wall seconds per request")):
        sns.stripplot(data=df, x="method", y=col, order=order, ax=ax, size=2.5, alpha=0.5, jitter=0.25,
                      log_scale=True)
        ax.set_xlabel("")
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=30)
    return fig


def plot_scaling(results: Results) -> Figure:
    """Certificate pass rate and mean ERASE FLOPs per deletion against n, with SISA's cost per deletion."""
    fig, axes = plotting.figure(ncols=2, width=4.2, height=3.2)
    sw = results.sweep
    for (eps, d), g in sw.groupby(["eps", "proj_dim"]):
        m = g.groupby("n").mean(numeric_only=True)
        label = f"eps={eps:g}, d'={d}"
        axes[0].plot(m.index, m["pass_rate"], marker="o", label=label)
        axes[1].plot(m.index, m["erase_mean_flops"], marker="o", label="ERASE " + label)
    s = sw.groupby("n")["sisa_mean_flops"].mean()
    axes[1].plot(s.index, s.values, "k--", label="SISA (per deletion)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("training points n")
    axes[0].set_ylabel("certificate pass rate")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("mean FLOPs per deletion")
    axes[0].legend()
    axes[1].legend(fontsize=7)
    return fig


def plot_holistic(results: Results) -> Figure:
    """Total FLOPs against deletion requests per query for ERASE + LLM and SISA fine-tuning, rho* marked."""
    h = results.holistic
    rho = np.logspace(-8, 1, 200)
    fig, (ax,) = plotting.figure(width=5.0, height=3.2)
    ax.plot(rho, h["icl"].total(rho, h["n_queries"]), label="ERASE + frozen LLM (k-shot prompts)")
    ax.plot(rho, h["sisa"].total(rho, h["n_queries"]), label=f"SISA fine-tuning (S={results.params.sisa_shards})")
    if 0 < h["rho_star"] < np.inf:
        ax.axvline(h["rho_star"], color="grey", ls=":", label=f"break-even rho* = {h['rho_star']:.2g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("unlearning requests per query  N_u / N_q")
    ax.set_ylabel(f"total FLOPs, N = {h['n_params']:.0e}, N_q = {h['n_queries']:.0e}")
    ax.legend()
    return fig




def plot_distribution(results: Results) -> Figure:
    """Per seed, the frequency of each ordered prompt (k = 2 demonstration ids in centroid order) after
    unlearning (race seeding, same randomness), under the fresh-refit and keep-seeds controls, and after
    textbook training on D minus x."""
    dist = results.distribution
    fig, axes = plotting.figure(ncols=len(dist), width=2.6, height=2.8)
    axes = np.atleast_1d(axes)
    for ax, dr in zip(axes, dist):
        keys = sorted(set().union(*(dr["counts"][a] for a in DISTR_ARMS)))
        width = 0.8 / len(DISTR_ARMS)
        for i, arm in enumerate(DISTR_ARMS):
            c = dr["counts"][arm]
            tot = sum(c.values())
            ax.bar(np.arange(len(keys)) + (i - (len(DISTR_ARMS) - 1) / 2) * width, [c.get(k, 0) / tot for k in keys], width, label=arm)
        ax.set_xticks(np.arange(len(keys)), [f"({k})" for k in keys], rotation=60, fontsize=7)
        ax.set_xlabel(f"ordered prompt (seed {dr['seed']}, x = {dr['x']})")
    axes[0].set_ylabel("frequency over draws")
    axes[0].legend(fontsize=7)
    return fig
