"""One implementation per `metile.language` function, keyed by the function object (`BUILTINS`).

Each implementation takes the tracer, the call's `Loc` and the arguments bound by the language
function's own signature, checks them (shapes, dtypes, compile-time arguments) and returns a
traced value, a Python value, or None after emitting a statement. The semantics are those of
`docs/language.md`; where they go beyond the original meTile, `metile.language`'s docstring says so.
"""

from __future__ import annotations

import functools

import numpy as np

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.binding import bind_values
from metile.frontend.errors import (
    ConstexprRequiredError,
    KernelArgumentError,
    KernelTypeError,
    ShapeMismatchError,
    UnsupportedSyntaxError,
)
from metile.frontend.matmul import active_everywhere, product
from metile.ir.errors import Loc
from metile.ir.ops import ReduceOp
from metile.ir.stmts import Barrier, Store
from metile.ir.tile import Arange, ExpandDims, Full, NumPrograms, ProgramId, Reduce, Reshape, SimdLaneId, ThreadId
from metile.ir.types import COMPUTE_AS, DType, PtrType, from_numpy
from metile.ir.values import Const, Load, SharedAlloc, SimdBroadcast, SimdShuffleXor, Value


def call_builtin(tr, fn, args, kwargs, loc: Loc):
    return BUILTINS[fn](tr, loc, *bind_values(fn, args, kwargs, loc))


def static_int(v, what: str, loc: Loc) -> int:
    if isinstance(v, Value):
        raise ConstexprRequiredError(f"{what} must be a compile-time int (a constexpr or a Python int), not a traced "
                                     f"{v.type}", loc)
    if isinstance(v, bool) or not isinstance(v, int):
        raise KernelTypeError(f"{what} must be an int, not {type(v).__name__}", loc)
    return v


def static_shape(v, what: str, loc: Loc, scalar: bool = False) -> tuple[int, ...]:
    """The compile-time shape `v` (an int or a tuple or list of ints); `()` only where `scalar` allows it."""
    dims = v if v.__class__ is tuple else (v,) if not isinstance(v, (tuple, list)) else tuple(v)
    if scalar and not dims:
        return ()
    for d in dims:  # the common case: positive Python ints
        if d.__class__ is not int or d <= 0:
            break
    else:
        if dims:
            return sem.check_tile_size(dims, loc)
    out = tuple(static_int(d, f"{what} dimension", loc) for d in dims)
    if not out or any(d <= 0 for d in out):
        raise ShapeMismatchError(f"{what} must have positive dimensions, not {list(out)}", loc)
    return sem.check_tile_size(out, loc)


def parse_dtype(v, loc: Loc) -> DType:
    if isinstance(v, DType):
        return v
    try:
        return DType(v)
    except ValueError:
        pass
    try:
        found = from_numpy(v)
    except TypeError:
        found = None
    if found is None:
        raise KernelTypeError(f"unknown dtype {v!r}; use one of {', '.join(d.value for d in DType)}", loc)
    return found


def _pointer(p, what: str, loc: Loc) -> Value:
    if not (isinstance(p, Value) and isinstance(p.type, PtrType)):
        kind = p.type if isinstance(p, Value) else type(p).__name__
        raise KernelTypeError(f"{what} needs a pointer (a pointer parameter plus offsets), not {kind}", loc)
    return p


def _mask(mask, shape, loc: Loc):
    if mask is None:
        return None, shape
    if not isinstance(mask, Value):
        if not isinstance(mask, (bool, np.bool_)):
            raise KernelTypeError(f"the mask must be bool (a comparison such as offs < n, or True or False), not "
                                  f"{type(mask).__name__} {mask!r}", loc)
        mask = sem.const(bool(mask), DType.BOOL, loc)
    t = mask.type
    if t.dtype is not DType.BOOL or isinstance(t, PtrType):
        raise KernelTypeError(f"the mask must be bool (a comparison such as offs < n), not {t}", loc)
    return mask, shape if t.shape == shape else sem.broadcast_shape(shape, t.shape, "mask", loc)


