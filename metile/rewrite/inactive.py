"""`skip_inactive`: what masked-off elements mean, made explicit in Tile IR.

A load with `mask=` and no `other=` makes the elements where the mask is false *inactive*. An inactive
element reads 0 wherever it is used element-wise, but:
- an update of a loop-carried value (a `tile_range` or `while` loop, directly or through a runtime `if` in
  its body) leaves the old value at the elements where the new one is inactive;
- every reduction (`sum`, `max`, `min`, `argmax`, `argmin`) and scan (`cumsum`, `cumprod`) skips them.

Activity is a bool of each value's shape, where true means active; `None` stands for "everywhere true". It
flows through element-wise operations (an element is active where all its operands are), `where(c, a, b)`
takes each side's activity, `other=` gives a load's masked-off elements its values and their activity, and a
reduction, a `dot` result and `AllActive(x)` (the accumulator of `dot(a, b, acc)`: `acc + dot(a, b)` keeps the
inactivity of `acc`, `dot(a, b, acc)` does not) are active everywhere. A loop-carried value starts with its
initial value's activity and gains the elements each iteration makes active; a runtime `if` or `simdgroup_role`
result has the activity of the value its branch yields. Nothing else (stores, atomics, simdgroup exchanges)
looks at activity. These rules are `metile.rewrite.activity`'s; the walk does not look at the operands of a value
whose activity is none of theirs (a `dot`, a reduction), as `dot(a, b)` of two masked loads.

The pass makes all of this ordinary IR, so no later pass knows about activity:
- `skip_reduction` (a rule): `reduce(x)` -> `reduce(where(active(x), x, identity))`, and the same for scans
  and arg-reductions (whose skipped elements lose every tie);
- a loop's yield `y` of carried `c` -> `where(active(y), y, c)`;
- the activity of a loop-carried value, and of an `if` or role result, becomes a bool value carried or
  yielded beside it, but only where some rewrite reads it: a first walk over the kernel finds which of these
  activity values the rewrites use, and a second walk builds the kernel with only those.
`AllActive(x)` then becomes `x`, so that no later pass sees it. A kernel without a masked load, or whose inactive
elements reach no reduction and no loop update, is returned as it is (the same object, so later passes share its
scan) unless it has an `AllActive`; one without a reduction, scan, loop or assertion is not even walked. A kernel it
rebuilds has its scan recorded, made from the scan of the kernel it was given (`metile.rewrite.scan.Scan(k, prior)`),
so that the passes after it walk only the statements it rebuilt.
"""

from __future__ import annotations

import functools

import attrs

from metile.ir.node import Node, children, children_getter, evolve_node, map_children, no_children, walk
from metile.ir.ops import BinOp, Stage, UnOp
from metile.ir.stmts import AtomicAdd, Barrier, DeviceAssert, DevicePrint, For, If, Kernel, Let, Store, While
from metile.ir.tile import AllActive, ArgReduce, Full, Reduce, Scan, SimdgroupRole
from metile.ir.types import DType, TileType
from metile.ir.values import Binary, Cast, Load, Stmt, Unary, Value, Var, Where
from metile.rewrite.activity import READS_OPERANDS, both, either, everywhere, node_activity, pick
from metile.rewrite.context import PassContext
from metile.rewrite.driver import bottom_up
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.lower.ops import identity
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.scan import Scan as KernelScan
from metile.rewrite.scan import replaced_scan, scan, scan_analysis

_UNKNOWN = object()
_READING: dict[type, bool] = {}   # per class of value, whether it is one of `READS_OPERANDS` (or a subclass of one)


@attrs.frozen
class Rewrite:
    """The context of `skip_reduction`: the activity of any value, as the walk knows it at that point."""

    activity: object  # Callable[[Value], Value | None]


def skip_reduction(n: Node, ctx: Rewrite) -> Node | None:
    """`reduce(x)` over a partly inactive `x` -> `reduce(where(active, x, identity))`; the same for a scan, and
    for an arg-reduction, which also skips the inactive elements (`valid`) so that they lose every tie."""
    match n:
        case Reduce(op, x, axis) if (a := ctx.activity(x)) is not None:
            return Reduce(op, _identity_where(a, x, op), axis, loc=n.loc)
        case Scan(op, x, axis, reverse) if (a := ctx.activity(x)) is not None:
            return Scan(op, _identity_where(a, x, op), axis, reverse, loc=n.loc)
        case ArgReduce(op, x, axis, valid) if (a := ctx.activity(x)) is not None:
            return ArgReduce(op, _identity_where(a, x, op), axis, both(valid, a), loc=n.loc)
    return None


