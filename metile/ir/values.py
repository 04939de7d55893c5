"""The `Value` and `Stmt` bases, and the value nodes every IR level shares.

Values are pure expression trees: equal trees mean equal values, so rules can `match` them and
drivers can memoise them. Each value's `type` is a `functools.cached_property` computed from its
children (`Var` and `Param` carry theirs as a field; `@node` computes the others at construction, see
`metile.ir.node`); it assumes the node is well formed and the verifier checks that first. Types are
interned (`metile.ir.types`), so equal types are the same object.

Values whose position among statements matters are only ever the direct value of a `Let`
(`LET_ONLY` in `metile.ir.stages`): loads (they observe earlier stores), `SharedAlloc` (each one is a
distinct array), and simdgroup collectives (`SimdShuffleXor`, `SimdBroadcast`, `SimdReduce`: every
lane of the simdgroup must reach them together, so they cannot move into a branch).

The shared nodes mean the same at every level. In Tile IR a value is a whole tile (or a scalar per
program); in Metal IR the same node is evaluated per thread on scalars or vectors. Thread-level
values (`SimdShuffleXor`...) are per-thread scalars at every level.
"""

from __future__ import annotations

import math
import sys
from functools import cached_property

import attrs

from metile.ir.node import Node, as_tuple, lazy_type, node
from metile.ir.ops import AtomicOp, BinOp, CmpOp, ReduceOp, UnOp
from metile.ir.types import SCALAR_TYPES, AddressSpace, DType, PtrType, TileType, Type, tile_type


@node
class Value(Node):
    """Base of all value nodes."""

    type = cached_property(lazy_type)   # the slot of every subclass's derived `type` (see `metile.ir.node`)


@node
class Stmt(Node):
    """Base of all statements."""


def _normalize(value: object, dtype: DType) -> object:
    """The canonical Python scalar for a constant: float for float types, int for integer types, bool
    for bool (when the value converts exactly); NaN is always the one `math.nan` object, so that
    `Const(nan, f32) == Const(nan, f32)`. Anything else is kept for the verifier to report."""
    cls = value.__class__
    if cls is not float and cls is not int and cls is not bool:
        np = sys.modules.get("numpy")   # a numpy scalar can only come from numpy, imported then
        if np is not None and isinstance(value, np.generic):
            value = value.item()
    if dtype.is_float and isinstance(value, (int, float)):
        value = float(value)
        return math.nan if value != value else value
    if dtype.is_int and isinstance(value, bool):
        return int(value)
    if dtype.is_int and isinstance(value, float) and value.is_integer():
        return int(value)
    if dtype is DType.BOOL and not isinstance(value, bool) and isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    return value


_INTS = tuple(d for d in DType if d.is_int)        # tuples, tested by identity: no `Enum.__hash__` call
_FLOATS = tuple(d for d in DType if d.is_float)
_BOOL, _DEVICE = DType.BOOL, AddressSpace.DEVICE   # globals: an enum class's attribute read goes through a hook


def _const_key(value: object) -> object:
    """What `Const` equality compares: NaN equals NaN, and -0.0 differs from 0.0 (their sign matters)."""
    if isinstance(value, float):
        return ("nan",) if value != value else (value, math.copysign(1.0, value))
    return value


@node
class Const(Value):
    """A scalar constant. `value` is normalised to the dtype's Python type (see `_normalize`); equality
    treats NaN as equal to itself and keeps -0.0 apart from 0.0, so constants fold and round-trip."""

    value: int | float | bool = attrs.field(eq=_const_key)
    dtype: DType

    def __attrs_post_init__(self) -> None:
        value, dtype = self.value, self.dtype
        cls = value.__class__
        # The common cases, which `_normalize` returns unchanged (a float only if it is not NaN).
        if not ((cls is int and dtype in _INTS) or (cls is float and dtype in _FLOATS and value == value)
                or (cls is bool and dtype is DType.BOOL)):
            value = _normalize(value, dtype)
            object.__setattr__(self, "value", value)
        if type(self) is Const:
            object.__setattr__(self, "_h", hash(("Const", value, dtype)))
        else:
            Node.__attrs_post_init__(self)

    @cached_property
    def type(self) -> TileType:
        return SCALAR_TYPES[self.dtype]


@node
class Param(Value):
    """Kernel parameter `index`: a scalar (`i32`, `f32`...) or a base pointer (`ptr<f32, device>`). An integer
    scalar's `multiple` is a number its value is known to be a multiple of (the launch specialises integer
    arguments that are multiples of 16, as Triton does; 1 when nothing is known). A parameter with `length_of`
    is not the user's: the launch passes it the number of elements of the array bound to pointer parameter
    `length_of` (an `i32`), which a `tile_load` or `tile_store` without `bounds=` clips its tile to."""

    name: str
    index: int
    type: Type
    multiple: int = 1
    length_of: int | None = None


@node
class Var(Value):
    """A use of a name bound by `Let`, a loop index, a loop-carried value, or a `For`/`If`/`While` result.
    Binding sites hold a `Var` too; names are unique in a kernel (the verifier checks)."""

    name: str
    type: Type


