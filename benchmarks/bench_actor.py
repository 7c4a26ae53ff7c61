"""Performance anchor of actor: ACTOR against full-model SFT, CPU time for the same number of Adam steps.

The spec's setting: the 3-block toy GPT-2 (d = 64), l* = 1, 96 training sequences of up to 12 tokens
(32 harmful, 32 pseudo-harmful, 32 benign), 100 full-batch Adam steps each. ACTOR reads each prompt
followed by the model's own greedy continuation (response-free, as in the experiment), runs a forward
truncated after block l* and back-propagates through that block only (with the retain term); SFT runs
the whole model and the LM head over prompt and desired response tokens. Interleaved rounds
(``companion.bench.compare``); writes ``data/bench/actor.json``. The paper reports about 15 min / 4 min
= 3.75x on Llama-2-7b-chat; the gate here is > 1.3 on a noisy shared CPU.
"""

from __future__ import annotations

import copy

import torch

from companion import bench, runtime
from companion.papers.actor import language as lang, toy
from companion.papers.actor.actor import actor, layer_output, sft


def main(steps: int = 100, layer: int = 1, rounds: int = 7) -> None:
    """Time both trainings on one seed's queries; check the truncated forward on the way."""
    runtime.limit_threads(1)
    data = lang.seed_data(0, 300, 300, 300, 1.0, 64, 32, 100)
    base = toy.build(3, 64, 0)
    _, _, batch = toy.training_queries(data.train)
    q, sign, _ = toy.actor_queries(base, data.train)
    anchors = toy.queries(data.anchors["harmful"]), toy.queries(data.anchors["benign"])
    with torch.no_grad():
        full = base(input_ids=batch.input_ids, output_hidden_states=True).hidden_states[layer + 1]
        diff = float((layer_output(base, layer, batch.input_ids) - full).abs().max())

    def run_actor() -> None:
        actor(copy.deepcopy(base), layer, *anchors, q, sign, 1.0, 1.0, "benign_mean", 1, steps, 1e-3)

    def run_sft() -> None:
        sft(copy.deepcopy(base), batch.input_ids, batch.labels, steps, 1e-3)

    out = bench.compare({"full-model SFT": run_sft, "ACTOR": run_actor}, "ACTOR", rounds=rounds, clock="cpu")
    anchor = out["full-model SFT"]
    print(f"{len(batch)} sequences x {batch.input_ids.shape[1]} tokens, {steps} steps, l* = {layer}; "
          f"truncated vs full layer-l* activations: max |diff| = {diff:.1e}")
    print("  " + anchor.line(1.3, ">="))
    n_block = sum(p.numel() for p in base.transformer.h[layer].parameters())
    path = bench.record("actor", anchor, target=1.3, direction=">=",
                        values={"max |truncated - full| at l*": diff,
                                "trainable fraction (block l* / all)": n_block / sum(p.numel() for p in base.parameters()),
                                "paper's ratio (15 min / 4 min)": 3.75},
                        sizes={"n_layer": 3, "d_model": 64, "layer": layer, "sequences": len(batch), "steps": steps})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
