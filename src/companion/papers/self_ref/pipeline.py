"""One seed of the toy: base pre-training, sharpening, Algorithm 1, Self-REF and SFT fine-tuning, scoring."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from companion.papers.self_ref import lm, qa_data
from companion.papers.self_ref.confidence import add_confidence_tokens, algorithm1, selfref_labels
from companion.papers.self_ref.qa_data import CONFIDENCE, Split, Vocab


@dataclass
class Condition:
    """Test-set outputs of one condition (base with or without sharpening) of one seed."""

    ok_base: np.ndarray  # base model's greedy answer is right
    msp: np.ndarray  # base model's max softmax probability
    ok_sr: np.ndarray  # Self-REF model's greedy answer is right
    conf: np.ndarray  # Self-REF confidence sigmoid(z_CN - z_UN)
    ok_sft: np.ndarray | None  # plain-SFT model's answer is right (None: SFT not run for this condition)
    msp_sft: np.ndarray | None  # plain-SFT model's MSP
    conf_val: np.ndarray  # Self-REF confidence on the validation split
    conf_unans: np.ndarray  # Self-REF confidence on the unanswerable prompts
    msp_unans: np.ndarray  # base MSP on the unanswerable prompts
    op_only: np.ndarray  # operation-only score: the base model's accuracy on S in the item's operation
    un_share: float  # UN share of the augmented data after subsampling
    n_aug: int  # size of the augmented data
    ok_unmasked: np.ndarray | None = None  # ablation: Self-REF trained without masking the wrong answers
    conf_unmasked: np.ndarray | None = None


@dataclass
class SeedOut:
    """Everything one seed measured on the test set."""

    seed: int
    op: np.ndarray
    known: np.ndarray
    strong_ok: np.ndarray
    conditions: dict[str, Condition] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    strong_loss: float = float("nan")  # trained strong model: mean training loss of its last 100 steps


def gold_sequences(split: Split, vocab: Vocab, answers: np.ndarray | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``prompt ans EOS`` with answers (gold by default) and labels on ``ans EOS``."""
    prompts = split.prompts(vocab)
    ans = split.gold if answers is None else answers
    seq = lm.answer_sequences(prompts, ans, [np.full(len(split), vocab.id("EOS"))])
    return seq, lm.prompt_masked(seq)


def selfref_data(split: Split, vocab: Vocab, pred: np.ndarray, un_ratio: float, mask: bool,
                 rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor, float, int]:
    """Algorithm 1 on ``split``: ``prompt ŷ <CN|UN> EOS`` sequences, masked labels, UN share, size."""
    aug = algorithm1(pred, split.gold, un_ratio, rng)
    sub = split.take(aug.index)
    conf_tok = np.where(aug.confident, vocab.id("<CN>"), vocab.id("<UN>"))
    seq = lm.answer_sequences(sub.prompts(vocab), aug.answer, [conf_tok, np.full(len(sub), vocab.id("EOS"))])
    labels = selfref_labels(seq, lm.PROMPT_LEN, torch.as_tensor(aug.confident), mask)
    return seq, labels, aug.un_share, len(aug.index)


def timed(seconds: dict[str, float], name: str, fn, *args, **kw) -> Any:
    """``fn(*args, **kw)``, adding its CPU seconds to ``seconds[name]``."""
    import time

    t = time.process_time()
    out = fn(*args, **kw)
    seconds[name] = seconds.get(name, 0.0) + time.process_time() - t
    return out


def run_seed(p: dict[str, Any], seed: int) -> SeedOut:
    """The toy pipeline of one seed; ``p`` is the resolved parameters as a dict."""
    torch.set_num_threads(1)
    rng = np.random.default_rng([seed, 7])
    gen = torch.Generator().manual_seed(seed)
    mx = qa_data.make_mixture(tuple(p["ops"]), p["fact_seen_frac"], rng)
    v = qa_data.base_vocab()
    vc = v.with_tokens(CONFIDENCE)
    secs: dict[str, float] = {}
    T, S = mx.T, mx.S
    out = SeedOut(seed, T.op, T.known, np.zeros(len(T), bool), seconds=secs)
    base = lm.build(len(v), p["n_layer"], p["n_embd"], seed)
    seq, lab = gold_sequences(mx.P, v)
    timed(secs, "base", lm.train, base, seq, lab, p["base_steps"], p["lr_base"], p["batch_size"], gen)
    if p["strong_model"] == "simulated":
        out.strong_ok = rng.random(len(T)) < p["strong_acc"]
    else:
        strong = lm.build(len(v), 4, 128, seed + 10_000)
        everything = qa_data.concat([mx.P, S, _all_facts(mx)]) if "FACT" in p["ops"] else qa_data.concat([mx.P, S])
        seq_s, lab_s = gold_sequences(everything, v)
        out.strong_loss = float(np.mean(timed(secs, "strong", lm.train, strong, seq_s, lab_s, p["strong_steps"],
                                              p["lr_strong"], p["strong_batch"], gen, warmup=100)[-100:]))
        out.strong_ok = lm.greedy_answer(strong, T.prompts(v))[0] == T.gold
    models = {"plain": base}
    if p["sharpen_steps"] > 0:
        sharp = copy.deepcopy(base)
        pool = qa_data.concat([mx.P, S])
        own = lm.greedy_answer(base, pool.prompts(v))[0]
        seq_h, lab_h = gold_sequences(pool, v, own)
        timed(secs, "sharpen", lm.train, sharp, seq_h, lab_h, p["sharpen_steps"], p["lr_base"], p["batch_size"], gen)
        models["sharp"] = sharp
    main = "sharp" if "sharp" in models else "plain"
    for name, model in models.items():
        # the SFT baseline and the masking ablation answer questions about the paper's regime only; SFT on
        # the contrast condition cost 15 % of a seed, which the quick preset spends on more seeds instead
        out.conditions[name] = _condition(p, model, mx, v, vc, rng, gen, secs, main=name == main,
                                          ablation=p["mask_ablation"] and name == main)
    return out


