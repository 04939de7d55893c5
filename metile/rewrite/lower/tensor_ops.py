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
"""

from __future__ import annotations

from metile.ir.metal import MatrixLoad, MatrixStore, TensorMatmul
from metile.ir.tile import Dot, MmaEngine, MmaPlan
from metile.ir.types import AddressSpace, DType
from metile.ir.values import AddPtr, Const, Value
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import MmaGeometry
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import mma as MM
from metile.rewrite.lower import statements as S
from metile.rewrite.lower.ops import sg_index
from metile.rewrite.lower.state import Block
from metile.rewrite.tensor_ops import ATOM


def products(blk: Block, geom: MmaGeometry, d: Dot, how: MmaPlan, staged, mats: list[Value], start: Value,
             k: int, zero: bool = False) -> list[Value] | None:
    """The accumulators `mats` after `matmul2d` adds the products of the `k` columns of `a` (rows of `b`) from
    `start`, staged as `staged` (`[(base, row stride)]` of `a` and `b`); None where the plan asks for simdgroup
    matrices or `matmul2d` cannot compute it here (see the module docstring). Accumulators that are `zero` are not
    stored: `matmul2d` writes the product over its destination (`multiply`)."""
    if how.engine is MmaEngine.SIMDGROUP_MATRIX or geom.split > 1 or k % ATOM:
        return None
    (sa, lda), (sb, ldb) = ((base, mo.const(ld) if isinstance(ld, int) else ld) for base, ld in staged)
    if any(base.type.space is not AddressSpace.THREADGROUP for base in (sa, sb)):
        return None
    relaxed = d.tf32 and d.a.type.dtype is DType.F32
    budget = _budget(blk, d, staged)
    whole = _whole_threadgroup(blk, geom) and geom.m * geom.n * 4 <= budget
    block = _block(geom, blk.group.sgs, budget)
    if whole and (how.engine is MmaEngine.MATMUL2D_THREADGROUP or block is None):
        return _whole(blk, geom, d, (sa, lda, sb, ldb), None if zero else mats, start, k, relaxed)
    if block is not None:
        return _per_simdgroup(blk, geom, (sa, lda, sb, ldb), None if zero else mats, start, k, relaxed, block)
    return None


def _budget(blk: Block, d: Dot, staged) -> int:
    """The bytes of scratch a product's destination may take: half of the threadgroup memory its staged operands
    leave (the other half for the scratch of the statements around it)."""
    (m, k), n = d.a.type.shape, d.b.type.shape[1]
    lda, ldb = (ld if isinstance(ld, int) else width for (_, ld), width in zip(staged, (k, n)))
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
    region = X.scratch(blk, DType.F32, blk.group.sgs * h * w)
    dst = blk.let(AddPtr(region, mo.mul(sg_index(blk.group.first_sg), mo.const(h * w))), "dst")
    ld = mo.const(w)
    row, col = MM.simdgroup_coords(blk, geom)
    out = list(mats) if mats is not None else [None] * geom.pieces
    for r0 in range(0, geom.per_m * 8, h):
        for c0 in range(0, geom.per_n * 8, w):
            pieces = [(i * geom.per_n + j, mo.const((i * 8 - r0) * w + j * 8 - c0))
                      for i in range(r0 // 8, (r0 + h) // 8) for j in range(c0 // 8, (c0 + w) // 8)]
            for p, off in pieces if mats is not None else ():
                blk.emit(MatrixStore(out[p], AddPtr(dst, off), ld, loc=blk.loc))
            a = _at(sa, mo.add(mo.mul(mo.add(row, mo.const(r0)), lda), start))
            b = _at(sb, mo.add(mo.mul(start, ldb), mo.add(col, mo.const(c0))))
            blk.emit(TensorMatmul(a, lda, b, ldb, dst, ld, (h, w, k), mats is not None, relaxed, 0, loc=blk.loc))
            for p, off in pieces:
                out[p] = blk.let(MatrixLoad(AddPtr(dst, off), ld), "acc")
    return out


def _at(ptr: Value, offset: Value) -> Value:
    """`ptr + offset`, or `ptr` itself for a zero offset."""
    match offset:
        case Const(0):
            return ptr
    return AddPtr(ptr, offset)


__all__ = ["products"]