def program_id(tr, loc, axis):
    a = axis if axis.__class__ is int else static_int(axis, "the axis of program_id", loc)
    if a not in (0, 1, 2):
        raise KernelArgumentError(f"program_id axis must be 0, 1 or 2, not {a}", loc)
    return ProgramId(a, loc=loc)


def arange(tr, loc, start, stop):
    lo = start if start.__class__ is int else static_int(start, "the start of arange", loc)
    hi = stop if stop.__class__ is int else static_int(stop, "the stop of arange", loc)
    if lo >= hi:
        raise ShapeMismatchError(f"arange({lo}, {hi}) is empty: stop must be greater than start", loc)
    sem.check_tile_size((hi - lo,), loc)
    if lo < -(1 << 31) or hi - 1 > (1 << 31) - 1:
        raise KernelTypeError(f"arange({lo}, {hi}) holds values beyond i32, the type of its elements", loc)
    return Arange(lo, hi, loc=loc)


def cdiv(tr, loc, a, b):
    if not isinstance(a, Value) and not isinstance(b, Value):
        static_int(a, "the first argument of metile.cdiv", loc)
        if static_int(b, "the second argument of metile.cdiv", loc) == 0:
            raise KernelTypeError("metile.cdiv: division by zero (the block size is 0)", loc)
        return L.cdiv(a, b)
    return sem.binary("floordiv", sem.binary("sub", sem.binary("add", a, b, loc), 1, loc), b, loc)


def next_power_of_2(tr, loc, n):
    return L.next_power_of_2(static_int(n, "the argument of next_power_of_2", loc))


_CACHE_MODIFIERS = ("", ".ca", ".cg", ".cv", ".wb", ".cs", ".wt")
_EVICTION_POLICIES = ("", "evict_first", "evict_last", "evict_normal")


def _memory_hints(cache_modifier, eviction_policy, what: str, loc: Loc) -> None:
    """Triton's cache hints, which change nothing on Apple GPUs: accepted when Triton would accept them."""
    if cache_modifier not in _CACHE_MODIFIERS:
        raise KernelArgumentError(f"{what}: cache_modifier must be one of {_CACHE_MODIFIERS}, not {cache_modifier!r}",
                                  loc)
    if eviction_policy not in _EVICTION_POLICIES:
        raise KernelArgumentError(f"{what}: eviction_policy must be one of {_EVICTION_POLICIES}, not "
                                  f"{eviction_policy!r}", loc)


def load(tr, loc, ptr, mask, other, cache_modifier, eviction_policy, volatile):
    if cache_modifier != "" or eviction_policy != "":   # not the defaults, which need no check
        _memory_hints(cache_modifier, eviction_policy, "load", loc)
    if not isinstance(volatile, bool):
        raise KernelArgumentError(f"load: volatile must be True or False, not {volatile!r}", loc)
    p = _pointer(ptr, "load", loc)
    m, shape = _mask(mask, p.type.shape, loc)
    if other is not None and isinstance(sem.type_of(other, loc), PtrType):
        raise KernelTypeError("load: `other` must be a number or a tile of values, not a pointer", loc)
    o = None if other is None else sem.converted(other, p.type.dtype, shape, loc)
    if m is not None and m.type.shape != shape:
        m = sem.broadcast_to(m, shape, loc)
    if p.type.shape != shape:
        p = sem.broadcast_to(p, shape, loc)
    return tr.bind(Load(p, m, o, volatile, loc=loc), tr.hint or "load", loc, force=True)


