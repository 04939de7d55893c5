"""Triton's types as `triton.language` names them: `tl.dtype` and its instances (`tl.float16`, `tl.int32`...),
`tl.pointer_type`, `tl.block_type`, `tl.constexpr`, `tl.tensor`, and their correspondence with metile's `DType`.

The dtype objects behave as Triton's do (names such as "fp16", `is_floating()`, `primitive_bitwidth`, equality by
name), so kernels and host code that inspect them (`x.dtype == tl.float32`, `ptr.dtype.element_ty`) run unchanged.
`metile_dtype` maps one to metile's element type; the types metile has no counterpart for are refused there, at the
kernel's line: `float64` and the fp8 variants other than `float8e4nv` and `float8e5`. `int64` and `uint64` are
metile's i64 and u64.
"""

from __future__ import annotations

import enum

from metile.frontend.errors import KernelTypeError
from metile.ir.types import DType
from metile.language import constexpr

_SIGNED = ("int8", "int16", "int32", "int64")
_UNSIGNED = ("int1", "uint8", "uint16", "uint32", "uint64")
_FLOATS = ("fp8e4b15", "fp8e4nv", "fp8e4b8", "fp8e5", "fp8e5b16", "fp16", "bf16", "fp32", "fp64")
_STANDARD = ("fp16", "bf16", "fp32", "fp64")
_BITS = {"int1": 1, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64,
         "uint64": 64, "fp16": 16, "bf16": 16, "fp32": 32, "fp64": 64, "void": 0}
_MANTISSA = {"fp8e4b15": (3, 15), "fp8e4nv": (3, 7), "fp8e4b8": (3, 8), "fp8e5": (2, 15), "fp8e5b16": (2, 16),
             "fp16": (10, 15), "bf16": (7, 127), "fp32": (23, 127), "fp64": (52, 1023)}


class dtype:  # noqa: N801 - Triton's spelling
    """An element type of Triton (`tl.float32` is `dtype("fp32")`)."""

    SINT_TYPES = list(_SIGNED)
    UINT_TYPES = list(_UNSIGNED)
    FP_TYPES = list(_FLOATS)
    STANDARD_FP_TYPES = list(_STANDARD)
    OTHER_TYPES = ["void"]

    class SIGNEDNESS(enum.Enum):
        SIGNED = 0
        UNSIGNED = 1

    class KIND(enum.Enum):
        BOOLEAN = 0
        INTEGRAL = 1
        FLOATING = 2

    def __init__(self, name):
        name = name.value if isinstance(name, constexpr) else name
        if not dtype.is_dtype(name):
            raise ValueError(f"unknown Triton dtype {name!r}")
        self.name = name
        self.primitive_bitwidth = _BITS.get(name, 8)
        self.itemsize = self.primitive_bitwidth // 8
        if name in _SIGNED or name in _UNSIGNED:
            self.int_signedness = dtype.SIGNEDNESS.SIGNED if name in _SIGNED else dtype.SIGNEDNESS.UNSIGNED
            self.int_bitwidth = self.primitive_bitwidth
        elif name in _FLOATS:
            self.fp_mantissa_width, self.exponent_bias = _MANTISSA[name]

    @staticmethod
    def is_dtype(type_str) -> bool:
        return type_str in _SIGNED or type_str in _UNSIGNED or type_str in _FLOATS or type_str == "void"

    def is_fp8(self): return self.name.startswith("fp8")
    def is_fp8e4nv(self): return self.name == "fp8e4nv"
    def is_fp8e4b8(self): return self.name == "fp8e4b8"
    def is_fp8e4b15(self): return self.name == "fp8e4b15"
    def is_fp8e5(self): return self.name == "fp8e5"
    def is_fp8e5b16(self): return self.name == "fp8e5b16"
    def is_fp16(self): return self.name == "fp16"
    def is_bf16(self): return self.name == "bf16"
    def is_fp32(self): return self.name == "fp32"
    def is_fp64(self): return self.name == "fp64"
    def is_int1(self): return self.name == "int1"
    def is_int8(self): return self.name == "int8"
    def is_int16(self): return self.name == "int16"
    def is_int32(self): return self.name == "int32"
    def is_int64(self): return self.name == "int64"
    def is_uint8(self): return self.name == "uint8"
    def is_uint16(self): return self.name == "uint16"
    def is_uint32(self): return self.name == "uint32"
    def is_uint64(self): return self.name == "uint64"
    def is_floating(self): return self.name in _FLOATS
    def is_standard_floating(self): return self.name in _STANDARD
    def is_int_signed(self): return self.name in _SIGNED
    def is_int_unsigned(self): return self.name in _UNSIGNED
    def is_int(self): return self.name in _SIGNED or self.name in _UNSIGNED
    def is_bool(self): return self.name == "int1"
    def is_void(self): return self.name == "void"
    def is_block(self): return False
    def is_ptr(self): return False
    def is_const(self): return False

    def kind(self) -> dtype.KIND:
        """bool < integer < float, the order of Triton's promotion of Python numbers."""
        if self.is_bool():
            return dtype.KIND.BOOLEAN
        return dtype.KIND.INTEGRAL if self.is_int() else dtype.KIND.FLOATING

    def get_int_max_value(self) -> int:
        return (1 << (self.int_bitwidth - 1)) - 1 if self.is_int_signed() else (1 << self.int_bitwidth) - 1

    def get_int_min_value(self) -> int:
        return -(1 << (self.int_bitwidth - 1)) if self.is_int_signed() else 0

    @property
    def scalar(self) -> dtype:
        return self

    def with_element_ty(self, element_ty: dtype) -> dtype:
        return element_ty

    def codegen_name(self) -> str:
        if self.name.startswith("fp"):
            return "float" + self.name[2:]
        return "bfloat" + self.name[2:] if self.name.startswith("bf") else self.name

    @property
    def cache_key_part(self) -> str:
        return self.name

    def mangle(self) -> str:
        if self.is_int():
            return ("i" if self.is_int_signed() else "u") + str(self.int_bitwidth)
        return self.name

    def __eq__(self, other) -> bool:
        return isinstance(other, dtype) and type(other) is type(self) and self.name == other.name

    def __hash__(self) -> int:
        return hash((self.name,))

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"triton.language.{self.codegen_name()}"


