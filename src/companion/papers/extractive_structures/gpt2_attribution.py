"""Linearised attribution of a weight change to the components of a ``transformers`` GPT-2.

Components are, per block, the MLP and every attention head. For a model before (theta) and after
(theta') a finetuning step, this computes per token position the three scores of extractive
structures (Feng, Russell and Steinhardt, ICML 2025), with forward hooks and one backward pass per
model state:

- informative: ``-sum_W <dW u, dl/d(W u)>`` over the component's own linear maps, at theta;
- downstream (strict): ``<o_c(x; theta) - o_c^old(inputs of theta'), g_c(x; theta)>``;
- upstream: ``<g_c(x; theta) - g_c(x; theta'), o_c(x; theta) - o_c(x_cf; theta)>``.

An MLP's output is its ``c_proj`` output; a head's output is its slice of the merged head outputs
``z`` (the input of ``attn.c_proj``). The attention output bias is shared by all heads and is not
attributed to any of them. Written by hand: no maintained library computes these scores for
``transformers`` models (TransformerLens has the hooks but not the scores, and its own model classes).
"""

from __future__ import annotations

from typing import Callable, Mapping

import torch
from torch import Tensor
from transformers import GPT2LMHeadModel

from companion.papers.extractive_structures.weight_deltas import with_deltas

LossFn = Callable[[Tensor], Tensor]  # logits (B, T, V) -> per-example loss (B,)
Trace = dict[str, list[Tensor]]
SITES = ("attn_in", "qkv", "z", "attn_out", "mlp_in", "fc_out", "act", "mlp_out")


def component_names(n_layer: int, n_head: int) -> list[str]:
    """Component labels in score order: per block ``L{l}.mlp`` then ``L{l}.h{h}``."""
    return [name for l in range(n_layer) for name in [f"L{l}.mlp"] + [f"L{l}.h{h}" for h in range(n_head)]]


