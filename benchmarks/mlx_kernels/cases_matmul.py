"""Matrix and attention MLX kernels: gemv and gemv_t, steel GEMM and addmm, rope, sdpa_vector (one and two passes),
steel attention and steel conv2d (the quantized kernels are in `cases_quantized`).

Each case writes its own instantiation lines for the shipped headers and dispatches the kernel as MLX's host code
does (`mlx/backend/metal/matmul.cpp`, `rope.cpp`, `scaled_dot_product_attention.cpp`, `conv.cpp`):
the same kernel name, template arguments, function constants, buffer indices, scalar and struct arguments (structs
as numpy structured arrays laid out as MSL lays them out), grid and threadgroup size. Where MLX binds nothing, a
buffer a function constant switches off gets None; a plain parameter the instantiation never reads gets a zero of
its type, since the CPU device wants every declared plain parameter bound. bf16 data travels as raw uint16 bits.
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.mlx_kernels.common import (
    Case,
    Result,
    check_close,
    compile_mlx,
    compile_source_file,
    instantiation,
    rng,
)

_TYPES = {  # dtype name -> (MLX's type_to_name, the MSL type instantiations use, MLX's get_type_string)
    "float32": ("float32", "float", "float"),
    "float16": ("float16", "half", "float16_t"),
    "bfloat16": ("bfloat16", "bfloat16_t", "bfloat16_t"),
}
# Tolerances against a float64 reference computed from the inputs as the kernel sees them (already rounded to
# the type): the kernels accumulate in float, so the error is float accumulation plus the final rounding to the
# type: rtol is about one ulp of the output type, atol covers float accumulation over sums of a few hundred terms.
_TOL = {"float32": (2e-5, 1e-4), "float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2)}


# -- data ------------------------------------------------------------------------------------------------------------
def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounding to nearest even (finite inputs)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16_value(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _device_array(values: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(array to pass, its values as float64): float32/float16 as such, bfloat16 as raw bits."""
    if dtype == "bfloat16":
        bits = _bf16_bits(values)
        return bits, _bf16_value(bits).astype(np.float64)
    arr = np.ascontiguousarray(values, dtype=np.dtype(dtype))
    return arr, arr.astype(np.float64)


def _random(gen, shape, dtype: str, lo: float = -1.0, hi: float = 1.0):
    return _device_array(gen.uniform(lo, hi, size=shape).astype(np.float32), dtype)


def _host_values(arr: np.ndarray, dtype: str) -> np.ndarray:
    return _bf16_value(arr) if dtype == "bfloat16" else arr.astype(np.float64)


def _empty(shape, dtype: str) -> np.ndarray:
    return np.full(shape, 0xFFFF if dtype == "bfloat16" else np.nan,
                   dtype=np.uint16 if dtype == "bfloat16" else np.dtype(dtype))


def _args(count: int, bound: dict[int, object], unread: dict[int, object] | None = None) -> list:
    """The buffer argument list: `bound[i]` at index i; `unread[i]` where MLX binds nothing to a plain parameter
    the instantiation never reads; None where MLX binds nothing otherwise."""
    unread = unread or {}
    args = [bound[i] if i in bound else unread.get(i) for i in range(count)]
    while args and args[-1] is None:       # nothing bound past the last argument
        args.pop()
    return args


def _i32(*values) -> np.ndarray:
    return np.array(values, dtype=np.int32)


