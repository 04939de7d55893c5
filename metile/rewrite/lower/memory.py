"""Loads and stores of tiles in the lowering.

A tile load fills the registers of the thread-value layout (`Regs`), `layout.vec` elements at a time as one
vector access where the axis analysis proves the run consecutive and aligned, with a guarded element-by-element
fallback where a mask may cut the run. A store takes the first path that applies: one store per program for
program scalars, `simdgroup_store` of a held `dot` result (`mma_use.mma_store`), each lane's own elements of it
(`mma_use.fragment_store`), a run-time loop over the slots, or one store (or vector store) per slot. A `dot`
operand read straight from device memory is staged in runs of `STAGE_VECTOR` (`stage_in_vectors`).
"""

from __future__ import annotations

import functools

from metile.ir.metal import Builtin, Extract, MakeVector, VecLoad, VecStore
from metile.ir.node import children
from metile.ir.ops import BinOp, CmpOp
from metile.ir.stmts import For, If, Let, Stmt, Store
from metile.ir.tile import Broadcast
from metile.ir.types import DType, PtrType, TileType
from metile.ir.values import (
    AddPtr,
    AtomicRMW,
    Binary,
    Bitcast,
    Cast,
    Compare,
    Const,
    Fma,
    Load,
    Param,
    Unary,
    Value,
    Var,
    Where,
)
from metile.rewrite import metal_ops as mo
from metile.rewrite.axis_info import BIG, vector_width
from metile.rewrite.distribute import Blocked, blocked
from metile.rewrite.layouts import ROLL_SLOTS
from metile.rewrite.lower import lines as LN
from metile.rewrite.lower import mma_use as MU
from metile.rewrite.lower import rolled as RL
from metile.rewrite.lower import staged_runs as SR
from metile.rewrite.lower import statements as S
from metile.rewrite.lower import values as V
from metile.rewrite.lower.state import Block, Lazy, Pt
from metile.rewrite.staging import staging_row_spacing

STAGE_VECTOR = 4   # elements per run when a tile is staged from device memory

_row_spacing = functools.lru_cache(maxsize=256)(staging_row_spacing)
"""`staging_row_spacing`, a function of a few integers that tries several spacings, once per tile geometry."""


def run_width(blk: Block, layout: Blocked, ptr: Value) -> int:
    """`layout.vec` when every run of `layout` is `vec` consecutive, aligned addresses, else 1."""
    return vector_width(blk.facts.axes, layout.vec, ptr)


def load_regs(blk: Block, name: str, layout: Blocked, ptr, mask, other, where) -> tuple[Value, ...]:
    shape, volatile = ptr.type.shape, where.volatile
    width = 1 if volatile else run_width(blk, layout, ptr)   # a volatile load reads element by element
    whole = width > 1 and whole_runs(blk, mask, ptr, width)
    regs: list[Value] = []
    for first in range(0, layout.slots, width):
        p0 = V.slot_pt(blk, layout, first, shape)   # the run's other points only where they are read
        if width == 1:
            m = V.at(blk, mask, p0)
            regs.append(blk.let(Load(V.at(blk, ptr, p0), m, V.at(blk, other, p0) if m is not None else None,
                                     volatile), name))
            continue
        vec = VecLoad(V.at(blk, ptr, p0), width)
        if whole:   # the run wholly inside the mask, or wholly outside it (reading `other`)
            cond = mo.both(V.at(blk, mask, p0), V.guard(blk, layout, first))
            if cond is None:
                v = blk.let(vec, name)
                regs += [Extract(v, j) for j in range(width)]
                continue
            outside = ([V.at(blk, other, V.slot_pt(blk, layout, s, shape)) for s in range(first, first + width)]
                       if other is not None else [_zero(vec.type.dtype)] * width)
            fast = Var(blk.fresh(name), vec.type)
            inside = [Extract(fast, j) for j in range(width)]
            results = blk.fresh_vars(name, inside)
            blk.emit(If(cond, [Let(fast, vec)], [], inside, outside, results, loc=blk.loc))
            regs += results
            continue
        pts = [p0, *(V.slot_pt(blk, layout, s, shape) for s in range(first + 1, first + width))]
        masks = [V.at(blk, mask, pt) for pt in pts]
        scalar = [Load(V.at(blk, ptr, pt), m, V.at(blk, other, pt) if m is not None else None, volatile)
                  for pt, m in zip(pts, masks)]
        cond = mo.all_of(masks + [V.guard(blk, layout, first)])
        if cond is None:
            v = blk.let(vec, name)
            regs += [Extract(v, j) for j in range(width)]
            continue
        fast, slow = Var(blk.fresh(name), vec.type), blk.fresh_vars(name, scalar)
        results = blk.fresh_vars(name, scalar)
        blk.emit(If(cond, [Let(fast, vec)], [Let(s, x) for s, x in zip(slow, scalar)],
                     [Extract(fast, j) for j in range(width)], slow, results, loc=blk.loc))
        regs += results
    return tuple(regs)


