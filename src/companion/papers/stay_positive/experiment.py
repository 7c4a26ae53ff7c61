"""The Stay-Positive experiment: the synthetic worlds, the detector, Base/LP/SP heads, metrics, tables."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from IPython.display import Markdown
from torch import nn
from tqdm import tqdm

from companion import runtime
from companion.models import optim
from companion.papers.stay_positive import (BATCH, BOTH_Q, CLAIM_Q, CLAIM_WORLD, CLAIMS, EVERY_SEED, FAKE, HEAD_BATCH,
                                            HEAD_NAMES, HEADS, LR_STAGE1, N_VAL, NO_JPEG, PARTS_SETS, REAL, TRACE,
                                            TRACE_FAKE, Params)
from companion.papers.stay_positive import photo_patches as pp


# ----------------------------------------------------------------------------- data

WORLD_NAMES = {NO_JPEG: "no-JPEG reals", TRACE: "camera-trace reals"}  # the worlds beside the JPEG one, as tables name them


def generate(x: np.ndarray, params: Params) -> np.ndarray:
    """The configured fake decoder applied to clean crops ``(n, H, W, 3)``."""
    if params.generator == "tconv":
        return pp.generator_tconv(x, params.tconv_eps)
    return pp.generator_nearest(x)


def eval_qualities(params: Params) -> tuple[int, ...]:
    """JPEG qualities evaluated on fakes: the requested ones plus the claims' 75 and 85, descending."""
    return tuple(sorted(set(params.jpeg_q_test) | {CLAIM_Q, BOTH_Q}, reverse=True))


def claim_inpaint(params: Params) -> int:
    """Side of the claims' inpainted square: half the patch side (25 % of the area; 16 px at patch 32)."""
    return params.patch // 2


def eval_inpaint_sizes(params: Params) -> tuple[int, ...]:
    """Inpainted square sides evaluated: the requested ones plus the claims' half-patch square."""
    return tuple(sorted(set(params.inpaint_sizes) | {claim_inpaint(params)}, reverse=True))


def set_keys(params: Params) -> dict[str, str]:
    """Names of the sets the claims and figures single out: JPEG-75 fakes, the claim's and the smallest inpaint."""
    return {"jpeg": f"jpeg{CLAIM_Q}", "inpaint": f"inpaint{claim_inpaint(params)}",
            "small": f"inpaint{min(eval_inpaint_sizes(params))}"}



def make_sets(params: Params, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], dict[str, dict[str, np.ndarray]]]:
    """Training pairs, validation reals and every test set, as ``(n, H, W, 3)`` float arrays; and, per other
    world, the sets that differ there (the same crops and fakes): the no-JPEG world's reals are only
    quantized, the trace world's carry the camera trace instead of JPEG."""
    imgs, size = pp.load_real_images(), params.patch
    q_lo, q_hi = params.jpeg_q_train
    crops = pp.make_patches(imgs, params.n_train, "train", rng, size)
    sets = {"train_real": pp.jpeg_batch(pp.q8(crops), rng.integers(q_lo, q_hi + 1, len(crops))),
            "train_fake": generate(crops, params)}
    val = pp.make_patches(imgs, N_VAL, "train", rng, size)
    sets["val_real"] = pp.jpeg_batch(pp.q8(val), rng.integers(q_lo, q_hi + 1, N_VAL))
    test = pp.make_patches(imgs, params.n_test, "test", rng, size)
    sets["real_test"] = pp.jpeg_batch(pp.q8(test), rng.integers(q_lo, q_hi + 1, len(test)))
    sets["real_clean"] = pp.q8(test)
    sets[f"real_jpeg{BOTH_Q}"] = pp.jpeg_batch(pp.q8(test), BOTH_Q)
    sets["clean"] = generate(test, params)
    for q in eval_qualities(params):
        sets[f"jpeg{q}"] = pp.jpeg_batch(sets["clean"], q)
    sets[TRACE_FAKE] = pp.add_trace(sets["clean"], params.trace_sd)
    plain = {"train_real": pp.q8(crops), "val_real": pp.q8(val), "real_test": sets["real_clean"]}
    traced = {k: pp.add_trace(v, params.trace_sd) for k, v in plain.items()}
    for s in eval_inpaint_sizes(params):
        for world in (sets, plain, traced):
            world[f"inpaint{s}"] = pp.inpaint(world["real_test"], sets["clean"], s)
    return sets, {NO_JPEG: plain, TRACE: traced}


