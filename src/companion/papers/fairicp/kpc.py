"""Kernel partial correlation rho^2(Yhat, A | Y) (Huang, Deb & Sen 2022), 1-NN graph estimator, and
the ICP test of equalized odds built on it.

Re-implemented in Python (the paper calls the R package ``KPC``: ``KPCgraph(Y=Yhat, X=Y, Z=A, Knn=1)``):
T(W) = mean_i mean_{j in N_W(i)} k(Yhat_i, Yhat_j), N_W(i) the ``knn`` Euclidean nearest neighbours of
W_i other than i (``scipy.spatial.cKDTree``; ties for the first neighbour broken at random), and
rho^2 = (T([Y, A]) - T(Y)) / (1 - T(Y)) with the Gaussian kernel exp(-s |u - v|^2),
s = 1 / (2 median |Yhat_i - Yhat_j|^2) (median heuristic, so k(u, u) = 1). The neighbour graphs depend
only on (Y, A), so the ICP test builds them once and reuses them for every predictor.
Checked against the R package's own ``KPCgraph`` on fixed inputs (``tests/data/kpc_R_reference.json``; n <= 2000,
where the median takes every pair, as R does).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree
from scipy.spatial.distance import pdist

MEDIAN_SUBSAMPLE = 2000
ILL_CONDITIONED = 1e-3


def as_2d(v: np.ndarray) -> np.ndarray:
    """A vector as an (n, 1) column; a matrix unchanged."""
    v = np.asarray(v, dtype=float)
    return v[:, None] if v.ndim == 1 else v


def neighbours(w: np.ndarray, rng: np.random.Generator, knn: int = 1) -> np.ndarray:
    """(n, knn) indices of the nearest neighbours of every row of w, itself excluded; ties for the
    nearest one are broken uniformly at random among the candidates the tree returns."""
    w = as_2d(w)
    n = len(w)
    k = min(n, knn + 4)
    dist, idx = cKDTree(w).query(w, k=k)
    not_self = idx != np.arange(n)[:, None]
    out = np.empty((n, knn), dtype=np.int64)
    for i in range(n):
        d, j = dist[i][not_self[i]], idx[i][not_self[i]]
        out[i] = j[:knn]
        ties = np.flatnonzero(d == d[0])
        if len(ties) > 1:
            out[i, 0] = j[rng.choice(ties)]
    return out


def kernel_scale(yhat: np.ndarray) -> float:
    """s of the Gaussian kernel: 1 / (2 median(pairwise distance)^2) of yhat (at most 2000 rows), the R
    package's default ``rbfdot(1/(2*median(dist(Y))^2))``."""
    yhat = as_2d(yhat)[:MEDIAN_SUBSAMPLE]
    med = float(np.median(pdist(yhat)))
    return 1.0 / (2.0 * med * med) if med > 0 else 1.0


def t_stat(yhat: np.ndarray, nbrs: np.ndarray, scale: float) -> float:
    """T = mean_i mean_j k(yhat_i, yhat_nbrs[i, j])."""
    yhat = as_2d(yhat)
    sq = ((yhat[:, None, :] - yhat[nbrs]) ** 2).sum(-1)
    return float(np.exp(-scale * sq).mean())


def kpc_from_graphs(yhat: np.ndarray, nb_y: np.ndarray, nb_ya: np.ndarray) -> float:
    """rho^2 from precomputed neighbour graphs of Y and of [Y, A]; NaN when ill-conditioned."""
    scale = kernel_scale(yhat)
    t_y = t_stat(yhat, nb_y, scale)
    denom = 1.0 - t_y
    if denom < ILL_CONDITIONED:
        warnings.warn("KPC: 1 - T(Y) < 1e-3 (Yhat nearly a function of Y); returning NaN", stacklevel=2)
        return float("nan")
    return (t_stat(yhat, nb_ya, scale) - t_y) / denom


def kpc(yhat: np.ndarray, y: np.ndarray, a: np.ndarray, rng: np.random.Generator, knn: int = 1) -> float:
    """rho^2(yhat, a | y) with the knn-NN graph estimator."""
    y2, a2 = as_2d(y), as_2d(a)
    return kpc_from_graphs(yhat, neighbours(y2, rng, knn), neighbours(np.hstack([y2, a2]), rng, knn))


@dataclass
class ICPTest:
    """The ICP test of EO on a fixed test set: graphs of Y, [Y, A] and [Y, Ã_b] for B ICP copies."""

    nb_y: np.ndarray
    nb_ya: np.ndarray
    nb_copies: np.ndarray

    @classmethod
    def build(cls, y: np.ndarray, a: np.ndarray, copies: np.ndarray, rng: np.random.Generator,
              knn: int = 1) -> "ICPTest":
        """Neighbour graphs for the observed attributes a and for each copy in ``copies`` (B, n, K)."""
        y2 = as_2d(y)
        nb_copies = np.stack([neighbours(np.hstack([y2, as_2d(c)]), rng, knn) for c in copies])
        return cls(neighbours(y2, rng, knn), neighbours(np.hstack([y2, as_2d(a)]), rng, knn), nb_copies)

    def stats(self, yhat: np.ndarray) -> tuple[float, np.ndarray]:
        """rho^2 with the observed A and with each copy in place of A (kernel and T(Y) computed once)."""
        scale = kernel_scale(yhat)
        t_y = t_stat(yhat, self.nb_y, scale)
        if 1.0 - t_y < ILL_CONDITIONED:
            warnings.warn("KPC: 1 - T(Y) < 1e-3 (Yhat nearly a function of Y); returning NaN", stacklevel=2)
            return float("nan"), np.full(len(self.nb_copies), np.nan)
        rho = lambda nb: (t_stat(yhat, nb, scale) - t_y) / (1.0 - t_y)  # noqa: E731
        return rho(self.nb_ya), np.array([rho(nb) for nb in self.nb_copies])

    def run(self, yhat: np.ndarray) -> tuple[float, float]:
        """(observed rho^2, p-value (1 + #{T_b >= T_0}) / (B + 1)); NaN p when rho^2 is NaN."""
        t0, tb = self.stats(yhat)
        if np.isnan(t0):
            return t0, float("nan")
        return t0, float((1 + np.sum(tb >= t0)) / (len(tb) + 1))
