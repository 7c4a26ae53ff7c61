"""Performance anchor for gguf-attack: our quantizers and boxes against the ``gguf`` reference.

Times, in interleaved rounds (``companion.bench.compare``): our Q4_K quantize, ``gguf.quants.quantize``
for Q8_0, ``gguf.quants.dequantize`` for Q4_K, our Q4_K box, and a PGD repair step against a plain
step. Prints ratios with their range (and our Q4_K throughput); writes ``data/bench/gguf-attack.json``.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType, quants

from companion import bench
from companion.papers.gguf_attack import quants as gq
from companion.papers import gguf_attack as ga




def main() -> None:
    """Print the ratios of the spec's performance anchor."""
    torch.set_num_threads(1)
    x = (np.random.default_rng(0).standard_normal((1024, 1024)) * 0.02).astype(np.float32)  # 1 M weights
    q4k_bytes = gq.quantize(x, "Q4_K").data
    out = bench.compare({"our Q4_K quantize": lambda: gq.quantize(x, "Q4_K"),
                         "gguf Q8_0 quantize": lambda: quants.quantize(x, GGMLQuantizationType.Q8_0),
                         "our Q8_0 quantize": lambda: gq.quantize(x, "Q8_0"),
                         "gguf Q4_K dequantize": lambda: quants.dequantize(q4k_bytes, GGMLQuantizationType.Q4_K)},
                        "gguf Q8_0 quantize", rounds=3, clock="cpu")
    q4k = out["our Q4_K quantize"]
    box = bench.compare({"Q4_K box": lambda: ga.make_box(x, "Q4_K"), "our Q4_K quantize": lambda: gq.quantize(x, "Q4_K")},
                        "our Q4_K quantize", rounds=3, clock="cpu")["Q4_K box"]
    rate = x.size / q4k.seconds / 1e6
    print(f"our Q4_K quantize: {rate:.2f} M weights/s on this machine (target >= 20)")
    print("  " + q4k.line() + "  (spec: ~10-50)")
    print("  " + out["our Q8_0 quantize"].line())
    print("  " + out["gguf Q4_K dequantize"].line() + "  (reference for the next)")
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
    path = bench.record("gguf-attack", q4k, extra={"Q4_K box/our Q4_K quantize": box, "PGD/plain step": pgd,
                                                   "our Q8_0/gguf Q8_0 quantize": out["our Q8_0 quantize"]},
                        targets={"Q4_K box/our Q4_K quantize": (2.0, "<="), "PGD/plain step": (1.2, "<=")},
                        values={"our Q4_K quantize, M weights/s": rate}, sizes={"weights": int(x.size)})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
