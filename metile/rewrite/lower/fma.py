"""The products that 8x8 simdgroup matrices do not fit as they are: padded to 8x8 pieces, or computed by multiply-adds
on each thread.

A product runs on simdgroup matrices when its operands are 2-D, of a matrix type, and every side is a multiple of 8
(`metile.rewrite.distribute.matrix_dims`, `mma.mma`). A product whose sides rounded up to multiples of 8 do at most
twice its multiply-adds (`distribute.padded_dims`: `[12, 16] x [16, 20]`, a decode step of 4 to 7 rows, a batch `[B,
M, K] x [B, K, N]` of such matrices or of multiples of 8) is *padded*: `a` and `b` are written to threadgroup memory
as `[m8, k8]` and `[k8, n8]` arrays (one per matrix of a batch) with zeros beyond their sides, so the padded columns
of `a` meet the padded rows of `b` and add exact zeros; the padded products run on the matrices (`mma.k_loop`, the
matrices of a batch one after the other), and each thread reads the result's real elements it holds back from
scratch, adding the accumulator in f32.

Any other product (1 to 3 rows, sides far from multiples of 8, batches of those) is computed by multiply-adds: `a`
and `b` are staged in threadgroup memory (as the matrices' operands are: a role's channel as it is, else written
row-major by the program's threads between two barriers), and each thread computes the elements of the result it
holds under the `Blocked` layout of the result's size, one run-time loop over `k` carrying an f32 sum per element:
`sum = fma(a[i, k], b[k, j], sum)`, starting from the accumulator's element (or 0). Every product of two operands of
a matrix type (f32, f16, bf16, and the integers and 8-bit floats the frontend converts to them) is exact in f32 but
for f32 x f32, whose `fma` rounds once per step, so either way the result is that of the matrices' f32 accumulation
up to the order of the additions. The result is `Regs`, read as any register tile is.
"""

from __future__ import annotations

import math

from metile.ir.metal import MatrixFill, MatrixStore
from metile.ir.ops import BinOp
from metile.ir.stmts import For, Store
from metile.ir.tile import Dot
from metile.ir.types import DType, TileType
from metile.ir.values import AddPtr, Binary, Const, Fma, Load, Value, Var
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import MmaGeometry, mma_arrangement, padded_dims, row_major_strides
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import mma as MM
from metile.rewrite.lower import mma_use as MU
from metile.rewrite.lower import rolled as RL
from metile.rewrite.lower import statements as S
from metile.rewrite.lower import values as V
from metile.rewrite.lower.ops import cast
from metile.rewrite.lower.state import Block, Mma, Pt, Regs
from metile.rewrite.staging import mma_row_stride

F32 = DType.F32


def product(blk: Block, d: Dot, acc: Value | None, where: Value) -> Mma | Regs:
    """`acc + d` (or `d`): on simdgroup matrices where they fit it (`mma.mma`), padded where that is cheap, else by
    per-thread multiply-adds."""
    if MM.mma_geometry(blk, d) is not None:
        return MM.mma(blk, d, acc, where)
    dims = padded_dims(d)
    if dims is not None:
        return padded_mma(blk, d, acc, dims)
    return fma_dot(blk, d, acc)


def padded_mma(blk: Block, d: Dot, acc: Value | None, dims: tuple[int, int, int]) -> Regs:
    """`acc + d` on simdgroup matrices, each matrix of its operands padded with zeros to `dims` (see the module
    docstring); a batched product runs its matrices one after the other on the same simdgroups."""
    S.collective(blk, d)
    m8, n8, k8 = dims
    nb = math.prod(d.a.type.shape[:-2])
    sa, sb = publish_padded(blk, [(d.a, (m8, k8)), (d.b, (k8, n8))], d)
    sg_m, sg_n, replicas = mma_arrangement(m8, n8, blk.group.sgs)
    geom = MmaGeometry(m8, n8, sg_m, sg_n, blk.group.first_sg, replicas=replicas)
    zero = blk.let(MatrixFill(Const(0.0, F32)), "acc")
    ld = mma_row_stride(n8)
    stores = []
    for i in range(nb):
        a_i = sa if i == 0 else blk.let(AddPtr(sa, mo.const(i * m8 * k8)), "sa")
        b_i = sb if i == 0 else blk.let(AddPtr(sb, mo.const(i * k8 * n8)), "sb")
        mats = MM.k_loop(blk, geom, d, [(a_i, k8), (b_i, n8)], [zero] * geom.pieces, mo.const(0), k8)
        stores += [(i, p, mat) for p, mat in enumerate(mats)]
    S.barrier(blk, d)
    out = X.scratch(blk, F32, nb * m8 * ld)
    MU.emit_owned(blk, geom, [MatrixStore(mat, AddPtr(out, mo.add(mo.const(i * m8 * ld),
                                                                 MM.piece_offset(blk, geom, p, mo.const(ld)))),
                                          mo.const(ld), loc=blk.loc) for i, p, mat in stores])
    S.barrier(blk, d)
    layout = V.layout(blk, d.type.size)
    regs = []
    for slot in range(layout.slots):
        pt = V.slot_pt(blk, layout, slot, d.type.shape)
        *bc, r, c = V.coords(blk, pt)
        row = mo.add(mo.mul(bc[0], mo.const(m8)), r) if bc else r
        v: Value = blk.let(Load(AddPtr(out, mo.add(mo.mul(row, mo.const(ld)), c))), "c")
        if acc is not None:
            v = blk.let(Binary(BinOp.ADD, cast(V.at(blk, acc, pt), F32), v), "c")
        regs.append(v)
    return Regs(layout, tuple(regs))


