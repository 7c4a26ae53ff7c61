"""GGUF quantizers written from ggml's reference C (``ggml-quants.c``), in numpy float32, byte-identical.

The PyPI ``gguf`` package (llama.cpp's gguf-py) dequantizes every type but only *quantizes* the
legacy rounding types, so the k-quant quantizers (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) are written here
by hand from ``quantize_row_q*_K_ref``, the code that ``ggml_quantize_chunk`` (and so
``llama-quantize``) runs without an importance matrix. Every quantizer returns the packed bytes in
the exact GGUF block layout together with our own dequantized values and the per sub-block scales
that the attack's interval construction needs. ``mixture_type`` mirrors llama.cpp's per-tensor type
rules (``llama-quant.cpp``) for the ``*_K_M`` mixtures.

Bit-exactness (tested against ``ggml_quantize_chunk`` of the ``ggml-python`` package): the C loops
accumulate sequentially in float32, so sums here run over the first axis of [weights, sub-blocks]
arrays one row at a time; ``nearest_int`` is ggml's magic-number trick, bit for bit; the scale search
of ``make_qkx2_quants`` lets an accepted candidate's min replace the running min, which later
candidates grid from, as the C does; codes pass through C's uint8/int8 variables (wrapping) where the
C stores them. ggml builds ``ggml-quants.c`` without ``-march``, so on x86-64 no multiply-add is fused;
a build that fuses them (e.g. aarch64, where FMA is baseline) can flip rare decisions.

Speed: every sub-block of a chunk of :data:`CHUNK` weights is processed at once (the search steps and
the sequential sums are loops of whole-array operations), so there is no Python loop over blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFWriter

F32 = np.float32
EPS = F32(1e-15)  # GROUP_MAX_EPS in ggml-quants.c
MAGIC = F32(12582912.0)  # 1.5 * 2**23, the constant of nearest_int
NI_SAFE = F32(4194303.0 / 1.01)  # nearest_int is plain rounding up to 4194303 (its assert); past it, wrapped bits
CHUNK = 1 << 18  # weights per pass: few numpy calls per weight, temporaries of 1 MB that stay in cache
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
    """llama.cpp ``nearest_int`` bit for bit (float32 + 1.5 * 2**23, low mantissa bits), as int64."""
    bits = (np.asarray(x, dtype=F32) + MAGIC).view(np.int32)
    return ((bits & 0x7FFFFF) - 0x400000).astype(np.int64)


def round_away(x: np.ndarray) -> np.ndarray:
    """C ``roundf``: halves away from zero."""
    a = np.abs(x)
    return np.sign(x) * (np.floor(a) + np.floor(2 * (a - np.floor(a))))


def fp16(x: np.ndarray) -> np.ndarray:
    """Round to fp16 and back to float32 (what the F16 conversion does before quantizing)."""
    return np.asarray(x, dtype=F32).astype(np.float16).astype(F32)


def _seqsum(terms: np.ndarray, from_zero: bool = True) -> np.ndarray:
    """Sequential float32 sum over the first axis, as C's loop: ``0 + t0 + t1 + ...`` (or ``t0 + t1 + ...``).

    numpy reduces a non-contiguous axis row after row (pairwise summation is only for the contiguous axis).
    """
    terms = np.asarray(terms, dtype=F32)
    return np.add.reduce(terms, axis=0, initial=F32(0)) if from_zero else np.add.reduce(terms, axis=0)


def _grid(x: np.ndarray, lo: np.ndarray, iscale: np.ndarray, nmax: int, bound: np.ndarray,
          out: np.ndarray) -> np.ndarray:
    """``clamp(nearest_int(iscale * (x - lo)), 0, nmax)`` on [n, S] columns, as float32, into ``out``.

    ``bound`` [S] bounds ``|x - lo|``: where ``|iscale| * bound`` may pass nearest_int's range the exact
    bit trick is used (C gets wrapped values there), else ``rint``, equal to it inside (half to even).
    """
    np.subtract(x, lo, out=out)
    out *= iscale
    if np.all(np.abs(iscale) * bound <= NI_SAFE):
        np.rint(out, out=out)
    else:
        out[...] = nearest_int(out)
    return np.clip(out, F32(0), F32(nmax), out=out)


def _weighted_error(x: np.ndarray, w: np.ndarray, scale: np.ndarray, the_min: np.ndarray, L: np.ndarray,
                    use_mad: bool, tmp: np.ndarray) -> np.ndarray:
    """C's ``sum w * |scale * L + min - x|`` (or squared), in loop order; [n, S] -> [S] (``tmp``: scratch)."""
    np.multiply(L, scale, out=tmp)
    tmp += the_min
    tmp -= x
    if use_mad:
        np.abs(tmp, out=tmp)
    else:
        tmp *= tmp
    tmp *= w
    return _seqsum(tmp)