# ----------------------------------------------------------------------------- detector


def highpass(x: torch.Tensor) -> torch.Tensor:
    """``x - box3x3(x)`` with replicate padding: ``(n, 3, H, W) -> (n, 3, H, W)``."""
    return x - F.avg_pool2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), 3, stride=1)


class Detector(nn.Module):
    """Small CNN: [high-pass] -> 4 convs with ReLU -> global average pool (z >= 0) -> Linear."""

    def __init__(self, width: int = 8, use_highpass: bool = True) -> None:
        super().__init__()
        w = width
        self.use_highpass = use_highpass
        self.body = nn.Sequential(
            nn.Conv2d(3, w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(w, 2 * w, 3, padding=1), nn.ReLU(),
            nn.Conv2d(2 * w, 2 * w, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(2 * w, 4 * w, 3, padding=1), nn.ReLU(),
        )
        self.head = nn.Linear(4 * w, 1)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled post-ReLU features ``(n, 4w)``, all >= 0."""
        h = self.body(highpass(x) if self.use_highpass else x)
        return h.mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(n,)``; positive means fake."""
        return self.head(self.features(x)).squeeze(-1)


def to_tensor(x: np.ndarray) -> torch.Tensor:
    """``(n, H, W, 3)`` float64 numpy -> ``(n, 3, H, W)`` float32 torch."""
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32))


def train_stage1(model: Detector, real: np.ndarray, fake: np.ndarray, epochs: int,
                 gen: torch.Generator) -> Detector:
    """Train the whole detector with BCE, Adam and random horizontal flips (in place)."""
    x = torch.cat([to_tensor(real), to_tensor(fake)])
    y = torch.cat([torch.full((len(real),), float(REAL)), torch.full((len(fake),), float(FAKE))])
    model.to(memory_format=torch.channels_last)  # ~1.5x faster small convs on CPU
    opt = optim.Adam(model.parameters(), lr=LR_STAGE1)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=gen)
        for i in range(0, len(x), BATCH):
            idx = order[i:i + BATCH]
            # Only flips: odd shifts would break the 2-px and 8-px grid phases the detector learns.
            flip = torch.rand(len(idx), generator=gen) < 0.5
            xb = x[idx]
            xb = torch.where(flip[:, None, None, None], xb.flip(-1), xb)
            xb = xb.contiguous(memory_format=torch.channels_last)
            loss = F.binary_cross_entropy_with_logits(model(xb), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model


def freeze_backbone(model: Detector) -> Detector:
    """Stage 2 set-up: everything but the head frozen and in eval mode (in place)."""
    model.body.requires_grad_(False)
    model.body.eval()
    return model


@torch.no_grad()
def extract_features(model: Detector, x: np.ndarray, batch: int = 1000) -> np.ndarray:
    """Features ``(n, 4w)`` of the patches ``(n, H, W, 3)``."""
    t = to_tensor(x)
    return torch.cat([model.features(t[i:i + batch]) for i in range(0, len(t), batch)]).numpy()


def project_nonneg_(linear: nn.Linear) -> nn.Linear:
    """Stay-Positive's projection: clamp the weights at 0 in place; the bias is left alone."""
    with torch.no_grad():
        linear.weight.clamp_(min=0.0)
    return linear


def retrain_head(f_real: np.ndarray, f_fake: np.ndarray, constrain: bool, steps: int, lr: float,
                 gen: torch.Generator,
                 on_step: Callable[[int, nn.Linear], None] | None = None, batch: int = HEAD_BATCH) -> nn.Linear:
    """Zero-initialized last layer trained on cached features; ``constrain`` = Stay-Positive."""
    f = torch.from_numpy(np.concatenate([f_real, f_fake])).float()
    y = torch.cat([torch.full((len(f_real),), float(REAL)), torch.full((len(f_fake),), float(FAKE))])
    head = nn.Linear(f.shape[1], 1)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    opt = optim.Adam(head.parameters(), lr=lr)
    if on_step:
        on_step(0, head)
    for t in range(steps):
        idx = torch.randint(len(f), (batch,), generator=gen)
        loss = F.binary_cross_entropy_with_logits(head(f[idx]).squeeze(-1), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if constrain:
            project_nonneg_(head)
        if on_step:
            on_step(t + 1, head)
    return head


def signed_parts(feats: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Mean over patches of the logit's negative-weight part and positive-weight part (bias apart)."""
    neg = np.where(w < 0, w, 0.0)
    return float(np.mean(feats @ neg)), float(np.mean(feats @ (w - neg)))


def head_arrays(linear: nn.Linear) -> tuple[np.ndarray, float]:
    """The head as numpy: weights ``(K,)`` and bias."""
    return linear.weight.detach().numpy()[0].astype(np.float64), float(linear.bias.detach()[0])


# ----------------------------------------------------------------------------- metrics


def average_precision(neg: np.ndarray, pos: np.ndarray) -> float:
    """Average precision of scores, positives = fakes (step-wise, as scikit-learn defines it)."""
    s = np.concatenate([pos, neg])
    y = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))])
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # end of each run of tied scores
    tps = np.cumsum(y)[last]
    precision = tps / (last + 1)
    recall_gain = np.diff(np.r_[0.0, tps]) / len(pos)
    return float(np.sum(recall_gain * precision))