def _identity_where(a: Value, x: Value, op) -> Value:
    """`x` with the identity of `op` where `a` is false (active nowhere there: its activity is everywhere)."""
    return Where(a, x, Full(x.type.shape, identity(op, x.type.dtype)), loc=x.loc)


class _Walk:
    """One walk over a kernel body, rebuilding it with the rewrites of the module docstring.

    `keep` names the activity values to build (None: all of them, as the first walk does); `used` collects
    the names of the activity values the rewrites read, and `defs` what each activity value is made of, so
    that the first walk can tell the second which to keep."""

    def __init__(self, found, names: set[str], keep: frozenset[str] | None, maybe: frozenset[str]):
        self.found = found
        self.maybe = maybe
        self.names = set(names)
        self.keep = keep
        self.env: dict[str, Value | None] = {}  # the activity of each variable known so far
        self.lets: dict[str, Value] = {}  # the value of each variable bound by a `Let`
        self.memo: dict[int, Value | None] = {}  # by id of the node, held in `held`
        self.held: list[Node] = []
        self.used: set[str] = set()
        self.defs: dict[str, list[Value]] = {}
        self.changed = False
        facts = found.facts   # `inert`: a value of the kernel with no reduction in it, left as it is unvisited
        self.inert = lambda v: (f := facts.get(id(v))) is not None and not f[2]

    # ---- activity

    def activity(self, v: Value | None) -> Value | None:
        """The activity of `v` (None: active everywhere), from its children's, each computed once and only when
        asked for (a `Let`'s value when a use of its variable is). Known activities are kept by node identity (a
        node's hash is a Python call), with the nodes held so that their identities stay their own."""
        if v is None:
            return None
        memo = self.memo
        found = memo.get(id(v), _UNKNOWN)
        if found is not _UNKNOWN:
            return found
        facts, maybe, env, lets, held = self.found.facts, self.maybe, self.env, self.lets, self.held
        known = self.known
        # a node to look at, or a 1-tuple holding a node whose children are known (its children listed once)
        stack: list = [v]
        pop, push = stack.pop, stack.append
        while stack:
            n = pop()
            if n.__class__ is tuple:
                n = n[0]
                if id(n) not in memo:
                    memo[id(n)] = node_activity(n, known)
                    held.append(n)
                continue
            key = id(n)
            if key in memo:
                continue
            f = facts.get(key)
            if f is not None and n.__class__ is not Load and f[1].isdisjoint(maybe):
                memo[key] = None  # a value of the kernel that reads nothing inactive
                continue
            if n.__class__ is Var:
                name = n.name
                if name not in env:
                    d = lets.get(name)
                    if d is not None and id(d) not in memo:
                        push(n)
                        push(d)
                        continue
                    env[name] = None if d is None else memo[id(d)]
                memo[key] = env[name]
                held.append(n)
                continue
            cls = n.__class__
            reads = _READING.get(cls)
            if reads is None:
                reads = _READING[cls] = issubclass(cls, READS_OPERANDS)
            if not reads:   # active everywhere whatever its operands (a `dot`, a reduction): they are not looked at
                memo[key] = None
                held.append(n)
                continue
            todo = [c for c in children(n) if id(c) not in memo and isinstance(c, Value)]
            if todo:
                push((n,))
                stack.extend(todo)
                continue
            memo[key] = node_activity(n, known)
            held.append(n)
        return memo[id(v)]

    def known(self, v: Value) -> Value | None:
        """The activity of a child whose activity `activity` has computed."""
        return self.memo[id(v)]

    def consume(self, a: Value | None) -> Value | None:
        """`a`, read by a rewrite: the activity values it names are needed."""
        if a is not None:
            self.used.update(n.name for n in walk(a) if n.__class__ is Var)
            self.changed = True
        return a

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.names:
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        return name

    def activity_var(self, of: Var, shape: tuple[int, ...], defs: list[Value]) -> Var | None:
        """A new variable holding the activity of `of`, made of `defs`; None when this walk does not keep it."""
        name = self.fresh(f"{of.name}_active")
        self.defs[name] = defs
        if self.keep is not None and name not in self.keep:
            return None
        return Var(name, TileType(DType.BOOL, shape), loc=of.loc)

    # ---- values and statements

    def value(self, v: Value | None) -> Value | None:
        """`v` with its reductions over inactive elements rewritten."""
        if v is None or not self.found.heavy(v):
            return v
        rule = functools.partial(skip_reduction, ctx=Rewrite(self.activity))   # made here: kept, a cycle through self
        rule.__name__ = skip_reduction.__name__
        out = bottom_up(rule, v, inert=self.inert)
        if out is not v:
            self.changed = True
            self.used.update(n.name for n in walk(out) if n.__class__ is Var and n.name in self.defs)
        return out

    def block(self, stmts) -> list:
        out = []
        for s in stmts:
            out.extend(self.stmt(s))
        return out

    def stmt(self, s) -> list:
        match s:
            case Let(var, value):
                value = self.value(value)
                self.lets[var.name] = value  # its activity is computed when a use asks for it
                return [s if value is s.value else Let(var, value, loc=s.loc)]
            case Store(ptr, value, mask) | AtomicAdd(ptr, value, mask):
                parts = [self.value(x) for x in (ptr, value, mask)]
                same = all(a is b for a, b in zip(parts, (ptr, value, mask)))
                return [s if same else evolve_node(s, ptr=parts[0], value=parts[1], mask=parts[2])]
            case DeviceAssert(cond, msg, mask) if (a := self.consume(self.activity(cond))) is not None:
                # an inactive element is not checked, as reductions skip it
                return [DeviceAssert(Binary(BinOp.OR, cond, Unary(UnOp.NOT, a)), msg, mask, loc=s.loc)]
            case Barrier() | DevicePrint() | DeviceAssert():
                return [s]
            case For():
                return [self.for_loop(s)]
            case While():
                return [self.while_loop(s)]
            case If():
                return [self.branch(s)]
            case SimdgroupRole():
                return [self.role(s)]
        raise UnsupportedConstructError(f"skip_inactive does not know the statement {type(s).__name__}", s.loc)

    def carry(self, carried, inits) -> list[tuple[Var, Var, Value]]:
        """Bind the activity of each carried variable; returns the activity variables the loop carries (each
        with its carried variable and initial activity)."""
        tracked = []
        for c, init in zip(carried, inits):
            a = self.activity(init)
            if a is None:
                self.env[c.name] = None
                continue
            var = self.activity_var(c, c.type.shape, [a])
            self.env[c.name] = var
            if var is not None:
                tracked.append((c, var, a))
        return tracked

    def keep_old(self, carried, yields) -> list[Value]:
        """Each yield `y` of a carried `c` as `where(active(y), y, c)`; an integer `c + v` stays as it is where `v`
        is 0 wherever `y` is inactive (a masked load's zeros add nothing). A float sum is selected all the same:
        `-0.0 + 0.0` is `+0.0`, so adding a zero would lose a carried `-0.0`."""
        out = []
        for c, y in zip(carried, yields):
            a = self.activity(y)
            if a is None or y == c or (self.activity(c) is None and self.adds_zeros(c, y, a)):
                out.append(y)
            else:
                out.append(Where(self.consume(a), y, c, loc=y.loc))
        return out

    def adds_zeros(self, c: Var, y: Value, a: Value) -> bool:
        """Whether `y` is `c + v` (either order) with `v` exactly 0 wherever `a` (its activity) is false."""
        if not c.type.dtype.is_int:
            return False
        if y.__class__ is Var:
            y = self.lets.get(y.name, y)
        match y:
            case Binary(BinOp.ADD, lhs, v) if lhs == c:
                return self.zero_where_inactive(v, a)
            case Binary(BinOp.ADD, v, rhs) if rhs == c:
                return self.zero_where_inactive(v, a)
        return False

    def zero_where_inactive(self, v: Value, a: Value) -> bool:
        """Whether `v` is 0 at every element where `a` is false: a masked load without `other=` whose mask is
        `a`, a conversion of one, or a product of two."""
        match v:
            case Var(name) if (d := self.lets.get(name)) is not None:
                return self.zero_where_inactive(d, a)
            case Load(_, mask, None) if mask is not None:
                return mask == a
            case Cast(x, _):
                return self.zero_where_inactive(x, a)
            case Binary(BinOp.MUL, x, z):
                return self.zero_where_inactive(x, a) and self.zero_where_inactive(z, a)
        return False

    def gained(self, tracked, yields_by_name: dict[str, Value]) -> list[Value]:
        """The activity each tracked carried variable has after an iteration (its own, or the yield's)."""
        out = []
        for c, var, _ in tracked:
            a = either(self.activity(yields_by_name[c.name]), var)
            self.defs[var.name].append(everywhere(c.type.shape) if a is None else a)
            out.append(everywhere(c.type.shape) if a is None else a)
        return out

    def results(self, carried, tracked, results) -> list[Var]:
        """Bind the activity of each loop result; returns the variables holding the tracked ones."""
        out = []
        by_carried = {c.name: var for c, var, _ in tracked}
        for c, r in zip(carried, results):
            var = by_carried.get(c.name)
            if var is None:
                self.env[r.name] = None
                continue
            rv = Var(self.fresh(f"{r.name}_active"), var.type, loc=r.loc)
            self.env[r.name] = rv
            out.append(rv)
        return out

    def for_loop(self, s: For) -> For:
        start, stop, step = (self.value(x) for x in (s.start, s.stop, s.step))
        inits = [self.value(x) for x in s.inits]
        self.env[s.index.name] = None
        tracked = self.carry(s.carried, inits)
        body = self.block(s.body)
        ys = [self.value(y) for y in s.yields]
        new_ys = self.keep_old(s.carried, ys)
        extra_ys = self.gained(tracked, {c.name: y for c, y in zip(s.carried, ys)})
        extra_rs = self.results(s.carried, tracked, s.results)
        return _rebuilt(s, start=start, stop=stop, step=step, carried=[*s.carried, *(v for _, v, _ in tracked)],
                        inits=[*inits, *(a for _, _, a in tracked)], body=body, yields=[*new_ys, *extra_ys],
                        results=[*s.results, *extra_rs])

    def while_loop(self, s: While) -> While:
        inits = [self.value(x) for x in s.inits]
        tracked = self.carry(s.carried, inits)
        cond_body = self.block(s.cond_body)
        cond = self.value(s.cond)
        body = self.block(s.body)
        ys = [self.value(y) for y in s.yields]
        new_ys = self.keep_old(s.carried, ys)
        extra_ys = self.gained(tracked, {c.name: y for c, y in zip(s.carried, ys)})
        extra_rs = self.results(s.carried, tracked, s.results)
        return _rebuilt(s, carried=[*s.carried, *(v for _, v, _ in tracked)],
                        inits=[*inits, *(a for _, _, a in tracked)], cond_body=cond_body, cond=cond, body=body,
                        yields=[*new_ys, *extra_ys],
                        results=[*s.results, *extra_rs])

    def yielded(self, results, *branches) -> tuple[list[list[Value]], list[Var]]:
        """For each result whose yields are partly inactive in some branch: an extra yield per branch (its
        activity there) and an extra result holding it."""
        extra = [[] for _ in branches]
        new_results = []
        for i, r in enumerate(results):
            acts = [self.activity(ys[i]) for ys in branches]
            if all(a is None for a in acts):
                self.env[r.name] = None
                continue
            whole = [everywhere(r.type.shape) if a is None else a for a in acts]
            var = self.activity_var(r, r.type.shape, whole)
            self.env[r.name] = var
            if var is None:
                continue
            for out, a in zip(extra, whole):
                out.append(a)
            new_results.append(var)
        return extra, new_results

    def branch(self, s: If) -> If:
        cond = self.value(s.cond)
        then = self.block(s.then)
        tys = [self.value(y) for y in s.then_yields]
        orelse = self.block(s.orelse)
        eys = [self.value(y) for y in s.else_yields]
        (t_extra, e_extra), rs = self.yielded(s.results, tys, eys)
        return _rebuilt(s, cond=cond, then=then, orelse=orelse, then_yields=[*tys, *t_extra],
                        else_yields=[*eys, *e_extra], results=[*s.results, *rs])

    def role(self, s: SimdgroupRole) -> SimdgroupRole:
        body = self.block(s.body)
        ys = [self.value(y) for y in s.yields]
        (extra,), rs = self.yielded(s.results, ys)
        return _rebuilt(s, body=body, yields=[*ys, *extra], results=[*s.results, *rs])


