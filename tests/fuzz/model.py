"""The numpy model of metile's element-wise operations, written from docs/language.md (not from metile's code).

A value is an `MVal`: its element type, its elements (a numpy array of that type), where it is active (5.3) and,
per element, a bound `err` on how far a correct device result may lie from the model's:
- `err == 0`: the documented result is exact, so the device must give the same bits (NaN matches any NaN);
  IEEE arithmetic (3.8) makes + - * / exact whenever the rounded result equals the exact one, and integers,
  casts, `where`, `minimum`, comparisons and `floor` are always exact;
- `err == LOOSE`: the value is exact but the sign of a zero is not specified (`maximum(-0.0, 0.0)`, a sum);
- `0 < err < inf`: rounding is allowed (inexact float arithmetic, math functions, reductions in tree order);
- `err == inf`: nothing is promised (NaN given to `maximum`, a float cast outside an integer range, a comparison
  whose operands are too close to call once earlier rounding is counted).
Elements masked off a load are inactive and hold 0; operations compute on them like on any element (an
inactive `x` gives `x + 1.0 == 1.0`) and pass inactivity on (rule 2), which reductions and loops read.
"""

from __future__ import annotations

import attrs
import numpy as np

from tests.fuzz.dtypes import (
    TYPES,
    as_f64,
    computed,
    int_range,
    int_to_float,
    ints,
    is_float,
    is_int,
    promote,
    round_to,
    ulp,
    wrap,
)

LOOSE = 1e-300
INF = np.inf


@attrs.frozen(eq=False)
class MVal:
    t: str
    v: np.ndarray
    act: np.ndarray
    err: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.v.shape

    def f(self) -> np.ndarray:
        return as_f64(self.v)

    def i(self) -> np.ndarray:
        return ints(self.v, self.t) if self.t in TYPES and TYPES[self.t].kind in "iub" else self.v.astype(np.int64)


def mval(t: str, v, act=None, err=None) -> MVal:
    v = np.asarray(v).astype(TYPES[t].np)
    act = np.ones(v.shape, bool) if act is None else np.broadcast_to(act, v.shape).copy()
    err = np.zeros(v.shape) if err is None else np.broadcast_to(np.asarray(err, np.float64), v.shape).copy()
    return MVal(t, v, act, err)


def eff(err: np.ndarray) -> np.ndarray:
    """The error that decides discrete outcomes (a zero's sign decides none of ours)."""
    return np.where(err <= LOOSE, 0.0, err)


def finish(t: str, z64, err, act) -> MVal:
    """A float result: non-finite values that rounding may have made (overflow) promise nothing."""
    err = np.where(np.isfinite(z64) | (err == 0), err, INF)
    return mval(t, z64, act, err)


def bshape(*vals) -> tuple[int, ...]:
    return np.broadcast_shapes(*(v.shape for v in vals))


def bcast(x: MVal, shape) -> MVal:
    if x.shape == tuple(shape):
        return x
    return MVal(x.t, np.broadcast_to(x.v, shape).copy(), np.broadcast_to(x.act, shape).copy(),
                np.broadcast_to(x.err, shape).copy())


def literal(v, t: str, shape=()) -> MVal:
    """A Python number converted to `t` (it fits: the generator checks), active everywhere."""
    if is_float(t):
        return mval(t, np.full(shape, round_to(float(v), t)))
    return mval(t, np.full(shape, int(v), np.int64 if TYPES[t].bits < 64 else object))


# ---- conversions (3.6)

def cast(x: MVal, t: str) -> MVal:
    if x.t == t:
        return x
    err = x.err
    if TYPES[x.t].kind == "b":
        return mval(t, x.v.astype(np.int64), x.act, np.where(err > 0, INF, 0))
    if t == "bool":
        if is_float(x.t):
            a = x.f()
            with np.errstate(invalid="ignore"):
                unsure = (eff(err) > 0) & ~(np.abs(a) > err)      # NaN counts as unsure too
        else:
            a, unsure = x.i(), err > 0
        return mval(t, a != 0, x.act, np.where(unsure, INF, 0))
    if is_float(x.t) and is_float(t):
        a = x.f()
        r = round_to(a, t)
        e = np.where((r == a) | np.isnan(a), err, err + ulp(r, t))
        return finish(t, r, e, x.act)
    if is_float(t):                                      # integer -> float: round to nearest, once
        r = int_to_float(x.i(), t) if TYPES[x.t].bits == 64 else round_to(x.i().astype(np.float64), t)
        return finish(t, r, np.where(err > 0, INF, 0), x.act)
    if is_float(x.t):                                    # float -> integer: truncate; outside: undefined
        a = x.f()
        lo, hi = int_range(t)
        with np.errstate(all="ignore"):
            tr = np.trunc(a)
            e = eff(err)
            unsure = ~np.isfinite(a) | (tr < lo) | (tr >= float(hi) + 1) | (np.trunc(a - e) != np.trunc(a + e))
            safe = np.where(unsure, 0, tr)
            safe = np.vectorize(int, otypes=[object])(safe) if safe.size else safe.astype(object)
        return mval(t, safe, x.act, np.where(unsure, INF, 0))
    return mval(t, wrap(x.i(), t), x.act, np.where(err > 0, INF, 0))


