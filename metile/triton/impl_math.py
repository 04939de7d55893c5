"""Triton's math in a `@triton.jit` kernel: `triton.language.math` (also `tl.exp`, `tl.sqrt`...) and the functions of
`triton.language.extra.libdevice` that metile computes with Metal's math, as Triton types them.

- `tl.math` functions take fp32 tensors (Triton's `_check_dtype`: `tl.exp` of an fp16 tensor is an error, convert
  first); a Python number becomes a traced value of its Triton type. `tl.abs` takes any number type, `tl.fma`
  floats, `tl.umulhi` 32-bit integers, `tl.fdiv` two floats of one type, `tl.div_rn` and `tl.sqrt_rn` fp32.
- A libdevice function takes the argument types of its table (`_LIBDEVICE`, fp32 for most): the arguments become
  traced values, and when their types are not an entry of the table they are promoted to a common type first (so
  `pow(x_f16, 2.0)` computes in fp32), as Triton's `extern_elementwise` does. `isnan`, `isinf`, `signbit` and
  `finitef` give int32 0 or 1, as libdevice does. The `fast_*` functions are the precise ones (metile compiles
  with IEEE math). Functions of the table without an entry here raise `NotSupportedYetError`.
"""

from __future__ import annotations

from metile.frontend import helpers, library
from metile.frontend import semantic as sem
from metile.frontend.errors import KernelTypeError
from metile.ir.errors import Loc
from metile.ir.ops import BinOp, CmpOp, UnOp
from metile.ir.types import DType, PtrType
from metile.ir.values import Binary, Bitcast, Compare, Fma, Unary, Value, Where
from metile.triton import semantic as ts
from metile.triton.errors import not_yet
from metile.triton.language import math as M

F32, I32, U32, BOOL = DType.F32, DType.I32, DType.U32, DType.BOOL
_UNARY = {M.exp: UnOp.EXP, M.exp2: UnOp.EXP2, M.log: UnOp.LOG, M.log2: UnOp.LOG2, M.cos: UnOp.COS, M.sin: UnOp.SIN,
          M.sqrt: UnOp.SQRT, M.sqrt_rn: UnOp.SQRT, M.rsqrt: UnOp.RSQRT, M.floor: UnOp.FLOOR, M.ceil: UnOp.CEIL}
_FP32_ONLY = frozenset({M.sqrt_rn, M.div_rn})


def _tensor(x, what: str, loc: Loc) -> Value:
    v = ts.to_tensor(x, loc)
    if isinstance(v.type, PtrType):
        raise KernelTypeError(f"{what} takes numbers, not a pointer", loc)
    return v


def _expect(v: Value, allowed: tuple[DType, ...], what: str, loc: Loc) -> None:
    """Triton's check of an argument's type against the types a function takes."""
    if v.type.dtype not in allowed:
        names = ", ".join(_NAMES[d] for d in allowed)
        raise KernelTypeError(f"{what}: expected dtype [{names}] but got {_NAMES.get(v.type.dtype, v.type.dtype)} "
                              "(convert it first, e.g. x.to(tl.float32))", loc)


_NAMES = {F32: "fp32", DType.F16: "fp16", DType.BF16: "bf16", I32: "int32", U32: "uint32", BOOL: "int1",
          DType.I8: "int8", DType.U8: "uint8", DType.I16: "int16", DType.U16: "uint16",
          DType.F8E4M3: "fp8e4nv", DType.F8E5M2: "fp8e5"}


def _unary_math(fn):
    op = _UNARY[fn]

    def impl(tr, loc, x):
        v = _tensor(x, f"tl.{fn.__name__}", loc)
        _expect(v, (F32,), f"tl.{fn.__name__}", loc)
        return Unary(op, v, loc=loc)
    impl.__name__ = fn.__name__
    return impl


def abs_(tr, loc, x):
    v = _tensor(x, "tl.abs", loc)
    dt = v.type.dtype
    if dt is BOOL:
        raise KernelTypeError("tl.abs takes numbers, not int1", loc)
    if dt.is_int and not dt.is_signed:
        return v
    if dt.storage_only:
        return sem.cast(Unary(UnOp.ABS, sem.cast(v, DType.F16, loc), loc=loc), dt, loc)
    return Unary(UnOp.ABS, v, loc=loc)


def erf(tr, loc, x):
    v = _tensor(x, "tl.erf", loc)
    _expect(v, (F32,), "tl.erf", loc)
    return library.erf(tr, loc, v)


