"""Element types and the rules for mixed arithmetic; the types of IR values.

Value types (frozen, hashable, not IR nodes: rewrites never visit them), printed as the IR text spells them:
- `TileType(dtype, shape)`: a tile of elements, `tile<64x32xf32>`; shape `()` is a scalar, printed `f32`.
- `PtrType(dtype, shape, space)`: a tile of element pointers, `tile<128xptr<f32, device>>`; a scalar
  pointer (a kernel's buffer, a threadgroup array) is `ptr<f32, device>`.
- `VectorType(dtype, width)`: a Metal vector of 2 to 4 lanes (`float4`), `vec<4xf32>` (Metal IR only).
- `MatrixType(dtype)`: an 8x8 `simdgroup_matrix`, `simdgroup_matrix<8x8xf32>` (Metal IR only).
They are interned (see `Interned`): constructing a type equal to a live one returns that object, so `==`
and `hash` on types are identity tests done in C. The enums' facts (`DType.bits`, `.is_float`, `.msl`...)
are plain attributes of each member.

Promotion (`promote(a, b)`), applied to both operands of a binary operator:
- a float type beats an integer type or bool;
- two float types: the wider wins; f16 with bf16 gives f32 (neither holds the other);
- two integer types of the same signedness: the wider wins;
- signed with unsigned: the unsigned type if it is at least as wide (C's rule, so `i32 + u32 -> u32` and
  `i64 + u64 -> u64`), otherwise the signed type (`u32 + i64 -> i64`, as in numpy);
- bool with anything gives the other type; bool with bool stays bool for `& | ^` (comparisons and
  logic) and becomes i32 for arithmetic.
A computation converts 8-bit floats to f16 first (`promote_computed`: an 8-bit float with bf16 computes in f32).
Python scalars are *weak*: `x_f16 * 2.0` stays f16, `x_u8 + 1` stays u8; a Python float with an
integer tile gives f32.
"""

from __future__ import annotations

import math
import operator
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from metile.ir.ops import AtomicOp, IdentityEnum

if TYPE_CHECKING:
    import numpy as np


class DType(IdentityEnum):
    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    I8 = "i8"
    U8 = "u8"
    I16 = "i16"
    U16 = "u16"
    I32 = "i32"
    U32 = "u32"
    I64 = "i64"
    U64 = "u64"
    BOOL = "bool"
    F8E4M3 = "f8e4m3"
    F8E5M2 = "f8e5m2"

    # Facts about each member, set once below as plain attributes (a property would run Python code per read).
    bits: int
    itemsize: int
    is_float: bool
    is_int: bool
    is_signed: bool
    msl: str
    storage_only: bool
    """True for the 8-bit float types: they hold values in memory, and every computation on them converts them to
    f16 first (`COMPUTE_AS`); in registers and in MSL they are their bits (`uchar`)."""

    def __str__(self) -> str:
        return self.value

    @property
    def numpy(self) -> np.dtype | None:
        """The numpy dtype holding this type (None for bf16 and the f8 types, which numpy lacks: see `host_dtype`).
        numpy is imported by the first read, not with the IR."""
        return (_NUMPY or _numpy_tables()).get(self)


_BITS = {DType.F32: 32, DType.F16: 16, DType.BF16: 16, DType.I8: 8, DType.U8: 8, DType.I16: 16, DType.U16: 16,
         DType.I32: 32, DType.U32: 32, DType.I64: 64, DType.U64: 64, DType.BOOL: 1, DType.F8E4M3: 8, DType.F8E5M2: 8}
_MSL = {DType.F32: "float", DType.F16: "half", DType.BF16: "bfloat", DType.I8: "char", DType.U8: "uchar",
        DType.I16: "short", DType.U16: "ushort", DType.I32: "int", DType.U32: "uint", DType.I64: "long",
        DType.U64: "ulong", DType.BOOL: "bool", DType.F8E4M3: "uchar", DType.F8E5M2: "uchar"}
_STORAGE = (DType.F8E4M3, DType.F8E5M2)
_BOOL = DType.BOOL   # read as a global on hot paths: `DType.BOOL` goes through the enum metaclass's `__getattr__` hook
_NUMPY: dict[DType, np.dtype] = {}        # filled with `_FROM_NUMPY` on first use: the IR does not import numpy
_FROM_NUMPY: dict[np.dtype, DType] = {}


