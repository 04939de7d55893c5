"""Triton's meaning of operators, as `triton.language` defines it (Triton 3.4's `semantic.py` and `core.py`), built
as metile's Tile IR. The dialect of `@triton.jit` kernels (`metile.triton.dialect`) traces with these rules; metile's
own (`metile.frontend.semantic`) are untouched.

- **Python numbers.** Two Python numbers (constexprs) combine in Python, as everywhere. A Python number that meets
  a traced value takes Triton's type of it (`to_tensor`: bool is int1, an int i32, u32 from 2**31, i64 from 2**32
  or below -2**31, u64 from 2**63, a float f32) and is *weak* in `+ - * / // % & | ^ << >>`: when its kind
  (bool < int < float) is no higher than the traced operand's, it takes the operand's type (`x_f16 * 2.0` is f16,
  `x_u8 + 1` is u8). In comparisons, in
  `tl.maximum`/`tl.minimum`/`tl.clamp` and in the math functions it is not: it is converted to its own type first
  (`x_f16 < 0.5` compares in f32).
- **Promotion** (`computation_type`): f32 beats everything; f16 with another float or an integer is f16, and bf16
  with anything but bf16 is f32; bf16 with bf16 stays bf16; two 8-bit floats give their type, or f16 if they
  differ; integers as C does (the wider; an unsigned type wins when at least as wide as the signed one). int1 is an
  unsigned integer of 1 bit. `/`, `//` and `%` on 16-bit floats compute in f32, and refuse integers of different
  signedness.
- **Division.** `/` is a float division (integers in f32). `//` exists on integers only and rounds toward zero;
  `%` gives C's remainder (the dividend's sign), on floats too (`fmod`). `-7 // 2` is -3 and `-7 % 2` is -1.
- int1 arithmetic wraps in one bit (`+` and `-` are xor, `*` is and); `-x` of an int1 is `x`. Arithmetic on 8-bit
  floats computes in f16 and rounds the result back to the 8-bit type.
"""

from __future__ import annotations

from metile.frontend import semantic as sem
from metile.frontend.errors import KernelTypeError
from metile.ir.errors import Loc
from metile.ir.ops import BinOp, CmpOp, UnOp
from metile.ir.tile import Full
from metile.ir.types import COMPUTE_AS, DType, PtrType, TileType
from metile.ir.values import Binary, Bitcast, Compare, Const, IntToPtr, Unary, Value, Where

BOOL, I32, U32, F32, F16, BF16 = DType.BOOL, DType.I32, DType.U32, DType.F32, DType.F16, DType.BF16
I64, U64 = DType.I64, DType.U64
_TRAPPING = frozenset({I32, I64})   # the signed types whose lowest value divided by -1 traps on CPUs
_F32_MIN_NORMAL, _F32_MAX = 2.0 ** -126, (2 - 2.0 ** -23) * 2.0 ** 127
_DIV_OR_MOD = frozenset({"truediv", "floordiv", "mod"})
_BITWISE = frozenset({"and", "or", "xor"})
_SHIFTS = frozenset({"lshift", "rshift"})
_SYMBOL = sem.SYMBOLS


def is_number(v) -> bool:
    return isinstance(v, (bool, int, float)) and not isinstance(v, Value)


def kind(d: DType) -> int:
    """Triton's order of kinds: bool 0, integers 1, floats 2."""
    return 0 if d is BOOL else 2 if d.is_float else 1


def py_dtype(v, loc: Loc | None) -> DType:
    """The type Triton gives the Python number `v` when it becomes a traced value (`to_tensor`)."""
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, int):
        if -(1 << 31) <= v < (1 << 31):
            return I32
        if (1 << 31) <= v < (1 << 32):
            return U32
        if -(1 << 63) <= v < (1 << 63):
            return I64
        if 0 <= v < (1 << 64):
            return U64
        raise KernelTypeError(f"the integer {v} does not fit 64 bits (Triton's nonrepresentable integer)", loc)
    a = abs(v)
    if a == float("inf") or a == 0.0 or v != v or _F32_MIN_NORMAL <= a <= _F32_MAX:
        return F32
    raise KernelTypeError(f"the constant {v!r} is a float64 in Triton (it is outside float32's normal range), and "
                          "Metal has no 64-bit floats", loc)


def to_tensor(v, loc: Loc | None) -> Value:
    """`v` as a traced value: a Python number becomes a constant of `py_dtype`."""
    if isinstance(v, Value):
        return v
    if is_number(v):
        return sem.const(v, py_dtype(v, loc), loc)
    raise KernelTypeError(f"expected a number or a traced value, not {type(v).__name__}", loc)


