"""Towards Black-Box Membership Inference Attack for Diffusion Models (Li, Dong, He, Zhang; ICML 2025).

arXiv: https://arxiv.org/abs/2405.20771 (v5, the ICML version); official code:
lijingwei0502/diffusion_mia (no licence file: read, never copied).

Reproduced at small scale: ReDiffuse, the black-box attack that queries an image-to-image
variation API n times, averages the outputs and thresholds the distance to the input, against the
grey/white-box baselines Loss, PIA, PIAN and SecMI-stat, on a DDPM epsilon-predictor (a residual
MLP) trained to memorise 100 of scikit-learn's 8x8 digits; the n-curve; the average-of-distances
ablation (``full``); network evaluations and time per image per attack.

Written by hand, because no library implements them: the attacks and their metrics (the ROC comes
from scikit-learn), the epsilon-MLP and its training loop. The noise schedule, the forward noising
and the DDIM sampling steps of the variation API are ``diffusers``' schedulers (``DDPMScheduler``,
``DDIMScheduler``); the tests check them against the formulas written out in float64.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from sklearn.datasets import load_digits
from sklearn.metrics import roc_curve

from companion import claims, runtime
from companion.claims import Claim, Verdict
from companion.papers.diffusion_mia import attacks as atk
from companion.papers.diffusion_mia.ddpm import Diffusion, EpsFn, check_stride, mlp_eps_fn, train_ddpm
from companion.params import BaseParams, ParamError, local_default, param, require_path
from companion.plotting import figure

SLUG = "diffusion-mia"
BASELINES = ("Loss", "Loss-avg", "PIA", "PIAN", "SecMI")
N_DIGITS = 1797
PAPER_PRESET = ("the paper's DDIM setting on real data: a local diffusers UNet2DModel (model_path) trained on the "
                "members of the official CIFAR-10 half split (data_path); t = 200, k = 100, n = 10; needs a GPU "
                "and a checkpoint that is not in this repository; smoke=true runs it on 8 + 8 images")


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the digits DDPM and the attacks; defaults are the quick preset."""

    seeds: int = param(10, lo=1, hi=64, help="number of seeds (split, model, attack noise)")
    n_members: int = param(100, lo=4, hi=25000, help="members (and as many non-members); digits: 50..800")
    hidden: int = param(128, lo=64, hi=512, help="width of the residual epsilon-MLP")
    blocks: int = param(3, lo=1, hi=6, help="residual blocks of the epsilon-MLP")
    train_steps: int = param(3000, lo=200, hi=50000, help="training steps (memorisation knob)")
    batch: int = param(128, lo=32, hi=512, help="training batch, drawn with replacement from the members")
    lr: float = param(1e-3, lo=1e-4, hi=3e-3, help="Adam learning rate (cosine decay to 0.1x)")
    T: int = param(1000, lo=100, hi=4000, help="diffusion steps")
    beta_1: float = param(1e-4, lo=1e-6, hi=1e-2, help="first beta of the linear schedule")
    beta_T: float = param(0.02, lo=1e-3, hi=0.1, help="last beta of the linear schedule")
    attack_t: int = param(100, lo=1, hi=3999, help="ReDiffuse noise step t at the claims' operating point")
    attack_k: int = param(50, lo=1, hi=3999, help="ReDiffuse DDIM stride k (divides t)")
    sweep_t: tuple[int, ...] = param((50, 100, 200), lo=1, hi=3999, help="t values of the n-curve")
    sweep_k: tuple[int, ...] = param((50, 50, 100), lo=1, hi=3999, help="the stride of each sweep_t")
    n_queries: tuple[int, ...] = param((1, 2, 5, 10, 20), lo=1, hi=100, help="API queries n to average (needs 1 and 10)")
    distance: str = param("l2", choices=atk.DISTANCES, help="ReDiffuse distance: l2, l1 or 1 - SSIM")
    loss_t: int = param(200, lo=1, hi=3999, help="Loss attack step (one noise draw)")
    loss_avg_t: int = param(100, lo=1, hi=3999, help="averaged Loss attack step")
    loss_avg_draws: int = param(10, lo=1, hi=100, help="noise draws of the averaged Loss attack")
    pia_t: int = param(200, lo=1, hi=3999, help="PIA / PIAN step")
    secmi_t: int = param(100, lo=1, hi=3999, help="SecMI step t_sec")
    secmi_k: int = param(10, lo=1, hi=3999, help="SecMI DDIM stride k_sec")
    ablation_members: int = param(0, lo=0, hi=800, help="second, more memorising model for the "
                                  "average-of-distances claim: its members (0 = off)")
    ablation_hidden: int = param(256, lo=64, hi=512, help="its MLP width")
    ablation_steps: int = param(8000, lo=200, hi=50000, help="its training steps")
    model_path: str = param(local_default(SLUG, "unet"), help="paper: a diffusers UNet2DModel folder (save_pretrained)")
    data_path: str = param(local_default(SLUG, "cifar10"), help="paper: cifar-10-batches-py/ and CIFAR10_train_ratio0.5.npz")
    smoke: bool = param(False, help="paper: the CIFAR pipeline on a tiny budget (8 + 8 images, 1 seed)")

    PRESETS = {
        "full": {"seeds": 8, "train_steps": 4000, "n_queries": (1, 2, 5, 10, 20, 50),
                 "ablation_members": 200, "ablation_hidden": 256, "ablation_steps": 8000},
        "paper": {"seeds": 3, "n_members": 1000, "attack_t": 200, "attack_k": 100, "sweep_t": (100, 200),
                  "sweep_k": (50, 100), "n_queries": (1, 2, 5, 10)},
    }

    def __post_init__(self) -> None:
        if len(self.sweep_t) != len(self.sweep_k):
            raise ParamError(f"parameter 'sweep_k': {len(self.sweep_k)} values for {len(self.sweep_t)} sweep_t; "
                             "allowed: one stride per sweep_t")
        pairs = [("attack_t", self.attack_t, "attack_k", self.attack_k),
                 ("secmi_t", self.secmi_t, "secmi_k", self.secmi_k),
                 *[("sweep_t", t, "sweep_k", k) for t, k in zip(self.sweep_t, self.sweep_k)]]
        for tn, t, kn, k in pairs:
            if not 0 < t < self.T or t % k or self.T % k:
                raise ParamError(f"parameter {kn!r}: {k} with {tn}={t}; allowed: a stride dividing {tn} and T={self.T}, "
                                 f"{tn} < T")
        if self.secmi_t + self.secmi_k >= self.T:
            raise ParamError(f"parameter 'secmi_t': {self.secmi_t}; allowed: secmi_t + secmi_k < T={self.T}")
        for name in ("loss_t", "loss_avg_t", "pia_t"):
            if getattr(self, name) >= self.T:
                raise ParamError(f"parameter {name!r}: {getattr(self, name)}; allowed: < T={self.T}")
        if not {1, 10} <= set(self.n_queries):
            raise ParamError(f"parameter 'n_queries': {list(self.n_queries)}; allowed: a list containing 1 and 10 "
                             "(the claims compare n = 10 with n = 1)")
        if self.ablation_members and 20 not in self.n_queries:
            raise ParamError(f"parameter 'n_queries': {list(self.n_queries)}; allowed with ablation_members > 0: "
                             "a list containing 20")
        if self.beta_T <= self.beta_1:
            raise ParamError(f"parameter 'beta_T': {self.beta_T}; allowed: > beta_1={self.beta_1}")
        if self.preset == "paper":
            require_path("model_path", self.model_path, "a diffusers UNet2DModel folder (config.json + weights, "
                         "from save_pretrained)", "dir")
            require_path("data_path", self.data_path, "a folder with cifar-10-batches-py/ and "
                         "CIFAR10_train_ratio0.5.npz", "dir")
        else:
            if not 50 <= self.n_members <= 800:
                raise ParamError(f"parameter 'n_members': {self.n_members}; allowed on the digits: int in [50, 800]")
            if 2 * self.ablation_members > N_DIGITS:
                raise ParamError(f"parameter 'ablation_members': {self.ablation_members}; allowed: <= 800")


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
    """Every attack on members + non-members: metric rows, evaluations and seconds per image, examples."""
    x = torch.cat([mem, non])
    n = len(mem)
    rows, cost = [], {}
    example: dict[str, Any] = {}

    def add(attack: str, scores: np.ndarray, t: int, nq: int = 0) -> None:
        auc, asr, tpr1 = atk.mia_metrics(scores[:n], scores[n:])
        rows.append({"seed": seed, "config": config, "attack": attack, "t": t, "n": nq,
                     "auc": auc, "asr": asr, "tpr1": tpr1})

    def timed(name: str, fn):
        counter = atk.CountingEps(eps_fn)
        start = time.perf_counter()
        out = fn(counter)
        cost[name] = {"evals_per_image": counter.rows / len(x), "seconds_per_image": (time.perf_counter() - start) / len(x)}
        return out

    nmax = max(params.n_queries)
    for t, k in sorted(set(zip(params.sweep_t, params.sweep_k)) | {(params.attack_t, params.attack_k)}):
        main = (t, k) == (params.attack_t, params.attack_k)
        outs = timed(f"ReDiffuse t{t} n{nmax}",
                     lambda c: atk.query_variations(atk.variation_api(c, diffusion, t, k, gen), x, nmax))
        for nq, s in atk.rediffuse_scores(x, outs, params.n_queries, params.distance).items():
            add("ReDiffuse", s, t, nq)
        if main:
            for nq, s in atk.avg_distance_scores(x, outs, params.n_queries, params.distance).items():
                add("AvgDist", s, t, nq)
            if keep_example:
                example = rediffuse_example(x, outs, n, params.distance)
    scores = {
        "Loss": timed("Loss", lambda c: atk.attack_loss(c, diffusion, x, params.loss_t, 1, gen)),
        "Loss-avg": timed("Loss-avg", lambda c: atk.attack_loss(c, diffusion, x, params.loss_avg_t,
                                                                params.loss_avg_draws, gen)),
        "PIA": timed("PIA", lambda c: atk.attack_pia(c, diffusion, x, params.pia_t)),
        "PIAN": timed("PIAN", lambda c: atk.attack_pia(c, diffusion, x, params.pia_t, normalize=True)),
        "SecMI": timed("SecMI", lambda c: atk.attack_secmi(c, diffusion, x, params.secmi_t, params.secmi_k)),
    }
    ts = {"Loss": params.loss_t, "Loss-avg": params.loss_avg_t, "PIA": params.pia_t, "PIAN": params.pia_t,
          "SecMI": params.secmi_t}
    for name, s in scores.items():
        add(name, s, ts[name], params.loss_avg_draws if name == "Loss-avg" else 1)
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
        from companion.papers.diffusion_mia import paper_cifar

        eps_fn, n_params = paper_cifar.load_unet_eps(params.model_path, device)
        mem, non = paper_cifar.sample_members(params.data_path, params.n_members, rng)
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


