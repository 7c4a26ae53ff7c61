"""One seed of the small-scale study: train, fine-tune, measure energies, sensitivities, KS and AUC.

Models per seed: ``random`` (untrained reference), ``base`` (narrow photometric ranges),
``ft_none`` (more training, same ranges: the control) and ``ft_<attr>`` (that attribute's range
widened). Fine-tunes share their batches (same generator state, same uniform draws), so the only
difference between ``ft_none`` and ``ft_<attr>`` is the augmented range.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from companion.papers.fr_geometry import embedder, faces
from companion.papers.fr_geometry import energy as en

MODES = en.NEIGHBORS


@dataclass
class Config:
    """What one seed needs (a plain copy of the Params fields it reads)."""

    img_size: int
    n_train_ids: int
    n_test_ids: int
    width: int
    emb_dim: int
    P: int
    K: int
    base_steps: int
    ft_steps: int
    lr: float
    ft_lr: float
    margin: float
    aug_attributes: tuple[str, ...]
    energy_ids: int
    C: int
    knn_k: int
    stencil_h: float
    h_sweep: tuple[float, ...]
    ball_eps: float
    macro_ids: int
    macro_imgs: int
    device: str = "cpu"


@dataclass
class SeedResult:
    """Everything measured on one seed."""

    seed: int
    energies: dict[str, dict[str, np.ndarray]]  # mode -> model -> (energy_ids, n_attrs)
    sens: dict[str, np.ndarray]  # model -> (energy_ids, n_attrs)
    h_sweep: dict[float, dict[str, np.ndarray]]  # h -> model -> (energy_ids, n_attrs), knn
    dropped: int
    auc: dict[str, float]
    macro: dict[str, dict[str, dict[str, float]]]  # model -> attribute -> {ks_max, ks_mean, probe, ...}
    macro_dists: dict[str, dict[str, np.ndarray]]  # base model: attribute -> {a, not_a, cross}
    quiver: dict[str, tuple[np.ndarray, np.ndarray]]  # model -> (P, V) of contrast, first energy identity
    losses: dict[str, list[float]]
    timing: dict[str, float] = field(default_factory=dict)


def model_names(cfg: Config) -> list[str]:
    """random, base, ft_none, then ft_<attr> for every augmented attribute."""
    return ["random", "base", "ft_none", *[f"ft_{a}" for a in cfg.aug_attributes]]


def train_base(cfg: Config, ids: dict[str, np.ndarray], seed: int) -> tuple[torch.nn.Module, torch.nn.Module, list[float]]:
    """The seed's untrained reference and the base model trained from it (narrow photometric ranges)."""
    torch.manual_seed(seed)
    dev = torch.device(cfg.device)
    rand = embedder.FaceCNN(cfg.width, cfg.emb_dim).to(dev)
    base = copy.deepcopy(rand)
    train_ids = faces.take(ids, np.arange(cfg.n_train_ids))
    base_cfg = embedder.TrainConfig(cfg.base_steps, cfg.lr, cfg.P, cfg.K, cfg.margin, faces.BASE_RANGES, cfg.img_size)
    return rand, base, embedder.train(base, train_ids, base_cfg, np.random.default_rng([seed, 1]), dev)


def train_models(cfg: Config, ids: dict[str, np.ndarray], seed: int) -> tuple[dict[str, torch.nn.Module], dict[str, list[float]]]:
    """The untrained reference, the base model and the fine-tunes (paired batches)."""
    dev = torch.device(cfg.device)
    rand, base, base_losses = train_base(cfg, ids, seed)
    train_ids = faces.take(ids, np.arange(cfg.n_train_ids))
    losses = {"base": base_losses}
    models = {"random": rand, "base": base}
    for attr in (None, *cfg.aug_attributes):
        name = "ft_none" if attr is None else f"ft_{attr}"
        ranges = dict(faces.BASE_RANGES)
        if attr is not None:
            ranges[attr] = faces.AUG_RANGES[attr]
        m = copy.deepcopy(base)
        torch.manual_seed(seed + 7)
        ft_cfg = embedder.TrainConfig(cfg.ft_steps, cfg.ft_lr, cfg.P, cfg.K, cfg.margin, ranges, cfg.img_size)
        losses[name] = embedder.train(m, train_ids, ft_cfg, np.random.default_rng([seed, 2]), dev)
        models[name] = m
    return models, losses


def stencil_images(cfg: Config, ids: dict[str, np.ndarray], test_idx: np.ndarray, h_frac: float,
                   rng: np.random.Generator) -> np.ndarray:
    """Rendered stencils (energy_ids, n_attrs, 3, C, H, W, 3) of the chosen test identities."""
    out = []
    for i in test_idx:
        row = []
        for attr in faces.ATTRIBUTES:
            settings, _ = faces.stencil(attr, cfg.C, h_frac, rng)
            who = faces.take(ids, np.full(3 * cfg.C, i))
            row.append(faces.render(who, settings, cfg.img_size).reshape(3, cfg.C, cfg.img_size, cfg.img_size, 3))
        out.append(row)
    return np.array(out)


