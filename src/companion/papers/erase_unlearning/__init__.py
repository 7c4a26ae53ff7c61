"""Fast Exact Unlearning for In-Context Learning Data for LLMs (Muresanu, Thudi, Zhang, Papernot, ICML 2025).

arXiv: https://arxiv.org/abs/2402.00751 -- PMLR 267:45272-45288. No official code was released.

Reproduced at small scale: ERASE picks the k in-context demonstrations of a frozen learner by
quantized k-means over sentence embeddings and unlearns a training point exactly -- a cheap
certificate when the quantized centroids do not move, a recluster with the same randomness otherwise
(k-means++ seeds drawn by an exponential race keyed by point id, so they move only when the deleted
point is a seed). We test that the ordered prompt after unlearning is distributed like the prompt of
a model trained without the point (a chi-square test over many draws on a 5-point set with k = 2,
against the reference code's fresh-refit rule and the previous keep-seeds rule as controls),
compare accuracy with fine-tuning a head (plain and SISA) and with random demonstrations, count the
FLOPs and time of every unlearning request against SISA's shard retraining and against reclustering
on every request, sweep the dataset size, and compute the holistic (inference-inclusive) break-even
deletion rate at LLM scale.

Written by hand, because no maintained library does it: Q-k-means with the exact certificate
(:mod:`.qkmeans`, after Ginart et al.'s reference code ``tginart/deletion-efficient-kmeans`` with
the spec's exactness fixes), the ERASE selection and its unlearning (:mod:`.erase`; the paper's
Algorithm 1 is reconstructed, its body was not readable), SISA over an MLP head (:mod:`.sisa`), the
template intent corpus (:mod:`.intents`), the frozen learners (:mod:`.icl`) and the cost model
(:mod:`.cost`). Embeddings come from MiniLM through ``sentence-transformers`` (:mod:`.embed`).

This module holds the declarations; the experiment (:mod:`.experiment`), the figures (:mod:`.plots`)
and the paper preset (:mod:`.paper_preset`) load on first use.
"""

from __future__ import annotations

from dataclasses import dataclass

from companion.claims import Claim
from companion.contract import exports
from companion.params import BaseParams, ParamError, local_default, param, require_path

