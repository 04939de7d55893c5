"""Layout division (tiling): ``logical_divide`` and its ``zipped``, ``tiled`` and ``flat`` rearrangements.

For a layout of shape ``(M, N, L, ...)`` and a tiler ``<TileM, TileN>``:

* ``logical_divide``: ``((TileM,RestM), (TileN,RestN), L, ...)``
* ``zipped_divide``:  ``((TileM,TileN), (RestM,RestN,L,...))``
* ``tiled_divide``:   ``((TileM,TileN), RestM, RestN, L, ...)``
* ``flat_divide``:    ``(TileM, TileN, RestM, RestN, L, ...)``
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._memo import memo
from .compose import Tiler, _by_mode, _compose
from .inttuple import IntTuple, product
from .inverse import complement
from .layout import Layout, concat, modes
from .swizzle import ComposedLayout


@memo
def logical_divide(layout: Any, tiler: Tiler) -> Any:
    """``A ⊘ B = A o (B, B*)`` with ``B* = complement(B, size(A))``: split A into (tile, rest).

    Mode 0 of the result holds the elements B picks out (``result[0] == composition(A, B)``); mode 1 iterates
    over the repetitions of the tile. Law: ``logical_divide(A, B) == composition(A, make_layout(B,
    complement(B, size(A))))``; for a tuple tiler it applies mode by mode, keeping the extra modes of A.
    When ``size(B)`` does not divide ``size(A)`` the rest mode is rounded up and runs past A's size (A's last
    mode keeps counting), as in CuTe. Raises ``ValueError`` when the complement or the composition is
    inadmissible, naming which.
    """
    if isinstance(layout, ComposedLayout):
        return ComposedLayout(layout.outer, layout.offset, logical_divide(layout.inner, tiler))
    return _by_mode(layout, tiler, _divide_layout, "logical_divide")


def _divide_layout(a: Layout, b: Layout) -> Layout:
    try:
        return _compose(a, concat(b, complement(b, product(a.shape))))
    except ValueError as e:
        raise ValueError(f"logical_divide({a}, {b}): {e}") from e


def unzip_tiles(layout: Layout, tiler: Tiler) -> Layout:
    """Gather the (tile, rest) pairs that a by-mode divide or product left at ``tiler``'s leaves.

    ``((t0,r0),(t1,r1),x) -> ((t0,t1),(r0,r1,x))`` for ``tiler = <B0,B1>``; a ``None`` leaf contributes a
    ``1:0`` tile and its whole mode as rest. This is CuTe's ``tile_unzip`` (``zip2_by``).
    """
    return Layout._raw(*_unzip(layout.shape, layout.stride, tiler))


def _unzip(shape: IntTuple, stride: IntTuple, tiler: Tiler) -> tuple[IntTuple, IntTuple]:
    if not isinstance(tiler, tuple):
        if tiler is None:
            return (1, shape), (0, stride)
        return shape, stride
    if not isinstance(shape, tuple):
        shape, stride = (shape,), (stride,)
    k = len(tiler)
    parts = [_unzip(s, d, t) for s, d, t in zip(shape, stride, tiler, strict=False)]
    tiles = (tuple([p[0][0] for p in parts]), tuple([p[1][0] for p in parts]))
    rests = (tuple([p[0][1] for p in parts]) + shape[k:], tuple([p[1][1] for p in parts]) + stride[k:])
    return (tiles[0], rests[0]), (tiles[1], rests[1])


def _on_layout(layout: Any, fn: Callable[[Layout], Layout]) -> Any:
    if isinstance(layout, ComposedLayout):
        return ComposedLayout(layout.outer, layout.offset, fn(layout.inner))
    return fn(layout)


@memo
def zipped_divide(layout: Any, tiler: Tiler) -> Any:
    """``((TileM,TileN,...), (RestM,RestN,...,L,...))``: the tile in mode 0, every rest in mode 1.

    Law: ``zipped_divide(A, B)[0] == composition(A, B)`` (up to by-mode grouping of a tuple tiler), and the
    offset of tile ``k`` is ``zipped_divide(A, B)(0, k)``.
    """

    def go(a: Layout) -> Layout:
        return unzip_tiles(logical_divide(a, tiler), tiler)

    return _on_layout(layout, go)


@memo
def tiled_divide(layout: Any, tiler: Tiler) -> Any:
    """``((TileM,TileN,...), RestM, RestN, ..., L, ...)``: ``zipped_divide`` with its rest mode unpacked."""

    def go(a: Layout) -> Layout:
        z = unzip_tiles(logical_divide(a, tiler), tiler)
        return concat(z[0], *modes(z[1]))

    return _on_layout(layout, go)


@memo
def flat_divide(layout: Any, tiler: Tiler) -> Any:
    """``(TileM, TileN, ..., RestM, RestN, ..., L, ...)``: ``zipped_divide`` with both modes unpacked."""

    def go(a: Layout) -> Layout:
        z = unzip_tiles(logical_divide(a, tiler), tiler)
        return concat(*modes(z[0]), *modes(z[1]))

    return _on_layout(layout, go)
