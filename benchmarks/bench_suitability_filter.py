"""Performance anchor of the suitability filter: vectorized Welch vs looped scipy, and the cost split.

Prints ratios measured in this run (interleaved rounds, ``companion.bench.compare``: median with its
range), never a lone absolute time, and writes ``data/bench/suitability-filter.json``:
1. the test stage over ~2.6k (pair, user) experiments, vectorized closed form vs one
   ``scipy.stats.ttest_ind`` call per experiment (the spec expects >= 20x);
2. the cost of one seed's stages relative to training M, and of a single suitability decision with
   a fitted C (the spec expects < 1% of training M).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from scipy import stats
from threadpoolctl import threadpool_limits

from companion import bench
from companion.papers.suitability_filter import experiment as sf
from companion.papers.suitability_filter.noninferiority import welch_moments, welch_noninferiority




def test_stage(n_folds: int = 5, n_users: int = 130, fold: int = 400, user: int = 500
               ) -> tuple[bench.Comparison, dict]:
    """Vectorized Welch over F(F-1) x U experiments vs looped scipy, with the same p-values."""
    rng = np.random.default_rng(0)
    pc_test = rng.beta(5, 1.5, (n_folds, fold))
    pc_user = rng.beta(5, 1.5, (n_users, user)) - rng.uniform(-0.05, 0.05, (n_users, 1))
    pairs = sf.ordered_pairs(n_folds)

    def vectorized() -> np.ndarray:
        mt, vt = pc_test.mean(1), pc_test.var(1, ddof=1)
        mu, vu = pc_user.mean(1), pc_user.var(1, ddof=1)
        j = pairs[:, 1]
        return welch_moments(mt[j][:, None], vt[j][:, None], fold, mu[None, :], vu[None, :], user)[2]

    def looped() -> np.ndarray:
        return np.array([[stats.ttest_ind(pc_test[j], u, equal_var=False, alternative="less").pvalue
                          for u in pc_user] for _, j in pairs])

    diff = np.abs(vectorized() - looped()).max()
    c = bench.compare({"vectorized": vectorized, "looped scipy": looped}, "vectorized", rounds=5, warmup=0, clock="cpu")["looped scipy"]
    n = len(pairs) * n_users
    print(f"test stage, {n} experiments (max |p difference| {diff:.1e}):")
    print("  " + c.line(20.0, ">="))
    return c, {"experiments": n, "max |p difference|": float(diff)}


def cost_split() -> dict[str, float]:
    """Stages of one quick seed relative to training M, and one decision relative to training M."""
    params = sf.Params.resolve("quick")
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    start = time.perf_counter()
    task, net, _ = sf.train_model(params, rng, gen)
    t_train = time.perf_counter() - start
    x, y, _ = sf.sample(task, params.fold_size * 3, sf.uniform(task), rng)
    s, c = sf._features(net, x, y)
    sf_, test, user = (slice(k * params.fold_size, (k + 1) * params.fold_size) for k in range(3))
    est = sf.fit_correctness(s[sf_], c[sf_])
    # training M is timed once (it is the slow stage); the stages in interleaved rounds among themselves
    out = bench.compare({"one suitability decision (fitted C)": lambda: welch_noninferiority(
                             sf.prob_correct(est, s[test]), sf.prob_correct(est, s[user])),
                         f"fit C (calibrated LR, {params.fold_size} x 12)": lambda: sf.fit_correctness(s[sf_], c[sf_]),
                         f"signals ({len(x)} samples)": lambda: sf._features(net, x, y)},
                        f"signals ({len(x)} samples)", rounds=5, clock="cpu")
    t_signals = out[next(iter(out))].reference_seconds
    print("cost relative to training M (median seconds / one training):")
    print(f"  {'train M (one fit)':<40s} {1.0:8.4f}")
    print(f"  {'signals':<40s} {t_signals / t_train:8.4f}")
    for name, cmp in out.items():
        print(f"  {name:<40s} {cmp.seconds / t_train:8.4f}")
    decision = out["one suitability decision (fitted C)"]
    print(f"one decision / training M = {100 * decision.seconds / t_train:.3f}% (spec expects < 1%)")
    return {"decision/train M": decision.seconds / t_train, "signals/train M": t_signals / t_train}


if __name__ == "__main__":
    torch.set_num_threads(1)
    with threadpool_limits(1):
        anchor, values = test_stage()
        values.update(cost_split())
        path = bench.record("suitability-filter", anchor, target=20.0, direction=">=", values=values,
                            sizes={"folds": 5, "users": 130, "fold": 400, "user": 500})
        print(f"wrote {path}")
