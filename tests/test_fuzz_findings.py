"""Discrepancies the differential fuzzer (tests/test_differential_fuzz.py, benchmarks/fuzz.py) found between metile
and docs/language.md, each shrunk to a small kernel with the values the documentation gives. Each was a strict
xfail, and a matching entry of KNOWN_BUGS in test_differential_fuzz.py, until it was fixed; each now guards its fix
(a new finding goes here as a strict xfail again, which fails as an unexpected pass once metile, or the
documentation, changes)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import metile

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def dot_masked_acc(A, B, C, Out, n):
    r = metile.arange(0, 8)
    a = metile.load(A + r[:, None] * 8 + r[None, :])
    b = metile.load(B + r[:, None] * 8 + r[None, :])
    c = metile.load(C + r[:, None] * 8 + r[None, :], mask=r[:, None] < n)   # rows n.. inactive: they read 0
    d = metile.dot(a, b, c)
    metile.store(Out + r, metile.min(d, axis=1))
    metile.store(Out + 8 + r, metile.sum(d, axis=1))


def test_dot_result_is_active_where_its_accumulator_is_not():
    """5.3 rule 5: a dot's result is active everywhere, so reductions read the rows where its accumulator was
    inactive (they read 0 there, rule 1). It kept them inactive, as the element-wise `acc + dot(a, b)` does."""
    a, b = np.ones((8, 8), np.float32), np.ones((8, 8), np.float32)
    c = np.full((8, 8), 100.0, np.float32)
    out = np.zeros(16, np.float32)
    dot_masked_acc[(1,)](a, b, c, out, 4)
    d = np.where(np.arange(8)[:, None] < 4, c, 0.0) + a @ b          # inactive elements of c read 0 (rule 1)
    assert out.tolist() == d.min(1).tolist() + d.sum(1).tolist()      # [108]*4 + [8]*4, [864]*4 + [64]*4


@metile.kernel
def plus_dot_masked(A, B, C, Out, n):
    r = metile.arange(0, 8)
    a = metile.load(A + r[:, None] * 8 + r[None, :])
    b = metile.load(B + r[:, None] * 8 + r[None, :])
    c = metile.load(C + r[:, None] * 8 + r[None, :], mask=r[None, :] < n)   # columns n.. inactive
    d = c + metile.dot(a, b)                                                # element-wise: c's inactivity (rule 2)
    metile.store(Out + r, metile.min(d, axis=1))
    metile.store(Out + 8 + r, metile.sum(d, axis=1))


def test_a_sum_with_dot_keeps_the_inactivity_of_its_other_operand():
    """`c + dot(a, b)` is element-wise (5.3 rule 2): its elements are inactive where c's are, and reductions skip
    them; only dot's own accumulator is read as active."""
    a, b = np.ones((8, 8), np.float32), np.ones((8, 8), np.float32)
    c = np.tile(np.arange(8, dtype=np.float32) * 10 - 40, (8, 1))    # -40, -30, ... by column
    out = np.zeros(16, np.float32)
    plus_dot_masked[(1,)](a, b, c, out, 3)
    d = (c + a @ b)[:, :3]                                             # only the 3 active columns
    assert out.tolist() == d.min(1).tolist() + d.sum(1).tolist()      # [-32]*8, [-66]*8


@metile.kernel
def dot_int_acc(A, B, Out, acc):
    r = metile.arange(0, 8)
    a = metile.load(A + r[:, None] * 8 + r[None, :])
    b = metile.load(B + r[:, None] * 8 + r[None, :])
    metile.store(Out + r[:, None] * 8 + r[None, :], metile.dot(a, b, acc))      # an i32 acc: an i32 result


def test_dot_adds_an_integer_accumulator_before_converting():
    """6.6: with float operands, an integer acc is added to the products' sum in f32 and the total converted once
    (truncated: 48 - 0.5 -> 47); it was added to the sum already converted (48 + trunc(-0.5) = 48)."""
    a = np.zeros((8, 8), np.float16)
    a[:, 0] = [0.5, 1.5, -0.5, -1.5, 2.75, -2.75, 0.25, 3.5]
    b = np.ones((8, 8), np.float16)
    out = np.zeros((8, 8), np.int32)
    dot_int_acc[(1,)](a, b, out, 48)
    assert out[:, 0].tolist() == [48, 49, 47, 46, 50, 45, 48, 51]      # trunc(48 + a @ b)


