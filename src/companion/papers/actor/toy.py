"""The over-aligned toy model: training it, turning prompt sets into queries, and the toy's metrics.

Refusal is decided by the first response token: logit("sorry") > logit("sure") at ``<ast>``, exact for
this language. Utility is the teacher-forced token accuracy of the compliance response on benign prompts.
ACTOR's training sequences are response-free: each prompt is followed by the base model's own greedy
continuation (:func:`own_continuations`), which the retain term reads; only SFT gets desired responses.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from companion.models import optim
from companion.models.gpt2_pass import next_token_loss
from companion.models.tiny_lm import tiny_gpt2
from companion.papers.actor import language as lang
from companion.papers.actor.actor import Queries, lm_loss

OPENING = 2  # <usr> and a filler word: the tokens every prompt starts with, 8 distinct pairs


def build(n_layer: int, d_model: int, seed: int) -> nn.Module:
    """The spec's tiny ``GPT2LMHeadModel`` (4 heads, 16 positions, no dropout), initialised from ``seed``."""
    return tiny_gpt2(len(lang.VOCAB), n_layer=n_layer, n_embd=d_model, n_head=4, n_positions=16, seed=seed)


def train_base(model: nn.Module, data: lang.Batch, steps: int, batch_size: int, lr: float,
               rng: np.random.Generator) -> list[float]:
    """AdamW on response tokens only (the over-aligned base model); minibatches drawn by ``rng``.

    The loss reads only the response, so the GPT-2 computes only the logits that predict it, and each
    ``<usr> F`` opening once per minibatch (``models.gpt2_pass``): the same loss to float rounding, a
    quarter less time per step than the full forward pass.
    """
    opt = optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        idx = torch.from_numpy(rng.integers(0, len(data), batch_size))
        ids, labels = data.input_ids[idx], data.labels[idx]
        lean = next_token_loss(model, ids, labels, lang.PROMPT_LEN - 1, OPENING)
        loss = lm_loss(model, ids, labels) if lean is None else lean
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def queries(prompts: np.ndarray) -> Queries:
    """Prompts (n, 6) as queries read at ``<ast>``."""
    ids = torch.from_numpy(prompts)
    return Queries(ids, torch.ones_like(ids, dtype=torch.bool), torch.full((len(ids),), lang.PROMPT_LEN - 1))


def sft_batch(train: dict[str, np.ndarray]) -> lang.Batch:
    """The training prompts (harmful, pseudo-harmful, benign) with their desired full responses (harmful:
    refuse, others: comply): the SFT baselines' data, never ACTOR's."""
    prompts = np.concatenate([train["harmful"], train["pseudo"], train["benign"]])
    return lang.with_responses(prompts, np.arange(len(prompts)) < len(train["harmful"]))


def actor_queries(model: nn.Module, train: dict[str, np.ndarray]) -> tuple[Queries, Tensor, Tensor]:
    """ACTOR's training queries without desired responses: each prompt followed by ``model``'s own greedy
    continuation, read at ``<ast>``; the sign of the shift (+1 harmful, -1 pseudo-harmful and benign); and
    each query's group (0 harmful, 1 pseudo-harmful, 2 benign)."""
    sets = [train["harmful"], train["pseudo"], train["benign"]]
    prompts = np.concatenate(sets)
    ids, mask = own_continuations(model, prompts)
    group = torch.cat([torch.full((len(s),), g) for g, s in enumerate(sets)])
    sign = torch.where(group == 0, 1.0, -1.0)
    return Queries(ids, mask, torch.full((len(prompts),), lang.PROMPT_LEN - 1)), sign, group


def own_continuations(model: nn.Module, prompts: np.ndarray, n_tokens: int = 6) -> tuple[Tensor, Tensor]:
    """Prompts followed by ``n_tokens`` greedy tokens of ``model``; mask: real tokens (up to ``<end>``)."""
    ids = torch.from_numpy(prompts)
    with torch.no_grad():
        for _ in range(n_tokens):
            nxt = model(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1)
            ids = torch.cat([ids, nxt[:, None]], 1)
    gen = ids[:, lang.PROMPT_LEN:]
    ended = torch.cumsum((gen == lang.END).long(), 1) - (gen == lang.END).long()  # tokens after the first <end>
    mask = torch.cat([torch.ones_like(ids[:, :lang.PROMPT_LEN], dtype=torch.bool), ended == 0], 1)
    return ids, mask


def last_logits(model: nn.Module, prompts: np.ndarray) -> Tensor:
    """Logits at ``<ast>`` for every prompt, (n, V)."""
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(prompts), use_cache=False).logits[:, -1].float()


def refusal_decisions(logits: Tensor) -> Tensor:
    """1 where logit("sorry") > logit("sure"), else 0, for logits at ``<ast>`` (n, V)."""
    return (logits[:, lang.SORRY] > logits[:, lang.SURE]).float()


def refusal_rate(model: nn.Module, prompts: np.ndarray) -> float:
    """Share of prompts the model refuses."""
    return float(refusal_decisions(last_logits(model, prompts)).mean())


def utility(model: nn.Module, prompts: np.ndarray) -> float:
    """Teacher-forced token accuracy of ``sure here steps for Y <end>`` after each prompt."""
    batch = lang.with_responses(prompts, np.zeros(len(prompts), bool))
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, use_cache=False).logits[:, :-1]
    target = batch.labels[:, 1:]
    keep = target != -100
    return float((logits.argmax(-1)[keep] == target[keep]).float().mean())


def rates(model: nn.Module, eval_sets: dict[str, np.ndarray]) -> dict[str, float]:
    """Refusal rate on every eval set, on the strongest and weakest grade of the ID pseudo-harmful set
    (``pseudo_id_strong``, ``pseudo_id_weak``), and the utility on the benign set."""
    out = {k: refusal_rate(model, v) for k, v in eval_sets.items()}
    g = lang.grade(eval_sets["pseudo_id"][:, 3])
    out["pseudo_id_strong"] = refusal_rate(model, eval_sets["pseudo_id"][g == 0])
    out["pseudo_id_weak"] = refusal_rate(model, eval_sets["pseudo_id"][g == lang.N_GRADES - 1])
    out["utility"] = utility(model, eval_sets["benign"])
    return out