def _rebuilt(s, **fields):
    """`s` with `fields` (values or lists of nodes), or `s` itself when every one is the same as before."""
    for name, new in fields.items():
        old = getattr(s, name)
        if isinstance(new, list):
            if len(new) != len(old) or any(a is not b for a, b in zip(new, old)):
                break
        elif new is not old:
            break
    else:
        return s
    return evolve_node(s, **fields)


def _maybe_inactive(found) -> frozenset[str]:
    """The names that may hold inactive elements: what a masked load without `other=` binds, what reads such a
    name, and (without looking closer) every loop-carried value and every result of a loop, branch or role."""
    maybe: set[str] = set()
    for cls in (For, While):
        for n in found.of(cls):
            maybe.update(v.name for v in (*n.carried, *n.results))
    for cls in (If, SimdgroupRole):
        for n in found.of(cls):
            maybe.update(v.name for v in n.results)
    for n in found.of(Let):
        v = n.value
        if (v.__class__ is Load and v.mask is not None and v.other is None) or not found.names(v).isdisjoint(maybe):
            maybe.add(n.var.name)
    return frozenset(maybe)


def _needed(used: set[str], defs: dict[str, list[Value]]) -> frozenset[str]:
    """The activity values to build: those the rewrites read, and what those are made of."""
    keep: set[str] = set()
    todo = [n for n in used if n in defs]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        for d in defs[name]:
            todo.extend(n.name for n in walk(d) if n.__class__ is Var and n.name in defs and n.name not in keep)
    return frozenset(keep)


