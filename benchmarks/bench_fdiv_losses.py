"""Performance anchor for the f-softargmax: our generic bisection vs entmax, in one run.

Times one forward of the operator (median of 20) for batch 256 x k, float32, on CPU, and prints
ratios: ours / entmax_bisect (same algorithm, expected 0.5-2), ours / entmax15 (sort based) and
ours / softmax (the floor).
"""

from __future__ import annotations

import argparse

import entmax
import torch

from companion.runtime import median_time
from companion.papers.fdiv_losses.fdivergence import REGISTRY, softargmax




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 32000])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    div = REGISTRY["alpha1.5"]
    print(f"{'k':>7s} {'ours ms':>9s} {'ours/entmax_bisect':>19s} {'ours/entmax15':>14s} {'ours/softmax':>13s}")
    for k in args.sizes:
        theta = 3 * torch.randn(256, k, generator=torch.Generator().manual_seed(0))
        ours = median_time(lambda: softargmax(div, theta, None, 30), 20)
        bisect = median_time(lambda: entmax.entmax_bisect(theta, 1.5, n_iter=30), 20)
        sort = median_time(lambda: entmax.entmax15(theta, -1), 20)
        floor = median_time(lambda: torch.softmax(theta, -1), 20)
        print(f"{k:7d} {1e3 * ours:9.2f} {ours / bisect:19.2f} {ours / sort:14.2f} {ours / floor:13.1f}")


if __name__ == "__main__":
    main()
