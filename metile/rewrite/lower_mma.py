"""`dot` on simdgroup matrices, for `metile.rewrite.lower_tiles` (mixed into its `Lowering`).

`a` and `b` are staged in threadgroup memory (rows padded as the `Dot`'s `MmaPlan` says; in a pipelined loop,
in that loop's ring of buffers, `Ring`), and each simdgroup multiplies-accumulates its 8x8 pieces of the
result (`MmaGeometry`) with `simdgroup_load` / `simdgroup_multiply_accumulate`, one 8-wide step of k per
iteration of a loop (with the next step's operands preloaded, and the products in serpentine order, when the
plan says so). The result stays in simdgroup matrices while it only feeds further `dot` accumulation, also
through element-wise arithmetic (`acc * alpha[:, None]` before the next `dot` onto it: each lane computes its
own elements, `MatrixOf`, and a loop carries such an accumulator in matrices). An unmasked store of it through
a row-major address grid is `simdgroup_store` straight to device memory (`mma_store`); any other store that
reads it element by element (a cast, a masked store, an element-wise epilogue) reads each lane's own elements
of the matrices (`fragment_store`); any other use copies it to registers through scratch.
"""

from __future__ import annotations

import attrs

from metile.ir.metal import Extract, MatrixFill, MatrixLoad, MatrixMultiplyAccumulate, MatrixOf, MatrixStore
from metile.ir.node import Node, children
from metile.ir.ops import BinOp, BuiltinKind, CmpOp
from metile.ir.simt import RingBuffer
from metile.ir.stmts import For, If, Store
from metile.ir.tile import ArgReduce, Broadcast, Dot, ExpandDims, Full, MmaPlan, Reduce, Reshape, Scan, Transpose
from metile.ir.types import DType, TileType
from metile.ir.values import AddPtr, Binary, Compare, Const, Load, SimdShuffleXor, Value, Var, Where
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import MmaGeometry, k_slices, mma_arrangement
from metile.rewrite.lower_collective import (
    Group,
    Lazy,
    Mma,
    Pt,
    Regs,
    acc_dtype,
    cast,
    combine,
    dot_acc,
    sg_in,
    sg_index,
)
from metile.rewrite.staging import lane_rows_cols, mma_row_stride, mma_scratch_offset

_PLAIN = MmaPlan()


