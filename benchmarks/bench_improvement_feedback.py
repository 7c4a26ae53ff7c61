"""Performance anchor of improvement-feedback: vectorised feedback simulator vs a per-voter Python loop.

The loop is written the way the official experiment scripts work (one random choice per voter,
nested-list counters, dict scores). Both estimate the Borda winner from uniform improvement
feedback on the same Plackett-Luce profiles (m = 20, t = 5, n = 1000); both are timed in
interleaved rounds (``companion.bench.compare``: the median ratio with its range), and we check that
the mean approximation ratios agree within 2 SE. Writes ``data/bench/improvement-feedback.json``.
Optionally (if ``pref_voting`` is installed) our true Borda / plurality scores are compared with it.
"""

from __future__ import annotations

import random

import numpy as np

from companion import bench
from companion.papers.improvement_feedback import rankings as rk
from companion.papers.improvement_feedback import voting_feedback as vf
from companion.papers.improvement_feedback.experiment import PAPER_PL_WEIGHTS

M, T, N, REPS, REPEATS = 20, 5, 1000, 40, 5


def loop_borda_winners(profiles: np.ndarray, rng: random.Random, np_rng: np.random.Generator) -> list[int]:
    """Per-voter loop: one improvement answer per voter, then the Borda estimate and its argmax."""
    winners = []
    for profile in profiles.tolist():
        d = [[0] * M for _ in range(M)]
        plu = {a: 0 for a in range(M)}
        for r in profile:
            shown = rng.choice(r)
            j = r.index(shown)
            if j == 0:
                plu[shown] += 1
                continue
            k = min(j, T)
            window, probs = range(j - k, j), np.ones(k) / k
            i = np_rng.choice(window, p=probs)
            d[r[i]][shown] += 1
        for a in range(M):
            for b in range(M):
                if a != b:
                    d[a][b] += plu[a]
        scores = {a: sum(d[a][b] / (d[a][b] + d[b][a]) for b in range(M) if b != a and d[a][b] + d[b][a])
                  for a in range(M)}
        winners.append(max(scores, key=scores.get))
    return winners


def vector_borda_winners(profiles: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Vectorised: all voters of all repetitions at once."""
    d, _ = vf.improvement_counts(*vf.improvement_answers(profiles, T, "unif", rng), M)
    return vf.argmax_random(vf.borda_estimate(d), rng)




def pref_voting_check(gen: np.random.Generator) -> str:
    """Compare true Borda / plurality scores with pref_voting on 10 random profiles, if installed."""
    try:
        from pref_voting.profiles import Profile
    except ImportError:
        return "pref_voting not installed: cross-check skipped"
    for _ in range(10):
        prof = rk.impartial_culture((1, 30), 6, gen)
        ours = vf.true_scores(prof)
        ref = Profile(prof[0].tolist())
        assert np.allclose([ref.borda_scores()[c] for c in range(6)], ours["borda"][0])
        assert np.allclose([ref.plurality_scores()[c] for c in range(6)], ours["plurality"][0])
    return "pref_voting agrees on Borda and plurality scores of 10 profiles"


def main() -> None:
    gen = np.random.default_rng(0)
    profiles = rk.plackett_luce((REPS, N), np.array(PAPER_PL_WEIGHTS), gen)
    borda = vf.true_scores(profiles)["borda"]
    loop = lambda: loop_borda_winners(profiles, random.Random(1), np.random.default_rng(3))
    vector = lambda: vector_borda_winners(profiles, np.random.default_rng(2))
    w_loop, w_vec = loop(), vector()  # the outputs to compare; these calls also warm up the timing below
    speed = bench.compare({"vectorised": vector, "per-voter loop": loop}, "vectorised", rounds=REPEATS,
                          warmup=0, clock="cpu")["per-voter loop"]
    r_loop, r_vec = vf.ratio(borda, np.array(w_loop)), vf.ratio(borda, np.asarray(w_vec))
    se = np.sqrt(r_loop.var(ddof=1) / REPS + r_vec.var(ddof=1) / REPS)
    print(f"m={M} t={T} n={N} reps={REPS}:")
    print("  " + speed.line())
    print(f"mean Borda ratio: loop {r_loop.mean():.4f}, vectorised {r_vec.mean():.4f} (diff SE {se:.4f})")
    assert abs(r_loop.mean() - r_vec.mean()) <= 2 * se + 1e-12, "simulators disagree"
    print(pref_voting_check(gen))
    path = bench.record("improvement-feedback", speed, sizes={"m": M, "t": T, "n": N, "reps": REPS},
                        values={"mean Borda ratio, loop": float(r_loop.mean()),
                                "mean Borda ratio, vectorised": float(r_vec.mean()), "difference SE": float(se)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
