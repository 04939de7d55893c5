"""The value rules of the lowering: a Tile IR value's scalar, or its element at a point, on this thread.

`at(blk, v, pt)` gives the Metal IR scalar of element `pt` of tile `v`. A point is a flat (row-major) index,
plus, when it is slot `s` of layout `L` on this thread, the key `(L, s)`: a value held in registers under `L`
is then read directly. Any other element of a held value (a broadcast of a loaded row, for example) is
*gathered*: the value is first published to threadgroup scratch memory and read back (`exchange`). Pure
expressions (`Lazy`) are evaluated wherever an element is needed, so broadcasting them costs nothing; reductions,
scans and products are materialised where their statement starts (`exchange.heavy_rep`). A shape change reads its
source at another point: a reshape or a new dimension at the same row-major index, keeping the register key (so a
held tile is read in place), a permutation or a taken index where its layout (`metile.rewrite.shape_layouts`) maps
the index, a join at half the index in one of its two sides. Each rule is one case of
`element_at` or `scalar_of`, a `match` on the node; values already lowered in the region are memoised (a
broadcast, reshape or new dimension is not, nor a name of a pure expression: the element it reads is). Python's
`//` and `%` on integers become Metal's truncating `/` and `%` where the dividend is known not to be negative and
the divisor to be positive (`at_least`), and keep their sign fix-ups elsewhere.
"""

from __future__ import annotations

import functools

from metile.ir import layouts as tl
from metile.ir.metal import Extract
from metile.ir.ops import BinOp, BuiltinKind, CmpOp
from metile.ir.tile import (
    Arange,
    ArgReduce,
    Broadcast,
    ConvertLayout,
    Dot,
    ExpandDims,
    Full,
    Gather,
    Join,
    NumPrograms,
    Permute,
    ProgramId,
    Reduce,
    Reshape,
    Scan,
    SimdgroupId,
    SimdLaneId,
    Take,
    ThreadId,
    Transpose,
)
from metile.ir.types import DType
from metile.ir.values import (
    AddPtr,
    Binary,
    Bitcast,
    Cast,
    Compare,
    Const,
    Fma,
    IntToPtr,
    Load,
    Param,
    Unary,
    Value,
    Var,
    Where,
)
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import Blocked, MmaGeometry, blocked, blocked_as_recorded, row_major_strides
from metile.rewrite.layouts import dot_accumulation as dot_acc
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import mma_use as MU
from metile.rewrite.lower import rolled as RL
from metile.rewrite.lower.state import Block, Channel, Lazy, Mma, Pt, Regs, Scalar
from metile.rewrite.lower.words import what
from metile.rewrite.shape_layouts import permute_layout, take_layout
from metile.rewrite.staging import mma_scratch_offset


def strides_of(blk: Block, v: Value):
    """`metile.rewrite.axis_info.strides(v)`, found once per value of the kernel."""
    return blk.facts.axes.strides(v)


def layout(blk: Block, size: int) -> Blocked:
    return blocked(size, blk.group.threads, blk.facts.plan.vector_width)


def recorded(blk: Block, var: Var, size: int) -> Blocked | MmaGeometry | tl.TileLayout | None:
    """The layout `assign_layouts` recorded for the named tile `var` (of `size` elements), as the lowering holds
    it: `Blocked` registers, `MmaGeometry` matrices, `InDevice`, `Channel`; None for a scalar or a value
    recomputed where it is read."""
    found = blk.facts.layouts.get(var.name)
    match found:
        case tl.Blocked(threads, vec, _):
            return blocked_as_recorded(size, threads, vec)
        case tl.Fragments(sg_m, sg_n, first_sg, split, replicas):
            m, n = var.type.shape
            return MmaGeometry(m, n, sg_m, sg_n, first_sg, split, replicas)
        case tl.InDevice() | tl.Channel():
            return found
        case None if var.type.shape:
            raise blk.refuse(f"internal: %{var.name} has no layout: assign_layouts must run before lower_tiles",
                              var)
    return None


def raw_flat(blk: Block, layout: Blocked, slot: int | Value) -> Value:
    """The flat index `layout` gives this thread's `slot` (an int, or a run-time slot; past the end for
    padding)."""
    return _flat(blk.group.tid, layout, RL.slot_offset(blk, layout, slot))


