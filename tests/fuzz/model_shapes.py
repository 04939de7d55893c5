"""The numpy model of the tile functions that move elements (docs/language.md 3.5, 6.8, 6.9): shape changes
(`reshape`, `permute`, `expand_dims`, `broadcast_to`, `join`, `split`, `interleave`), which keep each element's
value, activity and error; `gather`, `flip`, `sort`, `topk` and `histogram`; and reductions and scans with a
combine function (`tests.fuzz.combine_fns`), folded in index order. Combine functions, gathers and sorts read
inactive elements as 0 and give results active everywhere (6.8)."""

from __future__ import annotations

import numpy as np

from tests.fuzz import combine_fns as CF
from tests.fuzz.dtypes import as_f64, is_float
from tests.fuzz.model import INF, LOOSE, MVal, bcast, mval


def each(x: MVal, f) -> MVal:
    """`x` with `f` (a numpy function moving elements) applied to its values, activity and errors."""
    return MVal(x.t, np.array(f(x.v)), np.array(f(x.act)), np.array(f(x.err)))


def reshape(x: MVal, shape) -> MVal:
    return each(x, lambda a: a.reshape(shape))


def permute(x: MVal, dims) -> MVal:
    return each(x, lambda a: np.transpose(a, dims))


def swap_last(x: MVal) -> MVal:
    n = x.v.ndim
    return permute(x, (*range(n - 2), n - 1, n - 2))


def expand_dims(x: MVal, axes) -> MVal:
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    return each(x, lambda a: np.expand_dims(a, axes))


def broadcast_to(x: MVal, shape) -> MVal:
    return bcast(x, tuple(shape))


def join(a: MVal, b: MVal) -> MVal:
    shape = np.broadcast_shapes(a.shape, b.shape)
    a, b = bcast(a, shape), bcast(b, shape)
    return MVal(a.t, np.stack([a.v, b.v], -1), np.stack([a.act, b.act], -1), np.stack([a.err, b.err], -1))


def split(x: MVal) -> tuple[MVal, MVal]:
    return each(x, lambda a: a[..., 0]), each(x, lambda a: a[..., 1])


def interleave(a: MVal, b: MVal) -> MVal:
    j = join(a, b)
    if j.v.ndim == 1:
        return j
    *lead, n, _ = j.shape
    return reshape(j, (*lead, 2 * n))


def _zeroed(x: MVal) -> MVal:
    """`x` active everywhere: inactive elements enter as the values they hold (0 where a masked load made them,
    5.3 rule 1; what element-wise operations computed from that 0 after it)."""
    return MVal(x.t, x.v, np.ones(x.shape, bool), x.err)


def gather(x: MVal, index: MVal, axis: int) -> MVal:
    x = _zeroed(x)
    n = x.shape[axis]
    idx = index.i()
    idx = idx % n if n & (n - 1) == 0 else np.clip(idx, 0, n - 1)
    v = np.take_along_axis(x.v, idx, axis)
    e = np.take_along_axis(x.err, idx, axis)
    e = np.where(index.err > 0, INF, e)
    return MVal(x.t, v, np.ones(idx.shape, bool), e)


def flip(x: MVal, axis: int) -> MVal:
    """A gather of the reversed indices (6.9): inactive elements read as 0."""
    return each(_zeroed(x), lambda a: np.flip(a, axis))


def sort(x: MVal, descending: bool) -> MVal:
    """Sorted along the last axis; exact for exact inputs, but two zeros of opposite signs may come in either order
    (they compare equal): a zero's sign is not checked where both signs are in the line."""
    x = _zeroed(x)
    if is_float(x.t):
        a = as_f64(x.v)
        order = np.argsort(-a if descending else a, axis=-1, kind="stable")
        v = np.take_along_axis(x.v, order, -1)
        pos = (a == 0) & ~np.signbit(a)
        neg = (a == 0) & np.signbit(a)
        both = (pos.any(-1) & neg.any(-1))[..., None]
        e = np.where(both & (as_f64(v) == 0), LOOSE, 0.0)
    else:
        a = x.v.astype(np.int64) if x.t != "u64" else x.v
        v = np.sort(a, axis=-1)
        if descending:
            v = v[..., ::-1]
        v = v.astype(x.v.dtype)
        e = np.zeros(x.shape)
    unsure = (x.err > 0).any(-1, keepdims=True)
    if is_float(x.t):                                   # NaN has no place in the order
        unsure |= np.isnan(as_f64(x.v)).any(-1, keepdims=True)
    return MVal(x.t, np.ascontiguousarray(v), np.ones(x.shape, bool), np.where(unsure, INF, e))


def topk(x: MVal, k: int, descending: bool) -> MVal:
    s = sort(x, descending)
    return each(s, lambda a: a[..., :k])


def histogram(x: MVal, bins: int, mask: np.ndarray | None) -> MVal:
    v = x.i().reshape(-1)
    ok = (v >= 0) & (v < bins) & x.act.reshape(-1)          # a count: inactive elements are skipped (5.3 rule 3)
    if mask is not None:
        ok &= np.broadcast_to(mask, x.shape).reshape(-1)
    counts = np.bincount(v[ok], minlength=bins)[:bins]
    err = INF if (x.err > 0).any() else 0.0
    return mval("i32", counts, None, err)


def _lines(x: MVal, axis):
    v = np.moveaxis(x.v, axis, -1)
    return v, np.moveaxis(x.err, axis, -1)


def _fold_line(name: str, cols: list[tuple], reverse: bool, scan: bool):
    """Folds the per-position values `cols[i]` (a tuple of MVals, one per tile, each of the other axes' shape) in
    index order (reverse: from the end, the later elements first); the running results when `scan`."""
    order = range(len(cols) - 1, -1, -1) if reverse else range(len(cols))
    acc = None
    out = [None] * len(cols)
    for i in order:
        acc = cols[i] if acc is None else CF.apply(name, acc, cols[i])
        out[i] = acc
    return out if scan else acc


def combine(name: str, xs: list[MVal], axis: int | None, keep_dims: bool, reverse: bool, scan: bool) -> list[MVal]:
    """`metile.reduce` (scan False) or `metile.associative_scan` of the tiles `xs` with combine function `name`."""
    xs = [_zeroed(x) for x in xs]
    shape = xs[0].shape
    if axis is None:
        xs = [reshape(x, (x.v.size,)) for x in xs]
        ax = 0
    else:
        ax = axis % len(shape)
    n = xs[0].shape[ax]
    cols = [tuple(each(x, lambda a, i=i: np.take(a, i, axis=ax)) for x in xs) for i in range(n)]
    got = _fold_line(name, cols, reverse, scan)
    if scan:
        return [MVal(xs[j].t, np.stack([got[i][j].v for i in range(n)], ax),
                     np.ones(xs[j].shape, bool), np.stack([got[i][j].err for i in range(n)], ax))
                for j in range(len(xs))]
    out = []
    for r in got:
        r = MVal(r.t, np.asarray(r.v), np.ones(np.shape(r.v), bool), np.asarray(r.err))
        if axis is None:
            r = reshape(r, (1,) * len(shape) if keep_dims else ())
        elif keep_dims:
            r = expand_dims(r, ax)
        out.append(r)
    return out
