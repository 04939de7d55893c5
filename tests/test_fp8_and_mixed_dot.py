"""The 8-bit float storage types and `dot` of mixed element types.

`f8e4m3` and `f8e5m2` arrays (ml_dtypes' `float8_e4m3fn` and `float8_e5m2`) load exactly and compute in f16; a
store rounds to nearest even with ml_dtypes' rules (e4m3 has no infinity: beyond 448 is NaN; e5m2 overflows to
infinity), checked bit for bit on every f16 value and on random f32 values of every magnitude. `dot` converts its
operands to one simdgroup-matrix type and accumulates in the accumulator's type."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import metile
from metile.frontend.errors import KernelTypeError, ShapeMismatchError
from metile.ir.types import DType, from_numpy

E4, E5, BF16 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2), np.dtype(ml_dtypes.bfloat16)


pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def round_trip(X, Y8, Z, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    m = offs < n
    metile.store(Y8 + offs, metile.load(X + offs, mask=m), mask=m)   # rounds to the 8-bit format
    y = metile.load(Y8 + offs, mask=m)                                # its bits
    metile.store(Z + offs, y * 2.0 + 1.0, mask=m)                     # computed in f16


def samples() -> np.ndarray:
    every_half = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    rng = np.random.default_rng(8)
    wide = rng.standard_normal(20000).astype(np.float32) * np.exp2(rng.integers(-24, 20, 20000)).astype(np.float32)
    edges = np.array([448, 464, 465, 480, 57344, 61439, 61440, 2**-9, 2**-10, 2**-16, 2**-17, 1.5 * 2**-17,
                      np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0], np.float32)
    return np.concatenate([every_half, wide, edges])


@pytest.mark.parametrize("fmt", [E4, E5], ids=["f8e4m3", "f8e5m2"])
def test_stores_round_like_ml_dtypes_and_loads_are_exact(fmt):
    x = samples()
    n = x.size
    y8, z = np.zeros(n, fmt), np.zeros(n, np.float32)
    round_trip[(metile.cdiv(n, 256),)](x, y8, z, n, BLOCK=256)
    with np.errstate(invalid="ignore"):
        want = x.astype(fmt)
    np.testing.assert_array_equal(y8.view(np.uint8), want.view(np.uint8))
    with np.errstate(over="ignore"):
        half = (want.astype(np.float16) * np.float16(2) + np.float16(1)).astype(np.float32)
    np.testing.assert_array_equal(z, half)


def test_f8_buffers_names_and_dtype_mapping():
    assert from_numpy(E4) is DType.F8E4M3 and from_numpy(E5) is DType.F8E5M2
    buf = metile.Buffer.zeros((8,), dtype="f8e4m3")
    assert buf.dtype == E4

    @metile.kernel
    def fill(Y, v):
        at = metile.arange(0, 8)
        metile.store(Y + at, metile.zeros((8,), dtype=metile.float8_e4m3) + v)  # f8 + f32 computes in f32

    fill[(1,)](buf, 3.3)
    metile.synchronize()
    np.testing.assert_array_equal(buf.numpy().view(np.uint8), np.full(8, 3.3, np.float32).astype(E4).view(np.uint8))


def test_arithmetic_on_f8_computes_in_f16_and_casts_reach_f8():
    @metile.kernel
    def mix(X, Y, Z):
        at = metile.arange(0, 32)
        x = metile.load(X + at)
        h = x.to("f8e5m2")                      # converts between the formats
        metile.store(Y + at, h)
        metile.store(Z + at, metile.sum(x) + metile.max(x) * 0.0 + (x * x).to("f32") * 0.0)

    x = (np.arange(32, dtype=np.float32) / 7).astype(E4)
    y, z = np.zeros(32, E5), np.zeros(32, np.float32)
    mix[(1,)](x, y, z)
    np.testing.assert_array_equal(y.view(np.uint8), x.astype(np.float32).astype(E5).view(np.uint8))
    np.testing.assert_allclose(z, np.float16(x.astype(np.float16).sum(dtype=np.float32)), rtol=1e-3)


def test_bf16_and_f8_scalar_arguments():
    @metile.kernel
    def add(Y, s):
        at = metile.arange(0, 32)
        metile.store(Y + at, s + metile.zeros((32,), dtype="f32"))

    y = np.zeros(32, np.float32)
    for s in (ml_dtypes.bfloat16(1.5), ml_dtypes.bfloat16(-2.25), ml_dtypes.float8_e4m3fn(0.75)):
        add[(1,)](y, s)
        assert (y == float(s)).all()


# ---- dot of mixed types


@metile.kernel
def mm(A, B, C, ACC: metile.constexpr, M: metile.constexpr, N: metile.constexpr, K: metile.constexpr):
    r, c, k = metile.arange(0, M), metile.arange(0, N), metile.arange(0, K)
    a = metile.load(A + r[:, None] * K + k[None, :])
    b = metile.load(B + k[:, None] * N + c[None, :])
    if ACC == "none":
        out = metile.dot(a, b)
    else:
        out = metile.dot(a, b, metile.zeros((M, N), dtype=ACC))
    metile.store(C + r[:, None] * N + c[None, :], out)


def operand(dtype, shape, rng):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-128 if np.dtype(dtype).kind == "i" else 0, 127, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize(("ta", "tb", "acc", "tc", "tol"), [
    (np.float16, np.float32, "f32", np.float32, 1e-5), (np.float32, BF16, "f32", np.float32, 1e-5),
    (np.float16, BF16, "f32", np.float32, 1e-5), (E4, E5, "f32", np.float32, 0.0),
    (E4, np.float16, "none", np.float32, 1e-5), (np.int8, np.int8, "i32", np.int32, 0.0),
    (np.int8, np.int8, "none", np.int32, 0.0), (np.uint8, np.int8, "i32", np.int32, 0.0),
    (BF16, np.int8, "f32", np.float32, 1e-5), (np.int8, np.float16, "f32", np.float32, 1e-5),
    (np.float16, np.float16, "f16", np.float16, 1e-2),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_dot_of_mixed_types_accumulates_in_the_accumulator_type(ta, tb, acc, tc, tol):
    rng = np.random.default_rng(9)
    M, N, K = 32, 16, 64
    a, b = operand(ta, (M, K), rng), operand(tb, (K, N), rng)
    c = np.zeros((M, N), tc)
    mm[(1,)](a, b, c, ACC=acc, M=M, N=N, K=K)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_dot_refusals():
    @metile.kernel
    def bad(A, B, C, K: metile.constexpr):
        r, k = metile.arange(0, 8), metile.arange(0, K)
        a = metile.load(A + r[:, None] * K + k[None, :])
        b = metile.load(B + k[:, None] * 8 + r[None, :])
        metile.store(C + r[:, None] * 8 + r[None, :], metile.dot(a, b))

    i32 = np.zeros(8 * 16, np.int32)
    with pytest.raises(KernelTypeError, match="dot takes tiles of .* not i32"):
        bad[(1,)](i32, i32, np.zeros(64, np.int32), K=16)
    i8 = np.zeros(8 * 2048, np.int8)
    with pytest.raises(ShapeMismatchError, match="i8 x i8 tiles sums at most 1024 products exactly, not 2048"):
        bad[(1,)](i8, i8, np.zeros(64, np.int32), K=2048)
    u8 = np.zeros(8 * 512, np.uint8)
    with pytest.raises(ShapeMismatchError, match="u8 x u8 tiles sums at most 256 products exactly, not 512"):
        bad[(1,)](u8, u8, np.zeros(64, np.int32), K=512)
    with pytest.raises(ShapeMismatchError, match="i8 x u8 tiles sums at most 512 products exactly, not 1024"):
        bad[(1,)](i8, np.zeros(8 * 1024, np.uint8), np.zeros(64, np.int32), K=1024)


@pytest.mark.parametrize(("ta", "tb", "k"), [(np.uint8, np.uint8, 256), (np.int8, np.uint8, 512)])
def test_integer_dot_is_exact_at_its_longest_inner_dimension(ta, tb, k):
    """The largest products summed over the longest inner dimension allowed (their partial sums in f32 reach
    2**24 at most) come out exact; one product less than the largest tells a rounding apart. (i8 x i8 at 1024
    needs more threadgroup memory than a program has to stage its operands, so a kernel loops over k.)"""
    def extreme(t, shape):
        return np.full(shape, np.iinfo(t).min if np.iinfo(t).min < 0 else np.iinfo(t).max, t)

    a, b = extreme(ta, (8, k)), extreme(tb, (k, 8))
    a[0, 0] = a[0, 0] - 1 if a[0, 0] > 0 else a[0, 0] + 1
    c = np.zeros((8, 8), np.int32)
    mm[(1,)](a, b, c, ACC="none", M=8, N=8, K=k)
    assert (c == a.astype(np.int64) @ b.astype(np.int64)).all()