# ----------------------------------------------------------------------------- claims

PAPER = "ReDiffuse beats Loss, SecMI and PIA in AUC, ASR and TPR@1%FPR on DDIM (CIFAR-10/100, STL-10, Tiny-ImageNet), SD and DiT (arXiv v5 tables; numbers not transcribed here)"
CLAIMS = [
    Claim("averaging-gain", "averaging n = 10 API outputs raises ReDiffuse's AUC over a single query (n = 1) by "
          "at least 0.08 (mean over seeds)", "averaging the outputs is what makes the signal (Sec. 4, Algorithm 1)",
          0.08, ">="),
    Claim("averaging-gain-every", "AUC(n = 10) > AUC(n = 1) in every seed (the smallest per-seed gain)",
          "averaging the outputs is what makes the signal (Sec. 4, Algorithm 1)", 0.0, ">=", kind="exact"),
    Claim("blackbox-auc", "ReDiffuse (n = 10) AUC is at least 0.70 (mean over seeds)", PAPER, 0.70, ">="),
    Claim("blackbox-auc-every", "ReDiffuse (n = 10) AUC is at least 0.70 in every seed (the worst seed)", PAPER,
          0.70, ">=", kind="exact"),
    Claim("blackbox-asr-every", "ReDiffuse (n = 10) ASR is at least 0.65 in every seed (the worst seed)", PAPER,
          0.65, ">=", kind="exact"),
    Claim("rd-vs-loss", "ReDiffuse (n = 10) AUC minus Loss-attack AUC (t = 200, one draw, white-box) is at least "
          "0.05 (mean over seeds)", PAPER, 0.05, ">="),
    Claim("rd-vs-pia", "ReDiffuse (n = 10) AUC minus PIA AUC (t = 200, white-box) is at least -0.03 (mean over seeds)",
          PAPER, -0.03, ">="),
    Claim("rd-vs-secmi", "ReDiffuse (n = 10) AUC minus SecMI-stat AUC (white-box, 12 network evaluations) is at "
          "least 0 (mean over seeds; the spec expects this to fail at small scale)", PAPER, 0.0, ">="),
    Claim("outputs-vs-distances", "averaging 20 API outputs beats averaging the 20 distances by at least 0.01 AUC "
          "(mean over seeds; quick: the run's model, full: the more memorising N = 200, h = 256, 8000-step model)",
          "average the outputs, not the distances: the variance cancels only in the mean output (Sec. 4)",
          0.01, ">="),
]
EVERY_SEED = {"averaging-gain-every": "averaging-gain", "blackbox-auc-every": "blackbox-auc"}


