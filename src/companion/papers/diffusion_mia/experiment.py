"""The experiment: train the digits DDPM per seed, run every attack at its operating point and at the
official (t, k), and the per-seed values of every claim and control.

Every attack's rows carry (attack, t, n); :func:`auc_wide` pivots them to one AUC column per label:
the baselines by name (``Loss``, ``PIA``, ..., ``<name>-official`` at the official t, k, and the
NN-scored ``NN-<name>-official`` and ``NN-SecMI``), the ReDiffuse family as ``RD t<t> n<n>``,
``AvgDist t<t> n<n>``, their NN-scored maps ``NN-RD t<t> n<n>`` / ``NN-AvgDist t<t> n<n>`` and their
shuffled-label twins ``RD-shuffled`` / ``AvgDist-shuffled`` (the same scores, the member labels permuted).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.datasets import load_digits

from companion import runtime
from companion.papers.diffusion_mia import BASELINES, Params
from companion.papers.diffusion_mia import attacks as atk
from companion.papers.diffusion_mia import nn_scorer
from companion.papers.diffusion_mia.ddpm import Diffusion, EpsFn, mlp_eps_fn, train_ddpm

OFFICIAL = tuple(f"{b}-official" for b in BASELINES)
# the baselines scored by the NN scorer: every one-map attack at the official point, SecMI-stat at its own
NN_OFFICIAL = ("NN-Loss-official", "NN-PIA-official", "NN-PIAN-official", "NN-SecMI-official")
NN_OWN = ("NN-SecMI",)
NAMED = BASELINES + OFFICIAL + NN_OFFICIAL + NN_OWN
SHORT = {"ReDiffuse": "RD", "ReDiffuse-shuffled": "RD-shuffled", "NN-ReDiffuse": "NN-RD"}
# the statistical rows whose "in every seed" twin is judged on their worst seed
EVERY_SEED = ("averaging-gain", "blackbox-auc", "blackbox-asr")
# relabellings averaged in the shuffled-label control (its per-seed value is a mean over them)
SHUFFLES = 10


def effective(params: Params) -> Params:
    """The parameters a run uses: ``smoke`` shrinks the ``paper`` pipeline to 8 + 8 images and one seed."""
    if params.preset == "paper" and params.smoke:
        return replace(params, seeds=1, n_members=8)
    return params


# ----------------------------------------------------------------------------- data and models

def digits_split(n: int, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """Members (first n of a seeded permutation) and non-members (next n) of the 8x8 digits in [-1, 1]."""
    x = load_digits().data.astype(np.float32) / 16.0 * 2.0 - 1.0
    perm = rng.permutation(len(x))
    return torch.from_numpy(x[perm[:n]]), torch.from_numpy(x[perm[n:2 * n]]), perm[:2 * n]


def attack_suite(eps_fn: EpsFn, diffusion: Diffusion, mem: torch.Tensor, non: torch.Tensor, params: Params,
                 gen: torch.Generator, config: str, seed: int, keep_example: bool = False) -> dict[str, Any]:
    """Every attack on members + non-members: metric rows, evaluations and seconds per image, examples.

    On the ``main`` config the NN scorer also scores ReDiffuse's maps (n = 1, 10, AvgDist) at the claims'
    point and at the official one, every one-map baseline at the official point and SecMI-stat at its own."""
    x = torch.cat([mem, non])
    n = len(mem)
    # fixed relabellings per seed: the shuffled-label control scores the same outputs against them
    perms = [np.random.default_rng([seed, 1, i]).permutation(len(x)) for i in range(SHUFFLES)]
    rows, cost = [], {}
    example: dict[str, Any] = {}

    def add_metrics(attack: str, metrics: tuple[float, float, float], t: int, nq: int) -> None:
        auc, asr, tpr1 = metrics
        rows.append({"seed": seed, "config": config, "attack": attack, "t": t, "n": nq,
                     "auc": auc, "asr": asr, "tpr1": tpr1})

    def add(attack: str, scores: np.ndarray, t: int, nq: int = 0) -> None:
        add_metrics(attack, atk.mia_metrics(scores[:n], scores[n:]), t, nq)

    def timed(name: str, fn):
        counter = atk.CountingEps(eps_fn)
        start = time.perf_counter()
        out = fn(counter)
        cost[name] = {"evals_per_image": counter.rows / len(x), "seconds_per_image": (time.perf_counter() - start) / len(x)}
        return out

    nmax = max(params.n_queries)
    nn_on = config == "main"  # the NN scorer's fits only on the model the claims read them from
    points = set(zip(params.sweep_t, params.sweep_k)) | {(params.attack_t, params.attack_k),
                                                         (params.official_t, params.official_k)}
    for t, k in sorted(points):
        outs = timed(f"ReDiffuse t{t} n{nmax}",
                     lambda c: atk.query_variations(atk.variation_api(c, diffusion, t, k, gen), x, nmax))
        families = {"ReDiffuse": atk.rediffuse_scores(x, outs, params.n_queries, params.distance),
                    "AvgDist": atk.avg_distance_scores(x, outs, params.n_queries, params.distance)}
        for name, by_n in families.items():
            for nq, s in by_n.items():
                add(name, s, t, nq)
            if (t, k) == (params.attack_t, params.attack_k):
                s = by_n[n_ablation(params)]
                null = np.mean([atk.mia_metrics(s[q][:n], s[q][n:]) for q in perms], axis=0)
                add_metrics(f"{name}-shuffled", tuple(null), t, n_ablation(params))
        if (t, k) == (params.attack_t, params.attack_k) and keep_example:
            example = rediffuse_example(x, outs, n, params.distance)
        if nn_on and (t, k) in {(params.attack_t, params.attack_k), (params.official_t, params.official_k)}:
            maps = {("NN-ReDiffuse", 1): x - outs[0], ("NN-ReDiffuse", 10): x - outs[:10].mean(dim=0),
                    ("NN-AvgDist", 10): (x - outs[:10]).abs().mean(dim=0)}
            for (name, nq), m in maps.items():
                add_metrics(name, nn_scorer.nn_metrics(m, n, seed, steps=params.nn_steps), t, nq)
    ot = params.official_t

    def scored(err: torch.Tensor, p: int) -> tuple[np.ndarray, torch.Tensor]:
        return -atk.power_sum(err, p), err

    def secmi_stat(c: EpsFn) -> tuple[np.ndarray, torch.Tensor]:
        x_hat, x_t = atk.secmi_pair(c, diffusion, x, params.secmi_t, params.secmi_k)
        return scored(x_hat - x_t, 2)

    # name: (t, n, attack -> (threshold score, per-pixel map or None)); the official main() passes one
    # interval (t = 200) to every attacker; its SecMI makes one inversion and one denoising step of that size
    runs = {
        "Loss": (params.loss_t, 1, lambda c: (atk.attack_loss(c, diffusion, x, params.loss_t, 1, gen), None)),
        "Loss-avg": (params.loss_avg_t, params.loss_avg_draws, lambda c: (
            atk.attack_loss(c, diffusion, x, params.loss_avg_t, params.loss_avg_draws, gen), None)),
        "PIA": (params.pia_t, 1, lambda c: scored(atk.pia_error(c, diffusion, x, params.pia_t), 4)),
        "PIAN": (params.pia_t, 1, lambda c: scored(atk.pia_error(c, diffusion, x, params.pia_t, True), 4)),
        "SecMI": (params.secmi_t, 1, secmi_stat),
        "Loss-official": (ot, 1, lambda c: scored(atk.loss_error(c, diffusion, x, ot, gen), 2)),
        "Loss-avg-official": (ot, params.loss_avg_draws, lambda c: (
            atk.attack_loss(c, diffusion, x, ot, params.loss_avg_draws, gen), None)),
        "PIA-official": (ot, 1, lambda c: scored(atk.pia_error(c, diffusion, x, ot), 4)),
        "PIAN-official": (ot, 1, lambda c: scored(atk.pia_error(c, diffusion, x, ot, True), 4)),
        "SecMI-official": (ot, 1, lambda c: scored(atk.secmi_official_error(c, diffusion, x, ot), 2)),
    }
    scores = {}
    for name, (t, nq, fn) in runs.items():
        scores[name], err = timed(name, fn)
        add(name, scores[name], t, nq)
        if nn_on and f"NN-{name}" in NN_OFFICIAL + NN_OWN:
            add_metrics(f"NN-{name}", nn_scorer.nn_metrics(err, n, seed, steps=params.nn_steps), t, 1)
    if keep_example:
        example["scores"] = {name: (s[:n], s[n:]) for name, s in scores.items()}
    return {"rows": rows, "cost": cost, "example": example}


def rediffuse_example(x: torch.Tensor, outs: torch.Tensor, n: int, kind: str) -> dict[str, Any]:
    """What the figures show for one seed: 4 + 4 images, one API output, the n = 10 average, distances."""
    pick = [0, 1, 2, 3, n, n + 1, n + 2, n + 3]
    avg10 = outs[:10].mean(dim=0)
    d = {nq: atk.distance(x, outs[:nq].mean(dim=0), kind) for nq in (1, 10)}
    dist_avg = np.mean([atk.distance(x, o, kind) for o in outs[:10]], axis=0)
    return {"x": x[pick].numpy(), "one": outs[0][pick].numpy(), "avg10": avg10[pick].numpy(),
            "d1": d[1][pick], "d10": d[10][pick], "n_members": n,
            "dist": {"n = 1": d[1], "n = 10": d[10], "avg of 10 distances": dist_avg},
            "rd_scores": {nq: (-d[nq][:n], -d[nq][n:]) for nq in (1, 10)}}


def run_seed(params: Params, seed: int) -> dict[str, Any]:
    """One seed: split, train (or load) the model, run every attack; also the ablation model (``full``)."""
    device = runtime.resolve_device(params.device)
    diffusion = Diffusion(params.T, params.beta_1, params.beta_T)
    rng, gen = runtime.generators(seed)
    out: dict[str, Any] = {"seed": seed}
    if params.preset == "paper":
        from companion.papers.diffusion_mia import paper_preset

        eps_fn, n_params = paper_preset.load_unet_eps(params.model_path, device)
        mem, non = paper_preset.sample_members(params.data_path, params.n_members, rng)
        out["train"] = {"final_loss": float("nan"), "train_cpu_s": 0.0, "n_params": n_params}
    else:
        mem, non, idx = digits_split(params.n_members, rng)
        out["split"] = idx
        model, info = train_ddpm(mem, diffusion, hidden=params.hidden, blocks=params.blocks, steps=params.train_steps,
                                 batch=params.batch, lr=params.lr, seed=seed)
        out["train"] = {**info, "n_params": sum(p.numel() for p in model.parameters())}
        eps_fn = mlp_eps_fn(model)
    start = time.process_time()
    suite = attack_suite(eps_fn, diffusion, mem, non, params, gen, "main", seed, keep_example=True)
    out["attack_cpu_s"] = time.process_time() - start
    out.update(rows=suite["rows"], cost=suite["cost"], example=suite["example"])
    if params.ablation_members and params.preset != "paper":
        rng2, gen2 = runtime.generators(seed + 7919)
        mem2, non2, _ = digits_split(params.ablation_members, rng2)
        model2, info2 = train_ddpm(mem2, diffusion, hidden=params.ablation_hidden, blocks=params.blocks,
                                   steps=params.ablation_steps, batch=params.batch, lr=params.lr, seed=seed + 7919)
        big = attack_suite(mlp_eps_fn(model2), diffusion, mem2, non2, params, gen2, "ablation", seed)
        out["rows"] += big["rows"]
        out["train_ablation"] = info2
    return out


@dataclass
class Results:
    """Every seed's attack metrics, costs, training facts and the base seed's examples."""

    params: Params
    table: pd.DataFrame
    cost: pd.DataFrame
    training: pd.DataFrame
    example: dict[str, Any]
    splits: dict[int, np.ndarray]


def run(params: Params) -> Results:
    """Run every seed (in worker processes when the run has more than one core) and collect the tables."""
    p = effective(params)
    # here, not in run_seed: pool workers already run one thread each, and the run's thread count
    # there would oversubscribe the cores (measured: 3.6x the CPU time at 2 threads)
    runtime.limit_threads()
    outs = runtime.parallel_map(run_seed, [(p, s) for s in p.seed_list()])
    table = pd.DataFrame([r for o in outs for r in o["rows"]])
    cost = pd.DataFrame([{"seed": o["seed"], "attack": a, **v} for o in outs for a, v in o["cost"].items()])
    training = pd.DataFrame([{"seed": o["seed"], **o["train"], "attack_cpu_s": o["attack_cpu_s"]} for o in outs])
    return Results(p, table, cost, training, outs[0]["example"], {o["seed"]: o.get("split") for o in outs})


def ablation_config(params: Params) -> str:
    """The model the average-of-distances claim is measured on: the ablation model when trained, else the main one."""
    return "ablation" if params.ablation_members and params.preset != "paper" else "main"


def n_ablation(params: Params) -> int:
    """The n of the average-of-distances claim: 20, or the largest n of the run when 20 is not in it."""
    return 20 if 20 in params.n_queries else max(params.n_queries)


def label(attack: str, t: int, n: int) -> str:
    """The column of one row in :func:`auc_wide`: a baseline by name, the ReDiffuse family as ``<short> t<t> n<n>``."""
    return attack if attack in NAMED else f"{SHORT.get(attack, attack)} t{t} n{n}"


def auc_wide(results: Results, config: str = "main", value: str = "auc") -> pd.DataFrame:
    """``value`` (AUC by default) per seed (rows) and attack label (columns, see :func:`label`)."""
    t = results.table.query("config == @config").copy()
    t["label"] = [label(a, tt, n) for a, tt, n in zip(t["attack"], t["t"], t["n"])]
    return t.pivot_table(index="seed", columns="label", values=value)


def claim_values(results: Results) -> dict[str, float | list[float]]:
    """Per-seed values of every claim and control (``claims`` judges an ``-every`` row on its worst seed)."""
    p = results.params
    w, asr = auc_wide(results), auc_wide(results, value="asr")
    at, ot = f"t{p.attack_t}", f"t{p.official_t}"
    # the attack each claim is about, and in its place for each control
    rd = {"": w[f"RD {at} n10"], "n1": w[f"RD {at} n1"], "avg-distances": w[f"AvgDist {at} n10"]}
    rd_asr = {"": asr[f"RD {at} n10"], "n1": asr[f"RD {at} n1"], "avg-distances": asr[f"AvgDist {at} n10"]}
    rd_off = {"": w[f"RD {ot} n10"], "n1": w[f"RD {ot} n1"]}

    def put(cid: str, control: str, values: pd.Series) -> None:
        out[f"{cid}@{control}" if control else cid] = list(values)

    out: dict[str, float | list[float]] = {}
    for c in ("", "avg-distances"):
        put("averaging-gain", c, rd[c] - rd["n1"])
    for c in ("", "n1", "avg-distances"):
        put("blackbox-auc", c, rd[c])
        put("rd-vs-loss", c, rd[c] - w["Loss"])
        put("rd-vs-loss-avg", c, rd[c] - w["Loss-avg"])
        put("rd-vs-pia", c, rd[c] - w["PIA"])
        put("blackbox-asr", c, rd_asr[c])
    for c in ("", "n1"):
        put("rd-vs-secmi", c, rd[c] - w["SecMI"])
        put("rd-vs-pia-official", c, rd_off[c] - w["PIA-official"])
        put("rd-vs-secmi-official", c, rd_off[c] - w["SecMI-official"])
    nn_rd = {"": w[f"NN-RD {ot} n10"], "n1": w[f"NN-RD {ot} n1"], "avg-distances": w[f"NN-AvgDist {ot} n10"]}
    nn_own = {"": w[f"NN-RD {at} n10"], "n1": w[f"NN-RD {at} n1"], "avg-distances": w[f"NN-AvgDist {at} n10"]}
    for c in ("", "n1", "avg-distances"):
        put("rd-vs-loss-nn", c, nn_rd[c] - w["NN-Loss-official"])
        put("rd-vs-pia-nn", c, nn_rd[c] - w["NN-PIA-official"])
        put("rd-vs-secmi-nn", c, nn_rd[c] - w["NN-SecMI-official"])
        put("rd-vs-secmi-stat-nn", c, nn_own[c] - w["NN-SecMI"])
    a, n = auc_wide(results, ablation_config(p)), n_ablation(p)
    put("outputs-vs-distances", "", a[f"RD {at} n{n}"] - a[f"AvgDist {at} n{n}"])
    put("outputs-vs-distances", "shuffled-labels", a[f"RD-shuffled {at} n{n}"] - a[f"AvgDist-shuffled {at} n{n}"])
    for key in [k for k in out if k.split("@")[0] in EVERY_SEED]:
        cid, at_, c = key.partition("@")
        out[f"{cid}-every{at_}{c}"] = out[key]
    return out


# ----------------------------------------------------------------------------- tables

def summary(results: Results, config: str = "main", official: bool = False) -> pd.DataFrame:
    """Mean (sd) AUC, ASR and TPR@1%FPR over seeds of every attack at its own operating point (ReDiffuse at
    the claims' t, n = 1, 10, max; SecMI-stat and ReDiffuse also NN-scored), or with ``official`` every attack at
    the official t, k, threshold and NN-scored."""
    p = results.params
    t = results.table.query("config == @config")
    rt, base = (p.official_t, OFFICIAL + NN_OFFICIAL) if official else (p.attack_t, BASELINES + NN_OWN)
    family = ("ReDiffuse", "AvgDist", "NN-ReDiffuse", "NN-AvgDist")
    keep = ((t["attack"].isin(base))
            | (t["attack"].isin(family[2:]) & (t["t"] == rt))
            | ((t["attack"] == "ReDiffuse") & (t["t"] == rt) & t["n"].isin([1, 10, max(p.n_queries)]))
            | ((t["attack"] == "AvgDist") & (t["t"] == rt) & t["n"].isin([10, max(p.n_queries)])))
    t = t[keep].copy()
    t["attack"] = [f"{a} (t={tt}, n={n})" if a in family else f"{a} (t={tt})"
                   for a, tt, n in zip(t["attack"], t["t"], t["n"])]
    g = t.groupby("attack", sort=False)[["auc", "asr", "tpr1"]]
    mean, sd = g.mean(), g.std().fillna(0.0)
    out = mean.round(3).astype(str) + " ± " + sd.round(3).astype(str)
    out.columns = ["AUC", "ASR", "TPR@1%FPR"]
    return out


def cost_table(results: Results) -> pd.DataFrame:
    """Network evaluations and milliseconds per image of each attack (median over seeds)."""
    c = results.cost.groupby("attack", sort=False)[["evals_per_image", "seconds_per_image"]].median()
    c["ms_per_image"] = 1e3 * c.pop("seconds_per_image")
    return c.round({"evals_per_image": 1, "ms_per_image": 4})


def secmi_margin(results: Results) -> float:
    """Mean over seeds of AUC(SecMI) - AUC(ReDiffuse, n = 10) at the operating point (positive: SecMI wins)."""
    w = auc_wide(results)
    return float((w["SecMI"] - w[f"RD t{results.params.attack_t} n10"]).mean())


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary: mean AUC of each attack, the n-curve, costs, training facts."""
    p = results.params
    w = auc_wide(results)
    curve = {f"t{t}": {int(n): round(float(w[f"RD t{t} n{n}"].mean()), 4) for n in p.n_queries}
             for t in sorted(set(p.sweep_t) | {p.attack_t, p.official_t})}
    out = {
        "mean_auc": {k: round(float(w[k].mean()), 4) for k in (*BASELINES, f"RD t{p.attack_t} n1",
                                                              f"RD t{p.attack_t} n10", f"AvgDist t{p.attack_t} n10")},
        "official_mean_auc": {k: round(float(w[k].mean()), 4) for k in (*OFFICIAL, f"RD t{p.official_t} n1",
                                                                       f"RD t{p.official_t} n10",
                                                                       f"AvgDist t{p.official_t} n10")},
        "nn_official_mean_auc": {k: round(float(w[k].mean()), 4) for k in (*NN_OFFICIAL, f"NN-RD t{p.official_t} n1",
                                                                          f"NN-RD t{p.official_t} n10",
                                                                          f"NN-AvgDist t{p.official_t} n10")},
        "nn_own_mean_auc": {k: round(float(w[k].mean()), 4) for k in (*NN_OWN, f"NN-RD t{p.attack_t} n1",
                                                                     f"NN-RD t{p.attack_t} n10",
                                                                     f"NN-AvgDist t{p.attack_t} n10")},
        "n_curve_auc": curve,
        "secmi_minus_rediffuse_auc": round(secmi_margin(results), 4),
        "evals_per_image": {k: float(v) for k, v in cost_table(results)["evals_per_image"].items()},
        "final_train_loss": round(float(results.training["final_loss"].mean()), 4),
        "n_params": int(results.training["n_params"].iloc[0]),
        # CPU seconds, reported only (never a claim)
        "train_cpu_s": round(float(results.training["train_cpu_s"].mean()), 2),
        "attack_cpu_s": round(float(results.training["attack_cpu_s"].mean()), 3),
    }
    if "ablation" in set(results.table["config"]):
        a = auc_wide(results, "ablation")
        out["ablation_mean_auc"] = {k: round(float(a[k].mean()), 4) for k in
                                    (*BASELINES, f"RD t{p.attack_t} n20", f"AvgDist t{p.attack_t} n20")}
    return out

