"""`scan(k)`: one walk over a Tile IR kernel, giving the facts `fold_constants`, `plan_launch` and
`lower_tiles` ask of it.

- `nodes`: every distinct node, children before parents (as `metile.ir.node.walk` gives them);
- `of(cls)`: the nodes of one class (or tuple of classes), in that order;
- per value node (by identity): whether it contains a source of per-thread variation
  (`VARYING_SOURCES`), the names of the variables it reads, and whether it contains a value of `HEAVY`
  (reductions, scans, gathers, `Dot`: the values the lowering materialises before the statement that uses them).
With these, "does this value depend on a varying name?" is a set intersection instead of a walk.

The passes run on the same body (`fold_constants` returns the kernel itself when nothing folds, and
`plan_launch` changes only the kernel's plan), so a run's `metile.rewrite.context.Analyses` makes one scan of a
body for all of them.
"""

from __future__ import annotations

from collections.abc import Iterable

from metile.ir.node import Node, children, walk
from metile.ir.stmts import Kernel
from metile.ir.tile import ArgReduce, Dot, Gather, Reduce, Scan, SimdgroupId, SimdLaneId, ThreadId
from metile.ir.values import SimdBroadcast, SimdReduce, SimdShuffleXor, Value, Var
from metile.rewrite.context import Analyses

VARYING_SOURCES = (ThreadId, SimdLaneId, SimdgroupId, SimdShuffleXor, SimdBroadcast, SimdReduce)
HEAVY = (Reduce, ArgReduce, Scan, Dot, Gather)
"""The values the lowering materialises before the statement that uses them (through scratch memory)."""
_NONE: frozenset[str] = frozenset()


_NOT_VALUE: tuple = ()  # the kind of a class that is not a value (an empty tuple, never a value's kind)
_KINDS: dict[type, tuple] = {}  # node class -> (varying source, heavy, Var), or _NOT_VALUE


def _kind(cls: type) -> tuple:
    if not issubclass(cls, Value):
        return _NOT_VALUE
    return issubclass(cls, VARYING_SOURCES), issubclass(cls, HEAVY), issubclass(cls, Var)


class Scan:
    """The facts of one kernel body (see the module docstring); read-only once built."""

    def __init__(self, k: Kernel):
        # `metile.ir.node.walk`'s order (children before parents, first child first), with each node's
        # children listed once and its facts computed when it is reached the second time.
        nodes: list[Node] = []
        by_type: dict[type, list[Node]] = {}
        # id(value) -> (contains a varying source, names read, contains a heavy value)
        facts: dict[int, tuple[bool, frozenset[str], bool]] = {}
        seen: set[int] = set()
        stack: list[tuple[Node, list[Node] | None]] = [(k, None)]
        pop, push, get = stack.pop, stack.append, facts.get
        while stack:
            n, kids = pop()
            if kids is None:
                if id(n) in seen:
                    continue
                seen.add(id(n))
                kids = children(n)
                if kids:
                    push((n, kids))
                    for c in reversed(kids):
                        if id(c) not in seen:
                            push((c, None))
                    continue
            nodes.append(n)
            cls = n.__class__
            same = by_type.get(cls)
            if same is None:
                by_type[cls] = [n]
            else:
                same.append(n)
            kind = _KINDS.get(cls)
            if kind is None:
                kind = _KINDS[cls] = _kind(cls)
            if not kind:
                continue
            src, heavy, is_var = kind
            names = frozenset((n.name,)) if is_var else _NONE
            for c in kids:
                f = get(id(c))
                if f is None:
                    continue
                src = src or f[0]
                heavy = heavy or f[2]
                if f[1]:
                    names = f[1] if not names else names | f[1]
            facts[id(n)] = (src, names, heavy)
        self.nodes = nodes
        self._by_type = by_type
        self.facts = facts

    def of(self, cls: type | tuple[type, ...]) -> list[Node]:
        if isinstance(cls, type):
            return list(self._by_type.get(cls, ()))
        return [n for n in self.nodes if isinstance(n, cls)]

    def has(self, cls: type | tuple[type, ...]) -> bool:
        """Whether the kernel has a node of `cls` (or of a subclass), without listing them."""
        return any(issubclass(c, cls) for c in self._by_type)

    def depends(self, v: Value | None, names: Iterable[str] | frozenset[str] | set[str]) -> bool:
        """Whether `v` contains a varying source or reads one of `names`."""
        if v is None:
            return False
        f = self.facts.get(id(v))
        if f is None:  # a value built after the scan
            return any(isinstance(n, VARYING_SOURCES) or (isinstance(n, Var) and n.name in names) for n in walk(v))
        return f[0] or (bool(f[1]) and not f[1].isdisjoint(names))

    def names(self, v: Value | None) -> frozenset[str]:
        """The names of the variables `v` reads."""
        if v is None:
            return _NONE
        f = self.facts.get(id(v))
        if f is None:
            return frozenset(n.name for n in walk(v) if isinstance(n, Var))
        return f[1]

    def depends_on_name(self, v: Value | None, name: str) -> bool:
        """Whether `v` reads the variable `name`."""
        return name in self.names(v)

    def heavy(self, v: Value) -> bool:
        """Whether `v` may contain a reduction or a `dot` (True for a value built after the scan)."""
        f = self.facts.get(id(v))
        return True if f is None else f[2]


def scan(k: Kernel, analyses: Analyses | None = None) -> Scan:
    """The `Scan` of `k`: kept by `analyses` for the rest of its run (shared by kernels whose parameters and
    statements are the same objects), made anew without."""
    return Scan(k) if analyses is None else analyses.of(_scan, k)


def _scan(k: Kernel, analyses: Analyses) -> Scan:
    return Scan(k)


__all__ = ["HEAVY", "VARYING_SOURCES", "Scan", "scan"]
