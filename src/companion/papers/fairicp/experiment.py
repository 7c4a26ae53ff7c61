"""The simulation study: one seed's data, dummies of every method, adversarial fits and test metrics;
then the run over seeds, the claims' per-seed values and the record's summary."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from companion import runtime
from companion.papers.fairicp import adversarial as adv
from companion.papers.fairicp import densities, fairness, kpc, sampler
from companion.papers.fairicp import simulation as sim

DIAG_METHODS = ("fairicp_est", "fairicp_mdn", "fdl_gauss", "fdl_mdn", "fdl_oracle", "faircp_gauss")


@dataclass(frozen=True)
class Setting:
    """One simulated configuration: K attributes, leak alpha, extra irrelevant columns."""

    K: int
    alpha: float
    n_noisy: int = 0

    @property
    def name(self) -> str:
        """Short label, e.g. K5-a0.9 or K1-a0.9+5."""
        return f"K{self.K}-a{self.alpha:g}" + (f"+{self.n_noisy}" if self.n_noisy else "")


def reference_coefs(K: int, eps2: float) -> dict[str, tuple[float, float]]:
    """(a, c) of the analytic reference predictors: OLS-like, EO-fair linear optimum, unaware (c = 0)."""
    a_star, c_star, _ = sim.fair_linear_oracle(K, eps2)
    return {"ols": (1.0, 1.0), "fair_linear": (a_star, c_star), "unaware": (1.0, 0.0)}


def dummy_source(method: str, tr: sim.SimData, sweeps: int, epochs: int, rng: np.random.Generator,
                 gen: torch.Generator) -> tuple[Any, dict[str, float]]:
    """The per-epoch dummy attributes of ``method`` (a function of the epoch) and its timings."""
    t0 = time.process_time()
    if method in ("unconstrained", "hgr"):
        return (lambda e: tr.a), {}
    if method == "fairicp_est":
        L = densities.GaussLinearYgivenA.fit(tr.y, tr.a).loglik_matrix(tr.y, tr.a)
    elif method == "fairicp_mdn":
        L = densities.MDN(tr.y, tr.a, gen).loglik_matrix(tr.y, tr.a)
    elif method == "fairicp_oracle":
        L = sim.true_loglik(tr.y, tr.a, tr.K, tr.alpha, tr.eps2)
    elif method == "fdl_gauss":
        model = densities.GaussLinearAgivenY.fit(tr.y, tr.a)
        return (lambda e: model.sample(tr.y, rng)), {"density_s": time.process_time() - t0}
    elif method == "fdl_mdn":
        mdn = densities.MDN(tr.a, tr.y, gen)
        return (lambda e: mdn.sample(tr.y, rng)), {"density_s": time.process_time() - t0}
    elif method == "fdl_oracle":
        oracle = sim.a_given_y_sampler(tr.y, tr.a.shape[1], tr.K, tr.alpha, tr.eps2, rng)
        return (lambda e: oracle(rng)), {"oracle_s": time.process_time() - t0}
    elif method == "faircp_gauss":
        L_ay = densities.GaussLinearAgivenY.fit(tr.y, tr.a).loglik_matrix(tr.a, tr.y)
        copies = sampler.cp_dummies(L_ay, tr.a, epochs, sweeps, rng)
        return (lambda e: copies[e]), {"sampling_s": time.process_time() - t0}
    else:
        raise ValueError(f"unknown method {method!r}")
    copies = sampler.icp_dummies(L, tr.a, epochs, sweeps, rng)
    return (lambda e: copies[e]), {"sampling_s": time.process_time() - t0}


CURVE_METHODS = ("fairicp_mdn", "fdl_mdn", "fdl_oracle")  # the methods of the matched-KPC rows (their trade-off curves)
SWEEP_KS = (5, 10)  # the K of the per-K ICP-vs-FDL rows; the trend rows run from K = 1 to the largest K


def on_grid(setting: Setting, main: bool, method: str, p: Any) -> bool:
    """Whether ``method`` runs the whole lambda grid in ``setting``: a ``grid_methods`` entry does at the main
    setting, and a per-K method (``CURVE_METHODS``) also at every setting-1 K of the per-K rows (main alpha), so
    that its MSE can be read at a matched KPC."""
    if method not in p.grid_methods:
        return False
    per_k = method in CURVE_METHODS and setting.K in SWEEP_KS and setting.n_noisy == 0 and setting.alpha == p.alpha_leak[0]
    return main or per_k


def jobs_for(setting: Setting, main: bool, p: Any) -> list[tuple[str, float]]:
    """(method, lambda) fits of a setting: the whole grid where :func:`on_grid`, else the largest lambda only;
    the unconstrained model once (lambda = 0); HGR over its mu grid. Settings other than the main one fit
    ``sweep_methods`` only."""
    top = max(p.lambdas)
    out: list[tuple[str, float]] = []
    for m in (p.methods if main else [m for m in p.methods if m in p.sweep_methods]):
        if m == "unconstrained":
            out.append((m, 0.0))
        elif m == "hgr":
            out += [(m, mu) for mu in p.hgr_mus] if main else []
        else:
            lams = [lam for lam in p.lambdas if lam > 0] if on_grid(setting, main, m, p) else [top]
            out += [(m, lam) for lam in lams]
    return out


def run_setting(setting: Setting, main: bool, p: Any, rng: np.random.Generator,
                gen: torch.Generator) -> dict[str, Any]:
    """Fit every (method, lambda) of one setting and evaluate on a fresh test set with true-density ICP."""
    tr = sim.simulate(p.n_train, setting.K, setting.alpha, rng, setting.n_noisy)
    te = sim.simulate(p.n_test, setting.K, setting.alpha, rng, setting.n_noisy)
    t0 = time.process_time()
    L_te = sim.true_loglik(te.y, te.a, te.K, te.alpha, te.eps2)
    copies = sampler.icp_dummies(L_te, te.a_true, p.n_test_perms, p.mcmc_sweeps, rng)
    test = kpc.ICPTest.build(te.y, te.a_true, copies, rng, p.kpc_knn)
    test_s = time.process_time() - t0
    rows: list[dict[str, Any]] = []
    for name, (ca, cc) in reference_coefs(setting.K, te.eps2).items():
        yhat = sim.linear_predictions(te.x, setting.K, ca, cc)
        rho, pval = test.run(yhat)
        rows.append({"setting": setting.name, "method": name, "lam": float("nan"), "reference": True,
                     "mse": float(np.mean((yhat - te.y) ** 2)), "kpc": rho, "pval": pval})
    sources: dict[str, Any] = {}
    diag: dict[str, Any] = {}
    cfg0 = adv.TrainConfig(epochs=p.epochs, batch_size=p.batch_size, lr_pred=p.lr_pred,
                           lr_dis=p.lr_dis, dis_hidden=p.dis_hidden)
    for method, lam in jobs_for(setting, main, p):
        if method not in sources:
            sources[method] = dummy_source(method, tr, p.mcmc_sweeps, p.epochs, rng, gen)
        dummies, timing = sources[method]
        cfg = adv.TrainConfig(**{**cfg0.__dict__, "lam": lam})
        t1 = time.process_time()
        fitted = adv.fit(tr.x, tr.y, tr.a, dummies, cfg, gen,
                         penalty=fairness.hgr_penalty if method == "hgr" else None)
        train_s = time.process_time() - t1
        yhat = fitted.predict(te.x)
        t2 = time.process_time()
        rho, pval = test.run(yhat)
        rows.append({"setting": setting.name, "method": method, "lam": lam, "reference": False,
                     "mse": float(np.mean((yhat - te.y) ** 2)), "kpc": rho, "pval": pval,
                     "train_s": train_s, "test_s": time.process_time() - t2, "test_build_s": test_s,
                     "dis_acc_last": float(np.mean(fitted.dis_acc[-10:])) if fitted.dis_acc else float("nan"),
                     **timing})
        if main and lam == max(p.lambdas) and fitted.dis_acc and method in DIAG_METHODS:
            diag.setdefault("dis_acc", {})[method] = fitted.dis_acc
    ks: dict[str, list[float]] = {}
    for m in DIAG_METHODS:
        if m in sources:
            # 20 draws of the i.i.d. samplers suffice for a KS average; permutations are checked at every epoch
            draws = np.stack([sources[m][0](e) for e in range(p.epochs if "fdl" not in m else min(p.epochs, 20))])
            ks[m] = fairness.ks_columns(tr.a_true, draws[:, :, : setting.K]).tolist()
            if main:
                diag.setdefault("dummy_col0", {})[m] = draws[0, :, 0].tolist()
    # the KS distance of a fresh sample of A's own law: the two-sample noise floor the FDL rows are read against
    fresh = sim.mixture_gamma(len(tr.y), setting.K, rng)[None]
    ks["fresh_draw"] = fairness.ks_columns(tr.a_true, fresh).tolist()
    if main:
        diag["a_col0"] = tr.a[:, 0].tolist()
        diag["y"] = tr.y.tolist()
    return {"rows": rows, "diag": diag, "ks": ks}


def run_seed(params_dict: dict[str, Any], seed: int) -> dict[str, Any]:
    """Every setting of one seed (a module-level function so that worker processes can import it)."""
    from companion.papers.fairicp import Params

    runtime.limit_threads(1)
    p = Params(**{k: tuple(v) if isinstance(v, list) else v for k, v in params_dict.items()})
    rng, gen = runtime.generators(seed)
    out: dict[str, Any] = {"seed": seed, "rows": [], "diag": {}}
    out["ks"] = {}
    for setting, main in settings_of(p):
        res = run_setting(setting, main, p, rng, gen)
        for r in res["rows"]:
            r["seed"] = seed
        out["rows"] += res["rows"]
        out["ks"][setting.name] = res["ks"]
        if main:
            out["diag"] = res["diag"]
    return out


def settings_of(p: Any) -> list[tuple[Setting, bool]]:
    """The main setting (first K, first alpha, no extra columns) then the others: setting 1 over
    K x alpha, setting 2 at K = 1 with each positive ``n_noisy_A``."""
    main = Setting(p.K[0], p.alpha_leak[0], 0)
    out = [(main, True)]
    for K in p.K:
        for alpha in p.alpha_leak:
            s = Setting(K, alpha, 0)
            if s != main:
                out.append((s, False))
    for m in p.n_noisy_A:
        if m > 0:
            out += [(Setting(1, alpha, m), False) for alpha in p.alpha_leak]
    return out


@dataclass
class Results:
    """Per-seed rows of every fit and reference predictor, diagnostics of the first seed, studies."""

    params: Any
    rows: pd.DataFrame
    diag: dict[str, Any]
    ks: dict[str, dict[str, list]]
    sampler_study: pd.DataFrame | None = None
    real: pd.DataFrame | None = None
    wall_s: float = 0.0


def run(p: Any) -> Results:
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
        from companion.papers.fairicp.paper_preset import run_real

        real = run_real(run_p)
    # ks[setting][method] -> (seeds, K) KS distances of the method's dummies to A
    ks = {s: {m: [o["ks"][s][m] for o in outs] for m in outs[0]["ks"][s]} for s in outs[0]["ks"]}
    return Results(p, rows, outs[0]["diag"], ks, study, real, time.perf_counter() - start)


def setting_name(K: int, alpha: float) -> str:
    """Label of a setting-1 configuration, e.g. K5-a0.9."""
    return f"K{K}-a{alpha:g}"


def main_setting(p: Any) -> str:
    """Label of the setting the claims are read on."""
    return setting_name(p.K[0], p.alpha_leak[0])


def per_seed(results: Results, method: str, lam: float | None, col: str, setting: str | None = None) -> np.ndarray:
    """``col`` per seed for ``method`` at ``lam`` (None: the reference row) in ``setting`` (default: main);
    empty when the setting or method was not run."""
    p = results.params.effective()
    r = results.rows
    sel = (r.setting == (setting or main_setting(p))) & (r.method == method)
    if lam is not None:
        sel &= np.isclose(r.lam, lam)
    return r[sel].sort_values("seed")[col].to_numpy(dtype=float)


def ks_mean(results: Results, method: str, setting: str | None = None) -> np.ndarray:
    """Per seed: mean over columns of the KS distance between A and ``method``'s dummies."""
    s = setting or main_setting(results.params.effective())
    return np.asarray(results.ks[s][method], dtype=float).reshape(len(results.ks[s][method]), -1).mean(1)