SLUG = "erase-unlearning"
PAPER_PRESET = ("the paper's setting from local files: ERASE prompts for a local instruct LLM (model_path) on "
                "BBII task files (data_path), answering by the best-scoring label; SISA fine-tunes MLP heads on "
                "MiniLM embeddings, not LoRA adapters on the LLM; the exact-in-distribution test and the scaling "
                "sweep are model-free and run as in the toy; the claims' bars are the toy's (no paper numbers "
                "were retrieved); smoke=true runs it on a few queries and deletions")


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the small-scale ERASE reproduction (defaults: the quick preset)."""

    seeds: int = param(3, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    dataset: str = param("intents", choices=("intents", "digits", "gmm"),
                         help="intents: template utterances embedded by MiniLM (falls back to digits "
                              "when the encoder is missing); digits / gmm: the spec's fallbacks")
    n_train: int = param(1200, lo=100, hi=200_000, help="training points (the ICL pool)")
    n_test: int = param(600, lo=10, hi=100_000, help="test queries")
    label_noise: float = param(0.05, lo=0.0, hi=0.5, help="share of flipped training labels (intents only)")
    k_shots: int = param(24, lo=1, hi=512, help="in-context examples = Q-k-means clusters")
    k_grid: tuple[int, ...] = param((6, 12, 24, 48), lo=1, hi=512, help="k values of the accuracy-vs-k figure")
    proj_dim: int = param(8, lo=2, hi=64, help="dimension d' of the random projection the clustering runs in")
    eps: float = param(0.2, lo=1e-4, hi=10.0, help="lattice width of the quantizer")
    iters_T: int = param(10, lo=1, hi=50, help="Lloyd iterations (fixed)")
    gamma_momentum: float = param(0.2, lo=0.0, hi=1.0, help="momentum threshold m = gamma n0 / k, fixed at construction")
    tau_icl: float = param(0.05, lo=0.01, hi=1.0, help="temperature of the attention read-out learner")
    sisa_shards: int = param(4, lo=1, hi=64, help="SISA shards S")
    sisa_slices: int = param(4, lo=1, hi=64, help="SISA slices R per shard")
    ft_epochs: int = param(30, lo=1, hi=1000, help="epochs of the fine-tuned head (SISA: spread over the slices)")
    n_deletions: int = param(100, lo=10, hi=100_000, help="sequential unlearning requests to ERASE and random-k")
    sisa_deletions: int = param(20, lo=1, hi=10_000, help="unlearning requests to SISA (each retrains slices)")
    ft_deletions: int = param(2, lo=1, hi=100, help="full retrains timed for plain fine-tuning")
    distr_draws: int = param(8000, lo=200, hi=1_000_000, help="draws per arm and seed of the exact-in-distribution "
                             "test on a fixed 5-point set, k = 2 (unlearned, fresh-refit and keep-seeds controls, "
                             "retrained without the point)")
    random_prompts: int = param(20, lo=2, hi=1000, help="random-k prompts averaged into random-k accuracy")
    exact_checks: int = param(20, lo=1, hi=10_000, help="certified deletions (coupling) and reclusters (replay) checked per seed")
    scaling_ns: tuple[int, ...] = param((1000, 4000), lo=100, hi=1_000_000, min_len=2,
                                        help="dataset sizes of the synthetic scaling sweep")
    scaling_deletions: int = param(60, lo=10, hi=10_000, help="ERASE deletions per size in the scaling sweep")
    scaling_variants: bool = param(False, help="also sweep eps/2, 2 eps and d'/2, 2 d' (one seed)")
    llm_params_for_cost: float = param(7e9, lo=1e6, hi=1e13, help="LLM size N of the analytic holistic cost")
    queries_for_cost: float = param(1e6, lo=1.0, hi=1e15, help="queries N_q of the holistic cost")
    model_path: str = param(local_default(SLUG, "llm"), help="paper preset: local instruct LLM folder "
                            "(Hugging Face format) used as the in-context learner")
    data_path: str = param(local_default(SLUG, "bbii"), help="paper preset: folder of BBII task files "
                           "(<task>.json with input/output examples)")
    smoke: bool = param(False, help="paper preset on a tiny budget (a few queries and deletions, < 2 min CPU)")

    PRESETS = {
        "full": {"seeds": 5, "n_train": 4000, "n_test": 1000, "sisa_shards": 8, "ft_epochs": 60,
                 "n_deletions": 300, "sisa_deletions": 20, "ft_deletions": 2, "exact_checks": 50,
                 "distr_draws": 16000, "scaling_ns": (1000, 2000, 4000, 8000), "scaling_variants": True},
        "paper": {"seeds": 3, "n_deletions": 100, "sisa_deletions": 20, "exact_checks": 20, "random_prompts": 5},
    }

    def __post_init__(self) -> None:
        if self.preset == "paper":
            require_path("model_path", self.model_path, "a local instruct LLM saved with save_pretrained "
                         "(config.json, weights, tokenizer)", "dir")
            require_path("data_path", self.data_path, "BBII task files <task>.json with input/output "
                         "examples", "dir")
            return
        if self.n_train < 10 * self.k_shots:
            raise ParamError(f"parameter 'n_train': {self.n_train} is below 10 k_shots = {10 * self.k_shots}; "
                             f"allowed: n_train >= 10 k_shots")
        if 10 * max(self.k_grid) > self.n_train:
            raise ParamError(f"parameter 'k_grid': {max(self.k_grid)} needs n_train >= {10 * max(self.k_grid)}; "
                             f"allowed: every k <= n_train / 10 = {self.n_train // 10}")
        if self.n_deletions > self.n_train // 2:
            raise ParamError(f"parameter 'n_deletions': {self.n_deletions}; allowed: at most n_train / 2 = "
                             f"{self.n_train // 2}")
        if self.sisa_deletions > self.n_deletions or self.exact_checks > self.n_deletions:
            raise ParamError(f"parameter 'sisa_deletions': {self.sisa_deletions} (exact_checks "
                             f"{self.exact_checks}); allowed: at most n_deletions = {self.n_deletions}")
        if self.sisa_shards * self.sisa_slices > self.n_train // 4:
            raise ParamError(f"parameter 'sisa_shards': {self.sisa_shards} x sisa_slices {self.sisa_slices}; "
                             f"allowed: at most n_train / 4 = {self.n_train // 4} slices in all")
        if self.k_shots * 10 > min(self.scaling_ns) or self.scaling_deletions > min(self.scaling_ns) // 2:
            raise ParamError(f"parameter 'scaling_ns': {min(self.scaling_ns)}; allowed: every n >= 10 k_shots "
                             f"and >= 2 scaling_deletions")


# ---------------------------------------------------------------- claims
CLAIMS = [
    Claim("exact-in-distribution", "Chi-square test of homogeneity, pooled over seeds (the fixed 5-point 1-d set, "
          "k = 2, T = 1, eps = 2, deleting one point; distr_draws independent draws per arm and seed): the ordered "
          "prompt after unlearning x against the prompt of textbook ERASE trained on D minus x; p-value. Controls: "
          "the reference code's fresh-refit rule, and the previous keep-seeds rule with the position-keyed "
          "sequential k-means++ sampler", "exact unlearning (claim 1)", 1e-3, ">=", kind="exact",
          controls=("fresh-refit", "keep-seeds")),
    Claim("same-randomness", "Identity check: on every draw of the exact-in-distribution test, the model after "
          "unlearning equals the model trained on D minus x with the same randomness (race key, phases), bit "
          "for bit: share of draws", "exact by construction (id-keyed race seeding)", 1.0, ">=", kind="exact",
          role="check"),
    Claim("coupled-certified", "Coupling check: a certified deletion leaves Q-k-means and the prompt equal to "
          "training without the point with the same seeds and phases: share of checked deletions",
          "exact by construction", 1.0, ">=", kind="exact", role="check"),
    Claim("replay-recluster", "Determinism check: a recluster equals the same refit replayed from the saved RNG "
          "state, and stored sums and counts match the data: share of reclusters",
          "(consistency of the code)", 1.0, ">=", kind="exact", role="check"),
    Claim("cost-median", "Median counted FLOPs of an ERASE deletion / median of a SISA deletion; control: "
          "reclustering on every request (no certificate)",
          "'vastly lower' (no number retrieved)", 1e-3, "<=", controls=("recluster-always",)),
    Claim("cost-mean", "Mean counted FLOPs of an ERASE deletion, reclusters included / mean of SISA; control: "
          "reclustering on every request (no certificate)",
          "'vastly lower' (no number retrieved)", 1e-2, "<=", controls=("recluster-always",)),
    Claim("scale-erase", "Mean ERASE FLOPs per deletion at the largest n / at the smallest n (synthetic sweep); "
          "the bar is 0.875 of linear growth n_max / n_min at the quick sweep (3.5 over 4x); control: "
          "reclustering on every request", "'independent of dataset size'", 3.5, "<=",
          controls=("recluster-always",)),
    Claim("scale-sisa", "Consistency of the cost model: SISA's FLOPs per deletion grow with n "
          "(ratio / (n_max / n_min))", "linear in n", 0.75, ">=", kind="exact", role="check"),
    Claim("acc-vs-ft", "Test accuracy of ERASE (k = k_shots) minus the fine-tuned head's; control: random-k "
          "demonstrations (mean over random_prompts prompts) minus the fine-tuned head",
          "'similar' to fine-tuning (no number retrieved)", -0.10, ">=", controls=("random-k",)),
    Claim("acc-vs-random", "ERASE beats random demonstrations: test accuracy of ERASE minus the mean over "
          "random_prompts random-k prompts at the same k, at least +0.01; control: a single further random "
          "prompt minus that mean (centred at 0, so it can fail)", "ERASE better than random demos", 0.01, ">=",
          controls=("single-random-k",)),
    Claim("holistic-crossing", "Consistency of the holistic cost: the total-cost curves cross at the closed-form "
          "break-even rate rho* (relative gap; 0 when ERASE dominates)", "claim 4 (trade-off)", 0.01, "<=",
          kind="exact", role="check"),
]

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "run_seed", "claim_values", "Results", "SeedResult", "Task", "accuracy_table",
                   "cost_table", "paths", "distribution_table", "glue_values", "exact_in_distribution"),
    "plots": ("plot_accuracy", "plot_costs", "plot_scaling", "plot_holistic", "plot_distribution"),
})
