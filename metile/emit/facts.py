"""Facts about a kernel that the MSL emitter needs, and the definitions its own walk is checked against.

- `scan`: one walk of the statements in program order (values are not visited): the C names of the
  parameters and bound names (`c_names`), the values each name may take (`bindings`) and the pointer
  parameters written through (`written_params`). It checks the stage and the statements first.
- `Records`: one record per structure (structurally equal nodes share it), for the emitter.
- `value_children`: `children` of a Metal IR value, read field by field.
- `check_metal`: the kernel is at `Stage.METAL` and holds only nodes that stage admits.
- `use_counts`: how many distinct parents refer to each value (structural, so equal kernels give equal
  counts); the emitter counts the same while it writes, and names a compound value with two or more
  once instead of repeating it.
- `pointer_roots`: the parameters pointers may point into, following `AddPtr`, `Where` and every name
  binding back to the parameter; `written_params`: the pointer parameters some store, vector store,
  matrix store or atomic add writes through.
- `reads_any`: whether some values read one of some bound names (for parallel assignment of yields).
- `builtins_used`: the thread-position attributes the body reads, in `BuiltinKind` order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from metile.emit.spell import MSL_RESERVED, EmitError, c_identifier
from metile.ir import (
    AddPtr,
    AtomicAdd,
    Barrier,
    Binary,
    Builtin,
    BuiltinKind,
    Cast,
    Compare,
    Const,
    Extract,
    For,
    If,
    Kernel,
    Let,
    Load,
    MakeVector,
    MatrixFill,
    MatrixLoad,
    MatrixMultiplyAccumulate,
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


class Facts:
    """What `scan` found: `names` (`c_names`), `defs` (`bindings`) and `written` (`written_params`)."""

    __slots__ = ("defs", "names", "written")

    def __init__(self, names: dict[str, str], defs: dict[str, tuple[Value, ...]], written: frozenset[str]):
        self.names, self.defs, self.written = names, defs, written


def scan(k: Kernel) -> Facts:
    """`check_metal(k)` for the stage and the statements, then the facts about the kernel's names, in one walk
    of its statements in program order (values are not visited)."""
    if k.stage is not Stage.METAL:
        check_metal(k)
    names: dict[str, str] = {}
    taken = set(MSL_RESERVED)
    taken.add(c_identifier(k.name))
    defs: dict[str, tuple[Value, ...]] = {}
    stores: list[Value] = []

    def claim(name: str) -> None:
        if name in names:
            return
        base = c_identifier(name)
        text, i = base, 1
        while text in taken:
            text, i = f"{base}_{i}", i + 1
        taken.add(text)
        names[name] = text

    def walk(body) -> None:
        for s in body:
            match s:
                case Let():
                    claim(s.var.name)
                    defs[s.var.name] = (s.value,)
                case Store() | AtomicAdd() | VecStore() | MatrixStore():
                    stores.append(s.ptr)
                case For():
                    for v in (s.index, *s.carried, *s.results):
                        claim(v.name)
                    for c, i, y, r in zip(s.carried, s.inits, s.yields, s.results):
                        defs[c.name] = (i, y)
                        defs[r.name] = (c,)
                    walk(s.body)
                case If():
                    for v in s.results:
                        claim(v.name)
                    for r, a, b in zip(s.results, s.then_yields, s.else_yields):
                        defs[r.name] = (a, b)
                    walk(s.then)
                    walk(s.orelse)
                case While():
                    for v in (*s.carried, *s.results):
                        claim(v.name)
                    for c, i, y, r in zip(s.carried, s.inits, s.yields, s.results):
                        defs[c.name] = (i, y)
                        defs[r.name] = (c,)
                    walk(s.cond_body)
                    walk(s.body)
                case Barrier():
                    pass
                case _:
                    check_metal(k)  # raises for a statement Metal IR does not admit
                    assert_never(s)

    for p in sorted(k.params, key=lambda p: p.index):
        claim(p.name)
    walk(k.body)
    return Facts(names, defs, pointer_roots(stores, defs))


class Records:
    """One record per structure met (structurally equal nodes share it), a list `[node, parent, texts, shared]`:
    the first node of the structure, the record of the first parent it was met under, the emitter's texts for
    it while they are in scope (else None), and whether a second distinct parent has been met.

    Records are found under each node's cached hash in `by_hash` (`Node._h`, read directly: `hash()` would call
    back into Python), then by `==`. `by_hash.get(v._h)` holding `v` itself is the common case, which callers
    test before calling `record`; a node structurally equal to an earlier one is remembered by id, and held so
    that its id stays its own.
    """

    __slots__ = ("_held", "_others", "_twins", "by_hash")

    def __init__(self) -> None:
        self.by_hash: dict[int, list] = {}
        self._others: dict[Node, list] = {}  # structures whose hash another structure took first
        self._twins: dict[int, list] = {}
        self._held: list[Node] = []

    def record(self, v: Node, found: list | None, parent: list | None) -> list:
        """The record of `v`, for which `by_hash` gave `found` (None, or not `v`'s own); a new structure's
        first parent is `parent`. Refuses a node class Metal IR does not admit."""
        if found is None:
            self._check(v)
            found = self.by_hash[v._h] = [v, parent, None, False]
            return found
        rec = self._twins.get(id(v))
        if rec is None:
            if found[0] == v:
                rec = found
            else:
                rec = self._others.get(v)
                if rec is None:
                    self._check(v)
                    rec = self._others[v] = [v, parent, None, False]
                    return rec
            self._twins[id(v)] = rec
            self._held.append(v)
        return rec

    @staticmethod
    def _check(v: Node) -> None:
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
        case Cast():
            return (v.x,)
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


def pointer_roots(ptrs: Iterable[Value], defs: dict[str, tuple[Value, ...]]) -> frozenset[str]:
    """The names of the parameters the pointers `ptrs` may point into."""
    found: set[str] = set()
    seen: set[str] = set()
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
    return frozenset(found)


def written_params(k: Kernel, defs: dict[str, tuple[Value, ...]]) -> frozenset[str]:
    stores = (Store, AtomicAdd, VecStore, MatrixStore)
    return pointer_roots([s.ptr for s in statements(k.body) if isinstance(s, stores)], defs)


def c_names(k: Kernel) -> dict[str, str]:
    """A distinct C identifier for every parameter and bound name (the IR name when it is one)."""
    names: dict[str, str] = {}
    taken: set[str] = set(MSL_RESERVED) | {c_identifier(k.name)}

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


def reads_any(values: Iterable[Value], names: set[str]) -> bool:
    """True when one of the value trees `values` reads one of the bound `names` directly."""
    stack: list[Node] = list(values)
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        match n:
            case Var():
                if n.name in names:
                    return True
            case Const() | Param() | Builtin():
                pass
            case _:
                if id(n) not in seen:
                    seen.add(id(n))
                    stack.extend(value_children(n))
    return False


def builtins_used(k: Kernel) -> list[BuiltinKind]:
    """The thread-position attributes the kernel reads, in `BuiltinKind` order (`Facts.builtins`)."""
    used = {n.kind for n in distinct_nodes(k) if isinstance(n, Builtin)}
    return [kind for kind in BuiltinKind if kind in used]


__all__ = [
    "ADMITTED_METAL", "LEAVES", "Facts", "Records", "bindings", "builtins_used", "c_names", "check_metal",
    "pointer_roots", "reads_any", "scan", "use_counts", "value_children", "written_params",
]
