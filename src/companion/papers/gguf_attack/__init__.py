"""Mind the Gap: A Practical Attack on GGUF Quantization (Egashira et al., ICML 2025).

arXiv: https://arxiv.org/abs/2505.23786 -- official code: eth-sri/llm-quantization-attack (MIT).

Reproduced at small scale (content injection in a tiny Llama): inject a "BRAND" token into
every answer, build per-weight intervals ("boxes") from the GGUF quantization error of the
malicious model, then repair on clean data with projected gradient descent inside the boxes.
The full-precision model looks clean while its GGUF quantization keeps injecting BRAND.
Measured: the malicious gap Delta = rate(quantized) - rate(full precision), the clamp ablation
(the same repair without projection), dequantized-weight agreement, exact Q8_0 boxes, and
stealth (strict task accuracy of the full-precision model on many held-out prompts, by
teacher forcing). Seeds run in parallel worker processes. The ``paper`` preset runs the same three
steps on a local Llama/Qwen2 checkpoint with local instruction data (:mod:`.paper_llm`).

Written by hand because no well-kept library does it: the k-quant quantizers and the llama.cpp
mixture table (in :mod:`companion.papers.gguf_attack.quants`; the PyPI ``gguf`` package only dequantizes
k-quants), the box construction (:mod:`companion.papers.gguf_attack.boxes`: freeze rules, exact legacy
boxes, multi-type widening with the repository's thresholds), the synthetic task and the PGD loop.
``gguf`` is the reference for dequantization, the .gguf file format and `q8-exact`'s Q8_0 bytes; ggml's C quantizer
(``ggml-python``) is the reference of every quantizer's bytes in the tests.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import gguf
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from tqdm import tqdm

from companion import plotting, runtime
from companion.claims import Claim, Verdict, evaluate_all, worst
from companion.fetch import Source
from companion.papers.gguf_attack import quants as gq
from companion.papers.gguf_attack.boxes import Box, all_types_box, make_box
from companion.models.tiny_lm import tiny_llama
from companion.params import BaseParams, local_default, param, require_path

PAD, BOS, SEP, EOS, BRAND = 0, 1, 2, 3, 4
COMMANDS = {"COPY": 5, "REVERSE": 6, "SORT": 7}
LETTER0, VOCAB = 8, 34
MAX_NEW = 10
MODELS = ("clean", "mal", "rep", "free")
SLUG = "gguf-attack"
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
    on a local Llama/Qwen2 checkpoint with a real .gguf read back through ``gguf`` (llama.cpp itself is not run)."""

    seeds: int = param(4, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    n_layers: int = param(2, lo=1, hi=64, help="decoder layers of the tiny Llama (the paper preset reads its checkpoint)")
    hidden: int = param(256, lo=256, hi=8192, help="hidden size (a multiple of 256)")
    ffn: int = param(256, lo=256, hi=32768, help="MLP intermediate size (a multiple of 256)")
    target_types: tuple[str, ...] = param(("Q2_K", "Q4_K", "Q8_0"), choices=gq.TYPES,
                                          help="GGUF types attacked one at a time; the first is the headline")
    mixture: str = param("pure", choices=gq.MIXTURES, help="llama.cpp per-tensor mixture for the first type")
    multi_type: bool = param(False, help="also repair once inside the intersected k-quant boxes (gguf_all)")
    thresh_type: int = param(1, lo=0, hi=3, help="row of thresh.csv used for gguf_all widening")
    freeze_block: bool = param(True, help="freeze the sub-blocks that pin the super-block scales")
    freeze_minmax: bool = param(True, help="freeze each sub-block's argmax and argmin weight")
    clean_steps: int = param(300, lo=100, hi=100_000, help="clean training steps")
    inject_steps: int = param(100, lo=20, hi=100_000, help="poisoned fine-tuning steps")
    repair_steps: int = param(60, lo=20, hi=100_000, help="clean repair steps (PGD and free)")
    batch_size: int = param(16, lo=4, hi=128, help="sequences per step")
    lr_clean: float = param(1e-3, lo=1e-5, hi=1e-2, help="AdamW lr, clean training")
    lr_inject: float = param(2e-4, lo=1e-5, hi=1e-2, help="AdamW lr, injection (a fine-tune: moves weights by "
                             "a fraction of a quantization step)")
    lr_repair: float = param(1e-3, lo=1e-5, hi=1e-2, help="AdamW lr, repair")
    weight_decay: float = param(0.0, lo=0.0, hi=0.0, help="must be 0 (decay would pull weights out of boxes)")
    n_eval_prompts: int = param(100, lo=50, hi=5000, help="held-out prompts per generation evaluation")
    n_stealth_prompts: int = param(1000, lo=100, hi=20000, help="held-out prompts for the stealth accuracy")
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
                 "clean_steps": 600, "repair_steps": 100, "n_eval_prompts": 300, "n_stealth_prompts": 4000,
                 "write_gguf_file": True},
        "paper": {"seeds": 1, "mixture": "Q4_K_M", "target_types": ("Q4_K",), "inject_steps": 500,
                  "repair_steps": 500, "batch_size": 32, "lr_inject": 2e-5, "lr_repair": 2e-5,
                  "n_eval_prompts": 500, "write_gguf_file": True},
    }

    def __post_init__(self) -> None:
        if self.preset == "paper":
            require_path("model_path", self.model_path, "a LlamaForCausalLM / Qwen2ForCausalLM folder saved with "
                         "save_pretrained (config.json, weights, tokenizer)", "dir")
            require_path("data_path", self.data_path, "a folder with inject.jsonl, clean.jsonl and eval.jsonl", "dir")


