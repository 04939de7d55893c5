"""Sorting networks, flips and histograms on tiles (`docs/language.md` 6.9; Triton's `tl.sort`, `tl.topk`,
`tl.bitonic_merge`, `tl.flip`, `tl.histogram`), built while tracing from gathers (`metile.frontend.combine`).

- `sort` is Triton's bitonic network along the last axis (an extent that is a power of two): stage `s` (1 to
  `log2 n`) sorts blocks of `2**s` elements, ascending or descending by bit `s` of the index (the last stage in the
  order asked for), by `s` compare-and-swap steps; a step at distance `d` compares each element with element
  `i ^ d` and keeps `y` where `(x > y) != (flip ^ right)` (`right`: the element is the upper one of its pair),
  else `x`, as Triton's `_compare_and_swap` does, so ties and NaNs end where Triton puts them.
- `topk(x, k)` runs the first `log2 k` stages, then halves the tile until `k` elements remain, each halving keeping
  the larger of the two elements whose indices differ in bit `log2 k` and merging the halves again (Triton's
  bitonic top-k); the `k` largest come out largest first.
- `flip` reverses an axis (a gather by `n - 1 - i`).
- `histogram(x, bins, mask)` counts the elements of a 1-D i32 tile equal to each of `0..bins-1` (those outside are
  not counted, nor those where `mask` is false): a comparison of every element with every bin, summed.
"""

from __future__ import annotations

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.combine import axis_index
from metile.frontend.errors import KernelTypeError, ShapeMismatchError
from metile.ir.errors import Loc
from metile.ir.ops import BinOp, CmpOp, ReduceOp
from metile.ir.tile import Arange, Broadcast, ExpandDims, Gather, Reduce
from metile.ir.types import DType, PtrType
from metile.ir.values import Binary, Cast, Compare, Value, Where


def _full(v, shape, loc: Loc) -> Value:
    return sem.converted(v, DType.I32, shape, loc)


def _tile(x, what: str, loc: Loc) -> Value:
    if not isinstance(x, Value) or isinstance(x.type, PtrType) or not x.type.shape:
        kind = x.type if isinstance(x, Value) else type(x).__name__
        raise ShapeMismatchError(f"{what} takes a tile, not {kind}", loc)
    return x


def _last_axis(x: Value, dim, what: str, loc: Loc) -> int:
    rank = len(x.type.shape)
    d = rank - 1 if dim is None else dim
    if not isinstance(d, int) or isinstance(d, bool) or not -rank <= d < rank:
        raise KernelTypeError(f"{what}: dim must be None or an int in [-{rank}, {rank}), not {d!r}", loc)
    if d % rank != rank - 1:
        raise KernelTypeError(f"{what}: only minor dimension is currently supported", loc)
    n = x.type.shape[-1]
    if n & (n - 1):
        raise ShapeMismatchError(f"{what}: the sorted dimension must have a power-of-two extent, not {n}", loc)
    return rank - 1


def _bit(i: Value, b: int, shape, loc: Loc) -> Value:
    """The bool tile: bit `b` of `i` is set."""
    return Compare(CmpOp.NE, Binary(BinOp.AND, i, _full(1 << b, shape, loc), loc=loc), _full(0, shape, loc),
                   loc=loc)


def _compare_and_swap(tr, x: Value, i: Value, d: int, flip: Value, loc: Loc) -> Value:
    shape, axis = x.type.shape, len(x.type.shape) - 1
    partner = tr.bind(Binary(BinOp.XOR, i, _full(d, shape, loc), loc=loc), "partner", loc)
    y = tr.bind(Gather(x, partner, axis, loc=loc), "other", loc)
    right = _bit(i, d.bit_length() - 1, shape, loc)
    swap = Compare(CmpOp.NE, Compare(CmpOp.GT, x, y, loc=loc), Binary(BinOp.XOR, flip, right, loc=loc), loc=loc)
    return tr.bind(Where(swap, y, x, loc=loc), "swapped", loc)


def _merge(tr, x: Value, stage: int, flip_of, loc: Loc) -> Value:
    """Triton's `_bitonic_merge_hypercube`: `stage` compare-and-swap steps, distances `2**(stage-1)` down to 1."""
    shape = x.type.shape
    i = tr.bind(axis_index(shape, len(shape) - 1, loc), "i", loc)
    flip = flip_of(i, shape)
    for t in range(stage):
        x = _compare_and_swap(tr, x, i, 1 << (stage - 1 - t), flip, loc)
    return x


def _order(descending: bool, loc: Loc):
    def flip_of(i, shape):
        return sem.converted(descending, DType.BOOL, shape, loc)
    return flip_of


def _alternating(stage: int, loc: Loc):
    def flip_of(i, shape):
        return _bit(i, stage, shape, loc)
    return flip_of


def _descending(v, what: str, loc: Loc) -> bool:
    if isinstance(v, Value) or not isinstance(v, (bool, int)):
        raise KernelTypeError(f"{what}: descending must be a compile-time bool or int", loc)
    return bool(v)


