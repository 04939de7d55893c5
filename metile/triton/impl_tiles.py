"""Triton's tile functions in a `@triton.jit` kernel: creation (`tl.arange`, `tl.full`, `tl.zeros`...), shapes
(`tl.broadcast_to`, `tl.expand_dims`, `tl.trans`, `tl.permute`, `tl.reshape`, `tl.view`, `tl.ravel`, `tl.join`,
`tl.split`, `tl.interleave`, `tl.cat`, built as `metile.frontend.shapes` builds metile's), element-wise selection and
conversion (`tl.where`, `tl.maximum`, `tl.clamp`, `tl.cast`), the functions of Triton's standard library
(`tl.sigmoid`, `tl.softmax`, `tl.cdiv`, `tl.swizzle2d`, `tl.zeros_like`), reductions and scans, `tl.dot` and the
random numbers.

Each follows Triton 3.4: shapes of `tl.arange`, `tl.full` and `tl.reshape` are powers of two; `tl.broadcast_to`
keeps the rank; `tl.max`/`tl.min` without indices compute in 32 bits (f16 and bf16 in f32, narrower integers and
int1 in int32); `tl.sum` and `tl.cumsum` of integers narrower than 32 bits sum in int32, or uint32 for unsigned ones
and int1; `tl.cumprod` keeps its type; `tl.dot` takes two operands of one type (int8, f16, bf16, f32, or 8-bit
floats), 2-D or batched 3-D, gives int32 for int8, f32 for f32 and bf16, `out_dtype` (f32 by default) for f16 and
8-bit floats, and takes an accumulator of that type. `tl.trans` without dimensions swaps the last two, as later
Triton versions do (on 2-D tensors, Triton 3.4's `(1, 0)`). The standard library's functions are built from the
others, as Triton writes them.
"""

from __future__ import annotations

from metile import language as L
from metile.frontend import library, shapes
from metile.frontend import semantic as sem
from metile.frontend.builtins import BUILTINS, static_int
from metile.frontend.errors import KernelArgumentError, KernelTypeError, ShapeMismatchError
from metile.frontend.library import LIBRARY
from metile.ir.errors import Loc
from metile.ir.types import DType, PtrType
from metile.ir.values import Bitcast, Value
from metile.triton import semantic as ts
from metile.triton.errors import not_yet
from metile.triton.impl_math import MATH
from metile.triton.language import core as C
from metile.triton.language import math as M
from metile.triton.language import random as R
from metile.triton.language.types import (
    TRITON_MAX_TENSOR_NUMEL,
    PropagateNan,
    constexpr,
    metile_dtype,
    pointer_type,
    triton_dtype,
)

F32, I32, U32, BOOL, BF16 = DType.F32, DType.I32, DType.U32, DType.BOOL, DType.BF16


def _tile(x, what: str, loc: Loc) -> Value:
    if not isinstance(x, Value) or isinstance(x.type, PtrType):
        kind = x.type if isinstance(x, Value) else type(x).__name__
        raise KernelTypeError(f"{what} takes a tensor, not {kind}", loc)
    return x


def _shape(shape, what: str, loc: Loc) -> tuple[int, ...]:
    """Triton's check of a block shape: constexpr ints, each a power of two, at most 2**20 elements."""
    dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    numel = 1
    for i, d in enumerate(dims):
        d = static_int(d, f"the shape of {what}", loc)
        if d <= 0 or d & (d - 1):
            raise ShapeMismatchError(f"{what}: shape element {i} must be a power of 2, not {d}", loc)
        numel *= d
    if numel > TRITON_MAX_TENSOR_NUMEL:
        raise ShapeMismatchError(f"{what}: numel ({numel}) exceeds triton maximum tensor numel "
                                 f"({TRITON_MAX_TENSOR_NUMEL})", loc)
    return sem.check_tile_size(dims, loc)


def _varargs_shape(shape: tuple) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape


# ---- creation


def arange(tr, loc, start, end):
    lo, hi = static_int(start, "the start of tl.arange", loc), static_int(end, "the end of tl.arange", loc)
    n = hi - lo
    if n > 0 and n & (n - 1):
        raise ShapeMismatchError(f"arange's range must be a power of 2, not {n} (tl.arange({lo}, {hi}))", loc)
    return BUILTINS[L.arange](tr, loc, lo, hi)


