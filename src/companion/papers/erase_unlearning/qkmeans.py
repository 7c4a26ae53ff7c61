"""Quantized k-means (Q-k-means, Ginart et al., NeurIPS 2019) with an exact deletion certificate.

Written by hand, after reading the reference code ``tginart/deletion-efficient-kmeans``
(``del_eff_kmeans.py``) and with the exactness fixes of the spec:

- the data are stored in fixed point (integers of ``2**-24``), so cluster sums are exact and
  "sum minus the deleted point" equals "the sum without it" bit for bit;
- the momentum threshold ``m`` is a constant of the model (set once, at construction), and the
  number of Lloyd iterations ``T`` is fixed (no loss-based stopping);
- the certificate recomputes the cluster mean with the point removed (``S - x``, ``n - 1``)
  instead of the reference code's ``a - x / n`` approximation, and compares lattice indices;
- distances are computed coordinate by coordinate (no BLAS), and ties go to the lowest index, so
  a point's assignment does not depend on which other rows are present.

A certified deletion leaves the trajectory identical to training on the remaining data with the
same initial seeds and the same lattice phases (:func:`coupled_retrain` builds that twin).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SCALE = float(2**24)  # fixed-point unit: coordinates are integers of 2**-24


@dataclass(frozen=True)
class Config:
    """Q-k-means settings: clusters, Lloyd iterations, lattice width and the fixed momentum threshold."""

    k: int
    iters: int
    eps: float
    m: float


@dataclass
class State:
    """A trained Q-k-means model and everything its deletion certificate needs (O(T (n + k) d))."""

    cfg: Config
    ids: np.ndarray  # (n,) point ids, strictly increasing
    X: np.ndarray  # (n, d) int64 fixed-point coordinates
    alive: np.ndarray  # (n,) bool: rows not yet deleted
    init_rows: np.ndarray  # (k,) rows of the k-means++ seeds
    thetas: np.ndarray  # (T, d) lattice phases
    assign: np.ndarray  # (T, n) cluster of every row at each step
    sums: np.ndarray  # (T, k, d) float64 holding exact integers (fixed-point sums)
    counts: np.ndarray  # (T, k) int64 cluster sizes
    prev: np.ndarray  # (T, k, d) centroids before each step
    lattice: np.ndarray  # (T, k, d) int64 lattice index of each step's quantized centroid
    centroids: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))  # (k, d) final C_T

    @property
    def n_alive(self) -> int:
        """Number of points not deleted."""
        return int(self.alive.sum())


def to_fixed(x: np.ndarray) -> np.ndarray:
    """Coordinates rounded to the fixed-point grid, as int64 multiples of ``1 / SCALE``."""
    return np.rint(np.asarray(x, dtype=np.float64) * SCALE).astype(np.int64)


def to_float(x_int: np.ndarray) -> np.ndarray:
    """Fixed-point integers back to float64 (exact)."""
    return np.asarray(x_int, dtype=np.float64) / SCALE


def lattice_index(a: np.ndarray, eps: float, theta: np.ndarray) -> np.ndarray:
    """Index of the lattice cell ``eps (Z + 1/2 - theta)`` nearest to ``a``: ``floor(a / eps + theta)``."""
    return np.floor(a / eps + theta).astype(np.int64)


def lattice_point(idx: np.ndarray, eps: float, theta: np.ndarray) -> np.ndarray:
    """The lattice point of index ``idx``: ``eps (idx + 1/2 - theta)``."""
    return eps * (idx + 0.5 - theta)


def quantize(c: np.ndarray, eps: float, theta: np.ndarray) -> np.ndarray:
    """``Q_theta(c) = eps (round(c / eps + theta - 1/2) - (theta - 1/2))``, per coordinate."""
    return lattice_point(lattice_index(c, eps, theta), eps, theta)


def cluster_means(sums: np.ndarray, counts: np.ndarray, prev: np.ndarray, m: float) -> np.ndarray:
    """Momentum-corrected means: ``S/n`` when ``n >= m``, else ``S/m + (1 - n/m) prev``; empty clusters keep ``prev``."""
    n = np.asarray(counts, dtype=np.float64)[..., None]
    plain = sums / (np.maximum(n, 1.0) * SCALE)
    if m > 0:
        damped = sums / (m * SCALE) + (1.0 - n / m) * prev
        plain = np.where(n >= m, plain, damped)
    return np.where(n == 0, prev, plain)


def sq_dists(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Squared distances (n, k), summed coordinate by coordinate (row results never depend on other rows)."""
    out = np.zeros((len(X), len(C)))
    for j in range(X.shape[1]):
        out += (X[:, j, None] - C[None, :, j]) ** 2
    return out