def mse_at_kpc(kpc: np.ndarray, mse: np.ndarray, level: float) -> float:
    """MSE of a trade-off curve at KPC = ``level``: the curve joins the points (kpc[i], mse[i]) in the given
    (lambda) order by straight segments; on each segment whose KPC range contains ``level`` the MSE is
    interpolated linearly in KPC, and the lowest such MSE is returned (the method's best MSE at that
    fairness). NaN when no segment reaches ``level`` (never extrapolated) or any input is NaN."""
    kpc, mse = np.asarray(kpc, dtype=float), np.asarray(mse, dtype=float)
    if not np.isfinite(level) or not (np.all(np.isfinite(kpc)) and np.all(np.isfinite(mse))):
        return float("nan")
    best = float("nan")
    if len(kpc) == 1 and kpc[0] == level:
        return float(mse[0])
    for i in range(len(kpc) - 1):
        k0, k1, m0, m1 = kpc[i], kpc[i + 1], mse[i], mse[i + 1]
        if not min(k0, k1) <= level <= max(k0, k1):
            continue
        m = min(m0, m1) if k0 == k1 else m0 + (level - k0) / (k1 - k0) * (m1 - m0)
        best = m if np.isnan(best) else min(best, m)
    return float(best)


def matched_level(curves_kpc: list[np.ndarray], kpc_unconstrained: float) -> float:
    """The KPC level every curve reaches: the largest of the curves' smallest KPC. Every curve starts at the
    shared unconstrained point, so the level is on every curve when it is below that point's KPC; NaN when it
    is not (some method never gets below the unconstrained KPC: no fair level to match) or a value is NaN."""
    lows = [float(np.min(k)) if np.all(np.isfinite(k)) else float("nan") for k in curves_kpc]
    level = max(lows) if not np.any(np.isnan(lows)) else float("nan")
    return level if np.isfinite(kpc_unconstrained) and level < kpc_unconstrained else float("nan")