class pointer_type(dtype):  # noqa: N801
    """A pointer to `element_ty` (what `ptr.dtype` is for a pointer)."""

    def __init__(self, element_ty: dtype, address_space: int = 1, const: bool = False):
        element_ty = element_ty.value if isinstance(element_ty, constexpr) else element_ty
        if not isinstance(element_ty, dtype):
            raise TypeError(f"element_ty has type `{type(element_ty).__name__}`; expected `dtype`.")
        self.element_ty, self.address_space, self.const = element_ty, address_space, const
        self.name = f"pointer<{element_ty}>" if not const else f"const_pointer<{element_ty}>"
        self.primitive_bitwidth, self.itemsize = 64, 8

    def is_ptr(self): return True
    def is_const(self): return self.const

    def __eq__(self, other) -> bool:
        return isinstance(other, pointer_type) and (self.element_ty, self.address_space, self.const) == (
            other.element_ty, other.address_space, other.const)

    def __hash__(self) -> int:
        return hash((self.name, self.address_space))

    def __repr__(self) -> str:
        return self.name

    def mangle(self) -> str:
        return f"P{self.element_ty.mangle()}"


class block_type(dtype):  # noqa: N801
    """The type of a tensor of `shape` (a tile): `x.type` of a traced value with a shape."""

    def __init__(self, element_ty: dtype, shape):
        self.element_ty = element_ty
        self.shape = tuple(s.value if isinstance(s, constexpr) else s for s in shape)
        if not self.shape:
            raise TypeError("0d block_type is forbidden")
        self.numel = 1
        for s in self.shape:
            self.numel *= s
        self.name = f"<{self.shape}, {element_ty}>"

    def is_block(self): return True

    def get_block_shapes(self) -> tuple:
        return self.shape

    def with_element_ty(self, scalar_ty: dtype) -> block_type:
        return block_type(scalar_ty, self.shape)

    @property
    def scalar(self) -> dtype:
        return self.element_ty

    def __eq__(self, other) -> bool:
        return isinstance(other, block_type) and (self.element_ty, self.shape) == (other.element_ty, other.shape)

    def __hash__(self) -> int:
        return hash((self.name,))

    def __repr__(self) -> str:
        return self.name


