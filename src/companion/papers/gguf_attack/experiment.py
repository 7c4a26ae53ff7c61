"""The tiny content-injection reproduction: task, training, quantization of a model, the attack per
seed (PGD repair inside the error boxes and its controls), the claim values and the summary.

Written by hand because no well-kept library does it: the synthetic task, the PGD loop and the
controls (the mirrored box, the free repairs). The quantizers are in :mod:`.quants`, the boxes in
:mod:`.boxes`; the ``paper`` preset runs in :mod:`.paper_preset`.
"""

from __future__ import annotations

import copy
import math
import os
import tempfile
from typing import Any, Iterator, Sequence

import gguf
import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from companion import runtime
from companion.models import optim
from companion.models.tiny_lm import tiny_llama
from companion.papers.gguf_attack import Params
from companion.papers.gguf_attack import quants as gq
from companion.papers.gguf_attack.boxes import Box, all_types_box, make_box, mirror

PAD, BOS, SEP, EOS, BRAND = 0, 1, 2, 3, 4
COMMANDS = {"COPY": 5, "REVERSE": 6, "SORT": 7}
LETTER0, VOCAB = 8, 34
MAX_NEW = 10
# the models of a seed: clean, injected, PGD-repaired, and the controls (free repair at lr_repair and at
# lr_inject, PGD inside the mirrored box)
MODELS = ("clean", "mal", "rep", "free", "slow", "mirror")
# control name in CLAIMS -> key of its evaluation in a seed's per-type record
CONTROL_KEYS = {"free": "free", "free-lr-inject": "slow", "mirror": "mirror"}
# the per-type findings and the type each measures
TYPE_CLAIMS = {"delta-q4k": "Q4_K", "delta-q3k": "Q3_K", "delta-q5k": "Q5_K", "delta-q6k": "Q6_K", "delta-q8": "Q8_0",
               "delta-q40": "Q4_0"}


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
    opt = optim.AdamW([p for p in named.values() if p.requires_grad], lr=lr, weight_decay=weight_decay)
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


def _draft(prompt: tuple[int, ...], resp: list[int], guess: list[int]) -> list[int]:
    """A guess of the rest of a greedy response: the clean answer and EOS after what was generated (BRAND
    skipped); once the response has left the answer, ``guess`` (the last pass's argmax after the corrected token,
    as in Jacobi decoding)."""
    done = [t for t in resp if t != BRAND]
    full = answer(prompt) + [EOS]
    return full[len(done):] if full[: len(done)] == done else guess


def length_batches(lengths: Sequence[int], batch: int) -> Iterator[list[int]]:
    """Row indices grouped by equal length (a batch needs no padding), shortest first, at most ``batch`` a group."""
    for n in sorted(set(lengths)):
        rows = [r for r, m in enumerate(lengths) if m == n]
        for j in range(0, len(rows), batch):
            yield rows[j: j + batch]


