"""The layouts of shape changes: where element `i` (row-major) of the result of a permutation or of taking one index
of a dimension is in its source (row-major), as a `metile.layout.Layout` the lowering evaluates with
`metal_ops.apply_layout`.

A row-major tile of shape `(s0, ..., sn)` is CuTe's layout `(sn, ..., s0) : (1, sn, ...)` with its modes reversed
(CuTe counts the first mode fastest). A permutation is the same source strides in the result's order; taking index
`k` of dimension `d` drops that mode and adds `k * stride(d)`. Both are coalesced, so that dimensions that stay
together become one mode (a reshape needs no layout: it keeps every element's row-major index).
"""

from __future__ import annotations

import functools

from metile.layout import Layout, coalesce
from metile.rewrite.distribute import row_major_strides


@functools.cache
def permute_layout(shape: tuple[int, ...], order: tuple[int, ...]) -> Layout:
    """Result index -> source index for the permutation `order` of a tile of `shape` (dimension `i` of the result is
    dimension `order[i]` of the source). Law: it is numpy's `arange(size).reshape(shape).transpose(order).ravel()`."""
    strides = row_major_strides(shape)
    return coalesce(Layout(tuple(shape[o] for o in reversed(order)), tuple(strides[o] for o in reversed(order))))


@functools.cache
def take_layout(shape: tuple[int, ...], axis: int) -> tuple[Layout, int]:
    """`(layout, stride)`: result index -> source index of element 0 along `axis`, and the source stride of `axis`
    (index `k` of it is `layout(i) + k * stride`). Law: `layout(i) + k * stride` is numpy's
    `arange(size).reshape(shape).take(k, axis).ravel()[i]`."""
    strides = row_major_strides(shape)
    kept = [d for d in range(len(shape)) if d != axis][::-1]
    if not kept:
        return Layout(1, 0), strides[axis]
    return coalesce(Layout(tuple(shape[d] for d in kept), tuple(strides[d] for d in kept))), strides[axis]


__all__ = ["permute_layout", "take_layout"]
