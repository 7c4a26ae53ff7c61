"""A small ReLU MLP classifier trained with Adam and cross-entropy, seeded end to end."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def mlp(d_in: int, hidden: int, n_out: int, depth: int = 2, gen: torch.Generator | None = None) -> nn.Sequential:
    """``d_in -> hidden (-> hidden)* -> n_out`` with ReLU, initialised from ``gen``."""
    sizes = [d_in] + [hidden] * depth
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(sizes[-1], n_out))
    net = nn.Sequential(*layers)
    if gen is not None:
        # nn.Linear draws from the global RNG; redraw from gen so the model depends on gen only.
        with torch.no_grad():
            for layer in net:
                if isinstance(layer, nn.Linear):
                    bound = 1.0 / layer.in_features ** 0.5
                    layer.weight.uniform_(-bound, bound, generator=gen)
                    layer.bias.uniform_(-bound, bound, generator=gen)
    return net


def train_classifier(net: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int, gen: torch.Generator,
                     lr: float = 1e-3, batch: int = 128) -> nn.Module:
    """Minimise cross-entropy of ``net`` on ``x`` (n, d), ``y`` (n,) with Adam; shuffles from ``gen``."""
    xt = torch.as_tensor(x, dtype=torch.float32)
    yt = torch.as_tensor(y, dtype=torch.long)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    net.train()
    for _ in range(epochs):
        order = torch.randperm(len(xt), generator=gen)
        for start in range(0, len(xt), batch):
            idx = order[start:start + batch]
            opt.zero_grad()
            loss_fn(net(xt[idx]), yt[idx]).backward()
            opt.step()
    net.eval()
    return net


@torch.no_grad()
def logits(net: nn.Module, x: np.ndarray) -> np.ndarray:
    """The network's logits (n, K) as float64 numpy."""
    return net(torch.as_tensor(x, dtype=torch.float32)).double().numpy()
