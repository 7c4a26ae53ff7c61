"""Performance anchor of dp-fl-partial: mu2-FL vs DP-FedSGD cost per round, NC overhead,
closed-form vs opacus-calibrated noise, and seed-batched vs per-seed simulation (ratios, one run)."""

from __future__ import annotations


import numpy as np

from companion.runtime import median_time
from companion.papers import dp_fl_partial as dp

REPEATS = 5
N = 250  # samples per machine: T = N M / m = 1000 rounds at the quick schedule




def main() -> None:
    """Time the pieces and print the ratios."""
    p = dp.Params.resolve("quick")
    task = dp.make_task(np.random.default_rng(0), p.M, p.d, p.w_star_norm, 0.0, 20_000)
    ck = dp.checkpoint_rounds(N * p.M // p.m)

    def sim(method: str, seeds: list[int]) -> dp.SimOut:
        sig = np.full(len(seeds), dp.method_sigma(method, 1.0, p, N))
        return dp.simulate(method, N, [dp.stream_rng(s, 0) for s in seeds], np.arange(len(seeds)),
                           np.full(len(seeds), 0.03), sig, task, p.m, p.D, ck)

    one = [0]
    t_nc = median_time(lambda: sim("nc", one), REPEATS)
    t_naive = median_time(lambda: sim("naive", one), REPEATS)
    t_np = median_time(lambda: sim("nonprivate_mu2", one), REPEATS)
    t_sgd = median_time(lambda: sim("dpfedsgd", one), REPEATS)
    print(f"per-round cost, one seed, T = {N * p.M // p.m} rounds:")
    print(f"  mu2-FL NC / DP-FedSGD          = {t_nc / t_sgd:.2f}  (expect <= 2.5: two gradients per sample)")
    print(f"  NC / naive (noise cancellation) = {t_nc / t_naive:.2f}  (overhead of the cancellation)")
    print(f"  NC / non-private mu2-FL         = {t_nc / t_np:.2f}")

    seeds = list(range(8))
    batched = sim("nc", seeds).x_out
    looped = np.stack([sim("nc", [s]).x_out[0] for s in seeds])
    t_batch = median_time(lambda: sim("nc", seeds), REPEATS)
    t_loop = median_time(lambda: [sim("nc", [s]) for s in seeds], REPEATS)
    print(f"batched over 8 seeds vs per-seed loop: speed-up = {t_loop / t_batch:.1f}x (expect >= 4), "
          f"max |difference| = {np.abs(batched - looped).max():.1e}")

    print("noise multiplier z = sigma / sensitivity, closed-form zCDP vs opacus RDP calibration:")
    for eps in p.eps_list + (0.5, 4.0):
        for n in p.n_list:
            z_c, z_r = dp.noise_multiplier(eps, p.delta, n), dp.noise_multiplier(eps, p.delta, n, "rdp")
            print(f"  eps={eps:<4g} n={n:<5d} zCDP {z_c:8.1f}  RDP {z_r:8.1f}  RDP/zCDP = {z_r / z_c:.3f}")


if __name__ == "__main__":
    main()