def full(tr, loc, shape, value, dtype):  # noqa: A002 - Triton's names
    dims = () if isinstance(shape, (tuple, list)) and not shape else _shape(shape, "tl.full", loc)
    if isinstance(value, Value) and value.type.shape not in ((), (1,)):
        raise KernelTypeError(f"tl.full takes a scalar value, not {value.type}", loc)
    return LIBRARY[L.full](tr, loc, dims, value, metile_dtype(dtype, loc))


def zeros(tr, loc, shape, dtype):  # noqa: A002
    return full(tr, loc, shape, 0, dtype)


def zeros_like(tr, loc, input):  # noqa: A002
    x = _tile(ts.to_tensor(input, loc), "tl.zeros_like", loc)
    return full(tr, loc, x.type.shape, 0, triton_dtype(x.type.dtype))


def ones_like(tr, loc, input):  # noqa: A002
    x = _tile(ts.to_tensor(input, loc), "tl.ones_like", loc)
    return full(tr, loc, x.type.shape, 1, triton_dtype(x.type.dtype))


# ---- shapes


def broadcast(tr, loc, input, other):  # noqa: A002
    a, b = ts.to_tensor(input, loc), ts.to_tensor(other, loc)
    shape = sem.broadcast_shape(a.type.shape, b.type.shape, "tl.broadcast", loc)
    return sem.broadcast_to(a, shape, loc), sem.broadcast_to(b, shape, loc)


def broadcast_to(tr, loc, input, shape):  # noqa: A002
    x = _tile(ts.to_tensor(input, loc), "tl.broadcast_to", loc) if not isinstance(input, Value) else input
    dims = _shape(_varargs_shape(shape), "tl.broadcast_to", loc)
    have = x.type.shape
    if have and len(have) != len(dims):
        raise ShapeMismatchError(f"Cannot broadcast, rank mismatch: {list(have)}, {list(dims)}", loc)
    return sem.broadcast_to(x, dims, loc)


def expand_dims(tr, loc, input, axis):  # noqa: A002
    x = ts.to_tensor(input, loc)
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    return shapes.expand_dims(x, tuple(static_int(a, "the axis of tl.expand_dims", loc) for a in axes), loc)


def permute(tr, loc, input, dims):  # noqa: A002
    x = _tile(input, "tl.permute", loc)
    return shapes.permute(x, shapes.dims_of(dims, "a dimension of tl.permute", loc), loc)


def trans(tr, loc, input, dims):  # noqa: A002
    """Without `dims`, the last two dimensions swapped (a transpose of each matrix of a batch, 2-D's `(1, 0)`)."""
    x = _tile(input, "tl.trans", loc)
    if not dims:
        return shapes.swap_last(x, "tl.trans", loc)
    return permute(tr, loc, x, dims)


def reshape(tr, loc, input, shape, can_reorder):  # noqa: A002
    """`can_reorder=True` lets Triton put the elements in any order; metile keeps row-major order, one of those."""
    x = _tile(input, "tl.reshape", loc)
    return shapes.reshape(x, _shape(_varargs_shape(shape), "tl.reshape", loc), loc)


def view(tr, loc, input, shape):  # noqa: A002
    return reshape(tr, loc, input, shape, True)


def ravel(tr, loc, x, can_reorder):
    t = _tile(x, "tl.ravel", loc)
    return shapes.reshape(t, (t.type.size,), loc)


def join(tr, loc, a, b):
    return shapes.join(ts.to_tensor(a, loc), ts.to_tensor(b, loc), loc)


def split(tr, loc, a):
    return shapes.split(_tile(a, "tl.split", loc), loc)


def cat(tr, loc, input, other, can_reorder):  # noqa: A002
    """Triton 3.4 asks for `can_reorder=True` and then puts the elements in any order; metile concatenates along the
    first dimension, in order, whatever `can_reorder` says (as later Triton versions do for tensors of one shape)."""
    return shapes.cat(_tile(input, "tl.cat", loc), _tile(other, "tl.cat", loc), loc)


def interleave(tr, loc, a, b):
    return shapes.interleave(ts.to_tensor(a, loc), ts.to_tensor(b, loc), loc)


# ---- element-wise


