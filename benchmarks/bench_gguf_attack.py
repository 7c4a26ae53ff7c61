"""Performance anchor for gguf-attack: our quantizers against ggml's own C quantizer, boxes, PGD steps.

Times, in interleaved rounds on CPU time (``companion.bench.compare``): for every implemented type our
numpy quantizer against ``ggml_quantize_chunk`` (``ggml-python``: the C code llama.cpp's
``llama-quantize`` runs without an importance matrix) on the same fp16-rounded 1 M weights, checking
that the bytes are identical; then our Q4_K box against our Q4_K quantize, and a PGD repair step
against a plain step. Prints ratios with their range and the throughputs; writes
``data/bench/gguf-attack.json`` (anchor: our Q4_K / ggml Q4_K).
"""

from __future__ import annotations

import numpy as np
import torch

from companion import bench
from companion.papers import gguf_attack as ga
from companion.papers.gguf_attack import quants as gq

TARGET_RATE = 20.0  # M weights/s (issue 30): a 1.5 B model quantized in ~1 min per type


def main() -> None:
    """Print each type's throughput and ratio to ggml, the box and PGD ratios; write the record."""
    torch.set_num_threads(1)
    x = gq.fp16((np.random.default_rng(0).standard_normal((1024, 1024)) * 0.02).astype(np.float32))  # 1 M
    per_type, rates, identical = {}, {}, {}
    for t in gq.TYPES:
        identical[t] = bool(np.array_equal(gq.quantize(x, t, pre_round=False).data, gq.ggml_quantize(x, t)))
        c = bench.compare({f"our {t} quantize": lambda t=t: gq.quantize(x, t, pre_round=False),
                           f"ggml {t} quantize": lambda t=t: gq.ggml_quantize(x, t)},
                          f"ggml {t} quantize", rounds=3, clock="cpu")[f"our {t} quantize"]
        per_type[t] = c
        rates[f"our {t} quantize, M weights/s"] = x.size / c.seconds / 1e6
        rates[f"ggml {t} quantize, M weights/s"] = x.size / c.reference_seconds / 1e6
        rates[f"{t} bytes identical to ggml"] = identical[t]
        print(f"{t}: ours {x.size / c.seconds / 1e6:.1f} M weights/s, ggml {x.size / c.reference_seconds / 1e6:.1f}"
              f" M weights/s, bytes identical: {identical[t]}; {c.line()}")
    q4k = per_type["Q4_K"]
    print(f"our Q4_K: {rates['our Q4_K quantize, M weights/s']:.1f} M weights/s (target >= {TARGET_RATE:g})")
    box = bench.compare({"Q4_K box": lambda: ga.make_box(x, "Q4_K"), "our Q4_K quantize": lambda: gq.quantize(x, "Q4_K")},
                        "our Q4_K quantize", rounds=3, clock="cpu")["Q4_K box"]
    print("  " + box.line(2.0, "<="))

    model = ga.tiny_llama(ga.VOCAB, 2, 256, 4, 256, max_positions=32, seed=0)
    names = ga.quant_names(model)
    named = dict(model.named_parameters())
    boxes = {n: ga.make_box(named[n].detach().numpy(), "Q4_K") for n in names}
    tb = {n: (torch.from_numpy(b.lo), torch.from_numpy(b.hi)) for n, b in boxes.items()}
    data = ga.encode(ga.make_prompts(512, np.random.default_rng(0)), False)

    def steps(box: dict | None) -> None:
        ga.train(model, data, 20, 1e-4, 16, torch.Generator().manual_seed(0), boxes=box, only=names)

    pgd = bench.compare({"plain step": lambda: steps(None), "PGD repair step": lambda: steps(tb)}, "plain step",
                        rounds=3, clock="cpu")["PGD repair step"]
    print("  " + pgd.line(1.2, "<="))
    extra = {f"our {t}/ggml {t} quantize": c for t, c in per_type.items() if t != "Q4_K"}
    extra.update({"Q4_K box/our Q4_K quantize": box, "PGD/plain step": pgd})
    path = bench.record("gguf-attack", q4k, extra=extra,
                        targets={"Q4_K box/our Q4_K quantize": (2.0, "<="), "PGD/plain step": (1.2, "<=")},
                        values={**rates, "target: our Q4_K quantize, M weights/s": TARGET_RATE},
                        sizes={"weights": int(x.size)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
