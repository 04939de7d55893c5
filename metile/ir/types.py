"""Element types of the tile language and the rules for mixed arithmetic.

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
