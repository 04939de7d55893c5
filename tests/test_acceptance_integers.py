"""Acceptance: integer element types and mixed-type promotion, compared exactly with numpy.

- i8, u8, i16, u16, i32 and u32 tiles under `// % & | ^ << >>` and unary minus. `//` and `%` follow
  Python (floor division, remainder with the divisor's sign) on negative operands, as `metile.language`
  states; `>>` on signed types is arithmetic (Python's); unary minus on unsigned types wraps, as numpy's.
  Operands stay clear of undefined cases: no division by zero (masked-off divisors load `other=1`), no
  `MIN // -1`, no `-MIN`, left shifts that do not overflow.
- promotion of mixed operands as `metile.ir.types` defines it (a float beats an integer; same-signedness
  integers widen; signed with unsigned gives the unsigned type when it is at least as wide, else the signed
  one; bools compute in i32; Python numbers are weak), observed through results stored into wider buffers.
"""

from __future__ import annotations

import numpy as np
import pytest

import metile

BLOCK = 256
INT_TYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32]


pytestmark = pytest.mark.usefixtures("on_cpu")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@metile.kernel
def int_ops(A, B, S, Q, R, AND, OR, XOR, SHL, SHR, NEG, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    a = metile.load(A + offs, mask=live)
    b = metile.load(B + offs, mask=live, other=1)
    s = metile.load(S + offs, mask=live)
    metile.store(Q + offs, a // b, mask=live)
    metile.store(R + offs, a % b, mask=live)
    metile.store(AND + offs, a & b, mask=live)
    metile.store(OR + offs, a | b, mask=live)
    metile.store(XOR + offs, a ^ b, mask=live)
    metile.store(SHL + offs, (a & 15) << s, mask=live)
    metile.store(SHR + offs, a >> s, mask=live)
    metile.store(NEG + offs, -a, mask=live)


@metile.kernel
def promotions(I8, U8, I16, U16, I32, U32, F16, F32, OutI, OutU, OutF, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    i8 = metile.load(I8 + offs, mask=live)
    u8 = metile.load(U8 + offs, mask=live)
    i16 = metile.load(I16 + offs, mask=live)
    u16 = metile.load(U16 + offs, mask=live)
    i32 = metile.load(I32 + offs, mask=live)
    u32 = metile.load(U32 + offs, mask=live)
    f16 = metile.load(F16 + offs, mask=live)
    f32 = metile.load(F32 + offs, mask=live)
    metile.store(OutI + 0 * n + offs, i8 + i32, mask=live)                  # i32
    metile.store(OutI + 1 * n + offs, u8 + i16, mask=live)                  # i16
    metile.store(OutI + 2 * n + offs, u16 + i32, mask=live)                 # i32
    metile.store(OutI + 3 * n + offs, i8 + u8, mask=live)                   # u8
    metile.store(OutI + 4 * n + offs, i16 - u16, mask=live)                 # u16
    metile.store(OutI + 5 * n + offs, u8 + 1, mask=live)                    # u8 (weak Python int)
    metile.store(OutI + 6 * n + offs, (i32 > 0) + (u8 > 0), mask=live)     # bools add in i32
    metile.store(OutI + 7 * n + offs, (i32 + u32) > 100, mask=live)         # compared as u32
    metile.store(OutU + offs, (i32 + u32) // 2, mask=live)                  # u32
    metile.store(OutF + 0 * n + offs, f16 + f32, mask=live)                 # f32
    metile.store(OutF + 1 * n + offs, i32 + f16, mask=live)                 # f16
    metile.store(OutF + 2 * n + offs, f16 + 0.0001, mask=live)              # f16 (weak Python float)
    metile.store(OutF + 3 * n + offs, i32 * 0.5, mask=live)                 # f32
    metile.store(OutF + 4 * n + offs, i32 / i16, mask=live)                 # f32 true division


def operands(dtype, n: int, seed: int):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    lo = info.min + 1 if info.min else 0
    a = rng.integers(lo, info.max, n, endpoint=True, dtype=dtype)
    a[: min(n, 8)] = np.array([0, 1, 7, 9, lo, info.max, 3, 2], dtype=np.int64)[: min(n, 8)].astype(dtype)
    small = rng.integers(-9 if info.min else 1, 10, n, dtype=np.int64)
    small[small == 0] = 1
    wide = rng.integers(lo, info.max, n, endpoint=True, dtype=np.int64)
    wide[wide == 0] = 1
    b = np.where(rng.random(n) < 0.5, small, wide).astype(dtype)
    s = rng.integers(0, info.bits - 4, n, dtype=dtype)
    return a, b, s


@pytest.mark.parametrize("n", [1000, 5])
@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda d: np.dtype(d).name)
def test_integer_operators_follow_python(dtype, n):
    a, b, s = operands(dtype, n, seed=np.dtype(dtype).itemsize * 10 + n)
    outs = [np.zeros(n, dtype) for _ in range(8)]
    int_ops[(cdiv(n, BLOCK),)](a, b, s, *outs, n, BLOCK=BLOCK)
    q, r, and_, or_, xor, shl, shr, neg = outs
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    np.testing.assert_array_equal(q, a64 // b64)
    np.testing.assert_array_equal(r, a64 % b64)
    np.testing.assert_array_equal(and_, a & b)
    np.testing.assert_array_equal(or_, a | b)
    np.testing.assert_array_equal(xor, a ^ b)
    np.testing.assert_array_equal(shl, (a64 & 15) << s.astype(np.int64))
    np.testing.assert_array_equal(shr, a64 >> s.astype(np.int64))
    np.testing.assert_array_equal(neg, (-a64).astype(dtype))


def test_floor_division_and_modulo_on_negative_operands():
    pairs = [(-7, 2), (7, -2), (-7, -2), (-1, 3), (-9, 3), (0, -5), (5, 7), (-5, 7), (100, -1), (-100, 1)]
    for dtype in (np.int8, np.int16, np.int32):
        a = np.array([p[0] for p in pairs], dtype)
        b = np.array([p[1] for p in pairs], dtype)
        s = np.zeros_like(a)
        outs = [np.zeros_like(a) for _ in range(8)]
        int_ops[(1,)](a, b, s, *outs, a.size, BLOCK=BLOCK)
        np.testing.assert_array_equal(outs[0], [x // y for x, y in pairs], err_msg=np.dtype(dtype).name)
        np.testing.assert_array_equal(outs[1], [x % y for x, y in pairs], err_msg=np.dtype(dtype).name)


def promotion_inputs(n: int):
    rng = np.random.default_rng(2024)
    i8 = rng.integers(-127, 128, n, dtype=np.int8)
    u8 = rng.integers(0, 256, n, dtype=np.uint8)
    i16 = rng.integers(-32767, 32768, n, dtype=np.int16)
    i16[i16 == 0] = 3
    u16 = rng.integers(0, 65536, n, dtype=np.uint16)
    i32 = rng.integers(-60000, 60001, n, dtype=np.int32)
    i32[:4] = [2049, -2049, 4097, 0]
    u32 = rng.integers(0, 2**32, n, dtype=np.uint32)
    f16 = rng.standard_normal(n).astype(np.float16)
    f16[:4] = [1.0, 0.0, 0.0, -1.0]
    f32 = (rng.standard_normal(n) * 1e-3).astype(np.float32)
    f32[0] = 1e-4
    return i8, u8, i16, u16, i32, u32, f16, f32


@pytest.mark.parametrize("n", [700, 4])
def test_mixed_type_promotion(n):
    ins = promotion_inputs(n)
    i8, u8, i16, u16, i32, u32, f16, f32 = ins
    out_i = np.zeros(8 * n, np.int32)
    out_u = np.zeros(n, np.uint32)
    out_f = np.zeros(5 * n, np.float32)
    promotions[(cdiv(n, BLOCK),)](*ins, out_i, out_u, out_f, n, BLOCK=BLOCK)
    oi, of = out_i.reshape(8, n), out_f.reshape(5, n)
    np.testing.assert_array_equal(oi[0], i8.astype(np.int32) + i32)
    np.testing.assert_array_equal(oi[1], (u8.astype(np.int16) + i16).astype(np.int16))
    np.testing.assert_array_equal(oi[2], u16.astype(np.int32) + i32)
    np.testing.assert_array_equal(oi[3], i8.astype(np.uint8) + u8)
    np.testing.assert_array_equal(oi[4], i16.astype(np.uint16) - u16)
    np.testing.assert_array_equal(oi[5], u8 + np.uint8(1))
    np.testing.assert_array_equal(oi[6], (i32 > 0).astype(np.int32) + (u8 > 0))
    wrapped = i32.astype(np.uint32) + u32
    np.testing.assert_array_equal(oi[7], wrapped > 100)
    np.testing.assert_array_equal(out_u, wrapped // 2)
    np.testing.assert_allclose(of[0], f16.astype(np.float32) + f32, rtol=1e-6)
    np.testing.assert_array_equal(of[1], (i32.astype(np.float16) + f16).astype(np.float32))
    np.testing.assert_array_equal(of[2], (f16 + np.float16(0.0001)).astype(np.float32))
    np.testing.assert_array_equal(of[3], i32.astype(np.float32) * np.float32(0.5))
    np.testing.assert_allclose(of[4], i32.astype(np.float32) / i16.astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32])
def test_the_lowest_value_divided_by_minus_one_wraps_and_leaves_no_remainder(dtype):
    """`MIN % -1` is 0 (as in Python and numpy); `MIN // -1` wraps around to MIN (numpy's result; Python's
    does not fit). An i32 division of MIN by -1 traps on CPUs, so the lowering never issues one."""
    low = np.iinfo(dtype).min
    a = np.array([low, low, low + 1, 7, low], dtype)
    b = np.array([-1, 1, -1, -1, 2], dtype)
    s = np.zeros_like(a)
    outs = [np.zeros_like(a) for _ in range(8)]
    int_ops[(1,)](a, b, s, *outs, a.size, BLOCK=BLOCK)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(outs[0], np.floor_divide(a, b))
    np.testing.assert_array_equal(outs[1], [0, 0, 0, 0, 0])


def test_constant_zero_divisors_and_shift_counts_out_of_range_are_refused():
    @metile.kernel
    def bad(A, Out, BLOCK: metile.constexpr, OP: metile.constexpr):
        offs = metile.arange(0, BLOCK)
        a = metile.load(A + offs)
        if OP == 0:
            metile.store(Out + offs, a // 0)
        if OP == 1:
            metile.store(Out + offs, a % metile.zeros((BLOCK,), dtype="i32"))
        if OP == 2:
            metile.store(Out + offs, a >> 32)
        if OP == 3:
            metile.store(Out + offs, a << -1)

    a = np.ones(16, np.int32)
    for op, message in ((0, r"integer division by zero: the divisor of `//`"),
                        (1, r"integer division by zero: the divisor of `%`"),
                        (2, r"the shift count 32 is out of range for i32 \(0 to 31\)"),
                        (3, r"the shift count -1 is out of range for i32")):
        with pytest.raises(metile.MetileError, match=message) as info:
            bad[(1,)](a, a, BLOCK=16, OP=op)
        assert "metile.store(Out + offs" in str(info.value)


@metile.kernel
def fill_constant(Out, In, n, VALUE: metile.constexpr, OTHER: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, VALUE, mask=offs < n)
    metile.store(Out + n + offs, metile.load(In + offs, mask=offs < 2, other=OTHER), mask=offs < n)


@pytest.mark.parametrize(("dtype", "value", "expected"), [
    (np.int32, 2.75, 2), (np.int32, -2.75, -2), (np.uint8, 200.9, 200), (np.int16, 3.0, 3), (np.bool_, 2, True),
    (np.bool_, 0.0, False), (np.bool_, 0.5, True), (np.float16, 7, 7.0)])
def test_a_number_stored_or_loaded_as_other_converts_to_the_memory_type(dtype, value, expected):
    """As a traced value would: floats truncate toward zero into integers, nonzero numbers are true."""
    out = np.zeros(8, dtype)
    src = np.ones(2, dtype)
    fill_constant[(1,)](out, src, 4, VALUE=value, OTHER=value, BLOCK=16)
    np.testing.assert_array_equal(out, np.array([expected] * 4 + [1, 1, expected, expected], dtype))


@pytest.mark.parametrize(("dtype", "value", "message"), [(np.int32, 3e10, "does not fit i32"),
                                                         (np.uint8, -1.5, "does not fit u8"),
                                                         (np.int32, float("nan"), "cannot be converted to i32")])
def test_a_number_that_the_memory_type_cannot_hold_is_refused(dtype, value, message):
    out = np.zeros(8, dtype)
    with pytest.raises(metile.MetileError, match=message):
        fill_constant[(1,)](out, out, 4, VALUE=value, OTHER=0, BLOCK=16)
