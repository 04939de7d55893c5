"""MSL spellings of Metal IR leaves: type names, literals, operators, builtins and fences.

Every function here is a total map from an IR enum or type to text (and `loop_step` the step of a `for`
loop), or raises `EmitError` for what Metal IR cannot hold (`FLOORDIV`/`MOD`, tile shapes, atomics on types
Metal has no atomic for).
"""

from __future__ import annotations

import functools
import math
import operator
import re
import struct

from metile.ir import (
    BinOp,
    BuiltinKind,
    CmpOp,
    Const,
    DType,
    Fence,
    For,
    MatrixType,
    MetileError,
    PtrType,
    ReduceOp,
    TileType,
    Type,
    UnOp,
    VectorType,
)
from metile.ir.errors import assert_never
from metile.ir.types import FLOAT_MAX


class EmitError(MetileError):
    """The kernel cannot be rendered as MSL (wrong stage, or a node Metal IR does not admit)."""


def type_name(t: Type, *, const: bool = False) -> str:
    """The MSL type of a value: `float`, `float4`, `simdgroup_matrix<float, 8, 8>`, `device const float*`."""
    match t:
        case TileType():
            if t.shape != ():
                raise EmitError(f"a tile value ({t}) reached the MSL emitter; Metal IR holds scalars only")
            return _SCALAR_NAMES[t.dtype._value_]
        case PtrType():
            if t.shape != ():
                raise EmitError(f"a tile of pointers ({t}) reached the MSL emitter")
            return f"{t.space._value_} {'const ' if const else ''}{_SCALAR_NAMES[t.dtype._value_]}*"
        case VectorType():
            return f"{_SCALAR_NAMES[t.dtype._value_]}{t.width}"
        case MatrixType():
            return f"simdgroup_matrix<{_SCALAR_NAMES[t.dtype._value_]}, {MatrixType.ROWS}, {MatrixType.COLS}>"
        case _:
            assert_never(t)


# The MSL name of each element type by the member's `_value_`, a plain attribute (`.value`, `.msl` and
# `hash(member)` call back into Python).
_SCALAR_NAMES = {d._value_: d.msl for d in DType}


def type_text(t: Type) -> str:
    """`type_name(t)` (without `const`), kept per type: types are interned and compare and hash by identity, in C."""
    text = _TYPE_TEXTS.get(t)
    if text is None:
        text = type_name(t)  # raises for a tile shape, which is then not kept
        if len(_TYPE_TEXTS) < 4096:
            _TYPE_TEXTS[t] = text
    return text


def pointer_text(t: PtrType, const: bool) -> str:
    """`type_name(t, const=const)` of a pointer type (one string per address space, element type and `const`)."""
    if t.shape:
        return type_name(t, const=const)  # refused
    key = (t.space._value_, t.dtype._value_, const)
    text = _POINTER_NAMES.get(key)
    if text is None:
        text = _POINTER_NAMES[key] = type_name(t, const=const)
    return text


_TYPE_TEXTS: dict[Type, str] = {}  # a cache: one entry per scalar, vector, matrix and pointer type met
_POINTER_NAMES: dict[tuple[str, str, bool], str] = {}  # a cache: at most 3 * len(DType) * 2 entries


@functools.lru_cache(maxsize=4096)
def _float_text(x: float) -> str:
    """The shortest decimal that reads back as the float32 `x` (`1.0`, `1e-08`, `3.4028235e+38`); `x` is finite
    and not zero (`0.0 == -0.0` would share one cache entry). numpy is imported by the first call, not with the
    emitter."""
    import numpy as np

    text = str(np.float32(x))
    return text if ("." in text or "e" in text) else text + ".0"


_FLOAT_DTYPES = (DType.F32, DType.F16, DType.BF16)  # tuples, tested by identity: no `Enum.__hash__` call
_FORMATS = ((DType.F32, 24, -126), (DType.F16, 11, -14), (DType.BF16, 8, -126))   # significand bits, lowest exponent
_F32 = struct.Struct("<f")
_F32_MAX = float(FLOAT_MAX[DType.F32])


