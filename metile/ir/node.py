"""The base of every IR node: frozen attrs classes with O(1) hashing and locations outside equality.

`@node` makes a class frozen, slotted and structurally comparable, with `__match_args__` for
`match` statements. Each node hashes its fields once at construction (children are already hashed),
so hashing and memoising a large DAG stays linear; a `lazy_hash` class (`Kernel`, rebuilt by most passes and
hashed by none) hashes them on the first read of the hash instead. `loc` is keyword-only and excluded from `==`,
`hash` and `repr`, the way Python's `ast` keeps `_attributes` apart from `_fields`.

`map_children(f, n)` rebuilds `n` with `f` applied to each child node (also inside tuples and
persistent vectors), and returns `n` itself when nothing changed, so "changed?" is an `is` test.

Speed: compiling builds and walks every node several times, so `@node` also gives each class its own
`__eq__`, `__new__`, hash set-up and child getter, generated from its field list once (as attrs generates
`__init__`):
- `__eq__` compares the same fields in the same order as attrs would (each one by `is` first, as attrs'
  tuple comparison does), but returns at once for the same object and for different cached hashes
  (attrs' `==` recurses into shared children, which is exponential in the depth of a DAG whose equal
  subtrees are distinct objects);
- `__new__` (for fields without validators) builds the node, setting the fields as attrs' `__init__` would, and
  hashes them in the same call instead of calling `__attrs_post_init__` to read them back (a class with its own
  `__attrs_post_init__` still gets it called); the class keeps `object.__init__`, so that building a node is one
  Python call. It makes the node as an instance of the class's twin (the same slots, `object`'s `__setattr__`)
  and sets the fields by plain attribute stores, which the interpreter turns into direct slot writes, where
  calling each slot descriptor's `__set__` (what attrs' own frozen `__init__` does in effect) goes through a
  method wrapper that packs its arguments in a tuple: about a third of a node's construction. The node is of its
  frozen class again (one assignment of `__class__`) before `__new__` returns or raises. A converter to `tuple`,
  `pvector` or `pmap` is skipped when the argument already has that class;
- a value's derived `type` (its `cached_property`) is computed by `__new__` too, once its children are
  set: most values have their type read, and reading a `cached_property` of a slotted attrs class goes
  through a `__getattr__` on the class, which slows every attribute read of its instances (Python then
  calls the class's lookup hook instead of reading the slot from its attribute cache). Values have no
  such `__getattr__`: a value whose type cannot be computed (a malformed one, for the verifier to report)
  has its slot left empty, and reading it raises `AttributeError` (`type_error` gives the error its type
  function raises). A type function that is `return self.f.type` (an element-wise value's) is not called: the
  generated code reads `self.f.type` itself (`type_of_field`);
- `children(n)` reads the node's fields directly instead of reflecting over `attrs.fields` (the classes without a
  field that may hold a node share one `no_children`, which walks can tell by identity).
`metile.ir.node_source` writes their source text. They are made when the class's first instance is built
(`_first_new`), not when the class is defined, so that importing the IR compiles no code for classes a process
never builds; attrs' own `__eq__` and `__hash__` are not made at all.
The results are those of the generic definitions (`_generic_children` states them). The cached hash
is `n._h`; hot loops read it directly, as `hash(n)` calls back into Python to fetch it.
"""

from __future__ import annotations

import operator
import threading
import types
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import TypeVar

import attrs
from pyrsistent import PVector, pvector
from pyrsistent.typing import PVector as PVectorType

from metile.ir.errors import Loc
from metile.ir.node_source import (
    NODE_NAMES,
    as_tuple,
    child_lines,
    derive_lines,
    hash_expr,
    init_lines,
    repr_lines,
    setter,
    type_of_field,
)

T = TypeVar("T")


def _cached_hash(self) -> int:
    return self._h


def node(cls: type[T]) -> type[T]:
    """Class decorator for IR nodes (use it on every node class, never a bare `attrs.frozen`)."""
    derived = cls.__dict__.get("type")
    derived = derived.func if isinstance(derived, cached_property) else None
    if derived is not None and _inherits_type_slot(cls):
        delattr(cls, "type")   # a base holds the slot and computes it lazily: attrs makes no slot or getter for it
    # `__eq__`, `__hash__`, `__new__` and `__repr__` are the node's own (below): attrs compiles none of them
    cls = attrs.frozen(cls, eq=False, unsafe_hash=False, init=False, repr=False)
    cls.__hash__ = _cached_hash
    if derived is lazy_type and "__getattr__" in cls.__dict__:
        # `Value`: attrs reads the cached property through a `__getattr__` on the class, which makes every attribute
        # read of every value go through Python's lookup hook instead of the interpreter's cached slot reads. A
        # value's `type` is set by `__new__`; only a malformed value's stays empty (`type_error` says why).
        del cls.__getattr__
    _register(cls, derived)
    return cls