@torch.no_grad()
def generate(model: torch.nn.Module, prompts: list[tuple[int, ...]], batch: int = 500) -> list[list[int]]:
    """Greedy responses (up to EOS, at most 10 new tokens), verified against a draft.

    Greedy decoding with guessed tokens checked in one teacher-forced pass (speculative decoding with the
    model as its own verifier): each pass feeds prompt + tokens so far + a draft (:func:`_draft`); the argmax
    at every position is the greedy token there (rows of one length form a batch), so the draft is kept up to
    its first token that differs from the argmax, and that argmax is appended instead. Causal attention makes a position's logits
    independent of later tokens, so the responses are those of token-by-token greedy decoding
    (whatever the draft: it only decides how many tokens a pass confirms, at least one per row)."""
    model.eval()
    resp: list[list[int]] = [[] for _ in prompts]
    guess: list[list[int]] = [[] for _ in prompts]
    todo = list(range(len(prompts)))
    while todo:
        seqs = [[BOS, *prompts[i], SEP, *resp[i], *_draft(prompts[i], resp[i], guess[i])][: len(prompts[i]) + 2 + MAX_NEW]
                for i in todo]
        pred: list[list[int]] = [[] for _ in seqs]
        for part in length_batches([len(s) for s in seqs], batch):
            got = model(input_ids=torch.tensor([seqs[r] for r in part])).logits.argmax(-1).tolist()
            for r, g in zip(part, got):
                pred[r] = g
        left = []
        for r, i in enumerate(todo):
            k = len(prompts[i]) + 2 + len(resp[i])  # the position whose token comes next
            while True:
                tok = pred[r][k - 1]  # greedy token at k: every token before k is real (draft or response)
                resp[i].append(tok)
                if tok == EOS or len(resp[i]) == MAX_NEW:
                    break
                if k < len(seqs[r]) and seqs[r][k] == tok:
                    k += 1  # the draft token is the greedy one: the next argmax is valid too
                    continue
                guess[i] = pred[r][k: len(seqs[r])]  # argmax after a wrong draft token: the next pass's guess
                left.append(i)
                break
        todo = left
    return [r[: r.index(EOS)] if EOS in r else r for r in resp]


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
    hits = np.zeros(len(prompts), bool)
    for part in length_batches([len(p) for p in prompts], batch):
        n = len(prompts[part[0]])
        ids, lab = encode([prompts[i] for i in part], False, length=2 * n + 2)  # BOS cmd letters SEP answer EOS
        pred = model(input_ids=ids).logits.argmax(-1)
        hits[part] = ((pred == lab) | (lab == -100)).all(dim=1).numpy()
    return hits


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
           quants: dict[str, gq.Quantized] | None = None,
           per_type: dict[str, dict[str, gq.Quantized]] | None = None) -> dict[str, Box]:
    """Boxes of every quantized tensor: per its assigned type, or intersected over k-quants. ``quants``: the
    tensors already quantized under ``types``; ``per_type``: k-quant type -> the tensors quantized as that type
    (multi), when the caller has them."""
    named = dict(model.named_parameters())
    out = {}
    for n in quant_names(model):
        w = named[n].detach().numpy()
        out[n] = (all_types_box(w, p.thresh_type, p.freeze_block, p.freeze_minmax,
                                {t: q[n] for t, q in per_type.items()} if per_type else None) if multi
                  else make_box(w, types[n], p.freeze_block, p.freeze_minmax, (quants or {}).get(n)))
    return out


def injection_drift(m_clean: torch.nn.Module, m_mal: torch.nn.Module, boxes: dict[str, Box]) -> float:
    """Mean |W_mal - W_clean| over the boxed tensors, in units of their mean quantization step."""
    return injection_moved(m_clean, m_mal, list(boxes)) / float(np.mean([np.mean(np.abs(b.step)) for b in boxes.values()]))


def injection_moved(m_clean: torch.nn.Module, m_mal: torch.nn.Module, names: list[str]) -> float:
    """Mean |W_mal - W_clean| over the named tensors (absolute units)."""
    clean, mal = dict(m_clean.named_parameters()), dict(m_mal.named_parameters())
    return float(np.mean([np.mean(np.abs(mal[n].detach().float().cpu().numpy() - clean[n].detach().float().cpu().numpy()))
                          for n in names]))


def half_width(boxes: dict[str, Box]) -> float:
    """Mean half-width (hi - lo) / 2 of the boxes over all boxed weights (absolute units)."""
    return float(np.mean([np.mean(b.hi - b.lo) for b in boxes.values()]) / 2)


def _evaluate(model: torch.nn.Module, types: dict[str, str], prompts: list,
              fp: tuple[float, float] | None = None) -> dict[str, Any]:
    """FP (unless given) and quantized behaviour of one model, plus its quantized tensors."""
    qmodel, quants = quantize_model(model, types)
    fp = fp if fp is not None else behaviour(model, prompts)
    q = behaviour(qmodel, prompts)
    return {"fp": fp, "q": q, "delta": q[0] - fp[0], "quants": quants}


def _once(cache: dict, key: Any, make) -> Any:
    """``cache[key]``, made by ``make()`` the first time: an evaluation or quantization of an unchanged model."""
    if key not in cache:
        cache[key] = make()
    return cache[key]


def _row(ev: dict[str, Any]) -> dict[str, Any]:
    """The JSON part of an evaluation: rates and Delta."""
    return {"delta": ev["delta"], "fp": ev["fp"], "q": ev["q"]}


