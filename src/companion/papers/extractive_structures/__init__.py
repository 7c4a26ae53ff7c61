"""Extractive Structures Learned in Pretraining Enable Generalization on Finetuned Facts.

Jiahai Feng, Stuart Russell, Jacob Steinhardt. ICML 2025 (PMLR 267). https://arxiv.org/abs/2412.04614

What is reproduced, at toy scale, with a 2-block ``transformers`` GPT-2 trained here:

- the *data-ordering effect*: a model finetuned on facts ``name dax -> city`` then on implications
  ``name zong -> animal(city)`` answers the implication for *new* names after learning only their
  facts (out-of-context reasoning, OCR); trained implications-first it does not; the control is a
  facts-first model that ends its training on the facts of fresh names, as implications-first ends on facts
  (so it forgets the training implications as implications-first does);
- *weight grafting*: the weight change that implications add on top of known facts, grafted onto a
  model that learned counterfactual facts, predicts the counterfactual implications; the change
  learned from implications alone does not;
- a two-block analogue of layer freezing, and the linearised extractive scores (informative,
  upstream, downstream) of the facts-first model on the test implications.

With ``model_path`` the paper's own two-hop OCR test also runs on a pretrained causal LM read from a
local folder (``companion.models.causal_lm``, ``companion.papers.extractive_structures.two_hop_facts``).
The ``paper`` preset runs the paper's experiments on that model instead of the toy: data ordering,
weight grafting and layer keeping on natural-language dax/zong facts
(``companion.papers.extractive_structures.pretrained_dax``), and the two-hop test.

The synthetic world of names, cities and animals is ``companion.papers.extractive_structures.fact_world``. Entity
representations come from pretraining in the paper; here a "pretraining" stage on other
names' facts builds a fact-storage pathway and the name embeddings are then frozen.
Written by hand because no maintained library does it: the rank metric, the phase schedule, the
grafting algebra (``companion.papers.extractive_structures.weight_deltas``) and the extractive scores
(``companion.papers.extractive_structures.gpt2_attribution``). The model classes are ``transformers``'.

This module holds the declarations; the experiment (:mod:`.experiment`), the figures (:mod:`.plots`) and
the paper preset (:mod:`.paper_preset`) load on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from companion.claims import Claim
from companion.contract import exports
from companion.fetch import Source
from companion.params import BaseParams, ParamError, local_default, param, require_path, resolve_path

ORDERS = ("facts_first", "impl_first", "facts_first_refreshed", "impl_first_retained", "joint")
CONTRAST_ORDERS = ("facts_first", "impl_first")  # the trainable-name contrast reruns these two
SCORE_KINDS = ("informative", "upstream", "downstream")
LOG_EVERY_A = 3  # Stage-A trajectory resolution in epochs (evaluation only; training is unchanged)


# issue 46 trims, decided from measured cost before any verdict of the new code was read: the two control
# orders on every seed made a quick run 188 CPU s (budget 140) and put full near 850 CPU s (budget 1000):
# quick 8 -> 6 seeds and 2 -> 1 contrast seed (then 147 CPU s, so 6 -> 5 seeds), full 20 -> 16 seeds and
# 5 -> 4 contrast seeds; the forgetting-matched arm then made quick 161 CPU s at 5 seeds, so 5 -> 4 seeds (full, estimated
# from one seed at full settings, stays near 500 CPU s: unchanged)
FULL = {"seeds": 16, "n_pre_names": 300, "n_train_names": 200, "epochs_pre": 100, "epochs_phase": 80,
        "epochs_test": 40, "replay_size": 100, "trace_seeds": 5, "contrast_seeds": 4}


PAPER_PRESET = ("the paper's experiments on a local pretrained causal LM (model_path), not the toy: data "
                "ordering (with the forgetting-matched facts-first arm, the retention-matched implications-first "
                "arm and joint), weight grafting and layer keeping on generated dax/zong facts, and the two-hop "
                "test; official optimiser settings (batch 8, batch 4 in facts-first's implication phase as in "
                "train_left_first); the graft delta D_{F,Impl} is that batch-4 ordering phase, not a separate "
                "batch-8 training as in the official gradient_grafting.py; one fp32 CPU copy of the weights plus "
                "at most two deltas (about 83 GB for OLMo-7B); the claims' bars are the toy's, and the spec's LM "
                "targets (graft rank < 3, control graft > 7, impl-first near chance 9.5) are not checked")

SOURCES = (
    Source("model", "OLMo-7B, the paper's main model (Hugging Face format)", "Apache-2.0",
           repo_id="allenai/OLMo-7B-hf", allow=("*.json", "*.safetensors", "*.txt", "*.model")),
)


def _model_dir_problem(folder: Path) -> str | None:
    """Why ``folder`` is not a saved Hugging Face model folder (torch-free, as
    ``companion.models.causal_lm.model_dir_problem``), or ``None``."""
    if not Path(folder).is_dir():
        return f"{str(folder)!r} is not a directory"
    if not (Path(folder) / "config.json").is_file():
        return f"{str(folder)!r} has no config.json (save the model with save_pretrained)"
    return None


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the toy reproduction (defaults = quick preset)."""

    seeds: int = param(4, lo=1, hi=64, help="number of seeds the claims are evaluated over (8 before issue 46, "
                       "5 before the forgetting-matched arm)")
    n_pre_names: int = param(200, lo=50, hi=2000, help="pretraining names (dax facts only)")
    n_train_names: int = param(160, lo=40, hi=1000, help="training names (the five orders, grafting); as many "
                               "refresh names again (facts only) for facts_first_refreshed")
    n_test_names: int = param(40, lo=5, hi=1000, help="test names per test finetune; a multiple of n_cities")
    test_slices: int = param(3, lo=1, hi=10, help="test finetunes per order, each from the same Stage-A "
                             "model on its own new names (more evaluation items)")
    n_cities: int = param(20, lo=5, hi=50, help="cities = animals = answer options")
    n_layer: int = param(2, lo=2, hi=4, help="GPT-2 blocks")
    d_model: int = param(64, lo=32, hi=256, help="residual width")
    n_head: int = param(4, lo=1, hi=16, help="attention heads; divides d_model")
    lr: float = param(1e-3, lo=3e-4, hi=3e-3, help="Adam learning rate, every phase")
    batch_size: int = param(64, lo=16, hi=256, help="batch size")
    epochs_pre: int = param(80, lo=40, hi=300, help="epochs of the pretraining stage")
    epochs_phase: int = param(60, lo=20, hi=200, help="epochs of each Stage-A phase")
    epochs_test: int = param(30, lo=10, hi=100, help="epochs of the test-fact finetune")
    replay_size: int = param(80, lo=0, hi=2000, help="pretraining facts replayed in Stage A")
    freeze_name_embeddings: bool = param(True, help="False shows the failure mode")
    run_grafting: bool = param(True, help="run the weight-grafting experiment")
    run_scores: bool = param(True, help="compute the extractive-score heatmaps")
    trace_seeds: int = param(2, lo=1, hi=64, help="the first seeds log per-epoch ranks (figure); every "
                             "seed runs all five orders")
    contrast_seeds: int = param(1, lo=0, hi=64, help="the first seeds rerun with trainable name embeddings")
    model_path: str = param("", help="local folder of a pretrained causal LM: quick and full also run the "
                            "paper's two-hop test on it (empty = toy only); the paper preset runs ordering, "
                            "grafting, layer keeping and the two-hop test on it, and no toy")
    lm_lr: float = param(3e-6, lo=1e-7, hi=1e-2, help="Adam learning rate of the pretrained-LM finetune")
    lm_epochs: int = param(8, lo=1, hi=100, help="epochs of every pretrained-LM finetune phase")
    smoke: bool = param(False, help="paper preset on a tiny budget (two seeds, two epochs per phase)")

    PRESETS = {
        "full": FULL,
        # the paper's experiments on the LM at model_path (required); the toy's parameters are unused
        "paper": {"seeds": 5, "model_path": local_default("extractive-structures", "model")},
    }

    def __post_init__(self) -> None:
        if self.d_model % self.n_head:
            raise ParamError(f"parameter 'n_head': {self.n_head} does not divide d_model={self.d_model}")
        if self.n_test_names % self.n_cities:
            raise ParamError(f"parameter 'n_test_names': {self.n_test_names} is not a multiple of "
                             f"n_cities={self.n_cities}")
        if self.replay_size > self.n_pre_names:
            raise ParamError(f"parameter 'replay_size': {self.replay_size} exceeds n_pre_names={self.n_pre_names}")
        if self.preset == "paper":
            require_path("model_path", self.model_path, "a Hugging Face causal LM folder (config.json, "
                         "weights and tokenizer; the paper used OLMo-7B)", "dir")
        problem = _model_dir_problem(resolve_path(self.model_path)) if self.model_path else None
        if problem:
            raise ParamError(f"parameter 'model_path': {problem}; give a local folder holding a Hugging Face "
                             "causal LM and its tokenizer")


