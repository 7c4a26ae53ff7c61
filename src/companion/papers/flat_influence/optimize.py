"""Full-batch training and validation fine-tuning: ERM, SAM and LPF-SGD gradients under Adam.

SAM (Foret et al. 2021) takes the gradient at ``theta + rho g / ||g||``; LPF-SGD (Bisla et al.
2022) with M = 1 takes it at ``theta + xi``, ``xi ~ N(0, (sigma |theta|)^2)`` per coordinate (a
simplification of its filter-wise scaling and noise schedule). Every update is Adam on the flat
parameter vector, so VM (ERM) and FVM (SAM or LPF) fine-tunes share the step budget and optimizer.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from companion.models import optim

LossFn = Callable[[Tensor], Tensor]  # flat theta -> scalar loss


def loss_grad(loss: LossFn, theta: Tensor) -> Tensor:
    """Gradient of ``loss`` at ``theta`` (a fresh leaf, so callers' tensors stay untouched)."""
    t = theta.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(loss(t), t)
    return g


def sam_gradient(loss: LossFn, theta: Tensor, rho: float) -> Tensor:
    """SAM's update direction: the gradient at ``theta + rho g / ||g||`` (``rho = 0``: plain gradient)."""
    g = loss_grad(loss, theta)
    norm = g.norm()
    if rho == 0.0 or float(norm) == 0.0:
        return g
    return loss_grad(loss, theta + rho * g / norm)


def lpf_gradient(loss: LossFn, theta: Tensor, sigma: float, generator: torch.Generator) -> Tensor:
    """LPF-SGD with one sample: the gradient at ``theta + sigma |theta| * N(0, I)``."""
    noise = torch.randn(theta.shape, generator=generator, dtype=theta.dtype, device=generator.device)
    xi = noise.to(theta.device) * sigma * theta.detach().abs()
    return loss_grad(loss, theta + xi)


def adam_descent(loss: LossFn, theta0: Tensor, steps: int, lr: float, method: str = "erm",
                 rho: float = 0.05, sigma: float = 0.1, generator: torch.Generator | None = None,
                 every: int = 0) -> tuple[Tensor, list[tuple[int, Tensor]]]:
    """Adam for ``steps`` steps from ``theta0`` with ERM, SAM or LPF gradients.

    Returns the final parameters and, when ``every > 0``, checkpoints ``(step, theta)`` at step 0,
    every ``every`` steps and at the end.
    """
    if method not in ("erm", "sam", "lpf"):
        raise ValueError(f"method must be erm, sam or lpf, not {method!r}")
    if method == "lpf" and generator is None:
        raise ValueError("LPF needs a torch.Generator for its weight noise")
    theta = theta0.detach().clone().requires_grad_(True)
    opt = optim.Adam([theta], lr=lr)
    marks: list[tuple[int, Tensor]] = [(0, theta0.detach().clone())] if every else []
    for step in range(1, steps + 1):
        if method == "erm":
            g = loss_grad(loss, theta)
        elif method == "sam":
            g = sam_gradient(loss, theta, rho)
        else:
            g = lpf_gradient(loss, theta, sigma, generator)  # type: ignore[arg-type]
        theta.grad = g
        opt.step()
        if every and (step % every == 0 or step == steps) and marks[-1][0] != step:
            marks.append((step, theta.detach().clone()))
    return theta.detach(), marks


def newton_minimize(loss: LossFn, theta0: Tensor, tol: float = 1e-10, max_iter: int = 100) -> Tensor:
    """Newton's method with exact ``torch.func`` Hessians until ``||grad|| < tol`` (strictly convex losses)."""
    theta = theta0.detach().clone()
    for _ in range(max_iter):
        g = torch.func.grad(loss)(theta)
        if float(g.norm()) < tol:
            return theta
        H = torch.func.hessian(loss)(theta)
        theta = theta - torch.linalg.solve(H, g)
    if float(torch.func.grad(loss)(theta).norm()) >= tol:
        raise RuntimeError(f"Newton did not reach gradient norm {tol} in {max_iter} iterations")
    return theta