def fdiv(tr, loc, x, y, ieee_rounding):
    a, b = _tensor(x, "tl.fdiv", loc), _tensor(y, "tl.fdiv", loc)
    if not (a.type.dtype.is_float and b.type.dtype.is_float):
        raise KernelTypeError("both operands of fdiv must have floating scalar type", loc)
    if a.type.dtype is not b.type.dtype:
        raise KernelTypeError(f"tl.fdiv takes two values of one type, not {a.type.dtype} and {b.type.dtype}", loc)
    shape = sem.broadcast_shape(a.type.shape, b.type.shape, "tl.fdiv", loc)
    return Binary(BinOp.DIV, sem.broadcast_to(a, shape, loc), sem.broadcast_to(b, shape, loc), loc=loc)


def div_rn(tr, loc, x, y):
    for v in (x, y):
        if isinstance(v, Value):
            _expect(v, (F32,), "tl.div_rn", loc)
    a, b, _ = ts.unify(_tensor(x, "tl.div_rn", loc), _tensor(y, "tl.div_rn", loc), loc, "tl.div_rn")
    return Binary(BinOp.DIV, a, b, loc=loc)


def fma(tr, loc, x, y, z):
    a, b, c = (_tensor(v, "tl.fma", loc) for v in (x, y, z))
    a, b, _ = ts.unify(a, b, loc, "tl.fma")
    c, a, _ = ts.unify(c, a, loc, "tl.fma")
    c, b, dt = ts.unify(c, b, loc, "tl.fma")
    if not dt.is_float or dt.storage_only:
        raise KernelTypeError(f"tl.fma takes fp32, fp16 or bf16 values, not {dt}", loc)
    return Fma(a, b, c, loc=loc)


def umulhi(tr, loc, x, y):
    for v in (x, y):
        if isinstance(v, Value):
            _expect(v, (I32, U32), "tl.umulhi", loc)
    a, b, _ = ts.unify(_tensor(x, "tl.umulhi", loc), _tensor(y, "tl.umulhi", loc), loc, "tl.umulhi")
    return Binary(BinOp.MULHI, a, b, loc=loc)


def sqrt_rn(tr, loc, x):
    return _unary_math(M.sqrt_rn)(tr, loc, x)


MATH = {fn: _unary_math(fn) for fn in _UNARY}
MATH.update({M.abs: abs_, M.erf: erf, M.fdiv: fdiv, M.div_rn: div_rn, M.fma: fma, M.umulhi: umulhi,
             M.sqrt_rn: sqrt_rn})


# ---- libdevice


def _un(op: UnOp):
    return lambda x, loc: Unary(op, x, loc=loc)


def _bin(op: BinOp):
    return lambda x, y, loc: Binary(op, x, y, loc=loc)


def _as_int(b: Value, loc) -> Value:
    return sem.cast(b, I32, loc)


def _trunc(x, loc):
    neg = Compare(CmpOp.LT, x, sem.coerce(0.0, F32, x.type.shape, loc), loc=loc)
    return Where(neg, Unary(UnOp.CEIL, x, loc=loc), Unary(UnOp.FLOOR, x, loc=loc), loc=loc)


def _rint(x, loc):
    """Round half to even: below 2**23 adding and subtracting 2**23 (with x's sign) rounds in the last place by
    IEEE's default rounding; at or above it every f32 is an integer already."""
    shape = x.type.shape
    big = sem.coerce(8388608.0, F32, shape, loc)
    magic = Where(Compare(CmpOp.LT, x, sem.coerce(0.0, F32, shape, loc), loc=loc), Unary(UnOp.NEG, big, loc=loc),
                  big, loc=loc)
    rounded = Binary(BinOp.SUB, Binary(BinOp.ADD, x, magic, loc=loc), magic, loc=loc)
    small = Compare(CmpOp.LT, Unary(UnOp.ABS, x, loc=loc), big, loc=loc)
    return Where(small, _copysign(rounded, x, loc), x, loc=loc)


def _round(x, loc):
    """Round half away from zero: the truncation, plus one toward x's sign when the dropped part is at least 1/2."""
    t = _trunc(x, loc)
    shape = x.type.shape
    frac = Unary(UnOp.ABS, Binary(BinOp.SUB, x, t, loc=loc), loc=loc)
    step = _copysign(sem.coerce(1.0, F32, shape, loc), x, loc)
    up = Compare(CmpOp.GE, frac, sem.coerce(0.5, F32, shape, loc), loc=loc)
    return Where(up, _copysign(Binary(BinOp.ADD, t, step, loc=loc), x, loc), t, loc=loc)


def _copysign(x, y, loc):
    shape = x.type.shape
    bits = Binary(BinOp.AND, Bitcast(x, U32, loc=loc), sem.coerce(0x7FFFFFFF, U32, shape, loc), loc=loc)
    sign = Binary(BinOp.AND, Bitcast(y, U32, loc=loc), sem.coerce(0x80000000, U32, shape, loc), loc=loc)
    return Bitcast(Binary(BinOp.OR, bits, sign, loc=loc), F32, loc=loc)