class Matrices:
    """Mixed into `metile.rewrite.lower_tiles.Lowering` (which provides `let`, `emit`, `publish`, `barrier`...)."""

    def how(self, d: Dot) -> MmaPlan:
        """How the optimisation passes chose to compute `d` (the kernel's schedule; the plain way by default)."""
        return self.k.schedule.dots.get(d, _PLAIN)

    def mma_geometry(self, d: Dot, group: Group | None = None) -> MmaGeometry | None:
        """How `group`'s simdgroups (default: the current group) share the 8x8 pieces of `d`: the geometry of its
        result (with k split, that of the simdgroups of slice 0, which own the sum), arranged as `assign_layouts`
        recorded when that arrangement has as many simdgroups or a divisor of them, else as `mma_arrangement` finds
        (with replicas where the pieces are fewer than the simdgroups)."""
        group = group or self.group
        (m, k), n = d.a.type.shape, d.b.type.shape[1]
        if m % 8 or n % 8 or k % 8 or d.a.type.dtype not in (DType.F32, DType.F16, DType.BF16):
            return None
        how = self.how(d)
        sgs = group.sgs // k_slices(m, n, k, how.split, group.sgs)
        chosen = how.simdgroups   # assign_layouts' arrangement, where it is one of these simdgroups (or a divisor)
        if chosen and sgs % (chosen[0] * chosen[1]) == 0 and (m // 8) % chosen[0] == 0 and (n // 8) % chosen[1] == 0:
            found = (*chosen, sgs // (chosen[0] * chosen[1]))
        else:
            found = mma_arrangement(m, n, sgs)
        if found is None:
            return None
        sg_m, sg_n, replicas = found
        return MmaGeometry(m, n, sg_m, sg_n, group.first_sg, replicas=replicas)

    def mma(self, d: Dot, acc: Value | None, where: Value) -> Mma:
        a, b = d.a, d.b
        self.collective(d)
        geom = self.mma_geometry(d)
        if geom is None:
            (m, k), n = a.type.shape, b.type.shape[1]
            if a.type.dtype not in (DType.F32, DType.F16, DType.BF16):
                raise self.refuse(f"dot on {a.type.dtype} tiles is not supported: simdgroup matrices hold f32, f16 "
                                  "and bf16 (cast the operands to a float type)", d)
            raise self.refuse(f"dot of [{m}, {k}] x [{k}, {n}]: every dimension must be a multiple of 8, and the "
                              f"8x8 pieces must split evenly among the program's {self.group.sgs} simdgroup(s)", d)
        k = a.type.shape[1]
        split = k_slices(geom.m, geom.n, k, self.how(d).split, self.group.sgs)
        if split > 1:
            return self.split_products(d, acc, geom, attrs.evolve(geom, split=split))
        mats = list(self.as_mma(acc, geom).mats) if acc is not None else None
        staged = self.stage_operands(a, b, d)
        if mats is None:
            mats = [self.let(MatrixFill(Const(0.0, DType.F32)), "acc")] * geom.pieces  # values: one serves all
        return Mma(geom, tuple(self.k_loop(geom, d, staged, mats, mo.const(0), k)))

    def split_products(self, d: Dot, acc: Value | None, owned: MmaGeometry, geom: MmaGeometry) -> Mma:
        """`acc + d` with k cut into `geom.split` slices: the simdgroups of slice s multiply its part of k (slice 0
        onto `acc`, the others onto zeros), the other slices write their partial sums to scratch, and slice 0 adds
        them. The result is held by slice 0's simdgroups (`owned`, the geometry without split). Every simdgroup
        reads `acc` at its slice-0 twin's pieces, so no read falls outside the tile."""
        owners = geom.sg_m * geom.sg_n
        part = d.a.type.shape[1] // geom.split
        sl = self.let(mo.div(sg_index(geom.first_sg), owners), "slice")
        first = Compare(CmpOp.EQ, sl, mo.const(0))
        held = None if acc is None else self.held_mma(acc)
        mats = None if acc is None else (held if held is not None and held.geom == owned else
                                          self.as_mma(acc, geom)).mats
        staged = self.stage_operands(d.a, d.b, d)
        if mats is None:
            init = [self.let(MatrixFill(Const(0.0, DType.F32)), "acc")] * geom.pieces
        else:   # slice 0 starts from the accumulators, the others from zeros (each lane its own elements)
            init = [self.let(MatrixOf(*(Where(first, Extract(m, e), Const(0.0, DType.F32)) for e in (0, 1))), "acc")
                    for m in mats]
        partial = self.k_loop(geom, d, staged, init, mo.mul(sl, mo.const(part)), part)
        self.barrier(d)
        base = self.scratch(DType.F32, (geom.split - 1) * geom.m * geom.n)
        size = geom.m * geom.n
        out_of = AddPtr(base, mo.mul(Binary(BinOp.SUB, sl, mo.const(1)), mo.const(size)))
        self.emit(If(Compare(CmpOp.GE, sl, mo.const(1)),
                     [MatrixStore(m, AddPtr(out_of, self.piece_offset(geom, p)), mo.const(geom.n), loc=self.loc)
                      for p, m in enumerate(partial)], loc=self.loc))
        self.barrier(d)
        saved, self.out = self.out, []
        with self.nested():
            sums = []
            for p, total in enumerate(partial):
                for s in range(1, geom.split):
                    at = mo.add(mo.const((s - 1) * size), self.piece_offset(geom, p))
                    other = self.let(MatrixLoad(AddPtr(base, at), mo.const(geom.n)), "part")
                    total = self.let(MatrixOf(*(Binary(BinOp.ADD, Extract(total, e), Extract(other, e))
                                                for e in (0, 1))), "acc")
                sums.append(total)
        body, self.out = self.out, saved
        results = [Var(self.fresh("acc"), m.type) for m in partial]
        self.emit(If(first, body, [], sums, list(partial), results, loc=self.loc))
        return Mma(owned, tuple(results))

    def k_loop(self, geom: MmaGeometry, d: Dot, staged, mats: list[Value], start: Value, k: int) -> list[Value]:
        """The accumulators `mats` after the products of the `k` columns of `a` (rows of `b`) from `start`."""
        if k == 8:
            return self.mma_products(geom, d, self.fragments(geom, staged, start), mats)
        # One 8-wide step of k per iteration of a run-time loop, the pieces carried in matrices: the same
        # code as unrolling (Metal unrolls a constant trip count), at 1/steps of the size. Preloading carries
        # the step's operands too, loaded one iteration ahead: the loop runs the first steps - 1 steps, and
        # the last step's products follow it.
        preload = self.how(d).preload
        first = self.fragments(geom, staged, start) if preload else []
        kk = Var(self.fresh("kk"), TileType(DType.I32))
        carried = [Var(self.fresh("acc"), m.type) for m in mats]
        held = [Var(self.fresh("frag"), f.type) for f in first]
        saved, self.out = self.out, []
        with self.nested():
            if preload:
                ahead = self.fragments(geom, staged, mo.add(kk, mo.const(8)))
                yields = self.mma_products(geom, d, held, carried) + ahead
            else:
                yields = self.mma_products(geom, d, self.fragments(geom, staged, kk), carried)
        body, self.out = self.out, saved
        results = [Var(self.fresh("acc"), m.type) for m in mats]
        last = [Var(self.fresh("frag"), f.type) for f in first]
        stop = mo.add(start, mo.const(k - 8 if preload else k))
        self.emit(For(kk, start, stop, mo.const(8), carried + held, mats + first, body, yields, results + last,
                      loc=self.loc))
        if preload:
            results = self.mma_products(geom, d, last, results)
        return results

    def fragments(self, geom: MmaGeometry, staged: list[tuple[Value, int]], kk: Value) -> list[Value]:
        """This simdgroup's 8x8 operands of the step of k starting at column `kk` of `a` (row of `b`): its rows of
        `a`, then its columns of `b`."""
        (sa, lda), (sb, ldb) = staged
        lda, ldb = (mo.const(ld) if isinstance(ld, int) else ld for ld in (lda, ldb))
        sm, sn = self.simdgroup_coords(geom)
        arows = [self.let(MatrixLoad(AddPtr(sa, mo.add(mo.mul(mo.add(sm, mo.const(i * 8)), lda), kk)), lda), "ma")
                 for i in range(geom.per_m)]
        bcols = [self.let(MatrixLoad(AddPtr(sb, mo.add(mo.mul(kk, ldb), mo.add(sn, mo.const(j * 8)))), ldb), "mb")
                 for j in range(geom.per_n)]
        return arows + bcols

    def mma_products(self, geom: MmaGeometry, d: Dot, frags: list[Value], mats: list[Value]) -> list[Value]:
        """The accumulators `mats` (one per piece) after the products of one step, given its `fragments`, in
        row order or, when its plan's `serpentine`, with every other row of pieces walked backwards."""
        arows, bcols = frags[:geom.per_m], frags[geom.per_m:]
        out = list(mats)
        for i in range(geom.per_m):
            cols = range(geom.per_n)
            for j in (reversed(cols) if self.how(d).serpentine and i % 2 else cols):
                p = i * geom.per_n + j
                out[p] = self.let(MatrixMultiplyAccumulate(arows[i], bcols[j], mats[p]), "acc")
        return out

    def stage_operands(self, a: Value, b: Value, d: Dot) -> list[tuple[Value, int]]:
        """`(base, row stride)` of `a` and `b` in threadgroup memory: a role's channel as it is, anything
        else published to scratch with rows padded as its plan's `pad` says (one barrier pair for both), in the
        loop's ring of buffers when the enclosing loop has one; an operand its plan's `hoist` marks, in a loop's own
        body, once before the loop, in a buffer of its own."""
        out: list[tuple[Value, int] | None] = [None, None]
        staged: dict[bool, list[tuple[int, Value, int]]] = {False: [], True: []}
        how = self.how(d)
        for i, x in enumerate((a, b)):
            ch = self.channel_of(x)
            direct = self.in_device(x) if how.direct[i] else None
            if ch is not None:
                out[i] = (ch.base, x.type.shape[1])
            elif direct is not None:
                out[i] = direct
            else:
                staged[how.hoist[i] and self.preheader is not None].append((i, x, x.type.shape[1] + how.pad[i]))
        for once, items in staged.items():
            if not items:
                continue
            todo = [(x, (ld, 1)) for _, x, ld in items]
            bases = self.before_loop(lambda todo=todo: self.publish(todo, d, own=True)) if once else \
                self.publish(todo, d, ring=self.ring)
            for (i, _, ld), base in zip(items, bases):
                out[i] = (base, ld)
        return out

    def in_device(self, x: Value) -> tuple[Value, Value] | None:
        """`(address of element (0, 0), row stride)` of the operand `x` where it can be read straight from device
        memory: a tile load left in memory for the product (not in registers), with no mask, row-major with unit
        column stride, at addresses every thread agrees on; else None."""
        rep, load = self.named_rep(x)
        if rep is not None or not isinstance(load, Load) or load.mask is not None or self.is_varying(load.ptr):
            return None
        found = self.strides_of(load.ptr)
        if found is None or found[1] != 1:
            return None
        row = found[0]
        ld = mo.const(row) if isinstance(row, int) else mo.mul(self.scalar(row[1]), mo.const(row[0]))
        return self.at(load.ptr, Pt(load.ptr.type.shape, mo.const(0))), ld

    def before_loop(self, make):
        """`make()`, emitting into the statements that run before the loop whose body is being lowered, with a
        statement's scratch state of their own."""
        saved = (self.out, self.use, self.parts, self.published)
        self.uses += 1
        self.out, self.use, self.parts, self.published = self.preheader, self.uses, 0, {}
        try:
            return make()
        finally:
            self.out, self.use, self.parts, self.published = saved

    def simdgroup_coords(self, geom: MmaGeometry) -> tuple[Value, Value]:
        """The first row and column (in elements) of this simdgroup's block of pieces (pure expressions of
        builtins, built once per geometry so that every piece shares the same nodes)."""
        found = self.sg_coords.get(geom)
        if found is None:
            sg = sg_index(geom.first_sg)
            if geom.split > 1 or geom.replicas > 1:   # the simdgroups of every slice of k, or replicas, hold the
                sg = mo.mod(sg, geom.sg_m * geom.sg_n)  # same pieces
            sm, sn = mo.apply_layout(geom.first_row, sg), mo.apply_layout(geom.first_col, sg)
            found = self.sg_coords[geom] = (sm, sn)
        return found

    def piece_offset(self, geom: MmaGeometry, piece: int, ld: Value | None = None) -> Value:
        """Where this simdgroup's `piece` starts in a row-major `[m, n]` array with row stride `ld` (default `n`)."""
        sm, sn = self.simdgroup_coords(geom)
        i, j = divmod(piece, geom.per_n)
        ld = mo.const(geom.n) if ld is None else ld
        return mo.add(mo.mul(mo.add(sm, mo.const(8 * i)), ld), mo.add(sn, mo.const(8 * j)))

    def as_mma(self, v: Value, geom: MmaGeometry) -> Mma:
        """`v` (an `[m, n]` f32 tile) as simdgroup matrices of `geom`."""
        rep, v = self.named_rep(v)
        if isinstance(rep, Mma) and rep.geom == geom:
            return rep
        if dot_acc(v) or isinstance(v, Dot):
            rep = self.heavy_rep(v)
            if rep.geom == geom:
                return rep
        fill = _constant_fill(v)
        if fill is not None:
            return Mma(geom, (self.let(MatrixFill(cast(fill, DType.F32)), "acc"),) * geom.pieces)
        held = self._pointwise_mma((v,), (geom.m, geom.n))
        if held is not None and held.geom == geom:   # element-wise on matrices of the same pieces: lane by lane
            mats = []
            with self.nested():
                for pts in self.fragment_points(geom, v.type.shape):
                    x, y = (cast(self.at(v, pt), DType.F32) for pt in pts)
                    mats.append(self.let(MatrixOf(x, y), "acc"))
            return Mma(geom, tuple(mats))
        (base,) = self.publish([(v, (geom.n, 1))], v)
        return Mma(geom, tuple(self.let(MatrixLoad(AddPtr(base, self.piece_offset(geom, p)), mo.const(geom.n)), "acc")
                               for p in range(geom.pieces)))

    def mma_in_scratch(self, rep: Mma, why: Node) -> Value:
        """The base of `rep` copied to scratch, once per statement: row-major `[m, n]` with rows `mma_row_stride`
        apart (read element `flat` at `mma_scratch_offset`)."""
        found = self.published.get(id(rep))
        if found is not None:
            return found[0]
        geom = rep.geom
        ld = mma_row_stride(geom.n)
        self.barrier(why)
        base = self.scratch(DType.F32, geom.m * ld)
        self.emit_owned(geom, [MatrixStore(mat, AddPtr(base, self.piece_offset(geom, p, mo.const(ld))), mo.const(ld),
                                           loc=self.loc) for p, mat in enumerate(rep.mats)])
        self.barrier(why)
        self.published[id(rep)] = (base, ())
        return base

    def held_mma(self, v: Value) -> Mma | None:
        """The simdgroup matrices holding `v`, when it is (or names) a `dot` result kept in them."""
        rep, v = self.named_rep(v)
        if rep is not None:
            return rep if isinstance(rep, Mma) else None
        return self.heavy_rep(v) if isinstance(v, Dot) or dot_acc(v) else None

    def mma_store(self, ptr: Value, value: Value) -> bool:
        """Store the tile `value` through the pointer tile `ptr` straight from the simdgroup matrices holding it,
        each simdgroup its own pieces (no scratch, no barrier); False, having emitted nothing, unless `value` is
        held in matrices (f32, as a `dot` result is: a store to another dtype converts it first, so its value is
        not held) and `ptr` is the same for the whole program and row-major with unit column stride
        (`metile.rewrite.axis_info.strides`), and every thread runs the store (a matrix store is a simdgroup
        collective). The caller checks that the store is unmasked."""
        rep = self.held_mma(value)
        if rep is None or self.divergent is not None:
            return False
        found = self.strides_of(ptr)
        if found is None or found[1] != 1 or self.is_varying(ptr):
            return False
        geom = rep.geom
        row = found[0]
        ld = mo.const(row) if isinstance(row, int) else mo.mul(self.scalar(row[1]), mo.const(row[0]))
        origin = self.at(ptr, Pt(ptr.type.shape, mo.const(0)))
        self.emit_owned(geom, [MatrixStore(mat, AddPtr(origin, self.piece_offset(geom, p, ld)), ld, loc=self.loc)
                               for p, mat in enumerate(rep.mats)])
        return True

    def fragment_store(self, cls, ptr: Value, value: Value, mask: Value | None) -> bool:
        """Store `value` through `ptr` where `mask` straight from the matrices holding a `dot` result that `value`
        reads: each lane stores its own two elements of each of its simdgroup's pieces (no copy of the result
        through scratch). False, having emitted nothing, unless the three read one held result of the store's
        shape and otherwise only values that can be read at any element (`_pointwise_mma`)."""
        shape = ptr.type.shape
        rep = self._pointwise_mma((ptr, value, mask), shape)
        if rep is None:
            return False
        saved, self.out = self.out, []
        with self.nested():
            for pts in self.fragment_points(rep.geom, shape):
                for pt in pts:
                    self.emit(cls(self.at(ptr, pt), self.at(value, pt), self.at(mask, pt), loc=self.loc))
        body, self.out = self.out, saved
        self.emit_owned(rep.geom, body)
        return True

    def publish_fragments(self, v: Value, geom: MmaGeometry, base: Value, strides: tuple[int, ...]) -> None:
        """Write the `[m, n]` tile `v`, read element by element from matrices of `geom` (`_pointwise_mma`), to
        threadgroup memory at `base` with `strides`, each lane its own elements of its simdgroup's pieces."""
        saved, self.out = self.out, []
        with self.nested():
            for pts in self.fragment_points(geom, v.type.shape):
                for pt in pts:
                    r, c = self.coords(pt)
                    off = mo.add(mo.mul(r, mo.const(strides[0])), mo.mul(c, mo.const(strides[1])))
                    self.emit(Store(AddPtr(base, off), self.at(v, pt), loc=self.loc))
        body, self.out = self.out, saved
        self.emit_owned(geom, body)

    def mma_row_reduce(self, n: Reduce) -> Regs | None:
        """The reduction along its rows of a tile read element by element from a `dot` result held in matrices
        (`_pointwise_mma`), without copying the tile: each lane folds its elements of each row it holds, two
        shuffles fold the four lanes sharing a row, and the simdgroups sharing rows meet in scratch (one value per
        row and simdgroup), from where each thread reads the rows it holds. None where that does not apply."""
        x = n.x
        held = self._pointwise_mma((x,), x.type.shape)
        if held is None or self.divergent is not None or self.group.role is not None:
            return None
        geom = held.geom
        if (geom.first_sg, geom.sg_m * geom.sg_n) != (self.group.first_sg, self.group.sgs):
            return None
        self.collective(n)
        adt = acc_dtype(x.type.dtype)
        lane = mo.builtin(BuiltinKind.THREAD_INDEX_IN_SIMDGROUP)
        with self.nested():
            points = self.fragment_points(geom, x.type.shape)
            rows = []
            for i in range(geom.per_m):
                acc: Value | None = None
                for j in range(geom.per_n):
                    for pt in points[i * geom.per_n + j]:
                        v = cast(self.at(x, pt), adt)
                        acc = v if acc is None else combine(n.op, acc, v)
                for mask in (1, 8):   # the lanes holding the other columns of this lane's rows
                    acc = combine(n.op, acc, self.let(SimdShuffleXor(acc, mo.const(mask)), "sh"))
                rows.append((self.let(acc, "row"), self.coords(points[i * geom.per_n][0])[0]))
        self.barrier(n)
        base = self.scratch(adt, geom.m * geom.sg_n)
        first = Compare(CmpOp.EQ, Binary(BinOp.AND, lane, mo.const(9)), mo.const(0))   # column 0 of the piece
        col = mo.mod(sg_index(geom.first_sg), geom.sg_n)
        for value, row in rows:
            self.emit(Store(AddPtr(base, mo.add(mo.mul(row, mo.const(geom.sg_n)), col)), value, first, loc=self.loc))
        self.barrier(n)
        layout = self.layout(geom.m)
        regs = []
        for slot in range(layout.slots):
            row = self.slot_pt(layout, slot, (geom.m,)).flat
            acc = None
            for j in range(geom.sg_n):
                v = self.let(Load(AddPtr(base, mo.add(mo.mul(row, mo.const(geom.sg_n)), mo.const(j)))), "part")
                acc = v if acc is None else combine(n.op, acc, v)
            regs.append(self.let(cast(acc, n.type.dtype), "red"))
        return Regs(layout, tuple(regs))

    def fragment_points(self, geom: MmaGeometry, shape: tuple[int, ...]) -> list[tuple[Pt, Pt]]:
        """For each of this simdgroup's pieces of `geom`, the points of the tile (of `shape`, `[m, n]` elements)
        that this lane holds as its elements 0 and 1, keyed to be read from the matrices (`Fragments`)."""
        frag = Fragments(geom)
        rows, cols = lane_rows_cols()
        lane = mo.builtin(BuiltinKind.THREAD_INDEX_IN_SIMDGROUP)
        sm, sn = self.simdgroup_coords(geom)
        row0, col0 = self.let(mo.apply_layout(rows, lane), "fr"), self.let(mo.apply_layout(cols, lane), "fc")
        out = []
        for p in range(geom.pieces):
            i, j = divmod(p, geom.per_n)
            r = mo.add(sm, mo.add(row0, mo.const(8 * i)))
            c = mo.add(sn, mo.add(col0, mo.const(8 * j)))
            out.append(tuple(Pt(shape, mo.add(mo.mul(r, mo.const(geom.n)), mo.add(c, mo.const(e))), (frag, 2 * p + e))
                             for e in (0, 1)))
        return out

    def _pointwise_mma(self, roots, shape: tuple[int, ...]) -> Mma | None:
        """The one held `dot` result of `shape` that `roots` read, element for element (not through a transpose,
        reshape or broadcast), when everything else they read can be read at any element: pure expressions,
        scalars, loads evaluated per element, and tiles held in registers (a row of maxima, a loaded bias),
        gathered through scratch; those only where every thread of the program runs this code and the result's
        pieces span all of its simdgroups, since a gather needs barriers. Else None."""
        if len(shape) != 2:
            return None
        found: Mma | None = None
        regs = False   # whether a tile held in registers is read too (gathered through scratch, behind barriers)
        todo = [(v, False) for v in roots if v is not None]
        seen: set[tuple[Value, bool]] = set()
        while todo:
            v, moved = item = todo.pop()
            if item in seen or not v.type.shape:
                continue
            seen.add(item)
            if isinstance(v, Var):
                rep = self.scope.lookup_env(v.name)
                if isinstance(rep, Lazy):
                    todo.append((rep.expr, moved))
                    continue
                if isinstance(rep, Regs):
                    regs = True
                    continue
                if not isinstance(rep, Mma):
                    return None
            elif isinstance(v, Dot) or dot_acc(v):
                rep = self.heavy_rep(v)
            elif isinstance(v, (Reduce, ArgReduce, Scan)):   # held in registers once computed
                regs = True
                continue
            else:
                moved = moved or isinstance(v, (Transpose, Reshape, ExpandDims, Broadcast))
                todo += [(c, moved) for c in children(v) if isinstance(c, Value)]
                continue
            if moved or tuple(shape) != (rep.geom.m, rep.geom.n) or found is not None and rep != found:
                return None
            found = rep
        if found is not None and regs and (self.divergent is not None or self.group.role is not None
                                           or (found.geom.first_sg, found.geom.sg_m * found.geom.sg_n)
                                           != (self.group.first_sg, self.group.sgs)):
            return None   # the gathers' barriers would be under control flow some threads skip
        return found

    def emit_owned(self, geom: MmaGeometry, stmts: list) -> None:
        """Emit `stmts` (simdgroup matrix collectives) on the simdgroups owning `geom`'s pieces only."""
        owners = geom.sg_m * geom.sg_n
        if (geom.first_sg, owners) != (self.group.first_sg, self.group.sgs):
            self.emit(If(sg_in(geom.first_sg, owners), stmts, loc=self.loc))
        else:
            for st in stmts:
                self.emit(st)

    def mma_to_regs(self, rep: Mma, why: Node) -> Regs:
        key = ("regs", rep)
        found = self.memo.get(key)
        if found is not None:
            return found
        geom = rep.geom
        base = self.mma_in_scratch(rep, why)
        layout = self.layout(geom.m * geom.n)
        regs = []
        for slot in range(layout.slots):
            pt = self.slot_pt(layout, slot, (geom.m, geom.n))
            regs.append(self.let(Load(AddPtr(base, mma_scratch_offset(pt.flat, geom.n))), "c"))
        found = Regs(layout, tuple(regs))
        self.memo.put(key, found)
        return found


@attrs.frozen
class Fragments:
    """The key of a point read from the simdgroup matrices of `geom` by the lane holding it: slot `2 p + e` is element
    `e` of this lane in piece `p` (`Extract` of the matrix)."""

    geom: MmaGeometry


@attrs.define
class Ring:
    """The threadgroup buffers a pipelined loop (more than one in the kernel's `schedule.loops`) rotates its
    staged `dot` operands through: iteration i writes buffer `stage = i % buffers`, then the one barrier after
    the writes; a thread writing buffer b again, `buffers` iterations later, has passed a barrier that every
    thread reached after its reads of b. Each operand staged in the loop's own body (once per iteration) has its
    own region of the ring (`metile.ir.simt.RingBuffer`), apart from the scratch arena; a barrier before the loop
    protects them from the reads of an earlier run of it. `allocate_threadgroup_memory` gives the loop one buffer
    instead when the rings do not fit, with the barriers that then needs (`RingBarrier`)."""

    buffers: int
    stage: Var
    used: bool = False

    def take(self, dtype: DType, n: int, use: int, part: int, loc) -> Value:
        """This iteration's buffer of `n` elements of `dtype`, region `part` of scratch use `use`."""
        self.used = True
        return RingBuffer(self.stage, use, part, dtype, -(-n // 4) * 4, self.buffers, loc=loc)


def _constant_fill(v: Value) -> Value | None:
    match v:
        case Full(_, value):
            return value
        case Broadcast(Const() as c, _):
            return c
    return None


__all__ = ["Matrices", "Ring"]
