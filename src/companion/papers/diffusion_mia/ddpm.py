"""A small DDPM: the noise schedule of ``diffusers``, its noising and DDIM steps, a residual-MLP epsilon-predictor.

The schedule (``alphas_cumprod``) comes from ``diffusers.DDPMScheduler``. The forward noising is
``DDPMScheduler.add_noise`` and the deterministic sampling step ``DDIMScheduler.step`` (eta = 0, no
clipping, final alpha 1), written here with the schedule's square roots taken by :mod:`companion.models.ieee`:
diffusers takes them with torch's ``pow(., 0.5)``, which goes through MKL's vendor-dependent ``vsSqrt``.
The tests check both against diffusers and against the float64 formulas (:func:`make_schedule`,
:func:`ddim_move`). The epsilon-network is the spec's residual MLP, trained to memorise its members.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np
import torch
from diffusers import DDPMScheduler
from torch import nn
from tqdm import tqdm

from companion.models import ieee, optim

EpsFn = Callable[[torch.Tensor, int], torch.Tensor]


def make_schedule(T: int, beta_1: float, beta_T: float) -> np.ndarray:
    """``alpha_bar_t = prod_{s<=t} (1 - beta_s)`` for t = 0..T-1 (linear betas), accumulated in float64."""
    betas = np.linspace(beta_1, beta_T, T, dtype=np.float64)
    return np.cumprod(1.0 - betas)


def ddim_move(x: torch.Tensor, eps: torch.Tensor, abar_from: float, abar_to: float) -> torch.Tensor:
    """One deterministic DDIM move (either direction): ``sqrt(a_to) x0_hat + sqrt(1 - a_to) eps``."""
    x0 = (x - math.sqrt(1.0 - abar_from) * eps) / math.sqrt(abar_from)
    return math.sqrt(abar_to) * x0 + math.sqrt(1.0 - abar_to) * eps


class Diffusion:
    """The noise schedule and sampling steps of ``diffusers`` schedulers for an epsilon-predictor."""

    def __init__(self, T: int = 1000, beta_1: float = 1e-4, beta_T: float = 0.02) -> None:
        self.T = T
        self.config = dict(num_train_timesteps=T, beta_start=beta_1, beta_end=beta_T, beta_schedule="linear")
        self.ddpm = DDPMScheduler(**self.config)
        self.abar = self.ddpm.alphas_cumprod.double().numpy()  # float32 values from diffusers, as float64

    def q_sample(self, x0: torch.Tensor, t: torch.Tensor | int, eps: torch.Tensor) -> torch.Tensor:
        """``sqrt(abar_t) x0 + sqrt(1 - abar_t) eps`` (``DDPMScheduler.add_noise``), t per row or one int."""
        tt = torch.full((len(x0),), int(t), dtype=torch.long) if isinstance(t, int) else t
        abar = self.ddpm.alphas_cumprod.to(x0.dtype)[tt].reshape(-1, *[1] * (x0.ndim - 1))
        return ieee.sqrt(abar) * x0 + ieee.sqrt(1 - abar) * eps

    def ddim_denoise(self, eps_fn: EpsFn, x_t: torch.Tensor, t: int, k: int) -> torch.Tensor:
        """Deterministic DDIM (``DDIMScheduler.step``, eta 0) from step ``t`` to 0 with stride ``k``
        (j = t, t-k, ..., k); the last step returns the predicted clean sample (alpha_bar_prev = 1)."""
        check_stride(t, k, self.T)
        abar = self.ddpm.alphas_cumprod.to(x_t.dtype)
        x = x_t
        for j in range(t, 0, -k):
            eps = eps_fn(x, j)
            x0 = (x - ieee.sqrt(1 - abar[j]) * eps) / ieee.sqrt(abar[j])
            if j == k:
                return x0
            x = ieee.sqrt(abar[j - k]) * x0 + ieee.sqrt(1 - abar[j - k]) * eps
        return x


def check_stride(t: int, k: int, T: int) -> None:
    """Refuse a DDIM stride ``k`` that does not divide ``t`` (or ``T``), or a ``t`` outside (0, T)."""
    if not 0 < t < T:
        raise ValueError(f"the attack step t={t} must be in 1..{T - 1}")
    if k < 1 or t % k or T % k:
        raise ValueError(f"the DDIM stride k={k} must divide t={t} and T={T}")


def sinusoidal(t: torch.Tensor, dim: int = 64) -> torch.Tensor:
    """Sinusoidal embedding (n, dim) of integer timesteps ``t`` (n,)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    ang = t.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)


class EpsMLP(nn.Module):
    """Residual MLP epsilon-predictor: Linear(d, h) + time MLP, ``blocks`` x (h + Linear(SiLU(h))), Linear(SiLU(h), d)."""

    def __init__(self, dim: int = 64, hidden: int = 128, blocks: int = 3) -> None:
        super().__init__()
        self.inp = nn.Linear(dim, hidden)
        self.temb = nn.Sequential(nn.Linear(64, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.blocks = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(blocks))
        self.out = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Predicted noise, shape of ``x`` (n, dim); ``t`` (n,) integer timesteps."""
        h = self.inp(x) + self.temb(sinusoidal(t))
        for lin in self.blocks:
            h = h + lin(nn.functional.silu(h))
        return self.out(nn.functional.silu(h))


def mlp_eps_fn(model: EpsMLP) -> EpsFn:
    """``eps(x, t)`` of a trained MLP at one integer timestep, without gradients."""

    def eps(x: torch.Tensor, t: int) -> torch.Tensor:
        with torch.no_grad():
            return model(x, torch.full((len(x),), int(t), dtype=torch.long))

    return eps


def train_ddpm(x_members: torch.Tensor, diffusion: Diffusion, *, hidden: int, blocks: int, steps: int,
               batch: int, lr: float, seed: int, progress: bool = False) -> tuple[EpsMLP, dict[str, float]]:
    """Train an :class:`EpsMLP` on ``x_members`` with the epsilon-MSE (Adam, cosine decay to 0.1 lr,
    batches drawn with replacement, t ~ U{0..T-1}); returns the model and its loss / time."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = EpsMLP(x_members.shape[1], hidden, blocks)
    opt = optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    start, losses = time.process_time(), []
    for _ in tqdm(range(steps), desc=f"train seed {seed}", disable=not progress, mininterval=2.0):
        idx = torch.randint(len(x_members), (batch,), generator=gen)
        t = torch.randint(diffusion.T, (batch,), generator=gen)
        eps = torch.randn((batch, x_members.shape[1]), generator=gen)
        loss = ((model(diffusion.q_sample(x_members[idx], t, eps), t) - eps) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return model, {"final_loss": float(np.mean(losses[-200:])), "train_cpu_s": time.process_time() - start}
