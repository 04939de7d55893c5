"""The original meTile's kernels (`kernels/*.py`), as meTile writes them (`tests/acceptance_kernels/metile_*.py`),
run on the CPU device against numpy at many sizes: sizes no block divides, one element, many blocks.

GEMMs whose sizes the blocks do not divide are right because `tile_load`/`tile_store` without `bounds=` are
clipped to their arrays; `@metile.autotune(configs=MATMUL_CONFIGS)` takes meTile's schedule keys (`SWIZZLE`,
`NAX_*`), which change nothing in metile; meTile's decode attention, whose loop over tokens starts at the thread's
simdgroup index, runs because simdgroup collectives are refused only under control flow that differs between the
lanes of one simdgroup.
"""

from __future__ import annotations

import numpy as np
import pytest

import metile
from tests.acceptance_kernels import metile_decode as dec
from tests.acceptance_kernels import metile_gemm as gemm
from tests.acceptance_kernels import metile_rows as rows

pytestmark = pytest.mark.usefixtures("on_cpu")


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng([abs(hash(k)) % (1 << 31) for k in map(str, key)])


# ---- row kernels: layernorm, rmsnorm, add_rmsnorm

ROW_SIZES = [(1, 128), (100, 128), (256, 256), (1000, 256), (3000, 128)]   # (N, BLOCK): one, ragged, exact, many


@pytest.mark.parametrize(("n", "block"), ROW_SIZES)
def test_layernorm(n, block):
    rng = rng_for("layernorm", n)
    x = rng.standard_normal((3, n)).astype(np.float32)
    w, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    out = np.zeros_like(x)
    rows.layernorm[(3,)](x, w, b, out, n, BLOCK=block)
    metile.synchronize()
    x64 = x.astype(np.float64)
    mean = x64.mean(1, keepdims=True)
    inv_std = 1.0 / np.sqrt((x64 * x64).mean(1, keepdims=True) - mean * mean + 1e-5)
    np.testing.assert_allclose(out, (x64 - mean) * inv_std * w + b, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(("n", "block"), ROW_SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_rmsnorm(n, block, dtype):
    rng = rng_for("rmsnorm", n, dtype)
    x = rng.standard_normal((2, n)).astype(dtype)
    w = rng.random(n).astype(dtype)
    out = np.zeros((2, n), np.float32)
    rows.rmsnorm[(2,)](x, w, out, n, 1e-6, BLOCK=block)
    metile.synchronize()
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 * x64).mean(1, keepdims=True) + 1e-6) * w.astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-4 if dtype == np.float32 else 2e-3, atol=1e-4)


