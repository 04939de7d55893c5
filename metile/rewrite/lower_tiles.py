"""`lower_tiles`: a planned Tile IR kernel -> a Metal IR kernel (per-thread scalars, vectors, matrices).

Each Tile IR value is represented, per thread, by one of:
- `Scalar(value)`: a per-thread scalar (program scalars are computed redundantly by every thread);
- `Regs(layout, regs)`: the elements this thread holds under a `Blocked` thread-value layout
  (`metile.rewrite.distribute`); loads, loop-carried tiles and reduction results live here;
- `Mma(geometry, mats)`: 8x8 simdgroup matrices holding a `dot` result (`metile.rewrite.lower_collective`);
- `Lazy(expr)`: a pure tile expression (ranges, arithmetic on other values), evaluated wherever an
  element is needed instead of being stored, so broadcasting it costs nothing.

`at(v, pt)` gives the Metal IR scalar of element `pt` of tile `v`. A point is a flat (row-major) index,
plus, when it is slot `s` of layout `L` on this thread, the key `(L, s)`: a value held in registers
under `L` is then read directly. Any other element of a held value (a broadcast of a loaded row, for
example) is *gathered*: the value is first published to threadgroup scratch memory (barrier, store,
barrier) and read back. Scratch is one arena per dtype, reused by every statement: each use starts
with a barrier and is read back within the statement that published it.

Control flow keeps its structure: `For`/`While` carry each tile as one variable per register (or per
matrix), `If` yields them, `simdgroup_role` becomes an `if` on the simdgroup index whose body runs
on a smaller group of threads. Barriers (the user's, and those of gathers and reductions) are only
allowed where control flow is uniform and outside role blocks; elsewhere the construct is refused at
its line. Stores of program scalars are done once per program (by its first thread).
"""

from __future__ import annotations

import contextlib

import attrs

from metile.ir import layouts as tl
from metile.ir.errors import Loc
from metile.ir.metal import Extract
from metile.ir.node import Node
from metile.ir.ops import BinOp, BuiltinKind, Stage
from metile.ir.simt import RingBarrier
from metile.ir.stmts import AtomicAdd, Barrier, For, If, Kernel, Let, Store, While
from metile.ir.tile import (
    Arange,
    ArgReduce,
    Broadcast,
    Dot,
    ExpandDims,
    Full,
    NumPrograms,
    ProgramId,
    Reduce,
    Reshape,
    Scan,
    SimdgroupId,
    SimdgroupRole,
    SimdLaneId,
    ThreadId,
    Transpose,
)
from metile.ir.values import (
    AddPtr,
    Binary,
    Bitcast,
    Cast,
    Compare,
    Const,
    Fma,
    Load,
    Param,
    SharedAlloc,
    SimdBroadcast,
    SimdReduce,
    SimdShuffleXor,
    Stmt,
    Unary,
    Value,
    Var,
    Where,
)
from metile.rewrite import metal_ops as mo
from metile.rewrite.context import PassContext
from metile.rewrite.distribute import Blocked, MmaGeometry, blocked, row_major_strides
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.lower_collective import (
    Channel,
    Collectives,
    Group,
    Lazy,
    Mma,
    Pt,
    Regs,
    Scalar,
    dot_acc,
)
from metile.rewrite.lower_control import ControlFlow
from metile.rewrite.lower_memory import Memory
from metile.rewrite.lower_mma import Fragments, Matrices, Ring
from metile.rewrite.lower_rolled import Rolled
from metile.rewrite.lower_scan import Scans
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.plan import axis_analysis
from metile.rewrite.scan import scan
from metile.rewrite.staging import mma_scratch_offset
from metile.rewrite.uniformity import lane_dependence, varying_names


class Scope:
    """The variables bound in one region (a block, a loop body), chained to the enclosing region's."""

    def __init__(self, parent: Scope | None):
        self.parent = parent
        self.env: dict[str, object] = {}

    def lookup_env(self, name: str):
        s = self
        while s is not None:
            found = s.env.get(name)
            if found is not None:
                return found
            s = s.parent
        return None


