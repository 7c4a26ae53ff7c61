"""The official FairICP simulation (settings 1 and 2), its true density and the analytic EO anchor.

Design (``simulation/synthetic_experiment_md.py`` of the official code, re-written): K insensitive
features X_ins ~ N(0, 1); K attributes A_k, each a standardised 50/50 mixture of Gamma(1, 1) and
Gamma(10, 1); K sensitive features X_sens,k = sqrt(alpha) A_k + sqrt(1 - alpha) N(0, 1);
Y = sum X + eps N(0, 1) with eps^2 = 2K. Setting 2 appends ``n_noisy`` irrelevant mixture-gamma
columns to A (used in training, ignored by the evaluation). The true A | Y, which has no closed form,
is sampled by resampling prior draws with the true q(y | a) as weights (:func:`a_given_y_sampler`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

GAMMA_SHAPES = (1.0, 10.0)
MIX_MEAN = 0.5 * (GAMMA_SHAPES[0] + GAMMA_SHAPES[1])
MIX_SD = float(np.sqrt(0.5 * sum(k + k * k for k in GAMMA_SHAPES) - MIX_MEAN**2))


@dataclass(frozen=True)
class SimData:
    """One draw of the design: predictor inputs x = [X_ins, X_sens], attributes a, response y."""

    x: np.ndarray
    a: np.ndarray
    y: np.ndarray
    K: int
    alpha: float
    eps2: float

    @property
    def a_true(self) -> np.ndarray:
        """The K attributes that enter X (setting 2's extra columns removed)."""
        return self.a[:, : self.K]


def mixture_gamma(n: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """(n, cols) i.i.d. standardised 50/50 mixture of Gamma(1, 1) and Gamma(10, 1)."""
    shape = np.where(rng.random((n, cols)) < 0.5, GAMMA_SHAPES[0], GAMMA_SHAPES[1])
    return (rng.gamma(shape) - MIX_MEAN) / MIX_SD


def simulate(n: int, K: int, alpha: float, rng: np.random.Generator, n_noisy: int = 0) -> SimData:
    """Draw n rows of the official design with K attributes, leak alpha and n_noisy extra columns."""
    eps2 = 2.0 * K
    x_ins = rng.standard_normal((n, K))
    a = mixture_gamma(n, K, rng)
    x_sens = np.sqrt(alpha) * a + np.sqrt(1 - alpha) * rng.standard_normal((n, K))
    y = x_ins.sum(1) + x_sens.sum(1) + np.sqrt(eps2) * rng.standard_normal(n)
    if n_noisy:
        a = np.concatenate([a, mixture_gamma(n, n_noisy, rng)], axis=1)
    return SimData(np.concatenate([x_ins, x_sens], axis=1), a, y, K, alpha, eps2)


def true_loglik(y: np.ndarray, a: np.ndarray, K: int, alpha: float, eps2: float) -> np.ndarray:
    """L[i, j] = log q(y_i | a_j) of the design, up to terms in i alone (rows: y, columns: a)."""
    var = K + K * (1 - alpha) + eps2
    mu = np.sqrt(alpha) * a[:, :K].sum(1)
    return -((y[:, None] - mu[None, :]) ** 2) / (2 * var)


# prior draws per fit; q(y | a) is broad (variance 3.1 K against 0.9 K of signal), so even at |y| = 3 sd
# more than 700 of them carry weight (effective sample size of the importance weights)
ORACLE_POOL = 4000


def a_given_y_sampler(y: np.ndarray, cols: int, K: int, alpha: float, eps2: float, rng: np.random.Generator,
                      pool: int = ORACLE_POOL) -> Callable[[np.random.Generator], np.ndarray]:
    """A sampler of A | Y = y_i under the design, for every i (the oracle FDL's dummies), by
    sampling-importance-resampling: one pool of prior draws, weighted per row by the true q(y_i | a),
    resampled at each call."""
    draws = mixture_gamma(pool, cols, rng)
    cdf = np.empty((len(y), pool), dtype=np.float32)
    for start in range(0, len(y), 1000):  # rows in blocks: the float64 weights stay a few tens of MB
        rows = slice(start, start + 1000)
        logw = true_loglik(y[rows], draws, K, alpha, eps2)
        c = np.cumsum(np.exp(logw - logw.max(1, keepdims=True)), 1)
        cdf[rows] = c / c[:, -1:]

    def sample(gen: np.random.Generator) -> np.ndarray:
        """One draw of A | Y = y_i for every row."""
        pick = (cdf < gen.random(len(y), dtype=np.float32)[:, None]).sum(1)
        return draws[np.minimum(pick, pool - 1)]

    return sample


def fair_linear_oracle(K: int, eps2: float) -> tuple[float, float, float]:
    """(a*, c*, MSE*) of the best EO-fair predictor a * sum X_ins + c * sum X_sens (derivation on the page)."""
    r = K / (K + eps2)
    a = (1 + r) / (1 + r * r)
    c = r * a
    return a, c, K * ((1 - a) ** 2 + (1 - c) ** 2) + eps2


def linear_predictions(x: np.ndarray, K: int, a: float, c: float) -> np.ndarray:
    """a * sum X_ins + c * sum X_sens: OLS-like (1, 1), fair (a*, c*) or unaware (1, 0) references."""
    return a * x[:, :K].sum(1) + c * x[:, K:].sum(1)


def partial_cov(yhat: np.ndarray, a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cov(yhat, a_k | y) per column: covariance of the residuals after regressing each on y."""
    yc = y - y.mean()
    res_hat = yhat - yhat.mean() - yc * (yc @ (yhat - yhat.mean())) / (yc @ yc)
    ac = a - a.mean(0)
    res_a = ac - np.outer(yc, yc @ ac) / (yc @ yc)
    return res_a.T @ res_hat / len(y)