@pytest.mark.parametrize(("n", "block"), ROW_SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_add_rmsnorm(n, block, dtype):
    rng = rng_for("add_rmsnorm", n, dtype)
    x, res = (rng.standard_normal((2, n)).astype(dtype) for _ in range(2))
    w = rng.random(n).astype(dtype)
    summed, out = np.zeros((2, n), dtype), np.zeros((2, n), np.float32)
    rows.add_rmsnorm[(2,)](x, res, w, summed, out, n, 1e-5, BLOCK=block)
    metile.synchronize()
    s64 = x.astype(np.float64) + res.astype(np.float64)
    tol = 1e-4 if dtype == np.float32 else 3e-3
    np.testing.assert_allclose(summed, s64, rtol=tol, atol=tol)
    # the second pass reads the sums back from `Sum`, stored in its element type
    stored = summed.astype(np.float64)
    want = stored / np.sqrt((s64 * s64).mean(1, keepdims=True) + 1e-5) * w.astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


# ---- element-wise kernels: reduce_*, activations, simdgroup roles

ELEMENTWISE_SIZES = [1, 100, 256, 1000, 5000]


@pytest.mark.parametrize("count", sorted(rows.REDUCE_KERNELS))
@pytest.mark.parametrize("n", ELEMENTWISE_SIZES)
def test_reduce(count, n):
    rng = rng_for("reduce", count, n)
    parts = [rng.standard_normal(n).astype(np.float32) for _ in range(count)]
    out = np.zeros(n, np.float32)
    rows.REDUCE_KERNELS[count][(metile.cdiv(n, 256),)](*parts, out, n, BLOCK_SIZE=256)
    metile.synchronize()
    np.testing.assert_allclose(out, np.sum(parts, axis=0, dtype=np.float64), rtol=1e-5, atol=1e-5)


def gelu_ref(x):
    return x / (1.0 + np.exp(-1.702 * x))


def silu_ref(x):
    return x / (1.0 + np.exp(-x))


ONE_INPUT = [(rows.exp_kernel, np.exp), (rows.sqrt_abs_kernel, lambda x: np.sqrt(np.abs(x))),
             (rows.gelu_kernel, gelu_ref), (rows.silu_kernel, silu_ref)]


@pytest.mark.parametrize(("kernel", "ref"), ONE_INPUT, ids=lambda v: getattr(v, "__name__", ""))
@pytest.mark.parametrize("n", ELEMENTWISE_SIZES)
def test_activation(kernel, ref, n):
    x = rng_for(kernel.__name__, n).standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    kernel[(metile.cdiv(n, 256),)](x, out, n, BLOCK=256)
    metile.synchronize()
    np.testing.assert_allclose(out, ref(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel", [rows.geglu_kernel, rows.geglu_specialized_kernel], ids=lambda k: k.__name__)
@pytest.mark.parametrize("n", ELEMENTWISE_SIZES)
def test_geglu(kernel, n):
    rng = rng_for(kernel.__name__, n)
    gate, up = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    out = np.zeros_like(gate)
    kernel[(metile.cdiv(n, 256),)](gate, up, out, n, BLOCK=256)
    metile.synchronize()
    np.testing.assert_allclose(out, gelu_ref(gate.astype(np.float64)) * up, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("n", ELEMENTWISE_SIZES)
@pytest.mark.parametrize("block", [128, 256])
def test_two_roles(n, block):
    x = rng_for("roles", n, block).standard_normal(n).astype(np.float32)
    grid = (metile.cdiv(n, block),)
    a, b = np.zeros_like(x), np.zeros_like(x)
    rows.exp_sqrt_kernel[grid](x, a, b, n, BLOCK=block)
    metile.synchronize()
    np.testing.assert_allclose(a, np.exp(x.astype(np.float64)), rtol=1e-5)
    np.testing.assert_allclose(b, np.sqrt(np.abs(x.astype(np.float64))), rtol=1e-6)
    a, b = np.zeros_like(x), np.zeros_like(x)
    rows.gelu_silu_kernel[grid](x, a, b, n, BLOCK=block)
    metile.synchronize()
    np.testing.assert_allclose(a, gelu_ref(x.astype(np.float64)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, silu_ref(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


# ---- GEMMs

EPILOGUES = {gemm.matmul: lambda c: c, gemm.matmul_swizzled: lambda c: c, gemm.matmul_relu: lambda c: np.maximum(c, 0),
             gemm.matmul_gelu: gelu_ref, gemm.matmul_silu: silu_ref}
DIVIDED = [(64, 64, 64, 32, 32, 32), (128, 128, 64, 64, 64, 16), (128, 64, 96, 64, 64, 32), (64, 192, 32, 64, 64, 32)]
RAGGED = [(100, 70, 50, 32, 32, 32), (1, 1, 1, 32, 32, 32), (64, 64, 50, 32, 32, 32), (64, 70, 64, 32, 32, 32),
          (70, 64, 64, 32, 32, 32), (33, 130, 64, 64, 64, 16)]


def run_gemm(kernel, m, n, k, bm, bn, bk, dtype=np.float32):
    rng = rng_for(kernel.__name__, m, n, k, dtype)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = np.zeros((m, n), np.float32)
    kernel[(metile.cdiv(m, bm), metile.cdiv(n, bn))](a, b, c, m, n, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    metile.synchronize()
    want = EPILOGUES[kernel](a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-3 * np.sqrt(k))


@pytest.mark.parametrize("kernel", list(EPILOGUES), ids=lambda k: k.__name__)
@pytest.mark.parametrize("shape", DIVIDED, ids=str)
def test_gemm_sizes_the_blocks_divide(kernel, shape):
    run_gemm(kernel, *shape)


@pytest.mark.parametrize("shape", DIVIDED[:2], ids=str)
def test_gemm_half_inputs(shape):
    run_gemm(gemm.matmul, *shape, dtype=np.float16)


@pytest.mark.parametrize("shape", RAGGED, ids=str)
def test_matmul_ragged_sizes(shape):
    run_gemm(gemm.matmul, *shape)


@pytest.mark.parametrize("kernel", [k for k in EPILOGUES if k is not gemm.matmul], ids=lambda k: k.__name__)
def test_gemm_epilogues_ragged(kernel):
    run_gemm(kernel, *RAGGED[0])


@pytest.mark.parametrize("kernel", gemm.AUTOTUNED, ids=lambda k: k.__name__)
def test_gemm_autotuned_as_written(kernel):
    tuned = metile.autotune(configs=gemm.MATMUL_CONFIGS, key=["M", "N", "K"], verbose=False)(kernel)
    m = n = k = 128
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    c = np.zeros((m, n), np.float32)
    tuned[lambda meta: (metile.cdiv(m, meta["BLOCK_M"]), metile.cdiv(n, meta["BLOCK_N"]))](a, b, c, m, n, k)
    metile.synchronize()
    assert np.allclose(c, EPILOGUES[kernel](np.full((m, n), float(k))), rtol=1e-5)


# ---- decode kernels: attention, affine QMV

@pytest.mark.parametrize(("heads", "tokens", "d", "block"), [(2, 37, 64, 128), (1, 1, 32, 64), (3, 300, 128, 256)])
def test_attention_decode(heads, tokens, d, block):
    rng = rng_for("attention", heads, tokens, d)
    q = rng.standard_normal((heads, d)).astype(np.float32)
    k, v = (rng.standard_normal((heads, tokens, d)).astype(np.float32) for _ in range(2))
    out = np.zeros((heads, d), np.float32)
    scale = 1.0 / np.sqrt(d)
    dec.attention_decode_kernel[(heads,)](q, k, v, out, tokens, scale, D=d, BLOCK=block)
    metile.synchronize()
    np.testing.assert_allclose(out, dec.attention_reference(q, k, v, scale), rtol=1e-4, atol=1e-5)


def test_attention_decode_autotuned():
    rng = rng_for("attention_tuned")
    q = rng.standard_normal((2, 64)).astype(np.float32)
    k, v = (rng.standard_normal((2, 50, 64)).astype(np.float32) for _ in range(2))
    out = np.zeros((2, 64), np.float32)
    dec.attention_decode[(2,)](q, k, v, out, 50, 0.125, D=64)
    metile.synchronize()
    np.testing.assert_allclose(out, dec.attention_reference(q, k, v, 0.125), rtol=1e-4, atol=1e-5)


# (rows, N, K, BITS, GROUP_SIZE, BLOCK, OUTPUTS_PER_SIMDGROUP): K / (32 / BITS) words per row, spread over 32 lanes
QMV_SHAPES = [(1, 8, 64, 4, 32, 64, 4), (2, 64, 256, 4, 64, 128, 4), (3, 32, 96, 8, 32, 64, 2),
              (1, 128, 1024, 4, 128, 256, 2), (2, 16, 512, 2, 64, 32, 8)]


def qmv_case(shape, tag):
    n_rows, n, k, bits, group, block, ops = shape
    rng = rng_for(tag, *shape)
    x = rng.standard_normal((n_rows, k)).astype(np.float32)
    packed, scales, biases, dense = dec.affine_weights(rng, n, k, bits, group)
    grid = (n_rows * n // (block // 32 * ops),)
    consts = dict(GROUP_SIZE=group, BITS=bits, BLOCK=block, OUTPUTS_PER_SIMDGROUP=ops)
    return rng, x, (packed, scales, biases), dense, grid, consts


@pytest.mark.parametrize("half", [False, True])
@pytest.mark.parametrize("shape", QMV_SHAPES, ids=str)
def test_affine_qmv(shape, half):
    _, x, weights, dense, grid, consts = qmv_case(shape, "qmv")
    out = np.zeros((x.shape[0], dense.shape[0]), np.float32)
    dec.affine_qmv[grid](x, *weights, out, x.shape[1], dense.shape[0], **consts, HALF_DECODE=half)
    metile.synchronize()
    want = x.astype(np.float64) @ dense.T
    tol = 2e-2 * np.sqrt(x.shape[1]) if half else 1e-4 * np.sqrt(x.shape[1])
    np.testing.assert_allclose(out, want, rtol=1e-2 if half else 1e-4, atol=tol)


@pytest.mark.parametrize("shape", QMV_SHAPES[:3], ids=str)
def test_affine_residual_qmv(shape):
    rng, x, weights, dense, grid, consts = qmv_case(shape, "residual")
    residual = rng.standard_normal((x.shape[0], dense.shape[0])).astype(np.float32)
    out = np.zeros_like(residual)
    dec.affine_residual_qmv[grid](x, *weights, residual, out, x.shape[1], dense.shape[0], **consts,
                                  HALF_DECODE=False)
    metile.synchronize()
    np.testing.assert_allclose(out, x.astype(np.float64) @ dense.T + residual, rtol=1e-4,
                               atol=1e-4 * np.sqrt(x.shape[1]))


@pytest.mark.parametrize("kernel", [dec.affine_swiglu_qmv, dec.affine_swiglu_scratch_qmv], ids=lambda k: k.__name__)
@pytest.mark.parametrize("shape", QMV_SHAPES[:3], ids=str)
def test_affine_swiglu_qmv(kernel, shape):
    rng, x, gate_w, gate_dense, grid, consts = qmv_case(shape, kernel.__name__)
    n, k = gate_dense.shape
    *up_w, up_dense = dec.affine_weights(rng, n, k, consts["BITS"], consts["GROUP_SIZE"])
    out = np.zeros((x.shape[0], n), np.float32)
    kernel[grid](x, *gate_w, *up_w, out, k, n, **consts, HALF_DECODE=False)
    metile.synchronize()
    gate, up = x.astype(np.float64) @ gate_dense.T, x.astype(np.float64) @ up_dense.T
    np.testing.assert_allclose(out, silu_ref(gate) * up, rtol=1e-4, atol=1e-4 * k)
