"""Typing of the language's operators: Python numbers as weak constants, dtype promotion,
numpy broadcasting, casts, pointer arithmetic, and the IR each operator builds.

Operands are IR `Value`s (tiles, scalars, pointers) or Python numbers. Two Python numbers are
combined by Python itself. Otherwise the operands are brought to one dtype (`promote` for two
traced values, `weak_promote` for a traced value and a Python number) and one shape (numpy's
broadcasting rules) with explicit `Cast`, `Broadcast` and `Full` nodes, so IR operands always match.
Per operator:
- `/` and `**` are float operations: integer operands are converted to f32 first (Python's `7 / 2`).
- `//` and `%` keep Python's floor semantics on every dtype (`FLOORDIV`, `MOD`): `-7 // 2 == -4`,
  `-7 % 2 == 1`, on integers and floats alike (numpy's results where Python raises: see
  `metile.rewrite.metal_ops.floor_div`). A constant integer divisor of 0, and a constant shift count
  outside `0 .. bits - 1`, are refused.
- `& | ^` take integers or bools; `<< >>` integers; arithmetic on bools computes in i32.
- `ptr + n`, `n + ptr`, `ptr - n` with integer `n` are pointer arithmetic (`AddPtr`, in elements).
"""

from __future__ import annotations

import math
import operator

import numpy as np

from metile.frontend.errors import FrontendError, KernelTypeError, ShapeMismatchError
from metile.ir.errors import Loc
from metile.ir.ops import BinOp, CmpOp, UnOp
from metile.ir.tile import Broadcast, Full
from metile.ir.types import (
    COMPUTE_AS,
    F32_OVERFLOW,
    FLOAT_MAX,
    FLOAT_OVERFLOW,
    DType,
    PtrType,
    TileType,
    fits,
    promote,
    promote_computed,
)
from metile.ir.values import AddPtr, Binary, Cast, Compare, Const, Unary, Value, Where

BINOPS = {"add": BinOp.ADD, "sub": BinOp.SUB, "mul": BinOp.MUL, "truediv": BinOp.DIV,
          "floordiv": BinOp.FLOORDIV, "mod": BinOp.MOD, "pow": BinOp.POW, "and": BinOp.AND, "or": BinOp.OR,
          "xor": BinOp.XOR, "lshift": BinOp.SHL, "rshift": BinOp.SHR, "max": BinOp.MAX, "min": BinOp.MIN}
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
           "and": "&", "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>", "max": "maximum", "min": "minimum"}
_PY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
       "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "and": operator.and_,
       "or": operator.or_, "xor": operator.xor, "lshift": operator.lshift, "rshift": operator.rshift,
       "max": max, "min": min}
CMPOPS = {"lt": CmpOp.LT, "le": CmpOp.LE, "gt": CmpOp.GT, "ge": CmpOp.GE, "eq": CmpOp.EQ, "ne": CmpOp.NE}
_PY_CMP = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
           "ne": operator.ne}


def is_ir(x: object) -> bool:
    return isinstance(x, Value)


def is_number(x: object) -> bool:
    return isinstance(x, (bool, int, float)) and not is_ir(x)


# Reading a member off `DType` and the `is_float`/`is_int` properties cost a Python call each; the frontend tests
# dtypes against these module constants instead (`dt in FLOATS` is an identity test, most common dtype first).
BOOL, I32, I64, U64, F32 = DType.BOOL, DType.I32, DType.I64, DType.U64, DType.F32
FLOATS = tuple(d for d in DType if d.is_float)
STORAGE = tuple(d for d in DType if d.storage_only)
INTS = (I32, *(d for d in DType if d.is_int and d is not I32))
_BOOL_T, _I32_T, _F32_T = TileType(BOOL), TileType(I32), TileType(F32)  # the types of Python numbers
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_F32_EXACT = 1 << 24   # the ints below it in magnitude convert to f32 exactly


def py_dtype(v: object) -> DType:
    """The dtype a Python number takes on its own: bool, f32, or for an int i32, else i64, else u64 (from 2**63), as
    Triton types an int argument (one beyond u64 is then refused where it becomes a constant)."""
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, int):
        return I32 if _I32_MIN <= v <= _I32_MAX else I64 if v < (1 << 63) else U64
    return F32