def _flat(tid: Value, layout: Blocked, offset: Value) -> Value:
    """The flat index of thread `tid`'s element at `offset` (`layout.offset` of a slot) in `layout`."""
    return mo.add(mo.mul(tid, mo.const(layout.thread_stride)), offset)


def slot_pt(blk: Block, layout: Blocked, slot: int | Value, shape: tuple[int, ...]) -> Pt:
    """The element in `slot`; a run-time slot gives a point without a register key."""
    if slot.__class__ is int:  # the same few points are asked for by every statement (and every kernel)
        return fixed_slot_pt(layout, slot, shape if shape.__class__ is tuple else tuple(shape), blk.group.tid)
    flat = raw_flat(blk, layout, slot)
    return Pt(tuple(shape), mo.mod(flat, layout.size) if layout.has_padding else flat)


@functools.lru_cache(maxsize=1024)
def fixed_slot_pt(layout: Blocked, slot: int, shape: tuple[int, ...], tid: Value) -> Pt:
    """The element thread `tid` holds in the fixed `slot` of `layout` over a tile of `shape`, keyed `(layout, slot)`
    (a padding slot reads element `flat mod size`): a pure function of a few small values (a layout and a builtin's
    node are one object per value), made once per process."""
    flat = _flat(tid, layout, mo.const(layout.offset(slot)))
    if layout.padded(slot):
        flat = mo.mod(flat, layout.size)
    return Pt(shape, flat, (layout, slot))


def guard(blk: Block, layout: Blocked, slot: int | Value) -> Value | None:
    """True where `slot` holds a real element (None: it always does)."""
    padded = layout.padded(slot) if isinstance(slot, int) else layout.has_padding
    return mo.lt(raw_flat(blk, layout, slot), mo.const(layout.size)) if padded else None


def coords(blk: Block, pt: Pt) -> list[Value]:
    if pt.at is not None:
        return list(pt.at)
    out = []
    for i, (extent, stride) in enumerate(zip(pt.shape, row_major_strides(pt.shape))):
        c = mo.div(pt.flat, stride)
        out.append(c if i == 0 else mo.mod(c, extent))
    return out


def project(blk: Block, pt: Pt, shape: tuple[int, ...]) -> Pt:
    """The element of a tile of `shape` that element `pt` of a broadcast of it reads."""
    cs = coords(blk, pt)[len(pt.shape) - len(shape):]  # the leading coordinates are dropped
    flat: Value | None = None
    for c, extent, stride in zip(cs, shape, row_major_strides(shape)):
        if extent != 1:   # (a coordinate times 1, or added to nothing, is itself, as `mo.mul` and `mo.add` fold it)
            term = c if stride == 1 else mo.mul(c, mo.const(stride))
            flat = term if flat is None else mo.add(flat, term)
    return Pt(tuple(shape), mo.const(0) if flat is None else flat)


def scalar(blk: Block, v: Value | None) -> Value | None:
    if v is None:
        return None
    cls = v.__class__
    if cls is Const or cls is Param:
        return v
    if cls is Var:   # a name: its value, or its expression's (memoised there), read without a memo of its own
        rep = blk.lookup(v.name)
        if rep.__class__ is Scalar:
            return rep.value
        if rep.__class__ is Lazy:
            return scalar(blk, rep.expr)
    # the key's hash from the node's cached one, as `at` makes its keys' (every scalar key is made here)
    key, h = ("s", v), hash(("s", v._h))
    memoised = blk.kernel.memoised   # a hash not in it is a miss (`Block.memo_get_at`), found without a call
    found = blk.memo_get_at(key, h) if h in memoised else None
    if found is None:
        found = scalar_of(blk, v)
        blk.memo[h] = (key, found)
        memoised.add(h)
    return found


