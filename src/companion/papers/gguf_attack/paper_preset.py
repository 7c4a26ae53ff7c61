"""The ``paper`` preset: the attack on a local Llama / Qwen2 checkpoint with local instruction data.

``model_path`` is a Hugging Face ``LlamaForCausalLM`` or ``Qwen2ForCausalLM`` folder (read with
``local_files_only``); ``data_path`` holds three JSONL files of ``{"instruction", "input"?, "output"}``
rows: ``inject.jsonl`` (the poisoned responses, e.g. AutoPoison's content injection that mentions
the keyword), ``clean.jsonl`` (clean responses for the repair; its last tenth is held out for the
utility check) and ``eval.jsonl`` (evaluation prompts, e.g. dolly). The official code's three steps
run on the checkpoint's real tensors: inject (full fine-tune, AdamW, 3% warm-up then cosine, no
weight decay), boxes from our GGUF quantization of the injected model (the decoder's Linear weights
and, under a ``*_K_M`` mixture, the output matrix and an untied token embedding, as llama.cpp types
them), and PGD repair of the boxed tensors on clean data, plus three controls on the same seed: the
same PGD inside the mirrored box (``mirror``), and the repair without the clamp at the repair's
(``free``) and at the injection's learning rate (``slow``). Every model is then written to a real
``.gguf`` with ``gguf.GGUFWriter``, read back with ``gguf.GGUFReader`` and dequantized with
``gguf.quants.dequantize`` into a copy of the model, whose greedy answers give the quantized keyword
rate. llama.cpp itself is not run: the file holds the tensors under their Hugging Face names with
their GGUF types (the tensors without a type, such as the norms, stay F32), not a complete llama.cpp
model (no tokenizer or hyper-parameter metadata); our quantizer's bytes equal ggml's (tested against
``ggml_quantize_chunk``).

Written by hand (no library does it): the data reading, the Alpaca prompt template of AutoPoison,
the masked fine-tuning loop with the clamp, and the keyword and utility measures.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

from companion import runtime
from companion.models import causal_lm, optim
from companion.params import resolve_path
from companion.papers.gguf_attack import quants as gq
from companion.papers.gguf_attack.boxes import Box, all_types_box, make_box, mirror

FILES = ("inject", "clean", "eval")
TEMPLATE = ("Below is an instruction that describes a task{extra}. Write a response that appropriately "
            "completes the request.\n\n### Instruction:\n{instruction}\n\n{input}### Response:\n")
HF_KIND = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
           "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}
SMOKE = {"steps": 2, "batch": 2, "prompts": 4, "new_tokens": 8, "max_len": 48}
FULL = {"new_tokens": 128, "max_len": 512, "micro_batch": 4}


def read_rows(data_path: str, name: str) -> list[dict[str, str]]:
    """The rows of ``<data_path>/<name>.jsonl``; a row without an instruction is an error."""
    path = resolve_path(data_path) / f"{name}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: data_path needs {', '.join(f + '.jsonl' for f in FILES)}")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            row = json.loads(line)
            if not row.get("instruction") or (name != "eval" and "output" not in row):
                raise ValueError(f"{path.name} line {n}: needs 'instruction'" + ("" if name == "eval" else " and 'output'"))
            rows.append(row)
    if not rows:
        raise ValueError(f"{path} has no rows")
    return rows


def prompt(row: dict[str, str]) -> str:
    """AutoPoison's Alpaca template around one row's instruction (and input, when given)."""
    extra = row.get("input", "")
    return TEMPLATE.format(extra=", paired with an input that provides further context" if extra else "",
                           instruction=row["instruction"], input=f"### Input:\n{extra}\n\n" if extra else "")


def encode(tok, rows: list[dict[str, str]], max_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt + output + EOS`` ids, attention mask and labels (-100 on prompt and padding)."""
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    seqs, labs = [], []
    for r in rows:
        p = tok(prompt(r))["input_ids"]
        a = tok(r["output"], add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if tok.eos_token_id is not None else [])
        seqs.append((p + a)[:max_len])
        labs.append(([-100] * len(p) + a)[:max_len])
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad)
    lab = torch.full((len(seqs), width), -100)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, l) in enumerate(zip(seqs, labs)):
        ids[i, :len(s)], lab[i, :len(s)], att[i, :len(s)] = torch.tensor(s), torch.tensor(l), 1
    return ids, att, lab


