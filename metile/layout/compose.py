"""Functional composition of layouts, ``R = A o B`` with ``R(c) == A(B(c))``, and when it is admissible.

B may be a layout, an int ``n`` (the layout ``n:1``), ``None`` (leave A as it is) or a tuple *tiler*
applied to A mode by mode. A may also be a swizzle (giving a ``ComposedLayout``) or a ``ComposedLayout``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ._memo import memo
from .inttuple import IntTuple, format_int_tuple
from .layout import Layout, _coalesce_flat, concat, flat_modes, modes
from .swizzle import ComposedLayout, Swizzle

Tiler = Any  # Layout | int | None | tuple[Tiler, ...]


def format_tiler(t: Tiler) -> str:
    """CuTe's tiler notation: layouts as ``s:d``, tuples of tilers as ``<a,b>``, ``None`` as ``_``."""
    match t:
        case tuple():
            return "<" + ",".join(format_tiler(e) for e in t) + ">"
        case None:
            return "_"
    return str(t)


@memo
def composition(a: Any, b: Tiler) -> Any:
    """``A o B``: the layout ``R`` with ``R(c) == A(B(c))`` for every coordinate ``c`` of B.

    Laws: ``shape(R)`` is compatible with ``shape(B)`` (B's coordinates index R); ``R(i) == A(B(i))`` for all
    ``i < size(B)``, where A past its size follows its natural extension (the last mode keeps counting).
    Composition distributes over B's modes, ``A o (B0, B1) == (A o B0, A o B1)``, and each leaf of the result
    is coalesced. With a tuple tiler, ``composition(A, <B0, B1>) == (A[0] o B0, A[1] o B1, A[2], ...)``.

    Admissibility (checked, raising ``ValueError`` that names the condition and the values) follows CuTe's
    walk: A is flattened and coalesced to ``(s0,...,sk):(d0,...,dk)``; then each leaf ``n:r`` of B with
    ``n > 1`` and ``r > 0`` walks A's modes except the last, first dividing out the stride, then modding out
    the size:

    * *stride divisibility*: while ``r > 1``, a mode with ``r % s_i == 0`` is stepped over (``r //= s_i``);
      a mode with ``r > s_i`` that ``r`` is not a multiple of is an error (CuTe asserts too). Otherwise the
      mode offers ``t_i = ceil(s_i / r)`` steps of stride ``r * d_i``, and ``r`` becomes 1;
    * *shape divisibility*: if the remaining size ``n <= t_i`` the leaf ends inside that mode, whatever the
      sizes: ``(3,2,4):(24,12,1) o 2:1 == 2:24`` and ``(3,4):(1,10) o 2:2 == 2:2``. Otherwise the leaf
      carries into the next mode, which needs ``r`` to divide ``s_i`` and ``t_i`` to divide ``n``
      (``n //= t_i``). CuTe checks only ``n % t_i == 0`` there, so for ``(3,4):(1,10) o 4:2`` it gives
      ``(2,2):(2,10)`` while ``A(B(2)) == A(4) == 11``; here that is an error;
    * *distributivity* (checked across all leaves of B): each leaf's image is a box of A's coordinates, and
      in every mode of A but the last, the leaves' largest coordinates must add up to less than the mode's
      size. Otherwise ``B0(i) + B1(j)`` carries from one mode of A into the next and ``A o B`` is not
      ``(A o B0, A o B1)``. CuTe's documentation assumes this holds when B is injective, but it does not:
      for ``(6,2):(0,1) o (2,3):(3,2)`` CuTe's algorithm gives ``(2,3):(0,0)`` while ``A(B(1,2)) = A(7) = 1``.
      Here that is an error.

    A's last mode takes whatever stride and size remain (``(4,2):(1,10) o 16:1 == (4,4):(1,10)``). Leaves of B
    with size 1 give ``1:0`` and leaves with stride 0 give ``n:0``, whatever A is. Negative strides in B are
    rejected.
    """
    match a:
        case Swizzle():
            if not isinstance(b, Layout):
                raise TypeError(f"composition({a}, ...) needs a Layout on the right, got {b!r}")
            return ComposedLayout(a, 0, b)
        case ComposedLayout(outer=outer, offset=offset, inner=inner):
            return ComposedLayout(outer, offset, composition(inner, b))
        case Layout():
            return _compose_tiler(a, b)
    raise TypeError(f"composition: expected a Layout, Swizzle or ComposedLayout on the left, got {a!r}")


def _compose_tiler(a: Layout, b: Tiler) -> Layout:
    return _by_mode(a, b, _compose, "composition")


def _by_mode(a: Layout, tiler: Tiler, leaf: Callable[[Layout, Layout], Layout], name: str) -> Layout:
    """Apply ``leaf`` to layouts, recursing mode by mode through tuple tilers; ``None`` keeps a mode."""
    match tiler:
        case None:
            return a
        case Layout():
            return leaf(a, tiler)
        case int() if not isinstance(tiler, bool):
            if tiler < 1:
                raise ValueError(
                    f"{name}({a}, {tiler}): an int tiler is the layout {tiler}:1 and must be >= 1"
                )
            return leaf(a, Layout._raw(tiler, 1))
        case tuple():
            ms = modes(a)
            if len(tiler) > len(ms):
                raise ValueError(
                    f"{name}({a}, {format_tiler(tiler)}): the tiler has {len(tiler)} modes but the layout "
                    f"has only {len(ms)}"
                )
            done = [_by_mode(m, t, leaf, name) for m, t in zip(ms, tiler, strict=False)]
            return concat(*done, *ms[len(tiler) :])
    raise TypeError(f"{name}({a}, {tiler!r}): a tiler is a Layout, an int, None or a tuple of tilers")


