"""Affine quantized MLX kernels, as MLX's `quantized.metal` instantiates them from the shipped `quantized.h`: the
products qmv_fast, qmv, qmv_quad, qvm, qvm_split_k, qmm_t and qmm_n, and quantize and dequantize.

Each case names its kernel as quantized.metal does and dispatches it as `mlx/backend/metal/quantized.cpp` does.
`QuantizedMatmul::eval_gpu` picks the product kernel from the shapes, and `route` repeats that choice (on a device
whose vector limit is at most 32 rows), so a case's shape is one MLX sends to its kernel: the same buffer indices,
scalars, grid and threadgroup size. The products are unbatched: MLX then binds none of the batch arguments, which get
zeros here (the CPU device wants every declared plain parameter bound). `fast::Quantize::eval_gpu` runs quantize and
dequantize, one thread per `group_size / 32` values (quantize) or per byte of packed weights (dequantize).
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.mlx_kernels.cases_matmul import (
    _TYPES,
    _args,
    _check,
    _device_array,
    _empty,
    _host_values,
    _i32,
    _i64,
    _random,
)
from benchmarks.mlx_kernels.cases_rows import MAX_TG
from benchmarks.mlx_kernels.common import Case, Result, check_equal, compile_mlx, instantiation, rng

_HEADERS = ("steel/gemm/gemm.h", "quantized_utils.h", "quantized.h")


def route(transposed: bool, M: int, N: int, K: int, bits: int) -> str:
    """The product kernel QuantizedMatmul::eval_gpu runs for x (M, K) times the quantized w (N, K) transposed, or
    (K, N): qmm from the vector limit (at most 32 rows for these sizes on any device, 4 untransposed), qmv_quad for
    K of 64 or 128 with a power-of-two width, qmv_fast when N % 8 == 0 and K % 512 == 0, qvm below K = 1024."""
    if M >= (32 if transposed else 4):
        return "qmm_t" if transposed else "qmm_n"
    if transposed:
        if K in (64, 128) and bits & (bits - 1) == 0:
            return "qmv_quad"
        return "qmv_fast" if N % 8 == 0 and K % 512 == 0 else "qmv"
    return "qvm" if K < 1024 else "qvm_split_k"


def _affine_quantize(w: np.ndarray, group_size: int, bits: int, dtype: str):
    """MLX's affine_quantize kernel in numpy: (packed uint32 weights, scales, biases as passed, and the
    dequantized weights the kernel multiplies by, float64)."""
    n_bins = float(2 ** bits - 1)
    rows, cols = w.shape
    g = w.reshape(rows, cols // group_size, group_size).astype(np.float32)
    w_max = np.maximum(g.max(-1), 0.0)                       # the kernel starts its max at 0 and its min at +max
    w_min = g.min(-1)
    scale = np.maximum((w_max - w_min) / np.float32(n_bins), np.float32(1e-7)).astype(np.float32)
    side = np.abs(w_min) > np.abs(w_max)
    scale = np.where(side, scale, -scale)
    edge = np.where(side, w_min, w_max)
    q0 = _round_away(edge / scale)
    scale = np.where(q0 == 0, scale, edge / np.where(q0 == 0, 1, q0)).astype(np.float32)
    bias = np.where(q0 == 0, 0.0, edge).astype(np.float32)
    q = np.minimum(_round_away((g - bias[..., None]) / scale[..., None]), n_bins).astype(np.uint32)
    q = q.reshape(rows, cols)
    per_word = 32 // bits
    words = q.reshape(rows, cols // per_word, per_word) << (bits * np.arange(per_word, dtype=np.uint32))
    packed = np.bitwise_or.reduce(words, axis=-1).astype(np.uint32)
    scales, scales_v = _device_array(scale, dtype)
    biases, biases_v = _device_array(bias, dtype)
    deq = q.reshape(rows, cols // group_size, group_size) * scales_v[..., None] + biases_v[..., None]
    return packed, scales, biases, deq.reshape(rows, cols)


def _round_away(x: np.ndarray) -> np.ndarray:
    """Metal's round: halves away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _function(dev, host: str, kernel: str, targs: str):
    src = instantiation(_HEADERS, [f'instantiate_kernel("{host}", affine_{kernel}, {targs})'])
    return compile_mlx(dev, src, f"{host}.metal").function(host)


def _unbatched(first: int) -> dict[int, object]:
    """Zeros for the batch arguments from index `first` (x_batch_ndims, x_shape, x_strides, w_batch_ndims, w_shape,
    w_strides, s_strides, b_strides), which MLX binds only for batched products."""
    return {first: np.int32(0), first + 1: _i32(0), first + 2: _i64(0), first + 3: np.int32(0),
            first + 4: _i32(0), first + 5: _i64(0), first + 6: _i64(0), first + 7: _i64(0)}


