"""The parts of `lower_tiles` for arg-reductions (`argmax`, `argmin`) and scans (`cumsum`, `cumprod`).

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

from metile.ir.ops import BinOp, BuiltinKind, CmpOp, ReduceOp
from metile.ir.stmts import For, Store
from metile.ir.tile import ArgReduce, Scan
from metile.ir.types import DType, TileType
from metile.ir.values import AddPtr, Binary, Compare, Load, SimdReduce, Value, Var, Where
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import row_major_strides
from metile.rewrite.lower_collective import Pt, Regs, Scalar, acc_dtype, cast, combine, identity, sg_index
from metile.rewrite.plan import SIMD_WIDTH

SKIPPED = (1 << 31) - 1  # the index of an element an arg-reduction skips: larger than any real index


class Scans:
    """Mixed into `metile.rewrite.lower_tiles.Lowering` (which provides `at`, `let`, `emit`, `barrier`...)."""

    # ---- arg-reductions

    def arg_reduce(self, n: ArgReduce):
        x, op = n.x, n.op
        shape = x.type.shape
        adt = acc_dtype(x.type.dtype)
        if len(shape) == 1:
            layout = self.layout(shape[0])
            best = None
            for slot in range(layout.slots):
                pt = self.slot_pt(layout, slot, shape)
                ok = mo.both(self.at(n.valid, pt), self.guard(layout, slot))
                v, i = cast(self.at(x, pt), adt), pt.flat
                if ok is not None:
                    v, i = Where(ok, v, identity(op, adt)), Where(ok, i, mo.const(SKIPPED))
                best = (v, i) if best is None else self.better(op, best, (v, i))
            v, i = best
            return Scalar(self.let(self.first_index(self.arg_across_threads(op, v, i, n)), "arg"))
        out_shape = shape[: n.axis] + shape[n.axis + 1:]
        layout = self.layout(math.prod(out_shape))
        reps = self.reps_in(x) + (self.reps_in(n.valid) if n.valid is not None else [])
        if reps:
            self.publish_regs(list({id(r): r for r in reps}.values()), n)
        strides = row_major_strides(shape)
        regs = []
        for slot in range(layout.slots):
            cs = self.coords(self.slot_pt(layout, slot, out_shape))
            base: Value = mo.const(0)
            for c, s in zip(cs, strides[: n.axis] + strides[n.axis + 1:]):
                base = mo.add(base, mo.mul(c, mo.const(s)))
            v, i = self.arg_line(n, base, shape[n.axis], strides[n.axis], adt)
            regs.append(self.let(self.first_index(i), "arg"))
        return Regs(layout, tuple(regs))

    def better(self, op: ReduceOp, a: tuple[Value, Value], b: tuple[Value, Value]) -> tuple[Value, Value]:
        """The pair of `a` and `b` an arg-reduction keeps: the more extreme value, the smaller index on ties."""
        (va, ia), (vb, ib) = a, b
        beats = Compare(CmpOp.GT if op is ReduceOp.MAX else CmpOp.LT, vb, va)
        tie = mo.both(Compare(CmpOp.EQ, vb, va), mo.lt(ib, ia))
        take = Binary(BinOp.OR, beats, tie)
        return self.let(Where(take, vb, va), "argv"), self.let(Where(take, ib, ia), "argi")

    def arg_line(self, n: ArgReduce, base: Value, extent: int, stride: int, adt: DType) -> tuple[Value, Value]:
        """The (value, index) an arg-reduction keeps of the line of `extent` elements from flat index `base`."""
        shape, op = n.x.type.shape, n.op
        k = Var(self.fresh("k"), TileType(DType.I32))
        carried = [Var(self.fresh("argv"), TileType(adt)), Var(self.fresh("argi"), TileType(DType.I32))]
        results = [Var(self.fresh("argv"), TileType(adt)), Var(self.fresh("argi"), TileType(DType.I32))]
        saved, self.out = self.out, []
        with self.nested():
            pt = Pt(shape, mo.add(base, mo.mul(k, mo.const(stride))))
            v, i = cast(self.at(n.x, pt), adt), k
            ok = self.at(n.valid, pt)
            if ok is not None:
                v, i = Where(ok, v, identity(op, adt)), Where(ok, i, mo.const(SKIPPED))
            yields = list(self.better(op, (carried[0], carried[1]), (v, i)))
            body = self.out
        self.out = saved
        self.emit(For(k, mo.const(0), mo.const(extent), mo.const(1), carried,
                      [identity(op, adt), mo.const(SKIPPED)], body, yields, results, loc=self.loc))
        return results[0], results[1]

    def arg_across_threads(self, op: ReduceOp, v: Value, i: Value, n) -> Value:
        """The index of the pair the whole group keeps, each thread holding the pair `(v, i)`."""
        threads = self.group.threads
        if threads == 1:
            return i
        self.collective(n)
        top = self.let(SimdReduce(op, v), "simd")
        idx = self.let(SimdReduce(ReduceOp.MIN, Where(Compare(CmpOp.EQ, v, top), i, mo.const(SKIPPED))), "simd")
        if threads <= SIMD_WIDTH:
            return idx
        nsg = -(-threads // SIMD_WIDTH)
        self.barrier(n)
        vals, idxs = self.scratch(v.type.dtype, nsg), self.scratch(DType.I32, nsg)
        first = Compare(CmpOp.EQ, mo.builtin(BuiltinKind.THREAD_INDEX_IN_SIMDGROUP), mo.const(0))
        sg = sg_index(self.group.first_sg)
        self.emit(Store(AddPtr(vals, sg), top, first, loc=self.loc))
        self.emit(Store(AddPtr(idxs, sg), idx, first, loc=self.loc))
        self.barrier(n)
        best = None
        for j in range(nsg):
            pair = tuple(self.let(Load(AddPtr(base, mo.const(j)) if j else base), "part") for base in (vals, idxs))
            best = pair if best is None else self.better(op, best, pair)
        return best[1]

    def first_index(self, i: Value) -> Value:
        """An arg-reduction's index, 0 for a line of skipped elements only."""
        return Where(Compare(CmpOp.EQ, i, mo.const(SKIPPED)), mo.const(0), i)

    # ---- scans

    def scan(self, n: Scan) -> Regs:
        x, op = n.x, n.op
        shape, dtype = x.type.shape, x.type.dtype
        adt = acc_dtype(dtype)
        size = x.type.size
        extent, stride = shape[n.axis], row_major_strides(shape)[n.axis]
        layout = self.layout(size)
        steps = max(extent - 1, 0).bit_length()
        if steps == 0:
            return Regs(layout, tuple(self.let(cast(cast(v, adt), dtype), "scan") for v in self.regs_of(x, layout)))
        self.barrier(n)
        base = self.scratch(adt, 2 * size)
        regs = self.regs_of(x, layout)
        for slot, v in enumerate(regs):
            self.emit(Store(AddPtr(base, self.raw_flat(layout, slot)), cast(v, adt), self.guard(layout, slot),
                            loc=self.loc))
        self.barrier(n)
        s = Var(self.fresh("step"), TileType(DType.I32))
        saved, self.out = self.out, []
        with self.nested():
            d = Binary(BinOp.SHL, mo.const(1), s)
            src = AddPtr(base, mo.mul(Binary(BinOp.AND, s, mo.const(1)), mo.const(size)))
            dst = AddPtr(base, mo.mul(Binary(BinOp.AND, mo.add(s, mo.const(1)), mo.const(1)), mo.const(size)))

            def one(slot) -> None:
                pt = self.slot_pt(layout, slot, shape)
                c = pt.flat if len(shape) == 1 else mo.mod(mo.div(pt.flat, stride), extent)
                mine = self.let(Load(AddPtr(src, pt.flat)), "scan")
                if n.reverse:
                    has = mo.lt(mo.add(c, d), mo.const(extent))
                    other = mo.add(pt.flat, mo.mul(d, mo.const(stride)))
                else:
                    has = Compare(CmpOp.GE, c, d)
                    other = Binary(BinOp.SUB, pt.flat, mo.mul(d, mo.const(stride)))
                near = self.let(Load(AddPtr(src, other), has, identity(op, adt)), "scan")
                self.emit(Store(AddPtr(dst, pt.flat), combine(op, near, mine), self.guard(layout, slot),
                                loc=self.loc))

            if self.rollable(layout, []) == []:
                self.slot_loop(layout, one)
            else:
                for slot in range(layout.slots):
                    one(slot)
            self.barrier(n)
            body = self.out
        self.out = saved
        self.emit(For(s, mo.const(0), mo.const(steps), mo.const(1), [], [], body, [], [], loc=self.loc))
        final = AddPtr(base, mo.const((steps % 2) * size)) if steps % 2 else base
        out = []
        for slot in range(layout.slots):
            flat = self.slot_pt(layout, slot, shape).flat
            out.append(self.let(cast(self.let(Load(AddPtr(final, flat)), "scan"), dtype), "scan"))
        return Regs(layout, tuple(out))


__all__ = ["SKIPPED", "Scans"]
