"""Computing Voting Rules with Improvement Feedback (Micha & Varsamis, ICML 2025).

arXiv: https://arxiv.org/abs/2502.12542. A voter shown candidate ``a`` answers with a candidate at
most ``t`` positions above ``a`` in their ranking (or ``a`` itself when ``a`` is their top). The
paper characterises which positional scoring rules can be computed from the distribution of such
answers (plurality and one t-dependent vector, up to linear combination and constants), proves
that no Condorcet-consistent rule can, and compares improvement with pairwise feedback in
simulations (m = 20, t = 5; Mallows, impartial culture, Plackett-Luce voters).

Reproduced here, in three parts:

A. the characterisation, computed (never assumed) by linear algebra on the exact feedback
   operator for small m: the subspace of learnable scoring vectors and the residual of
   plurality, s*_t, Borda, veto and 2-approval against it;
B. explicit pairs of preference profiles with identical feedback but different Borda or
   Condorcet winners (``scipy.optimize.linprog``), a pairwise-feedback control, and a
   finite-sample check that the two profiles cannot be told apart from feedback;
C. the simulation (approximation ratio of the estimated Borda / Copeland / plurality winner),
   improvement (uniform, linear, exponential answer weights) against pairwise feedback.

Written by hand because no well-kept library does it: the feedback operator and learnability
test, the LP construction, the vectorised feedback simulator and the winner estimators (the
official scripts loop over voters in Python and use ``pref_voting`` only for profiles and true
scores). Ranking samplers live in :mod:`companion.papers.improvement_feedback.rankings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import linalg, optimize

from companion import claims, plotting, runtime
from companion.claims import Claim, Verdict
from companion.papers.improvement_feedback import rankings as rk
from companion.papers.improvement_feedback.voting_feedback import (argmax_random, borda_estimate, copeland_estimate, count_matrix,
                                            improvement_answers, improvement_counts, paired_z,
                                            pairwise_answers, ratio, true_scores, two_sample_reject,
                                            window_probs)
from companion.params import BaseParams, ParamError, param

KINDS = ("unif", "lin", "exp")
DISTRIBUTIONS = ("mallows", "pl", "ic")
RULES = ("borda", "copeland", "plurality")
# Plackett-Luce weights of the official experiment scripts (the paper's Figure setting)
PAPER_PL_WEIGHTS = (
    0.6090889288520809, 0.26106513205273585, 0.32560503207274116, 0.48373092549278285,
    0.9966938322681743, 0.6540981787032101, 0.5344141400706653, 0.8839724420057306,
    0.7476912624386994, 0.7304445240713902, 0.1566178037820284, 0.08062654559496374,
    0.7325764901696482, 0.6984963901271382, 0.7083578780596743, 0.35269526312966903,
    0.9425169499934516, 0.15161085633460314, 0.3704870090571961, 0.5441132775035619,
)
EXACT_TOL = 1e-8      # residual below which a vector counts as inside the learnable subspace
LP_EQ_TOL = 1e-9      # largest feedback difference for an LP pair to certify indistinguishability
COINCIDENCES = ((4, 2, "unif"), (5, 4, "lin"))  # cases where s*_t happens to be proportional to Borda


@dataclass(frozen=True)
class Params(BaseParams):
    """Parameters of the three parts; defaults are the quick preset."""

    seeds: int = param(5, lo=1, hi=64, help="number of seeds the claims are evaluated over")
    m_theory: tuple[int, ...] = param((4, 5), lo=3, hi=6, help="numbers of candidates for the exact theory (m! columns)")
    feedback_kinds: tuple[str, ...] = param(("unif", "lin"), choices=KINDS, help="answer weights inside the t-window")
    null_tol: float = param(1e-10, lo=1e-13, hi=1e-6, help="relative singular-value tolerance for ranks")
    lp_m: int = param(5, lo=4, hi=6, help="m of the claimed LP constructions and the finite-sample demo")
    lp_t_borda: int = param(2, lo=1, hi=5, help="t of the Borda pair used in the finite-sample demo")
    n_pair_demo: int = param(2000, lo=200, hi=10**6, help="voters per sample in the demo")
    reps_pair_demo: int = param(500, lo=50, hi=10**5, help="repetitions of the demo per seed")
    m_exp: int = param(20, lo=5, hi=30, help="candidates in the simulation")
    t_exp: int = param(5, lo=1, hi=29, help="improvement window in the simulation")
    n_list: tuple[int, ...] = param((50, 200, 1000), lo=10, hi=10**5, help="numbers of voters")
    reps_exp: int = param(200, lo=50, hi=10**5, help="repetitions per (distribution, n) and seed")
    t_sweep: tuple[int, ...] = param((1, 5, 13), lo=1, hi=29, min_len=0, help="window sizes swept at n = 500 (empty: skip)")
    sweep_seeds: int = param(1, lo=1, hi=64, help="seeds the t-sweep (a figure, no claim) runs on, from the base seed")
    mallows_phi: float = param(1 / 3, lo=1e-6, hi=1.0, help="Mallows dispersion, P proportional to phi**KT")
    pl_weights: str = param("paper", choices=("paper", "uniform-seeded"), help="Plackett-Luce weights")
    distributions: tuple[str, ...] = param(DISTRIBUTIONS, choices=DISTRIBUTIONS, help="voter models")

    PRESETS = {
        "full": {"m_theory": (4, 5, 6), "feedback_kinds": KINDS, "n_pair_demo": 20000,
                 "reps_pair_demo": 1000, "n_list": tuple(range(50, 1001, 50)), "reps_exp": 500,
                 "t_sweep": (1, 4, 7, 10, 13), "sweep_seeds": 5},
        "paper": {"m_theory": (4, 5, 6), "feedback_kinds": KINDS, "n_pair_demo": 20000,
                  "reps_pair_demo": 1000, "n_list": tuple(range(50, 1001, 50)), "reps_exp": 500,
                  "t_sweep": (1, 4, 7, 10, 13), "sweep_seeds": 10, "seeds": 10},
    }

    @classmethod
    def resolve(cls, preset: str = "quick", **overrides: Any) -> "Params":
        """Validate each value, then the windows against the numbers of candidates."""
        p = super().resolve(preset, **overrides)
        if p.lp_t_borda >= p.lp_m:
            raise ParamError(f"parameter 'lp_t_borda': {p.lp_t_borda} is out of range; allowed: < lp_m = {p.lp_m}")
        if p.t_exp >= p.m_exp or any(t >= p.m_exp for t in p.t_sweep):
            raise ParamError(f"parameters 't_exp' / 't_sweep': each must be < m_exp = {p.m_exp}")
        if p.sweep_seeds > p.seeds:
            raise ParamError(f"parameter 'sweep_seeds': {p.sweep_seeds} is out of range; allowed: <= seeds = {p.seeds}")
        return p


# ---------------------------------------------------------------- Part A: exact operators


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


def residual(v: np.ndarray, basis: np.ndarray) -> float:
    """Distance of v from span(basis) (orthonormal columns)."""
    v = np.asarray(v, dtype=float)
    return float(np.linalg.norm(v - basis @ (basis.T @ v)))


def named_vectors(m: int, t: int, kind: str) -> dict[str, np.ndarray]:
    """The scoring vectors whose learnability is reported."""
    e1 = np.eye(m)[0]
    return {"plurality": e1, "s*": s_star(m, t, kind), "const": np.ones(m),
            "borda": np.arange(m - 1, -1, -1.0), "veto": 1.0 - np.eye(m)[-1],
            "2-approval": (np.arange(m) < 2).astype(float)}


def theory_row(m: int, t: int, kind: str, tol: float) -> dict[str, Any]:
    """Dimension of the learnable subspace and residual of each named vector for one case."""
    perms = rk.all_rankings(m)
    L = learnable_subspace(feedback_operator(perms, t, kind), perms, tol)
    row: dict[str, Any] = {"m": m, "t": t, "kind": kind, "dim L": L.shape[1]}
    row.update({f"res {k}": residual(v, L) for k, v in named_vectors(m, t, kind).items()})
    row["predicted"] = row["dim L"] == 3 and max(row[f"res {k}"] for k in ("plurality", "s*", "const")) < EXACT_TOL
    return row


# ---------------------------------------------------------------- Part B: indistinguishable pairs


def advantage(perms: np.ndarray, rule: str | np.ndarray, w: int) -> np.ndarray:
    """Rows over sigma of 'w beats c' for each c != w: normalised score gap or majority margin, (m-1, m!)."""
    m = perms.shape[1]
    others = [c for c in range(m) if c != w]
    if isinstance(rule, str) and rule == "condorcet":
        pos = rk.positions(perms)
        return np.sign(pos[:, others] - pos[:, [w]]).T.astype(float)
    s = np.arange(m - 1, -1, -1.0) if isinstance(rule, str) and rule == "borda" else np.asarray(rule, float)
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
    return Pair(float(res.x[-1]), pi, pi2, float(np.abs(A @ pi - A @ pi2).max()))


def lp_table(ms: tuple[int, ...]) -> tuple[pd.DataFrame, dict[tuple[str, int, int], Pair]]:
    """Borda / Condorcet pairs under uniform improvement feedback and the pairwise control, every (m, t)."""
    rows, pairs = [], {}
    for m in ms:
        perms = rk.all_rankings(m)
        P = pairwise_operator(perms)
        for t in range(1, m):
            A = feedback_operator(perms, t, "unif")
            for name, op, rule in (("borda", A, "borda"), ("condorcet", A, "condorcet"),
                                   ("condorcet | pairwise", P, "condorcet")):
                pair = indistinguishable_pair(op, perms, rule)
                pairs[(name, m, t)] = pair
                rows.append({"rule | feedback": name, "m": m, "t": t, "delta*": pair.delta,
                             "max |A pi - A pi'|": pair.eq_residual})
    return pd.DataFrame(rows), pairs


# ---------------------------------------------------------------- Part C: simulation


def sample_profiles(dist: str, shape: tuple[int, int], p: Params, rng: np.random.Generator) -> np.ndarray:
    """Profiles of the simulation, shape (reps, n, m_exp)."""
    if dist == "mallows":
        return rk.mallows(shape, p.m_exp, p.mallows_phi, rng)
    if dist == "ic":
        return rk.impartial_culture(shape, p.m_exp, rng)
    return rk.plackett_luce(shape, pl_weights(p), rng)


def pl_weights(p: Params) -> np.ndarray:
    """The Plackett-Luce weights: the official script's when m_exp = 20, else U(0.05, 1) with a fixed seed."""
    if p.pl_weights == "paper" and p.m_exp == len(PAPER_PL_WEIGHTS):
        return np.array(PAPER_PL_WEIGHTS)
    return np.random.default_rng(20250218).uniform(0.05, 1.0, p.m_exp)


