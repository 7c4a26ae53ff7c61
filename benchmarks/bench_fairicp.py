"""Performance anchor of fairicp: one vectorised ICP swap sweep vs the per-pair Python loop, n = 500.

Both functions get the same log-likelihood matrix, state and random numbers (and are checked to give
the same permutation); the anchor is the median over interleaved rounds of time(ours) / time(loop),
reported as measured, without a target: the spec's 50x target (issue 47) is retired, because the official
sampler is itself vectorised, so the per-pair loop is a reference for correctness, not the official
baseline. The same ratio at n = 2000 (the size of the paper's smallest real data set, Crimes)
is recorded beside it: the loop's cost is per pair, the vectorised sweep's mostly per numpy call.
Also prints the cost split of one quick-preset fit (ICP pre-sampling vs training, 60 epochs at batch 32).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from companion import bench, runtime
from companion.papers.fairicp import adversarial as adv
from companion.papers.fairicp import densities, sampler
from companion.papers.fairicp import simulation as sim

N, N_LARGE, SWEEPS_PER_CALL = 500, 2000, 20


def sweep_comparison(n: int, rng: np.random.Generator) -> bench.Comparison:
    """Vectorised vs per-pair sweeps over one chain of SWEEPS_PER_CALL sweeps at size n (same chain checked)."""
    d = sim.simulate(n, 5, 0.9, rng)
    L = np.ascontiguousarray(sim.true_loglik(d.y, d.a, 5, 0.9, d.eps2))
    randoms = [sampler.sweep_randoms(n, rng) for _ in range(SWEEPS_PER_CALL)]

    def chain(step):
        pi = np.arange(n)
        for order, u in randoms:
            pi = step(L, pi, order, u)
        return pi

    assert np.array_equal(chain(sampler.sweep), chain(sampler.sweep_loop))
    return bench.compare({"ours": lambda: chain(sampler.sweep), "reference": lambda: chain(sampler.sweep_loop)},
                         reference="reference", rounds=7, clock="cpu")["ours"]


def main() -> None:
    """Time the two sweeps at two sizes, record the ratios, print the cost split."""
    runtime.limit_threads(1)
    rng = np.random.default_rng(0)
    anchor = sweep_comparison(N, rng)
    large = sweep_comparison(N_LARGE, rng)
    print(anchor.line())
    print(f"n = {N_LARGE}: {large.line()}")
    print(f"per sweep: vectorised {anchor.seconds / SWEEPS_PER_CALL * 1e6:.0f} us, "
          f"loop {anchor.reference_seconds / SWEEPS_PER_CALL * 1e6:.0f} us; speed-up {1 / anchor.ratio:.0f}x")
    d = sim.simulate(N, 5, 0.9, rng)
    t0 = time.process_time()
    Lhat = densities.GaussLinearYgivenA.fit(d.y, d.a).loglik_matrix(d.y, d.a)
    dummies = sampler.icp_dummies(Lhat, d.a, 100, 50, rng)
    t_icp = time.process_time() - t0
    t0 = time.process_time()
    adv.fit(d.x, d.y, d.a, lambda e: dummies[e], adv.TrainConfig(lam=0.9, epochs=60, batch_size=32),
            torch.Generator().manual_seed(0))
    t_fit = time.process_time() - t0
    print(f"cost split of one quick fit: ICP pre-sampling (100 states x 50 sweeps) {t_icp:.2f} s CPU, "
          f"adversarial training {t_fit:.2f} s CPU ({100 * t_icp / t_fit:.0f}%, target <= 30%)")
    path = bench.record("fairicp", anchor, extra={f"ours/reference at n = {N_LARGE}": large},
                        sizes={"n": N, "sweeps_per_call": SWEEPS_PER_CALL, "icp_presampling_cpu_s": round(t_icp, 3),
                               "training_cpu_s": round(t_fit, 3)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
