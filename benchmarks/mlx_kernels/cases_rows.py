"""Row-wise and element-wise MLX kernels: softmax, unary, binary and hadamard (with the shared dispatch helpers of
the corpus's row-wise families). Reductions, scans, sorts, logsumexp and fp8 are in `cases_reduce`; layer_norm,
rms_norm and arg_reduce, which only MLX's `.metal` files define, in `cases_source`.

Kernel names, template arguments, grids, threadgroup sizes and buffer order follow MLX's host code
(`mlx/backend/metal/{softmax,unary,binary,hadamard}.cpp`) and its `.metal` instantiation files; the instantiation lines
here are our own, naming MLX's templates from the shipped headers.
"""

from __future__ import annotations

import functools

import numpy as np

from benchmarks.mlx_kernels.common import Case, check_close, check_equal, compile_mlx, instantiation, rng

MAX_TG = 1024            # maxTotalThreadsPerThreadgroup of MLX's kernels on Apple GPUs; MLX's host code assumes it


def bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)




def np_type(tname: str) -> np.dtype:
    """numpy's dtype for MLX's type name (float32, bfloat16, int32, ...)."""
    return bf16() if tname == "bfloat16" else np.dtype(tname)


def random(shape, tname: str, seed: int, low: float = -4.0, high: float = 4.0) -> np.ndarray:
    return rng(seed).uniform(low, high, size=shape).astype(np_type(tname))


def library(dev, name: str, headers: tuple[str, ...], lines: tuple[str, ...]):
    """One compile per family: every case of a family compiles the same source (the device caches it)."""
    return compile_mlx(dev, instantiation(headers, lines), name)


def block_dims(dim0: int, dim1: int, dim2: int, pow2: int = 10) -> tuple[int, int, int]:
    """MLX's `get_block_dims`: powers of two per dimension, grown in turn while the dimension is at least twice as
    large, up to 2**pow2 threads."""
    pows = [0, 0, 0]
    dims = (dim0, dim1, dim2)
    total = 0
    while True:
        before = total
        for i in range(3):
            if dims[i] >= (1 << (pows[i] + 1)):
                pows[i] += 1
                total += 1
            if total == pow2:
                return (1 << pows[0], 1 << pows[1], 1 << pows[2])
        if total == before:
            return (1 << pows[0], 1 << pows[1], 1 << pows[2])