def curve(results: Results, method: str, K: int) -> tuple[list[float], np.ndarray, np.ndarray]:
    """(lambdas, KPC, MSE) of ``method``'s trade-off curve at K (main alpha), one row per seed: the shared
    unconstrained model (lambda = 0) then every positive lambda run for the method, in lambda order."""
    p = results.params.effective()
    s = setting_name(K, p.alpha_leak[0])
    r = results.rows
    lams = sorted(float(x) for x in r[(r.setting == s) & (r.method == method) & (r.lam > 0)].lam.unique())
    cols = {c: [per_seed(results, "unconstrained", 0.0, c, s)] + [per_seed(results, method, lam, c, s) for lam in lams]
            for c in ("kpc", "mse")}
    return [0.0, *lams], np.stack(cols["kpc"], axis=1), np.stack(cols["mse"], axis=1)


def matched_table(results: Results, K: int) -> pd.DataFrame:
    """Per seed at K: the matched KPC level, the unconstrained KPC, each curve method's MSE there, and the two
    relative gaps of FairICP-MDN (to FDL-MDN: the finding; to the oracle FDL: its control). All NaN (one row
    per seed) when K was not run."""
    p = results.params.effective()
    seeds = p.seed_list()
    cols = ["lambdas", "KPC unconstrained", "matched KPC", *(f"MSE {m}" for m in CURVE_METHODS),
            "ICP / FDL-MDN - 1", "ICP / FDL-oracle - 1"]
    if K not in p.K:
        return pd.DataFrame(np.nan, index=pd.Index(seeds, name="seed"), columns=cols)
    curves = {m: curve(results, m, K) for m in CURVE_METHODS}
    rows = []
    for i, seed in enumerate(seeds):
        k_unc = curves[CURVE_METHODS[0]][1][i, 0]
        level = matched_level([curves[m][1][i] for m in CURVE_METHODS], k_unc)
        mse = {m: mse_at_kpc(curves[m][1][i], curves[m][2][i], level) for m in CURVE_METHODS}
        rows.append({"seed": seed, "lambdas": " ".join(f"{x:g}" for x in curves["fairicp_mdn"][0]),
                     "KPC unconstrained": k_unc, "matched KPC": level, **{f"MSE {m}": mse[m] for m in CURVE_METHODS},
                     "ICP / FDL-MDN - 1": mse["fairicp_mdn"] / mse["fdl_mdn"] - 1,
                     "ICP / FDL-oracle - 1": mse["fairicp_mdn"] / mse["fdl_oracle"] - 1})
    return pd.DataFrame(rows).set_index("seed")[cols]