def _numpy_tables() -> dict[DType, np.dtype]:
    """`_NUMPY` and `_FROM_NUMPY`, filled (numpy imported) if they are not yet."""
    if not _NUMPY:
        import numpy as np

        found = {DType.F32: np.float32, DType.F16: np.float16, DType.I8: np.int8, DType.U8: np.uint8,
                 DType.I16: np.int16, DType.U16: np.uint16, DType.I32: np.int32, DType.U32: np.uint32,
                 DType.I64: np.int64, DType.U64: np.uint64, DType.BOOL: np.bool_}
        _FROM_NUMPY.update({np.dtype(t): d for d, t in found.items()})
        _NUMPY.update({d: np.dtype(t) for d, t in found.items()})
    return _NUMPY

for _d in DType:
    _d.bits = _BITS[_d]
    _d.itemsize = max(_d.bits // 8, 1)
    _d.is_float = _d in (DType.F32, DType.F16, DType.BF16, *_STORAGE)
    _d.storage_only = _d in _STORAGE
    _d.is_int = not _d.is_float and _d is not DType.BOOL
    _d.is_signed = _d in (DType.I8, DType.I16, DType.I32, DType.I64) or _d.is_float
    _d.msl = _MSL[_d]
del _d


# The largest finite value of each float type, and the magnitude from which a number rounds to infinity in it
# (half a unit in the last place above the largest: (2 - 2**-(mantissa bits + 1)) * 2**largest exponent).
FLOAT_MAX = {DType.F32: (2 - 2.0**-23) * 2.0**127, DType.F16: 65504.0, DType.BF16: (2 - 2.0**-7) * 2.0**127}
FLOAT_OVERFLOW = {DType.F32: (2 - 2.0**-24) * 2.0**127, DType.F16: 65520.0, DType.BF16: (2 - 2.0**-8) * 2.0**127}
F32_OVERFLOW = FLOAT_OVERFLOW[DType.F32]  # read on hot paths without the dict lookup


COMPUTE_AS = {DType.F8E4M3: DType.F16, DType.F8E5M2: DType.F16}
"""The type an 8-bit float computes in: f16 holds every value of both formats exactly."""
ATOMIC_DTYPES = {op: (DType.I32, DType.U32) if op in (AtomicOp.AND, AtomicOp.OR, AtomicOp.XOR) else
                 (DType.I32, DType.U32, DType.F32, DType.F16, DType.BF16) if op is AtomicOp.CAS else
                 (DType.I32, DType.U32, DType.F32, DType.F16, DType.BF16) for op in AtomicOp}
"""The memory each atomic operation takes: Metal's atomic_int and atomic_uint; f32 for add and exchange (Metal's
atomic_float), and for max, min and compare-and-swap, which the emitter builds from integer atomics on the float's
bits; f16 and bf16
(device memory only) for all but the bitwise ones, which the emitter builds as compare-and-swap loops on the 32-bit
word holding the element."""
_EXTENSION_NAMES = {"bfloat16": DType.BF16, "float8_e4m3fn": DType.F8E4M3, "float8_e5m2": DType.F8E5M2}


def from_numpy(dtype) -> DType | None:
    """The DType for a numpy dtype (ml_dtypes' bfloat16, float8_e4m3fn and float8_e5m2 included), or None when Metal
    cannot hold it (float64, complex...)."""
    import numpy as np

    if not _FROM_NUMPY:
        _numpy_tables()
    dt = np.dtype(dtype)
    found = _FROM_NUMPY.get(dt)
    return found if found is not None else _EXTENSION_NAMES.get(dt.name)


def host_dtype(dtype: DType) -> np.dtype | None:
    """The numpy dtype of host arrays of `dtype`: numpy's own, or ml_dtypes' for bf16 and the f8 types (None when
    ml_dtypes is not installed)."""
    found = dtype.numpy
    if found is not None:
        return found
    import numpy as np

    try:
        import ml_dtypes
    except ImportError:
        return None
    name = next(n for n, d in _EXTENSION_NAMES.items() if d is dtype)
    return np.dtype(getattr(ml_dtypes, name))


def promote(a: DType, b: DType) -> DType:
    """The common type of two operands (see the module docstring)."""
    if a is b:
        return a
    if a is _BOOL:
        return b
    if b is _BOOL:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            if {a, b} == {DType.F16, DType.BF16}:
                return DType.F32
            if a.storage_only and b.storage_only:  # two different 8-bit formats: f16 holds both
                return DType.F16
            return a if a.bits >= b.bits else b
        return a if a.is_float else b
    if a.is_signed == b.is_signed:
        return a if a.bits >= b.bits else b
    signed, unsigned = (a, b) if a.is_signed else (b, a)
    return unsigned if unsigned.bits >= signed.bits else signed


def promote_computed(a: DType, b: DType) -> DType:
    """The type a computation (arithmetic, math, comparison) on operands of types `a` and `b` happens in: 8-bit
    floats are converted to f16 first (`COMPUTE_AS`), then promoted, so an 8-bit float with bf16 computes in f32,
    as f16 with bf16 does (`promote` alone gives bf16, which holds both: the type of a selection)."""
    return promote(COMPUTE_AS.get(a, a), COMPUTE_AS.get(b, b))


def weak_promote(tile: DType, scalar: object) -> DType:
    """The type of `tile OP python_scalar`: the tile's type unless a float meets an integer tile."""
    if isinstance(scalar, bool):
        return tile
    if isinstance(scalar, float) and not tile.is_float:
        return DType.F32
    return tile


class AddressSpace(IdentityEnum):
    DEVICE = "device"
    THREADGROUP = "threadgroup"
    CONSTANT = "constant"


def _shape(dims) -> tuple[int, ...]:
    return tuple(dims)


_TABLES: dict[type, dict[tuple, weakref.ref]] = {}
_RECENT: list[object] = [None] * 1024   # the types made last, kept alive so that later compiles find them
_recent_next = 0
_FIELDS: dict[type, Callable[[object], tuple]] = {}  # per class, the getter of all its fields as a tuple
_PURGE_AT: dict[type, int] = {}           # per class, the table size at which dead entries are dropped next


class Interned(type):
    """Metaclass of the value types: a constructor call returns the one live object of that class with
    those fields, so equal types are the same object and compare and hash by identity, which CPython does
    in C. The tables hold weak references (as tinygrad's UOp cache does), plus strong ones to the types
    made last; copying and pickling go through the constructor (`__reduce__`), so no second equal object
    can appear. A call with the same positional arguments as an earlier one is one dict lookup (the
    arguments are also a key of the table)."""

    def __call__(cls, *args, **kwargs):
        table = _TABLES[cls]
        if kwargs:
            return _intern(table, super().__call__(*args, **kwargs), None)
        try:
            ref = table.get(args)
        except TypeError:   # an unhashable argument, such as a shape given as a list
            return _intern(table, super().__call__(*args), None)
        if ref is not None and (t := ref()) is not None:
            return t
        return _intern(table, super().__call__(*args), args)


def _intern(table: dict[tuple, weakref.ref], new, alias: tuple | None):
    """The live object equal to `new` (`new` itself, entered in `table`, if there is none); `alias`, the
    constructor arguments, becomes a second key for it."""
    global _recent_next
    cls = new.__class__
    key = _FIELDS[cls](new)
    while (t := (found := table.setdefault(key, weakref.ref(new)))()) is None:
        if table.get(key) is found:   # the entry of an equal type that no longer exists
            del table[key]
    if t is new:
        _RECENT[_recent_next] = new
        _recent_next = (_recent_next + 1) % len(_RECENT)
    if alias is not None and alias != key:
        table[alias] = found
    if len(table) > _PURGE_AT[cls]:
        for k in [k for k, r in table.items() if r() is None]:
            del table[k]
        _PURGE_AT[cls] = max(1024, 2 * len(table))
    return t


def _interned(cls: type) -> type:
    """Register `cls` (an attrs class whose metaclass is `Interned`) and let copies go through its constructor
    (the fields it does not take are derived from the others, once per type)."""
    _TABLES[cls] = {}
    _PURGE_AT[cls] = 1024
    names = [a.name for a in attrs.fields(cls) if a.init]
    if len(names) > 1:
        fields = operator.attrgetter(*names)
    else:
        def fields(t: object, name: str = names[0]) -> tuple:
            return (getattr(t, name),)
    _FIELDS[cls] = fields

    def __reduce__(self):
        return cls, fields(self)

    cls.__reduce__ = __reduce__
    return cls


@_interned
@attrs.frozen(eq=False)
class TileType(metaclass=Interned):
    """A tile of `dtype` elements; `shape == ()` is a scalar (per program in Tile IR, per thread in Metal IR)."""

    dtype: DType
    shape: tuple[int, ...] = attrs.field(default=(), converter=_shape)
    is_scalar: bool = attrs.field(init=False, repr=False)   # shape == ()
    size: int = attrs.field(init=False, repr=False)         # the number of elements

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "is_scalar", self.shape == ())
        object.__setattr__(self, "size", math.prod(self.shape))

    def with_dtype(self, dtype: DType) -> TileType:
        ref = _TILE_TYPES.get((dtype, self.shape))   # `tile_type(dtype, self.shape)`, without its call
        if ref is not None and (t := ref()) is not None:
            return t
        return TileType(dtype, self.shape)

    def with_shape(self, shape: tuple[int, ...]) -> TileType:
        try:   # `tile_type(self.dtype, shape)`, without its call
            ref = _TILE_TYPES.get((self.dtype, shape))
        except TypeError:   # a shape given as a list
            return TileType(self.dtype, shape)
        if ref is not None and (t := ref()) is not None:
            return t
        return TileType(self.dtype, shape)

    def __str__(self) -> str:
        return str(self.dtype) if not self.shape else f"tile<{_dims(self.shape)}x{self.dtype}>"


