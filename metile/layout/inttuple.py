"""Integer tuples: the shapes, strides and coordinates of layouts, and CuTe's arithmetic on them.

An ``IntTuple`` is an ``int`` or a non-empty tuple of IntTuples, e.g. ``(4, (2, 2))``. Its *profile* is its
nesting structure; two IntTuples are *congruent* when their profiles are equal. Coordinates are ordered
colexicographically (the leftmost mode varies fastest), as in CuTe.
"""

from __future__ import annotations

import operator
from typing import TypeAlias

IntTuple: TypeAlias = "int | tuple[IntTuple, ...]"


def is_int(x: object) -> bool:
    """True for a plain integer (``bool`` is not an integer here)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_tuple(x: object) -> bool:
    return isinstance(x, tuple)


def as_int_tuple(x: object, what: str = "value") -> IntTuple:
    """Normalise ints, integer-likes (numpy ints) and nested lists/tuples to an IntTuple of plain ints."""
    match x:
        case bool():
            raise TypeError(f"{what} must be an int or a nested tuple of ints, got {x!r}")
        case int():
            return int(x)
        case tuple() | list():
            if not x:
                raise ValueError(f"{what} contains an empty tuple; every tuple needs at least one mode")
            return tuple(as_int_tuple(e, what) for e in x)
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{what} must be an int or a nested tuple of ints, got {x!r}") from None


def format_int_tuple(t: IntTuple) -> str:
    """CuTe's notation: ints bare, tuples as ``(a,b)`` without spaces, e.g. ``(4,(2,2))``."""
    if isinstance(t, tuple):
        return "(" + ",".join(format_int_tuple(e) for e in t) + ")"
    return str(t)


def leaves(t: IntTuple) -> tuple[int, ...]:
    """The integers of ``t`` in order, always as a flat tuple: ``leaves(3) == (3,)``."""
    if isinstance(t, tuple):
        out: list[int] = []
        for e in t:
            if isinstance(e, tuple):
                out.extend(leaves(e))
            else:
                out.append(e)
        return tuple(out)
    return (t,)


def flatten_tuple(t: IntTuple) -> IntTuple:
    """Depth <= 1 with the same leaves: ``(4,(2,2)) -> (4,2,2)``; an int stays an int."""
    return leaves(t) if isinstance(t, tuple) else t


def unflatten(flat: tuple[int, ...], profile: IntTuple) -> IntTuple:
    """Inverse of ``leaves``: rebuild ``profile``'s nesting from the flat values.

    Law: ``unflatten(leaves(t), t) == t``, and ``congruent(unflatten(v, p), p)`` when ``v`` has as many values
    as ``p`` has leaves.
    """
    it = iter(flat)

    def go(p: IntTuple) -> IntTuple:
        return tuple(go(e) for e in p) if isinstance(p, tuple) else next(it)

    out = go(profile)
    if next(it, None) is not None:
        raise ValueError(f"unflatten: {len(flat)} values do not fit the profile {format_int_tuple(profile)}")
    return out


def product(t: IntTuple) -> int:
    """The product of all leaves (the size of a shape)."""
    if isinstance(t, tuple):
        p = 1
        for e in t:
            p *= product(e) if isinstance(e, tuple) else e
        return p
    return t


def rank(t: IntTuple) -> int:
    """Number of top-level modes: 1 for an int."""
    return len(t) if isinstance(t, tuple) else 1


def depth(t: IntTuple) -> int:
    """Nesting depth: 0 for an int, 1 for a flat tuple."""
    return 1 + max(depth(e) for e in t) if isinstance(t, tuple) else 0


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Same profile (hierarchical structure), regardless of values."""
    match a, b:
        case tuple(), tuple():
            return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b, strict=True))
        case (tuple(), _) | (_, tuple()):
            return False
    return True


def compatible(a: IntTuple, b: IntTuple) -> bool:
    """CuTe's ``compatible``: every coordinate of shape ``a`` is also a coordinate of shape ``b``.

    Equivalently, ``size(a) == size(b)`` and at each leaf of ``a`` the matching sub-shape of ``b`` has that
    size.
    """
    match a, b:
        case tuple(), tuple():
            return len(a) == len(b) and all(compatible(x, y) for x, y in zip(a, b, strict=True))
        case tuple(), _:
            return False
    return a == product(b)


def prefix_product(t: IntTuple, init: int = 1) -> IntTuple:
    """Exclusive colexicographic prefix product with ``t``'s profile: ``(4,(2,2)) -> (1,(4,8))``.

    This is the compact column-major stride of the shape ``t``.
    """
    acc = init
    out = []
    for v in leaves(t):
        out.append(acc)
        acc *= v
    return unflatten(tuple(out), t) if isinstance(t, tuple) else init


def suffix_product(t: IntTuple, init: int = 1) -> IntTuple:
    """Exclusive product from the right with ``t``'s profile: ``(4,(2,2)) -> (4,(2,1))`` (row-major)."""
    acc = init
    out = []
    for v in reversed(leaves(t)):
        out.append(acc)
        acc *= v
    return unflatten(tuple(reversed(out)), t) if isinstance(t, tuple) else init


