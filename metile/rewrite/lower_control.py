"""Structured control flow for `metile.rewrite.lower_tiles`: `For`, `If`, `While` and `simdgroup_role`.

Loop-carried tiles become one Metal variable per register (or per simdgroup matrix, for an accumulator
that only `dot` updates: `acc = dot(a, b, acc)` keeps `acc` in matrices across iterations); `If`
results the same. A loop or branch whose bounds or condition depend on the thread makes its body
*divergent*: nothing inside may need a barrier. A `simdgroup_role` block is an `if` on the simdgroup
index, and its body runs on a smaller group of threads (its own layouts, thread and simdgroup numbers).
"""

from __future__ import annotations

from metile.ir.metal import MatrixFill
from metile.ir.node import walk
from metile.ir.ops import BinOp, BuiltinKind, CmpOp
from metile.ir.stmts import For, If, Let, Store, While
from metile.ir.tile import SimdgroupRole
from metile.ir.types import AddressSpace, DType, MatrixType, PtrType, TileType
from metile.ir.values import AddPtr, Binary, Compare, Const, SharedAlloc, Value, Var
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import Blocked, MmaGeometry
from metile.rewrite.lower_collective import Channel, Group, Lazy, Mma, Regs, Scalar, sg_in
from metile.rewrite.lower_mma import Ring


