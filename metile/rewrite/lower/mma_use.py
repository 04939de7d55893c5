"""What becomes of a `dot` result held in simdgroup matrices.

It stays in matrices while it only feeds further `dot` accumulation, also through element-wise arithmetic
(`acc * alpha[:, None]` before the next `dot` onto it: each lane computes its own elements, `MatrixOf`, and a loop
carries such an accumulator in matrices). An unmasked store of it through a row-major address grid is
`simdgroup_store` straight to device memory (`mma_store`); any other store that reads it element by element (a
cast, a masked store, an element-wise epilogue) reads each lane's own elements of the matrices
(`fragment_store`; by rows and columns where the addresses allow it, `metile.rewrite.lower.lines`); a row
reduction of it folds each lane's elements and shuffles (`mma_row_reduce`); any other use copies it to registers
through scratch (`mma_to_regs`).
"""

from __future__ import annotations

import functools

import attrs

from metile.ir.metal import MatrixStore
from metile.ir.node import Node, children
from metile.ir.ops import BinOp, BuiltinKind, CmpOp
from metile.ir.stmts import If, Store
from metile.ir.tile import (
    ArgReduce,
    Broadcast,
    Dot,
    ExpandDims,
    Join,
    Permute,
    Reduce,
    Reshape,
    Scan,
    Take,
    Transpose,
)
from metile.ir.types import DType
from metile.ir.values import AddPtr, Binary, Compare, Load, SimdShuffleXor, Value, Var
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import MmaGeometry
from metile.rewrite.layouts import dot_accumulation as dot_acc
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import lines as LN
from metile.rewrite.lower import mma as MM
from metile.rewrite.lower import statements as S
from metile.rewrite.lower import values as V
from metile.rewrite.lower.ops import acc_dtype, cast, combine, sg_in, sg_index
from metile.rewrite.lower.state import Block, Lazy, Mma, Pt, Regs
from metile.rewrite.staging import lane_column_bits, lane_rows_cols, mma_row_stride, mma_scratch_offset


@attrs.frozen(cache_hash=True)   # hashed in the memo key of every element read through it
class Fragments:
    """The key of a point read from the simdgroup matrices of `geom` by the lane holding it: slot `2 p + e` is
    element `e` of this lane in piece `p` (`Extract` of the matrix)."""

    geom: MmaGeometry


def mma_in_scratch(blk: Block, rep: Mma, why: Node) -> Value:
    """The base of `rep` copied to scratch, once per statement: row-major `[m, n]` with rows `mma_row_stride`
    apart (read element `flat` at `mma_scratch_offset`)."""
    found = blk.kernel.published_base(rep)
    if found is not None:
        return found
    geom = rep.geom
    ld = mma_row_stride(geom.n)
    S.barrier(blk, why)
    base = X.scratch(blk, DType.F32, geom.m * ld)
    emit_owned(blk, geom, [MatrixStore(mat, AddPtr(base, MM.piece_offset(blk, geom, p, mo.const(ld))), mo.const(ld),
                                       loc=blk.loc) for p, mat in enumerate(rep.mats)])
    S.barrier(blk, why)
    blk.kernel.publish(rep, base)
    return base


def held_mma(blk: Block, v: Value) -> Mma | None:
    """The simdgroup matrices holding `v`, when it is (or names) a `dot` result kept in them."""
    rep, v = X.named_rep(blk, v)
    if rep is not None:
        return rep if isinstance(rep, Mma) else None
    rep = X.heavy_rep(blk, v) if isinstance(v, Dot) or dot_acc(v) else None
    return rep if isinstance(rep, Mma) else None   # a product computed per thread is in registers


