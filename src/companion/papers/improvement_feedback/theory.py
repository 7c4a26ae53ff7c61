"""Exact feedback operators, the learnability test and the indistinguishable-pair LP (parts A and B).

A profile is a distribution over the m! rankings (columns in the order of
:func:`companion.papers.improvement_feedback.rankings.all_rankings`). A feedback operator maps it to
the distribution of answers: t-improvement feedback (the paper's), random-pair comparisons
(Halpern et al. 2024) or the full ranking itself. A scoring vector is learnable from a feedback
operator when every direction in the operator's null space shifts all candidates' scores equally;
the LP builds two profiles with equal feedback and different winners, proving a rule is not.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd
from scipy import linalg, optimize

from companion.papers.improvement_feedback import rankings as rk
from companion.papers.improvement_feedback.voting_feedback import window_probs

EXACT_TOL = 1e-8  # residual below which a vector counts as inside the learnable subspace
LP_EQ_TOL = 1e-9  # largest feedback difference for an LP pair to certify indistinguishability
OPERATORS = ("improvement", "pairwise", "full ranking")


def feedback_operator(perms: np.ndarray, t: int, kind: str) -> np.ndarray:
    """A[(a, b), sigma] = P(shown a, answered b | sigma) with a uniform shown candidate, shape (m^2, m!)."""
    n_perm, m = perms.shape
    A = np.zeros((m * m, n_perm))
    for col, r in enumerate(perms):
        A[r[0] * m + r[0], col] = 1.0 / m
        for i in range(1, m):
            k = min(i, t)
            for q, p in enumerate(window_probs(k, kind)):
                A[r[i] * m + r[i - k + q], col] += p / m
    return A


def pairwise_operator(perms: np.ndarray) -> np.ndarray:
    """A[(a, b), sigma] = P(random pair is {a, b} and a is above b), shape (m^2, m!)."""
    n_perm, m = perms.shape
    pos = rk.positions(perms)
    above = pos[:, :, None] < pos[:, None, :]
    return above.reshape(n_perm, m * m).T / (m * (m - 1))


def operator(name: str, perms: np.ndarray, t: int, kind: str) -> np.ndarray:
    """The feedback operator called ``name`` (one of OPERATORS); t and kind matter for improvement only."""
    if name == "improvement":
        return feedback_operator(perms, t, kind)
    if name == "pairwise":
        return pairwise_operator(perms)
    if name == "full ranking":
        return np.eye(len(perms))
    raise ValueError(f"unknown feedback operator {name!r}; allowed: {', '.join(OPERATORS)}")


def score_matrix(s: np.ndarray, perms: np.ndarray) -> np.ndarray:
    """S[c, sigma] = s[pos_sigma(c)], shape (m, m!)."""
    return np.asarray(s, dtype=float)[rk.positions(perms)].T


def s_star(m: int, t: int, kind: str) -> np.ndarray:
    """s*_t(j) = expected number of query positions whose answer lands on position j, shape (m,)."""
    s = np.zeros(m)
    for i in range(1, m):
        k = min(i, t)
        s[i - k:i] += window_probs(k, kind)
    return s


def borda(m: int) -> np.ndarray:
    """The Borda scoring vector (m-1, ..., 1, 0)."""
    return np.arange(m - 1, -1, -1.0)


def null_basis(A: np.ndarray, tol: float) -> np.ndarray:
    """Orthonormal basis of the null space of A (SVD, relative tolerance), shape (cols, dim)."""
    _, sv, vt = linalg.svd(A, full_matrices=True)
    rank = int((sv > tol * sv[0]).sum())
    return vt[rank:].T


def learnable_subspace(A: np.ndarray, perms: np.ndarray, tol: float) -> np.ndarray:
    """Basis of {s : S_s v is constant for all v in null(A)}, shape (m, dim L)."""
    m = perms.shape[1]
    N = null_basis(A, tol)
    if N.shape[1] == 0:  # feedback determines the profile: every vector is learnable
        return np.eye(m)
    blocks = []
    for p in range(m):
        C = score_matrix(np.eye(m)[p], perms) @ N
        blocks.append((C - C.mean(axis=0)).ravel())
    u, sv, _ = linalg.svd(np.array(blocks), full_matrices=True)
    rank = int((sv > tol * max(sv[0], 1.0)).sum())
    return u[:, rank:]


def learnable(name: str, m: int, t: int, kind: str, tol: float) -> np.ndarray:
    """Learnable subspace of operator ``name`` at (m, t, kind)."""
    if name != "improvement":  # pairwise and full-ranking feedback do not depend on the window
        return _learnable(name, m, 0, "", tol)
    return _learnable(name, m, t, kind, tol)


@lru_cache(maxsize=64)
def _learnable(name: str, m: int, t: int, kind: str, tol: float) -> np.ndarray:
    """Cached: the window-free controls are asked once per (t, kind) case."""
    perms = rk.all_rankings(m)
    return learnable_subspace(operator(name, perms, t, kind), perms, tol)


def residual(v: np.ndarray, basis: np.ndarray) -> float:
    """Distance of v from span(basis) (orthonormal columns)."""
    v = np.asarray(v, dtype=float)
    return float(np.linalg.norm(v - basis @ (basis.T @ v)))


def named_vectors(m: int, t: int, kind: str) -> dict[str, np.ndarray]:
    """The scoring vectors whose learnability is reported."""
    e1 = np.eye(m)[0]
    return {"plurality": e1, "s*": s_star(m, t, kind), "const": np.ones(m), "borda": borda(m),
            "veto": 1.0 - np.eye(m)[-1], "2-approval": (np.arange(m) < 2).astype(float)}


def borda_in_span(m: int, t: int, kind: str) -> bool:
    """Whether Borda is a linear combination of plurality, s*_t and the constant (the coincidences)."""
    span = np.linalg.qr(np.column_stack([np.eye(m)[0], s_star(m, t, kind), np.ones(m)]))[0]
    return residual(borda(m), span) < EXACT_TOL


def theory_row(m: int, t: int, kind: str, tol: float, name: str = "improvement") -> dict[str, Any]:
    """Dimension of operator ``name``'s learnable subspace and residual of each named vector for one case."""
    L = learnable(name, m, t, kind, tol)
    row: dict[str, Any] = {"m": m, "t": t, "kind": kind, "dim L": L.shape[1]}
    row.update({f"res {k}": residual(v, L) for k, v in named_vectors(m, t, kind).items()})
    row["predicted"] = row["dim L"] == 3 and max(row[f"res {k}"] for k in ("plurality", "s*", "const")) < EXACT_TOL
    row["borda in span"] = borda_in_span(m, t, kind)
    return row


