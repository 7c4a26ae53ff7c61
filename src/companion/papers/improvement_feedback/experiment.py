"""The experiment: parts A and B computed once, the finite-sample demo and the simulation per seed,
and the per-seed values of every claim and control.

Part C scores each repetition's one feedback sample with the official estimator (win fractions,
plurality answers added to every entry of the answering candidate's row) and with three ablations of
it that share the sample: without the plurality injection, plurality answers only, and the
improvement answers replaced by uniformly random candidates. A constant guess (candidate 0, the
Mallows centre's top) is scored too, as the null of the plurality row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from companion import runtime
from companion.papers.improvement_feedback import KINDS, Params
from companion.papers.improvement_feedback import rankings as rk
from companion.papers.improvement_feedback.theory import (
    EXACT_TOL,
    LP_EQ_TOL,
    Pair,
    lp_table,
    s_star,
    score_matrix,
    theory_row,
)
from companion.papers.improvement_feedback.voting_feedback import (
    argmax_random,
    borda_estimate,
    copeland_estimate,
    count_matrix,
    improvement_answers,
    improvement_counts,
    paired_z,
    pairwise_answers,
    random_answers,
    ratio,
    true_scores,
    two_sample_reject,
)

RULES = ("borda", "copeland", "plurality")
# ablations of the official estimator on the uniform-weight sample, and the constant guess
ABLATIONS = ("no injection", "plurality only", "random answers")
CONSTANT = "constant 0"
# Plackett-Luce weights of the official experiment scripts (the paper's Figure setting)
PAPER_PL_WEIGHTS = (
    0.6090889288520809, 0.26106513205273585, 0.32560503207274116, 0.48373092549278285,
    0.9966938322681743, 0.6540981787032101, 0.5344141400706653, 0.8839724420057306,
    0.7476912624386994, 0.7304445240713902, 0.1566178037820284, 0.08062654559496374,
    0.7325764901696482, 0.6984963901271382, 0.7083578780596743, 0.35269526312966903,
    0.9425169499934516, 0.15161085633460314, 0.3704870090571961, 0.5441132775035619,
)

# ---------------------------------------------------------------- Part C: simulation


def pl_weights(p: Params) -> np.ndarray:
    """The Plackett-Luce weights: the official script's when m_exp = 20, else U(0.05, 1) with a fixed seed."""
    if p.pl_weights == "paper" and p.m_exp == len(PAPER_PL_WEIGHTS):
        return np.array(PAPER_PL_WEIGHTS)
    return np.random.default_rng(20250218).uniform(0.05, 1.0, p.m_exp)


def sample_profiles(dist: str, shape: tuple[int, int], p: Params, rng: np.random.Generator) -> np.ndarray:
    """Profiles of the simulation, shape (reps, n, m_exp)."""
    if dist == "mallows":
        return rk.mallows(shape, p.m_exp, p.mallows_phi, rng)
    if dist == "ic":
        return rk.impartial_culture(shape, p.m_exp, rng)
    return rk.plackett_luce(shape, pl_weights(p), rng)


def methods(p: Params) -> tuple[str, ...]:
    """Rows of the simulation: pairwise, every improvement kind (uniform always), the ablations, the constant."""
    kinds = ("unif", *[k for k in KINDS if k in p.feedback_kinds and k != "unif"])
    return ("pairwise", *kinds, *ABLATIONS, CONSTANT)


def simulate(dist: str, n: int, t: int, p: Params, rng: np.random.Generator) -> np.ndarray:
    """Approximation ratios, shape (methods, rules, reps); NaN where a method does not estimate a rule."""
    profiles = sample_profiles(dist, (p.reps_exp, n), p, rng)
    truth = true_scores(profiles)
    m, names = p.m_exp, methods(p)
    out = np.full((len(names), len(RULES), p.reps_exp), np.nan)

    def score(name: str, d: np.ndarray, plurality: np.ndarray | None = None) -> None:
        est = {"borda": borda_estimate(d), "copeland": copeland_estimate(d), "plurality": plurality}
        for r, rule in enumerate(RULES):
            if est[rule] is not None:
                out[names.index(name), r] = ratio(truth[rule], argmax_random(est[rule], rng))

    score("pairwise", count_matrix(*pairwise_answers(profiles, rng), m))
    for kind in names[1:len(names) - len(ABLATIONS) - 1]:
        answered, shown = improvement_answers(profiles, t, kind, rng)
        d, plu = improvement_counts(answered, shown, m)
        score(kind, d, plu)
        if kind == "unif":
            score("no injection", improvement_counts(answered, shown, m, inject=False)[0])
            for r, rule in enumerate(RULES[:2]):
                out[names.index("plurality only"), r] = ratio(truth[rule], argmax_random(plu, rng))
            score("random answers", improvement_counts(random_answers(answered, shown, m, rng), shown, m)[0])
    for r, rule in enumerate(RULES):
        out[names.index(CONSTANT), r] = ratio(truth[rule], np.zeros(p.reps_exp, dtype=int))
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
        rej_fb += list(two_sample_reject(fb0, fb1))
        rej_rank += list(two_sample_reject(rk0, rk1))
        hits[0].append(h0)
        hits[1].append(h1)
    success = [float(np.concatenate(h).mean()) for h in hits]
    se = np.sqrt(sum(s * (1 - s) / R for s in success))  # the two samples are independent
    return {"reject feedback": float(np.mean(rej_fb)), "reject rankings": float(np.mean(rej_rank)),
            "success pi": success[0], "success pi'": success[1],
            "success sum": float(sum(success)), "SE of sum": float(se)}