@node
class Binary(Value):
    """Element-wise `lhs op rhs`; both operands have the same type (the frontend inserts casts and
    broadcasts). See `metile.ir.ops` for the meaning of each operator."""

    op: BinOp
    lhs: Value
    rhs: Value

    @cached_property
    def type(self) -> Type:
        return self.lhs.type


@node
class Unary(Value):
    op: UnOp
    x: Value

    @cached_property
    def type(self) -> Type:
        return self.x.type


@node
class Compare(Value):
    """Element-wise comparison of two operands of one type; the result is bool of the same shape."""

    op: CmpOp
    lhs: Value
    rhs: Value

    @cached_property
    def type(self) -> Type:
        return self.lhs.type.with_dtype(_BOOL)


@node
class Where(Value):
    """Element-wise `cond ? x : y` (both sides are evaluated; it is not a branch)."""

    cond: Value
    x: Value
    y: Value

    @cached_property
    def type(self) -> Type:
        return self.x.type


@node
class Cast(Value):
    """Element-wise conversion to `dtype` (C rules: floats to integers truncate toward zero)."""

    x: Value
    dtype: DType

    @cached_property
    def type(self) -> Type:
        return self.x.type.with_dtype(self.dtype)


@node
class Bitcast(Value):
    """Element-wise reinterpretation of the bits of `x` as `dtype`, a type of the same width (`as_type`)."""

    x: Value
    dtype: DType

    @cached_property
    def type(self) -> Type:
        return self.x.type.with_dtype(self.dtype)


@node
class IntToPtr(Value):
    """Element-wise reinterpretation of 64-bit integers as device addresses of `dtype` elements (a pointer table's
    entries, `reinterpret_cast<device T*>`). Nothing is known of the memory such a pointer reaches."""

    x: Value
    dtype: DType

    @cached_property
    def type(self) -> Type:
        return PtrType(self.dtype, self.x.type.shape, _DEVICE)


@node
class Fma(Value):
    """Element-wise `a * b + c` rounded once (floats; the three operands have one type)."""

    a: Value
    b: Value
    c: Value

    @cached_property
    def type(self) -> Type:
        return self.a.type


@node
class AddPtr(Value):
    """Element-wise `ptr + offset` in elements; `offset` is an integer tile of the pointer's shape."""

    ptr: Value
    offset: Value

    @cached_property
    def type(self) -> Type:
        return self.ptr.type


@node
class Load(Value):
    """Read the elements `ptr` points to. Where `mask` is false nothing is read and the result is
    `other` (zero when `other` is None). Only ever the value of a `Let`. A `volatile` load reads memory each time it
    runs, element by element (a spin-wait's flag, which another program sets)."""

    ptr: Value
    mask: Value | None = None
    other: Value | None = None
    volatile: bool = False

    @cached_property
    def type(self) -> TileType:
        t = self.ptr.type
        return tile_type(t.dtype, t.shape)


@node
class AtomicRMW(Value):
    """Atomically combine the element `ptr` points to with `value` by `op` where `mask` is true, giving the element's
    old value (0 where the mask is false). `CAS` stores `value` only where the element equals `compare`. Only ever
    the value of a `Let`: it writes memory, so it is never repeated, moved or dropped."""

    op: AtomicOp
    ptr: Value
    value: Value
    mask: Value | None = None
    compare: Value | None = None

    @cached_property
    def type(self) -> Type:
        return self.value.type


@node
class SharedAlloc(Value):
    """A threadgroup-memory array of `shape` (row-major, uninitialised); its value is the base pointer.
    Only ever the value of a `Let` at kernel top level."""

    shape: tuple[int, ...] = attrs.field(converter=as_tuple)
    dtype: DType

    @cached_property
    def type(self) -> PtrType:
        return PtrType(self.dtype, (), AddressSpace.THREADGROUP)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@node
class SimdShuffleXor(Value):
    """The value `x` of the lane whose index is this lane's XOR `mask` (`simd_shuffle_xor`)."""

    x: Value
    mask: Value

    @cached_property
    def type(self) -> Type:
        return self.x.type


@node
class SimdBroadcast(Value):
    """The value `x` of lane `lane`, for every lane of the simdgroup (`simd_broadcast`)."""

    x: Value
    lane: Value

    @cached_property
    def type(self) -> Type:
        return self.x.type


@node
class SimdReduce(Value):
    """`op` over `x` across the lanes of the simdgroup (`simd_sum`, `simd_max`, `simd_min`)."""

    op: ReduceOp
    x: Value

    @cached_property
    def type(self) -> Type:
        return self.x.type


COMMON_VALUES: tuple[type[Value], ...] = (
    Const, Param, Var, Binary, Unary, Compare, Where, Cast, Bitcast, IntToPtr, Fma, AddPtr, Load, AtomicRMW,
    SharedAlloc, SimdShuffleXor, SimdBroadcast, SimdReduce,
)

__all__ = [
    "COMMON_VALUES", "AddPtr", "AtomicRMW", "Binary", "Bitcast", "Cast", "Compare", "Const", "Fma", "IntToPtr", "Load",
    "Param",
    "SharedAlloc", "SimdBroadcast", "SimdReduce", "SimdShuffleXor", "Stmt", "Unary", "Value", "Var", "Where",
]