def bitcast(x: MVal, t: str) -> MVal:
    """The same bits as another type; a NaN's bits (its payload) are not promised."""
    v = x.v.view(TYPES[t].np)
    unsure = (x.err > 0) | (np.isnan(x.f()) if is_float(x.t) else False)
    return MVal(t, v.copy(), x.act.copy(), np.where(unsure, INF, 0.0))


# ---- arithmetic (3.3, 3.4)

def two_sum_exact(a, b, s):
    with np.errstate(all="ignore"):
        bb = s - a
        return ((a - (s - bb)) + (b - bb)) == 0


def float_binary(op: str, a: MVal, b: MVal, t: str) -> MVal:
    A, B, ea, eb = a.f(), b.f(), a.err, b.err
    act = a.act & b.act
    with np.errstate(all="ignore"):
        if op in "+-":
            Bs = B if op == "+" else -B
            z = A + Bs
            r = round_to(z, t)
            exact = two_sum_exact(A, Bs, z) & (r == z)
            prop = ea + eb
        elif op == "*":
            z = A * B
            r = round_to(z, t)
            exact = r == z
            prop = np.abs(B) * ea + np.abs(A) * eb + ea * eb
        elif op == "/":
            z = A / B
            r = round_to(z, t)
            exact = (r * B == A) | ~np.isfinite(r) & (B == 0)
            den = np.abs(B) - eff(eb)
            prop = np.where(den > 0, (ea + np.abs(r) * eb) / np.where(den > 0, den, 1), INF)
            prop = np.where((ea == 0) & (eb == 0), 0, prop)
        else:
            raise ValueError(op)
        special = ~np.isfinite(A) | ~np.isfinite(B)
        rnd = np.where(exact | special, 0, ulp(r, t))
        err = np.where((ea == 0) & (eb == 0), rnd, prop + rnd + np.where(prop > 0, ulp(r, t), 0))
        err = np.where(np.isnan(err), INF, err)
        err = np.where((ea > 0) | (eb > 0), np.maximum(err, LOOSE), err)   # 0 * (a zero of either sign)
    return finish(t, r, err, act)


