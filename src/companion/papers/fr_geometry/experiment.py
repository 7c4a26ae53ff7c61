"""The small-scale study: train, fine-tune and measure every seed; the claim values, tables and summary.

Models per seed: ``random`` (the untrained network: same architecture and initialisation, no
training), ``base`` (narrow photometric ranges), ``ft_none`` (more training, same ranges: the
same-budget control) and ``ft_<attr>`` (that attribute's range widened). Fine-tunes share their
batches (same generator state, same uniform draws), so the only difference between ``ft_none`` and
``ft_<attr>`` is the augmented range. Every energy and KS is measured on the untrained network too,
from the same stencils and images, as the control of the findings that a trained model is claimed to
show.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from companion import runtime
from companion.papers.fr_geometry import CLAIMS, Params, embedder, faces
from companion.papers.fr_geometry import energy as en

MODES = en.NEIGHBORS


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


def train_base(p: Params, ids: dict[str, np.ndarray], seed: int) -> tuple[torch.nn.Module, torch.nn.Module, list[float]]:
    """The seed's untrained reference and the base model trained from it (narrow photometric ranges)."""
    torch.manual_seed(seed)
    dev = runtime.resolve_device(p.device)
    rand = embedder.FaceCNN(p.width, p.emb_dim).to(dev)
    base = copy.deepcopy(rand)
    train_ids = faces.take(ids, np.arange(p.n_train_ids))
    base_cfg = embedder.TrainConfig(p.base_steps, p.lr, p.P, p.K, p.margin, faces.BASE_RANGES, p.img_size)
    return rand, base, embedder.train(base, train_ids, base_cfg, np.random.default_rng([seed, 1]), dev)


def train_models(p: Params, ids: dict[str, np.ndarray], seed: int) -> tuple[dict[str, torch.nn.Module], dict[str, list[float]]]:
    """The untrained reference, the base model and the fine-tunes (paired batches)."""
    dev = runtime.resolve_device(p.device)
    rand, base, base_losses = train_base(p, ids, seed)
    train_ids = faces.take(ids, np.arange(p.n_train_ids))
    losses = {"base": base_losses}
    models = {"random": rand, "base": base}
    for attr in (None, *p.aug_attributes):
        name = "ft_none" if attr is None else f"ft_{attr}"
        ranges = dict(faces.BASE_RANGES)
        if attr is not None:
            ranges[attr] = faces.AUG_RANGES[attr]
        m = copy.deepcopy(base)
        torch.manual_seed(seed + 7)
        ft_cfg = embedder.TrainConfig(p.ft_steps, p.ft_lr, p.P, p.K, p.margin, ranges, p.img_size)
        losses[name] = embedder.train(m, train_ids, ft_cfg, np.random.default_rng([seed, 2]), dev)
        models[name] = m
    return models, losses


def stencil_images(p: Params, ids: dict[str, np.ndarray], test_idx: np.ndarray, h_frac: float,
                   rng: np.random.Generator) -> np.ndarray:
    """Rendered stencils (energy_ids, n_attrs, 3, C, H, W, 3) of the chosen test identities."""
    out = []
    for i in test_idx:
        row = []
        for attr in faces.ATTRIBUTES:
            settings, _ = faces.stencil(attr, p.C, h_frac, rng)
            who = faces.take(ids, np.full(3 * p.C, i))
            row.append(faces.render(who, settings, p.img_size).reshape(3, p.C, p.img_size, p.img_size, 3))
        out.append(row)
    return np.array(out)


