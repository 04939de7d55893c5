"""The base of every IR node: frozen attrs classes with O(1) hashing and locations outside equality.

`@node` makes a class frozen, slotted and structurally comparable, with `__match_args__` for
`match` statements. Each node hashes its fields once at construction (children are already hashed),
so hashing and memoising a large DAG stays linear. `loc` is keyword-only and excluded from `==`,
`hash` and `repr`, the way Python's `ast` keeps `_attributes` apart from `_fields`.

`map_children(f, n)` rebuilds `n` with `f` applied to each child node (also inside tuples and
persistent vectors), and returns `n` itself when nothing changed, so "changed?" is an `is` test.

Speed: compiling builds and walks every node several times, so `@node` also gives each class its own
`__eq__`, hash set-up and child getter, generated from its field list once (as attrs generates `__init__`):
- `__eq__` compares the same fields in the same order as attrs would, but returns at once for the
  same object and for different cached hashes (attrs' `==` recurses into shared children, which is
  exponential in the depth of a DAG whose equal subtrees are distinct objects);
- `__init__` (for fields without validators or factories) sets the fields as attrs' would and hashes
  them in the same call, instead of calling `__attrs_post_init__` to read them back;
- `children(n)` reads the node's fields directly instead of reflecting over `attrs.fields`.
The results are those of the generic definitions (`_generic_children` states them). The cached hash
is `n._h`; hot loops read it directly, as `hash(n)` calls back into Python to fetch it.
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
    _specialise(cls)
    return cls


_EQ_NAMES: dict[type, tuple[str, ...]] = {}


def _eq_names(cls: type) -> tuple[str, ...]:
    """The names of the fields of `cls` that take part in equality (cached per class)."""
    names = _EQ_NAMES[cls] = tuple(a.name for a in attrs.fields(cls) if a.eq)
    return names


# ---- sequences of children: tuples and persistent vectors

_IS_SEQ: dict[type, bool] = {tuple: True, type(pvector()): True, type(None): False, int: False, str: False,
                             bool: False, float: False}


def _is_seq(cls: type) -> bool:
    """Whether values of `cls` are searched for child nodes (`tuple` and `PVector`, an ABC: cached per class)."""
    found = _IS_SEQ[cls] = issubclass(cls, (tuple, PVector))
    return found


def _extend(out: list[Node], v) -> None:
    """Append the nodes inside the tuple or vector `v` (nested sequences included) to `out`."""
    for x in v:
        if isinstance(x, Node):
            out.append(x)
        else:
            s = _IS_SEQ.get(x.__class__)
            if s or (s is None and _is_seq(x.__class__)):
                _extend(out, x)


# ---- per-class code

def _specialise(cls: type) -> None:
    """Give `cls` its generated `__eq__`, hash set-up and child getter (see the module docstring)."""
    if cls.__qualname__ == "Node" and cls.__module__ == __name__:
        return  # the base itself, which has no fields (and is not bound yet)
    fields = [a for a in attrs.fields(cls) if a.eq]
    names = _EQ_NAMES[cls] = tuple(a.name for a in fields)
    scope: dict[str, object] = {"Node": Node, "_IS_SEQ": _IS_SEQ, "_is_seq": _is_seq, "_extend": _extend,
                                "_set": object.__setattr__, "_qualname": cls.__qualname__}
    keys = []
    for i, a in enumerate(fields):
        if a.eq_key is None:
            keys.append(f"self.{a.name} == other.{a.name}")
        else:
            scope[f"_key{i}"] = a.eq_key
            keys.append(f"_key{i}(self.{a.name}) == _key{i}(other.{a.name})")
    # Equal nodes have equal hashes only when every field compares by plain `==` (an eq key such as
    # `Const`'s may equate values whose hashes differ), so only then may unequal hashes answer.
    if all(a.eq_key is None for a in fields):
        keys.insert(0, "self._h == other._h")
    lines = ["def __eq__(self, other):",
             "    if other.__class__ is not self.__class__:",
             "        return NotImplemented",
             "    if self is other:",
             "        return True",
             f"    return {' and '.join(keys) or 'True'}",
             "",
             "def __attrs_post_init__(self):",
             f"    _set(self, '_h', hash((_qualname, ({''.join(f'self.{n}, ' for n in names)}))))",
             "",
             "def children(n):",
             "    out = []"]
    for n in names:
        lines += [f"    v = n.{n}",
                  "    if isinstance(v, Node):",
                  "        out.append(v)",
                  "    else:",
                  "        s = _IS_SEQ.get(v.__class__)",
                  "        if s or (s is None and _is_seq(v.__class__)):",
                  "            _extend(out, v)"]
    lines.append("    return out")
    inherited = getattr(cls, "__attrs_post_init__", None)
    generic = "__attrs_post_init__" not in cls.__dict__ and inherited in _GENERIC_POST_INITS
    init = _init_lines(cls, scope) if generic else None
    exec(compile("\n".join(lines + (init or [])) + "\n", f"<metile node {cls.__qualname__}>", "exec"), scope)  # noqa: S102
    cls.__eq__ = scope["__eq__"]
    if generic:
        cls.__attrs_post_init__ = scope["__attrs_post_init__"]
        _GENERIC_POST_INITS.add(cls.__attrs_post_init__)
    if init is not None:
        scope["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
        cls.__init__ = scope["__init__"]
    _CHILDREN[cls] = scope["children"]


def _init_lines(cls: type, scope: dict[str, object]) -> list[str] | None:
    """An `__init__` doing what attrs' does (converters, defaults, fields set in order) and then the hash
    set-up in the same function; None for a class with a validator, a factory or an attrs `Converter`."""
    fields = attrs.fields(cls)
    if any(a.eq and not a.init for a in fields):
        return None
    params, kw_params, body, eq_values = [], [], [], []
    for a in fields:
        if not a.init:
            continue
        if a.validator is not None or isinstance(a.default, attrs.Factory) or isinstance(a.converter, attrs.Converter):
            return None
        arg = a.alias
        if a.default is attrs.NOTHING:
            param = arg
        else:
            scope[f"_default_{arg}"] = a.default
            param = f"{arg}=_default_{arg}"
        (kw_params if a.kw_only else params).append(param)
        if a.converter is not None:
            scope[f"_convert_{arg}"] = a.converter
            body.append(f"    {arg} = _convert_{arg}({arg})")
        body.append(f"    _set(self, {a.name!r}, {arg})")
        if a.eq:
            eq_values.append(arg)
    signature = ", ".join(["self", *params, *(["*", *kw_params] if kw_params else [])])
    return ["", f"def __init__({signature}):", *body,
            f"    _set(self, '_h', hash((_qualname, ({''.join(f'{v}, ' for v in eq_values)}))))"]



_CHILDREN: dict[type, Callable[[Node], list[Node]]] = {}


@node
class Node:
    loc: Loc | None = attrs.field(default=None, eq=False, kw_only=True, repr=False)
    _h: int = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        names = _EQ_NAMES.get(type(self)) or _eq_names(type(self))
        object.__setattr__(self, "_h", hash((type(self).__qualname__, tuple([getattr(self, a) for a in names]))))


_GENERIC_POST_INITS = {Node.__attrs_post_init__}   # hash set-ups a subclass may replace with its own


def _map_value(f: Callable[[Node], Node], v):
    """Apply `f` to the nodes inside one field value; returns `v` itself when nothing changed."""
    if isinstance(v, Node):
        return f(v)
    s = _IS_SEQ.get(v.__class__)
    if not (s or (s is None and _is_seq(v.__class__))):
        return v
    if isinstance(v, tuple):
        new = tuple([_map_value(f, x) for x in v])
        return v if all(a is b for a, b in zip(new, v)) else new
    if isinstance(v, PVector):
        new = [_map_value(f, x) for x in v]
        return v if all(a is b for a, b in zip(new, v)) else pvector(new)
    return v


_INIT_NAMES: dict[type, tuple[tuple[str, str], ...]] = {}


def map_children(f: Callable[[Node], Node], n: Node) -> Node:
    """`n` with `f` applied to every direct child node; `n` itself if no child changed."""
    cls = n.__class__
    changes = None
    for name in _EQ_NAMES.get(cls) or _eq_names(cls):
        old = getattr(n, name)
        new = _map_value(f, old)
        if new is not old:
            if changes is None:
                changes = {}
            changes[name.lstrip("_")] = new
    if changes is None:
        return n
    init = _INIT_NAMES.get(cls)
    if init is None:
        init = _INIT_NAMES[cls] = tuple((a.name, a.alias) for a in attrs.fields(cls) if a.init)
    for name, alias in init:   # what `attrs.evolve` does: every other init field keeps its value
        if alias not in changes:
            changes[alias] = getattr(n, name)
    return cls(**changes)


def children(n: Node) -> list[Node]:
    """The direct child nodes of `n`, in field order."""
    get = _CHILDREN.get(n.__class__)
    return get(n) if get is not None else _generic_children(n)


def _generic_children(n: Node) -> list[Node]:
    """`children` by reflection: the nodes in the equality fields of `n`, looking inside tuples and vectors."""
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
        stack.extend([(c, False) for c in reversed(children(n)) if id(c) not in seen])


__all__ = ["Node", "PVectorType", "children", "map_children", "node", "walk"]
