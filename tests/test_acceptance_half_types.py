"""Acceptance: f16 and bf16 variants of vector add, softmax and GEMM, checked against float32 references.

f16 travels as numpy float16 arrays. numpy has no bfloat16 of its own: bf16 arguments are arrays or
`metile.Buffer`s of `ml_dtypes.bfloat16` (the dtype `metile.ir.types.from_numpy` maps to "bf16"), so
those tests need the `ml_dtypes` package. One bf16 test needs nothing extra: it rounds f32 data to bf16
through a bf16 threadgroup array and compares with a bit-exact numpy rounding.

The softmax here is a three-pass softmax in the identity style (masked-off elements replaced with `where`),
written for 16-bit inputs: -6.0e4 is the identity of `max` (-3.0e38 does not fit in f16), and the sum of
exponentials accumulates in an f32 tile from `metile.zeros((BLOCK,), dtype="f32")` (promotion makes each addition
f32), so the tolerance only has to cover 16-bit rounding of the inputs and outputs. GEMMs use the docs kernel
(docs/language.md 11.3) unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

import metile
from tests.acceptance_kernels import docs_examples as ex

LOWEST_HALF = -6.0e4


pytestmark = pytest.mark.usefixtures("on_cpu")


@pytest.fixture
def bf16():
    """The numpy bfloat16 dtype (ml_dtypes), which bf16 kernel arguments are made of."""
    return pytest.importorskip("ml_dtypes", reason="bf16 arguments are ml_dtypes.bfloat16 arrays").bfloat16


@metile.kernel
def softmax_rows_half(X, Y, n_cols, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    run_max = LOWEST_HALF
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        run_max = metile.maximum(run_max, metile.where(ok, x, LOWEST_HALF))
    row_max = metile.max(run_max)
    run_sum = metile.zeros((BLOCK,), dtype="f32")
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        run_sum = run_sum + metile.where(ok, metile.exp(x - row_max), 0.0)
    denom = metile.sum(run_sum)
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        metile.store(Y + row * n_cols + cols, metile.exp(x - row_max) / denom, mask=ok)


@metile.kernel
def round_through_bf16(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    live = offs < n
    tmp = metile.shared(BLOCK, dtype="bf16")
    metile.store(tmp + offs, metile.load(X + offs, mask=live))
    metile.barrier()
    metile.store(Y + offs, metile.load(tmp + offs) * 2.0, mask=live)


def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), returned as float32; finite inputs only."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def softmax_ref(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


# ---- vector add


@pytest.mark.parametrize("n", [10_007, 3])
def test_vector_add_f16(n):
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal(n).astype(np.float16) for _ in range(2))
    c = np.zeros(n, np.float16)
    ex.vec_add[(metile.cdiv(n, 256),)](a, b, c, n, BLOCK=256)
    np.testing.assert_array_equal(c, a + b)


@pytest.mark.parametrize("n", [10_007, 3])
def test_vector_add_bf16_arrays(bf16, n):
    rng = np.random.default_rng(n)
    a, b = (rng.standard_normal(n).astype(bf16) for _ in range(2))
    c = np.zeros(n, bf16)
    ex.vec_add[(metile.cdiv(n, 256),)](a, b, c, n, BLOCK=256)
    ref = (a.astype(np.float32) + b.astype(np.float32)).astype(bf16)
    np.testing.assert_array_equal(c.astype(np.float32), ref.astype(np.float32))


def test_vector_add_bf16_buffers(bf16):
    n = 1000
    rng = np.random.default_rng(7)
    a = metile.Buffer(data=rng.standard_normal(n).astype(bf16))
    b = metile.Buffer(data=rng.standard_normal(n).astype(bf16))
    c = metile.Buffer.zeros((n,), dtype=bf16)
    ex.vec_add[(metile.cdiv(n, 256),)](a, b, c, n, BLOCK=256)
    metile.synchronize()
    ref = (a.numpy().astype(np.float32) + b.numpy().astype(np.float32)).astype(bf16)
    np.testing.assert_array_equal(c.numpy().astype(np.float32), ref.astype(np.float32))


@pytest.mark.parametrize("n", [256, 100])
def test_values_rounded_through_a_bf16_array(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    x[:4] = [1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -(1.0 + 2.0**-9), 1.0e38]
    y = np.zeros(n, np.float32)
    round_through_bf16[(1,)](x, y, n, BLOCK=256)
    expected = bf16_round(bf16_round(x) * np.float32(2.0))
    np.testing.assert_array_equal(y, expected)


# ---- softmax


@pytest.mark.parametrize(("rows", "cols"), [(16, 300), (2, 1000)])
def test_softmax_f16(rows, cols):
    x = np.random.default_rng(cols).standard_normal((rows, cols)).astype(np.float16)
    y = np.zeros_like(x)
    softmax_rows_half[(rows,)](x, y, cols, BLOCK=256)
    np.testing.assert_allclose(y.astype(np.float32), softmax_ref(x), rtol=1e-2, atol=2e-4)


@pytest.mark.parametrize(("rows", "cols"), [(16, 300), (2, 1000)])
def test_softmax_bf16(bf16, rows, cols):
    x = np.random.default_rng(cols).standard_normal((rows, cols)).astype(bf16)
    y = np.zeros_like(x)
    softmax_rows_half[(rows,)](x, y, cols, BLOCK=256)
    np.testing.assert_allclose(y.astype(np.float32), softmax_ref(x.astype(np.float32)), rtol=2e-2, atol=1e-4)


# ---- GEMM


@pytest.mark.parametrize(("M", "N", "K"), [(128, 128, 128), (64, 192, 96)])
def test_gemm_f16_operands_accumulate_in_f32(M, N, K):
    rng = np.random.default_rng(M + N + K)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.zeros((M, N), np.float16)
    ex.matmul[(M // 64, N // 64)](a, b, c, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float32), ref, rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize(("M", "N", "K"), [(128, 128, 128), (64, 192, 96)])
def test_gemm_bf16_operands_accumulate_in_f32(bf16, M, N, K):
    rng = np.random.default_rng(M * N + K)
    A = metile.Buffer(data=rng.standard_normal((M, K)).astype(bf16))
    B = metile.Buffer(data=rng.standard_normal((K, N)).astype(bf16))
    C = metile.Buffer.zeros((M, N), dtype=bf16)
    ex.matmul[(M // 64, N // 64)](A, B, C, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    metile.synchronize()
    ref = A.numpy().astype(np.float64) @ B.numpy().astype(np.float64)
    np.testing.assert_allclose(C.numpy().astype(np.float32), ref, rtol=1e-2, atol=5e-2)


# ---- loop-carried accumulators started from a Python number


@metile.kernel
def column_sums(X, Out, n, BLOCK: metile.constexpr, START: metile.constexpr):
    acc = START
    for c in metile.tile_range(0, n, BLOCK):
        acc = acc + metile.load(X + c + metile.arange(0, BLOCK))
    metile.store(Out + metile.arange(0, BLOCK), acc)


def test_a_float_accumulator_over_f16_tiles_adds_in_f32():
    """`acc = 0.0` carries an f32 tile (the promotion of f32 and f16): 4096 ones per position sum to 4096,
    where f16 additions would stop at 2048 (2048 + 1 rounds back to 2048)."""
    x = np.ones(16 * 4096, np.float16)
    out = np.zeros(16, np.float16)
    column_sums[(1,)](x, out, x.size, BLOCK=16, START=0.0)
    np.testing.assert_array_equal(out, np.full(16, 4096, np.float16))


def test_an_int_accumulator_over_i8_tiles_adds_in_i32():
    """`acc = 0` carries an i32 tile (the promotion of i32 and i8): 64 values of 100 per position sum to
    6400, which no 8-bit addition could hold."""
    x = np.full(16 * 64, 100, np.int8)
    out = np.zeros(16, np.int32)
    column_sums[(1,)](x, out, x.size, BLOCK=16, START=0)
    np.testing.assert_array_equal(out, np.full(16, 6400, np.int32))
