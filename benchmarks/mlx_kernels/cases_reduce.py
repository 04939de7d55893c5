"""MLX's reductions, scans, sorts, logsumexp and fp8 conversions, dispatched as `mlx/backend/metal/{reduce,scan,
sort,logsumexp,unary}.cpp` do, with instantiation lines of our own naming MLX's templates from the shipped headers.
"""

from __future__ import annotations

import numpy as np

from benchmarks.mlx_kernels.cases_rows import MAX_TG, case, ceildiv, library, np_type, random, unary_work_per_thread
from benchmarks.mlx_kernels.common import Result, check_close, check_equal, rng

REDUCE_N_READS = 4
REDUCE_N_WRITES = 4
_REDUCE_HEADERS = ("atomic.h", "reduction/ops.h", "reduce.h")
_REDUCE = (
    'instantiate_kernel("all_reduce_sumfloat32", all_reduce, float, float, Sum<float>)',
    'instantiate_kernel("all_reduce_sumint8", all_reduce, int8_t, int32_t, Sum<int32_t>)',
    'instantiate_kernel("all_reduce_sumint32", all_reduce, int32_t, int32_t, Sum<int32_t>)',
    'instantiate_kernel("all_reduce_maxfloat16", all_reduce, half, half, Max<half>)',
    'instantiate_kernel("row_reduce_simple_sumfloat32", row_reduce_simple, float, float, Sum<float>)',
    'instantiate_kernel("row_reduce_simple_maxfloat16", row_reduce_simple, half, half, Max<half>)',
    'instantiate_kernel("row_reduce_looped_1_reduce_sumfloat32", row_reduce_looped, float, float, Sum<float>, '
    'int, 1)',
)


def _reduce_fn(dev, name: str):
    return library(dev, "reduce.metal", _REDUCE_HEADERS, _REDUCE).function(name)


def _all_reduce_pass(dev, fn, x: np.ndarray, out: np.ndarray, in_size: int, row_size: int, n_rows: int, tg: int):
    dev.dispatch_threads(fn, (tg, n_rows, 1), (tg, 1, 1), [x, out, np.uint64(in_size), np.uint64(row_size)])


def run_all_reduce(dev, op: str, tname: str, size: int, out_tname: str | None = None) -> Result:
    """MLX's all_reduce: one threadgroup up to 4096 elements, else 128 rows then one simdgroup over them (with the
    kernel of the partial results' type)."""
    fn = _reduce_fn(dev, f"all_reduce_{op}{tname}")
    out_dtype = np_type(out_tname or tname)
    if tname == "int8":
        x = rng(size).integers(-128, 128, size=size).astype(np.int8)
    else:
        x = random(size, tname, seed=size)
    out = np.zeros(1, out_dtype)
    if size <= REDUCE_N_READS * 1024:
        tg = ceildiv(ceildiv(size, REDUCE_N_READS), 32) * 32
        _all_reduce_pass(dev, fn, x, out, size, size, 1, tg)
    else:
        n_rows = 32 * REDUCE_N_READS                      # inputs up to 2**26 bytes
        row_size = ceildiv(size, n_rows)
        tg = ceildiv(min(ceildiv(row_size, REDUCE_N_READS), 1024), 32) * 32
        partial = np.zeros(n_rows, out_dtype)
        _all_reduce_pass(dev, fn, x, partial, size, row_size, n_rows, tg)
        second = _reduce_fn(dev, f"all_reduce_{op}{out_tname or tname}")
        _all_reduce_pass(dev, second, partial, out, n_rows, n_rows, 1, 32)
    x64 = x.astype(np.float64)
    if op == "max":
        return check_equal(out, np.array([x.max()], out_dtype))
    if tname == "int8":
        return check_equal(out, np.array([x.astype(np.int64).sum()], out_dtype))
    return check_close(out, np.array([x64.sum()]), 1e-5, 1e-5 * np.abs(x64).sum())


def _row_tg(row_size: int) -> int:
    """MLX's threadgroup size for a row reduction: one simdgroup up to 512, four up to 1024, then one per 128."""
    if row_size <= 512:
        return 32
    if row_size <= 1024:
        return 128
    return min(1024, ceildiv(row_size, REDUCE_N_READS * 32) * 32)