class tuple_type:  # noqa: N801
    """Triton's type of a tuple of values (accepted as a name; metile's kernels hold Python tuples)."""

    def __init__(self, types, fields=None):
        self.types, self.fields = list(types), fields


class tensor:  # noqa: N801
    """The class of Triton's traced values. In a kernel on metile the values are metile's own (with Triton's
    methods, `x.to(...)`, `x.dtype`, `x.shape`); this class only names the type."""

    def __init__(self, *args, **kwargs):
        raise TypeError("tl.tensor values are made by operations inside a @triton.jit kernel, not constructed")


class PropagateNan(enum.Enum):
    """Whether `tl.maximum`/`tl.minimum`/`tl.clamp` give NaN when an operand is NaN (`ALL`) or the other operand
    (`NONE`, the default)."""

    NONE = 0x0000
    ALL = 0xFFFF


void = dtype("void")
int1 = dtype("int1")
int8, int16, int32, int64 = dtype("int8"), dtype("int16"), dtype("int32"), dtype("int64")
uint8, uint16, uint32, uint64 = dtype("uint8"), dtype("uint16"), dtype("uint32"), dtype("uint64")
float8e5, float8e5b16 = dtype("fp8e5"), dtype("fp8e5b16")
float8e4nv, float8e4b8, float8e4b15 = dtype("fp8e4nv"), dtype("fp8e4b8"), dtype("fp8e4b15")
float16, bfloat16, float32, float64 = dtype("fp16"), dtype("bf16"), dtype("fp32"), dtype("fp64")
pi32_t = pointer_type(int32)
const = "const"   # Triton's annotation of a read-only pointer parameter (`x: tl.const`): no effect on metile
TRITON_MAX_TENSOR_NUMEL = 1048576

_TO_METILE = {"int1": "BOOL", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8",
              "uint16": "U16", "uint32": "U32", "uint64": "U64", "fp16": "F16", "bf16": "BF16", "fp32": "F32",
              "fp8e4nv": "F8E4M3", "fp8e5": "F8E5M2"}
_WHY = {"fp64": "Metal has no 64-bit floats", "void": "it holds no values"}


def metile_dtype(t, loc=None) -> DType:
    """The metile element type of the Triton dtype `t` (a `tl.dtype`, or its name such as "fp16"); a
    `KernelTypeError` at `loc` for the types metile cannot compute with."""
    t = t.value if isinstance(t, constexpr) else t
    if isinstance(t, str) and dtype.is_dtype(t):
        t = dtype(t)
    if isinstance(t, pointer_type) or not isinstance(t, dtype) or isinstance(t, block_type):
        raise KernelTypeError(f"expected a Triton element type (tl.float32, tl.int32, ...), not {t!r}", loc)
    member = getattr(DType, _TO_METILE.get(t.name, ""), None)
    if member is None:
        why = _WHY.get(t.name) or f"metile has no {t.name} (its 8-bit floats are tl.float8e4nv and tl.float8e5)"
        raise KernelTypeError(f"tl.{t.codegen_name()} is not supported: {why}", loc)
    return member


_INSTANCES = {t.name: t for t in (int1, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16,
                                  float32, float8e4nv, float8e5)}
_FROM_METILE = {getattr(DType, m): _INSTANCES[n] for n, m in _TO_METILE.items()}


def triton_dtype(d: DType) -> dtype:
    """The Triton dtype of metile's element type `d`: the module's own object (`x.dtype is tl.float16` holds)."""
    return _FROM_METILE[d]


__all__ = [
    "PropagateNan", "TRITON_MAX_TENSOR_NUMEL", "bfloat16", "block_type", "const", "constexpr", "dtype", "float16",
    "float32", "float64", "float8e4b15", "float8e4b8", "float8e4nv", "float8e5", "float8e5b16", "int1", "int16",
    "int32", "int64", "int8", "metile_dtype", "pi32_t", "pointer_type", "tensor", "triton_dtype", "tuple_type",
    "uint16", "uint32", "uint64", "uint8", "void",
]