def cast(tr, loc, input, dtype, fp_downcast_rounding, bitcast):  # noqa: A002
    target = dtype.value if isinstance(dtype, constexpr) else dtype
    if isinstance(target, pointer_type):
        return ts.int_to_pointer(input, metile_dtype(target.element_ty, loc), loc)
    dt = metile_dtype(dtype, loc)
    if fp_downcast_rounding not in (None, "rtne"):
        if fp_downcast_rounding == "rtz":
            raise not_yet("fp_downcast_rounding='rtz'", loc, "metile rounds to nearest even")
        raise KernelArgumentError(f"Invalid rounding mode: {fp_downcast_rounding}. Supported rounding modes are "
                                  "'rtne' and 'rtz'.", loc)
    return ts.cast(input, dt, bool(bitcast), loc)


def where(tr, loc, condition, x, y):
    return ts.where(condition, x, y, loc)


def _nan(propagate_nan, loc: Loc) -> bool:
    if propagate_nan not in (PropagateNan.NONE, PropagateNan.ALL):
        raise KernelArgumentError(f"propagate_nan must be tl.PropagateNan.NONE or ALL, not {propagate_nan!r}", loc)
    return propagate_nan is PropagateNan.ALL


def maximum(tr, loc, x, y, propagate_nan):
    return ts.extreme("max", x, y, loc, _nan(propagate_nan, loc))


def minimum(tr, loc, x, y, propagate_nan):
    return ts.extreme("min", x, y, loc, _nan(propagate_nan, loc))


def clamp(tr, loc, x, min, max, propagate_nan):  # noqa: A002
    v, lo, hi = (ts.to_tensor(a, loc) for a in (x, min, max))
    v, lo, hi = (ts.cast(a, F32, False, loc) if a.type.dtype is BF16 else a for a in (v, lo, hi))
    lo, hi, _ = ts.unify(lo, hi, loc, "tl.clamp")
    v, lo, _ = ts.unify(v, lo, loc, "tl.clamp")
    v, hi, dt = ts.unify(v, hi, loc, "tl.clamp")
    if not dt.is_float:
        raise KernelTypeError(f"Unexpected dtype {dt}. Only floating point clamp is supported", loc)
    out = ts.extreme("min", ts.extreme("max", v, lo, loc), hi, loc)
    return ts.where(sem.compare("ne", v, v, loc), v, out, loc) if _nan(propagate_nan, loc) else out


def add(tr, loc, x, y, sanitize_overflow):
    return ts.binary("add", x, y, loc)


def cdiv(tr, loc, x, div):
    return ts.binary("floordiv", ts.binary("sub", ts.binary("add", x, div, loc), 1, loc), div, loc)


def sigmoid(tr, loc, x):
    return ts.binary("truediv", 1, ts.binary("add", 1, MATH[M.exp](tr, loc, ts.unary("neg", x, loc)), loc), loc)


def softmax(tr, loc, x, dim, keep_dims, ieee_rounding):
    d = 0 if dim is None else dim
    z = ts.binary("sub", x, maximum_of(tr, loc, x, d, False, True, keep_dims), loc)
    num = MATH[M.exp](tr, loc, z)
    return MATH[M.fdiv](tr, loc, num, sum_(tr, loc, num, d, keep_dims, None), ieee_rounding)


def swizzle2d(tr, loc, i, j, size_i, size_j, size_g):
    b = ts.binary
    ij = b("add", b("mul", i, size_j, loc), j, loc)
    size_gj = b("mul", size_g, size_j, loc)
    off_i = b("mul", b("floordiv", ij, size_gj, loc), size_g, loc)
    size_g = ts.extreme("min", b("sub", size_i, off_i, loc), size_g, loc)
    ij = b("mod", ij, size_gj, loc)
    return b("add", off_i, b("mod", ij, size_g, loc), loc), b("floordiv", ij, size_g, loc)


# ---- reductions and scans


def _widened(x: Value, loc) -> Value:
    """`x` as Triton's sum computes it: integers narrower than 32 bits in int32, unsigned ones (int1 too) in uint32."""
    dt = x.type.dtype
    if (dt.is_int or dt is BOOL) and dt.bits < 32:
        return sem.cast(x, I32 if dt.is_signed else U32, loc)
    return x


def sum_(tr, loc, input, axis, keep_dims, dtype):  # noqa: A002
    x = _tile(input, "tl.sum", loc)
    x = sem.cast(x, metile_dtype(dtype, loc), loc) if dtype is not None else _widened(x, loc)
    return BUILTINS[L.sum](tr, loc, x, axis, keep_dims, None)


