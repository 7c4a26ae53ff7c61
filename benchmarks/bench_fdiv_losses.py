"""Performance anchor for the f-softargmax: our Newton solver vs entmax and softmax, interleaved.

One forward of the operator (alpha = 1.5, batch 256 x k, float32, CPU) timed in interleaved
rounds (``companion.bench.compare``) against ``entmax.entmax_bisect`` (same problem, bisection;
target <= 0.5), one ``torch.softmax`` pass (the floor; target <= 30) and ``entmax.entmax15`` (sort
based); our own bisection (``method="bisect"``, the reference path) is timed alongside. Writes
``data/bench/fdiv-losses.json``.
"""

from __future__ import annotations

import argparse

import entmax
import torch

from companion import bench
from companion.papers.fdiv_losses.fdivergence import REGISTRY, softargmax

TARGET_BISECT, TARGET_SOFTMAX = 0.5, 30.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 32000])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    div = REGISTRY["alpha1.5"]
    extra, targets, anchor = {}, {}, None
    for k in args.sizes:
        theta = 3 * torch.randn(256, k, generator=torch.Generator().manual_seed(0))
        fns = {"ours": lambda: softargmax(div, theta, None, 30),
               "ours_bisect": lambda: softargmax(div, theta, None, 30, method="bisect"),
               "entmax_bisect": lambda: entmax.entmax_bisect(theta, 1.5, n_iter=30),
               "entmax15": lambda: entmax.entmax15(theta, -1),
               "softmax": lambda: torch.softmax(theta, -1)}
        clock = "cpu" if args.threads == 1 else "wall"
        vs_bisect = bench.compare(fns, "entmax_bisect", rounds=args.rounds, clock=clock)
        # against the floor, ours and softmax alone: a short pass is timed more often
        vs_softmax = bench.compare({"ours": fns["ours"], "softmax": fns["softmax"]}, "softmax",
                                   rounds=3 * args.rounds, clock=clock)["ours"]
        print(f"k = {k}:")
        for name, c in vs_bisect.items():
            if name == "softmax":
                continue
            target = TARGET_BISECT if name == "ours" else None
            print("  " + c.line(target))
            extra[f"k{k} {name}/entmax_bisect"] = c
            if target is not None:
                targets[f"k{k} {name}/entmax_bisect"] = (target, "<=")
        print("  " + vs_softmax.line(TARGET_SOFTMAX))
        extra[f"k{k} ours/softmax"] = vs_softmax
        targets[f"k{k} ours/softmax"] = (TARGET_SOFTMAX, "<=")
        anchor = vs_bisect["ours"]  # the largest k is the page's anchor
    assert anchor is not None
    path = bench.record("fdiv-losses", anchor, target=TARGET_BISECT, extra=extra, targets=targets,
                        sizes={"batch": 256, "k": args.sizes, "alpha": 1.5, "dtype": "float32", "iters": 30,
                               "threads": args.threads})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