def _coalesce_x(a: Layout) -> tuple[list[int], list[int]]:
    """Flatten and coalesce A, keeping its function *past* its size: the last mode is never dropped.

    This is CuTe's ``coalesce_x``: ``(4,1):(1,0)`` stays ``(4,1):(1,0)`` because ``A(4) == 0`` there, while
    plain coalesce would give ``4:1``.
    """
    shapes, strides = flat_modes(a)
    out_s = [shapes[-1]]
    out_d = [strides[-1]]
    for s, d in zip(reversed(shapes[:-1]), reversed(strides[:-1]), strict=True):
        if s == 1:
            continue
        if s * d == out_d[0]:
            out_s[0] *= s
            out_d[0] = d
        else:
            out_s.insert(0, s)
            out_d.insert(0, d)
    return out_s, out_d


@functools.lru_cache(maxsize=1 << 16)
def _compose(a: Layout, b: Layout) -> Layout:
    shapes, strides = _coalesce_x(a)
    used = [0] * (len(shapes) - 1)  # per non-last mode of A: the sum of the leaves' largest coordinates
    users: list[list[tuple[int, int]]] = [[] for _ in used]

    def go(s: IntTuple, d: IntTuple) -> tuple[IntTuple, IntTuple]:
        if isinstance(s, tuple):
            parts = [go(x, y) for x, y in zip(s, d, strict=True)]
            return tuple([p[0] for p in parts]), tuple([p[1] for p in parts])
        return _compose_leaf(a, b, shapes, strides, s, d, used, users)

    result = Layout._raw(*go(b.shape, b.stride))
    for i, total in enumerate(used):
        if total >= shapes[i]:
            raise ValueError(
                f"composition({a}, {b}) is inadmissible: B's modes "
                f"{', '.join(f'{n}:{r}' for n, r in users[i])} overlap in mode "
                f"{i} of coalesced A {_fmt_modes(shapes, strides)}: their largest coordinates there add up "
                f"to {total} >= {shapes[i]}, so B's offsets carry into A's next mode and A o B does not "
                "distribute over B's modes"
            )
    return result


def _compose_leaf(
    a: Layout,
    b: Layout,
    shapes: list[int],
    strides: list[int],
    n: int,
    r: int,
    used: list[int],
    users: list[list[tuple[int, int]]],
) -> tuple[IntTuple, IntTuple]:
    """``A o n:r`` for coalesced A given as ``shapes``/``strides``: divide out ``r``, then mod out ``n``.

    Adds to ``used[i]`` the largest coordinate this leaf reaches in A's mode ``i`` (its image is a box of
    A's coordinates: ``granularity * (count - 1)`` in each mode it touches).
    """
    if n == 1:
        return 1, 0
    if r == 0:
        return n, 0
    if r < 0:
        raise ValueError(
            f"composition({a}, {b}) is not supported: B's mode {n}:{r} has a negative stride; "
            "composition needs non-negative strides in B"
        )
    out_s: list[int] = []
    out_d: list[int] = []
    rest_s, rest_d = n, r
    last = len(shapes) - 1
    for i in range(last):
        si, di = shapes[i], strides[i]
        if rest_d % si == 0:  # the stride steps over this whole mode
            rest_d //= si
            continue
        if rest_d > si:
            raise ValueError(
                f"composition({a}, {b}) is inadmissible: stride divisibility fails for B's mode {n}:{r}: "
                f"after dividing the stride through A's earlier modes, the remaining stride {rest_d} is "
                f"larger than A's mode size {si} (mode {i} of coalesced A {_fmt_modes(shapes, strides)}) "
                "and not a multiple of it (CuTe asserts here too)"
            )
        # rest_d < si: this mode takes ceil(si / rest_d) steps of rest_d before carrying into the next
        t = -(-si // rest_d)
        if rest_s <= t:  # the leaf ends inside this mode: no carry, any sizes will do
            count = rest_s
        elif si % rest_d != 0:
            raise ValueError(
                f"composition({a}, {b}) is inadmissible: stride divisibility fails for B's mode {n}:{r}: "
                f"the remaining stride {rest_d} does not divide A's mode size {si} (mode {i} of coalesced A "
                f"{_fmt_modes(shapes, strides)}) and the {rest_s} remaining steps run past it, so they "
                "carry into the next mode unevenly"
            )
        elif rest_s % t != 0:
            raise ValueError(
                f"composition({a}, {b}) is inadmissible: shape divisibility fails for B's mode {n}:{r}: "
                f"the remaining size {rest_s} is larger than the strided size {t} of A's mode {si}:{di} "
                f"(mode {i} of coalesced A {_fmt_modes(shapes, strides)}) and not a multiple of it; only "
                "A's last mode may take a remainder"
            )
        else:
            count = t
        out_s.append(count)
        out_d.append(rest_d * di)
        used[i] += rest_d * (count - 1)
        users[i].append((n, r))
        rest_s //= count
        rest_d = 1
        if rest_s == 1:
            break
    else:
        out_s.append(rest_s)
        out_d.append(rest_d * strides[last])
    return _coalesce_flat(tuple(out_s), tuple(out_d))


def _fmt_modes(shapes: list[int], strides: list[int]) -> str:
    if len(shapes) == 1:
        return f"{shapes[0]}:{strides[0]}"
    return f"{format_int_tuple(tuple(shapes))}:{format_int_tuple(tuple(strides))}"