@define_pass(provides=[Fact.ACTIVITY], precedes=[Fact.METAL_IR])
def skip_inactive(k: Kernel, ctx: PassContext) -> Kernel:
    """`k` with the semantics of inactive elements made explicit (see the module docstring)."""
    if k.stage is not Stage.TILE:
        raise UnsupportedConstructError(f"skip_inactive takes a Tile IR kernel, not a {k.stage.value} one", k.loc)
    found = scan(k, ctx.analyses)
    marks = found.of(AllActive)
    if not any(n.mask is not None and n.other is None for n in found.of(Load)) or _blind(found):
        return _unmarked(k, found, marks, ctx)
    names = {n.name for n in found.of(Var)}
    maybe = _maybe_inactive(found)
    first = _Walk(found, names, None, maybe)
    body = first.block(k.body)
    if not first.changed:
        return _unmarked(k, found, marks, ctx)
    keep = _needed(first.used, first.defs)
    if len(keep) < len(first.defs):  # some activity values nothing reads: build the kernel without them
        body = _Walk(found, names, keep, maybe).block(k.body)
    out = evolve_node(k, body=body)
    out = bottom_up(_unmark, out) if marks else out
    # most statements are those of `k`: the scan of `out` takes their part of `found` instead of walking them again
    ctx.analyses.record(scan_analysis, out, KernelScan(out, found))
    return out


