"""Gathers along an axis, and reductions and scans with a combine function of the kernel's own
(`docs/language.md` 6.8; Triton's `tl.gather`, `tl.reduce`, `tl.associative_scan`).

`gather(x, index, axis)` is the Tile IR `Gather`: the lowering puts `x` in scratch memory and each element loads the
one its index picks. A reduction or scan with a combine function is built from gathers while tracing, the combine
function traced on whole tiles (it is element-wise, as Triton's combine functions are), `ceil(log2(n))` steps for
an axis of `n` elements:

- A scan is Hillis and Steele's: at step `d` (1, 2, 4...) each element combines the value `d` before it (after it
  when `reverse`) with its own, `combine(earlier, own)` (`combine(later, own)` in reverse), where there is one.
  Element `i` then holds `combine` folded over elements `0..i` in order (over `n-1` down to `i` when `reverse`:
  Triton's order, the scan of the flipped tile).
- A reduction is a butterfly: at step `d` each element combines its value with that of element `i ^ d`, the lower
  index's value first, so element 0 holds the fold of the whole line in index order; it is then picked out (a
  gather of one element per line). Only associativity is assumed, not commutativity.

Several tiles (a tuple, as Triton allows) go through the steps together: the combine function takes the values of
both sides of every tile and gives one value per tile, each of its tile's type.
"""

from __future__ import annotations

from collections.abc import Callable

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.builtins import static_int
from metile.frontend.errors import KernelTypeError, ShapeMismatchError
from metile.frontend.funcs import call_func
from metile.frontend.matmul import active_everywhere
from metile.ir.errors import Loc
from metile.ir.ops import BinOp, CmpOp
from metile.ir.tile import AllActive, Arange, Broadcast, ExpandDims, Gather, Reshape
from metile.ir.types import DType, PtrType
from metile.ir.values import Binary, Compare, Value, Where

Combine = Callable[[list, list], list]
"""`combine(lhs, rhs)`: the combine function applied to the values of the two sides (one per tile), its results."""


def axis_index(shape: tuple[int, ...], axis: int, loc: Loc) -> Value:
    """The i32 tile of `shape` whose elements hold their coordinate along `axis`."""
    v: Value = Arange(0, shape[axis], loc=loc)
    for d in range(len(shape)):
        if d != axis:
            v = ExpandDims(v, d, loc=loc)
    return Broadcast(v, shape, loc=loc) if v.type.shape != shape else v


def check_gather_tiles(x, index, loc: Loc, what: str = "gather") -> None:
    for v, name in ((x, "the source"), (index, "the index")):
        if not isinstance(v, Value) or isinstance(v.type, PtrType) or not v.type.shape:
            kind = v.type if isinstance(v, Value) else type(v).__name__
            raise ShapeMismatchError(f"{what}: {name} must be a tile, not {kind}", loc)


def check_gather(x, index, axis: int, loc: Loc, what: str = "gather") -> None:
    check_gather_tiles(x, index, loc, what)
    xs, js = x.type.shape, index.type.shape
    if not index.type.dtype.is_int:
        raise KernelTypeError(f"{what}: the index must be an integer tile, not {index.type}", loc)
    if len(xs) != len(js) or any(a != b for d, (a, b) in enumerate(zip(xs, js)) if d != axis):
        raise ShapeMismatchError(f"{what}: the index {list(js)} must have the source's shape {list(xs)} on every "
                                 f"axis but {axis}", loc)


def gather(tr, x: Value, index: Value, axis: int, loc: Loc) -> Value:
    """The elements of `x` that `index` picks along `axis` (a `Gather`, bound to a name)."""
    check_gather(x, index, axis, loc)
    return tr.bind(Gather(x, index, axis, loc=loc), "gathered", loc)


def _results(tr, got, xs: list[Value], what: str, loc: Loc) -> list[Value]:
    """The combine function's results, checked against the tiles' types (Triton's region must yield them)."""
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(got) != len(xs):
        raise KernelTypeError(f"{what}: the combine function returns {len(got)} values for {len(xs)} tiles", loc)
    out = []
    for y, x in zip(got, xs):
        t = x.type
        if isinstance(y, Value):
            if isinstance(y.type, PtrType) or y.type.dtype is not t.dtype:
                got_t = y.type if isinstance(y.type, PtrType) else y.type.dtype
                raise KernelTypeError(f"{what}: the combine function returns {got_t} for a tile of {t.dtype}; it "
                                      "must return the type of its operands", loc)
            y = sem.broadcast_to(y, t.shape, loc)
        elif sem.is_number(y):
            y = sem.converted(y, t.dtype, t.shape, loc)
        else:
            raise KernelTypeError(f"{what}: the combine function returns a {type(y).__name__}, not a value", loc)
        out.append(y)
    return out