def _store_like(cls, tr, loc, ptr, value, mask, what, op=None):
    p = _pointer(ptr, what, loc)
    vtype = sem.type_of(value, loc)
    if isinstance(vtype, PtrType):
        raise KernelTypeError(f"{what}: cannot write a pointer", loc)
    pshape, vshape = p.type.shape, vtype.shape
    shape = pshape if pshape == vshape else sem.broadcast_shape(pshape, vshape, f"{what} value", loc)
    m, shape = _mask(mask, shape, loc)
    if cls is Store and shape != p.type.shape:  # several values for one address: which one lands is undefined
        raise ShapeMismatchError(f"store: the value and mask have shape {list(shape)}, larger than the pointers' "
                                 f"{list(p.type.shape)}: a store writes one value per address (reduce the value "
                                 "first, or address every element)", loc)
    v = sem.converted(value, p.type.dtype, shape, loc)
    if m is not None and m.type.shape != shape:
        m = sem.broadcast_to(m, shape, loc)
    if p.type.shape != shape:
        p = sem.broadcast_to(p, shape, loc)
    tr.emit(cls(p, v, m, loc=loc) if op is None else cls(p, v, m, op, loc=loc))


def store(tr, loc, ptr, value, mask, cache_modifier, eviction_policy):
    if cache_modifier != "" or eviction_policy != "":   # not the defaults, which need no check
        _memory_hints(cache_modifier, eviction_policy, "store", loc)
    _store_like(Store, tr, loc, ptr, value, mask, "store")


def zeros(tr, loc, shape, dtype):
    dt = parse_dtype(dtype, loc)
    dims = static_shape(shape, "the shape of zeros", loc, scalar=True)
    if dt.storage_only:
        return sem.coerce(0.0, dt, dims, loc)
    return Full(dims, sem.const(False if dt is DType.BOOL else 0, dt, loc), loc=loc)


_PRECISIONS = (None, "ieee", "tf32", "tf32x3", "bf16x3")


def dot(tr, loc, a, b, acc, input_precision, allow_tf32, out_dtype):
    """`a @ b` (+ `acc`); `out_dtype` converts the result. Products of f32 are exact unless `input_precision="tf32"`
    (or `allow_tf32=True` without an `input_precision`) allows TF32's precision, which a target's tensor operations
    then compute (`Dot.tf32`); the other precisions are computed exactly."""
    if input_precision not in _PRECISIONS:
        raise KernelArgumentError(f"dot: input_precision must be one of {_PRECISIONS}, not {input_precision!r}", loc)
    if allow_tf32 not in (None, True, False):
        raise KernelArgumentError(f"dot: allow_tf32 must be True, False or None, not {allow_tf32!r}", loc)
    tf32 = input_precision == "tf32" or (input_precision is None and allow_tf32 is True)
    out = product(a, b, acc, loc, tf32, active=acc is not None and active_everywhere(tr, acc))
    return out if out_dtype is None else sem.cast(out, parse_dtype(out_dtype, loc), loc)


def tile_range(tr, loc, start, stop, step, num_stages):
    raise UnsupportedSyntaxError("metile.tile_range can only be the iterable of a `for` statement", loc)


def simdgroup_role(tr, loc, role, num_roles, num_sgs):
    raise UnsupportedSyntaxError("metile.simdgroup_role can only be used as `with metile.simdgroup_role(...):`", loc)


def _math(name):
    def impl(tr, loc, x):
        return sem.unary(name, x, loc)
    return impl


def where(tr, loc, cond, x, y):
    return sem.where(cond, x, y, loc)


def maximum(tr, loc, a, b):
    return sem.binary("max", a, b, loc)


def minimum(tr, loc, a, b):
    return sem.binary("min", a, b, loc)


def keep_dims(reduced, x: Value, axis, keep: bool, loc: Loc):
    """A reduction's result `reduced` of `x` with the reduced axis (every axis for `axis=None`) kept as size 1."""
    if not isinstance(keep, bool):
        raise KernelArgumentError(f"keep_dims must be True or False, not {keep!r}", loc)
    if not keep:
        return reduced
    shape = tuple(x.type.shape)
    if axis is None:
        return Reshape(sem.to_ir(reduced, loc), (1,) * len(shape), loc=loc)
    return ExpandDims(reduced, static_int(axis, "the reduction axis", loc) % len(shape), loc=loc)


