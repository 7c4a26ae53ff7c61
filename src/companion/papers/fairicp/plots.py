"""Figures of the FairICP page: trade-off, EO-test p-values, dummies, per-K gap, settings, sampler study."""

from __future__ import annotations

import numpy as np
import pandas as pd

from companion.papers.fairicp.experiment import Results, main_setting, per_seed, setting_name

METHOD_LABELS = {"unconstrained": "unconstrained", "fairicp_est": "FairICP (Gauss. est.)",
                 "fairicp_oracle": "FairICP (oracle)", "fairicp_mdn": "FairICP (MDN)", "fdl_mdn": "FDL-MDN",
                 "fdl_oracle": "FDL (oracle A | Y)", "fdl_gauss": "FDL-Gauss", "faircp_gauss": "FairCP-Gauss",
                 "hgr": "HGR",
                 "ols": "OLS (a = c = 1)", "fair_linear": "EO-fair linear (a*, c*)", "unaware": "unaware (c = 0)"}


def plot_tradeoff(results: Results, setting: str | None = None):
    """Figure 1: test MSE vs KPC per method (mean +- sd over seeds, one point per lambda), with the
    analytic reference predictors."""
    from companion.plotting import figure

    p = results.params.effective()
    setting = setting or main_setting(p)
    r = results.rows[results.rows.setting == setting]
    fig, (ax,) = figure(width=6.0, height=4.2)
    unc = r[r.method == "unconstrained"]
    for method in [m for m in p.methods if m != "unconstrained"]:
        d = pd.concat([unc, r[r.method == method]]).groupby("lam")[["mse", "kpc"]].agg(["mean", "std"])
        ax.errorbar(d.mse["mean"], d.kpc["mean"], xerr=d.mse["std"], yerr=d.kpc["std"], marker="o",
                    capsize=2, label=METHOD_LABELS[method])
        for lam, row in d.iterrows():
            if method == "fairicp_est":
                ax.annotate(f"λ={lam:g}", (row.mse["mean"], row.kpc["mean"]), fontsize=7,
                            xytext=(4, 4), textcoords="offset points")
    refs = r[r.reference.astype(bool)].groupby("method")[["mse", "kpc"]].mean()
    for name, marker in (("ols", "s"), ("fair_linear", "*"), ("unaware", "X")):
        ax.scatter(refs.loc[name, "mse"], refs.loc[name, "kpc"], marker=marker, s=90, color="k",
                   zorder=5, label=METHOD_LABELS[name])
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(xlabel="test MSE", ylabel="KPC ρ²(Ŷ, A | Y)", title=f"trade-off, {setting}")
    ax.legend(fontsize=7)
    return fig


def plot_pvalues(results: Results):
    """Figure 2: ICP-test p-values per seed, lambda = 0 vs the largest lambda, with the references."""
    from companion.plotting import figure

    p = results.params.effective()
    r = results.rows[results.rows.setting == main_setting(p)]
    top = max(p.lambdas)
    groups = [("unconstrained", 0.0)] + [(m, top) for m in p.methods if m != "unconstrained"] + \
        [("ols", None), ("fair_linear", None), ("unaware", None)]
    fig, (ax,) = figure(width=6.5, height=3.2)
    rng = np.random.default_rng(0)
    for i, (m, lam) in enumerate(groups):
        sel = r[(r.method == m) & (r.lam.isna() if lam is None else np.isclose(r.lam, lam))]
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(sel)), sel.pval, s=18, alpha=0.8)
    ax.axhline(0.05, color="red", lw=1, ls="--")
    ax.set_xticks(range(len(groups)), [METHOD_LABELS[m] + ("" if lam is None else f"\nλ={lam:g}")
                                       for m, lam in groups], rotation=30, ha="right", fontsize=7)
    ax.set(ylabel="ICP-test p-value", yscale="log", title="EO test (true density, B copies)")
    return fig


