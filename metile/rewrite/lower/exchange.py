"""How threads hand tiles to each other in the lowering: scratch memory, publishing and gathering, and the heavy
values (reductions, scans, products) materialised where their statement starts.

Scratch: each statement takes regions of the compiler's scratch arena (`metile.ir.simt.Scratch`, each bound to a
name at the kernel's start and placed by `allocate_threadgroup_memory`); every use starts with a barrier, so a
region is never rewritten while another thread still reads an older value. `publish` writes tiles there
(row-major, with the given row strides) between two barriers, in a pipelined loop's ring instead (`mma.Ring`), or
in a buffer of its own (`own`); `gather` reads an element of a tile some other thread holds in registers,
publishing it once per statement. `heavy_rep` lowers a reduction, scan, gather (`gather_of`) or product once per
region (`prepare` walks a value for them before its statement).
"""

from __future__ import annotations

from metile.ir.node import Node, children, walk
from metile.ir.simt import Scratch
from metile.ir.stmts import Let, Store
from metile.ir.tile import ArgReduce, ConvertLayout, Dot, Gather, Reduce, Scan
from metile.ir.types import AddressSpace, DType, PtrType
from metile.ir.values import AddPtr, Const, Load, SharedAlloc, Value, Var
from metile.rewrite import metal_ops as mo
from metile.rewrite.layouts import dot_accumulation as dot_acc
from metile.rewrite.lower import fma as FM
from metile.rewrite.lower import memory as M
from metile.rewrite.lower import mma as MM
from metile.rewrite.lower import mma_use as MU
from metile.rewrite.lower import reductions as R
from metile.rewrite.lower import rolled as RL
from metile.rewrite.lower import statements as S
from metile.rewrite.lower import values as V
from metile.rewrite.lower.state import Block, Channel, Lazy, Mma, Pt, Regs
from metile.rewrite.scan import HEAVY
from metile.rewrite.staging import columns_first


def scratch(blk: Block, dtype: DType, n: int) -> Value:
    """`n` elements of `dtype` of the scratch arena, for this statement: a name bound at the kernel's start to a
    `metile.ir.simt.Scratch` region, so that `allocate_threadgroup_memory` places it by rewriting that one `Let`."""
    kernel = blk.kernel
    region = Scratch(kernel.use, kernel.next_part(), dtype, n, loc=blk.loc)
    name = Var(kernel.fresh(f"region_{dtype.value}"), PtrType(dtype, (), AddressSpace.THREADGROUP))
    kernel.bound.append(Let(name, region, loc=blk.loc))
    return name


