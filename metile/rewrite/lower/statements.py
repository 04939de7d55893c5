"""The statement rules of the lowering: each Tile IR statement of a region becomes Metal IR statements there.

`lower_block` lowers a list of statements into a list of their own (a scratch use and location per statement);
`stmt` dispatches on the statement (`match`), `let_stmt` on the value a `Let` binds, following the layout
`assign_layouts` recorded for a tile: registers for a load (`memory.load_regs`), nothing for one left in device
memory or a pure expression (read where needed). Barriers are refused where some threads of the program would not
reach them, simdgroup collectives where some lanes of a simdgroup would not run them (`control`, from
`metile.rewrite.uniformity`).
"""

from __future__ import annotations

import functools

from metile.ir import layouts as tl
from metile.ir.node import Node
from metile.ir.ops import CmpOp
from metile.ir.simt import RingBarrier
from metile.ir.stmts import AtomicAdd, Barrier, DeviceAssert, DevicePrint, For, If, Let, Store, While
from metile.ir.tile import Join, Permute, SimdgroupRole, Take, Transpose
from metile.ir.values import (
    AtomicRMW,
    Compare,
    Const,
    Load,
    Param,
    SharedAlloc,
    SimdBroadcast,
    SimdReduce,
    SimdShuffleXor,
    Stmt,
    Value,
    Var,
)
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import Blocked
from metile.rewrite.lower import control as C
from metile.rewrite.lower import debug as D
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import memory as M
from metile.rewrite.lower import values as V
from metile.rewrite.lower.state import Block, Lazy, Regs, Scalar
from metile.rewrite.lower.words import line, what


def lower_block(blk: Block, stmts, tail=None) -> tuple[list[Stmt], list[Value]]:
    """`stmts` lowered in the region of `blk` into a statement list of their own; `tail(body)` (run after them, in
    the same list, given the block they were lowered into) gives values."""
    body, loc, kernel = blk.collecting(), blk.loc, blk.kernel
    for s in stmts:
        kernel.new_statement()
        kernel.loc = s.loc
        stmt(body, s)
    blk.kernel.loc = loc
    vals = []
    if tail is not None:
        blk.kernel.new_statement()
        vals = tail(body)
    return body.out, vals


def is_varying(blk: Block, *vs: Value | None) -> bool:
    return any(blk.facts.scan.depends(v, blk.facts.varying) for v in vs)


def control(blk: Block, s: Node, *vs: Value | None) -> dict:
    """The divergence of the control flow statement `s` decided by `vs` (for `nested`): on the thread (no
    barrier inside), and on the lane (no simdgroup collective inside either)."""
    if not is_varying(blk, *vs):
        return {}
    lane = any(blk.facts.lane_varies(v) for v in vs)   # `metile.rewrite.uniformity.lane_dependence`
    return {"divergent": s, "lane_divergent": s if lane else None}


def barrier(blk: Block, why: Node, fence=None, ring=None) -> None:
    """A threadgroup barrier; refused where some threads of the program would not reach it. With `ring` (a
    `(Ring, kept)` pair), a `RingBarrier`: the barrier only where the ring is kept, or only where it is not."""
    if blk.group.role is not None:
        raise blk.refuse(
            f"{what(why)} needs a barrier across the whole program, which cannot be placed inside "
            f"simdgroup_role (the other roles would never arrive); move it out of the role block", why)
    if blk.divergent is not None:
        raise blk.refuse(
            f"{what(why)} needs a barrier, but it runs under control flow that depends on the thread "
            f"(line {line(blk.divergent.loc)}): every thread of the program must reach the same barriers; "
            "use metile.where to select per thread instead", why)
    if ring is not None:
        blk.emit(RingBarrier(ring[0].stage.name, ring[1], loc=blk.loc))
        return
    blk.emit(Barrier(loc=blk.loc) if fence is None else Barrier(fence, loc=blk.loc))


def collective(blk: Block, why: Node) -> None:
    """Refuse a simdgroup collective (a simd reduction, shuffle or broadcast, or simdgroup matrix work) where
    some lanes of a simdgroup may not run it: Metal leaves what inactive lanes contribute undefined."""
    if blk.lane_divergent is not None:
        raise blk.refuse(
            f"{what(why)} is a simdgroup collective, which every lane of a simdgroup must run, but it runs "
            f"under control flow that depends on the thread's lane (line {line(blk.lane_divergent.loc)}); "
            "compute it "
            "before that branch or loop, and select per thread with metile.where", why)