class ControlFlow:
    """Mixed into `metile.rewrite.lower_tiles.Lowering`."""

    def carry_kind(self, carried: Var, init: Value, yielded: Value):
        """The representation a loop-carried value takes, as `assign_layouts` recorded: a scalar (None), registers,
        or (an accumulator updated by `dot`) simdgroup matrices."""
        return self.kind_of(carried)

    def kind_of(self, v: Var):
        """The representation `assign_layouts` recorded for the named tile `v`; None for a scalar."""
        return self.recorded(v, v.type.size) if v.type.shape else None

    def fresh_rep(self, kind, var: Var):
        if kind is None:
            v = Var(self.fresh(var.name), var.type.with_shape(()))
            return Scalar(v), [v]
        if isinstance(kind, Blocked):
            vs = [Var(self.fresh(f"{var.name}_{i}"), var.type.with_shape(())) for i in range(kind.slots)]
            return Regs(kind, tuple(vs)), vs
        vs = [Var(self.fresh(f"{var.name}_m{i}"), MatrixType(DType.F32)) for i in range(kind.pieces)]
        return Mma(kind, tuple(vs)), vs

    def values_for(self, kind, v: Value) -> list[Value]:
        if kind is None:
            return [self.scalar(v)]
        if isinstance(kind, Blocked):
            return list(self.regs_of(v, kind))
        return list(self.as_mma(v, kind).mats)

    def flat_values(self, kinds, vs) -> list[Value]:
        """The Metal values of `vs` (carried inits, yields), each in its kind, one list."""
        for v in vs:
            self.prepare(v)
        return [x for k, v in zip(kinds, vs) for x in self.values_for(k, v)]

    def bind_fresh(self, kinds, tile_vars) -> list[Var]:
        """Bind each of `tile_vars` to new Metal variables of its kind (loop-carried values, results)."""
        out: list[Var] = []
        for k, v in zip(kinds, tile_vars):
            rep, vs = self.fresh_rep(k, v)
            self.bind(v, rep)
            out += vs
        return out

    def for_stmt(self, s: For) -> None:
        start, stop, step = self.flat_values([None] * 3, [s.start, s.stop, s.step])
        kinds = [self.carry_kind(c, i, y) for c, i, y in zip(s.carried, s.inits, s.yields)]
        inits = self.flat_values(kinds, s.inits)
        index = Var(self.fresh(s.index.name), s.index.type)
        divergent = s if self.is_varying(s.start, s.stop, s.step) else None
        ring = None
        with self.nested(divergent=divergent):
            self.bind(s.index, Scalar(index))
            carried = self.bind_fresh(kinds, s.carried)
            preheader = self.preheader = []
            buffers = self.k.schedule.loops.get(s, 1)
            if buffers > 1 and self.rings_allowed:
                ring = self.ring = Ring(buffers, Var(self.fresh("stage"), TileType(DType.I32)))
            body, yields = self.block(s.body, lambda: self.flat_values(kinds, s.yields))
        results = self.bind_fresh(kinds, s.results)
        self.out += preheader
        if ring is not None and ring.allocs:   # the buffers are used: rotate them, and wait for earlier readers
            self.channels += ring.allocs
            self.rings_used = True
            following = Var(self.fresh("stage"), ring.stage.type)
            body = [*body, Let(following, mo.mod(mo.add(ring.stage, mo.const(1)), ring.buffers), loc=s.loc)]
            carried, inits, yields = [*carried, ring.stage], [*inits, mo.const(0)], [*yields, following]
            results = [*results, Var(self.fresh("stage"), ring.stage.type)]
            self.barrier(s)
        self.emit(For(index, start, stop, step, carried, inits, body, yields, results, s.num_stages, loc=s.loc))

    def if_stmt(self, s: If) -> None:
        (cond,) = self.flat_values([None], [s.cond])
        kinds = [self.kind_of(r) for r in s.results]
        divergent = s if self.is_varying(s.cond) else None
        branches = []
        for stmts, ys in ((s.then, s.then_yields), (s.orelse, s.else_yields)):
            with self.nested(divergent=divergent):
                branches.append(self.block(stmts, lambda ys=ys: self.flat_values(kinds, ys)))
        (then, tys), (orelse, eys) = branches
        results = self.bind_fresh(kinds, s.results)
        self.emit(If(cond, then, orelse, tys, eys, results, loc=s.loc))

    def while_stmt(self, s: While) -> None:
        kinds = [self.kind_of(c) for c in s.carried]
        inits = self.flat_values(kinds, s.inits)
        divergent = s if self.is_varying(s.cond) else None  # the condition reads the carried values it needs
        with self.nested(divergent=divergent):
            carried = self.bind_fresh(kinds, s.carried)
            cond_body, (cond,) = self.block(s.cond_body, lambda: self.flat_values([None], [s.cond]))
            with self.nested():
                body, yields = self.block(s.body, lambda: self.flat_values(kinds, s.yields))
        results = self.bind_fresh(kinds, s.results)
        self.emit(While(carried, inits, cond_body, cond, body, yields, results, loc=s.loc))

    def role_group(self, s: SimdgroupRole) -> Group:
        r = self.roles[s.role]
        tid = Binary(BinOp.SUB, mo.builtin(BuiltinKind.THREAD_INDEX_IN_THREADGROUP), mo.const(32 * r.first))
        return Group(tid if r.first else self.group.tid, 32 * r.count, r.first, r.count, s)

    def role_stmt(self, s: SimdgroupRole) -> None:
        """`if (simdgroup in the role's range) { body }`. Results computed by `dot` accumulation stay in the
        role's simdgroup matrices (an `if` result); others are written to a channel in threadgroup memory,
        between two barriers so that readers see them and earlier readers are done."""
        if self.group.role is not None:
            raise self.refuse("simdgroup_role blocks cannot be nested", s)
        r = self.roles[s.role]
        group = self.role_group(s)
        cond = sg_in(r.first, r.count)
        for res, y in zip(s.results, s.yields):
            if not res.type.shape and self.is_varying(y):
                raise self.refuse(
                    "a value assigned in this simdgroup_role block differs between threads, so it cannot be used "
                    "after the block (only tiles and values that are the same on every thread can); store it to "
                    "metile.shared memory inside the block and load it after a barrier", s)
        kinds = [self.role_result_kind(res, y, group) for res, y in zip(s.results, s.yields)]
        channels = [None if isinstance(k, MmaGeometry) else self.new_channel(res) for k, res in zip(kinds, s.results)]
        feeds = self.role_inputs(s, group)
        for var, ch in feeds:
            self.write_channel(ch, var)
        if feeds or any(ch is not None for ch in channels):
            self.barrier(s)
        with self.nested(group=group):
            for var, ch in feeds:
                self.bind(var, ch)
            def tail():
                vals = []
                for kind, y, ch in zip(kinds, s.yields, channels):
                    if ch is None:
                        vals += list(self.as_mma(y, kind).mats)
                    else:
                        self.write_channel(ch, y)
                return vals
            body, yields = self.block(s.body, tail)
        results: list[Var] = []
        others = []
        for kind, res, ch in zip(kinds, s.results, channels):
            if ch is None:
                rep, vs = self.fresh_rep(kind, res)
                results += vs
                others += [MatrixFill(Const(0.0, DType.F32)) for _ in vs]
            else:
                rep = ch
            self.bind(res, rep)
        self.emit(If(cond, body, [], yields, others, results, loc=s.loc))
        if any(ch is not None for ch in channels):
            self.barrier(s)

    def role_inputs(self, s: SimdgroupRole, group: Group) -> list[tuple[Var, Channel]]:
        """The tiles the block reads that the threads outside it hold in registers laid out for the whole program,
        each with a channel to hand it to the role's threads through, written before the block (a barrier cannot
        be placed inside it)."""
        feeds: list[tuple[Var, Channel]] = []
        seen: set[str] = set()
        roots: list = [*s.body, *s.yields]
        while roots:
            for n in walk(roots.pop()):
                if n.__class__ is not Var or not n.type.shape or n.name in seen:
                    continue
                seen.add(n.name)
                rep = self.scope.lookup_env(n.name)
                if isinstance(rep, Lazy):  # evaluated inside the block: what it reads counts too
                    roots.append(rep.expr)
                elif isinstance(rep, Regs) and rep.layout != self.group_layout(group, n):
                    feeds.append((n, self.new_channel(n)))
        return feeds

    def group_layout(self, group: Group, v: Var):
        with self.nested(group=group):
            return self.layout(v.type.size)

    def role_result_kind(self, res: Var, y: Value, group: Group):
        """The role's matrices for a result `assign_layouts` left in them, else None (a channel)."""
        kind = self.kind_of(res)
        return kind if isinstance(kind, MmaGeometry) else None

    def new_channel(self, res: Var) -> Channel:
        t = res.type
        base = Var(self.fresh(f"{res.name}_channel"), PtrType(t.dtype, (), AddressSpace.THREADGROUP))
        self.channels.append(Let(base, SharedAlloc((max(t.size, 1),), t.dtype), loc=self.loc))  # the role block's
        return Channel(base, t.shape)

    def write_channel(self, ch: Channel, y: Value) -> None:
        if not ch.shape:
            self.emit(Store(ch.base, self.scalar(y), Compare(CmpOp.EQ, self.group.tid, mo.const(0)), loc=self.loc))
            return
        layout = self.layout(y.type.size)
        for slot in range(layout.slots):
            pt = self.slot_pt(layout, slot, y.type.shape)
            self.emit(Store(AddPtr(ch.base, pt.flat), self.at(y, pt), self.guard(layout, slot), loc=self.loc))


__all__ = ["ControlFlow"]
