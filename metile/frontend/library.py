"""The language's library beyond meTile's core: casts, more math, arg-reductions, scans and counter-based random
numbers, one implementation per `metile.language` function (`LIBRARY`, keyed like `BUILTINS`).

- `cast(x, dtype, bitcast=False)` (also `x.to(dtype)`): a conversion by C's rules (floats to integers truncate
  toward zero), or with `bitcast=True` the same bits read as another type of the same width.
- `exp2 log2 sin cos rsqrt floor ceil` are Metal functions; `sigmoid`, `erf`, `clamp` are built from others
  (`erf` from a series near 0 and a rational approximation of `erfc` elsewhere, both within 2e-7 in f32, computed
  in f32; `sigmoid` in f32 too, from `exp(-|x|)`, which never overflows); `fma(a, b, c)` rounds once; `pow(x, y)`
  is `x ** y`.
- `argmax`/`argmin` give the first index of the extreme along an axis (of the flattened tile for `axis=None`);
  `cumsum`/`cumprod` the inclusive scan along an axis.
- `rand`, `randn`, `randint` and their `4x` forms are Triton's: Philox 4x32 with `n_rounds` rounds on the counter
  `(offset, 0, 0, 0)` and the key `(seed mod 2**32, seed // 2**32 mod 2**32)`, the seed taken as a 64-bit integer
  (a signed one sign-extends); `randint` is the first word (u32), `rand` maps it to `[0, 1)` in f32 and `randn`
  turns two words into a normal sample (Box-Muller).
"""

from __future__ import annotations

import functools
import math

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.builtins import keep_dims, parse_dtype, static_int, static_shape, summed
from metile.frontend.errors import KernelArgumentError, KernelTypeError, ShapeMismatchError
from metile.ir.ops import BinOp, ReduceOp, UnOp
from metile.ir.tile import ArgReduce, NumPrograms, Reshape, Scan
from metile.ir.types import COMPUTE_AS, DType, PtrType, promote_computed
from metile.ir.values import Binary, Bitcast, Const, Fma, Unary, Value

U32, I32, F32 = DType.U32, DType.I32, DType.F32

# ---- casts


def cast(tr, loc, x, dtype, bitcast):
    dt = parse_dtype(dtype, loc)
    if not isinstance(bitcast, bool):
        raise KernelTypeError(f"cast: bitcast must be True or False, not {bitcast!r}", loc)
    t = sem.type_of(x, loc)
    if isinstance(t, PtrType):
        raise KernelTypeError(f"cast: {t} is a pointer; cast the values it points to after loading them", loc)
    if not isinstance(x, Value):
        x = sem.to_ir(x, loc)
    src = t.dtype
    if not bitcast:
        return sem.cast(x, dt, loc)
    if DType.BOOL in (src, dt) or src.bits != dt.bits:
        raise KernelTypeError(f"cast(..., bitcast=True) reinterprets bits, so both types need one width: {src} has "
                              f"{src.bits} bits and {dt} has {dt.bits}", loc)
    return x if src is dt else Bitcast(x, dt, loc=loc)


def num_programs(tr, loc, axis):
    a = static_int(axis, "the axis of num_programs", loc)
    if a not in (0, 1, 2):
        raise KernelArgumentError(f"num_programs axis must be 0, 1 or 2, not {a}", loc)
    return NumPrograms(a, loc=loc)


# ---- math


def _math(name):
    def impl(tr, loc, x):
        return sem.unary(name, x, loc)
    impl.__name__ = name
    return impl


def sigmoid(tr, loc, x):
    """`1 / (1 + exp(-x))`, in the float type of `x` (f32 for integers, f16 for 8-bit floats; 0 and 1 at the ends,
    without NaN). It is computed in f32 and rounded once, as `where(x >= 0, 1, e) / (1 + e)` with `e = exp(-|x|)`:
    `exp(-x)` overflows where the result is only small (below -88.7 in f32, -11.1 in f16), and its tail there,
    down to the smallest subnormal, would be 0. An unsigned integer is converted before anything is negated."""
    if not isinstance(x, Value):
        return sem.binary("truediv", 1.0, sem.binary("add", 1.0, sem.unary("exp", sem.unary("neg", x, loc), loc), loc),
                          loc)
    t = sem.type_of(x, loc)
    if isinstance(t, PtrType):
        raise KernelTypeError("sigmoid is not defined on pointers", loc)
    out_dt = COMPUTE_AS.get(t.dtype, t.dtype) if t.dtype.is_float else F32
    v = sem.cast(x, F32, loc)
    e = sem.unary("exp", sem.unary("neg", sem.unary("abs", v, loc), loc), loc)
    top = sem.where(sem.compare("ge", v, 0.0, loc), 1.0, e, loc)
    return sem.cast(sem.binary("truediv", top, sem.binary("add", 1.0, e, loc), loc), out_dt, loc)


# erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1)), used for |x| < 1/2, where 7 terms are within 3e-8.
_ERF_SERIES = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(7))
# erfc(z) ~ t exp(-z^2 + P(t)), t = 1 / (1 + z/2), z >= 0, within a relative 1.2e-7 (the Chebyshev fit of
# Numerical Recipes, section 6.2); used for |x| >= 1/2, where erf is at least 0.52.
_ERFC_FIT = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
             -0.82215223, 0.17087277)


def _horner(coeffs, t, loc):
    acc = coeffs[-1]
    for c in reversed(coeffs[:-1]):
        acc = sem.binary("add", c, sem.binary("mul", t, acc, loc), loc)
    return acc


def erf(tr, loc, x):
    """The error function, computed in f32 (and rounded back to a 16-bit float type)."""
    t = sem.type_of(x, loc)
    if not isinstance(x, Value):
        return math.erf(x)
    if isinstance(t, PtrType):
        raise KernelTypeError("erf is not defined on pointers", loc)
    out_dt = COMPUTE_AS.get(t.dtype, t.dtype) if t.dtype.is_float else F32   # 8-bit floats compute in f16
    v = sem.cast(x, F32, loc)
    x2 = sem.binary("mul", v, v, loc)
    near = sem.binary("mul", v, _horner(_ERF_SERIES, x2, loc), loc)
    z = sem.unary("abs", v, loc)
    tt = sem.binary("truediv", 1.0, sem.binary("add", 1.0, sem.binary("mul", 0.5, z, loc), loc), loc)
    expo = sem.binary("sub", _horner(_ERFC_FIT, tt, loc), sem.binary("mul", z, z, loc), loc)
    one_minus = sem.binary("sub", 1.0, sem.binary("mul", tt, sem.unary("exp", expo, loc), loc), loc)
    far = sem.where(sem.compare("lt", v, 0.0, loc), sem.unary("neg", one_minus, loc), one_minus, loc)
    out = sem.where(sem.compare("lt", z, 0.5, loc), near, far, loc)
    return sem.cast(out, out_dt, loc)


def pow_(tr, loc, x, y):
    return sem.binary("pow", x, y, loc)


def fma(tr, loc, a, b, c):
    """`a * b + c` rounded once, in the common float type of the three (integers compute in f32); on three
    compile-time numbers Python computes `a * b + c`."""
    types = [sem.type_of(v, loc) for v in (a, b, c)]
    if not any(isinstance(v, Value) for v in (a, b, c)):
        return a * b + c
    if any(isinstance(t, PtrType) for t in types):
        raise KernelTypeError("fma is not defined on pointers", loc)
    dt = _float_common(a, b, c)
    shape = sem.broadcast_shape(sem.broadcast_shape(types[0].shape, types[1].shape, "fma", loc), types[2].shape,
                                "fma", loc)
    return Fma(*(sem.coerce(v, dt, shape, loc) for v in (a, b, c)), loc=loc)


def _float_common(a, b, c) -> DType:
    """The float type `fma` computes in: the common type of its traced operands (Python numbers are weak; 8-bit
    floats compute in f16)."""
    traced = [v for v in (a, b, c) if isinstance(v, Value)]
    dt = traced[0].type.dtype
    for v in traced[1:]:
        dt = promote_computed(dt, v.type.dtype)
    return COMPUTE_AS.get(dt, dt) if dt.is_float else F32


def clamp(tr, loc, x, lo, hi):
    """`minimum(maximum(x, lo), hi)`."""
    return sem.binary("min", sem.binary("max", x, lo, loc), hi, loc)


# ---- arg-reductions and scans


def _tile(x, what: str, loc) -> Value:
    if not isinstance(x, Value) or isinstance(x.type, PtrType) or not x.type.shape:
        kind = x.type if isinstance(x, Value) else type(x).__name__
        raise ShapeMismatchError(f"metile.{what}() takes a tile, not {kind}", loc)
    dt = x.type.dtype
    if dt is DType.BOOL:
        return sem.cast(x, I32, loc)
    return sem.cast(x, COMPUTE_AS[dt], loc) if dt.storage_only else x


def _axis(axis, shape, loc) -> int:
    ax = static_int(axis, "the axis", loc)
    if not -len(shape) <= ax < len(shape):
        raise ShapeMismatchError(f"axis {ax} is out of range for a {len(shape)}-D tile", loc)
    return ax % len(shape)


def _arg(op: ReduceOp):
    def impl(tr, loc, x, axis, keep):
        x = _tile(x, f"arg{op.value}", loc)
        if axis is None:
            flat = x if len(x.type.shape) == 1 else Reshape(x, (x.type.size,), loc=loc)
            out = ArgReduce(op, flat, 0, loc=loc)
        else:
            out = ArgReduce(op, x, _axis(axis, x.type.shape, loc), loc=loc)
        return keep_dims(out, x, axis, keep, loc)
    return impl


