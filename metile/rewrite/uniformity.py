"""Uniformity: which variables may differ between the threads of a program, and which between the lanes of one
simdgroup.

`varying_names(k)`: the variables whose value may differ between the threads of one program (they depend on
`thread_id`, `simd_lane_id`, a simdgroup exchange, or a branch or loop controlled by such a value). Barriers are
only legal where control flow is uniform over the program.

`lane_varying_names(k)`: the variables whose value may differ between the lanes of one simdgroup. Fewer: the
simdgroup's index, `thread_id() // 32` (any multiple of the SIMD width), a simdgroup reduction's or broadcast's
result are the same on every lane of a simdgroup. Simdgroup collectives (`simd_sum`, shuffles, `dot`'s matrices)
are only legal where control flow is uniform over the simdgroup, as in the original meTile's decode attention,
whose loop over tokens starts at the thread's simdgroup index.
"""

from __future__ import annotations

from collections.abc import Callable

from metile.ir.node import children
from metile.ir.ops import BinOp
from metile.ir.stmts import For, If, Kernel, Let, While
from metile.ir.tile import SimdgroupId, SimdgroupRole, SimdLaneId, ThreadId
from metile.ir.values import Binary, Const, SimdBroadcast, SimdReduce, SimdShuffleXor, Value, Var
from metile.rewrite.context import Analyses
from metile.rewrite.scan import VARYING_SOURCES, scan

SIMD_WIDTH = 32


_NOTHING: frozenset[str] = frozenset()


def varying_names(k: Kernel, analyses: Analyses | None = None) -> frozenset[str]:
    """The names of the variables of `k` that may differ between the threads of one program (none when `k` has no
    source of variation: then nothing can vary, and the statements are not walked)."""
    facts = scan(k, analyses)
    if not facts.has(VARYING_SOURCES):
        return _NOTHING
    return _fixpoint(k, lambda names: lambda v: facts.depends(v, names))


def lane_varying_names(k: Kernel, analyses: Analyses | None = None) -> frozenset[str]:
    """The names of the variables of `k` that may differ between the lanes of one simdgroup (none when `k` has no
    value that differs between lanes in itself)."""
    if not _has_lane_sources(k, analyses):
        return _NOTHING
    ids = _thread_id_names(k, analyses)
    return _fixpoint(k, lambda names: _lane_test(names, ids))


def lane_dependence(k: Kernel, analyses: Analyses | None = None) -> Callable[[Value | None], bool]:
    """A test of whether a value of `k` may differ between the lanes of one simdgroup."""
    if not _has_lane_sources(k, analyses):
        return _never
    ids = _thread_id_names(k, analyses)
    return _lane_test(set(lane_varying_names(k, analyses)), ids)


_LANE_SOURCES = (ThreadId, SimdLaneId, SimdShuffleXor)   # what `_lane_varies` finds varying in itself


def _has_lane_sources(k: Kernel, analyses: Analyses | None) -> bool:
    return scan(k, analyses).has(_LANE_SOURCES)


def _never(v: Value | None) -> bool:
    return False


def _lane_test(names: set[str], ids: frozenset[str]) -> Callable[[Value | None], bool]:
    memo: dict[int, bool] = {}

    def dep(v: Value | None) -> bool:
        if v is None:
            return False
        found = memo.get(id(v))
        if found is None:
            found = memo[id(v)] = _lane_varies(v, names, ids, dep)
        return found
    return dep


def _lane_varies(v: Value, names: set[str], ids: frozenset[str], dep) -> bool:
    match v:
        case ThreadId() | SimdLaneId() | SimdShuffleXor():
            return True
        case SimdgroupId() | SimdReduce() | SimdBroadcast() | Const():
            return False
        case Binary(BinOp.FLOORDIV, x, Const(c)) if _is_thread_id(x, ids) and c > 0 and c % SIMD_WIDTH == 0:
            return False   # (32 sg + lane) // 32m == sg // m
        case Binary(BinOp.SHR, x, Const(c)) if _is_thread_id(x, ids) and c >= SIMD_WIDTH.bit_length() - 1:
            return False
        case Var(name):
            return name in names
    return any(dep(c) for c in _value_children(v))


def _is_thread_id(v: Value, ids: frozenset[str]) -> bool:
    return isinstance(v, ThreadId) or (isinstance(v, Var) and v.name in ids)


def _value_children(v: Value) -> list[Value]:
    return [c for c in children(v) if isinstance(c, Value)]


def _thread_id_names(k: Kernel, analyses: Analyses | None) -> frozenset[str]:
    """Names bound by a `Let` to the thread's index itself."""
    return frozenset(s.var.name for s in scan(k, analyses).of(Let) if isinstance(s.value, ThreadId))


def _fixpoint(k: Kernel, make_dep) -> frozenset[str]:
    """The names marked by propagating `make_dep(names)` (a test "does this value vary, given these names") through
    the kernel's statements, and through control flow controlled by a varying value, until nothing changes."""
    names: set[str] = set()

    def mark(vs, flag: bool) -> bool:
        new = [v.name for v in vs if flag and v.name not in names]
        names.update(new)
        return bool(new)

    def body(stmts, forced: bool, dep) -> bool:
        changed = False
        for s in stmts:
            match s:
                case Let(var, value):
                    changed |= mark([var], forced or dep(value))
                case For(index, start, stop, step, carried, inits, inner, yields, results):
                    bounds = forced or dep(start) or dep(stop) or dep(step)
                    changed |= mark([index], bounds)
                    for c, i, y, r in zip(carried, inits, yields, results):
                        changed |= mark([c, r], bounds or dep(i) or dep(y))
                    changed |= body(inner, bounds, dep)
                case If(cond, then, orelse, ty, ey, results):
                    branch = forced or dep(cond)
                    changed |= body(then, branch, dep) | body(orelse, branch, dep)
                    for r, a, b in zip(results, ty, ey):
                        changed |= mark([r], branch or dep(a) or dep(b))
                case While(carried, inits, cond_body, cond, inner, yields, results):
                    for c, i, y, r in zip(carried, inits, yields, results):
                        changed |= mark([c, r], forced or dep(i) or dep(y))
                    changed |= body(cond_body, forced, dep)
                    loop = forced or dep(cond)
                    if loop:
                        changed |= mark(list(carried) + list(results), True)
                    changed |= body(inner, loop, dep)
                case SimdgroupRole(_, _, _, inner):
                    changed |= body(inner, forced, dep)
        return changed

    while body(k.body, False, make_dep(names)):
        pass
    return frozenset(names)


__all__ = ["lane_dependence", "lane_varying_names", "varying_names"]
