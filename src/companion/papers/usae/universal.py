"""The universal SAE: one TopK SAE per model over a shared concept index, trained on aligned samples.

Follows ``train_cross_prediction_saes`` of the official code: at every step one source model i is
drawn uniformly, its encoder gives codes Z, *every* model's decoder reconstructs its own
activations from Z, the AuxK-L1 losses are summed, each SAE's gradient is clipped, and only model
i's AdamW (encoder i and dictionary i) steps, on model i's own warm-up + cosine schedule. The
controls reuse the same loop: independent SAEs keep only the j = i term; the shuffled control
permutes models 2..M's samples so the pairing, the only supervision, is broken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from companion.models import optim
from companion.models.topk_sae import BatchNormTopKSAE, aux_codes, auxk_l1_loss


@dataclass(frozen=True)
class Standardiser:
    """Scalar standardisation (A - mean) / (std + 1e-5) with statistics from training data."""

    mean: float
    std: float

    @classmethod
    def fit(cls, acts: Tensor, chunk: int = 1 << 16) -> "Standardiser":
        """Mean and standard deviation over every entry of ``acts``.

        Float32 input (the toy) as one reduction; lower precision (the paper preset's float16 tokens) by
        float64 sums over row chunks, so no float32 copy of the whole matrix is made.
        """
        if acts.dtype == torch.float32:
            return cls(float(acts.mean()), float(acts.std()))
        total = square = 0.0
        for part in acts.split(chunk):
            part = part.double()
            total += float(part.sum())
            square += float((part * part).sum())
        n = acts.numel()
        mean = total / n
        return cls(mean, math.sqrt(max(square - n * mean * mean, 0.0) / max(n - 1, 1)))

    def __call__(self, acts: Tensor) -> Tensor:
        """Standardised activations, in float32."""
        return (acts.float() - self.mean) / (self.std + 1e-5)

    def invert(self, acts: Tensor) -> Tensor:
        """Back to the model's own activation scale."""
        return acts * (self.std + 1e-5) + self.mean


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of one USAE (or control) training run."""

    n_concepts: int
    top_k: int
    steps: int
    lr: float
    batch_size: int
    aux_penalty: float = 0.1
    weight_decay: float = 1e-5
    clip: float = 1.0
    final_lr: float = 1e-6
    warmup_lr: float = 1e-6
    warmup_steps: int = 0
    update_all_decoders: bool = False


def cosine_lr(t: int, total: int, warmup: int, base: float, final: float, start: float) -> float:
    """Overcomplete's CosineScheduler: linear warm-up start -> base, then cosine base -> final."""
    if t < warmup:
        return start + (base - start) * t / max(1, warmup - 1)
    if t >= total:
        return final
    frac = (t - warmup) / max(1, total - warmup)
    return final + 0.5 * (base - final) * (1 + math.cos(math.pi * frac))


def pair_permutations(n: int, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The shuffled control's sample orders: identity for model 1, one fixed permutation for each of 2..m."""
    return [np.arange(n)] + [rng.permutation(n) for _ in range(m - 1)]


class Rows:
    """One model's training activations read by row: permuted and standardised per batch, never copied whole.

    ``Rows(acts, std, perm)[idx]`` equals ``std(acts[perm])[idx]`` entry for entry (the same float32
    operations on the same entries), so the toy's numbers do not depend on which of the two is used.
    """

    def __init__(self, acts: Tensor, std: Standardiser, perm: np.ndarray | None = None) -> None:
        self.acts, self.std = acts, std
        self.perm = None if perm is None else torch.from_numpy(perm).to(acts.device)

    def __len__(self) -> int:
        return len(self.acts)

    @property
    def shape(self) -> torch.Size:
        return self.acts.shape

    @property
    def device(self) -> torch.device:
        return self.acts.device

    def __getitem__(self, idx: Tensor) -> Tensor:
        idx = idx.to(self.acts.device)
        return self.std(self.acts[idx if self.perm is None else self.perm[idx]])


def make_saes(dims: list[int], cfg: TrainConfig, gen: torch.Generator) -> list[BatchNormTopKSAE]:
    """One BatchNorm TopK SAE per model, all with ``cfg.n_concepts`` concepts."""
    return [BatchNormTopKSAE(d, cfg.n_concepts, cfg.top_k, gen) for d in dims]


def step_loss(saes: list[BatchNormTopKSAE], batch: list[Tensor], i: int, targets: list[int],
              penalty: float) -> Tensor:
    """Encode with model i, decode with every model in ``targets``, sum the AuxK-L1 losses."""
    pre, z = saes[i].encode(batch[i])
    z_aux = aux_codes(pre, z) if penalty > 0 else None  # the same for every decoder j
    loss = batch[i].new_zeros(())
    for j in targets:
        d = saes[j].get_dictionary()
        loss = loss + auxk_l1_loss(batch[j], z @ d, pre, z, d, penalty, z_aux)
    return loss


def train_step(saes: list[BatchNormTopKSAE], opts: list[torch.optim.Optimizer], batch: list[Tensor],
               i: int, cfg: TrainConfig, universal: bool = True) -> float:
    """One official update with source model i; returns the loss."""
    targets = list(range(len(saes))) if universal else [i]
    for opt in opts:
        opt.zero_grad(set_to_none=True)
    loss = step_loss(saes, batch, i, targets, cfg.aux_penalty)
    loss.backward()
    for sae in saes:
        torch.nn.utils.clip_grad_norm_(sae.parameters(), cfg.clip)
    opts[i].step()
    if cfg.update_all_decoders and universal:
        for j, opt in enumerate(opts):
            if j != i:
                opt.step()  # only dictionary j has a gradient; AdamW skips encoder j
    return float(loss.detach())


def train(acts: list[Tensor] | list[Rows], cfg: TrainConfig, gen: torch.Generator, rng: np.random.Generator,
          universal: bool = True) -> list[BatchNormTopKSAE]:
    """Train one SAE per model on aligned rows of ``acts`` ((N, d_m) tensors or :class:`Rows`) for ``cfg.steps``."""
    saes = [s.to(acts[0].device) for s in make_saes([a.shape[1] for a in acts], cfg, gen)]
    opts = [optim.AdamW(s.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay) for s in saes]
    used = [0] * len(saes)
    n = len(acts[0])
    order, pos = rng.permutation(n), 0
    for sae in saes:
        sae.train()
    for _ in range(cfg.steps):
        if pos + cfg.batch_size > n:
            order, pos = rng.permutation(n), 0
        idx = torch.from_numpy(order[pos:pos + cfg.batch_size])
        pos += cfg.batch_size
        i = int(rng.integers(len(saes)))
        for group in opts[i].param_groups:
            group["lr"] = cosine_lr(used[i], cfg.steps, cfg.warmup_steps, cfg.lr, cfg.final_lr,
                                    cfg.warmup_lr)
        used[i] += 1
        train_step(saes, opts, [a[idx] for a in acts], i, cfg, universal)
    for sae in saes:
        sae.eval()
    return saes