def advantage(perms: np.ndarray, rule: str | np.ndarray, w: int) -> np.ndarray:
    """Rows over sigma of 'w beats c' for each c != w: normalised score gap or majority margin, (m-1, m!)."""
    m = perms.shape[1]
    others = [c for c in range(m) if c != w]
    if isinstance(rule, str) and rule == "condorcet":
        pos = rk.positions(perms)
        return np.sign(pos[:, others] - pos[:, [w]]).T.astype(float)
    s = borda(m) if isinstance(rule, str) and rule == "borda" else np.asarray(rule, float)
    S = score_matrix(s / (s.max() - s.min()), perms)
    return S[w] - S[others]


@dataclass
class Pair:
    """Two profiles with (near-)identical feedback: winner 0 under pi, winner 1 under pi2, by margin delta."""

    delta: float
    pi: np.ndarray
    pi2: np.ndarray
    eq_residual: float


def indistinguishable_pair(A: np.ndarray, perms: np.ndarray, rule: str | np.ndarray) -> Pair:
    """Maximise delta s.t. A pi = A pi2, 0 wins under pi and 1 wins under pi2 by >= delta (LP, HiGHS)."""
    K = perms.shape[0]
    a0, a1 = advantage(perms, rule, 0), advantage(perms, rule, 1)
    zeros_a, zeros_k = np.zeros_like(a0), np.zeros(K)
    A_eq = np.block([[A, -A, np.zeros((A.shape[0], 1))],
                     [np.ones(K), zeros_k, 0.0], [zeros_k, np.ones(K), 0.0]])
    b_eq = np.r_[np.zeros(A.shape[0]), 1.0, 1.0]
    ones = np.ones((a0.shape[0], 1))
    A_ub = np.block([[-a0, zeros_a, ones], [zeros_a, -a1, ones]])
    c = np.r_[np.zeros(2 * K), -1.0]
    res = optimize.linprog(c, A_ub=A_ub, b_ub=np.zeros(2 * a0.shape[0]), A_eq=A_eq, b_eq=b_eq,
                           bounds=(0, None), method="highs",
                           options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
    if res.status != 0:
        raise RuntimeError(f"linprog failed: {res.message}")
    pi, pi2 = np.clip(res.x[:K], 0, None), np.clip(res.x[K:2 * K], 0, None)
    pi, pi2 = pi / pi.sum(), pi2 / pi2.sum()
    return Pair(float(res.x[-1]) + 0.0, pi, pi2, float(np.abs(A @ pi - A @ pi2).max()))  # + 0.0: no "-0"


# rule | feedback rows of the LP table: the two impossibilities and their controls (a learnable rule
# under the same feedback, the same rule under pairwise feedback)
LP_ROWS = (("borda", "improvement", "borda"), ("condorcet", "improvement", "condorcet"),
           ("plurality", "improvement", "plurality"), ("borda | pairwise", "pairwise", "borda"),
           ("condorcet | pairwise", "pairwise", "condorcet"))


def lp_table(ms: tuple[int, ...]) -> tuple[pd.DataFrame, dict[tuple[str, int, int], Pair]]:
    """Every row of LP_ROWS under uniform improvement feedback (or pairwise), every (m, t)."""
    rows, pairs = [], {}
    for m in ms:
        perms = rk.all_rankings(m)
        for t in range(1, m):
            for label, op, rule in LP_ROWS:
                vector = np.eye(m)[0] if rule == "plurality" else rule
                pair = indistinguishable_pair(operator(op, perms, t, "unif"), perms, vector)
                pairs[(label, m, t)] = pair
                rows.append({"rule | feedback": label, "m": m, "t": t, "delta*": pair.delta,
                             "max |A pi - A pi'|": pair.eq_residual})
    return pd.DataFrame(rows), pairs
