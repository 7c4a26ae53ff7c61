"""The tiny GPT-2 of the toy: training on fixed-length QA sequences, greedy answers, MSP and Self-REF scores."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor
from transformers import GPT2LMHeadModel

from companion.models.tiny_lm import tiny_gpt2
from companion.papers.self_ref.confidence import IGNORE, confidence_score

PROMPT_LEN = 6  # BOS OP a b c SEP
SHARED_PREFIX = 2  # positions computed once per distinct prefix in a training minibatch (BOS OP)


def build(vocab: int, n_layer: int, n_embd: int, seed: int) -> GPT2LMHeadModel:
    """A GPT-2 decoder (4 heads, 16 positions) initialised from ``seed``."""
    return tiny_gpt2(vocab, n_layer=n_layer, n_embd=n_embd, n_head=4, n_positions=16, seed=seed)


def answer_sequences(prompts: np.ndarray, answers: np.ndarray, tail: list[np.ndarray]) -> Tensor:
    """``prompt ⊕ answer ⊕ tail...`` as one (n, 6 + 1 + len(tail)) id tensor."""
    cols = [prompts, np.asarray(answers)[:, None], *[np.asarray(t).reshape(-1, 1) for t in tail]]
    return torch.as_tensor(np.concatenate(cols, axis=1), dtype=torch.long)


def prompt_masked(seq: Tensor) -> Tensor:
    """Labels that supervise everything after the prompt."""
    labels = seq.clone()
    labels[:, :PROMPT_LEN] = IGNORE
    return labels


def lm_loss(model: torch.nn.Module, seq: Tensor, labels: Tensor) -> Tensor:
    """Next-token cross-entropy: position t's logits predict label t + 1 (-100 is ignored).

    The toy's GPT-2 computes only what the loss reads (:func:`gpt2_label_logits`): the labels of the prompt are
    always ignored, so the logits that predict them are not computed; the same loss, with fewer operations.
    """
    first = PROMPT_LEN - 1  # the first position whose logits can meet a label (the one that predicts the answer)
    if isinstance(model, GPT2LMHeadModel) and not bool((labels[:, 1:first + 1] != IGNORE).any()):
        logits, target = gpt2_label_logits(model, seq, first), labels[:, first + 1:]
    else:
        logits, target = model(input_ids=seq, use_cache=False).logits[:, :-1], labels[:, 1:]  # no KV cache
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=IGNORE)


def gpt2_label_logits(model: GPT2LMHeadModel, seq: Tensor, first: int, shared: int = SHARED_PREFIX) -> Tensor:
    """GPT-2's logits at positions ``first .. T-2`` of ``seq`` (those that predict tokens ``first+1 .. T-1``),
    equal to ``model(seq).logits[:, first:-1]`` up to float rounding, computed with fewer operations.

    The forward pass of ``transformers``' GPT-2 (pre-LN blocks, causal attention, no dropout: the toy's
    dropout rates are 0) on its own modules and weights, without work that causal attention makes redundant:

    - the last token is not fed (its logits predict nothing, and no earlier position attends to it);
    - the first ``shared`` positions (``BOS OP`` in the toy) depend on those tokens only, so each distinct
      prefix is computed once per minibatch and its keys and values are shared by the rows that start with it
      (the backward pass sums their gradients, as it would over the copies);
    - the last block computes queries, attention output, MLP and the head only at positions ``first ..``
      (earlier positions enter it only as keys and values).
    """
    tr, cfg = model.transformer, model.config
    if model.training and (cfg.resid_pdrop or cfg.embd_pdrop or cfg.attn_pdrop):
        raise ValueError("gpt2_label_logits has no dropout: the toy's GPT-2 trains with dropout 0")
    ids = seq[:, :-1]
    n, t = ids.shape
    d = max(1, min(shared, first))
    c, heads = cfg.n_embd, cfg.n_head
    pos = torch.arange(t, device=ids.device)
    prefixes, inverse = torch.unique(ids[:, :d], dim=0, return_inverse=True)
    hp = tr.wte(prefixes) + tr.wpe(pos[:d])  # (distinct prefixes, d, c)
    h = tr.wte(ids[:, d:]) + tr.wpe(pos[d:])  # (n, t - d, c): every row's own positions

    def split_heads(z: Tensor) -> Tensor:
        return z.view(z.shape[0], z.shape[1], heads, c // heads).transpose(1, 2)

    for i, block in enumerate(tr.h):
        last = i == len(tr.h) - 1
        w, b = block.attn.c_attn.weight, block.attn.c_attn.bias  # Conv1D: x @ w + b, w of shape (c, 3c)
        xp, x = block.ln_1(hp), block.ln_1(h)
        start = first if last else d  # the first position whose query this block computes
        if last:  # queries at positions first.. only; keys and values everywhere
            kp, vp = torch.addmm(b[c:], xp.reshape(-1, c), w[:, c:]).view(len(hp), d, 2 * c).split(c, dim=2)
            q = torch.addmm(b[:c], x[:, first - d:].reshape(-1, c), w[:, :c]).view(n, t - first, c)
            k, v = torch.addmm(b[c:], x.reshape(-1, c), w[:, c:]).view(n, t - d, 2 * c).split(c, dim=2)
            h = h[:, first - d:]
        else:
            qp, kp, vp = block.attn.c_attn(xp).split(c, dim=2)
            q, k, v = block.attn.c_attn(x).split(c, dim=2)
        k, v = torch.cat([kp[inverse], k], dim=1), torch.cat([vp[inverse], v], dim=1)
        mask = torch.ones(t - start, t, dtype=torch.bool, device=ids.device).tril(start)
        a = torch.nn.functional.scaled_dot_product_attention(split_heads(q), split_heads(k), split_heads(v),
                                                             attn_mask=mask)
        h = h + block.attn.c_proj(a.transpose(1, 2).reshape(n, -1, c))
        h = h + block.mlp(block.ln_2(h))
        if not last:  # the prefix attends to itself only
            ap = torch.nn.functional.scaled_dot_product_attention(split_heads(qp), split_heads(kp),
                                                                  split_heads(vp), is_causal=True)
            hp = hp + block.attn.c_proj(ap.transpose(1, 2).reshape(len(hp), d, c))
            hp = hp + block.mlp(block.ln_2(hp))
    return model.lm_head(tr.ln_f(h))


def train(model: torch.nn.Module, seq: Tensor, labels: Tensor, steps: int, lr: float, batch_size: int,
          gen: torch.Generator, params: list[Tensor] | None = None, warmup: int = 0) -> list[float]:
    """Adam for ``steps`` minibatches drawn with replacement by ``gen``; the losses.

    ``warmup`` 0: a constant ``lr``; else ``lr`` times a linear warm-up over the first ``warmup`` steps and
    a cosine decay from 1 to 0 over all ``steps`` (the two factors overlap during the warm-up).
    """
    device = next(model.parameters()).device
    # the fused kernel is the same Adam update in one pass over the weights: a step of the tiny model is cheaper
    opt = torch.optim.Adam(params if params is not None else model.parameters(), lr=lr, fused=True)
    # the wider strong model does not learn at a constant large step (its first full record)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (
        1 + math.cos(math.pi * s / steps))) if warmup else None
    model.train()
    seq, labels, losses = seq.to(device), labels.to(device), []
    for _ in range(steps):
        idx = torch.randint(len(seq), (min(batch_size, len(seq)),), generator=gen).to(device)
        loss = lm_loss(model, seq[idx], labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


@torch.no_grad()
def next_logits(model: torch.nn.Module, seq: np.ndarray | Tensor, batch: int = 4096) -> Tensor:
    """Logits of the token after the last position of every sequence (n, V), float32 on CPU."""
    device = next(model.parameters()).device
    seq = torch.as_tensor(seq, dtype=torch.long)
    out = [model(input_ids=seq[i:i + batch].to(device), use_cache=False).logits[:, -1].float().cpu()
           for i in range(0, len(seq), batch)]
    return torch.cat(out)


def greedy_answer(model: torch.nn.Module, prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Greedy answer token after ``SEP`` and its max softmax probability (the MSP baseline)."""
    probs = next_logits(model, prompts).softmax(-1)
    msp, ids = probs.max(-1)
    return ids.numpy(), msp.numpy()


