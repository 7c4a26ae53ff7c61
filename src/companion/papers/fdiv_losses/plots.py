"""The page's figures: the operator gallery, the bisection's convergence, digits accuracy, the LM curves."""

from __future__ import annotations

import numpy as np
import torch
from matplotlib.figure import Figure

from companion.papers.fdiv_losses import SPARSITY_BAR
from companion.papers.fdiv_losses.experiment import Results
from companion.papers.fdiv_losses.fdivergence import REGISTRY, softargmax
from companion.plotting import figure


def plot_gallery() -> Figure:
    """p*_1 of θ = (t, 0, -t) against t for dense and sparse f-softargmax operators."""
    t = torch.linspace(-3, 3, 301, dtype=torch.float64)
    theta = torch.stack([t, torch.zeros_like(t), -t], -1)
    fig, (ax,) = figure(width=5.0, height=3.2)
    for name in ("kl", "js", "hellinger", "chi2", "alpha1.5", "alpha2"):
        ax.plot(t, softargmax(REGISTRY[name], theta, None, 60)[:, 0], label=name)
    ax.set(xlabel="t   (θ = (t, 0, −t))", ylabel="p*₁", title="f-softargmax, q = 1")
    ax.legend(ncols=2)
    return fig


def plot_convergence(res: Results) -> Figure:
    """Max error to the T = 80 solution against T, per f, with the 2^-T reference."""
    iters = list(range(2, 41, 2))
    fig, (ax,) = figure(width=5.0, height=3.2)
    for name, errors in res.convergence.items():
        ax.semilogy(iters, np.maximum(errors, 1e-17), marker=".", label=name)
    ax.semilogy(iters, [2.0**-t for t in iters], "k--", linewidth=1, label="2^-T")
    ax.set(xlabel="bisection steps T", ylabel="max |p*_T − p*_80|", title="Bisection convergence (float64)")
    ax.legend(ncols=2)
    return fig


def plot_digits(res: Results) -> Figure:
    """Test accuracy per loss on digits, mean ± s.d. over seeds; dashed line at KL."""
    losses = list(res.clf_acc)
    means = [100 * np.mean(res.clf_acc[l]) for l in losses]
    sds = [100 * np.std(res.clf_acc[l]) for l in losses]
    fig, (ax,) = figure(width=5.0, height=3.0)
    ax.bar(losses, means, yerr=sds, capsize=3, color="C0", alpha=0.8)
    if "kl" in res.clf_acc:
        ax.axhline(100 * np.mean(res.clf_acc["kl"]), color="k", linestyle="--", linewidth=1, label="KL (CE)")
        ax.legend()
    ax.set(ylim=(min(means) - 3, 100), ylabel="test accuracy (%)", title="Digits MLP, per loss")
    return fig


def plot_lm(res: Results) -> Figure:
    """Left: next-token accuracy against steps with the Bayes ceiling. Right: support share of p* against steps."""
    from companion.plotting import mean_sd_line

    fig, (acc_ax, sup_ax) = figure(ncols=2, width=4.6, height=3.2)
    for loss, curves in res.lm_curves.items():
        mean_sd_line(acc_ax, res.lm_curve_steps, curves, loss)
        mean_sd_line(sup_ax, res.lm_curve_steps, res.lm_support_curves[loss], loss)
    if not res.corpus:  # natural text has no known Bayes accuracy or true support
        acc_ax.axhline(np.mean(res.bayes), color="k", linestyle=":", linewidth=1, label="Bayes accuracy")
        sup_ax.axhline(np.mean(res.lm_true_support), color="k", linestyle=":", linewidth=1, label="true support")
    title = f"GPT-2 ({res.corpus['init']}) on the local corpus" if res.corpus else "Tiny GPT-2 on a sparse Markov source"
    acc_ax.set(xlabel="training step", ylabel="next-token accuracy (held out)", title=title)
    acc_ax.legend(loc="lower right")
    sup_ax.axhline(SPARSITY_BAR, color="C3", linestyle="--", linewidth=1, label="claim bar")
    sup_ax.set(xlabel="training step", ylabel="support of p* / vocabulary", ylim=(0, 1.05),
               title="How many tokens p* keeps")
    sup_ax.legend(loc="center right")
    return fig