def _rounded(value, dtype: DType) -> float:
    """The number `value` (a Python int or float) rounded once to the float type `dtype`, to nearest, ties to even;
    beyond its largest finite value, an infinity. Converting through f64 or f32 first would round twice for a bf16
    constant (`1 + 2**-8 + 2**-30` is a tie once in f32) or an int past 2**53."""
    try:
        x = operator.index(value)                  # ints, bools and numpy integers, exactly
    except TypeError:
        x = float(value)
    if isinstance(x, float) and (x == 0.0 or not math.isfinite(x)):
        return x
    mant, emin = next((m, e) for d, m, e in _FORMATS if d is dtype)
    if not isinstance(x, float):
        if -(1 << mant) <= x <= 1 << mant:
            return float(x)                        # an int exact in the type (below its largest finite value)
    elif dtype is DType.F32 and abs(x) <= _F32_MAX and _F32.unpack(_F32.pack(x))[0] == x:
        return x                                   # a float exact in f32 already
    from fractions import Fraction  # the general case (imported here: most constants take the paths above)

    a = Fraction(abs(x))
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1                                     # 2**e <= a < 2**(e + 1)
    ulp = Fraction(2) ** max(e - mant + 1, emin - mant + 1)
    r = round(a / ulp) * ulp                       # Fraction's round: ties to even
    y = math.inf if r > FLOAT_MAX[dtype] else float(r)
    return -y if x < 0 else y


def literal(value: object, dtype: DType) -> str:
    """A constant of `dtype`, typed exactly: `1.5f`, `half(0.5f)`, `INFINITY`, `7u`, `-5L`, `7UL`, `short(-3)`,
    `true`."""
    if dtype is DType.I32:
        n = int(value)
        return str(n) if n != -(1 << 31) else "(-2147483647 - 1)"
    if dtype in _FLOAT_DTYPES:
        x = _rounded(value, dtype)
        if math.isnan(x):
            text = "NAN"
        elif math.isinf(x):
            text = "INFINITY" if x > 0 else "-INFINITY"
        elif x == 0.0:
            text = "-0.0f" if math.copysign(1.0, x) < 0 else "0.0f"
        else:
            text = _float_text(x) + "f"
        return text if dtype is DType.F32 else f"{dtype.msl}({text})"
    if dtype is DType.BOOL:
        return "true" if value else "false"
    if dtype.storage_only:   # its bits in a uchar: only a zero is spelled here, other values convert in the kernel
        if value != 0:
            raise EmitError(f"an {dtype} constant other than 0 ({value!r}) reached the MSL emitter: 8-bit floats "
                            "have no literals, their values convert from f32 in the kernel")
        return "uchar(0x80)" if math.copysign(1.0, value) < 0 else "uchar(0)"
    n = int(value)
    if dtype is DType.I64:  # `L` makes a `long` (64 bits in MSL); 2**63 has no literal, so the lowest is a difference
        return f"{n}L" if n != -(1 << 63) else "(-9223372036854775807L - 1)"
    if dtype is DType.U64:
        return f"{n}UL"
    text = f"{n}u" if not dtype.is_signed else str(n)
    return text if dtype is DType.U32 else f"{dtype.msl}({text})"


def literal_texts(value: object, dtype: DType) -> tuple[str, str]:
    """`literal(value, dtype)` as a whole and as an operand (in parentheses when it starts with `-` or `(`), kept per
    value class, value and dtype, and for a float zero (0.0 equals -0.0) its sign too; a NaN, each its own key, is
    spelled every time."""
    cls = value.__class__
    key = (cls, value, dtype._value_) if not (cls is float and value == 0) else \
        (cls, value, dtype._value_, math.copysign(1.0, value))
    found = _LITERAL_TEXTS.get(key)
    if found is None:
        text = literal(value, dtype)
        found = (text, f"({text})") if text.startswith(("-", "(")) else (text, text)
        if value == value and len(_LITERAL_TEXTS) < 4096:
            _LITERAL_TEXTS[key] = found
    return found


_LITERAL_TEXTS: dict[tuple, tuple[str, str]] = {}


INFIX: dict[BinOp, str] = {
    BinOp.ADD: "+", BinOp.SUB: "-", BinOp.MUL: "*", BinOp.DIV: "/", BinOp.TRUNCDIV: "/", BinOp.REM: "%",
    BinOp.AND: "&", BinOp.OR: "|", BinOp.XOR: "^", BinOp.SHL: "<<", BinOp.SHR: ">>",
}
BOOL_INFIX: dict[BinOp, str] = {BinOp.AND: "&&", BinOp.OR: "||", BinOp.XOR: "!="}
CALL: dict[BinOp, str] = {BinOp.MAX: "max", BinOp.MIN: "min", BinOp.POW: "pow", BinOp.MULHI: "mulhi",
                          BinOp.ATAN2: "atan2"}


