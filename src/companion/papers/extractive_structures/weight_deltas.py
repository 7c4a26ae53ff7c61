"""Weight deltas of a finetuning phase, added to and removed from a model in place.

A delta is a dict ``{parameter name: W_after - W_before}`` over the trainable parameters. Adding
two deltas is plain parameter addition, which is what weight grafting needs
(``W + Delta_1 + Delta_2``); the context manager restores the original tensors bit for bit.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Mapping

import torch

Delta = dict[str, torch.Tensor]


def snapshot(model: torch.nn.Module) -> Delta:
    """A detached copy of every parameter, keyed by name."""
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def delta_since(model: torch.nn.Module, before: Mapping[str, torch.Tensor]) -> Delta:
    """``W_now - W_before`` for every parameter."""
    return {name: p.detach() - before[name] for name, p in model.named_parameters()}


@contextmanager
def with_deltas(model: torch.nn.Module, *deltas: Mapping[str, torch.Tensor]) -> Iterator[torch.nn.Module]:
    """Temporarily set every parameter to ``W + sum(deltas)``; the exact ``W`` is restored on exit."""
    saved = snapshot(model)
    params = dict(model.named_parameters())
    try:
        with torch.no_grad():
            for delta in deltas:
                for name, d in delta.items():
                    params[name].add_(d.to(params[name].device))  # a delta may be kept on the CPU
        yield model
    finally:
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(saved[name])
