"""`metile.dot`'s product as Tile IR (docs/language.md 6.6): the simdgroup-matrix type its operands convert to, the
longest exact inner dimension of integer operands, and how the accumulator is added.

`dot(a, b, acc)` is `AllActive(acc) + Dot(a, b)`, converted: products of integer tiles become `i32` (exact), and
the sum is formed in f32 and converted once to the accumulator's type unless that type is f32, or an integer type
with integer tiles (added in that type). `AllActive` makes the result active everywhere (5.3), where
`acc + dot(a, b)` keeps the inactivity of `acc`. An accumulator the trace knows to be active everywhere
(`active_everywhere`: a constant, a fill, or a variable bound to one or carried by a loop from one) is added as it
is: `AllActive` of it would change nothing, and `skip_inactive` would have to rebuild the kernel to remove it.
"""

from __future__ import annotations

from metile.frontend import semantic as sem
from metile.frontend.errors import KernelTypeError, ShapeMismatchError
from metile.ir.errors import Loc
from metile.ir.ops import BinOp
from metile.ir.tile import AllActive, Dot, Full
from metile.ir.types import COMPUTE_AS, DType, PtrType
from metile.ir.values import Binary, Const, Value, Var

_MATRIX_INPUTS = (DType.F32, DType.F16, DType.BF16, DType.F8E4M3, DType.F8E5M2, DType.I8, DType.U8)
_INT_RANGE = {DType.I8: 128, DType.U8: 255}   # the largest magnitude of each integer matrix input


def max_int_dot_k(da: DType, db: DType) -> int:
    """The longest inner dimension of a `dot` of integer tiles of types `da` and `db`: the products are summed in
    f32, exact while every partial sum stays within 2**24, so at most 2**24 / (largest |a| * largest |b|)
    products, in whole 8-wide steps: 1024 for i8 x i8, 512 for i8 x u8, 256 for u8 x u8."""
    return (1 << 24) // (_INT_RANGE[da] * _INT_RANGE[db]) // 8 * 8


def matrix_dtype(da: DType, db: DType, loc: Loc) -> DType:
    """The simdgroup-matrix type `dot` converts operands of types `da` and `db` to: one that holds every value of
    both (f16 holds the 8-bit floats and integers, bf16 too; f16 with bf16 needs f32)."""
    for d in (da, db):
        if d.bits == 64:
            raise KernelTypeError(f"dot has no {d} form: Metal's simdgroup matrices multiply 16- and 32-bit floats, "
                                  "and 64-bit products would not be exact in them; convert to a narrower type first "
                                  "(x.to(metile.int8) for small values) or multiply with * and metile.sum", loc)
        if d not in _MATRIX_INPUTS:
            raise KernelTypeError(f"dot takes tiles of {', '.join(x.value for x in _MATRIX_INPUTS)}, not {d}: convert "
                                  "it first (x.to(metile.float32))", loc)
    if DType.F32 in (da, db):
        return DType.F32
    if DType.BF16 in (da, db):
        return DType.F32 if DType.F16 in (da, db) else DType.BF16
    return DType.F16


def active_everywhere(tr, v) -> bool:
    """Whether the trace knows `v` to be active at every element (`metile.rewrite.inactive`): a number, a constant,
    a fill, or a variable of `tr.active` (bound to a fill, or carried by a loop from a value active everywhere, which
    a loop's updates never make inactive). False says nothing."""
    cls = v.__class__
    if cls is Var:
        return tr.active.get(v.name) is v
    return cls is Const or cls is Full or not isinstance(v, Value)


def product(a, b, acc, loc: Loc, tf32: bool = False, active: bool = False) -> Value:
    """`acc + a @ b` as Tile IR (6.6), or `a @ b` when `acc` is None; `tf32` lets a product of floats that is
    computed in f32 be computed at TF32's precision (`Dot.tf32`); `active`: `acc` is known to be active everywhere
    (`active_everywhere`), so it is added without `AllActive`."""
    for x, n in ((a, "a"), (b, "b")):
        if not isinstance(x, Value) or isinstance(x.type, PtrType) or len(x.type.shape) not in (2, 3):
            kind = x.type if isinstance(x, Value) else type(x).__name__
            raise ShapeMismatchError(f"dot: '{n}' must be a 2-D tile (or a 3-D batch of them), not {kind}", loc)
    if len(a.type.shape) != len(b.type.shape):
        raise ShapeMismatchError(f"dot: a {len(a.type.shape)}-D tile times a {len(b.type.shape)}-D tile: both are "
                                 "2-D, or both 3-D with the same batch", loc)
    (*batch, m, k), (*batch2, k2, n) = a.type.shape, b.type.shape
    if batch != batch2:
        raise ShapeMismatchError(f"dot: the batches differ: {list(a.type.shape)} x {list(b.type.shape)}", loc)
    if k != k2:
        raise ShapeMismatchError(f"dot: inner dimensions differ: {list(a.type.shape)} x {list(b.type.shape)}", loc)
    out = (*batch, m, n)
    da, db = a.type.dtype, b.type.dtype
    mt = matrix_dtype(da, db, loc)
    relaxed = tf32 and mt is DType.F32 and not (da.is_int or db.is_int)
    prod: Value = Dot(sem.cast(a, mt, loc), sem.cast(b, mt, loc), tf32=relaxed, loc=loc)
    if da.is_int and db.is_int:  # integers multiply exactly in f32 matrices, then convert
        limit = max_int_dot_k(da, db)
        if k > limit:
            raise ShapeMismatchError(f"dot of {da} x {db} tiles sums at most {limit} products exactly, not {k}: "
                                     "split the inner dimension (a smaller BLOCK_K in the tile_range loop)", loc)
        prod = sem.cast(prod, DType.I32, loc)
    if acc is None:
        return prod
    at = sem.type_of(acc, loc)
    if isinstance(at, PtrType):
        raise KernelTypeError(f"dot: the accumulator is a pointer ({at}); load the values first (metile.load)", loc)
    if at.shape not in ((), out):
        raise ShapeMismatchError(f"dot: the accumulator has shape {list(at.shape)}, the product is {list(out)}", loc)
    dt = at.dtype if isinstance(acc, Value) else prod.type.dtype
    if dt is DType.BOOL:
        raise KernelTypeError("dot: the accumulator is a bool tile; accumulate in a number type (f32, for example)",
                              loc)
    dt = COMPUTE_AS.get(dt, dt)
    if not active and isinstance(acc, Value) and not isinstance(acc, (Const, Full)):
        acc = AllActive(acc, loc=loc)   # the result is active everywhere, whatever the inactivity of acc (5.3)
    if (dt.is_float and dt is not DType.F32) or (dt.is_int and prod.type.dtype.is_float):
        # added in f32 and converted once to the accumulator's type; an integer acc too, to float products (an i32
        # 48 and products summing to -0.5 give 47, where adding the sum converted first would give 48)
        total = Binary(BinOp.ADD, sem.coerce(acc, DType.F32, out, loc), sem.cast(prod, DType.F32, loc), loc=loc)
        return sem.cast(total, dt, loc)
    return Binary(BinOp.ADD, sem.coerce(acc, dt, out, loc), sem.cast(prod, dt, loc), loc=loc)


__all__ = ["active_everywhere", "matrix_dtype", "max_int_dot_k", "product"]