def stmt(blk: Block, s: Stmt) -> None:
    match s:
        case Let(var, value):
            X.prepare(blk, value)
            let_stmt(blk, var, value)
        case Store(ptr, value, mask) | AtomicAdd(ptr, value, mask):
            for x in (ptr, value, mask):
                X.prepare(blk, x)
            M.store(blk, Store if isinstance(s, Store) else functools.partial(AtomicAdd, op=s.op), ptr, value, mask, s)
        case Barrier(fence):
            barrier(blk, s, fence)
        case For():
            C.for_stmt(blk, s)
        case If():
            C.if_stmt(blk, s)
        case While():
            C.while_stmt(blk, s)
        case SimdgroupRole():
            C.role_stmt(blk, s)
        case DevicePrint():
            D.print_stmt(blk, s)
        case DeviceAssert():
            D.assert_stmt(blk, s)
        case _:
            raise blk.refuse(f"{what(s)} cannot be lowered", s)


_BOUND_BY_RULE = frozenset({Load, AtomicRMW, SharedAlloc, SimdShuffleXor, SimdBroadcast, SimdReduce, Transpose, Permute,
                            Join, Take})
"""The classes of values `let_stmt` binds by a rule of their own (none has subclasses): any other value is a program
scalar or a pure tile expression, bound without trying those rules."""


def let_stmt(blk: Block, var: Var, value: Value) -> None:
    if value.__class__ in _BOUND_BY_RULE and _let_by_rule(blk, var, value):
        return
    if value.type.shape == ():
        low = V.scalar(blk, value)
        blk.bind(var, Scalar(low if isinstance(low, (Const, Param, Var)) else blk.let(low, var.name)))
    else:
        blk.bind(var, Lazy(value))


def _let_by_rule(blk: Block, var: Var, value: Value) -> bool:
    """Bind `var` to `value` by the rule of its class; False where none applies."""
    match value:
        case Load(ptr, mask, other) if value.type.shape:
            layout = V.recorded(blk, var, value.type.size)
            if isinstance(layout, tl.InDevice):  # read where the dot staging needs it (`lower.rolled`)
                blk.bind(var, Lazy(value))
            else:
                blk.bind(var, Regs(layout, M.load_regs(blk, var.name, layout, ptr, mask, other, value)))
        case Load(ptr, mask, other):
            v = Load(V.scalar(blk, ptr), V.scalar(blk, mask), V.scalar(blk, other), value.volatile)
            blk.bind(var, Scalar(blk.let(v, var.name)))
        case AtomicRMW() if not value.type.shape:
            blk.bind(var, Scalar(atomic(blk, var, value)))
        case AtomicRMW():
            layout = V.recorded(blk, var, value.type.size)
            if not isinstance(layout, Blocked):
                raise blk.refuse(f"the old values of an atomic tile laid out as {type(layout).__name__}", value)
            blk.bind(var, Regs(layout, M.atomic_regs(blk, var.name, layout, value)))
        case SharedAlloc():
            v = Var(blk.fresh(var.name), value.type)
            blk.emit(Let(v, value, loc=blk.loc))
            blk.bind(var, Scalar(v))
        case SimdShuffleXor(x, lane) | SimdBroadcast(x, lane):
            collective(blk, value)
            blk.bind(var, Scalar(blk.let(type(value)(V.scalar(blk, x), V.scalar(blk, lane)), var.name)))
        case SimdReduce(op, x):
            collective(blk, value)
            blk.bind(var, Scalar(blk.let(SimdReduce(op, V.scalar(blk, x)), var.name)))
        case Transpose() | Permute() | Join() | Take() if value.type.shape and isinstance(
                layout := V.recorded(blk, var, value.type.size), Blocked):   # moved between threads once, here
            blk.bind(var, Regs(layout, V.regs_of(blk, value, layout)))
        case _:
            return False
    return True


def atomic(blk: Block, var: Var, a: AtomicRMW) -> Var:
    """A scalar atomic read-modify-write and its old value. One of values every thread of the program has alike,
    outside control flow that differs between threads, runs once per program, as Triton's does: the first thread
    performs it and hands the old value to the others through scratch, between barriers (so a `while` on it stays
    uniform). Otherwise each thread performs its own."""
    low = AtomicRMW(a.op, V.scalar(blk, a.ptr), V.scalar(blk, a.value), V.scalar(blk, a.mask),
                    V.scalar(blk, a.compare), loc=blk.loc)
    if blk.divergent is not None or is_varying(blk, a.ptr, a.value, a.mask, a.compare):
        return blk.let(low, var.name)
    slot = X.scratch(blk, a.type.dtype, 1)
    barrier(blk, a)
    old = Var(blk.fresh(var.name), a.type)
    first = Compare(CmpOp.EQ, blk.group.tid, mo.const(0))
    blk.emit(If(first, [Let(old, low, loc=blk.loc), Store(slot, old, loc=blk.loc)], loc=blk.loc))
    barrier(blk, a)
    return blk.let(Load(slot), var.name)


__all__ = ["atomic", "barrier", "collective", "control", "is_varying", "let_stmt", "lower_block", "stmt"]