class Memo:
    """Values already lowered, valid in the region that computed them and the regions nested in it.

    One dict for all regions (a key is hashed once per lookup): each entry records the region that
    made it, and is used only while that region is still open."""

    def __init__(self):
        self.table: dict[object, tuple[object, int]] = {}
        self.open: set[int] = {0}
        self.region = 0
        self.made = 0

    def get(self, key):
        found = self.table.get(key)
        return found[0] if found is not None and found[1] in self.open else None

    def put(self, key, value) -> None:
        self.table[key] = (value, self.region)

    def enter(self) -> int:
        saved = self.region
        self.made += 1
        self.region = self.made
        self.open.add(self.region)
        return saved

    def leave(self, saved: int) -> None:
        self.open.discard(self.region)
        self.region = saved


class Lowering(ControlFlow, Memory, Matrices, Collectives, Scans, Rolled):
    def __init__(self, k: Kernel, ctx: PassContext):
        self.k = k
        plan = k.plan
        self.vec = plan.vector_width
        threads = plan.threads
        self.group = Group(mo.builtin(BuiltinKind.THREAD_INDEX_IN_THREADGROUP), threads, 0, plan.simdgroups)
        self.roles = plan.roles
        self.facts = facts = scan(k, ctx.analyses)
        self.varying = varying_names(k, ctx.analyses)
        self.lane_varies = lane_dependence(k, ctx.analyses)
        self.scope = Scope(None)
        self.memo = Memo()
        self.points: dict[tuple, Pt] = {}
        self.out: list[Stmt] = []
        self.taken = {n.name for n in facts.of(Var)} | {n.name for n in facts.of(Param)}
        self.suffix: dict[str, int] = {}
        self.axes = axis_analysis(k, ctx.analyses)
        self.defs = self.axes.defs  # read only
        self.role_of = {r.name: n for n in facts.of(SimdgroupRole) for r in n.results}
        self.layouts = k.schedule.layouts   # where assign_layouts put each named tile
        self.channels: list[Let] = []
        self.divergent: Node | None = None        # control flow depending on the thread: no barrier inside
        self.lane_divergent: Node | None = None   # control flow depending on the lane: no simdgroup collective
        self.loc: Loc | None = None  # the location of the Tile IR statement being lowered, given to what it emits
        self.ring: Ring | None = None       # the ring of the loop whose body is being lowered, outside nested blocks
        self.preheader: list[Stmt] | None = None   # what runs before the loop whose body is being lowered
        self.init_scratch()

    # ---- plumbing

    def fresh(self, base: str) -> str:
        """A name not used yet: `base`, else `base_<i>` with the next free `i` for that base."""
        name, i = base, self.suffix.get(base, 0)
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.suffix[base] = i
        self.taken.add(name)
        return name

    def emit(self, s: Stmt) -> None:
        self.out.append(s)

    def let(self, value: Value, base: str = "t", loc: Loc | None = None) -> Var:
        """A new variable bound to `value` by a `Let` located at `loc` (default: the statement being lowered)."""
        v = Var(self.fresh(base), value.type)
        self.emit(Let(v, value, loc=loc or self.loc))
        return v

    def bind(self, var: Var, rep) -> None:
        self.scope.env[var.name] = rep

    @contextlib.contextmanager
    def nested(self, *, divergent: Node | None = None, lane_divergent: Node | None = None, group: Group | None = None):
        saved = (self.scope, self.divergent, self.lane_divergent, self.group, self.ring, self.preheader)
        self.scope = Scope(self.scope)
        self.ring = self.preheader = None
        region = self.memo.enter()
        if divergent is not None and self.divergent is None:
            self.divergent = divergent
        if lane_divergent is not None and self.lane_divergent is None:
            self.lane_divergent = lane_divergent
        if group is not None:
            self.group = group
        try:
            yield
        finally:
            self.scope, self.divergent, self.lane_divergent, self.group, self.ring, self.preheader = saved
            self.memo.leave(region)

    def block(self, stmts, tail=None) -> tuple[list[Stmt], list[Value]]:
        """Lower `stmts` into a new statement list; `tail()` (run after them, in the same list) gives values."""
        saved, self.out, loc = self.out, [], self.loc
        for s in stmts:
            self.new_statement()
            self.loc = s.loc
            self.stmt(s)
        self.loc = loc
        vals = []
        if tail is not None:
            self.new_statement()
            vals = tail()
        body, self.out = self.out, saved
        return body, vals

    def strides_of(self, v: Value):
        """`metile.rewrite.axis_info.strides(v)`, found once per value of the kernel."""
        return self.axes.strides(v)

    def is_varying(self, *vs: Value | None) -> bool:
        return any(self.facts.depends(v, self.varying) for v in vs)

    def control(self, s: Node, *vs: Value | None) -> dict:
        """The divergence of the control flow statement `s` decided by `vs` (for `nested`): on the thread (no
        barrier inside), and on the lane (no simdgroup collective inside either)."""
        if not self.is_varying(*vs):
            return {}
        lane = any(self.lane_varies(v) for v in vs)   # `metile.rewrite.uniformity.lane_dependence`
        return {"divergent": s, "lane_divergent": s if lane else None}

    def layout(self, size: int) -> Blocked:
        return blocked(size, self.group.threads, self.vec)

    def recorded(self, var: Var, size: int) -> Blocked | MmaGeometry | tl.TileLayout | None:
        """The layout `assign_layouts` recorded for the named tile `var` (of `size` elements), as the lowering holds
        it: `Blocked` registers, `MmaGeometry` matrices, `InDevice`, `Channel`; None for a scalar or a value
        recomputed where it is read."""
        found = self.layouts.get(var.name)
        match found:
            case tl.Blocked(threads, vec, _):
                return Blocked(size, threads, vec)
            case tl.Fragments(sg_m, sg_n, first_sg, split, replicas):
                m, n = var.type.shape
                return MmaGeometry(m, n, sg_m, sg_n, first_sg, split, replicas)
            case tl.InDevice() | tl.Channel():
                return found
            case None if var.type.shape:
                raise self.refuse(f"internal: %{var.name} has no layout: assign_layouts must run before lower_tiles",
                                  var)
        return None

    def refuse(self, what: str, n: Node | None) -> UnsupportedConstructError:
        return UnsupportedConstructError(what, getattr(n, "loc", None))

    def barrier(self, why: Node, fence=None, ring=None) -> None:
        """A threadgroup barrier; refused where some threads of the program would not reach it. With `ring` (a
        `(Ring, kept)` pair), a `RingBarrier`: the barrier only where the ring is kept, or only where it is not."""
        if self.group.role is not None:
            raise self.refuse(
                f"{_what(why)} needs a barrier across the whole program, which cannot be placed inside "
                f"simdgroup_role (the other roles would never arrive); move it out of the role block", why)
        if self.divergent is not None:
            raise self.refuse(
                f"{_what(why)} needs a barrier, but it runs under control flow that depends on the thread "
                f"(line {_line(self.divergent.loc)}): every thread of the program must reach the same barriers; "
                "use metile.where to select per thread instead", why)
        if ring is not None:
            self.emit(RingBarrier(ring[0].stage.name, ring[1], loc=self.loc))
            return
        self.emit(Barrier(loc=self.loc) if fence is None else Barrier(fence, loc=self.loc))

    def collective(self, why: Node) -> None:
        """Refuse a simdgroup collective (a simd reduction, shuffle or broadcast, or simdgroup matrix work) where
        some lanes of a simdgroup may not run it: Metal leaves what inactive lanes contribute undefined."""
        if self.lane_divergent is not None:
            raise self.refuse(
                f"{_what(why)} is a simdgroup collective, which every lane of a simdgroup must run, but it runs "
                f"under control flow that depends on the thread's lane (line {_line(self.lane_divergent.loc)}); "
                "compute it "
                "before that branch or loop, and select per thread with metile.where", why)

    # ---- points

    def raw_flat(self, layout: Blocked, slot: int | Value) -> Value:
        """The flat index `layout` gives this thread's `slot` (an int, or a run-time slot; past the end for
        padding)."""
        return mo.add(mo.mul(self.group.tid, mo.const(layout.thread_stride)), self.slot_offset(layout, slot))

    def slot_pt(self, layout: Blocked, slot: int | Value, shape: tuple[int, ...]) -> Pt:
        """The element in `slot`; a run-time slot gives a point without a register key."""
        fixed = isinstance(slot, int)
        if fixed:  # the same few points are asked for by every statement
            key = (layout, slot, shape, self.group.tid)
            found = self.points.get(key)
            if found is None:
                found = self.points[key] = self._slot_pt(layout, slot, shape, True)
            return found
        return self._slot_pt(layout, slot, shape, False)

    def _slot_pt(self, layout: Blocked, slot: int | Value, shape: tuple[int, ...], fixed: bool) -> Pt:
        flat = self.raw_flat(layout, slot)
        if layout.padded(slot) if fixed else layout.has_padding:
            flat = mo.mod(flat, layout.size)
        return Pt(tuple(shape), flat, (layout, slot) if fixed else None)

    def guard(self, layout: Blocked, slot: int | Value) -> Value | None:
        """True where `slot` holds a real element (None: it always does)."""
        padded = layout.padded(slot) if isinstance(slot, int) else layout.has_padding
        return mo.lt(self.raw_flat(layout, slot), mo.const(layout.size)) if padded else None

    def coords(self, pt: Pt) -> list[Value]:
        if pt.at is not None:
            return list(pt.at)
        out = []
        for i, (extent, stride) in enumerate(zip(pt.shape, row_major_strides(pt.shape))):
            c = mo.div(pt.flat, stride)
            out.append(c if i == 0 else mo.mod(c, extent))
        return out

    def project(self, pt: Pt, shape: tuple[int, ...]) -> Pt:
        """The element of a tile of `shape` that element `pt` of a broadcast of it reads."""
        cs = self.coords(pt)[len(pt.shape) - len(shape):]  # the leading coordinates are dropped
        flat: Value = mo.const(0)
        for c, extent, stride in zip(cs, shape, row_major_strides(shape)):
            if extent != 1:
                flat = mo.add(flat, mo.mul(c, mo.const(stride)))
        return Pt(tuple(shape), flat)

    # ---- values

    def scalar(self, v: Value | None) -> Value | None:
        if v is None:
            return None
        if v.__class__ is Const or v.__class__ is Param:
            return v
        key = ("s", v)
        found = self.memo.get(key)
        if found is None:
            found = self._scalar(v)
            self.memo.put(key, found)
        return found

    def _scalar(self, v: Value) -> Value:
        s = self.scalar
        match v:
            case Const() | Param():
                return v
            case Var(name):
                rep = self.scope.lookup_env(name)
                match rep:
                    case Scalar(value):
                        return value
                    case Lazy(expr):
                        return s(expr)
                    case Channel(base):
                        return self.let(Load(base), name)
                raise self.refuse(f"internal: %{name} has no per-thread value ({rep!r})", v)
            case ProgramId(axis):
                return mo.builtin(BuiltinKind.THREADGROUP_POSITION_IN_GRID, axis)
            case NumPrograms(axis):
                return mo.builtin(BuiltinKind.THREADGROUPS_PER_GRID, axis)
            case ThreadId():
                return mo.builtin(BuiltinKind.THREAD_INDEX_IN_THREADGROUP)
            case SimdLaneId():
                return mo.builtin(BuiltinKind.THREAD_INDEX_IN_SIMDGROUP)
            case SimdgroupId():
                return mo.builtin(BuiltinKind.SIMDGROUP_INDEX_IN_THREADGROUP)
            case Reduce() | ArgReduce():
                return self.heavy_rep(v).value
            case Full(_, value):
                return value
            case Broadcast(x, _) | ExpandDims(x, _) | Reshape(x, _):
                return s(x)
        return self.elementwise(v, s)

    def elementwise(self, v: Value, f) -> Value:
        """`v` rebuilt from `f` applied to its operands (the element-wise nodes every level shares)."""
        match v:
            case Binary(BinOp.FLOORDIV, a, b):
                return mo.floor_div(f(a), f(b), v.loc)
            case Binary(BinOp.MOD, a, b):
                return mo.floor_mod(f(a), f(b), v.loc)
            case Binary(op, a, b):
                return Binary(op, f(a), f(b), loc=v.loc)
            case Unary(op, x):
                return Unary(op, f(x), loc=v.loc)
            case Compare(op, a, b):
                return Compare(op, f(a), f(b), loc=v.loc)
            case Where(c, x, y):
                return Where(f(c), f(x), f(y), loc=v.loc)
            case Cast(x, dtype):
                return Cast(f(x), dtype, loc=v.loc)
            case Bitcast(x, dtype):
                return Bitcast(f(x), dtype, loc=v.loc)
            case Fma(a, b, c):
                return Fma(f(a), f(b), f(c), loc=v.loc)
            case AddPtr(p, off):
                return AddPtr(f(p), f(off), loc=v.loc)
        raise self.refuse(f"{_what(v)} cannot be used here", v)

    def at(self, v: Value | None, pt: Pt) -> Value | None:
        if v is None:
            return None
        if v.type.shape == ():
            return self.scalar(v)
        if v.__class__ is Var and pt.key is not None:  # the commonest read: a register, nothing to memoise
            rep = self.scope.lookup_env(v.name)
            if rep.__class__ is Regs and pt.key[0] == rep.layout:
                return rep.regs[pt.key[1]]
        key = (v, pt.key if pt.key is not None else pt.flat)
        found = self.memo.get(key)
        if found is None:
            found = self._at(v, pt)
            self.memo.put(key, found)
        return found

    def _at(self, v: Value, pt: Pt) -> Value:
        match v:
            case Var(name):
                return self.read(self.scope.lookup_env(name), pt, v)
            case Arange(start, _):
                return mo.add(pt.flat, mo.const(start))
            case Full(_, value):
                return value
            case Broadcast(x, shape):
                xs = x.type.shape
                if not xs:  # every element reads the one scalar
                    return self.scalar(x)
                if xs == tuple(shape):
                    return self.at(x, pt)
                return self.at(x, self.project(pt, xs))
            case ExpandDims(x, _) | Reshape(x, _):
                return self.at(x, Pt(x.type.shape, pt.flat, pt.key))
            case Transpose(x):
                i, j = self.coords(pt)
                return self.at(x, Pt(x.type.shape, mo.add(mo.mul(j, mo.const(x.type.shape[1])), i)))
            case Reduce() | ArgReduce() | Scan() | Dot():
                return self.read(self.heavy_rep(v), pt, v)
            case Binary() if dot_acc(v):
                return self.read(self.heavy_rep(v), pt, v)
            case Load():  # a deferred tile load (`lower_rolled`)
                return self.deferred_load(v, pt)
        return self.elementwise(v, lambda x: self.at(x, pt))

    def read(self, rep, pt: Pt, where: Value) -> Value:
        match rep:
            case Lazy(expr):
                return self.at(expr, pt)
            case Scalar(value):
                return value
            case Channel(base):
                return self.let(Load(AddPtr(base, pt.flat)), "ch")
            case Mma() if pt.key is not None and pt.key[0] == Fragments(rep.geom):  # this lane's own element
                p, e = divmod(pt.key[1], 2)
                return self.let(Extract(rep.mats[p], e), "e")
            case Mma() if pt.key is None:  # a run-time slot: read the copy in scratch, not registers
                base = self.mma_in_scratch(rep, where)
                return self.let(Load(AddPtr(base, mma_scratch_offset(pt.flat, rep.geom.n))), "c")
            case Mma():
                return self.read(self.mma_to_regs(rep, where), pt, where)
            case Regs(layout, regs):
                if pt.key is not None and pt.key[0] == layout:
                    return regs[pt.key[1]]
                return self.gather(rep, pt.flat, where)
        raise self.refuse(f"internal: no value for {_what(where)} ({rep!r})", where)

    def regs_of(self, v: Value, layout: Blocked) -> tuple[Value, ...]:
        return tuple(self.at(v, self.slot_pt(layout, s, v.type.shape)) for s in range(layout.slots))

    # ---- statements

    def stmt(self, s: Stmt) -> None:
        match s:
            case Let(var, value):
                self.prepare(value)
                self.let_stmt(var, value)
            case Store(ptr, value, mask) | AtomicAdd(ptr, value, mask):
                for x in (ptr, value, mask):
                    self.prepare(x)
                self.store(type(s), ptr, value, mask, s)
            case Barrier(fence):
                self.barrier(s, fence)
            case For():
                self.for_stmt(s)
            case If():
                self.if_stmt(s)
            case While():
                self.while_stmt(s)
            case SimdgroupRole():
                self.role_stmt(s)
            case _:
                raise self.refuse(f"{_what(s)} cannot be lowered", s)

    def let_stmt(self, var: Var, value: Value) -> None:
        match value:
            case Load(ptr, mask, other) if value.type.shape:
                layout = self.recorded(var, value.type.size)
                if isinstance(layout, tl.InDevice):   # read where the dot's staging needs it (`lower_rolled`)
                    self.bind(var, Lazy(value))
                else:
                    self.bind(var, Regs(layout, self.load_regs(var.name, layout, ptr, mask, other, value)))
            case Load(ptr, mask, other):
                v = Load(self.scalar(ptr), self.scalar(mask), self.scalar(other))
                self.bind(var, Scalar(self.let(v, var.name)))
            case SharedAlloc():
                v = Var(self.fresh(var.name), value.type)
                self.emit(Let(v, value, loc=self.loc))
                self.bind(var, Scalar(v))
            case SimdShuffleXor(x, lane) | SimdBroadcast(x, lane):
                self.collective(value)
                self.bind(var, Scalar(self.let(type(value)(self.scalar(x), self.scalar(lane)), var.name)))
            case SimdReduce(op, x):
                self.collective(value)
                self.bind(var, Scalar(self.let(SimdReduce(op, self.scalar(x)), var.name)))
            case _ if value.type.shape == ():
                low = self.scalar(value)
                self.bind(var, Scalar(low if isinstance(low, (Const, Param, Var)) else self.let(low, var.name)))
            case _:
                self.bind(var, Lazy(value))

