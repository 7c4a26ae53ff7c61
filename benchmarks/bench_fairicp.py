"""Performance anchor of fairicp: one vectorised ICP swap sweep vs the per-pair Python loop, n = 500.

Both functions get the same log-likelihood matrix, state and random numbers (and are checked to give
the same permutation); the anchor is the median over interleaved rounds of time(ours) / time(loop),
target <= 1/50. Also prints the cost split of one quick-preset fit (ICP pre-sampling vs training).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from companion import bench, runtime
from companion.papers.fairicp import adversarial as adv
from companion.papers.fairicp import densities, sampler
from companion.papers.fairicp import simulation as sim

N, SWEEPS_PER_CALL = 500, 20


def main() -> None:
    """Time the two sweeps, record the ratio, print the cost split."""
    runtime.limit_threads(1)
    rng = np.random.default_rng(0)
    d = sim.simulate(N, 5, 0.9, rng)
    L = sim.true_loglik(d.y, d.a, 5, 0.9, d.eps2)
    randoms = [sampler.sweep_randoms(N, rng) for _ in range(SWEEPS_PER_CALL)]
    start = np.arange(N)

    def chain(step):
        pi = start
        for order, u in randoms:
            pi = step(L, pi, order, u)
        return pi

    assert np.array_equal(chain(sampler.sweep), chain(sampler.sweep_loop))
    result = bench.compare({"ours": lambda: chain(sampler.sweep), "reference": lambda: chain(sampler.sweep_loop)},
                           reference="reference", rounds=7, clock="cpu")
    anchor = result["ours"]
    print(anchor.line())
    print(f"per sweep: vectorised {anchor.seconds / SWEEPS_PER_CALL * 1e6:.0f} us, "
          f"loop {anchor.reference_seconds / SWEEPS_PER_CALL * 1e6:.0f} us; speed-up {1 / anchor.ratio:.0f}x (target >= 50x)")
    t0 = time.process_time()
    Lhat = densities.GaussLinearYgivenA.fit(d.y, d.a).loglik_matrix(d.y, d.a)
    dummies = sampler.icp_dummies(Lhat, d.a, 100, 50, rng)
    t_icp = time.process_time() - t0
    t0 = time.process_time()
    adv.fit(d.x, d.y, d.a, lambda e: dummies[e], adv.TrainConfig(lam=0.9, epochs=100, batch_size=16),
            torch.Generator().manual_seed(0))
    t_fit = time.process_time() - t0
    print(f"cost split of one quick fit: ICP pre-sampling (100 states x 50 sweeps) {t_icp:.2f} s CPU, "
          f"adversarial training {t_fit:.2f} s CPU ({100 * t_icp / t_fit:.0f}%, target <= 30%)")
    path = bench.record("fairicp", anchor, target=1 / 50, direction="<=",
                        sizes={"n": N, "sweeps_per_call": SWEEPS_PER_CALL, "icp_presampling_cpu_s": round(t_icp, 3),
                               "training_cpu_s": round(t_fit, 3)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
