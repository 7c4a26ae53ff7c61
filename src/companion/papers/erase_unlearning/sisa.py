"""SISA (Bourtoule et al., 2021) and plain fine-tuning of an MLP head on frozen embeddings: the SGD baselines.

SISA splits the training set into S shards of R slices (a seeded permutation, independent of the
points' content), trains one head per shard incrementally over its slices (checkpointing model
and optimizer after each), and predicts with the mean probability of the S heads. Unlearning a
point restores its shard's checkpoint from before the point's slice and retrains the later slices
without it. Minibatch orders come from generators seeded by (seed, shard, slice, epoch), so the
result equals training that shard from scratch without the point, bit for bit on CPU.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from companion.models import optim
from companion.models.mlp import FeatureMLP


@dataclass(frozen=True)
class HeadConfig:
    """The fine-tuned head: hidden width, classes, epochs, Adam learning rate and batch size."""

    hidden: int = 128
    n_classes: int = 6
    epochs: int = 30
    lr: float = 1e-3
    batch: int = 32


def sub_generator(*key: int) -> torch.Generator:
    """A torch generator seeded from a tuple of ints (through numpy's SeedSequence)."""
    seed = int(np.random.SeedSequence([int(k) for k in key]).generate_state(1)[0])
    return torch.Generator().manual_seed(seed)


def new_head(dim: int, cfg: HeadConfig, *key: int) -> FeatureMLP:
    """A ``dim -> hidden -> classes`` ReLU head initialised from ``key``."""
    return FeatureMLP((dim, cfg.hidden), cfg.n_classes, sub_generator(*key, 7))


def n_params(dim: int, cfg: HeadConfig) -> int:
    """Trainable parameters of the head."""
    return dim * cfg.hidden + cfg.hidden + cfg.hidden * cfg.n_classes + cfg.n_classes


def train_epochs(model: nn.Module, opt: torch.optim.Optimizer, X: torch.Tensor, y: torch.Tensor,
                 epochs: int, cfg: HeadConfig, *key: int) -> int:
    """``epochs`` passes of Adam over (X, y) in minibatches shuffled by ``key``; returns examples processed."""
    model.train()
    for e in range(epochs):
        perm = torch.randperm(len(X), generator=sub_generator(*key, e))
        for b in range(0, len(X), cfg.batch):
            idx = perm[b: b + cfg.batch]
            loss = nn.functional.cross_entropy(model(X[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    model.eval()
    return epochs * len(X)


@dataclass
class Shard:
    """One SISA shard: its slices (point ids), the head and the checkpoint before each slice."""

    slices: list[np.ndarray]
    model: nn.Module
    opt: torch.optim.Optimizer
    checkpoints: list[dict[str, Any]] = field(default_factory=list)


class Sisa:
    """S shards x R slices of MLP heads over frozen embeddings, with exact unlearning by slice retraining."""

    def __init__(self, E: np.ndarray, y: np.ndarray, ids: np.ndarray, shards: int, slices: int,
                 cfg: HeadConfig, seed: int) -> None:
        """Split ``ids`` by a seeded permutation and train every shard."""
        self.E = torch.as_tensor(E, dtype=torch.float32)
        self.y = torch.as_tensor(y, dtype=torch.long)
        self.row = {int(i): r for r, i in enumerate(ids)}
        self.cfg, self.seed, self.R = cfg, seed, slices
        self.epochs_per_slice = max(1, math.ceil(cfg.epochs / slices))
        perm = np.random.default_rng([seed, 11]).permutation(np.asarray(ids))
        self.where: dict[int, tuple[int, int]] = {}
        self.shards: list[Shard] = []
        for s in range(shards):
            mine = perm[s::shards]
            parts = [np.sort(mine[r::slices]) for r in range(slices)]
            for r, part in enumerate(parts):
                self.where.update({int(i): (s, r) for i in part})
            self.shards.append(self._fresh_shard(s, parts))
        self.train_examples = sum(self._train_from(s, 0) for s in range(shards))

    def _fresh_shard(self, s: int, parts: list[np.ndarray]) -> Shard:
        """An untrained head and optimizer for shard ``s``."""
        model = new_head(self.E.shape[1], self.cfg, self.seed, s)
        return Shard(parts, model, optim.Adam(model.parameters(), lr=self.cfg.lr))

    def _train_from(self, s: int, r0: int) -> int:
        """Train shard ``s`` over slices r0..R-1 (each on the union of slices so far), checkpointing before each."""
        sh = self.shards[s]
        del sh.checkpoints[r0:]
        done = 0
        for r in range(r0, self.R):
            sh.checkpoints.append({"model": copy.deepcopy(sh.model.state_dict()),
                                   "opt": copy.deepcopy(sh.opt.state_dict())})
            rows = [self.row[int(i)] for i in np.concatenate(sh.slices[: r + 1])]
            done += train_epochs(sh.model, sh.opt, self.E[rows], self.y[rows], self.epochs_per_slice,
                                 self.cfg, self.seed, s, r)
        return done

    def unlearn(self, pid: int) -> tuple[int, float, int]:
        """Delete ``pid``: restore its shard before its slice and retrain; (examples processed, seconds, shard)."""
        start = time.perf_counter()
        s, r = self.where.pop(int(pid))
        sh = self.shards[s]
        sh.slices[r] = sh.slices[r][sh.slices[r] != pid]
        sh.model.load_state_dict(sh.checkpoints[r]["model"])
        sh.opt.load_state_dict(sh.checkpoints[r]["opt"])
        done = self._train_from(s, r)
        return done, time.perf_counter() - start, s

    def retrain_shard(self, s: int) -> nn.Module:
        """Shard ``s`` trained from scratch on its current slices (the reference an unlearned shard must equal)."""
        saved = self.shards[s]
        self.shards[s] = self._fresh_shard(s, [p.copy() for p in saved.slices])
        self._train_from(s, 0)
        fresh, self.shards[s] = self.shards[s], saved
        return fresh.model

    @torch.no_grad()
    def predict(self, E: np.ndarray) -> np.ndarray:
        """Labels by the mean class probability of the S heads."""
        X = torch.as_tensor(E, dtype=torch.float32)
        probs = sum(torch.softmax(sh.model(X), dim=1) for sh in self.shards)
        return probs.argmax(1).numpy()


def train_full(E: np.ndarray, y: np.ndarray, cfg: HeadConfig, seed: int) -> tuple[nn.Module, int]:
    """Plain fine-tuning on all of D (exact unlearning = this again without the point); (head, examples processed)."""
    model = new_head(E.shape[1], cfg, seed, 99)
    opt = optim.Adam(model.parameters(), lr=cfg.lr)
    done = train_epochs(model, opt, torch.as_tensor(E, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long),
                        cfg.epochs, cfg, seed, 99)
    return model, done


@torch.no_grad()
def predict(model: nn.Module, E: np.ndarray) -> np.ndarray:
    """Argmax labels of one head."""
    return model(torch.as_tensor(E, dtype=torch.float32)).argmax(1).numpy()


def flops_training(dim: int, cfg: HeadConfig, examples: int) -> int:
    """Counted training FLOPs: 6 x parameters x examples processed (forward + backward)."""
    return 6 * n_params(dim, cfg) * examples
