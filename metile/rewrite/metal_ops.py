"""Small constructors of Metal IR values that fold the constant cases the lowering produces.

Index arithmetic built from layouts is full of `x * 1`, `x + 0` and constant products; folding them
while building keeps the emitted MSL readable and the IR small. The lowering's indexes are i32; where one
meets a 64-bit integer of the kernel's (`add`, `mul`, `lt`), it is widened to it (`widened`). Each helper
returns a plain `Binary`/`Compare`... node when nothing folds, so the result is always valid Metal IR.
`floor_div` and `floor_mod` spell Python's `//` and `%` with Metal's truncating operators.
"""

from __future__ import annotations

import functools

from metile.ir.errors import Loc
from metile.ir.metal import Builtin
from metile.ir.ops import BinOp, BuiltinKind, CmpOp, UnOp
from metile.ir.types import DType, TileType
from metile.ir.values import Binary, Bitcast, Cast, Compare, Const, Fma, Unary, Value, Where
from metile.layout import Layout
from metile.layout.layout import flat_modes

I32 = DType.I32


@functools.lru_cache(maxsize=4096)
def const(v: int, dtype: DType = I32) -> Const:
    return Const(v, dtype)


def is_const(v: Value, x=None) -> bool:
    return isinstance(v, Const) and (x is None or v.value == x)


def widened(a: Value, b: Value) -> tuple[Value, Value]:
    """`a` and `b` in one integer type: an i32 index the lowering computes meets an i64 one from the kernel (an offset
    widened with `.to(metile.int64)`, a row stride of 64 bits), and is widened to it (a constant is retyped)."""
    if a.type.__class__ is not TileType or b.type.__class__ is not TileType:
        return a, b
    ta, tb = a.type.dtype, b.type.dtype
    if ta is tb or not (ta.is_int and tb.is_int):
        return a, b
    if ta.bits < tb.bits:
        return _widen(a, tb), b
    if tb.bits < ta.bits:
        return a, _widen(b, ta)
    return a, b


def _widen(v: Value, dtype: DType) -> Value:
    if isinstance(v, Const):   # as the cast would convert it: modulo 2**64 into an unsigned type
        return const(v.value if dtype.is_signed else v.value % (1 << dtype.bits), dtype)
    return Cast(v, dtype)


def add(a: Value, b: Value) -> Value:
    if a.type.dtype is not b.type.dtype:
        a, b = widened(a, b)
    ca, cb = a.__class__ is Const, b.__class__ is Const
    if not (ca or cb):  # the common case: nothing to fold
        return Binary(BinOp.ADD, a, b)
    if ca and a.value == 0:
        return b
    if cb and b.value == 0:
        return a
    if ca and cb and a.dtype is b.dtype is I32:
        return const(a.value + b.value)
    if ca and not cb:
        a, b, cb = b, a, True
    if cb and isinstance(a, Binary) and a.op is BinOp.ADD and isinstance(a.rhs, Const) \
            and a.rhs.dtype is b.dtype is I32:
        return add(a.lhs, const(a.rhs.value + b.value))
    return Binary(BinOp.ADD, a, b)


def mul(a: Value, b: Value) -> Value:
    if a.type.dtype is not b.type.dtype:
        a, b = widened(a, b)
    ca, cb = a.__class__ is Const, b.__class__ is Const
    if not (ca or cb):  # the common case: nothing to fold
        return Binary(BinOp.MUL, a, b)
    if ca and a.value == 1:
        return b
    if cb and b.value == 1:
        return a
    if (ca and a.value == 0 and a.dtype.is_int) or (cb and b.value == 0 and b.dtype.is_int):
        return const(0, a.type.dtype)
    if ca and cb and a.dtype is b.dtype is I32:
        return const(a.value * b.value)
    return Binary(BinOp.MUL, a, b)