def const(v, dtype: DType, loc: Loc | None) -> Const:
    """The constant `v` as `dtype`, or an error when it does not fit."""
    cls = v.__class__
    if dtype is I32 and cls is int and _I32_MIN <= v <= _I32_MAX:  # the common cases, checked as below
        return Const(v, dtype, loc=loc)
    if dtype is F32 and cls is float and -F32_OVERFLOW < v < F32_OVERFLOW:
        return Const(v, dtype, loc=loc)
    if dtype is F32 and cls is int and -_F32_EXACT <= v <= _F32_EXACT:   # an int f32 holds exactly (`zeros`)
        return Const(float(v), dtype, loc=loc)
    if isinstance(v, np.generic):
        v = v.item()
    if dtype in FLOATS:
        v = float(v)
        if math.isfinite(v) and _magnitude(v, dtype) >= FLOAT_OVERFLOW[dtype]:
            raise KernelTypeError(
                f"the constant {v!r} is beyond the range of {dtype} (largest finite value {FLOAT_MAX[dtype]:g}): "
                f"it would become {'-' if v < 0 else ''}inf; write float('{'-' if v < 0 else ''}inf') if that is "
                f"meant, or a constant within range", loc)
    elif dtype in INTS and isinstance(v, bool):
        v = int(v)
    elif dtype in INTS and isinstance(v, float):
        raise KernelTypeError(f"the float constant {v!r} cannot be used as {dtype}", loc)
    if not fits(v, dtype):
        raise KernelTypeError(f"the constant {v!r} does not fit {dtype}", loc)
    return Const(v, dtype, loc=loc)


def _magnitude(v: float, dtype: DType) -> float:
    """|v| as rounding to `dtype` sees it: a bf16 constant is written as an f32 literal and rounded again."""
    if dtype is DType.BF16 and abs(v) < F32_OVERFLOW:
        return abs(float(np.float32(v)))
    return abs(v)


def to_ir(v, loc: Loc | None) -> Value:
    """A traced value for `v` (a Python number becomes a constant of its own dtype)."""
    if isinstance(v, Value):
        return v
    if isinstance(v, (bool, int, float)):
        return const(v, py_dtype(v), loc)
    raise KernelTypeError(f"expected a number or a traced value, not {type(v).__name__}", loc)


def type_of(v, loc: Loc | None) -> TileType | PtrType:
    if isinstance(v, Value):
        return v.type
    if isinstance(v, bool):
        return _BOOL_T
    if isinstance(v, int):
        return _I32_T if _I32_MIN <= v <= _I32_MAX else TileType(py_dtype(v))
    if isinstance(v, float):
        return _F32_T
    raise KernelTypeError(f"expected a number or a traced value, not {type(v).__name__}", loc)


def cast(x: Value, dtype: DType, loc: Loc | None) -> Value:
    if x.type.dtype is dtype:
        return x
    if isinstance(x, Const) and fits(x.value, dtype) and not (dtype in INTS and isinstance(x.value, float)):
        return const(x.value, dtype, loc)
    return Cast(x, dtype, loc=loc)


def broadcast_to(x: Value, shape: tuple[int, ...], loc: Loc | None) -> Value:
    """`x` broadcast to `shape`, numpy's way (a `ShapeMismatchError` when its shape does not broadcast there)."""
    have = x.type.shape
    if have == shape:
        return x
    if isinstance(x, Const):
        return Full(shape, x, loc=loc)
    if not have:   # a scalar broadcasts to every shape
        return Broadcast(x, shape, loc=loc)
    fits = len(have) <= len(shape)
    for h, w in zip(reversed(have), reversed(shape)):
        if h != 1 and h != w:
            fits = False
    if not fits:
        raise ShapeMismatchError(f"a tile of shape {list(have)} cannot be broadcast to shape {list(shape)}", loc)
    return Broadcast(x, shape, loc=loc)


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], what: str, loc: Loc | None) -> tuple[int, ...]:
    """numpy's broadcast of two shapes, or a `ShapeMismatchError` naming `what`."""
    if a == b or not b:
        return a
    if not a:
        return b
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise ShapeMismatchError(f"{what}: shapes {list(a)} and {list(b)} do not broadcast together", loc)
        out.append(x if y == 1 else y)
    return check_tile_size(tuple(reversed(out)), loc)