def _scan(op: ReduceOp, name: str):
    def impl(tr, loc, x, axis, reverse, dtype):
        x = _tile(summed(x, dtype, loc), name, loc)
        if not isinstance(reverse, bool):
            raise KernelTypeError(f"metile.{name}(): reverse must be True or False, not {reverse!r}", loc)
        return Scan(op, x, _axis(axis, x.type.shape, loc), reverse, loc=loc)
    return impl


# ---- tiles


def full(tr, loc, shape, value, dtype):
    """A tile of `shape` holding `value` (a number or a traced scalar) as `dtype` (by default the value's own); the
    shape `()` gives a scalar."""
    dims = static_shape(shape, "the shape of full", loc, scalar=True)
    t = sem.type_of(value, loc)
    if isinstance(t, PtrType) or t.shape:
        raise KernelTypeError(f"full: the value must be a number or a scalar, not {t}", loc)
    dt = parse_dtype(dtype, loc) if dtype is not None else t.dtype
    return sem.coerce(value, dt, dims, loc) if isinstance(value, Value) else sem.converted(value, dt, dims, loc)


def _hint(name: str):
    def impl(tr, loc, x, values):
        """Triton's hints about the values of an integer tile: checked for their form, and `x` itself (metile's
        own analysis finds what they would tell)."""
        vals = values if isinstance(values, (tuple, list)) else (values,)
        for v in vals:
            static_int(v, f"the values of {name}", loc)
        if not isinstance(x, Value) or isinstance(x.type, PtrType) or not x.type.dtype.is_int:
            raise KernelTypeError(f"metile.{name}() takes an integer tile, not {sem.type_of(x, loc)}", loc)
        return x
    impl.__name__ = name
    return impl


# ---- random numbers

PHILOX_KEY_A, PHILOX_KEY_B = 0x9E3779B9, 0xBB67AE85
PHILOX_ROUND_A, PHILOX_ROUND_B = 0xD2511F53, 0xCD9E8D57
UNIFORM_SCALE = 4.6566127342e-10  # the largest scale with (2**31 - 1) * scale < 1 in f32


def _u32(v: int, loc) -> Value:
    return Const(v & 0xFFFFFFFF, U32, loc=loc)


def _key(seed, loc) -> tuple:
    """The two key words of `seed`, a Python int (any value in [-2**63, 2**64)) or a traced integer."""
    if not isinstance(seed, Value):
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise KernelTypeError(f"the seed must be an integer, not {type(seed).__name__}", loc)
        if not -(1 << 63) <= seed < (1 << 64):
            raise KernelTypeError(f"the seed {seed} does not fit 64 bits", loc)
        return _u32(seed, loc), _u32(seed >> 32, loc)
    t = seed.type
    if isinstance(t, PtrType) or not t.dtype.is_int:
        raise KernelTypeError(f"the seed must be an integer, not {t}", loc)
    lo = sem.cast(seed, U32, loc)
    if t.dtype.bits == 64:
        return lo, _high_word(seed, loc)
    if not t.dtype.is_signed:
        return lo, _u32(0, loc)
    return lo, sem.where(sem.compare("lt", seed, 0, loc), _u32(-1, loc), _u32(0, loc), loc)


def _high_word(x: Value, loc) -> Value:
    """The high 32 bits of the 64-bit integer `x`'s two's complement pattern, as a u32."""
    return sem.cast(sem.binary("rshift", x, 32, loc), U32, loc)


def _counter(offsets, loc) -> tuple:
    """The first two counter words of `offsets`: the low and high words of a 64-bit integer's two's complement
    pattern (a Python int below 2**64 that i32 cannot hold, or a traced i64 or u64), else the 32-bit pattern and 0."""
    if not isinstance(offsets, Value):
        if isinstance(offsets, bool) or not isinstance(offsets, int):
            raise KernelTypeError(f"the offsets must be integers, not {type(offsets).__name__}", loc)
        if not -(1 << 63) <= offsets < (1 << 64):
            raise KernelTypeError(f"the offset {offsets} does not fit 64 bits", loc)
        high = 0 if -(1 << 31) <= offsets < (1 << 31) else offsets >> 32  # Triton types a small int as i32
        return _u32(offsets, loc), _u32(high, loc)
    t = offsets.type
    if isinstance(t, PtrType) or not t.dtype.is_int:
        raise KernelTypeError(f"the offsets must be integers, not {t}", loc)
    return sem.cast(offsets, U32, loc), _high_word(offsets, loc) if t.dtype.bits == 64 else _u32(0, loc)


