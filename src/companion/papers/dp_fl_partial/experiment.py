"""The experiment: every method tuned and evaluated per (n, epsilon), the heterogeneous run, the
noise-only process, the accountant table, and the per-seed values of every claim and control.

The untrained model x = 0 is the control of every utility finding: its excess loss F(0) - F* is
what a method that learns nothing scores, and the same ratio or slope computed with it in place of
NC must fail the claim's test. The method without noise cancellation (``naive``) is the second
control.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from companion import runtime
from companion.papers.dp_fl_partial import NEEDED, Params
from companion.papers.dp_fl_partial import logistic_sco as lr
from companion.papers.dp_fl_partial.privacy import increment_bound, noise_multiplier, rdp_orders, rdp_spent
from companion.papers.dp_fl_partial.simulator import (
    MU2,
    SimOut,
    Task,
    checkpoint_rounds,
    log_slope,
    make_task,
    noise_variance,
    simulate,
    stream_rng,
)

PRIVATE = ("nc", "naive", "dpfedsgd", "trusted_nc")
BASELINES = NEEDED[1:]


def method_sigma(method: str, eps: float, p: Params, n: int) -> float:
    """Noise std of ``method`` at (eps, delta) with n samples per machine."""
    if method not in PRIVATE:
        return 0.0
    delta_s = 2.0 * increment_bound(p.D)
    sens, releases = {"nc": (delta_s, n), "naive": (delta_s, 1),
                      "dpfedsgd": (2.0 * lr.LIPSCHITZ_G, 1),
                      "trusted_nc": (delta_s / p.m, n * p.M // p.m)}[method]
    return sens * noise_multiplier(eps, p.delta, releases, p.calibration)


@dataclass
class Results:
    """Everything the page shows; keys (method, n, eps) index the evaluation-seed arrays."""

    params: Params
    excess: dict[tuple[str, int, float], np.ndarray] = field(default_factory=dict)
    chosen_c: dict[tuple[str, int, float], float] = field(default_factory=dict)
    sigma: dict[tuple[str, int, float], float] = field(default_factory=dict)
    dist: dict[tuple[str, int, float], np.ndarray] = field(default_factory=dict)
    trivial: float = float("nan")
    hetero: dict[str, np.ndarray] = field(default_factory=dict)
    hetero_c: dict[str, float] = field(default_factory=dict)
    hetero_trivial: float = float("nan")
    curves: dict[str, np.ndarray] = field(default_factory=dict)
    curve_rounds: np.ndarray = field(default_factory=lambda: np.zeros(0))
    curve_n: int = 0
    identity_err: np.ndarray = field(default_factory=lambda: np.zeros(0))
    release_rms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    noise_dev_nc: np.ndarray = field(default_factory=lambda: np.zeros(0))
    noise_growth_naive: np.ndarray = field(default_factory=lambda: np.zeros(0))
    var_nc: np.ndarray = field(default_factory=lambda: np.zeros(0))
    var_naive: np.ndarray = field(default_factory=lambda: np.zeros(0))
    accounting: list[dict[str, float]] = field(default_factory=list)
    clipped: int = 0


def method_grid(method: str, p: Params) -> tuple[float, ...]:
    """The step-size grid ``method`` is tuned on."""
    if method in PRIVATE and method in MU2:
        return p.c_grid_mu2_private
    return p.c_grid_fedsgd if method == "dpfedsgd" else p.c_grid_nonprivate


def tuned_grid(method: str, n: int, eps_values: tuple[float, ...], task: Task, p: Params,
               track_clean: bool = False) -> tuple[dict[float, tuple[float, np.ndarray, np.ndarray]], SimOut]:
    """Run every (eps, c, seed) row at once; per eps pick c on the tuning seeds.

    Returns eps -> (chosen c, excess on evaluation seeds (seeds,), checkpoints of those rows
    (seeds, K, d)) and the raw simulator output.
    """
    grid = method_grid(method, p)
    streams = [(s, 1) for s in range(p.seed, p.seed + p.n_tune_seeds)] + [(s, 0) for s in p.seed_list()]
    rows = list(itertools.product(range(len(eps_values)), range(len(grid)), range(len(streams))))
    e_idx, c_idx, s_idx = (np.array(v) for v in zip(*rows))
    sig = np.array([method_sigma(method, eps_values[e], p, n) for e in e_idx])
    out = simulate(method, n, [stream_rng(*s) for s in streams], s_idx, np.array(grid)[c_idx], sig, task,
                   p.m, p.D, checkpoint_rounds(n * p.M // p.m), track_clean)
    shape = (len(eps_values), len(grid), len(streams))
    x_out, ckpt = out.x_out.reshape(*shape, -1), out.ckpt.reshape(*shape, *out.ckpt.shape[1:])
    k = p.n_tune_seeds
    chosen = {}
    for e, eps in enumerate(eps_values):
        tune = task.excess(x_out[e, :, :k].reshape(-1, x_out.shape[-1])).reshape(len(grid), k)
        # geometric mean: one bad tuning seed should not decide the step size
        best = int(np.argmin(np.log(np.maximum(tune, 1e-12)).mean(1)))
        chosen[eps] = (grid[best], task.excess(x_out[e, best, k:]), ckpt[e, best, k:])
    return chosen, out


def eval_rows(out: SimOut, values: np.ndarray, p: Params, eps_values: tuple[float, ...]) -> np.ndarray:
    """A tracked per-row quantity (rows ordered eps, c, stream) at eps_claim, worst over the step grid,
    on the evaluation streams: shape (seeds,)."""
    per = values.reshape(len(eps_values), -1, p.n_tune_seeds + p.seeds)
    return per[eps_values.index(p.eps_claim), :, p.n_tune_seeds:].max(0)


def run(params: Params) -> Results:
    """Run the whole protocol: tuned grid over methods and n, heterogeneous run, noise and accounting checks."""
    runtime.limit_threads()
    p = params
    res = Results(p)
    task = make_task(np.random.default_rng(np.random.SeedSequence((p.seed, 3))), p.M, p.d, p.w_star_norm, 0.0,
                     p.n_test)
    res.trivial = float(task.excess(np.zeros((1, p.d)))[0])
    res.curve_n = min(p.n_list, key=lambda n: abs(n - 1000))
    res.curve_rounds = checkpoint_rounds(res.curve_n * p.M // p.m)
    from tqdm import tqdm

    jobs = list(itertools.product(p.methods, p.n_list))
    for method, n in tqdm(jobs, desc="methods x n", disable=None, leave=False):
        eps_values = p.eps_list if method in PRIVATE else (p.eps_claim,)
        track = method == "nc" and n == p.n_claim
        chosen, out = tuned_grid(method, n, eps_values, task, p, track_clean=track)
        res.clipped += out.clipped
        if track:
            res.identity_err = eval_rows(out, out.identity_err, p, eps_values)
            # the noise of every release, scaled to the claim's sigma (it is the same for every step size)
            res.release_rms = eval_rows(out, out.release_rms, p, eps_values)
        for eps in p.eps_list:
            c, ex, ck = chosen.get(eps, chosen[p.eps_claim])
            key = (method, n, eps)
            res.chosen_c[key], res.excess[key] = c, ex
            res.sigma[key] = method_sigma(method, eps, p, n)
            res.dist[key] = np.linalg.norm(ck[:, -1] - task.w_opt, axis=1)  # last checkpoint = round T = output
            if n == res.curve_n and eps == p.eps_claim:
                res.curves[method] = task.excess(ck[0])
    het = make_task(np.random.default_rng(np.random.SeedSequence((p.seed, 4))), p.M, p.d, p.w_star_norm,
                    p.hetero_zeta, p.n_test)
    res.hetero_trivial = float(het.excess(np.zeros((1, p.d)))[0])
    for method in NEEDED:
        chosen, out = tuned_grid(method, p.n_claim, (p.eps_claim,), het, p)
        res.hetero[method], res.clipped = chosen[p.eps_claim][1], res.clipped + out.clipped
        res.hetero_c[method] = chosen[p.eps_claim][0]
    T0 = p.noise_epochs * p.M // p.m
    dev, growth = [], []
    for j, s in enumerate(p.seed_list()):
        v_nc, v_naive = noise_variance(stream_rng(s, 2), p.M, p.m, p.d, T0, p.noise_mc_draws)
        ts = np.array([T0 // 4, T0 // 2, T0]) - 1
        dev.append(float(np.abs(v_nc[ts] * p.m**2 / p.M - 1).max()))
        growth.append(float(v_naive[T0 - 1] / v_naive[T0 // 4 - 1]))
        if j == 0:
            res.var_nc, res.var_naive = v_nc, v_naive
    res.noise_dev_nc, res.noise_growth_naive = np.array(dev), np.array(growth)
    res.accounting = accounting_table(p)
    return res


def accounting_table(p: Params) -> list[dict[str, float]]:
    """Per (n, eps): the multiplier the run uses, opacus' RDP epsilon of it and the optimal order, the
    classical-conversion epsilon on the same orders, and the closed-form zCDP and RDP multipliers."""
    orders = np.array(rdp_orders())
    table = []
    for n, eps in itertools.product(p.n_list, p.eps_list):
        z = noise_multiplier(eps, p.delta, n, p.calibration)
        eps_rdp, order = rdp_spent(z, n, p.delta)
        classical = float(np.min(n * orders / (2 * z * z) + math.log(1 / p.delta) / (orders - 1)))
        table.append({"n": n, "eps": eps, "z": z, "eps_rdp": eps_rdp, "order": order, "eps_classical": classical,
                      "z_zcdp": noise_multiplier(eps, p.delta, n, "zcdp"),
                      "z_rdp": noise_multiplier(eps, p.delta, n, "rdp")})
    return table


# --------------------------------------------------------------------------- claims


def best_baseline(excess: dict[str, np.ndarray]) -> str:
    """The baseline (naive or DP-FedSGD) with the lower mean excess."""
    return min(BASELINES, key=lambda k: float(np.mean(excess[k])))


def ratios(excess: dict[str, np.ndarray], trivial: float) -> dict[str, np.ndarray]:
    """Per seed: NC, the untrained x = 0 and naive over the best baseline; the best baseline over F(0) - F*."""
    best = excess[best_baseline(excess)]
    return {"nc": excess["nc"] / best, "untrained": trivial / best, "naive": excess["naive"] / best,
            "gate": best / trivial}


def per_seed_slopes(res: Results, method: str, values: dict | None = None, eps: float | None = None) -> np.ndarray:
    """Per evaluation seed, the slope of log excess (or of ``values``, e.g. the distances) against log n."""
    p = res.params
    values = res.excess if values is None else values
    eps = p.eps_claim if eps is None else eps
    ex = np.stack([values[(method, n, eps)] for n in p.n_list])
    return np.array([log_slope(np.array(p.n_list), ex[:, j]) for j in range(ex.shape[1])])


def release_epsilon(res: Results) -> np.ndarray:
    """Per evaluation seed: opacus' epsilon of n_claim releases with the noise NC's releases carried,
    over the target epsilon (noise measured as sum of messages minus clean increments)."""
    p = res.params
    sens = 2.0 * increment_bound(p.D)
    return np.array([rdp_spent(r / sens, p.n_claim, p.delta)[0] / p.eps_claim for r in res.release_rms])


def claim_values(res: Results) -> dict[str, Any]:
    """Every claim's value (one per evaluation seed, or one for an exact claim) and every control's."""
    p = res.params
    homo = ratios({k: res.excess[(k, p.n_claim, p.eps_claim)] for k in NEEDED}, res.trivial)
    het = ratios(res.hetero, res.hetero_trivial)
    nc_slope, fed_slope = per_seed_slopes(res, "nc"), per_seed_slopes(res, "dpfedsgd")
    naive_slope, flat = per_seed_slopes(res, "naive"), np.zeros(p.seeds)
    low = res.excess[("nc", min(p.n_list), p.eps_claim)] / res.trivial
    return {
        "nc-beats-baselines": homo["nc"], "nc-beats-baselines@untrained": homo["untrained"],
        "nc-beats-baselines@no-cancellation": homo["naive"],
        "nc-slope": nc_slope, "nc-slope@untrained": flat, "nc-slope@no-cancellation": naive_slope,
        "rate-gap": nc_slope - fed_slope, "rate-gap@untrained": flat - fed_slope,
        "rate-gap@no-cancellation": naive_slope - fed_slope,
        "fedsgd-slope": fed_slope, "fedsgd-slope@untrained": flat, "fedsgd-slope@no-cancellation": naive_slope,
        "hetero-nc-wins": het["nc"], "hetero-nc-wins@untrained": het["untrained"],
        "hetero-nc-wins@no-cancellation": het["naive"],
        "baselines-learn": homo["gate"], "hetero-baselines-learn": het["gate"], "nc-off-ceiling": low,
        "release-noise": [float(x) for x in release_epsilon(res)],
        "accounting": float(max(abs(r["eps_rdp"] / r["eps"] - 0.85) for r in res.accounting)),
        "accounting-order": float(max(r["order"] for r in res.accounting)),
        "noise-flat": res.noise_dev_nc, "naive-noise-grows": np.abs(res.noise_growth_naive - 4.0),
        "cancel-identity": [float(x) for x in res.identity_err], "no-clipping": float(res.clipped),
    }


def metrics(res: Results) -> dict[str, Any]:
    """Small JSON-able summary: mean excess and chosen c per (method, n, eps), F(0) - F*, the baselines'
    fraction of it per eps, slopes, the measured release noise, accounting."""
    p = res.params
    key = lambda k: f"{k[0]}|n={k[1]}|eps={k[2]:g}"  # noqa: E731
    gate = {f"eps={e:g}": float(np.mean(ratios({k: res.excess[(k, p.n_claim, e)] for k in NEEDED},
                                               res.trivial)["gate"])) for e in p.eps_list}
    sens = 2.0 * increment_bound(p.D)
    return {
        "excess_mean": {key(k): float(np.mean(v)) for k, v in res.excess.items()},
        "chosen_c": {key(k): v for k, v in res.chosen_c.items()},
        "trivial_excess": res.trivial, "hetero_trivial_excess": res.hetero_trivial,
        "best_baseline_over_trivial": gate,
        "hetero_excess_mean": {k: float(np.mean(v)) for k, v in res.hetero.items()},
        "hetero_chosen_c": res.hetero_c,
        "slope_mean": {f"{k}|eps={e:g}": float(np.mean(per_seed_slopes(res, k, eps=e)))
                       for k in p.methods for e in (p.eps_list if k in PRIVATE else (p.eps_claim,))},
        "dist_slope_mean": {k: float(np.mean(per_seed_slopes(res, k, res.dist))) for k in p.methods},
        "release_rms_over_sigma": float(np.mean(res.release_rms) / (sens * noise_multiplier(
            p.eps_claim, p.delta, p.n_claim, p.calibration))),
        "chosen_c_on_edge": [key(k) for k in chosen_on_edge(res)],
        "accounting": res.accounting, "clipped_increments": res.clipped,
    }


def chosen_on_edge(res: Results) -> list[tuple[str, int, float]]:
    """The (method, n, eps) whose tuned step size sits on an edge of its grid (the grid was too narrow)."""
    p = res.params
    return [k for k, c in res.chosen_c.items() if c in (min(method_grid(k[0], p)), max(method_grid(k[0], p)))]


def chosen_c_table(res: Results) -> pd.DataFrame:
    """The tuned step-size constant per method (rows) and n (columns) at eps_claim, with its grid's range."""
    p = res.params
    rows = {k: {n: res.chosen_c[(k, n, p.eps_claim)] for n in p.n_list} for k in p.methods}
    table = pd.DataFrame(rows).T.rename_axis(index="method", columns="n")
    table["grid"] = [f"{min(method_grid(k, p)):g} ... {max(method_grid(k, p)):g} ({len(method_grid(k, p))} values)"
                     for k in p.methods]
    return table


def summary_table(res: Results, eps: float | None = None) -> pd.DataFrame:
    """Mean excess (and its standard error) per method and n at ``eps`` (default eps_claim), its fraction
    of the untrained model's F(0) - F*, the tuned c, the noise std and the distance to the optimum."""
    p = res.params
    eps = p.eps_claim if eps is None else eps
    rows = [{"method": k, "n": n, "c": res.chosen_c[(k, n, eps)], "sigma": res.sigma[(k, n, eps)],
             "excess mean": float(np.mean(v := res.excess[(k, n, eps)])),
             "excess SE": float(np.std(v, ddof=1) / math.sqrt(len(v))),
             "excess / (F(0) - F*)": float(np.mean(v)) / res.trivial,
             "distance to w_opt": float(np.mean(res.dist[(k, n, eps)]))}
            for k in p.methods for n in p.n_list]
    return pd.DataFrame(rows).set_index(["method", "n"])


def accounting_frame(res: Results) -> pd.DataFrame:
    """The accountant table as a DataFrame, one row per (n, eps)."""
    return pd.DataFrame(res.accounting).set_index(["n", "eps"])
