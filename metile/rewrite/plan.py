"""`plan_launch`: decide a Tile IR kernel's threadgroup shape, and the facts the lowering needs.

The decisions go into the kernel's `plan` (`metile.ir.stmts.LaunchPlan`), apart from the user's constexprs in
`meta`. Threads per program (`plan.threads`), in order of precedence:
- a kernel written at thread level (it uses `thread_id`, `simd_lane_id`, simdgroup exchanges or
  `shared`) runs one element per thread: the launch's `num_threads` (meTile's `BLOCK` constexpr, which the
  launch turns into it), else `32 * num_simdgroups`, else the length of its longest `arange`;
- `simdgroup_role` blocks with explicit `num_sgs` fix `32 * (sum of num_sgs)`;
- a kernel with `dot` runs `32 * num_simdgroups` threads (the launch option `num_simdgroups`, or meTile's `NUM_SG`,
  else 4 lowered until every product's 8x8 pieces split evenly among the simdgroups);
- otherwise `32 * num_simdgroups` threads when the launch asks, else the longest tile decides: up to 256
  threads, each holding runs of `plan.vector_width`
  consecutive elements. That is 4 when tiles are large enough and at least half of the loads and stores of
  tiles can move 4 elements as one vector (the axis analysis proves them consecutive and aligned); else 1, so
  that neighbouring threads hold neighbouring elements and each thread as few as possible.
Roles without explicit `num_sgs` share the program's simdgroups evenly; the thread count is then raised
to a multiple of `32 * num_roles` so that every role has whole simdgroups.

The uniformity analyses (which variables differ between threads) are in `metile.rewrite.uniformity`.
"""

from __future__ import annotations

from operator import attrgetter
from typing import NamedTuple

from metile.ir.node import evolve_node
from metile.ir.ops import Stage
from metile.ir.stmts import For, Kernel, LaunchPlan, Let, RoleSpan, Store
from metile.ir.target import DEFAULT_TARGET, AppleTarget
from metile.ir.tile import Arange, Dot, SimdgroupRole
from metile.ir.types import PtrType, TileType
from metile.ir.values import Load, SharedAlloc, Value
from metile.rewrite.axis_info import AxisAnalysis, vector_width
from metile.rewrite.context import Analyses, PassContext
from metile.rewrite.distribute import choose_vec, k_slices, matrix_dims, mma_split
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.scan import VARYING_SOURCES, Scan, scan

SIMD_WIDTH = DEFAULT_TARGET.simd_width

THREAD_LEVEL = (*VARYING_SOURCES, SharedAlloc)  # what makes a kernel run one thread per element


def role_ranges(roles: list[SimdgroupRole], threads: int | None,
                simd: int = SIMD_WIDTH) -> tuple[dict[int, RoleSpan], int | None]:
    """The simdgroup range of each role, and the thread count the roles imply (None: not fixed by them)."""
    if not roles:
        return {}, None
    num_roles = {r.num_roles for r in roles}
    if len(num_roles) > 1:
        raise UnsupportedConstructError(
            f"simdgroup_role blocks disagree on num_roles ({sorted(num_roles)}): every block must state the same "
            "number", roles[-1].loc)
    (n,) = num_roles
    counts: dict[int, int] = {}
    for r in roles:
        if counts.setdefault(r.role, r.num_sgs) != r.num_sgs:
            raise UnsupportedConstructError(
                f"role {r.role} is given {counts[r.role]} and {r.num_sgs} simdgroups", r.loc)
    explicit = all(c > 0 for c in counts.values()) and len(counts) == n
    implied = simd * sum(counts.values()) if explicit else None
    if implied is None and threads is None:
        return {}, None
    total_sgs = (implied if implied is not None else threads or 0) // simd
    out, first = {}, 0
    for role in range(n):
        count = counts.get(role, 0) or total_sgs // n
        if count == 0:
            raise UnsupportedConstructError(
                f"simdgroup_role: {total_sgs} simdgroup(s) cannot be shared among {n} roles; give num_sgs or use "
                "more threads", roles[0].loc)
        out[role] = RoleSpan(first, count)
        first += count
    if first > total_sgs and total_sgs:
        raise UnsupportedConstructError(
            f"simdgroup_role: the roles need {first} simdgroups but the program has {total_sgs}", roles[0].loc)
    return out, implied


@define_pass(provides=[Fact.LAUNCH_PLAN], precedes=[Fact.METAL_IR])
def plan_launch(k: Kernel, ctx: PassContext) -> Kernel:
    """`k` with its launch plan: threads per threadgroup and the simdgroups of each role, each thread holding
    single elements (`vectorize_memory` may then give it runs of 4)."""
    if k.stage is not Stage.TILE:
        raise UnsupportedConstructError(f"plan_launch takes a Tile IR kernel, not a {k.stage.value} one", k.loc)
    return evolve_node(k, plan=_plan(k, ctx, vectorize=False))


