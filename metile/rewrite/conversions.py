"""`insert_conversions`: every move of a register tile between threads made explicit, as a `convert_layout` node.

A statement computes its tile thread by thread: each thread evaluates the elements it holds of the result (its
slots under the statement's `Blocked` layout), and reads its operands at those elements. An operand held in
registers (`assign_layouts` recorded `blocked<T, V>` for it, or a reduction, scan or gather result, which the
lowering holds in registers) is then read in place, unless the statement reads it at elements *another* thread
holds:
- below a `broadcast` to a larger shape, a `transpose`, a `permute`, a `join` or a `take` (element `i` of the
  result is not element `i` of the operand);
- as the operand of a reduction along an axis of an n-D tile (each thread folds a whole line);
- under a layout of other runs than the statement's (a layout a pass after `assign_layouts` chose).
There the pass wraps the operand in `ConvertLayout(x, blocked<T, V>, shared)`: the threads holding it write it to
threadgroup scratch and every thread reads what it needs, behind barriers (the lowering's `exchange`). A
`simdgroup_role` block reads the program's register tiles through the channels its lowering writes before the
block (`channel`), so they get no conversion there. A tile
recomputed where it is read (`recomputed`) moves nothing itself: its definition gets the conversions its own
positions need, and where it is read at other elements and reaches a held tile through positions that read in
place, the reader gets its definition with those conversions instead of its name.

The rules are pure: `operand_reading` says how an operation reads its operands, `convert_held` and
`convert_heavy` where a conversion goes; `insert_conversions` runs them over each statement with the reading of
its region. Tiles held in simdgroup matrices, left in device memory or handed over in a role's channel are read by
their own rules of the lowering and get no conversion.

Most kernels move nothing, and the pass costs them almost nothing: `may_move` answers from the kernel's scan, which
the run already keeps (no transpose, permute, join or take, no broadcast of a tile, no reduction of an n-D tile, no
tile in other runs: the kernel is returned as it is, without a walk of its values). Otherwise one walk, memoised
by value identity and reading, rebuilds only the values and statements whose operands changed, so the others stay
the same objects (and equal values elsewhere are never swapped in for them).
"""

from __future__ import annotations

import functools

import attrs

from metile.ir import layouts as tl
from metile.ir.node import children, evolve_node, map_children
from metile.ir.ops import Stage
from metile.ir.stmts import For, If, Kernel, Let, While
from metile.ir.tile import (
    ArgReduce,
    Broadcast,
    ConvertLayout,
    Dot,
    Gather,
    Join,
    Permute,
    Reduce,
    Reshape,
    Scan,
    SimdgroupRole,
    Take,
    Transpose,
)
from metile.ir.values import Value, Var
from metile.rewrite.context import PassContext
from metile.rewrite.distribute import choose_vec
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.plan import value_defs
from metile.rewrite.scan import Scan as KernelScan
from metile.rewrite.scan import scan

SHARED = tl.Shared()
REGISTER_HEAVY = (Reduce, ArgReduce, Scan, Gather)
"""The values the lowering materialises in registers (under the group's `Blocked` layout) before a statement."""


@attrs.frozen(cache_hash=True)
class Reading:
    """How a value is read: by the threads of a group (`threads` of them from simdgroup `first_sg`), each at the
    elements it holds of the value (`moved` False) or at any element (`moved` True). Made by `reading`, which
    keeps one object per reading (the memo of `insert_conversions` hashes them for every value)."""

    moved: bool
    threads: int
    first_sg: int

    def aligned(self) -> Reading:
        return reading(False, self.threads, self.first_sg) if self.moved else self

    def anywhere(self) -> Reading:
        return self if self.moved else reading(True, self.threads, self.first_sg)


@functools.cache
def reading(moved: bool, threads: int, first_sg: int) -> Reading:
    return Reading(moved, threads, first_sg)


@attrs.frozen
class ConvertFacts:
    """What the rules read of the kernel: the layouts of its named tiles, the value each name stands for, the
    reading of the region each `Let` is in, and the plan's vector width."""

    layouts: object
    defs: dict[str, Value] = attrs.field(eq=False)
    own: dict[str, Reading] = attrs.field(eq=False)
    vector_width: int

    def blocked(self, size: int, r: Reading) -> tl.Blocked:
        """The `Blocked` layout a statement of `size` elements has in the group reading with `r`."""
        return tl.Blocked(r.threads, choose_vec(size, r.threads, self.vector_width), r.first_sg)