MAX_TILE_ELEMENTS = 1 << 16
"""The most elements one tile may have: a program keeps its tiles in its threads' registers (at most 1024
threads), and a larger tile would neither fit nor compile in reasonable time."""


def check_tile_size(shape: tuple[int, ...], loc: Loc | None) -> tuple[int, ...]:
    """`shape`, or a `ShapeMismatchError` when a tile of it would be larger than `MAX_TILE_ELEMENTS`."""
    if math.prod(shape) > MAX_TILE_ELEMENTS:
        raise ShapeMismatchError(
            f"a tile of shape {list(shape)} has {math.prod(shape)} elements, more than metile's limit of "
            f"{MAX_TILE_ELEMENTS}: a program holds its tiles in registers; split the work over more programs, or "
            "loop over blocks with metile.tile_range", loc)
    return shape


def _weak(tile: DType, scalar) -> DType:
    if isinstance(scalar, bool):
        return tile
    if tile is BOOL:
        return py_dtype(scalar)
    if isinstance(scalar, float) and tile not in FLOATS:
        return F32
    return tile


def common_dtype(a, b) -> DType:
    """The dtype two operands (traced or Python) are computed in."""
    a_ir, b_ir = isinstance(a, Value), isinstance(b, Value)
    if a_ir and b_ir:
        da, db = a.type.dtype, b.type.dtype
        return da if da is db else promote(da, db)
    if a_ir:
        return _weak(a.type.dtype, b)
    if b_ir:
        return _weak(b.type.dtype, a)
    return promote(py_dtype(a), py_dtype(b))


def coerce(v, dtype: DType, shape: tuple[int, ...], loc: Loc | None) -> Value:
    """`v` (traced or Python) as a value of `dtype` and `shape` (which it must broadcast to)."""
    if isinstance(v, Value):
        t = v.type
        if t.dtype is dtype and t.shape == shape:
            return v
        return broadcast_to(cast(v, dtype, loc), shape, loc)
    if dtype in STORAGE:  # an 8-bit float has no constants: the number converts from f32 when the kernel runs
        return Cast(coerce(v, F32, shape, loc), dtype, loc=loc)
    x = const(v, dtype, loc)  # a scalar: `broadcast_to` without computing its type
    return x if shape == () else Full(shape, x, loc=loc)


def converted(v, dtype: DType, shape: tuple[int, ...], loc: Loc | None) -> Value:
    """`coerce` for a value written to memory of `dtype` (a store, a load's `other=`): a Python number converts
    as a traced one would, a float truncating toward zero into an integer type and any nonzero number being
    true as a bool, and must fit."""
    if isinstance(v, (int, float)):
        if dtype is BOOL:
            v = bool(v)
        elif dtype in INTS and isinstance(v, float):
            if not math.isfinite(v):
                raise KernelTypeError(f"the float constant {v!r} cannot be converted to {dtype}", loc)
            v = math.trunc(v)
    return coerce(v, dtype, shape, loc)


def unify(a, b, what: str, loc: Loc | None, dtype: DType | None = None) -> tuple[Value, Value]:
    """Both operands as values of one dtype (`dtype`, else the common one) and one shape."""
    ta, tb = _operand_type(a, what, loc), _operand_type(b, what, loc)
    return _unify(a, ta, b, tb, what, loc, dtype or common_dtype(a, b))[:2]


def _operand_type(x, what: str, loc: Loc | None) -> TileType:
    """The type of an operand of an element-wise operation: a traced value that is not a pointer, or a number."""
    if isinstance(x, Value):
        t = x.type
        if isinstance(t, PtrType):
            raise KernelTypeError(f"{what}: a pointer cannot be an operand here (only ptr + int offsets)", loc)
        return t
    if isinstance(x, (bool, int, float)):
        return type_of(x, loc)
    raise KernelTypeError(f"{what}: expected a number or a traced value, not {type(x).__name__}", loc)


