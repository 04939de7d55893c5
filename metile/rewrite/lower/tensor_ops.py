"""`dot` by Metal 4's `matmul2d`, where the `Dot`'s plan asks for it (`metile.rewrite.tensor_ops.use_tensor_ops`).

The operands are staged in threadgroup memory as for simdgroup matrices (`mma.stage_operands`: masks, ragged edges
and `bounds=` are applied there, every element outside the tile's data is the value the load gives it, so the
product over the whole staged tile is the product asked for), and the result is held in the same 8x8 simdgroup
matrices (`Mma`), so everything after the product (stores, epilogues, a loop's accumulator) is as on simdgroup
matrices. Per product, the accumulator's pieces are stored to a destination in scratch, `matmul2d` adds the product
of the staged operands to it in place (`multiply_accumulate`), and the pieces are loaded back:
- `MATMUL2D_SIMDGROUP`: each simdgroup its own block of the result (`MmaGeometry`: its `per_m x per_n` pieces), from
  its rows of `a` and columns of `b`, into a destination of its own (`execution_simdgroup`; the lanes' stores and
  loads are ordered with the operation by `simdgroup_barrier`s, `TensorMatmul`);
- `MATMUL2D_THREADGROUP`: every simdgroup of the program the whole product at once (`execution_simdgroups<N>`), the
  destination shared, between threadgroup barriers.
Where a mode cannot run as asked the other is taken, and where neither can, the product stays on simdgroup
matrices (`products` returns None): a block side that is not a multiple of 16, operands that are not both in
threadgroup memory, k split across simdgroups; the whole-threadgroup mode also needs the product to be computed by
every thread of the program, with no replicas (not inside a `simdgroup_role`, nor under control flow that depends on
the thread).

A GEMM's accumulator skips those round trips (`Held`, `held_accumulator`, which `control.for_stmt` asks for each
loop-carried tile): one that starts from zeros and that its loop updates once per iteration as `acc + dot(a, b)`, in
a statement of the body itself whose result is yielded, read nowhere else in the loop, of a product that `matmul2d`
computes in one of the modes above. Its destinations are cooperative tensors declared and zeroed before the loop
(`hold`, `TensorHold`), the runs accumulate into them in place (`held_products`), and after the loop each is
stored once to scratch and loaded into the simdgroup matrices of the result (`release`, `TensorRelease`).
"""

from __future__ import annotations

import attrs

from metile.ir.metal import MatrixLoad, MatrixStore, TensorHold, TensorMatmul, TensorRelease
from metile.ir.node import walk
from metile.ir.stmts import For, Let
from metile.ir.tile import Broadcast, Dot, Full, MmaEngine, MmaPlan
from metile.ir.types import AddressSpace, DType
from metile.ir.values import AddPtr, Const, Value, Var
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import MmaGeometry, k_slices
from metile.rewrite.layouts import dot_accumulation as dot_acc
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import mma as MM
from metile.rewrite.lower import statements as S
from metile.rewrite.lower.ops import sg_index
from metile.rewrite.lower.state import Block, Mma
from metile.rewrite.tensor_ops import ATOM


def products(blk: Block, geom: MmaGeometry, d: Dot, how: MmaPlan, staged, mats: list[Value], start: Value,
             k: int, zero: bool = False) -> list[Value] | None:
    """The accumulators `mats` after `matmul2d` adds the products of the `k` columns of `a` (rows of `b`) from
    `start`, staged as `staged` (`[(base, row stride)]` of `a` and `b`); None where the plan asks for simdgroup
    matrices or `matmul2d` cannot compute it here (see the module docstring). Accumulators that are `zero` are not
    stored: `matmul2d` writes the product over its destination (`multiply`)."""
    if any(base.type.space is not AddressSpace.THREADGROUP for base, _ in staged):
        return None
    (sa, lda), (sb, ldb) = ((base, mo.const(ld) if isinstance(ld, int) else ld) for base, ld in staged)
    mode = _mode(blk, geom, d, how, [ld for _, ld in staged], k)
    relaxed = d.tf32 and d.a.type.dtype is DType.F32
    if mode is None:
        return None
    if mode == WHOLE:
        return _whole(blk, geom, d, (sa, lda, sb, ldb), None if zero else mats, start, k, relaxed)
    return _per_simdgroup(blk, geom, (sa, lda, sb, ldb), None if zero else mats, start, k, relaxed, mode)


WHOLE = "whole"