def publish(blk: Block, items: list[tuple[Value, tuple[int, ...]]], why: Node, ring: MM.Ring | None = None,
                own: bool = False) -> list[Value]:
    """Write tiles to scratch, each row-major with the given row strides; one barrier pair for all. In a
    `ring`, the tiles go to this iteration's buffer instead, behind the trailing barrier only (see `Ring`);
    when `own`, each to a buffer of its own, apart from the scratch arena."""
    if ring is None:
        S.barrier(blk, why)
    else:   # needed only where the ring is given one buffer: earlier readers of it must be done
        S.barrier(blk, why, ring=(ring, False))
    bases = []
    for v, strides in items:
        shape = v.type.shape
        dtype = v.type.dtype
        rows = shape[0] if len(shape) > 1 else 1
        size = strides[0] * rows if len(shape) > 1 else v.type.size
        if own:
            base = Var(blk.fresh(f"staged_{dtype.value}"), PtrType(dtype, (), AddressSpace.THREADGROUP))
            blk.kernel.channels.append(Let(base, SharedAlloc((-(-size // 4) * 4,), dtype), loc=blk.loc))
            bases.append(base)
        else:
            bases.append(scratch(blk, dtype, size) if ring is None else
                         ring.take(dtype, size, blk.kernel.use, blk.kernel.next_part(), blk.loc))
    for (v, strides), base in zip(items, bases):
        rep, load = named_rep(blk, v)
        held = None if rep is None and isinstance(load, Load) else MU.pointwise_mma(blk, (v,), v.type.shape)
        if held is not None:   # computed from a dot result held in matrices: each lane writes its elements
            MU.publish_fragments(blk, v, held.geom, base, strides)
            continue
        layout = V.layout(blk, v.type.size)
        down = rep is None and columns_first(load, v.type.shape, blk.facts.axes)
        if rep is None and isinstance(load, Load) and not down and M.stage_in_vectors(blk, v, load, base, strides):
            continue

        def one(b: Block, slot, v=v, strides=strides, base=base, layout=layout, down=down) -> None:
            if down:   # threads walk down the columns: consecutive threads, consecutive addresses
                rows, cols = v.type.shape
                c, r = V.coords(b, V.slot_pt(b, layout, slot, (cols, rows)))
                pt = Pt(v.type.shape, mo.add(mo.mul(r, mo.const(cols)), c))
            else:
                pt = V.slot_pt(b, layout, slot, v.type.shape)
            off: Value = mo.const(0)
            for c, s in zip(V.coords(b, pt), strides):
                off = mo.add(off, mo.mul(c, mo.const(s)))
            b.emit(Store(AddPtr(base, off), V.at(b, v, pt), V.guard(b, layout, slot), loc=b.loc))

        if RL.rollable(blk, layout, [v]) == []:
            RL.slot_loop(blk, layout, one)
        else:
            for slot in range(layout.slots):
                one(blk, slot)
    S.barrier(blk, why)
    return bases


def gather(blk: Block, rep: Regs, flat: Value, why: Node) -> Value:
    """Element `flat` of a tile held in registers by some thread: published once per statement."""
    base = blk.kernel.published_base(rep)
    if base is None:
        (base,) = publish_regs(blk, [rep], why)
    return blk.let(Load(AddPtr(base, flat)), "g")


def convert(blk: Block, n: ConvertLayout, flat: Value) -> Value:
    """Element `flat` of a `convert_layout` of a register tile to shared scratch: the tile is published once per
    statement (by the threads holding it, between barriers), and the element read back."""
    x = n.x
    rep, v = named_rep(blk, x)
    if rep is None and isinstance(v, HEAVY):   # a reduction, scan or gather (named or not): materialised before
        rep = heavy_rep(blk, v)
    if isinstance(rep, Channel):   # a program's tile a role block reads: already in threadgroup memory
        return blk.let(Load(AddPtr(rep.base, flat)), "ch")
    if not isinstance(rep, Regs):
        raise blk.refuse(f"internal: convert_layout of {x!r}, which is not held in registers ({rep!r})", x)
    return gather(blk, rep, flat, x)


def publish_regs(blk: Block, reps: list[Regs], why: Node) -> list[Value]:
    S.barrier(blk, why)
    bases = []
    for rep in reps:
        layout = rep.layout
        base = scratch(blk, rep.regs[0].type.dtype, layout.size)
        for slot in range(layout.slots):
            blk.emit(Store(AddPtr(base, V.raw_flat(blk, layout, slot)), rep.regs[slot], V.guard(blk, layout, slot),
                            loc=blk.loc))
        blk.kernel.publish(rep, base)
        bases.append(base)
    S.barrier(blk, why)
    return bases


def reps_in(blk: Block, v: Value) -> list[Regs]:
    """The register-held tiles `v` reads (through variables), so they can be published together."""
    out = []
    for n in walk(v):
        if isinstance(n, Var) and n.type.shape:
            rep = blk.lookup(n.name)
            if isinstance(rep, Regs) and id(rep) not in blk.kernel.published and rep not in out:
                out.append(rep)
    return out


def prepare(blk: Block, v: Value | None) -> None:
    """Materialise the reductions, scans, gathers and products in `v`, operands first. A value the kernel's scan
    shows holds none of them is not entered."""
    heavy = blk.facts.scan.heavy
    if v is None or not heavy(v):
        return
    seen: set[int] = set()
    stack: list[tuple[Value, bool]] = [(v, False)]
    while stack:
        n, done = stack.pop()
        if done:
            if isinstance(n, HEAVY) or dot_acc(n):
                heavy_rep(blk, n)
            continue
        if id(n) in seen or blk.memo_get(("h", n)) is not None:
            continue
        seen.add(id(n))
        stack.append((n, True))
        kids = list(children(n))
        pair = dot_acc(n)
        if pair is not None:  # the Dot is consumed by the accumulation, not materialised alone
            dot, acc = pair
            kids = [acc, dot.a, dot.b]
        stack.extend((c, False) for c in kids if isinstance(c, Value) and heavy(c))


def heavy_rep(blk: Block, n: Value):
    key = ("h", n)
    found = blk.memo_get(key)
    if found is None:
        if isinstance(n, Reduce):
            found = R.reduce_of(blk, n)
        elif isinstance(n, ArgReduce):
            found = R.arg_reduce(blk, n)
        elif isinstance(n, Scan):
            found = R.scan_of(blk, n)
        elif isinstance(n, Gather):
            found = gather_of(blk, n)
        elif isinstance(n, Dot):
            found = FM.product(blk, n, None, n)
        else:
            found = FM.product(blk, *dot_acc(n), n)
        blk.memo_put(key, found)
    return found


def gather_of(blk: Block, n: Gather) -> Regs:
    """A gather: the tile it picks from, evaluated at this thread's elements, goes to scratch (one barrier pair),
    and each element of the result is loaded from the place its index picks (`values.gathered_pt`)."""
    x = n.x
    src = V.layout(blk, x.type.size)
    (base,) = publish_regs(blk, [Regs(src, V.regs_of(blk, x, src))], n)
    layout = V.layout(blk, n.type.size)
    regs = []
    for slot in range(layout.slots):
        pt = V.gathered_pt(blk, n, V.slot_pt(blk, layout, slot, n.type.shape))
        guard = V.guard(blk, layout, slot)
        load = Load(AddPtr(base, pt.flat)) if guard is None else \
            Load(AddPtr(base, pt.flat), guard, Const(0, base.type.dtype))
        regs.append(blk.let(load, "gathered"))
    return Regs(layout, tuple(regs))


def publish_for_loop(blk: Block, v: Value, why: Node) -> None:
    """Before a run-time loop over elements of `v`: publish the held tiles they read (registers and simdgroup
    matrices), so that the loop body only loads them. Published from inside the body, they would be stored
    and fenced again on every iteration."""
    regs: dict[int, Regs] = {}
    mmas: dict[int, Mma] = {}
    seen: set[int] = set()
    stack: list[Value] = [v]
    while stack:
        n = stack.pop()
        if id(n) in seen or not isinstance(n, Value) or not n.type.shape:
            continue
        seen.add(id(n))
        if isinstance(n, Var):
            rep = blk.lookup(n.name)
        elif isinstance(n, HEAVY) or dot_acc(n):
            rep = blk.memo_get(("h", n))   # materialised where its statement starts
        else:
            stack.extend(c for c in children(n) if isinstance(c, Value))
            continue
        if isinstance(rep, Lazy):
            stack.append(rep.expr)
        elif isinstance(rep, Regs) and id(rep) not in blk.kernel.published:
            regs[id(rep)] = rep
        elif isinstance(rep, Mma) and id(rep) not in blk.kernel.published:
            mmas[id(rep)] = rep
    if regs:
        publish_regs(blk, list(regs.values()), why)
    for m in mmas.values():
        MU.mma_in_scratch(blk, m, why)


def named_rep(blk: Block, v: Value) -> tuple[object | None, Value]:
    """`v` followed through names bound to pure expressions (`Lazy`): the representation of the first name
    bound to anything else, with that name; or None, with the first value that is not a name."""
    while isinstance(v, Var):
        rep = blk.lookup(v.name)
        if not isinstance(rep, Lazy):
            return rep, v
        v = rep.expr
    return None, v


def channel_of(blk: Block, v: Value) -> Channel | None:
    """The channel holding `v`, when `v` names a role result passed through threadgroup memory."""
    rep, _ = named_rep(blk, v)
    return rep if isinstance(rep, Channel) else None



__all__ = ["channel_of", "convert", "gather", "gather_of", "heavy_rep", "named_rep", "prepare", "publish",
           "publish_for_loop", "publish_regs", "reps_in", "scratch"]