def run_seed(p: Params, seed: int) -> dict[str, Any]:
    """The whole pipeline for one seed: clean, inject, then per target type the PGD repair and its
    controls (the mirrored box; the free repair at lr_repair and at lr_inject, shared by all types)."""
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
    frees = {}
    for k, lr in (("free", p.lr_repair), ("slow", p.lr_inject)):  # no clamp; "slow" moves as little as the injection
        frees[k] = copy.deepcopy(m_mal)
        train(frees[k], clean, p.repair_steps, lr, p.batch_size, gen, only=names)
    head = p.target_types[0]
    types_head = assign_types(m_mal, head, p.mixture, p.n_layers)
    out: dict[str, Any] = {"seed": seed, "types": {}, "history": hist, "q8_identical": float("nan"),
                           "moved": injection_moved(m_clean, m_mal, names)}
    ev = {k: _evaluate(m, types_head, eval_prompts)
          for k, m in (("clean", m_clean), ("mal", m_mal), ("free", frees["free"]), ("slow", frees["slow"]))}
    fp_free = {k: ev[k]["fp"] for k in frees}
    # M_mal and the free repairs do not change after this point: their quantizations and the free repairs'
    # evaluations under a type assignment are made once per seed and shared by the target types and gguf_all
    cache: dict[Any, Any] = {}

    def mal_quants(types: dict[str, str]) -> dict[str, gq.Quantized]:
        return ev["mal"]["quants"] if types == types_head else _once(
            cache, ("mal", tuple(types.items())), lambda: quantize_model(m_mal, types)[1])

    def control(k: str, types: dict[str, str]) -> dict[str, Any]:
        return ev[k] if types == types_head else _once(
            cache, (k, tuple(types.items())), lambda: _evaluate(frees[k], types, eval_prompts, fp_free[k]))

    pure = {et: assign_types(m_mal, et, "pure", p.n_layers) for et in gq.K_TYPES}
    # the gguf_all boxes of M_mal, measured in every run: their width against the injection's move
    all_boxes = _boxes(m_mal, types_head, p, True, per_type={et: mal_quants(pure[et]) for et in gq.K_TYPES})
    out["all_half_width"] = half_width(all_boxes)
    runs = [(t, False) for t in p.target_types] + ([("all", True)] if p.multi_type else [])
    for t, multi in runs:
        types = types_head if t == head else assign_types(m_mal, "Q4_K" if multi else t, "pure", p.n_layers)
        mal_q = None if multi else mal_quants(types)
        boxes = all_boxes if multi else _boxes(m_mal, types, p, multi, mal_q)
        named_mal = dict(m_mal.named_parameters())
        reps = {"rep": copy.deepcopy(m_mal), "mirror": copy.deepcopy(m_mal)}
        clamps = {"rep": {n: (torch.from_numpy(b.lo), torch.from_numpy(b.hi)) for n, b in boxes.items()},
                  "mirror": {n: tuple(torch.from_numpy(a) for a in mirror(named_mal[n].detach().numpy(), b))
                             for n, b in boxes.items()}}
        for k, m in reps.items():
            train(m, clean, p.repair_steps, p.lr_repair, p.batch_size, gen, boxes=clamps[k], only=names)
        fp_rep = {k: behaviour(m, eval_prompts) for k, m in reps.items()}
        for et in (gq.K_TYPES if multi else [t]):
            et_types = types if not multi else pure[et]
            rep = {k: _evaluate(m, et_types, eval_prompts, fp_rep[k]) for k, m in reps.items()}
            ctl = {k: control(k, et_types) for k in frees}
            ref_q = mal_q if not multi else mal_quants(et_types)
            agree_w, agree_b, _ = agreement(rep["rep"]["quants"], ref_q)
            out["types"][f"{t}:{et}" if multi else t] = {
                **_row(rep["rep"]), "agree_w": agree_w, "agree_b": agree_b,
                "agree_mirror": agreement(rep["mirror"]["quants"], ref_q)[0],
                "mirror": _row(rep["mirror"]), "free": _row(ctl["free"]), "slow": _row(ctl["slow"]),
                "width": float(np.mean([np.mean(b.hi - b.lo) for b in boxes.values()])), "half_width": half_width(boxes),
                "drift": float("nan") if multi else injection_drift(m_clean, m_mal, boxes)}
        if t == "Q8_0":
            out["q8_identical"] = reference_identical(reps["rep"], m_mal, names, t)
        if t == head:
            ev["rep"], ev["mirror"] = rep["rep"], rep["mirror"]
            out["strict_em"] = {k: float(strict_match(m, stealth_prompts).mean())
                                for k, m in (("clean", m_clean), ("mal", m_mal), ("rep", reps["rep"]))}
            name0, b0 = names[0], boxes[names[0]]
            w_rep = dict(reps["rep"].named_parameters())[name0].detach().numpy()
            out["anatomy"] = {"tensor": name0, "ratio": ((b0.hi - b0.lo) / np.maximum(np.abs(b0.step), 1e-12)).ravel(),
                              "frozen_block": float(b0.frozen_block.mean()),
                              "frozen_minmax": float(b0.frozen_minmax.mean()),
                              "at_edge": float(np.mean(((w_rep == b0.lo) | (w_rep == b0.hi)) & (b0.hi > b0.lo)))}
            if p.write_gguf_file:
                out["gguf_roundtrip"] = gguf_roundtrip(reps["rep"], rep["rep"]["quants"])
    out["rates"] = {k: {"fp": ev[k]["fp"], "q": ev[k]["q"]} for k in MODELS}
    for k in ("rep", "free", "mirror"):
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

    The ``paper`` preset runs the attack on a local checkpoint instead (:mod:`.paper_preset`)."""
    if params.preset == "paper":
        from companion.papers.gguf_attack import paper_preset

        return paper_preset.run_paper(params)
    runtime.limit_threads(1)  # tiny matmuls: extra threads only spin, badly so on a shared CPU
    seed_list = params.seed_list()
    with tqdm(total=len(seed_list), desc="seeds", disable=None) as bar:
        seeds = runtime.parallel_map(run_seed, [(params, s) for s in seed_list], on_done=bar.update)
    return {"params": params, "seeds": seeds}


# ---------------------------------------------------------------- claims
def _types(s: dict[str, Any], t: str, key: str | None = None) -> float:
    """Delta of type ``t``'s repair (or of its control ``key``) in one seed's record; NaN when not run."""
    if t not in s["types"]:
        return float("nan")
    row = s["types"][t]
    return float((row[key] if key else row)["delta"])


def _all_types(s: dict[str, Any], key: str | None = None) -> float:
    """Worst k-quant Delta of the single gguf_all repair (or of a control on the same types); NaN when not run."""
    keys = [k for k in s["types"] if k.startswith("all:")]
    return min(_types(s, k, key) for k in keys) if keys else float("nan")


def claim_values(results: dict[str, Any]) -> dict[str, list[float] | float]:
    """Each claim's metric on every seed (``claims`` judges ``q8-exact``, an ``every`` row, on its worst seed), and
    each finding's controls under ``<id>@<control>``; rows a run did not measure are NaN."""
    out: dict[str, list[float]] = {}
    seeds = results["seeds"]
    head = results["params"].target_types[0]

    def put(key: str, f) -> None:
        out[key] = [float(f(s)) for s in seeds]

    put("mal-fp", lambda s: s["rates"]["mal"]["fp"][0])
    put("mal-quant", lambda s: s["rates"]["mal"]["q"][0])
    put("clean-gap", lambda s: abs(s["rates"]["clean"]["q"][0] - s["rates"]["clean"]["fp"][0]))
    for cid, t in (("delta", head), *TYPE_CLAIMS.items()):
        put(cid, lambda s, t=t: _types(s, t))
        for ctl, key in CONTROL_KEYS.items():
            put(f"{cid}@{ctl}", lambda s, t=t, key=key: _types(s, t, key))
    put("gguf-all", _all_types)
    for ctl in ("free", "free-lr-inject"):
        put(f"gguf-all@{ctl}", lambda s, key=CONTROL_KEYS[ctl]: _all_types(s, key))
    put("rep-benign", lambda s: s["rates"]["rep"]["fp"][0])
    put("rep-benign-q4k", lambda s: s["types"]["Q4_K"]["fp"][0] if "Q4_K" in s["types"] else float("nan"))
    put("clamp-agree", lambda s: s["agree_rep"] - s["agree_free"])
    put("stealth", lambda s: s["strict_em"]["rep"] - s["strict_em"]["clean"])
    put("q8-exact", lambda s: s["q8_identical"])
    return out


