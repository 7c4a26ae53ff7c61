"""Performance anchor of ood-dcc: the vectorised rank-one DCC score vs the official per-sample inverse.

Scores 1000 test features at D = 256, C = 6 three ways, interleaved (``companion.bench.compare``),
and prints time ratios (median over rounds, with their range); writes ``data/bench/ood-dcc.json``: (a) one ``inv(Sigma - v v^T)`` per sample, as the official code does;
(b) the Sherman-Morrison closed form, batched; (c) static Mahalanobis on the same fit.
"""

from __future__ import annotations

import numpy as np

from threadpoolctl import threadpool_limits

from companion import bench
from companion.papers.ood_dcc import GaussianFit


def main(D: int = 256, C: int = 6, n_fit: int = 3000, n_test: int = 1000, repeats: int = 5) -> None:
    """Fit a Gaussian on synthetic ReLU-like features and time the three scorers."""
    rng = np.random.default_rng(0)
    centres = rng.uniform(0, 1, (C, D))
    y = rng.integers(0, C, n_fit)
    feats = np.maximum(centres[y] + rng.normal(0, 0.3, (n_fit, D)), 0)
    test = np.maximum(centres[rng.integers(0, C, n_test)] + rng.normal(0, 0.4, (n_test, D)), 0)
    fit = GaussianFit(feats, y, C, normalize=True, ridge=1e-6)
    r = D // 2
    ref = fit.dcc_reference(test[:50], r)
    err = np.abs(fit.dcc(test[:50], r)[0] - ref).max() / np.abs(ref).max()
    out = bench.compare({"vectorised DCC": lambda: fit.dcc(test, r),
                         "per-sample inverse": lambda: fit.dcc_reference(test, r),
                         "static MahaNorm": lambda: fit.maha(test)}, "vectorised DCC", rounds=repeats, warmup=0, clock="cpu")
    inv, maha = out["per-sample inverse"], out["static MahaNorm"]
    print(f"D={D} C={C} n={n_test} r={r}; max relative difference of the two DCC scores: {err:.1e}")
    print("  " + inv.line(20.0, ">="))
    vec = bench.compare({"vectorised DCC": lambda: fit.dcc(test, r), "static MahaNorm": lambda: fit.maha(test)},
                        "static MahaNorm", rounds=repeats, warmup=0, clock="cpu")["vectorised DCC"]
    print("  " + vec.line(3.0, "<="))
    path = bench.record("ood-dcc", inv, target=20.0, direction=">=", extra={"vectorised DCC/static MahaNorm": vec},
                        targets={"vectorised DCC/static MahaNorm": (3.0, "<=")},
                        values={"max relative difference of the DCC scores": float(err)},
                        sizes={"D": D, "C": C, "n_fit": n_fit, "n_test": n_test, "r": r})
    print(f"wrote {path}")


if __name__ == "__main__":
    with threadpool_limits(1):  # one BLAS thread for every scorer: the ratio measures the algorithm
        main()