def operand_reading(n: Value, r: Reading) -> Reading:
    """How `n`, read with `r`, reads its operands."""
    match n:
        case Broadcast(x, shape) if x.type.shape != tuple(shape):
            return r.anywhere()
        case Transpose() | Permute() | Join() | Take():
            return r.anywhere()
        case Reshape(x, ()) if x.type.shape:   # the one element of a tile, read by every thread
            return r.anywhere()
        case Reduce(_, x, _) | ArgReduce(_, x, _, _):
            return r.anywhere() if len(x.type.shape) > 1 else r.aligned()
        case Scan() | Gather() | Dot():
            return r.aligned()
    return r


def convert_held(v: Var, r: Reading, facts: ConvertFacts) -> Value | None:
    """The conversion of the named tile `v`, held in registers by the group reading it, read with `r` at elements
    other threads hold, or under other runs (None: read in place, or not held in registers by this group: a
    `simdgroup_role` block reads the program's tiles through the channels its lowering writes before it)."""
    match facts.layouts.get(v.name):
        case tl.Blocked(threads, vec, first_sg) as held if (threads, first_sg) == (r.threads, r.first_sg) and (
                r.moved or vec != choose_vec(v.type.size, threads, facts.vector_width)):
            return ConvertLayout(v, held, SHARED, loc=v.loc)
    return None


def convert_heavy(n: Value, r: Reading, facts: ConvertFacts) -> Value | None:
    """The conversion of a reduction, scan or gather result (held in registers, under the layout of the group
    reading it) read with `r` at other elements (None: read in place)."""
    match n:
        case Reduce() | ArgReduce() | Scan() | Gather() if r.moved and n.type.shape:
            return ConvertLayout(n, facts.blocked(n.type.size, r), SHARED, loc=n.loc)
    return None


def may_move(found: KernelScan, layouts, vector_width: int) -> bool:
    """Whether a statement of the scanned kernel may read a register tile at elements other threads hold, from
    facts the scan already has: an operation reading its operand elsewhere (`operand_reading`'s moves, other than
    a scalar's broadcast, which reads a tile only through one of them), or a tile laid out in other runs than a
    statement of its size has. False: `insert_conversions` has nothing to do."""
    held = {name: lay for name, lay in layouts.items() if isinstance(lay, tl.Blocked)}
    if not held and not any(n.type.shape for cls in REGISTER_HEAVY for n in found.of(cls)):
        return False   # nothing is held in registers: nothing can move
    if found.has((Transpose, Permute, Join, Take)):
        return True
    for n in found.of(Broadcast):
        if n.x.type.shape and n.x.type.shape != n.shape:
            return True
    for n in found.of(Reshape):
        if not n.shape and n.x.type.shape:
            return True
    for cls in (Reduce, ArgReduce):
        for n in found.of(cls):
            if len(n.x.type.shape) > 1:
                return True
    if held:
        for n in found.of(Let):
            lay = held.get(n.var.name)
            if lay is not None and lay.vec != choose_vec(n.var.type.size, lay.threads, vector_width):
                return True
    return False


