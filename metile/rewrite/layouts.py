"""`assign_layouts`: the layout of every named tile, recorded in the kernel's schedule (`metile.ir.layouts`).

The pass decides where each named tile of a planned Tile IR kernel lives, so that the lowering follows the
decision instead of making it:
- a tile load: in registers (`Blocked` over the threads of its group, runs of the plan's vector width where the
  tile has enough elements), or left in device memory (`InDevice`) when it is loaded only to be the operand of the
  `dot` that follows it, with nothing in between that writes memory, and it has at least `ROLL_SLOTS` elements
  per thread that cannot move as vectors: the staging loop then reads it from memory once; also left there when
  it is only the value of the store or tile atomic that follows it (`store(q, load(p))`, a copy or a gather), it
  has at least `ROLL_SLOTS` elements per thread, and the store cannot write what a later element of the load
  reads (`_apart`: another buffer the kernel never writes, or the very addresses it reads): the store's run-time
  loop over the slots then reads each element (or run) where it writes it;
- a product (`dot(a, b)`, `acc + dot(a, b)`): in simdgroup matrices (`Fragments`), the group's simdgroups arranged
  over its 8x8 pieces as squarely as the piece grid allows (so each loads the fewest operand fragments per step of
  k), with the slices of k `split_k` chose and replicas where the pieces are fewer than the simdgroups; the
  arrangement is also recorded in the product's `MmaPlan`;
- a reduction along an axis, a scan, an arg-reduction: in registers;
- a permutation, transpose, join or taken index of a tile held somewhere (in registers, matrices or a channel): in
  registers, its elements moved between threads once where it is bound (one exchange through threadgroup memory),
  rather than at every statement that reads it;
- any other value: `Recomputed` where it is read (pure expressions cost nothing to broadcast);
- a loop-carried tile: in simdgroup matrices when only `dot` accumulation (and element-wise arithmetic on the
  accumulator) updates it, else in registers; loop results, `if` results and `while` values in registers;
- a `simdgroup_role` result: in its role's matrices when a `dot` computes it, else in threadgroup memory
  (`Channel`), handed to the other roles after the block.
The group of a value is the program's threads, or inside a `simdgroup_role` the role's simdgroups (as the plan's
roles say).
"""

from __future__ import annotations

import attrs
from pyrsistent import pmap

from metile.ir.layouts import Blocked, Channel, Fragments, InDevice, Recomputed, TileLayout
from metile.ir.node import children, evolve_node, walk
from metile.ir.ops import BinOp, Stage
from metile.ir.stmts import AtomicAdd, For, If, Kernel, Let, Store, While
from metile.ir.tile import (
    ArgReduce,
    Broadcast,
    Dot,
    ExpandDims,
    Join,
    MmaPlan,
    Permute,
    Reduce,
    Reshape,
    Scan,
    SimdgroupRole,
    Take,
    Transpose,
)
from metile.ir.types import DType
from metile.ir.values import (
    AddPtr,
    AtomicRMW,
    Binary,
    Bitcast,
    Cast,
    Compare,
    Fma,
    IntToPtr,
    Load,
    Param,
    Unary,
    Value,
    Var,
    Where,
)
from metile.rewrite.axis_info import vector_width
from metile.rewrite.context import PassContext
from metile.rewrite.distribute import choose_vec, k_slices, matrix_dims, mma_arrangement
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.plan import axis_analysis
from metile.rewrite.scan import scan

_PLAIN = MmaPlan()   # the plan of a product no pass has chosen anything for
ROLL_SLOTS = 8   # slots per thread from which a statement over a tile becomes a run-time loop over its slots
ELEMENTWISE = (Binary, Unary, Compare, Where, Cast, Bitcast, IntToPtr, Fma)   # element i of the result reads element i


@attrs.frozen
class Group:
    """The threads running a region: `threads` of them from simdgroup `first_sg` (`sgs` simdgroups)."""

    threads: int
    first_sg: int
    sgs: int


def dot_accumulation(v: Value) -> tuple[Dot, Value] | None:
    """`(dot, acc)` when `v` is the f32 accumulation `acc + dot(a, b)` (either order), else None."""
    if not (isinstance(v, Binary) and v.op is BinOp.ADD and v.type.dtype is DType.F32):
        return None
    if isinstance(v.rhs, Dot) and not isinstance(v.lhs, Dot):
        return v.rhs, v.lhs
    if isinstance(v.lhs, Dot) and not isinstance(v.rhs, Dot):
        return v.lhs, v.rhs
    return None