def scalar_of(blk: Block, v: Value) -> Value:
    cls = v.__class__
    # the commonest, read as `elementwise` reads them, without its closure's call for each operand
    if cls is Binary and v.op is not BinOp.FLOORDIV and v.op is not BinOp.MOD:
        return Binary(v.op, scalar(blk, v.lhs), scalar(blk, v.rhs), loc=v.loc)
    if cls is Compare:
        return Compare(v.op, scalar(blk, v.lhs), scalar(blk, v.rhs), loc=v.loc)

    def s(x):
        return scalar(blk, x)

    if cls in _ELEMENTWISE or cls is Binary:
        return elementwise(blk, v, s)
    match v:
        case Const() | Param():
            return v
        case Var(name):
            rep = blk.lookup(name)
            match rep:
                case Scalar(value):
                    return value
                case Lazy(expr):
                    return s(expr)
                case Channel(base):
                    return blk.let(Load(base), name)
            raise blk.refuse(f"internal: %{name} has no per-thread value ({rep!r})", v)
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
            return X.heavy_rep(blk, v).value
        case Full(_, value):
            return value
        case Broadcast(x, _) | ExpandDims(x, _) | Reshape(x, _):
            return s(x)
        case Take(x, _, index) if len(x.type.shape) == 1:
            return at(blk, x, Pt(x.type.shape, mo.const(index)))
        case ConvertLayout():   # the one element of a tile, moved to scratch (`metile.rewrite.conversions`)
            return X.convert(blk, v, mo.const(0))
        case Gather() if v.type.size == 1:   # the one element of a line, reshaped to a scalar
            return read(blk, X.heavy_rep(blk, v), Pt(v.type.shape, mo.const(0)), v)
    return elementwise(blk, v, s)


def elementwise(blk: Block, v: Value, f) -> Value:
    """`v` rebuilt from `f` applied to its operands (the element-wise nodes every level shares)."""
    if v.__class__ is Binary and v.op is not BinOp.FLOORDIV and v.op is not BinOp.MOD:   # the commonest, at once
        return Binary(v.op, f(v.lhs), f(v.rhs), loc=v.loc)
    match v:
        case Binary(op=BinOp.FLOORDIV | BinOp.MOD as op, lhs=a, rhs=b) if a.type.dtype.is_int and at_least(blk, a, 0) \
                and at_least(blk, b, 1):   # Python's and Metal's division agree: no rounding or sign fix-up
            return Binary(BinOp.TRUNCDIV if op is BinOp.FLOORDIV else BinOp.REM, f(a), f(b), loc=v.loc)
        case Binary(op=BinOp.FLOORDIV, lhs=a, rhs=b):
            return mo.floor_div(f(a), f(b), v.loc)
        case Binary(op=BinOp.MOD, lhs=a, rhs=b):
            return mo.floor_mod(f(a), f(b), v.loc)
        case Binary(op=op, lhs=a, rhs=b):
            return Binary(op, f(a), f(b), loc=v.loc)
        case Unary(op=op, x=x):
            return Unary(op, f(x), loc=v.loc)
        case Compare(op=op, lhs=a, rhs=b):
            return Compare(op, f(a), f(b), loc=v.loc)
        case Where(cond=c, x=x, y=y):
            return Where(f(c), f(x), f(y), loc=v.loc)
        case Cast(x=x, dtype=dtype):
            return Cast(f(x), dtype, loc=v.loc)
        case Bitcast(x=x, dtype=dtype):
            return Bitcast(f(x), dtype, loc=v.loc)
        case IntToPtr(x=x, dtype=dtype):
            return IntToPtr(f(x), dtype, loc=v.loc)
        case Fma(a=a, b=b, c=c):
            return Fma(f(a), f(b), f(c), loc=v.loc)
        case AddPtr(ptr=p, offset=off):
            return AddPtr(f(p), f(off), loc=v.loc)
    raise blk.refuse(f"{what(v)} cannot be used here", v)


def at_least(blk: Block, v: Value, low: int, depth: int = 4) -> bool:
    """Whether the integer `v` is known to be at least `low` (0 or 1) wherever it is computed: a constant, an array
    length the launch passes (`Param.length_of`), a program's index or count, or the maximum of such a value and
    anything; names are followed to their definitions (`depth` of them). False when not known."""
    match v:
        case Const(value):
            return value >= low
        case Param(length_of=length):
            return length is not None and low <= 0
        case ProgramId():
            return low <= 0
        case NumPrograms():
            return True
        case Binary(BinOp.MAX, x, y):
            return at_least(blk, x, low, depth) or at_least(blk, y, low, depth)
        case Broadcast(x, _) | ExpandDims(x, _) | Reshape(x, _):
            return at_least(blk, x, low, depth)
        case Var(name) if depth > 0 and (found := blk.facts.defs.get(name)) is not None:
            return at_least(blk, found, low, depth - 1)
    return False