def sampler_log_ratio(results: Results, K0: int, extra: int) -> np.ndarray:
    """Per repetition of the swap-odds study: log(median |Δ log-odds| of CP / that of ICP) at (K0, extra);
    positive when ICP's swap odds are closer to the truth (NaN when the study or the cell was not run)."""
    study = results.sampler_study
    if study is None:
        return np.array([np.nan])
    cell = study[(study.K0 == K0) & (study.extra_dims == extra)]
    if cell.empty:
        return np.array([np.nan])
    wide = cell.pivot(index="rep", columns="estimator", values="median_abs_dlogodds")
    return np.log(wide["CP: glasso A|Y"].to_numpy() / wide["ICP: ridge Y|A"].to_numpy())


def claim_values(results: Results) -> dict[str, Any]:
    """Each claim's per-seed values (one number for exact ones), and each control's under ``id@control``."""
    p = results.params.effective()
    top = max(p.lambdas)
    alpha = p.alpha_leak[0]

    def at(method: str, col: str, lam: float | None = top, K: int | None = None) -> np.ndarray:
        return per_seed(results, method, lam, col, setting_name(K, alpha) if K is not None else None)

    unc_k, unc_m, unc_p = (at("unconstrained", c, 0.0) for c in ("kpc", "mse", "pval"))
    est_k, est_m, est_p = (at("fairicp_est", c) for c in ("kpc", "mse", "pval"))
    mdn_k, mdn_m = at("fairicp_mdn", "kpc"), at("fairicp_mdn", "mse")
    orc_k, orc_m = at("fairicp_oracle", "kpc"), at("fairicp_oracle", "mse")
    fdl_k, fdl_m = at("fdl_gauss", "kpc"), at("fdl_gauss", "mse")
    fdm_k, fdm_m = at("fdl_mdn", "kpc"), at("fdl_mdn", "mse")
    ref = {m: {c: at(m, c, None) for c in ("kpc", "mse", "pval")} for m in ("ols", "fair_linear", "unaware")}
    v: dict[str, Any] = {
        "eo-kpc-halved": est_k - 0.5 * unc_k,
        "eo-kpc-halved@unaware": ref["unaware"]["kpc"] - 0.5 * unc_k,
        "eo-test-fair-p": est_p,
        "eo-test-fair-p@unconstrained": unc_p,
        "eo-test-fair-p@unaware": ref["unaware"]["pval"],
        "price-near-optimum": est_m / ref["fair_linear"]["mse"],
        "price-near-optimum@ols": ref["ols"]["mse"] / ref["fair_linear"]["mse"],
        "est-vs-oracle-kpc": np.abs(mdn_k - orc_k),
        "est-vs-oracle-kpc@fdl_mdn": np.abs(fdm_k - orc_k),
        "est-vs-oracle-mse": np.abs(mdn_m / orc_m - 1),
        "est-vs-oracle-mse@fdl_mdn": np.abs(fdm_m / orc_m - 1),
        "icp-vs-fdl-gauss-kpc": est_k - fdl_k,
        "icp-vs-fdl-gauss-kpc@fdl_mdn": est_k - fdm_k,
        "icp-vs-fdl-gauss-mse": est_m / fdl_m,
        "icp-vs-fdl-gauss-mse@fdl_mdn": est_m / fdm_m,
        "eo-test-unconstrained-rejects": unc_p,
        "unconstrained-near-bayes": unc_m / ref["ols"]["mse"],
        "price-nonnegative": est_m / unc_m,
        "est-vs-oracle-kpc-gauss": np.abs(est_k - orc_k),
        "est-vs-oracle-mse-gauss": np.abs(est_m / orc_m - 1),
        "icp-keeps-marginal": float(np.max(results.ks[main_setting(p)]["fairicp_est"])),
        "fdl-gauss-shifts-marginal": ks_mean(results, "fdl_gauss") - ks_mean(results, "fresh_draw"),
    }

    def gap(K: int, fdl: str) -> tuple[np.ndarray, np.ndarray]:
        """(KPC difference, MSE ratio) of FairICP-MDN against the FDL variant ``fdl`` at K (NaN, judged
        INCONCLUSIVE, when K was not run: the quick preset has no K = 10)."""
        if K not in p.K:
            return np.array([np.nan]), np.array([np.nan])
        return at("fairicp_mdn", "kpc", K=K) - at(fdl, "kpc", K=K), at("fairicp_mdn", "mse", K=K) / at(fdl, "mse", K=K)

    v["sampler-icp-closer"] = sampler_log_ratio(results, 5, max(p.sampler_dims))
    v["sampler-icp-closer@K0_1"] = sampler_log_ratio(results, 1, 0)
    for K in SWEEP_KS:
        v[f"icp-vs-fdl-kpc-k{K}"], v[f"icp-vs-fdl-mse-k{K}"] = gap(K, "fdl_mdn")
        v[f"icp-vs-fdl-kpc-k{K}@fdl_oracle"] = gap(K, "fdl_oracle")[0]
        matched = matched_table(results, K)
        v[f"icp-vs-fdl-mse-matched-k{K}"] = matched["ICP / FDL-MDN - 1"].to_numpy(dtype=float)
        v[f"icp-vs-fdl-mse-matched-k{K}@fdl_oracle"] = matched["ICP / FDL-oracle - 1"].to_numpy(dtype=float)
    for suffix, fdl in (("", "fdl_mdn"), ("@fdl_oracle", "fdl_oracle")):
        v[f"icp-gain-grows-kpc{suffix}"] = gap(max(p.K), fdl)[0] - gap(1, fdl)[0] if max(p.K) > 1 else np.array([np.nan])
    return {k: (x if isinstance(x, float) else [float(y) for y in x]) for k, x in v.items()}


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