class _Rewriter:
    """The rules run over values (iteratively: unrolled chains are deep) and statements, memoised per value (by
    identity: equal values elsewhere keep their own objects) and reading. A value none of whose operands changed
    is kept as it is, and so is a statement, so an unchanged kernel is the same object. `renamed` collects the
    products and loops rebuilt, whose schedule entries follow them."""

    def __init__(self, facts: ConvertFacts):
        self.facts = facts
        self.memo: dict[tuple[int, Reading], Value] = {}
        self.renamed: dict = {}

    def deps(self, n: Value, r: Reading) -> list[tuple[Value, Reading]]:
        cls = n.__class__
        if cls is Var:
            if not n.type.shape:
                return []
            d = self.facts.defs.get(n.name)
            if d is not None and isinstance(self.facts.layouts.get(n.name), tl.Recomputed):
                own = self.facts.own.get(n.name, r)
                return [(d, r)] if own == r else [(d, r), (d, own)]
            return []
        if cls is ConvertLayout:
            return []
        cr = operand_reading(n, r)
        return [(c, cr) for c in children(n) if isinstance(c, Value)]

    def finish(self, n: Value, r: Reading) -> Value:
        memo, facts = self.memo, self.facts
        cls = n.__class__
        if cls is Var:
            if not n.type.shape:
                return n
            layout = facts.layouts.get(n.name)
            if isinstance(layout, tl.Recomputed) and n.name in facts.defs:
                d = facts.defs[n.name]
                here, own = memo[(id(d), r)], memo[(id(d), facts.own.get(n.name, r))]
                return n if here is own or here == own else here   # inlined where its definition reads otherwise here
            return convert_held(n, r, facts) or n
        if cls is ConvertLayout:
            return n
        cr = operand_reading(n, r)
        new = map_children(lambda c: memo.get((id(c), cr), c) if isinstance(c, Value) else c, n)
        if new is not n and isinstance(n, (Dot, For)):
            self.renamed[n] = new
        return convert_heavy(new, r, facts) or new

    def value(self, root: Value | None, r: Reading) -> Value | None:
        if root is None:
            return None
        memo = self.memo
        key = (id(root), r)
        done = memo.get(key)
        if done is not None:
            return done
        stack: list = [(root, r, False)]
        while stack:
            n, rr, ready = stack.pop()
            at = (id(n), rr)
            if at in memo:
                continue
            if not ready:
                pending = [(c, cr, False) for c, cr in self.deps(n, rr) if (id(c), cr) not in memo]
                if pending:   # the operands first, then `n` again, ready
                    stack.append((n, rr, True))
                    stack += pending
                    continue
            memo[at] = self.finish(n, rr)
        return memo[key]

    def values(self, xs, r: Reading):
        out = [self.value(x, r) for x in xs]
        return xs if all(a is b for a, b in zip(out, xs)) else out

    def stmts(self, body, r: Reading):
        out = [self.stmt(s, r) for s in body]
        return body if all(a is b for a, b in zip(out, body)) else out

    def stmt(self, s, r: Reading):
        def v(x):
            return self.value(x, r)

        match s:
            case Let(var, value):
                new = v(value)
                return s if new is value else Let(var, new, loc=s.loc)
            case For():
                changes = {"start": v(s.start), "stop": v(s.stop), "step": v(s.step),
                           "inits": self.values(s.inits, r), "body": self.stmts(s.body, r),
                           "yields": self.values(s.yields, r)}
            case If():
                changes = {"cond": v(s.cond), "then": self.stmts(s.then, r), "orelse": self.stmts(s.orelse, r),
                           "then_yields": self.values(s.then_yields, r),
                           "else_yields": self.values(s.else_yields, r)}
            case While():
                changes = {"inits": self.values(s.inits, r), "cond_body": self.stmts(s.cond_body, r),
                           "cond": v(s.cond), "body": self.stmts(s.body, r), "yields": self.values(s.yields, r)}
            case SimdgroupRole():
                inner = self.facts.own.get(("role", s), r)
                changes = {"body": self.stmts(s.body, inner), "yields": self.values(s.yields, inner)}
            case _:
                return map_children(lambda c: v(c) if isinstance(c, Value) else c, s)
        if all(getattr(s, name) is new for name, new in changes.items()):
            return s
        new = evolve_node(s, **changes)
        if isinstance(s, For):
            self.renamed[s] = new
        return new


def _readings(k: Kernel) -> dict:
    """The reading of the region of each `Let` (by its variable's name) and of each role block's body."""
    plan = k.plan
    program = reading(False, plan.threads, 0)
    out: dict = {}
    todo = [(s, program) for s in k.body]
    while todo:
        s, r = todo.pop()
        match s:
            case Let(var, _):
                out[var.name] = r
            case SimdgroupRole(body=body):
                inner = r
                if s.role < len(plan.roles):
                    span = plan.roles[s.role]
                    inner = reading(False, 32 * span.count, span.first)
                out[("role", s)] = inner
                todo += [(t, inner) for t in body]
            case For(body=body) | While(body=body):
                todo += [(t, r) for t in (*getattr(s, "cond_body", ()), *body)]
            case If(then=then, orelse=orelse):
                todo += [(t, r) for t in (*then, *orelse)]
    return out


@define_pass(requires=[Fact.MMA_LAYOUTS], provides=[Fact.CONVERSIONS])
def insert_conversions(k: Kernel, ctx: PassContext) -> Kernel:
    """`k` with a `ConvertLayout` wherever a tile held in registers is read at elements other threads hold (see the
    module docstring); `k` itself when `may_move` finds nothing that could, without a walk of its values."""
    if k.stage is not Stage.TILE or k.plan is None:
        raise UnsupportedConstructError("insert_conversions takes a Tile IR kernel planned by plan_launch", k.loc)
    layouts = k.schedule.layouts
    found = scan(k, ctx.analyses)   # kept by the run since plan_launch: assign_layouts keeps the body
    if not may_move(found, layouts, k.plan.vector_width):
        return k
    facts = ConvertFacts(layouts, value_defs(found), _readings(k), k.plan.vector_width)
    rw = _Rewriter(facts)
    body = rw.stmts(k.body, reading(False, k.plan.threads, 0))
    if body is k.body:
        return k
    schedule = k.schedule
    if rw.renamed:
        dots = {rw.renamed.get(d, d): p for d, p in schedule.dots.items()}
        loops = {rw.renamed.get(f, f): b for f, b in schedule.loops.items()}
        schedule = evolve_node(schedule, dots=dots, loops=loops)
    return evolve_node(k, body=body, schedule=schedule)


__all__ = ["ConvertFacts", "Reading", "convert_heavy", "convert_held", "insert_conversions", "may_move",
           "operand_reading", "reading"]