def ablation_config(params: Params) -> str:
    """The model the average-of-distances claim is measured on: the ablation model when trained, else the main one."""
    return "ablation" if params.ablation_members and params.preset != "paper" else "main"


def n_ablation(params: Params) -> int:
    """The n of the average-of-distances claim: 20, or the largest n of the run when 20 is not in it."""
    return 20 if 20 in params.n_queries else max(params.n_queries)


def auc_wide(results: Results, config: str = "main") -> pd.DataFrame:
    """AUC per seed (rows) and attack label (columns): baselines by name, ReDiffuse as ``RD t<t> n<n>``."""
    t = results.table.query("config == @config").copy()
    t["label"] = [a if a in BASELINES else f"{'RD' if a == 'ReDiffuse' else a} t{tt} n{n}"
                  for a, tt, n in zip(t["attack"], t["t"], t["n"])]
    return t.pivot_table(index="seed", columns="label", values="auc")


def claim_values(results: Results) -> dict[str, float | list[float]]:
    """Per-seed values of the statistical claims and the one value (worst seed) of each exact row."""
    p = results.params
    w = auc_wide(results)
    asr = results.table.query("config == 'main' and attack == 'ReDiffuse' and t == @p.attack_t and n == 10")
    rd10, rd1 = w[f"RD t{p.attack_t} n10"], w[f"RD t{p.attack_t} n1"]
    out: dict[str, float | list[float]] = {
        "averaging-gain": list(rd10 - rd1),
        "blackbox-auc": list(rd10),
        "rd-vs-loss": list(rd10 - w["Loss"]),
        "rd-vs-pia": list(rd10 - w["PIA"]),
        "rd-vs-secmi": list(rd10 - w["SecMI"]),
        "blackbox-asr-every": claims.worst(asr["asr"], ">="),
    }
    for row, base in EVERY_SEED.items():
        out[row] = claims.worst(out[base], ">=")
    a, n = auc_wide(results, ablation_config(p)), n_ablation(p)
    out["outputs-vs-distances"] = list(a[f"RD t{p.attack_t} n{n}"] - a[f"AvgDist t{p.attack_t} n{n}"])
    return out


