"""Triton's reductions and scans with a combine function (`tl.reduce`, `tl.associative_scan`, and the standard
library's `tl.xor_sum`, `tl.reduce_or`), `tl.gather`, and the sorting networks, flips and histograms of
`metile.frontend.sorting` (`tl.sort`, `tl.topk`, `tl.bitonic_merge`, `tl.flip`, `tl.histogram`), in a `@triton.jit`
kernel.

Each is built by `metile.frontend.combine` from gathers: the combine function, a `@triton.jit` function, is inlined
on whole tiles (Triton calls it on scalars; its operations are element-wise, so the values are the same), once per
step. As in Triton 3.4: `input` is a tensor or a tuple of tensors of one shape (the result is then a tuple),
`combine_fn` takes the values of both sides, one per tensor, and returns one value per tensor of that tensor's type;
`axis=None` reduces the flattened tensors; `keep_dims` keeps the reduced axis (every axis for `axis=None`) as 1;
`reverse=True` scans from the end (the scan of the flipped tensor, flipped back). `xor_sum` and `reduce_or` take
integers (int1 included).
"""

from __future__ import annotations

from metile.frontend import combine as K
from metile.frontend import sorting as S
from metile.frontend.errors import KernelTypeError
from metile.ir.types import DType
from metile.ir.values import Value
from metile.triton import semantic as ts
from metile.triton.language import core as C


def reduce(tr, loc, input, axis, combine_fn, keep_dims):  # noqa: A002
    what = "tl.reduce"
    return K.reduce_with(tr, loc, input, axis, K.combine_function(tr, combine_fn, what, loc), keep_dims, what)


def associative_scan(tr, loc, input, axis, combine_fn, reverse):  # noqa: A002
    what = "tl.associative_scan"
    xs, many = K.tensors(input, what, loc)
    if not isinstance(reverse, bool):
        raise KernelTypeError(f"{what}: reverse must be True or False, not {reverse!r}", loc)
    out = K.scan(tr, xs, K.static_axis(axis, len(xs[0].type.shape), what, loc), reverse,
                 K.combine_function(tr, combine_fn, what, loc), what, loc)
    return tuple(out) if many else out[0]


def _bitwise(op: str, name: str):
    def impl(tr, loc, input, axis, keep_dims):  # noqa: A002
        what = f"tl.{name}"
        xs, _ = K.tensors(input, what, loc)
        dt = xs[0].type.dtype
        if not (dt.is_int or dt is DType.BOOL):
            raise KernelTypeError(f"{name} only supported for integers", loc)

        def combine(lhs: list, rhs: list) -> list:
            return [ts.binary(op, lhs[0], rhs[0], loc)]
        return K.reduce_with(tr, loc, input, axis, combine, keep_dims, what)
    return impl


def _reduce_or(tr, loc, input, axis, keep_dims):  # noqa: A002
    return _bitwise("or", "reduce_or")(tr, loc, input, axis, keep_dims)


def gather(tr, loc, src, index, axis):
    xs, _ = K.tensors(src, "tl.gather", loc)
    rank = len(xs[0].type.shape)
    if not isinstance(index, Value) or len(index.type.shape) != rank:
        raise KernelTypeError(f"tl.gather: the index must be a tensor of the source's rank ({rank})", loc)
    return K.gather(tr, xs[0], index, K.static_axis(axis, rank, "tl.gather", loc), loc)


def sort(tr, loc, x, dim, descending):
    return S.sort(tr, x, dim, descending, loc, "tl.sort")


def topk(tr, loc, x, k, dim):
    """Triton 3.4's `topk`: the `k` largest elements along the last axis, largest first."""
    if isinstance(k, Value) or not isinstance(k, int) or isinstance(k, bool):
        raise KernelTypeError(f"tl.topk: k must be a compile-time int, not {k!r}", loc)
    return S.sort(tr, x, dim, True, loc, "tl.topk", k=k)


def bitonic_merge(tr, loc, x, dim, descending):
    return S.bitonic_merge(tr, x, dim, descending, loc, "tl.bitonic_merge")


def flip(tr, loc, x, dim):
    return S.flip(tr, x, dim, loc, "tl.flip")


def histogram(tr, loc, input, num_bins, mask):  # noqa: A002
    return S.histogram(tr, input, num_bins, mask, loc, "tl.histogram")


COMBINE = {
    C.reduce: reduce, C.associative_scan: associative_scan, C.xor_sum: _bitwise("xor", "xor_sum"),
    C.reduce_or: _reduce_or, C.gather: gather, C.sort: sort, C.topk: topk, C.bitonic_merge: bitonic_merge,
    C.flip: flip, C.histogram: histogram,
}

__all__ = ["COMBINE"]
