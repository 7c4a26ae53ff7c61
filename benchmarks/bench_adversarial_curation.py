"""Performance anchor of adversarial-curation: the exact grid dynamics vs the sample loop it is the limit of.

Both compute the users' mean reward E[r] over rounds 0..5 of retraining on data curated by K = 2
tournaments with the true reward, from the Gaussian-8 density (mode std 0.3): (a) the grid
dynamics on a 32 x 32 grid (one 1024 x 1024 sigmoid matrix, then one mat-vec per round); (b) the
sample loop with N = 20000 samples and a KDE (h = 0.05), 5 seeds. The trajectories must agree
within 0.05; the record keeps the time ratio (CPU time, interleaved rounds) and the agreement.
A second comparison times the Bradley-Terry reward fit: Newton (ours) against scikit-learn's
LogisticRegression on the same 800 pairs and 25 RBF features (same solution).
"""

from __future__ import annotations

import numpy as np

from companion import bench, runtime
from companion.papers import adversarial_curation as paper
from companion.papers.adversarial_curation import dynamics as dy
from companion.papers.adversarial_curation import loop, ring
from companion.papers.adversarial_curation.bradley_terry import RBF, fit_bt

G, ROUNDS, N, H, SEEDS, GAMMA, S_MODE = 32, 5, 20000, 0.05, 5, 1.5, 0.3


def grid_trajectory() -> np.ndarray:
    """E[r] at rounds 0..ROUNDS of the K = 2 grid dynamics, world construction included."""
    pts = ring.grid_points(G)
    p_data = ring.ring_density(pts, S_MODE)
    r = ring.reward(pts, GAMMA)
    genuine = dy.Curator(r, 2.0)
    near = np.linalg.norm(pts - ring.X_STAR, axis=1) <= ring.NEAR
    return dy.run_dynamics(p_data, p_data, r, genuine, genuine, 0.0, dy.INF, ROUNDS, near).reward


def sample_trajectory() -> np.ndarray:
    """Seed-mean E[r] at rounds 0..ROUNDS of the KDE loop curated with the true reward."""
    return np.mean([loop.true_reward_loop(N, ROUNDS, GAMMA, S_MODE, H, s) for s in range(SEEDS)], axis=0)


def bt_problem(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One round's difference features (800, 25) and genuine labels."""
    rng = np.random.default_rng(seed)
    x = ring.sample_ring(1500, 0.25, rng)
    psi = RBF()(x)
    i, j, o = loop.preference_pairs(ring.reward(x, GAMMA), 800, rng)
    return psi[j] - psi[i], o


def main() -> None:
    """Check agreement, time both comparisons, print and record them."""
    runtime.limit_threads(1)
    grid, samples = grid_trajectory(), sample_trajectory()
    diff = float(np.abs(grid - samples).max())
    print("round   grid    samples")
    for t, (a, b) in enumerate(zip(grid, samples)):
        print(f"{t:5d} {a:7.3f} {b:8.3f}")
    print(f"max |grid - samples| over rounds 0..{ROUNDS}: {diff:.4f} (must be <= 0.05)")
    anchor = bench.compare({"grid": grid_trajectory, "samples": sample_trajectory}, reference="samples",
                           rounds=7, clock="cpu")["grid"]
    print(anchor.line())
    D, o = bt_problem()
    newton, ref = fit_bt(D, o, 1e-2), paper.sklearn_bt(D, o, 1e-2)
    bt_diff = float(np.abs(newton - ref).max())
    print(f"BT fit: max |Newton - sklearn| = {bt_diff:.1e}")
    bt = bench.compare({"newton": lambda: fit_bt(D, o, 1e-2), "sklearn": lambda: paper.sklearn_bt(D, o, 1e-2)},
                       reference="sklearn", rounds=7, clock="cpu")["newton"]
    print(bt.line())
    path = bench.record("adversarial-curation", anchor, target=1.0, direction="<=",
                        sizes={"grid": f"{G}x{G}", "rounds": ROUNDS, "samples_per_round": N, "kde_h": H,
                               "seeds": SEEDS, "max_abs_reward_diff": round(diff, 4),
                               "bt_pairs": len(o), "bt_features": D.shape[1],
                               "bt_max_abs_coef_diff": float(f"{bt_diff:.2e}")},
                        extra={"bt_newton_vs_sklearn": bt})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
