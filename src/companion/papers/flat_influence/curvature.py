"""Exact Hessians, per-sample gradients, HVPs and the inverse-Hessian-vector solvers.

Everything works on a flat parameter vector with ``torch.func``: the Hessian of a mean loss is
accumulated over sample chunks from ``torch.func.hessian`` (forward-over-reverse), per-sample
gradients come from ``vmap(grad)``. The network Hessian is indefinite, so it is never inverted raw:
:class:`DampedInverse` clips negative eigenvalues and adds damping, ``V max(L, 0) V^T + lam I``.
LiSSA (Agarwal et al. 2017) and conjugate gradients solve the same damped systems from
Hessian-vector products only, batched over many right-hand sides; they are the baselines of the
performance anchor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor
from torch.func import grad, hessian, jvp, vmap

from companion.papers.flat_influence.network import TanhMLP, ce_mean, ce_one

Matvec = Callable[[Tensor], Tensor]  # (P, m) -> (P, m)


def per_sample_grads(net: TanhMLP, theta: Tensor, X: Tensor, y: Tensor) -> Tensor:
    """Gradients of each example's cross-entropy, shape (n, P), via ``vmap(grad)``."""
    g = grad(lambda t, x, yy: ce_one(net, t, x, yy))
    return vmap(g, in_dims=(None, 0, 0))(theta.detach(), X, y)


def mean_grad(net: TanhMLP, theta: Tensor, X: Tensor, y: Tensor) -> Tensor:
    """Gradient of the mean cross-entropy over (X, y), shape (P,)."""
    return grad(lambda t: ce_mean(net, t, X, y))(theta.detach())


def exact_hessian(net: TanhMLP, theta: Tensor, X: Tensor, y: Tensor, chunk: int = 256) -> Tensor:
    """Hessian (P, P) of the mean cross-entropy, summed over chunks of ``torch.func.hessian``."""
    H = torch.zeros(net.n_params, net.n_params, dtype=theta.dtype, device=theta.device)
    for i in range(0, len(y), chunk):
        Xc, yc = X[i:i + chunk], y[i:i + chunk]
        H += len(yc) * hessian(lambda t: ce_mean(net, t, Xc, yc))(theta.detach())
    H /= len(y)
    return (H + H.T) / 2


def ggn(net: TanhMLP, theta: Tensor, X: Tensor) -> Tensor:
    """Gauss-Newton matrix (1/n) sum J_i^T (diag p_i - p_i p_i^T) J_i of the mean cross-entropy."""
    J = vmap(torch.func.jacrev(lambda t, x: net.logits(t, x[None])[0]), in_dims=(None, 0))(theta.detach(), X)
    with torch.no_grad():
        p = torch.softmax(net.logits(theta, X), dim=1)
    Hout = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    return torch.einsum("nkp,nkl,nlq->pq", J, Hout, J) / len(X)


def hvp_fn(net: TanhMLP, theta: Tensor, X: Tensor, y: Tensor) -> Matvec:
    """``V -> H V`` for the mean cross-entropy Hessian, batched over the columns of V (P, m)."""
    g = grad(lambda t: ce_mean(net, t, X, y))
    th = theta.detach()

    def one(v: Tensor) -> Tensor:
        return jvp(g, (th,), (v,))[1]

    return lambda V: vmap(one, in_dims=1, out_dims=1)(V)


def ggn_vp_fn(net: TanhMLP, theta: Tensor, X: Tensor) -> Matvec:
    """``V -> G V`` for the Gauss-Newton matrix (J^T H_out J V via jvp and vjp), batched over columns."""
    th = theta.detach()
    f = lambda t: net.logits(t, X)  # noqa: E731
    with torch.no_grad():
        p = torch.softmax(f(th), dim=1)
    _, vjp_fn = torch.func.vjp(f, th)

    def one(v: Tensor) -> Tensor:
        Jv = jvp(f, (th,), (v,))[1]
        HJv = p * Jv - p * (p * Jv).sum(1, keepdim=True)
        return vjp_fn(HJv / len(X))[0]

    return lambda V: vmap(one, in_dims=1, out_dims=1)(V)