def gap_table(results: Results) -> pd.DataFrame:
    """Per K (setting 1, main alpha): FairICP-MDN, FDL-MDN and the oracle FDL at the largest lambda, the KPC
    gap and MSE ratio of FairICP against each FDL (mean and, for FDL-MDN, per seed), and the KS distance of each
    FDL sampler's dummies to A."""
    p = results.params.effective()
    top, alpha = max(p.lambdas), p.alpha_leak[0]
    rows = []
    for K in sorted(set(p.K)):
        s = setting_name(K, alpha)
        kpc = {m: per_seed(results, m, top, "kpc", s) for m in ("fairicp_mdn", "fdl_mdn", "fdl_oracle")}
        mse = {m: per_seed(results, m, top, "mse", s) for m in ("fairicp_mdn", "fdl_mdn", "fdl_oracle")}
        rows.append({"K": K, "KPC FairICP-MDN": kpc["fairicp_mdn"].mean(), "KPC FDL-MDN": kpc["fdl_mdn"].mean(),
                     "KPC FDL-oracle": kpc["fdl_oracle"].mean(),
                     "KPC gap (ICP - FDL)": (kpc["fairicp_mdn"] - kpc["fdl_mdn"]).mean(),
                     "gap per seed": " ".join(f"{g:+.3f}" for g in kpc["fairicp_mdn"] - kpc["fdl_mdn"]),
                     "KPC gap (ICP - FDL-oracle)": (kpc["fairicp_mdn"] - kpc["fdl_oracle"]).mean(),
                     "MSE ratio (ICP / FDL)": (mse["fairicp_mdn"] / mse["fdl_mdn"]).mean(),
                     "MSE ratio (ICP / FDL-oracle)": (mse["fairicp_mdn"] / mse["fdl_oracle"]).mean(),
                     # below 0.5 the predictor has overshot: the flipped-label objective rewards a reversed dependence
                     "disc. acc. FairICP-MDN": per_seed(results, "fairicp_mdn", top, "dis_acc_last", s).mean(),
                     "disc. acc. FDL-MDN": per_seed(results, "fdl_mdn", top, "dis_acc_last", s).mean(),
                     "KS FDL-MDN": ks_mean(results, "fdl_mdn", s).mean(),
                     "KS FDL-oracle": ks_mean(results, "fdl_oracle", s).mean(),
                     "KS fresh draw": ks_mean(results, "fresh_draw", s).mean()})
    return pd.DataFrame(rows).set_index("K").round(4)