def binary_spelling(op: BinOp, dtype: DType) -> tuple[str, bool]:
    """`(spelling, infix)` of `op` on `dtype`: an operator, or a function (`max`, `fmod` for float `REM`)."""
    match op:
        case BinOp.FLOORDIV | BinOp.MOD:
            raise EmitError(f"'{op.value}' reached the MSL emitter; lowering must expand it into "
                            "truncdiv/rem before Metal IR")
        case BinOp.REM if dtype.is_float:
            return "fmod", False
        case BinOp.AND | BinOp.OR | BinOp.XOR if dtype is DType.BOOL:
            return BOOL_INFIX[op], True
        case BinOp.MAX | BinOp.MIN | BinOp.POW | BinOp.MULHI | BinOp.ATAN2:
            return CALL[op], False
        case (BinOp.ADD | BinOp.SUB | BinOp.MUL | BinOp.DIV | BinOp.TRUNCDIV | BinOp.REM | BinOp.AND
              | BinOp.OR | BinOp.XOR | BinOp.SHL | BinOp.SHR):
            return INFIX[op], True
        case _:
            assert_never(op)


def unary_spelling(op: UnOp, dtype: DType) -> tuple[str, bool]:
    """`(spelling, prefix)` of `op` on `dtype`: `-`, `~` (`!` on bool), or a function name."""
    match op:
        case UnOp.NEG:
            return "-", True
        case UnOp.NOT:
            return ("!" if dtype is DType.BOOL else "~"), True
        case (UnOp.EXP | UnOp.EXP2 | UnOp.LOG | UnOp.LOG2 | UnOp.SQRT | UnOp.RSQRT | UnOp.ABS | UnOp.TANH
              | UnOp.SIN | UnOp.COS | UnOp.FLOOR | UnOp.CEIL | UnOp.TAN | UnOp.ASIN | UnOp.ACOS | UnOp.ATAN
              | UnOp.SINH | UnOp.COSH | UnOp.ASINH | UnOp.ACOSH | UnOp.ATANH | UnOp.EXP10 | UnOp.LOG10):
            return op.value, False
        case _:
            assert_never(op)


Form = tuple[str, bool, "str | None"]


def _form(spell, op, dtype: DType) -> Form:
    """`spell(op, dtype)`, with the MSL type an operator's result is converted back to: a sub-32-bit integer
    type (C promotes its arithmetic to `int`), else None."""
    word, operator = spell(op, dtype)
    return word, operator, dtype.msl if operator and dtype.is_int and dtype.bits < 32 else None


def binary_form(op: BinOp, dtype: DType) -> Form:
    """`(spelling, infix, converted to)` of `op` on `dtype` (see `binary_spelling`, `_form`), kept in `BINARY_FORMS`."""
    row = BINARY_FORMS[op._value_]
    found = row.get(dtype._value_)
    if found is None:
        found = row[dtype._value_] = _form(binary_spelling, op, dtype)   # raises for a pair MSL cannot spell
    return found


def unary_form(op: UnOp, dtype: DType) -> Form:
    """`(spelling, prefix, converted to)` of `op` on `dtype` (see `unary_spelling`, `_form`), kept in `UNARY_FORMS`."""
    row = UNARY_FORMS[op._value_]
    found = row.get(dtype._value_)
    if found is None:
        found = row[dtype._value_] = _form(unary_spelling, op, dtype)
    return found


# `_form` of the pairs spelled so far, by the `_value_` of each member (a plain attribute: `.value` and `hash(member)`
# call back into Python): the emitter reads a pair here first, and `binary_form` or `unary_form` spells a new one.
BINARY_FORMS: dict[str, dict[str, Form]] = {op._value_: {} for op in BinOp}
UNARY_FORMS: dict[str, dict[str, Form]] = {op._value_: {} for op in UnOp}
COMPARE: dict[CmpOp, str] = {CmpOp.LT: "<", CmpOp.LE: "<=", CmpOp.GT: ">", CmpOp.GE: ">=", CmpOp.EQ: "==",
                             CmpOp.NE: "!="}