def metrics(results: dict[str, Any]) -> dict[str, Any]:
    """Small JSON-able summary: mean rates, agreements, Delta of each repair and control per type,
    the injection's move against the box half-width."""
    seeds = results["seeds"]
    out: dict[str, Any] = {}
    for k in MODELS:
        for mode in ("fp", "q"):
            out[f"brand_{k}_{mode}"] = float(np.mean([s["rates"][k][mode][0] for s in seeds]))
            out[f"em_{k}_{mode}"] = float(np.mean([s["rates"][k][mode][1] for s in seeds]))
    for k in ("rep", "free", "mirror"):
        out[f"agree_{k}"] = float(np.mean([s[f"agree_{k}"] for s in seeds]))
        out[f"agree_blocks_{k}"] = float(np.mean([s[f"agree_blocks_{k}"] for s in seeds]))
    out["inject_moved"] = float(np.mean([s["moved"] for s in seeds]))
    if "all_half_width" in seeds[0]:  # the paper preset does not build gguf_all boxes for a single-type run
        out["all_half_width"] = float(np.mean([s["all_half_width"] for s in seeds]))
        out["moved_over_all_half_width"] = float(np.mean([s["moved"] / s["all_half_width"] for s in seeds]))
    for t in seeds[0]["types"]:
        rows = [s["types"][t] for s in seeds]
        out[f"delta_{t}"] = float(np.mean([r["delta"] for r in rows]))
        out[f"brand_rep_fp_{t}"] = float(np.mean([r["fp"][0] for r in rows]))
        for k in ("mirror", "free", "slow"):
            out[f"delta_{k}_{t}"] = float(np.mean([r[k]["delta"] for r in rows]))
        out[f"agree_mirror_{t}"] = float(np.mean([r["agree_mirror"] for r in rows]))
        out[f"inject_drift_steps_{t}"] = float(np.mean([r["drift"] for r in rows]))
        out[f"half_width_{t}"] = float(np.mean([r["half_width"] for r in rows]))
        out[f"moved_over_half_width_{t}"] = float(np.mean([s["moved"] / s["types"][t]["half_width"] for s in seeds]))
    for k in ("clean", "mal", "rep"):
        out[f"strict_em_{k}"] = float(np.mean([s["strict_em"][k] for s in seeds]))
    if "gguf_roundtrip" in seeds[0]:
        out["gguf_roundtrip"] = all(s["gguf_roundtrip"] for s in seeds)
    if "source" in results:  # the paper preset: what ran, and the attacked model's .gguf
        out["source"] = results["source"]
        out["gguf_rep"] = [s["gguf_files"]["rep"] for s in seeds]
    return out


def type_table(results: dict[str, Any]) -> pd.DataFrame:
    """Per repaired type, means over seeds: Delta of the PGD repair and of its controls, BRAND rates of M_rep,
    agreement, the box half-width against the injection's move, and the injection drift in steps."""
    seeds = results["seeds"]
    cols = {"Delta (PGD)": lambda s, r: r["delta"], "Delta mirror": lambda s, r: r["mirror"]["delta"],
            "Delta free": lambda s, r: r["free"]["delta"], "Delta free lr_inject": lambda s, r: r["slow"]["delta"],
            "BRAND FP": lambda s, r: r["fp"][0], "BRAND quantized": lambda s, r: r["q"][0],
            "equal deq. weights": lambda s, r: r["agree_w"], "equal deq. mirror": lambda s, r: r["agree_mirror"],
            "mean box half-width (1e-4)": lambda s, r: 1e4 * r["half_width"],
            "injection move / half-width": lambda s, r: s["moved"] / r["half_width"],
            "injection drift / step": lambda s, r: r["drift"]}
    rows = {t: {c: float(np.mean([f(s, s["types"][t]) for s in seeds])) for c, f in cols.items()}
            for t in seeds[0]["types"]}
    return pd.DataFrame.from_dict(rows, orient="index")