def _qkx2(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int,
          use_mad: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``make_qkx2_quants`` on columns: x, w [n, S] -> (scale [S], min >= 0 [S], L [n, S] float32).

    As in C, an accepted candidate replaces ``min``, and later candidates grid from that min. The codes
    of the best candidate are recomputed once at the end from its (min, iscale), the same float ops.
    """
    lo = np.minimum(x.min(axis=0), F32(0))
    hi = x.max(axis=0)
    flat = hi == lo
    sum_w, sum_x = _seqsum(w, from_zero=False), _seqsum(w * x, from_zero=False)
    x_lo = x.min(axis=0)
    La, wl, tmp = np.empty_like(x), np.empty_like(x), np.empty_like(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        the_min = lo.copy()
        iscale = F32(nmax) / np.where(flat, F32(1), hi - lo)
        scale = F32(1) / iscale
        grid_min, grid_iscale = the_min, iscale  # what the kept codes were gridded with
        _grid(x, the_min, iscale, nmax, hi - lo, La)
        best = _weighted_error(x, w, scale, the_min, La, use_mad, tmp)
        for step in range(nstep + 1):
            iscale = (F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / (hi - the_min)
            _grid(x, the_min, iscale, nmax, np.maximum(np.abs(hi - the_min), np.abs(x_lo - the_min)), La)
            np.multiply(w, La, out=wl)
            s_l = _seqsum(wl)
            s_l2 = _seqsum(np.multiply(wl, La, out=tmp))
            s_xl = _seqsum(np.multiply(wl, x, out=tmp))
            D = sum_w * s_l2 - s_l * s_l
            this_scale = (sum_w * s_xl - sum_x * s_l) / D
            this_min = (s_l2 * sum_x - s_l * s_xl) / D
            pos = this_min > 0
            this_min[pos] = 0
            this_scale = np.where(pos, s_xl / s_l2, this_scale)
            err = _weighted_error(x, w, this_scale, this_min, La, use_mad, tmp)
            take = (D > 0) & ~flat & (err < best)
            grid_min, grid_iscale = np.where(take, the_min, grid_min), np.where(take, iscale, grid_iscale)
            best = np.where(take, err, best)
            scale = np.where(take, this_scale, scale)
            the_min = np.where(take, this_min, the_min)
        bound = np.maximum(np.abs(hi - grid_min), np.abs(x_lo - grid_min))
        L = _grid(x, grid_min, grid_iscale, nmax, bound, La)
    L[:, flat] = 0
    return np.where(flat, F32(0), scale).astype(F32), (-the_min).astype(F32), L


def make_qkx2_quants(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int,
                     use_mad: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Asymmetric grid search of ggml; x, w [S, n] -> (scale [S], min >= 0 [S], L [S, n])."""
    sc, mn, L = _qkx2(np.ascontiguousarray(x.T, F32), np.ascontiguousarray(w.T, F32), nmax, rmin, rdelta,
                      nstep, use_mad)
    return sc, mn, L.T.astype(np.int64)


def _signed_absmax(x: np.ndarray, axis: int = 1) -> np.ndarray:
    """The value of largest magnitude along ``axis``, first occurrence (C's ``ax > amax`` scan)."""
    idx = np.expand_dims(np.abs(x).argmax(axis=axis), axis)
    return np.take_along_axis(x, idx, axis=axis).squeeze(axis)


def _qx(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """``make_qx_quants`` (rmse_type 1, weights x^2) on columns: x [n, S] -> (scale [S], L [n, S] int64)."""
    mx = _signed_absmax(x, 0)
    zero = np.abs(mx) < EPS
    mx = np.where(zero, F32(1), mx)
    w = x * x
    wx = w * x
    cands = [F32(nmax)] + [F32(nmax) + F32(0.1) * F32(i) for i in range(-9, 10) if i != 0]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scale = best = None
        for c, cand in enumerate(cands):
            iscale = -cand / mx
            l = np.clip(nearest_int(iscale * x), -nmax, nmax - 1).astype(F32)
            s_lx, s_l2 = _seqsum(wx * l), _seqsum(w * l * l)
            if c == 0:
                L = l
                scale = np.where(s_l2 != 0, s_lx / s_l2, F32(0)).astype(F32)
                best = scale * s_lx
                continue
            take = (s_l2 > 0) & (s_lx * s_lx > best * s_l2)
            np.copyto(L, l, where=take)
            scale = np.where(take, s_lx / s_l2, scale)
            best = np.where(take, scale * s_lx, best)
    Li = L.astype(np.int64) + nmax
    Li[:, zero] = 0
    return np.where(zero, F32(0), scale).astype(F32), Li


def make_qx_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric search with weights x^2 (rmse_type 1); x [S, n] -> (scale [S], L+nmax [S, n])."""
    sc, L = _qx(np.ascontiguousarray(x.T, F32), nmax)
    return sc, L.T


def _q3(x: np.ndarray, nmax: int = 4, passes: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """``make_q3_quants`` with do_rmse on columns: x [n, S] -> (scale [S], L+nmax [n, S] int64)."""
    mx = _signed_absmax(x, 0)
    zero = np.abs(mx) < EPS
    mx = np.where(zero, F32(1), mx)
    L = np.clip(nearest_int((F32(-nmax) / mx) * x), -nmax, nmax - 1).astype(F32)
    w = x * x
    wx = w * x
    slx, sl2 = _seqsum(wx * L), _seqsum(w * L * L)
    # A pass without any change leaves the state as is, so C's early exit needs no mask here.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for _ in range(passes):
            for i in range(x.shape[0]):
                wi, xi, li = w[i], x[i], L[i]
                s1 = slx - wx[i] * li
                s2 = sl2 - wi * li * li
                new = np.clip(nearest_int(xi * s2 / s1), -nmax, nmax - 1).astype(F32)
                t1, t2 = s1 + wx[i] * new, s2 + wi * new * new
                take = (s1 > 0) & (new != li) & (t2 > 0) & (t1 * t1 * sl2 > slx * slx * t2)
                L[i] = np.where(take, new, li)
                slx, sl2 = np.where(take, t1, slx), np.where(take, t2, sl2)
        scale = np.where(sl2 > 0, slx / sl2, F32(0)).astype(F32)
    Li = L.astype(np.int64) + nmax
    Li[:, zero] = 0
    return np.where(zero, F32(0), scale), Li


def make_q3_quants(x: np.ndarray, nmax: int = 4, passes: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric fit then coordinate descent (do_rmse); x [S, n] -> (scale [S], L+nmax [S, n])."""
    sc, L = _q3(np.ascontiguousarray(x.T, F32), nmax, passes)
    return sc, L.T


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


def _requant(x: np.ndarray, L: np.ndarray, dl: np.ndarray, dml: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The final pass: ``clamp(nearest_int((x + dml) / dl), lo, hi)`` where ``dl != 0``, else L; [n, S]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        Lq = np.clip(nearest_int((x + dml) / dl), lo, hi)
    return np.where(dl != 0, Lq, L)


def _quant_q45k(x: np.ndarray, qtype: str) -> tuple[np.ndarray, ...]:
    """Q4_K / Q5_K (``quantize_row_q4_K_ref``): 8 sub-blocks of 32 with 6-bit scales and mins."""
    nmax, rmin, nstep = (15, -1.0, 20) if qtype == "Q4_K" else (31, -0.5, 15)
    xt = np.ascontiguousarray(x.reshape(-1, 32).T)  # [32, S]
    av = np.sqrt(_seqsum(xt * xt) / F32(32))
    w = np.abs(xt) + av
    sc, mn, L = _qkx2(xt, w, nmax, rmin, 0.1, nstep, use_mad=False)
    sc8, mn8 = sc.reshape(-1, 8), mn.reshape(-1, 8)
    ms, mm = sc8.max(axis=1).clip(0), mn8.max(axis=1).clip(0)
    with np.errstate(divide="ignore"):
        inv_s = np.where(ms > 0, F32(63) / ms, F32(0)).astype(F32)
        inv_m = np.where(mm > 0, F32(63) / mm, F32(0)).astype(F32)
    ls = np.minimum(63, nearest_int(inv_s[:, None] * sc8) & 0xFF)  # C stores it in a uint8 first
    lm = np.minimum(63, nearest_int(inv_m[:, None] * mn8) & 0xFF)
    d, dmin = fp16(ms / F32(63)), fp16(mm / F32(63))
    dl = (d[:, None] * ls.astype(F32)).reshape(-1)
    dml = (dmin[:, None] * lm.astype(F32)).reshape(-1)
    Lf = _requant(xt, L.astype(np.int64), dl, dml, 0, nmax)
    deq = (dl * Lf.astype(F32) - dml).astype(F32)
    Lb = np.ascontiguousarray(Lf.T).reshape(-1, 256)
    head = [_f16_bytes(d), _f16_bytes(dmin), _pack_scales_k4(ls, lm)]
    if qtype == "Q5_K":
        head.append(_high_plane(Lb >> 4))
    data = np.concatenate(head + [_pack_nib(Lb, 32)], axis=1)
    return data, deq.T.reshape(-1), sc, mn, dl


def _quant_q2k(x: np.ndarray) -> tuple[np.ndarray, ...]:
    """Q2_K (``quantize_row_q2_K_ref``): 16 sub-blocks of 16 with 4-bit scales and mins, MAD error."""
    xt = np.ascontiguousarray(x.reshape(-1, 16).T)  # [16, S]
    sc, mn, L = _qkx2(xt, np.abs(xt), 3, -0.5, 0.1, 15, use_mad=True)
    sc16, mn16 = sc.reshape(-1, 16), mn.reshape(-1, 16)
    ms, mm = sc16.max(axis=1).clip(0), mn16.max(axis=1).clip(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ls = np.where(ms[:, None] > 0, nearest_int((F32(15) / ms)[:, None] * sc16), 0)
        lm = np.where(mm[:, None] > 0, nearest_int((F32(15) / mm)[:, None] * mn16), 0)
    # C writes the scale code to a byte and ORs the min code, shifted, into it: both wrap as uint8.
    scales = ((ls & 0xFF) | ((lm << 4) & 0xFF)).astype(np.uint8)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = fp16(np.where(ms > 0, ms / F32(15), F32(0)))
        dmin = fp16(np.where(mm > 0, mm / F32(15), F32(0)))
    dl = (d[:, None] * (scales & 0xF).astype(F32)).reshape(-1)
    dml = (dmin[:, None] * (scales >> 4).astype(F32)).reshape(-1)
    Lf = _requant(xt, L.astype(np.int64), dl, dml, 0, 3)
    deq = (dl * Lf.astype(F32) - dml).astype(F32)
    data = np.concatenate([scales, _pack2(np.ascontiguousarray(Lf.T).reshape(-1, 256)), _f16_bytes(d),
                           _f16_bytes(dmin)], axis=1)
    return data, deq.T.reshape(-1), sc, mn, dl


def _quant_sym(x: np.ndarray, qtype: str) -> tuple[np.ndarray, ...]:
    """Q3_K / Q6_K (``quantize_row_q3_K_ref`` / ``q6_K_ref``): 16 sub-blocks of 16, signed 6/8-bit scales."""
    xt = np.ascontiguousarray(x.reshape(-1, 16).T)  # [16, S]
    nmax, smax = (4, 32) if qtype == "Q3_K" else (32, 128)
    sc, L = _q3(xt) if qtype == "Q3_K" else _qx(xt, 32)
    big = _signed_absmax(sc.reshape(-1, 16))
    ok = np.abs(big) >= EPS if qtype == "Q6_K" else big != 0
    with np.errstate(divide="ignore"):
        iscale = np.where(ok, F32(-smax) / np.where(ok, big, 1), F32(0)).astype(F32)
        d = fp16(np.where(ok, F32(1) / np.where(ok, iscale, 1), F32(0)))
    code = nearest_int(iscale[:, None] * sc.reshape(-1, 16))
    if qtype == "Q3_K":  # int8_t l = nearest_int(...), then clamped to [-32, 31]
        ls = np.clip(code.astype(np.int8), -32, 31).astype(np.int64)
    else:  # int8 scales[ib] = MIN(127, nearest_int(...))
        ls = np.minimum(127, code).astype(np.int8).astype(np.int64)
    ls = np.where(ok[:, None], ls, 0)
    dl = (d[:, None] * ls.astype(F32)).reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        Lq = np.clip(nearest_int(xt / dl), -nmax, nmax - 1) + nmax
    L = np.where(dl != 0, Lq, L)
    if qtype == "Q6_K":  # a block whose scales are all ~0 is zeroed whole
        L[:, ~np.repeat(ok, 16)] = 0
    deq = (dl * (L - nmax).astype(F32)).astype(F32)
    Lb = np.ascontiguousarray(L.T).reshape(-1, 256)
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
    return data, deq.T.reshape(-1), sc, np.zeros_like(sc), dl


def legacy_params(x: np.ndarray, qtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Per block of 32: (float32 d used to code, float32 inverse scale) for Q8_0 / Q4_0."""
    xb = x.reshape(-1, 32).astype(F32)
    if qtype == "Q8_0":
        d = np.abs(xb).max(axis=1) / F32(127)
    else:  # C's running max starts at +0.0, so an all-zero block (even of -0.0) gets d = -0.0
        mx = _signed_absmax(xb)
        d = np.where(mx == 0, F32(0), mx) / F32(-8)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, F32(0), F32(1) / np.where(d == 0, 1, d)).astype(F32)
    return d.astype(F32), inv


def legacy_codes(x: np.ndarray, inv: np.ndarray, qtype: str) -> np.ndarray:
    """Codes of values x [B, 32] given fixed per-block inverse scales (Q8_0: int8; Q4_0: 0..15)."""
    y = (x.astype(F32) * inv[:, None]).astype(F32)
    if qtype == "Q8_0":
        return round_away(y).astype(np.int64)
    return np.clip(np.trunc(y + F32(8.5)), 0, 15).astype(np.int64)


def _quant_legacy(x: np.ndarray, qtype: str) -> tuple[np.ndarray, ...]:
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
    return data, deq.astype(F32).reshape(-1), d, np.zeros_like(d), d16


QUANTIZERS = {"Q2_K": _quant_q2k, "Q3_K": lambda x: _quant_sym(x, "Q3_K"), "Q4_K": lambda x: _quant_q45k(x, "Q4_K"),
              "Q5_K": lambda x: _quant_q45k(x, "Q5_K"), "Q6_K": lambda x: _quant_sym(x, "Q6_K"),
              "Q8_0": lambda x: _quant_legacy(x, "Q8_0"), "Q4_0": lambda x: _quant_legacy(x, "Q4_0")}


def quantize(x: np.ndarray, qtype: str, pre_round: bool = True) -> Quantized:
    """Quantize a [rows, cols] tensor row-wise (cols a multiple of the block); fp16 first by default.

    Every block of the tensor is quantized at once, in chunks of :data:`CHUNK` weights.
    """
    if qtype not in QUANTIZERS:
        raise ValueError(f"unsupported type {qtype!r}; implemented: {', '.join(TYPES)}")
    x = np.ascontiguousarray(x, dtype=F32)
    if x.ndim != 2 or x.shape[1] % block_bytes(qtype)[0]:
        raise ValueError(f"{qtype}: need a 2-D tensor whose rows hold whole blocks, got {x.shape}")
    flat = fp16(x).reshape(-1) if pre_round else x.reshape(-1)
    parts = [QUANTIZERS[qtype](flat[i: i + CHUNK]) for i in range(0, flat.size, CHUNK)]
    data, deq, scales, mins, step = (np.concatenate(p) for p in zip(*parts))
    return Quantized(qtype, data.reshape(x.shape[0], -1), deq.reshape(x.shape), scales, mins, step)


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


def ggml_quantize(x: np.ndarray, qtype: str) -> np.ndarray:
    """ggml's own C quantizer (``ggml_quantize_chunk``, no importance matrix) on float32 rows: uint8 [rows, bytes].

    The reference our bytes are tested and timed against; needs the ``ggml-python`` package (dev extra).
    """
    import ctypes

    import ggml

    x = np.ascontiguousarray(x, dtype=F32)
    kind = getattr(ggml, f"GGML_TYPE_{qtype}")
    out = np.empty((x.shape[0], ggml.ggml_row_size(kind, x.shape[1])), np.uint8)
    ggml.ggml_quantize_chunk(kind, x.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.ctypes.data, 0,
                             x.shape[0], x.shape[1], None)
    return out
