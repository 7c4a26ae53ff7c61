"""GPT-2's training forward pass computed at the labelled positions only, for next-token losses on
fixed-layout sequences (a prompt of known length, then the tokens that are learned).

Hand-written because ``transformers`` has no such pass: its GPT-2 computes logits at every position,
also where the labels are ignored. Used by papers that train tiny GPT-2s (``models.tiny_lm.tiny_gpt2``)
on such sequences; the pass reads the model's own modules and weights, so it trains the same model.
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import GPT2LMHeadModel

IGNORE = -100  # the label that cross-entropy skips


def next_token_loss(model: torch.nn.Module, ids: Tensor, labels: Tensor, first: int, shared: int) -> Tensor | None:
    """Next-token cross-entropy of ``labels`` (aligned with ``ids``, -100 ignored) by :func:`gpt2_label_logits`,
    or ``None`` where that pass does not apply (not a GPT-2, or a label at a position ``<= first``)."""
    if not isinstance(model, GPT2LMHeadModel) or bool((labels[:, 1:first + 1] != IGNORE).any()):
        return None
    logits = gpt2_label_logits(model, ids, first, shared)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels[:, first + 1:].flatten(),
                                             ignore_index=IGNORE)


def gpt2_label_logits(model: GPT2LMHeadModel, seq: Tensor, first: int, shared: int) -> Tensor:
    """GPT-2's logits at positions ``first .. T-2`` of ``seq`` (those that predict tokens ``first+1 .. T-1``),
    equal to ``model(seq).logits[:, first:-1]`` up to float rounding, computed with fewer operations.

    The forward pass of ``transformers``' GPT-2 (pre-LN blocks, causal attention, no dropout: the companion's
    tiny GPT-2s train with dropout 0) on its own modules and weights, without work that causal attention makes
    redundant:

    - the last token is not fed (its logits predict nothing, and no earlier position attends to it);
    - the first ``shared`` positions (a common opening such as ``BOS OP``) depend on those tokens only, so each
      distinct prefix is computed once per minibatch and its keys and values are shared by the rows that start
      with it (the backward pass sums their gradients, as it would over the copies);
    - the last block computes queries, attention output, MLP and the head only at positions ``first ..``
      (earlier positions enter it only as keys and values).
    """
    tr, cfg = model.transformer, model.config
    if model.training and (cfg.resid_pdrop or cfg.embd_pdrop or cfg.attn_pdrop):
        raise ValueError("gpt2_label_logits has no dropout: build the GPT-2 with dropout 0 (tiny_gpt2 does)")
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
