"""Layout products: repeat a block layout according to a tiler layout.

For a block of shape ``(M, N, L, ...)`` and a tiler ``<TileM, TileN>``:

* ``logical_product``: ``((M,TileM), (N,TileN), L, ...)``
* ``zipped_product``:  ``((M,N), (TileM,TileN,L,...))``
* ``tiled_product``:   ``((M,N), TileM, TileN, L, ...)``
* ``flat_product``:    ``(M, N, TileM, TileN, L, ...)``

``blocked_product`` and ``raked_product`` are the rank-sensitive forms that interleave like modes.
"""

from __future__ import annotations

from ._memo import memo
from .compose import Tiler, _compose
from .divide import _by_mode, unzip_tiles
from .inverse import complement
from .layout import Layout, coalesce, concat, cosize, modes, size
from .layout import append as append_mode


@memo
def logical_product(block: Layout, tiler: Tiler) -> Layout:
    """``A ⊗ B = (A, A* o B)`` with ``A* = complement(A, size(A) * cosize(B))``: B copies of A.

    Mode 0 of the result is A itself; mode 1 has B's shape and steps between the "unique replications" of A
    in the order B gives. Law: ``logical_product(A, B) == make_layout(A, composition(complement(A, size(A) *
    cosize(B)), B))``; for a tuple tiler it applies mode by mode. Raises ``ValueError`` when the complement
    or the composition is inadmissible.
    """
    if not isinstance(block, Layout):
        raise TypeError(f"logical_product needs a Layout block, got {block!r}")
    return _by_mode(block, tiler, _product_layout, "logical_product")


def _product_layout(a: Layout, b: Layout) -> Layout:
    try:
        return concat(a, _compose(complement(a, size(a) * cosize(b)), b))
    except ValueError as e:
        raise ValueError(f"logical_product({a}, {b}): {e}") from e


@memo
def zipped_product(block: Layout, tiler: Tiler) -> Layout:
    """``((M,N,...), (TileM,TileN,...,L,...))``: the block in mode 0, the repetitions in mode 1."""
    return unzip_tiles(logical_product(block, tiler), tiler)


@memo
def tiled_product(block: Layout, tiler: Tiler) -> Layout:
    """``((M,N,...), TileM, TileN, ..., L, ...)``: ``zipped_product`` with its second mode unpacked."""
    z = zipped_product(block, tiler)
    return concat(z[0], *modes(z[1]))


@memo
def flat_product(block: Layout, tiler: Tiler) -> Layout:
    """``(M, N, ..., TileM, TileN, ..., L, ...)``: ``zipped_product`` with both modes unpacked."""
    z = zipped_product(block, tiler)
    return concat(*modes(z[0]), *modes(z[1]))


def _padded_product(block: Layout, tiler: Layout) -> tuple[int, Layout]:
    if not isinstance(block, Layout) or not isinstance(tiler, Layout):
        raise TypeError(f"blocked/raked products take two Layouts, got {block!r} and {tiler!r}")
    r = max(len(block), len(tiler))
    return r, logical_product(append_mode(block, upto=r), append_mode(tiler, upto=r))


@memo
def blocked_product(block: Layout, tiler: Layout) -> Layout:
    """Copy ``block`` contiguously to each position of ``tiler``: mode ``i`` is ``(block_i, tiler_i)``.

    Both are padded with ``1:0`` modes to rank ``R = max(rank(block), rank(tiler))``; the result has rank R
    and mode ``i`` is ``coalesce((block[i], (A* o tiler)[i]))``. A 2x5 row-major block over a 3x4
    column-major tiler is ``(6,(5,4)):(5,(1,30))``. Law: with ``P = logical_product(block, tiler)``, each
    mode is the 1-D function ``result[i](j) == make_layout(P[0][i], P[1][i])(j)`` (coalesce keeps functions),
    so ``size(result, i) == size(block, i) * size(tiler, i)``. Rank-1 operands give ``coalesce(P)``.
    """
    r, p = _padded_product(block, tiler)
    if r == 1:
        return coalesce(p)
    return coalesce(concat(*(concat(x, y) for x, y in zip(modes(p[0]), modes(p[1]), strict=True))), (1,) * r)


@memo
def raked_product(block: Layout, tiler: Layout) -> Layout:
    """Interleave (rake) the copies of ``block``: mode ``i`` is ``(tiler_i, block_i)``, a cyclic distribution.

    Same padding and rank as ``blocked_product``, with each mode's two parts swapped. Law: with
    ``P = logical_product(block, tiler)``, ``result[i](j) == make_layout(P[1][i], P[0][i])(j)``.
    """
    r, p = _padded_product(block, tiler)
    if r == 1:
        return coalesce(concat(p[1], p[0]))
    return coalesce(concat(*(concat(y, x) for x, y in zip(modes(p[0]), modes(p[1]), strict=True))), (1,) * r)