def matrix_matvec(H: Tensor) -> Matvec:
    """``V -> H V`` for an explicit matrix."""
    return lambda V: H @ V


@dataclass(frozen=True)
class DampedInverse:
    """``(V max(L, 0) V^T + damping I)^{-1}`` from one eigendecomposition, reused for every vector."""

    evecs: Tensor
    evals: Tensor  # raw eigenvalues, ascending
    damping: float

    @classmethod
    def of(cls, H: Tensor, damping: float) -> "DampedInverse":
        """Eigendecompose the symmetric matrix ``H`` once (float64)."""
        L, V = torch.linalg.eigh(H)
        return cls(V, L, damping)

    @property
    def lambda_max(self) -> float:
        """The largest eigenvalue of the raw matrix."""
        return float(self.evals[-1])

    @property
    def clipped(self) -> Tensor:
        """Eigenvalues of the PSD projection plus damping."""
        return self.evals.clamp(min=0.0) + self.damping

    def matrix(self) -> Tensor:
        """The damped PSD matrix itself, V (max(L, 0) + damping) V^T."""
        return (self.evecs * self.clipped) @ self.evecs.T

    def solve(self, B: Tensor) -> Tensor:
        """``H_+^{-1} b`` for every row b of B (n, P) (or one vector (P,))."""
        return ((B @ self.evecs) / self.clipped) @ self.evecs.T

    def quad(self, G: Tensor) -> Tensor:
        """``g^T H_+^{-1} g`` for every row g of G (n, P): shape (n,)."""
        C = G @ self.evecs
        return (C * C / self.clipped).sum(-1)


def lissa(matvec: Matvec, B: Tensor, damping: float, scale: float, iters: int) -> Tensor:
    """LiSSA: ``h <- b + (I - (H + damping I) / scale) h`` for ``iters`` steps, then ``h / scale``.

    B holds the right-hand sides as columns (P, m); converges when ``scale > lambda_max + damping``.
    """
    h = B.clone()
    for _ in range(iters):
        h = B + h - (matvec(h) + damping * h) / scale
    return h / scale


def conjugate_gradient(matvec: Matvec, B: Tensor, damping: float, iters: int, tol: float = 1e-10) -> Tensor:
    """Conjugate gradients on ``(H + damping I) X = B`` for every column of B (P, m) at once."""
    X = torch.zeros_like(B)
    R = B.clone()
    D = R.clone()
    rr = (R * R).sum(0)
    stop = tol * (B * B).sum(0).clamp(min=1e-300)
    for _ in range(iters):
        AD = matvec(D) + damping * D
        alpha = rr / (D * AD).sum(0).clamp(min=1e-300)
        X = X + alpha * D
        R = R - alpha * AD
        rr_new = (R * R).sum(0)
        if bool((rr_new <= stop).all()):
            break
        D = R + (rr_new / rr.clamp(min=1e-300)) * D
        rr = rr_new
    return X


def power_lambda_max(matvec: Matvec, P: int, generator: torch.Generator, iters: int = 100,
                     device: str | torch.device = "cpu") -> float:
    """Largest-magnitude eigenvalue of the operator by power iteration (a scale for LiSSA)."""
    v = torch.randn(P, 1, generator=generator, dtype=torch.float64).to(device)
    v /= v.norm()
    lam = 0.0
    for _ in range(iters):
        w = matvec(v)
        lam = float((v * w).sum())
        v = w / w.norm().clamp(min=1e-300)
    return lam


def cosine_rows(A: Tensor, B: Tensor) -> Tensor:
    """Cosine similarity of matching columns of A and B (P, m): shape (m,)."""
    return (A * B).sum(0) / (A.norm(dim=0) * B.norm(dim=0)).clamp(min=1e-300)