def run_row_reduce_simple(dev, op: str, tname: str, rows: int, row_size: int) -> Result:
    fn = _reduce_fn(dev, f"row_reduce_simple_{op}{tname}")
    x = random((rows, row_size), tname, seed=rows)
    out = np.zeros(rows, x.dtype)
    tg = _row_tg(row_size)
    dev.dispatch_threads(fn, (tg, ceildiv(rows, REDUCE_N_WRITES), 1), (tg, 1, 1),
                         [x, out, np.uint64(row_size), np.int64(rows)])
    if op == "max":
        return check_equal(out, x.max(axis=1))
    x64 = x.astype(np.float64)
    return check_close(out, x64.sum(axis=1), 1e-5, 1e-5 * np.abs(x64).sum(axis=1).max())


def run_row_reduce_looped(dev) -> Result:
    """Sum over axes 0 and 2 of a (5, 7, 300) array: rows of 300 along axis 2, looped over axis 0."""
    x = random((5, 7, 300), "float32", seed=11)
    fn = _reduce_fn(dev, "row_reduce_looped_1_reduce_sumfloat32")
    out = np.zeros(7, np.float32)
    tg = _row_tg(300)
    args = [x, out, np.int64(300), np.int64(5),
            np.array([7], np.int32), np.array([300], np.int64), np.int32(1),
            np.array([5], np.int32), np.array([2100], np.int64), np.int32(1)]
    dev.dispatch_threads(fn, (tg, 7, 1), (tg, 1, 1), args)
    x64 = x.astype(np.float64)
    return check_close(out, x64.sum(axis=(0, 2)), 1e-5, 1e-5 * np.abs(x64).sum(axis=(0, 2)).max())


# -- scan (mlx/backend/metal/scan.cpp) -------------------------------------------------------------------------------
def _scan_line(name: str, kernel: str, itype: str, otype: str, op: str, inclusive: bool, reverse: bool) -> str:
    n_reads = 4 if itype not in ("int64_t", "uint64_t") else 2
    flags = f"{str(inclusive).lower()}, {str(reverse).lower()}"
    return f'instantiate_kernel("{name}", {kernel}, {itype}, {otype}, {op}<{otype}>, {n_reads}, {flags})'


_SCAN = (
    _scan_line("contig_scan_inclusive_sum_float32_float32", "contiguous_scan", "float", "float", "CumSum", True,
               False),
    _scan_line("contig_scan_exclusive_sum_int32_int32", "contiguous_scan", "int32_t", "int32_t", "CumSum", False,
               False),
    _scan_line("contig_scan_reverse_inclusive_max_float16_float16", "contiguous_scan", "half", "half", "CumMax",
               True, True),
    _scan_line("contig_scan_reverse_exclusive_sum_float32_float32", "contiguous_scan", "float", "float", "CumSum",
               False, True),
    _scan_line("strided_scan_inclusive_sum_float32_float32", "strided_scan", "float", "float", "CumSum", True,
               False),
)


def _scan_fn(dev, name: str):
    return library(dev, "scan.metal", ("binary_ops.h", "scan.h"), _SCAN).function(name)


def _scan_reference(x: np.ndarray, op: str, inclusive: bool, reverse: bool, axis: int) -> np.ndarray:
    x64 = np.flip(x, axis) if reverse else x
    x64 = x64.astype(np.float64) if x.dtype.kind == "f" else x64.astype(np.int64)
    acc = np.cumsum(x64, axis=axis) if op == "sum" else np.maximum.accumulate(x64, axis=axis)
    if not inclusive:
        init = 0 if op == "sum" else -np.inf
        acc = np.concatenate([np.full_like(np.take(acc, [0], axis=axis), init),
                              np.delete(acc, -1, axis=axis)], axis=axis)
    return np.flip(acc, axis) if reverse else acc


