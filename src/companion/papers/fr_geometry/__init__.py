"""Attributes Shape the Embedding Space of Face Recognition Models (Leroy, Mastropietro, Nurisso, Vaccarino, ICML 2025).

arXiv: https://arxiv.org/abs/2507.11372 -- OpenReview VY74pP1w93. Official code:
``mantonios107/attrs-fr-embs`` (MIT).

Reproduced at small scale: face embeddings trained with identity labels only are structured at
two scales. Microscale: the vector field that a change of one attribute induces on one identity's
point cloud has a low alignment energy (ordered: the model encodes the attribute) or an energy
near 1 (disordered: invariance); fine-tuning with a targeted augmentation of one attribute raises
that attribute's energy while a same-budget control does not. Macroscale: an identity-level
attribute (skin hue) shifts the distribution of distances between identities (KS statistic),
image-level ones (expression, hair hue) do not.

Follows the paper / official code: the kNN energy (k = 10, 1 - cos of normalised fields, central
differences), its inverse-distance and radius-ball variants, the KS-of-distance-distributions
macroscale test with max aggregation, the entropies and the linear probe. Written by hand, because
the paper's inputs need a GPU and weights (GAN-Control, ArcFace/FaceNet): the procedural face
renderer (:mod:`.faces`), the small CNN embedder with the batch-hard triplet loss
(:mod:`.embedder`), the fine-tuning protocol and every threshold (the spec's, from a prototype;
the paper's tables were not available offline). :mod:`.real` is the ``paper`` preset: a local
TorchScript face-recognition model on a local CelebA folder.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from tqdm import tqdm

from companion import plotting, runtime
from companion.claims import Claim, Verdict, evaluate_all, worst
from companion.params import BaseParams, ParamError, local_default, param, require_path
from companion.papers.fr_geometry import energy, experiment, faces
from companion.papers.fr_geometry.experiment import MacroSeed, SeedResult

SLUG = "fr-geometry"
ATTRS = list(faces.ATTRIBUTES)
PAPER_PRESET = ("a local TorchScript face-recognition model on a local CelebA folder: photometric energies "
                "(real photos as base points; no GAN-Control, no facial-attribute control) and the KS / "
                "entropy macroscale over the 40 CelebA attributes; the fine-tuning claims are INCONCLUSIVE there")


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the small-scale reproduction (defaults: the quick preset)."""

    seeds: int = param(3, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    img_size: int = param(32, lo=24, hi=64, help="rendered face size (pixels)")
    n_train_ids: int = param(200, lo=50, hi=5000, help="training identities")
    n_test_ids: int = param(40, lo=20, hi=1000, help="disjoint test identities (energies, verification AUC)")
    width: int = param(16, lo=8, hi=64, help="CNN width (first conv channels)")
    emb_dim: int = param(32, lo=8, hi=128, help="embedding dimension")
    P: int = param(12, lo=4, hi=64, help="identities per triplet batch")
    K: int = param(4, lo=2, hi=16, help="images per identity in a batch")
    base_steps: int = param(300, lo=100, hi=5000, help="base training steps")
    ft_steps: int = param(120, lo=20, hi=5000, help="fine-tuning steps (every fine-tune)")
    lr: float = param(1e-3, lo=1e-4, hi=3e-3, help="base learning rate (Adam)")
    ft_lr: float = param(5e-4, lo=1e-4, hi=3e-3, help="fine-tuning learning rate (half the base: see the pitfalls)")
    margin: float = param(0.2, lo=0.05, hi=1.0, help="triplet margin")
    aug_attributes: tuple[str, ...] = param(("contrast",), choices=tuple(faces.AUG_RANGES),
                                            help="attributes a fine-tune augments (the claims use the first)")
    energy_ids: int = param(8, lo=4, hi=500, help="test identities whose energies are measured")
    C: int = param(30, lo=5, hi=500, help="base points (stencil centres) per identity and attribute")
    knn_k: int = param(10, lo=1, hi=100, help="neighbours of the kNN energy")
    stencil_h: float = param(0.1, lo=0.02, hi=0.25, help="stencil step h as a fraction of the attribute range")
    h_sweep: tuple[float, ...] = param((), lo=0.02, hi=0.25, min_len=0, help="extra stencil steps (fine-tuned models)")
    neighbors: str = param("knn", choices=energy.NEIGHBORS, help="neighbourhood of the energy the claims use")
    ball_eps: float = param(0.5, lo=0.05, hi=2.0, help="radius-ball neighbourhood: eps x mean pairwise distance")
    macro_ids: int = param(200, lo=20, hi=5000, help="fresh unseen identities of the macroscale KS")
    macro_seeds: int = param(6, lo=1, hi=64, help="base models the macroscale claims are evaluated over: the "
                             "seeds' own, then seeds that train only a base model (at least seeds)")
    macro_imgs: int = param(4, lo=2, hi=64, help="images per macroscale identity")
    model_path: str = param(local_default(SLUG, "model.pt"), help="paper preset: a TorchScript face-recognition "
                            "model file (RGB in [0, 1] at paper_img_size -> embeddings)")
    data_path: str = param(local_default(SLUG, "celeba"), help="paper preset: a CelebA folder (img_align_celeba/, "
                           "identity_CelebA.txt, list_attr_celeba.txt)")
    smoke: bool = param(False, help="paper preset on a tiny budget (few identities and images, < 2 min CPU)")
    paper_img_size: int = param(112, lo=32, hi=512, help="paper preset: input size of the real model")

    PRESETS = {
        "full": {"n_train_ids": 400, "n_test_ids": 60, "P": 16, "base_steps": 700, "ft_steps": 300,
                 "aug_attributes": ("contrast", "hue"), "energy_ids": 16, "C": 40, "h_sweep": (0.05, 0.2),
                 "macro_ids": 400, "macro_seeds": 8},
        "paper": {"seeds": 1, "macro_seeds": 1, "energy_ids": 16, "C": 20},
    }

    def __post_init__(self) -> None:
        if self.preset == "paper":
            require_path("model_path", self.model_path, "a TorchScript face-recognition model (torch.jit.save)", "file")
            require_path("data_path", self.data_path, "a CelebA folder (img_align_celeba/, identity_CelebA.txt, "
                         "list_attr_celeba.txt)", "dir")
        if self.C <= self.knn_k:
            raise ParamError(f"parameter 'C': {self.C}; allowed: more than knn_k = {self.knn_k} base points")
        if self.energy_ids > self.n_test_ids:
            raise ParamError(f"parameter 'energy_ids': {self.energy_ids}; allowed: at most n_test_ids = {self.n_test_ids}")
        if self.macro_seeds < self.seeds:
            raise ParamError(f"parameter 'macro_seeds': {self.macro_seeds}; allowed: at least seeds = {self.seeds}")
        if self.P > self.n_train_ids:
            raise ParamError(f"parameter 'P': {self.P}; allowed: at most n_train_ids = {self.n_train_ids}")

    def config(self) -> experiment.Config:
        """The per-seed configuration (what a worker process needs)."""
        dev = str(runtime.resolve_device(self.device))
        return experiment.Config(self.img_size, self.n_train_ids, self.n_test_ids, self.width, self.emb_dim,
                                 self.P, self.K, self.base_steps, self.ft_steps, self.lr, self.ft_lr, self.margin,
                                 tuple(self.aug_attributes), self.energy_ids, self.C, self.knn_k, self.stencil_h,
                                 tuple(self.h_sweep), self.ball_eps, self.macro_ids, self.macro_imgs, dev)


@dataclass
class Results:
    """All seeds (synthetic presets) or the real-model measurements (paper preset)."""

    params: Params
    per_seed: list[SeedResult]
    seconds: float
    real: Any = None
    macro_only: list[MacroSeed] = field(default_factory=list)

    def ks_gaps(self) -> list[float]:
        """The macroscale KS gap of every base model: the seeds', then the macroscale-only seeds'."""
        return [experiment.ks_gap(r.macro["base"]) for r in (*self.per_seed, *self.macro_only)]


def run(params: Params) -> Results:
    """Train, fine-tune and measure every seed (spawned processes share the cores); or the real setting."""
    start = time.perf_counter()
    runtime.limit_threads()
    if params.preset == "paper":
        from companion.papers.fr_geometry import real

        return Results(params, [], time.perf_counter() - start, real.run_real(params))
    cfg = params.config()
    seeds = params.seed_list()
    macro_only = range(seeds[-1] + 1, params.seed + params.macro_seeds)
    jobs = [(cfg, s, True) for s in seeds] + [(cfg, s, False) for s in macro_only]
    bar = tqdm(total=len(jobs), desc="seeds", disable=None, leave=False)
    done = runtime.parallel_map(experiment.run_job, jobs, on_done=lambda: bar.update(1))
    bar.close()
    return Results(params, done[:len(seeds)], time.perf_counter() - start, macro_only=done[len(seeds):])


# ---------------------------------------------------------------- claims
CLAIMS = [
    Claim("aug-energy-up", "Targeted augmentation raises the augmented attribute's energy: mean over test identities "
          "of E(ft_contrast) - E(ft_none) for contrast", "energy shifts after fine-tuning (claim 3; violins)", 0.05),
    Claim("aug-energy-up-every", "The same difference in every seed (worst seed)", "(spec: per seed)", 0.05,
          kind="exact"),
    Claim("aug-ids-positive-every", "Share of test identities with a positive difference, worst seed (spec: >= 5 of 8)",
          "(spec)", 0.625, kind="exact"),
    Claim("aug-specific-every", "Specificity, worst seed: the contrast difference minus the largest |difference| "
          "over pose, expression, hair hue", "(spec)", 0.0, kind="exact"),
    Claim("control-smaller", "The ft_none control moves the contrast energy (from base) less than the targeted "
          "fine-tune does: E(ft_contrast) - E(base) - |E(ft_none) - E(base)|", "(mechanism; ours)", 0.0),
    Claim("invariance-gap", "Base model: mean E over pose, expression, hair hue minus mean E over brightness, "
          "contrast (varying degrees of invariance)", "different invariance across attributes (claim 3)", 0.25),
    Claim("invariance-gap-every", "The same gap in every seed (worst seed)", "(spec)", 0.25, kind="exact"),
    Claim("macro-ks-gap", "Macroscale: KS(skin hue, identity-level) - max KS(expression, hair hue; image-level), "
          "base model, max-aggregated; over macro_seeds base models", "identity attributes organise "
          "inter-identity distances (claims 1, 4)", 0.05),
    Claim("macro-ks-gap-every", "The same KS gap for every base model (worst of macro_seeds)", "(spec)", 0.05,
          kind="exact"),
    Claim("guard-auc", "Validity guard: lowest verification AUC of any trained or fine-tuned model, all seeds",
          "(spec: >= 0.80, else 'invalid run')", 0.80, kind="exact"),
    Claim("guard-sensitivity", "Validity guard: lowest mean sensitivity S over attributes of any trained or "
          "fine-tuned model, all seeds (no collapse)", "(spec: >= 0.05)", 0.05, kind="exact"),
]


def _synthetic_only(what: str) -> pd.DataFrame:
    """A one-row table saying that ``what`` exists only at the synthetic presets."""
    return pd.DataFrame({"note": [f"{what}: synthetic presets only (quick, full)"]})


def rows(results: Results) -> pd.DataFrame:
    """Per-seed claim quantities (one row per seed) for the first augmented attribute."""
    p = results.params
    if not results.per_seed:
        return _synthetic_only("per-seed claim values")
    return pd.DataFrame([experiment.summary_row(r, p.neighbors, p.aug_attributes[0]) for r in results.per_seed],
                        index=[r.seed for r in results.per_seed])


def _trained(r: SeedResult) -> list[str]:
    return [m for m in r.auc if m != "random"]


def check(results: Results) -> list[Verdict]:
    """Evaluate every claim on the measured values (NaN, hence INCONCLUSIVE, where a preset cannot measure it)."""
    if not results.per_seed:
        from companion.papers.fr_geometry import real

        return evaluate_all(CLAIMS, real.claim_values(results.real, CLAIMS))
    df = rows(results)
    rs = results.per_seed
    return evaluate_all(CLAIMS, {
        "aug-energy-up": df["dE"].tolist(),
        "aug-energy-up-every": worst(df["dE"], ">="),
        "aug-ids-positive-every": worst(df["frac_pos"], ">="),
        "aug-specific-every": worst(df["specificity"], ">="),
        "control-smaller": (df["target_move"] - df["control_move"].abs()).tolist(),
        "invariance-gap": df["gap"].tolist(),
        "invariance-gap-every": worst(df["gap"], ">="),
        "macro-ks-gap": results.ks_gaps(),
        "macro-ks-gap-every": worst(results.ks_gaps(), ">="),
        "guard-auc": min(r.auc[m] for r in rs for m in _trained(r)),
        "guard-sensitivity": min(float(r.sens[m].mean()) for r in rs for m in _trained(r)),
    })


# ---------------------------------------------------------------- tables
def energy_table(results: Results, mode: str | None = None, what: str = "energy") -> pd.DataFrame:
    """Mean over seeds and identities of the energy (or sensitivity) per model and attribute."""
    mode = mode or results.params.neighbors
    rs = results.per_seed
    if not rs:
        from companion.papers.fr_geometry import real

        return real.energy_table(results.real, mode, what)
    src = [r.energies[mode] if what == "energy" else r.sens for r in rs]
    models = list(src[0])
    return pd.DataFrame({m: np.mean([s[m].mean(0) for s in src], axis=0) for m in models}, index=ATTRS).T.round(3)


def neighbors_table(results: Results) -> pd.DataFrame:
    """ΔE of every attribute (ft_aug - ft_none, mean over seeds) under the three neighbourhoods."""
    aug = results.params.aug_attributes[0]
    if not results.per_seed:
        return _synthetic_only("fine-tuning differences")
    out = {}
    for mode in energy.NEIGHBORS:
        d = [r.energies[mode][f"ft_{aug}"].mean(0) - r.energies[mode]["ft_none"].mean(0) for r in results.per_seed]
        out[mode] = np.nanmean(d, axis=0)
    return pd.DataFrame(out, index=ATTRS).T.round(3)


def h_table(results: Results) -> pd.DataFrame:
    """ΔE of the augmented attribute (ft_aug - ft_none, kNN) at every stencil step (empty unless swept)."""
    p = results.params
    if not results.per_seed:
        return _synthetic_only("stencil-step sweep")
    out = {}
    for aug in p.aug_attributes:
        a = ATTRS.index(aug)
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
    """Wall seconds per stage, mean over seeds, and the energy's share of the evaluation (render + embed)."""
    if not results.per_seed:
        return _synthetic_only("stage timings")
    t = pd.DataFrame([r.timing for r in results.per_seed]).mean()
    t["energy / (render + embed)"] = t["energy"] / (t["render"] + t["embed"])
    return t.round(4).to_frame("seconds (mean over seeds)")


def metrics(results: Results) -> dict[str, Any]:
    """Small JSON-able summary of the run."""
    if not results.per_seed:
        from companion.papers.fr_geometry import real

        return real.metrics(results.real)
    df = rows(results)
    out: dict[str, Any] = {k: [round(float(x), 4) for x in df[k]] for k in df.columns}
    for aug in results.params.aug_attributes[1:]:
        d = [experiment.summary_row(r, results.params.neighbors, aug) for r in results.per_seed]
        out[f"dE_{aug}"] = [round(x["dE"], 4) for x in d]
    out["auc"] = {m: round(float(np.mean([r.auc[m] for r in results.per_seed])), 4) for m in results.per_seed[0].auc}
    out["ks_gap_macro_seeds"] = [round(x, 4) for x in results.ks_gaps()]
    out["null_vectors_dropped"] = int(sum(r.dropped for r in results.per_seed))
    t = timing_table(results).iloc[:, 0]
    out["energy_share_of_eval"] = float(t["energy / (render + embed)"])
    out["seconds"] = round(results.seconds, 1)
    return out


# ---------------------------------------------------------------- figures
def plot_gallery(results: Results) -> Figure:
    """One test identity across 5 values of every attribute (rows), and 6 identities at neutral attributes."""
    p = results.params
    ids = faces.sample_identities(6, np.random.default_rng([p.seed, 0]))
    fig, axes = plotting.figure(ncols=6, nrows=len(ATTRS) + 1, width=0.9, height=0.9)
    one = faces.take(ids, np.zeros(5, int))
    for r, (attr, (lo, hi)) in enumerate(faces.ATTRIBUTES.items()):
        a = faces.neutral_attributes(5)
        a[attr] = np.linspace(lo, hi, 5)
        img = faces.render(one, a, 48)
        axes[6 * r].text(1.0, 0.5, attr, ha="right", va="center", fontsize=8)
        for c in range(5):
            axes[6 * r + c + 1].imshow(img[c])
    img = faces.render(ids, faces.neutral_attributes(6), 48)
    last = 6 * len(ATTRS)
    for c in range(6):
        axes[last + c].imshow(img[c])
    for ax in axes:
        ax.set_axis_off()
    return fig


def plot_energies(results: Results) -> Figure:
    """Violins of per-identity energies per attribute and model (all seeds), E = 1 marked."""
    import seaborn as sns

    if not results.per_seed:
        from companion.papers.fr_geometry import real

        return real.plot_energies(results.real)
    mode = results.params.neighbors
    recs = [(m, ATTRS[a], float(e)) for r in results.per_seed for m, E in r.energies[mode].items()
            for a in range(len(ATTRS)) for e in E[:, a]]
    df = pd.DataFrame(recs, columns=["model", "attribute", "energy"])
    fig, (ax,) = plotting.figure(width=10.0, height=3.4)
    sns.violinplot(data=df, x="attribute", y="energy", hue="model", ax=ax, cut=0, density_norm="width",
                   linewidth=0.6, inner=None)
    ax.axhline(1.0, color="grey", ls="--", lw=0.8)
    ax.set_ylabel(f"energy ({mode})")
    ax.set_xlabel("")
    ax.legend(ncols=5, fontsize=7, loc="lower left")
    return fig


def plot_sensitivity(results: Results) -> Figure:
    """Mean sensitivity S per attribute and model (log scale): energy ignores magnitude, this shows it."""
    if not results.per_seed:
        return _empty("sensitivities: synthetic presets only")
    S = energy_table(results, what="sensitivity")
    fig, (ax,) = plotting.figure(width=7.0, height=2.8)
    x = np.arange(len(ATTRS))
    w = 0.8 / len(S)
    for i, (m, row) in enumerate(S.iterrows()):
        ax.bar(x + i * w - 0.4 + w / 2, row.values, w, label=m)
    ax.set_xticks(x, ATTRS)
    ax.set_yscale("log")
    ax.set_ylabel("sensitivity S (mean ||v|| / 2h)")
    ax.legend(ncols=5, fontsize=7)
    return fig


def plot_quiver(results: Results) -> Figure:
    """The contrast field of one test identity on the first two PCs of its point cloud: ft_none vs ft_aug."""
    if not results.per_seed:
        return _empty("vector fields: synthetic presets only")
    r = results.per_seed[0]
    aug = results.params.aug_attributes[0]
    a = ATTRS.index("contrast")
    fig, axes = plotting.figure(ncols=2, width=3.6, height=3.4)
    for ax, m in zip(axes, ("ft_none", f"ft_{aug}")):
        P, V = r.quiver[m]
        mu = P.mean(0)
        _, _, Vt = np.linalg.svd(P - mu, full_matrices=False)
        xy, uv = (P - mu) @ Vt[:2].T, V @ Vt[:2].T
        uv = uv / np.maximum(np.linalg.norm(uv, axis=1, keepdims=True), 1e-12)
        ax.quiver(xy[:, 0], xy[:, 1], uv[:, 0], uv[:, 1], angles="xy", width=0.006)
        ax.scatter(xy[:, 0], xy[:, 1], s=6, color="grey")
        e, s = r.energies["knn"][m][0, a], r.sens[m][0, a]
        ax.set_title(f"{m}: E = {e:.2f}, S = {s:.2f}", fontsize=9)
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
    return fig


def plot_macro(results: Results) -> Figure:
    """ECDFs of within-group vs cross-group distances (skin: identity-level; expression: image-level),
    and KS per attribute for the base and the random model."""
    if not results.per_seed:
        from companion.papers.fr_geometry import real

        return real.plot_macro(results.real)
    r = results.per_seed[0]
    fig, axes = plotting.figure(ncols=3, width=3.3, height=3.0)
    for ax, attr in zip(axes, ("skin_hue (identity)", "expression (image)")):
        d = r.macro_dists[attr]
        for key, style in (("a", "-"), ("not_a", "-"), ("cross", "--")):
            x = np.sort(d[key])
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), style, label=key)
        ax.set_title(f"{attr}: KS = {r.macro['base'][attr]['ks_max']:.2f}", fontsize=9)
        ax.set_xlabel("cosine distance")
        ax.set_ylabel("ECDF")
        ax.legend(fontsize=7)
    mt = macro_table(results)["ks_max"].unstack(0)
    mt.plot.bar(ax=axes[2], rot=20)
    axes[2].set_ylabel("KS (max), mean over seeds")
    axes[2].set_xlabel("")
    return fig