def plot_dummies(results: Results):
    """Figure 3: histograms of A_1 and of the first-epoch dummies (ICP, FDL-Gauss, FDL-MDN), and (Y, A_1) scatters."""
    from companion.plotting import figure

    d = results.diag
    a, y = np.asarray(d["a_col0"]), np.asarray(d["y"])
    icp, fdl = np.asarray(d["dummy_col0"]["fairicp_est"]), np.asarray(d["dummy_col0"]["fdl_gauss"])
    mdn = np.asarray(d["dummy_col0"]["fdl_mdn"])
    fig, axes = figure(ncols=4, width=3.0, height=3.0)
    bins = np.linspace(min(a.min(), fdl.min(), mdn.min()), max(a.max(), fdl.max(), mdn.max()), 40)
    axes[0].hist(a, bins, alpha=0.5, label="A₁", density=True)
    axes[0].hist(icp, bins, histtype="step", lw=1.5, label="Ã₁ ICP", density=True)
    axes[0].hist(fdl, bins, histtype="step", lw=1.5, label="Ã₁ FDL-Gauss", density=True)
    axes[0].hist(mdn, bins, histtype="step", lw=1.5, label="Ã₁ FDL-MDN", density=True)
    axes[0].set(xlabel="attribute value", title="marginals (training set)")
    axes[0].legend(fontsize=7)
    for ax, dummy, name in ((axes[1], icp, "ICP"), (axes[2], fdl, "FDL-Gauss"), (axes[3], mdn, "FDL-MDN")):
        ax.scatter(y, a, s=4, alpha=0.3, label="(Y, A₁)")
        ax.scatter(y, dummy, s=4, alpha=0.3, label=f"(Y, Ã₁) {name}")
        ax.set(xlabel="Y", ylabel="A₁", title=f"joint with Y: {name}")
        ax.legend(fontsize=7, markerscale=3)
    return fig


def plot_settings(results: Results):
    """Figure 5: KPC and MSE per setting for each method at the largest lambda (unconstrained: lambda = 0)."""
    from companion.plotting import figure

    p = results.params.effective()
    top = max(p.lambdas)
    r = results.rows[~results.rows.reference.astype(bool)]
    r = r[np.isclose(r.lam, top) | (r.method == "unconstrained")]
    r = r[r.method != "hgr"]
    settings = list(dict.fromkeys(r.setting))
    fig, axes = figure(ncols=2, width=5.0, height=3.4)
    for i, m in enumerate(dict.fromkeys(r.method)):
        g = r[r.method == m].groupby("setting")[["kpc", "mse"]].mean().reindex(settings)
        x = np.arange(len(settings)) + (i - 3) * 0.1
        axes[0].scatter(x, g.kpc, s=20, label=METHOD_LABELS[m])
        axes[1].scatter(x, g.mse / np.array([2 * int(s.split("-")[0][1:]) for s in settings]), s=20)
    for ax in axes:
        ax.set_xticks(range(len(settings)), settings, rotation=30, ha="right", fontsize=7)
    axes[0].set(ylabel="KPC", title=f"KPC at λ = {top:g} (unconstrained: λ = 0)")
    axes[1].set(ylabel="MSE / ε²", title="MSE relative to the noise floor")
    axes[0].legend(fontsize=7)
    return fig


def plot_sampler_study(results: Results):
    """Figure 6: swap-odds errors vs extra attribute dimensions, ICP (Y|A) vs CP (A|Y), per K0."""
    from companion.plotting import figure

    s = results.sampler_study
    fig, axes = figure(ncols=2, width=4.2, height=3.2)
    for (est, K0), g in s.groupby(["estimator", "K0"]):
        g = g.groupby("extra_dims").mean(numeric_only=True)
        axes[0].plot(g.index, g.median_abs_dlogodds, marker="o", label=f"{est}, K0={K0}")
        axes[1].plot(g.index, g.mean_abs_dprob, marker="o", label=f"{est}, K0={K0}")
    axes[0].set(xlabel="extra attribute dimensions", ylabel="median |Δ log-odds|", yscale="log")
    axes[1].set(xlabel="extra attribute dimensions", ylabel="mean |Δ swap probability|")
    axes[0].legend(fontsize=6)
    return fig


def plot_gap_by_k(results: Results):
    """Figure 4: KPC of FairICP-MDN minus that of FDL-MDN (the finding) and minus that of the oracle FDL (the
    control) at the largest lambda, per seed and K, with the mean +- sd over seeds (0: no difference)."""
    from companion.plotting import figure

    p = results.params.effective()
    top = max(p.lambdas)
    fig, (ax,) = figure(width=4.8, height=3.2)
    for offset, (fdl, colour) in zip((-0.25, 0.25), (("fdl_mdn", "C0"), ("fdl_oracle", "C1"))):
        for i, K in enumerate(sorted(set(p.K))):
            s = setting_name(K, p.alpha_leak[0])
            gap = per_seed(results, "fairicp_mdn", top, "kpc", s) - per_seed(results, fdl, top, "kpc", s)
            ax.scatter(np.full(len(gap), K + offset), gap, s=14, alpha=0.6, color=colour,
                       label=f"FairICP-MDN − {METHOD_LABELS[fdl]}" if i == 0 else None)
            ax.errorbar(K + 2 * offset, gap.mean(), yerr=gap.std(ddof=1) if len(gap) > 1 else 0, marker="D",
                        color=colour, capsize=3)
    ax.axhline(0, color="grey", lw=0.8)
    ax.legend(fontsize=6)
    ax.set(xlabel="K (attributes)", ylabel="KPC difference", title=f"ICP − FDL gap at λ = {top:g}")
    return fig
