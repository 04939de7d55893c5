"""`dot` on simdgroup matrices.

`a` and `b` are staged in threadgroup memory (rows padded as the `Dot`'s `MmaPlan` says; in a pipelined loop, in
that loop's ring of buffers, `Ring`), and each simdgroup multiplies-accumulates its 8x8 pieces of the result
(`MmaGeometry`) with `simdgroup_load` / `simdgroup_multiply_accumulate`, one 8-wide step of k per iteration of a
loop (with the next step's operands preloaded, and the products in serpentine order, when the plan says so).
Operands whose plan says to stage them a chunk of k at a time (`plan_staging` chose it, against the target's
threadgroup memory) are staged so (`k_chunk`, `chunked_products`), each chunk multiplied before the next
overwrites it. What becomes of the result (kept in matrices, stored from them, read element by element) is in
`metile.rewrite.lower.mma_use`.
"""

from __future__ import annotations

import functools

import attrs

from metile.ir.metal import Extract, MatrixFill, MatrixLoad, MatrixMultiplyAccumulate, MatrixOf, MatrixStore
from metile.ir.ops import BinOp, CmpOp
from metile.ir.simt import RingBuffer
from metile.ir.stmts import For, If, Store
from metile.ir.tile import Broadcast, ConvertLayout, Dot, Full, MmaPlan, Transpose
from metile.ir.types import DType, TileType
from metile.ir.values import AddPtr, Binary, Compare, Const, Load, Value, Var, Where
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import MmaGeometry, k_slices, matrix_dims, mma_arrangement
from metile.rewrite.layouts import dot_accumulation as dot_acc
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import mma_use as MU
from metile.rewrite.lower import statements as S
from metile.rewrite.lower import tensor_ops as TO
from metile.rewrite.lower import values as V
from metile.rewrite.lower.ops import cast, sg_index
from metile.rewrite.lower.state import Block, Group, Mma, Pt, Regs
from metile.rewrite.staging import staging_pad

_PLAIN = MmaPlan()


