"""`lower_elementwise`: a Tile IR kernel of 1-D element-wise tiles -> a Metal IR kernel, one thread per element.

Every tile of the kernel must be 1-D of one length `B` (the length of its `Arange`s, at most 1024). Each
program becomes one threadgroup of `B` threads and thread `t` computes element `t` of every tile:

- `ProgramId(a)` / `NumPrograms(a)` -> the threadgroup position / the threadgroup count along axis `a`;
- `Arange(s, s + B)` -> `s +` the thread's index in its threadgroup;
- `Broadcast` of a scalar and `Full` -> the scalar; element-wise ops, casts, loads and stores (masks
  included) -> the same nodes on per-thread scalars;
- `FLOORDIV`/`MOD` (Python floor semantics) -> `TRUNCDIV`/`REM` with a sign fix-up, as Metal IR requires.

The threadgroup size is recorded as `meta["threads_per_threadgroup"]`. Any other construct (reductions,
`Dot`, loops, branches, 2-D tiles, shared memory, simdgroup and thread-level ops...) raises
`UnsupportedConstructError` at the node's source line: it is not lowered yet.
"""

from __future__ import annotations

from metile.ir.metal import Builtin
from metile.ir.node import Node, walk
from metile.ir.ops import BinOp, BuiltinKind, CmpOp, Stage, UnOp
from metile.ir.stmts import Kernel, Let, Store
from metile.ir.tile import Arange, Broadcast, Full, NumPrograms, ProgramId
from metile.ir.types import DType, PtrType, TileType
from metile.ir.values import AddPtr, Binary, Cast, Compare, Const, Load, Param, Stmt, Unary, Value, Var, Where
from metile.ir.verify import verify
from metile.rewrite.errors import UnsupportedConstructError

MAX_THREADS = 1024


def not_lowered(what: str, n: Node | None) -> UnsupportedConstructError:
    return UnsupportedConstructError(
        f"lowering to Metal is not implemented yet for {what}: only kernels of 1-D element-wise tiles "
        "(loads, stores, arithmetic, where, casts) run so far", getattr(n, "loc", None))


def block_size(k: Kernel) -> int:
    """The one tile length `B` of `k` (1 when it has no `Arange`), or `UnsupportedConstructError`."""
    found: dict[int, Arange] = {}
    for n in walk(k):
        if isinstance(n, Arange):
            found.setdefault(n.stop - n.start, n)
    if len(found) > 1:
        a, b = sorted(found)[:2]
        raise not_lowered(f"tiles of different lengths ({a} and {b})", found[b])
    if not found:
        return 1
    (b, where), = found.items()
    if not 0 < b <= MAX_THREADS:
        raise not_lowered(f"a tile of {b} elements (one thread per element allows 1..{MAX_THREADS})", where)
    return b


def scalar_type(t):
    return t.with_shape(())


def thread_index() -> Value:
    return Cast(Builtin(BuiltinKind.THREAD_INDEX_IN_THREADGROUP), DType.I32)


def zero_like(x: Value) -> Const:
    return Const(0, x.type.dtype, loc=x.loc)


def opposite_signs(r: Value, b: Value) -> Value:
    """True where the remainder `r` is nonzero and its sign differs from the divisor `b`'s."""
    zero = zero_like(r)
    return Where(Compare(CmpOp.LT, b, zero), Compare(CmpOp.GT, r, zero), Compare(CmpOp.LT, r, zero), loc=r.loc)


def floor_div(a: Value, b: Value, loc) -> Value:
    """Python's `a // b` from Metal IR operators."""
    dtype = a.type.dtype
    if dtype.is_float:
        return Unary(UnOp.FLOOR, Binary(BinOp.DIV, a, b, loc=loc), loc=loc)
    q = Binary(BinOp.TRUNCDIV, a, b, loc=loc)
    if not dtype.is_signed:
        return q
    r = Binary(BinOp.REM, a, b, loc=loc)
    return Where(opposite_signs(r, b), Binary(BinOp.SUB, q, Const(1, dtype, loc=loc), loc=loc), q, loc=loc)


def floor_mod(a: Value, b: Value, loc) -> Value:
    """Python's `a % b` (the result has the divisor's sign) from Metal IR operators."""
    r = Binary(BinOp.REM, a, b, loc=loc)
    if not (a.type.dtype.is_float or a.type.dtype.is_signed):
        return r
    return Where(opposite_signs(r, b), Binary(BinOp.ADD, r, b, loc=loc), r, loc=loc)


