"""Small pure helpers of the lowering: accumulation dtypes, reduction identities and combiners, casts, and the
simdgroup index tests."""

from __future__ import annotations

import math

from metile.ir.ops import BinOp, BuiltinKind, CmpOp, ReduceOp
from metile.ir.types import DType
from metile.ir.values import Binary, Cast, Compare, Const, Value
from metile.rewrite import metal_ops as mo

UNROLL_LIMIT = 8


def acc_dtype(dtype: DType) -> DType:
    """The dtype a reduction or scan of `dtype` combines in: f32 for floats, 32 bits for narrower integers, and a
    64-bit integer type itself."""
    if dtype.is_float:
        return DType.F32
    if dtype.bits == 64:
        return dtype
    return DType.I32 if dtype.is_signed else DType.U32


def identity(op: ReduceOp, dtype: DType) -> Const:
    """The element a reduction by `op` over `dtype` starts from (and padding contributes)."""
    if op is ReduceOp.SUM:
        return Const(0, dtype)
    if op is ReduceOp.PROD:
        return Const(1, dtype)
    if dtype.is_float:
        return Const(-math.inf if op is ReduceOp.MAX else math.inf, dtype)
    bits = dtype.bits
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype.is_signed else (0, (1 << bits) - 1)
    return Const(lo if op is ReduceOp.MAX else hi, dtype)


COMBINE = {ReduceOp.SUM: BinOp.ADD, ReduceOp.PROD: BinOp.MUL, ReduceOp.MAX: BinOp.MAX, ReduceOp.MIN: BinOp.MIN}


def combine(op: ReduceOp, a: Value, b: Value) -> Value:
    return Binary(COMBINE[op], a, b)


def cast(v: Value, dtype: DType) -> Value:
    return v if v.type.dtype is dtype else Cast(v, dtype)


def sg_index(first: int) -> Value:
    """This thread's simdgroup index counted from simdgroup `first`."""
    sg = mo.builtin(BuiltinKind.SIMDGROUP_INDEX_IN_THREADGROUP)
    return Binary(BinOp.SUB, sg, mo.const(first)) if first else sg


def sg_in(first: int, count: int) -> Value:
    """True on the simdgroups `first .. first + count - 1`."""
    sg = mo.builtin(BuiltinKind.SIMDGROUP_INDEX_IN_THREADGROUP)
    return mo.both(Compare(CmpOp.GE, sg, mo.const(first)), mo.lt(sg, mo.const(first + count)))


__all__ = ["COMBINE", "UNROLL_LIMIT", "acc_dtype", "cast", "combine", "identity", "sg_in", "sg_index"]