def kmeanspp(Xf: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeds (row indices): the first uniform, each next with probability proportional to D^2."""
    n = len(Xf)
    rows = [int(rng.integers(n))]
    d2 = sq_dists(Xf, Xf[rows])[:, 0]
    for _ in range(k - 1):
        total = d2.sum()
        if total > 0:
            nxt = int(rng.choice(n, p=d2 / total))
        else:  # every point sits on a seed: uniform over the rows not chosen yet
            nxt = int(rng.choice(np.setdiff1d(np.arange(n), rows)))
        rows.append(nxt)
        d2 = np.minimum(d2, sq_dists(Xf, Xf[[nxt]])[:, 0])
    return np.asarray(rows)


def draw_randomness(X: np.ndarray, cfg: Config, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The data-dependent seeds (k-means++) and the data-independent phases ``theta_t ~ U[0,1)^d``."""
    init = kmeanspp(to_float(X), cfg.k, rng)
    return init, rng.random((cfg.iters, X.shape[1]))


def fit(X: np.ndarray, ids: np.ndarray, cfg: Config, init_rows: np.ndarray, thetas: np.ndarray) -> State:
    """T momentum-corrected, quantized Lloyd steps from the seeds ``init_rows`` with phases ``thetas``."""
    if len(X) < cfg.k:
        raise ValueError(f"need at least k = {cfg.k} points, got {len(X)}")
    n, d = X.shape
    Xf = to_float(X)
    T, k = cfg.iters, cfg.k
    assign = np.zeros((T, n), dtype=np.int32)
    sums = np.zeros((T, k, d))
    counts = np.zeros((T, k), dtype=np.int64)
    prev = np.zeros((T, k, d))
    lattice = np.zeros((T, k, d), dtype=np.int64)
    C = Xf[init_rows].copy()
    for t in range(T):
        a_t = np.argmin(sq_dists(Xf, C), axis=1)  # first minimum: ties to the lowest cluster index
        assign[t] = a_t
        counts[t] = np.bincount(a_t, minlength=k)
        for j in range(d):  # float64 sums of integers below 2**53 are exact
            sums[t, :, j] = np.bincount(a_t, weights=X[:, j].astype(np.float64), minlength=k)
        prev[t] = C
        lattice[t] = lattice_index(cluster_means(sums[t], counts[t], C, cfg.m), cfg.eps, thetas[t])
        C = lattice_point(lattice[t], cfg.eps, thetas[t])
    return State(cfg, np.asarray(ids).copy(), X.copy(), np.ones(n, dtype=bool), np.asarray(init_rows).copy(),
                 np.asarray(thetas).copy(), assign, sums, counts, prev, lattice, C)


def fit_random(X: np.ndarray, ids: np.ndarray, cfg: Config, rng: np.random.Generator) -> State:
    """Train on ``X`` with fresh k-means++ seeds and phases from ``rng``."""
    init, thetas = draw_randomness(X, cfg, rng)
    return fit(X, ids, cfg, init, thetas)


def row_of(state: State, pid: int) -> int:
    """The row of point id ``pid`` (ids are sorted); a missing or deleted id raises KeyError."""
    r = int(np.searchsorted(state.ids, pid))
    if r >= len(state.ids) or state.ids[r] != pid or not state.alive[r]:
        raise KeyError(f"point {pid} is not in the model")
    return r


def certificate(state: State, r: int) -> tuple[bool, int]:
    """Whether deleting row ``r`` leaves every quantized centroid unchanged; and the Lloyd steps checked.

    All T steps are checked at once: at step t the point's cluster j gets ``S - x`` and ``n - 1``,
    the momentum rule with the same m, and must keep its lattice index under the same phase.
    """
    if r in state.init_rows:
        return False, 0
    cfg = state.cfg
    steps = np.arange(cfg.iters)
    cols = state.assign[:, r]
    a = cluster_means(state.sums[steps, cols] - state.X[r], state.counts[steps, cols] - 1,
                      state.prev[steps, cols], cfg.m)
    return bool(np.array_equal(lattice_index(a, cfg.eps, state.thetas), state.lattice[steps, cols])), cfg.iters


def remove_certified(state: State, r: int) -> None:
    """Apply a certified deletion in place: subtract the point from its T cluster sums and counts."""
    cols = state.assign[:, r]
    steps = np.arange(state.cfg.iters)
    state.sums[steps, cols] -= state.X[r]
    state.counts[steps, cols] -= 1
    state.alive[r] = False


def compact(state: State) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-point coordinates and ids of the points still in the model."""
    return state.X[state.alive], state.ids[state.alive]


def signature(state: State) -> dict[str, np.ndarray]:
    """The model's full state restricted to the remaining points, keyed by name (for bit-for-bit checks)."""
    rows = np.flatnonzero(state.alive)
    return {"ids": state.ids[rows], "X": state.X[rows], "init_ids": state.ids[state.init_rows],
            "thetas": state.thetas, "assign": state.assign[:, rows], "sums": state.sums,
            "counts": state.counts, "prev": state.prev, "lattice": state.lattice, "centroids": state.centroids}


def same_state(a: State, b: State) -> bool:
    """True when two models agree bit for bit on every array of :func:`signature`."""
    sa, sb = signature(a), signature(b)
    return all(sa[key].shape == sb[key].shape and np.array_equal(sa[key], sb[key]) for key in sa)


def coupled_retrain(state: State) -> State:
    """Train from scratch on the remaining points with the same seeds (by id) and phases."""
    X, ids = compact(state)
    init_ids = state.ids[state.init_rows]
    init_rows = np.searchsorted(ids, init_ids)
    if not np.array_equal(ids[np.minimum(init_rows, len(ids) - 1)], init_ids):
        raise ValueError("a k-means++ seed was deleted: no coupled retrain exists")
    return fit(X, ids, state.cfg, init_rows, state.thetas)


def consistent(state: State) -> bool:
    """Whether the stored sums and counts equal those recomputed from the remaining points."""
    rows = np.flatnonzero(state.alive)
    k, d = state.cfg.k, state.X.shape[1]
    for t in range(state.cfg.iters):
        a_t = state.assign[t, rows]
        if not np.array_equal(np.bincount(a_t, minlength=k), state.counts[t]):
            return False
        for j in range(d):
            if not np.array_equal(np.bincount(a_t, weights=state.X[rows, j].astype(np.float64), minlength=k),
                                  state.sums[t, :, j]):
                return False
    return True


# ---------------------------------------------------------------- counted FLOPs
def flops_distances(n: int, k: int, d: int) -> int:
    """Squared distances of n points to k centres: 3 d per pair (subtract, square, add)."""
    return 3 * d * n * k


def flops_fit(n: int, k: int, d: int, iters: int) -> int:
    """k-means++ (k distance passes) plus T Lloyd steps (assign, sum, momentum mean, quantize)."""
    init = flops_distances(n, k, d) + 2 * n * k
    step = flops_distances(n, k, d) + n * d + 7 * k * d
    return init + iters * step


def flops_lloyd(n: int, k: int, d: int, iters: int) -> int:
    """T Lloyd steps from given seeds (a coupled retrain: no k-means++ pass)."""
    return iters * (flops_distances(n, k, d) + n * d + 7 * k * d)


def flops_certificate(steps: int, d: int) -> int:
    """Per checked step: d subtractions, the momentum mean (4 d) and the lattice index (2 d)."""
    return 7 * d * steps