def whole_runs(blk: Block, mask: Value | None, ptr: Value, width: int) -> bool:
    """Whether the mask of a load or store through `ptr` is one value over each aligned run of `width` elements
    (no mask is): a run then moves as one vector or not at all, with no element-by-element path for a run the
    mask cuts."""
    if mask is None:
        return True
    if mask.type.shape != ptr.type.shape:
        return False
    const = blk.facts.axes.info(mask).const
    return const == BIG or const % width == 0


def _zero(dtype: DType) -> Const:
    """The zero of `dtype` a masked load reads outside its mask: one node per dtype (`metal_ops.const`; a `Const`
    holds its value as its dtype does, 0.0 in a float type)."""
    return mo.const(0, dtype)


def store(blk: Block, cls, ptr, value, mask, s: Stmt) -> None:
    shape = ptr.type.shape
    if shape == ():
        m = V.scalar(blk, mask)
        if blk.divergent is None and not S.is_varying(blk, ptr, value, mask):
            m = mo.both(m, Compare(CmpOp.EQ, blk.group.tid, mo.const(0)))
        blk.emit(cls(V.scalar(blk, ptr), V.scalar(blk, value), m, loc=blk.loc))
        return
    if cls is Store and mask is None and MU.mma_store(blk, ptr, value):
        return
    if MU.fragment_store(blk, cls, ptr, value, mask):
        return
    layout = V.layout(blk, ptr.type.size)
    width = run_width(blk, layout, ptr) if cls is Store else 1
    loaded = deferred(blk, value)
    if loaded is not None and width > 1 and run_width(blk, layout, loaded.ptr) < width:
        loaded = None   # read element by element into the store's vectors
    reps = RL.rollable(blk, layout, (ptr, value, mask)) if width == 1 or loaded is not None else None
    if reps is not None:
        RL.publish_before(blk, reps, s)
        step = Var(blk.fresh("s"), TileType(DType.I32))
        inner = blk.body()
        store_run(inner, cls, layout, width, ptr, value, mask, loaded, step)
        blk.emit(For(step, mo.const(0), mo.const(layout.slots), mo.const(width), [], [], inner.out, [], [],
                     loc=blk.loc))
        return
    whole = width > 1 and whole_runs(blk, mask, ptr, width)
    for first in range(0, layout.slots, width):
        store_run(blk, cls, layout, width, ptr, value, mask, None, first, whole)


def deferred(blk: Block, value: Value) -> Load | None:
    """The tile load `value` names when `assign_layouts` left it in device memory for this store to read."""
    if isinstance(value, Var):
        rep = blk.lookup(value.name)
        if isinstance(rep, Lazy) and isinstance(rep.expr, Load):
            return rep.expr
    return None