def _unify(a, ta, b, tb, what: str, loc: Loc | None, dt: DType) -> tuple[Value, Value, tuple[int, ...]]:
    """`unify` of two checked operands whose types are `ta` and `tb`, in `dt`, and their common shape."""
    shape = ta.shape
    if shape != tb.shape:
        shape = broadcast_shape(shape, tb.shape, what, loc)
    return coerce(a, dt, shape, loc), coerce(b, dt, shape, loc), shape


def _python(fn, a, b, what: str, loc: Loc | None):
    try:
        return fn(a, b)
    except (ArithmeticError, TypeError, ValueError) as e:
        raise FrontendError(f"{what} on compile-time values failed: {e}", loc) from None


_PLAIN, _FLOAT_ONLY, _BITWISE, _SHIFT = range(4)
_KIND = {"add": _PLAIN, "sub": _PLAIN, "mul": _PLAIN, "truediv": _FLOAT_ONLY, "floordiv": _PLAIN, "mod": _PLAIN,
         "pow": _FLOAT_ONLY, "and": _BITWISE, "or": _BITWISE, "xor": _BITWISE, "lshift": _SHIFT, "rshift": _SHIFT,
         "max": _PLAIN, "min": _PLAIN}


def binary(name: str, a, b, loc: Loc | None):
    """`a <op> b` for the operator `name` (a key of `BINOPS`)."""
    a_ir, b_ir = isinstance(a, Value), isinstance(b, Value)
    if not a_ir and not b_ir:
        return _python(_PY[name], a, b, f"`{SYMBOLS[name]}`", loc)
    ta = a.type if a_ir else type_of(a, loc)
    if isinstance(ta, PtrType):
        return pointer_arith(name, a, b, loc, ta)
    tb = b.type if b_ir else type_of(b, loc)
    if isinstance(tb, PtrType):
        return pointer_arith(name, a, b, loc, ta, tb)
    da, db = ta.dtype, tb.dtype
    if a_ir and b_ir:
        dt = da if da is db else promote_computed(da, db)   # 8-bit floats as f16 first: with bf16, f32
    else:
        dt = _weak(da, b) if a_ir else _weak(db, a)
    if dt in STORAGE:  # 8-bit floats compute in f16
        dt = COMPUTE_AS[dt]
    kind = _KIND[name]
    if kind == _PLAIN:
        if dt is BOOL:
            dt = I32
    elif kind == _FLOAT_ONLY:
        if dt not in FLOATS:
            dt = F32
    elif kind == _BITWISE:
        if dt in FLOATS:
            raise KernelTypeError(f"`{SYMBOLS[name]}` needs integer or bool operands, not {dt}", loc)
    elif dt not in INTS:
        raise KernelTypeError(f"`{SYMBOLS[name]}` needs integer operands, not {dt}", loc)
    sa, sb = ta.shape, tb.shape
    shape = sa if sa == sb else broadcast_shape(sa, sb, f"`{SYMBOLS[name]}`", loc)
    x = a if a_ir and da is dt and sa == shape else coerce(a, dt, shape, loc)
    y = b if b_ir and db is dt and sb == shape else coerce(b, dt, shape, loc)
    op = BINOPS[name]
    if op in _RIGHT_CHECKED and dt in INTS:
        _check_right_operand(op, y, dt, loc)
    return Binary(op, x, y, loc=loc)


_RIGHT_CHECKED = frozenset({BinOp.FLOORDIV, BinOp.MOD, BinOp.SHL, BinOp.SHR})


def _check_right_operand(op: BinOp, y: Value, dtype: DType, loc: Loc | None) -> None:
    """Refuse an integer divisor of 0 and a shift count outside `0 <= count < bits` that are known at compile
    time (Python raises for the first and for negative counts; Metal leaves the others undefined)."""
    c = y.value if isinstance(y, Full) else y
    if not isinstance(c, Const):
        return
    if op in (BinOp.FLOORDIV, BinOp.MOD):
        if c.value == 0:
            raise KernelTypeError(f"integer division by zero: the divisor of `{'//' if op is BinOp.FLOORDIV else '%'}` "
                                  "is the constant 0", loc)
    elif not 0 <= c.value < dtype.bits:
        raise KernelTypeError(f"the shift count {c.value} is out of range for {dtype} (0 to {dtype.bits - 1})", loc)