SIMD_REDUCE: dict[ReduceOp, str] = {ReduceOp.SUM: "simd_sum", ReduceOp.PROD: "simd_product", ReduceOp.MAX: "simd_max",
                                     ReduceOp.MIN: "simd_min"}
COMPARE_BY_VALUE = {op._value_: text for op, text in COMPARE.items()}  # keyed as `_forms` is
SIMD_REDUCE_BY_VALUE = {op._value_: text for op, text in SIMD_REDUCE.items()}
ATOMIC: dict[DType, str] = {DType.I32: "atomic_int", DType.U32: "atomic_uint", DType.F32: "atomic_float"}


def atomic_type(dtype: DType) -> str:
    if (name := ATOMIC.get(dtype)) is None:
        raise EmitError(f"Metal has no atomic add on {dtype}")
    return name


def fence_flags(fence: Fence) -> str:
    match fence:
        case Fence.NONE:
            return "mem_flags::mem_none"
        case Fence.DEVICE:
            return "mem_flags::mem_device"
        case Fence.THREADGROUP:
            return "mem_flags::mem_threadgroup"
        case Fence.DEVICE_AND_THREADGROUP:
            return "mem_flags::mem_device | mem_flags::mem_threadgroup"
        case _:
            assert_never(fence)


def builtin_type(kind: BuiltinKind) -> str:
    """The type of the kernel argument declaring `kind` (named after its attribute: `uint3 x [[x]]`)."""
    return "uint3" if kind.has_axes else "uint"


MSL_RESERVED = frozenset("""
alignas alignof and asm auto bool break case catch char class const constexpr const_cast continue
decltype default delete do double else enum explicit export extern false float for friend goto half
if inline int long mutable namespace new noexcept not nullptr operator or private protected public
register reinterpret_cast return short signed sizeof static static_assert static_cast struct switch
template this thread throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor device threadgroup constant kernel vertex fragment metal uchar ushort uint bfloat
simd_sum simd_max simd_min max min pow select abs exp exp2 log log2 sqrt rsqrt tanh sin cos floor ceil
fmod INFINITY NAN
and_eq bitand bitor compl not_eq or_eq xor_eq char8_t char16_t char32_t concept consteval constinit co_await
co_return co_yield requires thread_local import module final override
threadgroup_imageblock ray_data object_data sampler texture1d texture1d_array texture2d texture2d_array texture3d
texturecube texturecube_array texture2d_ms texture2d_ms_array texture_buffer depth2d depth2d_array depthcube
depthcube_array depth2d_ms depth2d_ms_array visible stitchable patch mesh object
""".split()) | {k.value for k in BuiltinKind}


def msl_bool(b: bool) -> str:
    return "true" if b else "false"


@functools.lru_cache(maxsize=4096)
def c_identifier(name: str) -> str:
    """`name` made a valid C identifier: a non-ASCII character becomes `u` and its code point in hex (`α` is
    `u03b1`), any other non-word character `_`, and a leading digit gets `v`; a name that the C++ or Metal
    headers may define as a macro (`NULL`, `FLT_MAX`, `M_PI_F`, `__LINE__`...) gets `v_` in front."""
    if name.isascii() and name.isidentifier() and (
            (name[0].islower() and name not in _LOWER_MACROS) or not _MACRO_LIKE.match(name)):  # the usual case
        return name
    text = re.sub(r"[^\x00-\x7f]", lambda m: f"u{ord(m[0]):04x}", name)
    text = re.sub(r"\W", "_", text, flags=re.ASCII) or "v"
    text = "v" + text if text[0].isdigit() else text
    return "v_" + text if _MACRO_LIKE.match(text) else text


# The only names `_MACRO_LIKE` matches that start with a lower-case letter: any other such name is taken as it is
# without running the pattern (most of a kernel's names: `acc`, `offs_1`, `t3`).
_LOWER_MACROS = frozenset({"restrict", "errno", "assert"})
# Names the preprocessor may replace: reserved ones (`__x`, `_X`), the metal_stdlib and <climits>/<cfloat> limits and
# constants, and the prefixes of the CPU device's compatibility header.
_MACRO_LIKE = re.compile(r"__|_[A-Z]|MT_|METILE_|M_\w+\Z|(?:FLT|DBL|LDBL|HALF|BFLOAT)_"
                         r"|[SU]?(?:CHAR|SHRT|INT|LONG|LLONG)_(?:MAX|MIN|BIT)\Z|HUGE_VAL[FHL]?\Z"
                         r"|(?:MAXFLOAT|MAXHALF|NULL|EOF|" + "|".join(sorted(_LOWER_MACROS)) + r")\Z")


