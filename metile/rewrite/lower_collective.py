"""The parts of `lower_tiles` where threads cooperate: scratch memory, gathers, reductions and `dot`.

Scratch: one threadgroup array per dtype (`scratch_<dtype>`), sized for the largest single use. A
statement takes regions from it with a bump pointer that restarts at every statement; every use starts
with a barrier, so a region is never rewritten while another thread still reads an older value.

Reductions (`Reduce`): each thread folds the elements it holds (padding slots contribute the
identity: 0, -inf/+inf, or the integer extremes), `simd_sum`/`simd_max`/`simd_min` combine a
simdgroup, lane 0 of each simdgroup writes its partial to scratch, and after a barrier every thread
folds the partials, so every thread holds the result. f16/bf16 reduce in f32, narrow integers in
32 bits. Reducing one axis of an n-D tile gathers the tile through scratch and folds each output
element's line.

`dot(a, b)` (and `acc + dot(a, b)`): `a` and `b` are published to scratch (rows padded by 4 elements),
and each simdgroup multiplies-accumulates its 8x8 pieces of the result (`MmaGeometry`) with
`simdgroup_load` / `simdgroup_multiply_accumulate`. The result stays in simdgroup matrices while it
only feeds further `dot` accumulation; an unmasked store of it through a row-major address grid is
`simdgroup_store` straight to device memory (`mma_store`); any other use copies it to registers through
scratch.
"""

from __future__ import annotations

import math

import attrs

from metile.ir.errors import Loc
from metile.ir.metal import MatrixFill, MatrixLoad, MatrixMultiplyAccumulate, MatrixStore
from metile.ir.node import Node, children, walk
from metile.ir.ops import BinOp, BuiltinKind, CmpOp, ReduceOp
from metile.ir.stmts import For, If, Let, Store
from metile.ir.tile import ArgReduce, Broadcast, Dot, Full, Reduce, Scan, SimdgroupRole
from metile.ir.types import AddressSpace, DType, PtrType, TileType
from metile.ir.values import AddPtr, Binary, Cast, Compare, Const, Load, SharedAlloc, SimdReduce, Value, Var, Where
from metile.rewrite import axis_info
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import Blocked, MmaGeometry, mma_split, row_major_strides
from metile.rewrite.plan import SIMD_WIDTH
from metile.rewrite.scan import HEAVY
from metile.rewrite.staging import columns_first, mma_row_stride, mma_scratch_offset, staging_pad

UNROLL_LIMIT = 8


@attrs.frozen
class Group:
    """The threads running a region: `tid` is the index within the group, `first_sg` its first simdgroup."""

    tid: Value
    threads: int
    first_sg: int
    sgs: int
    role: SimdgroupRole | None = None


@attrs.frozen
class Pt:
    """Element `flat` (row-major, in range) of a tile of `shape`; `key` is `(layout, slot)` when this
    thread holds it in that slot."""

    shape: tuple[int, ...]
    flat: Value
    key: tuple[Blocked, int] | None = None


@attrs.frozen
class Scalar:
    value: Value


@attrs.frozen
class Regs:
    layout: Blocked
    regs: tuple[Value, ...]


@attrs.frozen
class Lazy:
    """A pure tile expression, evaluated wherever one of its elements is needed."""

    expr: Value


@attrs.frozen
class Mma:
    geom: MmaGeometry
    mats: tuple[Value, ...]


def acc_dtype(dtype: DType) -> DType:
    if dtype.is_float:
        return DType.F32
    return DType.I32 if dtype.is_signed else DType.U32


def identity(op: ReduceOp, dtype: DType) -> Const:
    if op is ReduceOp.SUM:
        return Const(0, dtype)
    if op is ReduceOp.PROD:
        return Const(1, dtype)
    if dtype.is_float:
        return Const(-math.inf if op is ReduceOp.MAX else math.inf, dtype)
    bits = dtype.bits
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype.is_signed else (0, (1 << bits) - 1)
    return Const(lo if op is ReduceOp.MAX else hi, dtype)


COMBINE = {ReduceOp.SUM: BinOp.ADD, ReduceOp.PROD: BinOp.MUL, ReduceOp.MAX: BinOp.MAX, ReduceOp.MIN: BinOp.MIN}


def combine(op: ReduceOp, a: Value, b: Value) -> Value:
    return Binary(COMBINE[op], a, b)


def cast(v: Value, dtype: DType) -> Value:
    return v if v.type.dtype is dtype else Cast(v, dtype)


