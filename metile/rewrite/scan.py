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

import re
from collections import defaultdict
from collections.abc import Iterable
from operator import attrgetter

import attrs

from metile.ir.node import Node, children, children_getter, no_children, walk
from metile.ir.node_source import NODE_NAMES
from metile.ir.stmts import Kernel
from metile.ir.tile import ArgReduce, Dot, Gather, Reduce, Scan, SimdgroupId, SimdLaneId, ThreadId
from metile.ir.values import SimdBroadcast, SimdReduce, SimdShuffleXor, Stmt, Value, Var
from metile.rewrite.context import Analyses

VARYING_SOURCES = (ThreadId, SimdLaneId, SimdgroupId, SimdShuffleXor, SimdBroadcast, SimdReduce)
HEAVY = (Reduce, ArgReduce, Scan, Dot, Gather)
"""The values the lowering materialises before the statement that uses them (through scratch memory)."""
_NONE: frozenset[str] = frozenset()


_PLAIN: tuple[bool, frozenset[str], bool] = (False, _NONE, False)   # a value with no source, name or heavy value
_NAMED = object()   # the base facts of a variable: its own name, made per node
_PLAIN_TOKENS = frozenset({"int", "float", "bool", "str", "None", "tuple", "BinOp", "UnOp", "CmpOp", "ReduceOp",
                           "BuiltinKind", "DType", "Fence", "Stage", "Type", "AddressSpace"})
"""The words of a declared field type that holds no node."""
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _NotANode(Exception):   # noqa: N818 - internal: a walk by fields met something that is not a node
    pass


# node class -> (whether it is a statement, its base facts (None: not a value), its children getter (None: it has no
# child fields), whether that getter returns the one child itself rather than a sequence of them)
_CLASSES: dict[type, tuple] = {}   # getters by field (`_field_getter`), for walks that may meet a non-node
_SAFE_CLASSES: dict[type, tuple] = {}   # `metile.ir.node.children`'s getters, which skip what is not a node
_LEAVES: dict[type, object] = {}   # the value classes without children (the same in both tables): their base facts


def _field_getter(cls: type):
    """`(getter, one)`: a C getter of the child nodes of a `cls` instance when every field of it that may hold a node
    is declared as one node class (not None, not a sequence): `attrgetter` of those fields (`one`: of the single one,
    returning the child itself). None otherwise. Such a field of a malformed node may hold something else: the walk
    then meets a non-node and starts again with `children`'s getters, which skip it."""
    names = []
    for a in attrs.fields(cls):
        if not a.eq:
            continue
        if not isinstance(a.type, str):
            return None
        words = set(_WORD.findall(a.type))
        if words <= _PLAIN_TOKENS:
            continue
        if len(words) != 1 or not words <= NODE_NAMES:
            return None
        names.append(a.name)
    if not names:
        return None
    return attrgetter(*names), len(names) == 1


def _class_facts(cls: type, safe: bool) -> tuple:
    """What the scan needs of a node class, found by one lookup per node (see `_CLASSES`)."""
    if not issubclass(cls, Node):
        if safe:
            raise TypeError(f"{cls.__name__} is not a node")
        raise _NotANode
    getter = children_getter(cls)
    if getter is None:   # the class has not made its generated methods yet: not kept
        kids_of, one = children, False
    elif getter is no_children:
        kids_of, one = None, False
    else:
        fast = None if safe else _field_getter(cls)
        kids_of, one = (getter, False) if fast is None else fast
    if not issubclass(cls, Value):
        base = None
    elif issubclass(cls, Var):
        base = _NAMED
    else:
        src, heavy = issubclass(cls, VARYING_SOURCES), issubclass(cls, HEAVY)
        base = _PLAIN if not src and not heavy else (src, _NONE, heavy)
    found = (issubclass(cls, Stmt), base, kids_of, one)
    if getter is not None:
        (_SAFE_CLASSES if safe else _CLASSES)[cls] = found
        if kids_of is None and base is not None and not found[0]:
            _LEAVES[cls] = base
    return found


def _merge(f: tuple, g: tuple) -> tuple:
    """The facts of a value whose parts have the facts `f` and `g`."""
    names = f[1] if not g[1] else g[1] if not f[1] else f[1] | g[1]
    return f[0] or g[0], names, f[2] or g[2]


def _leaf_facts(n: Node, base) -> tuple:
    return (False, frozenset((n.name,)), False) if base is _NAMED else base


def _take_span(s: Node, prior: Scan, seen: set[int], skipped: list[Node], nodes: list[Node],
               by_type: dict[type, list[Node]]) -> bool:
    """Take statement `s` into the scan being built (`seen` ... `by_type`) as the walk of `prior` met it, when its
    span there applies (see `Scan`); False, having taken nothing, when it does not."""
    span = prior.spans.get(id(s))
    if span is None or span[0] is not s:
        return False
    _, inner, met = span
    keys = list(map(id, inner))
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
        by_type[x.__class__].append(x)
    # their facts and spans are those of `prior`, which the scan being built started from
    skipped += met   # for the boundaries of the statements around it
    return True