def integer_promote(a: DType, b: DType) -> DType:
    """C's usual arithmetic conversions of two integer types."""
    if a.is_signed == b.is_signed:
        return a if a.bits > b.bits else b
    if not a.is_signed:
        return a if a.bits >= b.bits else b
    return b if b.bits >= a.bits else a


def computation_type(a: DType, a_weak: bool, b: DType, b_weak: bool, div_or_mod: bool, loc: Loc | None) -> DType:
    """The type Triton computes `a op b` in (see the module docstring); `*_weak` marks a Python number."""
    if a_weak != b_weak:
        scalar, t = (a, b) if a_weak else (b, a)
        if kind(scalar) <= kind(t):
            return F32 if div_or_mod and t in (F16, BF16) else t
    if F32 in (a, b):
        return F32
    if F16 in (a, b):
        return F32 if div_or_mod else F16
    if a is BF16 and b is BF16:
        return F32 if div_or_mod else BF16
    if BF16 in (a, b):
        return F32
    if a.storage_only and b.storage_only:
        return a if a is b else F16
    if a.is_float or b.is_float:
        raise KernelTypeError(f"unexpected types {a} and {b} (convert the 8-bit float first)", loc)
    if div_or_mod and a.is_signed != b.is_signed:
        raise KernelTypeError(f"cannot use /, // or % with {a} and {b}: they have different signedness; cast them "
                              "to the same signedness", loc)
    return integer_promote(a, b)


def _weak_type(v, other: DType, loc: Loc | None) -> DType:
    """The type the Python number `v` takes part in promotion with, against a traced operand of type `other`:
    only its kind matters when that kind is no higher than the operand's."""
    k = 0 if isinstance(v, bool) else 1 if isinstance(v, int) else 2
    if k <= kind(other):
        return other if k == kind(other) else (BOOL if k == 0 else I32)
    return py_dtype(v, loc)


def unify(a, b, loc: Loc | None, what: str, div_or_mod: bool = False, weak: bool = True) -> tuple[Value, Value, DType]:
    """Both operands in their computation type and common shape (`weak`: Python numbers are weak)."""
    if not weak:
        a, b = (to_tensor(a, loc) if is_number(a) else a), (to_tensor(b, loc) if is_number(b) else b)
    ta, tb = _operand_type(a, what, loc), _operand_type(b, what, loc)
    a_weak, b_weak = not isinstance(a, Value), not isinstance(b, Value)
    da = ta.dtype if not a_weak else _weak_type(a, tb.dtype, loc)
    db = tb.dtype if not b_weak else _weak_type(b, ta.dtype, loc)
    dt = computation_type(da, a_weak, db, b_weak, div_or_mod, loc)
    shape = sem.broadcast_shape(ta.shape, tb.shape, what, loc)
    return sem.coerce(a, dt, shape, loc), sem.coerce(b, dt, shape, loc), dt


def _operand_type(x, what: str, loc: Loc | None) -> TileType:
    if isinstance(x, Value):
        if isinstance(x.type, PtrType):
            raise KernelTypeError(f"{what}: a pointer cannot be an operand here (only pointer + integer offsets)", loc)
        return x.type
    if is_number(x):
        return sem.type_of(x, loc)
    raise KernelTypeError(f"{what}: expected a number or a traced value, not {type(x).__name__}", loc)


def _in(dt: DType, x: Value, loc) -> Value:
    return sem.cast(x, dt, loc)


def _storage(fn, dt: DType, x: Value, y: Value, loc) -> Value:
    """`fn(x, y)` of 8-bit float operands: computed in f16, rounded back to `dt`."""
    wide = COMPUTE_AS[dt]
    return sem.cast(fn(_in(wide, x, loc), _in(wide, y, loc)), dt, loc)


