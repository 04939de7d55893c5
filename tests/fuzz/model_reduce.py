"""The numpy model of reductions, scans and `dot` (docs/language.md 6.3 to 6.6), with the error bounds of
`tests.fuzz.model`: a float sum is exact (err 0) when every order of additions in its accumulation type is exact
(all terms are multiples of one power of two and the sum of their magnitudes fits the significand), and otherwise
within `n * eps * sum(|x|)`. Inactive elements are skipped (5.3 rule 3); results are active everywhere."""

from __future__ import annotations

import numpy as np

from tests.fuzz.dtypes import F8, TYPES, computed, int_range, ints, is_float, is_int, round_to, ulp, wrap
from tests.fuzz.model import INF, LOOSE, MVal, cast, mval

EPS32 = 2.0 ** -24


def sum_type(t: str, dtype: str | None) -> str:
    """The type a sum or scan accumulates and returns in (6.3, 6.5)."""
    if dtype is not None:
        return dtype
    if t in F8:
        return "f16"
    if t == "bool":
        return "i32"
    d = TYPES[t]
    if d.kind in "iu" and d.bits < 32:
        return "i32" if d.kind == "i" else "u32"
    return t


def _acc_bits(t: str) -> int:
    return 24 if TYPES[t].bits <= 32 else 53             # 16-bit floats are reduced in f32


def low_bit_exp(x: np.ndarray) -> np.ndarray:
    """The exponent of the lowest set bit of each finite nonzero float64 (a huge number for zeros)."""
    with np.errstate(all="ignore"):
        m, e = np.frexp(np.abs(x))
        mant = np.ldexp(m, 53).astype(np.int64)
        low = mant & -mant
        tz = np.where(mant > 0, np.log2(np.where(low > 0, low, 1)).astype(np.int64), 0)
    return np.where((x != 0) & np.isfinite(x), e - 53 + tz, 10 ** 6)


def _lines(x: MVal, axis):
    """x's elements, activity and errors as (lines, n) arrays along `axis` (None: the whole tile)."""
    if axis is None:
        return x.v.reshape(1, -1), x.act.reshape(1, -1), x.err.reshape(1, -1), ()
    ax = axis % x.v.ndim
    move = lambda a: np.moveaxis(a, ax, -1)   # noqa: E731
    v = move(x.v)
    rest = v.shape[:-1]
    return v.reshape(-1, v.shape[-1]), move(x.act).reshape(-1, v.shape[-1]), move(x.err).reshape(-1, v.shape[-1]), rest


def _shape_back(out: np.ndarray, x: MVal, axis, keep_dims: bool, rest) -> np.ndarray:
    if axis is None:
        out = out.reshape(())
        return out.reshape((1,) * x.v.ndim) if keep_dims else out
    out = out.reshape(rest)
    return np.expand_dims(out, axis % x.v.ndim) if keep_dims else out


def _float_sums(vals: np.ndarray, act: np.ndarray, err: np.ndarray, t: str, counts: np.ndarray):
    """Sums of each row's active elements (any order), rounded to `t`, with their error bounds."""
    A = np.where(act, vals, 0.0)
    with np.errstate(all="ignore"):
        z = A.sum(axis=-1)
        S = np.abs(np.where(np.isfinite(A), A, 0.0)).sum(axis=-1)
        g = low_bit_exp(A).min(axis=-1, initial=10 ** 6)
        exact = (S == 0) | (S < np.ldexp(1.0, np.minimum(g, 2000) + _acc_bits(t)))
        nonfinite = (~np.isfinite(A)).any(axis=-1)
        r = round_to(z, t)
        bound = counts * EPS32 * S + ulp(r, t) + np.where(act, err, 0).sum(axis=-1)
        e = np.where((exact | nonfinite) & ~(np.where(act, err, 0) > 0).any(axis=-1), 0.0, bound)
        e = np.where(S > 2.0 ** 127, INF, e)                # a partial sum may overflow in another order
        e = np.where(np.where(act, err, 0).max(axis=-1, initial=0) == INF, INF, e)
        e = np.where(r == 0, np.maximum(e, LOOSE), e)
    return r, e


def reduce_sum(x: MVal, axis, keep_dims: bool, dtype: str | None) -> MVal:
    t = sum_type(x.t, dtype)
    x = cast(x, t)
    v, act, err, rest = _lines(x, axis)
    if is_float(t):
        r, e = _float_sums(v.astype(np.float64), act, err, t, act.shape[-1])
        return mval(t, _shape_back(r, x, axis, keep_dims, rest), None, _shape_back(e, x, axis, keep_dims, rest))
    z = np.where(act, v.astype(np.int64), 0).sum(axis=-1)
    e = np.where((act & (err > 0)).any(axis=-1), INF, 0.0)
    return mval(t, _shape_back(wrap(z, t), x, axis, keep_dims, rest), None, _shape_back(e, x, axis, keep_dims, rest))