def run_contiguous_scan(dev, op: str, tname: str, rows: int, size: int, inclusive: bool, reverse: bool):
    name = ("contig_scan_" + ("reverse_" if reverse else "") + ("inclusive_" if inclusive else "exclusive_")
            + f"{op}_{tname}_{tname}")
    fn = _scan_fn(dev, name)
    if tname == "int32":
        x = rng(size).integers(-1000, 1000, size=(rows, size)).astype(np.int32)
    else:
        x = random((rows, size), tname, seed=size, low=-1.0, high=1.0)
    n_reads = 4 if x.itemsize <= 4 else 2
    per_simd = n_reads * 32
    tg = MAX_TG
    if size <= n_reads * 1024:
        tg = ceildiv(size, per_simd) * 32
    elif size <= n_reads * 2048:
        tg = ceildiv(size // 2, per_simd) * 32
    tg = min(tg, MAX_TG)
    out = np.zeros_like(x)
    dev.dispatch_threads(fn, (tg, rows, 1), (tg, 1, 1), [x, out, np.uint64(size)])
    want = _scan_reference(x, op, inclusive, reverse, axis=1)
    if tname == "int32":
        return check_equal(out, want.astype(np.int32))
    if op == "max":
        return check_equal(out, want.astype(x.dtype))
    return check_close(out, want, 1e-5, 1e-5 * size)


def run_strided_scan(dev) -> Result:
    """cumsum along axis 1 of a (3, 40, 37) array: the axis has stride 37, scanned in 32-wide column blocks."""
    x = random((3, 40, 37), "float32", seed=12, low=-1.0, high=1.0)
    fn = _scan_fn(dev, "strided_scan_inclusive_sum_float32_float32")
    size, stride = 40, 37
    bn, n_reads = 32, 4
    stride_blocks = ceildiv(stride, bn)
    tg = (bn // n_reads) * 32
    out = np.zeros_like(x)
    dev.dispatch_threads(fn, (tg, 3 * stride_blocks, 1), (tg, 1, 1),
                         [x, out, np.uint64(size), np.uint64(stride), np.uint64(stride_blocks)])
    return check_close(out, _scan_reference(x, "sum", True, False, axis=1), 1e-5, 1e-5 * size)


# -- sort (mlx/backend/metal/sort.cpp) -------------------------------------------------------------------------------
_SORT = (
    'instantiate_kernel("c_block_sort_float32_float32_bn64_tn4", block_sort, float, float, false, 64, 4)',
    'instantiate_kernel("carg_block_sort_int32_uint32_bn128_tn4", block_sort, int32_t, uint32_t, true, 128, 4)',
    'instantiate_kernel("ncarg_block_sort_float16_uint32_bn32_tn4", block_sort_nc, half, uint32_t, true, 32, 4)',
    'instantiate_kernel("sort_mbsort_float32_uint32_bn512_tn4", mb_block_sort, float, uint32_t, true, 512, 4)',
    'instantiate_kernel("partition_mbsort_float32_uint32_bn512_tn4", mb_block_partition, float, uint32_t, true, '
    '512, 4)',
    'instantiate_kernel("merge_mbsort_float32_uint32_bn512_tn4", mb_block_merge, float, uint32_t, true, 512, 4)',
)


def _sort_fn(dev, name: str):
    return library(dev, "sort.metal", ("sort.h",), _SORT).function(name)


def _sort_bn(size: int, itemsize: int) -> int:
    """MLX's block size for a merge sort of `size` elements, four per thread."""
    potential = ceildiv(size, 4)
    bn = 32
    for limit, b in ((256, 512), (128, 256), (64, 128), (32, 64)):
        if potential > limit:
            bn = b
            break
    return 256 if bn == 512 and itemsize > 4 else bn


def _check_argsort(idx: np.ndarray, x: np.ndarray, axis: int) -> Result:
    """Stable argsort indices must equal numpy's stable argsort (the merge sort is stable)."""
    return check_equal(idx.astype(np.int64), np.argsort(x, axis=axis, kind="stable"))


def run_block_sort(dev, tname: str, rows: int, size: int, argsort: bool) -> Result:
    bn = _sort_bn(size, np_type(tname).itemsize)
    if tname == "int32":
        x = rng(size).integers(-50, 50, size=(rows, size)).astype(np.int32)   # repeated keys: stability counts
    else:
        x = random((rows, size), tname, seed=size)
    out_t, out_dtype = ("uint32", np.uint32) if argsort else (tname, x.dtype)
    fn = _sort_fn(dev, f"c{'arg' if argsort else ''}_block_sort_{tname}_{out_t}_bn{bn}_tn4")
    out = np.zeros(x.shape, out_dtype)
    dev.dispatch_threadgroups(fn, (1, rows, 1), (bn, 1, 1),
                              [x, out, np.int32(size), np.int32(1), np.int32(1), np.int32(size), np.int32(size)])
    return _check_argsort(out, x, 1) if argsort else check_equal(out, np.sort(x, axis=1))


def run_block_sort_nc(dev) -> Result:
    """argsort along axis 0 of a (70, 3, 5) half array: the sorted axis has the largest stride and the rest are
    walked with MLX's shape and strides arguments."""
    x = random((70, 3, 5), "float16", seed=13)
    bn = _sort_bn(70, 2)
    fn = _sort_fn(dev, f"ncarg_block_sort_float16_uint32_bn{bn}_tn4")
    out = np.zeros(x.shape, np.uint32)
    nc_shape = np.array([3, 5], np.int32)
    nc_strides = np.array([5, 1], np.int64)
    dev.dispatch_threadgroups(fn, (1, 15, 1), (bn, 1, 1),
                              [x, out, np.int32(70), np.int32(15), np.int32(15), np.int32(2), nc_shape, nc_strides,
                               nc_strides])
    return _check_argsort(out, x, 0)


def run_multi_block_sort(dev) -> Result:
    """2 rows of 5000 floats: 512-thread blocks of 2048 sorted, then merged pairwise (partition + merge)."""
    rows, size, bn, tn = 2, 5000, 512, 4
    x = random((rows, size), "float32", seed=14)
    n_blocks = ceildiv(size, bn * tn)
    vals = [np.zeros((rows, size), np.float32) for _ in range(2)]
    idxs = [np.zeros((rows, size), np.uint32) for _ in range(2)]
    partitions = np.zeros((rows, n_blocks + 1), np.uint32)
    dev.dispatch_threadgroups(_sort_fn(dev, "sort_mbsort_float32_uint32_bn512_tn4"), (n_blocks, rows, 1), (bn, 1, 1),
                              [x, vals[0], idxs[0], np.int32(size), np.int32(1), np.int32(1),
                               np.array([rows], np.int32), np.array([size], np.int64)])
    partition = _sort_fn(dev, "partition_mbsort_float32_uint32_bn512_tn4")
    merge = _sort_fn(dev, "merge_mbsort_float32_uint32_bn512_tn4")
    src = 0
    merge_tiles = 2
    while merge_tiles // 2 < n_blocks:
        dst = 1 - src
        dev.dispatch_threadgroups(partition, (1, rows, 1), (min(n_blocks + 1, 1024), 1, 1),
                                  [partitions, vals[src], idxs[src], np.int32(size), np.int32(merge_tiles),
                                   np.int32(n_blocks)])
        dev.dispatch_threadgroups(merge, (n_blocks, rows, 1), (bn, 1, 1),
                                  [partitions, vals[src], idxs[src], vals[dst], idxs[dst], np.int32(size),
                                   np.int32(merge_tiles), np.int32(n_blocks)])
        src = dst
        merge_tiles *= 2
    check_equal(vals[src], np.sort(x, axis=1))
    return _check_argsort(idxs[src], x, 1)


# -- logsumexp (mlx/backend/metal/logsumexp.cpp) ---------------------------------------------------------------------
_LOGSUMEXP = (
    'instantiate_kernel("block_logsumexp_float32", logsumexp, float)',
    'instantiate_kernel("looped_logsumexp_float32", logsumexp_looped, float)',
)


def run_logsumexp(dev, rows: int, axis: int) -> Result:
    x = random((rows, axis), "float32", seed=axis, low=-20, high=20)
    looped = axis > 4096
    fn = library(dev, "logsumexp.metal", ("logsumexp.h",), _LOGSUMEXP).function(
        ("looped_" if looped else "block_") + "logsumexp_float32")
    tg = MAX_TG if looped else 32 * ceildiv(ceildiv(axis, 4), 32)
    out = np.zeros(rows, np.float32)
    dev.dispatch_threads(fn, (rows * tg, 1, 1), (tg, 1, 1), [x, out, np.int32(axis)])
    x64 = x.astype(np.float64)
    m = x64.max(axis=1)
    want = m + np.log(np.exp(x64 - m[:, None]).sum(axis=1))
    return check_close(out, want, 1e-5, 1e-5)


# -- fp8 (MLX's to_fp8 / from_fp8: unary ToFP8 and FromFP8) ----------------------------------------------------------
_FP8 = (
    'instantiate_kernel("vn_ToFP8float32uint8", unary_v, float, uint8_t, ToFP8)',
    'instantiate_kernel("v_ToFP8bfloat16uint8", unary_v, bfloat16_t, uint8_t, ToFP8, 1)',
    'instantiate_kernel("vn_FromFP8uint8float32", unary_v, uint8_t, float, FromFP8)',
    'instantiate_kernel("v_FromFP8uint8float16", unary_v, uint8_t, half, FromFP8, 1)',
)


def _fp8_fn(dev, name: str):
    return library(dev, "fp8.metal", ("unary_ops.h", "unary.h"), _FP8).function(name)


def run_to_fp8(dev, tname: str) -> Result:
    """Round to e4m3 (nearest even, saturating at +-448 as MLX does) over normal, subnormal and too-large values."""
    import ml_dtypes

    r = rng(15)
    size = 70001 if tname == "float32" else 1005          # 2**16 elements or more take the vn_ kernel
    x = np.concatenate([r.uniform(-500, 500, size - 305), r.uniform(-0.02, 0.02, 300), [0, -0.0, 448, 1e6, -1e6]])
    x = x.astype(np_type(tname))
    wpt = unary_work_per_thread(x.size, x.itemsize)
    fn = _fp8_fn(dev, f"{'vn' if wpt > 1 else 'v'}_ToFP8{tname}uint8")
    n = ceildiv(x.size, wpt)
    out = np.zeros(x.size, np.uint8)
    dev.dispatch_threads(fn, (n, 1, 1), (min(MAX_TG, n), 1, 1), [x, out, np.uint32(x.size)])
    want = np.clip(x.astype(np.float32), -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    return check_equal(out, want)


def run_from_fp8(dev, tname: str) -> Result:
    """Every e4m3 byte but the two NaNs (repeated past 2**16 for float32), to float32 or half: exact."""
    import ml_dtypes

    bits = np.array([b for b in range(256) if b & 0x7F != 0x7F], np.uint8)
    if tname == "float32":
        bits = np.tile(bits, 300)[:70003]                  # 2**16 elements or more take the vn_ kernel
    wpt = unary_work_per_thread(bits.size, 1)
    fn = _fp8_fn(dev, f"{'vn' if wpt > 1 else 'v'}_FromFP8uint8{tname}")
    n = ceildiv(bits.size, wpt)
    out = np.zeros(bits.size, np_type(tname))
    dev.dispatch_threads(fn, (n, 1, 1), (min(MAX_TG, n), 1, 1), [bits, out, np.uint32(bits.size)])
    return check_equal(out, bits.view(ml_dtypes.float8_e4m3fn).astype(np_type(tname)))


CASES = [
    case("reduce_all_sum_f32_small", "reduce", run_all_reduce, "sum", "float32", 3001),
    case("reduce_all_sum_f32_two_pass", "reduce", run_all_reduce, "sum", "float32", 100003),
    case("reduce_all_sum_i8_to_i32", "reduce", run_all_reduce, "sum", "int8", 5000, "int32"),
    case("reduce_all_max_f16", "reduce", run_all_reduce, "max", "float16", 777),
    case("reduce_row_simple_sum_f32", "reduce", run_row_reduce_simple, "sum", "float32", 45, 700),
    case("reduce_row_simple_max_f16", "reduce", run_row_reduce_simple, "max", "float16", 33, 3000),
    case("reduce_row_looped_sum_f32", "reduce", run_row_reduce_looped),
    case("scan_cumsum_inclusive_f32", "scan", run_contiguous_scan, "sum", "float32", 3, 1000, True, False),
    case("scan_cumsum_exclusive_i32", "scan", run_contiguous_scan, "sum", "int32", 2, 5000, False, False),
    case("scan_cummax_reverse_f16", "scan", run_contiguous_scan, "max", "float16", 2, 333, True, True),
    case("scan_cumsum_reverse_exclusive_f32", "scan", run_contiguous_scan, "sum", "float32", 2, 9001, False,
         True),
    case("scan_cumsum_strided_f32", "scan", run_strided_scan),
    case("sort_block_f32", "sort", run_block_sort, "float32", 3, 200, False),
    case("sort_block_argsort_i32", "sort", run_block_sort, "int32", 2, 400, True),
    case("sort_block_nc_argsort_f16", "sort", run_block_sort_nc),
    case("sort_multi_block_f32", "sort", run_multi_block_sort),
    case("logsumexp_block_f32", "logsumexp", run_logsumexp, 4, 1000),
    case("logsumexp_looped_f32", "logsumexp", run_logsumexp, 2, 6000),
    case("fp8_to_e4m3_f32", "fp8", run_to_fp8, "float32"),
    case("fp8_to_e4m3_bf16", "fp8", run_to_fp8, "bfloat16"),
    case("fp8_from_e4m3_f32", "fp8", run_from_fp8, "float32"),
    case("fp8_from_e4m3_f16", "fp8", run_from_fp8, "float16"),
]
