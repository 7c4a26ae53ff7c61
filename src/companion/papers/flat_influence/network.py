"""A smooth (tanh) MLP as a pure function of one flat float64 parameter vector.

Writing the network as ``logits(theta, X)`` with ``theta`` a single vector lets ``torch.func``
take exact Hessians (``hessian``), per-sample gradients (``vmap(grad)``) and Hessian-vector
products of any loss in parameter space without touching ``nn.Module`` state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

DTYPE = torch.float64


@dataclass(frozen=True)
class TanhMLP:
    """``in -> hidden -> classes`` with tanh; ``hidden = 0`` is multinomial logistic regression."""

    n_in: int
    hidden: int
    n_out: int

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """Shapes of W1, b1, W2, b2 (or W, b without a hidden layer), in flat order."""
        if self.hidden == 0:
            return [(self.n_out, self.n_in), (self.n_out,)]
        return [(self.hidden, self.n_in), (self.hidden,), (self.n_out, self.hidden), (self.n_out,)]

    @property
    def n_params(self) -> int:
        """P, the length of the flat parameter vector."""
        return sum(math.prod(s) for s in self.shapes)

    def unflatten(self, theta: Tensor) -> list[Tensor]:
        """Split the flat vector into the layer tensors (views, differentiable)."""
        out, i = [], 0
        for s in self.shapes:
            n = math.prod(s)
            out.append(theta[i:i + n].reshape(s))
            i += n
        return out

    def logits(self, theta: Tensor, X: Tensor) -> Tensor:
        """Logits, shape (n, n_out) for X (n, n_in), or (n_out,) for one x (n_in,)."""
        parts = self.unflatten(theta)
        if self.hidden == 0:
            W, b = parts
            return X @ W.T + b
        W1, b1, W2, b2 = parts
        return torch.tanh(X @ W1.T + b1) @ W2.T + b2

    def init(self, generator: torch.Generator) -> Tensor:
        """PyTorch's default Linear init, uniform(+-1/sqrt(fan_in)), drawn from ``generator``."""
        chunks = []
        for i, s in enumerate(self.shapes):
            fan_in = s[1] if len(s) == 2 else self.shapes[i - 1][1]
            bound = 1.0 / math.sqrt(fan_in)
            chunks.append((torch.rand(math.prod(s), generator=generator, dtype=DTYPE) * 2 - 1) * bound)
        return torch.cat(chunks)


def ce_one(net: TanhMLP, theta: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy of one example (x of shape (n_in,), y a 0-d long tensor)."""
    return torch.nn.functional.cross_entropy(net.logits(theta, x[None]), y[None])


def ce_mean(net: TanhMLP, theta: Tensor, X: Tensor, y: Tensor, weights: Tensor | None = None) -> Tensor:
    """Mean cross-entropy over (X, y); with ``weights``, sum(w_i * loss_i) / n."""
    losses = torch.nn.functional.cross_entropy(net.logits(theta, X), y, reduction="none")
    return losses.mean() if weights is None else (weights * losses).sum() / len(y)


def ce_each(net: TanhMLP, theta: Tensor, X: Tensor, y: Tensor) -> Tensor:
    """Per-example cross-entropy, shape (n,)."""
    with torch.no_grad():
        return torch.nn.functional.cross_entropy(net.logits(theta, X), y, reduction="none")


def accuracy(net: TanhMLP, theta: Tensor, X: Tensor, y: Tensor) -> float:
    """Fraction of argmax predictions equal to ``y``."""
    with torch.no_grad():
        return float((net.logits(theta, X).argmax(1) == y).double().mean())