def metrics(results: Results) -> dict[str, Any]:
    """The record's summary: every setting's means per method and lambda (so the full record carries the
    per-K evidence), KS distances, the sampler study's means, the cost split and wall time."""
    p = results.params.effective()
    out: dict[str, Any] = {"setting": main_setting(p), "lambda": max(p.lambdas), "wall_s": round(results.wall_s, 1)}
    r = results.rows.assign(rejected=(results.rows.pval <= 0.05).astype(float))
    for (s, m, lam), g in r.groupby(["setting", "method", r.lam.fillna(-1)], sort=False):
        key = f"{s}.{m}" + ("" if lam < 0 else f"@{lam:g}")
        for col in ("mse", "kpc", "pval", "rejected", "dis_acc_last"):
            if col in g and g[col].notna().any():
                out[f"{key}.{col}"] = float(g[col].mean())
    for s, by_method in results.ks.items():
        for m in by_method:
            out[f"{s}.{m}.ks"] = float(ks_mean(results, m, s).mean())
    fits = r[~r.reference.astype(bool)]
    out["train_s_per_fit"] = float(fits.train_s.mean())
    out["icp_sampling_s"] = float(r.sampling_s.dropna().mean()) if "sampling_s" in r else float("nan")
    out["density_s"] = float(r.density_s.dropna().mean()) if "density_s" in r else float("nan")
    out["icp_test_s_per_model"] = float(fits.test_s.mean())
    out["mse_star"] = sim.fair_linear_oracle(p.K[0], 2.0 * p.K[0])[2]
    if results.sampler_study is not None:
        g = results.sampler_study.groupby(["estimator", "K0", "extra_dims"]).mean(numeric_only=True)
        for (est, K0, extra), row in g.iterrows():
            out[f"sampler.{est}.K0={K0}.extra={extra}.median_abs_dlogodds"] = float(row.median_abs_dlogodds)
            out[f"sampler.{est}.K0={K0}.extra={extra}.mean_abs_dprob"] = float(row.mean_abs_dprob)
    if results.real is not None:
        out["real"] = results.real.round(4).to_dict(orient="records")
    return out