def ceildiv(a: int, b: int) -> int:
    return -(-a // b)


def elem_strides(a: np.ndarray) -> np.ndarray:
    return np.array([s // a.itemsize for s in a.strides], dtype=np.int64)


# -- softmax (mlx/backend/metal/softmax.cpp) -------------------------------------------------------------------------
SOFTMAX_LOOPED_LIMIT = 4096
N_READS = 4
_SOFTMAX = (
    'instantiate_kernel("block_softmax_float32", softmax_single_row, float)',
    'instantiate_kernel("looped_softmax_float32", softmax_looped, float)',
    'instantiate_kernel("block_softmax_float16", softmax_single_row, half)',
    'instantiate_kernel("block_softmax_precise_bfloat16", softmax_single_row, bfloat16_t, float)',
    'instantiate_kernel("looped_softmax_precise_float16", softmax_looped, half, float)',
)


def run_softmax(dev, tname: str, rows: int, axis: int, precise: bool, rtol: float, atol: float):
    x = random((rows, axis), tname, seed=axis)
    looped = axis > SOFTMAX_LOOPED_LIMIT
    name = ("looped_" if looped else "block_") + "softmax_" + ("precise_" if precise else "") + tname
    fn = library(dev, "softmax.metal", ("softmax.h",), _SOFTMAX).function(name)
    if looped:
        tg = min(MAX_TG, fn.max_total_threads_per_threadgroup)
    else:
        tg = 32 * ceildiv(ceildiv(axis, N_READS), 32)
    out = np.zeros_like(x)
    dev.dispatch_threads(fn, (rows * tg, 1, 1), (tg, 1, 1), [x, out, np.int32(axis)])
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    return check_close(out, e / e.sum(axis=1, keepdims=True), rtol, atol)


# -- unary (mlx/backend/metal/unary.cpp) -----------------------------------------------------------------------------
_UNARY_OPS = {"Exp": np.exp, "Log": np.log, "Sin": np.sin, "Abs": np.abs}
_UNARY = (
    'instantiate_kernel("v_Expfloat32float32", unary_v, float, float, Exp, 1)',
    'instantiate_kernel("vn_Logfloat32float32", unary_v, float, float, Log)',
    'instantiate_kernel("vn_Sinfloat16float16", unary_v, half, half, Sin)',
    'instantiate_kernel("v_Absbfloat16bfloat16", unary_v, bfloat16_t, bfloat16_t, Abs, 1)',
    'instantiate_kernel("gn1_Sinfloat32float32", unary_g, float, float, Sin, 1, int)',
)


def unary_work_per_thread(size: int, itemsize: int) -> int:
    """MLX's `get_work_per_thread(dtype, size)`: one element per thread below 2**16 elements, else 8 bytes' worth
    (the `vn_` kernels, whose default N is `WorkPerThread<T>::n`)."""
    return 1 if size < (1 << 16) else max(1, 8 // itemsize)


def run_unary_contiguous(dev, op: str, tname: str, size: int, rtol: float, atol: float):
    low = 0.01 if op == "Log" else -4.0
    x = random(size, tname, seed=size, low=low)
    wpt = unary_work_per_thread(size, x.itemsize)
    name = ("vn_" if wpt > 1 else "v_") + op + tname + tname
    fn = library(dev, "unary.metal", ("unary_ops.h", "unary.h"), _UNARY).function(name)
    nthreads = ceildiv(size, wpt)
    out = np.zeros_like(x)
    dev.dispatch_threads(fn, (nthreads, 1, 1), (min(MAX_TG, nthreads), 1, 1), [x, out, np.uint32(size)])
    want = _UNARY_OPS[op](x.astype(np.float64))
    return check_close(out, want, rtol, atol)


def run_unary_general(dev):
    """A transposed (non-contiguous) input: the general kernel walks MLX's shape and strides arguments."""
    base = random((6, 5, 33), "float32", seed=3)
    x = base.transpose(2, 0, 1)                          # shape (33, 6, 5), strides in elements (1, 165, 33)
    shape = np.array(x.shape, dtype=np.int32)
    strides = elem_strides(x)
    fn = library(dev, "unary.metal", ("unary_ops.h", "unary.h"), _UNARY).function("gn1_Sinfloat32float32")
    dim0, dim1 = x.shape[-1], x.shape[-2]
    rest = x.size // (dim0 * dim1)
    out = np.zeros(x.shape, np.float32)
    # MLX binds the base buffer at the view's offset; `base` is the whole buffer here
    dev.dispatch_threads(fn, (dim0, dim1, rest), block_dims(dim0, dim1, rest),
                         [base, out, shape, strides, np.int32(x.ndim)])
    return check_close(out, np.sin(x.astype(np.float64)), 2e-6, 1e-7)


# -- binary (mlx/backend/metal/binary.cpp) ---------------------------------------------------------------------------
_BINARY_OPS = {"Add": np.add, "Multiply": np.multiply, "Maximum": np.maximum, "Divide": np.divide,
               "Subtract": np.subtract}
_BINARY = (
    'instantiate_kernel("vv_Addfloat32", binary_vv, float, float, Add)',
    'instantiate_kernel("sv_Multiplyfloat32", binary_sv, float, float, Multiply)',
    'instantiate_kernel("vs_Dividefloat32", binary_vs, float, float, Divide)',
    'instantiate_kernel("vv_Maximumfloat16", binary_vv, half, half, Maximum)',
    'instantiate_kernel("ss_Addint32", binary_ss, int, int, Add)',
    'instantiate_kernel("g2_Subtractfloat32", binary_g_nd2, float, float, Subtract, int)',
    'instantiate_kernel("g3_Multiplybfloat16", binary_g_nd3, bfloat16_t, bfloat16_t, Multiply, int)',
    'instantiate_kernel("gn2_Addfloat32", binary_g, float, float, Add, 2, int)',
)


def binary_lib(dev):
    return library(dev, "binary.metal", ("binary_ops.h", "binary.h"), _BINARY)


def run_binary_contiguous(dev, kind: str, op: str, tname: str, size: int, rtol: float):
    """kind: vv (two vectors), sv (scalar a), vs (scalar b)."""
    a = random(1 if kind == "sv" else size, tname, seed=1)
    b = random(1 if kind == "vs" else size, tname, seed=2, low=0.5 if op == "Divide" else -4.0)
    fn = binary_lib(dev).function(f"{kind}_{op}{tname}")
    wpt = 8 // a.itemsize                                # WorkPerThread<T>::n
    nthreads = ceildiv(size, wpt)
    out = np.zeros(size, np_type(tname))
    dev.dispatch_threads(fn, (nthreads, 1, 1), (min(MAX_TG, nthreads), 1, 1), [a, b, out, np.uint32(size)])
    want = _BINARY_OPS[op](a.astype(np.float64), b.astype(np.float64))
    return check_close(out, np.broadcast_to(want, (size,)), rtol, 0.0)


def run_binary_scalar(dev):
    a, b = np.array([41], np.int32), np.array([-7], np.int32)
    out = np.zeros(1, np.int32)
    dev.dispatch_threads(binary_lib(dev).function("ss_Addint32"), (1, 1, 1), (1, 1, 1), [a, b, out])
    return check_close(out, np.array([34]), 0, 0)


def run_binary_general(dev, ndim: int):
    """Broadcast and strided operands: a column against a transposed matrix (2-D), a broadcast 3-D product, and a
    4-D sum with two elements per thread (the `gn2` kernel, which takes the shape and ndim)."""
    lib = binary_lib(dev)
    if ndim == 2:
        a = random((37, 1), "float32", seed=5)
        b_base = random((53, 37), "float32", seed=6)
        b = b_base.T                                     # (37, 53), strides (1, 37)
        sa = np.array([1, 0], np.int64)                  # a broadcast along the last axis
        shape, fn, op = (37, 53), lib.function("g2_Subtractfloat32"), np.subtract
        args = [a, b_base, None, sa, elem_strides(b)]
    elif ndim == 3:
        a = random((3, 1, 19), "bfloat16", seed=7)
        b = random((1, 10, 19), "bfloat16", seed=8)
        shape, fn, op = (3, 10, 19), lib.function("g3_Multiplybfloat16"), np.multiply
        args = [a, b, None, np.array([19, 0, 1], np.int64), np.array([0, 19, 1], np.int64)]
    else:
        a = random((2, 3, 4, 13), "float32", seed=9)
        b_base = random((13, 4, 1, 2), "float32", seed=10)
        b = np.broadcast_to(b_base.transpose(3, 2, 1, 0), (2, 3, 4, 13))
        b_strides = np.array([s // 4 for s in b.strides], np.int64)
        shape, fn, op = (2, 3, 4, 13), lib.function("gn2_Addfloat32"), np.add
        args = [a, b_base, None, np.array(shape, np.int32), elem_strides(a), b_strides, np.int32(4)]
    out = np.zeros(shape, a.dtype)
    args[2] = out
    dim0 = shape[-1]
    dim1 = shape[-2]
    rest = int(np.prod(shape)) // (dim0 * dim1)
    if ndim > 3:
        dim0 = ceildiv(dim0, 2)                            # work_per_thread 2 for the n-d kernel
    grid = (dim0, dim1, rest)
    dev.dispatch_threads(fn, grid, block_dims(*grid), args)
    want = op(a.astype(np.float64), b.astype(np.float64))
    return check_close(out, want, 1e-2 if ndim == 3 else 1e-6, 0.0)


# -- copy with a type conversion (mlx/backend/metal/copy.cpp; astype and every strided copy MLX makes) ------------
_COPY_V = ('instantiate_kernel("v_copyfloat32bfloat16", copy_v, float, bfloat16_t, 1)',)
_COPY_G = (
    'instantiate_kernel("g2_copyfloat16float32", copy_g_nd2, half, float, int)',
    'instantiate_kernel("g3_copyfloat32float16", copy_g_nd3, float, half, int)',
    'instantiate_kernel("gn2_copyint32float32", copy_g, int32_t, float, 2, int)',
)


def run_copy_vector(dev):
    """float32 to bfloat16, round to nearest even: random values and exact ties (low 16 bits 0x8000) both ways."""
    r = rng(21)
    x = r.uniform(-3, 3, 997).astype(np.float32)
    ties = (r.integers(0, 1 << 15, 24).astype(np.uint32) << 16 | 0x8000).astype(np.uint32).view(np.float32)
    x = np.concatenate([x, ties, np.array([0.0, -0.0, 3.4e38, 1e-40], np.float32)])
    fn = library(dev, "copy_v.metal", ("copy.h",), _COPY_V).function("v_copyfloat32bfloat16")
    out = np.zeros(x.size, bf16())
    dev.dispatch_threads(fn, (x.size, 1, 1), (min(MAX_TG, x.size), 1, 1), [x, out, np.uint32(x.size)])
    return check_equal(out.view(np.uint16), x.astype(bf16()).view(np.uint16))


def run_copy_general(dev, ndim: int):
    """Strided and broadcast sources into a contiguous destination of another type (exact conversions)."""
    lib = library(dev, "copy_g.metal", ("copy.h",), _COPY_G)
    if ndim == 2:
        base = random((41, 23), "float16", seed=22)
        src, name = base.T, "g2_copyfloat16float32"               # (23, 41), strides (1, 23)
        args = [base, None, None, elem_strides(src)]
    elif ndim == 3:
        base = random((5, 1, 33), "float32", seed=23)
        src, name = np.broadcast_to(base, (5, 7, 33)), "g3_copyfloat32float16"
        args = [base, None, None, np.array([33, 0, 1], np.int64)]
    else:
        base = rng(24).integers(-1000, 1000, size=(3, 2, 19, 4)).astype(np.int32)
        src, name = base.transpose(1, 0, 3, 2), "gn2_copyint32float32"   # (2, 3, 4, 19)
        args = [base, None, np.array(src.shape, np.int32), elem_strides(src), None, np.int32(4)]
    dst_dtype = np.float16 if ndim == 3 else np.float32
    out = np.zeros(src.shape, dst_dtype)
    args[1] = out
    dim0, dim1 = src.shape[-1], src.shape[-2]
    rest = src.size // (dim0 * dim1)
    if ndim > 3:
        dim0 = ceildiv(dim0, 2)                             # work_per_thread 2 for the n-d kernel
    dev.dispatch_threads(lib.function(name), (dim0, dim1, rest), block_dims(dim0, dim1, rest), args)
    return check_equal(out, src.astype(dst_dtype))


def _bound(fn, args, kw, dev):
    return fn(dev, *args, **kw)


def case(name: str, family: str, fn, *args, needs_source: bool = False, **kw) -> Case:
    """A Case running `fn(dev, *args, **kw)`."""
    return Case(name, family, functools.partial(_bound, fn, args, kw), needs_source)


CASES: list[Case] = [
    case("softmax_block_f32", "softmax", run_softmax, "float32", 5, 777, False, 1e-5, 1e-9),
    case("softmax_block_f32_aligned", "softmax", run_softmax, "float32", 3, 1024, False, 1e-5, 1e-9),
    case("softmax_looped_f32", "softmax", run_softmax, "float32", 3, 5003, False, 1e-5, 1e-10),
    case("softmax_block_f16", "softmax", run_softmax, "float16", 4, 100, False, 1e-2, 1e-4),
    case("softmax_block_precise_bf16", "softmax", run_softmax, "bfloat16", 4, 301, True, 1e-2, 1e-5),
    case("softmax_looped_precise_f16", "softmax", run_softmax, "float16", 2, 4099, True, 2e-3, 1e-7),
    case("unary_exp_f32", "unary", run_unary_contiguous, "Exp", "float32", 1000, 2e-6, 0.0),
    case("unary_log_f32_n", "unary", run_unary_contiguous, "Log", "float32", 65539, 2e-6, 1e-7),
    case("unary_sin_f16_n", "unary", run_unary_contiguous, "Sin", "float16", 65541, 1e-3, 1e-3),
    case("unary_abs_bf16", "unary", run_unary_contiguous, "Abs", "bfloat16", 515, 0.0, 0.0),
    case("unary_sin_f32_general", "unary", run_unary_general),
    case("binary_add_vv_f32", "binary", run_binary_contiguous, "vv", "Add", "float32", 1027, 1e-7),
    case("binary_mul_sv_f32", "binary", run_binary_contiguous, "sv", "Multiply", "float32", 999, 1e-7),
    case("binary_div_vs_f32", "binary", run_binary_contiguous, "vs", "Divide", "float32", 1000, 1e-7),
    case("binary_max_vv_f16", "binary", run_binary_contiguous, "vv", "Maximum", "float16", 1029, 0.0),
    case("binary_add_ss_i32", "binary", run_binary_scalar),
    case("binary_sub_g2_f32", "binary", run_binary_general, 2),
    case("binary_mul_g3_bf16", "binary", run_binary_general, 3),
    case("binary_add_gn2_f32", "binary", run_binary_general, 4),
    case("copy_v_f32_to_bf16", "copy", run_copy_vector),
    case("copy_g2_f16_to_f32_transposed", "copy", run_copy_general, 2),
    case("copy_g3_f32_to_f16_broadcast", "copy", run_copy_general, 3),
    case("copy_gn2_i32_to_f32", "copy", run_copy_general, 4),
]


# -- hadamard (mlx/backend/metal/hadamard.cpp: a JIT source of utils.h, a codelet for the factor m and hadamard.h) --
def paley_hadamard_12() -> np.ndarray:
    """A Hadamard matrix of order 12 by Paley's first construction (q = 11): any one tests the m-kernel's mechanics;
    the reference applies the same matrix."""
    q = 11
    squares = {(k * k) % q for k in range(1, q)}
    chi = np.array([0] + [1 if k in squares else -1 for k in range(1, q)])
    s = np.zeros((q + 1, q + 1), np.int64)
    s[0, 1:] = 1
    s[1:, 0] = -1
    s[1:, 1:] = chi[(np.arange(q)[None, :] - np.arange(q)[:, None]) % q]
    return s + np.eye(q + 1, dtype=np.int64)


def sylvester(n: int) -> np.ndarray:
    h = np.ones((1, 1), np.int64)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def _codelet(h: np.ndarray | None) -> str:
    """Our `hadamard_radix_m(thread float* x)`, which hadamard.h's m-kernel calls: x <- h @ x (none for m = 1)."""
    if h is None:
        return "METAL_FUNC void hadamard_radix_m(thread float* x) {}"
    m = h.shape[0]
    rows = [f"  tmp[{r}] = " + " ".join(f"{'+' if v > 0 else '-'} x[{c}]" for c, v in enumerate(h[r])) + ";"
            for r in range(m)]
    return "\n".join([f"METAL_FUNC void hadamard_radix_m(thread float* x) {{\n  float tmp[{m}];", *rows,
                      f"  for (int i = 0; i < {m}; i++) {{ x[i] = tmp[i]; }}\n}}"])


def run_hadamard(dev, tname: str, batch: int, n: int, m: int, rtol: float):
    """x @ hadamard(n * m) * scale along the last axis: one n-kernel pass (rows of n = 2**k, radix 16, read width 4,
    threads_per = n / 16 threads per row) and, for m = 12, the m-kernel pass across the 12 blocks."""
    from benchmarks.mlx_kernels.common import KERNELS

    h12 = paley_hadamard_12() if m == 12 else None
    max_radix, read_width = min(n, 16), (2 if n == 2 else 4)
    ctype = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t"}[tname]
    size = n * m
    lines = [f'instantiate_kernel("nhadamard_{size}_{tname}", hadamard_n, {ctype}, {n}, {max_radix}, {read_width})']
    if m > 1:
        lines.append(f'instantiate_kernel("mhadamard_{size}_{tname}", hadamard_m, {ctype}, {n}, {m}, {read_width})')
    src = "\n".join(["#include <metal_stdlib>", f'#include "{KERNELS}/utils.h"', _codelet(h12),
                     f'#include "{KERNELS}/hadamard.h"', *lines, ""])
    lib = compile_mlx(dev, src, f"hadamard_{size}_{tname}.metal")
    x = random((batch, size), tname, seed=size)
    scale = 1.0 / np.sqrt(size)
    out = np.zeros_like(x)
    threads_per = n // max_radix
    first = out if m == 1 else np.zeros_like(x)
    # hadamard.h's n-kernel takes its element from x and its row from y of the grid
    dev.dispatch_threads(lib.function(f"nhadamard_{size}_{tname}"), (threads_per, batch * m, 1), (threads_per, 1, 1),
                         [x, first, np.float32(scale if m == 1 else 1.0)])
    if m > 1:
        threads_per = min(n // read_width, 256)
        groups = x.size // m // read_width // threads_per
        dev.dispatch_threads(lib.function(f"mhadamard_{size}_{tname}"), (groups, threads_per, 1),
                             (1, threads_per, 1), [first, out, np.float32(scale)])
    x64 = x.astype(np.float64).reshape(batch, m, n) @ sylvester(n)
    if m > 1:
        x64 = np.einsum("ij,bjn->bin", h12, x64)
    want = x64.reshape(batch, size) * scale
    return check_close(out, want, rtol, rtol * float(np.abs(want).max()))


CASES += [
    case("hadamard_256_f32", "hadamard", run_hadamard, "float32", 3, 256, 1, 1e-5),
    case("hadamard_128_f16", "hadamard", run_hadamard, "float16", 2, 128, 1, 2e-3),
    case("hadamard_768_f32_m12", "hadamard", run_hadamard, "float32", 2, 64, 12, 1e-5),
]