def maximum_of(tr, loc, input, axis, return_indices, tie_break_left, keep_dims, op=L.max):  # noqa: A002
    x = _tile(input, f"tl.{op.__name__}", loc)
    if x.type.dtype is BF16:
        x = sem.cast(x, F32, loc)
    if return_indices:   # either tie-break: metile gives the first index, which both allow
        arg = LIBRARY[L.argmax if op is L.max else L.argmin](tr, loc, x, axis, keep_dims)
        return BUILTINS[op](tr, loc, x, axis, keep_dims), arg
    dt = x.type.dtype
    if dt.bits < 32:
        x = sem.cast(x, F32 if dt.is_float else I32, loc)
    return BUILTINS[op](tr, loc, x, axis, keep_dims)


def minimum_of(tr, loc, input, axis, return_indices, tie_break_left, keep_dims):  # noqa: A002
    return maximum_of(tr, loc, input, axis, return_indices, tie_break_left, keep_dims, op=L.min)


def argmax(tr, loc, input, axis, tie_break_left, keep_dims):  # noqa: A002
    return maximum_of(tr, loc, input, axis, True, tie_break_left, keep_dims)[1]


def argmin(tr, loc, input, axis, tie_break_left, keep_dims):  # noqa: A002
    return minimum_of(tr, loc, input, axis, True, tie_break_left, keep_dims)[1]


def cumsum(tr, loc, input, axis, reverse, dtype):  # noqa: A002
    x = _tile(input, "tl.cumsum", loc)
    x = sem.cast(x, F32, loc) if x.type.dtype is BF16 else x
    x = sem.cast(x, metile_dtype(dtype, loc), loc) if dtype is not None else _widened(x, loc)
    return LIBRARY[L.cumsum](tr, loc, x, axis, reverse, None)


def cumprod(tr, loc, input, axis, reverse):  # noqa: A002
    """In the input's type: metile multiplies narrow integers in 32 bits, whose low bits are the product's."""
    x = _tile(input, "tl.cumprod", loc)
    x = sem.cast(x, F32, loc) if x.type.dtype is BF16 else x
    return sem.cast(LIBRARY[L.cumprod](tr, loc, x, axis, reverse, None), x.type.dtype, loc)


# ---- products


_DOT_TYPES = (DType.I8, DType.U8, DType.F16, DType.BF16, DType.F32)
_PRECISIONS = (None, "tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")


def dot(tr, loc, input, other, acc, input_precision, allow_tf32, max_num_imprecise_acc, out_dtype):  # noqa: A002
    if input_precision is not None and allow_tf32 is not None:
        raise KernelArgumentError("Only one of input_precision and allow_tf32 can be specified", loc)
    if (input_precision.lower() if isinstance(input_precision, str) else input_precision) not in _PRECISIONS:
        raise KernelArgumentError(f"input_precision must be one of {_PRECISIONS[1:]}, not {input_precision!r}", loc)
    a, b = _tile(input, "tl.dot", loc), _tile(other, "tl.dot", loc)
    ash, bsh = a.type.shape, b.type.shape
    if not (len(ash) == len(bsh) == 2 or len(ash) == len(bsh) == 3):
        raise ShapeMismatchError(f"Both inputs must be either 2D or 3D; (lhs: {list(ash)} vs rhs: {list(bsh)})", loc)
    if ash[-1] != bsh[-2] or ash[:-2] != bsh[:-2]:
        raise ShapeMismatchError(f"First input shape ({list(ash)}) and second input shape {list(bsh)} are not "
                                 "compatible for matmul", loc)
    da, db = a.type.dtype, b.type.dtype
    if not (da.storage_only and db.storage_only):
        for d in (da, db):
            if d not in _DOT_TYPES:
                raise KernelTypeError(f"Unsupported dtype {d} for tl.dot", loc)
        if da is not db:
            raise KernelTypeError(f"Both operands must be same dtype. Got {da} and {db}", loc)
        if da.is_int and da is not DType.I8:
            raise KernelTypeError("tl.dot of integers takes int8 only", loc)
    out = metile_dtype(out_dtype, loc) if not isinstance(out_dtype, DType) else out_dtype
    if out is BF16 and not da.is_int:
        raise KernelTypeError("out_dtype=bfloat16 is unsupported. Please use out_dtype=float32/float16 and cast with "
                              "`.to(tl.bfloat16)`", loc)
    result = I32 if da.is_int else F32 if da in (F32, BF16) else out
    if acc is not None:
        if not isinstance(acc, Value) or isinstance(acc.type, PtrType):
            raise KernelTypeError(f"tl.dot: the accumulator must be a tensor, not {type(acc).__name__}", loc)
        shape = (*ash[:-1], bsh[-1])
        if acc.type.shape != shape or acc.type.dtype is not (out if not da.is_int else I32):
            raise KernelTypeError(f"tl.dot: the accumulator is {acc.type}; it must be {triton_dtype(result)} of shape "
                                  f"{list(shape)}", loc)
    # Triton's default is "tf32" for f32 operands (allow_tf32=False asks for "ieee"); the x3 and x6 forms emulate more
    # precise products, which metile computes exactly
    given = input_precision.lower() if isinstance(input_precision, str) else input_precision
    relaxed = given == "tf32" or (given is None and allow_tf32 is not False)
    value = BUILTINS[L.dot](tr, loc, a, b, acc, "tf32" if relaxed else "ieee", None, None)
    return sem.cast(value, result, loc)