@_interned
@attrs.frozen(eq=False)
class PtrType(metaclass=Interned):
    """A tile of pointers to `dtype` elements in `space`; `shape == ()` is one pointer."""

    dtype: DType
    shape: tuple[int, ...] = attrs.field(converter=_shape)
    space: AddressSpace
    is_scalar: bool = attrs.field(init=False, repr=False)   # shape == ()
    size: int = attrs.field(init=False, repr=False)         # the number of pointers

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "is_scalar", self.shape == ())
        object.__setattr__(self, "size", math.prod(self.shape))

    def with_shape(self, shape: tuple[int, ...]) -> PtrType:
        return PtrType(self.dtype, shape, self.space)

    def __str__(self) -> str:
        elem = f"ptr<{self.dtype}, {self.space.value}>"
        return elem if not self.shape else f"tile<{_dims(self.shape)}x{elem}>"


@_interned
@attrs.frozen(eq=False)
class VectorType(metaclass=Interned):
    """A Metal vector (`float4`, `half2`...): `width` lanes of `dtype`, held by one thread."""

    dtype: DType
    width: int

    def with_dtype(self, dtype: DType) -> VectorType:
        return VectorType(dtype, self.width)

    def __str__(self) -> str:
        return f"vec<{self.width}x{self.dtype}>"