FORWARDING = frozenset({Broadcast, ExpandDims, Reshape})
"""The shape changes whose element is an element of their operand (or its scalar), read by `at` itself, unmemoised
(as a name of a pure expression is)."""


def at(blk: Block, v: Value | None, pt: Pt) -> Value | None:
    if v is None:
        return None
    if v.type.shape == ():
        return scalar(blk, v)
    cls = v.__class__
    # another tile's element (a name of a pure expression, a shape change), memoised there: nothing to memoise here
    if cls is Var:
        rep = blk.lookup(v.name)
        if rep.__class__ is Lazy:
            return at(blk, rep.expr, pt)
        if pt.key is not None and rep.__class__ is Regs and ((lay := pt.key[0]) is rep.layout or lay == rep.layout):
            return rep.regs[pt.key[1]]   # the commonest read: a register
    elif cls is Broadcast:
        x = v.x
        xs = x.type.shape
        if not xs:  # every element reads the one scalar
            return scalar(blk, x)
        return at(blk, x, pt) if xs == v.shape else at(blk, x, project(blk, pt, xs))
    elif cls is ExpandDims or cls is Reshape:   # the same row-major index (and register key)
        x = v.x
        return at(blk, x, Pt(x.type.shape, pt.flat, pt.key))
    # the key's hash from the nodes' cached ones (`hash(key)` would call back into Python for each)
    held = pt.key
    if held is not None:
        key, h = (v, held), hash((v._h, hash(held)))
    else:
        key, h = (v, pt.flat), hash((v._h, pt.flat._h))
    memoised = blk.kernel.memoised   # a hash not in it is a miss (`Block.memo_get_at`), found without a call
    found = blk.memo_get_at(key, h) if h in memoised else None
    if found is None:
        found = element_at(blk, v, pt)
        blk.memo[h] = (key, found)
        memoised.add(h)
    return found


_ELEMENTWISE = frozenset({Unary, Compare, Where, Cast, Bitcast, IntToPtr, Fma, AddPtr})
"""The element-wise node classes no other rule of `element_at` or `scalar_of` takes (`Binary` is also the `dot`
accumulation), sent to `elementwise` without trying those rules first."""


def element_at(blk: Block, v: Value, pt: Pt) -> Value:
    cls = v.__class__
    # the classes of index and mask arithmetic first, without the closure of `elementwise` (a sum, a product, a
    # comparison and an offset pointer are read as it reads them) or the match's tests of the other classes
    if cls is Binary:
        op = v.op
        # (an accumulation onto a product has a `Dot` operand, a class without subclasses: no other sum is one)
        if op is not BinOp.FLOORDIV and op is not BinOp.MOD and (
                op is not BinOp.ADD or (v.lhs.__class__ is not Dot and v.rhs.__class__ is not Dot) or not dot_acc(v)):
            return Binary(op, at(blk, v.lhs, pt), at(blk, v.rhs, pt), loc=v.loc)
    elif cls is Compare:
        return Compare(v.op, at(blk, v.lhs, pt), at(blk, v.rhs, pt), loc=v.loc)
    elif cls is Var:   # (a name of a pure expression is read by `at`)
        return read(blk, blk.lookup(v.name), pt, v)
    elif cls is Arange:
        return mo.add(pt.flat, mo.const(v.start))
    elif cls is AddPtr:
        return AddPtr(at(blk, v.ptr, pt), at(blk, v.offset, pt), loc=v.loc)
    if cls in _ELEMENTWISE or cls is Binary and not dot_acc(v):
        return elementwise(blk, v, lambda x: at(blk, x, pt))
    match v:   # (an `Arange` has been read above; a `Broadcast`, `ExpandDims` or `Reshape` is read by `at`)
        case Full(value=value):
            return value
        case Transpose(x=x):
            i, j = coords(blk, pt)
            return at(blk, x, Pt(x.type.shape, mo.add(mo.mul(j, mo.const(x.type.shape[1])), i)))
        case Permute(x=x, order=order):   # the permutation's layout (`metile.rewrite.shape_layouts`)
            return at(blk, x, Pt(x.type.shape, mo.apply_layout(permute_layout(x.type.shape, order), pt.flat)))
        case Take(x=x, axis=axis, index=index):
            lay, stride = take_layout(x.type.shape, axis)
            return at(blk, x, Pt(x.type.shape, mo.add(mo.apply_layout(lay, pt.flat), mo.const(index * stride))))
        case Join(a=a, b=b):
            half, side = Pt(a.type.shape, mo.div(pt.flat, 2)), mo.mod(pt.flat, 2)
            if isinstance(side, Const):   # a known element: one side only
                return at(blk, (a, b)[side.value], half)
            return mo.select(Compare(CmpOp.EQ, side, mo.const(0)), at(blk, a, half), at(blk, b, half))
        case ConvertLayout():   # moved between threads through scratch (`metile.rewrite.conversions`)
            return X.convert(blk, v, pt.flat)
        case Reduce() | ArgReduce() | Scan() | Dot() | Gather():
            return read(blk, X.heavy_rep(blk, v), pt, v)
        case Binary() if dot_acc(v):
            return read(blk, X.heavy_rep(blk, v), pt, v)
        case Load():  # a deferred tile load (`metile.rewrite.lower.rolled`)
            return RL.deferred_load(blk, v, pt)
    return elementwise(blk, v, lambda x: at(blk, x, pt))