def _step(tr, xs: list[Value], axis: int, partner: Value, ok: Value, lhs_first: Value | None, combine: Combine,
          what: str, loc: Loc) -> list[Value]:
    """One step: each element combines its values with those of element `partner` where `ok` holds; the partner's
    values come first (`combine(partner, own)`), or, with `lhs_first`, the partner's first where it holds and the
    element's own first elsewhere."""
    axis_pick = [tr.bind(Gather(x, partner, axis, loc=loc), "partner", loc) for x in xs]
    if lhs_first is None:
        lhs, rhs = axis_pick, xs
    else:
        lhs = [tr.bind(Where(lhs_first, p, x, loc=loc), "lhs", loc) for p, x in zip(axis_pick, xs)]
        rhs = [tr.bind(Where(lhs_first, x, p, loc=loc), "rhs", loc) for p, x in zip(axis_pick, xs)]
    got = _results(tr, combine(lhs, rhs), xs, what, loc)
    return [tr.bind(Where(ok, y, x, loc=loc), "combined", loc) for y, x in zip(got, xs)]


def _full(v: int, shape: tuple[int, ...], loc: Loc) -> Value:
    return sem.converted(v, DType.I32, shape, loc)


def _prepare(xs, axis, what: str, loc: Loc) -> tuple[list[Value], tuple[int, ...]]:
    if not xs:
        raise KernelTypeError(f"{what}: needs at least one tile", loc)
    for x in xs:
        if not isinstance(x, Value) or isinstance(x.type, PtrType) or not x.type.shape:
            kind = x.type if isinstance(x, Value) else type(x).__name__
            raise ShapeMismatchError(f"{what}: takes tiles, not {kind}", loc)
    shape = xs[0].type.shape
    if any(x.type.shape != shape for x in xs):
        raise ShapeMismatchError(f"{what}: the tiles must have one shape, not {[list(x.type.shape) for x in xs]}", loc)
    if not 0 <= axis < len(shape):
        raise ShapeMismatchError(f"{what}: axis {axis} is out of range for a {len(shape)}-D tile", loc)
    return list(xs), shape


def scan(tr, xs: list[Value], axis: int, reverse: bool, combine: Combine, what: str, loc: Loc) -> list[Value]:
    """The inclusive scans of the tiles `xs` along `axis` by `combine` (see the module docstring), active
    everywhere (docs/language.md 6.8): each step's `where` keeps an element's own activity, so the results are
    marked `AllActive` unless the trace knows the tiles to be active everywhere already."""
    xs, shape = _prepare(xs, axis, what, loc)
    active = all(active_everywhere(tr, x) for x in xs)
    n = shape[axis]
    i = tr.bind(axis_index(shape, axis, loc), "i", loc)
    d = 1
    while d < n:
        c = _full(d, shape, loc)
        if reverse:
            j = Binary(BinOp.ADD, i, c, loc=loc)
            ok = tr.bind(Compare(CmpOp.LT, j, _full(n, shape, loc), loc=loc), "has", loc)
        else:
            j = Binary(BinOp.SUB, i, c, loc=loc)
            ok = tr.bind(Compare(CmpOp.GE, i, c, loc=loc), "has", loc)
        partner = tr.bind(Where(ok, j, i, loc=loc), "j", loc)
        xs = _step(tr, xs, axis, partner, ok, None, combine, what, loc)
        d *= 2
    return xs if active else [AllActive(x, loc=loc) for x in xs]


def reduce(tr, xs: list[Value], axis: int, combine: Combine, what: str, loc: Loc) -> list[Value]:
    """The reductions of the tiles `xs` along `axis` (which disappears) by `combine`."""
    xs, shape = _prepare(xs, axis, what, loc)
    n = shape[axis]
    i = tr.bind(axis_index(shape, axis, loc), "i", loc)
    d = 1
    while d < n:
        c = _full(d, shape, loc)
        j = Binary(BinOp.XOR, i, c, loc=loc)
        ok = tr.bind(Compare(CmpOp.LT, j, _full(n, shape, loc), loc=loc), "has", loc)
        partner = tr.bind(Where(ok, j, i, loc=loc), "j", loc)
        upper = tr.bind(Compare(CmpOp.NE, Binary(BinOp.AND, i, c, loc=loc), _full(0, shape, loc), loc=loc),
                        "upper", loc)
        xs = _step(tr, xs, axis, partner, ok, upper, combine, what, loc)
        d *= 2
    out_shape = shape[:axis] + shape[axis + 1:]
    first = sem.converted(0, DType.I32, shape[:axis] + (1,) + shape[axis + 1:], loc)
    return [tr.bind(Reshape(Gather(x, first, axis, loc=loc), out_shape, loc=loc), "reduced", loc) for x in xs]