class _Lowering:
    """The per-kernel state: the tile length and the lowered form of each value seen."""

    def __init__(self, block: int):
        self.block = block
        self.memo: dict[Value, Value] = {}

    def check_shape(self, v: Value) -> None:
        t = v.type
        if isinstance(t, (TileType, PtrType)) and t.shape not in ((), (self.block,)):
            raise not_lowered(f"a tile of shape {list(t.shape)}", v)
        if not isinstance(t, (TileType, PtrType)):
            raise not_lowered(f"a value of type {t}", v)

    def value(self, v: Value | None) -> Value | None:
        if v is None:
            return None
        done = self.memo.get(v)
        if done is None:
            self.check_shape(v)
            done = self.memo[v] = self.rebuild(v)
        return done

    def rebuild(self, v: Value) -> Value:
        lo, loc = self.value, v.loc
        match v:
            case Const() | Param():
                return v
            case Var(name, t):
                return Var(name, scalar_type(t), loc=loc)
            case ProgramId(axis):
                return Cast(Builtin(BuiltinKind.THREADGROUP_POSITION_IN_GRID, axis, loc=loc), DType.I32, loc=loc)
            case NumPrograms(axis):
                return Cast(Builtin(BuiltinKind.THREADGROUPS_PER_GRID, axis, loc=loc), DType.I32, loc=loc)
            case Arange(start, _):
                tid = thread_index()
                return tid if start == 0 else Binary(BinOp.ADD, Const(start, DType.I32, loc=loc), tid, loc=loc)
            case Full(_, value):
                return value
            case Broadcast(x, _):
                if x.type.shape not in ((), (self.block,)):
                    raise not_lowered(f"a broadcast of a tile of shape {list(x.type.shape)}", v)
                return lo(x)
            case Binary(BinOp.FLOORDIV, a, b):
                return floor_div(lo(a), lo(b), loc)
            case Binary(BinOp.MOD, a, b):
                return floor_mod(lo(a), lo(b), loc)
            case Binary(op, a, b):
                return Binary(op, lo(a), lo(b), loc=loc)
            case Unary(op, x):
                return Unary(op, lo(x), loc=loc)
            case Compare(op, a, b):
                return Compare(op, lo(a), lo(b), loc=loc)
            case Where(c, x, y):
                return Where(lo(c), lo(x), lo(y), loc=loc)
            case Cast(x, dtype):
                return Cast(lo(x), dtype, loc=loc)
            case AddPtr(p, off):
                return AddPtr(lo(p), lo(off), loc=loc)
            case Load(p, mask, other):
                return Load(lo(p), lo(mask), lo(other), loc=loc)
        raise not_lowered(_construct(v), v)

    def stmt(self, s: Stmt) -> Stmt:
        match s:
            case Let(var, value):
                return Let(self.value(var), self.value(value), loc=s.loc)
            case Store(p, value, mask):
                return Store(self.value(p), self.value(value), self.value(mask), loc=s.loc)
        raise not_lowered(_construct(s), s)


def _construct(n: Node) -> str:
    """How an error names the construct `n`."""
    names = {"Reduce": "a reduction", "Dot": "dot", "For": "a loop", "While": "a while loop", "If": "a branch",
             "SharedAlloc": "shared memory", "Barrier": "barrier", "AtomicAdd": "atomic_add",
             "SimdgroupRole": "simdgroup_role", "ThreadId": "thread_id", "SimdLaneId": "simd_lane_id"}
    return names.get(type(n).__name__, type(n).__name__)


def lower_elementwise(k: Kernel) -> Kernel:
    """The Metal IR kernel computing `k` (Tile IR, 1-D element-wise) with one thread per element."""
    if k.stage is not Stage.TILE:
        raise UnsupportedConstructError(f"lower_elementwise takes a Tile IR kernel, not a {k.stage.value} one")
    block = block_size(k)
    low = _Lowering(block)
    body = [low.stmt(s) for s in k.body]
    meta = k.meta.set("threads_per_threadgroup", block)
    out = Kernel(k.name, Stage.METAL, k.params, body, meta, loc=k.loc)
    return verify(out, after="lower_elementwise")


__all__ = ["MAX_THREADS", "UnsupportedConstructError", "block_size", "floor_div", "floor_mod", "lower_elementwise"]