def trace(model: GPT2LMHeadModel, input_ids: Tensor, loss_fn: LossFn, grads: bool = True,
          inputs: Trace | None = None) -> tuple[Trace, Trace]:
    """Run ``model`` and record every site (and d(sum loss)/d(site) when ``grads``).

    ``inputs``: when given, the attention and MLP inputs of each block are replaced by these
    (the ``attn_in`` / ``mlp_in`` of another run), so each component sees that run's inputs.
    Returns ``(acts, grads)``; each maps a site to one (B, T, width) tensor per block.
    """
    acts: Trace = {s: [] for s in SITES}
    handles = []

    def out_hook(site: str, replace: bool) -> Callable:
        def hook(_m, _args, out):
            if replace and inputs is not None:
                out = inputs[site][len(acts[site])]
            acts[site].append(out)
            return out
        return hook

    def in_hook(site: str) -> Callable:
        def hook(_m, args):
            acts[site].append(args[0])
        return hook

    for block in model.transformer.h:
        handles += [block.ln_1.register_forward_hook(out_hook("attn_in", True)),
                    block.attn.c_attn.register_forward_hook(out_hook("qkv", False)),
                    block.attn.c_proj.register_forward_pre_hook(in_hook("z")),
                    block.attn.c_proj.register_forward_hook(out_hook("attn_out", False)),
                    block.ln_2.register_forward_hook(out_hook("mlp_in", True)),
                    block.mlp.c_fc.register_forward_hook(out_hook("fc_out", False)),
                    block.mlp.c_proj.register_forward_pre_hook(in_hook("act")),
                    block.mlp.c_proj.register_forward_hook(out_hook("mlp_out", False))]
    try:
        with torch.set_grad_enabled(grads):
            loss = loss_fn(model(input_ids=input_ids).logits).sum()
            if not grads:
                return {k: [t.detach() for t in v] for k, v in acts.items()}, {}
            flat = [t for s in SITES for t in acts[s]]
            g = torch.autograd.grad(loss, flat, allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    n = len(model.transformer.h)
    grad_trace = {s: [gi if gi is not None else torch.zeros_like(t) for gi, t in
                      zip(g[i * n:(i + 1) * n], acts[s])] for i, s in enumerate(SITES)}
    return {k: [t.detach() for t in v] for k, v in acts.items()}, grad_trace


def _head_cols(d: int, n_head: int, h: int) -> Tensor:
    """Columns of ``c_attn`` output (q | k | v) that belong to head ``h``."""
    dh = d // n_head
    base = torch.arange(h * dh, (h + 1) * dh)
    return torch.cat([base, base + d, base + 2 * d])


def _outputs(acts: Trace, grads: Trace, l: int, n_head: int) -> list[tuple[Tensor, Tensor]]:
    """Per component of block ``l``: (output, output gradient), each (B, T, width)."""
    d = acts["z"][l].shape[-1]
    dh = d // n_head
    out = [(acts["mlp_out"][l], grads["mlp_out"][l] if grads else None)]
    for h in range(n_head):
        sl = slice(h * dh, (h + 1) * dh)
        out.append((acts["z"][l][..., sl], grads["z"][l][..., sl] if grads else None))
    return out


def informative(acts: Trace, grads: Trace, delta: Mapping[str, Tensor], n_head: int) -> Tensor:
    """First-order loss drop from each component's own weight change; (B, T, n_components)."""
    cols = []
    for l in range(len(acts["z"])):
        p = f"transformer.h.{l}."
        fc = acts["mlp_in"][l] @ delta[p + "mlp.c_fc.weight"] + delta[p + "mlp.c_fc.bias"]
        pr = acts["act"][l] @ delta[p + "mlp.c_proj.weight"] + delta[p + "mlp.c_proj.bias"]
        cols.append(-(fc * grads["fc_out"][l]).sum(-1) - (pr * grads["mlp_out"][l]).sum(-1))
        d = acts["z"][l].shape[-1]
        dh = d // n_head
        for h in range(n_head):
            idx = _head_cols(d, n_head, h)
            qkv = acts["attn_in"][l] @ delta[p + "attn.c_attn.weight"][:, idx] + delta[p + "attn.c_attn.bias"][idx]
            sl = slice(h * dh, (h + 1) * dh)
            proj = acts["z"][l][..., sl] @ delta[p + "attn.c_proj.weight"][sl]
            cols.append(-(qkv * grads["qkv"][l][..., idx]).sum(-1) - (proj * grads["attn_out"][l]).sum(-1))
    return torch.stack(cols, dim=-1)


def downstream(acts_old: Trace, grads_old: Trace, acts_rerun: Trace, n_head: int) -> Tensor:
    """Strict downstream score: old weights on the new model's inputs; (B, T, n_components)."""
    cols = []
    for l in range(len(acts_old["z"])):
        for (o, g), (o_bar, _) in zip(_outputs(acts_old, grads_old, l, n_head), _outputs(acts_rerun, {}, l, n_head)):
            cols.append(((o - o_bar) * g).sum(-1))
    return torch.stack(cols, dim=-1)


def upstream(acts_old: Trace, grads_old: Trace, grads_new: Trace, acts_cf: Trace, n_cf: int,
             n_head: int) -> Tensor:
    """Counterfactual upstream score averaged over ``n_cf`` counterfactuals; (B, T, n_components).

    ``acts_cf`` holds the counterfactual prompts in blocks: rows ``k*B:(k+1)*B`` are the k-th
    counterfactual of every prompt (same template and length, so positions align one to one).
    """
    cols = []
    for l in range(len(acts_old["z"])):
        pairs = zip(_outputs(acts_old, grads_old, l, n_head), _outputs(acts_old, grads_new, l, n_head),
                    _outputs(acts_cf, {}, l, n_head))
        for (o, g_old), (_, g_new), (o_cf, _) in pairs:
            diff = o.unsqueeze(0) - o_cf.reshape(n_cf, *o.shape)
            cols.append(((g_old - g_new).unsqueeze(0) * diff).sum(-1).mean(0))
    return torch.stack(cols, dim=-1)


def extractive_scores(old: GPT2LMHeadModel, new: GPT2LMHeadModel, input_ids: Tensor, cf_ids: Tensor,
                      loss_fn: LossFn, delta: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Informative, downstream and upstream scores of ``new`` vs ``old``; each (B, T, n_components).

    ``cf_ids``: (n_cf * B, T) counterfactual prompts, blocked as in :func:`upstream`.
    """
    n_head = old.config.n_head
    acts_old, grads_old = trace(old, input_ids, loss_fn)
    acts_new, grads_new = trace(new, input_ids, loss_fn)
    acts_rerun, _ = trace(old, input_ids, loss_fn, grads=False, inputs=acts_new)
    acts_cf, _ = trace(old, cf_ids, loss_fn, grads=False)
    n_cf = cf_ids.shape[0] // input_ids.shape[0]
    return {"informative": informative(acts_old, grads_old, delta, n_head),
            "downstream": downstream(acts_old, grads_old, acts_rerun, n_head),
            "upstream": upstream(acts_old, grads_old, grads_new, acts_cf, n_cf, n_head)}


def component_delta(delta: Mapping[str, Tensor], component: str, n_head: int) -> dict[str, Tensor]:
    """The part of ``delta`` that belongs to one component (``L{l}.mlp`` or ``L{l}.h{h}``)."""
    layer, part = component[1:].split(".")
    p = f"transformer.h.{layer}."
    out = {}
    if part == "mlp":
        for k in ("mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
            out[p + k] = delta[p + k]
        return out
    h = int(part[1:])
    d = delta[p + "attn.c_proj.weight"].shape[0]
    idx = _head_cols(d, n_head, h)
    dh = d // n_head
    w = torch.zeros_like(delta[p + "attn.c_attn.weight"])
    w[:, idx] = delta[p + "attn.c_attn.weight"][:, idx]
    b = torch.zeros_like(delta[p + "attn.c_attn.bias"])
    b[idx] = delta[p + "attn.c_attn.bias"][idx]
    proj = torch.zeros_like(delta[p + "attn.c_proj.weight"])
    proj[h * dh:(h + 1) * dh] = delta[p + "attn.c_proj.weight"][h * dh:(h + 1) * dh]
    return {p + "attn.c_attn.weight": w, p + "attn.c_attn.bias": b, p + "attn.c_proj.weight": proj}


@torch.no_grad()
def patched_loss_drops(old: GPT2LMHeadModel, input_ids: Tensor, loss_fn: LossFn,
                       delta: Mapping[str, Tensor]) -> Tensor:
    """Naive causal attribution: loss drop when one component's delta is patched in; (n_components,)."""
    n_head = old.config.n_head
    base = loss_fn(old(input_ids=input_ids).logits).mean()
    drops = []
    for comp in component_names(old.config.n_layer, n_head):
        with with_deltas(old, component_delta(delta, comp, n_head)):
            drops.append(base - loss_fn(old(input_ids=input_ids).logits).mean())
    return torch.stack(drops)