def mma_store(blk: Block, ptr: Value, value: Value) -> bool:
    """Store the tile `value` through the pointer tile `ptr` straight from the simdgroup matrices holding it,
    each simdgroup its own pieces (no scratch, no barrier); False, having emitted nothing, unless `value` is
    held in matrices (f32, as a `dot` result is: a store to another dtype converts it first, so its value is
    not held) and `ptr` is the same for the whole program and row-major with unit column stride
    (`metile.rewrite.axis_info.strides`), and every thread runs the store (a matrix store is a simdgroup
    collective). The caller checks that the store is unmasked."""
    rep = held_mma(blk, value)
    if rep is None or blk.divergent is not None:
        return False
    found = V.strides_of(blk, ptr)
    if found is None or found[1] != 1 or S.is_varying(blk, ptr):
        return False
    geom = rep.geom
    row = found[0]
    ld = mo.const(row) if isinstance(row, int) else mo.mul(V.scalar(blk, row[1]), mo.const(row[0]))
    origin = V.at(blk, ptr, Pt(ptr.type.shape, mo.const(0)))
    starts, cols = MM.piece_starts(blk, geom)   # each row of pieces from a pointer to its first element
    rows = [blk.let(AddPtr(origin, mo.mul(r, ld)), "rows") for r in starts]
    emit_owned(blk, geom, [MatrixStore(mat, AddPtr(rows[p // geom.per_n], cols[p % geom.per_n]), ld, loc=blk.loc)
                           for p, mat in enumerate(rep.mats)])
    return True


def fragment_store(blk: Block, cls, ptr: Value, value: Value, mask: Value | None) -> bool:
    """Store `value` through `ptr` where `mask` straight from the matrices holding a `dot` result that `value`
    reads: each lane stores its own two elements of each of its simdgroup's pieces (no copy of the result
    through scratch). False, having emitted nothing, unless the three read one held result of the store's
    shape and otherwise only values that can be read at any element (`pointwise_mma`)."""
    shape = ptr.type.shape
    rep = pointwise_mma(blk, (ptr, value, mask), shape)
    if rep is None:
        return False
    inner = blk.body()
    if not LN.store_by_lines(inner, cls, rep, ptr, value, mask):
        for pts in fragment_points(inner, rep.geom, shape):
            for pt in pts:
                inner.emit(cls(V.at(inner, ptr, pt), V.at(inner, value, pt), V.at(inner, mask, pt), loc=inner.loc))
    body = inner.out
    emit_owned(blk, rep.geom, body)
    return True


def publish_fragments(blk: Block, v: Value, geom: MmaGeometry, base: Value, strides: tuple[int, ...]) -> None:
    """Write the `[m, n]` tile `v`, read element by element from matrices of `geom` (`pointwise_mma`), to
    threadgroup memory at `base` with `strides`, each lane its own elements of its simdgroup's pieces."""
    inner = blk.body()
    for pts in fragment_points(inner, geom, v.type.shape):
        for pt in pts:
            r, c = V.coords(inner, pt)
            off = mo.add(mo.mul(r, mo.const(strides[0])), mo.mul(c, mo.const(strides[1])))
            inner.emit(Store(AddPtr(base, off), V.at(inner, v, pt), loc=inner.loc))
    body = inner.out
    emit_owned(blk, geom, body)


def mma_row_reduce(blk: Block, n: Reduce) -> Regs | None:
    """The reduction along its rows of a tile read element by element from a `dot` result held in matrices
    (`pointwise_mma`), without copying the tile: each lane folds its elements of each row it holds, two
    shuffles fold the four lanes sharing a row, and the simdgroups sharing rows meet in scratch (one value per
    row and simdgroup), from where each thread reads the rows it holds. None where that does not apply."""
    x = n.x
    held = pointwise_mma(blk, (x,), x.type.shape)
    if held is None or blk.divergent is not None or blk.group.role is not None:
        return None
    geom = held.geom
    if (geom.first_sg, geom.sg_m * geom.sg_n) != (blk.group.first_sg, blk.group.sgs):
        return None
    S.collective(blk, n)
    adt = acc_dtype(x.type.dtype)
    lane = mo.builtin(BuiltinKind.THREAD_INDEX_IN_SIMDGROUP)
    inner = blk.nested()
    points = fragment_points(inner, geom, x.type.shape)
    rows = []
    for i in range(geom.per_m):
        acc: Value | None = None
        for j in range(geom.per_n):
            for pt in points[i * geom.per_n + j]:
                v = cast(V.at(inner, x, pt), adt)
                acc = v if acc is None else combine(n.op, acc, v)
        for mask in lane_column_bits():   # the lanes holding the other columns of this lane's rows
            acc = combine(n.op, acc, inner.let(SimdShuffleXor(acc, mo.const(mask)), "sh"))
        rows.append((inner.let(acc, "row"), V.coords(inner, points[i * geom.per_n][0])[0]))
    S.barrier(blk, n)
    base = X.scratch(blk, adt, geom.m * geom.sg_n)
    first = Compare(CmpOp.EQ, Binary(BinOp.AND, lane, mo.const(sum(lane_column_bits()))), mo.const(0))   # column 0
    col = mo.mod(sg_index(geom.first_sg), geom.sg_n)
    for value, row in rows:
        blk.emit(Store(AddPtr(base, mo.add(mo.mul(row, mo.const(geom.sg_n)), col)), value, first, loc=blk.loc))
    S.barrier(blk, n)
    layout = V.layout(blk, geom.m)
    regs = []
    for slot in range(layout.slots):
        row = V.slot_pt(blk, layout, slot, (geom.m,)).flat
        acc = None
        for j in range(geom.sg_n):
            v = blk.let(Load(AddPtr(base, mo.add(mo.mul(row, mo.const(geom.sg_n)), mo.const(j)))), "part")
            acc = v if acc is None else combine(n.op, acc, v)
        regs.append(blk.let(cast(acc, n.type.dtype), "red"))
    return Regs(layout, tuple(regs))


def fragment_points(blk: Block, geom: MmaGeometry, shape: tuple[int, ...], coords=None) -> list[tuple[Pt, Pt]]:
    """For each of this simdgroup's pieces of `geom`, the points of the tile (of `shape`, `[m, n]` elements)
    that this lane holds as its elements 0 and 1, keyed to be read from the matrices (`Fragments`); `coords`:
    the lane's `piece_coords`, when already made."""
    frag = Fragments(geom)
    rows, cols = coords or piece_coords(blk, geom)
    out = []
    for p in range(geom.pieces):
        i, j = divmod(p, geom.per_n)
        r, c = rows[i], cols[j]
        row = mo.mul(r, mo.const(geom.n))
        out.append(tuple(Pt(shape, mo.add(row, ce), (frag, 2 * p + e), (r, ce))
                         for e, ce in ((0, c), (1, mo.add(c, mo.const(1))))))
    return out


@functools.cache
def lane_coords() -> tuple[Value, Value]:
    """The row and the column of element 0 that this lane holds in an 8x8 matrix (`lane_rows_cols`), as pure
    expressions of its index: the same nodes for every kernel, built once."""
    rows, cols = lane_rows_cols()
    lane = mo.builtin(BuiltinKind.THREAD_INDEX_IN_SIMDGROUP)
    return mo.apply_layout(rows, lane), mo.apply_layout(cols, lane)


def piece_coords(blk: Block, geom: MmaGeometry) -> tuple[list[Value], list[Value]]:
    """The row this lane holds in each row of this simdgroup's pieces of `geom`, and the column of its element 0
    in each column of them (element 1 is the next)."""
    sm, sn = MM.simdgroup_coords(blk, geom)
    row, col = lane_coords()
    row0, col0 = blk.let(row, "fr"), blk.let(col, "fc")
    return ([mo.add(sm, mo.add(row0, mo.const(8 * i))) for i in range(geom.per_m)],
            [mo.add(sn, mo.add(col0, mo.const(8 * j))) for j in range(geom.per_n)])


def pointwise_mma(blk: Block, roots, shape: tuple[int, ...]) -> Mma | None:
    """A held `dot` result of `shape` that `roots` read, element for element (not through a transpose, reshape or
    broadcast), when the other held results they read so are of the same geometry (each lane reads its elements
    of all of them at the same points: `p * (dp - d)` of two products) and everything else they read can be read
    at any element: pure expressions,
    scalars, loads evaluated per element, and tiles held in registers (a row of maxima, a loaded bias),
    gathered through scratch; those only where every thread of the program runs this code and the result's
    pieces span all of its simdgroups, since a gather needs barriers. Else None."""
    if len(shape) != 2:
        return None
    found: Mma | None = None
    regs = False   # whether a tile held in registers is read too (gathered through scratch, behind barriers)
    todo = [(v, False) for v in roots if v is not None]
    seen: set[int] = set()   # 2 * id(value) + moved (the values are alive in `roots`)
    facts, tiles = blk.facts.scan.facts, blk.facts.tile_names
    while todo:
        v, moved = todo.pop()
        item = id(v) << 1 | moved
        if item in seen or not v.type.shape or reads_no_tile(facts, tiles, v):
            continue
        seen.add(item)
        if isinstance(v, Var):
            rep = blk.lookup(v.name)
            if isinstance(rep, Lazy):
                todo.append((rep.expr, moved))
                continue
            if isinstance(rep, Regs):
                regs = True
                continue
            if not isinstance(rep, Mma):
                return None
        elif (isinstance(v, Dot) or dot_acc(v)) and isinstance(rep := X.heavy_rep(blk, v), Mma):
            pass
        elif isinstance(v, (Reduce, ArgReduce, Scan, Dot)) or dot_acc(v):   # held in registers once computed
            regs = True
            continue
        else:
            moved = moved or isinstance(v, (Transpose, Reshape, ExpandDims, Broadcast, Permute, Join, Take))
            todo += [(c, moved) for c in children(v) if isinstance(c, Value)]
            continue
        if moved or tuple(shape) != (rep.geom.m, rep.geom.n) or found is not None and rep.geom != found.geom:
            return None
        found = rep
    if found is not None and regs and (blk.divergent is not None or blk.group.role is not None
                                       or (found.geom.first_sg, found.geom.sg_m * found.geom.sg_n)
                                       != (blk.group.first_sg, blk.group.sgs)):
        return None   # the gathers' barriers would be under control flow some threads skip
    return found


def reads_no_tile(facts: dict, tiles: frozenset[str], v: Value) -> bool:
    """Whether the kernel's scan (its `facts`) shows that `v` reads none of the named tiles `tiles` and holds no
    reduction, scan, gather or product: index arithmetic of scalars, which `pointwise_mma` need not enter (nothing in
    it changes what it finds)."""
    f = facts.get(id(v))
    return f is not None and not f[2] and f[1].isdisjoint(tiles)


def emit_owned(blk: Block, geom: MmaGeometry, stmts: list) -> None:
    """Emit `stmts` (simdgroup matrix collectives) on the simdgroups owning `geom`'s pieces only."""
    owners = geom.sg_m * geom.sg_n
    if (geom.first_sg, owners) != (blk.group.first_sg, blk.group.sgs):
        blk.emit(If(sg_in(geom.first_sg, owners), stmts, loc=blk.loc))
    else:
        for st in stmts:
            blk.emit(st)


def mma_to_regs(blk: Block, rep: Mma, why: Node) -> Regs:
    key = ("regs", rep)
    found = blk.memo_get(key)
    if found is not None:
        return found
    geom = rep.geom
    base = mma_in_scratch(blk, rep, why)
    layout = V.layout(blk, geom.m * geom.n)
    regs = []
    for slot in range(layout.slots):
        pt = V.slot_pt(blk, layout, slot, (geom.m, geom.n))
        regs.append(blk.let(Load(AddPtr(base, mma_scratch_offset(pt.flat, geom.n))), "c"))
    found = Regs(layout, tuple(regs))
    blk.memo_put(key, found)
    return found


__all__ = ["Fragments", "emit_owned", "fragment_points", "fragment_store", "held_mma", "mma_in_scratch",
           "mma_row_reduce", "mma_store", "mma_to_regs", "piece_coords", "pointwise_mma", "publish_fragments",
           "reads_no_tile"]
