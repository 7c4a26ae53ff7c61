"""FairICP: Encouraging Equalized Odds via Inverse Conditional Permutation — Lai & Guan, ICML 2025.

https://arxiv.org/abs/2404.05678 · official code ``yuhenglai/FairICP`` (MIT).

Reproduced: the official simulation (setting 1; setting 2 and a K x alpha sweep in ``full``) with
adversarial equalized-odds training whose dummy attributes come from inverse conditional permutation
(FairICP, estimated and true density), from a Gaussian model of A | Y (FDL-Gauss), from permuting A
under that model (FairCP-Gauss, ``full``) or an HGR chi^2 penalty (``full``); KPC and the ICP test of
EO; the analytic EO-fair linear optimum as the anchor of the price of fairness; the swap-odds
estimation study of ``ICP_CP.R`` with linear-Gaussian estimators (``full``); the real datasets
(``paper``, from ``data_path``).

Written by hand: everything. The official code is TensorFlow (MAF densities) + PyTorch + R (``KPC``);
here the sampler is a vectorised numpy sweep, KPC a scipy cKDTree re-implementation, densities
Gaussian-linear (the simulation's Y | A is exactly of that form) instead of conditional MAFs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from companion import claims, params, runtime
from companion.claims import Claim, Verdict
from companion.params import BaseParams, ParamError, param
from companion.papers.fairicp import simulation as sim
from companion.papers.fairicp.experiment import run_seed

SLUG = "fairicp"
METHODS = ("unconstrained", "fairicp_est", "fairicp_oracle", "fdl_gauss", "faircp_gauss", "hgr")
REQUIRED = ("unconstrained", "fairicp_est", "fairicp_oracle", "fdl_gauss")
DATASETS = ("crimes", "compas", "adult", "acs_income")


@dataclass(frozen=True)
class Params(BaseParams):
    """FairICP's parameters; defaults are the quick preset."""

    seeds: int = param(6, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    K: tuple[int, ...] = param((5,), lo=1, hi=20, help="attributes K; the first is the main setting, the rest a sweep")
    alpha_leak: tuple[float, ...] = param((0.9,), lo=0.05, hi=0.99, help="leak of A into X_sens; first is the main setting")
    n_noisy_A: tuple[int, ...] = param((0,), lo=0, hi=20, help="setting 2: irrelevant extra A columns (K = 1); 0 = none")
    sweep_seeds: int = param(3, lo=1, hi=64, help="seeds (the first ones) that also run the non-main settings")
    n_train: int = param(500, lo=100, hi=20000, help="training rows per setting")
    n_test: int = param(400, lo=100, hi=20000, help="test rows per setting")
    lambdas: tuple[float, ...] = param((0.0, 0.5, 0.9), lo=0.0, hi=0.99, help="adversarial weights; the largest is the claims' lambda")
    methods: tuple[str, ...] = param(REQUIRED, choices=METHODS, help="methods fitted")
    grid_methods: tuple[str, ...] = param(("fairicp_est",), choices=METHODS, help="methods run over the whole lambda grid (others: largest lambda)")
    hgr_mus: tuple[float, ...] = param((1.0, 4.0, 16.0), lo=0.0, hi=100.0, help="HGR penalty weights mu")
    epochs: int = param(100, lo=5, hi=300, help="training epochs (one ICP state per epoch)")
    batch_size: int = param(16, lo=8, hi=512, help="minibatch size")
    lr_pred: float = param(1e-3, lo=1e-5, hi=1e-1, help="predictor Adam learning rate")
    lr_dis: float = param(1e-4, lo=1e-5, hi=1e-1, help="discriminator Adam learning rate")
    dis_hidden: int = param(64, lo=8, hi=256, help="discriminator width (3 hidden layers)")
    mcmc_sweeps: int = param(50, lo=5, hi=200, help="swap sweeps between ICP states (and burn-in)")
    n_test_perms: int = param(100, lo=19, hi=1000, help="ICP copies B of the EO test")
    kpc_knn: int = param(1, lo=1, hi=10, help="neighbours of the KPC graph estimator")
    run_sampler_study: bool = param(False, help="swap-odds estimation study, ICP (Y|A) vs CP (A|Y)")
    sampler_dims: tuple[int, ...] = param((0, 5, 10, 20, 50), lo=0, hi=100, help="extra attribute dims of the sampler study")
    sampler_reps: int = param(5, lo=1, hi=50, help="repetitions per sampler-study cell")
    datasets: tuple[str, ...] = param(DATASETS, choices=DATASETS, help="paper preset: real datasets under data_path")
    data_path: str = param(params.local_default(SLUG), help="paper preset: folder with the real datasets (data/README.md)")
    real_max_n: int = param(4000, lo=200, hi=200000, help="paper preset: rows subsampled per real dataset (n x n ICP matrix)")
    smoke: bool = param(False, help="paper pipeline on a tiny budget (tests)")

    PRESETS = {
        # Trimmed for 10 minutes on 2 cores (the spec's design -- lambda grid (0, .3, .5, .7, .8, .9) for
        # three methods, three HGR weights, three sweep seeds -- is about 24 CPU minutes): the lambda grid
        # for FairICP-est and FDL-Gauss at 4 points, FairICP-oracle and FairCP-Gauss at the largest
        # lambda, HGR at one weight, the other settings on the first 2 seeds.
        "full": {"seeds": 10, "K": (5, 1, 10), "alpha_leak": (0.9, 0.6), "n_noisy_A": (0, 5),
                 "lambdas": (0.0, 0.5, 0.7, 0.9), "methods": METHODS, "grid_methods": ("fairicp_est", "fdl_gauss"),
                 "hgr_mus": (4.0,), "sweep_seeds": 2, "run_sampler_study": True},
        "paper": {"seeds": 10, "K": (5, 1, 10), "alpha_leak": (0.9, 0.6), "n_noisy_A": (0, 1, 5, 10),
                  "lambdas": (0.0, 0.3, 0.5, 0.7, 0.8, 0.9), "methods": METHODS,
                  "grid_methods": ("fairicp_est", "fairicp_oracle", "fdl_gauss", "faircp_gauss"),
                  "n_test_perms": 200, "sweep_seeds": 10, "run_sampler_study": True, "sampler_reps": 20},
    }

    def __post_init__(self) -> None:
        missing = [m for m in REQUIRED if m not in self.methods]
        if missing:
            raise ParamError(f"parameter 'methods': {', '.join(self.methods)} lacks {', '.join(missing)}; "
                             f"allowed: any subset of {', '.join(METHODS)} that contains {', '.join(REQUIRED)}")
        if 0.0 not in self.lambdas or max(self.lambdas) <= 0:
            raise ParamError(f"parameter 'lambdas': {self.lambdas!r} needs 0 (the unconstrained model) and "
                             "one positive value; allowed: values in [0, 0.99] including 0")
        if self.preset == "paper":
            params.require_path("data_path", self.data_path,
                                "a folder with communities.data + communities.names, compas.csv, "
                                "adult.data + adult.test, ca_features.csv + ca_labels.csv", "dir")

    def effective(self) -> "Params":
        """The parameters actually run: the smoke budget shrinks the simulation to seconds."""
        if not self.smoke:
            return self
        small = {"seeds": 1, "K": self.K[:1], "alpha_leak": self.alpha_leak[:1], "n_noisy_A": (0,),
                 "n_train": 120, "n_test": 100, "lambdas": (0.0, max(self.lambdas)), "epochs": 5,
                 "batch_size": 32, "mcmc_sweeps": 5, "n_test_perms": 19, "sampler_dims": (0, 5),
                 "sampler_reps": 1, "real_max_n": 300, "methods": REQUIRED, "grid_methods": ()}
        merged = {**self.to_dict(), **small}
        return type(self)(**{k: tuple(v) if isinstance(v, list) else v for k, v in merged.items()})


@dataclass
class Results:
    """Per-seed rows of every fit and reference predictor, diagnostics of the first seed, studies."""

    params: Params
    rows: pd.DataFrame
    diag: dict[str, Any]
    sampler_study: pd.DataFrame | None = None
    real: pd.DataFrame | None = None
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def run(p: Params) -> Results:
    """Run every seed (in parallel processes), then the optional sampler study and real data."""
    start = time.perf_counter()
    run_p = p.effective()
    seeds = run_p.seed_list()
    bar = tqdm(total=len(seeds), desc="seeds", disable=None, leave=False)
    outs = runtime.parallel_map(run_seed, [(run_p.to_dict(), s) for s in seeds], on_done=bar.update)
    bar.close()
    rows = pd.DataFrame([r for o in outs for r in o["rows"]])
    study = None
    if run_p.run_sampler_study:
        from companion.papers.fairicp.sampler_study import run_study

        study = run_study(run_p.sampler_dims, run_p.sampler_reps, run_p.seed)
    real = None
    if p.preset == "paper":
        from companion.papers.fairicp.realdata import run_real

        real = run_real(run_p)
    ks = {m: [o["ks"][m] for o in outs] for m in outs[0]["ks"]}
    return Results(p, rows, outs[0]["diag"], study, real, time.perf_counter() - start, {"ks": ks})


def main_setting(p: Params) -> str:
    """Label of the setting the claims are read on."""
    return f"K{p.K[0]}-a{p.alpha_leak[0]:g}"


def per_seed(results: Results, method: str, lam: float | None, col: str) -> np.ndarray:
    """``col`` per seed for ``method`` at ``lam`` (None: the reference row) in the main setting."""
    p = results.params.effective()
    r = results.rows
    sel = (r.setting == main_setting(p)) & (r.method == method)
    if lam is not None:
        sel &= np.isclose(r.lam, lam)
    return r[sel].sort_values("seed")[col].to_numpy(dtype=float)


CLAIMS = [
    Claim("eo-kpc-halved", "KPC(FairICP-est, largest lambda) - 0.5 KPC(unconstrained), per seed: FairICP "
          "at least halves the unconstrained model's KPC", "EO promoted (Fig. 2 curves)", 0.0, "<="),
    Claim("eo-test-fair-accepts", "fraction of seeds where the ICP test does not reject FairICP-est at 0.05",
          "p > 0.05 along the fair end of the curves", 0.667, ">=", kind="exact"),
    Claim("eo-test-unconstrained-rejects", "fraction of seeds where the ICP test rejects the unconstrained "
          "model at 0.05", "the unconstrained model violates EO", 0.667, ">=", kind="exact"),
    Claim("unconstrained-near-bayes", "MSE(unconstrained) / MSE(Bayes predictor sum X) on the same test set: "
          "within 10% of the noise floor eps^2", "loss at lambda = 0", 1.10, "<="),
    Claim("price-nonnegative", "MSE(FairICP-est) / MSE(unconstrained) at the largest lambda "
          "(fairness costs accuracy)", "loss rises with lambda", 1.0, ">="),
    Claim("price-near-optimum", "MSE(FairICP-est) / MSE of the analytic EO-fair linear predictor (a*, c*) "
          "on the same test set (MSE* = 2.4 K in expectation)", "near the attainable trade-off", 1.20, "<="),
    Claim("est-vs-oracle-kpc", "|KPC(FairICP-est) - KPC(FairICP-oracle)| per seed",
          "estimated density tracks the true one", 0.03, "<="),
    Claim("est-vs-oracle-mse", "|MSE(FairICP-est) / MSE(FairICP-oracle) - 1| per seed",
          "estimated density tracks the true one", 0.10, "<="),
    Claim("icp-vs-fdl-kpc", "KPC(FairICP-est) - KPC(FDL-Gauss) at the largest lambda",
          "FairICP matches or beats FDL", 0.0, "<="),
    Claim("icp-vs-fdl-mse", "MSE(FairICP-est) / MSE(FDL-Gauss) at the largest lambda",
          "FairICP matches or beats FDL", 1.05, "<="),
    Claim("icp-keeps-marginal", "consistency check: largest KS distance between A and the ICP dummies "
          "(a permutation keeps the marginal exactly), over seeds and columns",
          "Ã is a row permutation of A", 1e-12, "<=", kind="exact"),
    Claim("fdl-shifts-marginal", "mean per-column KS distance between A and the FDL-Gauss dummies",
          "A | Y models can miss the marginal", 0.061, ">="),
]


def claim_values(results: Results) -> dict[str, Any]:
    """Each claim's measured values: per seed for statistical claims, one number for exact ones."""
    p = results.params.effective()
    top = max(p.lambdas)
    unc_k, unc_m, unc_p = (per_seed(results, "unconstrained", 0.0, c) for c in ("kpc", "mse", "pval"))
    est_k, est_m, est_p = (per_seed(results, "fairicp_est", top, c) for c in ("kpc", "mse", "pval"))
    orc_k, orc_m = (per_seed(results, "fairicp_oracle", top, c) for c in ("kpc", "mse"))
    fdl_k, fdl_m = (per_seed(results, "fdl_gauss", top, c) for c in ("kpc", "mse"))
    ks = results.extra.get("ks") or {}
    return {
        "eo-kpc-halved": est_k - 0.5 * unc_k,
        "eo-test-fair-accepts": float(np.mean(est_p > 0.05)),
        "eo-test-unconstrained-rejects": float(np.mean(unc_p <= 0.05)),
        "unconstrained-near-bayes": unc_m / per_seed(results, "ols", None, "mse"),
        "price-nonnegative": est_m / unc_m,
        "price-near-optimum": est_m / per_seed(results, "fair_linear", None, "mse"),
        "est-vs-oracle-kpc": np.abs(est_k - orc_k),
        "est-vs-oracle-mse": np.abs(est_m / orc_m - 1),
        "icp-vs-fdl-kpc": est_k - fdl_k,
        "icp-vs-fdl-mse": est_m / fdl_m,
        "icp-keeps-marginal": float(np.max(ks_of(results, "fairicp_est"))),
        "fdl-shifts-marginal": ks_of(results, "fdl_gauss").mean(1),
    }


def ks_of(results: Results, method: str) -> np.ndarray:
    """(seeds, K) KS distances of ``method``'s dummies to A, main setting."""
    return np.asarray(results.extra["ks"][method], dtype=float)


def check(results: Results) -> list[Verdict]:
    """Evaluate every claim on the measured values."""
    return claims.evaluate_all(CLAIMS, claim_values(results))


def summary(results: Results, setting: str | None = None) -> pd.DataFrame:
    """Mean over seeds of MSE, KPC, rejection rate at 0.05 and median p-value, per method and lambda."""
    r = results.rows
    if setting is not None:
        r = r[r.setting == setting]
    r = r.assign(lam=r.lam.fillna(-1), rejected=(r.pval <= 0.05).astype(float))
    out = r.groupby(["setting", "method", "lam"], sort=False).agg(
        mse=("mse", "mean"), mse_sd=("mse", "std"), kpc=("kpc", "mean"), kpc_sd=("kpc", "std"),
        rejected=("rejected", "mean"), median_p=("pval", "median"), seeds=("seed", "nunique"))
    return out.rename(index={-1.0: "–"}, level="lam").round(3)


def metrics(results: Results) -> dict[str, Any]:
    """A small JSON-able summary: main-setting means, cost split, wall time."""
    p = results.params.effective()
    top = max(p.lambdas)
    out: dict[str, Any] = {"setting": main_setting(p), "lambda": top, "wall_s": round(results.wall_s, 1)}
    for method, lam in (("unconstrained", 0.0), ("fairicp_est", top), ("fairicp_oracle", top),
                        ("fdl_gauss", top), ("ols", None), ("fair_linear", None), ("unaware", None)):
        for col in ("mse", "kpc", "pval"):
            out[f"{method}_{col}"] = float(np.mean(per_seed(results, method, lam, col)))
    r = results.rows
    fits = r[~r.reference.astype(bool)]
    out["train_s_per_fit"] = float(fits.train_s.mean())
    out["icp_sampling_s"] = float(r.sampling_s.dropna().mean()) if "sampling_s" in r else float("nan")
    out["icp_test_s_per_model"] = float(fits.test_s.mean())
    out["mse_star"] = sim.fair_linear_oracle(p.K[0], 2.0 * p.K[0])[2]
    if results.real is not None:
        out["real"] = results.real.round(4).to_dict(orient="records")
    return out


def glue_values(results: Results) -> dict[str, float]:
    """Numbers quoted in the page's prose (glued by the notebook)."""
    m = metrics(results)
    v = claim_values(results)
    keys = ("unconstrained_mse", "unconstrained_kpc", "fairicp_est_mse", "fairicp_est_kpc", "fairicp_oracle_kpc",
            "fairicp_oracle_mse", "fdl_gauss_mse", "fdl_gauss_kpc", "ols_kpc", "fair_linear_kpc", "fair_linear_mse",
            "unaware_kpc", "unaware_mse", "mse_star", "train_s_per_fit", "icp_sampling_s", "icp_test_s_per_model")
    out = {k: float(m[k]) for k in keys}
    out["kpc_ratio"] = out["fairicp_est_kpc"] / out["unconstrained_kpc"]
    out["fdl_ks"] = float(np.mean(v["fdl-shifts-marginal"]))
    out["unaware_reject"] = float(np.mean(per_seed(results, "unaware", None, "pval") <= 0.05))
    return out


METHOD_LABELS = {"unconstrained": "unconstrained", "fairicp_est": "FairICP (est.)", "fairicp_oracle": "FairICP (oracle)",
                 "fdl_gauss": "FDL-Gauss", "faircp_gauss": "FairCP-Gauss", "hgr": "HGR",
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
    """Figure 3: histograms of A_1 and of the first-epoch dummies (ICP, FDL-Gauss), and (Y, A_1) scatters."""
    from companion.plotting import figure

    d = results.diag
    a, y = np.asarray(d["a_col0"]), np.asarray(d["y"])
    icp, fdl = np.asarray(d["dummy_col0"]["fairicp_est"]), np.asarray(d["dummy_col0"]["fdl_gauss"])
    fig, axes = figure(ncols=3, width=3.3, height=3.0)
    bins = np.linspace(min(a.min(), fdl.min()), max(a.max(), fdl.max()), 40)
    axes[0].hist(a, bins, alpha=0.5, label="A₁", density=True)
    axes[0].hist(icp, bins, histtype="step", lw=1.5, label="Ã₁ ICP", density=True)
    axes[0].hist(fdl, bins, histtype="step", lw=1.5, label="Ã₁ FDL-Gauss", density=True)
    axes[0].set(xlabel="attribute value", title="marginals (training set)")
    axes[0].legend(fontsize=7)
    for ax, dummy, name in ((axes[1], icp, "ICP"), (axes[2], fdl, "FDL-Gauss")):
        ax.scatter(y, a, s=4, alpha=0.3, label="(Y, A₁)")
        ax.scatter(y, dummy, s=4, alpha=0.3, label=f"(Y, Ã₁) {name}")
        ax.set(xlabel="Y", ylabel="A₁", title=f"joint with Y: {name}")
        ax.legend(fontsize=7, markerscale=3)
    return fig


def plot_settings(results: Results):
    """Full preset: KPC and MSE per setting for each method at lambda = 0 and the largest lambda."""
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
        x = np.arange(len(settings)) + (i - 2.5) * 0.12
        axes[0].scatter(x, g.kpc, s=20, label=METHOD_LABELS[m])
        axes[1].scatter(x, g.mse / np.array([2 * int(s.split("-")[0][1:]) for s in settings]), s=20)
    for ax in axes:
        ax.set_xticks(range(len(settings)), settings, rotation=30, ha="right", fontsize=7)
    axes[0].set(ylabel="KPC", title=f"KPC at λ = {top:g} (unconstrained: λ = 0)")
    axes[1].set(ylabel="MSE / ε²", title="MSE relative to the noise floor")
    axes[0].legend(fontsize=7)
    return fig


def plot_sampler_study(results: Results):
    """Full preset: swap-probability error vs extra attribute dimensions, ICP (Y|A) vs CP (A|Y)."""
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
