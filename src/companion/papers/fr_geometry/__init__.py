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
the paper's tables were not available offline). The untrained network (same architecture and initialisation, no training) is measured on the same
stencils and images as the control of every energy and KS finding. :mod:`.paper_preset` is the
``paper`` preset (see ``PAPER_PRESET``). This module holds the declarations; the experiment
(:mod:`.experiment`) and the figures (:mod:`.plots`) load on first use.
"""

from __future__ import annotations

from dataclasses import dataclass

from companion.claims import Claim
from companion.contract import exports
from companion.papers.fr_geometry import energy, faces
from companion.params import BaseParams, ParamError, local_default, param, require_path

SLUG = "fr-geometry"
PAPER_PRESET = ("not the paper's setting: photometric stencils (illumination, brightness, contrast, hue) applied to "
                "CelebA photos and embedded by a user-supplied TorchScript model, plus the KS / entropy table over "
                "the 40 CelebA attributes; no GAN-Control lattice and no fine-tuning, so every claim row is NaN "
                "(INCONCLUSIVE) there")


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

NO_AUG = ("the same-budget fine-tune without augmentation, measured from the base model: E(ft_none) - E(base)")
CLAIMS = [
    Claim("aug-energy-up", "Targeted augmentation raises the augmented attribute's energy: mean over test identities "
          "of E(ft_contrast) - E(ft_none) for contrast; controls: no-augmentation, " + NO_AUG + " for contrast; "
          "other-attributes, the largest mean ΔE of any other attribute (does the augmentation raise everything?)",
          "energy shifts after fine-tuning (claim 3; violins, no number read)", 0.05,
          controls=("no-augmentation", "other-attributes")),
    Claim("aug-energy-up-every", "The same difference in every seed (worst seed); control: no-augmentation",
          "(spec: per seed)", 0.05, kind="every", controls=("no-augmentation",)),
    Claim("aug-ids-positive-every", "Share of test identities with a positive difference, worst seed (spec: >= 5 of "
          "8); control: no-augmentation", "(spec)", 0.625, kind="every", controls=("no-augmentation",)),
    Claim("aug-specific-every", "Specificity, worst seed: the contrast ΔE (ft_contrast - ft_none) minus the largest "
          "|ΔE| over all six other attributes, photometric ones included; control: no-augmentation",
          "(spec, which excluded the photometric neighbours)", 0.0, kind="every", controls=("no-augmentation",)),
    Claim("invariance-gap", "Base model: mean E over pose, expression, hair hue minus mean E over brightness, "
          "contrast (varying degrees of invariance); control: untrained, the same gap of the untrained network",
          "different invariance across attributes (claim 3)", 0.25, controls=("untrained",)),
    Claim("invariance-gap-every", "The same gap in every seed (worst seed); control: untrained", "(spec)", 0.25,
          kind="every", controls=("untrained",)),
    Claim("macro-ks-gap", "Macroscale: KS(skin hue, identity-level) - max KS(expression, hair hue; image-level), "
          "base model, max-aggregated; over macro_seeds base models; control: untrained, the same gap of each "
          "seed's untrained network on the same images", "identity attributes organise inter-identity distances "
          "(claims 1, 4)", 0.05, controls=("untrained",)),
    Claim("macro-ks-gap-every", "The same KS gap for every base model (worst of macro_seeds); control: untrained",
          "(spec)", 0.05, kind="every", controls=("untrained",)),
    Claim("guard-auc", "Validity guard: lowest verification AUC of any trained or fine-tuned model, all seeds",
          "(spec: >= 0.80, else 'invalid run')", 0.80, kind="every", role="check"),
    Claim("guard-sensitivity", "Validity guard: lowest mean sensitivity S over attributes of any trained or "
          "fine-tuned model, all seeds (no collapse)", "(spec: >= 0.05)", 0.05, kind="every", role="check"),
]

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "claim_values", "Results", "rows", "energy_table", "neighbors_table", "h_table",
                   "macro_table", "timing_table", "glue_values"),
    "plots": ("plot_gallery", "plot_energies", "plot_sensitivity", "plot_quiver", "plot_macro"),
})
