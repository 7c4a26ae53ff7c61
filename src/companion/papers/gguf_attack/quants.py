"""GGUF quantizers written from llama.cpp's reference C (``ggml-quants.c``), in numpy float32.

The PyPI ``gguf`` package (llama.cpp's gguf-py) dequantizes every type but only *quantizes* the
legacy rounding types, so the k-quant quantizers (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) are written here
by hand. Every quantizer returns the packed bytes in the exact GGUF block layout (so
``gguf.quants.dequantize`` reads them) together with our own dequantized values and the per
sub-block scales that the attack's interval construction needs. ``mixture_type`` mirrors
llama.cpp's per-tensor type rules (``llama-quant.cpp``) for the ``*_K_M`` mixtures.

Bit-exactness: C accumulates sequentially in float32 and rounds with ``nearest_int`` (half to
even), so sums here run column by column over float32 arrays, and ``np.rint`` is used on float32.
Compiler FMA contraction in a real llama.cpp build can still flip rare decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFWriter

F32 = np.float32
EPS = F32(1e-15)  # GROUP_MAX_EPS in ggml-quants.c
SUB_BLOCK = {"Q2_K": 16, "Q3_K": 16, "Q4_K": 32, "Q5_K": 32, "Q6_K": 16, "Q8_0": 32, "Q4_0": 32}
K_TYPES = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
LEGACY_TYPES = ("Q8_0", "Q4_0")
TYPES = K_TYPES + LEGACY_TYPES
MIXTURES = ("pure", "Q4_K_M", "Q5_K_M", "Q3_K_M")  # llama.cpp ftypes whose per-tensor rules we mirror
# llama.cpp (llama-quant.cpp): the type a k-quant tensor gets when in_features is not a multiple of 256
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "Q2_K": "Q4_0", "Q3_K": "Q4_0"}


@dataclass(frozen=True)
class Quantized:
    """One tensor quantized: bytes, dequantized values and per-sub-block float scales/mins."""

    qtype: str
    data: np.ndarray  # uint8 [rows, row_bytes]: the GGUF block layout
    deq: np.ndarray  # float32 [rows, cols]
    scales: np.ndarray  # float32 [n_sub]: the sub-block scale chosen before 4/6/8-bit coding
    mins: np.ndarray  # float32 [n_sub]: the sub-block min (zeros for symmetric types)
    step: np.ndarray  # float32 [n_sub]: the final dequantization step of each sub-block


def qtype_enum(qtype: str) -> GGMLQuantizationType:
    """The gguf enum of a type name."""
    return GGMLQuantizationType[qtype]


def block_bytes(qtype: str) -> tuple[int, int]:
    """(weights per block, bytes per block) from ``gguf.GGML_QUANT_SIZES``."""
    return GGML_QUANT_SIZES[qtype_enum(qtype)]


def nearest_int(x: np.ndarray) -> np.ndarray:
    """llama.cpp ``nearest_int``: round half to even on float32, as int64."""
    return np.rint(x.astype(F32)).astype(np.int64)


def round_away(x: np.ndarray) -> np.ndarray:
    """C ``roundf``: halves away from zero."""
    a = np.abs(x)
    return np.sign(x) * (np.floor(a) + np.floor(2 * (a - np.floor(a))))


def fp16(x: np.ndarray) -> np.ndarray:
    """Round to fp16 and back to float32 (what the F16 conversion does before quantizing)."""
    return np.asarray(x, dtype=F32).astype(np.float16).astype(F32)


def _seqsum(terms: np.ndarray) -> np.ndarray:
    """Sequential float32 sum over the last axis (C loop order, not numpy's pairwise sum)."""
    acc = np.zeros(terms.shape[:-1], F32)
    for i in range(terms.shape[-1]):
        acc = acc + terms[..., i]
    return acc


def make_qkx2_quants(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int,
                     use_mad: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric grid search; x, w [S, n] -> (scale [S], min >= 0 [S], L [S, n])."""
    x, w = x.astype(F32), w.astype(F32)
    lo = np.minimum(x.min(axis=1), F32(0))
    hi = x.max(axis=1)
    flat = hi == lo
    rng = np.where(flat, F32(1), hi - lo)
    sum_w, sum_x = _seqsum(w), _seqsum(w * x)
    cand = np.concatenate([[F32(0)], F32(rmin) + F32(rdelta) * np.arange(nstep + 1, dtype=F32)]) + F32(nmax)
    iscale = (cand[None, :] / rng[:, None]).astype(F32)  # [S, C]; column 0 is the initial fit
    xl = x[:, None, :] - lo[:, None, None]
    L = np.clip(nearest_int(iscale[:, :, None] * xl), 0, nmax).astype(F32)  # [S, C, n]
    wl = w[:, None, :] * L
    s_l, s_l2, s_xl = _seqsum(wl), _seqsum(wl * L), _seqsum(wl * x[:, None, :])
    D = sum_w[:, None] * s_l2 - s_l * s_l
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = (sum_w[:, None] * s_xl - sum_x[:, None] * s_l) / D
        mn = (s_l2 * sum_x[:, None] - s_l * s_xl) / D
        pos = mn > 0
        sc = np.where(pos, s_xl / s_l2, sc)
    mn = np.where(pos, F32(0), mn)
    sc[:, 0], mn[:, 0] = F32(1) / iscale[:, 0], lo
    with np.errstate(invalid="ignore"):  # candidates with D <= 0 carry NaN and are masked below
        diff = sc[:, :, None] * L + mn[:, :, None] - x[:, None, :]
    err = _seqsum(w[:, None, :] * (np.abs(diff) if use_mad else diff * diff))
    err[:, 1:] = np.where(D[:, 1:] > 0, err[:, 1:], np.inf)
    best = np.zeros(len(x), np.int64)
    for c in range(1, cand.size):  # strict improvement in C order: ties keep the earlier candidate
        best = np.where(err[np.arange(len(x)), c] < err[np.arange(len(x)), best], c, best)
    idx = np.arange(len(x))
    scale, the_min, Lb = sc[idx, best], -mn[idx, best], L[idx, best]
    scale = np.where(flat, F32(0), scale).astype(F32)
    the_min = np.where(flat, -lo, the_min).astype(F32)
    return scale, the_min, np.where(flat[:, None], F32(0), Lb).astype(np.int64)


def _signed_absmax(x: np.ndarray) -> np.ndarray:
    """The value of largest magnitude per row, first occurrence (C's ``ax > amax`` scan)."""
    return np.take_along_axis(x, np.abs(x).argmax(axis=1)[:, None], axis=1)[:, 0]


def make_qx_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric search with weights x^2 (rmse_type 1); x [S, n] -> (scale [S], L+nmax [S, n])."""
    x = x.astype(F32)
    mx = _signed_absmax(x)
    zero = np.abs(mx) < EPS
    mx = np.where(zero, F32(1), mx)
    w = x * x
    cand = np.array([nmax] + [nmax + F32(0.1) * F32(i) for i in range(-9, 10) if i != 0], F32)
    iscale = (-cand[None, :] / mx[:, None]).astype(F32)
    L = np.clip(nearest_int(iscale[:, :, None] * x[:, None, :]), -nmax, nmax - 1).astype(F32)
    s_lx = _seqsum(w[:, None, :] * x[:, None, :] * L)
    s_l2 = _seqsum(w[:, None, :] * L * L)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale0 = np.where(s_l2[:, 0] != 0, s_lx[:, 0] / s_l2[:, 0], F32(0)).astype(F32)
    best_i = np.zeros(len(x), np.int64)
    scale, best = scale0, scale0 * s_lx[:, 0]
    for c in range(1, cand.size):
        ok = (s_l2[:, c] > 0) & (s_lx[:, c] * s_lx[:, c] > best * s_l2[:, c])
        with np.errstate(divide="ignore", invalid="ignore"):
            new_scale = (s_lx[:, c] / s_l2[:, c]).astype(F32)
        scale = np.where(ok, new_scale, scale)
        best = np.where(ok, new_scale * s_lx[:, c], best)
        best_i = np.where(ok, c, best_i)
    Lb = L[np.arange(len(x)), best_i].astype(np.int64) + nmax
    return np.where(zero, F32(0), scale).astype(F32), np.where(zero[:, None], 0, Lb)


def make_q3_quants(x: np.ndarray, nmax: int = 4, passes: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric fit then coordinate descent (do_rmse); x [S, n] -> (scale [S], L+nmax [S, n])."""
    x = x.astype(F32)
    mx = _signed_absmax(x)
    zero = np.abs(mx) < EPS
    mx = np.where(zero, F32(1), mx)
    iscale = (F32(-nmax) / mx).astype(F32)
    L = np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1).astype(F32)
    w = x * x
    slx, sl2 = _seqsum(w * x * L), _seqsum(w * L * L)
    # A pass without any change leaves the state as is, so C's early exit needs no mask here.
    for _ in range(passes):
        for i in range(x.shape[1]):
            wi, xi, li = w[:, i], x[:, i], L[:, i]
            s1 = slx - wi * xi * li
            with np.errstate(divide="ignore", invalid="ignore"):
                new = np.clip(nearest_int(xi * (sl2 - wi * li * li) / s1), -nmax, nmax - 1).astype(F32)
            s2 = sl2 - wi * li * li
            t1, t2 = s1 + wi * xi * new, s2 + wi * new * new
            take = (s1 > 0) & (new != li) & (t2 > 0) & (t1 * t1 * sl2 > slx * slx * t2)
            L[:, i] = np.where(take, new, li)
            slx, sl2 = np.where(take, t1, slx), np.where(take, t2, sl2)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(zero, F32(0), slx / sl2).astype(F32)
    return scale, np.where(zero[:, None], 0, L.astype(np.int64) + nmax)


def _super(x: np.ndarray, sub: int) -> np.ndarray:
    """[rows, cols] -> [n_super, 256 // sub, sub] super-blocks of 256."""
    return x.reshape(-1, 256 // sub, sub)


def _pack2(L: np.ndarray) -> np.ndarray:
    """2-bit plane of 256 codes per block: byte j/4 + l holds L[j+l], L[j+l+32], ... (j in 0, 128)."""
    L = L.reshape(-1, 2, 4, 32).astype(np.uint8)
    return (L[:, :, 0] | L[:, :, 1] << 2 | L[:, :, 2] << 4 | L[:, :, 3] << 6).reshape(-1, 64)


def _pack_nib(L: np.ndarray, group: int) -> np.ndarray:
    """4-bit plane: per ``2*group`` codes, byte l holds code l (low) and code l+group (high)."""
    L = L.reshape(-1, 2, group).astype(np.uint8) & 0xF
    return (L[:, 0] | L[:, 1] << 4).reshape(len(L) // (256 // (2 * group)), -1)


def _high_plane(bits: np.ndarray) -> np.ndarray:
    """1-bit plane of 256 per block: bit i of byte l is element 32 i + l."""
    b = bits.reshape(-1, 8, 32).astype(np.uint8)
    return np.bitwise_or.reduce(b << np.arange(8, dtype=np.uint8)[None, :, None], axis=1)


def _f16_bytes(v: np.ndarray) -> np.ndarray:
    """fp16 little-endian bytes of a vector, [n, 2]."""
    return v.astype(np.float16).reshape(-1, 1).view(np.uint8)


def _pack_scales_k4(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """The 12-byte 6-bit scale/min packing of Q4_K and Q5_K; ls, lm [B, 8] -> [B, 12]."""
    ls, lm = ls.astype(np.uint8), lm.astype(np.uint8)
    out = np.zeros((len(ls), 12), np.uint8)
    out[:, 0:4] = ls[:, :4] | (ls[:, 4:] >> 4) << 6
    out[:, 4:8] = lm[:, :4] | (lm[:, 4:] >> 4) << 6
    out[:, 8:12] = (ls[:, 4:] & 0xF) | (lm[:, 4:] & 0xF) << 4
    return out


def _quant_q45k(x: np.ndarray, qtype: str) -> Quantized:
    """Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins."""
    nmax, rmin, nstep = (15, -1.0, 20) if qtype == "Q4_K" else (31, -0.5, 15)
    xs = x.reshape(-1, 32)
    av = np.sqrt(_seqsum(xs * xs) / F32(32)).astype(F32)
    w = av[:, None] + np.abs(xs)
    sc, mn, L = make_qkx2_quants(xs, w, nmax, rmin, 0.1, nstep, use_mad=False)
    sc8, mn8 = sc.reshape(-1, 8), mn.reshape(-1, 8)
    ms, mm = sc8.max(axis=1).clip(0), mn8.max(axis=1).clip(0)
    inv_s = np.where(ms > 0, F32(63) / np.where(ms > 0, ms, 1), F32(0)).astype(F32)
    inv_m = np.where(mm > 0, F32(63) / np.where(mm > 0, mm, 1), F32(0)).astype(F32)
    ls = np.minimum(63, nearest_int(inv_s[:, None] * sc8) & 0xFF)
    lm = np.minimum(63, nearest_int(inv_m[:, None] * mn8) & 0xFF)
    d, dmin = fp16(ms / F32(63)), fp16(mm / F32(63))
    dl = (d[:, None] * ls.astype(F32)).reshape(-1, 1)
    dml = (dmin[:, None] * lm.astype(F32)).reshape(-1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        Lq = np.clip(nearest_int((xs + dml) / dl), 0, nmax)
    L = np.where(dl != 0, Lq, L)
    deq = (dl * L.astype(F32) - dml).astype(F32)
    head = [_f16_bytes(d), _f16_bytes(dmin), _pack_scales_k4(ls, lm)]
    if qtype == "Q5_K":
        head.append(_high_plane(L.reshape(-1, 256) >> 4))
    data = np.concatenate(head + [_pack_nib(L.reshape(-1, 256), 32)], axis=1)
    return Quantized(qtype, data, deq.reshape(x.shape), sc, mn, dl[:, 0])


def _quant_q2k(x: np.ndarray) -> Quantized:
    """Q2_K: 16 sub-blocks of 16 with 4-bit scales and mins, MAD error."""
    xs = x.reshape(-1, 16)
    sc, mn, L = make_qkx2_quants(xs, np.abs(xs), 3, -0.5, 0.1, 15, use_mad=True)
    sc16, mn16 = sc.reshape(-1, 16), mn.reshape(-1, 16)
    ms, mm = sc16.max(axis=1).clip(0), mn16.max(axis=1).clip(0)
    ls = np.where(ms[:, None] > 0, nearest_int((F32(15) / np.where(ms > 0, ms, 1))[:, None] * sc16), 0) & 0xF
    lm = np.where(mm[:, None] > 0, nearest_int((F32(15) / np.where(mm > 0, mm, 1))[:, None] * mn16), 0) & 0xF
    d, dmin = fp16(np.where(ms > 0, ms / F32(15), 0)), fp16(np.where(mm > 0, mm / F32(15), 0))
    dl = (d[:, None] * ls.astype(F32)).reshape(-1, 1)
    dml = (dmin[:, None] * lm.astype(F32)).reshape(-1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        Lq = np.clip(nearest_int((xs + dml) / dl), 0, 3)
    L = np.where(dl != 0, Lq, L)
    deq = (dl * L.astype(F32) - dml).astype(F32)
    scales = (ls | lm << 4).astype(np.uint8)
    data = np.concatenate([scales, _pack2(L.reshape(-1, 256)), _f16_bytes(d), _f16_bytes(dmin)], axis=1)
    return Quantized("Q2_K", data, deq.reshape(x.shape), sc, mn, dl[:, 0])


def _quant_sym(x: np.ndarray, qtype: str) -> Quantized:
    """Q3_K / Q6_K: 16 sub-blocks of 16, signed scales coded against the largest-|scale| one."""
    xs = x.reshape(-1, 16)
    nmax, smax, qmin, qmax = (4, 32, -32, 31) if qtype == "Q3_K" else (32, 128, -128, 127)
    sc, L = make_q3_quants(xs) if qtype == "Q3_K" else make_qx_quants(xs, 32)
    big = _signed_absmax(sc.reshape(-1, 16))
    ok = np.abs(big) >= EPS if qtype == "Q6_K" else big != 0
    iscale = np.where(ok, F32(-smax) / np.where(ok, big, 1), F32(0)).astype(F32)
    ls = np.clip(nearest_int(iscale[:, None] * sc.reshape(-1, 16)), qmin, qmax)
    ls = np.where(ok[:, None], ls, 0)
    with np.errstate(divide="ignore"):
        d = fp16(np.where(ok, F32(1) / np.where(ok, iscale, 1), F32(0)))
    dl = (d[:, None] * ls.astype(F32)).reshape(-1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        Lq = np.clip(nearest_int(xs / dl), -nmax, nmax - 1) + nmax
    L = np.where(dl != 0, Lq, L)
    if qtype == "Q6_K":
        L = np.where(ok.repeat(16)[:, None], L, 0)
    deq = (dl * (L - nmax).astype(F32)).astype(F32)
    Lb = L.reshape(-1, 256)
    if qtype == "Q3_K":
        u = np.where(ok[:, None], ls + 32, 0).astype(np.uint8)  # C leaves all-zero scales unset
        sb = np.zeros((len(u), 12), np.uint8)
        sb[:, :8] = (u[:, :8] & 0xF) | (u[:, 8:] & 0xF) << 4
        hi = (u >> 4).reshape(-1, 4, 4)  # scale j = 4 * (j // 4) + j % 4
        sb[:, 8:] = hi[:, 0] | hi[:, 1] << 2 | hi[:, 2] << 4 | hi[:, 3] << 6
        data = np.concatenate([_high_plane(Lb >> 2), _pack2(Lb & 3), sb, _f16_bytes(d)], axis=1)
    else:
        ql = (Lb & 0xF).reshape(-1, 2, 2, 64).astype(np.uint8)
        ql = (ql[:, :, 0] | ql[:, :, 1] << 4).reshape(-1, 128)
        qh = _pack2(Lb >> 4)
        data = np.concatenate([ql, qh, ls.astype(np.int8).view(np.uint8), _f16_bytes(d)], axis=1)
    return Quantized(qtype, data, deq.reshape(x.shape), sc, np.zeros_like(sc), dl[:, 0])


def legacy_params(x: np.ndarray, qtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Per block of 32: (float32 d used to code, float32 inverse scale) for Q8_0 / Q4_0."""
    xb = x.reshape(-1, 32).astype(F32)
    d = (np.abs(xb).max(axis=1) / F32(127)) if qtype == "Q8_0" else (_signed_absmax(xb) / F32(-8))
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, F32(0), F32(1) / np.where(d == 0, 1, d)).astype(F32)
    return d.astype(F32), inv


def legacy_codes(x: np.ndarray, inv: np.ndarray, qtype: str) -> np.ndarray:
    """Codes of values x [B, 32] given fixed per-block inverse scales (Q8_0: int8; Q4_0: 0..15)."""
    y = (x.astype(F32) * inv[:, None]).astype(F32)
    if qtype == "Q8_0":
        return round_away(y).astype(np.int64)
    return np.clip(np.trunc(y + F32(8.5)), 0, 15).astype(np.int64)


def _quant_legacy(x: np.ndarray, qtype: str) -> Quantized:
    """Q8_0 / Q4_0 blocks of 32, as ``gguf.quants.quantize`` (and ggml's reference) do them."""
    xb = x.reshape(-1, 32)
    d, inv = legacy_params(xb, qtype)
    q = legacy_codes(xb, inv, qtype)
    d16 = fp16(d)
    if qtype == "Q8_0":
        deq = q.astype(F32) * d16[:, None]
        data = np.concatenate([_f16_bytes(d), q.astype(np.int8).view(np.uint8)], axis=1)
    else:
        deq = d16[:, None] * (q - 8).astype(F32)
        data = np.concatenate([_f16_bytes(d), (q[:, :16] | q[:, 16:] << 4).astype(np.uint8)], axis=1)
    return Quantized(qtype, data, deq.astype(F32).reshape(x.shape), d, np.zeros_like(d), d16)


def quantize(x: np.ndarray, qtype: str, pre_round: bool = True) -> Quantized:
    """Quantize a [rows, cols] tensor row-wise (cols a multiple of the block); fp16 first by default."""
    x = np.ascontiguousarray(x, dtype=F32)
    if x.ndim != 2 or x.shape[1] % block_bytes(qtype)[0]:
        raise ValueError(f"{qtype}: need a 2-D tensor whose rows hold whole blocks, got {x.shape}")
    if pre_round:
        x = fp16(x)
    if qtype in ("Q4_K", "Q5_K"):
        out = _quant_q45k(x, qtype)
    elif qtype == "Q2_K":
        out = _quant_q2k(x)
    elif qtype in ("Q3_K", "Q6_K"):
        out = _quant_sym(x, qtype)
    elif qtype in LEGACY_TYPES:
        out = _quant_legacy(x, qtype)
    else:
        raise ValueError(f"unsupported type {qtype!r}; implemented: {', '.join(TYPES)}")
    rows = x.shape[0]
    return Quantized(out.qtype, out.data.reshape(rows, -1), out.deq, out.scales, out.mins, out.step)


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp: the first and last eighth of the layers, and every third one in between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def mixture_type(kind: str, layer: int, n_layers: int, in_features: int, base: str, mixture: str) -> str:
    """The GGUF type llama.cpp gives one tensor (kind: attn_q/k/v/output, ffn_gate/up/down, output)."""
    t = base
    if mixture in ("Q4_K_M", "Q5_K_M"):
        if kind == "output" or (kind in ("attn_v", "ffn_down") and use_more_bits(layer, n_layers)):
            t = "Q6_K"
    elif mixture == "Q3_K_M":
        t = {"attn_v": "Q5_K" if layer < 2 else "Q4_K", "attn_output": "Q4_K", "output": "Q6_K",
             "ffn_down": "Q5_K" if layer < n_layers // 16 else "Q4_K"}.get(kind, base)
    if t in FALLBACK and in_features % 256:
        t = FALLBACK[t]
    return t


def write_gguf(path: str, arch: str, tensors: dict[str, Quantized | np.ndarray], meta: dict[str, str]) -> None:
    """Write quantized (raw bytes) and float32 tensors plus string metadata with ``gguf.GGUFWriter``."""
    writer = GGUFWriter(path, arch)
    for key, value in meta.items():
        writer.add_string(key, value)
    for name, t in tensors.items():
        if isinstance(t, Quantized):
            writer.add_tensor(name, t.data, raw_shape=t.data.shape, raw_dtype=qtype_enum(t.qtype))
        else:
            writer.add_tensor(name, np.ascontiguousarray(t, dtype=F32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def read_gguf(path: str) -> tuple[dict[str, tuple[str, tuple[int, ...], np.ndarray]], dict[str, str]]:
    """Read tensors as name -> (type name, [rows, cols] shape, raw data) and string metadata."""
    reader = GGUFReader(path)
    tensors = {t.name: (t.tensor_type.name, tuple(int(s) for s in reversed(t.shape)), np.array(t.data))
               for t in reader.tensors}
    meta = {}
    for name, field in reader.fields.items():
        if field.types and field.types[0].name == "STRING" and not name.startswith("general.architecture"):
            meta[name] = bytes(field.parts[field.data[0]]).decode()
    return tensors, meta