def store_run(blk: Block, cls, layout: Blocked, width: int, ptr, value, mask, loaded: Load | None, first,
              whole: bool = False) -> None:
    """The store of the `width` slots from `first` (an int, or a run-time slot): one store per slot, or one vector
    store where every slot's mask holds; `loaded`, a deferred load the value is, read as one vector there too.
    `whole`: the mask is one value over the run (`whole_runs`), so the run is one vector store or none."""
    shape = ptr.type.shape
    slots = [first + j if isinstance(first, int) else mo.add(first, mo.const(j)) if j else first
             for j in range(width)]
    if isinstance(first, int) or width == 1 or layout.has_padding or shape[-1] % width:
        pts = [V.slot_pt(blk, layout, s, shape) for s in slots]
    else:   # a run at a run-time slot lies in one row: its elements' coordinates follow the first's
        p0 = V.slot_pt(blk, layout, first, shape)
        cs = V.coords(blk, p0)
        pts = [p0, *(Pt(shape, mo.add(p0.flat, mo.const(j)), None, (*cs[:-1], mo.add(cs[-1], mo.const(j))))
                     for j in range(1, width))]
    if whole and loaded is None:   # the run wholly inside the mask, or wholly outside it (storing nothing)
        cond = mo.both(V.at(blk, mask, pts[0]), V.guard(blk, layout, first))
        values = [V.at(blk, value, pt) for pt in pts]
        if cond is not None and all(speculable(x) for x in values):   # once, before the test (as below)
            values = [x if x.__class__ in _LEAVES else blk.let(x, "st") for x in values]
        vec = VecStore(V.at(blk, ptr, pts[0]), MakeVector(values), loc=blk.loc)
        blk.emit(vec if cond is None else If(cond, [vec], loc=blk.loc))
        return
    guards = [V.guard(blk, layout, s) for s in slots]
    masks = [mo.both(V.at(blk, mask, pt), g) for pt, g in zip(pts, guards)]
    if width == 1 or loaded is not None:
        ptrs = [V.at(blk, ptr, pt) for pt in pts]
        if loaded is None:
            blk.emit(cls(ptrs[0], V.at(blk, value, pts[0]), masks[0], loc=blk.loc))
            return
        # the deferred load's elements, each where its own mask (and the slot's guard) holds
        slow = []
        for p, pt, m, g in zip(ptrs, pts, masks, guards):
            x = Var(blk.fresh("ld"), loaded.type.with_shape(()))
            read = mo.both(V.at(blk, loaded.mask, pt), g)
            other = V.at(blk, loaded.other, pt) if read is not None else None
            slow += [Let(x, Load(V.at(blk, loaded.ptr, pt), read, other, loaded.volatile), loc=loaded.loc),
                     cls(p, x, m, loc=blk.loc)]
        # every element stored and read (the same conditions once where the load's mask is the store's)
        conds = list(dict.fromkeys(x for x in [*masks, *(V.at(blk, loaded.mask, pt) for pt in pts)] if x is not None))
        cond = mo.all_of(conds) if width > 1 else False
        if width == 1 or cond is False:
            for x in slow:
                blk.emit(x)
            return
        whole_load = VecLoad(V.at(blk, loaded.ptr, pts[0]), width)
        vec = Var(blk.fresh("ld"), whole_load.type)
        fast = [Let(vec, whole_load, loc=loaded.loc),
                VecStore(ptrs[0], vec, loc=blk.loc)]
        for x in fast if cond is None else [If(cond, fast, slow, loc=blk.loc)]:
            blk.emit(x)
        return
    scalar = [cls(V.at(blk, ptr, pt), V.at(blk, value, pt), m, loc=blk.loc) for pt, m in zip(pts, masks)]
    cond = mo.all_of(masks)
    if cond is not None and all(speculable(x.value) for x in scalar):
        # the run's values once, before the test, for both of its paths (and for later statements that share
        # their subexpressions), instead of once in each path
        scalar = [x if x.value.__class__ in _LEAVES else cls(x.ptr, blk.let(x.value, "st"), x.mask, loc=x.loc)
                  for x in scalar]
    vec = VecStore(scalar[0].ptr, MakeVector([x.value for x in scalar]), loc=blk.loc)
    blk.emit(vec if cond is None else If(cond, [vec], scalar, loc=blk.loc))


_LEAVES = (Const, Param, Var)
_PURE = frozenset({Const, Param, Var, Builtin, Unary, Compare, Where, Cast, Bitcast, Fma, Extract, MakeVector})
_PURE_LEAVES = frozenset({Const, Param, Var, Builtin})
_TRAPPING = frozenset({BinOp.TRUNCDIV, BinOp.REM, BinOp.FLOORDIV, BinOp.MOD})


def speculable(v: Value) -> bool:
    """Whether `v` may be computed where its store's mask is false: arithmetic that reads no memory and cannot
    trap (an integer division or remainder can: by zero, or INT_MIN by -1)."""
    stack, seen = [v], set()   # every distinct node, in any order (a stack: the values are DAGs)
    while stack:
        n = stack.pop()
        cls = n.__class__
        if cls in _PURE_LEAVES or id(n) in seen:
            continue
        seen.add(id(n))
        if cls is Binary:
            if n.op in _TRAPPING and not n.type.dtype.is_float and not (
                    n.rhs.__class__ is Const and n.rhs.value not in (0, -1)):
                return False
        elif cls not in _PURE:
            return False
        stack += children(n)
    return True


