"""Reductions, arg-reductions and scans in the lowering.

Reductions (`Reduce`): each thread folds the elements it holds (padding slots contribute the identity: 0,
-inf/+inf, or the integer extremes), `simd_sum`/`simd_max`/`simd_min` combine a simdgroup, lane 0 of each
simdgroup writes its partial to scratch, and after a barrier lane `i` of every simdgroup reads partial `i` (the
identity past the last) and a second `simd_sum`/`simd_max`/`simd_min` combines them, so every thread holds the
result. f16/bf16 reduce in f32, narrow integers in 32 bits, 64-bit integers in their own type. Reducing one
axis of an n-D tile gathers the tile through scratch and folds each output element's line.

Arg-reductions carry a (value, index) pair. Along the only axis of a 1-D tile each thread folds the elements it
holds in index order (a later element wins only when strictly better, so the first extreme wins ties), then a
simdgroup agrees on the extreme value (`simd_max`/`simd_min`) and takes the smallest index holding it
(`simd_min`), and the simdgroups' pairs go through scratch to every thread, folded again in simdgroup order. A
skipped element (`valid` false, or a padding slot) has the identity value and the index `SKIPPED`, so that it
loses every tie; a line with nothing but skipped elements gives index 0. Along an axis of an n-D tile the tile is
gathered through scratch and each output element folds its line.

Scans are Hillis-Steele in scratch: the tile is written to one half of a scratch region; step `s` of
`ceil(log2(extent))` combines each element with the one `2**s` before it along the axis (after it when
`reverse`), reading one half and writing the other, with a barrier between steps; the steps are a run-time loop
(a uniform one, so the barrier is legal) and each thread then reads its elements back. Both combine in 32 bits
(64 for 64-bit integers: `acc_dtype`) and convert back to the tile's type.
"""

from __future__ import annotations

import math

from metile.ir.node import Node
from metile.ir.ops import BinOp, BuiltinKind, CmpOp, ReduceOp
from metile.ir.stmts import For, Store
from metile.ir.tile import ArgReduce, Reduce, Scan
from metile.ir.types import DType, TileType
from metile.ir.values import AddPtr, Binary, Compare, Load, SimdReduce, Value, Var, Where
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import row_major_strides
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import mma_use as MU
from metile.rewrite.lower import rolled as RL
from metile.rewrite.lower import statements as S
from metile.rewrite.lower import values as V
from metile.rewrite.lower.ops import acc_dtype, cast, combine, identity, sg_index
from metile.rewrite.lower.state import Block, Pt, Regs, Scalar
from metile.rewrite.plan import SIMD_WIDTH

SKIPPED = (1 << 31) - 1  # the index of an element an arg-reduction skips: larger than any real index
UNROLL_LIMIT = 8


def reduce_of(blk: Block, n: Reduce):
    x, op = n.x, n.op
    if n.axis == 1:
        found = MU.mma_row_reduce(blk, n)
        if found is not None:
            return found
    shape, dtype = x.type.shape, x.type.dtype
    adt = acc_dtype(dtype)
    ident = identity(op, adt)
    if len(shape) == 1:
        layout = V.layout(blk, shape[0])
        acc: Value | None = None
        for slot in range(layout.slots):
            v = cast(V.at(blk, x, V.slot_pt(blk, layout, slot, shape)), adt)
            g = V.guard(blk, layout, slot)
            v = v if g is None else Where(g, v, ident)
            acc = v if acc is None else combine(op, acc, v)
        total = cast(across_threads(blk, op, acc, n), dtype)
        return Scalar(total if total.__class__ is Var else blk.let(total, "red"))
    out_shape = shape[: n.axis] + shape[n.axis + 1:]
    layout = V.layout(blk, math.prod(out_shape))
    reps = X.reps_in(blk, x)
    if reps:
        X.publish_regs(blk, reps, n)
    strides = row_major_strides(shape)
    regs = []
    for slot in range(layout.slots):
        pt = V.slot_pt(blk, layout, slot, out_shape)
        cs = V.coords(blk, pt)
        base: Value = mo.const(0)
        for c, s in zip(cs, strides[: n.axis] + strides[n.axis + 1:]):
            base = mo.add(base, mo.mul(c, mo.const(s)))
        regs.append(blk.let(cast(fold_line(blk, op, x, base, shape[n.axis], strides[n.axis], adt, n), dtype),
                             "red"))
    return Regs(layout, tuple(regs))


def fold_line(blk: Block, op, x, base: Value, extent: int, stride: int, adt: DType, n: Reduce) -> Value:
    shape = x.type.shape
    if extent <= UNROLL_LIMIT:
        acc = None
        for k in range(extent):
            v = cast(V.at(blk, x, Pt(shape, mo.add(base, mo.const(k * stride)))), adt)
            acc = v if acc is None else combine(op, acc, v)
        return acc
    X.publish_for_loop(blk, x, n)
    k = Var(blk.fresh("k"), TileType(DType.I32))
    acc = Var(blk.fresh("acc"), TileType(adt))
    result = Var(blk.fresh("acc"), TileType(adt))
    inner = blk.body()
    v = cast(V.at(inner, x, Pt(shape, mo.add(base, mo.mul(k, mo.const(stride))))), adt)
    body = inner.out
    blk.emit(For(k, mo.const(0), mo.const(extent), mo.const(1), [acc], [identity(op, adt)], body,
                  [combine(op, acc, v)], [result], loc=blk.loc))
    return result


