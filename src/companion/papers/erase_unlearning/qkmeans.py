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

k-means++ seeds are drawn by an exponential race keyed by point id (:func:`kmeanspp_race`): at step
t every remaining point i gets ``E_{t,i} ~ Exp(1)`` from a hash of (race key, t, id), independent of
the data, and the seed is ``argmin_i E_{t,i} / w_t(i)`` with ``w_t`` the D^2 weight (1 at the first
step). That is k-means++ in law (a race of exponentials picks i with probability ``w_t(i) / sum w_t``),
and it makes the seeds a function of (data, key) that does not move when a non-seed is deleted:
unlearning then equals retraining on the rest with the same key and phases on every path
(:func:`race_retrain`). The position-keyed sequential sampler (:func:`kmeanspp`) is kept as the
control: with it, "keep the seeds unless x is one" is k-means++ conditioned on never picking x,
which is not k-means++ on the rest (:func:`kmeanspp_law` enumerates both laws).
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
    key: int | None = None  # race key of the id-keyed k-means++ seeding (None: the sequential sampler)

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


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def race_exponentials(key: int, t: int, ids: np.ndarray) -> np.ndarray:
    """``E_{t,i} ~ Exp(1)`` for each id, a function of (key, t, id) only (splitmix64 hash to a 53-bit uniform)."""
    base = _mix(np.array([key], dtype=np.uint64))
    z = _mix(_mix(base + np.uint64(t)) + np.asarray(ids).astype(np.uint64))
    u = ((z >> np.uint64(11)).astype(np.float64) + 0.5) / float(2**53)
    return -np.log(u)


def kmeanspp_race(Xf: np.ndarray, ids: np.ndarray, k: int, key: int) -> np.ndarray:
    """k-means++ seeds (row indices) by an exponential race keyed by point id: at step t the seed is
    ``argmin_i E_{t,i} / w_t(i)`` with ``w_0 = 1`` and ``w_t`` the squared distance to the nearest seed
    (when every weight is 0, the race runs with weight 1 over the rows not chosen yet)."""
    n = len(Xf)
    rows: list[int] = []
    d2 = np.ones(n)
    for t in range(k):
        e = race_exponentials(key, t, ids)
        w = d2
        if w.sum() <= 0:  # a stand-in for this step only: the next step's weights stay the true D^2
            w = np.ones(n)
            w[rows] = 0.0
        with np.errstate(divide="ignore"):
            score = np.where(w > 0, e / np.where(w > 0, w, 1.0), np.inf)
        nxt = int(np.argmin(score))
        rows.append(nxt)
        near = sq_dists(Xf, Xf[[nxt]])[:, 0]
        d2 = near if t == 0 else np.minimum(d2, near)
    return np.asarray(rows)


def kmeanspp_law(P: np.ndarray, k: int) -> dict[tuple[int, ...], float]:
    """The exact law of the ordered k-means++ seed sequence on the rows of ``P`` (enumeration; small n)."""
    P = np.asarray(P, dtype=np.float64).reshape(len(P), -1)
    out: dict[tuple[int, ...], float] = {}

    def rec(seq: list[int], prob: float) -> None:
        if len(seq) == k:
            out[tuple(seq)] = out.get(tuple(seq), 0.0) + prob
            return
        w = np.ones(len(P)) if not seq else sq_dists(P, P[seq]).min(axis=1)
        if w.sum() <= 0:
            w = np.ones(len(P))
            w[seq] = 0.0
        w = w / w.sum()
        for j in np.flatnonzero(w > 0):
            rec(seq + [int(j)], prob * float(w[j]))

    rec([], 1.0)
    return out


def kmeanspp_law_avoiding(P: np.ndarray, k: int, x: int) -> dict[tuple[int, ...], float]:
    """The law of k-means++ on ``P`` conditioned on never picking row ``x`` (what keeping the seeds when x
    is not one of them gives), with rows renumbered as in ``P`` without row x."""
    law = kmeanspp_law(P, k)
    keep = {s: v for s, v in law.items() if x not in s}
    z = sum(keep.values())
    return {tuple(i - (i > x) for i in s): v / z for s, v in keep.items()}


def draw_randomness(X: np.ndarray, ids: np.ndarray, cfg: Config, rng: np.random.Generator,
                    seeding: str = "race") -> tuple[np.ndarray, np.ndarray, int | None]:
    """The data-dependent seeds (k-means++: the id-keyed race, or the position-keyed ``sequential``
    sampler), the data-independent phases ``theta_t ~ U[0,1)^d``, and the race key (None if sequential)."""
    if seeding == "race":
        key = int(rng.integers(2**63))
        init = kmeanspp_race(to_float(X), np.asarray(ids), cfg.k, key)
    elif seeding == "sequential":
        key = None
        init = kmeanspp(to_float(X), cfg.k, rng)
    else:
        raise ValueError(f"seeding must be 'race' or 'sequential', not {seeding!r}")
    return init, rng.random((cfg.iters, X.shape[1])), key


def fit(X: np.ndarray, ids: np.ndarray, cfg: Config, init_rows: np.ndarray, thetas: np.ndarray,
        key: int | None = None) -> State:
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
                 np.asarray(thetas).copy(), assign, sums, counts, prev, lattice, C, key)


def fit_random(X: np.ndarray, ids: np.ndarray, cfg: Config, rng: np.random.Generator,
               seeding: str = "race") -> State:
    """Train on ``X`` with fresh k-means++ seeds (``seeding``) and phases from ``rng``."""
    init, thetas, key = draw_randomness(X, ids, cfg, rng, seeding)
    return fit(X, ids, cfg, init, thetas, key)


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
    return fit(X, ids, state.cfg, init_rows, state.thetas, state.key)


def race_retrain(state: State) -> State:
    """Train from scratch on the remaining points with the same race key and phases (seeds re-raced):
    what training on the rest with the same randomness gives, whichever point was deleted."""
    if state.key is None:
        raise ValueError("the sequential sampler has no race key: no same-randomness retrain exists")
    X, ids = compact(state)
    return fit(X, ids, state.cfg, kmeanspp_race(to_float(X), ids, state.cfg.k, state.key), state.thetas, state.key)


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


def flops_kmeanspp(n: int, k: int, d: int) -> int:
    """A k-means++ pass: k distance passes plus the running minimum and the draw (2 per point and step)."""
    return flops_distances(n, k, d) + 2 * n * k


def flops_fit(n: int, k: int, d: int, iters: int) -> int:
    """k-means++ (k distance passes) plus T Lloyd steps (assign, sum, momentum mean, quantize)."""
    return flops_kmeanspp(n, k, d) + flops_lloyd(n, k, d, iters)


def flops_lloyd(n: int, k: int, d: int, iters: int) -> int:
    """T Lloyd steps from given seeds (a coupled retrain: no k-means++ pass)."""
    return iters * (flops_distances(n, k, d) + n * d + 7 * k * d)


def flops_certificate(steps: int, d: int) -> int:
    """Per checked step: d subtractions, the momentum mean (4 d) and the lattice index (2 d)."""
    return 7 * d * steps