def sort(tr, x, dim, descending, loc: Loc, what: str = "sort", k: int | None = None) -> Value:
    """`x` sorted along its last axis (the `k` largest or smallest, in order, when `k` is given)."""
    x = _tile(x, what, loc)
    _last_axis(x, dim, what, loc)
    desc = _descending(descending, what, loc)
    n = x.type.shape[-1]
    log_n = n.bit_length() - 1
    log_k = log_n if k is None else k.bit_length() - 1
    if k is not None and (k <= 0 or k & (k - 1) or k > n):
        raise KernelTypeError(f"{what}: k must be a power of two in [1, {n}], not {k}", loc)
    for s in range(1, log_k + 1):
        x = _merge(tr, x, s, _alternating(s, loc) if s < log_n else _order(desc, loc), loc)
    m = n
    for s in range(log_k + 1, log_n + 1):
        m //= 2
        x = _halve(tr, x, m, log_k, desc, loc)
        x = _merge(tr, x, log_k, _alternating(log_k, loc) if s < log_n else _order(desc, loc), loc)
    return x


def _halve(tr, x: Value, m: int, log_k: int, desc: bool, loc: Loc) -> Value:
    """The tile of `m` elements per row keeping, of each two elements whose indices differ in bit `log_k`, the
    larger (the smaller when not `desc`)."""
    shape = x.type.shape[:-1] + (m,)
    axis = len(shape) - 1
    j = tr.bind(axis_index(shape, axis, loc), "j", loc)
    low = Binary(BinOp.AND, j, _full((1 << log_k) - 1, shape, loc), loc=loc)
    high = Binary(BinOp.SHL, Binary(BinOp.SHR, j, _full(log_k, shape, loc), loc=loc), _full(log_k + 1, shape, loc),
                  loc=loc)
    first = tr.bind(Binary(BinOp.OR, high, low, loc=loc), "first", loc)
    second = Binary(BinOp.OR, first, _full(1 << log_k, shape, loc), loc=loc)
    a = tr.bind(Gather(x, first, axis, loc=loc), "a", loc)
    b = tr.bind(Gather(x, second, axis, loc=loc), "b", loc)
    return tr.bind(Binary(BinOp.MAX if desc else BinOp.MIN, a, b, loc=loc), "kept", loc)


def bitonic_merge(tr, x, dim, descending, loc: Loc, what: str = "bitonic_merge") -> Value:
    x = _tile(x, what, loc)
    _last_axis(x, dim, what, loc)
    n = x.type.shape[-1]
    return _merge(tr, x, n.bit_length() - 1, _order(_descending(descending, what, loc), loc), loc)


def flip(tr, x, dim, loc: Loc, what: str = "flip") -> Value:
    x = _tile(x, what, loc)
    shape = x.type.shape
    rank = len(shape)
    d = rank - 1 if dim is None else dim
    if not isinstance(d, int) or isinstance(d, bool) or not -rank <= d < rank:
        raise KernelTypeError(f"{what}: dim must be None or in [-rank, rank), not {d!r}", loc)
    d %= rank
    i = axis_index(shape, d, loc)
    index = tr.bind(Binary(BinOp.SUB, _full(shape[d] - 1, shape, loc), i, loc=loc), "flipped", loc)
    return tr.bind(Gather(x, index, d, loc=loc), "flip", loc)


def histogram(tr, x, bins, mask, loc: Loc, what: str = "histogram") -> Value:
    x = _tile(x, what, loc)
    if len(x.type.shape) != 1:
        raise ShapeMismatchError(f"{what} only supports 1D input", loc)
    if x.type.dtype not in (DType.I32, DType.U32):
        raise KernelTypeError(f"{what} only supports 32-bit integer input, but got {x.type.dtype}", loc)
    if isinstance(bins, Value) or not isinstance(bins, int) or isinstance(bins, bool) or bins <= 0:
        raise KernelTypeError(f"{what}: num_bins must be a positive compile-time int, not {bins!r}", loc)
    n = x.type.shape[0]
    shape = (n, bins)
    col = Broadcast(ExpandDims(x if x.type.dtype is DType.I32 else Cast(x, DType.I32, loc=loc), 1, loc=loc), shape,
                    loc=loc)
    b = Broadcast(ExpandDims(Arange(0, bins, loc=loc), 0, loc=loc), shape, loc=loc)
    hit = Compare(CmpOp.EQ, col, b, loc=loc)
    if mask is not None:
        if not isinstance(mask, Value) or mask.type.dtype is not DType.BOOL:
            raise KernelTypeError("Mask must have boolean scalar type", loc)
        m = sem.broadcast_to(mask, (n,), loc)
        hit = Binary(BinOp.AND, hit, Broadcast(ExpandDims(m, 1, loc=loc), shape, loc=loc), loc=loc)
    counts = tr.bind(Cast(hit, DType.I32, loc=loc), "hits", loc)
    return tr.bind(Reduce(ReduceOp.SUM, counts, 0, loc=loc), "histogram", loc)


# ---- the functions of metile's language


def _sort_fn(tr, loc, x, dim, descending):
    return sort(tr, x, dim, descending, loc, "metile.sort")


def _topk_fn(tr, loc, x, k, dim, descending):
    if isinstance(k, Value) or not isinstance(k, int) or isinstance(k, bool):
        raise KernelTypeError(f"metile.topk: k must be a compile-time int, not {k!r}", loc)
    return sort(tr, x, dim, descending, loc, "metile.topk", k=k)


def _flip_fn(tr, loc, x, dim):
    return flip(tr, x, dim, loc, "metile.flip")


def _histogram_fn(tr, loc, x, num_bins, mask):
    return histogram(tr, x, num_bins, mask, loc, "metile.histogram")


LIBRARY = {L.sort: _sort_fn, L.topk: _topk_fn, L.flip: _flip_fn, L.histogram: _histogram_fn}

__all__ = ["LIBRARY", "bitonic_merge", "flip", "histogram", "sort"]