def gathered_pt(blk: Block, g: Gather, pt: Pt) -> Pt:
    """The element of `g.x` that element `pt` of the gather `g` picks: its coordinates, the one along the axis
    replaced by the index there (reduced into range)."""
    xs = g.x.type.shape
    extent = xs[g.axis]
    i = at(blk, g.index, pt)
    if i.type.dtype is not DType.I32:
        i = Cast(i, DType.I32)
    if extent & (extent - 1) == 0:
        i = Binary(BinOp.AND, i, mo.const(extent - 1))
    else:
        i = Binary(BinOp.MIN, Binary(BinOp.MAX, i, mo.const(0)), mo.const(extent - 1))
    cs = coords(blk, pt) if len(xs) > 1 else [pt.flat]
    flat: Value = mo.const(0)
    for d, (c, stride) in enumerate(zip(cs, row_major_strides(xs))):
        flat = mo.add(flat, mo.mul(i if d == g.axis else c, mo.const(stride)))
    return Pt(xs, flat)


def read(blk: Block, rep, pt: Pt, where: Value) -> Value:
    match rep:
        case Lazy(expr):
            return at(blk, expr, pt)
        case Scalar(value):
            return value
        case Channel(base):
            return blk.let(Load(AddPtr(base, pt.flat)), "ch")
        case Mma() if pt.key is not None and pt.key[0] == MU.Fragments(rep.geom):  # this lane's own element
            p, e = divmod(pt.key[1], 2)   # read where it is used (named by the emitter when used twice)
            return Extract(rep.mats[p], e)
        case Mma() if pt.key is None:  # a run-time slot: read the copy in scratch, not registers
            base = MU.mma_in_scratch(blk, rep, where)
            return blk.let(Load(AddPtr(base, mma_scratch_offset(pt.flat, rep.geom.n))), "c")
        case Mma():
            return read(blk, MU.mma_to_regs(blk, rep, where), pt, where)
        case Regs(layout, regs):
            if pt.key is not None and (pt.key[0] is layout or pt.key[0] == layout):
                return regs[pt.key[1]]
            if id(rep) in blk.kernel.published or pt.key is not None and isinstance(pt.key[0], MU.Fragments):
                # copied to scratch by the statement's own exchange (a reduction's, a product's), or read by the
                # lanes of a product's matrices (`mma_use.pointwise_mma` chose to compute there)
                return X.gather(blk, rep, pt.flat, where)
            raise blk.refuse(f"internal: {what(where)} is read at elements other threads hold, with no "
                             "convert_layout: insert_conversions must run before lower_tiles", where)
    raise blk.refuse(f"internal: no value for {what(where)} ({rep!r})", where)


def regs_of(blk: Block, v: Value, layout: Blocked) -> tuple[Value, ...]:
    return tuple(at(blk, v, slot_pt(blk, layout, s, v.type.shape)) for s in range(layout.slots))



__all__ = ["FORWARDING", "at", "at_least", "coords", "element_at", "elementwise", "fixed_slot_pt", "gathered_pt",
           "guard", "layout", "project", "raw_flat", "read", "recorded", "regs_of", "scalar", "scalar_of", "slot_pt",
           "strides_of"]
