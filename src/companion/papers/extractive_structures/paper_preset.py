"""The ``paper`` preset: ordering, grafting and layer keeping on natural-language dax/zong facts
(:mod:`.pretrained_dax`), then the paper's two-hop test, on a local pretrained causal LM."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from companion import runtime
from companion.models import causal_lm
from companion.params import resolve_path
from companion.papers.extractive_structures import Params, pretrained_dax, two_hop_facts
from companion.papers.extractive_structures.experiment import Results, SeedResult

# ---------------------------------------------------------------- the paper's test on a pretrained LM

LM_BATCH = 8  # the official batch size
# fact and implication rank after finetuning on the facts, no layer frozen (layer-freezing table, OLMo-7b)
PAPER_LM_RANKS = {"first hop": (0.00, 0.00), "second hop": (0.00, 1.80)}


def run_pretrained(params: Params) -> Results:
    """The paper preset: ordering, grafting and layer keeping per seed, then the two-hop test, on the LM."""
    runtime.limit_threads()
    if params.smoke:
        params = replace(params, seeds=min(params.seeds, 2), lm_epochs=min(params.lm_epochs, 2))
    model, tok = causal_lm.load(str(resolve_path(params.model_path)), runtime.resolve_device(params.device))
    seeds = params.seed_list()
    per_seed = [SeedResult(**pretrained_dax.run_seed(model, tok, s, params.lm_epochs, params.lm_lr))
                for s in tqdm(seeds, desc="seeds", disable=None, leave=False)]
    return Results(params, seeds, per_seed, pretrained_ocr(params, model, tok), on_lm=True)


def pretrained_ocr(params: Params, model=None, tok=None) -> pd.DataFrame:
    """Finetune the model at ``model_path`` (or the one given) on each hop's 20 new facts; ranks and log-probs
    before and after."""
    if model is None:
        model, tok = causal_lm.load(str(resolve_path(params.model_path)), runtime.resolve_device(params.device))
    rng = np.random.default_rng(params.seed)
    saved = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}  # CPU: spare GPU memory
    rows = {}
    for hop in two_hop_facts.two_hops(rng):
        facts = causal_lm.encode(tok, hop.fact_prompts, hop.fact_answers)
        impls = causal_lm.encode(tok, hop.impl_prompts, hop.impl_answers)
        tests = [(facts, causal_lm.first_tokens(tok, hop.fact_options),
                  torch.tensor([hop.fact_options.index(a) for a in hop.fact_answers])),
                 (impls, causal_lm.first_tokens(tok, hop.impl_options),
                  torch.tensor([hop.impl_options.index(a) for a in hop.impl_answers]))]

        def measure() -> list[float]:
            ranks = [float(causal_lm.option_ranks(model, *t).float().mean()) for t in tests]
            return ranks + [float(causal_lm.answer_logprob(model, impls).mean())]

        before = measure()
        causal_lm.finetune(model, facts, params.lm_epochs, params.lm_lr, LM_BATCH, rng)
        after = measure()
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(saved[n])
        rows[hop.name] = before + after + list(PAPER_LM_RANKS[hop.name])
    cols = [f"{what} {when}" for when in ("before", "after") for what in ("fact rank", "impl rank", "impl log-prob")]
    return pd.DataFrame.from_dict(rows, orient="index", columns=cols + ["paper fact rank", "paper impl rank"])


def pretrained_table(results: Results) -> pd.DataFrame | str:
    """The two-hop test on the pretrained LM (ranks among 20 options, chance 9.5), or why it did not run."""
    if results.pretrained is None:
        return "model_path is empty: the pretrained-LM test did not run (see the paper preset)"
    return results.pretrained.round(2).rename_axis(f"{results.params.model_path} (chance 9.5)")


