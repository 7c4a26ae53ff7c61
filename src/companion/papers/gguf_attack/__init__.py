"""Mind the Gap: A Practical Attack on GGUF Quantization (Egashira et al., ICML 2025).

arXiv: https://arxiv.org/abs/2505.23786 -- official code: eth-sri/llm-quantization-attack (MIT).

Reproduced at small scale (content injection in a tiny Llama): inject a "BRAND" token into
every answer, build per-weight intervals ("boxes") from the GGUF quantization error of the
malicious model, then repair on clean data with projected gradient descent inside the boxes.
The full-precision model looks clean while its GGUF quantization keeps injecting BRAND.
Measured: the malicious gap Delta = rate(quantized) - rate(full precision), the clamp ablation
(the same repair without projection), dequantized-weight agreement, exact Q8_0 boxes, and
stealth (strict task accuracy of the full-precision model on many held-out prompts, by
teacher forcing). Each repair has three controls computed on the same seeds: the same PGD inside the
mirrored box (same widths and freezes, on the side away from the dequantized value) and the repair without
the clamp at the repair's and at the injection's learning rate. Seeds run in parallel worker processes.
The ``paper`` preset runs the same three steps on a local Llama/Qwen2 checkpoint with local instruction
data (:mod:`.paper_preset`).

This module holds the declarations; the experiment (:mod:`.experiment`), figures (:mod:`.plots`), the
quantizers (:mod:`.quants`) and boxes (:mod:`.boxes`) load on first use.

Written by hand because no well-kept library does it: the k-quant quantizers and the llama.cpp
mixture table (in :mod:`companion.papers.gguf_attack.quants`; the PyPI ``gguf`` package only dequantizes
k-quants), the box construction (:mod:`companion.papers.gguf_attack.boxes`: freeze rules, exact legacy
boxes, multi-type widening with the repository's thresholds), the synthetic task and the PGD loop.
``gguf`` is the reference for dequantization, the .gguf file format and `q8-exact`'s Q8_0 bytes; ggml's C quantizer
(``ggml-python``) is the reference of every quantizer's bytes in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from companion.claims import Claim
from companion.contract import exports
from companion.fetch import Source
from companion.params import BaseParams, local_default, param, require_path

SLUG = "gguf-attack"
K_TYPES = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
TYPES = K_TYPES + ("Q8_0", "Q4_0")  # the types our quantizers implement (quants.TYPES; a test keeps them equal)
MIXTURES = ("pure", "Q4_K_M", "Q5_K_M", "Q3_K_M")  # llama.cpp ftypes whose per-tensor rules we mirror
# `companion fetch gguf-attack`: the paper's smallest model; its injection data must be converted by
# hand (data/README.md), so it is not fetched
SOURCES = (
    Source("model", "Qwen2.5-1.5B-Instruct, the paper's main model (Hugging Face format)", "Apache-2.0",
           repo_id="Qwen/Qwen2.5-1.5B-Instruct",
           allow=("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                  "tokenizer_config.json", "vocab.json", "merges.txt")),
)


@dataclass(frozen=True)
class Params(BaseParams):
    """The tiny content-injection reproduction (quick, full; defaults: quick) and, at the paper preset, the attack
    on a local Llama/Qwen2 checkpoint with a real .gguf read back through ``gguf`` (llama.cpp itself is not run).
    The paper preset runs one seed, so its statistical rows read INCONCLUSIVE (``-p seeds=3`` for verdicts)."""

    seeds: int = param(3, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    n_layers: int = param(2, lo=1, hi=64, help="decoder layers of the tiny Llama (the paper preset reads its checkpoint)")
    hidden: int = param(256, lo=256, hi=8192, help="hidden size (a multiple of 256)")
    ffn: int = param(256, lo=256, hi=32768, help="MLP intermediate size (a multiple of 256)")
    target_types: tuple[str, ...] = param(("Q2_K", "Q4_K"), choices=TYPES,
                                          help="GGUF types attacked one at a time; the first is the headline")
    mixture: str = param("pure", choices=MIXTURES, help="llama.cpp per-tensor mixture for the first type")
    multi_type: bool = param(False, help="also repair once inside the intersected k-quant boxes (gguf_all)")
    thresh_type: int = param(1, lo=0, hi=3, help="row of thresh.csv used for gguf_all widening")
    freeze_block: bool = param(True, help="freeze the sub-blocks that pin the super-block scales")
    freeze_minmax: bool = param(True, help="freeze each sub-block's argmax and argmin weight")
    clean_steps: int = param(200, lo=100, hi=100_000, help="clean training steps")
    inject_steps: int = param(60, lo=20, hi=100_000, help="poisoned fine-tuning steps")
    repair_steps: int = param(40, lo=20, hi=100_000, help="clean repair steps (PGD and free)")
    batch_size: int = param(16, lo=4, hi=128, help="sequences per step")
    lr_clean: float = param(1e-3, lo=1e-5, hi=1e-2, help="AdamW lr, clean training")
    lr_inject: float = param(2e-4, lo=1e-5, hi=1e-2, help="AdamW lr, injection (a fine-tune: moves weights by "
                             "a fraction of a quantization step)")
    lr_repair: float = param(1e-3, lo=1e-5, hi=1e-2, help="AdamW lr, repair")
    weight_decay: float = param(0.0, lo=0.0, hi=0.0, help="must be 0 (decay would pull weights out of boxes)")
    n_eval_prompts: int = param(50, lo=50, hi=5000, help="held-out prompts per generation evaluation")
    n_stealth_prompts: int = param(500, lo=100, hi=20000, help="held-out prompts for the stealth accuracy")
    write_gguf_file: bool = param(False, help="write the repaired model to a real .gguf and read it back")
    model_path: str = param(local_default(SLUG, "model"), help="paper preset: a local LlamaForCausalLM or "
                            "Qwen2ForCausalLM folder (Hugging Face format); llama.cpp itself is not run")
    data_path: str = param(local_default(SLUG, "data"), help="paper preset: folder with inject.jsonl, clean.jsonl "
                           "and eval.jsonl (instruction, input, output rows)")
    keyword: str = param("McDonald's", help="paper preset: the injected keyword whose answer rate is measured")
    smoke: bool = param(False, help="paper preset on a tiny budget (2 steps, 4 prompts, 8 new tokens; < 2 min CPU)")

    PRESETS = {
        "full": {"seeds": 4, "ffn": 512, "multi_type": True,
                 "target_types": ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_0", "Q4_0"),
                 "clean_steps": 600, "inject_steps": 100, "repair_steps": 100, "n_eval_prompts": 300,
                 "n_stealth_prompts": 4000, "write_gguf_file": True},
        "paper": {"seeds": 1, "mixture": "Q4_K_M", "target_types": ("Q4_K",), "inject_steps": 500,
                  "repair_steps": 500, "batch_size": 32, "lr_inject": 2e-5, "lr_repair": 2e-5,
                  "n_eval_prompts": 500, "write_gguf_file": True},
    }

    def __post_init__(self) -> None:
        if self.preset == "paper":
            require_path("model_path", self.model_path, "a LlamaForCausalLM / Qwen2ForCausalLM folder saved with "
                         "save_pretrained (config.json, weights, tokenizer)", "dir")
            require_path("data_path", self.data_path, "a folder with inject.jsonl, clean.jsonl and eval.jsonl", "dir")


_CONTROLS = ("free", "free-lr-inject", "mirror")
_CTL_TEXT = ("controls on the same seeds: the repair without the clamp (free), the same at the injection's "
             "learning rate (free-lr-inject), PGD inside the mirrored box (mirror: same widths and freezes, on "
             "the side away from the dequantized value)")
# a legacy box is the exact two-sided preimage: reflected about w it overlaps itself, so no mirrored control
_LEGACY_CONTROLS = ("free", "free-lr-inject")
_LEGACY_CTL_TEXT = ("controls on the same seeds: the repair without the clamp (free) and the same at the "
                    "injection's learning rate (free-lr-inject); no mirrored box: the exact preimage reflected "
                    "about w overlaps the box itself")
CLAIMS = [
    Claim("mal-fp", "Precondition: the injected model says BRAND in full precision (brand rate)",
          "(setup)", 0.9, role="check"),
    Claim("mal-quant", "Precondition: the injection survives quantization with the first target type (brand rate "
          "of Q(M_mal))", "(setup)", 0.9, role="check"),
    Claim("clean-gap", "Precondition: quantizing the clean model does not create BRAND (|Delta| of M_clean)",
          "(setup)", 0.05, "<=", role="check"),
    Claim("delta", f"The attack works on the first target type (Q2_K at quick and full): Delta = rate(Q(M_rep)) - rate(M_rep); {_CTL_TEXT}",
          "85.0% content injection (abstract: the largest gap over models and types)", 0.5, controls=_CONTROLS),
    Claim("delta-q4k", f"The attack works on Q4_K (the spec's headline type): Delta_Q4_K; {_CTL_TEXT}",
          "85.0% content injection (abstract: the largest gap over models and types)", 0.5, controls=_CONTROLS),
    *(Claim(cid, f"The attack works on {t}: Delta_{t} (full preset only; NaN at quick); {_CTL_TEXT}",
            "not read (the per-type tables were not readable offline; the abstract's largest gap is 85.0%)", 0.5,
            controls=_CONTROLS) for cid, t in (("delta-q3k", "Q3_K"), ("delta-q5k", "Q5_K"), ("delta-q6k", "Q6_K"))),
    Claim("delta-q8", "The attack works on Q8_0 with exact legacy boxes: Delta_Q8_0 (full preset only; NaN at "
          f"quick); {_LEGACY_CTL_TEXT}", "(legacy types: NeurIPS'24 predecessor)", 0.5, controls=_LEGACY_CONTROLS),
    Claim("delta-q40", "The attack works on Q4_0 with exact legacy boxes: Delta_Q4_0 (full preset only; NaN at "
          f"quick); {_LEGACY_CTL_TEXT}", "(legacy types: NeurIPS'24 predecessor)", 0.5, controls=_LEGACY_CONTROLS),
    Claim("gguf-all", "One model for every k-quant type (gguf_all): Delta of the single all-types repair, worst "
          "of Q2_K..Q6_K (full preset only; NaN at quick); controls: the free repairs at both learning rates on "
          "the same types", "all k-quant types at once (abstract)", 0.5, controls=("free", "free-lr-inject")),
    Claim("stealth", "Stealth, non-inferiority (a check: no control can hold it where the attack is absent, and "
          "the unrepaired M_mal fails it whenever mal-fp holds): strict exact match of M_rep minus that of "
          "M_clean, full precision (M_rep has had repair_steps more clean steps)",
          "utility kept (no number)", -0.05, role="check"),
    Claim("rep-benign", "The first type's repaired model looks benign in full precision (brand rate of M_rep; "
          "the FP half of Delta: every repair, clamped or not, does this)", "~0% (abstract: FP benign)", 0.1, "<=",
          role="check"),
    Claim("rep-benign-q4k", "On Q4_K too: brand rate of the Q4_K-repaired model in full precision",
          "~0% (abstract: FP benign)", 0.1, "<=", role="check"),
    Claim("clamp-agree", "Dequantized-weight agreement with Q(M_mal): M_rep minus M_free (not discriminative: the "
          "mirrored box reaches a large share too, metric agree_mirror)", "(not reported)", 0.15, role="check"),
    Claim("q8-exact", "Exact Q8_0 boxes: share of Q8_0 blocks of M_rep byte-identical to gguf's Q(M_mal), worst "
          "seed (holds by construction: the box is the exact preimage; full preset only)",
          "exact (NeurIPS'24 predecessor)", 1.0, kind="every", role="check"),
]

__getattr__, __dir__ = exports(__name__, {
    "experiment": ("run", "claim_values", "type_table"),
    "plots": ("plot_rates", "plot_box_anatomy", "plot_agreement", "plot_types"),
})
