"""ACTOR: fine-tune one decoder block so that per-query activations move along the refusal direction.

Architecture-agnostic (GPT-2 and Llama-style ``transformers`` models): the layer-l activation is read
with a forward hook on block l that stops the forward there (:func:`layer_output`), so ACTOR runs and
back-propagates through blocks 0..l only -- the source of its speed over SFT. Per epoch the refusal
direction and the targets are re-estimated from the current model, then ``steps`` full-batch Adam steps
minimise L_PRD = mean[1 - cos(h_q, t_q)] over block l's parameters only, plus (toy deviation, spec)
``beta`` times the same cosine distance between every other position and the model before ACTOR.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from companion.models import optim
from companion.papers.actor import direction


@dataclass(frozen=True)
class Queries:
    """Right-padded token sequences and the position each one is read at (its last prompt token)."""

    ids: Tensor  # (n, T) long
    mask: Tensor  # (n, T) bool: real tokens
    read: Tensor  # (n,) long

    def __len__(self) -> int:
        return len(self.ids)


def decoder_blocks(model: nn.Module) -> nn.ModuleList:
    """The list of decoder blocks of a causal LM (GPT-2 ``transformer.h``, Llama/Gemma ``model.layers``)."""
    n = model.config.num_hidden_layers
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == n:
            return module
    raise ValueError(f"no list of {n} decoder blocks found in {type(model).__name__}")


class _Stop(Exception):
    """Raised by the hook on block l to end the forward pass there."""

    def __init__(self, hidden: Tensor) -> None:
        super().__init__()
        self.hidden = hidden


def _hidden(out: Tensor | tuple) -> Tensor:
    return out[0] if isinstance(out, tuple) else out


def layer_output(model: nn.Module, layer: int, ids: Tensor, mask: Tensor | None = None) -> Tensor:
    """Residual stream at the output of block ``layer``, (n, T, d), from a forward that stops there."""
    def stop(_module: nn.Module, _inputs: tuple, out: Tensor | tuple) -> None:
        raise _Stop(_hidden(out))

    # prepend: read the block's own output, before any later hook (fp32_block's cast back to bf16) rounds it
    handle = decoder_blocks(model)[layer].register_forward_hook(stop, prepend=True)
    try:
        model(input_ids=ids, attention_mask=None if mask is None else mask.long(), use_cache=False)
    except _Stop as s:
        return s.hidden
    finally:
        handle.remove()
    raise RuntimeError(f"block {layer} was never reached")


def all_layer_outputs(model: nn.Module, q: Queries) -> list[Tensor]:
    """The read-position activation at the output of every block, [(n, d)] (one full forward)."""
    outs: list[Tensor] = []
    hooks = [b.register_forward_hook(lambda _m, _i, o: outs.append(_hidden(o))) for b in decoder_blocks(model)]
    try:
        with torch.no_grad():
            model(input_ids=q.ids, attention_mask=q.mask.long(), use_cache=False)
    finally:
        for h in hooks:
            h.remove()
    rows = torch.arange(len(q))
    return [o[rows, q.read].float() for o in outs]


def read(model: nn.Module, layer: int, q: Queries) -> Tensor:
    """Activation at the read position of every query, (n, d), float32."""
    return layer_output(model, layer, q.ids, q.mask)[torch.arange(len(q)), q.read].float()


def train_only_block(model: nn.Module, layer: int) -> list[nn.Parameter]:
    """Freeze every parameter but block ``layer``'s; return the trainable ones."""
    for p in model.parameters():
        p.requires_grad_(False)
    params = list(decoder_blocks(model)[layer].parameters())
    for p in params:
        p.requires_grad_(True)
    return params


def fp32_block(model: nn.Module, layer: int) -> None:
    """Keep block ``layer`` in float32 inside a lower-precision model (its master weights for ACTOR).

    A bf16 weight of size ~1 has a spacing of 2^-7 near it, so an Adam step of 1e-5 rounds away; in float32
    it survives. Hooks cast the block's input to float32 and its output back to the model's dtype, so the
    other blocks (and generation) run unchanged.
    """
    block = decoder_blocks(model)[layer]
    dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
    if dtype == torch.float32:
        return
    block.float()

    def to_fp32(_m: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        cast = {k: v.float() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in kwargs.items()}
        return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args), cast

    def back(_m: nn.Module, _i: tuple, out: Tensor | tuple) -> Tensor | tuple:
        if isinstance(out, tuple):
            return (out[0].to(dtype), *out[1:])
        return out.to(dtype)

    block.register_forward_pre_hook(to_fp32, with_kwargs=True)
    block.register_forward_hook(back)


