"""Complement (the rest of a codomain not covered by a layout) and the right and left inverses built on it."""

from __future__ import annotations

from typing import Any

from ._memo import memo
from .inttuple import as_int_tuple, ceil_div, format_int_tuple, leaves, product
from .layout import Layout, _coalesce_flat, coalesce, concat, cosize, flat_modes
from .layout import filter as filter_layout


@memo
def complement(layout: Layout, cotarget: Any = None) -> Layout:
    """The layout ``R`` of the repetitions of ``layout`` that fill the codomain ``[0, cotarget)``.

    ``cotarget`` is an int or a shape (its size is used, folded mode by mode as CuTe's ``ceil_div`` does); it
    defaults to ``cosize(filter(layout))``. Let ``(s0,...,sk):(d0,...,dk)`` be ``filter(layout)`` with its
    modes sorted by stride and ``E = sk*dk``. Then, coalesced,
    ``R = (d0, d1/(s0*d0), ..., dk/(s_{k-1}*d_{k-1}), ceil(M/E)) : (1, s0*d0, ..., s_{k-1}*d_{k-1}, E)``.
    Example: ``complement(4:2, 24) == (2,3):(1,8)``.

    Laws: ``R`` is ordered (``R(i-1) < R(i)``); ``R`` and ``layout`` are disjoint (their images meet only in
    0); ``make_layout(filter(layout), R)`` is a bijection onto ``[0, N)`` with
    ``N = size(filter(layout)) * size(R) = round_up(M, E) >= M``.

    Admissibility (raising ``ValueError``): strides must be non-negative; sorted by stride, each mode must
    start at or after the end of the previous one (``d_i >= s_{i-1}*d_{i-1}``: the layout is injective and its
    modes do not interleave, CuTe's "non-injective layout" check) and at a multiple of it
    (``s_{i-1}*d_{i-1}`` divides ``d_i``). CuTe truncates that last division instead of checking it, which
    leaves holes that ``R`` does not fill (and makes ``left_inverse`` wrong); here it is an error.
    """
    shapes, strides = flat_modes(layout)
    kept = sorted((d, s) for s, d in zip(shapes, strides, strict=True) if s != 1 and d != 0)
    if cotarget is None:
        cotarget = cosize(filter_layout(layout))
    if type(cotarget) is not int:
        cotarget = as_int_tuple(cotarget, "cotarget")
    if any(v < 1 for v in leaves(cotarget)):
        raise ValueError(f"complement({layout}, {format_int_tuple(cotarget)}): the cotarget must be >= 1")
    out_s: list[int] = []
    out_d: list[int] = []
    cur = 1
    prev = ""
    for d, s in kept:
        if d < 0:
            raise ValueError(
                f"complement({layout}, {format_int_tuple(cotarget)}): mode {s}:{d} has a negative stride; "
                "complement needs non-negative strides"
            )
        if d < cur:
            raise ValueError(
                f"complement({layout}, {format_int_tuple(cotarget)}) is inadmissible: the layout is not "
                f"injective or its modes interleave: sorted by stride, mode {s}:{d} starts at {d}, inside "
                f"the extent {cur} of the modes before it ({prev})"
            )
        if d % cur != 0:
            raise ValueError(
                f"complement({layout}, {format_int_tuple(cotarget)}) is inadmissible: sorted by stride, mode "
                f"{s}:{d} must start at a multiple of the extent {cur} of the modes before it ({prev}), but "
                f"{cur} does not divide {d}"
            )
        out_s.append(d // cur)
        out_d.append(cur)
        cur = s * d
        prev = f"{prev}, {s}:{d}" if prev else f"{s}:{d}"
    out_s.append(-(-cotarget // cur) if type(cotarget) is int else product(ceil_div(cotarget, cur)))
    out_d.append(cur)
    return Layout._raw(*_coalesce_flat(tuple(out_s), tuple(out_d)))


@memo
def right_inverse(layout: Layout) -> Layout:
    """The largest compact-domain ``R`` with ``layout(R(i)) == i`` for all ``i < size(R)``.

    Follows the chain of strides ``1, s*1, ...`` through the coalesced layout: the mode with stride 1, then
    the mode whose stride is that mode's extent, and so on; ``R`` maps digits of ``i`` to those modes'
    coordinates. ``R == 1:0`` when no mode has stride 1. Modes with negative strides are not followed.
    Law: ``composition(layout, R)`` is the identity ``size(R):1`` (as a function on ``[0, size(R))``).
    """
    flat = coalesce(layout)
    shapes, strides = flat_modes(flat)
    by_stride: dict[int, tuple[int, int]] = {}
    acc = 1
    for s, d in zip(shapes, strides, strict=True):
        if d > 0 and d not in by_stride:
            by_stride[d] = (s, acc)
        acc *= s
    out_s: list[int] = []
    out_d: list[int] = []
    cur = 1
    while cur in by_stride and by_stride[cur][0] > 1:
        s, r = by_stride[cur]
        out_s.append(s)
        out_d.append(r)
        cur *= s
    return Layout._raw(*_coalesce_flat(tuple(out_s), tuple(out_d)))


@memo
def left_inverse(layout: Layout) -> Layout:
    """A layout ``L`` with ``L(layout(i)) == i`` for all ``i < size(layout)``; ``layout`` must be injective.

    Computed as CuTe does, ``right_inverse(make_layout(layout, complement(layout)))``: the layout together
    with its complement is a bijection, so its right inverse is a two-sided inverse. Raises ``ValueError``
    when the layout is not injective (a stride-0 mode of size > 1, or modes that overlap) or has no
    complement.
    """
    flat = coalesce(layout)
    for s, d in zip(*flat_modes(flat), strict=True):
        if d == 0 and s > 1:
            raise ValueError(
                f"left_inverse({layout}): the layout is not injective: its mode {s}:0 maps {s} indices to "
                "one offset"
            )
    try:
        rest = complement(layout)
    except ValueError as e:
        raise ValueError(f"left_inverse({layout}) needs the complement of the layout: {e}") from e
    return right_inverse(concat(layout, rest))