def _inherits_type_slot(cls: type) -> bool:
    """Whether a base of `cls` has the slot `type` (`Value`'s, whose `lazy_type` computes a subclass's `type`)."""
    return any(isinstance(k.__dict__.get("type"), types.MemberDescriptorType) for k in cls.__mro__[1:])


def lazy_type(self) -> object:
    """The derived `type` of a value, computed by its class's `type` function, raising what that raises. `Value`'s
    `type` is this `cached_property`; a subclass's own `type` function is kept in `_DERIVED_TYPE` (and its
    `cached_property` removed before attrs sees it), so attrs makes one slot for all of them instead of one per
    class. The `__getattr__` attrs adds to fill the slot on a first read is removed (see `node`): `__new__` fills
    it, and reading the `type` of a value whose type could not be computed (a malformed one) raises
    `AttributeError`; `type_error` gives the error computing it raises."""
    get = _type_function(self.__class__)
    if get is None:
        raise AttributeError(f"{self.__class__.__name__!r} object has no attribute 'type'")
    return get(self)


def type_error(v: Node) -> Exception | None:
    """Why the value `v` has no `type` (the exception its type function raises, which its `__new__` caught: a
    malformed value, for the verifier to report); None when it has one, or is not a value with a derived type."""
    try:
        v.type  # noqa: B018 - is the slot filled?
    except AttributeError:
        pass
    else:
        return None
    if _type_function(v.__class__) is None:
        return None
    try:
        lazy_type(v)
    except Exception as e:  # noqa: BLE001 - what a malformed value's type function raises, to be reported
        return e
    return None


def _type_function(cls: type) -> Callable[[Node], object] | None:
    """The function computing the `type` of a `cls` instance: its own or its nearest base's."""
    for k in cls.__mro__:
        f = _DERIVED_TYPE.get(k)
        if f is not None:
            return f
    return None


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

_DERIVED_TYPE: dict[type, Callable[[Node], object]] = {}   # per class, the function of its `type` cached_property
_NOTHING = attrs.NOTHING   # the default of a field with a factory, as in the `__init__` attrs writes
_PENDING: dict[type, Callable[[Node], object] | None] = {}  # class -> its derived `type` function, if any
_SPECIALISING = threading.RLock()


def _register(cls: type, derived_type: Callable[[Node], object] | None) -> None:
    """Note the node class `cls` (its name, its derived `type`), and give it `_first_new` as its `__new__`: its
    generated methods are made by its first instance, so importing the IR does not compile the code of classes
    that a process never builds."""
    if cls.__qualname__ == "Node" and cls.__module__ == __name__:
        return  # the base itself, which has no fields (and is not bound yet)
    if derived_type is lazy_type:
        derived_type = None   # `Value`'s: computes no type of its own
    elif derived_type is not None:
        _DERIVED_TYPE[cls] = derived_type
    elif not any(a.name == "type" for a in attrs.fields(cls)):
        derived_type = _type_function(cls)
    for a in attrs.fields(cls):
        if (a.eq and not a.init) or a.validator is not None or isinstance(a.converter, attrs.Converter) or (
                isinstance(a.default, attrs.Factory) and a.default.takes_self):
            raise TypeError(f"node class {cls.__qualname__}: field {a.name!r} needs what a node's generated "
                            "__new__ does not do (a validator, an attrs Converter, a factory taking self, or "
                            "an equality field outside its arguments)")
    NODE_NAMES.add(cls.__name__)
    _PENDING[cls] = derived_type
    cls.__new__ = _FIRST_NEW


def _first_new(cls: type, *args, **kwargs) -> Node:
    """The `__new__` of a node class until it has its generated methods: makes them, then builds the node."""
    with _SPECIALISING:   # one thread makes them; another one building the same class meanwhile waits
        for k in cls.__mro__:
            if k.__dict__.get("__new__") is _FIRST_NEW:
                _specialise(k)
    return cls.__new__(cls, *args, **kwargs)


_FIRST_NEW = staticmethod(_first_new)