def _visit_all(k: Kernel, prior: Scan | None, nodes: list[Node], by_type: dict[type, list[Node]], facts: dict,
               spans: dict, seen: set[int], skipped: list[Node], classes: dict | None = None) -> None:
    """The walk of `Scan.__init__`, by recursion: `metile.ir.node.walk`'s order (children before parents, first
    child first), each node's facts computed once its children's are. A value's facts are shared with a part of it
    where they are the same (most values: `_PLAIN`, or the facts of their one informative operand). `classes`:
    `_CLASSES` (raising `_NotANode` on meeting a non-node) or `_SAFE_CLASSES`. A child that is a value without
    children (a constant, a variable, a parameter: about a third of a kernel's nodes) is taken where its parent
    meets it, as a call would take it (`_LEAVES`); a node's id is found once, by its parent."""
    safe = classes is _SAFE_CLASSES

    def visit(n, key, prior=prior, take=nodes.append, by_type=by_type, facts=facts, spans=spans, seen=seen,
              skip=skipped.append, get=facts.get, add=seen.add, classes=_CLASSES if classes is None else classes,
              plain=_PLAIN, leaves=_LEAVES.get, named=_NAMED):
        cls = n.__class__
        is_stmt, base, kids_of, one = classes.get(cls) or _class_facts(cls, safe)
        if is_stmt:
            if prior is not None and _take_span(n, prior, seen, skipped, nodes, by_type):
                return
            opened = len(nodes), len(skipped)
        add(key)
        if base is None:   # not a value
            if kids_of is not None:
                for c in kids_of(n):
                    ck = id(c)
                    if ck in seen:
                        skip(c)
                    elif (g := leaves(c.__class__)) is not None:
                        add(ck)
                        facts[ck] = g if g is not named else (False, frozenset((c.name,)), False)
                        take(c)
                        by_type[c.__class__].append(c)
                    else:
                        visit(c, ck)
            if is_stmt:
                first, skipped_at = opened
                spans[key] = (n, (*nodes[first:], n), tuple(skipped[skipped_at:]))
        elif kids_of is None:
            facts[key] = base if base is not named else (False, frozenset((n.name,)), False)
        else:
            f = base
            for c in (kids_of(n),) if one else kids_of(n):
                ck = id(c)
                if ck in seen:
                    skip(c)
                    g = get(ck)
                elif (g := leaves(c.__class__)) is not None:
                    add(ck)
                    if g is named:
                        g = (False, frozenset((c.name,)), False)
                    facts[ck] = g
                    take(c)
                    by_type[c.__class__].append(c)
                else:
                    visit(c, ck)
                    g = get(ck)
                if g is not f and g is not None and g is not plain:
                    f = g if f is plain else _merge(f, g)
            facts[key] = f
        take(n)
        by_type[cls].append(n)

    try:
        visit(k, id(k))
    finally:
        visit = None   # `visit` calls itself through its closure: a cycle that would wait for the collector


