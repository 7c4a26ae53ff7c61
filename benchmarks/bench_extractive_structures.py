"""Performance anchor: extractive scores with hooks vs naive per-component weight patching.

The hooked version gets the informative score of every component at every token from one
forward+backward pass, and all three scores from two forward+backward passes and two forwards. The naive causal attribution patches the
weight change of one component at a time (2 blocks x (MLP + 4 heads) = 10 components) and reruns
the model, which only yields one loss drop per component. Both run here on the same trained pair of
models, timed in interleaved rounds (``companion.bench.compare``, CPU time); the script prints the
time ratios with their range and how well the two attributions agree, and writes
``data/bench/extractive-structures.json``.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from companion import bench
from companion.papers.extractive_structures import gpt2_attribution as attrib
from companion.papers.extractive_structures.weight_deltas import delta_since, snapshot
from companion.papers import extractive_structures as es


def trained_pair() -> tuple:
    """A pretrained toy model and its copy finetuned on the test facts; test implications and loss."""
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    world = es.make_world(200, 160, 40, 20, rng)
    old = es.build_model(world, 2, 64, 4, gen)
    es.train(old, torch.cat([es.dax(world, world.pre), es.dax(world, world.train), es.zong(world, world.train)]),
             60, 1e-3, 64, rng)
    new = copy.deepcopy(old)
    es.train(new, es.dax(world, world.test), 30, 1e-3, 64, rng)
    seqs = es.zong(world, world.test)
    options = es.candidates(world, seqs)
    loss = lambda logits: es.mean_logit_loss(logits[:, -1], options, seqs[:, 3].repeat(len(logits) // len(seqs)))  # noqa: E731
    return old, new, seqs, loss




def main() -> None:
    torch.set_num_threads(1)
    old, new, seqs, loss = trained_pair()
    delta = delta_since(new, snapshot(old))
    cf = torch.cat([seqs[torch.arange(len(seqs)).roll(k)] for k in range(1, 11)])
    hooked = lambda: attrib.extractive_scores(old, new, seqs[:, :3], cf[:, :3], loss, delta)  # noqa: E731
    informative = lambda: attrib.informative(*attrib.trace(old, seqs[:, :3], loss), delta, 4)  # noqa: E731
    naive = lambda: attrib.patched_loss_drops(old, seqs[:, :3], loss, delta)  # noqa: E731
    out = bench.compare({"hooked all three scores": hooked, "hooked informative score": informative,
                         "naive patching": naive}, "naive patching", rounds=9, clock="cpu")
    linear = hooked()["informative"].sum(1).mean(0)
    causal = naive()
    corr = float(np.corrcoef(linear.numpy(), causal.numpy())[0, 1])
    n = len(attrib.component_names(2, 4))
    print(f"components: {n}; hooked = all three scores per token, naive = one patched loss drop per component")
    print("  " + out["hooked informative score"].line() + "  (same quantity, linearised)")
    print("  " + out["hooked all three scores"].line())
    print(f"correlation of linearised informative score with patched loss drop: {corr:.3f}")
    path = bench.record("extractive-structures", out["hooked informative score"],
                        extra={"hooked all three scores/naive patching": out["hooked all three scores"]},
                        values={"correlation of linearised and patched scores": corr},
                        sizes={"components": n, "blocks": 2, "d_model": 64, "heads": 4})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
