"""Small ReLU MLP classifiers, seeded end to end.

Initialisation and minibatch order both come from an explicit ``torch.Generator``, so the same
seed gives the same network on the same machine. The training loop takes any loss of
``(logits, targets)``, so papers with their own losses (Fenchel-Young) share it.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch
from torch import nn

from companion.models import optim

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class FeatureMLP(nn.Module):
    """``in -> hidden[0] -> ... -> hidden[-1] -> classes`` with ReLU; ``features`` is the last hidden layer."""

    def __init__(self, sizes: tuple[int, ...], n_classes: int, generator: torch.Generator) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(sizes[-1], n_classes)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                _init_linear(m, generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits, shape (n, classes)."""
        return self.head(self.body(x))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Post-ReLU penultimate activations, shape (n, sizes[-1])."""
        return self.body(x)


def _init_linear(layer: nn.Linear, generator: torch.Generator) -> None:
    """PyTorch's default uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) init, drawn from ``generator``."""
    bound = 1.0 / math.sqrt(layer.in_features)
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound, generator=generator)
        layer.bias.uniform_(-bound, bound, generator=generator)


def fit(model: nn.Module, X: np.ndarray, y: np.ndarray, epochs: int, generator: torch.Generator,
        lr: float = 1e-3, weight_decay: float = 0.0, batch: int = 128,
        loss: LossFn = nn.functional.cross_entropy,
        optimizer: type[torch.optim.Optimizer] = optim.Adam) -> nn.Module:
    """Minimise ``loss(model(x), y)`` over minibatches shuffled from ``generator``; eval mode after."""
    opt = optimizer(model.parameters(), lr=lr, weight_decay=weight_decay)
    Xt = torch.as_tensor(X, dtype=torch.float32)
    yt = torch.as_tensor(y, dtype=torch.long)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(Xt), generator=generator)
        for start in range(0, len(Xt), batch):
            idx = order[start:start + batch]
            opt.zero_grad()
            loss(model(Xt[idx]), yt[idx]).backward()
            opt.step()
    return model.eval()


def train_mlp(X: np.ndarray, y: np.ndarray, sizes: tuple[int, ...], n_classes: int,
              generator: torch.Generator, epochs: int = 60, lr: float = 1e-3,
              weight_decay: float = 1e-4, batch: int = 64) -> FeatureMLP:
    """A :class:`FeatureMLP` trained with Adam and cross-entropy on ``X`` (n, sizes[0]), ``y`` (n,)."""
    model = FeatureMLP(sizes, n_classes, generator)
    fit(model, X, y, epochs, generator, lr, weight_decay, batch)
    return model


@torch.no_grad()
def logits(model: nn.Module, X: np.ndarray) -> np.ndarray:
    """The network's logits (n, K), computed in float32, returned as float64 numpy."""
    return model(torch.as_tensor(X, dtype=torch.float32)).double().numpy()


def extract(model: FeatureMLP, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Logits (n, classes) and penultimate features (n, d), both computed in float64."""
    with torch.no_grad():
        m64 = model.double()
        Xt = torch.as_tensor(X, dtype=torch.float64)
        feats = m64.features(Xt)
        out = m64.head(feats)
        model.float()
    return out.numpy(), feats.numpy()
