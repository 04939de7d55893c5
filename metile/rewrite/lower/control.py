"""Structured control flow: `For`, `If`, `While` and `simdgroup_role`.

Loop-carried tiles become one Metal variable per register (or per simdgroup matrix, for an accumulator that only
`dot` updates: `acc = dot(a, b, acc)` keeps `acc` in matrices across iterations; or none, for a GEMM's accumulator
that Metal 4's `matmul2d` holds in its destination tensors across the loop, `tensor_ops.held_accumulator`); `If`
results the same. A loop or
branch whose bounds or condition depend on the thread makes its body *divergent*: nothing inside may need a
barrier. A `simdgroup_role` block is an `if` on the simdgroup index, and its body runs on a smaller group of
threads (its own layouts, thread and simdgroup numbers).
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
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import mma as MM
from metile.rewrite.lower import statements as S
from metile.rewrite.lower import tensor_ops as TO
from metile.rewrite.lower import values as V
from metile.rewrite.lower.ops import sg_in
from metile.rewrite.lower.state import Block, Channel, Group, Lazy, Mma, Regs, Scalar


def kind_of(blk: Block, v: Var):
    """The representation `assign_layouts` recorded for the named tile `v`; None for a scalar."""
    return V.recorded(blk, v, v.type.size) if v.type.shape else None


def fresh_rep(blk: Block, kind, var: Var):
    if isinstance(kind, TO.Held):   # the same tensors, not carried as values
        return kind, []
    if kind is None:
        v = Var(blk.fresh(var.name), var.type.with_shape(()))
        return Scalar(v), [v]
    if isinstance(kind, Blocked):
        t = var.type.with_shape(())   # (each type made once for all the slots)
        vs = [Var(blk.fresh(f"{var.name}_{i}"), t) for i in range(kind.slots)]
        return Regs(kind, tuple(vs)), vs
    t = MatrixType(DType.F32)
    vs = [Var(blk.fresh(f"{var.name}_m{i}"), t) for i in range(kind.pieces)]
    return Mma(kind, tuple(vs)), vs


def values_for(blk: Block, kind, v: Value) -> list[Value]:
    if isinstance(kind, TO.Held):   # a zero init (declared by `TO.hold`), or the update of the tensors in place
        if TO.rep_of(blk, v) is not kind and not TO.is_zeros(blk, v):
            raise blk.refuse("internal: a held accumulator is given other values than its own", v)
        return []
    if kind is None:
        return [V.scalar(blk, v)]
    if isinstance(kind, Blocked):
        return list(V.regs_of(blk, v, kind))
    return list(MM.as_mma(blk, v, kind).mats)


def flat_values(blk: Block, kinds, vs) -> list[Value]:
    """The Metal values of `vs` (carried inits, yields), each in its kind, one list."""
    for v in vs:
        X.prepare(blk, v)
    return [x for k, v in zip(kinds, vs) for x in values_for(blk, k, v)]


def bind_fresh(blk: Block, kinds, tile_vars) -> list[Var]:
    """Bind each of `tile_vars` to new Metal variables of its kind (loop-carried values, results)."""
    out: list[Var] = []
    for k, v in zip(kinds, tile_vars):
        rep, vs = fresh_rep(blk, k, v)
        blk.bind(v, rep)
        out += vs
    return out


def for_stmt(blk: Block, s: For) -> None:
    start, stop, step = flat_values(blk, [None] * 3, [s.start, s.stop, s.step])
    kinds = [kind_of(blk, c) for c in s.carried]
    index = Var(blk.fresh(s.index.name), s.index.type)
    ring = None
    inner = blk.nested(**S.control(blk, s, s.start, s.stop, s.step))
    inner.bind(s.index, Scalar(index))
    preheader = inner.preheader = []
    buffers = inner.facts.k.schedule.loops.get(s, 1)
    if buffers > 1:
        ring = inner.ring = MM.Ring(buffers, Var(inner.fresh("stage"), TileType(DType.I32)))
    kinds = [TO.held_accumulator(inner, s, i, kind) or kind for i, kind in enumerate(kinds)]
    inits = flat_values(blk, kinds, s.inits)
    for kind in kinds:
        if isinstance(kind, TO.Held):
            TO.hold(blk, kind)
    carried = bind_fresh(inner, kinds, s.carried)
    body, yields = S.lower_block(inner, s.body, lambda b: flat_values(b, kinds, s.yields))
    results = bind_fresh(blk, kinds, s.results)
    blk.out += preheader
    if ring is not None and ring.used:   # the buffers are used: rotate them, and wait for earlier readers
        following = Var(blk.fresh("stage"), ring.stage.type)
        body = [*body, Let(following, mo.mod(mo.add(ring.stage, mo.const(1)), ring.buffers), loc=s.loc)]
        carried, inits, yields = [*carried, ring.stage], [*inits, mo.const(0)], [*yields, following]
        results = [*results, Var(blk.fresh("stage"), ring.stage.type)]
        S.barrier(blk, s, ring=(ring, True))   # needed only where the ring is kept: its readers of an earlier run
    blk.emit(For(index, start, stop, step, carried, inits, body, yields, results, s.num_stages, loc=s.loc))
    for kind, res in zip(kinds, s.results):
        if isinstance(kind, TO.Held):   # written out once, after the loop
            blk.bind(res, TO.release(blk, kind, s))


def if_stmt(blk: Block, s: If) -> None:
    (cond,) = flat_values(blk, [None], [s.cond])
    kinds = [kind_of(blk, r) for r in s.results]
    branches = []
    for stmts, ys in ((s.then, s.then_yields), (s.orelse, s.else_yields)):
        inner = blk.nested(**S.control(blk, s, s.cond))
        branches.append(S.lower_block(inner, stmts, lambda b, ys=ys: flat_values(b, kinds, ys)))
    (then, tys), (orelse, eys) = branches
    results = bind_fresh(blk, kinds, s.results)
    blk.emit(If(cond, then, orelse, tys, eys, results, loc=s.loc))


def while_stmt(blk: Block, s: While) -> None:
    kinds = [kind_of(blk, c) for c in s.carried]
    inits = flat_values(blk, kinds, s.inits)
    inner = blk.nested(**S.control(blk, s, s.cond))   # the condition reads the carried values it needs
    carried = bind_fresh(inner, kinds, s.carried)
    cond_body, (cond,) = S.lower_block(inner, s.cond_body, lambda b: flat_values(b, [None], [s.cond]))
    inner2 = inner.nested()
    body, yields = S.lower_block(inner2, s.body, lambda b: flat_values(b, kinds, s.yields))
    results = bind_fresh(blk, kinds, s.results)
    blk.emit(While(carried, inits, cond_body, cond, body, yields, results, loc=s.loc))


def role_group(blk: Block, s: SimdgroupRole) -> Group:
    r = blk.facts.plan.roles[s.role]
    tid = Binary(BinOp.SUB, mo.builtin(BuiltinKind.THREAD_INDEX_IN_THREADGROUP), mo.const(32 * r.first))
    return Group(tid if r.first else blk.group.tid, 32 * r.count, r.first, r.count, s)


def role_stmt(blk: Block, s: SimdgroupRole) -> None:
    """`if (simdgroup in the role's range) { body }`. Results computed by `dot` accumulation stay in the
    role's simdgroup matrices (an `if` result); others are written to a channel in threadgroup memory,
    between two barriers so that readers see them and earlier readers are done."""
    if blk.group.role is not None:
        raise blk.refuse("simdgroup_role blocks cannot be nested", s)
    r = blk.facts.plan.roles[s.role]
    group = role_group(blk, s)
    cond = sg_in(r.first, r.count)
    for res, y in zip(s.results, s.yields):
        if not res.type.shape and S.is_varying(blk, y):
            raise blk.refuse(
                "a value assigned in this simdgroup_role block differs between threads, so it cannot be used "
                "after the block (only tiles and values that are the same on every thread can); store it to "
                "metile.shared memory inside the block and load it after a barrier", s)
    kinds = [role_result_kind(blk, res) for res in s.results]
    channels = [None if isinstance(k, MmaGeometry) else new_channel(blk, res) for k, res in zip(kinds, s.results)]
    feeds = role_inputs(blk, s, group)
    for var, ch in feeds:
        write_channel(blk, ch, var)
    if feeds or any(ch is not None for ch in channels):
        S.barrier(blk, s)
    inner = blk.nested(group=group)
    for var, ch in feeds:
        inner.bind(var, ch)

    def tail(b: Block) -> list[Value]:
        vals = []
        for kind, y, ch in zip(kinds, s.yields, channels):
            if ch is None:
                vals += list(MM.as_mma(b, y, kind).mats)
            else:
                write_channel(b, ch, y)
        return vals

    body, yields = S.lower_block(inner, s.body, tail)
    results: list[Var] = []
    others = []
    for kind, res, ch in zip(kinds, s.results, channels):
        if ch is None:
            rep, vs = fresh_rep(blk, kind, res)
            results += vs
            others += [MatrixFill(Const(0.0, DType.F32)) for _ in vs]
        else:
            rep = ch
        blk.bind(res, rep)
    blk.emit(If(cond, body, [], yields, others, results, loc=s.loc))
    if any(ch is not None for ch in channels):
        S.barrier(blk, s)


def role_inputs(blk: Block, s: SimdgroupRole, group: Group) -> list[tuple[Var, Channel]]:
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
            rep = blk.lookup(n.name)
            if isinstance(rep, Lazy):  # evaluated inside the block: what it reads counts too
                roots.append(rep.expr)
            elif isinstance(rep, Regs) and rep.layout != group_layout(blk, group, n):
                feeds.append((n, new_channel(blk, n)))
    return feeds


def group_layout(blk: Block, group: Group, v: Var):
    inner = blk.nested(group=group)
    return V.layout(inner, v.type.size)


def role_result_kind(blk: Block, res: Var):
    """The role's matrices for a result `assign_layouts` left in them, else None (a channel)."""
    kind = kind_of(blk, res)
    return kind if isinstance(kind, MmaGeometry) else None


def new_channel(blk: Block, res: Var) -> Channel:
    t = res.type
    base = Var(blk.fresh(f"{res.name}_channel"), PtrType(t.dtype, (), AddressSpace.THREADGROUP))
    blk.kernel.channels.append(Let(base, SharedAlloc((max(t.size, 1),), t.dtype), loc=blk.loc))  # the role block's
    return Channel(base, t.shape)


def write_channel(blk: Block, ch: Channel, y: Value) -> None:
    if not ch.shape:
        blk.emit(Store(ch.base, V.scalar(blk, y), Compare(CmpOp.EQ, blk.group.tid, mo.const(0)), loc=blk.loc))
        return
    layout = V.layout(blk, y.type.size)
    for slot in range(layout.slots):
        pt = V.slot_pt(blk, layout, slot, y.type.shape)
        blk.emit(Store(AddPtr(ch.base, pt.flat), V.at(blk, y, pt), V.guard(blk, layout, slot), loc=blk.loc))


__all__ = ["for_stmt", "if_stmt", "kind_of", "role_stmt", "while_stmt"]