def _mulhi(a: int, b: Value, loc) -> Value:
    x, y = sem.unify(_u32(a, loc), b, "mulhi", loc, U32)
    return Binary(BinOp.MULHI, x, y, loc=loc)


def philox(seed, offsets, n_rounds: int, loc) -> tuple:
    """The four u32 words of Philox 4x32 with `n_rounds` rounds (see the module docstring), each of the shape the
    seed and the offsets broadcast to."""
    k0, k1 = _key(seed, loc)
    c0, c1 = _counter(offsets, loc)
    c2 = c3 = _u32(0, loc)
    op = functools.partial(sem.binary, loc=loc)
    for _ in range(n_rounds):
        a0, a2 = c0, c2
        c0 = op("xor", op("xor", _mulhi(PHILOX_ROUND_B, a2, loc), c1), k0)
        c2 = op("xor", op("xor", _mulhi(PHILOX_ROUND_A, a0, loc), c3), k1)
        c1 = op("mul", a2, PHILOX_ROUND_B)
        c3 = op("mul", a0, PHILOX_ROUND_A)
        k0 = op("add", k0, PHILOX_KEY_A)
        k1 = op("add", k1, PHILOX_KEY_B)
    shape = ()
    for w in (c0, c1, c2, c3):
        shape = sem.broadcast_shape(shape, w.type.shape, "rand", loc)
    return tuple(sem.coerce(w, U32, shape, loc) for w in (c0, c1, c2, c3))


def uniform(x: Value, loc) -> Value:
    """A u32 word as an f32 in [0, 1), as Triton maps it."""
    i = Bitcast(x, I32, loc=loc)
    folded = sem.where(sem.compare("lt", i, 0, loc), Unary(UnOp.NOT, i, loc=loc), i, loc)
    return sem.binary("mul", sem.cast(folded, F32, loc), Const(UNIFORM_SCALE, F32, loc=loc), loc)


def _normal_pair(u1, u2, loc) -> tuple:
    u1 = sem.binary("max", 1.0e-7, u1, loc)
    theta = sem.binary("mul", 6.283185307179586, u2, loc)
    r = sem.unary("sqrt", sem.binary("mul", -2.0, sem.unary("log", u1, loc), loc), loc)
    return sem.binary("mul", r, sem.unary("cos", theta, loc), loc), sem.binary("mul", r, sem.unary("sin", theta, loc),
                                                                               loc)


def _rounds(n_rounds, loc) -> int:
    n = static_int(n_rounds, "n_rounds", loc)
    if n < 0:
        raise KernelArgumentError(f"n_rounds must be at least 0, not {n}", loc)
    return n


def randint4x(tr, loc, seed, offsets, n_rounds):
    return philox(seed, offsets, _rounds(n_rounds, loc), loc)


def randint(tr, loc, seed, offsets, n_rounds):
    return randint4x(tr, loc, seed, offsets, n_rounds)[0]


def rand4x(tr, loc, seed, offsets, n_rounds):
    return tuple(uniform(w, loc) for w in randint4x(tr, loc, seed, offsets, n_rounds))


def rand(tr, loc, seed, offsets, n_rounds):
    return uniform(randint(tr, loc, seed, offsets, n_rounds), loc)


def randn4x(tr, loc, seed, offsets, n_rounds):
    u = rand4x(tr, loc, seed, offsets, n_rounds)
    return (*_normal_pair(u[0], u[1], loc), *_normal_pair(u[2], u[3], loc))


def randn(tr, loc, seed, offsets, n_rounds):
    u = rand4x(tr, loc, seed, offsets, n_rounds)
    return _normal_pair(u[0], u[1], loc)[0]


LIBRARY = {
    L.cast: cast, L.num_programs: num_programs, L.exp2: _math("exp2"), L.log2: _math("log2"), L.sin: _math("sin"),
    L.cos: _math("cos"), L.rsqrt: _math("rsqrt"), L.floor: _math("floor"), L.ceil: _math("ceil"),
    L.sigmoid: sigmoid, L.erf: erf, L.pow: pow_, L.fma: fma, L.clamp: clamp,
    L.argmax: _arg(ReduceOp.MAX), L.argmin: _arg(ReduceOp.MIN),
    L.cumsum: _scan(ReduceOp.SUM, "cumsum"), L.cumprod: _scan(ReduceOp.PROD, "cumprod"),
    L.rand: rand, L.randn: randn, L.randint: randint, L.randint4x: randint4x, L.rand4x: rand4x, L.randn4x: randn4x,
    L.full: full, L.multiple_of: _hint("multiple_of"), L.max_contiguous: _hint("max_contiguous"),
    L.max_constancy: _hint("max_constancy"),
}

__all__ = ["LIBRARY", "philox", "uniform"]
