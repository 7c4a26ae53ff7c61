"""Performance anchor for gguf-attack: our quantizers and boxes against the ``gguf`` reference.

Times, in one run (median of repeats): our Q4_K quantize, ``gguf.quants.quantize`` for Q8_0,
``gguf.quants.dequantize`` for Q4_K, our Q4_K box, and a PGD repair step against a plain step.
Prints ratios only, since absolute times depend on the shared machine.
"""

from __future__ import annotations

import statistics

import numpy as np
import torch
from gguf import GGMLQuantizationType, quants

from companion.runtime import median_time
from companion.papers.gguf_attack import quants as gq
from companion.papers import gguf_attack as ga




def main() -> None:
    """Print the ratios of the spec's performance anchor."""
    torch.set_num_threads(1)
    x = (np.random.default_rng(0).standard_normal((1024, 1024)) * 0.02).astype(np.float32)  # 1 M weights
    q4k_bytes = gq.quantize(x, "Q4_K").data
    t_q4k = median_time(lambda: gq.quantize(x, "Q4_K"), 3)
    t_q8_ref = median_time(lambda: quants.quantize(x, GGMLQuantizationType.Q8_0))
    t_q8_ours = median_time(lambda: gq.quantize(x, "Q8_0"))
    t_deq_ref = median_time(lambda: quants.dequantize(q4k_bytes, GGMLQuantizationType.Q4_K))
    t_box = median_time(lambda: ga.make_box(x, "Q4_K"), 3)
    print(f"our Q4_K quantize: {x.size / t_q4k / 1e6:.2f} M weights/s on this machine")
    print(f"ratio our Q4_K quantize / gguf Q8_0 quantize:   {t_q4k / t_q8_ref:7.1f}  (spec: ~10-50)")
    print(f"ratio our Q8_0 quantize / gguf Q8_0 quantize:   {t_q8_ours / t_q8_ref:7.2f}")
    print(f"ratio our Q4_K quantize / gguf Q4_K dequantize: {t_q4k / t_deq_ref:7.1f}")
    print(f"ratio Q4_K box / our Q4_K quantize:             {t_box / t_q4k:7.2f}  (spec: <= 2)")

    model = ga.tiny_llama(ga.VOCAB, 2, 256, 4, 256, max_positions=32, seed=0)
    names = ga.quant_names(model)
    named = dict(model.named_parameters())
    boxes = {n: ga.make_box(named[n].detach().numpy(), "Q4_K") for n in names}
    tb = {n: (torch.from_numpy(b.lo), torch.from_numpy(b.hi)) for n, b in boxes.items()}
    data = ga.encode(ga.make_prompts(512, np.random.default_rng(0)), False)

    def steps(box: dict | None) -> None:
        ga.train(model, data, 20, 1e-4, 16, torch.Generator().manual_seed(0), boxes=box, only=names)

    t_plain, t_pgd = (statistics.median(median_time(lambda b=b: steps(b), 1) for _ in range(3))
                      for b in (None, tb))
    print(f"ratio PGD repair step / plain step:             {t_pgd / t_plain:7.2f}  (spec: <= 1.2)")


if __name__ == "__main__":
    main()
