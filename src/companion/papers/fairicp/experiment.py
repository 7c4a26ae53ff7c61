"""One seed of the simulation study: data, dummies of every method, adversarial fits, test metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from companion import runtime
from companion.papers.fairicp import adversarial as adv
from companion.papers.fairicp import densities, fairness, kpc, sampler
from companion.papers.fairicp import simulation as sim

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


def dummy_source(method: str, tr: sim.SimData, sweeps: int, epochs: int,
                 rng: np.random.Generator) -> tuple[Any, dict[str, float]]:
    """The per-epoch dummy attributes of ``method`` (a function of the epoch) and its timings."""
    t0 = time.process_time()
    if method in ("unconstrained", "hgr"):
        return (lambda e: tr.a), {}
    if method == "fairicp_est":
        L = densities.GaussLinearYgivenA.fit(tr.y, tr.a).loglik_matrix(tr.y, tr.a)
    elif method == "fairicp_oracle":
        L = sim.true_loglik(tr.y, tr.a, tr.K, tr.alpha, tr.eps2)
    elif method == "fdl_gauss":
        model = densities.GaussLinearAgivenY.fit(tr.y, tr.a)
        return (lambda e: model.sample(tr.y, rng)), {"density_s": time.process_time() - t0}
    elif method == "faircp_gauss":
        L_ay = densities.GaussLinearAgivenY.fit(tr.y, tr.a).loglik_matrix(tr.a, tr.y)
        copies = sampler.cp_dummies(L_ay, tr.a, epochs, sweeps, rng)
        return (lambda e: copies[e]), {"sampling_s": time.process_time() - t0}
    else:
        raise ValueError(f"unknown method {method!r}")
    copies = sampler.icp_dummies(L, tr.a, epochs, sweeps, rng)
    return (lambda e: copies[e]), {"sampling_s": time.process_time() - t0}


def jobs_for(setting: Setting, main: bool, p: Any) -> list[tuple[str, float]]:
    """(method, lambda) fits of a setting: the whole grid for ``grid_methods`` at the main setting,
    else the largest lambda only; the unconstrained model once (lambda = 0); HGR over its mu grid."""
    top = max(p.lambdas)
    out: list[tuple[str, float]] = []
    for m in p.methods:
        if m == "unconstrained":
            out.append((m, 0.0))
        elif m == "hgr":
            out += [(m, mu) for mu in p.hgr_mus] if main else []
        else:
            lams = [lam for lam in p.lambdas if lam > 0] if (main and m in p.grid_methods) else [top]
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
            sources[method] = dummy_source(method, tr, p.mcmc_sweeps, p.epochs, rng)
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
        if main and lam == max(p.lambdas) and fitted.dis_acc:
            diag.setdefault("dis_acc", {})[method] = fitted.dis_acc
    if main:
        for m in ("fairicp_est", "fdl_gauss", "faircp_gauss"):
            if m in sources:
                draws = np.stack([sources[m][0](e) for e in range(p.epochs)]) if m != "fdl_gauss" else \
                    np.stack([sources[m][0](e) for e in range(min(p.epochs, 20))])
                diag.setdefault("ks", {})[m] = fairness.ks_columns(tr.a, draws[:, :, : setting.K]).tolist()
                diag.setdefault("dummy_col0", {})[m] = draws[0, :, 0].tolist()
        diag["a_col0"] = tr.a[:, 0].tolist()
        diag["y"] = tr.y.tolist()
    return {"rows": rows, "diag": diag}


def run_seed(params_dict: dict[str, Any], seed: int) -> dict[str, Any]:
    """Every setting of one seed (a module-level function so that worker processes can import it)."""
    from companion.papers.fairicp import Params

    runtime.limit_threads(1)
    p = Params(**{k: tuple(v) if isinstance(v, list) else v for k, v in params_dict.items()})
    rng, gen = runtime.generators(seed)
    out: dict[str, Any] = {"seed": seed, "rows": [], "diag": {}}
    for setting, main in settings_of(p):
        if not main and seed - p.seed >= p.sweep_seeds:
            continue
        res = run_setting(setting, main, p, rng, gen)
        for r in res["rows"]:
            r["seed"] = seed
        out["rows"] += res["rows"]
        if main:
            out["ks"] = res["diag"].pop("ks", {})
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
