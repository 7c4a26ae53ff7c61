"""Performance anchor of self-ref: scoring latency per query (batch 1, CPU, KV cache), Self-REF vs MSP.

MSP needs one forward pass over the prompt (the answer token and its probability); Self-REF needs that
pass plus one cached step on the answer to read the ``<CN>``/``<UN>`` logits. Both run on the quick
preset's tiny GPT-2 (2 layers, 64-d, 21 tokens) over the same 64 test prompts, interleaved
(``companion.bench.compare``), CPU time; the spec expects a ratio in [1.0, 2.2] for single-token answers.
Also checks that the cached step gives the same score as a full forward pass; the two confidence rows get
random embeddings first, since the fresh mean-initialised rows score exactly 1/2 on any path and could not
show a wrong cache. Writes data/bench/self-ref.json.
"""

from __future__ import annotations

import numpy as np
import torch

from companion import bench
from companion.papers.self_ref import lm, qa_data
from companion.papers.self_ref.confidence import add_confidence_tokens


def main(n_queries: int = 64, rounds: int = 7) -> None:
    """Time both scorers on ``n_queries`` prompts, batch 1, one thread."""
    torch.set_num_threads(1)
    v = qa_data.base_vocab()
    vc = v.with_tokens(qa_data.CONFIDENCE)
    model = lm.build(len(v), 2, 64, seed=0)
    add_confidence_tokens(model, len(v), len(vc))
    with torch.no_grad():  # distinct <CN>/<UN> rows (tied input and output), so scores differ across prompts
        model.get_input_embeddings().weight[len(v):] = torch.randn(2, 64, generator=torch.Generator().manual_seed(1))
    model.eval()
    mx = qa_data.make_mixture(qa_data.OPS, 0.5, np.random.default_rng(0))
    prompts = torch.as_tensor(mx.T.prompts(vc)[:n_queries])
    cn, un = vc.id("<CN>"), vc.id("<UN>")
    cached = np.array([lm.selfref_query(model, p, cn, un)[1] for p in prompts])
    answers = np.array([lm.selfref_query(model, p, cn, un)[0] for p in prompts])
    full = lm.selfref_score(model, prompts.numpy(), answers, cn, un)
    err = float(np.abs(cached - full).max())
    assert np.std(full) > 1e-3, "the scores do not vary, so the cached-vs-full comparison could not fail"
    out = bench.compare({"Self-REF": lambda: [lm.selfref_query(model, p, cn, un) for p in prompts],
                         "MSP": lambda: [lm.msp_query(model, p) for p in prompts]},
                        "MSP", rounds=rounds, warmup=1, clock="cpu")
    ratio = out["Self-REF"]
    print(f"{n_queries} queries, batch 1; max |cached - full-pass score| = {err:.1e}")
    print("  " + ratio.line(2.2, "<="))
    path = bench.record("self-ref", ratio, target=2.2, direction="<=",
                        values={"max |cached - full-pass score|": err},
                        sizes={"queries": n_queries, "n_layer": 2, "n_embd": 64, "vocab": len(vc), "prompt_tokens": 6})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