def threshold_at_fpr(val_real: np.ndarray, fpr: float) -> float:
    """tau: the (1 - fpr) quantile of the validation reals' logits."""
    return float(np.quantile(val_real, 1.0 - fpr))


def tpr_at(tau: float, fake: np.ndarray) -> float:
    """Fraction of fakes scored above tau."""
    return float(np.mean(fake > tau))


def evaluate(heads: dict[str, tuple[np.ndarray, float]], feats: dict[str, np.ndarray],
             params: Params) -> dict[str, dict[str, Any]]:
    """Per head: tau, recall and AP on every fake set, weight stats and the test logits."""
    fake_sets = ["clean"] + [f"jpeg{q}" for q in eval_qualities(params)]
    fake_sets += [f"inpaint{s}" for s in eval_inpaint_sizes(params)] + [TRACE_FAKE]
    fake_sets = [k for k in fake_sets if k in feats]  # the paper preset has no traced fakes
    out = {}
    for name, (w, b) in heads.items():
        logits = {k: v @ w + b for k, v in feats.items() if not k.startswith("train")}
        tau = threshold_at_fpr(logits["val_real"], params.target_fpr)
        ap = {k: average_precision(logits["real_test"], logits[k]) for k in fake_sets}
        ap[f"both{BOTH_Q}"] = average_precision(logits[f"real_jpeg{BOTH_Q}"], logits[f"jpeg{BOTH_Q}"])
        out[name] = {
            "w": w, "b": b, "tau": tau, "ap": ap,
            "tpr": {k: tpr_at(tau, logits[k]) for k in fake_sets},
            "fpr_test": tpr_at(tau, logits["real_test"]),
            "fpr_real_clean": tpr_at(tau, logits["real_clean"]),
            "frac_neg": float(np.mean(w < 0)),
            # how far clean fakes sit above the reals in units of the reals' own spread (scale-free)
            "gap_over_sd": float((logits["clean"].mean() - logits["real_test"].mean()) / logits["real_test"].std()),
            "parts": {k: dict(zip(("neg", "pos"), signed_parts(feats[k], w))) for k in PARTS_SETS if k in feats},
            "logits": {k: logits[k] for k in ("real_test", "clean", f"jpeg{CLAIM_Q}",
                                              set_keys(params)["inpaint"]) if k in logits},
        }
    return out


# ----------------------------------------------------------------------------- experiment


@dataclass
class Results:
    """Everything ``run`` measured: per seed, per head metrics; examples; ablations."""

    params: Params
    seeds: list[int]
    per_seed: list[dict[str, Any]]
    examples: dict[str, np.ndarray] = field(default_factory=dict)
    spectra: dict[str, np.ndarray] = field(default_factory=dict)
    ablations: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)  # paper preset: what was read