def _isnan(x, loc):
    return _as_int(Compare(CmpOp.NE, x, x, loc=loc), loc)


def _isinf(x, loc):
    inf = sem.coerce(float("inf"), F32, x.type.shape, loc)
    return _as_int(Compare(CmpOp.EQ, Unary(UnOp.ABS, x, loc=loc), inf, loc=loc), loc)


def _finite(x, loc):
    inf = sem.coerce(float("inf"), F32, x.type.shape, loc)
    return _as_int(Compare(CmpOp.LT, Unary(UnOp.ABS, x, loc=loc), inf, loc=loc), loc)


def _signbit(x, loc):
    zero = sem.coerce(0, I32, x.type.shape, loc)
    return _as_int(Compare(CmpOp.LT, Bitcast(x, I32, loc=loc), zero, loc=loc), loc)


def _saturate(x, loc):
    shape = x.type.shape
    low = Binary(BinOp.MAX, x, sem.coerce(0.0, F32, shape, loc), loc=loc)
    return Binary(BinOp.MIN, low, sem.coerce(1.0, F32, shape, loc), loc=loc)


def _fdim(x, y, loc):
    """`x - y` where x > y, else +0; NaN when either is (C's `fdim`)."""
    zero = sem.coerce(0.0, F32, x.type.shape, loc)
    nan = Binary(BinOp.OR, Compare(CmpOp.NE, x, x, loc=loc), Compare(CmpOp.NE, y, y, loc=loc), loc=loc)
    diff = Where(Compare(CmpOp.GT, x, y, loc=loc), Binary(BinOp.SUB, x, y, loc=loc), zero, loc=loc)
    return Where(nan, Binary(BinOp.ADD, x, y, loc=loc), diff, loc=loc)


def _brev(x, loc):
    return Bitcast(helpers.reverse_bits(_NoTracer, loc, x), I32, loc=loc)


class _NoTracer:
    """`reverse_bits` binds its steps through the tracer; here they stay expressions."""

    @staticmethod
    def bind(value, hint, loc):
        return value


