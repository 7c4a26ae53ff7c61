"""The paper's alignment energy of an attribute-induced vector field, and the macroscale statistics.

Energy (after the official ``scripts/topo/energy_finetuning_jax.py``, k = 10 nearest neighbours;
the inverse-distance and radius-ball variants after ``energy_gancontrol.ipynb`` and
``energy_finetuning_ball.py``): for points P (C, D) with field V (C, D),
E = mean_i mean_{j in N(i)} (1 - cos(v_i, v_j)), in [0, 2]. Written here in numpy (float64, one
matrix product for all points); :func:`energy_loop` is the naive double loop the benchmark compares.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

NEIGHBORS = ("knn", "invdist", "ball")
TINY = 1e-12


def drop_null(P: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Remove points whose field vector has norm < 1e-12 (reported, never divided by zero)."""
    keep = np.linalg.norm(V, axis=1) >= TINY
    return P[keep], V[keep], int((~keep).sum())


def distances(P: np.ndarray, metric: str = "cosine") -> np.ndarray:
    """Pairwise distances (C, C): cosine distance 1 - cos, or Euclidean."""
    P = np.asarray(P, dtype=np.float64)
    if metric == "cosine":
        U = P / np.maximum(np.linalg.norm(P, axis=1, keepdims=True), TINY)
        return np.clip(1.0 - U @ U.T, 0.0, 2.0)
    if metric == "euclidean":
        sq = (P ** 2).sum(1)
        return np.sqrt(np.maximum(sq[:, None] + sq[None, :] - 2.0 * P @ P.T, 0.0))
    raise ValueError(f"metric must be 'cosine' or 'euclidean', not {metric!r}")


def knn_indices(D: np.ndarray, k: int) -> np.ndarray:
    """The k nearest neighbours of every point (rows of D), self excluded; shape (C, k)."""
    C = len(D)
    if not 1 <= k < C:
        raise ValueError(f"knn_k = {k} needs 1 <= k < C = {C} points")
    D = D.copy()
    np.fill_diagonal(D, np.inf)
    return np.argsort(D, axis=1, kind="stable")[:, :k]


def field_energy(P: np.ndarray, V: np.ndarray, neighbors: str = "knn", k: int = 10,
                 metric: str = "cosine", ball_eps: float = 0.5) -> tuple[float, int]:
    """(energy, number of null vectors dropped) of the field V on the point cloud P."""
    if neighbors not in NEIGHBORS:
        raise ValueError(f"neighbors must be one of {', '.join(NEIGHBORS)}, not {neighbors!r}")
    P, V, dropped = drop_null(np.asarray(P, np.float64), np.asarray(V, np.float64))
    Vn = V / np.linalg.norm(V, axis=1, keepdims=True)
    one_minus_cos = 1.0 - Vn @ Vn.T
    D = distances(P, metric)
    if neighbors == "knn":
        nb = knn_indices(D, k)
        return float(np.take_along_axis(one_minus_cos, nb, axis=1).mean()), dropped
    off = ~np.eye(len(P), dtype=bool)
    if neighbors == "invdist":
        W = np.where(off, 1.0 / np.maximum(D, TINY), 0.0)
    else:
        dbar = D[off].mean()
        W = (off & (D <= ball_eps * dbar)).astype(np.float64)
    has = W.sum(1) > 0
    if not has.any():
        return float("nan"), dropped
    per_point = (W * one_minus_cos).sum(1)[has] / W.sum(1)[has]
    return float(per_point.mean()), dropped


def energy(P: np.ndarray, V: np.ndarray, neighbors: str = "knn", k: int = 10, metric: str = "cosine",
           ball_eps: float = 0.5) -> float:
    """The alignment energy of the field V on P (see :func:`field_energy`)."""
    return field_energy(P, V, neighbors, k, metric, ball_eps)[0]


def energy_loop(P: np.ndarray, V: np.ndarray, k: int = 10) -> float:
    """The kNN energy with cosine distances as a naive double loop over (i, j): the benchmark's reference."""
    C = len(P)
    total = 0.0
    for i in range(C):
        d = []
        for j in range(C):
            if j != i:
                cos = float(P[i] @ P[j]) / (np.linalg.norm(P[i]) * np.linalg.norm(P[j]))
                d.append((1.0 - cos, j))
        d.sort()
        acc = 0.0
        for _, j in d[:k]:
            acc += 1.0 - float(V[i] @ V[j]) / (np.linalg.norm(V[i]) * np.linalg.norm(V[j]))
        total += acc / k
    return total / C