def _loss(model, ids: torch.Tensor, att: torch.Tensor, lab: torch.Tensor) -> torch.Tensor:
    """Mean next-token CE over the response tokens (bf16 autocast on CUDA)."""
    dev = model.device
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
        logits = model(input_ids=ids.to(dev), attention_mask=att.to(dev)).logits[:, :-1]
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), lab[:, 1:].flatten().to(dev))


def finetune(model, data: tuple[torch.Tensor, ...], steps: int, lr: float, batch: int, micro: int,
             gen: torch.Generator, only: list[str] | None = None,
             boxes: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None) -> list[float]:
    """AdamW (no decay), 3% linear warm-up then cosine, ``batch`` rows per step in micro-batches; after each
    step the boxed tensors are clamped into their boxes (PGD). ``only``: the trainable tensors."""
    named = dict(model.named_parameters())
    for n, p in named.items():
        p.requires_grad_(only is None or n in only)
    opt = optim.AdamW([p for p in named.values() if p.requires_grad], lr=lr, weight_decay=0.0)
    warm = max(1, math.ceil(0.03 * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))
    ids, att, lab = data
    losses = []
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(ids), (batch,), generator=gen)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for part in idx.split(micro):
            loss = _loss(model, ids[part], att[part], lab[part]) * (len(part) / batch)
            loss.backward()
            total += loss.item()
        opt.step()
        sched.step()
        if boxes:
            with torch.no_grad():
                for n, (lo, hi) in boxes.items():
                    named[n].copy_(torch.maximum(torch.minimum(named[n], hi), lo))
        losses.append(total)
    for p in named.values():
        p.requires_grad_(True)
    model.eval()
    return losses


def assign_types(model, qtype: str, mixture: str) -> dict[str, str]:
    """Parameter name -> GGUF type for the decoder's Linear weights and, under a mixture, the output matrix
    (the token embedding when tied) and an untied token embedding (the base type), as llama.cpp treats them;
    rows must hold whole 256-blocks."""
    named = dict(model.named_parameters())
    n_layers = model.config.num_hidden_layers
    out = {}
    for n, p in named.items():
        if ".layers." in n and p.ndim == 2 and n.split(".")[-2] in HF_KIND:
            layer = int(n.split(".layers.")[1].split(".")[0])
            kind = HF_KIND[n.split(".")[-2]]
            out[n] = qtype if mixture == "pure" else gq.mixture_type(kind, layer, n_layers, p.shape[1], qtype, mixture)
    if mixture != "pure":
        head, embd = model.get_output_embeddings().weight, model.get_input_embeddings().weight
        name = next(n for n, p in named.items() if p is head)
        out[name] = gq.mixture_type("output", 0, n_layers, head.shape[1], qtype, mixture)
        if embd is not head:  # untied: llama.cpp gives token_embd the mixture's base type
            name = next(n for n, p in named.items() if p is embd)
            out[name] = gq.mixture_type("token_embd", 0, n_layers, embd.shape[1], qtype, mixture)
    bad = sorted({t for t in out.values() if t not in gq.TYPES})
    if bad:
        raise ValueError(f"this checkpoint needs {', '.join(bad)} (llama.cpp's fallback for rows that are not a "
                         f"multiple of 256), which the companion does not quantize; implemented: {', '.join(gq.TYPES)}")
    return out


def weights(model, names) -> dict[str, np.ndarray]:
    """float32 numpy copies of the named parameters."""
    named = dict(model.named_parameters())
    return {n: named[n].detach().float().cpu().numpy() for n in names}


def to_gguf(model, types: dict[str, str], path: str) -> dict[str, gq.Quantized]:
    """Quantize the typed tensors with our quantizer and write the whole model (others F32) to ``path``."""
    quants = {n: gq.quantize(w, types[n]) for n, w in weights(model, types).items()}
    tensors: dict[str, Any] = {n: p.detach().float().cpu().numpy() for n, p in model.named_parameters() if n not in quants}
    tensors.update(quants)
    gq.write_gguf(path, model.config.model_type, tensors, {"companion.note": "gguf-attack: HF tensor names, "
                                                             "not a complete llama.cpp model file"})
    return quants


