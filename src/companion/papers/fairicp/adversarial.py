"""Adversarial equalized-odds learning (the official ``EquiRegLearner`` / ``EquiClassLearner``), in torch.

Every epoch takes one set of dummy attributes Ã (ICP copies, FDL draws, FairCP copies): a pass of
discriminator steps over shuffled minibatches (real = [yhat, Ã, y] labelled 1, fake = [yhat, A, y]
labelled 0, loss lambda * BCE, skipped when lambda = 0), then a pass of predictor steps minimising
(1 - lambda) * prediction loss + lambda * BCE with the labels flipped. X, A and Y (regression) are
standardised with the training statistics; Ã with its own (a permutation has the same ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import nn

from companion.models import optim

DummyFn = Callable[[int], np.ndarray]
PenaltyFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of one adversarial fit (defaults: the quick preset's simulation values)."""

    lam: float = 0.9
    epochs: int = 60
    batch_size: int = 32
    lr_pred: float = 1e-3
    lr_dis: float = 1e-4
    dis_hidden: int = 64
    predictor: str = "linear"
    task: str = "regression"


def init_uniform(module: nn.Module, gen: torch.Generator) -> None:
    """torch's default Linear initialisation, U(+-1/sqrt(fan_in)), drawn from ``gen``."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Linear):
                bound = 1.0 / math.sqrt(m.in_features)
                m.weight.uniform_(-bound, bound, generator=gen)
                m.bias.uniform_(-bound, bound, generator=gen)


def make_predictor(in_dim: int, out_dim: int, kind: str, gen: torch.Generator) -> nn.Module:
    """A linear layer (simulation) or in -> 64 -> out with ReLU (real data), seeded from ``gen``."""
    net = nn.Linear(in_dim, out_dim) if kind == "linear" else nn.Sequential(
        nn.Linear(in_dim, 64), nn.ReLU(), nn.Linear(64, out_dim))
    init_uniform(net, gen)
    return net


def make_discriminator(in_dim: int, hidden: int, gen: torch.Generator) -> nn.Module:
    """in -> h -> h -> h -> 1 with ReLU; returns a logit (the official net ends in a sigmoid)."""
    net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                        nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    init_uniform(net, gen)
    return net


def dis_bce(dis: nn.Module, yhat: torch.Tensor, y: torch.Tensor, a: torch.Tensor, at: torch.Tensor,
            flip: bool = False) -> torch.Tensor:
    """Mean BCE of the discriminator on [yhat, Ã, y] (label 1) and [yhat, A, y] (label 0); ``flip``
    swaps the labels (the predictor's non-saturating objective)."""
    real, fake = torch.cat([yhat, at, y], 1), torch.cat([yhat, a, y], 1)
    logits = dis(torch.cat([real, fake], 0))
    labels = torch.cat([torch.ones(len(real), 1), torch.zeros(len(fake), 1)], 0)
    return nn.functional.binary_cross_entropy_with_logits(logits, 1 - labels if flip else labels)


def dis_accuracy(dis: nn.Module, yhat: torch.Tensor, y: torch.Tensor, a: torch.Tensor,
                 at: torch.Tensor) -> float:
    """Fraction of the 2n rows the discriminator labels right (0.5: it cannot tell A from Ã)."""
    with torch.no_grad():
        real = dis(torch.cat([yhat, at, y], 1)) > 0
        fake = dis(torch.cat([yhat, a, y], 1)) <= 0
    return float(torch.cat([real, fake]).float().mean())


def d_step(pred: nn.Module, dis: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
           a: torch.Tensor, at: torch.Tensor, lam: float) -> float:
    """One discriminator step on lambda * BCE (yhat detached); returns the BCE before the step."""
    yhat = pred(x).detach()
    loss = dis_bce(dis, yhat, y, a, at)
    opt.zero_grad()
    (lam * loss).backward()
    opt.step()
    return float(loss.detach())


def f_step(pred: nn.Module, dis: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
           a: torch.Tensor, at: torch.Tensor, lam: float, task: str,
           penalty: PenaltyFn | None = None) -> float:
    """One predictor step on (1 - lambda) * loss + lambda * flipped BCE (plain loss when lambda = 0);
    with ``penalty`` (HGR) the objective is loss + lambda * penalty(yhat, a, y) instead."""
    out = pred(x)
    base = (nn.functional.mse_loss(out, y) if task == "regression"
            else nn.functional.cross_entropy(out, y[:, 0].long()))
    if penalty is not None:
        loss = base + lam * penalty(out, a, y)
    elif lam > 0:
        loss = (1 - lam) * base + lam * dis_bce(dis, out, y, a, at, flip=True)
    else:
        loss = base
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


class Standardizer:
    """Column means and population s.d. of a training array (sklearn's StandardScaler)."""

    def __init__(self, v: np.ndarray) -> None:
        self.mu, self.sd = v.mean(0), v.std(0)
        self.sd = np.where(self.sd > 0, self.sd, 1.0)

    def __call__(self, v: np.ndarray) -> torch.Tensor:
        """Standardised float32 tensor."""
        return torch.as_tensor((v - self.mu) / self.sd, dtype=torch.float32)


@dataclass
class Fitted:
    """A trained predictor with its scalers, and the discriminator accuracy after every epoch."""

    pred: nn.Module
    sx: Standardizer
    sy: Standardizer | None
    task: str
    dis_acc: list[float] = field(default_factory=list)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Raw-scale predictions (regression) or class probabilities (classification)."""
        with torch.no_grad():
            out = self.pred(self.sx(x))
        if self.task == "regression":
            return out[:, 0].double().numpy() * self.sy.sd[0] + self.sy.mu[0]
        return torch.softmax(out, 1).double().numpy()


def fit(x: np.ndarray, y: np.ndarray, a: np.ndarray, dummies: DummyFn, cfg: TrainConfig,
        gen: torch.Generator, penalty: PenaltyFn | None = None) -> Fitted:
    """Train predictor and discriminator for ``cfg.epochs`` epochs; ``dummies(e)`` is epoch e's Ã."""
    regression = cfg.task == "regression"
    sx, sa = Standardizer(x), Standardizer(a)
    y2 = y.reshape(-1, 1).astype(float)
    sy = Standardizer(y2) if regression else None
    xt, at_, yt = sx(x), sa(a), sy(y2) if regression else torch.as_tensor(y2, dtype=torch.float32)
    out_dim = 1 if regression else int(y.max()) + 1
    pred = make_predictor(x.shape[1], out_dim, cfg.predictor, gen)
    dis = make_discriminator(out_dim + a.shape[1] + 1, cfg.dis_hidden, gen)
    opt_f = optim.Adam(pred.parameters(), lr=cfg.lr_pred)
    opt_d = optim.Adam(dis.parameters(), lr=cfg.lr_dis)
    n, bs = len(x), cfg.batch_size
    stop = n if regression else n - n % bs
    use_dis = cfg.lam > 0 and penalty is None
    fitted = Fitted(pred, sx, sy, cfg.task)
    for epoch in range(cfg.epochs):
        att = at_
        if use_dis:
            drawn = dummies(epoch)
            att = Standardizer(drawn)(drawn)
        if use_dis:
            order = torch.randperm(n, generator=gen)
            for s in range(0, stop, bs):
                i = order[s : s + bs]
                d_step(pred, dis, opt_d, xt[i], yt[i], at_[i], att[i], cfg.lam)
        order = torch.randperm(n, generator=gen)
        for s in range(0, stop, bs):
            i = order[s : s + bs]
            f_step(pred, dis, opt_f, xt[i], yt[i], at_[i], att[i], cfg.lam, cfg.task, penalty)
        if use_dis:
            with torch.no_grad():
                fitted.dis_acc.append(dis_accuracy(dis, pred(xt), yt, at_, att))
    return fitted
