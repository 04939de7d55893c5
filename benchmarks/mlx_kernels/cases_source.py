"""Row-wise MLX kernels defined only in MLX's `.metal` files (not in the mlx-metal wheel): layer_norm, rms_norm and
arg_reduce, compiled as shipped from the source checkout named by METILE_MLX_SOURCE and dispatched as
`mlx/backend/metal/normalization.cpp` and `primitives.cpp` (ArgReduce) do. Without the checkout they skip.
"""

from __future__ import annotations

import numpy as np

from benchmarks.mlx_kernels.cases_rows import MAX_TG, case, ceildiv, random
from benchmarks.mlx_kernels.common import Result, check_close, check_equal, compile_source_file, rng

SIMD = 32


def _row_dispatch(fn, axis: int, rows: int, n_reads: int, looped_limit: int) -> tuple[int, int]:
    """(threads, threadgroup size) of MLX's row kernels: enough simdgroups for the row, or a full group looped."""
    if axis <= looped_limit:
        tg = SIMD * ceildiv(ceildiv(axis, n_reads), SIMD)
    else:
        tg = min(MAX_TG, fn.max_total_threads_per_threadgroup)
    return rows * tg, tg


# -- layer_norm (LayerNorm::eval_gpu: 8 reads per thread, looped above 6656 with 4) --------------------------------
# The single-row kernel sets `thread_x[i] = mean` for i from n = axis_size - lid * 8 to 8; for a thread whose block
# starts past the row's end n is negative, so it writes below the start of its private array (undefined behaviour
# that Apple GPUs happen to survive; on the CPU device it overwrites the thread's stack and faults later). That
# happens whenever the last simdgroup has a thread with no element of the row, so the single-row cases take sizes
# whose last thread still holds one (axis_size > 8 * (threadgroup size - 1)), ragged all the same.
def run_layer_norm(dev, tname: str, rows: int, axis: int, rtol: float, atol: float) -> Result:
    looped = axis > 6656
    fn = compile_source_file(dev, "layer_norm.metal").function(
        "layer_norm" + ("_looped" if looped else "") + tname)
    x = random((rows, axis), tname, seed=axis)
    w = random(axis, tname, seed=1, low=0.5, high=1.5)
    b = random(axis, tname, seed=2, low=-0.5, high=0.5)
    eps = 1e-5
    out = np.zeros_like(x)
    threads, tg = _row_dispatch(fn, axis, rows, 4 if looped else 8, 6656)
    dev.dispatch_threads(fn, (threads, 1, 1), (tg, 1, 1),
                         [x, w, b, out, np.float32(eps), np.uint32(axis), np.uint32(1), np.uint32(1)])
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
    want = (x64 - mean) / np.sqrt(var + eps) * w.astype(np.float64) + b.astype(np.float64)
    return check_close(out, want, rtol, atol)


# -- rms_norm (RMSNorm::eval_gpu: RMS_N_READS = 4, looped above RMS_LOOPED_LIMIT = 4096) -----------------------------
def run_rms_norm(dev, tname: str, rows: int, axis: int, scalar_weight: bool, rtol: float, atol: float) -> Result:
    looped = axis > 4096
    lib = compile_source_file(dev, "rms_norm.metal")
    # RMSNorm::eval_gpu sets has_w (index 20) and, in checkouts that declare it, has_silu (21; false: no SiLU)
    wanted = {"has_w": True, "has_silu": False}
    constants = {name: v for name, v in wanted.items() if lib.function_constants.by_name(name) is not None}
    fn = lib.function("rms" + ("_looped" if looped else "") + tname, constants=constants or None)
    x = random((rows, axis), tname, seed=axis)
    w = random(1 if scalar_weight else axis, tname, seed=3, low=0.5, high=1.5)
    eps = 1e-6
    out = np.zeros_like(x)
    threads, tg = _row_dispatch(fn, axis, rows, 4, 4096)
    dev.dispatch_threads(fn, (threads, 1, 1), (tg, 1, 1),
                         [x, w, out, np.float32(eps), np.uint32(axis), np.uint32(0 if scalar_weight else 1)])
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + eps) * w.astype(np.float64)
    return check_close(out, want, rtol, atol)


