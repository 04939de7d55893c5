"""MLX's NAX GEMM variants besides the fused one: split-K (steel_gemm_splitk_nax and its accumulation kernel),
gather on the right-hand side (gather_mm_rhs_nax, and gather_mm_rhs, the simdgroup-matrix kernel MLX takes without
the accelerators) and segmented matmul (segmented_mm_nax).

Each case dispatches its kernel as mlx/backend/metal/matmul.cpp does (`steel_gemm_splitk_axpby_nax`,
`gather_mm_rhs_nax`, `segmented_mm`): kernel name, template arguments, function constants, buffers, parameter
structs and grid. All three run `gemm_loop` of steel/gemm/gemm_nax.h, whose matmul2d asks for relaxed precision, so
the float32 references multiply inputs cut to TF32 (`tf32`).
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.mlx_kernels.cases_matmul import (
    _TYPES,
    GEMM_PARAMS,
    _args,
    _block_dims,
    _check,
    _empty,
    _random,
    _struct,
    tf32,
)
from benchmarks.mlx_kernels.common import Case, Result, compile_mlx, instantiation, rng

GEMM_SPLITK_PARAMS = np.dtype([(f, "<i4") for f in (  # steel/gemm/params.h GEMMSpiltKParams
    "M", "N", "K", "lda", "ldb", "ldc", "tiles_n", "tiles_m", "split_k_partitions", "split_k_partition_stride",
    "split_k_partition_size", "swizzle_log", "gemm_k_iterations_aligned")])


def _operands(gen, dtype: str, a_shape, b_shape, tf32_inputs: bool = True):
    """Random A and B on the device and the values the kernel multiplies (cut to TF32 for float32 when
    `tf32_inputs`: a NAX kernel's matmul2d asks for relaxed precision)."""
    a, a_v = _random(gen, a_shape, dtype)
    b, b_v = _random(gen, b_shape, dtype)
    if dtype == "float32" and tf32_inputs:
        a_v, b_v = tf32(a).astype(np.float64), tf32(b).astype(np.float64)
    return a, a_v, b, b_v


def _splitk_nax_case(name: str, dtype: str, M: int, N: int, K: int, trans: str = "nn",
                     addmm: tuple[float, float] | None = None, seed: int = 0) -> Case:
    """D = A @ B (or alpha * A @ B + beta * C) by split-K, as steel_gemm_splitk_axpby_nax dispatches it (matmul
    takes it for one batch with K >= 3 max(M, N), or max(M, N) <= 1024 and K > 2 max(M, N)): 64 x 64 x 256 tiles
    below 512 mean rows and columns or K <= 4096, else 128 x 128 x 512; partitions of K / 2 up to K = 1024 (1024
    up to 2048, 2048 up to 4096, else 4096), the last one ragged; float partial sums (partitions, M, N) from a
    1-D grid, partition-major, of swizzled tiles; then steel_gemm_splitk_accum(_axbpy) sums them per element."""

    def run(dev) -> Result:
        tname, msl, _ = _TYPES[dtype]
        ta, tb = trans[0] == "t", trans[1] == "t"
        big = not ((M + N) // 2 < 512 or K <= 4096)
        bm, bn, bk, wm, wn = (128, 128, 512, 4, 4) if big else (64, 64, 256, 2, 2)
        psize = K // 2 if K <= 1024 else 1024 if K <= 2048 else 2048 if K <= 4096 else 4096
        parts = -(-K // psize)
        base = f"steel_gemm_splitk_nax_{trans}_{tname}_float32_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}"
        src = instantiation(["steel/gemm/gemm_nax.h", "steel/gemm/kernels/steel_gemm_splitk_nax.h"], [
            f'instantiate_kernel("{base}", gemm_splitk_nax, {msl}, {bm}, {bn}, {bk}, {wm}, {wn}, '
            f'{str(ta).lower()}, {str(tb).lower()})'])
        fn = compile_mlx(dev, src, f"{base}.metal").function(base, constants={200: M % bm == 0, 201: N % bn == 0})
        do_axpby = addmm is not None and (addmm[0] != 1.0 or addmm[1] != 0.0)
        accum = f"steel_gemm_splitk_accum_{tname}_float32" + ("_axbpy" if do_axpby else "")
        acc_src = instantiation(["steel/gemm/gemm.h", "steel/gemm/kernels/steel_gemm_splitk.h"], [
            f'instantiate_kernel("{accum}", gemm_splitk_accum{"_axpby" if do_axpby else ""}, float, {msl})'])
        acc_fn = compile_mlx(dev, acc_src, f"{accum}.metal").function(accum)

        gen = rng(seed)
        a, a_v, b, b_v = _operands(gen, dtype, (K, M) if ta else (M, K), (N, K) if tb else (K, N))
        want = (a_v.T if ta else a_v) @ (b_v.T if tb else b_v)
        tn, tm = -(-N // bn), -(-M // bm)
        swizzle_log = 0 if tm <= 3 else 1
        tile = 1 << swizzle_log
        params = _struct(GEMM_SPLITK_PARAMS, M=M, N=N, K=K, lda=a.shape[-1], ldb=b.shape[-1], ldc=N, tiles_n=tn,
                         tiles_m=tm, split_k_partitions=parts, split_k_partition_stride=M * N,
                         split_k_partition_size=psize, swizzle_log=swizzle_log, gemm_k_iterations_aligned=psize // bk)
        c_split = np.full((parts, M, N), np.nan, np.float32)
        dev.dispatch_threadgroups(fn, (tn * tile * -(-tm // tile) * parts, 1, 1), (32, wn, wm),
                                  [a, b, c_split, params])
        out = _empty((M, N), dtype)
        args = [c_split, out, np.int32(parts), np.int32(M * N), np.int32(N)]
        if do_axpby:
            alpha, beta = addmm
            c, c_v = _random(gen, (N,), dtype)          # a bias row: ldc 0, fdc 1
            args += [c, np.int32(0), np.int32(1), np.float32(alpha), np.float32(beta)]
            want = alpha * want + beta * c_v
        dev.dispatch_threads(acc_fn, (N, M, 1), _block_dims(N, M, 1), args)
        return _check(out, want, dtype, scale=math.sqrt(K / 64) + 1)

    return Case(name, "steel_gemm_nax", run)


def _gather_rhs_case(name: str, dtype: str, M: int, N: int, K: int, groups: int, transpose_b: bool = False,
                     nax: bool = True, seed: int = 0) -> Case:
    """out[i] = a[i] @ b[idx[i]] for M rows of one vector each and sorted `idx`, as GatherMM takes gather_mm_rhs_nax
    (`nax`) or gather_mm_rhs (M == 1, right_sorted). NAX: 128-column tiles with K in steps of 128, 16, 32 or 64
    rows per tile (M / groups above 48 -> 64, above 24 -> 32), four simdgroups across; plain: 16 x 64 tiles, K in
    steps of 16, two simdgroups. Each tile's rows and group are found by schedule_row_tile from the group offsets,
    tiles_m = min(M, ceil(M / bm) + groups - 1). The offsets (first row of each group) are what MLX's
    gather_mm_offsets kernel writes from the sorted indices."""

    def run(dev) -> Result:
        tname, _, tstr = _TYPES[dtype]
        per = M // groups
        if nax:
            bm, wm = (64, 2) if per > 48 else (32, 1) if per > 24 else (16, 1)
            bn, bk, wn = 128, 128, 4
        else:
            bm, bn, bk, wm, wn = 16, 64, 16, 1, 2
        tb = "t" if transpose_b else "n"
        kernel = "gather_mm_rhs_nax" if nax else "gather_mm_rhs"
        base = f"steel_{kernel}_n{tb}_{tname}_{tname}_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}"
        headers = (["steel/gemm/gemm_nax.h", "steel/gemm/kernels/steel_gemm_gather_nax.h"] if nax
                   else ["steel/gemm/gemm.h", "steel/gemm/kernels/steel_gemm_gather.h"])
        src = instantiation(headers, [
            f'instantiate_kernel("{base}", {kernel}, {tstr}, {bm}, {bn}, {bk}, {wm}, {wn}, false, '
            f'{str(transpose_b).lower()})'])
        fn = compile_mlx(dev, src, f"{base}.metal").function(
            base, constants={200: M % bm == 0, 201: N % bn == 0, 202: K % bk == 0})
        gen = rng(seed)
        idx = np.sort(gen.integers(0, groups, size=M))
        idx[idx == 1] = 2                               # one group owns no rows
        a, a_v, b, b_v = _operands(gen, dtype, (M, K), (groups, N, K) if transpose_b else (groups, K, N),
                                   tf32_inputs=nax)
        b_m = np.swapaxes(b_v, -1, -2) if transpose_b else b_v
        want = np.einsum("mk,mkn->mn", a_v, b_m[idx])
        offsets = np.searchsorted(idx, np.arange(groups), "left").astype(np.int32)
        out = _empty((M, N), dtype)
        tiles_n, tiles_m = -(-N // bn), min(M, -(-M // bm) + groups - 1)
        params = _struct(GEMM_PARAMS, M=M, N=N, K=K, lda=K, ldb=b.shape[-1], ldd=N, tiles_n=tiles_n,
                         tiles_m=tiles_m, batch_stride_b=N * K, gemm_k_iterations_aligned=K // bk, batch_ndim=0)
        dev.dispatch_threadgroups(fn, (tiles_n, tiles_m, 1), (32, wn, wm),
                                  [a, b, offsets, out, params, np.int32(groups)])
        return _check(out, want, dtype, scale=math.sqrt(K / 64) + 1)

    return Case(name, "steel_gemm_nax" if nax else "steel_gemm", run)


def _segmented_nax_case(name: str, dtype: str, M: int, N: int, K: int, bounds: tuple[int, ...], trans: str = "nn",
                        contiguous: bool = True, seed: int = 0) -> Case:
    """out[s] = A[:, k0:k1] @ B[k0:k1, :] for each segment s, as segmented_mm dispatches segmented_mm_nax:
    64 x 64 tiles of (32, 2, 2) threads, bk 256, 128 or 64 by the mean segment length, the grid (segments, tn, tm)
    for bk 64 and (tn, tm, segments) otherwise. Segments as (S, 2) pairs (segments_contiguous), or, as MLX reads a
    view of a boundary list with both strides 1, as the S + 1 boundaries."""

    def run(dev) -> Result:
        tname, _, tstr = _TYPES[dtype]
        ta, tb = trans[0] == "t", trans[1] == "t"
        segs = len(bounds) - 1
        avg = K // segs
        bk = 256 if avg >= 256 else 128 if avg >= 128 else 64
        bm, bn, wm, wn = 64, 64, 2, 2
        base = f"steel_segmented_mm_nax_{trans}_{tname}_{tname}_bm{bm}_bn{bn}_bk{bk}_wm{wm}_wn{wn}"
        src = instantiation(["steel/gemm/gemm_nax.h", "steel/gemm/kernels/steel_gemm_segmented_nax.h"], [
            f'instantiate_kernel("{base}", segmented_mm_nax, {tstr}, {bm}, {bn}, {bk}, {wm}, {wn}, '
            f'{str(ta).lower()}, {str(tb).lower()})'])
        fn = compile_mlx(dev, src, f"{base}.metal").function(
            base, constants={199: contiguous, 200: M % bm == 0, 201: N % bn == 0})
        gen = rng(seed)
        a, a_v, b, b_v = _operands(gen, dtype, (K, M) if ta else (M, K), (N, K) if tb else (K, N))
        a_m, b_m = (a_v.T if ta else a_v), (b_v.T if tb else b_v)
        want = np.stack([a_m[:, k0:k1] @ b_m[k0:k1] for k0, k1 in zip(bounds[:-1], bounds[1:])])
        pairs = np.array(list(zip(bounds[:-1], bounds[1:])), np.uint32)
        segments = pairs if contiguous else np.array(bounds, np.uint32)
        out = _empty((segs, M, N), dtype)
        tiles_n, tiles_m = -(-N // bn), -(-M // bm)
        params = _struct(GEMM_PARAMS, M=M, N=N, K=K, lda=a.shape[-1], ldb=b.shape[-1], ldd=N, tiles_n=tiles_n,
                         tiles_m=tiles_m, batch_stride_d=M * N)
        grid = (segs, tiles_n, tiles_m) if bk == 64 else (tiles_n, tiles_m, segs)
        dev.dispatch_threadgroups(fn, grid, (32, wn, wm), _args(5, {0: a, 1: b, 2: segments, 3: out, 4: params}))
        return _check(out, want, dtype, scale=math.sqrt(K / 64) + 1)

    return Case(name, "steel_gemm_nax", run)


CASES: list[Case] = [
    _splitk_nax_case("steel_gemm_splitk_nax_nn_float16_ragged", "float16", 40, 70, 601),
    _splitk_nax_case("steel_gemm_splitk_nax_nt_float32_aligned", "float32", 64, 64, 1024, "nt"),
    _splitk_nax_case("steel_gemm_splitk_nax_tn_bfloat16_axpby", "bfloat16", 300, 50, 1500, "tn", addmm=(2.0, 0.5)),
    _segmented_nax_case("steel_segmented_mm_nax_nn_float16_bk64", "float16", 70, 45, 300, (0, 100, 100, 300)),
    _segmented_nax_case("steel_segmented_mm_nax_nt_float32_bk256", "float32", 64, 70, 800, (0, 300, 520, 800), "nt",
                        contiguous=False),
    _segmented_nax_case("steel_segmented_mm_nax_tn_bfloat16_bk128", "bfloat16", 40, 64, 300, (0, 130, 300), "tn"),
    # gather_mm_rhs_nax calls schedule_row_tile (simd_prefix_inclusive_sum, simd_sum, simd_shuffle) as the right
    # operand of `||`, after `params->tiles_n <= static_cast<int>(tid.x)`, which every lane computes alike
    _gather_rhs_case("steel_gather_mm_rhs_nax_nn_float16_ragged", "float16", 70, 150, 200, 4),
    _gather_rhs_case("steel_gather_mm_rhs_nax_nt_bfloat16_64rows", "bfloat16", 200, 128, 256, 3, transpose_b=True),
    _gather_rhs_case("steel_gather_mm_rhs_nn_float32_ragged", "float32", 70, 150, 200, 4, nax=False),
    _gather_rhs_case("steel_gather_mm_rhs_nt_float16", "float16", 96, 128, 64, 3, transpose_b=True, nax=False),
]
