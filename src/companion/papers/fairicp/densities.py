"""Working density models: q(Y|A) for ICP, p(A|Y) for FDL and FairCP, and a classifier for discrete Y.

- :class:`GaussLinearYgivenA`: Y | A ~ N(b0 + b^T A, s^2) by OLS. In the simulation this class
  contains the truth.
- :class:`GaussLinearAgivenY`: A | Y ~ N(B [1, Y], S) with S shrunk towards (tr S / K) I by 0.1.
  It is misspecified for the mixture-gamma attributes, on purpose (the paper's FDL setting).
- :class:`SoftmaxYgivenA`: the official classification density, an MLP A -> 64 -> classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class GaussLinearYgivenA:
    """Y | A ~ N(coef[0] + coef[1:] . A, var), fitted by least squares."""

    coef: np.ndarray
    var: float

    @classmethod
    def fit(cls, y: np.ndarray, a: np.ndarray) -> "GaussLinearYgivenA":
        """OLS of y on [1, a]; var is the residual mean square."""
        design = np.column_stack([np.ones(len(y)), a])
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        resid = y - design @ coef
        return cls(coef, float(resid @ resid / max(len(y) - design.shape[1], 1)))

    def mean(self, a: np.ndarray) -> np.ndarray:
        """E[Y | A = a] per row."""
        return self.coef[0] + a @ self.coef[1:]

    def loglik_matrix(self, y: np.ndarray, a: np.ndarray) -> np.ndarray:
        """L[i, j] = log q(y_i | a_j), dropping the constant."""
        return -((y[:, None] - self.mean(a)[None, :]) ** 2) / (2 * self.var)


@dataclass(frozen=True)
class GaussLinearAgivenY:
    """A | Y ~ N(B^T [1, y], cov): a multivariate linear regression with a shrunk residual covariance."""

    B: np.ndarray
    cov: np.ndarray

    @classmethod
    def fit(cls, y: np.ndarray, a: np.ndarray, shrinkage: float = 0.1) -> "GaussLinearAgivenY":
        """Least squares of every column of a on [1, y]; cov = (1 - s) S + s (tr S / K) I."""
        design = np.column_stack([np.ones(len(y)), y])
        B, *_ = np.linalg.lstsq(design, a, rcond=None)
        resid = a - design @ B
        S = resid.T @ resid / max(len(y) - 2, 1)
        K = a.shape[1]
        return cls(B, (1 - shrinkage) * S + shrinkage * np.trace(S) / K * np.eye(K))

    def mean(self, y: np.ndarray) -> np.ndarray:
        """E[A | Y = y], shape (n, K)."""
        return np.column_stack([np.ones(len(y)), y]) @ self.B

    def sample(self, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One draw of A | Y = y_i for every i (FDL's dummies)."""
        chol = np.linalg.cholesky(self.cov)
        return self.mean(y) + rng.standard_normal((len(y), self.cov.shape[0])) @ chol.T

    def loglik_matrix(self, a: np.ndarray, y: np.ndarray) -> np.ndarray:
        """L[i, j] = log p(a_i | y_j), dropping the constant (FairCP's matrix: rows are attributes)."""
        prec = np.linalg.inv(self.cov)
        mu = self.mean(y)
        quad_a = np.einsum("ik,kl,il->i", a, prec, a)
        quad_mu = np.einsum("jk,kl,jl->j", mu, prec, mu)
        return -0.5 * (quad_a[:, None] - 2 * a @ prec @ mu.T + quad_mu[None, :])


class SoftmaxYgivenA:
    """Discrete Y | A: the official MLP (A -> 64 -> classes) trained by cross-entropy on standardised A."""

    def __init__(self, y: np.ndarray, a: np.ndarray, gen: torch.Generator, epochs: int = 200,
                 batch_size: int = 32) -> None:
        self.mu, self.sd = a.mean(0), a.std(0) + 1e-12
        classes = int(y.max()) + 1
        self.net = nn.Sequential(nn.Linear(a.shape[1], 64), nn.ReLU(), nn.Linear(64, classes))
        with torch.no_grad():
            for p in self.net.parameters():
                p.uniform_(-0.1, 0.1, generator=gen)
        opt = torch.optim.Adam(self.net.parameters())
        at = torch.as_tensor((a - self.mu) / self.sd, dtype=torch.float32)
        yt = torch.as_tensor(y, dtype=torch.long)
        n = len(y)
        for _ in range(epochs):
            order = torch.randperm(n, generator=gen)
            for s in range(0, n - batch_size + 1, batch_size):
                idx = order[s : s + batch_size]
                loss = nn.functional.cross_entropy(self.net(at[idx]), yt[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()

    def log_probs(self, a: np.ndarray) -> np.ndarray:
        """(n, classes) log softmax of the network at standardised a."""
        with torch.no_grad():
            logits = self.net(torch.as_tensor((a - self.mu) / self.sd, dtype=torch.float32))
        return torch.log_softmax(logits, 1).double().numpy()

    def loglik_matrix(self, y: np.ndarray, a: np.ndarray) -> np.ndarray:
        """L[i, j] = log q(y_i | a_j)."""
        return self.log_probs(a)[:, y.astype(int)].T
