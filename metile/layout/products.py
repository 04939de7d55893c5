"""Layout products: repeat a block layout according to a tiler layout.

For a block of shape ``(M, N, L, ...)`` and a tiler ``<TileM, TileN>``:

* ``logical_product``: ``((M,TileM), (N,TileN), L, ...)``
* ``zipped_product``:  ``((M,N), (TileM,TileN,L,...))``
* ``tiled_product``:   ``((M,N), TileM, TileN, L, ...)``
* ``flat_product``:    ``(M, N, TileM, TileN, L, ...)``

``blocked_product`` and ``raked_product`` are the rank-sensitive forms that interleave like modes, with
CuTe's shapes (not coalesced) and CuTe's rank, ``max(rank(block), rank(tiler))``.
"""

from __future__ import annotations

from ._memo import memo
from .compose import Tiler, _compose
from .divide import _by_mode, unzip_tiles
from .inverse import complement
from .layout import Layout, concat, cosize, modes, size
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


def _zip(x: Layout, y: Layout) -> Layout:
    """CuTe's ``zip`` of two layouts: mode ``i`` of the result is ``(x_i, y_i)``.

    When ``x`` has an int shape the pair is the only mode: ``zip(4:1, 3:4) == ((4,3)):((1,4))``. Otherwise
    ``y``'s mode ``i`` is its ``i``-th top-level mode (``y`` itself when its shape is an int).
    """
    if not isinstance(x.shape, tuple):
        return Layout._raw(((x.shape, y.shape),), ((x.stride, y.stride),))
    ys = modes(y)
    pairs = [concat(xi, ys[i] if i < len(ys) else y) for i, xi in enumerate(modes(x))]
    return concat(*pairs)


@memo
def blocked_product(block: Layout, tiler: Layout) -> Layout:
    """Copy ``block`` contiguously to each position of ``tiler``: mode ``i`` is ``(block_i, tiler_i)``.

    Both are padded with ``1:0`` modes to rank ``R = max(rank(block), rank(tiler))``; with
    ``P = logical_product(block, tiler)``, the result is CuTe's ``zip(P[0], P[1])``, of rank R: mode ``i`` is
    ``(P[0][i], P[1][i])``, not coalesced. A 2x5 row-major block over a 3x4 column-major tiler is
    ``((2,3),(5,4)):((5,10),(1,30))``. Rank-1 operands give a rank-1 layout whose one mode is the pair:
    ``blocked_product(4:1, 3:1) == ((4,3)):((1,4))``. Law: ``size(result, i) == size(block, i) *
    size(tiler, i)``.
    """
    _, p = _padded_product(block, tiler)
    return _zip(p[0], p[1])


@memo
def raked_product(block: Layout, tiler: Layout) -> Layout:
    """Interleave (rake) the copies of ``block``: mode ``i`` is ``(tiler_i, block_i)``, a cyclic distribution.

    Same padding and rank as ``blocked_product``, with each mode's two parts swapped: CuTe's
    ``zip(P[1], P[0])``. ``raked_product(4:1, 3:1) == ((3,4)):((4,1))``. Law: mode ``i`` of the result is
    ``(P[1][i], P[0][i])`` for ``P = logical_product(block, tiler)`` padded to the common rank.
    """
    _, p = _padded_product(block, tiler)
    return _zip(p[1], p[0])