@_interned
@attrs.frozen(eq=False)
class MatrixType(metaclass=Interned):
    """An 8x8 `simdgroup_matrix<T, 8, 8>`, spread over the 32 lanes of a simdgroup (two elements each)."""

    dtype: DType
    ROWS = 8
    COLS = 8

    def __str__(self) -> str:
        return f"simdgroup_matrix<{self.ROWS}x{self.COLS}x{self.dtype}>"


_TILE_TYPES = _TABLES[TileType]
SCALAR_TYPES: dict[DType, TileType] = {d: TileType(d) for d in DType}   # kept alive here, read by one lookup
MATRIX_TYPES: dict[DType, MatrixType] = {d: MatrixType(d) for d in DType}   # the same for `MatrixType(d)`
_VECTOR_TYPES = _TABLES[VectorType]


def tile_type(dtype: DType, shape: tuple[int, ...] = ()) -> TileType:
    """`TileType(dtype, shape)`, without the constructor call when that type exists (one dict lookup)."""
    try:
        ref = _TILE_TYPES.get((dtype, shape))
    except TypeError:   # a shape given as a list
        return TileType(dtype, shape)
    if ref is not None and (t := ref()) is not None:
        return t
    return TileType(dtype, shape)


def vector_type(dtype: DType, width: int) -> VectorType:
    """`VectorType(dtype, width)`, without the constructor call when that type exists (one dict lookup)."""
    ref = _VECTOR_TYPES.get((dtype, width))
    if ref is not None and (t := ref()) is not None:
        return t
    return VectorType(dtype, width)


Type = TileType | PtrType | VectorType | MatrixType


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


def broadcast_shapes(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """True when numpy would broadcast `src` to `dst` (right-aligned; each dim equal or 1)."""
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(reversed(src), reversed(dst)))


def fits(value: object, dtype: DType) -> bool:
    """True when the Python scalar `value` is representable as a constant of `dtype`."""
    if dtype is DType.BOOL:
        return isinstance(value, bool)
    if dtype.storage_only:  # no constants of the 8-bit float types: a number converts to them at run time
        return False
    if dtype.is_float:
        return isinstance(value, float)
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    lo, hi = (-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1) if dtype.is_signed else (0, (1 << dtype.bits) - 1)
    return lo <= value <= hi