def fragments_of(d: Dot, group: Group, how: MmaPlan) -> Fragments | None:
    """How `group`'s simdgroups hold the result of `d` (with k split, the simdgroups of slice 0, which own the sum):
    the arrangement `how` records when it divides the pieces among as many simdgroups or a divisor of them, else
    the squarest (`mma_arrangement`); None when the shapes are not multiples of 8 or the operands not a matrix
    type."""
    dims = matrix_dims(d)
    if dims is None:
        return None
    m, n, k = dims
    sgs = group.sgs // k_slices(m, n, k, how.split, group.sgs)
    chosen = how.simdgroups
    if chosen and sgs % (chosen[0] * chosen[1]) == 0 and (m // 8) % chosen[0] == 0 and (n // 8) % chosen[1] == 0:
        found = (*chosen, sgs // (chosen[0] * chosen[1]))
    else:
        found = mma_arrangement(m, n, sgs)
    if found is None:
        return None
    sg_m, sg_n, replicas = found
    return Fragments(sg_m, sg_n, group.first_sg, replicas=replicas)


class _Assign:
    """One walk over the body, region by region, recording a layout per named tile (see the module docstring)."""

    def __init__(self, k: Kernel, ctx: PassContext):
        self.k, self.plan = k, k.plan
        self.found = found = scan(k, ctx.analyses)
        self.axes = axis_analysis(k, ctx.analyses)
        self.defs = self.axes.defs   # `value_defs(found)`, which the axis analysis of the same body is over
        self.role_of = {r.name: n for n in found.of(SimdgroupRole) for r in n.results}
        # read at the end of a block: never left in memory (a set: each class's statements are taken in turn,
        # without the look at every node that listing them in the kernel's order takes)
        self.yielded = {name for cls in (For, If, While, SimdgroupRole) for n in found.of(cls) for y in _tails(n)
                        for name in found.names(y)}
        self.layouts: dict[str, TileLayout] = {}
        self.plans = k.schedule.dots
        self.has_dots = found.has(Dot)   # without a product, `products_in` has none to find
        # Without a `simdgroup_role` block every product is computed by the program's threads: they are arranged
        # once, from the scan, rather than found in each statement's values.
        self.by_statement = self.has_dots and found.has(SimdgroupRole)
        self.has_atomics = found.has(AtomicRMW)   # without one, no value writes memory
        self.arranged: dict[Dot, dict[int, tuple[int, int]]] = {}   # per product, per group size, its arrangement
        self.frags: dict[tuple[Dot, Group], Fragments | None] = {}   # `product`'s answers
        plan = k.plan
        self.program = Group(plan.threads, 0, plan.simdgroups)
        self.written: set | None = None   # the buffers the kernel writes (`apart`), found when first asked
        if self.has_dots and not self.by_statement:
            for d in found.of(Dot):
                self.product(d, self.program)

    def group_of(self, role: SimdgroupRole | None) -> Group:
        if role is None or role.role >= len(self.plan.roles):
            return self.program
        r = self.plan.roles[role.role]
        return Group(32 * r.count, r.first, r.count)

    def blocked(self, size: int, group: Group) -> Blocked:
        return Blocked(group.threads, choose_vec(size, group.threads, self.plan.vector_width), group.first_sg)

    def how(self, d: Dot) -> MmaPlan:
        return self.plans.get(d, _PLAIN)

    def product(self, d: Dot, group: Group) -> Fragments | None:
        """`d`'s fragments in `group`; its arrangement goes to its plan unless groups of two sizes compute it. Found
        once per product and group: a product's result is asked for again by the `Let` binding it and by the loop
        carrying it (its plan, which they depend on besides, is the same throughout the walk)."""
        key = (d, group)
        if key in self.frags:
            return self.frags[key]
        frag = self.frags[key] = fragments_of(d, group, self.how(d))
        if frag is not None:
            self.arranged.setdefault(d, {})[group.sgs] = (frag.sg_m, frag.sg_n)
        return frag

    def recorded_plans(self):
        """The products' plans with the arrangement each has in the one size of group that computes it."""
        plans = self.plans
        for d, by_size in self.arranged.items():
            if len(by_size) == 1:
                (chosen,) = by_size.values()
                how = plans.get(d, _PLAIN)
                if how.simdgroups != chosen:
                    plans = plans.set(d, evolve_node(how, simdgroups=chosen))
        return plans

    def block(self, stmts, group: Group) -> None:
        deferred = self.deferred_loads(stmts, group)
        for s in stmts:
            self.products_in(s, group)
            match s:
                case Let(var, value) if var.type.shape:
                    self.let(var, value, group, var.name in deferred)
                case For(carried=carried, yields=yields, results=results, body=body):
                    for c, y, r in zip(carried, yields, results):
                        layout = self.carried(c, y, group)
                        if layout is not None:
                            self.layouts[c.name] = self.layouts[r.name] = layout
                    self.block(body, group)
                case If(then=then, orelse=orelse, results=results):
                    self.block(then, group)
                    self.block(orelse, group)
                    self.tiles(results, group)
                case While(carried=carried, cond_body=cond_body, body=body, results=results):
                    self.tiles(carried, group)
                    self.tiles(results, group)
                    self.block(cond_body, group)
                    self.block(body, group)
                case SimdgroupRole(body=body, yields=yields, results=results):
                    inner = self.group_of(s)
                    self.block(body, inner)
                    for y, r in zip(yields, results):
                        if r.type.shape:
                            pair = dot_accumulation(self.resolve(y)[0])
                            frag = None if pair is None else self.product(pair[0], inner)
                            self.layouts[r.name] = frag if frag is not None else Channel()

    def products_in(self, s, group: Group) -> None:
        """Arrange the products the statement `s` computes itself (in its values, not its nested blocks), when the
        kernel has `simdgroup_role` blocks (without, `__init__` has arranged them all in the program's group)."""
        if not self.by_statement:
            return
        for c in children(s):
            if isinstance(c, Value) and self.found.heavy(c):
                for n in walk(c):
                    if isinstance(n, Dot):
                        self.product(n, group)

    def tiles(self, vs, group: Group) -> None:
        for v in vs:
            if v.type.shape:
                self.layouts[v.name] = self.blocked(v.type.size, group)

    def let(self, var: Var, value: Value, group: Group, deferred: bool) -> None:
        match value:
            case Load():
                layout = InDevice() if deferred else self.blocked(value.type.size, group)
            case Dot():
                layout = self.product(value, group)
            case Reduce() | Scan() | ArgReduce() | AtomicRMW():   # an atomic's elements are each performed once
                layout = self.blocked(value.type.size, group)
            case Transpose() | Permute() | Join() | Take() if value.type.shape and self.reads_held(value):
                layout = self.blocked(value.type.size, group)
            case _ if (pair := dot_accumulation(value)) is not None:
                layout = self.product(pair[0], group)
            case _:
                layout = Recomputed()
        if layout is not None:
            self.layouts[var.name] = layout

    def reads_held(self, v: Value) -> bool:
        """Whether `v` reads a named tile that is held somewhere (not recomputed where it is read)."""
        return any(isinstance(n, Var) and not isinstance(self.layouts.get(n.name, Recomputed()), Recomputed)
                   for n in walk(v))

    def carried(self, c: Var, y: Value, group: Group) -> TileLayout | None:
        """Simdgroup matrices for an accumulator only `dot` updates (through element-wise arithmetic on it, as
        `acc * alpha[:, None]` before the next `dot`), registers for other tiles, nothing for scalars."""
        if not c.type.shape:
            return None
        yielded, role = self.resolve(y)
        pair = dot_accumulation(yielded)
        if pair is not None and self.elementwise_of(pair[1], c):
            frag = self.product(pair[0], self.group_of(role) if role is not None else group)
            if frag is not None:
                return frag
        return self.blocked(c.type.size, group)

    def resolve(self, v: Value) -> tuple[Value, SimdgroupRole | None]:
        """`v` seen through the names bound to it, and the role block whose result it last passed through."""
        role = None
        while isinstance(v, Var) and v.name in self.defs:
            role = self.role_of.get(v.name, role)
            v = self.defs[v.name]
        return v, role

    def elementwise_of(self, v: Value, carried: Var) -> bool:
        """Whether `v` is `carried`, or computed from it element by element (through no transpose, reshape,
        broadcast or reduction)."""
        found = False
        todo, seen = [(v, False)], set()
        while todo:
            item = todo.pop()
            x, moved = item
            if item in seen:
                continue
            seen.add(item)
            if x == carried:
                if moved:
                    return False
                found = True
            elif isinstance(x, Var):
                if x.name in self.defs:
                    todo.append((self.defs[x.name], moved))
            elif x.type.shape:
                moved = moved or not isinstance(x, ELEMENTWISE)
                todo += [(c, moved) for c in children(x) if isinstance(c, Value)]
        return found

    def deferred_loads(self, stmts, group: Group) -> set[str]:
        """The tile loads among `stmts` to leave in device memory (see the module docstring): `name = load` read
        only as an operand of a `dot` in a later `Let`, or only as the value of the store (or tile atomic) that
        follows, with only `Let`s of values that do not write memory in between, and never read again."""
        out: set[str] = set()
        stmts = list(stmts)
        depends = self.found.depends_on_name
        for i, s in enumerate(stmts):
            if not (isinstance(s, Let) and isinstance(s.value, Load) and s.value.type.shape):
                continue
            name, layout = s.var.name, self.blocked(s.value.type.size, group)
            slots = layout.vec * -(-s.value.type.size // (layout.threads * layout.vec))
            if name in self.yielded or slots < ROLL_SLOTS:
                continue
            vectors = vector_width(self.axes, layout.vec, s.value.ptr) > 1
            for j in range(i + 1, len(stmts)):
                t = stmts[j]
                if isinstance(t, (Store, AtomicAdd)) and depends(t.value, name):
                    if (t.value == s.var and not depends(t.ptr, name) and not depends(t.mask, name)
                            and t.ptr.type.shape == s.value.type.shape and self.apart(s.value.ptr, t.ptr)
                            and not any(_reads(u, name, depends) for u in stmts[j + 1:])):
                        out.add(name)
                    break
                if not isinstance(t, Let) or self.has_atomics and any(isinstance(n, AtomicRMW) for n in walk(t.value)):
                    break   # a statement that may write memory the load reads
                if not depends(t.value, name):
                    continue
                if (self.has_dots and not vectors and _dot_operand(t.value, s.var, depends)
                        and not any(_reads(u, name, depends) for u in stmts[j + 1:])):
                    out.add(name)
                break
        return out

    def apart(self, loaded: Value, stored: Value) -> bool:
        """Whether a store through `stored` can never write what the load through `loaded` reads at another
        element: the same pointer tile (each element read, then written, in place), or pointers into another
        buffer argument than the one read, which the kernel never writes (when both are known)."""
        if loaded == stored:
            return True
        src, dst = self.buffer_of(loaded), self.buffer_of(stored)
        if src is None or dst is None or src == dst:
            return False
        if self.written is None:
            written = set()
            for n in self.found.of((Store, AtomicAdd, AtomicRMW)):
                written.add(self.buffer_of(n.ptr))
            self.written = written
        return src not in self.written and None not in self.written

    def buffer_of(self, ptr: Value) -> str | None:
        """The buffer argument a pointer (tile) points into, when offsets from it are all it is."""
        while True:
            match ptr:
                case Var(name) if name in self.defs:
                    ptr = self.defs[name]
                case AddPtr(base, _) | Broadcast(base) | ExpandDims(base) | Reshape(base):
                    ptr = base
                case Param(name):
                    return name
                case _:
                    return None


def _dot_operand(v: Value, var: Var, depends) -> bool:
    """Whether `v` is `dot(a, b)` or `acc + dot(a, b)` reading `var` only as `a` or `b`."""
    pair = dot_accumulation(v)
    d, acc = pair if pair is not None else (v, None)
    if not isinstance(d, Dot) or (acc is not None and depends(acc, var.name)):
        return False
    return any(x == var for x in (d.a, d.b)) and all(x == var or not depends(x, var.name) for x in (d.a, d.b))


def _reads(s, name: str, depends) -> bool:
    """Whether statement `s` (or anything nested in it) reads the variable `name`."""
    return any(isinstance(c, Value) and depends(c, name) or (not isinstance(c, Value) and _reads(c, name, depends))
               for c in children(s))


def _tails(n) -> tuple:
    """The values a compound statement reads at the end of its blocks."""
    match n:
        case If():
            return (*n.then_yields, *n.else_yields)
        case While():
            return (n.cond, *n.yields)
    return tuple(n.yields)


@define_pass(requires=[Fact.LAUNCH_PLAN], provides=[Fact.MMA_LAYOUTS], precedes=[Fact.METAL_IR])
def assign_layouts(k: Kernel, ctx: PassContext) -> Kernel:
    """`k` with the layout of each named tile in its schedule, and each product's arrangement of simdgroups in its
    `MmaPlan` (see the module docstring)."""
    if k.stage is not Stage.TILE or k.plan is None:
        raise UnsupportedConstructError("assign_layouts takes a Tile IR kernel planned by plan_launch", k.loc)
    if not any(n.type.shape for n in scan(k, ctx.analyses).of(Var)):
        return k
    a = _Assign(k, ctx)
    a.block(k.body, a.program)
    dots, old = a.recorded_plans(), k.schedule
    # as before (a pass run again): the kernel itself (a `PMap` is compared with a dict slowly: lengths first)
    if dots is old.dots and len(old.layouts) == len(a.layouts) and old.layouts == a.layouts:
        return k
    return evolve_node(k, schedule=evolve_node(old, dots=dots, layouts=pmap(a.layouts)))


__all__ = ["ROLL_SLOTS", "Group", "assign_layouts", "dot_accumulation", "fragments_of"]
