"""The numpy model of metile's math functions (docs/language.md 6.2) and `fma`, with the error bounds of
`tests.fuzz.model`: the device's own functions may differ from the exact result by a few units in the last place
(erf by about 2e-7), and an input's error propagates through the function (monotone ones by their values at the
ends of the input's interval); `floor`, `ceil` and `abs` are exact, and so are the results IEEE fixes for zeros
and infinities (sqrt(-0.0) is -0.0)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from tests.fuzz.dtypes import computed, is_float, promote, round_to, ulp, wrap
from tests.fuzz.model import INF, LOOSE, MVal, bcast, bshape, cast, eff, finish, mval, two_sum_exact


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if np.size(x) else np.asarray(x, np.float64)


def _sigmoid(x):
    with np.errstate(all="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


# name: (float64 function, ulps allowed, how errors propagate: "mono" (monotone: interval ends), "lip1",
# "exact" (no rounding: floor, ceil, abs))
MATH = {
    "exp": (np.exp, 4, "mono"), "exp2": (np.exp2, 4, "mono"), "log": (np.log, 4, "mono"),
    "log2": (np.log2, 4, "mono"), "sqrt": (np.sqrt, 1, "mono"), "rsqrt": (lambda x: 1.0 / np.sqrt(x), 4, "mono"),
    "sin": (np.sin, 4, "lip1"), "cos": (np.cos, 4, "lip1"), "tanh": (np.tanh, 4, "mono"),
    "sigmoid": (_sigmoid, 6, "mono"), "erf": (_erf, 2, "mono"), "floor": (np.floor, 0, "mono"),
    "ceil": (np.ceil, 0, "mono"), "abs": (np.abs, 0, "lip1"),
}
ODD_AT_ZERO = {"sqrt", "sin", "tanh", "erf", "floor", "ceil"}   # f(-0.0) == -0.0 exactly


def math_type(t: str) -> str:
    return computed(t) if is_float(t) else "f32"


def math_fn(name: str, x: MVal, y: MVal | None = None) -> MVal:
    """A math function of 6.2: float operands keep their type, integers compute in f32."""
    if name == "abs" and not is_float(x.t):
        return mval(x.t, wrap(np.abs(x.i()), x.t), x.act, x.err)
    if name == "abs" and x.t != computed(x.t):
        x = cast(x, computed(x.t))
    if name == "pow":
        t = math_type(promote(x.t, y.t))
        shape = bshape(x, y)
        x, y = bcast(cast(x, t), shape), bcast(cast(y, t), shape)
        A, B = x.f(), y.f()
        with np.errstate(all="ignore"):
            z = np.power(A, B)
            r = round_to(z, t)
            ex, ey = eff(x.err), eff(y.err)
            prop = np.where((ex == 0) & (ey == 0), 0,
                            np.abs(B * np.power(np.abs(A), B - 1)) * ex + np.abs(np.log(np.abs(A)) * z) * ey)
            special = ~np.isfinite(A) | ~np.isfinite(B) | (A == 0) | (B == 0) | (A == 1)
            err = np.where(special & (prop == 0), 0, prop + 8 * ulp(r, t))
            err = np.where(np.isnan(err), INF, err)
            err = np.where((x.err > 0) | (y.err > 0), np.maximum(err, LOOSE), err)
            err = np.where((x.err == INF) | (y.err == INF), INF, err)
        return finish(t, r, err, x.act & y.act)
    t = math_type(x.t)
    x = cast(x, t)
    fn, ulps, prop_kind = MATH[name]
    A, e = x.f(), eff(x.err)
    with np.errstate(all="ignore"):
        z = fn(A)
        r = round_to(z, t)
        if prop_kind == "mono":
            prop = np.maximum(np.abs(fn(A + e) - z), np.abs(fn(A - e) - z))
        else:
            prop = np.minimum(e, 2.0) if name != "abs" else e
        prop = np.where(e == 0, 0, prop)
        rnd = ulps * ulp(r, t) + (2e-7 if name == "erf" else 0) + np.where(r == z, 0, ulp(r, t))
        if ulps == 0:
            rnd = np.zeros_like(r)
        err = prop + rnd
        special = ~np.isfinite(A) | ((A == 0) & (name in ODD_AT_ZERO))
        err = np.where(special & (prop == 0), 0, err)
        err = np.where(np.isnan(err), INF, err)
        err = np.where(x.err > 0, np.maximum(err, LOOSE), err)
        err = np.where(x.err == INF, INF, err)        # an input that may be anything (NaN too): so may the result
    return finish(t, r, err, x.act)


def fma(a: MVal, b: MVal, c: MVal) -> MVal:
    """`a * b + c` rounded once, in the common float type of the three."""
    t = math_type(promote(promote(a.t, b.t), c.t))
    shape = bshape(a, b, c)
    a, b, c = (bcast(cast(v, t), shape) for v in (a, b, c))
    A, B, C = a.f(), b.f(), c.f()
    with np.errstate(all="ignore"):
        p = A * B                                          # exact in float64 for every float type here
        z = p + C
        exact64 = two_sum_exact(p, C, z)
        r = round_to(z, t)
        bad = ~exact64 & np.isfinite(z)
        r = np.array(r, copy=True)
        for idx in np.ndindex(bad.shape):                  # rare: the sum needs more than 53 bits
            if not bad[idx]:
                continue
            exact = Fraction(float(A[idx])) * Fraction(float(B[idx])) + Fraction(float(C[idx]))
            r[idx] = _round_fraction(exact, t)
        inexact = np.where(bad, True, r != z)
        ea, eb, ec = a.err, b.err, c.err
        prop = np.abs(B) * ea + np.abs(A) * eb + ea * eb + ec
        special = ~np.isfinite(A) | ~np.isfinite(B) | ~np.isfinite(C)
        rnd = np.where(inexact & ~special, ulp(r, t), 0)
        err = np.where(prop == 0, rnd, prop + rnd + ulp(r, t))
        err = np.where(np.isnan(err), INF, err)
        err = np.where((ea > 0) | (eb > 0) | (ec > 0), np.maximum(err, LOOSE), err)
    return finish(t, r, err, a.act & b.act & c.act)


def _round_fraction(q, t: str) -> float:
    lo = float(q)                                           # nearest float64; then fix the float64 rounding
    cands = round_to(np.array([np.nextafter(lo, -np.inf), lo, np.nextafter(lo, np.inf)]), t)
    best = min(set(cands.tolist()), key=lambda c: (abs(q - type(q)(c)) if math.isfinite(c) else float("inf")))
    return best