def field_of(emb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(P, V) from stencil embeddings (3, C, D): the centres and the central differences."""
    return emb[1], emb[2] - emb[0]


def energies_of(p: Params, E: np.ndarray, h_frac: float, modes: tuple[str, ...] = MODES
                ) -> tuple[dict[str, np.ndarray], np.ndarray, int]:
    """Energies per mode and sensitivities, each (energy_ids, n_attrs), from embeddings (ids, attrs, 3, C, D)."""
    n_i, n_a = E.shape[:2]
    out = {m: np.zeros((n_i, n_a)) for m in modes}
    S = np.zeros((n_i, n_a))
    dropped = 0
    for i in range(n_i):
        for a in range(n_a):
            P, V = field_of(E[i, a])
            for m in modes:
                out[m][i, a], d = en.field_energy(P, V, m, p.knn_k, "cosine", p.ball_eps)
            dropped += d
            S[i, a] = en.sensitivity(V, h_frac)
    return out, S, dropped


def macro_groups(p: Params, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Macroscale images (macro_imgs for each of macro_ids fresh unseen identities), owners, +1/-1/0 groups."""
    ids = faces.sample_identities(p.macro_ids, rng)
    test_idx = np.arange(p.macro_ids)
    owner = np.repeat(test_idx, p.macro_imgs)
    attrs = faces.sample_attributes(len(owner), rng)
    img = faces.render(faces.take(ids, owner), attrs, p.img_size)
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


def run_seed(p: Params, seed: int) -> SeedResult:
    """Train the models of one seed and measure everything the claims and figures need."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 0])
    ids = faces.sample_identities(p.n_train_ids + p.n_test_ids, rng)
    test_idx = np.arange(p.n_train_ids, p.n_train_ids + p.n_test_ids)
    models, losses = train_models(p, ids, seed)
    t_train = time.perf_counter() - t0
    dev = runtime.resolve_device(p.device)
    timing = {"train": t_train, "render": 0.0, "embed": 0.0, "energy": 0.0}
    # microscale: stencils on unseen identities
    e_idx = test_idx[: p.energy_ids]
    t = time.perf_counter()
    imgs = stencil_images(p, ids, e_idx, p.stencil_h, np.random.default_rng([seed, 3]))
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
        en_m, S, d = energies_of(p, E, p.stencil_h)
        timing["energy"] += time.perf_counter() - t
        for m in MODES:
            energies[m][name] = en_m[m]
        sens[name], dropped = S, dropped + d
        quiver[name] = field_of(E[0, ci])
    # the stencil-step sweep (knn only, the fine-tuned models)
    sweep: dict[float, dict[str, np.ndarray]] = {}
    for h in p.h_sweep:
        im = stencil_images(p, ids, e_idx, h, np.random.default_rng([seed, 4]))
        fl = im.reshape(-1, *im.shape[-3:])
        sweep[h] = {}
        for name in models:
            if name.startswith("ft_"):
                E = embedder.embed(models[name], fl, device=dev).reshape(*im.shape[:4], -1)
                sweep[h][name] = energies_of(p, E, h, ("knn",))[0]["knn"]
    # verification AUC on 4 images per test identity (base ranges)
    vrng = np.random.default_rng([seed, 5])
    owner = np.repeat(test_idx, 4)
    vimg = faces.render(faces.take(ids, owner), faces.sample_attributes(len(owner), vrng, faces.BASE_RANGES), p.img_size)
    auc = {name: en.verification_auc(embedder.embed(m, vimg, device=dev), owner) for name, m in models.items()}
    # macroscale on the base and the random model, over fresh identities (never trained on)
    macro, dists = macroscale(p, {"base": models["base"], "random": models["random"]}, seed)
    timing["total"] = time.perf_counter() - t0
    return SeedResult(seed, energies, sens, sweep, dropped, auc, macro, dists, quiver, losses, timing)


def macroscale(p: Params, models: dict[str, torch.nn.Module], seed: int
               ) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, dict[str, np.ndarray]]]:
    """KS, probe accuracy and entropies per model and attribute on the seed's fresh identities, and the
    base model's three distance samples per attribute."""
    dev = runtime.resolve_device(p.device)
    mimg, mowner, groups = macro_groups(p, np.random.default_rng([seed, 6]))
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
    macro: dict[str, dict[str, dict[str, float]]]  # "base", "random" -> attribute -> {ks_max, ...}
    seconds: float


def run_macro_seed(p: Params, seed: int) -> MacroSeed:
    """Train the seed's base model (exactly as :func:`run_seed` would) and measure its macroscale KS."""
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    ids = faces.sample_identities(p.n_train_ids + p.n_test_ids, np.random.default_rng([seed, 0]))
    rand, base, _ = train_base(p, ids, seed)
    return MacroSeed(seed, macroscale(p, {"base": base, "random": rand}, seed)[0], time.perf_counter() - t0)


def run_job(p: Params, seed: int, full: bool) -> SeedResult | MacroSeed:
    """One pool job: a whole seed, or (``full`` false) a macroscale-only seed."""
    return run_seed(p, seed) if full else run_macro_seed(p, seed)


def ks_gap(ks: dict[str, dict[str, float]]) -> float:
    """KS of the identity-level attribute minus the larger KS of the two image-level ones (max-aggregated)."""
    return float(ks["skin_hue (identity)"]["ks_max"]
                 - max(ks["expression (image)"]["ks_max"], ks["hair_hue (image)"]["ks_max"]))


def _gap(E: np.ndarray) -> float:
    """Mean energy over pose, expression and hair hue minus mean energy over brightness and contrast."""
    ix = {a: i for i, a in enumerate(faces.ATTRIBUTES)}
    e = E.mean(0)
    return float(e[[ix["pose"], ix["expression"], ix["hair_hue"]]].mean() - e[[ix["brightness"], ix["contrast"]]].mean())


def _shift(d: np.ndarray, a: int) -> dict[str, float]:
    """ΔE of attribute ``a`` from per-identity differences (ids, attrs): its mean, the share of identities
    with a positive one, the largest |mean ΔE| of any other attribute and the signed largest one."""
    other = np.delete(d.mean(0), a)
    return {"dE": float(d[:, a].mean()), "frac_pos": float(np.mean(d[:, a] > 0)),
            "max_abs_other": float(np.max(np.abs(other))), "max_other": float(np.max(other)),
            "specificity": float(d[:, a].mean() - np.max(np.abs(other)))}


def summary_row(r: SeedResult, mode: str, aug: str = "contrast") -> dict[str, Any]:
    """Per-seed claim quantities: the augmentation's ΔE (ft_aug - ft_none) and, as its control, the
    move of the same-budget fine-tune without augmentation (ft_none - base); the invariance gap and
    the KS gap of the base model and of the untrained network."""
    a = list(faces.ATTRIBUTES).index(aug)
    E = r.energies[mode]
    aug_shift = _shift(E[f"ft_{aug}"] - E["ft_none"], a)
    none_shift = _shift(E["ft_none"] - E["base"], a)
    return {
        **aug_shift,
        **{f"{k}_noaug": v for k, v in none_shift.items()},
        "gap": _gap(E["base"]), "gap_untrained": _gap(E["random"]),
        "ks_gap": ks_gap(r.macro["base"]), "ks_gap_untrained": ks_gap(r.macro["random"]),
        "S_ftn": float(r.sens["ft_none"][:, a].mean()), "S_ftaug": float(r.sens[f"ft_{aug}"][:, a].mean()),
    }


# ---------------------------------------------------------------- the run
@dataclass
class Results:
    """All seeds (synthetic presets) or the real-model measurements (paper preset)."""

    params: Params
    per_seed: list[SeedResult]
    seconds: float
    real: Any = None
    macro_only: list[MacroSeed] = field(default_factory=list)

    def ks_gaps(self, model: str = "base") -> list[float]:
        """The macroscale KS gap of every ``model``: the seeds', then the macroscale-only seeds'."""
        return [ks_gap(r.macro[model]) for r in (*self.per_seed, *self.macro_only)]


def run(params: Params) -> Results:
    """Train, fine-tune and measure every seed (spawned processes share the cores); or the paper preset."""
    start = time.perf_counter()
    runtime.limit_threads()
    if params.preset == "paper":
        from companion.papers.fr_geometry import paper_preset

        return Results(params, [], time.perf_counter() - start, paper_preset.run_real(params))
    seeds = params.seed_list()
    macro_only = range(seeds[-1] + 1, params.seed + params.macro_seeds)
    jobs = [(params, s, True) for s in seeds] + [(params, s, False) for s in macro_only]
    bar = tqdm(total=len(jobs), desc="seeds", disable=None, leave=False)
    done = runtime.parallel_map(run_job, jobs, on_done=lambda: bar.update(1))
    bar.close()
    return Results(params, done[:len(seeds)], time.perf_counter() - start, macro_only=done[len(seeds):])


def rows(results: Results) -> pd.DataFrame:
    """Per-seed claim quantities (one row per seed) for the first augmented attribute."""
    p = results.params
    if not results.per_seed:
        return _synthetic_only("per-seed claim values")
    return pd.DataFrame([summary_row(r, p.neighbors, p.aug_attributes[0]) for r in results.per_seed],
                        index=[r.seed for r in results.per_seed])


def _trained(r: SeedResult) -> list[str]:
    return [m for m in r.auc if m != "random"]


def _unmeasured() -> dict[str, Any]:
    """NaN for every claim and control (INCONCLUSIVE): the paper preset has no fine-tunes and no renderer."""
    nan = {"exact": float("nan"), "statistical": [float("nan")], "every": [float("nan")]}
    return {key: nan[c.kind] for c in CLAIMS for key in (c.id, *map(c.control_key, c.controls))}


def claim_values(results: Results) -> dict[str, Any]:
    """Per-seed values of every claim and control (``claims`` judges an ``-every`` row on its worst seed)."""
    if not results.per_seed:
        return _unmeasured()
    df = rows(results)
    rs = results.per_seed
    ks, ks0 = results.ks_gaps("base"), results.ks_gaps("random")
    return {
        "aug-energy-up": df["dE"].tolist(),
        "aug-energy-up@no-augmentation": df["dE_noaug"].tolist(),
        "aug-energy-up@other-attributes": df["max_other"].tolist(),
        "aug-energy-up-every": df["dE"].tolist(),
        "aug-energy-up-every@no-augmentation": df["dE_noaug"].tolist(),
        "aug-ids-positive-every": df["frac_pos"].tolist(),
        "aug-ids-positive-every@no-augmentation": df["frac_pos_noaug"].tolist(),
        "aug-specific-every": df["specificity"].tolist(),
        "aug-specific-every@no-augmentation": df["specificity_noaug"].tolist(),
        "invariance-gap": df["gap"].tolist(),
        "invariance-gap@untrained": df["gap_untrained"].tolist(),
        "invariance-gap-every": df["gap"].tolist(),
        "invariance-gap-every@untrained": df["gap_untrained"].tolist(),
        "macro-ks-gap": ks,
        "macro-ks-gap@untrained": ks0,
        "macro-ks-gap-every": ks,
        "macro-ks-gap-every@untrained": ks0,
        "guard-auc": [min(r.auc[m] for m in _trained(r)) for r in rs],
        "guard-sensitivity": [min(float(r.sens[m].mean()) for m in _trained(r)) for r in rs],
    }


# ---------------------------------------------------------------- tables
def _synthetic_only(what: str) -> pd.DataFrame:
    """A one-row table saying that ``what`` exists only at the synthetic presets."""
    return pd.DataFrame({"note": [f"{what}: synthetic presets only (quick, full)"]})


def energy_table(results: Results, mode: str | None = None, what: str = "energy") -> pd.DataFrame:
    """Mean over seeds and identities of the energy (or sensitivity) per model and attribute."""
    mode = mode or results.params.neighbors
    rs = results.per_seed
    if not rs:
        from companion.papers.fr_geometry import paper_preset

        return paper_preset.energy_table(results.real, mode, what)
    src = [r.energies[mode] if what == "energy" else r.sens for r in rs]
    return pd.DataFrame({m: np.mean([s[m].mean(0) for s in src], axis=0) for m in src[0]},
                        index=list(faces.ATTRIBUTES)).T.round(3)


def neighbors_table(results: Results) -> pd.DataFrame:
    """ΔE of every attribute (ft_aug - ft_none, mean over seeds) under the three neighbourhoods."""
    aug = results.params.aug_attributes[0]
    if not results.per_seed:
        return _synthetic_only("fine-tuning differences")
    out = {}
    for mode in MODES:
        d = [r.energies[mode][f"ft_{aug}"].mean(0) - r.energies[mode]["ft_none"].mean(0) for r in results.per_seed]
        out[mode] = np.nanmean(d, axis=0)
    return pd.DataFrame(out, index=list(faces.ATTRIBUTES)).T.round(3)


def h_table(results: Results) -> pd.DataFrame:
    """ΔE of the augmented attribute (ft_aug - ft_none, kNN) at every stencil step (empty unless swept)."""
    p = results.params
    if not results.per_seed:
        return _synthetic_only("stencil-step sweep")
    out = {}
    for aug in p.aug_attributes:
        a = list(faces.ATTRIBUTES).index(aug)
        row = {p.stencil_h: np.mean([r.energies["knn"][f"ft_{aug}"][:, a].mean() - r.energies["knn"]["ft_none"][:, a].mean()
                                     for r in results.per_seed])}
        for h in p.h_sweep:
            row[h] = np.mean([r.h_sweep[h][f"ft_{aug}"][:, a].mean() - r.h_sweep[h]["ft_none"][:, a].mean()
                              for r in results.per_seed])
        out[f"ΔE {aug}"] = dict(sorted(row.items()))
    return pd.DataFrame(out).T.round(3)


def macro_table(results: Results) -> pd.DataFrame:
    """KS (max and mean), group size, probe accuracy and entropies per model and attribute, mean over seeds."""
    if not results.per_seed:
        return results.real.macro.round(3)
    recs = []
    for model in ("base", "random"):
        for attr in results.per_seed[0].macro[model]:
            vals = pd.DataFrame([r.macro[model][attr] for r in results.per_seed]).mean()
            recs.append({"model": model, "attribute": attr, **vals.round(3).to_dict()})
    return pd.DataFrame(recs).set_index(["model", "attribute"])


def timing_table(results: Results) -> pd.DataFrame:
    """Wall seconds per stage, mean over seeds, and the share of the energies (three neighbourhoods) in
    the evaluation (render + embed)."""
    if not results.per_seed:
        return _synthetic_only("stage timings")
    t = pd.DataFrame([r.timing for r in results.per_seed]).mean()
    t["energy / (render + embed)"] = t["energy"] / (t["render"] + t["embed"])
    return t.round(4).to_frame("seconds (mean over seeds)")


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary of the run."""
    if not results.per_seed:
        from companion.papers.fr_geometry import paper_preset

        return paper_preset.metrics(results.real)
    df = rows(results)
    out: dict[str, Any] = {k: [round(float(x), 4) for x in df[k]] for k in df.columns}
    for aug in results.params.aug_attributes[1:]:
        d = [summary_row(r, results.params.neighbors, aug) for r in results.per_seed]
        out[f"dE_{aug}"] = [round(x["dE"], 4) for x in d]
    out["auc"] = {m: round(float(np.mean([r.auc[m] for r in results.per_seed])), 4) for m in results.per_seed[0].auc}
    out["ks_gap_macro_seeds"] = [round(x, 4) for x in results.ks_gaps("base")]
    out["ks_gap_macro_seeds_untrained"] = [round(x, 4) for x in results.ks_gaps("random")]
    out["null_vectors_dropped"] = int(sum(r.dropped for r in results.per_seed))
    out["energy_share_of_eval"] = float(timing_table(results).iloc[:, 0]["energy / (render + embed)"])
    out["seconds"] = round(results.seconds, 1)
    return out


def glue_values(results: Results) -> dict[str, Any]:
    """The numbers the page's prose quotes besides the claim rows (glued by myst-nb)."""
    if not results.per_seed:
        return {}
    df = rows(results)
    et = energy_table(results)
    aug = results.params.aug_attributes[0]
    a = list(faces.ATTRIBUTES).index(aug)
    nb = neighbors_table(results).loc[results.params.neighbors]
    return {
        "S_ftn": float(df["S_ftn"].mean()), "S_ftaug": float(df["S_ftaug"].mean()),
        "max_abs_other": float(df["max_abs_other"].mean()),
        "argmax_other": str(np.delete(np.array(list(faces.ATTRIBUTES)), a)[np.argmax(np.abs(np.delete(nb.values, a)))]),
        "dE_bright": float(nb["brightness"]),
        "E_base_bright": float(et.loc["base", "brightness"]), "E_ftnone_bright": float(et.loc["ft_none", "brightness"]),
        "E_rand_bright": float(et.loc["random", "brightness"]), "E_rand_pose": float(et.loc["random", "pose"]),
        "E_base_pose": float(et.loc["base", "pose"]), "E_base_contrast": float(et.loc["base", "contrast"]),
        "E_ftnone_contrast": float(et.loc["ft_none", "contrast"]),
        "E_ftaug_contrast": float(et.loc[f"ft_{aug}", "contrast"]),
        "n_macro": len(results.ks_gaps()), "n_seeds": len(results.per_seed),
        "energy_share": float(timing_table(results).iloc[:, 0]["energy / (render + embed)"]),
        "auc_base": float(np.mean([r.auc["base"] for r in results.per_seed])),
        "auc_random": float(np.mean([r.auc["random"] for r in results.per_seed])),
    }