def tensors(input, what: str, loc: Loc) -> tuple[list[Value], bool]:  # noqa: A002
    """The tensors of `input` (one, or a tuple), and whether it was a tuple."""
    many = isinstance(input, (tuple, list))
    xs = list(input) if many else [input]
    for x in xs:
        if not isinstance(x, Value) or isinstance(x.type, PtrType) or not x.type.shape:
            kind = x.type if isinstance(x, Value) else type(x).__name__
            raise KernelTypeError(f"{what} takes tensors, not {kind}", loc)
    return xs, many


def combine_function(tr, fn, what: str, loc: Loc) -> Combine:
    """`combine(lhs, rhs)` calling the helper `fn` (a `@metile.func`, or a `@triton.jit` function in Triton's
    kernels; inlined) with the values of both sides."""
    helper = tr.dialect.helpers.get(fn.__class__)
    if helper is None:
        raise KernelTypeError(f"{what}: the combine function must be a function kernels call ({tr.dialect.name}'s "
                              f"helpers), not {type(fn).__name__}", loc)
    func = helper(fn)

    def combine(lhs: list, rhs: list) -> list:
        return call_func(tr, func, [*lhs, *rhs], {}, loc)
    return combine


def static_axis(axis, rank: int, what: str, loc: Loc) -> int:
    a = static_int(axis, "the axis", loc)
    if not -rank <= a < rank:
        raise KernelTypeError(f"{what}: axis {a} is out of range for a {rank}-D tensor", loc)
    return a % rank


def reduce_with(tr, loc: Loc, input, axis, combine: Combine, keep_dims, what: str):  # noqa: A002
    """`input` (a tile or a tuple of tiles) reduced along `axis` (all of them, flattened, when None) by `combine`,
    the reduced axes kept as 1 when `keep_dims`; a tuple for a tuple."""
    xs, many = tensors(input, what, loc)
    shape = xs[0].type.shape
    if axis is None:
        flat = [x if len(shape) == 1 else tr.bind(Reshape(x, (x.type.size,), loc=loc), "flat", loc) for x in xs]
        out = reduce(tr, flat, 0, combine, what, loc)
    else:
        out = reduce(tr, xs, static_axis(axis, len(shape), what, loc), combine, what, loc)
    if not isinstance(keep_dims, bool):
        raise KernelTypeError(f"{what}: keep_dims must be True or False, not {keep_dims!r}", loc)
    if keep_dims:
        if axis is None:
            out = [Reshape(sem.to_ir(y, loc), (1,) * len(shape), loc=loc) for y in out]
        else:
            out = [ExpandDims(y, static_axis(axis, len(shape), what, loc), loc=loc) for y in out]
    return tuple(out) if many else out[0]


# ---- the functions of metile's language


def reduce_fn(tr, loc, x, axis, combine_fn, keep_dims):
    what = "metile.reduce"
    return reduce_with(tr, loc, x, axis, combine_function(tr, combine_fn, what, loc), keep_dims, what)


def scan_fn(tr, loc, x, axis, combine_fn, reverse):
    what = "metile.associative_scan"
    xs, many = tensors(x, what, loc)
    if not isinstance(reverse, bool):
        raise KernelTypeError(f"{what}: reverse must be True or False, not {reverse!r}", loc)
    out = scan(tr, xs, static_axis(axis, len(xs[0].type.shape), what, loc), reverse,
               combine_function(tr, combine_fn, what, loc), what, loc)
    return tuple(out) if many else out[0]


def gather_fn(tr, loc, x, index, axis):
    check_gather_tiles(x, index, loc, "metile.gather")   # the shapes are checked along the axis given
    rank = len(x.type.shape)
    if len(index.type.shape) != rank:
        raise ShapeMismatchError(f"metile.gather: the index must have the source's rank ({rank})", loc)
    return gather(tr, x, index, static_axis(axis, rank, "metile.gather", loc), loc)


LIBRARY = {L.reduce: reduce_fn, L.associative_scan: scan_fn, L.gather: gather_fn}


__all__ = ["LIBRARY", "Combine", "axis_index", "check_gather", "combine_function", "gather", "reduce", "reduce_with",
           "scan", "static_axis", "tensors"]