def c_identifiers(names: list[str]) -> list[str]:
    """`c_identifier` of each of `names`: all at once (one match over them, in C) when each starts with a lower-case
    ASCII letter and is an ASCII identifier that is no macro-like name, the usual case, which `c_identifier` keeps
    as it is."""
    if _LOWER_WORDS.fullmatch("\n".join(names)) and _LOWER_MACROS.isdisjoint(names):
        return list(names)
    return list(map(c_identifier, names))


_LOWER_WORDS = re.compile(r"[a-z]\w*(?:\n[a-z]\w*)*", re.ASCII)  # names, one a line, of `c_identifier`'s usual case


def function_name(kernel_name: str) -> str:
    """The MSL function of the kernel `kernel_name`: `mtile_<name>`, as the original meTile names it (the prefix
    also keeps a kernel called `kernel`, `half` or `abs` clear of MSL's keywords and functions)."""
    return "mtile_" + c_identifier(kernel_name)


def loop_step(s: For, i: str, stop: str, step: str) -> str:
    """The step of a `for` loop, as `range` has it: the index never wraps around. `i += step` unless the index
    could pass the type's limit before leaving the loop; then the step stops at `stop` when fewer than `step`
    remain (the distance to `stop` is positive inside the loop, so it is exact in unsigned arithmetic of the
    index's width: 32 or 64 bits)."""
    if _steps_within_range(s):
        return f"{i} += {step}"
    dtype, by = s.index.type.dtype, s.step.value if isinstance(s.step, Const) else None
    unsigned = _UNSIGNED_INDEX.get(dtype)
    if unsigned is None or by == 0:
        raise EmitError(f"a for loop over {s.index.type} with step {step} is not supported")
    left = (stop, i) if by is None or by > 0 else (i, stop)  # the distance still to go, in unsigned arithmetic
    # a run-time step is positive inside the loop
    size = literal_texts(abs(by), unsigned)[0] if by is not None else step
    if dtype.is_signed:
        left = tuple(f"static_cast<{unsigned.msl}>({x})" for x in left)
        size = size if by is not None else f"static_cast<{unsigned.msl}>({step})"
    return f"{i} = {left[0]} - {left[1]} > {size} ? {i} + {step} : {stop}"


def _steps_within_range(s: For) -> bool:
    """Whether `index += step` stays within the index type until the loop exits, whatever the run-time bounds: the
    last index inside the loop is one short of `stop` (of the type's limit when `stop` is not a constant)."""
    step, stop = s.step, s.stop
    if not isinstance(step, Const) or s.index.type.dtype not in _INDEX_RANGE:
        return False
    lo, hi = _INDEX_RANGE[s.index.type.dtype]
    if step.value > 0:
        return (stop.value - 1 if isinstance(stop, Const) else hi - 1) + step.value <= hi
    return (stop.value + 1 if isinstance(stop, Const) else lo + 1) + step.value >= lo


_INDEX_RANGE = {DType.I32: (-(1 << 31), (1 << 31) - 1), DType.U32: (0, (1 << 32) - 1),
                DType.I64: (-(1 << 63), (1 << 63) - 1), DType.U64: (0, (1 << 64) - 1)}
_UNSIGNED_INDEX = {DType.I32: DType.U32, DType.U32: DType.U32, DType.I64: DType.U64, DType.U64: DType.U64}


__all__ = [
    "BINARY_FORMS", "COMPARE_BY_VALUE", "SIMD_REDUCE_BY_VALUE", "UNARY_FORMS", "EmitError", "atomic_type",
    "binary_form", "binary_spelling", "builtin_type", "c_identifier", "c_identifiers", "fence_flags", "function_name",
    "literal", "literal_texts",
    "loop_step", "msl_bool",
    "pointer_text", "type_name", "type_text", "unary_form", "unary_spelling",
]