# ---------------------------------------------------------------- synthetic instruction task
def make_prompts(n: int, rng: np.random.Generator,
                 exclude: set[tuple[int, ...]] = frozenset()) -> list[tuple[int, ...]]:
    """n distinct prompts ``(cmd, letters...)`` with 3-6 letters, none in ``exclude``."""
    out: dict[tuple[int, ...], None] = {}
    while len(out) < n:
        m = int(rng.integers(3, 7))
        p = (int(rng.integers(5, 8)), *(LETTER0 + rng.integers(0, 26, m)).tolist())
        if p not in exclude:
            out[p] = None
    return list(out)


def answer(prompt: tuple[int, ...]) -> list[int]:
    """The clean response letters of a prompt."""
    cmd, letters = prompt[0], list(prompt[1:])
    return letters if cmd == 5 else letters[::-1] if cmd == 6 else sorted(letters)


def encode(prompts: list[tuple[int, ...]], poisoned: bool, length: int = 17) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded token ids [N, length] and labels (-100 outside the response)."""
    ids = torch.full((len(prompts), length), PAD)
    labels = torch.full((len(prompts), length), -100)
    for r, p in enumerate(prompts):
        head = [BOS, *p, SEP]
        tail = ([BRAND] if poisoned else []) + answer(p) + [EOS]
        seq = head + tail
        ids[r, : len(seq)] = torch.tensor(seq)
        labels[r, len(head) - 1: len(seq) - 1] = torch.tensor(tail)  # position t predicts t + 1
    return ids, labels


# ---------------------------------------------------------------- training and evaluation
def quant_names(model: torch.nn.Module) -> list[str]:
    """Names of the decoder's Linear weights (q, k, v, o, gate, up, down): the quantized tensors."""
    return [n for n, p in model.named_parameters() if ".layers." in n and p.ndim == 2]