def publish_padded(blk: Block, items: list[tuple[Value, tuple[int, int]]], why: Dot) -> list[Value]:
    """Write each tile (2-D, or a batch of 2-D matrices) to scratch, each matrix a row-major array of the given
    `(rows, cols)` with zeros beyond its own sides, the matrices one after the other (one barrier pair for all, the
    tiles other threads hold published first)."""
    for x, _ in items:
        X.publish_for_loop(blk, x, why)
    S.barrier(blk, why)
    bases = []
    for x, (rows, cols) in items:
        *batch, r0, c0 = x.type.shape
        dtype, shape = x.type.dtype, (*batch, rows, cols)
        base = X.scratch(blk, dtype, math.prod(shape))
        layout = V.layout(blk, math.prod(shape))

        def one(b: Block, slot, x=x, r0=r0, c0=c0, base=base, layout=layout, shape=shape, dtype=dtype) -> None:
            pt = V.slot_pt(b, layout, slot, shape)
            *bc, i, j = V.coords(b, pt)
            inside = mo.both(mo.lt(i, mo.const(r0)), mo.lt(j, mo.const(c0)))
            ci, cj = (Binary(BinOp.MIN, c, mo.const(e - 1)) for c, e in ((i, r0), (j, c0)))   # a real element
            row = mo.add(mo.mul(bc[0], mo.const(r0)), ci) if bc else ci
            value = V.at(b, x, Pt(x.type.shape, mo.add(mo.mul(row, mo.const(c0)), cj)))
            b.emit(Store(AddPtr(base, pt.flat), mo.select(inside, value, Const(0, dtype)), V.guard(b, layout, slot),
                         loc=b.loc))

        if RL.rollable(blk, layout, [x]) == []:
            RL.slot_loop(blk, layout, one)
        else:
            for slot in range(layout.slots):
                one(blk, slot)
        bases.append(base)
    S.barrier(blk, why)
    return bases


def staged(blk: Block, d: Dot) -> list[tuple[Value, tuple[Value, ...]]]:
    """`(base, strides)` of `a` and `b` in threadgroup memory, strides per dimension (run-time values where a role's
    channel or a hoisted buffer gives them): a 2-D product's operands as the matrices' are staged
    (`mma.stage_operands`), a batched product's published row-major."""
    if len(d.type.shape) == 2:
        out = []
        for base, ld in MM.stage_operands(blk, d.a, d.b, d):
            out.append((base, (mo.const(ld) if isinstance(ld, int) else ld, mo.const(1))))
        return out
    items = [(x, row_major_strides(x.type.shape)) for x in (d.a, d.b)]
    bases = X.publish(blk, items, d)
    return [(base, tuple(mo.const(s) for s in strides)) for base, (_, strides) in zip(bases, items)]


def fma_dot(blk: Block, d: Dot, acc: Value | None) -> Regs:
    """`acc + d` computed by each thread for the elements it holds (see the module docstring)."""
    if not d.a.type.dtype.is_float:
        raise blk.refuse(f"dot on {d.a.type.dtype} tiles is not supported: convert the operands to a float type", d)
    shape = d.type.shape
    k = d.a.type.shape[-1]
    (sa, astr), (sb, bstr) = staged(blk, d)
    layout = V.layout(blk, d.type.size)
    rows, cols = [], []   # per slot: where its row of `a` starts, where its column of `b` starts
    init = []
    for slot in range(layout.slots):
        pt = V.slot_pt(blk, layout, slot, shape)
        *batch, i, j = V.coords(blk, pt)
        arow, bcol = mo.mul(i, astr[-2]), mo.mul(j, bstr[-1])
        if batch:
            arow = mo.add(mo.mul(batch[0], astr[0]), arow)
            bcol = mo.add(mo.mul(batch[0], bstr[0]), bcol)
        rows.append(blk.let(arow, "arow"))
        cols.append(blk.let(bcol, "bcol"))
        init.append(cast(V.at(blk, acc, pt), F32) if acc is not None else mo.const(0, F32))
    kk = Var(blk.fresh("kk"), TileType(DType.I32))
    carried = [Var(blk.fresh("sum"), TileType(F32)) for _ in init]
    inner = blk.body()
    step = []
    brow = inner.let(mo.mul(kk, bstr[-2]), "brow")
    for r, c, s in zip(rows, cols, carried):
        x = cast(inner.let(Load(AddPtr(sa, mo.add(r, mo.mul(kk, astr[-1])))), "fa"), F32)
        y = cast(inner.let(Load(AddPtr(sb, mo.add(brow, c))), "fb"), F32)
        step.append(inner.let(Fma(x, y, s), "sum"))
    results = [Var(blk.fresh("sum"), TileType(F32)) for _ in init]
    blk.emit(For(kk, mo.const(0), mo.const(k), mo.const(1), carried, init, inner.out, step, results, loc=blk.loc))
    return Regs(layout, tuple(results))


__all__ = ["fma_dot", "padded_mma", "product", "publish_padded", "staged"]