CLAIMS = [
    Claim("ordering-gap", "Implications-first leaves the test implications near chance while facts-first "
          "does not: mean OCR rank gap impl-first minus facts-first; control: the forgetting-matched "
          "facts-first arm (facts, implications, then the facts of fresh names without implications, so Stage A "
          "ends on a new-fact phase as implications-first does) minus facts-first, which passes if forgetting "
          "alone makes the gap",
          "facts first gives OCR, impl. first stays near chance 9.5 (OLMo-7b, data-ordering figure; no printed "
          "value read)", 3.0, ">=", controls=("facts-first-refreshed",)),
    Claim("facts-first-ocr", "Facts-first training gives OCR on new facts: mean zong(test) rank after the test-fact "
          "finetune (chance 9.5); control: the implications-first model's rank",
          "well below chance (OLMo-7b, data-ordering figure)", 5.5, "<=", controls=("impl-first",)),
    Claim("graft-margin", "Grafting D_{F,Impl} beats the control graft D_Impl on counterfactual implications: "
          "rank(control graft) - rank(graft); control: the same margin with D_Impl in place of D_{F,Impl}, "
          "rank(W_F') - rank(W_F' + D_Impl)", "8.42 - 1.13 = 7.29 (grafting table, OLMo-7b)", 2.5, ">=",
          controls=("impl-only-graft",)),
    Claim("graft-ocr", "The graft predicts the counterfactual implications Impl(F'): mean rank; control: the "
          "control graft W_F' + D_Impl", "1.13 (grafting table, OLMo-7b)", 7.0, "<=",
          controls=("impl-only-graft",)),
    Claim("impl-first-chance", "Null confirmed (any model without OCR passes, an untrained one too): "
          "implications-first zong(test) rank (chance 9.5)", "near chance 9.5 (OLMo-7b, data-ordering figure)",
          6.5, ">=", role="check"),
    Claim("no-graft-chance", "Null confirmed (holds by construction: W_F' never saw an implication): W_F' on "
          "Impl(F'), mean rank", "9.12 (grafting table)", 8.0, ">=", role="check"),
    Claim("test-facts-learned", "Sanity: the test facts are learned in every order (worst order's dax(test) rank)",
          "0.00 (fact ranks)", 0.5, "<=", role="check"),
    Claim("no-leakage", "Sanity: before the test finetune zong(test) is at chance (worst order's |rank - 9.5|)",
          "not reported", 2.5, "<=", role="check"),
    Claim("impl-memorised", "Sanity: implications-first has memorised zong(train) right after its implication "
          "phase (its rank then; the rank at the end of Stage A is reported)", "not reported", 0.5, "<=",
          role="check"),
    Claim("refresh-forgets", "Sanity: the forgetting-matched facts-first arm has lost about as much of zong(train) "
          "by the end of Stage A as implications-first (its rank then minus implications-first's)",
          "not in the paper (companion arm)", -2.0, ">=", role="check"),
    Claim("retention-matched", "Sanity: the retention-matched implications-first arm (a reported diagnostic) "
          "knows zong(train) when Stage B starts (its rank at the end of Stage A)", "not in the paper (companion "
          "arm)", 0.5, "<=", role="check"),
]

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "run_seed", "claim_values", "Results", "SeedResult",
                   "layer_keep_table", "contrast_table", "stage_a_table", "page_numbers"),
    "plots": ("plot_ordering", "plot_grafting", "plot_seeds", "plot_scores"),
    "paper_preset": ("run_pretrained", "pretrained_ocr", "pretrained_table"),
})