def field_of(emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, V) from stencil embeddings (3, C, D): the centres and the central differences."""
    return emb[1], emb[2] - emb[0]


def energies_of(cfg: Config, E: np.ndarray, h_frac: float, modes: tuple[str, ...]) -> tuple[dict[str, np.ndarray], np.ndarray, int]:
    """Energies per mode and sensitivities, each (energy_ids, n_attrs), from embeddings (ids, attrs, 3, C, D)."""
    n_i, n_a = E.shape[:2]
    out = {m: np.zeros((n_i, n_a)) for m in modes}
    S = np.zeros((n_i, n_a))
    dropped = 0
    for i in range(n_i):
        for a in range(n_a):
            P, V = field_of(E[i, a])
            for m in modes:
                e, d = en.field_energy(P, V, m, cfg.knn_k, "cosine", cfg.ball_eps)
                out[m][i, a] = e
            dropped += d
            S[i, a] = en.sensitivity(V, h_frac)
    return out, S, dropped


def macro_groups(cfg: Config, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Macroscale images (macro_imgs for each of macro_ids fresh unseen identities), owners, +1/-1/0 groups."""
    ids = faces.sample_identities(cfg.macro_ids, rng)
    test_idx = np.arange(cfg.macro_ids)
    owner = np.repeat(test_idx, cfg.macro_imgs)
    attrs = faces.sample_attributes(len(owner), rng)
    img = faces.render(faces.take(ids, owner), attrs, cfg.img_size)
    skin = ids["skin_hue"][owner]
    med = np.median(ids["skin_hue"][test_idx])
    groups = {
        "skin_hue (identity)": np.where(skin > med, 1, -1),
        "expression (image)": np.where(attrs["expression"] > 0.2, 1, np.where(attrs["expression"] < -0.2, -1, 0)),
        "hair_hue (image)": np.where(attrs["hair_hue"] >= 0.5, 1, -1),
    }
    return img, owner, groups


def probe_accuracy(E: np.ndarray, group: np.ndarray, seed: int) -> float:
    """5-fold logistic-regression accuracy predicting the attribute from normalised embeddings."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score

    keep = group != 0
    X = E[keep] / np.linalg.norm(E[keep], axis=1, keepdims=True)
    clf = LogisticRegression(max_iter=500)
    return float(cross_val_score(clf, X, group[keep], cv=5).mean())


def run_seed(cfg: Config, seed: int) -> SeedResult:
    """Train the models of one seed and measure everything the claims and figures need."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 0])
    ids = faces.sample_identities(cfg.n_train_ids + cfg.n_test_ids, rng)
    test_idx = np.arange(cfg.n_train_ids, cfg.n_train_ids + cfg.n_test_ids)
    models, losses = train_models(cfg, ids, seed)
    t_train = time.perf_counter() - t0
    dev = torch.device(cfg.device)
    timing = {"train": t_train, "render": 0.0, "embed": 0.0, "energy": 0.0}
    # microscale: stencils on unseen identities
    e_idx = test_idx[: cfg.energy_ids]
    t = time.perf_counter()
    imgs = stencil_images(cfg, ids, e_idx, cfg.stencil_h, np.random.default_rng([seed, 3]))
    timing["render"] += time.perf_counter() - t
    shape = imgs.shape
    flat = imgs.reshape(-1, *shape[-3:])
    energies: dict[str, dict[str, np.ndarray]] = {m: {} for m in MODES}
    sens, quiver, dropped = {}, {}, 0
    ci = list(faces.ATTRIBUTES).index("contrast")
    for name, model in models.items():
        t = time.perf_counter()
        E = embedder.embed(model, flat, device=dev).reshape(*shape[:4], -1)
        timing["embed"] += time.perf_counter() - t
        t = time.perf_counter()
        en_m, S, d = energies_of(cfg, E, cfg.stencil_h, ("knn",))
        timing["energy"] += time.perf_counter() - t
        others, _, _ = energies_of(cfg, E, cfg.stencil_h, ("invdist", "ball"))
        for m in MODES:
            energies[m][name] = (en_m | others)[m]
        sens[name], dropped = S, dropped + d
        quiver[name] = field_of(E[0, ci])
    # the stencil-step sweep (knn only, the fine-tuned models)
    sweep: dict[float, dict[str, np.ndarray]] = {}
    for h in cfg.h_sweep:
        im = stencil_images(cfg, ids, e_idx, h, np.random.default_rng([seed, 4]))
        fl = im.reshape(-1, *im.shape[-3:])
        sweep[h] = {}
        for name in models:
            if name.startswith("ft_"):
                E = embedder.embed(models[name], fl, device=dev).reshape(*im.shape[:4], -1)
                sweep[h][name] = energies_of(cfg, E, h, ("knn",))[0]["knn"]
    # verification AUC on 4 images per test identity (base ranges)
    vrng = np.random.default_rng([seed, 5])
    owner = np.repeat(test_idx, 4)
    vimg = faces.render(faces.take(ids, owner), faces.sample_attributes(len(owner), vrng, faces.BASE_RANGES), cfg.img_size)
    auc = {name: en.verification_auc(embedder.embed(m, vimg, device=dev), owner) for name, m in models.items()}
    # macroscale on the base and the random model, over fresh identities (never trained on)
    macro, dists = macroscale(cfg, {"base": models["base"], "random": models["random"]}, seed)
    timing["total"] = time.perf_counter() - t0
    return SeedResult(seed, energies, sens, sweep, dropped, auc, macro, dists, quiver, losses, timing)


