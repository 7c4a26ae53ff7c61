"""Figures of the page: excess loss against n and against epsilon (with the untrained model's level),
the noise-only variance, and training curves."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure

from companion import plotting
from companion.papers.dp_fl_partial.experiment import Results
from companion.papers.dp_fl_partial.simulator import log_slope


def _mean_se(v: np.ndarray) -> tuple[float, float]:
    """Mean and standard error."""
    return float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v)))


def _plain_log_ticks(ax, values: np.ndarray) -> None:
    """Label a log x-axis only at ``values``, in plain numbers."""
    from matplotlib.ticker import NullFormatter

    ax.set_xticks(values, [f"{v:g}" for v in values])
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_excess_vs_n(res: Results) -> Figure:
    """Excess loss vs n (log-log) at eps_claim with +-1 SE bars, fitted slopes, guide slopes -1, -1/2 and
    the untrained model's F(0) - F*."""
    p = res.params
    fig, (ax,) = plotting.figure(width=6.8, height=3.6)
    n = np.array(p.n_list, dtype=float)
    for k in p.methods:
        ms = np.array([_mean_se(res.excess[(k, int(v), p.eps_claim)]) for v in n])
        ax.errorbar(n, ms[:, 0], yerr=ms[:, 1], marker="o", capsize=2,
                    label=f"{k} (slope {log_slope(n, ms[:, 0]):.2f})")
    ax.axhline(res.trivial, color="k", lw=1.2, label="untrained x = 0: F(0) - F*")
    ref = float(np.mean(res.excess[("nc", p.n_list[0], p.eps_claim)]))
    for s, ls in ((-1.0, ":"), (-0.5, "--")):
        ax.plot(n, ref * (n / n[0]) ** s, color="grey", ls=ls, lw=1, label=f"guide slope {s:g}")
    ax.set(xscale="log", yscale="log", xlabel="samples per machine n", ylabel="excess loss F(x) - F*",
           title=f"eps = {p.eps_claim:g}, M = {p.M}, m = {p.m}")
    _plain_log_ticks(ax, n)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))  # outside: the curves fill the axes
    return fig


def plot_excess_vs_eps(res: Results) -> Figure:
    """Excess vs eps at n near 1000 when several eps ran, otherwise a bar chart of the methods at n_claim;
    the untrained model's F(0) - F* as a black line."""
    p = res.params
    fig, (ax,) = plotting.figure(width=5.0, height=3.2)
    if len(p.eps_list) > 1:
        for k in p.methods:
            ms = np.array([_mean_se(res.excess[(k, res.curve_n, e)]) for e in p.eps_list])
            ax.errorbar(p.eps_list, ms[:, 0], yerr=ms[:, 1], marker="o", capsize=2, label=k)
        ax.set(xscale="log", yscale="log", xlabel="epsilon", title=f"n = {res.curve_n}")
        _plain_log_ticks(ax, np.array(p.eps_list))
    else:
        ms = np.array([_mean_se(res.excess[(k, p.n_claim, p.eps_claim)]) for k in p.methods])
        ax.bar(range(len(p.methods)), ms[:, 0], yerr=ms[:, 1], capsize=3,
               color=[f"C{i}" for i in range(len(p.methods))])
        ax.set_xticks(range(len(p.methods)), p.methods)
        ax.set(yscale="log", title=f"n = {p.n_claim}, eps = {p.eps_claim:g}")
    ax.axhline(res.trivial, color="k", lw=1.2, label="untrained x = 0")
    ax.set_ylabel("excess loss")
    ax.legend(fontsize=7)
    return fig


def plot_noise_variance(res: Results) -> Figure:
    """Variance of the accumulated noise in A_t vs round (sigma = 1): NC flat, naive linear, with theory."""
    p = res.params
    fig, (ax,) = plotting.figure(width=5.0, height=3.2)
    t = np.arange(1, len(res.var_nc) + 1)
    ax.plot(t, res.var_nc, label="NC (measured)")
    ax.plot(t, res.var_naive, label="naive (measured)")
    ax.plot(t, np.full_like(t, p.M / p.m**2, dtype=float), "k:", lw=1, label="M / m^2")
    ax.plot(t, t / p.m, "k--", lw=1, label="t / m")
    ax.set(xscale="log", yscale="log", xlabel="round t", ylabel="per-coordinate variance",
           title=f"noise only, {p.noise_mc_draws} draws")
    ax.legend(fontsize=7)
    return fig


def plot_training_curves(res: Results) -> Figure:
    """F(x_t) - F* vs round for the first evaluation seed of each method (tuned c) at n near 1000, and the
    untrained model's level."""
    fig, (ax,) = plotting.figure(width=5.0, height=3.2)
    for k, curve in res.curves.items():
        ax.plot(res.curve_rounds, np.maximum(curve, 1e-7), label=k)
    ax.axhline(res.trivial, color="k", lw=1.2, label="untrained x = 0")
    ax.set(xscale="log", yscale="log", xlabel="round t", ylabel="excess loss of output",
           title=f"n = {res.curve_n}, eps = {res.params.eps_claim:g}, seed {res.params.seed}")
    ax.legend(fontsize=7)
    return fig