def reduce_extremum(x: MVal, axis, keep_dims: bool, biggest: bool) -> MVal:
    x = cast(x, computed(x.t))                           # 8-bit floats reduce as f16
    v, act, err, rest = _lines(x, axis)
    e = np.where(act, err, 0).max(axis=-1, initial=0)
    if x.t == "bool":
        z = (v & act).any(axis=-1) if biggest else (v | ~act).all(axis=-1)
        e = np.where(e > 0, INF, 0)
    elif is_float(x.t):
        A = v.astype(np.float64)
        fill = -np.inf if biggest else np.inf
        B = np.where(act, A, fill)
        z = B.max(axis=-1) if biggest else B.min(axis=-1)
        e = np.where((act & np.isnan(A)).any(axis=-1), INF, e)
        zero_tie = (z == 0) & (act & (A == 0) & np.signbit(A)).any(axis=-1) & (act & (A == 0) & ~np.signbit(A)).any(-1)
        e = np.where(zero_tie, np.maximum(e, LOOSE), e)
        z = np.where(np.isnan(z), 0.0, z)
    else:
        lo, hi = int_range(x.t)
        B = np.where(act, ints(v, x.t), lo if biggest else hi)
        z = B.max(axis=-1) if biggest else B.min(axis=-1)
        e = np.where(e > 0, INF, 0)
    return mval(x.t, _shape_back(z, x, axis, keep_dims, rest), None, _shape_back(e, x, axis, keep_dims, rest))


def reduce_arg(x: MVal, axis, keep_dims: bool, biggest: bool) -> MVal:
    """The first index of the largest (smallest) active element; 0 for a line of inactive elements."""
    v, act, err, rest = _lines(x, axis)
    A = v.astype(np.float64) if is_float(x.t) else ints(v, x.t)
    fill = (-np.inf if biggest else np.inf) if is_float(x.t) else (
        int_range(x.t)[0] - 1 if biggest else int_range(x.t)[1] + 1)
    B = np.where(act, A, fill)
    with np.errstate(invalid="ignore"):
        top = np.where(act, A, fill)
        best = top.max(axis=-1) if biggest else top.min(axis=-1)
        first = act & np.asarray(B == best[:, None]).astype(bool)     # the first active element equal to the extremum
    idx = np.where(first.any(axis=-1), first.argmax(axis=-1), 0).astype(np.int64)
    ee = np.where(act, np.where(err <= LOOSE, 0, err), 0)
    with np.errstate(all="ignore"):
        eb = np.take_along_axis(ee, idx[:, None], axis=-1)[:, 0]
        if biggest:
            near = act & (B.astype(np.float64) + ee >= best.astype(np.float64)[:, None] - eb[:, None])
        else:
            near = act & (B.astype(np.float64) - ee <= best.astype(np.float64)[:, None] + eb[:, None])
    unsure = ((ee > 0) & near).any(axis=-1) & (near.sum(axis=-1) > 1)
    if is_float(x.t):
        unsure |= (act & np.isnan(A)).any(axis=-1)
    e = np.where(unsure, INF, 0.0)
    return mval("i32", _shape_back(idx, x, axis, keep_dims, rest), None, _shape_back(e, x, axis, keep_dims, rest))


def scan(x: MVal, axis: int, reverse: bool, dtype: str | None, product: bool) -> MVal:
    """`cumsum`/`cumprod`: inclusive running results; inactive elements count as 0 (1 for products)."""
    t = sum_type(x.t, dtype)
    x = cast(x, t)
    ax = axis % x.v.ndim
    v, act, err = (np.moveaxis(a, ax, -1) for a in (x.v, x.act, x.err))
    if reverse:
        v, act, err = v[..., ::-1], act[..., ::-1], err[..., ::-1]
    n = v.shape[-1]
    ident = 1 if product else 0
    if is_float(t):
        A = np.where(act, v.astype(np.float64), float(ident))
        E = np.where(act, err, 0.0)
        with np.errstate(all="ignore"):
            z = np.cumprod(A, axis=-1) if product else np.cumsum(A, axis=-1)
            r = round_to(z, t)
            if product:
                sig = np.where(A != 0, 53 - (low_bit_exp(A) - np.frexp(np.abs(A))[1] + 53), 0)
                fits = (sig.sum(axis=-1, keepdims=True) <= _acc_bits(t)) & (np.abs(z) < 2.0 ** 100) & (
                    (np.abs(z) > 2.0 ** -100) | (z == 0))
                e = np.where(fits & (np.cumsum(E, axis=-1) == 0), 0.0, np.where(np.cumsum(E, -1) > 0, INF,
                                                                               n * EPS32 * np.abs(z) + ulp(r, t)))
                # in another order a part of the product may overflow (inf * 0 is NaN) or underflow: nothing is sure
                mag = np.log2(np.where((A != 0) & np.isfinite(A), np.abs(A), 1.0))
                grow, shrink = np.where(mag > 0, mag, 0).sum(-1), np.where(mag < 0, mag, 0).sum(-1)
                risky = ((grow > 120) | (shrink < -120))[..., None]
            else:
                fin = np.where(np.isfinite(A), A, 0.0)
                S = np.cumsum(np.abs(fin), axis=-1)
                g = np.minimum.accumulate(low_bit_exp(fin), axis=-1)
                exact = (S == 0) | (S < np.ldexp(1.0, np.minimum(g, 2000) + _acc_bits(t)))
                e = np.where(exact & (np.cumsum(E, -1) == 0), 0.0, n * EPS32 * S + ulp(r, t) + np.cumsum(E, -1))
                risky = S[..., -1:] > 2.0 ** 127              # a partial sum may overflow in another order
                e = np.where(r == 0, np.maximum(e, LOOSE), e)
            nonfinite = np.cumsum(~np.isfinite(A), axis=-1) > 0
            e = np.where(nonfinite & (np.cumsum(E, -1) == 0), 0.0, e)
            e = np.where(np.isnan(e) | risky, INF, e)
        out, e = r, e
    else:
        A = np.where(act, v.astype(np.int64), ident)
        if product:
            out = np.empty_like(A)
            acc = np.full(A.shape[:-1], 1, np.int64)
            mask = np.uint64(0xFFFFFFFF if TYPES[t].bits < 64 else 0xFFFFFFFFFFFFFFFF)
            for k in range(n):
                acc = wrap((acc.astype(np.uint64) * A[..., k].astype(np.uint64) & mask).astype(np.int64), t)
                out[..., k] = acc.astype(np.int64)
        else:
            out = wrap(np.cumsum(A, axis=-1), t)
        e = np.where(np.cumsum(act & (err > 0), axis=-1) > 0, INF, 0.0)
    if reverse:
        out, e = out[..., ::-1], e[..., ::-1]
    return mval(t, np.moveaxis(out, -1, ax), None, np.moveaxis(e, -1, ax))


