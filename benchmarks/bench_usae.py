"""Performance anchor of usae: the vectorised analysis metrics against a per-concept Python loop.

Firing counts, co-fire counts and firing entropy of 3 models x 397 held-out samples x 128 concepts
(the quick preset's sizes; TopK codes with k = 8, thresholded at 0.1) computed with boolean tensor
reductions (:mod:`companion.papers.usae.concepts`) and with explicit loops over models, concepts
and samples; the results must be identical. Extra: the CPU time of USAE training steps (one encoder,
M decoders and M loss terms) over the same number of independent-SAE steps (one encoder, one
decoder), M = 3, which should stay below M + 1.
"""

from __future__ import annotations

import numpy as np
import torch

from companion import bench, runtime
from companion.papers.usae import concepts, universal

M, SAMPLES, CONCEPTS, K, TAU = 3, 397, 128, 8, 0.1
DIMS = (64, 48, 64)
STEPS = 100


def sparse_codes(rng: np.random.Generator) -> np.ndarray:
    """TopK-like codes (M, samples, concepts): k random concepts per row with values in [0, 2)."""
    codes = np.zeros((M, SAMPLES, CONCEPTS))
    for m in range(M):
        for s in range(SAMPLES):
            codes[m, s, rng.choice(CONCEPTS, K, replace=False)] = rng.random(K) * 2
    return codes


def vectorised(codes: torch.Tensor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts, co-fire counts and firing entropy by tensor reductions."""
    fires = concepts.firing(codes, TAU)
    counts = concepts.firing_counts(fires)
    return counts.numpy(), concepts.cofire_counts(fires).numpy(), concepts.firing_entropy(counts.double()).numpy()


def looped(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The same three statistics by explicit loops."""
    counts = concepts.firing_counts_loop(codes, TAU)
    return counts, concepts.cofire_counts_loop(codes, TAU), concepts.firing_entropy_loop(counts)


def training_steps(universal_rule: bool) -> None:
    """``STEPS`` SAE steps on random aligned activations (fixed seed), USAE or independent."""
    gen = torch.Generator().manual_seed(0)
    acts = [torch.randn(2048, d, generator=gen) for d in DIMS]
    cfg = universal.TrainConfig(CONCEPTS, K, STEPS, 1e-3, 256, warmup_steps=10)
    universal.train(acts, cfg, gen, np.random.default_rng(0), universal=universal_rule)


def main() -> None:
    """Check agreement, time both comparisons in interleaved rounds, write data/bench/usae.json."""
    runtime.limit_threads(1)
    codes = sparse_codes(np.random.default_rng(0))
    codes_t = torch.from_numpy(codes)
    ours, ref = vectorised(codes_t), looped(codes)
    assert np.array_equal(ours[0], ref[0]) and np.array_equal(ours[1], ref[1])
    assert np.allclose(ours[2], ref[2], rtol=0, atol=1e-12)
    metrics = bench.compare({"ours": lambda: vectorised(codes_t), "reference": lambda: looped(codes)},
                            reference="reference", rounds=7, clock="cpu")["ours"]
    steps = bench.compare({"usae": lambda: training_steps(True), "reference": lambda: training_steps(False)},
                          reference="reference", rounds=5, clock="cpu")["usae"]
    print("vectorised metrics / loop:", metrics.line(), f"-> speed-up {1 / metrics.ratio:.0f}x")
    print("USAE steps / independent steps:", steps.line(), f"(bound M + 1 = {M + 1})")
    assert metrics.ratio <= 1 / 20, "vectorised metrics are less than 20x faster than the loop"
    assert steps.ratio <= M + 1, "a USAE step costs more than M + 1 independent steps"
    path = bench.record("usae", metrics, target=1 / 20, direction="<=",
                        sizes={"models": M, "samples": SAMPLES, "concepts": CONCEPTS, "k": K,
                               "identical": True, "train_steps": STEPS},
                        extra={"usae_step_vs_independent": steps})
    print("wrote", path)


if __name__ == "__main__":
    main()