def _tails(n: Node) -> tuple:
    """The values a compound statement reads at the end of its blocks."""
    match n:
        case If():
            return (*n.then_yields, *n.else_yields)
        case While():
            return (n.cond, *n.yields)
    return tuple(n.yields)


def _what(n: Node) -> str:
    names = {"Reduce": "this reduction", "ArgReduce": "this arg-reduction", "Scan": "this scan", "Dot": "this dot",
             "For": "this loop", "While": "this while loop", "If": "this branch", "Barrier": "metile.barrier()",
             "Binary": "this dot",
             "SimdgroupRole": "simdgroup_role", "Load": "this load", "Store": "this store",
             "SimdShuffleXor": "metile.simd_shuffle_xor", "SimdBroadcast": "metile.simd_broadcast",
             "SimdReduce": "this simd reduction"}
    if isinstance(n, Var):
        return f"using the tile {n.name!r} here"
    return names.get(type(n).__name__, type(n).__name__)


def _line(loc: Loc | None) -> str:
    return "?" if loc is None else str(loc.line)


@define_pass(requires=[Fact.ACTIVITY, Fact.LAUNCH_PLAN, Fact.MMA_LAYOUTS], provides=[Fact.SIMT_IR])
def lower_tiles(k: Kernel, ctx: PassContext) -> Kernel:
    """The SIMT IR kernel computing the planned Tile IR kernel `k` (see the module docstring); its scratch memory
    and rings are placed by `allocate_threadgroup_memory`."""
    if k.stage is not Stage.TILE or k.plan is None:
        raise UnsupportedConstructError("lower_tiles takes a Tile IR kernel planned by plan_launch", k.loc)
    low = Lowering(k, ctx)
    body, _ = low.block(k.body)
    user = sum(n.size * n.dtype.itemsize for n in low.facts.of(SharedAlloc))
    user += sum(c.value.size * c.value.dtype.itemsize for c in low.channels)
    plan = attrs.evolve(k.plan, threadgroup_memory=user)
    return Kernel(k.name, Stage.SIMT, k.params, low.channels + body, k.meta, plan, loc=k.loc)


__all__ = ["Lowering", "Pt", "lower_tiles"]