def atomic_regs(blk: Block, name: str, layout: Blocked, a: AtomicRMW) -> tuple[Value, ...]:
    """The old values of a tile of atomics, each element performed once, by the thread that holds it (padding
    slots perform none)."""
    shape, regs = a.type.shape, []
    for slot in range(layout.slots):
        pt = V.slot_pt(blk, layout, slot, shape)
        m = mo.both(V.at(blk, a.mask, pt), V.guard(blk, layout, slot))
        regs.append(blk.let(AtomicRMW(a.op, V.at(blk, a.ptr, pt), V.at(blk, a.value, pt), m, V.at(blk, a.compare, pt),
                                      loc=blk.loc), name))
    return tuple(regs)


def stage_in_vectors(blk: Block, v: Value, load: Load, base: Value, strides: tuple[int, ...]) -> bool:
    """Stage the 2-D tile `v`, read straight from device memory by the deferred `load`, to threadgroup memory at
    `base` (rows `strides[0]` apart) in runs of `STAGE_VECTOR` elements along its rows: each thread moves a
    run as one vector load and one vector store where the run is aligned (its element offset in the buffer,
    checked at run time unless the axis analysis proves it) and, for a masked load, wholly inside the mask;
    element by element otherwise. A mask of bounds checks is tested once for the whole tile where it can be
    (`staged_runs.tile_inside`, before the runs): in a tile inside it (every tile of a matrix but those on its
    edges) each run branches on that test and tests nothing else but its alignment, and only in an edge tile does a
    run test the mask, from its first and last elements (`staged_runs.along_run`), element by element only where
    the run is cut. False, having emitted nothing, when the tile's rows, row stride or dtype do not allow runs, or
    the load's addresses are not an offset from one buffer."""
    shape, width = v.type.shape, STAGE_VECTOR
    if (len(shape) != 2 or shape[1] % width or strides[0] % width or load.type.dtype != v.type.dtype
            or load.type.dtype not in (DType.F32, DType.F16, DType.I32, DType.U32)):
        return False
    st = V.strides_of(blk, load.ptr)
    if st is None or st[1] != 1 or _buffer_offset(load.ptr, blk.facts.defs, lambda x: x) is None:
        return False   # a run is consecutive addresses only at a unit column stride known at compile time
    layout = blocked(v.type.size, blk.group.threads, width)
    proven = vector_width(blk.facts.axes, width, load.ptr) == width

    spacing = _row_spacing(shape[0], shape[1], strides[0], v.type.dtype.itemsize, width)
    # which of the load's operands any thread can compute at any element (`lines.readable_anywhere`)
    operands = [x for x in (load.ptr, load.mask, load.other) if x is not None]
    # one walk for all of them (their index arithmetic is shared) where they all are, the commonest case
    every = LN.readable_anywhere(blk, *operands)
    anywhere = {id(x): every or LN.readable_anywhere(blk, x) for x in operands}

    place = SR.Placement(layout, shape, spacing, blk.group.threads)
    origin = place.origin(blk, load.loc)   # this thread's first run, computed once for all its runs where they allow it

    def run(b: Block, first, whole: Value | None) -> None:
        """The run at slot `first`: its mask tested by the run where `whole` (the tile's test) is None, not at all
        where `whole` is true, else only where it is false."""
        r, c = place.start(b, first, origin, load.loc)
        p0 = Pt(shape, mo.add(mo.mul(r, mo.const(shape[1])), c), None, (r, c))
        # the addresses named, as where a run's paths share them (pointer arithmetic)
        src = b.let(V.at(b, load.ptr, p0), "src", load.loc)   # a unit column stride: the run's addresses follow
        dst = b.let(AddPtr(base, mo.add(mo.mul(r, mo.const(strides[0])), c)), "dst")
        guard = V.guard(b, layout, first)
        aligned = None
        if not proven:
            off = _buffer_offset(load.ptr, b.facts.defs, lambda x: V.at(b, x, p0))
            dt = off.type.dtype   # i64 for offsets widened in the kernel
            aligned = Compare(CmpOp.EQ, Binary(BinOp.AND, off, mo.const(width - 1, dt)), mo.const(0, dt))
        if whole is not None:
            inner = copy_run(b, src, dst, guard, aligned, None)
        if whole is None or not mo.is_const(whole, True):
            edge = b.body() if whole is not None else b
            masked = copy_run(edge, src, dst, guard, aligned, (p0, r, c, width))
            if whole is not None:
                masked = [If(whole, inner, [*edge.out, *masked], loc=load.loc)]   # the load's bounds, tested
            inner = masked
        for x in inner:
            b.emit(x)

    def copy_run(b: Block, src: Var, dst: Var, guard, aligned, at) -> list[Stmt]:
        """A run's copy: one vector where `guard`, `aligned` and (with `at`, its first point, row, column and
        length) the load's mask hold over the run (`staged_runs.along_run`), else element by element."""
        masks, inside = (SR.along_run(b, load.mask, *at, anywhere[id(load.mask)], lines) if at is not None
                         else ([], None))
        cond = mo.all_of([inside, guard, aligned])
        whole_load = VecLoad(src, width)
        vec = Var(b.fresh("run"), whole_load.type)
        fast = [Let(vec, whole_load, loc=load.loc), VecStore(dst, vec, loc=b.loc)]
        if cond is None:
            return fast
        zero = _zero(load.type.dtype)
        if not masks:   # a misaligned run: a loop over its elements
            j = Var(b.fresh("j"), TileType(DType.I32))
            x = Var(b.fresh("el"), load.type.with_shape(()))
            slow = [For(j, mo.const(0), mo.const(width), mo.const(1), [], [],
                        [Let(x, Load(AddPtr(src, j), guard, None if guard is None else zero), loc=load.loc),
                         Store(AddPtr(dst, j), x, guard, loc=b.loc)], [], [], loc=b.loc)]
        else:           # element by element, each under its own mask
            slow, el = [], load.type.with_shape(())
            others = (SR.along_run(b, load.other, *at, anywhere[id(load.other)], lines)[0] if load.other is not None
                      else [zero] * width)
            for j, (m, other) in enumerate(zip(masks, others)):
                x = Var(b.fresh("el"), el)
                slow += [Let(x, Load(AddPtr(src, mo.const(j)) if j else src, mo.both(m, guard), other), loc=load.loc),
                         Store(AddPtr(dst, mo.const(j)), x, guard, loc=b.loc)]
        return [If(cond, fast, slow, loc=b.loc)]

    lines: dict = {}   # the mask's parts along one axis, evaluated once (`staged_runs.Line`) for the tile and its runs
    whole = (SR.tile_inside(blk, load.mask, shape, anywhere[id(load.mask)], lines) if load.mask is not None
             else mo.const(True, DType.BOOL))
    if whole is not None and not isinstance(whole, Const):
        whole = blk.let(whole, "inside", load.loc)   # once for the tile, before its runs
    runs = layout.slots // width
    # operands any thread computes read no registers and no matrices: the run-time loop needs no walk to know it
    if runs * width >= ROLL_SLOTS and (all(anywhere.values()) or RL.rollable(blk, layout, [v]) == []):
        s = Var(blk.fresh("s"), TileType(DType.I32))
        inner = blk.body()
        run(inner, s, whole)
        blk.emit(For(s, mo.const(0), mo.const(layout.slots), mo.const(width), [], [], inner.out, [], [],
                     loc=blk.loc))
    else:
        for first in range(0, layout.slots, width):
            run(blk.nested(), first, whole)
    return True


def _buffer_offset(ptr: Value, defs, at) -> Value | None:
    """The element offset of the pointer tile `ptr` from its buffer's start, as `at` evaluates each offset tile
    (None when `ptr` is not offsets added to a broadcast buffer argument: its alignment is then unknown)."""
    total: Value = mo.const(0)
    while True:
        match ptr:
            case Var(name) if name in defs:
                ptr = defs[name]
            case AddPtr(inner, off):
                total = mo.add(total, at(off))
                ptr = inner
            case Broadcast(Var(name), shape) if name in defs:
                ptr = Broadcast(defs[name], shape)
            case Broadcast(Broadcast(inner, _), shape):
                ptr = Broadcast(inner, shape)
            case Broadcast(AddPtr(inner, off), shape):   # Triton's `base + rows[:, None] * K + cols[None, :]`
                total = mo.add(total, at(Broadcast(off, shape)))
                ptr = Broadcast(inner, shape)
            case Broadcast(Param() as p, _) if isinstance(p.type, PtrType):
                return total
            case Param() if isinstance(ptr.type, PtrType):
                return total
            case _:
                return None


__all__ = ["STAGE_VECTOR", "load_regs", "run_width", "stage_in_vectors", "store"]