def binary(name: str, a, b, loc: Loc | None):
    """`a <op> b` for the operator `name` (a key of `metile.frontend.semantic.BINOPS`), as Triton computes it."""
    a_ir, b_ir = isinstance(a, Value), isinstance(b, Value)
    if not a_ir and not b_ir:
        return sem.binary(name, a, b, loc)   # compile-time values: Python
    if (a_ir and isinstance(a.type, PtrType)) or (b_ir and isinstance(b.type, PtrType)):
        return sem.pointer_arith(name, a, b, loc)   # pointer +- integer offsets
    if name in ("max", "min"):
        return extreme(name, a, b, loc)
    if name == "pow":
        raise KernelTypeError("Triton tensors have no `**`: use libdevice.pow(x, y) (or x * x for a square)", loc)
    x, y, dt = unify(a, b, loc, f"`{_SYMBOL[name]}`", div_or_mod=name in _DIV_OR_MOD)
    if name in ("add", "sub", "mul"):
        if dt is BOOL:   # arithmetic in one bit
            return Binary(BinOp.AND if name == "mul" else BinOp.XOR, x, y, loc=loc)
        op = sem.BINOPS[name]
        if dt.storage_only:
            return _storage(lambda p, q: Binary(op, p, q, loc=loc), dt, x, y, loc)
        return Binary(op, x, y, loc=loc)
    if name == "truediv":
        if not dt.is_float:
            return Binary(BinOp.DIV, _in(F32, x, loc), _in(F32, y, loc), loc=loc)
        if dt.storage_only:
            return _storage(lambda p, q: Binary(BinOp.DIV, p, q, loc=loc), dt, x, y, loc)
        return Binary(BinOp.DIV, x, y, loc=loc)
    if name in ("floordiv", "mod"):
        if dt is BOOL or (name == "floordiv" and dt.is_float):
            raise KernelTypeError(f"`{_SYMBOL[name]}` of {dt} values is not defined in Triton"
                                  f"{' (// takes integers)' if dt.is_float else ''}", loc)
        if dt.is_float:
            if dt.storage_only:
                return _storage(lambda p, q: Binary(BinOp.REM, p, q, loc=loc), dt, x, y, loc)
            return Binary(BinOp.REM, x, y, loc=loc)
        return c_division(BinOp.TRUNCDIV if name == "floordiv" else BinOp.REM, x, y, dt, loc)
    if dt.is_float or (name in _SHIFTS and dt is BOOL):
        raise KernelTypeError(f"`{_SYMBOL[name]}` needs integer operands{' or bools' if name in _BITWISE else ''}, "
                              f"not {dt}", loc)
    op = sem.BINOPS[name]
    if name in _SHIFTS:
        c = y.value if isinstance(y, Full) else y
        if isinstance(c, Const) and not 0 <= c.value < dt.bits:
            raise KernelTypeError(f"the shift count {c.value} is out of range for {dt} (0 to {dt.bits - 1})", loc)
    return Binary(op, x, y, loc=loc)


def c_division(op: BinOp, x: Value, y: Value, dt: DType, loc: Loc | None) -> Value:
    """`x / y` rounded toward zero (`TRUNCDIV`) or C's remainder (`REM`) of integers. A divisor known to be 0 is
    refused; a signed 32- or 64-bit divisor that may be -1 divides as 1 and `x / -1` is `-x`, so that the lowest
    value divided by -1 wraps to itself (its remainder is 0) instead of trapping as the CPU's division does."""
    c = y.value if isinstance(y, Full) else y
    if isinstance(c, Const):
        if c.value == 0:
            raise KernelTypeError(f"integer division by zero: the divisor of `{'//' if op is BinOp.TRUNCDIV else '%'}`"
                                  " is the constant 0", loc)
        if dt not in _TRAPPING or c.value != -1:
            return Binary(op, x, y, loc=loc)
    elif dt not in _TRAPPING:
        return Binary(op, x, y, loc=loc)
    minus_one = Compare(CmpOp.EQ, y, sem.coerce(-1, dt, y.type.shape, loc), loc=loc)
    safe = Where(minus_one, sem.coerce(1, dt, y.type.shape, loc), y, loc=loc)
    out = Binary(op, x, safe, loc=loc)
    if op is BinOp.REM:
        return out
    return Where(minus_one, Binary(BinOp.SUB, sem.coerce(0, dt, x.type.shape, loc), x, loc=loc), out, loc=loc)


_CMP_OPS = {"lt": CmpOp.LT, "le": CmpOp.LE, "gt": CmpOp.GT, "ge": CmpOp.GE, "eq": CmpOp.EQ, "ne": CmpOp.NE}


def compare(name: str, a, b, loc: Loc | None):
    """`a <cmp> b`: a Python operand becomes a traced value of its own type first (it is not weak here)."""
    if not isinstance(a, Value) and not isinstance(b, Value):
        return sem.compare(name, a, b, loc)
    x, y, dt = unify(a, b, loc, "comparison", weak=False)
    if dt.storage_only:
        x, y = _in(COMPUTE_AS[dt], x, loc), _in(COMPUTE_AS[dt], y, loc)
    return Compare(_CMP_OPS[name], x, y, loc=loc)


