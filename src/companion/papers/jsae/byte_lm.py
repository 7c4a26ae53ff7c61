"""A tiny byte-level GPT-2 trained in seconds, with hooks to read or replace a block's MLP I/O.

GPT-2's ``Conv1D`` stores weights as (in, out), so ``x @ W`` holds as in TransformerLens. The hooks
also serve the ``paper`` preset's GPT-NeoX (Pythia) checkpoints.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import GPT2LMHeadModel

from companion.models import optim
from companion.models.tiny_lm import tiny_gpt2
from companion.papers.jsae.docstring_corpus import sample_windows

Replace = Callable[[Tensor], Tensor]


def byte_gpt2(n_layer: int, d_model: int, d_mlp: int, seed: int, context: int = 64) -> GPT2LMHeadModel:
    """A freshly initialised byte-level (vocab 256) GPT-2 in eval mode; the global torch RNG is left untouched."""
    return tiny_gpt2(256, n_layer, d_model, 4, context, seed=seed, n_inner=d_mlp).eval()


def train_byte_lm(model: GPT2LMHeadModel, data: np.ndarray, max_steps: int, rng: np.random.Generator,
                  target: float = 0.0, batch: int = 32, lr: float = 3e-3, window: int = 50) -> tuple[float, int]:
    """Next-byte AdamW training on random windows until the mean loss of the last ``window`` steps is <= ``target``.

    Returns that mean loss and the steps taken (``max_steps`` when the target is not reached). A small
    LM leaves its early plateau after a number of steps that varies widely with the seed, so a protocol
    that quotes an LM's loss is reproduced by the stop rule rather than by a step count.
    """
    length = model.config.n_positions
    opt = optim.AdamW(model.parameters(), lr=lr)
    model.train()
    losses: list[float] = []
    while len(losses) < max_steps and not (len(losses) >= window and np.mean(losses[-window:]) <= target):
        ids = torch.from_numpy(sample_windows(data, batch, length, rng)).to(model.device)
        logits = model(ids).logits[:, :-1]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    return float(np.mean(losses[-window:])), len(losses)


def block_mlp(model: nn.Module, layer: int) -> tuple[nn.Module, nn.Module]:
    """The (pre-MLP LayerNorm, MLP) modules of block ``layer`` of a GPT-2 or GPT-NeoX model."""
    if model.config.model_type == "gpt_neox":
        block = model.gpt_neox.layers[layer]
        return block.post_attention_layernorm, block.mlp
    block = model.transformer.h[layer]
    return block.ln_2, block.mlp


@contextmanager
def replacing(modules: Mapping[nn.Module, Replace | None]) -> Iterator[None]:
    """Within the context, each module's output is passed through its function (``None``: unchanged)."""
    handles = [m.register_forward_hook(lambda _m, _i, out, fn=fn: fn(out))
               for m, fn in modules.items() if fn is not None]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# Tokens per forward pass when reading activations or the CE (64 and 32 windows of the toy's 64 bytes).
IO_TOKENS, CE_TOKENS = 4096, 2048


@torch.no_grad()
def mlp_io(model: nn.Module, layer: int, windows: np.ndarray) -> tuple[Tensor, Tensor]:
    """MLP inputs (after the pre-MLP LayerNorm) and outputs of block ``layer`` for every token, each (tokens, d)."""
    ln, mlp = block_mlp(model, layer)
    batch = max(1, IO_TOKENS // windows.shape[1])
    xs: list[Tensor] = []
    ys: list[Tensor] = []
    for i in range(0, len(windows), batch):
        with replacing({ln: lambda o: xs.append(o.reshape(-1, o.shape[-1])) or o,
                        mlp: lambda o: ys.append(o.reshape(-1, o.shape[-1])) or o}):
            model(torch.from_numpy(windows[i:i + batch]).to(model.device))
    return torch.cat(xs), torch.cat(ys)


@torch.no_grad()
def mean_ce(model: nn.Module, windows: np.ndarray, modules: Mapping[nn.Module, Replace | None]) -> float:
    """Mean next-token cross-entropy (nats) over ``windows`` with module outputs replaced."""
    total, count, batch = 0.0, 0, max(1, CE_TOKENS // windows.shape[1])
    with replacing(modules):
        for i in range(0, len(windows), batch):
            ids = torch.from_numpy(windows[i:i + batch]).to(model.device)
            logits = model(ids).logits[:, :-1]
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                     reduction="sum").item()
            count += ids[:, 1:].numel()
    return total / count