@define_pass(requires=[Fact.LAUNCH_PLAN], precedes=[Fact.METAL_IR], optional=True)
def vectorize_memory(k: Kernel, ctx: PassContext) -> Kernel:
    """`k` re-planned with runs of the target's `vector_width` (4) consecutive elements per thread, when its thread
    count follows its tiles and at least half of its loads and stores of tiles can then move vectors (the module
    docstring); else `k`. Loads and stores of such runs become vector accesses where the axis analysis proves them
    consecutive and aligned, with a guarded element-by-element tail where a mask may cut a run."""
    if k.stage is not Stage.TILE or k.plan is None:
        raise UnsupportedConstructError("vectorize_memory takes a Tile IR kernel planned by plan_launch", k.loc)
    if k.plan.vector_width != 1 or _survey(k, ctx.analyses).dots:   # a kernel with `dot`: its products fix threads
        return k
    plan = _plan(k, ctx, vectorize=True)
    return k if plan == k.plan else evolve_node(k, plan=plan)


class _Survey(NamedTuple):
    """What `_plan` reads of a kernel body, found once per body in a run (`plan_launch` and `vectorize_memory` plan
    the same body): its first thread-level value (None without), its products, the length of its longest `arange`
    (0 without), its `simdgroup_role` blocks and its largest tile (`largest_tile`)."""

    thread_level: Value | None
    dots: list[Dot]
    longest_arange: int
    roles: list[SimdgroupRole]
    biggest: int


def _survey(k: Kernel, analyses: Analyses) -> _Survey:
    return analyses.of(_surveyed, k)


def _surveyed(k: Kernel, analyses: Analyses) -> _Survey:
    found = scan(k, analyses)
    longest = max([n.stop - n.start for n in found.of(Arange)], default=0)
    return _Survey(found.first(THREAD_LEVEL), found.of(Dot), longest, found.of(SimdgroupRole),
                   largest_tile(k, analyses))


