"""Universal Sparse Autoencoders: Interpretable Cross-Model Concept Alignment.

Harrish Thasarathan, Julian Forsyth, Thomas Fel, Matthew Kowal, Konstantinos G. Derpanis.
ICML 2025 (PMLR 267). arXiv: https://arxiv.org/abs/2502.03714 ; official code:
YorkUCVIL/UniversalSAE (MIT), which bundles Thomas Fel's ``overcomplete`` (MIT).

A universal SAE (USAE) gives every model its own encoder and decoder over one shared concept
index: at each step a model's encoder codes a batch and *every* model's decoder reconstructs its
own activations of the same images from those codes. Reproduced here at toy scale, on CPU: three
small models on scikit-learn's digits (two MLPs with different tasks, one CNN), the USAE with the
official architecture and update rule, a shuffled-pairing control and independent SAEs, scored on
held-out images by cross-model R², firing entropy and co-firing (the official analysis metrics).
The ``paper`` preset runs the same code on SigLIP, DINOv2 and ViT patch tokens read through
``transformers`` from local folders (see :mod:`companion.papers.usae.vision`).

Written by hand, following the official code: the BatchNorm TopK SAE and the AuxK-L1 loss (in
:mod:`companion.models.topk_sae`), the update rule (:mod:`.universal`), the metrics
(:mod:`.concepts`) and CAM (:mod:`.cam`). The ``overcomplete`` package is not a dependency: the
few pieces needed are short and the official repository bundles its own copy. Changed from the
official setting for the toy (see the page): learning rate 1e-3 instead of 3e-4, the source model
drawn from the run's seed instead of Python's ``random.seed(10)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from tqdm import tqdm

from companion import runtime
from companion.claims import Claim, Verdict, evaluate_all
from companion.params import BaseParams, ParamError, local_default, param, require_path
from companion.papers.usae import digits
from companion.papers.usae.cam import maximise
from companion.papers.usae.evaluate import SeedRun, VariantEval, fit_variants, top_activating
from companion.models.topk_sae import BatchNormTopKSAE
from companion.papers.usae.universal import Standardiser, TrainConfig
from companion.plotting import figure

SLUG = "usae"
MIN_FIRES = 5  # FE and co-fire statistics use concepts with U[c] >= 5 (small held-out set)
FIG_CONCEPTS = 6  # concepts in the top-activating figure
FIG_SAMPLES = 8  # images per concept and model in that figure
CAM_CONCEPTS = 8
CAM_STEPS = 200
MODEL_STREAM = 11  # SeedSequence stream of the digit models' initial weights and batches
VARIANT_LABELS = {"universal": "USAE", "shuffled": "shuffled pairs", "independent": "independent SAEs"}


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the USAE reproduction (defaults: the quick preset, digits on CPU)."""

    seeds: int = param(4, lo=1, hi=64, help="number of seeds (4 cost the same wall time as 3 on 2 cores)")
    n_augment: int = param(4, lo=0, hi=16, help="shifted copies of every training digit")
    model_steps: int = param(400, lo=100, hi=3000, help="training steps of each digit model (whole epochs)")
    n_concepts: int = param(128, lo=8, hi=65536, help="concepts n of the shared dictionary (at least max d_m)")
    top_k: int = param(8, lo=1, hi=1024, help="active concepts per sample (TopK), at most n_concepts / 4")
    usae_steps: int = param(2000, lo=500, hi=50000, help="SAE training steps (each draws one source model)")
    usae_lr: float = param(1e-3, lo=1e-4, hi=3e-3, help="AdamW learning rate (official 3e-4, see the page)")
    batch_size: int = param(256, lo=32, hi=8192, help="aligned samples (tokens) per step")
    aux_penalty: float = param(0.1, lo=0.0, hi=1.0, help="weight of the AuxK-L1 term")
    fire_threshold: float = param(0.1, lo=0.0, hi=10.0, help="a concept fires when its code exceeds this")
    top_concepts: int = param(32, lo=1, hi=65536, help="highest-energy concepts the co-fire claim averages")
    update_all_decoders: bool = param(False, help="ablation: step every decoder, not only the source's")
    run_controls: bool = param(True, help="train the shuffled-pair control and independent SAEs")
    run_cam: bool = param(False, help="coordinated activation maximisation figure")
    model_path: str = param(local_default(SLUG, "backbones"),
                            help="paper: folder with siglip/, dinov2/, vit/ (transformers folders)")
    data_path: str = param(local_default(SLUG, "images"), help="paper: folder of images (jpg/png)")
    cache_path: str = param(local_default(SLUG, "activations"), help="paper: activation cache folder")
    n_images: int = param(0, lo=0, hi=10**7, help="paper: use at most this many images (0: all)")
    smoke: bool = param(False, help="paper: the same pipeline on a tiny budget (tests)")

    PRESETS = {
        # The spec's full preset had 512 concepts and 8000 steps: about 13 CPU minutes on 2 cores.
        "full": {"seeds": 5, "n_augment": 8, "model_steps": 800, "n_concepts": 256, "top_k": 16,
                 "usae_steps": 5000, "top_concepts": 64, "run_cam": True},
        "paper": {"seeds": 1, "n_concepts": 6144, "top_k": 32, "usae_steps": 46875, "usae_lr": 3e-4,
                  "batch_size": 6272, "top_concepts": 64, "device": "cuda"},
    }

    def __post_init__(self) -> None:
        if self.preset != "paper" and self.n_concepts < 64:
            raise ParamError(f"parameter 'n_concepts': {self.n_concepts} is out of range; "
                             "allowed: >= 64, the widest digit model's features")
        if self.top_k > self.n_concepts // 4:
            raise ParamError(f"parameter 'top_k': {self.top_k} is out of range; "
                             f"allowed: int in [1, n_concepts / 4 = {self.n_concepts // 4}]")
        if self.top_concepts > self.n_concepts:
            raise ParamError(f"parameter 'top_concepts': {self.top_concepts} is out of range; "
                             f"allowed: int in [1, n_concepts = {self.n_concepts}]")
        if self.preset == "paper":
            require_path("model_path", self.model_path,
                         "a folder with siglip/, dinov2/ and vit/ Hugging Face model folders", "dir")
            require_path("data_path", self.data_path, "a folder of images (jpg or png)", "dir")

    def train_config(self, n_train: int) -> TrainConfig:
        """The SAE hyper-parameters; warm-up one epoch over ``n_train`` samples, as officially."""
        return TrainConfig(self.n_concepts, self.top_k, self.usae_steps, self.usae_lr, self.batch_size,
                           self.aux_penalty, warmup_steps=min(n_train // self.batch_size, self.usae_steps // 4),
                           update_all_decoders=self.update_all_decoders)


@dataclass(frozen=True)
class Results:
    """Per-seed runs, the model names and their held-out accuracies (toy) or sample counts."""

    params: Params
    names: tuple[str, ...]
    runs: list[SeedRun]
    setting: str  # "digits" or "vision"


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
    cfg = params.train_config(len(data.x_train))
    variants, saes, stds, codes, order = fit_variants(
        train, test, cfg, seed, params.fire_threshold, params.top_concepts, MIN_FIRES, params.run_controls)
    picks, ids = top_activating(codes, order, FIG_CONCEPTS, FIG_SAMPLES)
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
        from companion.papers.usae.vision import run_vision

        return run_vision(params)
    jobs = [(params, s) for s in params.seed_list()]
    bar = tqdm(total=len(jobs), desc="seeds", disable=None, leave=False)
    runs = runtime.parallel_map(digit_seed, jobs, on_done=lambda: bar.update(1))
    bar.close()
    return Results(params, digits.MODEL_NAMES, runs, "digits")


# --- claims ------------------------------------------------------------------------------------

CLAIMS: list[Claim] = [
    Claim("cross-r2", "USAE: mean off-diagonal (cross-model) R² on held-out images (>= 0.5)",
          "off-diagonal R² clearly positive, diagonal highest (Fig. 3, SigLIP/DINOv2/ViT)", 0.5, ">="),
    Claim("cross-r2-vs-shuffled", "cross-model R²: USAE minus shuffled-pair control (>= 0.3)",
          "alignment comes from paired images (no such control in the paper)", 0.3, ">="),
    Claim("cofire", "USAE: mean co-fire proportion of the top-energy concepts (>= 0.3)",
          "many concepts fire in all models on the same patches (co-firing figure)", 0.3, ">="),
    Claim("cofire-vs-shuffled", "co-fire proportion: USAE minus 5 x shuffled control (>= 0)",
          "not in the paper (our control: at least 5x the shuffled value)", 0.0, ">="),
    Claim("fe-gap", "median firing entropy: USAE minus independent SAEs (>= 0.2)",
          "firing-entropy histogram concentrated near 1 (Fig. 4)", 0.2, ">="),
    Claim("energy-universal", "co-fire proportion: top-energy concepts minus the rest (>= 0)",
          "the most important concepts are the most universal (concepts sorted by energy)", 0.0, ">="),
    Claim("diag-r2", "USAE: mean diagonal (self) R² (>= 0.7)",
          "self-reconstruction highest on the diagonal (Fig. 3)", 0.7, ">="),
    Claim("diag-r2-cost", "diagonal R²: USAE minus independent SAEs (>= -0.15)",
          "universality costs little self-reconstruction", -0.15, ">="),
]


def _per(results: Results, variant: str, attr: str) -> np.ndarray:
    """One attribute of one variant, per seed (NaN where the variant was not trained)."""
    return np.array([getattr(r.variants[variant], attr) if variant in r.variants else np.nan
                     for r in results.runs], dtype=float)


def claim_values(results: Results) -> dict[str, list[float]]:
    """The per-seed value each claim is tested on."""
    u, s, i = "universal", "shuffled", "independent"
    return {
        "cross-r2": list(_per(results, u, "offdiag")),
        "cross-r2-vs-shuffled": list(_per(results, u, "offdiag") - _per(results, s, "offdiag")),
        "cofire": list(_per(results, u, "cofire_top")),
        "cofire-vs-shuffled": list(_per(results, u, "cofire_top") - 5 * _per(results, s, "cofire_top")),
        "fe-gap": list(_per(results, u, "fe_median") - _per(results, i, "fe_median")),
        "energy-universal": list(_per(results, u, "cofire_top") - _per(results, u, "cofire_rest")),
        "diag-r2": list(_per(results, u, "diag")),
        "diag-r2-cost": list(_per(results, u, "diag") - _per(results, i, "diag")),
    }


def check(results: Results) -> list[Verdict]:
    """Evaluate :data:`CLAIMS` over seeds."""
    return evaluate_all(CLAIMS, claim_values(results))


def summary(results: Results) -> pd.DataFrame:
    """Mean (sd) over seeds of every score, one row per variant."""
    attrs = {"cross R²": "offdiag", "self R²": "diag", "co-fire top": "cofire_top",
             "co-fire rest": "cofire_rest", "median FE": "fe_median", "dead": "dead",
             "train CPU s": "cpu_seconds"}
    rows = {}
    for v in results.runs[0].variants:
        rows[VARIANT_LABELS[v]] = {k: f"{np.mean(_per(results, v, a)):.3f} ({np.std(_per(results, v, a)):.3f})"
                                   for k, a in attrs.items()}
    return pd.DataFrame(rows).T


def metrics(results: Results) -> dict[str, float]:
    """Small JSON-able summary: seed means of the headline scores and the backbone accuracies."""
    out: dict[str, float] = {}
    for v in results.runs[0].variants:
        for attr in ("offdiag", "diag", "cofire_top", "cofire_rest", "fe_median", "dead", "cpu_seconds"):
            out[f"{v}.{attr}"] = float(np.nanmean(_per(results, v, attr)))
    for key in results.runs[0].extra:
        out[key] = float(np.mean([r.extra[key] for r in results.runs]))
    return out


# --- figures -----------------------------------------------------------------------------------

def plot_r2_matrices(results: Results) -> Figure:
    """Cross-model R² (rows: encoder, columns: decoder), mean over seeds, one panel per variant."""
    variants = list(results.runs[0].variants)
    fig, axes = figure(len(variants), 1, 3.0, 2.8)
    short = [n.replace("_", "\n") for n in results.names]
    for ax, v in zip(axes, variants):
        mat = np.mean([r.variants[v].r2 for r in results.runs], axis=0)
        ax.imshow(mat, vmin=0, vmax=1, cmap="viridis")
        for (a, b), val in np.ndenumerate(mat):
            ax.text(b, a, f"{val:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if val < 0.5 else "black")
        ax.set(xticks=range(len(short)), yticks=range(len(short)), title=VARIANT_LABELS[v],
               xlabel="decoder (target model)", ylabel="encoder (source model)")
        ax.set_xticklabels(short, fontsize=7)
        ax.set_yticklabels(short, fontsize=7)
        ax.grid(False)
    return fig


def plot_universality(results: Results) -> Figure:
    """Left: firing entropy histogram per variant. Right: co-fire proportion against energy rank."""
    fig, (ax_h, ax_c) = figure(2, 1, 4.2, 3.0)
    bins = np.linspace(0, 1, 21)
    for v in results.runs[0].variants:
        fe = np.concatenate([r.variants[v].fe for r in results.runs])
        ax_h.hist(fe, bins=bins, histtype="step", density=True, label=VARIANT_LABELS[v], lw=1.5)
        prop = np.mean([r.variants[v].cofire.mean(0) for r in results.runs], axis=0)
        ax_c.plot(np.arange(1, len(prop) + 1), prop, label=VARIANT_LABELS[v], lw=1)
    ax_h.set(xlabel="firing entropy (1 = fires equally in every model)", ylabel="density",
             title=f"concepts with U >= {MIN_FIRES}, all seeds")
    ax_c.axvline(results.params.top_concepts + 0.5, color="grey", ls=":", lw=1)
    ax_c.set(xlabel="concept rank by energy", ylabel="co-fire proportion (mean over models)",
             xscale="log", title="co-firing by importance, mean over seeds")
    ax_h.legend(loc="upper left")
    return fig


def plot_top_images(results: Results) -> Figure:
    """For the first seed's highest-energy USAE concepts: each model's most activating held-out images."""
    run0 = results.runs[0]
    if results.setting != "digits":
        fig, (ax,) = figure(1, 1, 4.0, 1.0)
        ax.text(0.5, 0.5, "top-activating patches are not drawn for the vision backbones", ha="center")
        ax.set_axis_off()
        return fig
    n_c, n_m, n_s = run0.top_samples.shape
    fig, axes = figure(n_s, n_c * n_m, 0.62, 0.62)
    images = results_images(results)
    for c in range(n_c):
        for m in range(n_m):
            for s in range(n_s):
                ax = axes[(c * n_m + m) * n_s + s]
                ax.imshow(images[run0.top_samples[c, m, s]], cmap="Greys", vmin=0, vmax=1)
                ax.set(xticks=[], yticks=[])
                ax.grid(False)
                if s == 0:
                    ax.set_ylabel(f"c{run0.top_concepts[c]}\n{results.names[m]}", fontsize=6,
                                  rotation=0, ha="right", va="center")
    return fig


def results_images(results: Results) -> np.ndarray:
    """The held-out images the top-activating figure indexes (the fixed digit split)."""
    return digits.split_digits()[2]


def plot_cam(results: Results) -> Figure:
    """CAM images of the first seed: one row per concept, one column per model."""
    run0 = results.runs[0]
    n_c, n_m = run0.cam.shape[:2]
    fig, axes = figure(n_m, n_c, 1.0, 1.0)
    for c in range(n_c):
        for m in range(n_m):
            ax = axes[c * n_m + m]
            ax.imshow(run0.cam[c, m], cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
            ax.set(xticks=[], yticks=[])
            ax.grid(False)
            if c == 0:
                ax.set_title(results.names[m], fontsize=7)
            if m == 0:
                ax.set_ylabel(f"concept {run0.cam_concepts[c]}", fontsize=6)
    return fig