def _product_case(name: str, dtype: str, bits: int, M: int, N: int, K: int, *, transposed: bool = True,
                  group_size: int = 64, seed: int = 0) -> Case:
    """y = x @ deq(w).T with w (N, K) quantized along K (`transposed`), or y = x @ deq(w) with w (K, N) quantized
    along N, x (M, K), by the kernel `route` picks."""
    kernel = route(transposed, M, N, K, bits)
    assert f"_{kernel}_" in f"{name}_", (name, kernel)

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        tail = f"{tstr}_gs_{group_size}_b_{bits}"
        targs = f"{msl}, {group_size}, {bits}"
        first = 7     # the first batch argument
        if kernel in ("qmv", "qmv_fast", "qvm"):
            host, targs = f"affine_{kernel}_{tail}_batch_0", f"{targs}, false"
            rows = 8 if kernel != "qvm" else 64
            groups, tpt = (M, -(-N // rows), 1), (32, 2, 1)
        elif kernel == "qmv_quad":
            host, targs = f"affine_qmv_quad_{tail}_d_{K}_batch_0", f"{targs}, {K}, false"
            groups, tpt = (M, -(-N // 64), 1), (32, 1, 1)
        else:
            aligned = str(N % 32 == 0).lower()
            host = f"affine_qmm_t_{tail}_alN_{aligned}_batch_0" if transposed else f"affine_qmm_n_{tail}_batch_0"
            targs = f"{targs}, {aligned}, false" if transposed else f"{targs}, false"
            groups, tpt, first = (-(-N // 32), -(-M // 32), 1), (32, 2, 2), 8
        fn = _function(dev, host, kernel, targs)
        gen = rng(seed)
        w = gen.normal(0.0, 1.0, size=(N, K) if transposed else (K, N)).astype(np.float32)
        packed, scales, biases, deq = _affine_quantize(w, group_size, bits, dtype)
        x, x_v = _random(gen, (M, K), dtype)
        y = _empty((M, N), dtype)
        bound = {0: packed, 1: scales, 2: biases, 3: x, 4: y, 5: np.int32(K), 6: np.int32(N)}
        if first == 8:
            bound[7] = np.int32(M)
        dev.dispatch_threadgroups(fn, groups, tpt, _args(first + 8, bound, _unbatched(first)))
        return _check(y, x_v @ (deq.T if transposed else deq), dtype, scale=math.sqrt(K / 64) * 4)

    return Case(name, "quantized", run)


def _qvm_split_k_case(name: str, dtype: str, bits: int, M: int, N: int, K: int, group_size: int = 64) -> Case:
    """y = x @ deq(w) for K from 1024 (qvm_split_k): the kernel writes split_k partial products, one per block of
    K (the last one shorter), as a batch of split_k; MLX sums them with its strided reduction, numpy here."""
    assert route(False, M, N, K, bits) == "qvm_split_k"

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        split_k = 32 if K > 8192 else 8
        split_d = -(-K // split_k)
        host = f"affine_qvm_split_k_{tstr}_gs_{group_size}_b_{bits}_spk_{split_k}"
        fn = _function(dev, host, "qvm_split_k", f"{msl}, {group_size}, {bits}, {split_k}")
        gen = rng(3)
        w = gen.normal(0.0, 1.0, size=(K, N)).astype(np.float32)
        packed, scales, biases, deq = _affine_quantize(w, group_size, bits, dtype)
        x, x_v = _random(gen, (M, K), dtype)
        partial = _empty((split_k, M, N), dtype)
        # shapes and strides as quantized.cpp reshapes them: a split_k batch dimension in front of x, w, scales and
        # biases, x's last dimension and w's first divided by split_k
        x_shape, x_strides = _i32(split_k, M, K // split_k), _i64(split_d, split_d, 1)
        w_cols, g_cols = packed.shape[1], scales.shape[1]
        w_shape, w_strides = _i32(split_k, K // split_k, w_cols), _i64(split_d * w_cols, w_cols, 1)
        s_strides = _i64(split_d * g_cols, g_cols, 1)
        final = K - (split_k - 1) * split_d
        args = [packed, scales, biases, x, partial, np.int32(split_d), np.int32(N), np.int32(1), x_shape, x_strides,
                np.int32(1), w_shape, w_strides, s_strides, s_strides.copy(), np.int32(final)]
        dev.dispatch_threadgroups(fn, (M, N // 64, split_k), (32, 2, 1), args)
        summed = _host_values(partial, dtype).sum(axis=0).astype(np.float32)
        return _check(_device_array(summed, dtype)[0], x_v @ deq, dtype, scale=math.sqrt(K / 64) * 4)

    return Case(name, "quantized", run)


def _quantize_case(name: str, dtype: str, bits: int, rows: int, cols: int, group_size: int) -> Case:
    """affine_quantize: packed weights, scales and biases of w (rows, cols), compared with MLX's algorithm in numpy
    (the packed words exactly, scales and biases as the type rounds them)."""

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        host = f"affine_quantize_{tstr}_gs_{group_size}_b_{bits}"
        fn = _function(dev, host, "quantize", f"{msl}, {group_size}, {bits}")
        w, w_v = _random(rng(5), (rows, cols), dtype, -2.0, 2.0)
        packed, scales, biases, _ = _affine_quantize(w_v.astype(np.float32), group_size, bits, dtype)
        out = np.zeros_like(packed)
        got_s, got_b = np.zeros_like(scales), np.zeros_like(biases)
        nthreads = w.size // max(group_size // 32, 1)
        tg = min(MAX_TG, fn.max_total_threads_per_threadgroup, nthreads)
        # MLX's output is a uint32 array; the kernel writes its bytes
        dev.dispatch_threads(fn, (nthreads, 1, 1), (tg, 1, 1), [w, out.view(np.uint8), got_s, got_b])
        check_equal(got_s, scales)
        check_equal(got_b, biases)
        return check_equal(out, packed)

    return Case(name, "quantized", run)


def _dequantize_case(name: str, dtype: str, bits: int, rows: int, cols: int, group_size: int) -> Case:
    """affine_dequantize: w (rows, cols) from its packed words, scales and biases (one thread per packed byte)."""

    def run(dev) -> Result:
        _, msl, tstr = _TYPES[dtype]
        host = f"affine_dequantize_{tstr}_gs_{group_size}_b_{bits}"
        fn = _function(dev, host, "dequantize", f"{msl}, {group_size}, {bits}")
        w = rng(6).normal(0.0, 1.0, size=(rows, cols)).astype(np.float32)
        packed, scales, biases, deq = _affine_quantize(w, group_size, bits, dtype)
        out = _empty((rows, cols), dtype)
        nthreads = out.size // (8 // bits)
        tg = min(MAX_TG, fn.max_total_threads_per_threadgroup, nthreads)
        dev.dispatch_threads(fn, (nthreads, 1, 1), (tg, 1, 1), [packed.view(np.uint8), scales, biases, out])
        return _check(out, deq, dtype)

    return Case(name, "quantized", run)


CASES: list[Case] = [
    _product_case("affine_qmv_fast_float16_4bit", "float16", 4, M=2, N=32, K=1024),
    _product_case("affine_qmv_fast_float32_8bit", "float32", 8, M=1, N=16, K=512),
    _product_case("affine_qmv_float32_4bit_ragged", "float32", 4, M=3, N=20, K=320),
    _product_case("affine_qmv_bfloat16_8bit_ragged", "bfloat16", 8, M=2, N=13, K=192),
    _product_case("affine_qmv_float16_8bit_narrow", "float16", 8, M=1, N=5, K=192),
    # qmv_quad reads the scale and bias of each of its 64 rows before testing the row against N, so MLX's own
    # dispatches read past the scales unless N is a multiple of 64
    _product_case("affine_qmv_quad_float32_4bit_d128", "float32", 4, M=3, N=128, K=128),
    _product_case("affine_qmv_quad_float16_8bit_d64", "float16", 8, M=1, N=64, K=64, group_size=32),
    _product_case("affine_qvm_float32_4bit", "float32", 4, M=2, N=128, K=96, transposed=False),
    _qvm_split_k_case("affine_qvm_split_k_float32_4bit", "float32", 4, M=2, N=64, K=1030),
    _product_case("affine_qmm_t_float32_4bit_ragged", "float32", 4, M=40, N=50, K=128),
    _product_case("affine_qmm_t_float16_8bit_aligned", "float16", 8, M=33, N=64, K=256),
    _product_case("affine_qmm_n_float32_4bit_ragged", "float32", 4, M=40, N=64, K=100, transposed=False,
                  group_size=32),
    _product_case("affine_qmm_n_bfloat16_8bit", "bfloat16", 8, M=5, N=128, K=64, transposed=False),
    _quantize_case("affine_quantize_float32_gs_64_b_4", "float32", 4, 6, 256, 64),
    _quantize_case("affine_quantize_bfloat16_gs_128_b_8", "bfloat16", 8, 3, 384, 128),
    _dequantize_case("affine_dequantize_float16_gs_32_b_4", "float16", 4, 5, 96, 32),
]
