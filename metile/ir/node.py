"""The base of every IR node: frozen attrs classes with O(1) hashing and locations outside equality.

`@node` makes a class frozen, slotted and structurally comparable, with `__match_args__` for
`match` statements. Each node hashes its fields once at construction (children are already hashed),
so hashing and memoising a large DAG stays linear. `loc` is keyword-only and excluded from `==`,
`hash` and `repr`, the way Python's `ast` keeps `_attributes` apart from `_fields`.

`map_children(f, n)` rebuilds `n` with `f` applied to each child node (also inside tuples and
persistent vectors), and returns `n` itself when nothing changed, so "changed?" is an `is` test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

import attrs
from pyrsistent import PVector, pvector
from pyrsistent.typing import PVector as PVectorType

from metile.ir.errors import Loc

T = TypeVar("T")


def _cached_hash(self) -> int:
    return self._h


def node(cls: type[T]) -> type[T]:
    """Class decorator for IR nodes (use it on every node class, never a bare `attrs.frozen`)."""
    cls = attrs.frozen(cls)
    cls.__hash__ = _cached_hash
    return cls


@node
class Node:
    loc: Loc | None = attrs.field(default=None, eq=False, kw_only=True, repr=False)
    _h: int = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        names = _EQ_NAMES.get(type(self)) or _eq_names(type(self))
        object.__setattr__(self, "_h", hash((type(self).__qualname__, tuple([getattr(self, a) for a in names]))))


_EQ_NAMES: dict[type, tuple[str, ...]] = {}


def _eq_names(cls: type) -> tuple[str, ...]:
    """The names of the fields of `cls` that take part in equality (cached per class)."""
    names = _EQ_NAMES[cls] = tuple(a.name for a in attrs.fields(cls) if a.eq)
    return names


def _eq_fields(n: Node) -> tuple[attrs.Attribute, ...]:
    return tuple(a for a in attrs.fields(type(n)) if a.eq)


def _map_value(f: Callable[[Node], Node], v):
    """Apply `f` to the nodes inside one field value; returns `v` itself when nothing changed."""
    if isinstance(v, Node):
        return f(v)
    if isinstance(v, tuple):
        new = tuple(_map_value(f, x) for x in v)
        return v if all(a is b for a, b in zip(new, v)) else new
    if isinstance(v, PVector):
        new = [_map_value(f, x) for x in v]
        return v if all(a is b for a, b in zip(new, v)) else pvector(new)
    return v


def map_children(f: Callable[[Node], Node], n: Node) -> Node:
    """`n` with `f` applied to every direct child node; `n` itself if no child changed."""
    changes = {}
    for a in _eq_fields(n):
        old = getattr(n, a.name)
        new = _map_value(f, old)
        if new is not old:
            changes[a.name.lstrip("_")] = new
    return attrs.evolve(n, **changes) if changes else n


def children(n: Node) -> list[Node]:
    """The direct child nodes of `n`, in field order."""
    out: list[Node] = []
    for name in _EQ_NAMES.get(type(n)) or _eq_names(type(n)):
        v = getattr(n, name)
        if isinstance(v, Node):
            out.append(v)
        elif isinstance(v, (tuple, PVector)):
            out.extend(_nodes_in(v))
    return out


def _nodes_in(v) -> Iterator[Node]:
    if isinstance(v, Node):
        yield v
    elif isinstance(v, (tuple, PVector)):
        for x in v:
            yield from _nodes_in(x)


def walk(root: Node) -> Iterator[Node]:
    """Every distinct node reachable from `root`, children before parents (an explicit stack, no recursion)."""
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        n, expanded = stack.pop()
        if expanded:
            yield n
            continue
        if id(n) in seen:
            continue
        seen.add(id(n))
        stack.append((n, True))
        stack.extend((c, False) for c in reversed(list(children(n))) if id(c) not in seen)


__all__ = ["Node", "PVectorType", "children", "map_children", "node", "walk"]
