"""The tiny GPT-2 of the toy: training on fixed-length QA sequences, greedy answers, MSP and Self-REF scores."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor
from transformers import GPT2LMHeadModel

from companion.models.gpt2_pass import next_token_loss
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

    The toy's GPT-2 computes only what the loss reads (``models.gpt2_pass``): the labels of the prompt are
    always ignored, so the logits that predict them are not computed; the same loss, with fewer operations.
    """
    # position PROMPT_LEN - 1 predicts the answer: the first whose logits can meet a label
    loss = next_token_loss(model, seq, labels, PROMPT_LEN - 1, SHARED_PREFIX)
    if loss is None:
        logits = model(input_ids=seq, use_cache=False).logits[:, :-1]  # no KV cache
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels[:, 1:].flatten(), ignore_index=IGNORE)
    return loss


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