@metile.kernel
def sigmoid_of(Z, S):
    r = metile.arange(0, 8)
    metile.store(S + r, metile.sigmoid(metile.load(Z + r)))      # f16 stays f16 (6.2)


@pytest.mark.parametrize(("dtype", "z"), [
    (np.float16, [-11.0, -12.0, -13.0, -16.0, -17.0, -18.0, 0.5, -0.0]),      # 6.1e-6 ... 1.2e-7 are subnormal
    (np.float32, [-88.0, -90.0, -95.0, -100.0, -103.0, -104.0, 20.0, float("nan")]),   # 6e-39 ... 1.4e-45
], ids=["f16", "f32"])
def test_sigmoid_keeps_its_subnormal_tail(dtype, z):
    """sigmoid(x) = 1 / (1 + exp(-x)) is small but not 0 where exp(-x) overflows (x below -11.1 for f16, -88.7 for
    f32): down to the smallest subnormal it must be that, rounded, where it gave 0."""
    z = np.array(z, dtype)
    s = np.zeros(8, dtype)
    sigmoid_of[(1,)](z, s)
    want = (1.0 / (1.0 + np.exp(-z.astype(np.float64)))).astype(dtype).astype(np.float64)
    tiny = np.finfo(dtype).smallest_subnormal
    assert (want[:5] >= tiny).all()                                    # every one of these is representable
    np.testing.assert_allclose(s.astype(np.float64), want, rtol=0.01, atol=tiny)


@metile.kernel
def f8_times_bf16(X, Y, Out):
    r = metile.arange(0, 4)
    p = metile.load(X + r) * metile.load(Y + r)      # f8e4m3 * bf16
    assert p.dtype == metile.float32, p.dtype
    metile.store(Out + r, p)


def test_an_8bit_float_times_bf16_is_f32():
    """3.7: a computation converts 8-bit floats to f16 first, and f16 with bf16 is f32 (3.3); it computed in bf16
    (-7 * 0.001 gave -0.00701904, not -0.0069961548)."""
    x = np.array([-7.0, 3.0, 1.0, 2.0], ml_dtypes.float8_e4m3fn)
    y = np.array([0.001, 0.001, 1.0, 1.0], ml_dtypes.bfloat16)
    out = np.zeros(4, np.float32)
    f8_times_bf16[(1,)](x, y, out)
    assert out.tolist() == (x.astype(np.float32) * y.astype(np.float32)).tolist()   # -0.0069961548, ...


@metile.kernel
def f8_with_bf16(X, Y, Out):
    r = metile.arange(0, 4)
    x, y = metile.load(X + r), metile.load(Y + r)             # f8e5m2, bf16
    assert metile.where(r < 2, x, y).dtype == metile.bfloat16  # a selection: bf16 holds both (3.3)
    f = metile.fma(x, y, y)                                   # a computation: f32
    assert f.dtype == metile.float32, f.dtype
    metile.store(Out + r, f)
    metile.store(Out + 4 + r, (x < y).to(metile.float32))


def test_fma_of_an_8bit_float_and_bf16_is_f32():
    x = np.array([-7.0, 3.0, 1.0, 2.0], ml_dtypes.float8_e5m2)
    y = np.array([0.001, 0.001, 1.0, 3.0], ml_dtypes.bfloat16)
    out = np.zeros(8, np.float32)
    f8_with_bf16[(1,)](x, y, out)
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    assert out.tolist() == (xf * yf + yf).tolist() + (xf < yf).astype(np.float32).tolist()