def _empty(text: str) -> Figure:
    """A blank figure with a note (a panel this preset cannot draw)."""
    fig, (ax,) = plotting.figure(width=4.0, height=1.0)
    ax.text(0.5, 0.5, text, ha="center", va="center")
    ax.set_axis_off()
    return fig


def glue_values(results: Results) -> dict[str, float]:
    """The numbers the page's prose quotes (glued by myst-nb)."""
    if not results.per_seed:
        return {}
    df = rows(results)
    et = energy_table(results)
    st = energy_table(results, what="sensitivity")
    aug = results.params.aug_attributes[0]
    t = timing_table(results).iloc[:, 0]
    return {
        "dE_mean": float(df["dE"].mean()), "dE_min": float(df["dE"].min()), "dE_max": float(df["dE"].max()),
        "max_other": float(df["max_other"].max()), "control_move": float(df["control_move"].mean()),
        "target_move": float(df["target_move"].mean()),
        "S_ftn": float(df["S_ftn"].mean()), "S_ftaug": float(df["S_ftaug"].mean()),
        "gap_mean": float(df["gap"].mean()), "ks_gap_mean": float(np.mean(results.ks_gaps())),
        "n_macro": len(results.ks_gaps()), "ks_gap_min": float(min(results.ks_gaps())),
        "ks_gap_max": float(max(results.ks_gaps())),
        "E_rand_bright": float(et.loc["random", "brightness"]), "E_base_bright": float(et.loc["base", "brightness"]),
        "E_base_pose": float(et.loc["base", "pose"]), "E_base_contrast": float(et.loc["base", "contrast"]),
        "E_ftaug_contrast": float(et.loc[f"ft_{aug}", "contrast"]),
        "S_base_mean": float(st.loc["base"].mean()),
        "energy_share": float(t["energy / (render + embed)"]),
        "auc_base": float(np.mean([r.auc["base"] for r in results.per_seed])),
        "auc_random": float(np.mean([r.auc["random"] for r in results.per_seed])),
        "n_seeds": len(results.per_seed),
    }