def check(results: Results) -> list[Verdict]:
    """Evaluate the run's claims: statistical ones over seeds, exact ones once."""
    return claims.evaluate_all(CLAIMS, claim_values(results))


# ----------------------------------------------------------------------------- tables

def summary(results: Results, config: str = "main") -> pd.DataFrame:
    """Mean (sd) AUC, ASR and TPR@1%FPR over seeds of every attack at its operating point (ReDiffuse n = 1, 10, max)."""
    p = results.params
    t = results.table.query("config == @config")
    keep = ((t["attack"].isin(BASELINES))
            | ((t["attack"] == "ReDiffuse") & (t["t"] == p.attack_t) & t["n"].isin([1, 10, max(p.n_queries)]))
            | ((t["attack"] == "AvgDist") & (t["t"] == p.attack_t) & t["n"].isin([10, max(p.n_queries)])))
    t = t[keep].copy()
    t["attack"] = [f"{a} (t={tt}, n={n})" if a in ("ReDiffuse", "AvgDist") else f"{a} (t={tt})"
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
             for t in sorted(set(p.sweep_t) | {p.attack_t})}
    out = {
        "mean_auc": {k: round(float(w[k].mean()), 4) for k in (*BASELINES, f"RD t{p.attack_t} n1",
                                                              f"RD t{p.attack_t} n10", f"AvgDist t{p.attack_t} n10")},
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


# ----------------------------------------------------------------------------- figures

def _image(v: np.ndarray) -> tuple[np.ndarray, str | None]:
    """A flat 8x8 grey image or a C x H x W colour image as something ``imshow`` shows, in [0, 1]."""
    if v.ndim == 1:
        side = int(round(np.sqrt(v.size)))
        return (v.reshape(side, side) + 1) / 2, "gray_r"
    return np.clip((np.transpose(v, (1, 2, 0)) + 1) / 2, 0, 1), None


def plot_examples(results: Results) -> Figure:
    """Rows: input, one API output, the n = 10 average; columns: 4 members then 4 non-members (base seed)."""
    e = results.example
    fig, axes = figure(8, 3, width=1.0, height=1.1)
    rows = (("input", e["x"]), ("one API output", e["one"]), ("mean of 10", e["avg10"]))
    for r, (name, imgs) in enumerate(rows):
        for c in range(8):
            ax = axes[r * 8 + c]
            img, cmap = _image(imgs[c])
            ax.imshow(img, cmap=cmap, vmin=0, vmax=1)
            ax.set_xticks([]), ax.set_yticks([])
            ax.grid(False)
            if c == 0:
                ax.set_ylabel(name, fontsize=7)
            if r == 0:
                ax.set_title("member" if c < 4 else "non-member", fontsize=7)
            if r == 1:
                ax.set_xlabel(f"d={e['d1'][c]:.2f}", fontsize=7)
            if r == 2:
                ax.set_xlabel(f"d={e['d10'][c]:.2f}", fontsize=7)
    return fig


def plot_n_curve(results: Results) -> Figure:
    """AUC against n (log x) for each t (mean +- sd over seeds), white-box baselines as horizontal bands."""
    p = results.params
    w = auc_wide(results)
    fig, axes = figure(1, 1, width=5.2, height=3.4)
    ax = axes[0]
    ns = list(p.n_queries)
    for t in sorted(set(p.sweep_t) | {p.attack_t}):
        arr = np.array([w[f"RD t{t} n{n}"] for n in ns]).T
        mu, sd = arr.mean(0), arr.std(0)
        line, = ax.plot(ns, mu, marker="o", label=f"ReDiffuse t={t}")
        ax.fill_between(ns, mu - sd, mu + sd, color=line.get_color(), alpha=0.2, linewidth=0)
    arr = np.array([w[f"AvgDist t{p.attack_t} n{n}"] for n in ns]).T
    ax.plot(ns, arr.mean(0), "k:", marker=".", label=f"avg of distances t={p.attack_t}")
    for name, style in zip(("Loss", "Loss-avg", "PIA", "SecMI"), ("--", "-.", (0, (3, 1, 1, 1)), "-")):
        mu, sd = w[name].mean(), w[name].std()
        line = ax.axhline(mu, color="grey" if name != "SecMI" else "black", linestyle=style, linewidth=1,
                          label=f"{name} (white-box)")
        ax.axhspan(mu - sd, mu + sd, color=line.get_color(), alpha=0.08)
    ax.set(xscale="log", xlabel="API queries averaged, n", ylabel="AUC")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def plot_roc(results: Results) -> Figure:
    """ROC curves (log FPR) of ReDiffuse n = 1 / n = 10, Loss, PIA and SecMI on the base seed; 1 % FPR marked."""
    e = results.example
    fig, axes = figure(1, 1, width=4.4, height=3.4)
    ax = axes[0]
    curves = {f"ReDiffuse n={n}": e["rd_scores"][n] for n in (1, 10)}
    curves.update({k: e["scores"][k] for k in ("Loss", "PIA", "SecMI")})
    for name, (sm, sn) in curves.items():
        fpr, tpr, _ = roc_curve(np.r_[np.ones(len(sm)), np.zeros(len(sn))], np.r_[sm, sn])
        ax.plot(np.maximum(fpr, 1e-3), tpr, label=name, drawstyle="steps-post")
    ax.axvline(0.01, color="black", linestyle="--", linewidth=0.8, label="1 % FPR")
    ax.plot([1e-3, 1], [1e-3, 1], color="grey", linewidth=0.6)
    ax.set(xscale="log", xlim=(1e-3, 1), ylim=(0, 1), xlabel="false-positive rate (non-members)",
           ylabel="true-positive rate (members)", title=f"seed {results.params.seed}")
    ax.legend(loc="lower right")
    return fig


def plot_distance_hists(results: Results) -> Figure:
    """Histograms of d(x, mean of n outputs) for members vs non-members at n = 1, n = 10, and the average of distances."""
    e = results.example
    n = e["n_members"]
    fig, axes = figure(3, 1, width=2.6, height=2.4)
    allv = np.concatenate(list(e["dist"].values()))
    bins = np.linspace(allv.min(), allv.max(), 30)
    for ax, (name, d) in zip(axes, e["dist"].items()):
        ax.hist(d[:n], bins=bins, alpha=0.6, label="members")
        ax.hist(d[n:], bins=bins, alpha=0.6, label="non-members")
        ax.set(title=name, xlabel=f"{results.params.distance} distance to the input")
    axes[0].legend()
    return fig