def summed(x, dtype, loc: Loc):
    """`x` as a sum or product computes it: in `dtype` when given, else integers narrower than 32 bits in 32 bits
    (as Triton does, so that a sum of bytes does not wrap around)."""
    if dtype is not None:
        return sem.cast(x, parse_dtype(dtype, loc), loc) if isinstance(x, Value) else x
    if isinstance(x, Value) and not isinstance(x.type, PtrType) and x.type.dtype.is_int and x.type.dtype.bits < 32:
        return sem.cast(x, DType.I32 if x.type.dtype.is_signed else DType.U32, loc)
    return x


def _reduce(op: ReduceOp):
    def reduce(tr, loc, x, axis, keep):
        return keep_dims(impl(tr, loc, x, axis), x, axis, keep, loc)

    def impl(tr, loc, x, axis):
        if not isinstance(x, Value) or isinstance(x.type, PtrType) or not x.type.shape:
            kind = x.type if isinstance(x, Value) else type(x).__name__
            raise ShapeMismatchError(f"metile.{op.value}() reduces a tile, not {kind}", loc)
        if x.type.dtype is DType.BOOL:  # sum counts the true elements; max is "any", min is "all"
            if op is ReduceOp.SUM:
                return impl(tr, loc, sem.cast(x, DType.I32, loc), axis)
            # as 0 and 1 in u32, whose identities (0 for max, the largest u32 for min) make "any" of nothing false
            # and "all" of nothing true
            return sem.compare("ne", impl(tr, loc, sem.cast(x, DType.U32, loc), axis), 0, loc)
        if x.type.dtype.storage_only:  # 8-bit floats reduce as f16
            x = sem.cast(x, COMPUTE_AS[x.type.dtype], loc)
        shape = x.type.shape
        if axis is None:
            flat = x if len(shape) == 1 else Reshape(x, (x.type.size,), loc=loc)
            return Reduce(op, flat, 0, loc=loc)
        ax = static_int(axis, "the reduction axis", loc)
        if not -len(shape) <= ax < len(shape):
            raise ShapeMismatchError(f"axis {ax} is out of range for a {len(shape)}-D tile", loc)
        return Reduce(op, x, ax % len(shape), loc=loc)
    return reduce


_SUM = _reduce(ReduceOp.SUM)


def _sum(tr, loc, x, axis, keep, dtype):
    return _SUM(tr, loc, summed(x, dtype, loc), axis, keep)


def _per_thread(x, what, loc):
    if not isinstance(x, Value):
        x = sem.to_ir(x, loc)
    if isinstance(x.type, PtrType) or x.type.shape:
        raise ShapeMismatchError(f"{what} takes a per-thread scalar, not {x.type}", loc)
    return x


def _lane(v, what, loc):
    v = _per_thread(v, what, loc)
    if not v.type.dtype.is_int:
        raise KernelTypeError(f"{what} needs an integer lane operand, not {v.type.dtype}", loc)
    if isinstance(v, Const) and not 0 <= v.value < 32:
        raise KernelTypeError(f"{what}: lane operand {v.value} is outside 0..31 (a simdgroup has 32 lanes)", loc)
    return v


def simd_shuffle_xor(tr, loc, value, mask):
    x = _per_thread(value, "simd_shuffle_xor", loc)
    return tr.bind(SimdShuffleXor(x, _lane(mask, "simd_shuffle_xor", loc), loc=loc), tr.hint or "shfl", loc)


def simd_broadcast(tr, loc, value, lane):
    x = _per_thread(value, "simd_broadcast", loc)
    return tr.bind(SimdBroadcast(x, _lane(lane, "simd_broadcast", loc), loc=loc), tr.hint or "bcast", loc)


def barrier(tr, loc):
    tr.emit(Barrier(loc=loc))


def shared(tr, loc, size, dtype):
    if tr.depth:
        raise UnsupportedSyntaxError("metile.shared must be called at the top level of the kernel, not inside a "
                                     "loop, branch or role block", loc)
    alloc = SharedAlloc(static_shape(size, "the size of shared", loc), parse_dtype(dtype, loc), loc=loc)
    return tr.bind(alloc, tr.hint or "smem", loc)