def macroscale(cfg: Config, models: dict[str, torch.nn.Module], seed: int
               ) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, dict[str, np.ndarray]]]:
    """KS, probe accuracy and entropies per model and attribute on the seed's fresh identities, and the
    base model's three distance samples per attribute."""
    dev = torch.device(cfg.device)
    mimg, mowner, groups = macro_groups(cfg, np.random.default_rng([seed, 6]))
    macro, dists = {}, {}
    for name, model in models.items():
        E = embedder.embed(model, mimg, device=dev)
        macro[name] = {}
        srng = np.random.default_rng([seed, 7])
        for attr, g in groups.items():
            pos, neg = en.macro_sets(g, mowner, srng)
            ks_max, ks_mean, d = en.macro_ks(E, pos, neg)
            macro[name][attr] = {"ks_max": ks_max, "ks_mean": ks_mean, "n": len(pos),
                                 "probe": probe_accuracy(E, g, seed),
                                 "intra_entropy": en.intra_entropy(g, mowner),
                                 "inter_entropy": en.inter_entropy(g, mowner)}
            if name == "base":
                dists[attr] = d
    return macro, dists


@dataclass
class MacroSeed:
    """A seed beyond ``seeds`` that only trains the base model, for the macroscale claims."""

    seed: int
    macro: dict[str, dict[str, dict[str, float]]]  # "base" -> attribute -> {ks_max, ...}
    seconds: float


def run_macro_seed(cfg: Config, seed: int) -> MacroSeed:
    """Train the seed's base model (exactly as :func:`run_seed` would) and measure its macroscale KS."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    ids = faces.sample_identities(cfg.n_train_ids + cfg.n_test_ids, np.random.default_rng([seed, 0]))
    _, base, _ = train_base(cfg, ids, seed)
    return MacroSeed(seed, macroscale(cfg, {"base": base}, seed)[0], time.perf_counter() - t0)


def run_job(cfg: Config, seed: int, full: bool) -> SeedResult | MacroSeed:
    """One pool job: a whole seed, or (``full`` false) a macroscale-only seed."""
    return run_seed(cfg, seed) if full else run_macro_seed(cfg, seed)


def ks_gap(ks: dict[str, dict[str, float]]) -> float:
    """KS of the identity-level attribute minus the larger KS of the two image-level ones (max-aggregated)."""
    return float(ks["skin_hue (identity)"]["ks_max"]
                 - max(ks["expression (image)"]["ks_max"], ks["hair_hue (image)"]["ks_max"]))


def summary_row(r: SeedResult, mode: str, aug: str = "contrast") -> dict[str, Any]:
    """Per-seed claim quantities: ΔE of the augmented attribute, its specificity, the invariance gap, KS gap."""
    names = list(faces.ATTRIBUTES)
    ix = {a: names.index(a) for a in names}
    E = r.energies[mode]
    dE = E[f"ft_{aug}"] - E["ft_none"]  # (ids, attrs)
    facial = [ix["pose"], ix["expression"], ix["hair_hue"]]
    base = E["base"].mean(0)
    return {
        "dE": float(dE[:, ix[aug]].mean()),
        "frac_pos": float(np.mean(dE[:, ix[aug]] > 0)),
        "specificity": float(dE[:, ix[aug]].mean() - np.max(np.abs(dE[:, facial].mean(0)))),
        "max_other": float(np.max(np.abs(dE[:, facial].mean(0)))),
        "control_move": float(E["ft_none"][:, ix[aug]].mean() - E["base"][:, ix[aug]].mean()),
        "target_move": float(E[f"ft_{aug}"][:, ix[aug]].mean() - E["base"][:, ix[aug]].mean()),
        "gap": float(base[facial].mean() - base[[ix["brightness"], ix["contrast"]]].mean()),
        "ks_gap": ks_gap(r.macro["base"]),
        "S_ftn": float(r.sens["ft_none"][:, ix[aug]].mean()),
        "S_ftaug": float(r.sens[f"ft_{aug}"][:, ix[aug]].mean()),
    }
