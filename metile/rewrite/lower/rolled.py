"""The parts of the lowering that loop over a thread's slots at run time instead of unrolling them.

A thread holding `R` slots of a tile normally gets `R` copies of each statement's code, one per slot.
When `R >= ROLL_SLOTS` and nothing the statement reads sits in registers (which a run-time index
cannot address), a store of the tile, or its publication to threadgroup memory, becomes one
`for (s = 0; s < R; ++s)` over the slot: the element a thread handles in slot `s` is computed from `s`
(`offset(s) = s % V + (s / V) * T * V` for runs of `V` over `T` threads), padding slots are guarded as
when unrolled, and the Metal compiler unrolls the constant trip count again. Code size, and the
compiler's own time, then grow with the statement instead of with the tile.

Readable at a run-time slot: pure expressions, per-thread scalars, role channels, `dot` results held in
simdgroup matrices (copied to scratch once, before the loop), and the `convert_layout` of a tile held in registers
(published to scratch once, before the loop, as the unrolled statement would publish it). A tile loaded only to be
staged for the `dot` that follows it, or only to be stored (`assign_layouts` leaves it `in_device`), is read from
device memory where its staging or its store needs an element (`deferred_load`; a store reads a run of them as one
vector where it writes one, `memory.store_run`), so that the data moves in one pass.
"""

from __future__ import annotations

from metile.ir.node import children
from metile.ir.stmts import For
from metile.ir.tile import ConvertLayout
from metile.ir.types import DType, TileType
from metile.ir.values import Load, Value, Var
from metile.layout import Layout
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import Blocked
from metile.rewrite.layouts import ROLL_SLOTS
from metile.rewrite.layouts import dot_accumulation as dot_acc
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import mma_use as MU
from metile.rewrite.lower import values as V
from metile.rewrite.lower.state import Block, Channel, Lazy, Mma, Regs, Scalar
from metile.rewrite.scan import HEAVY


def slot_offset(blk: Block, layout: Blocked, slot) -> Value:
    """`layout.offset(slot)` for an int or a run-time slot: the value mode of the thread-value layout
    (`(V, R) : (1, T*V)`) applied to the slot, `slot % V + (slot / V) * T*V`."""
    if isinstance(slot, int):
        return mo.const(layout.offset(slot))
    tv = layout.tv
    return mo.apply_layout(Layout(tv.shape[1], tv.stride[1]), slot)


def slot_loop(blk: Block, layout: Blocked, body) -> None:
    """Emit `for (s = 0; s < slots; ++s) { body(inner, s) }`, `inner` the loop body's block; values computed in
    the body stay in it."""
    s = Var(blk.fresh("s"), TileType(DType.I32))
    inner = blk.body()
    body(inner, s)
    blk.emit(For(s, mo.const(0), mo.const(layout.slots), mo.const(1), [], [], inner.out, [], [], loc=blk.loc))


def rollable(blk: Block, layout: Blocked, vs) -> list | None:
    """The matrices (`Mma`) that `vs` read, and the register tiles (`Regs`) they read through a `convert_layout`,
    to put in scratch before a loop over `layout`'s slots (`publish_before`); None when the slots should stay
    unrolled (too few, or a value read from registers where it is held)."""
    if layout.slots < ROLL_SLOTS:
        return None
    mats: list = []
    seen: set[int] = set()
    stack = [v for v in vs if v is not None]
    while stack:
        n = stack.pop()
        if id(n) in seen or n.type.shape == ():
            continue
        seen.add(id(n))
        rep = None
        if isinstance(n, ConvertLayout):
            held, _ = X.named_rep(blk, n.x)
            if isinstance(held, Regs):   # read back from scratch at any element
                if held not in mats:
                    mats.append(held)
                continue
            stack.append(n.x)
            continue
        if isinstance(n, Var):
            rep = blk.lookup(n.name)
        elif isinstance(n, HEAVY) or dot_acc(n):
            rep = X.heavy_rep(blk, n)
        else:
            stack.extend(c for c in children(n) if isinstance(c, Value))
            continue
        if isinstance(rep, Lazy):
            stack.append(rep.expr)
        elif isinstance(rep, Mma):
            if rep not in mats:
                mats.append(rep)
        elif not isinstance(rep, (Scalar, Channel)):
            return None
    return mats


def publish_before(blk: Block, reps: list, why) -> None:
    """Put what `rollable` found in scratch, once, before the loop reads it there."""
    regs = [r for r in reps if isinstance(r, Regs) and id(r) not in blk.kernel.published]
    if regs:
        X.publish_regs(blk, regs, why)
    for rep in reps:
        if isinstance(rep, Mma):
            MU.mma_in_scratch(blk, rep, why)


def deferred_load(blk: Block, load: Load, pt) -> Value:
    """Element `pt` of a deferred tile load, read where it is needed (located at the load's line)."""
    return blk.let(Load(V.at(blk, load.ptr, pt), V.at(blk, load.mask, pt),
                         V.at(blk, load.other, pt) if load.mask is not None else None, load.volatile), "ld", load.loc)



__all__ = ["deferred_load", "publish_before", "rollable", "slot_loop", "slot_offset"]