# ---- loops and random numbers


def static_range(tr, loc, arg1, arg2, step):
    lo, hi = (0, arg1) if arg2 is None else (arg1, arg2)
    by = 1 if step is None else step
    lo, hi, by = (static_int(v, "a bound of tl.static_range", loc) for v in (lo, hi, by))
    if by == 0:
        raise KernelArgumentError("tl.static_range: the step must not be 0", loc)
    return range(lo, hi, by)


def runtime_range(tr, loc, *args):
    raise KernelArgumentError("tl.range can only be the iterable of a `for` loop", loc)


def uint_to_uniform_float(tr, loc, x):
    v = _tile(ts.to_tensor(x, loc), "tl.uint_to_uniform_float", loc) if not isinstance(x, Value) else x
    if v.type.dtype not in (I32, U32):
        raise KernelTypeError(f"tl.uint_to_uniform_float takes int32 or uint32 values, not {v.type.dtype}", loc)
    return library.uniform(v if v.type.dtype is U32 else Bitcast(v, U32, loc=loc), loc)


def pair_uniform_to_normal(tr, loc, u1, u2):
    u1 = ts.extreme("max", 1.0e-7, u1, loc)
    th = ts.binary("mul", 6.283185307179586, u2, loc)
    r = MATH[M.sqrt](tr, loc, ts.binary("mul", -2.0, MATH[M.log](tr, loc, u1), loc))
    return ts.binary("mul", r, MATH[M.cos](tr, loc, th), loc), ts.binary("mul", r, MATH[M.sin](tr, loc, th), loc)


TILES = {
    C.arange: arange, C.full: full, C.zeros: zeros, C.zeros_like: zeros_like, C.ones_like: ones_like,
    C.broadcast: broadcast, C.broadcast_to: broadcast_to, C.expand_dims: expand_dims, C.permute: permute,
    C.trans: trans, C.reshape: reshape, C.view: view, C.ravel: ravel, C.join: join, C.split: split,
    C.interleave: interleave, C.cat: cat, C.cast: cast, C.where: where, C.maximum: maximum, C.minimum: minimum,
    C.clamp: clamp, C.add: add,
    C.cdiv: cdiv, C.sigmoid: sigmoid, C.softmax: softmax, C.swizzle2d: swizzle2d, C.sum: sum_, C.max: maximum_of,
    C.min: minimum_of, C.argmax: argmax, C.argmin: argmin, C.cumsum: cumsum, C.cumprod: cumprod, C.dot: dot,
    C.static_range: static_range, C.range: runtime_range,
    R.rand: LIBRARY[L.rand], R.randn: LIBRARY[L.randn], R.randint: LIBRARY[L.randint],
    R.randint4x: LIBRARY[L.randint4x], R.rand4x: LIBRARY[L.rand4x], R.randn4x: LIBRARY[L.randn4x],
    R.uint_to_uniform_float: uint_to_uniform_float, R.pair_uniform_to_normal: pair_uniform_to_normal,
}

__all__ = ["TILES"]