def op_only_score(op_s: np.ndarray, ok_s: np.ndarray, op_t: np.ndarray) -> np.ndarray:
    """Each test item's score: the share of right answers on S in its operation (what the op alone tells)."""
    acc = {o: float(ok_s[op_s == o].mean()) for o in np.unique(op_s)}
    return np.array([acc.get(o, float("nan")) for o in op_t])


def _all_facts(mx: qa_data.Mixture) -> Split:
    """Every FACT triple with its answer (the trained strong model's knowledge)."""
    abc = qa_data.triples()
    n = len(abc)
    return Split(np.full(n, qa_data.OPS.index("FACT")), abc, mx.fact_table, np.ones(n, bool))


def _selfref(p: dict[str, Any], model: torch.nn.Module, S: Split, pred_s: np.ndarray, v: Vocab, vc: Vocab,
             rng: np.random.Generator, gen: torch.Generator, secs: dict[str, float], mask: bool):
    """Self-REF fine-tuning of a copy of ``model``; the model, UN share and augmented size."""
    sr = copy.deepcopy(model)
    add_confidence_tokens(sr, len(v), len(vc))
    seq, lab, share, n = selfref_data(S, vc, pred_s, p["un_ratio"], mask, rng)
    timed(secs, "selfref", lm.train, sr, seq, lab, p["selfref_steps"], p["lr_ft"], p["batch_size"], gen)
    return sr, share, n


def _condition(p: dict[str, Any], model: torch.nn.Module, mx: qa_data.Mixture, v: Vocab, vc: Vocab,
               rng: np.random.Generator, gen: torch.Generator, secs: dict[str, float], main: bool,
               ablation: bool) -> Condition:
    """Algorithm 1, Self-REF, SFT (``main`` condition only) and every score of one base model."""
    T, S, V, U = mx.T, mx.S, mx.V, mx.unanswerable
    pt, pu = T.prompts(v), U.prompts(v, mx.unk_op, mx.unk_pos)
    ids_b, msp = lm.greedy_answer(model, pt)
    pred_s = lm.greedy_answer(model, S.prompts(v))[0]
    sr, share, n_aug = _selfref(p, model, S, pred_s, v, vc, rng, gen, secs, p["mask_wrong_answers"])
    cn, un = vc.id("<CN>"), vc.id("<UN>")

    def score(m: torch.nn.Module, prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ids = lm.greedy_answer(m, prompts)[0]
        return ids, timed(secs, "score", lm.selfref_score, m, prompts, ids, cn, un)

    ids_sr, conf = score(sr, pt)
    conf_val = score(sr, V.prompts(v))[1]
    conf_unans = score(sr, pu)[1]
    extract = v.digit_of
    ok_sft = msp_sft = None
    if main:
        sft = copy.deepcopy(model)
        seq, lab = gold_sequences(S, v)
        timed(secs, "sft", lm.train, sft, seq, lab, p["selfref_steps"], p["lr_ft"], p["batch_size"], gen)
        ids_sft, msp_sft = lm.greedy_answer(sft, pt)
        ok_sft = extract(ids_sft) == T.gold
    cond = Condition(extract(ids_b) == T.gold, msp, extract(ids_sr) == T.gold, conf, ok_sft, msp_sft, conf_val,
                     conf_unans, lm.greedy_answer(model, pu)[1], op_only_score(S.op, pred_s == S.gold, T.op),
                     share, n_aug)
    if ablation:
        un_m, _, _ = _selfref(p, model, S, pred_s, v, vc, rng, gen, secs, False)
        ids_u, conf_u = score(un_m, pt)
        cond.ok_unmasked, cond.conf_unmasked = extract(ids_u) == T.gold, conf_u
    return cond