_WALKED = frozenset({Let, Store, AtomicAdd, DeviceAssert, Barrier, DevicePrint, For, While, If, SimdgroupRole})
_LOOKING = (Reduce, Scan, ArgReduce, For, While, DeviceAssert)   # what looks at activity (loops: their updates)
_LOOKED_UP = frozenset(_LOOKING)


def _blind(found: KernelScan) -> bool:
    """Whether nothing in the kernel of `found` looks at activity (`_LOOKING`, or a subclass) and `_Walk.stmt` knows
    every statement of it (`_WALKED`): the walk would then change nothing."""
    classes = [cls for cls, _ in found.classes()]
    if not _LOOKED_UP.isdisjoint(classes):   # most kernels with a masked load: a loop or a reduction, found by hash
        return False
    return not any(issubclass(cls, _LOOKING) or (cls not in _WALKED and issubclass(cls, Stmt)) for cls in classes)


def _unmarked(k: Kernel, found: KernelScan, marks: list[AllActive], ctx: PassContext) -> Kernel:
    """`k` with each of `marks` (every `AllActive` in it, as its scan `found` lists them) replaced by its operand
    (without marks): one pass over the scan's nodes (children before parents; none before the first mark holds one)
    rebuilds the nodes holding a mark. Its scan is recorded, made from `found` without a walk (`replaced_scan`)."""
    if not marks:
        return k
    done: dict[int, Node] = {}   # id(node) -> what it becomes, for the marks and the nodes holding one
    get, changed, nodes = done.get, done.keys(), found.nodes
    getters: dict[type, object] = {}   # per class, its children getter (`children` without its dispatch)
    for n in nodes[list(map(id, nodes)).index(id(marks[0])):]:
        cls = n.__class__
        if cls is AllActive:
            done[id(n)] = get(id(n.x), n.x)
            continue
        kids_of = getters.get(cls)
        if kids_of is None:
            kids_of = getters[cls] = children_getter(cls) or children
        if kids_of is not no_children and not changed.isdisjoint(map(id, kids_of(n))):
            done[id(n)] = map_children(lambda c: get(id(c), c), n)
    root = nodes[-1]   # `k`, or a kernel of the same parameters and body whose scan this is (its plan changed)
    if root is k:
        out = done[id(k)]
    else:
        out = done[id(root)] = map_children(lambda c: get(id(c), c), k)
    ctx.analyses.record(scan_analysis, out, replaced_scan(found, done, {id(m): m for m in marks}))
    return out


def _unmark(n: Node) -> Node | None:
    """`AllActive(x)` -> `x`: activity has its meaning in the kernel once `skip_inactive` is done."""
    return n.x if n.__class__ is AllActive else None


__all__ = ["Rewrite", "both", "either", "everywhere", "pick", "skip_inactive", "skip_reduction"]
