"""MLX's NAX kernels (Metal 4 tensor ops, the neural accelerators of M5-class GPUs): steel_gemm_fused_nax,
steel_gemm_thin_nax, attention_nax and attention_nax_dsplit, and the quantized qmm_t_nax / qmm_n_nax and
fp_qmm_t_nax (`FP_CASES`); the quantized gather products are in cases_nax_quantized.

steel_gemm_fused_nax is dispatched by `_steel_gemm_case` of cases_matmul, as `steel_matmul_regular_axpby_nax`
(mlx/backend/metal/matmul.cpp) does: the same kernel name, template arguments, function constants (has_batch 10,
use_out_source 100, do_axpby 110, align_M/N/K 200-202), GEMMParams at buffer 4 with `swizzle_log = tm <= 3 ? 0 : 1`
and `gemm_k_iterations_aligned = K / bk`, a grid of (tn << swizzle_log, ceil(tm / 2**swizzle_log), batch)
threadgroups of (32, wn, wm) threads, and with has_batch the batch shape at 6 and the strides of A, B (and C for
addmm) at 7. MLX instantiates the (64, 64, 256, 2, 2) and (128, 128, 512, 4, 4) tiles for float16, bfloat16 and
float32, all four transpositions.

The kernels ask matmul2d for relaxed precision: float32 inputs are cut to TF32's 10 mantissa bits on the device
(metile/metal/cpu/include/mt_mpp.h), so the float32 reference multiplies the inputs so cut; float16 and bfloat16
inputs are exact. The tolerance is then the float accumulation and the final rounding to the type, as for steel GEMM.
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.mlx_kernels.cases_matmul import (
    _TYPES,
    GEMM_ADDMM_PARAMS,
    GEMM_PARAMS,
    _args,
    _attention,
    _check,
    _empty,
    _random,
    _steel_gemm_case,
    _struct,
    run_steel_attention,
    tf32,
)
from benchmarks.mlx_kernels.cases_quantized import _affine_quantize, _unbatched
from benchmarks.mlx_kernels.common import Case, Result, compile_mlx, instantiation, rng


def _nax_gemm_case(name: str, dtype: str, M: int, N: int, K: int, tile: tuple[int, int, int, int, int],
                   trans: str = "nn", **kw) -> Case:
    """steel_gemm_fused_nax, dispatched by the same function as steel_gemm_fused (cases_matmul)."""
    return _steel_gemm_case(name, dtype, M, N, K, tile, trans, nax=True, **kw)


def _attention_tf32(q, k, v, scale: float, bk: int) -> np.ndarray:
    """What attention_nax computes for float32 (B, H, L, D) inputs without a mask: scores from q and k cut to TF32,
    an online softmax in base 2 over key blocks of `bk` (each block's probabilities relative to the running row
    maximum, cut to TF32 as float inputs of the second product, with v cut too), and the division by the row sum of
    the uncut probabilities at the end."""
    g = q.shape[1] // k.shape[1]
    qt, kt, vt = (tf32(x).astype(np.float64) for x in (q, np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)))
    s = np.einsum("bhqd,bhkd->bhqk", qt, kt) * float(np.float32(scale) * np.float32(1.44269504089))
    m = np.full(s.shape[:-1] + (1,), -np.inf)
    total = np.zeros_like(m)
    out = np.zeros(q.shape)
    for j in range(0, s.shape[-1], bk):
        blk = s[..., j:j + bk]
        new = np.maximum(m, blk.max(-1, keepdims=True))
        p = np.exp2(blk - new)
        factor = np.exp2(m - new)
        total = total * factor + p.sum(-1, keepdims=True)
        out = out * factor + tf32(p.astype(np.float32)).astype(np.float64) @ vt[..., j:j + bk, :]
        m = new
    return out / total


def _attention_nax_case(name: str, dtype: str, B: int, H: int, Hkv: int, qL: int, kL: int, D: int,
                        causal: bool = False, seed: int = 0) -> Case:
    """Full attention with `attention_nax`, as sdpa_full_self_attention_nax dispatches it: queries in blocks of 64
    per threadgroup of 4 simdgroups (16 rows each), keys in blocks of 32. Its second product multiplies the float
    probabilities, cut to TF32 by the relaxed precision, with V: they lose up to 2**-10 of themselves (a bias toward
    zero of half that on average), which the float16 and bfloat16 tolerances hold; for float32 the reference
    computes what the kernel does with q, k, v and the probabilities so cut (`_attention_tf32`)."""

    def run(dev) -> Result:
        out, (q, k, v), scale = run_steel_attention(dev, "steel_attention_nax", "attention_nax", dtype, (64, 32, 4, 1),
                                                    (B, H, Hkv, qL, kL, D), causal, seed)
        if dtype == "float32":
            assert not causal
            return _check(out, _attention_tf32(q[0], k[0], v[0], scale, 32), dtype)
        keep = np.arange(kL)[None, :] <= (np.arange(qL) + kL - qL)[:, None] if causal else True
        return _check(out, _attention(q[1], k[1], v[1], scale, keep), dtype)

    return Case(name, "steel_attention_nax", run)


def _attention_dsplit_case(name: str, dtype: str, B: int, H: int, Hkv: int, qL: int, kL: int,
                           causal: bool = False, seed: int = 0) -> Case:
    """Full attention over head dimension 256 with `attention_nax_dsplit`, which sdpa_full_self_attention_nax
    takes for D == 256 (scaled_dot_product_attention.cpp): the kernel named `steel_attention_dsplit_...`, queries in
    blocks of 64 and keys in blocks of 32 as for attention_nax, but WM = 4 by WN = 2 simdgroups, threadgroups of
    (32, wm, wn) = (32, 4, 2): each pair of simdgroups shares 16 query rows and splits the 256 head dimensions in
    two halves, adds its partial scores through threadgroup memory and multiplies its half of V. The same function
    constants (align_Q 200, align_K 201, has_mask 300, do_causal 301, has_sinks 302), AttnParams at 4 and grid
    (NQ, H, B) as attention_nax."""

    def run(dev) -> Result:
        out, (q, k, v), scale = run_steel_attention(dev, "steel_attention_nax", "attention_nax_dsplit", dtype,
                                                    (64, 32, 4, 2), (B, H, Hkv, qL, kL, 256), causal, seed)
        keep = np.arange(kL)[None, :] <= (np.arange(qL) + kL - qL)[:, None] if causal else True
        return _check(out, _attention(q[1], k[1], v[1], scale, keep), dtype)

    return Case(name, "steel_attention_nax", run)


def _qmm_nax_case(name: str, dtype: str, bits: int, M: int, N: int, K: int, *, transposed: bool = True,
                  group_size: int = 64, seed: int = 0) -> Case:
    """y = x @ deq(w).T (w (N, K), affine_qmm_t_nax) or x @ deq(w) (w (K, N), affine_qmm_n_nax), as qmm_nax in
    mlx/backend/metal/quantized.cpp dispatches them (K a multiple of 64): 64 x 64 output tiles, K in steps of 64,
    threadgroups of (32, 2, 2); w is dequantized into threadgroup memory and multiplied by matmul2d."""

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        tile = "bm64_bn64_bk64_wm2_wn2"
        if transposed:
            aligned = str(N % 64 == 0).lower()
            host = f"affine_qmm_t_nax_{tstr}_gs_{group_size}_b_{bits}_{tile}_alN_{aligned}_batch_0"
            targs = f"{msl}, {group_size}, {bits}, {aligned}, false, 64, 64, 64, 2, 2"
        else:
            host = f"affine_qmm_n_nax_{tstr}_gs_{group_size}_b_{bits}_{tile}_batch_0"
            targs = f"{msl}, {group_size}, {bits}, false, 64, 64, 64, 2, 2"
        kernel = "qmm_t_nax" if transposed else "qmm_n_nax"
        src = instantiation(["steel/gemm/gemm.h", "steel/gemm/nax.h", "quantized_utils.h", "quantized_nax.h"],
                            [f'instantiate_kernel("{host}", affine_{kernel}, {targs})'])
        fn = compile_mlx(dev, src, f"{host}.metal").function(host)
        gen = rng(seed)
        w = gen.normal(0.0, 1.0, size=(N, K) if transposed else (K, N)).astype(np.float32)
        packed, scales, biases, deq = _affine_quantize(w, group_size, bits, dtype)
        x, x_v = _random(gen, (M, K), dtype)
        y = _empty((M, N), dtype)
        bound = {0: packed, 1: scales, 2: biases, 3: x, 4: y, 5: np.int32(K), 6: np.int32(N), 7: np.int32(M)}
        dev.dispatch_threadgroups(fn, (-(-N // 64), -(-M // 64), 1), (32, 2, 2), _args(16, bound, _unbatched(8)))
        return _check(y, x_v @ (deq.T if transposed else deq), dtype, scale=math.sqrt(K / 64) * 4)

    return Case(name, "quantized_nax", run)


_FP_MODES = {"mxfp4": (32, 4), "mxfp8": (32, 8), "nvfp4": (16, 4)}   # mode -> (group size, bits)


def _fp4_e2m1(codes: np.ndarray) -> np.ndarray:
    mag = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])[codes & 7]
    return np.where(codes & 8, -mag, mag)


def _fp8_e4m3(codes: np.ndarray) -> np.ndarray:
    """e4m3 (bias 7, no infinities) codes as values; the codes used here stay clear of NaN (0x7f, 0xff)."""
    e, m = (codes >> 3) & 15, (codes & 7).astype(np.float64)
    mag = np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e.astype(np.float64) - 7))
    return np.where(codes & 0x80, -mag, mag)


def fp_quantized(gen, mode: str, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random `mode` weights (rows, cols) quantized along cols: (packed codes as uint32 words, uint8 scales, the
    dequantized weights as float64). Codes and scales are drawn so that every product is exact in bfloat: e2m1 or
    e4m3 codes (clear of NaN), e8m0 scales from 1/16 to 1, or for nvfp4 e4m3 scales from 1/16 to 15/16."""
    group_size, bits = _FP_MODES[mode]
    if bits == 4:
        codes = gen.integers(0, 16, size=(rows, cols)).astype(np.uint8)
        packed, values = codes[:, 0::2] | (codes[:, 1::2] << 4), _fp4_e2m1(codes)
    else:
        codes = (gen.integers(0, 0x50, size=(rows, cols)) | (gen.integers(0, 2, size=(rows, cols)) << 7))
        codes = codes.astype(np.uint8)
        packed, values = codes, _fp8_e4m3(codes)
    if group_size == 16:
        scales = gen.integers(0x20, 0x37, size=(rows, cols // 16)).astype(np.uint8)
        scale_v = _fp8_e4m3(scales)
    else:
        scales = gen.integers(123, 128, size=(rows, cols // 32)).astype(np.uint8)
        scale_v = 2.0 ** (scales.astype(np.float64) - 127)
    deq = values * np.repeat(scale_v, group_size, axis=1)
    return np.ascontiguousarray(packed).view(np.uint32), scales, deq


def _fp_qmm_nax_case(name: str, dtype: str, mode: str, M: int, N: int, K: int, seed: int = 0) -> Case:
    """y = x @ deq(w).T with fp_qmm_t_nax for the 4- and 8-bit float modes (mxfp4, mxfp8: e8m0 scales over groups
    of 32; nvfp4: e4m3 scales over groups of 16, no global scale), as qmm routes a transposed product with K a
    multiple of 64 to qmm_nax: the kernel named `<mode>_qmm_t_nax_...`, 64 x 64 output tiles (M above 32) of
    (32, 2, 2) threads; w, scales, x, y, K, N, M at the kernel's buffers 0, 1, 3-7 with nothing at 2 (the global
    scale). The weights are dequantized into bfloat threadgroup memory and multiplied with x by matmul2d: random
    codes and scales whose products bfloat holds exactly, so the reference is the exact dequantization."""

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        group_size, bits = _FP_MODES[mode]
        aligned = str(N % 64 == 0).lower()
        host = f"{mode}_qmm_t_nax_{tstr}_gs_{group_size}_b_{bits}_bm64_bn64_bk64_wm2_wn2_alN_{aligned}_batch_0"
        src = instantiation(["steel/gemm/gemm.h", "steel/gemm/nax.h", "fp_quantized_nax.h"], [
            f'instantiate_kernel("{host}", fp_qmm_t_nax, {msl}, {group_size}, {bits}, {aligned}, false, '
            f'64, 64, 64, 2, 2)'])
        fn = compile_mlx(dev, src, f"{host}.metal").function(host)
        gen = rng(seed)
        packed, scales, deq = fp_quantized(gen, mode, N, K)
        x, x_v = _random(gen, (M, K), dtype)
        if dtype == "float32":
            x_v = tf32(x).astype(np.float64)
        y = _empty((M, N), dtype)
        bound = {0: packed, 1: scales, 3: x, 4: y, 5: np.int32(K), 6: np.int32(N), 7: np.int32(M)}
        dev.dispatch_threadgroups(fn, (-(-N // 64), -(-M // 64), 1), (32, 2, 2), _args(15, bound, _unbatched(8)))
        return _check(y, x_v @ deq.T, dtype, scale=math.sqrt(K / 64) * 4)

    return Case(name, "quantized_nax", run)


def _thin_nax_case(name: str, dtype: str, M: int, N: int, K: int, transpose_b: bool = False,
                   addmm: tuple[float, float] | None = None, seed: int = 0) -> Case:
    """D = A @ B for few output columns (N <= 64) with gemm_thin_nax at the shapes steel_gemm_thin_nax.metal
    instantiates (UM = UN = 2; SM = 1; SN = 1, KS = 4 below 2048 rows, else SN = 2, KS = 2, as matmul.cpp picks).
    Its host code is not in the wheel; the dispatch follows the kernel: one threadgroup of SM * SN * KS simdgroups
    per (16 UM SM) x (16 UN SN) block of D, blocks along M first, the K groups of 64 taken KS at a time, and each
    align_* constant true when no block of that dimension is partial. Tensor operands with strides, a cooperative
    left input kept across runs, masked tails, and partial sums through threadgroup tensors (KS > 1)."""

    def run(dev) -> Result:
        tname, msl, _ = _TYPES[dtype]
        um = un = 2
        sm, sn = 1, (1 if M < 2048 else 2)
        ks = 4 // sn
        tsm, tsn, bk = 16 * um, 16 * un, 64
        trans = "nt" if transpose_b else "nn"
        host = f"steel_gemm_thin_nax_{trans}_{tname}_um{um}_un{un}_sm{sm}_sn{sn}_ks{ks}"
        src = instantiation(["steel/gemm/gemm_nax.h", "steel/gemm/kernels/steel_gemm_thin_nax.h"], [
            f'instantiate_kernel("{host}", gemm_thin_nax, {msl}, {um}, {un}, {sm}, {sn}, {ks}, '
            f'{str(transpose_b).lower()})'])
        use_out_source = addmm is not None and (addmm[0] != 0.0 or addmm[1] != 1.0)
        do_axpby = use_out_source and (addmm[0] != 1.0 or addmm[1] != 1.0)
        constants = {100: use_out_source, 110: do_axpby, 200: M % (sm * tsm) == 0, 201: N % (sn * tsn) == 0,
                     202: K % bk == 0}
        fn = compile_mlx(dev, src, f"{host}.metal").function(host, constants=constants)
        gen = rng(seed)
        a, a_v = _random(gen, (M, K), dtype)
        b, b_v = _random(gen, (N, K) if transpose_b else (K, N), dtype)
        want = a_v @ (b_v.T if transpose_b else b_v)
        out = _empty((M, N), dtype)
        tiles_m, tiles_n = -(-M // (sm * tsm)), -(-N // (sn * tsn))
        params = _struct(GEMM_PARAMS, M=M, N=N, K=K, lda=K, ldb=b.shape[-1], ldd=N, tiles_n=tiles_n,
                         tiles_m=tiles_m, gemm_k_iterations_aligned=-(-K // (bk * ks)), batch_ndim=1)
        bound = {0: a, 1: b, 3: out, 4: params}
        if use_out_source:
            alpha, beta = addmm
            c, c_v = _random(gen, (N,), dtype)
            bound[2] = c
            bound[5] = _struct(GEMM_ADDMM_PARAMS, ldc=0, fdc=1, batch_stride_c=0, alpha=alpha, beta=beta)
            want = alpha * want + beta * c_v
        dev.dispatch_threadgroups(fn, (tiles_m * tiles_n, 1, 1), (32, sm * sn * ks, 1), _args(6, bound))
        return _check(out, want, dtype, scale=math.sqrt(K / 64) + 1)

    return Case(name, "steel_gemm_nax", run)


SMALL, LARGE = (64, 64, 256, 2, 2), (128, 128, 512, 4, 4)
CASES: list[Case] = [
    _nax_gemm_case("steel_gemm_fused_nax_nn_float16_aligned", "float16", 128, 64, 256, SMALL),
    _nax_gemm_case("steel_gemm_fused_nax_nn_float32_ragged", "float32", 70, 45, 300, SMALL),
    _nax_gemm_case("steel_gemm_fused_nax_nt_bfloat16_ragged_swizzled", "bfloat16", 260, 72, 90, SMALL, "nt"),
    _nax_gemm_case("steel_gemm_fused_nax_tn_float16_batched", "float16", 40, 33, 64, SMALL, "tn", batch=(3,)),
    _nax_gemm_case("steel_gemm_fused_nax_tt_float32_has_batch", "float32", 36, 20, 50, SMALL, "tt", batch=(2, 2)),
    _nax_gemm_case("steel_gemm_fused_nax_nn_float32_large_tile", "float32", 130, 140, 530, LARGE),
    _nax_gemm_case("addmm_nax_nt_float16_axpby", "float16", 70, 45, 37, SMALL, "nt", addmm=(2.0, 0.5)),
    _nax_gemm_case("addmm_nax_tt_float16_has_batch", "float16", 36, 20, 50, SMALL, "tt", batch=(2, 2),
                   broadcast_b=True, addmm=(2.0, 0.5)),
    _thin_nax_case("steel_gemm_thin_nax_nn_float16_aligned", "float16", 64, 32, 512),
    _thin_nax_case("steel_gemm_thin_nax_nt_bfloat16_ragged", "bfloat16", 50, 20, 300, transpose_b=True),
    _thin_nax_case("steel_gemm_thin_nax_nn_float16_axpby_ragged", "float16", 40, 45, 130, addmm=(2.0, 0.5)),
    _thin_nax_case("steel_gemm_thin_nax_nt_bfloat16_tall", "bfloat16", 2050, 40, 70, transpose_b=True),
    _attention_nax_case("steel_attention_nax_float16_ragged", "float16", 1, 2, 1, 70, 45, 64),
    _qmm_nax_case("affine_qmm_t_nax_float16_4bit", "float16", 4, 70, 128, 192),
    _qmm_nax_case("affine_qmm_t_nax_bfloat16_8bit_unaligned_n", "bfloat16", 8, 40, 100, 128),
    _qmm_nax_case("affine_qmm_n_nax_float16_4bit", "float16", 4, 50, 128, 128, transposed=False),
    _attention_nax_case("steel_attention_nax_float32_ragged", "float32", 1, 2, 1, 70, 75, 64),
    _attention_nax_case("steel_attention_nax_bfloat16_causal", "bfloat16", 2, 2, 2, 64, 100, 128, causal=True),
    # named apart from attention_nax (the CI profile keeps one case per name before `_nax`)
    _attention_dsplit_case("steel_attention_dsplit_nax_float16_ragged", "float16", 1, 2, 1, 70, 45),
    _attention_dsplit_case("steel_attention_dsplit_nax_bfloat16_causal", "bfloat16", 2, 2, 1, 64, 100, causal=True),
]
FP_CASES: list[Case] = [
    _fp_qmm_nax_case("mxfp4_qmm_t_nax_float16", "float16", "mxfp4", 70, 128, 192),
    _fp_qmm_nax_case("mxfp8_qmm_t_nax_bfloat16_unaligned_n", "bfloat16", "mxfp8", 40, 100, 128),
    _fp_qmm_nax_case("nvfp4_qmm_t_nax_float32", "float32", "nvfp4", 66, 64, 128),
]
CASES += FP_CASES