def unary(name: str, x, loc: Loc | None):
    """`-x` and `~x`."""
    if not isinstance(x, Value):
        return sem.unary(name, x, loc)
    if isinstance(x.type, PtrType):
        raise KernelTypeError(f"wrong type argument to unary {'minus' if name == 'neg' else 'invert'} ({x.type})", loc)
    dt = x.type.dtype
    if name == "invert":
        if dt.is_float:
            raise KernelTypeError(f"`~` needs integer or bool operands, not {dt}", loc)
        return Unary(UnOp.NOT, x, loc=loc)
    if dt is BOOL:   # 0 - x in one bit
        return x
    if dt.storage_only:
        return sem.cast(Unary(UnOp.NEG, _in(COMPUTE_AS[dt], x, loc), loc=loc), dt, loc)
    return Unary(UnOp.NEG, x, loc=loc)


def _no_bf16(x: Value, loc) -> Value:
    return _in(F32, x, loc) if x.type.dtype is BF16 else x


def extreme(name: str, a, b, loc: Loc | None, propagate_nan: bool = False) -> Value:
    """`tl.maximum`/`tl.minimum` (`name` "max"/"min"): both operands traced values of their own types, bf16 in f32;
    with `propagate_nan`, a NaN operand gives NaN (else the other operand)."""
    a, b = _no_bf16(to_tensor(a, loc), loc), _no_bf16(to_tensor(b, loc), loc)
    x, y, dt = unify(a, b, loc, f"tl.{name}imum")
    if dt.storage_only:
        x, y = _in(COMPUTE_AS[dt], x, loc), _in(COMPUTE_AS[dt], y, loc)
    out = Binary(BinOp.MAX if name == "max" else BinOp.MIN, x, y, loc=loc)
    if propagate_nan and dt.is_float:
        out = Where(Compare(CmpOp.NE, y, y, loc=loc), y, out, loc=loc)
        out = Where(Compare(CmpOp.NE, x, x, loc=loc), x, out, loc=loc)
    return sem.cast(out, dt, loc) if dt.storage_only else out


def where(cond, x, y, loc: Loc | None) -> Value:
    """`tl.where(cond, x, y)`: `cond` as int1 (non-zero is true), `x` and `y` unified with weak Python numbers."""
    c = to_tensor(cond, loc)
    if isinstance(c.type, PtrType):
        raise KernelTypeError("tl.where: the condition cannot be a pointer", loc)
    if c.type.dtype is not BOOL:
        c = Compare(CmpOp.NE, c, sem.coerce(0, c.type.dtype, c.type.shape, loc), loc=loc)
    if not isinstance(x, Value) and not isinstance(y, Value):
        x, y = to_tensor(x, loc), to_tensor(y, loc)
    xs, ys, _ = unify(x, y, loc, "tl.where")
    return sem.where(c, xs, ys, loc)


def cast(x, dt: DType, bitcast: bool, loc: Loc | None) -> Value:
    """`tl.cast(x, dt)` (C's conversions), or with `bitcast` the same bits as `dt`."""
    v = to_tensor(x, loc)
    if isinstance(v.type, PtrType):
        raise KernelTypeError(f"casting pointers ({v.type}) is not supported by metile yet: cast the values after "
                              "loading them", loc)
    if not bitcast:
        return sem.cast(v, dt, loc)
    src = v.type.dtype
    if src is dt:
        return v
    if BOOL in (src, dt) or src.bits != dt.bits:
        raise KernelTypeError(f"cannot bitcast data-type of size {src.bits} to data-type of size {dt.bits}", loc)
    return Bitcast(v, dt, loc=loc)


def int_to_pointer(x, element: DType, loc: Loc | None) -> Value:
    """`x.to(tl.pointer_type(element))` of 64-bit integers: the addresses they hold as pointers to `element` (a
    pointer table's entries). Narrower integers hold no address and pointers are not re-typed."""
    v = to_tensor(x, loc)
    if isinstance(v.type, PtrType):
        raise KernelTypeError(f"casting a pointer ({v.type}) to another pointer type is not supported by metile: "
                              "only 64-bit integers (addresses) become pointers", loc)
    if v.type.dtype not in (I64, U64):
        raise KernelTypeError(f"only 64-bit integers hold addresses: cannot make a pointer of {v.type.dtype} "
                              "(load the address as tl.int64)", loc)
    return IntToPtr(v, element, loc=loc)


def assigned(value, loc: Loc | None):
    """What an assignment binds in a Triton kernel: a Python number becomes a traced value of its Triton type (as
    Triton's code generator converts it), in tuples too; other values stay as they are."""
    if is_number(value):
        return to_tensor(value, loc)
    if value.__class__ is tuple:
        return tuple(assigned(v, loc) for v in value)
    return value


__all__ = ["assigned", "binary", "c_division", "cast", "compare", "computation_type", "extreme", "integer_promote",
           "py_dtype", "to_tensor", "unary", "unify", "where"]