def _mode(blk: Block, geom: MmaGeometry, d: Dot, how: MmaPlan, lds, k: int) -> str | tuple[int, int] | None:
    """How `matmul2d` computes `d` here, its operands staged with row strides `lds`: `WHOLE` (the whole threadgroup),
    the `(rows, columns)` of each simdgroup's runs, or None (simdgroup matrices; see the module docstring)."""
    if how.engine is MmaEngine.SIMDGROUP_MATRIX or geom.split > 1 or k % ATOM:
        return None
    budget = _budget(blk, d, lds)
    whole = _whole_threadgroup(blk, geom) and geom.m * geom.n * 4 <= budget
    block = _block(geom, blk.group.sgs, budget)
    if whole and (how.engine is MmaEngine.MATMUL2D_THREADGROUP or block is None):
        return WHOLE
    return block


def _budget(blk: Block, d: Dot, lds) -> int:
    """The bytes of scratch a product's destination may take: half of the threadgroup memory its staged operands
    (row strides `lds`) leave (the other half for the scratch of the statements around it)."""
    (m, k), n = d.a.type.shape, d.b.type.shape[1]
    lda, ldb = (ld if isinstance(ld, int) else width for ld, width in zip(lds, (k, n)))
    used = m * lda * d.a.type.dtype.itemsize + k * ldb * d.b.type.dtype.itemsize
    return (blk.facts.target.threadgroup_memory - used) // 2


def _block(geom: MmaGeometry, sgs: int, budget: int) -> tuple[int, int] | None:
    """The rows and columns of each `matmul2d` a simdgroup runs on its block of the result: the largest sides,
    multiples of `ATOM` dividing the block's, whose destinations (one per simdgroup, f32) fit in `budget` bytes;
    None when none does."""
    sm, sn = geom.per_m * 8, geom.per_n * 8
    fits = [(h, w) for h in range(ATOM, sm + 1, ATOM) for w in range(ATOM, sn + 1, ATOM)
            if sm % h == 0 and sn % w == 0 and sgs * h * w * 4 <= budget]
    return max(fits, key=lambda hw: (hw[0] * hw[1], hw[1]), default=None)


def _whole_threadgroup(blk: Block, geom: MmaGeometry) -> bool:
    """Whether every thread of the program runs this product, each simdgroup on pieces of its own."""
    plan = blk.facts.k.plan
    return (blk.group.role is None and blk.divergent is None and geom.replicas == 1 and plan is not None
            and blk.group.first_sg == 0 and blk.group.sgs * 32 == plan.threads)


def _whole(blk: Block, geom: MmaGeometry, d: Dot, operands, mats, start: Value, k: int, relaxed: bool) -> list[Value]:
    """The whole threadgroup's product through one destination (`mats` None: from zeros)."""
    sa, lda, sb, ldb = operands
    dst = X.scratch(blk, DType.F32, geom.m * geom.n)
    ld = mo.const(geom.n)
    for p, mat in enumerate(mats or ()):
        blk.emit(MatrixStore(mat, AddPtr(dst, MM.piece_offset(blk, geom, p)), ld, loc=blk.loc))
    S.barrier(blk, d)
    blk.emit(TensorMatmul(_at(sa, start), lda, _at(sb, mo.mul(start, ldb)), ldb, dst, ld,
                          (geom.m, geom.n, k), mats is not None, relaxed, blk.group.sgs, loc=blk.loc))
    S.barrier(blk, d)
    return [blk.let(MatrixLoad(AddPtr(dst, MM.piece_offset(blk, geom, p)), ld), "acc") for p in range(geom.pieces)]


def _per_simdgroup(blk: Block, geom: MmaGeometry, operands, mats, start: Value, k: int, relaxed: bool,
                   block: tuple[int, int]) -> list[Value]:
    """Each simdgroup's pieces, `block` (rows, columns) of them at a time through a destination of its own (`mats`
    None: from zeros)."""
    sa, lda, sb, ldb = operands
    h, w = block
    dst, ld = _simdgroup_destination(blk, block)
    row, col = MM.simdgroup_coords(blk, geom)
    out = list(mats) if mats is not None else [None] * geom.pieces
    for r0, c0 in _runs(geom, block):
        pieces = _run_pieces(geom, block, r0, c0)
        for p, off in pieces if mats is not None else ():
            blk.emit(MatrixStore(out[p], AddPtr(dst, off), ld, loc=blk.loc))
        a = _at(sa, mo.add(mo.mul(mo.add(row, mo.const(r0)), lda), start))
        b = _at(sb, mo.add(mo.mul(start, ldb), mo.add(col, mo.const(c0))))
        blk.emit(TensorMatmul(a, lda, b, ldb, dst, ld, (h, w, k), mats is not None, relaxed, 0, loc=blk.loc))
        for p, off in pieces:
            out[p] = blk.let(MatrixLoad(AddPtr(dst, off), ld), "acc")
    return out