class Collectives:
    """Mixed into `metile.rewrite.lower_tiles.Lowering` (which provides `at`, `let`, `emit`, `barrier`...)."""

    # ---- scratch

    def init_scratch(self) -> None:
        self.arena: dict[DType, tuple[Var, int]] = {}
        self.arena_loc: dict[DType, Loc | None] = {}  # per arena, the statement that needs the most of it
        self.bump: dict[DType, int] = {}
        self.published: dict[object, tuple[Value, tuple[int, ...]]] = {}
        self.sg_coords: dict[MmaGeometry, tuple[Value, Value]] = {}

    def new_statement(self) -> None:
        self.bump = {}
        self.published = {}

    def scratch(self, dtype: DType, n: int) -> Value:
        base, size = self.arena.get(dtype, (None, 0))
        if base is None:
            base = Var(self.fresh(f"scratch_{dtype.value}"), PtrType(dtype, (), AddressSpace.THREADGROUP))
        off = self.bump.get(dtype, 0)
        self.bump[dtype] = off + -(-n // 4) * 4
        if self.bump[dtype] > size:
            self.arena_loc[dtype] = self.loc
        self.arena[dtype] = (base, max(size, self.bump[dtype]))
        return base if off == 0 else AddPtr(base, mo.const(off))

    def scratch_allocations(self) -> tuple[list, int]:
        lets, total = [], 0
        for dtype, (base, size) in self.arena.items():
            lets.append(Let(base, SharedAlloc((size,), dtype), loc=self.arena_loc.get(dtype)))
            total += size * dtype.itemsize
        return lets, total

    def publish(self, items: list[tuple[Value, tuple[int, ...]]], why: Node) -> list[Value]:
        """Write tiles to scratch, each row-major with the given row strides; one barrier pair for all."""
        self.barrier(why)
        bases = []
        for v, strides in items:
            shape = v.type.shape
            dtype = v.type.dtype
            rows = shape[0] if len(shape) > 1 else 1
            bases.append(self.scratch(dtype, strides[0] * rows if len(shape) > 1 else v.type.size))
        for (v, strides), base in zip(items, bases):
            layout = self.layout(v.type.size)
            rep, load = self.named_rep(v)
            down = rep is None and columns_first(load, v.type.shape, self.defs)

            def one(slot, v=v, strides=strides, base=base, layout=layout, down=down) -> None:
                if down:   # threads walk down the columns: consecutive threads, consecutive addresses
                    rows, cols = v.type.shape
                    c, r = self.coords(self.slot_pt(layout, slot, (cols, rows)))
                    pt = Pt(v.type.shape, mo.add(mo.mul(r, mo.const(cols)), c))
                else:
                    pt = self.slot_pt(layout, slot, v.type.shape)
                off: Value = mo.const(0)
                for c, s in zip(self.coords(pt), strides):
                    off = mo.add(off, mo.mul(c, mo.const(s)))
                self.emit(Store(AddPtr(base, off), self.at(v, pt), self.guard(layout, slot), loc=self.loc))

            if self.rollable(layout, [v]) == []:
                self.slot_loop(layout, one)
            else:
                for slot in range(layout.slots):
                    one(slot)
        self.barrier(why)
        return bases

    def gather(self, rep: Regs, flat: Value, why: Node) -> Value:
        """Element `flat` of a tile held in registers by some thread: published once per statement."""
        found = self.published.get(id(rep))
        if found is None:
            (base,) = self.publish_regs([rep], why)
        else:
            base = found[0]
        return self.let(Load(AddPtr(base, flat)), "g")

    def publish_regs(self, reps: list[Regs], why: Node) -> list[Value]:
        self.barrier(why)
        bases = []
        for rep in reps:
            layout = rep.layout
            base = self.scratch(rep.regs[0].type.dtype, layout.size)
            for slot in range(layout.slots):
                self.emit(Store(AddPtr(base, self.raw_flat(layout, slot)), rep.regs[slot], self.guard(layout, slot),
                                loc=self.loc))
            self.published[id(rep)] = (base, ())
            bases.append(base)
        self.barrier(why)
        return bases

    def reps_in(self, v: Value) -> list[Regs]:
        """The register-held tiles `v` reads (through variables), so they can be published together."""
        out = []
        for n in walk(v):
            if isinstance(n, Var) and n.type.shape:
                rep = self.scope.lookup_env(n.name)
                if isinstance(rep, Regs) and id(rep) not in self.published and rep not in out:
                    out.append(rep)
        return out

    # ---- heavy values: reductions and dot, materialised where their statement starts

    def prepare(self, v: Value | None) -> None:
        if v is None or not self.facts.heavy(v):
            return
        seen: set[int] = set()
        stack: list[tuple[Value, bool]] = [(v, False)]
        while stack:
            n, done = stack.pop()
            if done:
                if isinstance(n, HEAVY) or dot_acc(n):
                    self.heavy_rep(n)
                continue
            if id(n) in seen or self.memo.get(("h", n)) is not None:
                continue
            seen.add(id(n))
            stack.append((n, True))
            kids = list(children(n))
            pair = dot_acc(n)
            if pair is not None:  # the Dot is consumed by the accumulation, not materialised alone
                dot, acc = pair
                kids = [acc, dot.a, dot.b]
            stack.extend((c, False) for c in kids if isinstance(c, Value))

    def heavy_rep(self, n: Value):
        key = ("h", n)
        found = self.memo.get(key)
        if found is None:
            if isinstance(n, Reduce):
                found = self.reduce(n)
            elif isinstance(n, ArgReduce):
                found = self.arg_reduce(n)
            elif isinstance(n, Scan):
                found = self.scan(n)
            elif isinstance(n, Dot):
                found = self.mma(n, None, n)
            else:
                found = self.mma(*dot_acc(n), n)
            self.memo.put(key, found)
        return found

    # ---- reductions

    def reduce(self, n: Reduce):
        x, op = n.x, n.op
        shape, dtype = x.type.shape, x.type.dtype
        adt = acc_dtype(dtype)
        ident = identity(op, adt)
        if len(shape) == 1:
            layout = self.layout(shape[0])
            acc: Value | None = None
            for slot in range(layout.slots):
                v = cast(self.at(x, self.slot_pt(layout, slot, shape)), adt)
                g = self.guard(layout, slot)
                v = v if g is None else Where(g, v, ident)
                acc = v if acc is None else combine(op, acc, v)
            total = self.across_threads(op, acc, n)
            return Scalar(self.let(cast(total, dtype), "red"))
        out_shape = shape[: n.axis] + shape[n.axis + 1:]
        layout = self.layout(math.prod(out_shape))
        reps = self.reps_in(x)
        if reps:
            self.publish_regs(reps, n)
        strides = row_major_strides(shape)
        regs = []
        for slot in range(layout.slots):
            pt = self.slot_pt(layout, slot, out_shape)
            cs = self.coords(pt)
            base: Value = mo.const(0)
            for c, s in zip(cs, strides[: n.axis] + strides[n.axis + 1:]):
                base = mo.add(base, mo.mul(c, mo.const(s)))
            regs.append(self.let(cast(self.fold_line(op, x, base, shape[n.axis], strides[n.axis], adt, n), dtype),
                                 "red"))
        return Regs(layout, tuple(regs))

    def fold_line(self, op, x, base: Value, extent: int, stride: int, adt: DType, n: Reduce) -> Value:
        shape = x.type.shape
        if extent <= UNROLL_LIMIT:
            acc = None
            for k in range(extent):
                v = cast(self.at(x, Pt(shape, mo.add(base, mo.const(k * stride)))), adt)
                acc = v if acc is None else combine(op, acc, v)
            return acc
        self.publish_for_loop(x, n)
        k = Var(self.fresh("k"), TileType(DType.I32))
        acc = Var(self.fresh("acc"), TileType(adt))
        result = Var(self.fresh("acc"), TileType(adt))
        saved, self.out = self.out, []
        with self.nested():
            v = cast(self.at(x, Pt(shape, mo.add(base, mo.mul(k, mo.const(stride))))), adt)
            body = self.out
        self.out = saved
        self.emit(For(k, mo.const(0), mo.const(extent), mo.const(1), [acc], [identity(op, adt)], body,
                      [combine(op, acc, v)], [result], loc=self.loc))
        return result

    def publish_for_loop(self, v: Value, why: Node) -> None:
        """Before a run-time loop over elements of `v`: publish the held tiles they read (registers and simdgroup
        matrices), so that the loop body only loads them. Published from inside the body, they would be stored
        and fenced again on every iteration."""
        regs: dict[int, Regs] = {}
        mmas: dict[int, Mma] = {}
        seen: set[int] = set()
        stack: list[Value] = [v]
        while stack:
            n = stack.pop()
            if id(n) in seen or not isinstance(n, Value) or not n.type.shape:
                continue
            seen.add(id(n))
            if isinstance(n, Var):
                rep = self.scope.lookup_env(n.name)
            elif isinstance(n, HEAVY) or dot_acc(n):
                rep = self.memo.get(("h", n))   # materialised where its statement starts
            else:
                stack.extend(c for c in children(n) if isinstance(c, Value))
                continue
            if isinstance(rep, Lazy):
                stack.append(rep.expr)
            elif isinstance(rep, Regs) and id(rep) not in self.published:
                regs[id(rep)] = rep
            elif isinstance(rep, Mma) and id(rep) not in self.published:
                mmas[id(rep)] = rep
        if regs:
            self.publish_regs(list(regs.values()), why)
        for m in mmas.values():
            self.mma_in_scratch(m, why)

    def across_threads(self, op: ReduceOp, acc: Value, n: Node) -> Value:
        threads = self.group.threads
        if threads == 1:
            return acc
        self.collective(n)
        r = self.let(SimdReduce(op, acc), "simd")
        if threads <= SIMD_WIDTH:
            return r
        nsg = -(-threads // SIMD_WIDTH)
        self.barrier(n)
        buf = self.scratch(acc.type.dtype, nsg)
        lane = mo.builtin(BuiltinKind.THREAD_INDEX_IN_SIMDGROUP)
        self.emit(Store(AddPtr(buf, sg_index(self.group.first_sg)), r, Compare(CmpOp.EQ, lane, mo.const(0)),
                        loc=self.loc))
        self.barrier(n)
        total: Value | None = None
        for i in range(nsg):
            part = self.let(Load(AddPtr(buf, mo.const(i)) if i else buf), "part")
            total = part if total is None else combine(op, total, part)
        return total

    # ---- dot

    def mma_geometry(self, d: Dot, group: Group | None = None) -> MmaGeometry | None:
        """How `group`'s simdgroups (default: the current group) share the 8x8 pieces of `d`."""
        group = group or self.group
        (m, k), n = d.a.type.shape, d.b.type.shape[1]
        if m % 8 or n % 8 or k % 8 or d.a.type.dtype not in (DType.F32, DType.F16, DType.BF16):
            return None
        split = mma_split(m, n, group.sgs)
        return None if split is None else MmaGeometry(m, n, *split, group.first_sg)

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
        mats = list(self.as_mma(acc, geom).mats) if acc is not None else None
        k = a.type.shape[1]
        (sa, lda), (sb, ldb) = self.stage_operands(a, b, d)
        sm, sn = self.simdgroup_coords(geom)
        if mats is None:
            mats = [self.let(MatrixFill(Const(0.0, DType.F32)), "acc")] * geom.pieces  # values: one serves all
        steps = k // 8
        if steps == 1:
            return Mma(geom, tuple(self.mma_step(geom, sa, lda, sb, ldb, sm, sn, mo.const(0), mats)))
        # One 8-wide step of k per iteration of a run-time loop, the pieces carried in matrices: the same
        # code as unrolling (Metal unrolls a constant trip count), at 1/steps of the size.
        kk = Var(self.fresh("kk"), TileType(DType.I32))
        carried = [Var(self.fresh("acc"), m.type) for m in mats]
        saved, self.out = self.out, []
        with self.nested():
            yields = self.mma_step(geom, sa, lda, sb, ldb, sm, sn, kk, carried)
        body, self.out = self.out, saved
        results = [Var(self.fresh("acc"), m.type) for m in mats]
        self.emit(For(kk, mo.const(0), mo.const(k), mo.const(8), carried, mats, body, yields, results, loc=self.loc))
        return Mma(geom, tuple(results))

    def mma_step(self, geom: MmaGeometry, sa: Value, lda: int, sb: Value, ldb: int, sm: Value, sn: Value,
                 kk: Value, mats: list[Value]) -> list[Value]:
        """The accumulators `mats` after the 8-wide step of k starting at column `kk` of `a` (row of `b`)."""
        arows = [self.let(MatrixLoad(AddPtr(sa, mo.add(mo.mul(mo.add(sm, mo.const(i * 8)), mo.const(lda)), kk)),
                                     mo.const(lda)), "ma")
                 for i in range(geom.per_m)]
        bcols = [self.let(MatrixLoad(AddPtr(sb, mo.add(mo.mul(kk, mo.const(ldb)), mo.add(sn, mo.const(j * 8)))),
                                     mo.const(ldb)), "mb")
                 for j in range(geom.per_n)]
        return [self.let(MatrixMultiplyAccumulate(arows[p // geom.per_n], bcols[p % geom.per_n], mats[p]), "acc")
                for p in range(geom.pieces)]

    def stage_operands(self, a: Value, b: Value, d: Dot) -> list[tuple[Value, int]]:
        """`(base, row stride)` of `a` and `b` in threadgroup memory: a role's channel as it is, anything
        else published to scratch with rows padded by `staging_pad` (one barrier pair for both)."""
        found = [self.channel_of(x) for x in (a, b)]
        todo = [x for x, ch in zip((a, b), found) if ch is None]
        lds = {id(x): x.type.shape[1] + staging_pad(x.type.shape[1], x.type.dtype.itemsize) for x in todo}
        bases = iter(self.publish([(x, (lds[id(x)], 1)) for x in todo], d) if todo else ())
        return [(ch.base, x.type.shape[1]) if ch is not None else (next(bases), lds[id(x)])
                for x, ch in zip((a, b), found)]

    def named_rep(self, v: Value) -> tuple[object | None, Value]:
        """`v` followed through names bound to pure expressions (`Lazy`): the representation of the first name
        bound to anything else, with that name; or None, with the first value that is not a name."""
        while isinstance(v, Var):
            rep = self.scope.lookup_env(v.name)
            if not isinstance(rep, Lazy):
                return rep, v
            v = rep.expr
        return None, v

    def channel_of(self, v: Value) -> Channel | None:
        """The channel holding `v`, when `v` names a role result passed through threadgroup memory."""
        rep, _ = self.named_rep(v)
        return rep if isinstance(rep, Channel) else None

    def simdgroup_coords(self, geom: MmaGeometry) -> tuple[Value, Value]:
        """The first row and column (in elements) of this simdgroup's block of pieces (pure expressions of
        builtins, built once per geometry so that every piece shares the same nodes)."""
        found = self.sg_coords.get(geom)
        if found is None:
            sg = sg_index(geom.first_sg)
            sm = mo.mul(mo.div(sg, geom.sg_n), mo.const(8 * geom.per_m))
            sn = mo.mul(mo.mod(sg, geom.sg_n), mo.const(8 * geom.per_n))
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
        found = axis_info.strides(ptr, self.defs)
        if found is None or found[1] != 1 or self.is_varying(ptr):
            return False
        geom = rep.geom
        row = found[0]
        ld = mo.const(row) if isinstance(row, int) else mo.mul(self.scalar(row[1]), mo.const(row[0]))
        origin = self.at(ptr, Pt(ptr.type.shape, mo.const(0)))
        self.emit_owned(geom, [MatrixStore(mat, AddPtr(origin, self.piece_offset(geom, p, ld)), ld, loc=self.loc)
                               for p, mat in enumerate(rep.mats)])
        return True

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
class Channel:
    """A role's result in threadgroup memory (row-major at `base`), readable after the role's barrier."""

    base: Value
    shape: tuple[int, ...]


def dot_acc(v: Node) -> tuple[Dot, Value] | None:
    """`(dot, acc)` when `v` is the f32 accumulation `acc + dot(a, b)` (either order), else None."""
    if not (isinstance(v, Binary) and v.op is BinOp.ADD and v.type.dtype is DType.F32):
        return None
    if isinstance(v.rhs, Dot) and not isinstance(v.lhs, Dot):
        return v.rhs, v.lhs
    if isinstance(v.lhs, Dot) and not isinstance(v.rhs, Dot):
        return v.lhs, v.rhs
    return None


def sg_index(first: int) -> Value:
    """This thread's simdgroup index counted from simdgroup `first`."""
    sg = mo.builtin(BuiltinKind.SIMDGROUP_INDEX_IN_THREADGROUP)
    return Binary(BinOp.SUB, sg, mo.const(first)) if first else sg


def sg_in(first: int, count: int) -> Value:
    """True on the simdgroups `first .. first + count - 1`."""
    sg = mo.builtin(BuiltinKind.SIMDGROUP_INDEX_IN_THREADGROUP)
    return mo.both(Compare(CmpOp.GE, sg, mo.const(first)), mo.lt(sg, mo.const(first + count)))


def _constant_fill(v: Value) -> Value | None:
    match v:
        case Full(_, value):
            return value
        case Broadcast(Const() as c, _):
            return c
    return None


__all__ = ["Channel", "Collectives", "Group", "Lazy", "Mma", "Pt", "Regs", "Scalar", "acc_dtype", "dot_acc", "identity",
           "sg_in", "sg_index"]