def _py_floordiv_mod(A: np.ndarray, B: np.ndarray, want_mod: bool) -> np.ndarray:
    """Python's float `//` or `%` per element; numpy's result where Python raises (a zero divisor)."""
    out = np.empty(A.shape, np.float64)
    for idx in np.ndindex(A.shape):
        x, y = float(A[idx]), float(B[idx])
        if y == 0.0:
            with np.errstate(all="ignore"):
                out[idx] = np.nan if want_mod else np.float64(x) / np.float64(y)
        else:
            out[idx] = (x % y) if want_mod else (x // y)
    return out


def float_divmod(op: str, a: MVal, b: MVal, t: str, relax: frozenset = frozenset()) -> MVal:
    """Python's floor division and modulo of the exact values (16-bit floats: in f32, rounded once).
    With "divmod_zero_sign" in `relax`, the sign of a zero result is not checked."""
    A, B = a.f(), b.f()
    z = _py_floordiv_mod(A, B, op == "%")
    r = round_to(z, t)
    with np.errstate(all="ignore"):
        # the floor of the exact quotient may not be representable (with "floordiv_big_quotient" relaxed: nor
        # checked where the quotient passes 2**23)
        huge = np.abs(A / B) >= 2.0 ** (23 if "floordiv_big_quotient" in relax and op == "//" else 24)
        unsure = (eff(a.err) > 0) | (eff(b.err) > 0) | (huge & (np.isfinite(A) & np.isfinite(B)))
        err = np.where(unsure, INF, np.where(r == z, np.maximum(a.err, b.err), ulp(r, t)))
        if "divmod_zero_sign" in relax:
            err = np.where(r == 0, np.maximum(err, LOOSE), err)
    return finish(t, r, err, a.act & b.act)


def int_binary(op: str, a: MVal, b: MVal, t: str) -> MVal:
    A, B = a.i(), b.i()
    wide = TYPES[t].bits == 64                           # Python ints: exact, wrapped below
    if op == "+":
        z = A + B
    elif op == "-":
        z = A - B
    elif op == "*":
        z = A * B if wide else (A.astype(np.uint64) * B.astype(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.int64)
    elif op in ("//", "%"):
        assert (B != 0).all(), "the generator gives integer divisions nonzero divisors"
        z = A // B if op == "//" else A % B
    elif op == "&":
        z = A & B
    elif op == "|":
        z = A | B
    elif op == "^":
        z = A ^ B
    elif op == "<<":
        z = A << B if wide else (A.astype(np.uint64) << B.astype(np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.int64)
    elif op == ">>":
        z = A >> B
    else:
        raise ValueError(op)
    err = np.where((a.err > 0) | (b.err > 0), INF, 0)
    return mval(t, wrap(z, t), a.act & b.act, err)


def arith_type(op: str, ta: str, tb: str) -> str:
    """The result type of a binary operator on traced types (3.3, 3.4)."""
    t = promote(ta, tb)
    if op in ("<", "<=", ">", ">=", "==", "!="):
        return "bool"
    if op in ("&", "|", "^"):
        return t
    if op in ("/", "**") and not is_float(t):
        return "f32"
    return "i32" if t == "bool" else t


def binary(op: str, a: MVal, b: MVal, t: str, relax: frozenset = frozenset()) -> MVal:
    """`a op b` with both already converted to the operation type `t` (comparisons: to the common type)."""
    shape = bshape(a, b)
    a, b = bcast(a, shape), bcast(b, shape)
    if op in ("<", "<=", ">", ">=", "==", "!="):
        return compare(op, a, b)
    if t == "bool":
        z = {"&": np.logical_and, "|": np.logical_or, "^": np.logical_xor}[op](a.v, b.v)
        return mval("bool", z, a.act & b.act, np.where((a.err > 0) | (b.err > 0), INF, 0))
    if is_int(t):
        return int_binary(op, a, b, t)
    if op in ("//", "%"):
        return float_divmod(op, a, b, t, relax)
    return float_binary(op, a, b, t)


def compare(op: str, a: MVal, b: MVal) -> MVal:
    fn = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
          "!=": np.not_equal}[op]
    if is_float(a.t):
        A, B = a.f(), b.f()
        e = eff(a.err) + eff(b.err)
        with np.errstate(all="ignore"):
            unsure = (e > 0) & ~(np.abs(A - B) > e)
    else:
        A, B = a.i(), b.i()
        unsure = (a.err > 0) | (b.err > 0)
    return mval("bool", np.asarray(fn(A, B)).astype(bool), a.act & b.act, np.where(unsure, INF, 0))


def negate(a: MVal) -> MVal:
    if a.t == "bool":
        a = cast(a, "i32")
    a = cast(a, computed(a.t))
    if is_float(a.t):
        return MVal(a.t, -a.v, a.act.copy(), a.err.copy())
    return mval(a.t, wrap(-a.i(), a.t), a.act, a.err)


def invert(a: MVal) -> MVal:
    if a.t == "bool":
        return MVal("bool", ~a.v, a.act.copy(), a.err.copy())
    return mval(a.t, wrap(~a.i(), a.t), a.act, a.err)


def where(c: MVal, a: MVal, b: MVal) -> MVal:
    """`a` where `c`, else `b`; both already in their common type. Activity of the side selected (5.3 rule 2)."""
    shape = bshape(c, a, b)
    c, a, b = bcast(c, shape), bcast(a, shape), bcast(b, shape)
    cond = c.v if c.t == "bool" else c.v != 0
    v = np.where(cond, a.v, b.v)
    act = np.where(cond, a.act, b.act)
    err = np.where(cond, a.err, b.err)
    unsure = c.err > 0
    if unsure.any():
        if is_float(a.t):
            with np.errstate(all="ignore"):
                spread = np.abs(a.f() - b.f()) + np.maximum(a.err, b.err)
            err = np.where(unsure, np.where(np.isnan(spread), INF, spread), err)
        else:   # either side, unless both are one value the model is sure of
            err = np.where(unsure & ((a.v != b.v) | (a.err > 0) | (b.err > 0)), INF, err)
    return MVal(a.t, v, act, err)


def extremum(a: MVal, b: MVal, biggest: bool) -> MVal:
    """`maximum`/`minimum` in the common type; NaN operands promise nothing, nor the sign of a tie of zeros."""
    shape = bshape(a, b)
    a, b = bcast(a, shape), bcast(b, shape)
    if is_float(a.t):
        A, B = a.f(), b.f()
        v = np.maximum(A, B) if biggest else np.minimum(A, B)
        err = np.maximum(a.err, b.err)
        err = np.where(np.isnan(A) | np.isnan(B), INF, err)
        tie = (A == 0) & (B == 0) & (np.signbit(A) != np.signbit(B))
        err = np.where(tie, np.maximum(err, LOOSE), err)
        return mval(a.t, v, a.act & b.act, err)
    A, B = a.i(), b.i()
    v = np.maximum(A, B) if biggest else np.minimum(A, B)
    return mval(a.t, v, a.act & b.act, np.where((a.err > 0) | (b.err > 0), INF, 0))