def glue_values(results: Results) -> dict[str, float]:
    """Numbers quoted in the page's prose that are not a claim's value (glued by the notebook)."""
    p = results.params.effective()
    top = max(p.lambdas)
    mean = lambda m, lam, c: float(np.mean(per_seed(results, m, lam, c)))  # noqa: E731
    out = {f"g_{m}_{c}": mean(m, lam, c) for m, lam in (
        ("unconstrained", 0.0), ("fairicp_est", top), ("fairicp_mdn", top), ("fairicp_oracle", top),
        ("fdl_gauss", top), ("fdl_mdn", top), ("ols", None), ("fair_linear", None), ("unaware", None))
        for c in ("mse", "kpc")}
    out["g_mse_star"] = sim.fair_linear_oracle(p.K[0], 2.0 * p.K[0])[2]
    out["g_unaware_reject"] = float(np.mean(per_seed(results, "unaware", None, "pval") <= 0.05))
    out["g_fdl_gauss_ks"] = float(ks_mean(results, "fdl_gauss").mean())
    out["g_fdl_mdn_ks"] = float(ks_mean(results, "fdl_mdn").mean())
    out["g_fresh_ks"] = float(ks_mean(results, "fresh_draw").mean())
    m = metrics(results)
    for k in ("train_s_per_fit", "icp_sampling_s", "density_s", "icp_test_s_per_model"):
        out[f"g_{k}"] = float(m[k])
    out["g_seeds"] = float(len(p.seed_list()))
    out["g_epochs"] = float(p.epochs)
    out["g_batch"] = float(p.batch_size)
    return out


def rows_at_bar(verdicts: list) -> str:
    """Ids of the statistical rows and controls whose 95 % interval contains their bar (named on the page:
    such a row can move between HOLDS/FAILS and INCONCLUSIVE at another base seed)."""
    out = []
    for v in verdicts:
        for name, interval in [(v.id, v.interval)] + [(f"{v.id}@{c.name}", c.interval) for c in v.controls]:
            if interval is not None and np.all(np.isfinite(interval)) and min(interval) <= v.threshold <= max(interval):
                out.append(name)
    return ", ".join(out) or "none"