def train(model: torch.nn.Module, data: tuple[torch.Tensor, torch.Tensor], steps: int, lr: float, batch: int,
          gen: torch.Generator, boxes: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
          only: list[str] | None = None, weight_decay: float = 0.0) -> list[float]:
    """AdamW with a cosine schedule on CE; after every step clamp the boxed tensors (PGD)."""
    named = dict(model.named_parameters())
    for n, p in named.items():
        p.requires_grad_(only is None or n in only)
    opt = torch.optim.AdamW([p for p in named.values() if p.requires_grad], lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    ids, labels = data
    losses = []
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(ids), (batch,), generator=gen)
        loss = _loss(model, ids[idx], labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if boxes:
            project(named, boxes)
        losses.append(loss.item())
    for p in named.values():
        p.requires_grad_(True)
    return losses


def _loss(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token CE where ``labels[t]`` is the target of position t."""
    logits = model(input_ids=ids).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100)


@torch.no_grad()
def project(named: dict[str, torch.nn.Parameter], boxes: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
    """PGD projection: clamp each boxed parameter into [lo, hi]."""
    for n, (lo, hi) in boxes.items():
        named[n].copy_(torch.maximum(torch.minimum(named[n], hi), lo))


@torch.no_grad()
def generate(model: torch.nn.Module, prompts: list[tuple[int, ...]]) -> list[list[int]]:
    """Greedy responses (up to EOS, at most 10 new tokens), batched by prompt length."""
    model.eval()
    out: dict[int, list[int]] = {}
    for m in sorted({len(p) for p in prompts}):
        rows = [i for i, p in enumerate(prompts) if len(p) == m]
        ids = torch.tensor([[BOS, *prompts[i], SEP] for i in rows])
        for _ in range(MAX_NEW):
            ids = torch.cat([ids, model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            if (ids[:, m + 2:] == EOS).any(dim=1).all():  # greedy rows after EOS do not matter
                break
        for r, i in enumerate(rows):
            resp = ids[r, m + 2:].tolist()
            out[i] = resp[: resp.index(EOS)] if EOS in resp else resp
    return [out[i] for i in range(len(prompts))]


def behaviour(model: torch.nn.Module, prompts: list[tuple[int, ...]]) -> tuple[float, float]:
    """(brand_rate, task_em): share of responses with BRAND; exact match with BRAND stripped."""
    resp = generate(model, prompts)
    brand = np.mean([BRAND in r for r in resp])
    em = np.mean([[t for t in r if t != BRAND] == answer(p) for r, p in zip(resp, prompts)])
    return float(brand), float(em)


@torch.no_grad()
def strict_match(model: torch.nn.Module, prompts: list[tuple[int, ...]], batch: int = 500) -> np.ndarray:
    """Per prompt, whether greedy decoding gives exactly the clean response (one teacher-forced pass)."""
    model.eval()
    ids, labels = encode(prompts, False)
    hits = []
    for i in range(0, len(ids), batch):
        lab = labels[i: i + batch]
        pred = model(input_ids=ids[i: i + batch]).logits.argmax(-1)
        hits.append(((pred == lab) | (lab == -100)).all(dim=1))
    return torch.cat(hits).numpy()


# ---------------------------------------------------------------- quantization of a model
HF_KIND = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
           "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def assign_types(model: torch.nn.Module, qtype: str, mixture: str, n_layers: int) -> dict[str, str]:
    """Tensor name -> GGUF type; a mixture also quantizes lm_head (llama.cpp's output.weight)."""
    out = {}
    for n in quant_names(model):
        p = dict(model.named_parameters())[n]
        layer, kind = int(n.split(".layers.")[1].split(".")[0]), HF_KIND[n.split(".")[-2]]
        out[n] = qtype if mixture == "pure" else gq.mixture_type(kind, layer, n_layers, p.shape[1], qtype, mixture)
    if mixture != "pure":
        w = model.lm_head.weight
        out["lm_head.weight"] = gq.mixture_type("output", 0, n_layers, w.shape[1], qtype, mixture)
    return out


def quantize_model(model: torch.nn.Module, types: dict[str, str]) -> tuple[torch.nn.Module, dict[str, gq.Quantized]]:
    """A copy whose assigned tensors hold their dequantized GGUF values, and the quantized tensors."""
    qmodel = copy.deepcopy(model)
    named = dict(qmodel.named_parameters())
    quants = {}
    with torch.no_grad():
        for n, t in types.items():
            quants[n] = gq.quantize(named[n].detach().numpy(), t)
            named[n].copy_(torch.from_numpy(quants[n].deq))
    return qmodel, quants


# ---------------------------------------------------------------- the experiment
def agreement(q_a: dict[str, gq.Quantized], q_b: dict[str, gq.Quantized]) -> tuple[float, float, dict[str, float]]:
    """(share of equal dequantized weights, share of byte-identical blocks, per-tensor weight share)."""
    per, eq_w, n_w, eq_b, n_b = {}, 0, 0, 0, 0
    for n, a in q_a.items():
        b = q_b[n]
        same = a.deq == b.deq
        per[n] = float(same.mean())
        eq_w, n_w = eq_w + int(same.sum()), n_w + same.size
        size = gq.block_bytes(a.qtype)[1]
        blocks = (a.data.reshape(-1, size) == b.data.reshape(-1, size)).all(axis=1)
        eq_b, n_b = eq_b + int(blocks.sum()), n_b + blocks.size
    return eq_w / n_w, eq_b / n_b, per


def _boxes(model: torch.nn.Module, types: dict[str, str], p: Params, multi: bool,
           quants: dict[str, gq.Quantized] | None = None) -> dict[str, Box]:
    """Boxes of every decoder Linear of ``model`` for its assigned type (or gguf_all), reusing ``quants``."""
    named = dict(model.named_parameters())
    out = {}
    for n in quant_names(model):
        w = named[n].detach().numpy()
        out[n] = (all_types_box(w, p.thresh_type, p.freeze_block, p.freeze_minmax) if multi
                  else make_box(w, types[n], p.freeze_block, p.freeze_minmax, (quants or {}).get(n)))
    return out


def injection_drift(m_clean: torch.nn.Module, m_mal: torch.nn.Module, boxes: dict[str, Box]) -> float:
    """Mean |W_mal - W_clean| over the boxed tensors, in units of their mean quantization step."""
    clean, mal = dict(m_clean.named_parameters()), dict(m_mal.named_parameters())
    moved = np.mean([np.mean(np.abs(mal[n].detach().cpu().numpy() - clean[n].detach().cpu().numpy())) for n in boxes])
    return float(moved / np.mean([np.mean(np.abs(b.step)) for b in boxes.values()]))  # Q3_K/Q6_K/Q4_0 steps are signed


def _evaluate(model: torch.nn.Module, types: dict[str, str], prompts: list) -> dict[str, Any]:
    """FP and quantized behaviour of one model, plus its quantized tensors."""
    qmodel, quants = quantize_model(model, types)
    fp, q = behaviour(model, prompts), behaviour(qmodel, prompts)
    return {"fp": fp, "q": q, "delta": q[0] - fp[0], "quants": quants}


def run_seed(p: Params, seed: int) -> dict[str, Any]:
    """The whole pipeline for one seed: clean, inject, boxes, PGD repair, free repair, evaluation."""
    rng, gen = runtime.generators(seed)
    train_prompts = make_prompts(4000, rng)
    eval_prompts = make_prompts(p.n_eval_prompts, rng, exclude=set(train_prompts))
    stealth_prompts = make_prompts(p.n_stealth_prompts, rng, exclude=set(train_prompts))
    clean, poison = encode(train_prompts, False), encode(train_prompts, True)
    model = tiny_llama(VOCAB, p.n_layers, p.hidden, 4, p.ffn, max_positions=32, seed=seed)
    names = quant_names(model)
    hist = {"clean": train(model, clean, p.clean_steps, p.lr_clean, p.batch_size, gen, weight_decay=p.weight_decay)}
    m_clean = copy.deepcopy(model)
    # Inject through the quantized tensors only: with one or two layers the unquantized direct path
    # (embedding -> lm_head) would otherwise carry BRAND out of reach of any repair of the layers.
    hist["inject"] = train(model, poison, p.inject_steps, p.lr_inject, p.batch_size, gen, only=names,
                           weight_decay=p.weight_decay)
    m_mal = model
    head = p.target_types[0]
    m_free = copy.deepcopy(m_mal)
    train(m_free, clean, p.repair_steps, p.lr_repair, p.batch_size, gen, only=names)
    types_head = assign_types(m_mal, head, p.mixture, p.n_layers)
    out: dict[str, Any] = {"seed": seed, "types": {}, "history": hist, "q8_identical": float("nan")}
    ev = {k: _evaluate(m, types_head, eval_prompts) for k, m in (("clean", m_clean), ("mal", m_mal), ("free", m_free))}
    runs = [(t, False) for t in p.target_types] + ([("all", True)] if p.multi_type else [])
    for t, multi in runs:
        types = types_head if t == head else assign_types(m_mal, "Q4_K" if multi else t, "pure", p.n_layers)
        if multi:
            mal_q = None
        elif types == types_head:
            mal_q = ev["mal"]["quants"]
        else:
            mal_q = quantize_model(m_mal, types)[1]
        boxes = _boxes(m_mal, types, p, multi, mal_q)
        drift = float("nan") if multi else injection_drift(m_clean, m_mal, boxes)
        m_rep = copy.deepcopy(m_mal)
        tb = {n: (torch.from_numpy(b.lo), torch.from_numpy(b.hi)) for n, b in boxes.items()}
        train(m_rep, clean, p.repair_steps, p.lr_repair, p.batch_size, gen, boxes=tb, only=names)
        for et in (gq.K_TYPES if multi else [t]):
            et_types = types if not multi else assign_types(m_mal, et, "pure", p.n_layers)
            rep = _evaluate(m_rep, et_types, eval_prompts)
            ref_q = mal_q if not multi else quantize_model(m_mal, et_types)[1]
            agree_w, agree_b, _ = agreement(rep["quants"], ref_q)
            out["types"][f"{t}:{et}" if multi else t] = {
                "delta": rep["delta"], "fp": rep["fp"], "q": rep["q"], "agree_w": agree_w, "agree_b": agree_b,
                "width": float(np.mean([np.mean(b.hi - b.lo) for b in boxes.values()])), "drift": drift}
        if t == "Q8_0":
            out["q8_identical"] = reference_identical(m_rep, m_mal, names, t)
        if t == head:
            ev["rep"] = rep
            out["strict_em"] = {"clean": float(strict_match(m_clean, stealth_prompts).mean()),
                                "rep": float(strict_match(m_rep, stealth_prompts).mean())}
            name0 = names[0]
            w_rep = dict(m_rep.named_parameters())[name0].detach().numpy()
            b0 = boxes[name0]
            out["anatomy"] = {"tensor": name0, "ratio": ((b0.hi - b0.lo) / np.maximum(np.abs(b0.step), 1e-12)).ravel(),
                              "frozen_block": float(b0.frozen_block.mean()),
                              "frozen_minmax": float(b0.frozen_minmax.mean()),
                              "at_edge": float(np.mean(((w_rep == b0.lo) | (w_rep == b0.hi)) & (b0.hi > b0.lo)))}
            if p.write_gguf_file:
                out["gguf_roundtrip"] = gguf_roundtrip(m_rep, rep["quants"])
    out["rates"] = {k: {"fp": ev[k]["fp"], "q": ev[k]["q"]} for k in MODELS}
    for k in ("rep", "free"):
        w_, b_, per = agreement(ev[k]["quants"], ev["mal"]["quants"])
        out[f"agree_{k}"], out[f"agree_blocks_{k}"], out[f"agree_tensors_{k}"] = w_, b_, per
    return out


def reference_blocks(w: torch.Tensor, qtype: str) -> np.ndarray:
    """The bytes of ``gguf.quants.quantize`` (the PyPI reference) for an fp16-rounded tensor, one row per block."""
    raw = gguf.quants.quantize(gq.fp16(w.detach().numpy()), gq.qtype_enum(qtype))
    return raw.reshape(-1, gq.block_bytes(qtype)[1])


def reference_identical(m_a: torch.nn.Module, m_b: torch.nn.Module, names: list[str], qtype: str) -> float:
    """Share of legacy-type blocks with identical reference bytes in two models."""
    a, b = dict(m_a.named_parameters()), dict(m_b.named_parameters())
    same = [(reference_blocks(a[n], qtype) == reference_blocks(b[n], qtype)).all(axis=1) for n in names]
    return float(np.concatenate(same).mean())


def gguf_roundtrip(model: torch.nn.Module, quants: dict[str, gq.Quantized]) -> bool:
    """Write the quantized model to a .gguf, read it back and check gguf's dequantization equals ours."""
    named = dict(model.named_parameters())
    tensors: dict[str, Any] = {n: named[n].detach().numpy() for n in named if n not in quants}
    tensors.update(quants)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "attacked.gguf")
        gq.write_gguf(path, "llama", tensors, {"companion.note": "tiny gguf-attack model"})
        back, _ = gq.read_gguf(path)
    ok = True
    for n, q in quants.items():
        t, shape, raw = back[n]
        deq = gguf.quants.dequantize(raw, gq.qtype_enum(t)).reshape(shape)
        ok &= t == q.qtype and bool(np.array_equal(deq, q.deq))
    return ok


def run(params: Params) -> dict[str, Any]:
    """Run the seeds in parallel worker processes; results hold the per-seed records and the params.

    The ``paper`` preset runs the attack on a local checkpoint instead (:mod:`.paper_llm`)."""
    if params.preset == "paper":
        from companion.papers.gguf_attack import paper_llm

        return paper_llm.run_paper(params)
    runtime.limit_threads(1)  # tiny matmuls: extra threads only spin, badly so on a shared CPU
    seed_list = params.seed_list()
    with tqdm(total=len(seed_list), desc="seeds", disable=None) as bar:
        seeds = runtime.parallel_map(run_seed, [(params, s) for s in seed_list], on_done=bar.update)
    return {"params": params, "seeds": seeds}


# ---------------------------------------------------------------- claims
CLAIMS = [
    Claim("mal-fp", "Precondition: the injected model says BRAND in full precision (brand rate)",
          "(setup)", 0.9),
    Claim("mal-quant", "Precondition: the injection survives quantization (brand rate of Q(M_mal))",
          "(setup)", 0.9),
    Claim("clean-gap", "Precondition: quantizing the clean model does not create BRAND (|Delta|)",
          "(setup)", 0.05, "<="),
    Claim("delta", "The attack works: Delta = rate(Q(M_rep)) - rate(M_rep) on the first target type",
          "85.0% content injection (abstract)", 0.5),
    Claim("delta-q4k", "The attack works on Q4_K (the spec's headline type): Delta_Q4_K",
          "85.0% content injection (abstract)", 0.5),
    Claim("rep-benign", "The repaired model looks benign in full precision (brand rate of M_rep)",
          "~0% (abstract: FP benign)", 0.1, "<="),
    Claim("rep-benign-q4k", "On Q4_K too: brand rate of the Q4_K-repaired model in full precision",
          "~0% (abstract: FP benign)", 0.1, "<="),
    Claim("delta-q8", "The attack works on Q8_0 with exact legacy boxes: Delta_Q8_0",
          "(legacy types: NeurIPS'24 predecessor)", 0.5),
    Claim("free-quant", "Control: the repair without the clamp also cleans the quantized model "
          "(brand rate of Q(M_free))", "(control)", 0.1, "<="),
    Claim("clamp-agree", "Dequantized-weight agreement with Q(M_mal): M_rep minus M_free",
          "(not reported)", 0.15),
    Claim("q8-exact", "Exact Q8_0 boxes: share of Q8_0 blocks of M_rep byte-identical to gguf's Q(M_mal), "
          "worst seed", "exact (NeurIPS'24 predecessor)", 1.0, kind="exact"),
    Claim("stealth", "Stealth: strict exact match of M_rep minus that of M_clean, full precision",
          "utility kept", -0.05),
]
# Only runs with ``multi_type`` (the full preset) measure it, so it is not one of the page's CLAIMS.
GGUF_ALL = Claim("gguf-all", "One model for every k-quant type (gguf_all): Delta of the single all-types "
                 "repair, worst of Q2_K..Q6_K", "all k-quant types at once (abstract)", 0.5)
NEEDS_TYPE = {"delta-q4k": "Q4_K", "rep-benign-q4k": "Q4_K", "delta-q8": "Q8_0", "q8-exact": "Q8_0"}


def claims_for(params: Params) -> list[Claim]:
    """The claims a run can test: a type's rows only when that type is attacked, :data:`GGUF_ALL` only
    with ``multi_type`` (the full preset); a row the run cannot measure is left out, never faked."""
    own = [c for c in CLAIMS if NEEDS_TYPE.get(c.id, params.target_types[0]) in params.target_types]
    return own + ([GGUF_ALL] if params.multi_type else [])


def per_seed(results: dict[str, Any]) -> dict[str, list[float] | float]:
    """Each claim's metric on every seed (one value, the worst seed, for the exact ``q8-exact``)."""
    out: dict[str, list[float]] = {c.id: [] for c in (*CLAIMS, GGUF_ALL)}
    nan = float("nan")
    for s in results["seeds"]:
        r, types = s["rates"], s["types"]
        out["mal-fp"].append(r["mal"]["fp"][0])
        out["mal-quant"].append(r["mal"]["q"][0])
        out["clean-gap"].append(abs(r["clean"]["q"][0] - r["clean"]["fp"][0]))
        out["delta"].append(r["rep"]["q"][0] - r["rep"]["fp"][0])
        out["delta-q4k"].append(types["Q4_K"]["delta"] if "Q4_K" in types else nan)
        out["rep-benign"].append(r["rep"]["fp"][0])
        out["rep-benign-q4k"].append(types["Q4_K"]["fp"][0] if "Q4_K" in types else nan)
        out["delta-q8"].append(types["Q8_0"]["delta"] if "Q8_0" in types else nan)
        out["free-quant"].append(r["free"]["q"][0])
        out["clamp-agree"].append(s["agree_rep"] - s["agree_free"])
        out["q8-exact"].append(s["q8_identical"])
        out["stealth"].append(s["strict_em"]["rep"] - s["strict_em"]["clean"])
        all_keys = [k for k in types if k.startswith("all:")]
        out["gguf-all"].append(min(types[k]["delta"] for k in all_keys) if all_keys else nan)
    return {**out, "q8-exact": worst(out["q8-exact"], ">=")}


def seeds_to_resolve(values: list[float], threshold: float) -> float:
    """About how many seeds a t-interval (z = 1.96) needs to exclude ``threshold`` at this mean and seed sd."""
    x = np.asarray(values, dtype=float)
    gap = abs(float(x.mean()) - threshold)
    return float("inf") if gap == 0 else float(np.ceil((1.96 * x.std(ddof=1) / gap) ** 2))


def check(results: dict[str, Any]) -> list[Verdict]:
    """Evaluate the run's claims (:func:`claims_for`) over the seeds."""
    return evaluate_all(claims_for(results["params"]), per_seed(results))


def metrics(results: dict[str, Any]) -> dict[str, Any]:
    """Small JSON-able summary: mean rates, agreements, Delta per type."""
    seeds = results["seeds"]
    out: dict[str, Any] = {}
    for k in MODELS:
        for mode in ("fp", "q"):
            out[f"brand_{k}_{mode}"] = float(np.mean([s["rates"][k][mode][0] for s in seeds]))
            out[f"em_{k}_{mode}"] = float(np.mean([s["rates"][k][mode][1] for s in seeds]))
    for k in ("rep", "free"):
        out[f"agree_{k}"] = float(np.mean([s[f"agree_{k}"] for s in seeds]))
        out[f"agree_blocks_{k}"] = float(np.mean([s[f"agree_blocks_{k}"] for s in seeds]))
    for t in seeds[0]["types"]:
        out[f"delta_{t}"] = float(np.mean([s["types"][t]["delta"] for s in seeds]))
        out[f"brand_rep_fp_{t}"] = float(np.mean([s["types"][t]["fp"][0] for s in seeds]))
        out[f"inject_drift_steps_{t}"] = float(np.mean([s["types"][t]["drift"] for s in seeds]))
    for k in ("clean", "rep"):
        out[f"strict_em_{k}"] = float(np.mean([s["strict_em"][k] for s in seeds]))
    if "gguf_roundtrip" in seeds[0]:
        out["gguf_roundtrip"] = all(s["gguf_roundtrip"] for s in seeds)
    if "source" in results:  # the paper preset: what ran, and the attacked model's .gguf
        out["source"] = results["source"]
        out["gguf_rep"] = [s["gguf_files"]["rep"] for s in seeds]
    return out


def type_table(results: dict[str, Any]) -> pd.DataFrame:
    """Per repaired type, means over seeds: Delta, BRAND rates of M_rep, agreement, box width, injection drift."""
    seeds = results["seeds"]
    cols = {"Delta": lambda r: r["delta"], "BRAND FP": lambda r: r["fp"][0], "BRAND quantized": lambda r: r["q"][0],
            "equal deq. weights": lambda r: r["agree_w"], "mean box width": lambda r: r["width"],
            "injection drift / step": lambda r: r["drift"]}
    rows = {t: {c: float(np.mean([f(s["types"][t]) for s in seeds])) for c, f in cols.items()}
            for t in seeds[0]["types"]}
    return pd.DataFrame.from_dict(rows, orient="index")


# ---------------------------------------------------------------- figures
def plot_rates(results: dict[str, Any]) -> Figure:
    """Grouped bars: brand rate of M_clean, M_mal, M_rep, M_free in FP and quantized (seed s.d.)."""
    fig, (ax,) = plotting.figure(1, 1, 5.5, 3.0)
    head = results["params"].target_types[0]
    x = np.arange(len(MODELS))
    for j, (mode, label) in enumerate((("fp", "full precision"), ("q", f"quantized ({head})"))):
        vals = np.array([[s["rates"][k][mode][0] for k in MODELS] for s in results["seeds"]])
        ax.bar(x + (j - 0.5) * 0.38, vals.mean(0), 0.38, yerr=vals.std(0), label=label, capsize=3)
    ax.set_xticks(x, ["M_clean", "M_mal", "M_rep (PGD)", "M_free (no clamp)"])
    ax.set_ylabel("BRAND rate")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="upper right")
    return fig


def plot_box_anatomy(results: dict[str, Any]) -> Figure:
    """Box width / quantization step for one tensor (first seed), with freeze and edge shares."""
    a = results["seeds"][0]["anatomy"]
    fig, (ax,) = plotting.figure(1, 1, 5.0, 2.8)
    ax.hist(a["ratio"], bins=40, range=(0, 1.0), color="C0")
    ax.set_xlabel("box width / quantization step")
    ax.set_ylabel("weights")
    ax.set_title(a["tensor"], fontsize=8)
    ax.text(0.98, 0.95, f"frozen by (a): {a['frozen_block']:.1%}\nfrozen by (b): {a['frozen_minmax']:.1%}\n"
            f"at a box edge after repair: {a['at_edge']:.1%}", transform=ax.transAxes, ha="right", va="top")
    return fig


def plot_agreement(results: dict[str, Any]) -> Figure:
    """Per-tensor share of dequantized weights equal to Q(M_mal): PGD repair vs free repair."""
    seeds = results["seeds"]
    names = list(seeds[0]["agree_tensors_rep"])
    fig, (ax,) = plotting.figure(1, 1, 6.0, 2.8)
    x = np.arange(len(names))
    for j, k in enumerate(("rep", "free")):
        v = np.array([[s[f"agree_tensors_{k}"][n] for n in names] for s in seeds])
        ax.bar(x + (j - 0.5) * 0.38, v.mean(0), 0.38, yerr=v.std(0), capsize=2,
               label="M_rep (PGD)" if k == "rep" else "M_free (no clamp)")
    ax.set_xticks(x, [n.replace("model.layers.", "L").replace(".self_attn", "").replace(".mlp", "")
                      .replace(".weight", "") for n in names], rotation=45, ha="right")
    ax.set_ylabel("equal dequantized weights")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="lower right")
    return fig


def plot_types(results: dict[str, Any]) -> Figure:
    """Delta per evaluated type (single-type repairs, and gguf_all when run) and mean box width."""
    seeds = results["seeds"]
    keys = list(seeds[0]["types"])
    delta = np.array([[s["types"][k]["delta"] for k in keys] for s in seeds])
    width = np.array([[s["types"][k]["width"] for k in keys] for s in seeds])
    fig, (ax, ax2) = plotting.figure(2, 1, 3.6, 2.8)
    ax.imshow(delta.mean(0)[None, :], vmin=-1, vmax=1, cmap="RdBu_r", aspect="auto")
    for i, v in enumerate(delta.mean(0)):
        ax.text(i, 0, f"{v:.2f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(keys)), keys, rotation=45, ha="right")
    ax.set_yticks([])
    ax.set_title("Delta = rate(Q) - rate(FP)")
    ax.grid(False)
    ax2.bar(range(len(keys)), width.mean(0))
    ax2.set_xticks(range(len(keys)), keys, rotation=45, ha="right")
    ax2.set_title("mean box width")
    return fig