# ---------------------------------------------------------------- run


@dataclass
class Results:
    """Everything the page shows: theory tables, LP pairs, per-seed demo and simulation ratios."""

    params: Params
    theory: pd.DataFrame           # improvement feedback, one row per (m, t, kind)
    theory_controls: pd.DataFrame  # the same test on pairwise and full-ranking feedback
    lp: pd.DataFrame
    pairs: dict[tuple[str, int, int], Pair]
    s_star_curves: dict[int, np.ndarray]
    demo: list[dict[str, float]]
    ratios: np.ndarray  # (seeds, distributions, n_list, methods, rules, reps)
    sweep: np.ndarray   # (sweep_seeds, distributions, t_sweep, methods, rules, reps_exp); empty when skipped


def theory_cases(p: Params) -> list[tuple[int, int, str]]:
    """Every (m, t, kind) of the grid plus the uniform cases at lp_m that the claims need."""
    grid = [(m, t, k) for m in p.m_theory for t in range(1, m) for k in p.feedback_kinds]
    need = [(p.lp_m, t, "unif") for t in range(1, p.lp_m)]
    return sorted(set(grid) | set(need), key=lambda c: (c[0], KINDS.index(c[2]), c[1]))


def run(params: Params) -> Results:
    """Run parts A and B once (deterministic) and the demo and simulation for every seed."""
    runtime.limit_threads()
    p = params
    cases = theory_cases(p)
    theory = pd.DataFrame([theory_row(m, t, k, p.null_tol) for m, t, k in cases])
    controls = pd.DataFrame([{"feedback": name, **theory_row(m, t, k, p.null_tol, name)}
                             for name in ("pairwise", "full ranking") for m, t, k in cases])
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
    return Results(p, theory, controls, lp, pairs, curves, demo, np.array(ratios), np.array(sweep))


# ---------------------------------------------------------------- claims


def _ratios(res: Results, dist: str, ns: list[int], method: str, rule: str = "borda") -> np.ndarray | None:
    """Ratios (seeds, pooled reps) of one method over the given n, or None when dist was not run."""
    p = res.params
    if dist not in p.distributions:
        return None
    r = res.ratios[:, p.distributions.index(dist)][:, [p.n_list.index(n) for n in ns]]
    return r[:, :, methods(p).index(method), RULES.index(rule)].reshape(p.seeds, -1)


def _gap(res: Results, dist: str, ns: list[int], a: str, b: str) -> list[float]:
    """Per seed: mean Borda ratio of method a minus method b, paired over repetitions (NaN if not run)."""
    x, y = _ratios(res, dist, ns, a), _ratios(res, dist, ns, b)
    return [float("nan")] * res.params.seeds if x is None else list((x - y).mean(axis=1))


def _lp(res: Results, label: str) -> pd.Series:
    """delta* of one LP row at m = lp_m, every t; 0 where the two feedbacks differ by more than LP_EQ_TOL."""
    lp = res.lp[(res.lp["rule | feedback"] == label) & (res.lp["m"] == res.params.lp_m)]
    return lp["delta*"].where(lp["max |A pi - A pi'|"] < LP_EQ_TOL, 0.0)


