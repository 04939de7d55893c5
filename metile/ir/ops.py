"""The closed sets of operation kinds, stages, fences and Metal builtins, as enums.

Each enum value is also the spelling the printer uses (`add`, `lt`, `tile`, `threadgroup`), so the
mnemonics of `Binary`, `Unary` and `Compare` must stay distinct from each other and from the other
op names; `tests/test_ir_nodes.py` checks that.

Semantics shared by every IR level (a rewrite may rely on them at any stage):
- `DIV` is true division and is defined for floats only; integers divide with `FLOORDIV` (Python's
  floor division) or `TRUNCDIV` (C's division, rounding toward zero).
- `MOD` is Python's modulo (the result has the divisor's sign, `-7 % 2 == 1`); `REM` is C's remainder
  (the result has the dividend's sign, `fmod` for floats). Metal IR has no `FLOORDIV` or `MOD`: lowering
  expands them into `TRUNCDIV`/`REM` plus a sign fix-up, so each Metal IR operator is one MSL operator.
- `SHR` is arithmetic on signed and logical on unsigned integers; shifting by the bit width or more is
  undefined, as in MSL.
- `MAX`/`MIN` on floats follow MSL's `max`/`min` (`fmax` semantics: a NaN operand yields the other).
- `MULHI` is the high half of the full-width product of two integers (`mulhi`), integers only.
- `ATAN2` is `atan2(lhs, rhs)`, the angle of the point (rhs, lhs), floats only; the math functions of `UnOp`
  (`exp` to `log10`) are MSL's functions of the same names, floats only.
"""

from __future__ import annotations

import enum


class _IdentityEnumType(enum.EnumType):
    """The metaclass of `IdentityEnum`: reading a member (`DType.F32`, `BinOp.ADD`, a `case` pattern's value) is
    the generic attribute lookup in C. Python 3.11's `EnumType` has a `__getattr__`, which makes every attribute
    read of an enum class call `type.__getattribute__` through a method wrapper (several times a plain read);
    here the class's own attributes (its members, its own methods and properties, read as `type` reads them)
    are found by `object.__getattribute__`, and anything else (inherited methods) by `type`'s lookup, then
    `EnumType`'s, as before. `IdentityEnum` classes hold no class or static methods of their own, which the
    two lookups would return differently (a test checks it)."""

    __getattribute__ = object.__getattribute__

    def __getattr__(cls, name: str):
        try:
            return type.__getattribute__(cls, name)
        except AttributeError:
            return enum.EnumType.__getattr__(cls, name)


class IdentityEnum(enum.Enum, metaclass=_IdentityEnumType):
    """An enum hashed by identity, as its members compare (each member is a singleton): CPython then hashes
    a member in C, where `Enum.__hash__` calls back into Python to hash the member's name. Every IR enum
    derives from it, so that dict and set lookups keyed by kinds, dtypes and stages stay in C."""

    __hash__ = object.__hash__


class BinOp(IdentityEnum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    FLOORDIV = "floordiv"
    MOD = "mod"
    TRUNCDIV = "truncdiv"
    REM = "rem"
    POW = "pow"
    AND = "and"
    OR = "or"
    XOR = "xor"
    SHL = "shl"
    SHR = "shr"
    MAX = "max"
    MIN = "min"
    MULHI = "mulhi"
    ATAN2 = "atan2"


class UnOp(IdentityEnum):
    NEG = "neg"
    NOT = "not"  # bitwise complement on integers, logical negation on bool
    EXP = "exp"
    EXP2 = "exp2"
    LOG = "log"
    LOG2 = "log2"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    ABS = "abs"
    TANH = "tanh"
    SIN = "sin"
    COS = "cos"
    FLOOR = "floor"
    CEIL = "ceil"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    EXP10 = "exp10"
    LOG10 = "log10"


class CmpOp(IdentityEnum):
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"


class AtomicOp(IdentityEnum):
    """What an atomic read-modify-write stores: the old value combined with the operand, or the operand (XCHG)."""

    ADD = "add"
    MAX = "max"
    MIN = "min"
    AND = "and"
    OR = "or"
    XOR = "xor"
    XCHG = "xchg"
    CAS = "cas"   # compare and swap: only an `AtomicRMW` value (it needs the operand it compares with)


class ReduceOp(IdentityEnum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"


class Stage(IdentityEnum):
    """Which nodes a kernel may hold: `TILE` (frontend output), `METAL` (emitter input), and `SIMT` in
    between, where a lowering in progress may mix both node sets (see `metile.ir.stages`)."""

    TILE = "tile"
    SIMT = "simt"
    METAL = "metal"


class Fence(IdentityEnum):
    """The memory a barrier orders, as MSL's `mem_flags`."""

    NONE = "none"
    DEVICE = "device"
    THREADGROUP = "threadgroup"
    DEVICE_AND_THREADGROUP = "device_and_threadgroup"


class BuiltinKind(IdentityEnum):
    """Metal's thread-position attributes; the value is the MSL attribute name."""

    THREAD_POSITION_IN_GRID = "thread_position_in_grid"
    THREADGROUP_POSITION_IN_GRID = "threadgroup_position_in_grid"
    THREAD_POSITION_IN_THREADGROUP = "thread_position_in_threadgroup"
    THREADS_PER_THREADGROUP = "threads_per_threadgroup"
    THREADGROUPS_PER_GRID = "threadgroups_per_grid"
    THREADS_PER_GRID = "threads_per_grid"
    THREAD_INDEX_IN_THREADGROUP = "thread_index_in_threadgroup"
    THREAD_INDEX_IN_SIMDGROUP = "thread_index_in_simdgroup"
    SIMDGROUP_INDEX_IN_THREADGROUP = "simdgroup_index_in_threadgroup"
    SIMDGROUPS_PER_THREADGROUP = "simdgroups_per_threadgroup"
    THREADS_PER_SIMDGROUP = "threads_per_simdgroup"

    has_axes: bool
    """True for the `uint3` attributes (position and size per axis); the others are one `uint`."""


_VECTOR_BUILTINS = frozenset({
    BuiltinKind.THREAD_POSITION_IN_GRID, BuiltinKind.THREADGROUP_POSITION_IN_GRID,
    BuiltinKind.THREAD_POSITION_IN_THREADGROUP, BuiltinKind.THREADS_PER_THREADGROUP,
    BuiltinKind.THREADGROUPS_PER_GRID, BuiltinKind.THREADS_PER_GRID,
})
for _kind in BuiltinKind:   # a plain attribute of each member: no property call per read
    _kind.has_axes = _kind in _VECTOR_BUILTINS
del _kind

__all__ = ["AtomicOp", "BinOp", "BuiltinKind", "CmpOp", "Fence", "IdentityEnum", "ReduceOp", "Stage", "UnOp"]
