"""The USAE experiment: digit models, the USAE and its controls per seed, claim values and summaries.

Every seed trains three digit models, then the USAE, the shuffled-pair USAE and independent SAEs
(plus, with ``run_ablation``, the USAE with every decoder stepped) from the same initial weights and
batch order, and scores them on the held-out digits. The ``paper`` preset hands the same scoring
vision-backbone tokens (:mod:`.paper_preset`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from companion import runtime
from companion.models.topk_sae import BatchNormTopKSAE
from companion.papers.usae import Params, digits
from companion.papers.usae.cam import maximise
from companion.papers.usae.evaluate import SeedRun, concept_codes, fit_variants, top_samples
from companion.papers.usae.universal import Standardiser, TrainConfig

MIN_FIRES = 5  # FE and co-fire statistics use concepts with U[c] >= 5 (small held-out set)
FIG_CONCEPTS = 6  # concepts in the top-activating figure
FIG_SAMPLES = 8  # images per concept and model in that figure
CAM_CONCEPTS = 8
CAM_STEPS = 200
MODEL_STREAM = 11  # SeedSequence stream of the digit models' initial weights and batches
VARIANT_LABELS = {"universal": "USAE", "shuffled": "shuffled pairs", "independent": "independent SAEs",
                  "all-decoders": "USAE, all decoders stepped"}


@dataclass(frozen=True)
class Results:
    """Per-seed runs, the model names and their held-out accuracies (toy) or sample counts."""

    params: Params
    names: tuple[str, ...]
    runs: list[SeedRun]
    setting: str  # "digits" or "vision"


def train_config(params: Params, n_train: int) -> TrainConfig:
    """The SAE hyper-parameters; warm-up one epoch over ``n_train`` samples, as officially."""
    return TrainConfig(params.n_concepts, params.top_k, params.usae_steps, params.usae_lr, params.batch_size,
                       params.aux_penalty,
                       warmup_steps=min(n_train // params.batch_size, params.usae_steps // 4),
                       update_all_decoders=params.update_all_decoders)


def model_seed(seed: int, m: int) -> int:
    """The seed of digit model ``m`` in run ``seed`` (a separate stream per model)."""
    return int(np.random.SeedSequence([seed, MODEL_STREAM, m]).generate_state(1)[0])


def digit_seed(params: Params, seed: int) -> SeedRun:
    """One toy seed: augment, train the three digit models, fit the USAE and its controls."""
    runtime.limit_threads(1)
    data = digits.digit_split(params.n_augment, np.random.default_rng(seed))
    models, accs = [], {}
    for m, name in enumerate(digits.MODEL_NAMES):
        model = digits.train_model(name, data, params.model_steps, torch.Generator().manual_seed(model_seed(seed, m)))
        models.append(model)
        accs[f"acc.{name}"] = digits.accuracy(name, model, data.x_test, data.y_test)
    train = [digits.features(m, data.x_train) for m in models]
    test = [digits.features(m, data.x_test) for m in models]
    variants, saes, stds, order = fit_variants(
        train, test, train_config(params, len(data.x_train)), seed, params.fire_threshold, params.top_concepts,
        MIN_FIRES, params.run_controls, params.run_ablation)
    ids = order[:FIG_CONCEPTS]
    picks, ids = top_samples(concept_codes(saes, test, stds, ids), FIG_SAMPLES), ids.numpy()
    cam = gain = None
    if params.run_cam:
        cam, gain = coordinated_maximisation(models, saes, stds, order[:CAM_CONCEPTS].tolist(), seed)
    return SeedRun(seed, variants, accs, picks, ids, cam, gain, order[:CAM_CONCEPTS].numpy())


def concept_pre_fn(model: torch.nn.Module, sae: BatchNormTopKSAE, std: Standardiser
                   ) -> Callable[[torch.Tensor], torch.Tensor]:
    """Images (n, 8, 8) -> pre-codes of ``sae`` through ``model``'s features and standardisation."""
    return lambda x: sae.encode(std(model.features(x.reshape(len(x), -1))))[0]