_F, _I, _U = (F32,), (I32,), (U32,)
_LIBDEVICE = {   # name -> {argument types: (builder, result type or None for the arguments' own)}
    "abs": {_F: (_un(UnOp.ABS), None), _I: (_un(UnOp.ABS), None)},
    "floor": {_F: (_un(UnOp.FLOOR), None)}, "ceil": {_F: (_un(UnOp.CEIL), None)}, "trunc": {_F: (_trunc, None)},
    "rint": {_F: (_rint, None)}, "nearbyint": {_F: (_rint, None)}, "round": {_F: (_round, None)},
    "exp": {_F: (_un(UnOp.EXP), None)}, "fast_expf": {_F: (_un(UnOp.EXP), None)},
    "exp2": {_F: (_un(UnOp.EXP2), None)}, "log": {_F: (_un(UnOp.LOG), None)}, "fast_logf": {_F: (_un(UnOp.LOG), None)},
    "log2": {_F: (_un(UnOp.LOG2), None)}, "fast_log2f": {_F: (_un(UnOp.LOG2), None)},
    "sin": {_F: (_un(UnOp.SIN), None)}, "fast_sinf": {_F: (_un(UnOp.SIN), None)},
    "cos": {_F: (_un(UnOp.COS), None)}, "fast_cosf": {_F: (_un(UnOp.COS), None)},
    "sqrt": {_F: (_un(UnOp.SQRT), None)}, "sqrt_rn": {_F: (_un(UnOp.SQRT), None)},
    "rsqrt": {_F: (_un(UnOp.RSQRT), None)}, "rsqrt_rn": {_F: (_un(UnOp.RSQRT), None)},
    "tanh": {_F: (_un(UnOp.TANH), None)}, "saturatef": {_F: (_saturate, None)},
    "tan": {_F: (_un(UnOp.TAN), None)}, "fast_tanf": {_F: (_un(UnOp.TAN), None)},
    "asin": {_F: (_un(UnOp.ASIN), None)}, "acos": {_F: (_un(UnOp.ACOS), None)}, "atan": {_F: (_un(UnOp.ATAN), None)},
    "sinh": {_F: (_un(UnOp.SINH), None)}, "cosh": {_F: (_un(UnOp.COSH), None)},
    "asinh": {_F: (_un(UnOp.ASINH), None)}, "acosh": {_F: (_un(UnOp.ACOSH), None)},
    "atanh": {_F: (_un(UnOp.ATANH), None)},
    "exp10": {_F: (_un(UnOp.EXP10), None)}, "fast_exp10f": {_F: (_un(UnOp.EXP10), None)},
    "log10": {_F: (_un(UnOp.LOG10), None)}, "fast_log10f": {_F: (_un(UnOp.LOG10), None)},
    "isnan": {_F: (_isnan, I32)}, "isinf": {_F: (_isinf, I32)}, "finitef": {_F: (_finite, I32)},
    "signbit": {_F: (_signbit, I32)}, "brev": {_I: (_brev, None)},
    "float_as_int": {_F: (lambda x, loc: Bitcast(x, I32, loc=loc), I32)},
    "float_as_uint": {_F: (lambda x, loc: Bitcast(x, U32, loc=loc), U32)},
    "int_as_float": {_I: (lambda x, loc: Bitcast(x, F32, loc=loc), F32)},
    "uint_as_float": {_U: (lambda x, loc: Bitcast(x, F32, loc=loc), F32)},
    "float2int_rz": {_F: (lambda x, loc: sem.cast(x, I32, loc), I32)},
    "float2uint_rz": {_F: (lambda x, loc: sem.cast(x, U32, loc), U32)},
    "int2float_rn": {_I: (lambda x, loc: sem.cast(x, F32, loc), F32)},
    "uint2float_rn": {_U: (lambda x, loc: sem.cast(x, F32, loc), F32)},
    "rcp_rn": {_F: (lambda x, loc: Binary(BinOp.DIV, sem.coerce(1.0, F32, x.type.shape, loc), x, loc=loc), None)},
    "atan2": {(F32, F32): (_bin(BinOp.ATAN2), None)}, "fdim": {(F32, F32): (_fdim, None)},
    "pow": {(F32, F32): (_bin(BinOp.POW), None)}, "fast_powf": {(F32, F32): (_bin(BinOp.POW), None)},
    "fmod": {(F32, F32): (_bin(BinOp.REM), None)}, "copysign": {(F32, F32): (_copysign, None)},
    "fast_dividef": {(F32, F32): (_bin(BinOp.DIV), None)}, "div_rn": {(F32, F32): (_bin(BinOp.DIV), None)},
    "add_rn": {(F32, F32): (_bin(BinOp.ADD), None)}, "sub_rn": {(F32, F32): (_bin(BinOp.SUB), None)},
    "mul_rn": {(F32, F32): (_bin(BinOp.MUL), None)},
    "mulhi": {(I32, I32): (_bin(BinOp.MULHI), None), (U32, U32): (_bin(BinOp.MULHI), None)},
    "fma": {(F32, F32, F32): (lambda a, b, c, loc: Fma(a, b, c, loc=loc), None)},
    "fma_rn": {(F32, F32, F32): (lambda a, b, c, loc: Fma(a, b, c, loc=loc), None)},
}
_SPECIAL = {"erf": library.erf}   # whole implementations of metile's library, on fp32


def libdevice(name: str):
    """The implementation of `libdevice.<name>` in a kernel (refusing the functions metile has no counterpart of)."""
    table = _LIBDEVICE.get(name)

    def impl(tr, loc, *args):
        if name in _SPECIAL:
            v = _tensor(args[0], f"libdevice.{name}", loc)
            _expect(v, (F32,), f"libdevice.{name}", loc)
            return _SPECIAL[name](tr, loc, v)
        if table is None:
            raise not_yet(f"libdevice.{name}", loc, "metile has no counterpart of it in Metal's math yet")
        vs = [_tensor(a, f"libdevice.{name}", loc) for a in args]
        types = tuple(v.type.dtype for v in vs)
        if types not in table and len(vs) > 1:   # promote to a common type, as Triton's extern_elementwise does
            common = vs[0]
            for v in vs[1:]:
                _, common, _ = ts.unify(v, common, loc, f"libdevice.{name}", weak=False)
            vs = [ts.unify(v, common, loc, f"libdevice.{name}", weak=False)[0] for v in vs]
            types = tuple(v.type.dtype for v in vs)
        if types not in table:
            want = " or ".join("(" + ", ".join(_NAMES[d] for d in key) + ")" for key in table)
            got = ", ".join(_NAMES.get(d, str(d)) for d in types)
            raise KernelTypeError(f"libdevice.{name}: input arg type does not match: expected {want}, got ({got})",
                                  loc)
        shape = ()
        for v in vs:
            shape = sem.broadcast_shape(shape, v.type.shape, f"libdevice.{name}", loc)
        build, _ = table[types]
        return build(*[sem.broadcast_to(v, shape, loc) for v in vs], loc)
    impl.__name__ = f"libdevice_{name}"
    return impl


__all__ = ["MATH", "libdevice"]