def _specialise(cls: type) -> None:
    """Give `cls` its generated `__eq__`, `__new__`, hash set-up and child getter (see the module docstring)."""
    derived_type = _PENDING.pop(cls)
    fields = [a for a in attrs.fields(cls) if a.eq]
    _EQ_NAMES[cls] = tuple(a.name for a in fields)
    scope: dict[str, object] = {"Node": Node, "_CHILDREN": _CHILDREN, "_IS_SEQ": _IS_SEQ, "_is_seq": _is_seq,
                                "_extend": _extend, "_set": object.__setattr__, "_qualname": cls.__qualname__,
                                "_NOTHING": _NOTHING, "_type_of": derived_type, "_map_hash": _map_hash,
                                "_seq_hash": _seq_hash}
    keys = []
    for i, a in enumerate(fields):
        if a.eq_key is None:
            keys.append(f"(self.{a.name} is other.{a.name} or self.{a.name} == other.{a.name})")
        else:
            scope[f"_key{i}"] = a.eq_key
            keys.append(f"_key{i}(self.{a.name}) == _key{i}(other.{a.name})")
    # Equal nodes have equal hashes only when every field compares by plain `==` (an eq key such as
    # `Const`'s may equate values whose hashes differ), so only then may unequal hashes answer.
    if all(a.eq_key is None for a in fields):
        keys.insert(0, "self._h == other._h")
    same = type_of_field(derived_type, _EQ_NAMES[cls]) if derived_type is not None else None
    type_expr = None if derived_type is None else "_type_of(self)" if same is None else f"self.{same}.type"
    derive = derive_lines(f"{setter(cls, 'type', scope)}", type_expr, ")")
    lazy = getattr(cls, "_h", None) is _LAZY_HASH   # the class or a base is `lazy_hash`
    lines = ["def __eq__(self, other):",
             "    if other.__class__ is not self.__class__:",
             "        return NotImplemented",
             "    if self is other:",
             "        return True",
             f"    return {' and '.join(keys) or 'True'}",
             "",
             "def __attrs_post_init__(self):",
             f"    {setter(cls, '_h', scope)}{hash_expr(fields, 'self.')}" if not lazy else "    pass",
             *derive,
             "",
             "def _hash_fields(self):",
             f"    return {hash_expr(fields, 'self.')[:-1]}",
             "",
             "def children(n):",
             "    out = []"]
    kid_lines = [line for a in fields for line in child_lines(a)]
    lines += kid_lines
    lines.append("    return out")
    own_repr = "__repr__" in cls.__dict__
    if not own_repr:
        lines += repr_lines(cls)
    inherited = getattr(cls, "__attrs_post_init__", None)
    generic = "__attrs_post_init__" not in cls.__dict__ and inherited in _GENERIC_POST_INITS
    init = init_lines(cls, scope, None if generic else "__attrs_post_init__", derive, type_expr, lazy)
    exec(compile("\n".join(lines + init) + "\n", f"<metile node {cls.__qualname__}>", "exec"), scope)  # noqa: S102
    cls.__eq__ = scope["__eq__"]
    if generic:
        cls.__attrs_post_init__ = scope["__attrs_post_init__"]
        _GENERIC_POST_INITS.add(cls.__attrs_post_init__)
    _CHILDREN[cls] = scope["children"] if kid_lines else no_children
    if not own_repr:
        scope["__repr__"].__qualname__ = f"{cls.__qualname__}.__repr__"
        cls.__repr__ = scope["__repr__"]
    scope["__new__"].__qualname__ = f"{cls.__qualname__}.__new__"
    cls.__new__ = staticmethod(scope["__new__"])
    if lazy:
        _HASH_FIELDS[cls] = scope["_hash_fields"]


def _read_lazy_hash(self) -> int:
    """The `_h` of a node of a `lazy_hash` class: the hash of its fields, computed by the first read and kept."""
    try:
        return _GET_H(self, self.__class__)
    except AttributeError:   # not computed yet
        cls = self.__class__
        fields = _HASH_FIELDS.get(cls) or next(_HASH_FIELDS[k] for k in cls.__mro__ if k in _HASH_FIELDS)
        h = fields(self)
        _SET_H(self, h)
        return h


_HASH_FIELDS: dict[type, Callable[[Node], int]] = {}   # per `lazy_hash` class, the hash of a node's fields
_LAZY_HASH = property(_read_lazy_hash)


def lazy_hash(cls: type[T]) -> type[T]:
    """Class decorator, above `@node`, for a node class whose nodes are built far more often than hashed or compared
    (a `Kernel`, rebuilt by every pass and hashed by none): its `__new__` does not hash the fields (the hash of the
    body's statements, the plan, options and schedule); the first read of `_h` (`hash`, `==`) does, and keeps it.
    Equal nodes still hash alike, and a node's hash does not change."""
    if "__new__" in cls.__dict__ and cls.__dict__["__new__"] is not _FIRST_NEW:
        raise TypeError(f"lazy_hash on {cls.__qualname__}: put it above @node, before the class builds a node")
    cls._h = _LAZY_HASH
    return cls


_H = operator.attrgetter("_h")


def _seq_hash(v) -> object:
    """What a node's hash takes of a tuple or vector of nodes: their cached hashes, read in C (`hash(v)` would call
    each node's `__hash__`, a Python function), which are equal for equal sequences; a value holding anything
    else (a malformed node) gives itself."""
    try:
        return tuple(map(_H, v))
    except (AttributeError, TypeError):
        return v