def methods(p: Params) -> tuple[str, ...]:
    """Feedback methods of the simulation: pairwise and every improvement kind (uniform always)."""
    return ("pairwise", "unif", *[k for k in p.feedback_kinds if k != "unif"])


def simulate(dist: str, n: int, t: int, p: Params, rng: np.random.Generator) -> np.ndarray:
    """Approximation ratios, shape (methods, rules, reps); NaN for plurality under pairwise feedback."""
    profiles = sample_profiles(dist, (p.reps_exp, n), p, rng)
    truth = true_scores(profiles)
    m = p.m_exp
    out = np.full((len(methods(p)), len(RULES), p.reps_exp), np.nan)
    for k, method in enumerate(methods(p)):
        if method == "pairwise":
            d, plu = count_matrix(*pairwise_answers(profiles, rng), m), None
        else:
            d, plu = improvement_counts(*improvement_answers(profiles, t, method, rng), m)
        est = {"borda": borda_estimate(d), "copeland": copeland_estimate(d), "plurality": plu}
        for r, rule in enumerate(RULES):
            if est[rule] is not None:
                out[k, r] = ratio(truth[rule], argmax_random(est[rule], rng))
    return out


# ---------------------------------------------------------------- Part B, finite samples


def demo_counts(prof: np.ndarray, perms: np.ndarray, t: int, shape: tuple[int, int], target: int,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Samples of one profile: feedback counts (reps, m^2), ranking counts (reps, m!), Borda-estimator hits (reps,)."""
    m = perms.shape[1]
    idx = rng.choice(len(prof), size=shape, p=prof)
    answered, shown = improvement_answers(perms[idx], t, "unif", rng)
    fb = count_matrix(answered, shown, m).reshape(shape[0], m * m)
    flat = (np.arange(shape[0])[:, None] * len(prof) + idx).ravel()
    ranks = np.bincount(flat, minlength=shape[0] * len(prof)).reshape(shape[0], len(prof))
    d, _ = improvement_counts(answered, shown, m)
    return fb, ranks, argmax_random(borda_estimate(d), rng) == target


def pair_demo(pair: Pair, perms: np.ndarray, t: int, p: Params, rng: np.random.Generator) -> dict[str, float]:
    """Chi-square rejection rates (feedback vs rankings) and Borda-estimator success on samples of pi and pi2."""
    R, n = p.reps_pair_demo, p.n_pair_demo
    chunk = max(1, min(R, 2_000_000 // n))  # bounds memory at the full preset
    rej_fb, rej_rank, hits = [], [], [[], []]
    for start in range(0, R, chunk):
        shape = (min(chunk, R - start), n)
        (fb0, rk0, h0), (fb1, rk1, h1) = (demo_counts(prof, perms, t, shape, target, rng)
                                          for target, prof in enumerate((pair.pi, pair.pi2)))
        rej_fb += [two_sample_reject(a, b) for a, b in zip(fb0, fb1)]
        rej_rank += [two_sample_reject(a, b) for a, b in zip(rk0, rk1)]
        hits[0].append(h0)
        hits[1].append(h1)
    success = [float(np.concatenate(h).mean()) for h in hits]
    se = np.sqrt(sum(s * (1 - s) / R for s in success))  # the two samples are independent
    return {"reject feedback": float(np.mean(rej_fb)), "reject rankings": float(np.mean(rej_rank)),
            "success pi": success[0], "success pi'": success[1],
            "success sum": float(sum(success)), "SE of sum": float(se)}


# ---------------------------------------------------------------- run, claims, metrics


@dataclass
class Results:
    """Everything the page shows: theory table, LP pairs, per-seed demo and simulation ratios."""

    params: Params
    theory: pd.DataFrame
    lp: pd.DataFrame
    pairs: dict[tuple[str, int, int], Pair]
    s_star_curves: dict[int, np.ndarray]
    demo: list[dict[str, float]]
    ratios: np.ndarray  # (seeds, distributions, n_list, methods, rules, reps)
    sweep: np.ndarray   # (sweep_seeds, distributions, t_sweep, methods, rules, reps_exp); empty when skipped


def theory_cases(p: Params) -> list[tuple[int, int, str]]:
    """Every (m, t, kind) of the grid plus the cases the claims need."""
    grid = [(m, t, k) for m in p.m_theory for t in range(1, m) for k in p.feedback_kinds]
    need = [(p.lp_m, t, "unif") for t in range(1, p.lp_m)] + list(COINCIDENCES)
    return sorted(set(grid) | set(need), key=lambda c: (c[0], KINDS.index(c[2]), c[1]))


def run(params: Params) -> Results:
    """Run parts A, B and C for every seed (A and the LPs are deterministic)."""
    runtime.limit_threads()
    p = params
    theory = pd.DataFrame([theory_row(m, t, k, p.null_tol) for m, t, k in theory_cases(p)])
    lp, pairs = lp_table(tuple(sorted(set(p.m_theory) | {p.lp_m})))
    m_plot = max(p.m_theory)
    curves = {t: s_star(m_plot, t, "unif") for t in range(1, m_plot)}
    perms = rk.all_rankings(p.lp_m)
    demo, ratios, sweep = [], [], []
    for i, seed in enumerate(p.seed_list()):
        demo.append(pair_demo(pairs[("borda", p.lp_m, p.lp_t_borda)], perms, p.lp_t_borda, p,
                              np.random.default_rng([seed, 1])))
        ratios.append([[simulate(d, n, p.t_exp, p, np.random.default_rng([seed, 2, di, n]))
                        for n in p.n_list] for di, d in enumerate(p.distributions)])
        if i < p.sweep_seeds:
            sweep.append([[simulate(d, 500, t, p, np.random.default_rng([seed, 3, di, t]))
                           for t in p.t_sweep] for di, d in enumerate(p.distributions)])
    return Results(p, theory, lp, pairs, curves, demo, np.array(ratios), np.array(sweep))


def _sel(res: Results, dist: str, n: int) -> np.ndarray:
    """Ratios (seeds, methods, rules, reps) of one distribution and n."""
    return res.ratios[:, res.params.distributions.index(dist), res.params.n_list.index(n)]


CLAIMS = [
    Claim("characterization", "learnable scoring vectors = span{plurality, s*_t, 1}: fraction of (m, t, kind) "
          "cases with dim L = 3 and residuals < 1e-8 (computed once)", "main theorem (Thm. on positional rules)", 1.0,
          kind="exact"),
    Claim("borda-residual", "Borda is not learnable at m = lp_m, uniform feedback: min over t of its "
          "distance to L (computed once)", "strong impossibility for Borda", 1e-3, kind="exact"),
    Claim("borda-coincidence", "Borda IS learnable in the coincidences (m=4, t=2, unif; m=5, t=4, lin): max "
          "residual (computed once)", "not in the paper (spec finding)", 1e-8, "<=", kind="exact"),
    Claim("borda-lp", "LP pair with equal feedback, different Borda winners: min over t of margin delta* "
          "at m = lp_m (computed once)", "Borda not computable", 0.05, kind="exact"),
    Claim("condorcet-lp", "LP pair with equal feedback, different Condorcet winners: min over t of delta* at "
          "m = lp_m, 0 if feedback differs by > 1e-9 (computed once)", "no Condorcet-consistent rule", 0.15,
          kind="exact"),
    Claim("pairwise-control", "control: same Condorcet LP with pairwise feedback: max delta* (computed once)",
          "pairwise feedback identifies margins", 1e-9, "<=", kind="exact"),
    Claim("plurality-equal", "consistency check of the LP, not evidence (equal feedback fixes the plurality "
          "scores by construction): max |plurality(pi) - plurality(pi')| of the Borda pair",
          "plurality is learnable", 1e-12, "<=", kind="exact"),
    Claim("feedback-chi2", "samples of the Borda pair: chi-square rejection rate of feedback counts at 5%",
          "identical feedback distributions", 0.10, "<="),
    Claim("ranking-chi2", "same samples: rejection rate of full-ranking counts", "profiles differ", 0.95),
    Claim("mallows-gain", "Mallows, n = min(n_list): Borda ratio, improvement (unif) - pairwise, paired mean",
          "improvement beats pairwise (Fig., m=20, t=5)", 0.03),
    Claim("mallows-z", "same comparison: paired z-score", "improvement beats pairwise", 3.0),
    Claim("pl-loss", "Plackett-Luce, n in n_list >= 200 pooled: Borda ratio difference, paired z-score",
          "pairwise beats improvement under PL", -2.0, "<="),
    Claim("plurality-mallows", "Mallows, n = max(n_list): plurality ratio from improvement feedback",
          "plurality learnable", 0.99),
]


def claim_values(res: Results) -> dict[str, float | list[float]]:
    """The metric of every claim: one value for an exact claim (parts A and B's LPs are computed once),
    one value per seed for a statistical one."""
    p, th, lp = res.params, res.theory, res.lp
    grid = th[th["m"].isin(p.m_theory) & th["kind"].isin(p.feedback_kinds)]
    at_m = lambda name: lp[(lp["rule | feedback"] == name) & (lp["m"] == p.lp_m)]  # noqa: E731
    cond = at_m("condorcet")
    cond_delta = np.where(cond["max |A pi - A pi'|"] < LP_EQ_TOL, cond["delta*"], 0.0)
    coinc = [th[(th.m == m) & (th.t == t) & (th.kind == k)]["res borda"].iloc[0] for m, t, k in COINCIDENCES]
    pair = res.pairs[("borda", p.lp_m, p.lp_t_borda)]
    perms = rk.all_rankings(p.lp_m)
    plu = score_matrix(np.eye(p.lp_m)[0], perms)
    fixed = {
        "characterization": float(grid["predicted"].mean()),
        "borda-residual": float(th[(th.m == p.lp_m) & (th.kind == "unif")]["res borda"].min()),
        "borda-coincidence": float(max(coinc)),
        "borda-lp": float(at_m("borda")["delta*"].min()),
        "condorcet-lp": float(cond_delta.min()),
        "pairwise-control": float(lp[lp["rule | feedback"] == "condorcet | pairwise"]["delta*"].max()),
        "plurality-equal": float(np.abs(plu @ pair.pi - plu @ pair.pi2).max()),
    }
    out: dict[str, Any] = dict(fixed)
    b, u = RULES.index("borda"), 1
    big = [n for n in p.n_list if n >= 200] or [max(p.n_list)]
    mal, pl_ = "mallows" in p.distributions, "pl" in p.distributions
    for s in range(p.seeds):
        d = res.demo[s]
        out.setdefault("feedback-chi2", []).append(d["reject feedback"])
        out.setdefault("ranking-chi2", []).append(d["reject rankings"])
        g, z = paired_z(*_sel(res, "mallows", min(p.n_list))[s, [u, 0], b]) if mal else (np.nan, np.nan)
        out.setdefault("mallows-gain", []).append(g)
        out.setdefault("mallows-z", []).append(z)
        if pl_:
            x = np.concatenate([_sel(res, "pl", n)[s, u, b] for n in big])
            y = np.concatenate([_sel(res, "pl", n)[s, 0, b] for n in big])
        out.setdefault("pl-loss", []).append(paired_z(x, y)[1] if pl_ else np.nan)
        plu_r = _sel(res, "mallows", max(p.n_list))[s, u, RULES.index("plurality")].mean() if mal else np.nan
        out.setdefault("plurality-mallows", []).append(float(plu_r))
    return out


def check(res: Results) -> list[Verdict]:
    """Evaluate every claim: exact ones on their one value, statistical ones on their per-seed values."""
    return claims.evaluate_all(CLAIMS, claim_values(res))


def comparison_table(res: Results) -> pd.DataFrame:
    """Paired difference improvement (unif) - pairwise of the approximation ratio, pooled over seeds, with z."""
    p = res.params
    rows = []
    for d in p.distributions:
        for n in p.n_list:
            row: dict[str, Any] = {"distribution": d, "n": n}
            for rule in ("borda", "copeland"):
                r = _sel(res, d, n)[:, :, RULES.index(rule)]
                row[f"{rule}: pairwise"] = float(r[:, 0].mean())
                row[f"{rule}: improvement"] = float(r[:, 1].mean())
                row[f"{rule}: diff"], row[f"{rule}: z"] = paired_z(r[:, 1].ravel(), r[:, 0].ravel())
            rows.append(row)
    return pd.DataFrame(rows).set_index(["distribution", "n"])


def demo_table(res: Results) -> pd.DataFrame:
    """The finite-sample demo of the Borda pair, one row per seed."""
    return pd.DataFrame(res.demo, index=pd.Index(res.params.seed_list(), name="seed"))


def metrics(res: Results) -> dict[str, Any]:
    """Small JSON-able summary: per-claim seed means and a few headline numbers."""
    vals = claim_values(res)
    out: dict[str, Any] = {k: float(np.mean(v)) for k, v in vals.items()}
    b = RULES.index("borda")
    for d in res.params.distributions:
        for n in res.params.n_list:
            r = _sel(res, d, n)[:, :, b].mean(axis=(0, 2))
            out[f"{d}-n{n}-borda-improvement-minus-pairwise"] = float(r[1] - r[0])
        for t in res.params.t_sweep if res.sweep.size else ():
            r = res.sweep[:, res.params.distributions.index(d), res.params.t_sweep.index(t), :, b].mean(axis=(0, 2))
            out[f"{d}-t{t}-n500-borda-improvement-minus-pairwise"] = float(r[1] - r[0])
    out["success-sum-max"] = max(x["success sum"] for x in res.demo)
    return out


# ---------------------------------------------------------------- figures

def plot_theory(res: Results) -> Figure:
    """Learnable-subspace dimension and Borda residual per case, and s*_t against Borda."""
    fig, (ax1, ax2) = plotting.figure(2, 1, width=4.2, height=3.0)
    th = res.theory
    for kind, g in th.groupby("kind", sort=False):
        labels = [f"{m},{t}" for m, t in zip(g["m"], g["t"])]
        ax1.plot(labels, np.maximum(g["res borda"], 1e-16), "o-", label=f"Borda residual ({kind})")
    ax1.axhline(EXACT_TOL, color="k", lw=0.8, ls=":")
    ax1.set_yscale("log")
    ax1.set(xlabel="m, t", ylabel="distance of Borda from L_t", title="Borda learnable iff residual ~ 0")
    ax1.tick_params(axis="x", labelrotation=90)
    ax1.legend()
    m = max(res.s_star_curves) + 1
    for t, s in res.s_star_curves.items():
        ax2.plot(np.arange(1, m + 1), s / s.max(), "o-", label=f"s*_{t}")
    ax2.plot(np.arange(1, m + 1), np.arange(m - 1, -1, -1) / (m - 1), "k--", label="Borda")
    ax2.set(xlabel="position", ylabel="normalised score", title=f"s*_t (uniform), m = {m}")
    ax2.legend()
    return fig


def plot_pairs(res: Results) -> Figure:
    """The Borda pair: scores under pi and pi' and their (identical) feedback heatmaps; the Condorcet pair margins."""
    p = res.params
    perms = rk.all_rankings(p.lp_m)
    pair = res.pairs[("borda", p.lp_m, p.lp_t_borda)]
    cpair = res.pairs[("condorcet", p.lp_m, p.lp_t_borda)]
    A = feedback_operator(perms, p.lp_t_borda, "unif")
    borda = score_matrix(np.arange(p.lp_m - 1, -1, -1.0) / (p.lp_m - 1), perms)
    fig, axes = plotting.figure(5, 1, width=2.6, height=2.5)
    x = np.arange(p.lp_m)
    axes[0].bar(x - 0.2, borda @ pair.pi, 0.4, label="pi")
    axes[0].bar(x + 0.2, borda @ pair.pi2, 0.4, label="pi'")
    axes[0].set(xlabel="candidate", title=f"normalised Borda (t={p.lp_t_borda})")
    axes[0].legend()
    for ax, prof, name in ((axes[1], pair.pi, "pi"), (axes[2], pair.pi2, "pi'")):
        ax.imshow((A @ prof).reshape(p.lp_m, p.lp_m), cmap="viridis")
        ax.set(title=f"feedback of {name}", xlabel="answered", ylabel="shown")
    pos = rk.positions(perms)
    for ax, prof, name in ((axes[3], cpair.pi, "pi"), (axes[4], cpair.pi2, "pi'")):
        margin = np.einsum("k,kab->ab", prof, np.sign(pos[:, None, :] - pos[:, :, None]).astype(float))
        ax.imshow(margin, cmap="RdBu", vmin=-1, vmax=1)
        ax.set(title=f"Condorcet pair: margins {name}", xlabel="b", ylabel="a")
    return fig


def plot_ratios(res: Results) -> Figure:
    """Approximation ratio vs n (Borda top, Copeland bottom) per distribution, 95% CI bands over seeds x reps."""
    p = res.params
    dists = p.distributions
    fig, axes = plotting.figure(len(dists), 2, width=3.2, height=2.6)
    for ri, rule in enumerate(("borda", "copeland")):
        for di, dist in enumerate(dists):
            ax = axes[ri * len(dists) + di]
            for mi, meth in enumerate(methods(p)):
                r = res.ratios[:, di, :, mi, RULES.index(rule)]
                r = np.moveaxis(r, 1, 0).reshape(len(p.n_list), -1)
                mean, se = r.mean(axis=1), r.std(axis=1, ddof=1) / np.sqrt(r.shape[1])
                line, = ax.plot(p.n_list, mean, "o-", ms=3, label=meth)
                ax.fill_between(p.n_list, mean - 1.96 * se, mean + 1.96 * se, color=line.get_color(), alpha=0.2, lw=0)
            ax.set(title=f"{dist}: {rule}", xlabel="n voters", ylabel="ratio")
    axes[0].legend()
    return fig


def plot_sweep(res: Results) -> Figure:
    """Borda approximation ratio vs window t at n = 500, 95% bands over sweep seeds x repetitions."""
    p = res.params
    fig, axes = plotting.figure(len(p.distributions), 1, width=3.2, height=2.6)
    for di, dist in enumerate(p.distributions):
        if not res.sweep.size:
            axes[di].text(0.5, 0.5, "t_sweep is empty at this preset", ha="center", transform=axes[di].transAxes)
        for mi, meth in enumerate(methods(p) if res.sweep.size else ()):
            r = res.sweep[:, di, :, mi, 0].transpose(1, 0, 2).reshape(len(p.t_sweep), -1)
            mean, se = r.mean(axis=1), r.std(axis=1, ddof=1) / np.sqrt(r.shape[1])
            line, = axes[di].plot(p.t_sweep, mean, "o-", ms=3, label=meth)
            axes[di].fill_between(p.t_sweep, mean - 1.96 * se, mean + 1.96 * se, color=line.get_color(), alpha=0.2,
                                  lw=0)
        axes[di].set(title=f"{dist}: Borda, n = 500", xlabel="t", ylabel="ratio")
    if res.sweep.size:
        axes[0].legend()
    return fig
