"""The ``Layout`` value (a shape and a stride) and the operations on one layout: size, coalesce, filter.

A layout ``shape:stride`` is a function from coordinates of ``shape`` (or 1-D indices, ordered
colexicographically) to integer offsets: the inner product of the natural coordinate with ``stride``.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from .inttuple import (
    IntTuple,
    as_int_tuple,
    congruent,
    crd2idx,
    format_int_tuple,
    leaves,
    prefix_product,
    product,
    suffix_product,
)
from .inttuple import depth as _tuple_depth
from .inttuple import rank as _tuple_rank


@attrs.frozen(init=False, repr=False)
class Layout:
    """A CuTe layout: congruent nested-int-tuple ``shape`` and ``stride``; immutable and hashable.

    ``Layout(shape)`` uses the compact column-major stride (``prefix_product(shape)``). Calling a layout maps
    a coordinate to an offset: ``L(i)`` for a 1-D index, ``L(m, n)`` or ``L((m, (a, b)))`` for a coordinate.
    Laws: ``L(i) == crd2idx(i, shape, stride)``; ``L(idx2crd(i, shape)) == L(i)`` for ``0 <= i < size(L)``;
    a 1-D index past the end continues in the last mode (CuTe's natural extension), which is what
    ``composition`` relies on for a remainder in A's last mode. ``str(L)`` is CuTe's ``shape:stride``.
    """

    shape: IntTuple
    stride: IntTuple

    def __init__(self, shape: Any, stride: Any = None) -> None:
        if not _well_formed(shape, stride):
            shape, stride = _normalise(shape, stride)
        elif stride is None:
            stride = prefix_product(shape)
        _set_shape(self, shape)
        _set_stride(self, stride)

    @classmethod
    def _raw(cls, shape: IntTuple, stride: IntTuple) -> Layout:
        """Construct without validation, for results the algebra already knows to be well formed."""
        self = _new(cls)
        _set_shape(self, shape)
        _set_stride(self, stride)
        return self

    @functools.cached_property
    def _flat(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Flat shape and stride, kept for the repeated 1-D calls of ``__call__``."""
        return leaves(self.shape), leaves(self.stride)

    def __call__(self, *crd: Any) -> int:
        c = crd[0] if len(crd) == 1 else crd
        if type(c) is not int:
            c = as_int_tuple(c, "coordinate")
            if isinstance(c, tuple):
                return crd2idx(c, self.shape, self.stride)
        if c < 0:
            raise ValueError(f"layout {self} called with a negative index {c}")
        shapes, strides = self._flat
        off = 0
        for s, d in zip(shapes[:-1], strides[:-1], strict=True):
            c, r = divmod(c, s)
            off += r * d
        return off + c * strides[-1]

    def __getitem__(self, i: int) -> Layout:
        """Mode ``i`` as a layout. A layout with an int shape has one mode, itself."""
        if isinstance(self.shape, tuple):
            return Layout._raw(self.shape[i], self.stride[i])
        if i in (0, -1):
            return self
        raise IndexError(f"mode {i} of rank-1 layout {self}")

    def __len__(self) -> int:
        return _tuple_rank(self.shape)

    def __iter__(self):
        return iter(modes(self))

    def __str__(self) -> str:
        return f"{format_int_tuple(self.shape)}:{format_int_tuple(self.stride)}"

    def __repr__(self) -> str:
        return f"Layout({self.shape!r}, {self.stride!r})"


_new = object.__new__
_set_shape = Layout.__dict__["shape"].__set__  # slot setters: bypass the frozen __setattr__, as attrs does
_set_stride = Layout.__dict__["stride"].__set__


def _well_formed(shape: Any, stride: Any) -> bool:
    """Fast check: plain positive ints in nested tuples, with a congruent stride of plain ints (or None)."""
    if type(shape) is int:
        return shape >= 1 and (stride is None or type(stride) is int)
    if type(shape) is not tuple or not shape:
        return False
    if stride is None:
        return all(_well_formed(s, None) for s in shape)
    if type(stride) is not tuple or len(stride) != len(shape):
        return False
    return all(_well_formed(s, d) for s, d in zip(shape, stride, strict=True))


def _normalise(shape: Any, stride: Any) -> tuple[IntTuple, IntTuple]:
    """Convert lists and integer-likes, then check sizes and congruence, saying what is wrong."""
    shape = as_int_tuple(shape, "shape")
    for s in leaves(shape):
        if s < 1:
            raise ValueError(f"shape {format_int_tuple(shape)} has a mode of size {s}; sizes must be >= 1")
    if stride is None:
        return shape, prefix_product(shape)
    stride = as_int_tuple(stride, "stride")
    if not congruent(shape, stride):
        raise ValueError(
            f"stride {format_int_tuple(stride)} is not congruent to shape {format_int_tuple(shape)}"
        )
    return shape, stride


def flat_modes(layout: Layout) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The flattened shape and stride of a layout, as two tuples of ints."""
    return leaves(layout.shape), leaves(layout.stride)


def modes(layout: Layout) -> tuple[Layout, ...]:
    """The top-level modes of a layout as layouts (one mode, the layout itself, for an int shape)."""
    if isinstance(layout.shape, tuple):
        return tuple([Layout._raw(s, d) for s, d in zip(layout.shape, layout.stride, strict=True)])
    return (layout,)


def _sub(x: Any, path: tuple[int, ...]) -> Any:
    for i in path:
        if isinstance(x, int):
            if i not in (0, -1):
                raise IndexError(f"mode {i} of the rank-1 shape {x}")
        else:
            x = x[i]
    return x


def _shape_of(x: Any) -> IntTuple:
    if isinstance(x, int | tuple):
        return x
    return x.shape


def size(x: Any, *mode: int) -> int:
    """Size of the domain: the product of the shape. Works on layouts and on shapes (IntTuples).

    ``size(L, i)`` is the size of mode ``i`` (and ``size(L, i, j)`` of its sub-mode ``j``).
    """
    return product(_shape_of(_sub(x, mode)))


def rank(x: Any, *mode: int) -> int:
    """Number of top-level modes (1 for an int shape)."""
    return _tuple_rank(_shape_of(_sub(x, mode)))


def depth(x: Any, *mode: int) -> int:
    """Nesting depth of the shape (0 for an int shape)."""
    return _tuple_depth(_shape_of(_sub(x, mode)))


def shape(x: Any, *mode: int) -> IntTuple:
    """The shape of a layout, or of one of its modes."""
    return _shape_of(_sub(x, mode))


def stride(x: Layout, *mode: int) -> IntTuple:
    """The stride of a layout, or of one of its modes."""
    return _sub(x, mode).stride


def cosize(x: Any, *mode: int) -> int:
    """Size of the codomain: the least ``M`` with ``abs``-strided ``L(i) < M`` for all ``i < size(L)``.

    For non-negative strides this is ``L(size(L) - 1) + 1 == max(L(i)) + 1``, as CuTe defines it.
    For a layout-like object without strides (a swizzled layout), it is ``max(L(i)) + 1`` over the domain.
    """
    x = _sub(x, mode)
    if isinstance(x, Layout):
        return 1 + sum((s - 1) * abs(d) for s, d in zip(*flat_modes(x), strict=True))
    return 1 + max(x(i) for i in range(size(x)))


def make_layout(*parts: Layout) -> Layout:
    """Concatenate layouts as the modes of a new layout: ``make_layout(4:1, 2:8) == (4,2):(1,8)``.

    Law: ``make_layout(A, B)[0] == A`` and ``[1] == B``. One argument gives a rank-1 layout ``(s):(d)``.
    """
    if not parts:
        raise ValueError("make_layout needs at least one mode")
    for p in parts:
        if not isinstance(p, Layout):
            raise TypeError(f"make_layout takes Layouts (use Layout(shape, stride) for tuples), got {p!r}")
    return Layout._raw(tuple([p.shape for p in parts]), tuple([p.stride for p in parts]))


def concat(*parts: Layout) -> Layout:
    """``make_layout`` without argument checks, for the algebra's own results."""
    return Layout._raw(tuple([p.shape for p in parts]), tuple([p.stride for p in parts]))


def col_major(shp: Any) -> Layout:
    """The compact column-major layout of a shape: strides are the exclusive prefix products."""
    shp = as_int_tuple(shp, "shape")
    return Layout(shp, prefix_product(shp))


def row_major(shp: Any) -> Layout:
    """The compact row-major layout of a shape: strides are exclusive suffix products of the flattened shape.

    ``row_major((4,(2,2))) == (4,(2,2)):(4,(2,1))``, CuTe's ``LayoutRight``.
    """
    shp = as_int_tuple(shp, "shape")
    return Layout(shp, suffix_product(shp))


def flatten(x: Any) -> Any:
    """Depth <= 1 with the same leaves, for layouts and IntTuples. The 1-D function is unchanged."""
    if isinstance(x, Layout):
        if not isinstance(x.shape, tuple):
            return x
        return Layout._raw(*flat_modes(x))
    if isinstance(x, tuple):
        return leaves(x)
    return x


def append(layout: Layout, mode: Layout | None = None, *, upto: int | None = None) -> Layout:
    """Append ``mode`` (default ``1:0``) as a new last mode; with ``upto=n``, pad to rank ``n`` instead."""
    mode = Layout._raw(1, 0) if mode is None else mode
    ms = list(modes(layout))
    if upto is None:
        ms.append(mode)
    else:
        if upto < len(ms):
            raise ValueError(f"append: layout {layout} already has rank {len(ms)} > {upto}")
        ms += [mode] * (upto - len(ms))
        if len(ms) == 1:
            return layout
    return make_layout(*ms)


def prepend(layout: Layout, mode: Layout | None = None, *, upto: int | None = None) -> Layout:
    """Prepend ``mode`` (default ``1:0``) as a new first mode; with ``upto=n``, pad in front to rank ``n``."""
    mode = Layout._raw(1, 0) if mode is None else mode
    ms = list(modes(layout))
    if upto is None:
        ms.insert(0, mode)
    else:
        if upto < len(ms):
            raise ValueError(f"prepend: layout {layout} already has rank {len(ms)} > {upto}")
        ms = [mode] * (upto - len(ms)) + ms
        if len(ms) == 1:
            return layout
    return make_layout(*ms)


def select(layout: Layout, *indices: int) -> Layout:
    """The layout made of the chosen top-level modes, in the given order: ``select(L, 1, 0)``."""
    ms = modes(layout)
    return make_layout(*(ms[i] for i in indices))


def _coalesce_flat(shapes: tuple[int, ...], strides: tuple[int, ...]) -> tuple[IntTuple, IntTuple]:
    out_s: list[int] = []
    out_d: list[int] = []
    for s, d in zip(shapes, strides, strict=True):
        if s == 1:
            continue
        if out_s and out_s[-1] * out_d[-1] == d:
            out_s[-1] *= s
        else:
            out_s.append(s)
            out_d.append(d)
    if not out_s:
        return 1, 0
    if len(out_s) == 1:
        return out_s[0], out_d[0]
    return tuple(out_s), tuple(out_d)


def coalesce(layout: Layout, profile: IntTuple | None = None) -> Layout:
    """Simplify to the fewest modes with the same 1-D function: ``(2,(1,6)):(1,(6,2)) -> 12:1``.

    Drops size-1 modes and merges ``s0:d0 ++ s1:s0*d0`` into ``s0*s1:d0``. Laws: ``size(coalesce(L)) ==
    size(L)``, ``depth <= 1``, ``coalesce(L)(i) == L(i)`` for ``i < size(L)``, and coalesce is idempotent.
    With a tuple ``profile``, coalesce each mode ``i < len(profile)`` by ``profile[i]`` (by-mode coalesce)
    and keep the other modes as they are; an int in the profile means "coalesce this mode fully".
    """
    if isinstance(profile, tuple):
        ms = modes(layout)
        if len(profile) > len(ms):
            raise ValueError(f"coalesce: profile {format_int_tuple(profile)} has more modes than {layout}")
        done = [coalesce(m, p) for m, p in zip(ms, profile, strict=False)]
        return concat(*done, *ms[len(profile) :])
    return Layout._raw(*_coalesce_flat(*flat_modes(layout)))


def filter(layout: Layout, profile: IntTuple | None = None) -> Layout:
    """Coalesce after removing stride-0 modes: keeps the image, drops the broadcasts. ``(4,2):(0,1) -> 2:1``.

    Laws: the image ``{filter(L)(i)}`` equals the image of ``L``; ``filter(L)`` has no stride-0 mode unless
    it is ``1:0``. With a tuple ``profile`` it works mode by mode like ``coalesce``.
    """
    if isinstance(profile, tuple):
        ms = modes(layout)
        if len(profile) > len(ms):
            raise ValueError(f"filter: profile {format_int_tuple(profile)} has more modes than {layout}")
        done = [filter(m, p) for m, p in zip(ms, profile, strict=False)]
        return concat(*done, *ms[len(profile) :])
    shapes, strides = flat_modes(layout)
    kept = [(s, d) for s, d in zip(shapes, strides, strict=True) if d != 0]
    return Layout._raw(*_coalesce_flat(tuple(s for s, _ in kept), tuple(d for _, d in kept)))