def selfref_score(model: torch.nn.Module, prompts: np.ndarray, answers: np.ndarray, cn_id: int,
                  un_id: int) -> np.ndarray:
    """Self-REF confidence ``sigmoid(z_CN - z_UN)`` at the position after ``prompt ⊕ answer``."""
    seq = np.concatenate([prompts, np.asarray(answers)[:, None]], axis=1)
    return confidence_score(next_logits(model, seq), cn_id, un_id).numpy()


@torch.no_grad()
def msp_query(model: torch.nn.Module, prompt: Tensor) -> tuple[int, float]:
    """One query, batch 1: the greedy answer and its probability from one forward pass over the prompt."""
    probs = model(input_ids=prompt[None]).logits[0, -1].softmax(-1)
    p, a = probs.max(-1)
    return int(a), float(p)


@torch.no_grad()
def selfref_query(model: torch.nn.Module, prompt: Tensor, cn_id: int, un_id: int) -> tuple[int, float]:
    """One query, batch 1: the greedy answer, then one cached step on it for ``sigmoid(z_CN - z_UN)``."""
    out = model(input_ids=prompt[None], use_cache=True)
    a = int(out.logits[0, -1].argmax())
    step = model(input_ids=torch.tensor([[a]]), cache=out.cache, use_cache=True)
    return a, float(confidence_score(step.logits[0, -1], cn_id, un_id))
