"""The source text of the methods `@node` generates for a node class (see `metile.ir.node`'s docstring): its
`__new__`, hash set-up, child getter and `__repr__`, written as lines of Python that `metile.ir.node` compiles
once per class, and the twin class its `__new__` builds an instance as."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
from pyrsistent import pmap, pvector

if TYPE_CHECKING:
    from metile.ir.node import Node


NODE_NAMES = {"Node"}   # the names of the node classes made so far, to spot fields declared as nodes


def as_tuple(items) -> tuple:
    """`tuple(items)`: the converter of the IR's tuple fields. A Python function rather than `tuple` itself, since
    attrs reads each converter's signature when it makes a class, and `inspect.signature` of a builtin parses its
    text signature (the first time compiling tokenize's patterns): milliseconds of importing the IR."""
    return tuple(items)


# Converters whose result class is known: a value of that class is kept as it is (the same value, or one
# equal to what the converter would build, as persistent collections are immutable), without a call.
_CONVERTED: dict[object, type] = {tuple: tuple, as_tuple: tuple, pvector: type(pvector()), pmap: type(pmap())}


def _field_type(self):   # the shape of the type function `type_of_field` recognises (the field's name aside)
    return self.x.type


def type_of_field(fn: Callable[[Node], object], fields: tuple[str, ...]) -> str | None:
    """The field `f` among `fields` when the type function `fn` is `return self.f.type` (an element-wise value's type is
    its operand's), whose generated code then reads `self.f.type` itself instead of calling `fn`; None otherwise."""
    code, shape = getattr(fn, "__code__", None), _field_type.__code__
    if code is None or code.co_code != shape.co_code or code.co_consts != shape.co_consts \
            or code.co_argcount != 1 or len(code.co_names) != 2 or code.co_names[1] != "type":
        return None
    return code.co_names[0] if code.co_names[0] in fields else None


def repr_lines(cls: type) -> list[str]:
    """The `__repr__` attrs would write for `cls` (`Binary(op=..., lhs=..., rhs=...)`, the fields shown with their
    `repr` or their own `repr=` function), without attrs' guard against cycles: a node cannot contain itself."""
    parts = []
    for a in attrs.fields(cls):
        if a.repr is True:
            parts.append(f"{a.name}={{self.{a.name}!r}}")
        elif a.repr is not False:
            raise TypeError(f"node class {cls.__qualname__}: field {a.name!r} has its own repr function")
    return ["", "def __repr__(self):",
            f"    return f'{{self.__class__.__qualname__.rsplit(\">.\", 1)[-1]}}({', '.join(parts)})'"]


# Declared field types whose values are never nodes nor hold any (scalars, enums, types, the kernel's plan and
# options): `children` does not look at such a field. A field declared otherwise is searched as before.
_NEVER_NODES = frozenset({"int", "float", "bool", "str", "None", "tuple[int, ...]", "BinOp", "UnOp", "CmpOp",
                          "ReduceOp", "BuiltinKind", "DType", "Fence", "Stage", "Type", "AddressSpace",
                          "CompileOptions", "LaunchPlan", "Schedule", "PMap[str, int]"})


def child_lines(a: attrs.Attribute) -> list[str]:
    """The lines of a generated `children(n)` appending the nodes of field `a` to `out`: none for a field declared
    as a type of `_NEVER_NODES`, a test for None first for a node that may be None, the generic search otherwise."""
    declared = {t.strip() for t in a.type.split("|")} if isinstance(a.type, str) else {""}
    if declared <= _NEVER_NODES:
        return []
    generic = ["        s = _IS_SEQ.get(v.__class__)",
               "        if s or (s is None and _is_seq(v.__class__)):",
               "            _extend(out, v)"]
    if "None" in declared and declared - {"None"} <= NODE_NAMES:
        return [f"    v = n.{a.name}",
                "    if v is None:",
                "        pass",
                "    elif isinstance(v, Node):",
                "        out.append(v)",
                "    else:", *generic]
    return [f"    v = n.{a.name}",
            "    if isinstance(v, Node):",
            "        out.append(v)",
            "    else:", *generic]


def hash_expr(fields: list[attrs.Attribute], prefix: str, trusting: bool = False) -> str:
    """The hash of a node from its equality fields (read as `prefix + alias`, then `)` closes the setter call).
    A field declared as a node contributes its cached hash, read directly when it holds a node, and a field declared
    as a tuple or vector of nodes the tuple of their cached hashes (`_seq_hash`), instead of `hash()` calling back
    into Python for each node; equal fields still contribute equal numbers. `trusting`: the fields declared as nodes
    are taken to hold nodes (or None where declared so), read without a test of their class; for a node that holds
    anything else, reading `_h` raises `AttributeError` and `__new__` hashes it as without `trusting`."""
    parts = []
    for a in fields:
        v = prefix + (a.name if prefix else a.alias)
        declared = {t.strip() for t in a.type.split("|")} if isinstance(a.type, str) else set()
        if declared & NODE_NAMES and trusting:   # a node, or None where declared so (else `_h` is missing)
            parts.append(f"None if {v} is None else {v}._h, " if "None" in declared else f"{v}._h, ")
        elif declared & NODE_NAMES:
            parts.append(f"{v}._h if {v}.__class__ in _CHILDREN else {v}, ")
        elif declared and all(_node_sequence(t) for t in declared):
            parts.append(f"_seq_hash({v}), ")
        elif declared and all(t.startswith("PMap") for t in declared):
            parts.append(f"_map_hash({v}), ")
        else:
            parts.append(f"{v}, ")
    return f"hash((_qualname, {''.join(parts)})))"


def _node_sequence(declared: str) -> bool:
    """Whether the declared type `declared` is a tuple or vector of nodes (`tuple[Stmt, ...]`, `PVector[Stmt]`)."""
    for head, tail in (("tuple[", ", ...]"), ("PVector[", "]")):
        if declared.startswith(head) and declared.endswith(tail):
            inner = {t.strip() for t in declared[len(head):-len(tail)].split("|")}
            return inner <= NODE_NAMES
    return False


def setter(cls: type, name: str, scope: dict[str, object]) -> str:
    """The start of a call that sets the slot `name` of `self` (its member descriptor's `__set__`, which skips
    the attribute lookup `object.__setattr__` makes), to be followed by the value and `)`."""
    slot = getattr(cls, name, None)
    if isinstance(slot, types.MemberDescriptorType):
        scope[f"_set_{name}"] = slot.__set__
        return f"_set_{name}(self, "
    return f"_set(self, {name!r}, "


def derive_lines(start: str, type_expr: str | None, end: str) -> list[str]:
    """The lines setting the derived `type` (`start`, the type's expression `type_expr`, then `end`), which leave it
    unset for a malformed node; none without a derived type."""
    return [] if type_expr is None else [
        "    try:",
        f"        {start}{type_expr}{end}",
        "    except Exception:",
        "        pass   # a malformed node: reading `type` raises, as the verifier expects (`type_error`)",
    ]


def init_lines(cls: type, scope: dict[str, object], post_init: str | None, derive: list[str],
               type_expr: str | None, lazy_hash: bool = False) -> list[str]:
    """A `__new__` building a node as attrs' `__init__` would (converters, defaults, factories, fields set in order,
    then `post_init` if the class has its own), with the hash set-up and the derived `type` in the same function
    otherwise (`_register` has refused the fields it could not set: validators, factories taking `self`, attrs
    `Converter`s). The class keeps `object.__init__`, which does nothing with the arguments once `__new__` is the
    class's own: one Python call builds a node, instead of `object.__new__` then a Python `__init__`. With
    `lazy_hash`, the hash is left to its first read (see `metile.ir.node.lazy_hash`)."""
    params, kw_params, body, eq_fields, fields = [], [], [], [], []
    for a in attrs.fields(cls):
        if not a.init:
            continue
        arg = a.alias
        if a.default is attrs.NOTHING:
            param = arg
        elif isinstance(a.default, attrs.Factory):
            scope[f"_factory_{arg}"] = a.default.factory
            param = f"{arg}=_NOTHING"
            body.append(f"    if {arg} is _NOTHING:")
            body.append(f"        {arg} = _factory_{arg}()")
        else:
            scope[f"_default_{arg}"] = a.default
            param = f"{arg}=_default_{arg}"
        (kw_params if a.kw_only else params).append(param)
        if a.converter is not None:
            scope[f"_convert_{arg}"] = a.converter
            known = _CONVERTED.get(a.converter) if a.converter.__hash__ is not None else None
            if known is not None:
                scope[f"_class_{arg}"] = known
                body.append(f"    if {arg}.__class__ is not _class_{arg}:")
                body.append(f"        {arg} = _convert_{arg}({arg})")
            else:
                body.append(f"    {arg} = _convert_{arg}({arg})")
        fields.append(a)
        if a.eq:
            eq_fields.append(a)
    signature = ", ".join(["_k", *params, *(["*", *kw_params] if kw_params else [])])
    # An instance of a subclass without its own `__new__` has its fields set through the slots' descriptors (a call
    # each); an instance of `cls` itself is made as an instance of its twin (`_twin`), whose fields are set by plain
    # attribute stores, and becomes a `cls` (one class assignment) before anything else can see it.
    slow = [f"    {setter(cls, a.name, scope)}{a.alias})" for a in fields]
    fast = [f"            self.{a.name} = {a.alias}" for a in fields]
    if post_init is not None:
        slow += [f"    self.{post_init}()", *derive]
        after = [f"        self.{post_init}()", *("    " + line for line in derive)]
    elif lazy_hash:
        slow += derive
        fast += [*("        " + line for line in derive_lines("self.type = ", type_expr, ""))]
        after = []
    else:
        slow += [f"    {setter(cls, '_h', scope)}{hash_expr(eq_fields, '')}", *derive]
        fast += ["            try:   # the fields declared as nodes hold nodes (else: as the slow path hashes them)",
                 f"                self._h = {hash_expr(eq_fields, '', trusting=True)[:-1]}",
                 "            except AttributeError:",
                 f"                self._h = {hash_expr(eq_fields, '')[:-1]}",
                 *("        " + line for line in derive_lines("self.type = ", type_expr, ""))]
        after = []
    scope["_cls"], scope["_twin"], scope["_make"] = cls, _twin(cls), object.__new__
    twin = ["    if _k is _cls:",
            "        self = _make(_twin)",
            "        try:",
            *fast,
            "        finally:",
            "            self.__class__ = _cls",
            *after,
            "        return self",
            "    self = _make(_k)",
            *slow,
            "    return self"]
    return ["", f"def __new__({signature}):", *body, *twin]


def _twin(cls: type) -> type:
    """A subclass of the node class `cls` with its layout (no slot of its own) and with `object`'s `__setattr__` and
    `__delattr__` instead of the frozen ones: a new `cls` instance is made as an instance of it, while its `__new__`
    sets its fields, each by a plain attribute store (which the interpreter specialises to a write of the slot)
    instead of a call of the slot descriptor's `__set__` (a call through a method wrapper that packs its arguments in
    a tuple). Nothing but that `__new__` ever sees an instance of the twin."""
    return type(cls.__name__, (cls,), {"__slots__": (), "__setattr__": object.__setattr__,
                                        "__delattr__": object.__delattr__, "__qualname__": cls.__qualname__,
                                        "__module__": cls.__module__})
