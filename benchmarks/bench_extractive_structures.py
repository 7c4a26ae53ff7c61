"""Performance anchor: extractive scores with hooks vs naive per-component weight patching.

The hooked version gets the informative score of every component at every token from one
forward+backward pass, and all three scores from two forward+backward passes and two forwards. The naive causal attribution patches the
weight change of one component at a time (2 blocks x (MLP + 4 heads) = 10 components) and reruns
the model, which only yields one loss drop per component. Both run here on the same trained pair of
models; the script prints the time ratio and how well the two attributions agree.
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch

from companion.runtime import median_time
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
    t_hooked, t_info, t_naive = (median_time(fn, 15, clock=time.process_time) for fn in (hooked, informative, naive))
    linear = hooked()["informative"].sum(1).mean(0)
    causal = naive()
    corr = float(np.corrcoef(linear.numpy(), causal.numpy())[0, 1])
    n = len(attrib.component_names(2, 4))
    print(f"components: {n}; hooked = all three scores per token, naive = one patched loss drop per component")
    print(f"naive / hooked informative score (same quantity, linearised): {t_naive / t_info:.2f}x")
    print(f"naive / hooked all three scores: {t_naive / t_hooked:.2f}x")
    print(f"correlation of linearised informative score with patched loss drop: {corr:.3f}")


if __name__ == "__main__":
    main()
