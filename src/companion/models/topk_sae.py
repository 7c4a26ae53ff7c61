"""A TopK sparse autoencoder with unit-norm decoder rows (SAELens conventions, row vectors).

pre = x W_enc + b_enc;  s = ReLU(TopK_k(pre));  x_hat = s W_dec + b_dec. There is no ``b_dec``
subtraction at the input. Decoder rows are kept at unit norm: the gradient component parallel to
each row is removed before an optimiser step and the rows are renormalised after it.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class TopKSAE(nn.Module):
    """TopK SAE with ``n`` latents over ``d``-dimensional inputs, ``k`` active per row."""

    def __init__(self, d: int, n: int, k: int, gen: torch.Generator) -> None:
        super().__init__()
        if not 1 <= k <= n:
            raise ValueError(f"k={k} must be in [1, n={n}]")
        self.k = k
        w_dec = torch.randn(n, d, generator=gen)
        w_dec = w_dec / w_dec.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(w_dec)
        # Encoder starts as the decoder transpose, biases at zero (as in SAELens).
        self.W_enc = nn.Parameter(w_dec.T.clone())
        self.b_enc = nn.Parameter(torch.zeros(n))
        self.b_dec = nn.Parameter(torch.zeros(d))

    def pre(self, x: Tensor) -> Tensor:
        """Encoder pre-activations, (batch, n)."""
        return x @ self.W_enc + self.b_enc

    def topk(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Values (ReLU of the kept pre-activations) and indices of the k kept latents, each (batch, k)."""
        vals, idx = self.pre(x).topk(self.k, dim=-1)
        return torch.relu(vals), idx

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Dense sparse codes (batch, n) and the indices of the k kept latents (batch, k)."""
        vals, idx = self.topk(x)
        codes = torch.zeros(x.shape[0], self.W_enc.shape[1], dtype=x.dtype, device=x.device)
        return codes.scatter(-1, idx, vals), idx

    def decode(self, s: Tensor) -> Tensor:
        """Reconstruction (batch, d) from dense codes (batch, n)."""
        return s @ self.W_dec + self.b_dec

    def decode_topk(self, vals: Tensor, idx: Tensor) -> Tensor:
        """Reconstruction (batch, d) from the k kept values and indices (a cheaper sparse sum)."""
        return F.embedding_bag(idx, self.W_dec, per_sample_weights=vals, mode="sum") + self.b_dec

    def forward(self, x: Tensor) -> Tensor:
        """Reconstruct ``x`` through the TopK bottleneck."""
        return self.decode_topk(*self.topk(x))


@torch.no_grad()
def normalise_decoder_(sae: TopKSAE) -> None:
    """Rescale every decoder row to unit L2 norm, in place."""
    sae.W_dec.div_(sae.W_dec.norm(dim=1, keepdim=True))


@torch.no_grad()
def remove_parallel_grad_(sae: TopKSAE) -> None:
    """Remove from ``W_dec.grad`` its component along each (unit) decoder row, in place."""
    g, w = sae.W_dec.grad, sae.W_dec
    if g is not None:
        g.sub_((g * w).sum(dim=1, keepdim=True) * w)


def constrained_step(saes: Sequence[TopKSAE], opt: torch.optim.Optimizer) -> None:
    """One optimiser step that keeps the decoders of ``saes`` on the unit sphere."""
    for sae in saes:
        remove_parallel_grad_(sae)
    opt.step()
    for sae in saes:
        normalise_decoder_(sae)


def fvu(x: Tensor, x_hat: Tensor) -> float:
    """Fraction of variance unexplained: sum |x_hat - x|^2 / sum |x - mean(x)|^2."""
    return float(((x_hat - x) ** 2).sum() / ((x - x.mean(0)) ** 2).sum())