def claim_values(res: Results) -> dict[str, float | list[float]]:
    """The metric of every claim and control: one value for an exact claim (parts A and B's operators and
    LPs are computed once), one value per seed for a statistical one."""
    p, th, tc = res.params, res.theory, res.theory_controls
    in_grid = lambda df: df[df["m"].isin(p.m_theory) & df["kind"].isin(p.feedback_kinds)]
    at_lp = lambda df: df[(df["m"] == p.lp_m) & (df["kind"] == "unif")]
    grid = in_grid(th)
    pair = res.pairs[("borda", p.lp_m, p.lp_t_borda)]
    plu = score_matrix(np.eye(p.lp_m)[0], rk.all_rankings(p.lp_m))
    out: dict[str, Any] = {
        "characterization": float(grid["predicted"].mean()),
        **{f"characterization@{name.replace(' ', '-')}": float(in_grid(tc[tc["feedback"] == name])["predicted"].mean())
           for name in ("pairwise", "full ranking")},
        "borda-residual": float(at_lp(th)["res borda"].min()),
        "borda-residual@pairwise": float(at_lp(tc[tc["feedback"] == "pairwise"])["res borda"].min()),
        "borda-residual@plurality": float(at_lp(th)["res plurality"].min()),
        "borda-lp": float(_lp(res, "borda").min()),
        "borda-lp@pairwise": float(_lp(res, "borda | pairwise").min()),
        "borda-lp@plurality": float(_lp(res, "plurality").min()),
        "condorcet-lp": float(_lp(res, "condorcet").min()),
        "condorcet-lp@pairwise": float(_lp(res, "condorcet | pairwise").min()),
        "borda-coincidence": float(((grid["res borda"] < EXACT_TOL) != grid["borda in span"]).sum()),
        "plurality-equal": float(np.abs(plu @ pair.pi - plu @ pair.pi2).max()),
        "feedback-chi2": [d["reject feedback"] for d in res.demo],
        "ranking-chi2": [d["reject rankings"] for d in res.demo],
    }
    small, big = [min(p.n_list)], [n for n in p.n_list if n >= 200] or [max(p.n_list)]
    out["mallows-gain"] = _gap(res, "mallows", small, "unif", "pairwise")
    out["mallows-gain@plurality-only"] = _gap(res, "mallows", small, "plurality only", "pairwise")
    out["mallows-gain@no-injection"] = _gap(res, "mallows", small, "no injection", "pairwise")
    out["mallows-gain@ic"] = _gap(res, "ic", small, "unif", "pairwise")
    out["mallows-over-plurality"] = _gap(res, "mallows", small, "unif", "plurality only")
    out["mallows-over-plurality@random-answers"] = _gap(res, "mallows", small, "random answers", "plurality only")
    out["pl-loss"] = _gap(res, "pl", big, "unif", "pairwise")
    out["pl-loss@plurality-only"] = _gap(res, "pl", big, "plurality only", "pairwise")
    out["pl-loss@no-injection"] = _gap(res, "pl", big, "no injection", "pairwise")
    out["pl-loss@ic"] = _gap(res, "ic", big, "unif", "pairwise")
    for key, method in (("plurality-mallows", "unif"), ("plurality-mallows@constant-0", CONSTANT)):
        r = _ratios(res, "mallows", [max(p.n_list)], method, "plurality")
        out[key] = [float("nan")] * p.seeds if r is None else list(r.mean(axis=1))
    return out


# ---------------------------------------------------------------- tables and summary


def comparison_table(res: Results) -> pd.DataFrame:
    """Mean ratio of every feedback and estimator, and paired differences with z, pooled over seeds."""
    p = res.params
    rows = []
    for rule in ("borda", "copeland"):
        for d in p.distributions:
            for n in p.n_list:
                r = {meth: _ratios(res, d, [n], meth, rule).ravel() for meth in ("pairwise", "unif", *ABLATIONS)}
                row: dict[str, Any] = {"rule": rule, "distribution": d, "n": n}
                row.update({meth: float(x.mean()) for meth, x in r.items()})
                for a, b in (("unif", "pairwise"), ("unif", "plurality only")):
                    row[f"{a} - {b}"], row[f"z ({a} - {b})"] = paired_z(r[a], r[b])
                rows.append(row)
    return pd.DataFrame(rows).set_index(["rule", "distribution", "n"])


def demo_table(res: Results) -> pd.DataFrame:
    """The finite-sample demo of the Borda pair, one row per seed."""
    return pd.DataFrame(res.demo, index=pd.Index(res.params.seed_list(), name="seed"))


def coincidences(res: Results) -> list[tuple[int, int, str]]:
    """The computed cases where Borda is learnable from improvement feedback."""
    th = res.theory
    return [(int(r.m), int(r.t), str(r.kind)) for r in th[th["res borda"] < EXACT_TOL].itertuples()]


def metrics(res: Results) -> dict[str, Any]:
    """Small JSON-able summary: per-claim (and control) seed means and the differences behind the figures."""
    p = res.params
    out: dict[str, Any] = {k: float(np.mean(v)) for k, v in claim_values(res).items()}
    for d in p.distributions:
        for n in p.n_list:
            for meth in ("unif", *ABLATIONS):
                out[f"{d}-n{n}-borda-{meth.replace(' ', '-')}-minus-pairwise"] = float(
                    np.mean(_gap(res, d, [n], meth, "pairwise")))
        for t in p.t_sweep if res.sweep.size else ():
            r = res.sweep[:, p.distributions.index(d), p.t_sweep.index(t), :, RULES.index("borda")]
            gap = r[:, methods(p).index("unif")] - r[:, methods(p).index("pairwise")]
            out[f"{d}-t{t}-n500-borda-unif-minus-pairwise"] = float(gap.mean())
    out["success-sum-max"] = max(x["success sum"] for x in res.demo)
    out["borda-coincidences"] = "; ".join(f"m={m}, t={t}, {k}" for m, t, k in coincidences(res))
    return out
