"""Element types and the rules for mixed arithmetic; the types of IR values.

Value types (frozen, hashable, not IR nodes: rewrites never visit them), printed as the IR text spells them:
- `TileType(dtype, shape)`: a tile of elements, `tile<64x32xf32>`; shape `()` is a scalar, printed `f32`.
- `PtrType(dtype, shape, space)`: a tile of element pointers, `tile<128xptr<f32, device>>`; a scalar
  pointer (a kernel's buffer, a threadgroup array) is `ptr<f32, device>`.
- `VectorType(dtype, width)`: a Metal vector of 2 to 4 lanes (`float4`), `vec<4xf32>` (Metal IR only).
- `MatrixType(dtype)`: an 8x8 `simdgroup_matrix`, `simdgroup_matrix<8x8xf32>` (Metal IR only).

Promotion (`promote(a, b)`), applied to both operands of a binary operator:
- a float type beats an integer type or bool;
- two float types: the wider wins; f16 with bf16 gives f32 (neither holds the other);
- two integer types of the same signedness: the wider wins;
- signed with unsigned: the unsigned type if it is at least as wide (C's rule, so `i32 + u32 -> u32`),
  otherwise the signed type;
- bool with anything gives the other type; bool with bool stays bool for `& | ^` (comparisons and
  logic) and becomes i32 for arithmetic.
Python scalars are *weak*: `x_f16 * 2.0` stays f16, `x_u8 + 1` stays u8; a Python float with an
integer tile gives f32.
"""

from __future__ import annotations

import enum
import math

import attrs
import numpy as np


class DType(enum.Enum):
    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    I8 = "i8"
    U8 = "u8"
    I16 = "i16"
    U16 = "u16"
    I32 = "i32"
    U32 = "u32"
    BOOL = "bool"

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def itemsize(self) -> int:
        return max(self.bits // 8, 1)

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.F16, DType.BF16)

    @property
    def is_int(self) -> bool:
        return not self.is_float and self is not DType.BOOL

    @property
    def is_signed(self) -> bool:
        return self in (DType.I8, DType.I16, DType.I32) or self.is_float

    @property
    def msl(self) -> str:
        return _MSL[self]

    @property
    def numpy(self) -> np.dtype | None:
        """The numpy dtype holding this type (None for bf16, which numpy lacks; raw bits travel as u16)."""
        return _NUMPY.get(self)

    def __str__(self) -> str:
        return self.value


_BITS = {DType.F32: 32, DType.F16: 16, DType.BF16: 16, DType.I8: 8, DType.U8: 8, DType.I16: 16,
         DType.U16: 16, DType.I32: 32, DType.U32: 32, DType.BOOL: 1}
_MSL = {DType.F32: "float", DType.F16: "half", DType.BF16: "bfloat", DType.I8: "char", DType.U8: "uchar",
        DType.I16: "short", DType.U16: "ushort", DType.I32: "int", DType.U32: "uint", DType.BOOL: "bool"}
_NUMPY = {DType.F32: np.dtype(np.float32), DType.F16: np.dtype(np.float16), DType.I8: np.dtype(np.int8),
          DType.U8: np.dtype(np.uint8), DType.I16: np.dtype(np.int16), DType.U16: np.dtype(np.uint16),
          DType.I32: np.dtype(np.int32), DType.U32: np.dtype(np.uint32), DType.BOOL: np.dtype(np.bool_)}
_FROM_NUMPY = {v: k for k, v in _NUMPY.items()}


def from_numpy(dtype) -> DType | None:
    """The DType for a numpy dtype, or None when Metal cannot hold it (float64, int64, complex...)."""
    dt = np.dtype(dtype)
    if dt.name == "bfloat16":
        return DType.BF16
    return _FROM_NUMPY.get(dt)


def promote(a: DType, b: DType) -> DType:
    """The common type of two operands (see the module docstring)."""
    if a is b:
        return a
    if a is DType.BOOL:
        return b
    if b is DType.BOOL:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            if {a, b} == {DType.F16, DType.BF16}:
                return DType.F32
            return a if a.bits >= b.bits else b
        return a if a.is_float else b
    if a.is_signed == b.is_signed:
        return a if a.bits >= b.bits else b
    signed, unsigned = (a, b) if a.is_signed else (b, a)
    return unsigned if unsigned.bits >= signed.bits else signed


def weak_promote(tile: DType, scalar: object) -> DType:
    """The type of `tile OP python_scalar`: the tile's type unless a float meets an integer tile."""
    if isinstance(scalar, bool):
        return tile
    if isinstance(scalar, float) and not tile.is_float:
        return DType.F32
    return tile


class AddressSpace(enum.Enum):
    DEVICE = "device"
    THREADGROUP = "threadgroup"
    CONSTANT = "constant"


def _shape(dims) -> tuple[int, ...]:
    return tuple(dims)


@attrs.frozen(cache_hash=True)
class TileType:
    """A tile of `dtype` elements; `shape == ()` is a scalar (per program in Tile IR, per thread in Metal IR)."""

    dtype: DType
    shape: tuple[int, ...] = attrs.field(default=(), converter=_shape)

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def with_dtype(self, dtype: DType) -> TileType:
        return TileType(dtype, self.shape)

    def with_shape(self, shape: tuple[int, ...]) -> TileType:
        return TileType(self.dtype, shape)

    def __str__(self) -> str:
        return str(self.dtype) if not self.shape else f"tile<{_dims(self.shape)}x{self.dtype}>"


@attrs.frozen(cache_hash=True)
class PtrType:
    """A tile of pointers to `dtype` elements in `space`; `shape == ()` is one pointer."""

    dtype: DType
    shape: tuple[int, ...] = attrs.field(converter=_shape)
    space: AddressSpace

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def with_shape(self, shape: tuple[int, ...]) -> PtrType:
        return PtrType(self.dtype, shape, self.space)

    def __str__(self) -> str:
        elem = f"ptr<{self.dtype}, {self.space.value}>"
        return elem if not self.shape else f"tile<{_dims(self.shape)}x{elem}>"


@attrs.frozen(cache_hash=True)
class VectorType:
    """A Metal vector (`float4`, `half2`...): `width` lanes of `dtype`, held by one thread."""

    dtype: DType
    width: int

    def with_dtype(self, dtype: DType) -> VectorType:
        return VectorType(dtype, self.width)

    def __str__(self) -> str:
        return f"vec<{self.width}x{self.dtype}>"


@attrs.frozen(cache_hash=True)
class MatrixType:
    """An 8x8 `simdgroup_matrix<T, 8, 8>`, spread over the 32 lanes of a simdgroup (two elements each)."""

    dtype: DType
    ROWS = 8
    COLS = 8

    def __str__(self) -> str:
        return f"simdgroup_matrix<{self.ROWS}x{self.COLS}x{self.dtype}>"


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
    if dtype.is_float:
        return isinstance(value, float)
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    lo, hi = (-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1) if dtype.is_signed else (0, (1 << dtype.bits) - 1)
    return lo <= value <= hi