def run_vjp_rms_norm(dev) -> Result:
    """The rms_norm gradient with a weight (function constant has_w = true at index 20): gx, and gw per row."""
    rows, axis, eps = 3, 515, 1e-6
    lib = compile_source_file(dev, "rms_norm.metal")
    fn = lib.function("vjp_rmsfloat32", constants={20: True})
    x = random((rows, axis), "float32", seed=16)
    w = random(axis, "float32", seed=17, low=0.5, high=1.5)
    g = random((rows, axis), "float32", seed=18)
    gx = np.zeros_like(x)
    gw = np.zeros_like(x)
    threads, tg = _row_dispatch(fn, axis, rows, 4, 4096)
    dev.dispatch_threads(fn, (threads, 1, 1), (tg, 1, 1),
                         [x, w, g, gx, gw, np.float32(eps), np.uint32(axis), np.uint32(1)])
    x64, w64, g64 = (a.astype(np.float64) for a in (x, w, g))
    n = 1 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + eps)
    mean_gwx = (g64 * w64 * x64).mean(axis=1, keepdims=True)
    want_gx = g64 * w64 * n - x64 * mean_gwx * n**3
    check_close(gw, g64 * x64 * n, 1e-5, 1e-6)
    return check_close(gx, want_gx, 1e-4, 1e-5)


# -- arg_reduce (ArgReduce::eval_gpu) --------------------------------------------------------------------------------
def run_arg_reduce(dev, op: str, tname: str, shape: tuple[int, ...], axis: int) -> Result:
    """argmin/argmax along `axis`: the other axes are walked with MLX's shape and strides (the reduced axis removed),
    one threadgroup of simdgroups per output."""
    if tname == "int32":
        x = rng(7).integers(-20, 20, size=shape).astype(np.int32)         # ties: the first index wins
    else:
        x = random(shape, tname, seed=sum(shape))
    fn = compile_source_file(dev, "arg_reduce.metal").function(f"{op}_{tname}")
    axis_size = shape[axis]
    strides = [s // x.itemsize for s in x.strides]
    axis_stride = strides[axis]
    rest_shape = [n for i, n in enumerate(shape) if i != axis]
    in_strides = [s for i, s in enumerate(strides) if i != axis]
    out = np.zeros(rest_shape, np.uint32)
    out_strides = [s // 4 for s in out.strides]
    tg = min(ceildiv(axis_size, 4), fn.max_total_threads_per_threadgroup)
    tg = ceildiv(tg, SIMD) * SIMD
    n_out = int(np.prod(rest_shape)) if rest_shape else 1
    if rest_shape:
        shape_arg = np.array(rest_shape, np.int32)
        in_arg, out_arg = np.array(in_strides, np.int64), np.array(out_strides, np.int64)
    else:
        shape_arg, in_arg, out_arg = np.zeros(1, np.int32), np.zeros(1, np.int64), np.zeros(1, np.int64)
        out = np.zeros(1, np.uint32)
    dev.dispatch_threads(fn, (tg, n_out, 1), (tg, 1, 1),
                         [x, out, shape_arg, in_arg, out_arg, np.uint64(len(rest_shape)), np.int64(axis_stride),
                          np.uint64(axis_size)])
    want = (np.argmax if op == "argmax" else np.argmin)(x, axis=axis).astype(np.uint32)
    return check_equal(out.reshape(want.shape), want)


CASES = [
    case("layer_norm_f32", "layer_norm", run_layer_norm, "float32", 4, 1020, 1e-5, 1e-5, needs_source=True),
    case("layer_norm_looped_f32", "layer_norm", run_layer_norm, "float32", 2, 7001, 1e-5, 1e-5, needs_source=True),
    case("layer_norm_f16", "layer_norm", run_layer_norm, "float16", 3, 507, 2e-3, 2e-3, needs_source=True),
    case("rms_norm_f32", "rms_norm", run_rms_norm, "float32", 5, 777, False, 1e-5, 1e-6, needs_source=True),
    case("rms_norm_looped_f32", "rms_norm", run_rms_norm, "float32", 2, 4099, False, 1e-5, 1e-6,
         needs_source=True),
    case("rms_norm_bf16_scalar_weight", "rms_norm", run_rms_norm, "bfloat16", 3, 256, True, 1e-2, 1e-2,
         needs_source=True),
    case("rms_norm_vjp_f32", "rms_norm", run_vjp_rms_norm, needs_source=True),
    case("arg_reduce_argmax_f32_rows", "arg_reduce", run_arg_reduce, "argmax", "float32", (6, 1001), 1,
         needs_source=True),
    case("arg_reduce_argmin_i32_axis0", "arg_reduce", run_arg_reduce, "argmin", "int32", (300, 4, 5), 0,
         needs_source=True),
    case("arg_reduce_argmax_f16_flat", "arg_reduce", run_arg_reduce, "argmax", "float16", (5000,), 0,
         needs_source=True),
]
