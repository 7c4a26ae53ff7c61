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

from companion.models import optim


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
        opt = optim.Adam(self.net.parameters())
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


class MDN:
    """A small mixture density network p(target | cond): ``components`` diagonal Gaussians whose weights,
    means and scales are an MLP (cond -> hidden -> hidden) of the standardised condition.

    The flexible density of the controls: for Y | A (ICP, a 1-D target) and for A | Y (FDL, a K-dim
    target), so that FairICP and FDL are compared with the same estimator family (the paper's MAFs play
    this role). Fitted by full-batch Adam on the negative log-likelihood, with early stopping on a 20 %
    validation split (the official MAF's protocol, with patience counted in steps).
    """

    def __init__(self, target: np.ndarray, cond: np.ndarray, gen: torch.Generator, components: int = 5,
                 hidden: int = 32, steps: int = 400, lr: float = 5e-3, patience: int = 50) -> None:
        target, cond = target.reshape(len(target), -1), cond.reshape(len(cond), -1)
        self.t_mu, self.t_sd = target.mean(0), target.std(0) + 1e-12
        self.c_mu, self.c_sd = cond.mean(0), cond.std(0) + 1e-12
        self.dim, self.m = target.shape[1], components
        self.net = nn.Sequential(nn.Linear(cond.shape[1], hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, components * (1 + 2 * self.dim)))
        with torch.no_grad():
            for p in self.net.parameters():
                p.copy_(torch.empty_like(p).uniform_(-0.3, 0.3, generator=gen))
        t = torch.as_tensor((target - self.t_mu) / self.t_sd, dtype=torch.float32)
        c = torch.as_tensor((cond - self.c_mu) / self.c_sd, dtype=torch.float32)
        order = torch.randperm(len(t), generator=gen)
        n_val = max(len(t) // 5, 1)
        val, fit = order[:n_val], order[n_val:]
        opt = optim.Adam(self.net.parameters(), lr=lr)
        best, best_state, since = float("inf"), None, 0
        for _ in range(steps):
            loss = -self._logpdf(t[fit], c[fit]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                v = float(-self._logpdf(t[val], c[val]).mean())
            if v < best:
                best, best_state, since = v, [p.detach().clone() for p in self.net.parameters()], 0
            else:
                since += 1
                if since >= patience:
                    break
        with torch.no_grad():
            for p, b in zip(self.net.parameters(), best_state):
                p.copy_(b)

    def _params(self, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log weights (n, m), means (n, m, d), log scales (n, m, d)) at standardised conditions."""
        out = self.net(c)
        m, d = self.m, self.dim
        logw = torch.log_softmax(out[:, :m], 1)
        mean = out[:, m : m + m * d].reshape(-1, m, d)
        log_s = out[:, m + m * d :].reshape(-1, m, d).clamp(-5.0, 3.0)
        return logw, mean, log_s

    def _logpdf(self, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """log density of standardised targets t_i given standardised conditions c_i (paired rows)."""
        logw, mean, log_s = self._params(c)
        z = (t[:, None, :] - mean) / log_s.exp()
        comp = (-0.5 * z**2 - log_s - 0.5 * np.log(2 * np.pi)).sum(2)
        return torch.logsumexp(logw + comp, 1)

    def _cond(self, cond: np.ndarray) -> torch.Tensor:
        """Standardised condition tensor."""
        cond = cond.reshape(len(cond), -1)
        return torch.as_tensor((cond - self.c_mu) / self.c_sd, dtype=torch.float32)

    def loglik_matrix(self, target: np.ndarray, cond: np.ndarray) -> np.ndarray:
        """L[i, j] = log p(target_i | cond_j), up to a constant (rows: targets, columns: conditions)."""
        target = target.reshape(len(target), -1)
        t = torch.as_tensor((target - self.t_mu) / self.t_sd, dtype=torch.float64)
        with torch.no_grad():
            logw, mean, log_s = (v.double() for v in self._params(self._cond(cond)))
            z = (t[:, None, None, :] - mean[None]) / log_s.exp()[None]
            comp = (-0.5 * z**2 - log_s[None]).sum(3)
            return torch.logsumexp(logw[None] + comp, 2).numpy()

    def sample(self, cond: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One draw of the target for every row of ``cond`` (FDL's dummies), on the raw scale."""
        with torch.no_grad():
            logw, mean, log_s = (v.double().numpy() for v in self._params(self._cond(cond)))
        w = np.exp(logw)
        k = (rng.random(len(w))[:, None] > np.cumsum(w, 1)[:, :-1]).sum(1)
        rows = np.arange(len(w))
        draw = mean[rows, k] + np.exp(log_s[rows, k]) * rng.standard_normal((len(w), self.dim))
        return draw * self.t_sd + self.t_mu