def log_spectrum(x: np.ndarray) -> np.ndarray:
    """Mean log-magnitude 2-D FFT (centered) of the grey patches ``(n, H, W, 3) -> (H, W)``."""
    grey = x.mean(axis=3)
    grey = grey - grey.mean(axis=(1, 2), keepdims=True)
    return np.fft.fftshift(np.log(np.abs(np.fft.fft2(grey)) + 1e-4).mean(axis=0))


def run_world(params: Params, sets: dict[str, np.ndarray], seed: int) -> tuple[dict[str, Any], dict[str, float]]:
    """Stage 1, frozen features, LP and SP heads and their evaluation on one world's sets; CPU seconds."""
    _, gen = runtime.generators(seed)  # each world starts from the same initial weights and batch order
    t1 = time.process_time()
    model = train_stage1(Detector(params.width, params.highpass), sets["train_real"],
                         sets["train_fake"], params.epochs, gen)
    t2 = time.process_time()
    freeze_backbone(model)
    feats = {k: extract_features(model, v) for k, v in sets.items()}
    t3 = time.process_time()
    heads = {"base": head_arrays(model.head)}
    for name, constrain in (("lp", False), ("sp", True)):
        heads[name] = head_arrays(retrain_head(feats["train_real"], feats["train_fake"], constrain,
                                               params.head_steps, params.head_lr, gen))
    t4 = time.process_time()
    return evaluate(heads, feats, params), {"stage1": t2 - t1, "features": t3 - t2, "heads": t4 - t3}


def run_seed(params: Params, seed: int, control: bool = True) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One seed: data, then each world (the JPEG world and, if ``control``, the no-JPEG and trace worlds);
    CPU seconds."""
    rng, _ = runtime.generators(seed)
    t0 = time.process_time()
    sets, others = make_sets(params, rng)
    seconds = {"data": time.process_time() - t0}
    heads, seconds_main = run_world(params, sets, seed)
    out = {"seed": seed, "heads": heads, "keys": set_keys(params), "worlds": {}}
    for world, changed in others.items() if control else ():
        out["worlds"][world], seconds_world = run_world(params, {**sets, **changed}, seed)
        seconds_main = {k: v + seconds_world[k] for k, v in seconds_main.items()}
    out["seconds"] = seconds | seconds_main
    return out, sets


def seed_job(params: Params, seed: int, keep_examples: bool, control: bool = True
             ) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One seed in a worker process: its metrics, plus example patches and spectra if asked."""
    runtime.limit_threads(1)
    out, sets = run_seed(params, seed, control)
    if not keep_examples:
        return out, {}, {}
    keys = set_keys(params)
    examples = {k: sets[k][:4] for k in ("real_test", "clean", keys["jpeg"], keys["inpaint"], keys["small"], TRACE_FAKE)}
    examples["trace_real"] = pp.add_trace(sets["real_clean"][:4], params.trace_sd)  # a trace-world test real
    spectra = {k: log_spectrum(sets[k][:500]) for k in ("real_test", "clean")}
    return out, examples, spectra


def variants(params: Params) -> dict[str, Params]:
    """The main configuration and, when asked, the ablation variants (two seeds each)."""
    out = {"main": params}
    if params.ablations:
        for label, change in (("tconv", {"generator": "tconv"}), ("no-highpass", {"highpass": False})):
            # Two seeds keep the full preset's ablations within its time budget.
            out[label] = dataclasses.replace(params, ablations=False, seeds=min(params.seeds, 2),
                                             **change)
    return out


def run(params: Params) -> Results:
    """The whole experiment over ``params.seed_list()``, one worker process per core."""
    if params.preset == "paper":
        return run_paper(params)
    runtime.limit_threads(1)
    runtime.resolve_device(params.device)  # the models are tiny: they always run on CPU
    configs = variants(params)
    # The ablations skip the control world: they are reported, not judged.
    jobs = [(label, (v, s, label == "main" and i == 0, label == "main")) for label, v in configs.items()
            for i, s in enumerate(v.seed_list())]
    with tqdm(total=len(jobs), desc="seeds", disable=None, leave=False) as bar:
        outs = runtime.parallel_map(seed_job, [j for _, j in jobs], on_done=bar.update)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in configs}
    for (label, _), (out, _, _) in zip(jobs, outs):
        runs[label].append(out)
    _, examples, spectra = outs[0]
    res = Results(params, params.seed_list(), runs.pop("main"), examples, spectra)
    res.ablations.update(runs)
    return res


