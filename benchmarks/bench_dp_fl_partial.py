"""Performance anchor of dp-fl-partial: mu2-FL vs DP-FedSGD cost per round, NC overhead,
closed-form vs opacus-calibrated noise, and seed-batched vs per-seed simulation (ratios over interleaved
rounds, ``companion.bench.compare``; writes ``data/bench/dp-fl-partial.json``)."""

from __future__ import annotations

import numpy as np

from companion import bench
from companion.papers import dp_fl_partial as dp
from companion.papers.dp_fl_partial import experiment as ex
from companion.papers.dp_fl_partial import privacy as pv
from companion.papers.dp_fl_partial import simulator as sim

REPEATS = 5
N = 250  # samples per machine: T = N M / m = 1000 rounds at the quick schedule


def main() -> None:
    """Time the pieces and print the ratios."""
    p = dp.Params.resolve("quick")
    task = sim.make_task(np.random.default_rng(0), p.M, p.d, p.w_star_norm, 0.0, 20_000)
    ck = sim.checkpoint_rounds(N * p.M // p.m)

    def run_sim(method: str, seeds: list[int]) -> sim.SimOut:
        sig = np.full(len(seeds), ex.method_sigma(method, 1.0, p, N))
        return sim.simulate(method, N, [sim.stream_rng(s, 0) for s in seeds], np.arange(len(seeds)),
                           np.full(len(seeds), 0.03), sig, task, p.m, p.D, ck)

    one = [0]
    out = bench.compare({m: (lambda m=m: run_sim(m, one)) for m in ("dpfedsgd", "nc", "naive", "nonprivate_mu2")},
                        "dpfedsgd", rounds=REPEATS, clock="cpu")
    nc = out["nc"]
    print(f"per-round cost, one seed, T = {N * p.M // p.m} rounds:")
    print("  mu2-FL " + nc.line(2.5, "<=") + "  (two gradients per sample)")
    for m in ("naive", "nonprivate_mu2"):
        print("  " + out[m].line())

    seeds = list(range(8))
    batched = run_sim("nc", seeds).x_out
    looped = np.stack([run_sim("nc", [s]).x_out[0] for s in seeds])
    batch = bench.compare({"batched over 8 seeds": lambda: run_sim("nc", seeds),
                           "per-seed loop": lambda: [run_sim("nc", [s]) for s in seeds]},
                          "batched over 8 seeds", rounds=REPEATS, clock="cpu")["per-seed loop"]
    diff = float(np.abs(batched - looped).max())
    print("  " + batch.line(4.0, ">=") + f", max |difference| = {diff:.1e}")
    print("noise multiplier z = sigma / sensitivity, closed-form zCDP vs opacus RDP calibration:")
    for eps in (0.5, 1.0, 4.0):
        for n in p.n_list:
            z_c, z_r = pv.noise_multiplier(eps, p.delta, n), pv.noise_multiplier(eps, p.delta, n, "rdp")
            print(f"  eps={eps:<4g} n={n:<5d} zCDP {z_c:8.1f}  RDP {z_r:8.1f}  RDP/zCDP = {z_r / z_c:.3f}")
    path = bench.record("dp-fl-partial", nc, target=2.5, extra={"per-seed loop/batched": batch,
                        "naive/dpfedsgd": out["naive"], "nonprivate_mu2/dpfedsgd": out["nonprivate_mu2"]},
                        targets={"per-seed loop/batched": (4.0, ">=")},
                        values={"max |batched - looped|": diff}, sizes={"N": N, "M": p.M, "m": p.m, "d": p.d})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