def dot(a: MVal, b: MVal, acc: MVal | None, acc_number=None, out_dtype: str | None = None,
        relax: frozenset = frozenset()) -> MVal:
    """`acc + a @ b` (6.6): exact products summed in f32 in any order, rounded once to the result type.
    With "lowp_dot_acc" in `relax`, a 16-bit accumulator's result may be off by its rounding."""
    ints = is_int(a.t) and is_int(b.t)
    if acc is not None:
        t = acc.t
    else:
        t = "i32" if ints else "f32"
    M, N = a.shape[0], b.shape[1]
    if ints and is_int(t):
        P = a.v.astype(np.int64)[:, :, None] * b.v.astype(np.int64)[None, :, :]
        z = P.sum(axis=1)
        if acc is not None:
            z = z + np.broadcast_to(acc.v.astype(np.int64), (M, N))
        elif acc_number is not None:
            z = z + int(acc_number)
        e = np.zeros((M, N))
        if acc is not None:
            e = np.where(np.broadcast_to(acc.err, (M, N)) > 0, INF, e)
        res = mval(t, wrap(z, t), None, e)
    else:
        A, B = a.v.astype(np.float64), b.v.astype(np.float64)
        with np.errstate(all="ignore"):
            P = A[:, :, None] * B[None, :, :]
            C = np.zeros((M, N))
            EC = np.zeros((M, N))
            if acc is not None:
                C = np.broadcast_to(acc.v.astype(np.float64), (M, N))
                EC = np.broadcast_to(acc.err, (M, N))
            elif acc_number is not None:
                C = np.full((M, N), float(acc_number))
            terms = np.concatenate([P, C[:, None, :]], axis=1)
            z = terms.sum(axis=1)
            fin = np.where(np.isfinite(terms), terms, 0.0)
            S = np.abs(fin).sum(axis=1)
            g = low_bit_exp(fin).min(axis=1)
            exact = (S == 0) | (S < np.ldexp(1.0, np.minimum(g, 2000) + 24))
            r = round_to(z, t) if is_float(t) else z
            Ea, Eb = a.err, b.err
            prop = (np.abs(A) @ Eb + Ea @ np.abs(B) + Ea @ Eb) + EC
            e = np.where(exact & (prop == 0), 0.0, (a.shape[1] + 1) * EPS32 * S + prop
                         + (ulp(r, t) if is_float(t) else 1.0))
            e = np.where(~np.isfinite(terms).all(axis=1) & (prop == 0), 0.0, e)
            e = np.where(np.isnan(e) | (S > 2.0 ** 127), INF, e)     # f32 partial sums may overflow
            some = (Ea > 0).any(axis=1)[:, None] | (Eb > 0).any(axis=0)[None, :] | (EC > 0)
            e = np.where(some, np.maximum(e, LOOSE), e)
            if is_float(t):
                e = np.where(r == 0, np.maximum(e, LOOSE), e)
                if "lowp_dot_acc" in relax and TYPES[t].bits == 16:
                    e = np.where(np.isfinite(e), e + 2 * ulp(r, t), e)
        if is_float(t):
            res = mval(t, r, None, e)
        else:                                                   # an integer acc with float operands
            tr = np.trunc(z)
            lo, hi = int_range(t)
            bad = ~np.isfinite(z) | (tr < lo) | (tr > hi) | (e > 0)
            res = mval(t, np.where(bad, 0, tr).astype(np.int64), None, np.where(bad, INF, 0.0))
    return cast(res, out_dtype) if out_dtype else res
