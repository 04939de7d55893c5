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
body for all of them. A pass that rebuilds some statements (`fold_constants`, `skip_inactive`) records the scan of
its kernel made from the scan of the kernel it was given, `Scan(k, prior)`, which walks only the statements it
rebuilt.
"""

from __future__ import annotations

from collections.abc import Iterable

from metile.ir.node import Node, children, children_getter, no_children, walk
from metile.ir.stmts import Kernel
from metile.ir.tile import ArgReduce, Dot, Gather, Reduce, Scan, SimdgroupId, SimdLaneId, ThreadId
from metile.ir.values import SimdBroadcast, SimdReduce, SimdShuffleXor, Stmt, Value, Var
from metile.rewrite.context import Analyses

VARYING_SOURCES = (ThreadId, SimdLaneId, SimdgroupId, SimdShuffleXor, SimdBroadcast, SimdReduce)
HEAVY = (Reduce, ArgReduce, Scan, Dot, Gather)
"""The values the lowering materialises before the statement that uses them (through scratch memory)."""
_NONE: frozenset[str] = frozenset()


_NOT_VALUE: tuple = ()  # the kind of a class that is not a value (an empty tuple, never a value's kind)
_CLASSES: dict[type, tuple] = {}  # node class -> (whether it is a statement, its kind, its children getter)


def _kind(cls: type) -> tuple:
    if not issubclass(cls, Value):
        return _NOT_VALUE
    return issubclass(cls, VARYING_SOURCES), issubclass(cls, HEAVY), issubclass(cls, Var)


def _class_facts(cls: type) -> tuple:
    """What the scan needs of a node class, found by one lookup per node: whether it is a statement, its kind
    (`_kind`) and the function listing an instance's children (`metile.ir.node.children`'s own, once the class has
    made its generated methods; None for a class without child fields)."""
    getter = children_getter(cls)
    found = (issubclass(cls, Stmt), _kind(cls),
             None if getter is no_children else getter if getter is not None else children)
    if getter is not None:
        _CLASSES[cls] = found
    return found


def _take_span(s: Node, prior: Scan, seen: set[int], skipped: list[Node], nodes: list[Node],
               by_type: dict[type, list[Node]]) -> bool:
    """Take statement `s` into the scan being built (`seen` ... `by_type`) as the walk of `prior` met it, when its
    span there applies (see `Scan`); False, having taken nothing, when it does not."""
    span = prior.spans.get(id(s))
    if span is None or span[0] is not s:
        return False
    _, inner, met = span
    keys = [id(x) for x in inner]
    if not seen.isdisjoint(keys):
        return False
    inside = None
    for x in met:   # each child found already met was met before `s`, or inside it
        if id(x) not in seen:
            if inside is None:
                inside = set(keys)
            if id(x) not in inside:
                return False
    seen.update(keys)
    nodes += inner
    for x in inner:
        same = by_type.get(x.__class__)
        if same is None:
            by_type[x.__class__] = [x]
        else:
            same.append(x)
    # their facts and spans are those of `prior`, which the scan being built started from
    skipped += met   # for the boundaries of the statements around it
    return True


def _visit_all(k: Kernel, prior: Scan | None, nodes: list[Node], by_type: dict[type, list[Node]], facts: dict,
               spans: dict, seen: set[int], skipped: list[Node]) -> None:
    """The walk of `Scan.__init__`, by recursion: `metile.ir.node.walk`'s order (children before parents, first
    child first), each node's facts computed once its children's are."""

    def visit(n, prior=prior, nodes=nodes, by_type=by_type, facts=facts, spans=spans, seen=seen, skipped=skipped,
              get=facts.get, add=seen.add, classes=_CLASSES):
        cls = n.__class__
        is_stmt, kind, kids_of = classes.get(cls) or _class_facts(cls)
        if is_stmt:
            if prior is not None and _take_span(n, prior, seen, skipped, nodes, by_type):
                return
            opened = len(nodes), len(skipped)
        add(id(n))
        if kids_of is None:   # a class without child fields
            kids = ()
        else:
            kids = kids_of(n)
            for c in kids:
                if id(c) in seen:
                    skipped.append(c)
                else:
                    visit(c)
        if is_stmt:
            first, skip = opened
            spans[id(n)] = (n, (*nodes[first:], n), tuple(skipped[skip:]))
        nodes.append(n)
        same = by_type.get(cls)
        if same is None:
            by_type[cls] = [n]
        else:
            same.append(n)
        if not kind:
            return
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

    visit(k)


def _stack_walk(k: Kernel, prior: Scan | None, nodes: list[Node], by_type: dict[type, list[Node]], facts: dict,
                spans: dict, seen: set[int], skipped: list[Node]) -> None:
    """`_visit_all` with an explicit stack instead of recursion, for kernels deeper than the recursion limit: the same
    nodes, facts and spans (a child is looked at when the walk reaches it, after its earlier siblings, as there)."""
    # The stack holds a node to visit, or `(node, children, opened, kind)` once its children are pushed (`opened`:
    # where a statement's span starts in `nodes` and `skipped`, None for a value).
    stack: list = [k]
    pop, push, get, add, classes = stack.pop, stack.append, facts.get, seen.add, _CLASSES
    while stack:
        n = pop()
        if n.__class__ is tuple:
            n, kids, opened, kind = n
            cls = n.__class__
            if opened is not None:
                first, skip = opened
                spans[id(n)] = (n, (*nodes[first:], n), tuple(skipped[skip:]))
        else:
            key = id(n)
            if key in seen:
                skipped.append(n)
                continue
            cls = n.__class__
            is_stmt, kind, kids_of = classes.get(cls) or _class_facts(cls)
            if is_stmt and prior is not None and _take_span(n, prior, seen, skipped, nodes, by_type):
                continue
            add(key)
            kids = () if kids_of is None else kids_of(n)
            if kids:
                push((n, kids, (len(nodes), len(skipped)) if is_stmt else None, kind))
                stack += reversed(kids)
                continue
            if is_stmt:
                spans[key] = (n, (n,), ())
        nodes.append(n)
        same = by_type.get(cls)
        if same is None:
            by_type[cls] = [n]
        else:
            same.append(n)
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


class Scan:
    """The facts of one kernel body (see the module docstring); read-only once built.

    `Scan(k, prior)` gives the same scan as `Scan(k)` with less work when `k` shares statements with the kernel
    `prior` scanned (a pass rebuilt a few of them): the walk visits a statement's nodes in an order decided only by
    which of them it has met before, so the scan keeps, per statement, the nodes first met inside it (`spans`: in
    walk order, the statement last) and the nodes it found already met (its boundary). A statement of `prior` met
    again with none of the first met and all of its boundary, as `prior`'s walk had them, is visited as that walk
    visited it: its nodes and their facts are taken from `prior` instead of walking it again.

    Such a scan starts from copies of `prior`'s facts and spans (dictionaries copied whole, rather than entry by entry
    for each statement taken) and holds `prior`'s nodes: `facts` and `spans` may then also have entries for nodes of
    `prior` that `k` no longer has. Those are still right (a value's facts and a statement's span are those of the
    node itself, and a span is checked before it is taken), and the nodes being held, their identities stay theirs.
    """

    def __init__(self, k: Kernel, prior: Scan | None = None):
        # `metile.ir.node.walk`'s order (children before parents, first child first), with each node's
        # children listed once and its facts computed when it is reached the second time.
        nodes: list[Node] = []
        by_type: dict[type, list[Node]] = {}
        # id(value) -> (contains a varying source, names read, contains a heavy value)
        facts: dict[int, tuple[bool, frozenset[str], bool]] = {} if prior is None else dict(prior.facts)
        # id(statement) -> (statement, the nodes first met inside it, the children it found already met)
        spans: dict[int, tuple[Node, tuple[Node, ...], tuple[Node, ...]]] = {} if prior is None else dict(prior.spans)
        # the nodes whose entries `facts` and `spans` may keep from `prior`, held so their identities stay theirs
        self._held = None if prior is None else (prior.nodes, prior._held)
        try:
            seen: set[int] = set()
            skipped: list[Node] = []     # the children found already met, in walk order
            _visit_all(k, prior, nodes, by_type, facts, spans, seen, skipped)
        except RecursionError:   # a chain deeper than the interpreter's recursion limit: the same walk by a stack
            nodes, by_type, seen, skipped = [], {}, set(), []
            facts, spans = ({}, {}) if prior is None else (dict(prior.facts), dict(prior.spans))
            _stack_walk(k, prior, nodes, by_type, facts, spans, seen, skipped)
        self.nodes = nodes
        self._by_type = by_type
        self._matching: dict[type | tuple[type, ...], list[list[Node]]] = {}
        self.facts = facts
        self.spans = spans

    def _lists(self, cls: type | tuple[type, ...]) -> list[list[Node]]:
        """The lists of `_by_type` whose class is `cls` or a subclass, found once per `cls` (the scan is read-only)."""
        found = self._matching.get(cls)
        if found is None:
            found = self._matching[cls] = [same for c, same in self._by_type.items() if issubclass(c, cls)]
        return found

    def of(self, cls: type | tuple[type, ...]) -> list[Node]:
        if cls.__class__ is not tuple:
            return list(self._by_type.get(cls, ()))
        found = self._lists(cls)
        if len(found) <= 1:   # nodes of one class or none: their list, in the order of `nodes`, without a look at those
            return list(found[0]) if found else []
        return [n for n in self.nodes if isinstance(n, cls)]

    def classes(self):
        """Each class of the kernel's nodes with its nodes, in the order `of` lists them (read-only)."""
        return self._by_type.items()

    def has(self, cls: type | tuple[type, ...]) -> bool:
        """Whether the kernel has a node of `cls` (or of a subclass), without listing them."""
        return bool(self._lists(cls))

    def first(self, cls: type | tuple[type, ...]) -> Node | None:
        """The first node of `cls` (or of a subclass) in `nodes`, None without one: `next(n for n in nodes if
        isinstance(n, cls))`, looking through `nodes` only when nodes of two or more classes qualify."""
        found = self._lists(cls)
        if not found:
            return None
        if len(found) == 1:
            return found[0][0]
        return next(n for n in self.nodes if isinstance(n, cls))

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
    return Scan(k) if analyses is None else analyses.of(scan_analysis, k)


def scan_analysis(k: Kernel, analyses: Analyses) -> Scan:
    """The analysis `scan` keeps (`Analyses.record` it with a `Scan` of the kernel built)."""
    return Scan(k)


__all__ = ["HEAVY", "VARYING_SOURCES", "Scan", "scan", "scan_analysis"]