def _plan(k: Kernel, ctx: PassContext, vectorize: bool) -> LaunchPlan:
    t = ctx.target
    thread_level, dots, longest, roles, biggest = _survey(k, ctx.analyses)
    vec = 1
    asked = k.options.num_simdgroups
    _, role_threads = role_ranges(roles, None, t.simd_width)
    if thread_level is not None:
        threads = k.options.num_threads or (asked and t.simd_width * asked) or longest
        if not threads:
            raise UnsupportedConstructError(
                "a kernel using thread_id, simd operations or shared memory runs one thread per element: give the "
                "launch num_threads=N (or meTile's BLOCK constexpr), or an arange to fix its thread count",
                thread_level.loc)
        if role_threads is not None and role_threads != threads:
            raise UnsupportedConstructError(
                f"the simdgroup roles need {role_threads} threads but the kernel runs {threads} (num_threads, or "
                "meTile's BLOCK)", roles[0].loc)
        _check_asked(asked, threads, t.simd_width, f"the kernel runs one thread per element, {threads} threads "
                     "(num_threads, or meTile's BLOCK)", thread_level.loc)
    elif role_threads is not None:
        threads = role_threads
        _check_asked(asked, threads, t.simd_width, "its simdgroup roles have that many", roles[0].loc)
    elif dots:
        threads = t.simd_width * _dot_simdgroups(k, dots, t)
    else:
        vec = t.vector_width if vectorize and biggest >= t.vector_width * t.simd_width else 1
        threads = min(t.max_auto_threads, max(1, -(-biggest // vec)))
        if vec > 1 and not roles and not _moves_vectors(k, ctx, threads, vec):
            vec, threads = 1, min(t.max_auto_threads, biggest)
        if asked is not None:   # each thread holds as many runs of `vec` elements as that takes
            threads = t.simd_width * asked
            if vec > 1 and not roles and not _moves_vectors(k, ctx, threads, vec):
                vec = 1
    if roles and role_threads is None and thread_level is None:  # room for an even split among the roles
        share = t.simd_width * roles[0].num_roles
        threads = -(-max(threads, share) // share) * share
    if not 0 < threads <= t.max_threads:
        where = thread_level.loc if thread_level is not None else k.loc
        raise UnsupportedConstructError(f"a program of {threads} threads: Metal allows 1 to {t.max_threads}", where)
    if biggest > threads * t.max_elements_per_thread:
        tile = next(n for n in scan(k, ctx.analyses).nodes if isinstance(n, Value) and not isinstance(n, SharedAlloc)
                    and isinstance(n.type, (TileType, PtrType)) and n.type.size == biggest)
        raise UnsupportedConstructError(
            f"a tile of {biggest} elements on this program's {threads} threads would hold {-(-biggest // threads)} "
            f"elements in each thread's registers; metile allows at most {t.max_elements_per_thread} per thread: run "
            f"more threads (num_simdgroups={-(-biggest // (t.simd_width * t.max_elements_per_thread))} or more) or "
            "loop over smaller tiles with metile.tile_range", tile.loc or k.loc)
    ranges, _ = role_ranges(roles, threads, t.simd_width)
    return LaunchPlan(threads, vec, tuple(ranges[r] for r in sorted(ranges)))


def largest_tile(k: Kernel, analyses: Analyses) -> int:
    """The most elements of a tile (a value of tile or pointer type, not a `shared` array) in `k`, 1 without one;
    made once per body in a run, for `plan_launch` and `vectorize_memory`."""
    return analyses.of(_largest_tile, k)


def _largest_tile(k: Kernel, analyses: Analyses) -> int:
    # Types are interned (and hashed by identity): the kernel's values have few distinct ones, gathered in C.
    types: set = set()
    for cls, same in scan(k, analyses).classes():
        if issubclass(cls, Value) and not issubclass(cls, SharedAlloc):
            types.update(map(_TYPE, same))
    return max((t.size for t in types if isinstance(t, (TileType, PtrType))), default=1)


_TYPE = attrgetter("type")


def value_defs(found: Scan) -> dict[str, Value]:
    """The value each name stands for: a `Let`'s value, or the yield of a `simdgroup_role` result."""
    defs = {n.var.name: n.value for n in found.of(Let)}
    for n in found.of(SimdgroupRole):
        for r, y in zip(n.results, n.yields):
            defs[r.name] = y
    return defs


def axis_analysis(k: Kernel, analyses: Analyses) -> AxisAnalysis:
    """The axis analysis of `k` (over `value_defs`), made once per body in a run and shared by `plan_launch`, the
    optimisation passes and the lowering."""
    return analyses.of(_axes, k)


def _axes(k: Kernel, analyses: Analyses) -> AxisAnalysis:
    found = scan(k, analyses)
    loops = {s.index.name: (s.start, s.step) for s in found.of(For)}
    return AxisAnalysis(value_defs(found), loops)


def _moves_vectors(k: Kernel, ctx: PassContext, threads: int, vec: int) -> bool:
    """Whether at least half of the loads and stores of tiles would move runs of `vec` elements at once on
    `threads` threads (the lowering's test, `metile.rewrite.axis_info.vector_width`, on the layout it would
    choose). With fewer, runs would mostly move element by element, each run with a vector path beside it: more
    code for little gain (a layer norm whose rows are not aligned, but its weights are)."""
    found = scan(k, ctx.analyses)
    axes = axis_analysis(k, ctx.analyses)
    ptrs = [n.ptr for n in found.of(Load) if n.type.shape] + [n.ptr for n in found.of(Store) if n.ptr.type.shape]
    moving = sum(vector_width(axes, choose_vec(p.type.size, threads, vec), p) > 1 for p in ptrs)
    return moving > 0 and 2 * moving >= len(ptrs)


def _check_asked(asked: int | None, threads: int, simd: int, why: str, loc) -> None:
    if asked is not None and simd * asked != threads:
        raise UnsupportedConstructError(
            f"num_simdgroups={asked} asks for {simd * asked} threads, but this kernel runs {threads}: {why}", loc)


def _dot_simdgroups(k: Kernel, dots: list[Dot], t: AppleTarget) -> int:
    """The launch's `num_simdgroups` (or meTile's `NUM_SG`, which the launch turns into it), else the
    most of 4, 2, 1 among which every product's 8x8 pieces split evenly. Asked for more simdgroups than a product
    has pieces, some of them compute copies of others' pieces for it (`MmaGeometry.replicas`)."""
    asked = k.options.num_simdgroups
    if asked:
        return asked
    for n in (t.default_simdgroups, 2):
        if all(mma_split(d.type.shape[0], d.type.shape[1], n // _slices(k, d, n)) for d in dots if _dot_ok(d)):
            return n
    return 1


def _slices(k: Kernel, d: Dot, sgs: int) -> int:
    how = k.schedule.dots.get(d)
    return k_slices(d.type.shape[0], d.type.shape[1], d.a.type.shape[1], how.split if how else 1, sgs)


def _dot_ok(d: Dot) -> bool:
    return matrix_dims(d) is not None


__all__ = ["SIMD_WIDTH", "axis_analysis", "plan_launch", "role_ranges", "vectorize_memory"]