def _stack_walk(k: Kernel, prior: Scan | None, nodes: list[Node], by_type: dict[type, list[Node]], facts: dict,
                spans: dict, seen: set[int], skipped: list[Node], classes: dict | None = None) -> None:
    """`_visit_all` with an explicit stack instead of recursion, for kernels deeper than the recursion limit: the same
    nodes, facts and spans (a child is looked at when the walk reaches it, after its earlier siblings, as there)."""
    # The stack holds a node to visit, or `(node, children, opened, base)` once its children are pushed (`opened`:
    # where a statement's span starts in `nodes` and `skipped`, None for a value).
    classes = _CLASSES if classes is None else classes
    safe = classes is _SAFE_CLASSES
    stack: list = [k]
    pop, push, get, add = stack.pop, stack.append, facts.get, seen.add
    while stack:
        n = pop()
        if n.__class__ is tuple:
            n, kids, opened, base = n
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
            is_stmt, base, kids_of, one = classes.get(cls) or _class_facts(cls, safe)
            if is_stmt and prior is not None and _take_span(n, prior, seen, skipped, nodes, by_type):
                continue
            add(key)
            kids = () if kids_of is None else (kids_of(n),) if one else kids_of(n)
            if kids:
                push((n, kids, (len(nodes), len(skipped)) if is_stmt else None, base))
                stack += reversed(kids)
                continue
            if is_stmt:
                spans[key] = (n, (n,), ())
        nodes.append(n)
        by_type[cls].append(n)
        if base is None:
            continue
        f = _leaf_facts(n, base)
        for c in kids:
            g = get(id(c))
            if g is not f and g is not None and g is not _PLAIN:
                f = g if f is _PLAIN else _merge(f, g)
        facts[id(n)] = f


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
        # The nodes whose entries `facts` and `spans` may keep from `prior`, held so their identities stay theirs
        self._held = None if prior is None else (prior.nodes, prior._held)
        walker, classes = _visit_all, _CLASSES
        while True:
            nodes: list[Node] = []
            by_type: dict[type, list[Node]] = defaultdict(list)
            # id(value) -> (contains a varying source, names read, contains a heavy value)
            facts: dict[int, tuple[bool, frozenset[str], bool]] = {} if prior is None else dict(prior.facts)
            # id(statement) -> (statement, the nodes first met inside it, the children it found already met)
            spans: dict[int, tuple[Node, tuple[Node, ...], tuple[Node, ...]]] = \
                {} if prior is None else dict(prior.spans)
            try:
                walker(k, prior, nodes, by_type, facts, spans, set(), [], classes)
                break
            except RecursionError:   # a chain deeper than the interpreter's recursion limit: the same walk by a stack
                if walker is _stack_walk:
                    raise
                walker = _stack_walk
            except _NotANode:   # a malformed node, holding a non-node where a node is declared: walked again by
                classes = _SAFE_CLASSES   # `children`'s getters, which skip it
        self.nodes = nodes
        self._by_type = by_type
        self._matching: dict[type | tuple[type, ...], list[list[Node]]] = {}
        self.facts = facts
        self.spans = spans

    def _lists(self, cls: type | tuple[type, ...]) -> list[list[Node]]:
        """The lists of `_by_type` whose class is `cls` or a subclass, found once per `cls` (the scan is read-only)."""
        found = self._matching.get(cls)
        if found is None:
            if cls.__class__ is not tuple and not cls.__subclasses__():   # a class without subclasses: its own list
                same = self._by_type.get(cls)
                found = self._matching[cls] = [] if same is None else [same]
            else:
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


def replaced_scan(prior: Scan, done: dict[int, Node], dropped: dict[int, Node]) -> Scan:
    """The scan of the kernel of `prior` with each node whose id is a key of `done` replaced by its value (as
    `metile.rewrite.driver.replaced` gives them), made from `prior` without a walk. Each replaced node must be of
    `dropped` (by id), replaced by one of its children with the same facts (`AllActive(x)` by `x`), or rebuilt: a new
    node of its class with the same facts, around the same children but those replaced. The walk of the new kernel
    then meets its nodes where it met the old ones, each dropped node's child where it met that node (the child itself
    met before it), so its scan is `prior`'s with the nodes replaced and the dropped ones left out: `Scan(k)`."""
    get = done.get
    out = Scan.__new__(Scan)
    out._held = (prior.nodes, prior._held)
    out.nodes = _mapped(prior.nodes, get, dropped)
    facts, spans = dict(prior.facts), dict(prior.spans)
    by_type = defaultdict(list, prior._by_type)
    classes = {n.__class__ for n in dropped.values()}
    for key, n in done.items():
        if key in dropped:
            continue
        classes.add(n.__class__)
        f = facts.get(key)
        if f is not None:
            facts[id(n)] = f
        span = spans.get(key)
        if span is not None:
            _, inner, met = span
            spans[id(n)] = (n, tuple(_mapped(inner, get, dropped)), tuple(map(get, map(id, met), met)))
    for cls in classes:
        same = _mapped(by_type.get(cls, ()), get, dropped)
        if same:
            by_type[cls] = same
        else:
            del by_type[cls]
    out._by_type = by_type
    out._matching = {}
    out.facts, out.spans = facts, spans
    return out


def _mapped(nodes, get, dropped: dict[int, Node]) -> list:
    """`nodes` with each node `get(id(node), node)` and those of `dropped` left out (mapped in C)."""
    ids = list(map(id, nodes))
    out = list(map(get, ids, nodes))
    hit = dropped.keys() & ids
    for i in sorted(map(ids.index, hit), reverse=True):
        del out[i]
    return out


def scan(k: Kernel, analyses: Analyses | None = None) -> Scan:
    """The `Scan` of `k`: kept by `analyses` for the rest of its run (shared by kernels whose parameters and
    statements are the same objects), made anew without."""
    return Scan(k) if analyses is None else analyses.of(scan_analysis, k)


def scan_analysis(k: Kernel, analyses: Analyses) -> Scan:
    """The analysis `scan` keeps (`Analyses.record` it with a `Scan` of the kernel built)."""
    return Scan(k)


__all__ = ["HEAVY", "VARYING_SOURCES", "Scan", "replaced_scan", "scan", "scan_analysis"]