def div(a: Value, b: int) -> Value:
    """`a / b` for a non-negative integer `a` and a positive constant `b`, in `a`'s type."""
    if b == 1:
        return a
    dtype = a.type.dtype
    if isinstance(a, Const):
        return const(a.value // b, dtype)
    return Binary(BinOp.TRUNCDIV, a, const(b, dtype))


def mod(a: Value, b: int) -> Value:
    """`a % b` for a non-negative integer `a` and a positive constant `b`, in `a`'s type."""
    dtype = a.type.dtype
    if b == 1:
        return const(0, dtype)
    if isinstance(a, Const):
        return const(a.value % b, dtype)
    return Binary(BinOp.REM, a, const(b, dtype))


def apply_layout(layout: Layout, idx: Value) -> Value:
    """`layout(idx)` for a run-time index `idx` in `0 .. size(layout) - 1`: each mode's coordinate (the index
    divided by the sizes of the modes before it, modulo its own) times its stride, summed."""
    shapes, strides = flat_modes(layout)
    out: Value = const(0)
    before = 1
    for i, (extent, stride) in enumerate(zip(shapes, strides)):
        if stride != 0 and extent != 1:
            c = div(idx, before)
            out = add(out, mul(c if i == len(shapes) - 1 else mod(c, extent), const(stride)))
        before *= extent
    return out


def lt(a: Value, b: Value) -> Value:
    if a.type.dtype is not b.type.dtype:
        a, b = widened(a, b)
    return Compare(CmpOp.LT, a, b)


def both(a: Value | None, b: Value | None) -> Value | None:
    """`a & b` on bool scalars, None standing for "true"."""
    if a is None or is_const(a, True):
        return b
    if b is None or is_const(b, True):
        return a
    return Binary(BinOp.AND, a, b)


def all_of(conds) -> Value | None:
    """The conjunction of bool scalars (None entries are "true"); None when all are."""
    out = None
    for c in conds:
        out = both(out, c)
    return out


def select(c: Value | None, x: Value, y: Value) -> Value:
    return x if c is None else Where(c, x, y)


@functools.lru_cache(maxsize=64)
def builtin(kind: BuiltinKind, axis: int = 0) -> Value:
    """The builtin as an `int`; one node per (kind, axis), so that its uses are the same object (the IR is
    immutable, and identical operands are found by identity before structure)."""
    return Cast(Builtin(kind, axis), I32)


def floor_div(a: Value, b: Value, loc: Loc | None = None) -> Value:
    """Python's `a // b` from Metal IR operators (numpy's where Python raises: a zero divisor gives `a / b` on
    floats, and `INT_MIN // -1` wraps around to `INT_MIN`, in 32 and 64 bits); the result node has the location
    `loc`."""
    dtype = a.type.dtype
    if dtype in (DType.F16, DType.BF16):  # in f32, rounded once at the end, as numpy computes 16-bit floats
        return Cast(floor_div(Cast(a, DType.F32), Cast(b, DType.F32)), dtype, loc=loc)
    if dtype.is_float:
        return _float_floor_div(a, b, dtype, loc)
    if not dtype.is_signed:
        return Binary(BinOp.TRUNCDIV, a, b, loc=loc)
    safe, minus_one = _divisor(b)
    q = Binary(BinOp.TRUNCDIV, a, safe)
    floored = (_opposite_signs(Binary(BinOp.REM, a, safe), safe), Binary(BinOp.SUB, q, Const(1, dtype)), q)
    if minus_one is None:
        return Where(*floored, loc=loc)
    return Where(minus_one, Binary(BinOp.SUB, Const(0, dtype), a), Where(*floored), loc=loc)


_EXACT_INTEGERS = 2.0 ** 24   # an f32 quotient below this is within 0.5 of the exact one, and every integer is an f32


def _float_floor_div(a: Value, b: Value, dtype: DType, loc: Loc | None) -> Value:
    """The floor of the exact quotient `a / b` of two f32 values, rounded to f32, with Python's signed zeros.

    `q = a / b` is rounded, so `floor(q)` may be one too large where `q` rounded up to an integer (1.0 / 0.1 is 10)
    or, past 2**23, to the next integer (107220944.0 / 7.75 is 13834961.0, exactly 13834960.52). For `|q| < 2**24`,
    `f = floor(q)` is the floor or one more, and it is one more exactly where `a - f * b`, whose sign `fma` gives
    exactly (its rounding keeps the sign), is nonzero with the sign opposite to `b`. From 2**24, `q` is an integer
    and `x = a - q * b` is exact (as for any correctly rounded quotient): the floor is `q + floor(x / b)`, and
    `floor(x / b)` is found the same way (exactly while `|x / b| < 2**24`, so for `|q|` below 2**48). An infinite
    quotient of finite operands stays infinite, and infinite or NaN dividends give NaN, as in Python."""
    one, zero = Const(1.0, dtype), Const(0.0, dtype)
    q = Binary(BinOp.DIV, a, b)
    f = Unary(UnOp.FLOOR, q)
    # a - f * b; for f == 0 it is a (b may be infinite: 0 * inf would be NaN, and -5.0 // inf is -1)
    x = Where(Compare(CmpOp.EQ, f, zero), a, Fma(Unary(UnOp.NEG, f), b, a))
    near = Where(_opposite_signs(x, b), Binary(BinOp.SUB, f, one), f)
    d = Unary(UnOp.FLOOR, Binary(BinOp.DIV, x, b))
    d = Where(_opposite_signs(Fma(Unary(UnOp.NEG, d), b, x), b), Binary(BinOp.SUB, d, one), d)
    out = Where(Compare(CmpOp.LT, Unary(UnOp.ABS, q), Const(_EXACT_INTEGERS, dtype)), near, Binary(BinOp.ADD, f, d))
    # an infinite q: q itself for a finite a, where a - a is 0, and NaN for an infinite or NaN a, where it is NaN
    out = Where(Compare(CmpOp.EQ, Unary(UnOp.ABS, q), Const(float("inf"), dtype)),
                Binary(BinOp.ADD, q, Binary(BinOp.SUB, a, a)), out)
    # a zero quotient has the sign of `a / b` (`-0.0 // 3.0` is -0.0, `0.5 // -3.0` is -0.0)
    negative = Compare(CmpOp.NE, _sign_bit(a), Compare(CmpOp.LT, b, zero))
    out = Where(Compare(CmpOp.EQ, out, zero), _signed_zero(negative, dtype), out)
    return Where(Compare(CmpOp.EQ, b, zero), Binary(BinOp.DIV, a, b), out, loc=loc)


def floor_mod(a: Value, b: Value, loc: Loc | None = None) -> Value:
    """Python's `a % b` (the result has the divisor's sign) from Metal IR operators; the result node has the
    location `loc`."""
    dtype = a.type.dtype
    if not (dtype.is_float or dtype.is_signed):
        return Binary(BinOp.REM, a, b, loc=loc)
    if not dtype.is_float:
        b = _divisor(b)[0]  # `x % -1` is `x % 1`: 0
    r = Binary(BinOp.REM, a, b)
    out = Where(_opposite_signs(r, b), Binary(BinOp.ADD, r, b), r)
    if dtype.is_float:   # a zero remainder has the divisor's sign (`6.0 % -3.0` is -0.0); `fmod` gives the dividend's
        zero = Const(0.0, dtype)
        return Where(Compare(CmpOp.EQ, r, zero), _signed_zero(Compare(CmpOp.LT, b, zero), dtype), out, loc=loc)
    return Where(out.cond, out.x, out.y, loc=loc)


def _sign_bit(x: Value) -> Value:
    """Whether the f32 `x` has its sign bit set (true for -0.0, which compares equal to 0.0)."""
    return Compare(CmpOp.LT, Bitcast(x, DType.I32), Const(0, DType.I32))


def _signed_zero(negative: Value, dtype: DType) -> Value:
    return Where(negative, Const(-0.0, dtype), Const(0.0, dtype))


def _opposite_signs(r: Value, b: Value) -> Value:
    """Whether the remainder `r` is nonzero with the sign opposite to the divisor `b`."""
    zero = Const(0, r.type.dtype)
    return Where(Compare(CmpOp.LT, b, zero), Compare(CmpOp.GT, r, zero), Compare(CmpOp.LT, r, zero))


def _divisor(b: Value) -> tuple[Value, Value | None]:
    """The signed integer divisor `b` made safe, and the test that it is -1 (None when it cannot be). An i32 or
    i64 `INT_MIN / -1` traps on CPUs, so a divisor that may be -1 divides as 1 and the caller selects the result
    for -1 apart; narrower types divide in 32 bits and cannot trap."""
    dtype = b.type.dtype
    if dtype not in _TRAPPING or (isinstance(b, Const) and b.value != -1):
        return b, None
    minus_one = Compare(CmpOp.EQ, b, Const(-1, dtype))
    return Where(minus_one, Const(1, dtype), b), minus_one


_TRAPPING = (DType.I32, DType.I64)


__all__ = ["add", "all_of", "both", "builtin", "const", "div", "floor_div", "floor_mod", "is_const", "lt", "mod", "mul",
           "select", "widened"]