def run_paper(params: Params) -> Results:
    """The real setting: frozen local detector, its features on every set, Base/LP/SP heads (trained once)."""
    from companion.papers.stay_positive import paper_preset as pdet
    from companion.params import resolve_path

    runtime.limit_threads()
    if params.smoke:
        params = dataclasses.replace(params, **pdet.SMOKE)
    device = runtime.resolve_device(params.device)
    model_path, data_path = resolve_path(params.model_path), resolve_path(params.data_path)
    t0 = time.process_time()
    net, arch = pdet.load_detector(model_path)
    files = pdet.cap(pdet.layout(data_path), params.n_train, params.n_test)
    sets = pdet.condition_sets(files, params.patch, eval_qualities(params), eval_inpaint_sizes(params), BOTH_Q)
    feats, examples = pdet.extract_all(net.to(device), sets)
    t1 = time.process_time()
    base = head_arrays(net.fc)
    keys = set_keys(params)
    counts = [len(v) for v in files["generators"].values()]
    # One backbone and one data set: seeds would vary only the heads' minibatches, so the heads are
    # trained once and every seed repeats that one value (each row judged on it, without an interval).
    t2 = time.process_time()
    gen = torch.Generator().manual_seed(params.seed)
    heads = {"base": base}
    for name, constrain in (("lp", False), ("sp", True)):
        heads[name] = head_arrays(retrain_head(feats["train_real"], feats["train_fake"], constrain,
                                               params.head_steps, params.head_lr, gen, batch=pdet.HEAD_BATCH))
    out = {"heads": evaluate(heads, feats, params), "keys": keys,
           "seconds": {"features": t1 - t0, "heads": time.process_time() - t2}}
    for name, h in out["heads"].items():
        parts = np.split(h["logits"]["clean"], np.cumsum(counts)[:-1])
        h["ap_generator"] = {g: average_precision(h["logits"]["real_test"], part)
                             for g, part in zip(files["generators"], parts)}
    per_seed = [{**out, "seed": seed, "seconds": out["seconds"] if i == 0 else dict.fromkeys(out["seconds"], 0.0)}
                for i, seed in enumerate(params.seed_list())]
    spectra = {k: log_spectrum(examples[k]) for k in ("real_test", "clean")}
    shown = {k: examples[k] for k in ("real_test", "clean", keys["jpeg"], keys["inpaint"], keys["small"])}
    return Results(params, params.seed_list(), per_seed, shown, spectra,
                   source=pdet.source(model_path, data_path, arch, net, files))


# ----------------------------------------------------------------------------- claim values


def world_values(heads: list[dict[str, Any]], keys: dict[str, str]) -> dict[str, list[float]]:
    """Each claim's metric on every seed, from one world's heads (one entry per seed)."""
    jq, inp = keys["jpeg"], keys["inpaint"]
    return {
        "jpeg75-recall": [x["sp"]["tpr"][jq] - x["base"]["tpr"][jq] for x in heads],
        "clean-ap-cost": [x["sp"]["ap"]["clean"] - x["base"]["ap"]["clean"] for x in heads],
        "inpaint16-ap": [x["sp"]["ap"][inp] - x["base"]["ap"][inp] if inp in x["sp"]["ap"]
                         else float("nan") for x in heads],
        "base-neg-weights": [x["base"]["frac_neg"] for x in heads],
        "trace-fools-base": [_tpr(x["base"], "clean") - _tpr(x["base"], TRACE_FAKE) for x in heads],
        "trace-recall": [_tpr(x["sp"], TRACE_FAKE) - _tpr(x["base"], TRACE_FAKE) for x in heads],
        "constraint-not-retrain": [x["sp"]["tpr"][jq] - x["lp"]["tpr"][jq] for x in heads],
    }


def _tpr(head: dict[str, Any], key: str) -> float:
    """A head's recall on one fake set, NaN where the set was not made (the paper preset's traced fakes)."""
    return head["tpr"].get(key, float("nan"))


