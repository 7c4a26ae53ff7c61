"""Per-weight intervals ("boxes") from the GGUF quantization error, as the GGUF attack builds them.

Following eth-sri/llm-quantization-attack (``q_attack/repair/gguf``): for k-quants the box of a
weight runs from its value to its dequantized value, with the weights that pin the super-block
scales (rule a) and each sub-block's argmax/argmin (rule b) frozen; for the legacy rounding types
(Q8_0, Q4_0) the box is the exact set of fp16 values that keep the weight's code; ``gguf_all``
widens each type's box by the repository's ``thresh.csv`` and intersects them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from companion.papers.gguf_attack import quants as gq

# thresh.csv of the official repository: tau per k-quant type for the multi-type widening.
THRESH = (
    {"Q2_K": 0.0, "Q3_K": 0.0, "Q4_K": 0.0, "Q5_K": 0.0, "Q6_K": 0.0},
    {"Q2_K": 1.0, "Q3_K": 1.0, "Q4_K": 0.4, "Q5_K": 0.1, "Q6_K": 0.6},
    {"Q2_K": 1.0, "Q3_K": 1.0, "Q4_K": 0.6, "Q5_K": 0.5, "Q6_K": 0.8},
    {"Q2_K": 1.0, "Q3_K": 1.0, "Q4_K": 1.0, "Q5_K": 1.0, "Q6_K": 1.0},
)


@dataclass(frozen=True)
class Box:
    """Per-weight interval of one tensor and why weights were frozen."""

    lo: np.ndarray  # float32 [rows, cols]
    hi: np.ndarray
    frozen_block: np.ndarray  # bool [rows, cols]: rule (a)
    frozen_minmax: np.ndarray  # bool [rows, cols]: rule (b)
    step: np.ndarray  # float32 [rows, cols]: the quantization step of the weight's sub-block


def kquant_box(w: np.ndarray, q: gq.Quantized, freeze_block: bool = True, freeze_minmax: bool = True) -> Box:
    """Heuristic k-quant box [min(w, deq), max(w, deq)] with the scale-pinning weights frozen."""
    sub = gq.SUB_BLOCK[q.qtype]
    ws, deq = w.reshape(-1, sub).astype(np.float32), q.deq.reshape(-1, sub)
    lo, hi = np.minimum(ws, deq), np.maximum(ws, deq)
    n_per = 256 // sub
    rows = np.arange(len(ws) // n_per)
    fa = np.zeros((len(rows), n_per), bool)
    if q.qtype in ("Q3_K", "Q6_K"):
        fa[rows, np.abs(q.scales.reshape(-1, n_per)).argmax(axis=1)] = True
    else:
        fa[rows, q.scales.reshape(-1, n_per).argmax(axis=1)] = True
        fa[rows, q.mins.reshape(-1, n_per).argmax(axis=1)] = True
    fa = np.repeat(fa.reshape(-1), sub).reshape(ws.shape) & freeze_block
    fb = np.zeros(ws.shape, bool)
    fb[np.arange(len(ws)), ws.argmax(axis=1)] = True
    fb[np.arange(len(ws)), ws.argmin(axis=1)] = True
    fb &= freeze_minmax
    frozen = fa | fb
    lo, hi = np.where(frozen, ws, lo), np.where(frozen, ws, hi)
    step = np.repeat(q.step, sub).reshape(ws.shape)
    return Box(*(a.reshape(w.shape) for a in (lo, hi, fa, fb, step)))


def mirror(w: np.ndarray, box: Box) -> tuple[np.ndarray, np.ndarray]:
    """The control interval: ``box`` reflected about ``w`` (same width, frozen weights stay frozen, on the
    side away from the dequantized value for a k-quant box)."""
    w = w.astype(np.float32)
    return np.minimum(2 * w - box.hi, w), np.maximum(2 * w - box.lo, w)


def _fp16_inward(v: np.ndarray, up: bool) -> np.ndarray:
    """The nearest fp16 value at or inside ``v`` (rounding up for a lower edge, down for an upper)."""
    h = v.astype(np.float16)
    bad = (h.astype(np.float64) < v) if up else (h.astype(np.float64) > v)
    return np.where(bad, np.nextafter(h, np.float16(np.inf if up else -np.inf)), h)


def legacy_box(w: np.ndarray, qtype: str) -> Box:
    """Exact Q8_0 / Q4_0 box: fp16 values whose code is unchanged with the block scale pinned."""
    x = gq.fp16(w).reshape(-1, 32)
    d, inv = gq.legacy_params(x, qtype)
    code = gq.legacy_codes(x, inv, qtype)
    amax = np.abs(x).max(axis=1, keepdims=True).astype(np.float64)
    inv64 = np.where(inv == 0, 1.0, inv.astype(np.float64))[:, None]
    if qtype == "Q8_0":
        e1, e2, cap = (code - 0.5) / inv64, (code + 0.5) / inv64, amax
    else:  # Q4_0 ties with the absmax element could flip the scale's sign, so stay strictly inside
        e1, e2, cap = (code - 8.5) / inv64, (code - 7.5) / inv64, np.nextafter(amax.astype(np.float16), np.float16(0))
    lo16 = _fp16_inward(np.maximum(np.minimum(e1, e2), -cap), up=True)
    hi16 = _fp16_inward(np.minimum(np.maximum(e1, e2), cap), up=False)
    for _ in range(8):  # float32 products can disagree with the float64 edges by an ulp
        lo_bad = gq.legacy_codes(lo16.astype(np.float32), inv, qtype) != code
        hi_bad = gq.legacy_codes(hi16.astype(np.float32), inv, qtype) != code
        lo16 = np.where(lo_bad, np.nextafter(lo16, np.float16(np.inf)), lo16)
        hi16 = np.where(hi_bad, np.nextafter(hi16, np.float16(-np.inf)), hi16)
    ws = w.reshape(-1, 32).astype(np.float32)
    frozen = np.zeros(ws.shape, bool)
    frozen[np.arange(len(ws)), np.abs(x).argmax(axis=1)] = True
    frozen |= (inv == 0)[:, None]
    lo = np.where(frozen, ws, np.minimum(lo16.astype(np.float32), ws))
    hi = np.where(frozen, ws, np.maximum(hi16.astype(np.float32), ws))
    step = np.repeat(gq.fp16(d), 32).reshape(ws.shape)
    return Box(lo.reshape(w.shape), hi.reshape(w.shape), frozen.reshape(w.shape),
               np.zeros(w.shape, bool), step.reshape(w.shape))


def make_box(w: np.ndarray, qtype: str, freeze_block: bool = True, freeze_minmax: bool = True,
             q: gq.Quantized | None = None) -> Box:
    """The box of one tensor for one type (heuristic for k-quants, exact for legacy types).

    ``q`` is ``w`` already quantized as ``qtype``, when the caller has it.
    """
    if qtype in gq.LEGACY_TYPES:
        return legacy_box(w, qtype)
    return kquant_box(w, q if q is not None else gq.quantize(w, qtype), freeze_block, freeze_minmax)


def widen(w: np.ndarray, box: Box, sub: int, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """gguf_all widening: widths in (0, thr) grow to thr (thr = tau * widest in the sub-block)."""
    ws, lo, hi = (a.reshape(-1, sub) for a in (w.astype(np.float32), box.lo, box.hi))
    width = hi - lo
    thr = tau * width.max(axis=1, keepdims=True)
    small = (width > 0) & (width <= thr / 2)
    mid = (width > thr / 2) & (width < thr)
    err_up = hi > ws  # the dequantized value lies above w: widen the lower side
    new_lo = np.where(small, ws - thr / 2, np.where(mid & err_up, hi - thr, lo))
    new_hi = np.where(small, ws + thr / 2, np.where(mid & ~err_up, lo + thr, hi))
    return new_lo.reshape(w.shape), new_hi.reshape(w.shape)


def all_types_box(w: np.ndarray, thresh_type: int, freeze_block: bool = True, freeze_minmax: bool = True,
                  quants: dict[str, gq.Quantized] | None = None) -> Box:
    """Intersection over Q2_K..Q6_K of the widened single-type boxes (the repository's gguf_all).

    ``quants``: k-quant type -> ``w`` already quantized as that type, when the caller has it."""
    lo, hi = np.full(w.shape, -np.inf, np.float32), np.full(w.shape, np.inf, np.float32)
    fa, fb = np.zeros(w.shape, bool), np.zeros(w.shape, bool)
    for t in gq.K_TYPES:
        b = make_box(w, t, freeze_block, freeze_minmax, (quants or {}).get(t))
        l_t, h_t = widen(w, b, gq.SUB_BLOCK[t], THRESH[thresh_type][t])
        lo, hi = np.maximum(lo, l_t), np.minimum(hi, h_t)
        fa, fb = fa | b.frozen_block, fb | b.frozen_minmax
    return Box(lo, hi, fa, fb, np.ones(w.shape, np.float32))