def _i64(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def _check(got: np.ndarray, want: np.ndarray, dtype: str, scale: float = 1.0) -> Result:
    rtol, atol = _TOL[dtype]
    return check_close(_host_values(got, dtype), want, rtol, atol * scale)


# -- gemv ------------------------------------------------------------------------------------------------------------
def _gemv_config(transpose_mat: bool, in_len: int, out_len: int) -> tuple[int, int, int, int, int, int, int]:
    """(bm, bn, sm, sn, tm, tn, outputs per threadgroup) as matmul.cpp's gemv_axbpy picks them."""
    tm, tn, sm, sn, bm, bn = 4, 4, 1, 32, 1, 1
    if transpose_mat:
        sm, sn = (4, 8) if in_len >= 8192 and out_len >= 2048 else (8, 4)
        bn = 16 if out_len >= 2048 else (4 if out_len >= 512 else 2)
        tn = 1 if out_len < tn else tn
        return bm, bn, sm, sn, tm, tn, bn * sn * tn
    bm = 8 if out_len >= 4096 else 4
    if in_len <= 64:
        bm, sm, sn = 1, 8, 4
    elif in_len >= 16 * out_len:
        bm, bn = 1, 8
    tm = 1 if out_len < tm else tm
    return bm, bn, sm, sn, tm, tn, bm * sm * tm


def _gemv_case(name: str, dtype: str, transpose_mat: bool, in_len: int, out_len: int, batch: int = 1,
               axpby: tuple[float, float] | None = None, seed: int = 0) -> Case:
    """out = mat @ vec (gemv, mat (out, in) row-major) or vec @ mat (gemv_t, mat (in, out) row-major), as MLX
    routes a matmul with M == 1 or N == 1; with `axpby`, addmm's alpha * out + beta * bias."""

    def run(dev) -> Result:
        tname, msl, _ = _TYPES[dtype]
        bm, bn, sm, sn, tm, tn, per_tg = _gemv_config(transpose_mat, in_len, out_len)
        kernel = "gemv_t" if transpose_mat else "gemv"
        nc, do_axpby = 0, int(axpby is not None)
        host = (f"{kernel}_{tname}_bm{bm}_bn{bn}_sm{sm}_sn{sn}_tm{tm}_tn{tn}_nc{nc}_axpby{do_axpby}")
        src = instantiation(["gemv.h"], [
            f'instantiate_kernel("{host}", {kernel}, {msl}, {bm}, {bn}, {sm}, {sn}, {tm}, {tn}, {nc}, {do_axpby})'])
        fn = compile_mlx(dev, src, f"{host}.metal").function(host)

        gen = rng(seed)
        mat_shape = (in_len, out_len) if transpose_mat else (out_len, in_len)
        mat, mat_v = _random(gen, (batch, *mat_shape), dtype)
        vec, vec_v = _random(gen, (batch, in_len), dtype)
        out = _empty((batch, out_len), dtype)
        want = (np.einsum("bk,bkn->bn", vec_v, mat_v) if transpose_mat else np.einsum("bmk,bk->bm", mat_v, vec_v))
        bound = {0: mat, 1: vec, 3: out, 4: np.int32(in_len), 5: np.int32(out_len),
                 6: np.int32(mat_shape[1]),                         # the matrix's leading dimension
                 9: np.int32(1), 10: _i32(batch),                    # batch_ndim, batch_shape (collapsed)
                 11: _i64(in_len if batch > 1 else 0), 12: _i64(in_len * out_len if batch > 1 else 0)}
        if axpby is not None:
            alpha, beta = axpby
            bias, bias_v = _random(gen, (out_len,), dtype)          # a bias row broadcast over the batch
            bound.update({2: bias, 7: np.float32(alpha), 8: np.float32(beta), 13: _i64(0), 14: np.int32(1)})
            want = alpha * _round_to(want, dtype) + beta * bias_v
        unread = {2: _empty((1,), dtype), 7: np.float32(0), 8: np.float32(0), 13: _i64(0), 14: np.int32(0)}
        groups = (-(-out_len // per_tg), 1, batch)
        # only the lanes holding a partial sum reach gemv's reduction barrier (the others return), and gemv_t's
        # simdgroups past the output's end skip its loop of barriers: MSL leaves both undefined, Apple GPUs count
        # barriers per simdgroup and let them pass, and so does the CPU device with uniform_barriers=False
        dev.dispatch_threadgroups(fn, groups, (32, bn, bm), _args(15, bound, unread), uniform_barriers=False)
        return _check(out, want, dtype, scale=math.sqrt(in_len / 64) + 1)

    return Case(name, "gemv", run)


def _round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Values rounded to `dtype` (as the gemv epilogue rounds its float result before alpha * out)."""
    if dtype == "bfloat16":
        return _bf16_value(_bf16_bits(x.astype(np.float32))).astype(np.float64)
    return x.astype(np.dtype(dtype)).astype(np.float64)


# -- steel GEMM ------------------------------------------------------------------------------------------------------
GEMM_PARAMS = np.dtype([  # steel/gemm/params.h GEMMParams, laid out as MSL lays it out (natural alignment)
    ("M", "<i4"), ("N", "<i4"), ("K", "<i4"), ("lda", "<i4"), ("ldb", "<i4"), ("ldd", "<i4"),
    ("tiles_n", "<i4"), ("tiles_m", "<i4"),
    ("batch_stride_a", "<i8"), ("batch_stride_b", "<i8"), ("batch_stride_d", "<i8"),
    ("swizzle_log", "<i4"), ("gemm_k_iterations_aligned", "<i4"), ("batch_ndim", "<i4")], align=True)
GEMM_ADDMM_PARAMS = np.dtype([  # GEMMAddMMParams
    ("ldc", "<i4"), ("fdc", "<i4"), ("batch_stride_c", "<i8"), ("alpha", "<f4"), ("beta", "<f4")], align=True)
assert GEMM_PARAMS.itemsize == 72 and GEMM_ADDMM_PARAMS.itemsize == 24


def _struct(dtype: np.dtype, **fields) -> np.ndarray:
    value = np.zeros(1, dtype=dtype)
    for k, v in fields.items():
        value[k] = v
    return value


_NAX_TYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat"}   # as steel_gemm_fused_nax.metal has them


def tf32(values: np.ndarray) -> np.ndarray:
    """float32 values cut toward zero to 10 mantissa bits, as float inputs of a relaxed-precision matmul2d."""
    return (np.ascontiguousarray(values, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def _steel_gemm_case(name: str, dtype: str, M: int, N: int, K: int, tile: tuple[int, int, int, int, int],
                     trans: str = "nn", batch: tuple[int, ...] = (), broadcast_b: bool = False,
                     addmm: tuple[float, float] | None = None, nax: bool = False, seed: int = 0) -> Case:
    """D = A @ B (or alpha * A @ B + beta * C) with `steel_gemm_fused`, as steel_matmul_regular_axpby dispatches
    it, or with `nax` `steel_gemm_fused_nax`, as steel_matmul_regular_axpby_nax does. The two host functions differ
    only in the kernel (its name and headers) and the swizzle: the NAX one takes `swizzle_log = tm <= 3 ? 0 : 1`
    (grid (tn << swizzle_log, ceil(tm / 2**swizzle_log), batch)), the other 0. Both bind the same buffers, and with
    has_batch both append C's batch strides to A's and B's at buffer 7 when there is a C (steel_matmul_axpby builds
    that list for either). `batch` is the batch shape; with `broadcast_b` B lacks the first batch dimension (stride
    0 there), so MLX cannot collapse the batch dimensions and the kernel takes the general batch path (has_batch).
    The NAX kernel asks matmul2d for relaxed precision, so its float32 reference multiplies inputs cut to TF32."""

    def run(dev) -> Result:
        tname, msl, _ = _TYPES[dtype]
        bm, bn, bk, wm, wn = tile
        ta, tb = trans[0] == "t", trans[1] == "t"
        kind = "fused_nax" if nax else "fused"
        base = f"steel_gemm_{kind}_{trans}_{tname}_{tname}_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}"
        headers = ["steel/gemm/gemm_nax.h" if nax else "steel/gemm/gemm.h", f"steel/gemm/kernels/steel_gemm_{kind}.h"]
        src = instantiation(headers, [
            f'instantiate_kernel("{base}", gemm, {_NAX_TYPES[dtype] if nax else msl}, {bm}, {bn}, {bk}, {wm}, {wn}, '
            f'{str(ta).lower()}, {str(tb).lower()}, float)'])
        nb = int(np.prod(batch)) if batch else 1
        has_batch = len(batch) > 1
        use_out_source = addmm is not None and (addmm[0] != 0.0 or addmm[1] != 1.0)
        do_axpby = use_out_source and (addmm[0] != 1.0 or addmm[1] != 1.0)
        constants = {10: has_batch, 100: use_out_source, 110: do_axpby,
                     200: M % bm == 0, 201: N % bn == 0, 202: K % bk == 0}
        fn = compile_mlx(dev, src, f"{base}.metal").function(base, constants=constants)

        gen = rng(seed)
        a_shape = (*batch, K, M) if ta else (*batch, M, K)
        b_batch = batch[1:] if broadcast_b else batch       # broadcast over the first batch dimension
        b_shape = (*b_batch, N, K) if tb else (*b_batch, K, N)
        a, a_v = _random(gen, a_shape, dtype)
        b, b_v = _random(gen, b_shape, dtype)
        if nax and dtype == "float32":
            a_v, b_v = tf32(a).astype(np.float64), tf32(b).astype(np.float64)
        a_m = np.swapaxes(a_v, -1, -2) if ta else a_v
        b_m = np.swapaxes(b_v, -1, -2) if tb else b_v
        want = a_m @ b_m
        out = _empty((*batch, M, N), dtype)
        tiles_n, tiles_m = -(-N // bn), -(-M // bm)
        swizzle_log = 0 if not nax or tiles_m <= 3 else 1
        a_strides = [int(np.prod(a_shape[i + 1:])) for i in range(len(batch))]
        b_strides = [int(np.prod(b_shape[i + 1 - len(batch) + len(b_batch):])) if i >= len(batch) - len(b_batch)
                     else 0 for i in range(len(batch))]
        params = _struct(GEMM_PARAMS, M=M, N=N, K=K, lda=a_shape[-1], ldb=b_shape[-1], ldd=N, tiles_n=tiles_n,
                         tiles_m=tiles_m, batch_stride_a=a_strides[-1] if batch else 0,
                         batch_stride_b=b_strides[-1] if batch else 0, batch_stride_d=M * N,
                         swizzle_log=swizzle_log, gemm_k_iterations_aligned=K // bk, batch_ndim=max(len(batch), 1))
        bound = {0: a, 1: b, 3: out, 4: params}
        if has_batch:
            bound[6] = _i32(*batch)
            bound[7] = _i64(*a_strides, *b_strides, *([0] * len(batch) if use_out_source else []))
        if use_out_source:
            alpha, beta = addmm
            c, c_v = _random(gen, (N,), dtype)          # a bias row: strides (0, 1) over (M, N), 0 over batches
            bound[2] = c
            bound[5] = _struct(GEMM_ADDMM_PARAMS, ldc=0, fdc=1, batch_stride_c=0, alpha=alpha, beta=beta)
            want = alpha * want + beta * c_v
        grid_tile = 1 << swizzle_log
        dev.dispatch_threadgroups(fn, (tiles_n * grid_tile, -(-tiles_m // grid_tile), nb), (32, wn, wm),
                                  _args(8, bound))
        return _check(out, want, dtype, scale=math.sqrt(K / 64) + 1)

    return Case(name, "steel_gemm_nax" if nax else "steel_gemm", run)


# -- rope ------------------------------------------------------------------------------------------------------------
def _block_dims(dim0: int, dim1: int, dim2: int, pow2: int = 10) -> tuple[int, int, int]:
    """MLX's get_block_dims (mlx/backend/metal/utils.cpp): a power-of-two threadgroup of at most 2**pow2."""
    pows, total = [0, 0, 0], 0
    while True:
        before = total
        for i, d in enumerate((dim0, dim1, dim2)):
            if d >= 1 << (pows[i] + 1):
                pows[i] += 1
                total += 1
            if total == 10:
                return 1 << pows[0], 1 << pows[1], 1 << pows[2]
        if total == before or total == pow2:
            return 1 << pows[0], 1 << pows[1], 1 << pows[2]


def _rope_reference(x: np.ndarray, positions: np.ndarray, base: float, scale: float, traditional: bool):
    """RoPE over the last axis of x (B, H, T, D); positions (B, T)."""
    D = x.shape[-1]
    inv_freq = base ** (-np.arange(D // 2) / (D // 2))
    theta = scale * positions[:, None, :, None] * inv_freq                       # (B, 1, T, D/2)
    cos, sin = np.cos(theta), np.sin(theta)
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if traditional else (x[..., :D // 2], x[..., D // 2:])
    r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    if traditional:
        return np.stack([r1, r2], axis=-1).reshape(x.shape)
    return np.concatenate([r1, r2], axis=-1)


def _rope_case(name: str, dtype: str, shape: tuple[int, int, int, int], traditional: bool,
               offsets: tuple[int, ...], base: float = 10000.0, scale: float = 1.0, seed: int = 0) -> Case:
    """MLX's fast::rope (RoPE::eval_gpu) on a row-contiguous (B, H, T, D) input rotating all D dims: the
    `rope_single_*` kernel when B == T == 1, else `rope_*` with one offset per batch (or one for all)."""

    def run(dev) -> Result:
        tname = _TYPES[dtype][0]
        B, H, T, D = shape
        single = B == 1 and T == 1
        host = f"rope_{'single_' if single else ''}{'traditional_' if traditional else ''}{tname}"
        fn = compile_source_file(dev, "rope.metal").function(host)
        gen = rng(seed)
        x, x_v = _random(gen, shape, dtype)
        out = _empty(shape, dtype)
        off = np.array(offsets, dtype=np.int32)
        positions = np.arange(T)[None, :] + (off[:, None] if len(offsets) > 1 else off[0])
        positions = np.broadcast_to(positions, (B, T))
        want = _rope_reference(x_v, positions.astype(np.float64), base, scale, traditional)
        dim0 = D // 2
        bound = {0: x, 1: out, 3: np.float32(scale), 10: np.float32(math.log2(base))}
        if single:
            bound.update({2: np.int32(offsets[0]), 4: np.int64(T * D)})
            grid = (dim0, H, 1)
        else:
            bound.update({2: off, 4: _i64(T * D, D, 1), 5: _i64(T * D, D, 1),
                          6: np.int64(1 if len(offsets) > 1 else 0), 7: np.int32(H)})
            grid = (dim0, T, B * -(-H // 4))             # 4 heads per thread (rope.cpp's n_per_thread)
        dev.dispatch_threads(fn, grid, _block_dims(*grid), _args(11, bound))
        return _check(out, want, dtype)

    return Case(name, "rope", run, needs_source=True)


# -- sdpa_vector -----------------------------------------------------------------------------------------------------
def _attention(q, k, v, scale: float, keep=True) -> np.ndarray:
    """softmax(scale * q k^T where `keep`) v over (B, H, L, D) arrays, kv heads shared by H / Hkv query heads."""
    g = q.shape[1] // k.shape[1]
    scores = np.where(keep, scale * np.einsum("bhqd,bhkd->bhqk", q, np.repeat(k, g, axis=1)), -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ np.repeat(v, g, axis=1)


def _sdpa_vector_case(name: str, dtype: str, B: int, Hq: int, Hkv: int, qL: int, N: int, D: int,
                      causal: bool = False, bool_mask: bool = False, seed: int = 0) -> Case:
    """Single-pass vector attention (`sdpa_vector`), as ScaledDotProductAttention::eval_gpu routes queries of
    at most 8 positions on a small device: row-contiguous q (B, Hq, qL, D), k and v (B, Hkv, N, D)."""

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        host = f"sdpa_vector_{tstr}_{D}_{D}"
        src = instantiation(["sdpa_vector.h"], [f'instantiate_kernel("{host}", sdpa_vector, {msl}, {D}, {D})'])
        constants = {20: bool_mask, 21: False, 22: causal, 23: bool_mask, 24: False, 25: False}
        fn = compile_mlx(dev, src, f"{host}.metal").function(host, constants=constants)
        gen = rng(seed)
        q, q_v = _random(gen, (B, Hq, qL, D), dtype)
        k, k_v = _random(gen, (B, Hkv, N, D), dtype)
        v, v_v = _random(gen, (B, Hkv, N, D), dtype)
        out = _empty((B, Hq, qL, D), dtype)
        scale = 1.0 / math.sqrt(D)
        gqa = Hq // Hkv
        keep = np.ones((B, Hq, qL, N), dtype=bool)
        if causal:
            keep &= np.arange(N)[None, :] <= (N - qL + np.arange(qL))[:, None]
        bound = {0: q, 1: k, 2: v, 3: out, 4: np.int32(gqa), 5: np.int32(N),
                 6: np.uint64(N * D), 7: np.uint64(D), 8: np.uint64(N * D), 9: np.uint64(D),
                 10: np.float32(scale)}
        if bool_mask:
            mask = gen.random((B, Hq, qL, N)) < 0.7
            mask[..., 0] = True                              # every row keeps a key
            keep &= mask
            bound.update({11: mask, 13: np.int32(1), 14: np.int32(N if qL > 1 else 0),
                          15: np.int32(qL * N if Hq > 1 else 0)})
        dev.dispatch_threadgroups(fn, (B * Hq, qL, 1), (1024, 1, 1), _args(18, bound))
        return _check(out, _attention(q_v, k_v, v_v, scale, keep), dtype)

    return Case(name, "sdpa_vector", run)


def _sdpa_vector_2pass_case(name: str, dtype: str, B: int, Hq: int, Hkv: int, qL: int, N: int, D: int,
                            blocks: int, seed: int = 0) -> Case:
    """Two-pass vector attention (`sdpa_vector_2pass_1` then `_2`), as MLX routes long keys on large ('d', 's')
    devices: each of `blocks` threadgroups per kv head scores every blocks-th key, the second pass merges them."""

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        one, two = f"sdpa_vector_2pass_1_{tstr}_{D}_{D}", f"sdpa_vector_2pass_2_{tstr}_{D}"
        src = instantiation(["sdpa_vector.h"], [
            f'instantiate_kernel("{one}", sdpa_vector_2pass_1, {msl}, {D}, {D})',
            f'instantiate_kernel("{two}", sdpa_vector_2pass_2, {msl}, {D})'])
        lib = compile_mlx(dev, src, f"{one}.metal")
        constants = {20: False, 21: False, 22: False, 23: False, 24: False, 25: False, 26: blocks}
        fn1, fn2 = lib.function(one, constants=constants), lib.function(two)
        gen = rng(seed)
        q, q_v = _random(gen, (B, Hq, qL, D), dtype)
        k, k_v = _random(gen, (B, Hkv, N, D), dtype)
        v, v_v = _random(gen, (B, Hkv, N, D), dtype)
        scale = 1.0 / math.sqrt(D)
        gqa = Hq // Hkv
        partials = _empty((B, Hq, qL, blocks, D), dtype)
        sums = np.full((B, Hq, qL, blocks), np.nan, np.float32)
        maxs = np.full((B, Hq, qL, blocks), np.nan, np.float32)
        bound = {0: q, 1: k, 2: v, 3: partials, 4: sums, 5: maxs, 7: np.int32(N), 8: np.uint64(N * D),
                 9: np.uint64(D), 10: np.uint64(N * D), 11: np.uint64(D), 12: np.float32(scale)}
        dev.dispatch_threadgroups(fn1, (Hkv, B, blocks), (32, gqa, qL), _args(19, bound))
        out = _empty((B, Hq, qL, D), dtype)
        dev.dispatch_threadgroups(fn2, (B * Hq, qL, 1), (1024, 1, 1), [partials, sums, maxs, out, np.int32(blocks)])
        return _check(out, _attention(q_v, k_v, v_v, scale), dtype)

    return Case(name, "sdpa_vector", run)


# -- steel attention -------------------------------------------------------------------------------------------------
ATTN_PARAMS = np.dtype([  # steel/attn/params.h AttnParams as MSL lays it out
    ("B", "<i4"), ("H", "<i4"), ("D", "<i4"), ("qL", "<i4"), ("kL", "<i4"), ("gqa_factor", "<i4"),
    ("scale", "<f4"), ("NQ", "<i4"), ("NK", "<i4"), ("NQ_aligned", "<i4"), ("NK_aligned", "<i4"),
    ("qL_rem", "<i4"), ("kL_rem", "<i4"), ("qL_off", "<i4"), ("Q_strides", "<i8", 3), ("K_strides", "<i8", 3),
    ("V_strides", "<i8", 3), ("O_strides", "<i8", 3)], align=True)
assert ATTN_PARAMS.itemsize == 152


def run_steel_attention(dev, header: str, kernel: str, dtype: str, tiles: tuple[int, int, int, int],
                        shape: tuple[int, int, int, int, int, int], causal: bool, seed: int):
    """MLX's full attention kernel `kernel` (from steel/attn/kernels/`header`.h) instantiated with blocks of `bq`
    queries and `bk` keys over `wm` x `wn` simdgroups (`tiles`), run as sdpa_full_self_attention dispatches it on
    random q, k, v of `shape` (B, H, Hkv, qL, kL, D): the output, the ((buffer, values) of q, k, v) and the scale.
    attention_nax_dsplit (its head dimension split over the wn simdgroups) takes no value dimension and has its
    own name prefix."""
    B, H, Hkv, qL, kL, D = shape
    bq, bk, wm, wn = tiles
    tname, msl, _ = _TYPES[dtype]
    dsplit = kernel.endswith("_dsplit")
    bv = "" if "_nax" in kernel else f"_bv{D}"
    prefix = "steel_attention_dsplit" if dsplit else "steel_attention"
    host = f"{prefix}_{tname}_bq{bq}_bk{bk}_bd{D}{bv}_wm{wm}_wn{wn}_mask{tname}"
    dims = f"{D}" if dsplit else f"{D}, {D}"
    src = instantiation([f"steel/attn/kernels/{header}.h"], [
        f'instantiate_kernel("{host}", {kernel}, {msl}, {bq}, {bk}, {dims}, {wm}, {wn}, {msl}, float)'])
    constants = {200: qL % bq == 0, 201: kL % bk == 0, 300: False, 301: causal, 302: False, 303: False}
    fn = compile_mlx(dev, src, f"{host}.metal").function(host, constants=constants)
    gen = rng(seed)
    q = _random(gen, (B, H, qL, D), dtype)
    k = _random(gen, (B, Hkv, kL, D), dtype)
    v = _random(gen, (B, Hkv, kL, D), dtype)
    out = _empty((B, H, qL, D), dtype)
    scale = 1.0 / math.sqrt(D)
    nq, nk = -(-qL // bq), -(-kL // bk)
    params = _struct(ATTN_PARAMS, B=B, H=H, D=D, qL=qL, kL=kL, gqa_factor=H // Hkv, scale=scale, NQ=nq, NK=nk,
                     NQ_aligned=qL // bq, NK_aligned=kL // bk, qL_rem=qL - (qL // bq) * bq,
                     kL_rem=kL - (kL // bk) * bk, qL_off=kL - qL, Q_strides=(H * qL * D, qL * D, D),
                     K_strides=(Hkv * kL * D, kL * D, D), V_strides=(Hkv * kL * D, kL * D, D),
                     O_strides=(H * qL * D, qL * D, D))
    dev.dispatch_threadgroups(fn, (nq, H, B), (32, wm, wn), [q[0], k[0], v[0], out, params])
    return out, (q, k, v), scale


def _steel_attention_case(name: str, dtype: str, B: int, H: int, Hkv: int, qL: int, kL: int, D: int,
                          causal: bool = False, seed: int = 0) -> Case:
    """Full attention with `steel_attention` (sdpa_full_self_attention_metal): queries in blocks of 32 per
    threadgroup of 4 simdgroups, keys in blocks of 32 (16 from head dim 128)."""

    def run(dev) -> Result:
        bk = 32 if D < 128 else 16
        out, (q, k, v), scale = run_steel_attention(dev, "steel_attention", "attention", dtype, (32, bk, 4, 1),
                                                    (B, H, Hkv, qL, kL, D), causal, seed)
        keep = np.arange(kL)[None, :] <= (np.arange(qL) + kL - qL)[:, None] if causal else True
        return _check(out, _attention(q[1], k[1], v[1], scale, keep), dtype)

    return Case(name, "steel_attention", run)


# -- steel conv ------------------------------------------------------------------------------------------------------
CONV2D_PARAMS = np.dtype([  # steel/conv/params.h MLXConvParams<2>
    ("N", "<i4"), ("C", "<i4"), ("O", "<i4"), ("iS", "<i4", 2), ("wS", "<i4", 2), ("oS", "<i4", 2),
    ("str", "<i4", 2), ("pad", "<i4", 2), ("kdil", "<i4", 2), ("idil", "<i4", 2), ("in_strides", "<i8", 4),
    ("wt_strides", "<i8", 4), ("out_strides", "<i8", 4), ("groups", "<i4"), ("flip", "?")], align=True)
IMPLICIT_GEMM_CONV2D_PARAMS = np.dtype([(f, "<i4") for f in (
    "M", "N", "K", "gemm_k_iterations", "inp_jump_w", "inp_jump_h", "inp_jump_c", "tiles_n", "tiles_m",
    "swizzle_log")])
assert CONV2D_PARAMS.itemsize == 176 and IMPLICIT_GEMM_CONV2D_PARAMS.itemsize == 40


def _conv2d_case(name: str, dtype: str, N: int, H: int, W: int, C: int, O: int, kernel: tuple[int, int],
                 stride: tuple[int, int], pad: tuple[int, int], seed: int = 0) -> Case:
    """NHWC conv2d with OHWC weights by `implicit_gemm_conv_2d` (implicit_gemm_conv_2D_gpu), where MLX's
    dispatch_conv_2D_gpu sends it: no input dilation, C <= 4 or a multiple of 16, O <= 16 or a multiple of 16,
    too small for Winograd."""

    def run(dev) -> Result:
        tname, msl, _ = _TYPES[dtype]
        kh, kw = kernel
        oh, ow = (H + 2 * pad[0] - kh) // stride[0] + 1, (W + 2 * pad[1] - kw) // stride[1] + 1
        gm, gn, gk = N * oh * ow, O, kh * kw * C
        wm, wn, bk = 2, 2, 16
        bm = 64 if gm >= 8192 and C >= 64 else 32
        bn = 64 if bm == 64 or gn >= 64 else 32
        if gn <= 16:
            bn, wm, wn = 8, 4, 1
        channels = C if C <= 4 else 0
        k_iters = kh * kw * -(-C // bk)
        if channels:
            k_iters = -(-gk // bk) if C <= 2 else -(-(kh * kw * 4) // bk)
        small_filter = not channels and kh <= 16 and kw <= 16
        host = (f"implicit_gemm_conv_2d_{tname}_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}_channel_{channels or 'l'}"
                f"_filter_{'s' if small_filter else 'l'}")
        src = instantiation(["steel/conv/conv.h", "steel/conv/kernels/steel_conv.h"], [
            f'instantiate_kernel("{host}", implicit_gemm_conv_2d, {msl}, {bm}, {bn}, {bk}, {wm}, {wn}, {channels}, '
            f'{str(small_filter).lower()})'])
        fn = compile_mlx(dev, src, f"{host}.metal").function(host)
        gen = rng(seed)
        x, x_v = _random(gen, (N, H, W, C), dtype)
        w, w_v = _random(gen, (O, kh, kw, C), dtype)
        out = _empty((N, oh, ow, O), dtype)
        in_strides, wt_strides = (H * W * C, W * C, C, 1), (kh * kw * C, kw * C, C, 1)
        conv = _struct(CONV2D_PARAMS, N=N, C=C, O=O, iS=(H, W), wS=(kh, kw), oS=(oh, ow), str=stride, pad=pad,
                       kdil=(1, 1), idil=(1, 1), in_strides=in_strides, wt_strides=wt_strides,
                       out_strides=(oh * ow * O, ow * O, O, 1), groups=1, flip=False)
        ijw, ijh = in_strides[2], in_strides[1]
        tn, tm = -(-gn // bn), -(-gm // bm)
        gemm = _struct(IMPLICIT_GEMM_CONV2D_PARAMS, M=gm, N=gn, K=gk, gemm_k_iterations=k_iters, inp_jump_w=ijw,
                       inp_jump_h=ijh - (kw - 1) * ijw, inp_jump_c=bk - (kh - 1) * ijh - (kw - 1) * ijw,
                       tiles_n=tn, tiles_m=tm, swizzle_log=0)
        dev.dispatch_threadgroups(fn, (tn, tm, 1), (32, wn, wm), [x, w, out, conv, gemm])
        padded = np.pad(x_v, ((0, 0), (pad[0], pad[0]), (pad[1], pad[1]), (0, 0)))
        want = np.zeros((N, oh, ow, O))
        for i in range(kh):
            for j in range(kw):
                patch = padded[:, i:i + stride[0] * (oh - 1) + 1:stride[0], j:j + stride[1] * (ow - 1) + 1:stride[1]]
                want += np.einsum("nhwc,oc->nhwo", patch, w_v[:, i, j, :])
        return _check(out, want, dtype, scale=math.sqrt(gk / 64) + 1)

    return Case(name, "steel_conv", run)


# Tile shapes: those matmul.cpp's GEMM_TPARAM_MACRO picks on a small ('g'/'p') device, which MLX's
# steel_gemm_fused.metal instantiates: float nn (64, 64, 16, 2, 2); any nt (64, 32, 32, 2, 2); half and bfloat
# nn (64, 64, 16, 1, 2); and the (32, 32, 16, 2, 2) tile of the medium list.
CASES: list[Case] = [
    _gemv_case("gemv_float32", "float32", False, in_len=200, out_len=37),
    _gemv_case("gemv_float32_k_long", "float32", False, in_len=1100, out_len=40),      # bm1 bn8: tgp reduction
    _gemv_case("gemv_float16_small_k_batched", "float16", False, in_len=48, out_len=3, batch=3),
    _gemv_case("gemv_t_float32", "float32", True, in_len=150, out_len=70),
    _gemv_case("gemv_t_float32_narrow", "float32", True, in_len=70, out_len=3),
    _gemv_case("gemv_t_bfloat16", "bfloat16", True, in_len=96, out_len=600),
    _gemv_case("gemv_t_float16_axpby", "float16", True, in_len=64, out_len=45, axpby=(2.0, 0.5)),
    _steel_gemm_case("steel_gemm_fused_nn_float32_aligned", "float32", 64, 128, 32, (64, 64, 16, 2, 2)),
    _steel_gemm_case("steel_gemm_fused_nn_float32_ragged", "float32", 70, 45, 37, (64, 64, 16, 2, 2)),
    _steel_gemm_case("steel_gemm_fused_nt_float32_ragged", "float32", 33, 50, 70, (64, 32, 32, 2, 2), "nt"),
    _steel_gemm_case("steel_gemm_fused_tn_float32_batched", "float32", 40, 24, 20, (32, 32, 16, 2, 2), "tn",
                     batch=(3,)),
    _steel_gemm_case("steel_gemm_fused_tt_float32_has_batch", "float32", 20, 36, 17, (32, 32, 16, 2, 2), "tt",
                     batch=(2, 2), broadcast_b=True),
    _steel_gemm_case("steel_gemm_fused_nn_float16_ragged", "float16", 65, 70, 50, (64, 64, 16, 1, 2)),
    _steel_gemm_case("steel_gemm_fused_nt_bfloat16_ragged", "bfloat16", 50, 40, 72, (64, 32, 32, 2, 2), "nt"),
    _steel_gemm_case("addmm_nn_float32_axpby", "float32", 70, 45, 37, (64, 64, 16, 2, 2), addmm=(2.0, 0.5)),
    _steel_gemm_case("addmm_nt_float16_add", "float16", 64, 64, 64, (64, 32, 32, 2, 2), "nt", addmm=(1.0, 1.0)),
    _rope_case("rope_float32", "float32", (2, 5, 7, 16), False, offsets=(3, 11)),
    _rope_case("rope_traditional_float16", "float16", (1, 3, 6, 32), True, offsets=(5,)),
    _rope_case("rope_single_bfloat16", "bfloat16", (1, 6, 1, 64), False, offsets=(9,)),
    _sdpa_vector_case("sdpa_vector_float32_gqa", "float32", 1, 4, 2, 1, 37, 64),
    _sdpa_vector_case("sdpa_vector_float16_causal", "float16", 2, 2, 2, 3, 45, 128, causal=True),
    _sdpa_vector_case("sdpa_vector_bfloat16_bool_mask", "bfloat16", 1, 2, 1, 2, 33, 64, bool_mask=True),
    # blocks as sdpa_vector_2pass picks them: 128 on a 'd' device (two simdgroups per kv head, N <= 8192), 64 on
    # an 's' device (at most 4 simdgroups per kv head); MLX takes two passes from 1024 keys on either
    _sdpa_vector_2pass_case("sdpa_vector_2pass_float32_gqa", "float32", 1, 4, 2, 1, 1100, 64, blocks=128),
    _sdpa_vector_2pass_case("sdpa_vector_2pass_float16", "float16", 1, 2, 2, 2, 1030, 128, blocks=64),
    _steel_attention_case("steel_attention_float32_ragged", "float32", 1, 2, 1, 40, 45, 64),
    _steel_attention_case("steel_attention_float16_causal", "float16", 2, 2, 2, 33, 50, 128, causal=True),
    _conv2d_case("implicit_gemm_conv_2d_float32", "float32", 2, 9, 10, 16, 32, (3, 3), (1, 1), (1, 1)),
    _conv2d_case("implicit_gemm_conv_2d_float16_small_channels", "float16", 1, 11, 7, 3, 8, (5, 3), (2, 2),
                 (2, 1)),
]
