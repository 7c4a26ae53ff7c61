"""TopK sparse autoencoders in two conventions: SAELens (:class:`TopKSAE`, used by jsae) and
``overcomplete`` (:class:`BatchNormTopKSAE` with :func:`auxk_l1_loss`, used by usae).

TopKSAE, row vectors: pre = x W_enc + b_enc;  s = ReLU(TopK_k(pre));  x_hat = s W_dec + b_dec.
There is no ``b_dec`` subtraction at the input. Decoder rows are kept at unit norm: the gradient
component parallel to each row is removed before an optimiser step and the rows are renormalised
after it.
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


class BatchNormTopKSAE(nn.Module):
    """The ``overcomplete`` TopK SAE (as in the USAE code): BatchNorm encoder, normalised dictionary.

    pre = BN(x W + b);  z = TopK_k(ReLU(pre));  x_hat = z D with the rows of D projected onto the
    unit sphere every time it is used (``get_dictionary``); no decoder bias. The encoder Linear has
    PyTorch's default init and D starts as a standard normal matrix, both drawn from ``gen``.
    """

    def __init__(self, d: int, n: int, k: int, gen: torch.Generator) -> None:
        super().__init__()
        if not 1 <= k <= n:
            raise ValueError(f"k={k} must be in [1, n={n}]")
        self.k = k
        self.linear = nn.Linear(d, n)
        bound = 1.0 / d ** 0.5
        with torch.no_grad():
            # nn.Linear's default (kaiming-uniform with a=sqrt(5)) is uniform(+-1/sqrt(d)).
            self.linear.weight.uniform_(-bound, bound, generator=gen)
            self.linear.bias.uniform_(-bound, bound, generator=gen)
        self.norm = nn.BatchNorm1d(n)
        self.weights = nn.Parameter(torch.randn(n, d, generator=gen))

    def get_dictionary(self) -> Tensor:
        """The dictionary D (n, d), every row scaled to unit L2 norm (+1e-8)."""
        return self.weights / (self.weights.norm(dim=1, keepdim=True) + 1e-8)

    def encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Pre-codes BN(x W + b) and sparse codes TopK_k(ReLU(pre)), each (batch, n)."""
        pre = self.norm(self.linear(x))
        codes = torch.relu(pre)
        top = codes.topk(self.k, dim=-1)
        return pre, torch.zeros_like(codes).scatter(-1, top.indices, top.values)

    def decode(self, z: Tensor) -> Tensor:
        """Reconstruction z D, (batch, d)."""
        return z @ self.get_dictionary()

    def forward(self, x: Tensor) -> Tensor:
        """Reconstruct ``x`` through the TopK bottleneck."""
        return self.decode(self.encode(x)[1])


def aux_codes(pre: Tensor, z: Tensor) -> Tensor:
    """The n // 2 largest entries of ReLU(pre) - z (the best codes TopK did not select), rest 0."""
    unselected = torch.relu(pre) - z
    top = unselected.topk(unselected.shape[1] // 2, dim=1)
    return torch.zeros_like(z).scatter(-1, top.indices, top.values)


def auxk_l1_loss(x: Tensor, x_hat: Tensor, pre: Tensor, z: Tensor, dictionary: Tensor,
                 penalty: float = 0.1, z_aux: Tensor | None = None) -> Tensor:
    """``overcomplete``'s top_k_auxiliary_loss_L1: mean|x - x_hat| + penalty * mean|r - z_aux D|.

    r = x - x_hat; z_aux (:func:`aux_codes`, computed here unless given) lets dead codes get a
    gradient through the residual.
    """
    residual = x - x_hat
    loss = residual.abs().mean()
    if penalty == 0:
        return loss
    z_aux = aux_codes(pre, z) if z_aux is None else z_aux
    return loss + penalty * (residual - z_aux @ dictionary).abs().mean()