def in_world(per_seed: list[dict[str, Any]], claim_id: str, world: str | None, head: str = "sp") -> list[float]:
    """One claim's metric on every seed, read in ``world`` (None: the JPEG world) with ``head`` in SP's place
    (``"lp"``: the constraint removed); NaN on every seed where the world was not run."""
    if world is not None and not all(world in s.get("worlds", {}) for s in per_seed):
        return [float("nan")] * len(per_seed)
    heads = [{**h, "sp": h[head]} for h in world_heads(per_seed, world)]
    return world_values(heads, per_seed[0]["keys"])[claim_id]


def seed_values(per_seed: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each claim's metric on every seed, in the world that judges it (``CLAIM_WORLD``; else the JPEG world)."""
    return {c.id: in_world(per_seed, c.id, CLAIM_WORLD.get(c.id)) for c in CLAIMS if c.id not in EVERY_SEED}


def control_values(per_seed: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each finding's control values per seed: LP in place of SP in the finding's own world, and the finding
    read in the no-JPEG world (NaN where a world was not run: the paper preset has none, so its findings
    cannot discriminate)."""
    out = {}
    for c in CLAIMS:
        if c.id in EVERY_SEED:
            continue
        if "lp" in c.controls:
            out[c.control_key("lp")] = in_world(per_seed, c.id, CLAIM_WORLD.get(c.id), head="lp")
        if NO_JPEG in c.controls:
            out[c.control_key(NO_JPEG)] = in_world(per_seed, c.id, NO_JPEG)
    return out


def seed_claim_values(per_seed: list[dict[str, Any]]) -> dict[str, float | list[float]]:
    """Each claim's and control's per-seed values; an "in every seed" row repeats its base row's (``claims``
    judges its worst seed)."""
    out: dict[str, float | list[float]] = dict(seed_values(per_seed)) | control_values(per_seed)
    for row, base in EVERY_SEED.items():
        claim = next(c for c in CLAIMS if c.id == row)
        out[row] = out[base]
        for name in claim.controls:
            out[claim.control_key(name)] = out[f"{base}@{name}"]
    return out


def claim_values(results: Results) -> dict[str, float | list[float]]:
    """The contract's claim values: every claim id and every "<id>@<control>" (see :func:`seed_claim_values`)."""
    return seed_claim_values(results.per_seed)


def seed_table(results: Results) -> pd.DataFrame:
    """Every statistical claim's and control's metric on every seed (rows: seeds)."""
    values = {k: v for k, v in seed_claim_values(results.per_seed).items() if np.ndim(v) == 1}
    return pd.DataFrame(values, index=pd.Index(results.seeds, name="seed")).round(3)


def world_heads(per_seed: list[dict[str, Any]], world: str | None = None) -> list[dict[str, Any]]:
    """Each seed's heads in the JPEG world (``world=None``) or in the named control world."""
    return [s["heads"] if world is None else s["worlds"][world] for s in per_seed]


def parts_means(per_seed: list[dict[str, Any]], world: str | None = None) -> dict[str, dict[str, float]]:
    """Per head, mean over seeds of the logit's negative- and positive-weight parts on each set in PARTS_SETS."""
    heads = world_heads(per_seed, world)
    return {name: {f"{sign}_{k}": float(np.mean([h[name]["parts"].get(k, {}).get(sign, np.nan) for h in heads]))
                   for k in PARTS_SETS for sign in ("neg", "pos")} for name in HEADS}


def parts_table(results: Results) -> pd.DataFrame:
    """The logit's negative-weight and positive-weight parts per world, head and set (mean over seeds)."""
    worlds = {"JPEG reals": None} | {WORLD_NAMES[w]: w for w in results.per_seed[0].get("worlds", {})}
    rows = {}
    for label, world in worlds.items():
        for name, parts in parts_means(results.per_seed, world).items():
            for sign, word in (("neg", "negative-weight part"), ("pos", "positive-weight part")):
                rows[(label, HEAD_NAMES[name], word)] = {k: parts[f"{sign}_{k}"] for k in PARTS_SETS}
    return pd.DataFrame(rows).T.rename(columns={"real_test": "real (test)", "clean": "clean fake",
                                                f"jpeg{CLAIM_Q}": f"fake at JPEG-{CLAIM_Q}",
                                                TRACE_FAKE: "fake with the trace"}).round(2)


def head_means(per_seed: list[dict[str, Any]], world: str | None = None) -> dict[str, dict[str, float]]:
    """Mean over seeds of each head's headline numbers (in the JPEG world, or the named control world)."""
    heads = world_heads(per_seed, world)
    keys = per_seed[0]["keys"]
    jq, inp = keys["jpeg"], keys["inpaint"]
    out = {}
    for name in HEADS:
        rows = [h[name] for h in heads]
        pick = {"ap_clean": lambda r: r["ap"]["clean"], "tpr_clean": lambda r: r["tpr"]["clean"],
                f"tpr_{jq}": lambda r: r["tpr"][jq], f"ap_{jq}": lambda r: r["ap"][jq],
                f"ap_{inp}": lambda r: r["ap"].get(inp, np.nan),
                "ap_inpaint_small": lambda r: r["ap"].get(keys["small"], np.nan),
                f"ap_both{BOTH_Q}": lambda r: r["ap"][f"both{BOTH_Q}"], "tpr_trace": lambda r: _tpr(r, TRACE_FAKE),
                "ap_trace": lambda r: r["ap"].get(TRACE_FAKE, np.nan),
                "fpr_real_test": lambda r: r["fpr_test"], "frac_neg": lambda r: r["frac_neg"],
                "gap_over_sd": lambda r: r["gap_over_sd"]}
        out[name] = {k: float(np.mean([f(r) for r in rows])) for k, f in pick.items()}
    return out


def timing(per_seed: list[dict[str, Any]]) -> dict[str, float]:
    """Total CPU seconds per stage and the stage-2 / stage-1 cost ratios."""
    tot = {k: float(sum(s["seconds"][k] for s in per_seed)) for k in per_seed[0]["seconds"]}
    if "stage1" in tot:  # the paper preset has no stage 1: it reads a trained detector
        tot["heads_over_stage1"] = tot["heads"] / tot["stage1"]
        tot["stage2_over_stage1"] = (tot["features"] + tot["heads"]) / tot["stage1"]
    return tot


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary: per-head means, per-seed claim values, timings, ablations."""
    out: dict[str, Any] = {"heads": head_means(results.per_seed),
                           "claims_per_seed": seed_values(results.per_seed),
                           "parts": parts_means(results.per_seed),
                           "seconds": timing(results.per_seed)}
    out["worlds"] = {w: {"heads": head_means(results.per_seed, w), "parts": parts_means(results.per_seed, w),
                         "claims_per_seed": world_values(world_heads(results.per_seed, w), results.per_seed[0]["keys"])}
                     for w in results.per_seed[0].get("worlds", {})}
    out["ablations"] = {k: head_means(v) for k, v in results.ablations.items()}
    if results.source:
        out["source"] = results.source
        out["ap_generator"] = generator_table(results).to_dict()
    return out


def generator_table(results: Results) -> pd.DataFrame | Markdown:
    """Paper preset: AP of each test generator's fakes against the test reals, per head (mean over seeds)."""
    if not results.source:
        return Markdown("_Synthetic run: one decoder, no per-generator table (the `paper` preset makes one)._")
    return pd.DataFrame({HEAD_NAMES[h]: pd.DataFrame([s["heads"][h]["ap_generator"] for s in results.per_seed]).mean()
                         for h in HEADS}).round(3)


def summary_table(per_seed: list[dict[str, Any]]) -> pd.DataFrame:
    """Headline numbers per head: mean and s.d. over seeds."""
    rows = {}
    for name in HEADS:
        vals = [head_means([s]) for s in per_seed]
        rows[HEAD_NAMES[name]] = {k: f"{np.mean([v[name][k] for v in vals]):.3f} ± "
                                     f"{np.std([v[name][k] for v in vals]):.3f}"
                                  for k in vals[0][name]}
    return pd.DataFrame(rows)


def ablation_table(results: Results) -> pd.DataFrame | Markdown:
    """Ablation variants: per head, mean over seeds of the headline numbers; a note when none ran."""
    rows = {(label, HEAD_NAMES[h]): v for label, runs in results.ablations.items()
            for h, v in head_means(runs).items()}
    if not rows:
        return Markdown("_No ablations in this run (`ablations=False`; the `full` preset runs them)._")
    return pd.DataFrame(rows).T.round(3)