@attrs.define
class Ring:
    """The threadgroup buffers a pipelined loop (more than one in the kernel's `schedule.loops`) rotates its staged
    `dot` operands through: iteration i writes buffer `stage = i % buffers`, then the one barrier after the writes;
    a thread writing buffer b again, `buffers` iterations later, has passed a barrier that every thread reached
    after its reads of b. Each operand staged in the loop's own body (once per iteration) has its own region of the
    ring (`metile.ir.simt.RingBuffer`), apart from the scratch arena; a barrier before the loop protects them from
    the reads of an earlier run of it. `allocate_threadgroup_memory` gives the loop one buffer instead when the
    rings do not fit, with the barriers that then needs (`RingBarrier`)."""

    buffers: int
    stage: Var
    used: bool = False

    def take(self, dtype: DType, n: int, use: int, part: int, loc) -> Value:
        """This iteration's buffer of `n` elements of `dtype`, region `part` of scratch use `use`."""
        self.used = True
        return RingBuffer(self.stage, use, part, dtype, -(-n // 4) * 4, self.buffers, loc=loc)


def how(blk: Block, d: Dot) -> MmaPlan:
    """How the optimisation passes chose to compute `d` (the kernel's schedule; the plain way by default)."""
    return blk.facts.k.schedule.dots.get(d, _PLAIN)


def mma_geometry(blk: Block, d: Dot, group: Group | None = None) -> MmaGeometry | None:
    """How `group`'s simdgroups (default: the current group) share the 8x8 pieces of `d`: the geometry of its
    result (with k split, that of the simdgroups of slice 0, which own the sum), arranged as `assign_layouts`
    recorded when that arrangement has as many simdgroups or a divisor of them, else as `mma_arrangement` finds
    (with replicas where the pieces are fewer than the simdgroups)."""
    group = group or blk.group
    dims = matrix_dims(d)
    if dims is None:
        return None
    m, n, k = dims
    plan = how(blk, d)
    sgs = group.sgs // k_slices(m, n, k, plan.split, group.sgs)
    chosen = plan.simdgroups   # assign_layouts' arrangement, where it is one of these simdgroups (or a divisor)
    if chosen and sgs % (chosen[0] * chosen[1]) == 0 and (m // 8) % chosen[0] == 0 and (n // 8) % chosen[1] == 0:
        found = (*chosen, sgs // (chosen[0] * chosen[1]))
    else:
        found = mma_arrangement(m, n, sgs)
    if found is None:
        return None
    sg_m, sg_n, replicas = found
    return MmaGeometry(m, n, sg_m, sg_n, group.first_sg, replicas=replicas)


def mma(blk: Block, d: Dot, acc: Value | None, where: Value) -> Mma:
    a, b = d.a, d.b
    S.collective(blk, d)
    geom = mma_geometry(blk, d)
    if geom is None:   # `fma.product` sends the products matrices do not fit to `fma.fma_dot`
        raise blk.refuse(f"internal: dot of {list(a.type.shape)} x {list(b.type.shape)} is not a matrix product", d)
    k = a.type.shape[1]
    split = k_slices(geom.m, geom.n, k, how(blk, d).split, blk.group.sgs)
    if split > 1:
        return split_products(blk, d, acc, geom, attrs.evolve(geom, split=split))
    held = None if acc is None else X.named_rep(blk, acc)[0]
    if isinstance(held, TO.Held):   # a loop's accumulator in matmul2d's destination tensors: added to in place
        return TO.held_products(blk, held, d, stage_operands(blk, a, b, d))
    mats = list(as_mma(blk, acc, geom).mats) if acc is not None else None
    chunk = k_chunk(blk, d)
    staged = stage_operands(blk, a, b, d) if chunk is None else None
    zero = mats is None
    if zero:
        mats = [blk.let(MatrixFill(Const(0.0, DType.F32)), "acc")] * geom.pieces  # values: one serves all
    if chunk is not None:
        return Mma(geom, tuple(chunked_products(blk, geom, d, mats, chunk)))
    return Mma(geom, tuple(k_loop(blk, geom, d, staged, mats, mo.const(0), k, zero=zero)))


def k_chunk(blk: Block, d: Dot) -> int | None:
    """The columns of `a` (rows of `b`) to stage at a time, as `plan_staging` recorded in the product's plan
    (`metile.rewrite.staging_plan`); None when it stages them whole, or when the operands are not staged in scratch
    (a role's channel, a buffer staged once before a loop, device memory, a ring)."""
    plan = how(blk, d)
    if plan.chunk is None or blk.ring is not None or any(plan.hoist) or any(plan.direct) \
            or X.channel_of(blk, d.a) is not None or X.channel_of(blk, d.b) is not None:
        return None
    return plan.chunk


def chunked_products(blk: Block, geom: MmaGeometry, d: Dot, mats: list[Value], chunk: int) -> list[Value]:
    """The accumulators `mats` after the products of `d`, its k dimension staged `chunk` columns of `a` (rows of
    `b`) at a time in two regions of scratch that every chunk reuses, behind a barrier on each side."""
    a, b = d.a, d.b
    (m, k), n = a.type.shape, b.type.shape[1]
    plan = how(blk, d)
    lda = chunk + (staging_pad(chunk, a.type.dtype.itemsize) if plan.pad[0] else 0)
    ldb = n + plan.pad[1]
    bases = (X.scratch(blk, a.type.dtype, m * lda), X.scratch(blk, b.type.dtype, chunk * ldb))
    for c0 in range(0, k, chunk):
        S.barrier(blk, d)   # every simdgroup is done with the previous chunk
        _stage_part(blk, a, bases[0], lda, (m, chunk), (0, c0))
        _stage_part(blk, b, bases[1], ldb, (chunk, n), (c0, 0))
        S.barrier(blk, d)
        mats = k_loop(blk, geom, d, [(bases[0], lda), (bases[1], ldb)], mats, mo.const(0), chunk)
    return mats


def _stage_part(blk: Block, v: Value, base: Value, ld: int, part: tuple[int, int], at: tuple[int, int]) -> None:
    """Write the `part`-shaped block of the 2-D tile `v` whose first element is at `at` to `base`, rows `ld`
    apart: each thread reads its own elements of `v` (of the tile `v` transposes), as staging `v` whole does, and
    stores those inside the block."""
    flip = isinstance(v, Transpose)
    src = v.x if flip else v
    if flip and isinstance(src, ConvertLayout):   # each thread writes its own elements: no exchange is needed
        src = src.x
    rep, _ = X.named_rep(blk, src)
    lay = rep.layout if isinstance(rep, Regs) else V.layout(blk, src.type.size)
    full = v.type.shape
    for slot in range(lay.slots):
        pt = V.slot_pt(blk, lay, slot, src.type.shape)
        r, c = V.coords(blk, pt)
        r, c = (c, r) if flip else (r, c)
        r, c = Binary(BinOp.SUB, r, mo.const(at[0])), Binary(BinOp.SUB, c, mo.const(at[1]))
        conds = [V.guard(blk, lay, slot)]
        for dim, x in enumerate((r, c)):
            if part[dim] < full[dim]:   # inside the block along a dimension it cuts
                conds += [Compare(CmpOp.GE, x, mo.const(0)), mo.lt(x, mo.const(part[dim]))]
        blk.emit(Store(AddPtr(base, mo.add(mo.mul(r, mo.const(ld)), c)), V.at(blk, src, pt), mo.all_of(conds),
                       loc=blk.loc))


def split_products(blk: Block, d: Dot, acc: Value | None, owned: MmaGeometry, geom: MmaGeometry) -> Mma:
    """`acc + d` with k cut into `geom.split` slices: the simdgroups of slice s multiply its part of k (slice 0
    onto `acc`, the others onto zeros), the other slices write their partial sums to scratch, and slice 0 adds
    them. The result is held by slice 0's simdgroups (`owned`, the geometry without split). Every simdgroup
    reads `acc` at its slice-0 twin's pieces, so no read falls outside the tile."""
    owners = geom.sg_m * geom.sg_n
    part = d.a.type.shape[1] // geom.split
    sl = blk.let(mo.div(sg_index(geom.first_sg), owners), "slice")
    first = Compare(CmpOp.EQ, sl, mo.const(0))
    held = None if acc is None else MU.held_mma(blk, acc)
    mats = None if acc is None else (held if held is not None and held.geom == owned else
                                      as_mma(blk, acc, geom)).mats
    staged = stage_operands(blk, d.a, d.b, d)
    if mats is None:
        init = [blk.let(MatrixFill(Const(0.0, DType.F32)), "acc")] * geom.pieces
    else:   # slice 0 starts from the accumulators, the others from zeros (each lane its own elements)
        init = [blk.let(MatrixOf(*(Where(first, Extract(m, e), Const(0.0, DType.F32)) for e in (0, 1))), "acc")
                for m in mats]
    partial = k_loop(blk, geom, d, staged, init, mo.mul(sl, mo.const(part)), part)
    S.barrier(blk, d)
    base = X.scratch(blk, DType.F32, (geom.split - 1) * geom.m * geom.n)
    size = geom.m * geom.n
    out_of = AddPtr(base, mo.mul(Binary(BinOp.SUB, sl, mo.const(1)), mo.const(size)))
    blk.emit(If(Compare(CmpOp.GE, sl, mo.const(1)),
                 [MatrixStore(m, AddPtr(out_of, piece_offset(blk, geom, p)), mo.const(geom.n), loc=blk.loc)
                  for p, m in enumerate(partial)], loc=blk.loc))
    S.barrier(blk, d)
    inner = blk.body()
    sums = []
    for p, total in enumerate(partial):
        for s in range(1, geom.split):
            at = mo.add(mo.const((s - 1) * size), piece_offset(inner, geom, p))
            other = inner.let(MatrixLoad(AddPtr(base, at), mo.const(geom.n)), "part")
            total = inner.let(MatrixOf(*(Binary(BinOp.ADD, Extract(total, e), Extract(other, e))
                                        for e in (0, 1))), "acc")
        sums.append(total)
    body = inner.out
    results = blk.fresh_vars("acc", partial)
    blk.emit(If(first, body, [], sums, list(partial), results, loc=blk.loc))
    return Mma(owned, tuple(results))


def k_loop(blk: Block, geom: MmaGeometry, d: Dot, staged, mats: list[Value], start: Value, k: int,
           zero: bool = False) -> list[Value]:
    """The accumulators `mats` (zeros when `zero`) after the products of the `k` columns of `a` (rows of `b`) from
    `start` (by `matmul2d` where the plan's engine asks and it can: `metile.rewrite.lower.tensor_ops`)."""
    by_tensor_ops = TO.products(blk, geom, d, how(blk, d), staged, mats, start, k, zero)
    if by_tensor_ops is not None:
        return by_tensor_ops
    if k == 8:
        return mma_products(blk, geom, d, fragments(blk, geom, staged, start), mats)
    # One 8-wide step of k per iteration of a run-time loop, the pieces carried in matrices: the same
    # code as unrolling (Metal unrolls a constant trip count), at 1/steps of the size. Preloading carries
    # the step's operands too, loaded one iteration ahead: the loop runs the first steps - 1 steps, and
    # the last step's products follow it.
    preload = how(blk, d).preload
    first = fragments(blk, geom, staged, start) if preload else []
    kk = Var(blk.fresh("kk"), TileType(DType.I32))
    carried = blk.fresh_vars("acc", mats)
    held = blk.fresh_vars("frag", first)
    inner = blk.body()
    if preload:
        ahead = fragments(inner, geom, staged, mo.add(kk, mo.const(8)))
        yields = mma_products(inner, geom, d, held, carried) + ahead
    else:
        yields = mma_products(inner, geom, d, fragments(inner, geom, staged, kk), carried)
    body = inner.out
    results = blk.fresh_vars("acc", mats)
    last = blk.fresh_vars("frag", first)
    stop = mo.add(start, mo.const(k - 8 if preload else k))
    blk.emit(For(kk, start, stop, mo.const(8), carried + held, mats + first, body, yields, results + last,
                  loc=blk.loc))
    if preload:
        results = mma_products(blk, geom, d, last, results)
    return results


def fragments(blk: Block, geom: MmaGeometry, staged: list[tuple[Value, int]], kk: Value) -> list[Value]:
    """This simdgroup's 8x8 operands of the step of k starting at column `kk` of `a` (row of `b`): its rows of
    `a`, then its columns of `b`."""
    (sa, lda), (sb, ldb) = staged
    lda, ldb = (mo.const(ld) if isinstance(ld, int) else ld for ld in (lda, ldb))
    rows, cols = piece_starts(blk, geom)
    arows = [blk.let(MatrixLoad(AddPtr(sa, mo.add(mo.mul(r, lda), kk)), lda), "ma") for r in rows]
    krow = mo.mul(kk, ldb)   # the step's first row of `b`, the same for each of its columns
    bcols = [blk.let(MatrixLoad(AddPtr(sb, mo.add(krow, c)), ldb), "mb") for c in cols]
    return arows + bcols


def mma_products(blk: Block, geom: MmaGeometry, d: Dot, frags: list[Value], mats: list[Value]) -> list[Value]:
    """The accumulators `mats` (one per piece) after the products of one step, given its `fragments`, in
    row order or, when its plan's `serpentine`, with every other row of pieces walked backwards."""
    arows, bcols = frags[:geom.per_m], frags[geom.per_m:]
    out, serpentine = list(mats), how(blk, d).serpentine
    for i in range(geom.per_m):
        cols = range(geom.per_n)
        for j in (reversed(cols) if serpentine and i % 2 else cols):
            p = i * geom.per_n + j
            out[p] = blk.let(MatrixMultiplyAccumulate(arows[i], bcols[j], mats[p]), "acc")
    return out


def stage_operands(blk: Block, a: Value, b: Value, d: Dot) -> list[tuple[Value, int]]:
    """`(base, row stride)` of `a` and `b` in threadgroup memory: a role's channel as it is, anything
    else published to scratch with rows padded as its plan's `pad` says (one barrier pair for both), in the
    loop's ring of buffers when the enclosing loop has one; an operand its plan's `hoist` marks, in a loop's own
    body, once before the loop, in a buffer of its own."""
    out: list[tuple[Value, int] | None] = [None, None]
    staged: dict[bool, list[tuple[int, Value, int]]] = {False: [], True: []}
    plan = how(blk, d)
    for i, x in enumerate((a, b)):
        ch = X.channel_of(blk, x)
        direct = in_device(blk, x) if plan.direct[i] else None
        if ch is not None:
            out[i] = (ch.base, x.type.shape[1])
        elif direct is not None:
            out[i] = direct
        else:
            staged[plan.hoist[i] and blk.preheader is not None].append((i, x, x.type.shape[1] + plan.pad[i]))
    for once, items in staged.items():
        if not items:
            continue
        todo = [(x, (ld, 1)) for _, x, ld in items]
        bases = before_loop(blk, lambda pre, todo=todo: X.publish(pre, todo, d, own=True)) if once else \
            X.publish(blk, todo, d, ring=blk.ring)
        for (i, _, ld), base in zip(items, bases):
            out[i] = (base, ld)
    return out


def in_device(blk: Block, x: Value) -> tuple[Value, Value] | None:
    """`(address of element (0, 0), row stride)` of the operand `x` where it can be read straight from device
    memory: a tile load left in memory for the product (not in registers), with no mask, row-major with unit
    column stride, at addresses every thread agrees on; else None."""
    rep, load = X.named_rep(blk, x)
    if rep is not None or not isinstance(load, Load) or load.mask is not None or S.is_varying(blk, load.ptr):
        return None
    found = V.strides_of(blk, load.ptr)
    if found is None or found[1] != 1:
        return None
    row = found[0]
    ld = mo.const(row) if isinstance(row, int) else mo.mul(V.scalar(blk, row[1]), mo.const(row[0]))
    return V.at(blk, load.ptr, Pt(load.ptr.type.shape, mo.const(0))), ld


def before_loop(blk: Block, make):
    """`make(pre)` for `pre`, a block emitting into the statements that run before the loop whose body `blk` is,
    with a statement's scratch state of its own."""
    kernel = blk.kernel
    saved = (kernel.use, kernel.parts, kernel.published)
    kernel.new_statement()
    pre = blk.collecting()
    pre.out = blk.preheader
    try:
        return make(pre)
    finally:
        kernel.use, kernel.parts, kernel.published = saved


def simdgroup_coords(blk: Block, geom: MmaGeometry) -> tuple[Value, Value]:
    """The first row and column (in elements) of this simdgroup's block of pieces (pure expressions of
    builtins, built once per geometry, for every kernel, so that every piece shares the same nodes)."""
    return _sg_coords(geom)


def piece_starts(blk: Block, geom: MmaGeometry) -> tuple[tuple[Value, ...], tuple[Value, ...]]:
    """The first row (in elements) of each row of this simdgroup's pieces, and the first column of each column of
    them: `simdgroup_coords` plus multiples of 8, built once per geometry, for every kernel (as those are)."""
    return _piece_starts(geom)


@functools.lru_cache(maxsize=256)
def _piece_starts(geom: MmaGeometry) -> tuple[tuple[Value, ...], tuple[Value, ...]]:
    sm, sn = _sg_coords(geom)
    return (tuple(mo.add(sm, mo.const(8 * i)) for i in range(geom.per_m)),
            tuple(mo.add(sn, mo.const(8 * j)) for j in range(geom.per_n)))


@functools.lru_cache(maxsize=256)
def _sg_coords(geom: MmaGeometry) -> tuple[Value, Value]:
    sg = sg_index(geom.first_sg)
    if geom.split > 1 or geom.replicas > 1:   # the simdgroups of every slice of k, or replicas, hold the
        sg = mo.mod(sg, geom.sg_m * geom.sg_n)  # same pieces
    return mo.apply_layout(geom.first_row, sg), mo.apply_layout(geom.first_col, sg)


def piece_offset(blk: Block, geom: MmaGeometry, piece: int, ld: Value | None = None) -> Value:
    """Where this simdgroup's `piece` starts in a row-major `[m, n]` array with row stride `ld` (default `n`)."""
    rows, cols = piece_starts(blk, geom)
    i, j = divmod(piece, geom.per_n)
    ld = mo.const(geom.n) if ld is None else ld
    return mo.add(mo.mul(rows[i], ld), cols[j])


def as_mma(blk: Block, v: Value, geom: MmaGeometry) -> Mma:
    """`v` (an `[m, n]` f32 tile) as simdgroup matrices of `geom`."""
    rep, v = X.named_rep(blk, v)
    if isinstance(rep, Mma) and rep.geom == geom:
        return rep
    if dot_acc(v) or isinstance(v, Dot):
        rep = X.heavy_rep(blk, v)
        if isinstance(rep, Mma) and rep.geom == geom:
            return rep
    fill = _constant_fill(v)
    if fill is not None:
        return Mma(geom, (blk.let(MatrixFill(cast(fill, DType.F32)), "acc"),) * geom.pieces)
    held = MU.pointwise_mma(blk, (v,), (geom.m, geom.n))
    if held is not None and held.geom == geom:   # element-wise on matrices of the same pieces: lane by lane
        mats = []
        inner = blk.nested()
        for pts in MU.fragment_points(inner, geom, v.type.shape):
            x, y = (cast(V.at(inner, v, pt), DType.F32) for pt in pts)
            mats.append(inner.let(MatrixOf(x, y), "acc"))
        return Mma(geom, tuple(mats))
    (base,) = X.publish(blk, [(v, (geom.n, 1))], v)
    return Mma(geom, tuple(blk.let(MatrixLoad(AddPtr(base, piece_offset(blk, geom, p)), mo.const(geom.n)), "acc")
                           for p in range(geom.pieces)))


def _constant_fill(v: Value) -> Value | None:
    match v:
        case Full(_, value):
            return value
        case Broadcast(Const() as c, _):
            return c
    return None


__all__ = ["Ring", "as_mma", "before_loop", "how", "mma", "mma_geometry", "piece_offset", "piece_starts",
           "simdgroup_coords"]
