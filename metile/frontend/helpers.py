"""Language functions built from others while tracing (`HELPERS`, keyed like `BUILTINS`): the original meTile's
`scalar`, `fast_exp`, `simd_sum`, `simd_max` and `reverse_bits`, which its decode and FFT kernels use, and
Triton's `static_range`.

- `scalar(value, dtype=None)`: a compile-time number as a traced scalar (f32 for a float, i32 for an int).
- `fast_exp(x)`: `exp`; metile computes with IEEE math, so Metal's fast exponential is the ordinary one.
- `simd_sum(value)`, `simd_max(value)`: Metal's `simd_sum` and `simd_max` of a per-thread scalar over the lanes of
  the thread's simdgroup, the same value on every lane.
- `reverse_bits(x)`: the 32 bits of an `i32` or `u32` in reverse order (five rounds of swapping halves), as a
  `u32`, so that `reverse_bits(i) >> (32 - bits)` is the bit reversal of an index of `bits` bits, as in meTile,
  whose thread indices are unsigned.
- `static_range(...)`: a Python `range` of compile-time ints, which a `for` unrolls.
"""

from __future__ import annotations

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.builtins import parse_dtype, static_int
from metile.frontend.errors import KernelTypeError, ShapeMismatchError
from metile.ir.ops import ReduceOp
from metile.ir.types import DType, PtrType
from metile.ir.values import SimdReduce, Value


def scalar(tr, loc, value, dtype):
    """`metile.scalar(value, dtype=None)`: the number `value` as a traced scalar, of `dtype` (by default f32 for a
    float, i32 for an int), as meTile's explicit scalar values (loop state started from a number)."""
    if isinstance(value, Value) or isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = value.type if isinstance(value, Value) else type(value).__name__
        raise KernelTypeError(f"scalar() takes a compile-time int or float, not {kind}", loc)
    return sem.const(value, sem.py_dtype(value) if dtype is None else parse_dtype(dtype, loc), loc)


def fast_exp(tr, loc, x):
    """meTile's `fast_exp`: `exp`, computed as `metile.exp` is (metile does not use Metal's fast math)."""
    return sem.unary("exp", x, loc)


def static_range(tr, loc, start, stop, step):
    """`metile.static_range(stop)` / `(start, stop, step=1)`: Triton's `tl.static_range`, a Python `range` of
    compile-time ints, so that a `for` over it is unrolled while tracing."""
    bounds = (0, start, step) if stop is None else (start, stop, step)
    lo, hi, by = (static_int(b, f"the {what} of metile.static_range", loc)
                  for b, what in zip(bounds, ("start", "stop", "step")))
    if by == 0:
        raise KernelTypeError("metile.static_range: the step must not be 0", loc)
    return range(lo, hi, by)


_SWAPS = ((1, 0x55555555), (2, 0x33333333), (4, 0x0F0F0F0F), (8, 0x00FF00FF))


def reverse_bits(tr, loc, x):
    """`metile.reverse_bits(x)`: the bits of the 32-bit integer `x` (a scalar or a tile) reversed, as a u32."""
    t = sem.type_of(x, loc) if not isinstance(x, bool) else None
    if not isinstance(x, Value):
        if t is None or t.dtype is not DType.I32 or not -(1 << 31) <= x < (1 << 32):
            raise KernelTypeError(f"reverse_bits() takes a 32-bit integer, not {x!r}", loc)
        return int(f"{x & 0xFFFFFFFF:032b}"[::-1], 2)
    if isinstance(t, PtrType) or t.dtype not in (DType.I32, DType.U32):
        raise KernelTypeError(f"reverse_bits() takes i32 or u32 values, not {t}", loc)
    v = sem.cast(x, DType.U32, loc)
    for shift, mask in _SWAPS:
        low = sem.binary("and", sem.binary("rshift", v, shift, loc), mask, loc)
        v = tr.bind(sem.binary("or", low, sem.binary("lshift", sem.binary("and", v, mask, loc), shift, loc), loc),
                    "reversed", loc)
    return tr.bind(sem.binary("or", sem.binary("rshift", v, 16, loc), sem.binary("lshift", v, 16, loc), loc),
                   tr.hint or "reversed", loc)


def _simd_all_reduce(op: ReduceOp):
    def impl(tr, loc, value):
        """`metile.simd_sum(value)` / `metile.simd_max(value)`: the sum or maximum of a per-thread scalar over the
        lanes of the thread's simdgroup (Metal's `simd_sum`/`simd_max`), the same on every lane."""
        if not isinstance(value, Value):
            value = sem.to_ir(value, loc)
        if isinstance(value.type, PtrType) or value.type.shape:
            raise ShapeMismatchError(f"metile.simd_{op.value}() takes a per-thread scalar, not {value.type}", loc)
        if value.type.dtype is DType.BOOL:
            raise KernelTypeError(f"metile.simd_{op.value}() takes a number, not a bool", loc)
        return tr.bind(SimdReduce(op, value, loc=loc), tr.hint or f"simd_{op.value}", loc)
    impl.__name__ = f"simd_{op.value}"
    return impl


HELPERS = {L.scalar: scalar, L.fast_exp: fast_exp, L.simd_sum: _simd_all_reduce(ReduceOp.SUM),
           L.simd_max: _simd_all_reduce(ReduceOp.MAX), L.static_range: static_range, L.reverse_bits: reverse_bits}

__all__ = ["HELPERS"]
