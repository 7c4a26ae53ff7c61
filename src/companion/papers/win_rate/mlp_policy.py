"""E4 with a 2-layer MLP policy (torch): REINFORCE runs and the same-class reference optimum.

Policy ``p(.|x) = softmax(log p_ref(.|x) + W2 relu(W1 phi(x) + b1) + b2)`` with the output layer at
zero, so every run starts at p_ref. All runs of a budget cell are one batched model (weights with a
leading run axis), updated by plain SGD on the same unbiased REINFORCE estimator as the log-linear
policy; the reference optimum of each (h, beta) is full-batch exact-gradient ascent with Adam.
"""

from __future__ import annotations

import numpy as np
import torch


class BatchedMLP(torch.nn.Module):
    """``runs`` independent MLPs d -> hidden -> K; output layer initialised at zero."""

    def __init__(self, runs: int, d: int, hidden: int, K: int, generator: torch.Generator,
                 dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        bound = 1.0 / np.sqrt(d)
        self.W1 = torch.nn.Parameter((torch.rand(runs, d, hidden, generator=generator, dtype=dtype) * 2 - 1) * bound)
        self.b1 = torch.nn.Parameter((torch.rand(runs, 1, hidden, generator=generator, dtype=dtype) * 2 - 1) * bound)
        self.W2 = torch.nn.Parameter(torch.zeros(runs, hidden, K, dtype=dtype))
        self.b2 = torch.nn.Parameter(torch.zeros(runs, 1, K, dtype=dtype))

    def forward(self, phi: torch.Tensor) -> torch.Tensor:
        """Logit offsets (runs, n, K) of features phi (runs, n, d) or (n, d)."""
        if phi.dim() == 2:
            phi = phi.expand(self.W1.shape[0], *phi.shape)
        return torch.relu(phi @ self.W1 + self.b1) @ self.W2 + self.b2


def log_probs(model: BatchedMLP, phi: torch.Tensor, log_ref: torch.Tensor) -> torch.Tensor:
    """Log-policy (runs, n, K) at features phi with reference log-probabilities log_ref (runs?, n, K)."""
    return torch.log_softmax(log_ref + model(phi), dim=-1)


def objective(model: BatchedMLP, phi: torch.Tensor, log_ref: torch.Tensor, R: torch.Tensor,
              beta: torch.Tensor) -> torch.Tensor:
    """``J`` per run (runs,): R (runs, X, K) the h-rewards, beta (runs,)."""
    logp = log_probs(model, phi, log_ref)
    return (logp.exp() * (R - beta[:, None, None] * (logp - log_ref))).sum(-1).mean(-1)


def reference(phi: torch.Tensor, log_ref: torch.Tensor, R: torch.Tensor, beta: torch.Tensor, hidden: int,
              steps: int, lr: float, generator: torch.Generator) -> BatchedMLP:
    """The same-class optimum of each (h, beta) cell: Adam on the exact objective for ``steps`` steps."""
    model = BatchedMLP(len(beta), phi.shape[1], hidden, R.shape[-1], generator).to(phi.device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        (-objective(model, phi, log_ref, R, beta).sum()).backward()
        opt.step()
    return model


def train_reinforce(phi: torch.Tensor, log_ref: torch.Tensor, hP: torch.Tensor, h_index: torch.Tensor,
                    beta: torch.Tensor, lr: torch.Tensor, batch: int, steps: int, hidden: int,
                    generator: torch.Generator, sampler: torch.Generator) -> BatchedMLP:
    """SGD with REINFORCE (leave-one-out baseline, oracle judge) for ``steps`` steps, every run at once.

    ``generator`` (CPU) draws the initial weights, ``sampler`` (on phi's device) the prompts and responses.
    """
    runs, (X, d), K = len(h_index), phi.shape, log_ref.shape[-1]
    dev = phi.device
    model = BatchedMLP(runs, d, hidden, K, generator).to(dev)
    lr_view = [lr.view(-1, *([1] * (p.dim() - 1))) for p in model.parameters()]
    for _ in range(steps):
        x = torch.randint(0, X, (runs, batch), generator=sampler, device=dev)
        logp = torch.log_softmax(log_ref[x] + model(phi[x]), dim=-1)
        with torch.no_grad():
            y = torch.multinomial(logp.exp().reshape(-1, K), 1, generator=sampler).view(runs, batch)
            y2 = torch.multinomial(log_ref[x].exp().reshape(-1, K), 1, generator=sampler).view(runs, batch)
        lp_y = logp.gather(-1, y[..., None])[..., 0]
        with torch.no_grad():
            reward = hP[h_index[:, None], x, y, y2] - beta[:, None] * (lp_y - log_ref[x, y])
            adv = (reward - reward.mean(1, keepdim=True)) * batch / (batch - 1)
        surrogate = (adv * lp_y).mean(1).sum()
        grads = torch.autograd.grad(surrogate, list(model.parameters()))
        with torch.no_grad():
            for p, g, s in zip(model.parameters(), grads, lr_view):
                p.add_(s * g)
    return model
