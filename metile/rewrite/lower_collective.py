"""The parts of `lower_tiles` where threads cooperate: scratch memory, gathers, reductions and `dot`.

Scratch: one threadgroup array per dtype (`scratch_<dtype>`), sized for the largest single use. A
statement takes regions from it with a bump pointer that restarts at every statement; every use starts
with a barrier, so a region is never rewritten while another thread still reads an older value.

Reductions (`Reduce`): each thread folds the elements it holds (padding slots contribute the
identity: 0, -inf/+inf, or the integer extremes), `simd_sum`/`simd_max`/`simd_min` combine a
simdgroup, lane 0 of each simdgroup writes its partial to scratch, and after a barrier every thread
folds the partials, so every thread holds the result. f16/bf16 reduce in f32, narrow integers in
32 bits, 64-bit integers in their own type. Reducing one axis of an n-D tile gathers the tile through
scratch and folds each output element's line.

`dot` itself is in `metile.rewrite.lower_mma`; the representations of values (`Regs`, `Mma`, ...) are here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import attrs

from metile.ir.errors import Loc
from metile.ir.node import Node, children, walk
from metile.ir.ops import BinOp, BuiltinKind, CmpOp, ReduceOp
from metile.ir.stmts import For, Let, Store
from metile.ir.tile import ArgReduce, Dot, Reduce, Scan, SimdgroupRole
from metile.ir.types import AddressSpace, DType, PtrType, TileType
from metile.ir.values import AddPtr, Binary, Cast, Compare, Const, Load, SharedAlloc, SimdReduce, Value, Var, Where
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import Blocked, MmaGeometry, row_major_strides
from metile.rewrite.plan import SIMD_WIDTH
from metile.rewrite.scan import HEAVY
from metile.rewrite.staging import columns_first

if TYPE_CHECKING:
    from metile.rewrite.lower_mma import Ring

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
    thread holds it in that slot; `at`, when known, its coordinates (`flat` split along `shape`)."""

    shape: tuple[int, ...]
    flat: Value
    key: tuple[Blocked, int] | None = None
    at: tuple[Value, ...] | None = None


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
    """The type a reduction or scan of `dtype` combines in: f32 for floats, 32 bits for narrower integers, and a
    64-bit integer type itself."""
    if dtype.is_float:
        return DType.F32
    if dtype.bits == 64:
        return dtype
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

    def publish(self, items: list[tuple[Value, tuple[int, ...]]], why: Node, ring: Ring | None = None,
                own: bool = False) -> list[Value]:
        """Write tiles to scratch, each row-major with the given row strides; one barrier pair for all. In a
        `ring`, the tiles go to this iteration's buffer instead, behind the trailing barrier only (see `Ring`);
        when `own`, each to a buffer of its own, apart from the scratch arena."""
        if ring is None:
            self.barrier(why)
        bases = []
        for v, strides in items:
            shape = v.type.shape
            dtype = v.type.dtype
            rows = shape[0] if len(shape) > 1 else 1
            size = strides[0] * rows if len(shape) > 1 else v.type.size
            if own:
                base = Var(self.fresh(f"staged_{dtype.value}"), PtrType(dtype, (), AddressSpace.THREADGROUP))
                self.channels.append(Let(base, SharedAlloc((-(-size // 4) * 4,), dtype), loc=self.loc))
                bases.append(base)
            else:
                bases.append(self.scratch(dtype, size) if ring is None else ring.take(self, dtype, size))
        for (v, strides), base in zip(items, bases):
            rep, load = self.named_rep(v)
            held = None if rep is None and isinstance(load, Load) else self._pointwise_mma((v,), v.type.shape)
            if held is not None:   # computed from a dot result held in matrices: each lane writes its elements
                self.publish_fragments(v, held.geom, base, strides)
                continue
            layout = self.layout(v.type.size)
            down = rep is None and columns_first(load, v.type.shape, self.axes)
            if rep is None and isinstance(load, Load) and not down and self.stage_in_vectors(v, load, base, strides):
                continue

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
        if n.axis == 1:
            found = self.mma_row_reduce(n)
            if found is not None:
                return found
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


__all__ = ["Channel", "Collectives", "Group", "Lazy", "Mma", "Pt", "Regs", "Scalar", "acc_dtype", "dot_acc", "identity",
           "sg_in", "sg_index"]