def compare(name: str, a, b, loc: Loc | None):
    """`a <op> b` for the comparison `name`: both operands in their common computed dtype (a Python number promoting
    weakly) and their broadcast shape, each left as it is where it already has them (as `binary` does)."""
    a_ir, b_ir = isinstance(a, Value), isinstance(b, Value)
    if not a_ir and not b_ir:
        return _python(_PY_CMP[name], a, b, "comparison", loc)
    ta, tb = _operand_type(a, "comparison", loc), _operand_type(b, "comparison", loc)
    da, db = ta.dtype, tb.dtype
    if a_ir and b_ir:
        dt = da if da is db else promote_computed(da, db)
    else:
        dt = _weak(da, b) if a_ir else _weak(db, a)
    dt = COMPUTE_AS.get(dt, dt)
    sa, sb = ta.shape, tb.shape
    shape = sa if sa == sb else broadcast_shape(sa, sb, "comparison", loc)
    x = a if a_ir and da is dt and sa == shape else coerce(a, dt, shape, loc)
    y = b if b_ir and db is dt and sb == shape else coerce(b, dt, shape, loc)
    return Compare(CMPOPS[name], x, y, loc=loc)


# The signed type an unsigned offset is negated in: one that holds all its values (i64 for u32), but for u64 its own
# bits read as i64, which holds every offset into memory (below 2**63).
_NEGATED_AS = {DType.U8: I32, DType.U16: I32, DType.U32: I64, DType.U64: I64}


def pointer_arith(name: str, a, b, loc: Loc | None, ta=None, tb=None) -> Value:
    """`a <op> b` where one operand is a pointer (`ta` and `tb` are the operands' types when known)."""
    ta = type_of(a, loc) if ta is None else ta
    a_ptr = isinstance(ta, PtrType)
    ptr, off = (a, b) if a_ptr else (b, a)
    if name not in ("add", "sub") or (name == "sub" and not a_ptr):
        raise KernelTypeError(f"`{SYMBOLS[name]}` is not defined on pointers: only pointer + integer offset "
                              "and pointer - integer offset", loc)
    ot = (tb if tb is not None else type_of(b, loc)) if a_ptr else ta
    if isinstance(ot, PtrType):
        raise KernelTypeError(f"`{SYMBOLS[name]}` is not defined on pointers: only pointer + integer offset "
                              "and pointer - integer offset", loc)
    odt = ot.dtype
    if odt not in INTS:
        raise KernelTypeError(f"pointer offsets must be integers, not {odt}", loc)
    if name == "sub":
        if not isinstance(off, Value):
            off = -off
        else:   # an unsigned offset is negated as a signed type: in its own type `-3` would wrap to `2**bits - 3`
            off = Unary(UnOp.NEG, off if odt.is_signed else cast(off, _NEGATED_AS[odt], loc), loc=loc)
    if not isinstance(off, Value):
        off = to_ir(off, loc)
    pshape, oshape = (ta if a_ptr else tb if tb is not None else ptr.type).shape, ot.shape
    if pshape == oshape:
        return AddPtr(ptr, off, loc=loc)
    if not pshape:   # one pointer and a tile of offsets (a pointer is never a `Const`: `broadcast_to` inline)
        return AddPtr(Broadcast(ptr, oshape, loc=loc), off, loc=loc)
    shape = broadcast_shape(pshape, oshape, "pointer arithmetic", loc)
    return AddPtr(ptr if pshape == shape else broadcast_to(ptr, shape, loc),
                  off if oshape == shape else broadcast_to(off, shape, loc), loc=loc)