def across_threads(blk: Block, op: ReduceOp, acc: Value, n: Node) -> Value:
    threads = blk.group.threads
    if threads == 1:
        return acc
    S.collective(blk, n)
    r = blk.let(SimdReduce(op, acc), "simd")
    if threads <= SIMD_WIDTH:
        return r
    nsg = -(-threads // SIMD_WIDTH)
    S.barrier(blk, n)
    buf = blk.let(X.scratch(blk, acc.type.dtype, nsg), "partials")   # named once: placing it rebuilds one `Let`
    lane = mo.builtin(BuiltinKind.THREAD_INDEX_IN_SIMDGROUP)
    blk.emit(Store(AddPtr(buf, sg_index(blk.group.first_sg)), r, Compare(CmpOp.EQ, lane, mo.const(0)),
                    loc=blk.loc))
    S.barrier(blk, n)
    # lane i of every simdgroup reads partial i (the identity past the last), and the simdgroup combines them
    part = blk.let(Load(AddPtr(buf, lane), mo.lt(lane, mo.const(nsg)), identity(op, acc.type.dtype)), "part")
    return blk.let(SimdReduce(op, part), "red")


def arg_reduce(blk: Block, n: ArgReduce):
    x, op = n.x, n.op
    shape = x.type.shape
    adt = acc_dtype(x.type.dtype)
    if len(shape) == 1:
        layout = V.layout(blk, shape[0])
        best = None
        for slot in range(layout.slots):
            pt = V.slot_pt(blk, layout, slot, shape)
            ok = mo.both(V.at(blk, n.valid, pt), V.guard(blk, layout, slot))
            v, i = cast(V.at(blk, x, pt), adt), pt.flat
            if ok is not None:
                v, i = Where(ok, v, identity(op, adt)), Where(ok, i, mo.const(SKIPPED))
            best = (v, i) if best is None else better(blk, op, best, (v, i))
        v, i = best
        return Scalar(blk.let(first_index(blk, arg_across_threads(blk, op, v, i, n)), "arg"))
    out_shape = shape[: n.axis] + shape[n.axis + 1:]
    layout = V.layout(blk, math.prod(out_shape))
    reps = X.reps_in(blk, x) + (X.reps_in(blk, n.valid) if n.valid is not None else [])
    if reps:
        X.publish_regs(blk, list({id(r): r for r in reps}.values()), n)
    strides = row_major_strides(shape)
    regs = []
    for slot in range(layout.slots):
        cs = V.coords(blk, V.slot_pt(blk, layout, slot, out_shape))
        base: Value = mo.const(0)
        for c, s in zip(cs, strides[: n.axis] + strides[n.axis + 1:]):
            base = mo.add(base, mo.mul(c, mo.const(s)))
        v, i = arg_line(blk, n, base, shape[n.axis], strides[n.axis], adt)
        regs.append(blk.let(first_index(blk, i), "arg"))
    return Regs(layout, tuple(regs))


def better(blk: Block, op: ReduceOp, a: tuple[Value, Value], b: tuple[Value, Value]) -> tuple[Value, Value]:
    """The pair of `a` and `b` an arg-reduction keeps: the more extreme value, the smaller index on ties."""
    (va, ia), (vb, ib) = a, b
    beats = Compare(CmpOp.GT if op is ReduceOp.MAX else CmpOp.LT, vb, va)
    tie = mo.both(Compare(CmpOp.EQ, vb, va), mo.lt(ib, ia))
    take = Binary(BinOp.OR, beats, tie)
    return blk.let(Where(take, vb, va), "argv"), blk.let(Where(take, ib, ia), "argi")


def arg_line(blk: Block, n: ArgReduce, base: Value, extent: int, stride: int, adt: DType) -> tuple[Value, Value]:
    """The (value, index) an arg-reduction keeps of the line of `extent` elements from flat index `base`."""
    shape, op = n.x.type.shape, n.op
    k = Var(blk.fresh("k"), TileType(DType.I32))
    carried = [Var(blk.fresh("argv"), TileType(adt)), Var(blk.fresh("argi"), TileType(DType.I32))]
    results = [Var(blk.fresh("argv"), TileType(adt)), Var(blk.fresh("argi"), TileType(DType.I32))]
    inner = blk.body()
    pt = Pt(shape, mo.add(base, mo.mul(k, mo.const(stride))))
    v, i = cast(V.at(inner, n.x, pt), adt), k
    ok = V.at(inner, n.valid, pt)
    if ok is not None:
        v, i = Where(ok, v, identity(op, adt)), Where(ok, i, mo.const(SKIPPED))
    yields = list(better(inner, op, (carried[0], carried[1]), (v, i)))
    body = inner.out
    blk.emit(For(k, mo.const(0), mo.const(extent), mo.const(1), carried,
                  [identity(op, adt), mo.const(SKIPPED)], body, yields, results, loc=blk.loc))
    return results[0], results[1]


def arg_across_threads(blk: Block, op: ReduceOp, v: Value, i: Value, n) -> Value:
    """The index of the pair the whole group keeps, each thread holding the pair `(v, i)`."""
    threads = blk.group.threads
    if threads == 1:
        return i
    S.collective(blk, n)
    top = blk.let(SimdReduce(op, v), "simd")
    idx = blk.let(SimdReduce(ReduceOp.MIN, Where(Compare(CmpOp.EQ, v, top), i, mo.const(SKIPPED))), "simd")
    if threads <= SIMD_WIDTH:
        return idx
    nsg = -(-threads // SIMD_WIDTH)
    S.barrier(blk, n)
    vals, idxs = X.scratch(blk, v.type.dtype, nsg), X.scratch(blk, DType.I32, nsg)
    first = Compare(CmpOp.EQ, mo.builtin(BuiltinKind.THREAD_INDEX_IN_SIMDGROUP), mo.const(0))
    sg = sg_index(blk.group.first_sg)
    blk.emit(Store(AddPtr(vals, sg), top, first, loc=blk.loc))
    blk.emit(Store(AddPtr(idxs, sg), idx, first, loc=blk.loc))
    S.barrier(blk, n)
    best = None
    for j in range(nsg):
        pair = tuple(blk.let(Load(AddPtr(base, mo.const(j)) if j else base), "part") for base in (vals, idxs))
        best = pair if best is None else better(blk, op, best, pair)
    return best[1]


def first_index(blk: Block, i: Value) -> Value:
    """An arg-reduction's index, 0 for a line of skipped elements only."""
    return Where(Compare(CmpOp.EQ, i, mo.const(SKIPPED)), mo.const(0), i)


def scan_of(blk: Block, n: Scan) -> Regs:
    x, op = n.x, n.op
    shape, dtype = x.type.shape, x.type.dtype
    adt = acc_dtype(dtype)
    size = x.type.size
    extent, stride = shape[n.axis], row_major_strides(shape)[n.axis]
    layout = V.layout(blk, size)
    steps = max(extent - 1, 0).bit_length()
    if steps == 0:
        return Regs(layout, tuple(blk.let(cast(cast(v, adt), dtype), "scan") for v in V.regs_of(blk, x, layout)))
    S.barrier(blk, n)
    base = X.scratch(blk, adt, 2 * size)
    regs = V.regs_of(blk, x, layout)
    for slot, v in enumerate(regs):
        blk.emit(Store(AddPtr(base, V.raw_flat(blk, layout, slot)), cast(v, adt), V.guard(blk, layout, slot),
                        loc=blk.loc))
    S.barrier(blk, n)
    s = Var(blk.fresh("step"), TileType(DType.I32))
    inner = blk.body()
    d = Binary(BinOp.SHL, mo.const(1), s)
    src = AddPtr(base, mo.mul(Binary(BinOp.AND, s, mo.const(1)), mo.const(size)))
    dst = AddPtr(base, mo.mul(Binary(BinOp.AND, mo.add(s, mo.const(1)), mo.const(1)), mo.const(size)))

    def one(b: Block, slot) -> None:
        pt = V.slot_pt(b, layout, slot, shape)
        c = pt.flat if len(shape) == 1 else mo.mod(mo.div(pt.flat, stride), extent)
        mine = b.let(Load(AddPtr(src, pt.flat)), "scan")
        if n.reverse:
            has = mo.lt(mo.add(c, d), mo.const(extent))
            other = mo.add(pt.flat, mo.mul(d, mo.const(stride)))
        else:
            has = Compare(CmpOp.GE, c, d)
            other = Binary(BinOp.SUB, pt.flat, mo.mul(d, mo.const(stride)))
        near = b.let(Load(AddPtr(src, other), has, identity(op, adt)), "scan")
        b.emit(Store(AddPtr(dst, pt.flat), combine(op, near, mine), V.guard(b, layout, slot),
                        loc=b.loc))

    if RL.rollable(inner, layout, []) == []:
        RL.slot_loop(inner, layout, one)
    else:
        for slot in range(layout.slots):
            one(inner, slot)
    S.barrier(inner, n)
    body = inner.out
    blk.emit(For(s, mo.const(0), mo.const(steps), mo.const(1), [], [], body, [], [], loc=blk.loc))
    final = AddPtr(base, mo.const((steps % 2) * size)) if steps % 2 else base
    out = []
    for slot in range(layout.slots):
        flat = V.slot_pt(blk, layout, slot, shape).flat
        out.append(blk.let(cast(blk.let(Load(AddPtr(final, flat)), "scan"), dtype), "scan"))
    return Regs(layout, tuple(out))



__all__ = ["SKIPPED", "across_threads", "arg_reduce", "fold_line", "reduce_of", "scan_of"]
