"""ERASE: in-context examples chosen by quantized k-means, unlearned exactly (reconstruction of Algorithm 1).

The training inputs are embedded by a frozen encoder, mapped by a seeded random orthonormal
projection (independent of the data, so it never has to be unlearned), clustered by Q-k-means,
and for each final centroid, in centroid order, the nearest example not chosen yet becomes an
in-context demonstration (ties to the lowest id). Unlearning a point runs the Q-k-means
certificate; when it passes the prompt is unchanged unless the point was a demonstration (then
the selection is redone from that centroid on); when it fails, Q-k-means is retrained on the rest
with the SAME race key and lattice phases (:func:`qkmeans.race_retrain`; the seeds only move when
the deleted point is one of them). With the id-keyed race seeding the model after unlearning is a
function of (D minus x, the randomness) on every path: it equals retraining without x with the same
randomness, exactly, hence also in distribution. Two controls keep the rules that are not exact:
``refit="fresh"`` (the reference code: every failed certificate retrains with fresh randomness) and
``seeding="sequential"`` with ``refit="coupled"`` (the previous rule: position-keyed sequential
k-means++, keep the seeds unless x is one, fresh randomness when it is; k-means++ conditioned on
never picking x is not k-means++ on D minus x when k >= 2).
The random-k baseline and the per-class variant live here too.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from companion.papers.erase_unlearning import qkmeans as qk

REFITS = ("coupled", "fresh")
SEEDINGS = ("race", "sequential")


@dataclass(frozen=True)
class Deletion:
    """One unlearning request: which path it took, counted FLOPs and wall seconds."""

    pid: int
    path: str  # certified | certified-selected | recluster | recluster-seed | recluster-seed-fresh | recluster-fresh | random-*
    flops: int
    seconds: float


def projection(dim_in: int, dim_out: int, seed: int) -> np.ndarray:
    """A seeded random orthonormal map ``R^dim_in -> R^dim_out`` scaled by ``sqrt(dim_in / dim_out)``."""
    rng = np.random.default_rng([seed, dim_in, dim_out])
    q, r = np.linalg.qr(rng.standard_normal((dim_in, dim_out)))
    return q * np.sign(np.diag(r)) * math.sqrt(dim_in / dim_out)


def select(state: qk.State, start: int = 0, chosen: np.ndarray | None = None) -> np.ndarray:
    """Demonstration ids: per centroid j >= start, the nearest remaining point not chosen before (ties: lowest id)."""
    rows = np.flatnonzero(state.alive)
    Xf = qk.to_float(state.X[rows])
    dist = qk.sq_dists(Xf, state.centroids[start:])
    out = list(chosen[:start]) if chosen is not None else []
    taken = np.isin(state.ids[rows], out)
    for j in range(dist.shape[1]):
        col = np.where(taken, np.inf, dist[:, j])
        best = int(np.argmin(col))
        out.append(int(state.ids[rows[best]]))
        taken[best] = True
    return np.asarray(out, dtype=np.int64)


class Erase:
    """A Q-k-means model plus its k demonstrations, with exact unlearning."""

    def __init__(self, Z: np.ndarray, ids: np.ndarray, cfg: qk.Config, rng: np.random.Generator,
                 refit: str = "coupled", seeding: str = "race") -> None:
        """``Z``: projected embeddings (n, d'); ``ids``: sorted point ids; ``rng`` draws all randomness;
        ``refit``: ``coupled`` (same randomness) or ``fresh`` (a control); ``seeding``: the id-keyed
        ``race`` or the position-keyed ``sequential`` k-means++ sampler (a control, with ``coupled``:
        keep the seeds unless x is one, fresh randomness when it is)."""
        if refit not in REFITS:
            raise ValueError(f"refit must be one of {REFITS}, not {refit!r}")
        if seeding not in SEEDINGS:
            raise ValueError(f"seeding must be one of {SEEDINGS}, not {seeding!r}")
        self.rng = rng
        self.refit = refit
        self.seeding = seeding
        self.state = qk.fit_random(qk.to_fixed(Z), np.asarray(ids), cfg, rng, seeding)
        self.selected = select(self.state)

    @property
    def d(self) -> int:
        """Projected dimension."""
        return self.state.X.shape[1]

    def unlearn(self, pid: int) -> Deletion:
        """Delete point ``pid`` exactly; return the path taken and its cost."""
        start = time.perf_counter()
        st = self.state
        r = qk.row_of(st, pid)
        ok, steps = qk.certificate(st, r)
        flops = qk.flops_certificate(max(steps, 1), self.d)
        n, k = st.n_alive - 1, st.cfg.k
        if ok:
            qk.remove_certified(st, r)
            hit = np.flatnonzero(self.selected == pid)
            path = "certified"
            if hit.size:
                j = int(hit[0])
                self.selected = select(st, j, self.selected)
                flops += qk.flops_distances(n, k - j, self.d) + n * (k - j)
                path = "certified-selected"
        elif self.refit == "coupled" and r not in st.init_rows:  # the seeds stay (race or sequential)
            st.alive[r] = False
            self.state = qk.coupled_retrain(st)
            self.selected = select(self.state)
            flops += qk.flops_lloyd(n, k, self.d, st.cfg.iters) + qk.flops_distances(n, k, self.d) + n * k
            path = "recluster"
        elif self.refit == "coupled" and self.seeding == "race":  # x is a seed: re-race with the same key
            st.alive[r] = False
            self.state = qk.race_retrain(st)
            self.selected = select(self.state)
            flops += qk.flops_fit(n, k, self.d, st.cfg.iters) + qk.flops_distances(n, k, self.d) + n * k
            path = "recluster-seed"
        else:
            X, ids = qk.compact(st)
            keep = ids != pid
            self.state = qk.fit_random(X[keep], ids[keep], st.cfg, self.rng, self.seeding)
            self.selected = select(self.state)
            flops += qk.flops_fit(n, k, self.d, st.cfg.iters) + qk.flops_distances(n, k, self.d) + n * k
            path = "recluster-seed-fresh" if r in st.init_rows else "recluster-fresh"
        return Deletion(int(pid), path, int(flops), time.perf_counter() - start)


class RandomK:
    """k uniform demonstrations; unlearning a chosen one replaces it by a uniform remaining point."""

    def __init__(self, ids: np.ndarray, k: int, rng: np.random.Generator) -> None:
        """Draw k distinct ids uniformly from ``ids``."""
        self.rng = rng
        self.pool = set(int(i) for i in ids)
        self.selected = np.asarray(rng.choice(np.asarray(ids), size=k, replace=False), dtype=np.int64)

    def unlearn(self, pid: int) -> Deletion:
        """Delete ``pid``; if it was a demonstration, redraw that slot from the non-chosen remaining points."""
        start = time.perf_counter()
        self.pool.remove(int(pid))
        hit = np.flatnonzero(self.selected == pid)
        path = "random-keep"
        if hit.size:
            free = np.setdiff1d(np.fromiter(self.pool, dtype=np.int64), self.selected)
            self.selected[hit[0]] = free[self.rng.integers(len(free))]
            path = "random-replace"
        return Deletion(int(pid), path, len(self.selected), time.perf_counter() - start)


class PerClassErase:
    """The per-class variant: one ERASE model with ceil(k / C) clusters per class; prompts concatenated."""

    def __init__(self, Z: np.ndarray, ids: np.ndarray, labels: np.ndarray, cfg: qk.Config,
                 rng: np.random.Generator, refit: str = "coupled", seeding: str = "race") -> None:
        """Split by label and fit one model per class on that class's points (classes with too few points are skipped)."""
        classes = np.unique(labels)
        per = math.ceil(cfg.k / len(classes))
        self.label_of = dict(zip(np.asarray(ids).tolist(), np.asarray(labels).tolist()))
        self.models: dict[int, Erase] = {}
        for c in classes:
            rows = np.flatnonzero(labels == c)
            if len(rows) >= per:
                m_c = cfg.m * cfg.k / per * len(rows) / len(labels)  # the same gamma: m = gamma n0 / k
                self.models[int(c)] = Erase(Z[rows], np.asarray(ids)[rows], qk.Config(per, cfg.iters, cfg.eps, m_c), rng,
                                         refit, seeding)

    @property
    def selected(self) -> np.ndarray:
        """All classes' demonstrations, class by class."""
        return np.concatenate([m.selected for m in self.models.values()])

    def unlearn(self, pid: int) -> Deletion:
        """Route the request to the model of the point's class."""
        c = self.label_of.pop(int(pid))
        return self.models[c].unlearn(pid)