def _simdgroup_destination(blk: Block, block: tuple[int, int]) -> tuple[Value, Value]:
    """This simdgroup's `block`-sized destination in scratch (one per simdgroup of the group), and its row stride."""
    h, w = block
    region = X.scratch(blk, DType.F32, blk.group.sgs * h * w)
    return blk.let(AddPtr(region, mo.mul(sg_index(blk.group.first_sg), mo.const(h * w))), "dst"), mo.const(w)


def _runs(geom: MmaGeometry, block: tuple[int, int]) -> list[tuple[int, int]]:
    """The first row and column of each `block`-sized run over a simdgroup's pieces, rows first."""
    h, w = block
    return [(r0, c0) for r0 in range(0, geom.per_m * 8, h) for c0 in range(0, geom.per_n * 8, w)]


def _run_pieces(geom: MmaGeometry, block: tuple[int, int], r0: int, c0: int) -> list[tuple[int, Value]]:
    """The pieces of the run at (`r0`, `c0`): each piece's index and its offset in the run's destination."""
    h, w = block
    return [(i * geom.per_n + j, mo.const((i * 8 - r0) * w + j * 8 - c0))
            for i in range(r0 // 8, (r0 + h) // 8) for j in range(c0 // 8, (c0 + w) // 8)]


# ---- accumulators held in cooperative destination tensors across a loop


@attrs.frozen(eq=False)
class Held:
    """A loop-carried accumulator kept in the cooperative destination tensors of its `matmul2d` runs (`TensorHold`)
    across the iterations of its loop: `names` (one per run of each simdgroup's block, `block` its rows and columns;
    one for the whole threadgroup when `block` is None), runs of `shape` `(m, n, k)` over `dtype` operands. Compared
    by identity: a loop's carried value, its update in the body and the loop's result are the same tensors."""

    geom: MmaGeometry
    d: Dot
    names: tuple[str, ...]
    block: tuple[int, int] | None
    shape: tuple[int, int, int]
    dtype: DType
    relaxed: bool
    simdgroups: int

    def runs(self) -> list[tuple[str, int, int]]:
        """`(name, first row, first column)` of each run within this simdgroup's block (0, 0 for the whole)."""
        if self.block is None:
            return [(self.names[0], 0, 0)]
        return [(name, r0, c0) for name, (r0, c0) in zip(self.names, _runs(self.geom, self.block))]


def held_accumulator(blk: Block, s: For, i: int, kind) -> Held | None:
    """The tensors that hold the carried value `i` of the loop `s` across its iterations, or None to carry it in
    simdgroup matrices. `blk` is the loop's body block. It qualifies when it starts from zeros, is updated once
    per iteration as `acc + dot(a, b)` by a statement of the body itself whose result is yielded, is read by nothing
    else in the loop, and `matmul2d` computes the product (see the module docstring); whatever follows the loop
    reads the result once it is written out (`release`)."""
    if not isinstance(kind, MmaGeometry) or blk.divergent is not None or blk.group.role is not None:
        return None
    c, y = s.carried[i], s.yields[i]
    if not is_zeros(blk, s.inits[i]) or not isinstance(y, Var):
        return None
    update = next((st for st in s.body if isinstance(st, Let) and st.var == y), None)
    pair = None if update is None else dot_acc(update.value)
    if pair is None or pair[1] != c or any(_reads(x, c) for x in (pair[0].a, pair[0].b)):
        return None
    d = pair[0]
    how = MM.how(blk, d)
    if how.engine is MmaEngine.SIMDGROUP_MATRIX:   # `_mode` refuses it: nothing else to look at
        return None
    others = [st for st in s.body if st is not update] + [x for j, x in enumerate(s.yields) if j != i]
    if any(_reads(x, c) or _reads(x, y) for x in others):
        return None
    geom = MM.mma_geometry(blk, d)
    if geom is None or geom != kind or any(how.direct) or MM.k_chunk(blk, d) is not None:
        return None
    (m, k), n = d.a.type.shape, d.b.type.shape[1]
    if any(X.channel_of(blk, x) is not None for x in (d.a, d.b)) or \
            k_slices(m, n, k, how.split, blk.group.sgs) > 1:
        return None
    mode = _mode(blk, geom, d, how, [x.type.shape[1] + pad for x, pad in zip((d.a, d.b), how.pad)], k)
    if mode is None:
        return None
    relaxed = d.tf32 and d.a.type.dtype is DType.F32
    if mode == WHOLE:
        return Held(geom, d, (blk.fresh("tacc"),), None, (m, n, k), d.a.type.dtype, relaxed, blk.group.sgs)
    h, w = mode
    runs = (geom.per_m * 8 // h) * (geom.per_n * 8 // w)
    return Held(geom, d, tuple(blk.fresh("tacc") for _ in range(runs)), mode, (h, w, k), d.a.type.dtype, relaxed, 0)


def is_zeros(blk: Block, v: Value) -> bool:
    """Whether `v` is a tile of zeros (through names bound to pure expressions)."""
    _, v = X.named_rep(blk, v)
    match v:
        case Full(_, Const(value)) | Broadcast(Const(value), _):
            return value == 0
    return False


def rep_of(blk: Block, v: Value):
    """The representation of `v` (through names bound to pure expressions; an accumulation's once computed)."""
    rep, w = X.named_rep(blk, v)
    if rep is None and dot_acc(w) is not None:
        X.prepare(blk, w)
        return X.heavy_rep(blk, w)
    return rep


def _reads(root, v: Var) -> bool:
    """Whether `v` occurs in `root` (a value or a statement)."""
    return any(n == v for n in walk(root))


def hold(blk: Block, held: Held) -> None:
    """Declare the zeroed destinations of `held` (before its loop)."""
    for name in held.names:
        blk.emit(TensorHold(name, held.shape, held.dtype, held.relaxed, held.simdgroups, loc=blk.loc))


def held_products(blk: Block, held: Held, d: Dot, staged) -> Held:
    """`held` after `matmul2d` adds the product `d` of the operands staged as `staged` (`[(base, row stride)]`) to
    it in place."""
    (sa, lda), (sb, ldb) = ((base, mo.const(ld) if isinstance(ld, int) else ld) for base, ld in staged)
    if d != held.d or any(base.type.space is not AddressSpace.THREADGROUP for base, _ in staged):
        raise blk.refuse("internal: a held accumulator's product is not the one it was held for", d)
    if held.block is None:
        blk.emit(TensorMatmul(sa, lda, sb, ldb, None, None, held.shape, True, held.relaxed, held.simdgroups,
                              held.names[0], loc=blk.loc))
        return held
    row, col = MM.simdgroup_coords(blk, held.geom)
    for name, r0, c0 in held.runs():
        a = _at(sa, mo.mul(mo.add(row, mo.const(r0)), lda))
        b = _at(sb, mo.add(col, mo.const(c0)))
        blk.emit(TensorMatmul(a, lda, b, ldb, None, None, held.shape, True, held.relaxed, 0, name, loc=blk.loc))
    return held


def release(blk: Block, held: Held, why) -> Mma:
    """The result `held` holds after its loop, in simdgroup matrices of its geometry: each destination stored once
    to scratch (behind a barrier: the loop's last products may still read the scratch it reuses) and its pieces
    loaded from there."""
    geom = held.geom
    blk.kernel.new_statement()
    S.barrier(blk, why)
    if held.block is None:
        dst = X.scratch(blk, DType.F32, geom.m * geom.n)
        ld = mo.const(geom.n)
        blk.emit(TensorRelease(held.names[0], dst, ld, (geom.m, geom.n), held.simdgroups, loc=blk.loc))
        S.barrier(blk, why)
        return Mma(geom, tuple(blk.let(MatrixLoad(AddPtr(dst, MM.piece_offset(blk, geom, p)), ld), "acc")
                               for p in range(geom.pieces)))
    dst, ld = _simdgroup_destination(blk, held.block)
    out: list[Value | None] = [None] * geom.pieces
    for name, r0, c0 in held.runs():
        blk.emit(TensorRelease(name, dst, ld, held.block, 0, loc=blk.loc))
        for p, off in _run_pieces(geom, held.block, r0, c0):
            out[p] = blk.let(MatrixLoad(AddPtr(dst, off), ld), "acc")
    return Mma(geom, tuple(out))


def _at(ptr: Value, offset: Value) -> Value:
    """`ptr + offset`, or `ptr` itself for a zero offset."""
    match offset:
        case Const(0):
            return ptr
    return AddPtr(ptr, offset)


__all__ = ["Held", "held_accumulator", "held_products", "hold", "is_zeros", "products", "release", "rep_of"]