def coordinated_maximisation(models: list[torch.nn.Module], saes: list[BatchNormTopKSAE],
                             stds: list[Standardiser], concept_ids: list[int], seed: int
                             ) -> tuple[np.ndarray, np.ndarray]:
    """CAM images (concepts, M, 8, 8) and pre-activation gains (concepts, M)."""
    gen = torch.Generator().manual_seed(seed)
    images = np.zeros((len(concept_ids), len(models), 8, 8), dtype=np.float32)
    gains = np.zeros((len(concept_ids), len(models)))
    for r, c in enumerate(concept_ids):
        for m, (model, sae, std) in enumerate(zip(models, saes, stds)):
            for p in (*model.parameters(), *sae.parameters()):
                p.requires_grad_(False)
            img, start, end = maximise(concept_pre_fn(model, sae, std), c, CAM_STEPS, gen)
            images[r, m], gains[r, m] = img.numpy(), end - start
    return images, gains


def run(params: Params) -> Results:
    """Run every seed (the toy in parallel worker processes; the paper preset in this process)."""
    if params.preset == "paper":
        from companion.papers.usae.paper_preset import run_vision

        return run_vision(params)
    jobs = [(params, s) for s in params.seed_list()]
    bar = tqdm(total=len(jobs), desc="seeds", disable=None, leave=False)
    runs = runtime.parallel_map(digit_seed, jobs, on_done=lambda: bar.update(1))
    bar.close()
    return Results(params, digits.MODEL_NAMES, runs, "digits")


def _per(results: Results, variant: str, attr: str) -> np.ndarray:
    """One attribute of one variant, per seed (NaN where the variant was not trained)."""
    return np.array([getattr(r.variants[variant], attr) if variant in r.variants else np.nan
                     for r in results.runs], dtype=float)


def claim_values(results: Results) -> dict[str, list[float]]:
    """The per-seed value of each claim and of each control (the same measurement on the control)."""
    u, s, i = "universal", "shuffled", "independent"

    def per(variant: str, attr: str) -> np.ndarray:
        return _per(results, variant, attr)

    def top_minus_rest(variant: str) -> np.ndarray:
        return per(variant, "cofire_top") - per(variant, "cofire_rest")

    values = {
        "cross-r2-vs-shuffled": per(u, "offdiag") - per(s, "offdiag"),
        "cross-r2-vs-shuffled@independent": per(i, "offdiag") - per(s, "offdiag"),
        "cofire-vs-shuffled": per(u, "cofire_top") - 5 * per(s, "cofire_top"),
        "cofire-vs-shuffled@independent": per(i, "cofire_top") - 5 * per(s, "cofire_top"),
        "fe-gap": per(u, "fe_median") - per(i, "fe_median"),
        "fe-gap@shuffled": per(s, "fe_median") - per(i, "fe_median"),
        "energy-universal": top_minus_rest(u),
        "diag-r2": per(u, "diag"),
        "diag-r2-cost": per(u, "diag") - per(i, "diag"),
    }
    for cid, attr in (("cross-r2", "offdiag"), ("diag-highest", "diag_margin"), ("cofire", "cofire_top")):
        values[cid] = per(u, attr)
        for control in (s, i):
            values[f"{cid}@{control}"] = per(control, attr)
    for control in (s, i):
        values[f"energy-universal@{control}"] = top_minus_rest(control)
    return {k: [float(x) for x in v] for k, v in values.items()}


SUMMARY_SCORES = {"cross R²": "offdiag", "self R²": "diag", "diagonal margin": "diag_margin",
                  "co-fire top": "cofire_top", "co-fire rest": "cofire_rest", "median FE": "fe_median",
                  "dead": "dead", "train CPU s": "cpu_seconds"}


def summary(results: Results) -> pd.DataFrame:
    """Mean (sd) over seeds of every score, one row per variant."""
    rows = {}
    for v in results.runs[0].variants:
        rows[VARIANT_LABELS[v]] = {k: f"{np.mean(_per(results, v, a)):.3f} ({np.std(_per(results, v, a)):.3f})"
                                   for k, a in SUMMARY_SCORES.items()}
    return pd.DataFrame(rows).T


def metrics(results: Results) -> dict[str, float]:
    """Small JSON-able summary: seed means of the scores, the backbone accuracies, the CAM gains."""
    out: dict[str, float] = {}
    for v in results.runs[0].variants:
        for attr in SUMMARY_SCORES.values():
            out[f"{v}.{attr}"] = float(np.nanmean(_per(results, v, attr)))
    for key in results.runs[0].extra:
        out[key] = float(np.mean([r.extra[key] for r in results.runs]))
    gains = [r.cam_gain for r in results.runs if r.cam_gain is not None]
    if gains:
        out["cam.gain_positive"] = float(np.mean(np.concatenate(gains) > 0))
    return out