def actor(model: nn.Module, layer: int, anchors_harmful: Queries, anchors_benign: Queries, train: Queries,
          sign: Tensor, alpha: float, beta: float, origin: str, epochs: int, steps: int, lr: float,
          groups: Tensor | None = None, along: Tensor | None = None,
          on_targets: Callable[[int, Tensor], None] | None = None) -> float:
    """Fine-tune block ``layer`` of ``model`` in place with the projection-calibrated loss (+ retain term);
    return the seconds taken. ``groups``: one shift size per group (the uniform baseline); ``along``: shift
    along this fixed unit vector instead of r^, by ACTOR's per-query sizes (the random-direction control).
    With ``along`` the targets are fixed in the first epoch, t_q = a_q^0 + sign_q alpha c_q^0 u, and kept
    over the epochs: a shift along u barely changes c_q (measured on r^), so re-measuring it every epoch
    would apply the full size again each epoch, a larger total move than ACTOR's (whose c_q shrinks as it
    moves along r^). ``on_targets(epoch, t)``: called with every epoch's targets (for tests)."""
    if origin not in direction.ORIGINS:
        raise ValueError(f"origin must be one of {direction.ORIGINS}, not {origin!r}")
    start = time.perf_counter()
    was_training = model.training
    model.eval()  # no dropout anywhere; ACTOR's gradients are deterministic
    rows = torch.arange(len(train))
    with torch.no_grad():
        h_orig = layer_output(model, layer, train.ids, train.mask).detach()
    retain = train.mask.clone()
    retain[rows, train.read] = False
    params = train_only_block(model, layer)
    opt = optim.Adam(params, lr=lr)
    t: Tensor | None = None
    for epoch in range(epochs):
        if t is None or along is None:
            with torch.no_grad():
                a_h, a_b = read(model, layer, anchors_harmful), read(model, layer, anchors_benign)
                r_hat = direction.refusal_direction(a_h, a_b)
                centre = a_b.mean(0) if origin == "benign_mean" else None
                t = direction.targets(read(model, layer, train), r_hat, sign, alpha, centre, groups, along)
        if on_targets is not None:
            on_targets(epoch, t.clone())
        for _ in range(steps):
            h = layer_output(model, layer, train.ids, train.mask).float()
            loss = direction.cosine_loss(h[rows, train.read], t)
            if beta > 0:
                loss = loss + beta * direction.cosine_loss(h[retain], h_orig[retain].float())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    for p in model.parameters():
        p.requires_grad_(True)
    model.train(was_training)
    return time.perf_counter() - start


def lm_loss(model: nn.Module, ids: Tensor, labels: Tensor) -> Tensor:
    """Next-token cross-entropy on the positions whose label is not -100 (labels aligned with ``ids``).

    The last token is left out of the forward: it predicts nothing, and causal attention keeps it from
    changing the earlier positions (a twelfth less compute on the toy's 12-token sequences).
    """
    logits = model(input_ids=ids[:, :-1], use_cache=False).logits
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)


def sft(model: nn.Module, ids: Tensor, labels: Tensor, steps: int, lr: float, layer: int | None = None) -> float:
    """Supervised fine-tuning on response tokens (full-batch Adam), of block ``layer`` or (None) every
    parameter; returns the seconds taken."""
    start = time.perf_counter()
    model.eval()
    params = train_only_block(model, layer) if layer is not None else list(model.parameters())
    opt = optim.Adam(params, lr=lr)
    for _ in range(steps):
        loss = lm_loss(model, ids, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    for p in model.parameters():
        p.requires_grad_(True)
    return time.perf_counter() - start


def changed_outside(model: nn.Module, reference: nn.Module, layer: int) -> tuple[int, bool]:
    """Number of parameter tensors outside block ``layer`` that differ from ``reference`` (bitwise), and
    whether block ``layer`` itself changed (a block kept in float32 is compared with the reference cast up,
    which is exact)."""
    block = {id(p) for p in decoder_blocks(model)[layer].parameters()}
    outside, inside = 0, False
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        same = torch.equal(p, q.to(p.dtype))
        if id(p) in block:
            inside |= not same
        else:
            outside += not same
    return outside, inside


class DirectionAblation:
    """Context manager: project ``r_hat`` out of every block's output (the single-vector ablation baseline)."""

    def __init__(self, model: nn.Module, r_hat: Tensor) -> None:
        self.model, self.r_hat, self.handles = model, r_hat, []

    def _hook(self, _m: nn.Module, _i: tuple, out: Tensor | tuple) -> Tensor | tuple:
        h = _hidden(out)
        h = h - direction.project(h, self.r_hat.to(h.dtype))
        return (h, *out[1:]) if isinstance(out, tuple) else h

    def __enter__(self) -> "DirectionAblation":
        self.handles = [b.register_forward_hook(self._hook) for b in decoder_blocks(self.model)]
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.handles:
            h.remove()