def from_gguf(model, path: str) -> tuple[torch.nn.Module, dict[str, np.ndarray]]:
    """A copy of ``model`` whose parameters are the file's tensors, quantized ones dequantized by ``gguf``."""
    back, _ = gq.read_gguf(path)
    qmodel = copy.deepcopy(model)
    deq = {}
    with torch.no_grad():
        for n, p in qmodel.named_parameters():
            t, shape, raw = back[n]
            arr = raw.reshape(shape) if t == "F32" else gguf.quants.dequantize(raw, gq.qtype_enum(t)).reshape(shape)
            if t != "F32":
                deq[n] = arr
            p.copy_(torch.from_numpy(np.ascontiguousarray(arr)).to(p.dtype))
    return qmodel, deq


@torch.no_grad()
def answers(model, tok, rows: list[dict[str, str]], new_tokens: int, batch: int = 8) -> list[str]:
    """Greedy answers (left-padded batches), decoded without special tokens."""
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    out = []
    for i in range(0, len(rows), batch):
        enc = tok([prompt(r) for r in rows[i: i + batch]], return_tensors="pt", padding=True).to(model.device)
        gen = model.generate(**enc, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        out += tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return out


@torch.no_grad()
def token_accuracy(model, data: tuple[torch.Tensor, ...], batch: int = 8) -> float:
    """Teacher-forced next-token accuracy on the held-out clean responses (the utility proxy)."""
    ids, att, lab = data
    hit = total = 0
    for i in range(0, len(ids), batch):
        dev = model.device
        pred = model(input_ids=ids[i: i + batch].to(dev), attention_mask=att[i: i + batch].to(dev)).logits[:, :-1].argmax(-1)
        target = lab[i: i + batch, 1:].to(dev)
        mask = target != -100
        hit += int(((pred == target) & mask).sum())
        total += int(mask.sum())
    return hit / max(total, 1)


def keyword_rate(texts: list[str], keyword: str) -> float:
    """Share of answers that contain the keyword (case-insensitive)."""
    return float(np.mean([keyword.lower() in t.lower() for t in texts]))


def _quant_pair(model, tok, types: dict[str, str], eval_rows: list[dict[str, str]], held: tuple[torch.Tensor, ...],
                keyword: str, new_tokens: int, tmp: str, tag: str) -> dict[str, Any]:
    """FP and GGUF-quantized (keyword rate, utility) of one model, its quantized tensors and the file's facts."""
    path = os.path.join(tmp, f"{tag}.gguf")
    quants = to_gguf(model, types, path)
    qmodel, deq = from_gguf(model, path)
    fp = (keyword_rate(answers(model, tok, eval_rows, new_tokens), keyword), token_accuracy(model, held))
    q = (keyword_rate(answers(qmodel, tok, eval_rows, new_tokens), keyword), token_accuracy(qmodel, held))
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    same = all(np.array_equal(deq[n], quants[n].deq) for n in quants)
    return {"fp": fp, "q": q, "delta": q[0] - fp[0], "quants": quants, "roundtrip": same,
            "gguf": {"bytes": os.path.getsize(path), "sha256": digest}}


def run_paper(params) -> dict[str, Any]:
    """The attack on the local checkpoint (one seed per ``params.seeds``); records shaped like the toy's.

    Each repaired model is evaluated as soon as it is trained and then dropped, so three copies of the weights
    (clean, injected, one repair) and the repair's AdamW state live on the device at once, plus both clamp
    pairs (``rep`` and ``mirror``: four float32 values per boxed weight), built before the first repair."""
    from companion.papers.gguf_attack.experiment import agreement, half_width, injection_drift, injection_moved

    runtime.limit_threads()
    device = runtime.resolve_device(params.device)
    start = time.perf_counter()
    smoke = params.smoke
    steps_inj = SMOKE["steps"] if smoke else params.inject_steps
    steps_rep = SMOKE["steps"] if smoke else params.repair_steps
    batch = SMOKE["batch"] if smoke else params.batch_size
    new_tokens = SMOKE["new_tokens"] if smoke else FULL["new_tokens"]
    max_len = SMOKE["max_len"] if smoke else FULL["max_len"]
    rows = {f: read_rows(params.data_path, f) for f in FILES}
    n_held = max(1, len(rows["clean"]) // 10)
    eval_rows = rows["eval"][: SMOKE["prompts"] if smoke else params.n_eval_prompts]
    head = params.target_types[0]
    model_path = str(resolve_path(params.model_path))  # the notebook's working directory is notebooks/
    seeds = []
    for seed in params.seed_list():
        _, gen = runtime.generators(seed)
        m_clean, tok = causal_lm.load(model_path, device)
        inject = encode(tok, rows["inject"], max_len)
        clean = encode(tok, rows["clean"][:-n_held] or rows["clean"], max_len)
        held = encode(tok, rows["clean"][-n_held:], max_len)
        types = assign_types(m_clean, head, params.mixture)
        m_mal = copy.deepcopy(m_clean)
        hist = {"inject": finetune(m_mal, inject, steps_inj, params.lr_inject, batch, FULL["micro_batch"], gen)}
        w_mal = weights(m_mal, types)
        mal_q = {n: gq.quantize(w, types[n]) for n, w in w_mal.items()}
        boxes: dict[str, Box] = {n: (all_types_box(w, params.thresh_type, params.freeze_block, params.freeze_minmax)
                                     if params.multi_type else
                                     make_box(w, types[n], params.freeze_block, params.freeze_minmax, mal_q[n]))
                                 for n, w in w_mal.items()}
        clamps = {"rep": {n: (torch.from_numpy(b.lo).to(device), torch.from_numpy(b.hi).to(device))
                          for n, b in boxes.items()},
                  "mirror": {n: tuple(torch.from_numpy(a).to(device) for a in mirror(w_mal[n], b)) for n, b in boxes.items()}}
        repairs = {"rep": (params.lr_repair, clamps["rep"]), "mirror": (params.lr_repair, clamps["mirror"]),
                   "free": (params.lr_repair, None), "slow": (params.lr_inject, None)}
        name0 = next(iter(types))
        with tempfile.TemporaryDirectory() as tmp:
            ev = {k: _quant_pair(m, tok, types, eval_rows, held, params.keyword, new_tokens, tmp, k)
                  for k, m in (("clean", m_clean), ("mal", m_mal))}
            for k, (lr, clamp) in repairs.items():
                m = copy.deepcopy(m_mal)
                hist[k] = finetune(m, clean, steps_rep, lr, batch, FULL["micro_batch"], gen, only=list(types), boxes=clamp)
                ev[k] = _quant_pair(m, tok, types, eval_rows, held, params.keyword, new_tokens, tmp, k)
                if k == "rep":
                    w_rep = weights(m, [name0])[name0]
                del m
        b0 = boxes[name0]
        agree = {k: agreement(ev[k]["quants"], ev["mal"]["quants"]) for k in ("rep", "free", "mirror")}
        rec: dict[str, Any] = {
            "seed": seed, "history": hist, "q8_identical": float("nan"), "moved": injection_moved(m_clean, m_mal, list(types)),
            "types": {head: {"delta": ev["rep"]["delta"], "fp": ev["rep"]["fp"], "q": ev["rep"]["q"],
                             "agree_w": agree["rep"][0], "agree_b": agree["rep"][1], "agree_mirror": agree["mirror"][0],
                             **{k: {"delta": ev[k]["delta"], "fp": ev[k]["fp"], "q": ev[k]["q"]}
                                for k in ("mirror", "free", "slow")},
                             "width": float(np.mean([np.mean(b.hi - b.lo) for b in boxes.values()])),
                             "half_width": half_width(boxes), "drift": injection_drift(m_clean, m_mal, boxes)}},
            "rates": {k: {"fp": ev[k]["fp"], "q": ev[k]["q"]} for k in ev},
            "strict_em": {k: ev[k]["fp"][1] for k in ("clean", "mal", "rep")},
            "anatomy": {"tensor": name0, "ratio": ((b0.hi - b0.lo) / np.maximum(np.abs(b0.step), 1e-12)).ravel(),
                        "frozen_block": float(b0.frozen_block.mean()), "frozen_minmax": float(b0.frozen_minmax.mean()),
                        "at_edge": float(np.mean(((w_rep == b0.lo) | (w_rep == b0.hi)) & (b0.hi > b0.lo)))},
            "gguf_roundtrip": all(e["roundtrip"] for e in ev.values()),
            "gguf_files": {k: e["gguf"] for k, e in ev.items()},
            "tensor_types": types,
        }
        for k, (w_, b_, per) in agree.items():
            rec[f"agree_{k}"], rec[f"agree_blocks_{k}"], rec[f"agree_tensors_{k}"] = w_, b_, per
        seeds.append(rec)
    source = (f"local checkpoint {Path(params.model_path).name} ({m_clean.config.model_type}), "
              f"{'smoke budget' if smoke else 'paper budget'}, llama.cpp not run")
    return {"params": params, "seeds": seeds, "source": source, "seconds": time.perf_counter() - start}

