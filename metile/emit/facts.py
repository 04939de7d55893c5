"""Whole-kernel facts the MSL emitter needs before it writes a line, all computed from the kernel alone.

- `check_metal`: the kernel is at `Stage.METAL` and holds only nodes that stage admits.
- `use_counts`: how many distinct parents refer to each value (structural, so equal kernels give equal
  counts); a compound value with two or more is named once instead of repeated.
- `scan`: `check_metal`, `use_counts` (as a `Sharing`, which also keys structurally equal nodes by one
  int) and `builtins_used` in a single walk; the emitter uses it, the separate definitions state what
  it computes.
- `written_params`: the pointer parameters some store, vector store, matrix store or atomic add writes
  through, following `AddPtr`, `Where` and every name binding back to the parameter.
- `c_names`: a valid, distinct C identifier for each parameter and bound name, in definition order.
- `reads_any`: whether a value reads one of some bound names (for parallel assignment of yields).
- `builtins_used`: the thread-position attributes the body reads, in `BuiltinKind` order.
"""

from __future__ import annotations

from collections.abc import Iterator

from metile.emit.spell import MSL_RESERVED, EmitError, c_identifier
from metile.ir import (
    AddPtr,
    AtomicAdd,
    Builtin,
    BuiltinKind,
    For,
    If,
    Kernel,
    Let,
    MatrixStore,
    Node,
    Param,
    Stage,
    Store,
    Value,
    Var,
    VecStore,
    Where,
    While,
    admits,
    children,
)
from metile.ir.stages import ADMITTED


class Sharing:
    """Which nodes of a kernel are structurally equal, and how many distinct parents each one has.

    `key(v)` is one int for every node structurally equal to `v` (the id of its representative, the
    first such node the walk met), so the emitter can key its tables by ints; `counts[key]` is how many
    structurally distinct parents refer to those nodes (see `use_counts`; absent for none).
    Representatives are found under each node's cached hash in `reps` (`Node._h`, read directly: `hash()`
    would call back into Python), then by `==`; a node that is not its representative is remembered by id,
    and held so that its id stays its own. `reps.get(v._h) is v` is the common case of `key`, inlined.
    """

    __slots__ = ("_held", "_others", "_twins", "counts", "reps")

    def __init__(self, by_hash: dict[int, Node], others: dict[Node, Node], counts: dict[int, int]):
        self.reps, self._others, self.counts = by_hash, others, counts
        self._twins: dict[int, int] = {}
        self._held: list[Node] = []

    def key(self, v: Node) -> int:
        r = self.reps.get(v._h)
        if r is v:
            return id(v)
        found = self._twins.get(id(v))
        if found is not None:
            return found
        if r is None:  # a node from outside the kernel
            r = self.reps[v._h] = v
        elif not r == v:  # another structure with the same hash holds that entry: the fallback table
            r = self._others.setdefault(v, v)
        self._twins[id(v)] = id(r)
        self._held.append(v)
        return id(r)

    def uses(self, v: Node) -> int:
        return self.counts.get(self.key(v), 0)


def scan(k: Kernel) -> tuple[Sharing, list[BuiltinKind]]:
    """`check_metal(k)`, then the kernel's `Sharing` and `builtins_used(k)`, in one walk of its nodes.

    Like `distinct_nodes`, the walk expands one representative of each structure; the results are
    those of the definitions below, which hash every node they meet.
    """
    if k.stage is not Stage.METAL:
        check_metal(k)
    admitted = ADMITTED[Stage.METAL]
    by_hash: dict[int, Node] = {k._h: k}
    others: dict[Node, Node] = {}   # structures whose hash another structure took first
    counts: dict[int, int] = {}
    kinds: set[BuiltinKind] = set()
    bad = False
    stack: list[Node] = [k]
    while stack:
        n = stack.pop()
        cls = n.__class__
        if cls not in admitted and cls is not Kernel:
            bad = True
        elif cls is Builtin:
            kinds.add(n.kind)
        reps: set[int] = set()
        for c in children(n):
            r = by_hash.get(c._h)
            if r is None:
                r = by_hash[c._h] = c
                stack.append(c)
            elif r is not c and not r == c:
                r = others.get(c)
                if r is None:
                    r = others[c] = c
                    stack.append(c)
            reps.add(id(r))
        for i in reps:
            counts[i] = counts.get(i, 0) + 1
    if bad:
        check_metal(k)  # raises, naming the node the structural walk meets first
    return Sharing(by_hash, others, counts), [kind for kind in BuiltinKind if kind in kinds]


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
    """How many structurally distinct parents refer to each node (`Sharing.uses` computes the same)."""
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


def pointer_roots(v: Value, defs: dict[str, tuple[Value, ...]]) -> frozenset[str]:
    """The names of the parameters the pointer `v` may point into."""
    found: set[str] = set()
    seen: set[str] = set()
    stack = [v]
    while stack:
        match stack.pop():
            case Param(name):
                found.add(name)
            case Var(name) if name not in seen:
                seen.add(name)
                stack.extend(defs.get(name, ()))
            case AddPtr(ptr, _):
                stack.append(ptr)
            case Where(_, x, y):
                stack += [x, y]
    return frozenset(found)


def written_params(k: Kernel, defs: dict[str, tuple[Value, ...]]) -> frozenset[str]:
    written: set[str] = set()
    for s in statements(k.body):
        match s:
            case Store(ptr=ptr) | AtomicAdd(ptr=ptr) | VecStore(ptr=ptr) | MatrixStore(ptr=ptr):
                written |= pointer_roots(ptr, defs)
    return frozenset(written)


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


def reads_any(v: Value, names: set[str]) -> bool:
    """True when the value tree `v` reads one of the bound `names` directly."""
    stack: list[Node] = [v]
    while stack:
        match stack.pop():
            case Var(name) if name in names:
                return True
            case n:
                stack.extend(children(n))
    return False


def builtins_used(k: Kernel) -> list[BuiltinKind]:
    """The thread-position attributes the kernel reads, in `BuiltinKind` order (`scan` computes the same)."""
    used = {n.kind for n in distinct_nodes(k) if isinstance(n, Builtin)}
    return [kind for kind in BuiltinKind if kind in used]


__all__ = [
    "Sharing", "bindings", "builtins_used", "c_names", "check_metal", "pointer_roots", "reads_any", "scan",
    "use_counts", "written_params",
]