def _map_hash(m) -> object:
    """What a node's hash takes of a persistent map field: the set of its items, instead of `hash(m)` (pyrsistent's
    first hash of a map asks `hasattr` for its cached hash, which its `__getattr__` answers by raising and catching
    a `KeyError`: tens of microseconds for the few items of a kernel's `meta`). Equal maps give equal sets; a value
    other than a map (a malformed node) gives itself."""
    items = getattr(m, "iteritems", None)
    return frozenset(items()) if items is not None else m


_CHILDREN: dict[type, Callable[[Node], list[Node]]] = {}
_INIT_NAMES: dict[type, tuple[tuple[str, str], ...]] = {}   # per class, (attribute, `__init__` argument) pairs


@node
class Node:
    loc: Loc | None = attrs.field(default=None, eq=False, kw_only=True, repr=False)
    _h: int = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        names = _EQ_NAMES.get(type(self)) or _eq_names(type(self))
        object.__setattr__(self, "_h", hash((type(self).__qualname__, *[getattr(self, a) for a in names])))

    def __reduce__(self):
        """Copies and pickles are rebuilt by the constructor, so the cached hash is computed anew (hashes of
        strings, enums and types differ between processes) and the types are the interned ones."""
        cls = self.__class__
        init = _INIT_NAMES.get(cls)
        if init is None:
            init = _INIT_NAMES[cls] = tuple((a.name, a.alias) for a in attrs.fields(cls) if a.init)
        return _rebuild, (cls, {alias: getattr(self, name) for name, alias in init})


_GET_H, _SET_H = Node.__dict__["_h"].__get__, Node.__dict__["_h"].__set__   # the slot, under `lazy_hash`'s property


def _rebuild(cls: type[Node], kwargs: dict[str, object]) -> Node:
    return cls(**kwargs)


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


def evolve_node(n: T, **changes) -> T:
    """`attrs.evolve(n, **changes)` for a node (`changes` keyed by `__init__` argument): the node's class built from
    the changes and the node's other `__init__` fields, without attrs' reflection over the class's fields (passes
    set a kernel's plan or schedule this way on every compile). A field given its own value keeps that object (a
    kernel's body stays the body its analyses were made of). The work is a function generated once per class
    (`_evolver`), which reads each field the changes leave as it is and calls the class once."""
    cls = n.__class__
    evolve = _EVOLVERS.get(cls)
    if evolve is None:
        evolve = _EVOLVERS[cls] = _evolver(cls)
    return evolve(n, **changes)


_EVOLVERS: dict[type, Callable[..., Node]] = {}
_KEEP = object()   # an argument of a generated evolver that was not given: the node's own field is kept


def _evolver(cls: type) -> Callable[..., Node]:
    """`evolve(n, **changes)` for nodes of class `cls`: each `__init__` argument defaults to `_KEEP`, which stands
    for the node's own field (an unknown argument is a `TypeError`, as the class's own call gives)."""
    params, args = [], []
    for a in attrs.fields(cls):
        if not a.init:
            continue
        if not a.alias.isidentifier() or not a.name.isidentifier():
            raise TypeError(f"node class {cls.__qualname__}: field {a.name!r} cannot be an argument")
        params.append(f"{a.alias}=_KEEP")
        value = f"n.{a.name} if {a.alias} is _KEEP else {a.alias}"
        args.append(f"{a.alias}=({value})")
    scope: dict[str, object] = {"_KEEP": _KEEP, "_cls": cls}
    source = f"def evolve(n, {', '.join(params)}):\n    return _cls({', '.join(args)})\n"
    exec(compile(source, f"<metile node {cls.__qualname__} evolve>", "exec"), scope)  # noqa: S102
    return scope["evolve"]


def no_children(n: Node) -> list[Node]:
    """The `children` of a node whose class has no field that may hold a node (`Const`, `Var`, `Param`...): one
    function for all of them, so that walks can tell such a class by its getter."""
    return []


def children_getter(cls: type) -> Callable[[Node], list[Node]] | None:
    """The function `children` calls for a node of class `cls` (generated by its first instance), None before it has
    one: walks over many nodes look it up once per class."""
    return _CHILDREN.get(cls)


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
    stack: list = [root]   # a node to expand, or a 1-tuple holding a node whose children are done
    pop, push, add, getters = stack.pop, stack.append, seen.add, _CHILDREN
    while stack:
        n = pop()
        if n.__class__ is tuple:
            yield n[0]
            continue
        if id(n) in seen:
            continue
        add(id(n))
        push((n,))
        get = getters.get(n.__class__)
        for c in reversed(get(n) if get is not None else _generic_children(n)):
            if id(c) not in seen:
                push(c)


__all__ = ["Node", "PVectorType", "as_tuple", "children", "children_getter", "evolve_node", "lazy_hash", "lazy_type",
           "map_children", "no_children", "node", "type_error", "walk"]