def _by_tuple(name: str, a: tuple, b: tuple) -> list[tuple]:
    if len(a) != len(b):
        raise ValueError(f"{name}: ranks differ in {format_int_tuple(a)} / {format_int_tuple(b)}")
    return list(zip(a, b, strict=True))


def ceil_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """CuTe's ``ceil_div``: ints round up; a tuple by an int folds left, ``(4,5,6)/40 -> (1,1,3)``.

    A tuple by a tuple divides mode by mode; an int by a tuple divides by the tuple's size.
    """
    match a, b:
        case tuple(), tuple():
            return tuple(ceil_div(x, y) for x, y in _by_tuple("ceil_div", a, b))
        case tuple(), int():
            out = []
            for x in a:
                out.append(ceil_div(x, b))
                b = ceil_div(b, product(x))
            return tuple(out)
    return -(-a // product(b))


def shape_div(a: IntTuple, b: IntTuple) -> IntTuple:
    """CuTe's ``shape_div``: like ``ceil_div`` but each int division must be exact one way or the other.

    For ints, ``a % b == 0 or b % a == 0`` is required (CuTe's divisibility condition); the result is then
    ``a // b`` or 1. A tuple by an int folds left: ``shape_div((4,5,6), 40) == (1,1,3)``.
    """
    match a, b:
        case tuple(), tuple():
            return tuple(shape_div(x, y) for x, y in _by_tuple("shape_div", a, b))
        case tuple(), int():
            out = []
            for x in a:
                out.append(shape_div(x, b))
                b = shape_div(b, product(x))
            return tuple(out)
    b = product(b)
    if a % b != 0 and b % a != 0:
        raise ValueError(f"shape_div: divisibility condition fails: neither of {a} and {b} divides the other")
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    """The least multiple of ``b`` that is >= ``a``."""
    return -(-a // b) * b


def crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple | None = None) -> int:
    """Map a coordinate to an index: the inner product of the natural coordinate with ``stride``.

    ``stride`` defaults to the compact column-major stride of ``shape``. A tuple coordinate must be congruent
    to the shape mode it indexes; an int coordinate for a tuple mode is a 1-D index into that mode, split
    colexicographically, and the mode's last sub-mode takes the remainder (CuTe's natural extension past
    the end). Law: ``crd2idx(idx2crd(i, S), S) == i`` for ``0 <= i < size(S)``.
    """
    if stride is None:
        stride = prefix_product(shape)
    match crd, shape:
        case tuple(), tuple() if len(crd) == len(shape):
            return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride, strict=True))
        case tuple(), _:
            raise ValueError(
                f"coordinate {format_int_tuple(crd)} does not match the shape {format_int_tuple(shape)}"
            )
        case _, tuple():
            result = 0
            for s, d in zip(shape[:-1], stride[:-1], strict=True):
                n = product(s)
                result += crd2idx(crd % n, s, d)
                crd //= n
            return result + crd2idx(crd, shape[-1], stride[-1])
    return crd * stride


def idx2crd(idx: IntTuple, shape: IntTuple, stride: IntTuple | None = None) -> IntTuple:
    """Map an index to the natural (hierarchical, colexicographic) coordinate of ``shape``.

    Each leaf gets ``(idx // d) % s``, with ``d`` from ``stride`` (default: the compact column-major stride),
    as in CuTe. A tuple index is mapped mode by mode: ``idx2crd((1, 5), (3, (2, 3))) == (1, (1, 2))``.
    Law: ``idx2crd(crd2idx(c, S), S) == c`` for every in-range coordinate ``c`` of ``S``.
    """
    match idx, shape:
        case tuple(), tuple() if len(idx) == len(shape):
            if stride is None:  # each mode of a tuple index is an index into that mode alone
                return tuple(idx2crd(i, s) for i, s in zip(idx, shape, strict=True))
            return tuple(idx2crd(i, s, d) for i, s, d in zip(idx, shape, stride, strict=True))
        case tuple(), _:
            raise ValueError(
                f"index {format_int_tuple(idx)} does not match the shape {format_int_tuple(shape)}"
            )
    if stride is None:
        stride = prefix_product(shape)
    if isinstance(shape, tuple):
        return tuple(idx2crd(idx, s, d) for s, d in zip(shape, stride, strict=True))
    return (idx // stride) % shape