_MATH = {"exp": (UnOp.EXP, math.exp), "log": (UnOp.LOG, math.log), "sqrt": (UnOp.SQRT, math.sqrt),
         "tanh": (UnOp.TANH, math.tanh), "abs": (UnOp.ABS, abs), "exp2": (UnOp.EXP2, lambda v: 2.0 ** v),
         "log2": (UnOp.LOG2, math.log2), "sin": (UnOp.SIN, math.sin), "cos": (UnOp.COS, math.cos),
         "rsqrt": (UnOp.RSQRT, lambda v: 1.0 / math.sqrt(v)), "floor": (UnOp.FLOOR, lambda v: float(math.floor(v))),
         "ceil": (UnOp.CEIL, lambda v: float(math.ceil(v)))}


def unary(name: str, x, loc: Loc | None):
    """`-x`, `~x` and the math functions of `_MATH` (`exp log sqrt tanh abs exp2 log2 sin cos rsqrt floor
    ceil`); on compile-time numbers Python computes them."""
    if not isinstance(x, Value):
        if not isinstance(x, (bool, int, float)):
            raise KernelTypeError(f"{name}: expected a number or a traced value, not {type(x).__name__}", loc)
        fn = {"neg": operator.neg, "invert": operator.invert}.get(name) or _MATH[name][1]
        return _python(lambda v, _: fn(v), x, None, name, loc)
    if isinstance(x.type, PtrType):
        raise KernelTypeError(f"{name} is not defined on pointers", loc)
    dt = x.type.dtype
    if dt in STORAGE:  # 8-bit floats compute in f16
        x, dt = cast(x, COMPUTE_AS[dt], loc), COMPUTE_AS[dt]
    if name == "neg":
        return Unary(UnOp.NEG, cast(x, I32, loc) if dt is BOOL else x, loc=loc)
    if name == "invert":
        if dt in FLOATS:
            raise KernelTypeError(f"`~` needs integer or bool operands, not {dt}", loc)
        return Unary(UnOp.NOT, x, loc=loc)
    op = _MATH[name][0]
    if op is UnOp.ABS:
        return Unary(op, cast(x, I32, loc) if dt is BOOL else x, loc=loc)
    return Unary(op, cast(x, F32, loc) if dt not in FLOATS else x, loc=loc)


def where(cond, x, y, loc: Loc | None):
    """`metile.where`: a Python bool picks a side at compile time; a traced bool selects per element."""
    if not isinstance(cond, Value):
        return x if cond else y
    tc = cond.type
    if isinstance(tc, PtrType) or tc.dtype in FLOATS:
        raise KernelTypeError(f"where: the condition must be bool (or an integer, true where it is not 0), not {tc} "
                              "(compare first, e.g. x > 0)", loc)
    if tc.dtype is not BOOL:  # an integer is true where it is not zero, as in C and Triton
        cond = compare("ne", cond, 0, loc)
        tc = cond.type
    tx, ty = _operand_type(x, "where", loc), _operand_type(y, "where", loc)
    xs, ys, xy_shape = _unify(x, tx, y, ty, "where", loc, common_dtype(x, y))
    cshape = tc.shape
    if cshape == xy_shape:
        return Where(cond, xs, ys, loc=loc)
    shape = broadcast_shape(cshape, xy_shape, "where", loc)
    if xy_shape != shape:
        xs, ys = broadcast_to(xs, shape, loc), broadcast_to(ys, shape, loc)
    return Where(cond if cshape == shape else broadcast_to(cond, shape, loc), xs, ys, loc=loc)


def join_type(t: TileType | PtrType, v, what: str, loc: Loc | None) -> TileType | PtrType:
    """The type a variable must have to hold both a `t` and `v` (loop-carried values, branch results)."""
    vt = type_of(v, loc)
    if isinstance(t, PtrType) or isinstance(vt, PtrType):
        if not (isinstance(t, PtrType) and isinstance(vt, PtrType) and t.dtype is vt.dtype and t.space is vt.space):
            raise KernelTypeError(f"{what}: it holds {t} in one place and {vt} in another", loc)
        return t.with_shape(broadcast_shape(t.shape, vt.shape, what, loc))
    dt = promote(t.dtype, vt.dtype) if isinstance(v, Value) else _weak(t.dtype, v)
    return TileType(dt, broadcast_shape(t.shape, vt.shape, what, loc))