@metile.kernel
def float_floordiv(X, Y, Q, R):
    r = metile.arange(0, 16)
    x, y = metile.load(X + r), metile.load(Y + r)
    metile.store(Q + r, x // y)
    metile.store(R + r, x % y)


def test_float_floor_division_floors_the_exact_quotient():
    """3.4: a float `//` floors the exact quotient, rounded to the type, as Python's does; it floored the rounded
    quotient, off by one once the quotient passed 2**23 (107220944.0 // 7.75 gave 13834961.0, the quotient being
    13834960.52). `%` is Python's too, so that `x == (x // y) * y + x % y` wherever that is exact. Past 2**24 the
    floor can be between two f32 values: 100663304.0 / 3.0 is 33554434.67, its floor lies halfway and rounds to
    even, 33554432.0, where the quotient rounds to 33554436.0."""
    inf = float("inf")
    x = np.array([107220944.0, 1.0, 16777215.0, 3.0e7, 100663304.0, 3.0e9, -107220944.0, 8388609.0,
                  -5.0, 5.0, -0.0, -0.5, 3.0e38, inf, 7.0, -1.0e-30], np.float32)
    y = np.array([7.75, 0.1, 3.0, 7.0, 3.0, 7.0, 7.75, -0.75,
                  inf, -inf, 3.0, 3.0, 1.0e-3, 3.0, -2.0, 1.0e30], np.float32)
    q, rem = np.zeros(16, np.float32), np.zeros(16, np.float32)
    float_floordiv[(1,)](x, y, q, rem)
    with np.errstate(over="ignore"):                                  # 3e38 // 1e-3 is inf in f32
        want_q = np.array([float(a) // float(b) for a, b in zip(x.tolist(), y.tolist())]).astype(np.float32)
    want_r = np.array([float(a) % float(b) for a, b in zip(x.tolist(), y.tolist())]).astype(np.float32)
    assert want_q[0] == 13834960.0 and want_q[4] == 33554432.0 and np.isnan(want_q[13])
    np.testing.assert_array_equal(q, want_q)                         # NaN where Python's is, signed zeros too
    np.testing.assert_array_equal(np.signbit(q), np.signbit(want_q))
    np.testing.assert_array_equal(rem, want_r)
    np.testing.assert_array_equal(np.signbit(rem), np.signbit(want_r))


@metile.kernel
def store_int_into_f8(O, k, n):
    r = metile.arange(0, 8)
    metile.store(O + r, k, mask=r < n)     # k == 1 is a compile-time constant of the specialization (2.4)


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("k", [1, 3])
def test_an_integer_constant_stored_into_8bit_floats_converts(dtype, k):
    """3.6: a store converts to the memory's type. An integer argument equal to 1 is specialized as a constant, and
    fold_constants turned its conversion to an 8-bit float into a constant, which 8-bit floats do not have: it was
    written as the byte 1 (2**-9 in f8e4m3, 2**-16 in f8e5m2)."""
    out = np.zeros(8, dtype)
    store_int_into_f8[(1,)](out, k, 5)
    assert out.astype(np.float32).tolist() == [k] * 5 + [0] * 3


@metile.func
def bit_and(a, b):
    return a & b


@metile.kernel
def scan_of_masked(X, Counts, Total, Acc, n):
    r = metile.arange(0, 8)
    x = metile.load(X + r, mask=r != 1)                     # element 1 inactive: it reads 0 (5.3 rule 1)
    s = metile.associative_scan(x, 0, bit_and)
    metile.store(Counts + metile.arange(0, 4), metile.histogram(s, 4))
    metile.store(Total + metile.arange(0, 1), metile.sum(s * 0 + 1, 0) + metile.zeros((1,), dtype="i32"))
    acc = metile.full((8,), 7, dtype="i32")
    for _ in metile.tile_range(0, n, 1):
        acc = metile.associative_scan(x, 0, bit_and) + 1    # an update keeps old values only where it is inactive
    metile.store(Acc + r, acc)


def test_a_scan_with_a_combine_function_is_active_everywhere():
    """6.8: inactive elements enter a combine function's scan as 0, and its results are active everywhere. Each step
    of the scan keeps an element's own value where it has no partner (`where(has, combine(...), own)`), which kept
    the inactivity of element 1 of the input in the result: the histogram left that element uncounted (4 zeros of 5
    in a fuzzed kernel), `sum` skipped it, and a loop update kept its old value there."""
    x = np.array([0, 5, 1, 1, 1, 1, 1, 1], np.int32)
    counts, total, acc = np.zeros(4, np.int32), np.zeros(1, np.int32), np.zeros(8, np.int32)
    scan_of_masked[(1,)](x, counts, total, acc, 2)
    assert counts.tolist() == [8, 0, 0, 0] and total.tolist() == [8]
    assert acc.tolist() == [1] * 8
