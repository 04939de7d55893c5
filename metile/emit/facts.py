"""Facts about a kernel that the MSL emitter needs, and the definitions they are checked against.

- `scan`: one walk of the kernel in program order, before any text is written: the C names of the
  parameters and bound names (`c_names`), the values each name may take (`bindings`), the pointer
  parameters written through (`written_params`), the thread-position attributes read (`builtins_used`),
  and in `Records` whether each structure has two or more distinct parents (`use_counts`), which decides
  whether the emitter names it. It checks the stage first.
- `Records`: one record per structure (structurally equal nodes share it), for the emitter.
- `value_children`: `children` of a Metal IR value, read field by field; `CHILDREN`: the same per class,
  found by one lookup (what the hot walks use).
- `check_metal`: the kernel is at `Stage.METAL` and holds only nodes that stage admits.
- `use_counts`: how many distinct parents refer to each value (structural, so equal kernels give equal
  counts); `scan` counts the same, and the emitter names a compound value with two or more once instead
  of repeating it.
- `pointer_roots`: the parameters pointers may point into, following `AddPtr`, `Where` and every name
  binding back to the parameter; `sole_root`: the one parameter a pointer points into (16-bit atomics find their
  word from the element's index in it); `written_params`: the pointer parameters some store, vector store,
  matrix store or atomic add writes through.
- `reads_any`: whether some values read a bound name written as one of some C identifiers (for parallel assignment
  of yields).
- `builtins_used`: the thread-position attributes the body reads, in `BuiltinKind` order.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import chain

from metile.emit.spell import MSL_RESERVED, EmitError, c_identifier, c_identifiers, function_name
from metile.ir import (
    AddPtr,
    AtomicAdd,
    AtomicRMW,
    Barrier,
    Binary,
    Bitcast,
    Builtin,
    BuiltinKind,
    Cast,
    Compare,
    Const,
    DeviceAssert,
    DevicePrint,
    Extract,
    Fma,
    For,
    If,
    IntToPtr,
    Kernel,
    Let,
    Load,
    MakeVector,
    MatrixFill,
    MatrixLoad,
    MatrixMultiplyAccumulate,
    MatrixOf,
    MatrixStore,
    Node,
    Param,
    SharedAlloc,
    SimdBroadcast,
    SimdReduce,
    SimdShuffleXor,
    Splat,
    Stage,
    Store,
    TensorHold,
    TensorMatmul,
    TensorRelease,
    Unary,
    Value,
    Var,
    VecLoad,
    VecStore,
    Where,
    While,
    admits,
    children,
)
from metile.ir.errors import assert_never
from metile.ir.stages import ADMITTED

LEAVES = frozenset({Const, Param, Var, Builtin})  # values without children, whose text reads the same everywhere
ADMITTED_METAL = ADMITTED[Stage.METAL]

_LET_DECLARED = frozenset({SharedAlloc, MatrixLoad, MatrixMultiplyAccumulate})  # `Let` values declared apart
_NAME = operator.attrgetter("name")


class Facts:
    """What `scan` found: `names` (`c_names`), `defs` (`bindings`), `written` (`written_params`), `kinds` (the
    `_value_` of each of `builtins_used`), `records` (each structure's record, shared when it has two or more
    distinct parents) and `reads` (per variable that is some loop's init, how many times it is read as an operand, a
    structure met again counted once: 1 means its one reader is the only one)."""

    __slots__ = ("defs", "kinds", "names", "reads", "records", "written")

    def __init__(self, names: dict[str, str], defs: dict[str, tuple[Value, ...]], written: frozenset[str],
                 kinds: set[str], records: Records, reads: dict[str, int]):
        self.names, self.defs, self.written, self.kinds, self.records = names, defs, written, kinds, records
        self.reads = reads


def scan(k: Kernel) -> Facts:
    """The facts about `k` the emitter needs, from one walk of its statements in program order that also visits
    each value structure once. A statement is the parent of the values the emitter writes for it (of a matrix
    load or multiply-accumulate, its operands), and of those it leaves out (a `Load`'s `other` without a mask,
    yields and inits past the carried values or results)."""
    if k.stage is not Stage.METAL:
        check_metal(k)
    defs: dict[str, tuple[Value, ...]] = {}
    stores: list[Value] = []
    bound: list[str] = [p.name for p in sorted(k.params, key=_index)]  # the names to claim, in order
    records = Records()
    by_hash, twins, record = records.by_hash, records.twins, records.record
    todo: list[tuple[list | Node, tuple]] = []  # (a parent: a value's record or a statement, values it is a parent of)
    push, bind = todo.append, bound.append
    kinds: set[str] = set()
    counted: set[str] = set()  # the variables that are some loop's init: the only ones whose reads are counted
    read: list[str] = []  # each of those read as an operand, counted after the walk

    firsts: dict[int, Node] = {}  # the first statement met of each hash
    apart: dict[Node, Node] = {}  # statements whose hash an unequal statement took first, by structure

    def loop_vars(carried, inits, yields, results) -> None:
        """Name a loop's carried values and results: a carried value is bound to its init and yield, a result
        to its carried value; an init that is a variable has its reads counted."""
        for v in inits:
            if v.__class__ is Var:
                counted.add(v.name)
        bound.extend(map(_NAME, carried))
        bound.extend(map(_NAME, results))
        n = min(len(carried), len(inits), len(yields), len(results))
        if n < len(carried):
            carried, results = carried[:n], results[:n]
        defs.update(zip(map(_NAME, carried), zip(inits, yields)))
        defs.update(zip(map(_NAME, results), zip(carried)))

    # The statements in program order, by a stack of the open bodies' iterators (a nested function calling itself
    # would be a reference cycle, keeping this call's tables alive until the garbage collector runs).
    bodies: list[Iterator] = [iter(k.body)]
    while bodies:
        for s in bodies[-1]:
            # The parent of the statement's values: the first statement met of its structure (no record: the emitter
            # looks up values only).
            rec = firsts.setdefault(s._h, s)
            if rec is not s and rec != s:
                rec = apart.setdefault(s, s)
            match s:
                case Let():
                    var, value = s.var, s.value
                    bind(var.name)
                    defs[var.name] = (value,)
                    cls = value.__class__
                    if cls in _LET_DECLARED:
                        push((rec, CHILDREN[cls](value)))
                    else:
                        push((rec, (value,)))
                        if cls is AtomicRMW:
                            stores.append(value.ptr)
                case Store() | AtomicAdd():
                    stores.append(s.ptr)
                    push((rec, (s.ptr, s.value) if s.mask is None else (s.mask, s.ptr, s.value)))
                case For():
                    bind(s.index.name)
                    loop_vars(s.carried, s.inits, s.yields, s.results)
                    push((rec, (*s.inits, s.start, s.stop, s.step, *s.yields)))
                    bodies.append(iter(s.body))
                    break
                case If():
                    bound.extend(map(_NAME, s.results))
                    defs.update(zip(map(_NAME, s.results), zip(s.then_yields, s.else_yields)))
                    push((rec, (s.cond, *s.then_yields, *s.else_yields)))
                    bodies.append(chain(s.then, s.orelse))
                    break
                case VecStore():
                    stores.append(s.ptr)
                    push((rec, (s.ptr, s.value)))
                case MatrixStore():
                    stores.append(s.ptr)
                    push((rec, (s.value, s.ptr, s.stride)))
                case Barrier():
                    pass
                case DevicePrint() | DeviceAssert() | TensorMatmul() | TensorRelease():
                    push((rec, tuple(children(s))))
                case TensorHold():
                    bound.extend((s.name, s.name + "_desc", s.name + "_op"))
                case While():
                    loop_vars(s.carried, s.inits, s.yields, s.results)
                    push((rec, (*s.inits, s.cond, *s.yields)))
                    bodies.append(chain(s.cond_body, s.body))
                    break
                case _:  # every statement class Metal IR admits has a case above
                    Records.check(s)  # raises for one it does not admit
                    assert_never(s)
        else:
            bodies.pop()

    # Each parent's values; a structure met for the first time is then the parent of its children (one met again
    # has the same children). Which node of a structure is met first does not change what is counted.
    pop, get_record, children_of, read_var = todo.pop, by_hash.get, CHILDREN, read.append
    while todo:
        parent, values = pop()
        for v in values:
            cls = v.__class__
            if cls in LEAVES:
                if cls is Var:   # the most common leaf
                    if v.name in counted:
                        read_var(v.name)
                elif cls is Builtin:
                    kinds.add(v.kind._value_)
                continue
            h = v._h
            rec = get_record(h)
            if rec is None:
                rec = by_hash[h] = [v, parent, None, False]
                try:  # every Metal IR value class with children has a getter in `CHILDREN`
                    push((rec, children_of[cls](v)))
                except KeyError:
                    record(v, None, parent)  # refused
                    raise
                continue
            if rec[0] is not v:
                found = twins.get(id(v))
                if found is None:
                    found = record(v, rec, parent)
                    if found[0] is v:  # a structure whose hash another one took first
                        push((found, value_children(v)))
                        continue
                rec = found
            if rec[1] is not parent:
                rec[3] = True
    reads = Counter(read) if read else {}
    names = _claim(bound, {function_name(k.name)})
    return Facts(names, defs, _written(stores, defs), kinds, records, reads)


def _claim(bound: list[str], taken: set[str]) -> dict[str, str]:
    """A distinct C identifier for each of the names `bound` (the IR name when it is one), given in order: a name
    whose identifier is taken or reserved is numbered (`_numbered`). When no identifier collides, they are all
    found at once."""
    order = list(dict.fromkeys(bound))
    texts = c_identifiers(order)
    if len(set(texts)) == len(texts) and taken.isdisjoint(texts) and MSL_RESERVED.isdisjoint(texts):
        return dict(zip(order, texts))
    names: dict[str, str] = {}
    for name, text in zip(order, texts):
        if text in taken or text in MSL_RESERVED:
            text = _numbered(text, taken)
        taken.add(text)
        names[name] = text
    return names


def _index(p: Param) -> int:
    return p.index


def _numbered(base: str, taken: set[str]) -> str:
    """`base_1`, `base_2`, ...: the first that is neither taken nor reserved."""
    i = 1
    while (text := f"{base}_{i}") in taken or text in MSL_RESERVED:
        i += 1
    return text


def _written(stores: list[Value], defs: dict[str, tuple[Value, ...]]) -> frozenset[str]:
    """`pointer_roots(stores, defs)`, a parameter offset by `AddPtr`s read directly."""
    found: set[str] = set()
    others = []
    names: set[str] = set()   # the names among `others`: a name's roots are followed once (a row pointer's stores)
    for p in stores:
        while p.__class__ is AddPtr:
            p = p.ptr
        if p.__class__ is Param:
            found.add(p.name)
        elif p.__class__ is not Var:
            others.append(p)
        elif p.name not in names:
            names.add(p.name)
            others.append(p)
    return frozenset(found) | pointer_roots(others, defs) if others else frozenset(found)


def _load_children(v: Load) -> tuple[Value, ...]:
    if v.mask is None:
        return (v.ptr,) if v.other is None else (v.ptr, v.other)
    return (v.ptr, v.mask) if v.other is None else (v.ptr, v.mask, v.other)


def _x(v: Value) -> tuple[Value]:
    return (v.x,)


def _vec(v: Extract) -> tuple[Value]:
    return (v.vec,)


def _ptr(v: VecLoad) -> tuple[Value]:
    return (v.ptr,)


def _value(v: MatrixFill) -> tuple[Value]:
    return (v.value,)


def _none(v: SharedAlloc) -> tuple[()]:
    return ()


def _atomic_children(v: AtomicRMW) -> tuple[Node, ...]:
    return tuple(c for c in (v.ptr, v.value, v.mask, v.compare) if c is not None)


# `value_children` of each compound Metal IR value class, found by one lookup (the `match` of `value_children` tries
# the classes in turn); those with two or more children are read by one C call.
CHILDREN: dict[type, Callable[[Value], tuple]] = {
    **{cls: operator.attrgetter(*fields) for cls, fields in (
        (Binary, ("lhs", "rhs")), (AddPtr, ("ptr", "offset")), (Fma, ("a", "b", "c")), (Compare, ("lhs", "rhs")),
        (Where, ("cond", "x", "y")),
        (MatrixMultiplyAccumulate, ("a", "b", "c")), (MatrixOf, ("x", "y")), (MatrixLoad, ("ptr", "stride")),
        (SimdShuffleXor, ("x", "mask")),
        (SimdBroadcast, ("x", "lane")), (MakeVector, ("elems",)))},
    Load: _load_children, Cast: _x, Bitcast: _x, IntToPtr: _x, Unary: _x, Splat: _x, SimdReduce: _x, Extract: _vec,
    VecLoad: _ptr, MatrixFill: _value, SharedAlloc: _none, AtomicRMW: _atomic_children,
}


class Records:
    """One record per value structure met (structurally equal nodes share it), a list `[node, parent, texts, shared]`:
    the first node of the structure, the first parent it was met under (a value's record, or the first statement of
    a statement's structure), the emitter's texts for
    it while they are in scope (else None), and whether a second distinct parent has been met.

    Records are found under each node's cached hash in `by_hash` (`Node._h`, read directly: `hash()` would call
    back into Python), then by `==`. `by_hash.get(v._h)` holding `v` itself is the common case, which callers
    test before calling `record`; any other node is remembered by id in `twins` (which callers read first), and
    held so that its id stays its own. `record` gives a new record only to a node it does not find, and that
    record's node is the node itself.
    """

    __slots__ = ("_held", "_others", "by_hash", "twins")

    def __init__(self) -> None:
        self.by_hash: dict[int, list] = {}
        self._others: dict[Node, list] = {}  # structures whose hash another structure took first
        self.twins: dict[int, list] = {}
        self._held: list[Node] = []

    def record(self, v: Node, found: list | None, parent: list | None) -> list:
        """The record of `v`, for which `by_hash` gave `found` (None, or not `v`'s own) and `twins` nothing; a new
        structure's first parent is `parent`. Refuses a node class Metal IR does not admit."""
        if found is None:
            self.check(v)
            found = self.by_hash[v._h] = [v, parent, None, False]
            return found
        if found[0] == v:
            rec = found
        else:
            rec = self._others.get(v)
            if rec is None:
                self.check(v)
                rec = self._others[v] = [v, parent, None, False]
        self.twins[id(v)] = rec
        self._held.append(v)
        return rec

    @staticmethod
    def check(v: Node) -> None:
        """Refuse a node class Metal IR does not admit."""
        if v.__class__ not in ADMITTED_METAL:
            raise EmitError(f"{type(v).__name__} is not a Metal IR node", v.loc)


def value_children(v: Value) -> tuple[Node, ...]:
    """`children(v)` of a Metal IR value, read field by field (faster than the generic getter)."""
    match v:
        case Binary():
            return (v.lhs, v.rhs)
        case AddPtr():
            return (v.ptr, v.offset)
        case Load():
            if v.mask is None and v.other is None:
                return (v.ptr,)
            return tuple(c for c in (v.ptr, v.mask, v.other) if c is not None)
        case Compare():
            return (v.lhs, v.rhs)
        case AtomicRMW():
            return _atomic_children(v)
        case Cast() | Bitcast() | IntToPtr():
            return (v.x,)
        case Fma():
            return (v.a, v.b, v.c)
        case Where():
            return (v.cond, v.x, v.y)
        case MatrixMultiplyAccumulate():
            return (v.a, v.b, v.c)
        case MatrixLoad():
            return (v.ptr, v.stride)
        case Unary():
            return (v.x,)
        case Extract():
            return (v.vec,)
        case VecLoad():
            return (v.ptr,)
        case MakeVector():
            return v.elems
        case Splat():
            return (v.x,)
        case MatrixFill():
            return (v.value,)
        case MatrixOf():
            return (v.x, v.y)
        case SimdShuffleXor():
            return (v.x, v.mask)
        case SimdBroadcast():
            return (v.x, v.lane)
        case SimdReduce():
            return (v.x,)
        case SharedAlloc() | Const() | Param() | Var() | Builtin():
            return ()
        case _:
            assert_never(v)


def check_metal(k: Kernel) -> None:
    if k.stage is not Stage.METAL:
        raise EmitError(f"kernel '{k.name}' is at stage {k.stage.value}; MSL is emitted from Metal IR only", k.loc)
    for n in distinct_nodes(k):
        if not isinstance(n, Kernel) and not admits(Stage.METAL, type(n)):
            raise EmitError(f"{type(n).__name__} is not a Metal IR node", n.loc)


def distinct_nodes(root: Node) -> Iterator[Node]:
    """Each structurally distinct node under `root` once (parents before children)."""
    seen: set[Node] = {root}
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        for c in children(n):
            if c not in seen:
                seen.add(c)
                stack.append(c)


def use_counts(k: Kernel) -> dict[Node, int]:
    """How many structurally distinct parents refer to each node (the emitter counts the same in `Records`)."""
    counts: dict[Node, int] = {}
    for n in distinct_nodes(k):
        for c in set(children(n)):
            counts[c] = counts.get(c, 0) + 1
    return counts


def statements(body) -> Iterator:
    """Every statement of `body` and of the bodies nested in it, in program order."""
    for s in body:
        yield s
        match s:
            case For(body=inner):
                yield from statements(inner)
            case If(then=then, orelse=orelse):
                yield from statements(then)
                yield from statements(orelse)
            case While(cond_body=cond_body, body=inner):
                yield from statements(cond_body)
                yield from statements(inner)


def bindings(k: Kernel) -> dict[str, tuple[Value, ...]]:
    """For each bound name, the values it may take (a `Let`'s value; a carried value's init and yield;
    a result's yields or carried value)."""
    defs: dict[str, tuple[Value, ...]] = {}
    for s in statements(k.body):
        match s:
            case Let(var, value):
                defs[var.name] = (value,)
            case For(carried=carried, inits=inits, yields=yields, results=results) | While(
                    carried=carried, inits=inits, yields=yields, results=results):
                for c, i, y, r in zip(carried, inits, yields, results):
                    defs[c.name] = (i, y)
                    defs[r.name] = (c,)
            case If(then_yields=ty, else_yields=ey, results=results):
                for r, a, b in zip(results, ty, ey):
                    defs[r.name] = (a, b)
    return defs


def _roots(ptrs: Iterable[Value], defs: dict[str, tuple[Value, ...]]) -> tuple[frozenset[str], bool]:
    """The names of the parameters the pointers `ptrs` may point into, and whether they may also point into memory
    that is no parameter's (a threadgroup array, an address made a pointer)."""
    found: set[str] = set()
    seen: set[str] = set()
    other = False
    stack = list(ptrs)
    while stack:
        v = stack.pop()
        match v:
            case Param():
                found.add(v.name)
            case Var():
                if v.name not in seen:
                    seen.add(v.name)
                    stack.extend(defs.get(v.name, ()))
            case AddPtr():
                stack.append(v.ptr)
            case Where():
                stack += [v.x, v.y]
            case _:
                other = True
    return frozenset(found), other


def pointer_roots(ptrs: Iterable[Value], defs: dict[str, tuple[Value, ...]]) -> frozenset[str]:
    """The names of the parameters the pointers `ptrs` may point into."""
    return _roots(ptrs, defs)[0]


def sole_root(ptr: Value, defs: dict[str, tuple[Value, ...]]) -> str | None:
    """The name of the one parameter the pointer `ptr` points into, None when it may point into two or into memory
    that is no parameter's (a threadgroup array, an address made a pointer)."""
    found, other = _roots((ptr,), defs)
    return next(iter(found)) if len(found) == 1 and not other else None


def written_params(k: Kernel, defs: dict[str, tuple[Value, ...]]) -> frozenset[str]:
    stores = (Store, AtomicAdd, VecStore, MatrixStore)
    ptrs = [s.ptr if isinstance(s, stores) else s.value.ptr for s in statements(k.body)
            if isinstance(s, stores) or isinstance(s, Let) and isinstance(s.value, AtomicRMW)]
    return pointer_roots(ptrs, defs)


def c_names(k: Kernel) -> dict[str, str]:
    """A distinct C identifier for every parameter and bound name (the IR name when it is one)."""
    names: dict[str, str] = {}
    taken: set[str] = set(MSL_RESERVED) | {function_name(k.name)}

    def claim(name: str) -> None:
        if name in names:
            return
        base = c_identifier(name)
        text, i = base, 1
        while text in taken:
            text, i = f"{base}_{i}", i + 1
        taken.add(text)
        names[name] = text

    for p in sorted(k.params, key=lambda p: p.index):
        claim(p.name)
    for s in statements(k.body):
        match s:
            case Let(var, _):
                claim(var.name)
            case For(index=index, carried=carried, results=results):
                for v in (index, *carried, *results):
                    claim(v.name)
            case If(results=results):
                for v in results:
                    claim(v.name)
            case While(carried=carried, results=results):
                for v in (*carried, *results):
                    claim(v.name)
    return names


def reads_any(values: Iterable[Value], texts: set[str], names: dict[str, str]) -> bool:
    """True when one of the value trees `values` directly reads a bound name whose C identifier (by `names`) is one
    of `texts`."""
    stack: list[Node] = list(values)
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        cls = n.__class__
        if cls is Var:
            if names.get(n.name) in texts:
                return True
        elif cls not in LEAVES and id(n) not in seen:
            seen.add(id(n))
            get = CHILDREN.get(cls)
            stack.extend(get(n) if get is not None else value_children(n))
    return False


def builtins_used(k: Kernel) -> list[BuiltinKind]:
    """The thread-position attributes the kernel reads, in `BuiltinKind` order (`Facts.builtins`)."""
    used = {n.kind for n in distinct_nodes(k) if isinstance(n, Builtin)}
    return [kind for kind in BuiltinKind if kind in used]


__all__ = [
    "ADMITTED_METAL", "CHILDREN", "LEAVES", "Facts", "Records", "bindings", "builtins_used", "c_names", "check_metal",
    "pointer_roots", "reads_any", "scan", "use_counts", "value_children", "written_params",
]
