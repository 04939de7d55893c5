"""Small constructors of Metal IR values that fold the constant cases the lowering produces.

Index arithmetic built from layouts is full of `x * 1`, `x + 0` and constant products; folding them
while building keeps the emitted MSL readable and the IR small. Each helper returns a plain
`Binary`/`Compare`... node when nothing folds, so the result is always valid Metal IR.
"""

from __future__ import annotations

import functools

from metile.ir.metal import Builtin
from metile.ir.ops import BinOp, BuiltinKind, CmpOp
from metile.ir.types import DType
from metile.ir.values import Binary, Cast, Compare, Const, Value, Where

I32 = DType.I32


@functools.lru_cache(maxsize=4096)
def const(v: int, dtype: DType = I32) -> Const:
    return Const(v, dtype)


def is_const(v: Value, x=None) -> bool:
    return isinstance(v, Const) and (x is None or v.value == x)


def add(a: Value, b: Value) -> Value:
    ca, cb = isinstance(a, Const), isinstance(b, Const)
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
    ca, cb = isinstance(a, Const), isinstance(b, Const)
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
    """`a / b` for a non-negative i32 `a` and a positive constant `b`."""
    if b == 1:
        return a
    if isinstance(a, Const):
        return const(a.value // b)
    return Binary(BinOp.TRUNCDIV, a, const(b))


def mod(a: Value, b: int) -> Value:
    """`a % b` for a non-negative i32 `a` and a positive constant `b`."""
    if b == 1:
        return const(0)
    if isinstance(a, Const):
        return const(a.value % b)
    return Binary(BinOp.REM, a, const(b))


def lt(a: Value, b: Value) -> Value:
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


__all__ = ["add", "all_of", "both", "builtin", "const", "div", "is_const", "lt", "mod", "mul", "select"]