def sensitivity(V: np.ndarray, h_frac: float) -> float:
    """S = mean ||v_i|| / (2 h) with the attribute's range normalised to 1."""
    return float(np.linalg.norm(V, axis=1).mean() / (2.0 * h_frac))


def alignment(Va: np.ndarray, Vb: np.ndarray) -> float:
    """Mean paired cosine distance between two fields at the same base points."""
    a = Va / np.maximum(np.linalg.norm(Va, axis=1, keepdims=True), TINY)
    b = Vb / np.maximum(np.linalg.norm(Vb, axis=1, keepdims=True), TINY)
    return float(np.mean(1.0 - (a * b).sum(1)))


# ---------------------------------------------------------------- macroscale
def ks_statistic(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic sup |F_x - F_y| (merged-grid evaluation)."""
    x, y = np.sort(np.asarray(x, np.float64)), np.sort(np.asarray(y, np.float64))
    grid = np.concatenate([x, y])
    fx = np.searchsorted(x, grid, side="right") / len(x)
    fy = np.searchsorted(y, grid, side="right") / len(y)
    return float(np.max(np.abs(fx - fy)))


def macro_sets(group: np.ndarray, owner: np.ndarray, rng: np.random.Generator, cap: int = 500
               ) -> tuple[np.ndarray, np.ndarray]:
    """Image indices of X_a and X_not_a: one random image per identity per group, equal sizes.

    ``group`` is +1 / -1 / 0 (neither) per image, ``owner`` the identity of each image.
    """
    pos, neg = [], []
    for ident in np.unique(owner):
        mine = np.flatnonzero(owner == ident)
        for g, out in ((1, pos), (-1, neg)):
            cand = mine[group[mine] == g]
            if len(cand):
                out.append(int(rng.choice(cand)))
    n = min(cap, len(pos), len(neg))
    if n < 2:
        raise ValueError("fewer than 2 identities in one of the two groups")
    pos = rng.permutation(np.array(pos))[:n]
    neg = rng.permutation(np.array(neg))[:n]
    return pos, neg


def macro_ks(E: np.ndarray, pos: np.ndarray, neg: np.ndarray) -> tuple[float, float, dict[str, np.ndarray]]:
    """(max-aggregated KS, mean KS, the three distance samples) of within-group vs cross-group distances."""
    iu = np.triu_indices(len(pos), 1)
    Dp, Dn = distances(E[pos]), distances(E[neg])
    U = E / np.linalg.norm(E, axis=1, keepdims=True)
    d = {"a": Dp[iu], "not_a": Dn[np.triu_indices(len(neg), 1)],
         "cross": np.clip(1.0 - U[pos] @ U[neg].T, 0.0, 2.0).ravel()}
    k1, k2 = ks_statistic(d["a"], d["cross"]), ks_statistic(d["not_a"], d["cross"])
    return max(k1, k2), (k1 + k2) / 2, d


def intra_entropy(group: np.ndarray, owner: np.ndarray) -> float:
    """Mean over identities of the Shannon entropy (bits) of the binary attribute within the identity."""
    out = []
    for ident in np.unique(owner):
        g = group[owner == ident]
        g = g[g != 0]
        if len(g):
            p = np.mean(g > 0)
            out.append(0.0 if p in (0.0, 1.0) else float(-p * np.log2(p) - (1 - p) * np.log2(1 - p)))
    return float(np.mean(out))


def inter_entropy(group: np.ndarray, owner: np.ndarray, bandwidth: float = 0.05, grid: int = 101) -> float:
    """Entropy (nats) of a Gaussian KDE of the per-identity attribute mean on [-1, 1] (101 points)."""
    means = np.array([group[(owner == i) & (group != 0)].mean() for i in np.unique(owner)
                      if np.any((owner == i) & (group != 0))])
    xs = np.linspace(-1, 1, grid)
    dens = stats.norm.pdf((xs[:, None] - means[None, :]) / bandwidth).sum(1)
    p = dens / dens.sum()
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def verification_auc(E: np.ndarray, owner: np.ndarray) -> float:
    """AUC of cosine similarity for same vs different identity over all image pairs."""
    from sklearn.metrics import roc_auc_score

    U = E / np.linalg.norm(E, axis=1, keepdims=True)
    iu = np.triu_indices(len(E), 1)
    sim = (U @ U.T)[iu]
    same = (owner[:, None] == owner[None, :])[iu]
    return float(roc_auc_score(same, sim))