def tile_swizzle(tr, loc, pid_m, pid_n, pattern, block_size):
    """The output tile `(m, n)` program `(pid_m, pid_n)` computes, visited in a cache-friendly order. Both
    patterns are bijections of the grid, so every tile is still computed exactly once:
    - "diagonal": `n = (pid_m + pid_n) % num_programs(1)`;
    - "morton": the largest part of the grid made of whole `block_size x block_size` panels is visited
      panel by panel, Z-order inside a panel (row-major when `block_size` is not a power of two); programs
      outside that part keep their own tile."""
    if pattern not in ("morton", "diagonal"):
        raise KernelArgumentError(f"tile_swizzle pattern must be 'morton' or 'diagonal', not {pattern!r}", loc)
    b = static_int(block_size, "block_size", loc)
    if b < 1:
        raise KernelArgumentError(f"tile_swizzle block_size must be at least 1, not {b}", loc)
    pm, pn = (sem.to_ir(p, loc) if not isinstance(p, Value) else p for p in (pid_m, pid_n))
    for p, what in ((pm, "pid_m"), (pn, "pid_n")):
        if isinstance(p.type, PtrType) or p.type.shape or not p.type.dtype.is_int:
            raise KernelTypeError(f"tile_swizzle: {what} must be an integer scalar, not {p.type}", loc)
    grid_n = NumPrograms(1, loc=loc)
    if pattern == "diagonal":
        return pm, sem.binary("mod", sem.binary("add", pm, pn, loc), grid_n, loc)
    if b == 1:
        return pm, pn
    op = functools.partial(sem.binary, loc=loc)
    full_m = op("sub", NumPrograms(0, loc=loc), op("mod", NumPrograms(0, loc=loc), b))
    full_n = op("sub", grid_n, op("mod", grid_n, b))
    q = op("add", op("mul", pm, full_n), pn)
    panel, inside = op("floordiv", q, b * b), op("mod", q, b * b)
    panels_n = op("max", op("floordiv", full_n, b), 1)  # >= 1: programs outside the panels divide too
    if b & (b - 1) == 0:
        r, c = 0, 0
        for bit in range(b.bit_length() - 1):
            c = op("or", c, op("lshift", op("and", op("rshift", inside, 2 * bit), 1), bit))
            r = op("or", r, op("lshift", op("and", op("rshift", inside, 2 * bit + 1), 1), bit))
    else:
        r, c = op("floordiv", inside, b), op("mod", inside, b)
    m = op("add", op("mul", op("floordiv", panel, panels_n), b), r)
    n = op("add", op("mul", op("mod", panel, panels_n), b), c)
    region = op("and", sem.compare("lt", pm, full_m, loc), sem.compare("lt", pn, full_n, loc))
    return sem.where(region, m, pm, loc), sem.where(region, n, pn, loc)


BUILTINS = {
    L.program_id: program_id, L.arange: arange, L.cdiv: cdiv, L.next_power_of_2: next_power_of_2,
    L.load: load, L.store: store, L.zeros: zeros, L.dot: dot,
    L.tile_range: tile_range, L.exp: _math("exp"), L.log: _math("log"), L.sqrt: _math("sqrt"),
    L.abs: _math("abs"), L.tanh: _math("tanh"), L.where: where, L.maximum: maximum, L.minimum: minimum,
    L.sum: _sum, L.max: _reduce(ReduceOp.MAX), L.min: _reduce(ReduceOp.MIN),
    L.thread_id: lambda tr, loc: tr.bind(ThreadId(loc=loc), tr.hint or "tid", loc, force=True),
    L.simd_lane_id: lambda tr, loc: tr.bind(SimdLaneId(loc=loc), tr.hint or "lane", loc, force=True),
    L.simd_shuffle_xor: simd_shuffle_xor, L.simd_broadcast: simd_broadcast, L.simdgroup_role: simdgroup_role,
    L.barrier: barrier, L.shared: shared, L.tile_swizzle: tile_swizzle,
}
