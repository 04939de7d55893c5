"""Edge cases of the language's documented semantics, each of which once gave a wrong answer with no error:
alignment proven where it does not hold, bool reductions over nothing, a product added to a 16-bit accumulator
rounded twice, integer products summed beyond f32's exact range, 8-bit floats computed in their own type, signed
zeros, unsigned offsets and integers negated in their own type, and integers and constants rounded to bf16 twice."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import metile

pytestmark = pytest.mark.usefixtures("on_cpu")

F8 = ml_dtypes.float8_e4m3fn


@metile.kernel
def strided_rows(X, Out, stride, ROWS: metile.constexpr, BLOCK: metile.constexpr):
    rows = metile.arange(0, ROWS)
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + (rows * stride)[:, None] + cols[None, :])
    metile.store(Out + rows[:, None] * BLOCK + cols[None, :], x)


@pytest.mark.parametrize("stride", [65, 66, 64])
def test_rows_a_runtime_stride_apart_are_not_taken_as_aligned(stride):
    """`(rows * stride)[:, None] + cols`: row `r` starts at `r * stride`, which is not 16-byte aligned for a
    stride that is not a multiple of 4; moving its runs of 4 as float4 faulted (misaligned) on the CPU device."""
    x = np.arange(32 * stride, dtype=np.float32)
    out = np.zeros((32, 64), np.float32)
    strided_rows[(1,)](x, out, stride, ROWS=32, BLOCK=64)
    metile.synchronize()
    assert (out == x.reshape(32, stride)[:, :64]).all()


@metile.kernel
def bool_reductions(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    positive = metile.load(X + offs, mask=offs < n) > 0.0
    metile.store(Out, metile.max(positive))
    metile.store(Out + 1, metile.min(positive))


@pytest.mark.parametrize(("n", "values", "expected"), [
    (0, [1.0] * 16, [False, True]),            # nothing active: "any" is False, "all" is True
    (3, [-1.0, 2.0, -3.0] + [5.0] * 13, [True, False]),
    (2, [1.0, 2.0] + [-5.0] * 14, [True, True]),
])
def test_max_and_min_of_bools_over_inactive_elements(n, values, expected):
    out = np.zeros(2, np.bool_)
    bool_reductions[(1,)](np.array(values, np.float32), out, n, BLOCK=16)
    metile.synchronize()
    assert out.tolist() == expected


@metile.kernel
def accumulate(A, B, C, Out, N: metile.constexpr):
    r = metile.arange(0, N)
    a = metile.load(A + r[:, None] * N + r[None, :])
    b = metile.load(B + r[:, None] * N + r[None, :])
    acc = metile.load(C + r[:, None] * N + r[None, :])
    metile.store(Out + r[:, None] * N + r[None, :], metile.dot(a, b, acc))


@pytest.mark.parametrize(("dtype", "tiny"), [(ml_dtypes.bfloat16, 2.0**-8), (np.float16, 2.0**-11)])
def test_a_product_is_added_to_a_16_bit_accumulator_in_f32_and_rounded_once(dtype, tiny):
    """`-1 + (1 + tiny)` where `1 + tiny` is not representable in the accumulator's type: rounding the product
    first gave 0."""
    a, b = np.zeros((8, 8), dtype), np.zeros((8, 8), dtype)
    a[:, 0], a[:, 1], b[0, :], b[1, :] = 1, tiny, 1, 1
    out = np.zeros((8, 8), dtype)
    accumulate[(1,)](a, b, np.full((8, 8), -1, dtype), out, N=8)
    metile.synchronize()
    assert (out.astype(np.float32) == np.float32(tiny)).all()


@metile.kernel
def f8_math(X, Out, OP: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    if OP == "erf":
        y = metile.erf(x)
    elif OP == "fma":
        y = metile.fma(x, x, x)
    else:
        y = metile.sigmoid(x)
    metile.store(Out + offs, y)


@pytest.mark.parametrize("op", ["erf", "fma", "sigmoid"])
def test_math_on_8_bit_floats_computes_in_f16(op):
    x = np.array([1.0, 0.5, -2.0, 0.125] * 2, F8)
    out = np.zeros(8, np.float32)
    kernel = f8_math.trace(x, out, OP=op, BLOCK=8)
    f8_math[(1,)](x, out, OP=op, BLOCK=8)
    metile.synchronize()
    v = x.astype(np.float64)
    ref = {"erf": np.vectorize(__import__("math").erf)(v), "fma": v * v + v, "sigmoid": 1 / (1 + np.exp(-v))}[op]
    assert "f8e4m3" not in metile.ir.pretty(kernel).split("store")[-1]   # the stored value is f16
    np.testing.assert_allclose(out, ref.astype(np.float16).astype(np.float32), rtol=2e-3)


@metile.kernel
def carried_sum(X, Out, n, BLOCK: metile.constexpr):
    acc = metile.load(X + metile.arange(0, BLOCK))
    for i in metile.tile_range(0, 2 * BLOCK, BLOCK):
        offs = i + metile.arange(0, BLOCK)
        acc = acc + metile.load(X + offs, mask=offs < n)
    metile.store(Out + metile.arange(0, BLOCK), acc)


def test_a_carried_negative_zero_survives_an_inactive_update():
    """The second block is inactive (n = BLOCK), so the sum keeps its old value there: `-0.0`, not
    `-0.0 + 0.0 == +0.0`."""
    x = np.full(32, -0.0, np.float32)
    out = np.zeros(16, np.float32)
    carried_sum[(1,)](x, out, 16, BLOCK=16)
    metile.synchronize()
    assert (out == 0).all() and np.signbit(out).all()


@metile.kernel
def floor_ops(A, B, Q, R, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    a, b = metile.load(A + offs), metile.load(B + offs)
    metile.store(Q + offs, a // b)
    metile.store(R + offs, a % b)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float_floor_division_and_modulo_keep_pythons_signed_zeros(dtype):
    pairs = [(-0.0, 3.0), (0.0, -3.0), (6.0, -3.0), (-6.0, 3.0), (1.0, float("inf")), (-1.0, float("inf")),
             (0.0, float("-inf")), (-0.0, -3.0), (7.5, 2.5), (-7.5, 2.5), (1.0, 0.1), (5.0, -2.0), (-1.0, 3.0),
             (0.5, -4.0), (-0.5, 4.0), (3.0, 3.0)]
    a = np.array([p[0] for p in pairs], dtype)
    b = np.array([p[1] for p in pairs], dtype)
    q, r = np.zeros(16, dtype), np.zeros(16, dtype)
    floor_ops[(1,)](a, b, q, r, BLOCK=16)
    metile.synchronize()
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        for got, want in ((q[i], x // y), (r[i], x % y)):
            want = np.asarray(want, dtype)
            assert got == want and np.signbit(got) == np.signbit(want), (x, y, got, want)


@metile.kernel
def back_offsets(X, O, Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    o = metile.load(O + offs)
    metile.store(Out + offs, metile.load(X + 200 - o))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.int8])
def test_pointer_minus_unsigned_offsets_subtracts_their_values(dtype):
    o = np.array([3, 0, 1, 120, 17, 99, -50, 7] if dtype is np.int8 else [3, 0, 1, 200, 17, 99, 150, 7], dtype)
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros(8, np.float32)
    back_offsets[(1,)](x, o, out, BLOCK=8)
    metile.synchronize()
    assert (out == 200 - o.astype(np.int64)).all()


@metile.kernel
def sigmoid_of(X, Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.sigmoid(metile.load(X + offs)))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.int16])
def test_sigmoid_of_an_integer_converts_before_negating(dtype):
    x = np.array([0, 1, 3, 7, 20, 2, 5, 100], dtype)
    out = np.zeros(8, np.float32)
    sigmoid_of[(1,)](x, out, BLOCK=8)
    metile.synchronize()
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)


@metile.kernel
def known_signs(Out, n):
    pid = metile.program_id(0)
    metile.store(Out + pid * 2, pid // metile.maximum(n, 1))   # never negative over positive: Metal's `/`
    metile.store(Out + pid * 2 + 1, pid % 3)


@metile.kernel
def unknown_signs(Out, n):
    pid = metile.program_id(0)
    metile.store(Out + pid * 2, (pid - 5) // metile.maximum(n, 1))   # a negative dividend: floored
    metile.store(Out + pid * 2 + 1, pid % n)                         # any divisor: the divisor's sign


@pytest.mark.parametrize("n", [3, -4, 1])
def test_floor_division_is_metals_only_where_the_signs_are_known(n):
    """`//` and `%` are Metal's truncating `/` and `%` only where the dividend is known not to be negative (a program
    index, an array length) and the divisor to be positive (`maximum(n, 1)`, a positive constant); elsewhere they
    floor, as in Python."""
    grid = 8
    known, unknown = np.zeros(2 * grid, np.int32), np.zeros(2 * grid, np.int32)
    compiled = known_signs.compile(known, n)
    assert " ? " not in compiled.msl.split("{", 1)[1]   # no sign fix-up selected
    known_signs[(grid,)](known, n)
    unknown_signs[(grid,)](unknown, n)
    d = max(n, 1)
    for pid in range(grid):
        assert list(known[2 * pid:2 * pid + 2]) == [pid // d, pid % 3]
        assert list(unknown[2 * pid:2 * pid + 2]) == [(pid - 5) // d, pid % n]


@metile.kernel
def ints_to_bf16(X, Y, N: metile.constexpr):
    r = metile.arange(0, N)
    metile.store(Y + r, metile.load(X + r).to(metile.bfloat16))


# 2**30 + 2**22 + 1 is just past the middle of two bf16 values; rounded to f32 first, the 1 is lost and the tie goes
# to the even one, 2**30. -2**63 and 2**64 - 1 check the magnitude of the lowest long and the largest ulong.
INTS = [2**30 + 2**22 + 1, -(2**30 + 2**22 + 1), 2**30 + 2**22, 2**24 + 1, 2**31 - 1, 3 * 2**29 + 2**21 + 7, 5, 0]
WIDE = [2**62 + 2**54 + 1, -(2**62 + 2**54 + 1), 2**53 + 2**45 + 1, -2**63, 2**63 - 1]
UWIDE = [2**63 + 2**55 + 1, 2**64 - 1, 2**56 + 2**48, 2**40 + 2**32 + 1]


def bf16_of(n: int) -> float:
    """The bf16 nearest the integer `n` (ties to even), computed exactly."""
    if n == 0:
        return 0.0
    a = abs(n)
    shift = max(a.bit_length() - 8, 0)
    q, rest = divmod(a, 1 << shift)
    if shift and (rest > 1 << (shift - 1) or (rest == 1 << (shift - 1) and q & 1)):
        q += 1
    return float(q << shift) * (1 if n > 0 else -1)


@pytest.mark.parametrize(("dtype", "values"), [(np.int32, INTS), (np.uint32, [v for v in INTS if v >= 0]),
                                               (np.int64, INTS + WIDE), (np.uint64, UWIDE)])
def test_integers_round_to_bf16_once(dtype, values):
    """3.6: an integer converts to a float by rounding to nearest, once. Converting through f32 rounded twice where
    the f32 value is a tie between two bf16 values."""
    x = np.array(values + [1] * (8 - len(values) % 8 if len(values) % 8 else 0), dtype)
    y = np.zeros(x.size, ml_dtypes.bfloat16)
    ints_to_bf16[(1,)](x, y, N=x.size)
    assert y.astype(np.float64).tolist() == [bf16_of(int(v)) for v in x]


@metile.kernel
def bf16_constants(A, B, C):
    r = metile.arange(0, 2)
    metile.store(A + r, metile.full((2,), 1077936129, dtype="bf16"))
    metile.store(B + r, 1077936129)                                  # a Python int stored into bf16 memory
    metile.store(C + r, metile.zeros((2,), "bf16") + 1.0039062509313226)   # 1 + 2**-8 + 2**-30: weak, bf16


def test_constants_round_to_bf16_once():
    """A Python number in a bf16 computation or store is converted once (3.3, 3.6): spelled as an f32 constant
    first, 2**30 + 2**22 + 1 became 2**30 and 1 + 2**-8 + 2**-30 became 1.0 (each an f32 tie between two bf16)."""
    a, b, c = (np.zeros(2, ml_dtypes.bfloat16) for _ in range(3))
    bf16_constants[(1,)](a, b, c)
    assert a.astype(np.float64).tolist() == b.astype(np.float64).tolist() == [2.0**30 + 2.0**23] * 2
    assert c.astype(np.float64).tolist() == [1.0 + 2.0**-7] * 2
