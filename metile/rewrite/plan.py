"""`plan_launch`: decide a Tile IR kernel's threadgroup shape, and the facts the lowering needs.

The decisions go into the kernel's `plan` (`metile.ir.stmts.LaunchPlan`), apart from the user's constexprs in
`meta`. Threads per program (`plan.threads`), in order of precedence:
- a kernel written at thread level (it uses `thread_id`, `simd_lane_id`, simdgroup exchanges or
  `shared`) runs one element per thread: `BLOCK` threads when it has a `BLOCK` constexpr, else the
  length of its longest `arange`;
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

`varying_names(k)` is the uniformity analysis: the variables whose value may differ between the
threads of a program (they depend on `thread_id`, `simd_lane_id`, a simdgroup exchange, or a branch
or loop controlled by such a value). Barriers are only legal where control flow is uniform.
"""

from __future__ import annotations

import attrs

from metile.ir.node import walk
from metile.ir.ops import Stage
from metile.ir.stmts import For, If, Kernel, LaunchPlan, Let, RoleSpan, Store, While
from metile.ir.tile import Arange, Dot, MmaPlan, SimdgroupRole
from metile.ir.types import PtrType, TileType
from metile.ir.values import Load, SharedAlloc, Value
from metile.rewrite.axis_info import AxisAnalysis, vector_width
from metile.rewrite.distribute import choose_vec, k_slices, mma_arrangement, mma_split
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.scan import VARYING_SOURCES, Scan, scan

MAX_THREADS = 1024
DEFAULT_SIMDGROUPS = 4   # simdgroups of a program with `dot`, unless the launch says
MAX_AUTO_THREADS = 256
MAX_ELEMENTS_PER_THREAD = 256   # a tile of the most elements (65536) on the most threads chosen for it (256)
SIMD_WIDTH = 32
VECTOR_WIDTH = 4

THREAD_LEVEL = (*VARYING_SOURCES, SharedAlloc)  # what makes a kernel run one thread per element


def role_ranges(roles: list[SimdgroupRole], threads: int | None) -> tuple[dict[int, RoleSpan], int | None]:
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
    implied = SIMD_WIDTH * sum(counts.values()) if explicit else None
    if implied is None and threads is None:
        return {}, None
    total_sgs = (implied if implied is not None else threads or 0) // SIMD_WIDTH
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
def plan_launch(k: Kernel) -> Kernel:
    """`k` with its launch plan: threads per threadgroup and the simdgroups of each role, each thread holding
    single elements (`vectorize_memory` may then give it runs of 4)."""
    if k.stage is not Stage.TILE:
        raise UnsupportedConstructError(f"plan_launch takes a Tile IR kernel, not a {k.stage.value} one", k.loc)
    return attrs.evolve(k, plan=_plan(k, vectorize=False))


@define_pass(requires=[Fact.LAUNCH_PLAN], precedes=[Fact.METAL_IR], optional=True)
def vectorize_memory(k: Kernel) -> Kernel:
    """`k` re-planned with runs of `VECTOR_WIDTH` consecutive elements per thread, when its thread count follows
    its tiles and at least half of its loads and stores of tiles can then move vectors (the module docstring);
    else `k`. Loads and stores of such runs become vector accesses where the axis analysis proves them consecutive
    and aligned, with a guarded element-by-element tail where a mask may cut a run."""
    if k.stage is not Stage.TILE or k.plan is None:
        raise UnsupportedConstructError("vectorize_memory takes a Tile IR kernel planned by plan_launch", k.loc)
    if k.plan.vector_width != 1 or scan(k).of(Dot):   # a kernel with `dot` runs a thread count its products fix
        return k
    plan = _plan(k, vectorize=True)
    return k if plan == k.plan else attrs.evolve(k, plan=plan)


@define_pass(requires=[Fact.LAUNCH_PLAN], provides=[Fact.MMA_LAYOUTS], precedes=[Fact.METAL_IR])
def assign_layouts(k: Kernel) -> Kernel:
    """`k` with the arrangement of simdgroups over the 8x8 pieces of each `dot` recorded in its schedule
    (`MmaPlan.simdgroups`): on the simdgroups that run it (the program's, or its `simdgroup_role`'s, less those of
    other slices of k), the arrangement `metile.rewrite.distribute.mma_split` finds, whose blocks of pieces are as
    square as the piece grid allows, so that each simdgroup loads the fewest operand fragments per step of k. The
    lowering computes each simdgroup's pieces from this layout (`MmaGeometry`). Element-wise tiles need no entry:
    their layout follows from the plan's threads and vector width (`metile.rewrite.distribute.Blocked`)."""
    if k.stage is not Stage.TILE or k.plan is None:
        raise UnsupportedConstructError("assign_layouts takes a Tile IR kernel planned by plan_launch", k.loc)
    found = scan(k)
    dots = found.of(Dot)
    if not dots:
        return k
    sizes: dict[Dot, set[int]] = {}   # the simdgroups of each group that runs a product
    inside: set[int] = set()
    for role in found.of(SimdgroupRole):
        for n in walk(role):
            inside.add(id(n))
            if isinstance(n, Dot) and role.role < len(k.plan.roles):
                sizes.setdefault(n, set()).add(k.plan.roles[role.role].count)
    for d in dots:
        if id(d) not in inside:
            sizes.setdefault(d, set()).add(k.plan.simdgroups)
    group = {d: next(iter(n)) for d, n in sizes.items() if len(n) == 1}   # run by groups of two sizes: not chosen
    plans = old = k.schedule.dots
    for d, sgs in group.items():
        how = old.get(d, MmaPlan())
        (m, kk), n = d.a.type.shape, d.b.type.shape[1]
        found = sgs and _dot_ok(d) and mma_arrangement(m, n, sgs // k_slices(m, n, kk, how.split, sgs))
        arrangement = found and found[:2]
        if arrangement and arrangement != how.simdgroups:
            plans = plans.set(d, attrs.evolve(how, simdgroups=arrangement))
    return k if plans is old else attrs.evolve(k, schedule=attrs.evolve(k.schedule, dots=plans))


def _plan(k: Kernel, vectorize: bool) -> LaunchPlan:
    found = scan(k)
    nodes = found.nodes
    thread_level = next((n for n in nodes if isinstance(n, THREAD_LEVEL)), None)
    dots = found.of(Dot)
    aranges = [n.stop - n.start for n in found.of(Arange)]
    roles = found.of(SimdgroupRole)
    biggest = max((n.type.size for n in nodes if isinstance(n, Value) and not isinstance(n, SharedAlloc)
                   and isinstance(n.type, (TileType, PtrType))), default=1)
    vec = 1
    asked = k.options.num_simdgroups
    _, role_threads = role_ranges(roles, None)
    if thread_level is not None:
        threads = k.meta.get("BLOCK") or max(aranges, default=0)
        if not threads:
            raise UnsupportedConstructError(
                "a kernel using thread_id, simd operations or shared memory runs one thread per element: give it a "
                "BLOCK constexpr or an arange to fix its thread count", thread_level.loc)
        if role_threads is not None and role_threads != threads:
            raise UnsupportedConstructError(
                f"the simdgroup roles need {role_threads} threads but the kernel runs BLOCK = {threads}", roles[0].loc)
        _check_asked(asked, threads, f"the kernel runs one thread per element, BLOCK = {threads}", thread_level.loc)
    elif role_threads is not None:
        threads = role_threads
        _check_asked(asked, threads, "its simdgroup roles have that many", roles[0].loc)
    elif dots:
        threads = SIMD_WIDTH * _dot_simdgroups(k, dots)
    else:
        vec = VECTOR_WIDTH if vectorize and biggest >= VECTOR_WIDTH * SIMD_WIDTH else 1
        threads = min(MAX_AUTO_THREADS, max(1, -(-biggest // vec)))
        if vec > 1 and not roles and not _moves_vectors(found, threads, vec):
            vec, threads = 1, min(MAX_AUTO_THREADS, biggest)
        if asked is not None:   # each thread holds as many runs of `vec` elements as that takes
            threads = SIMD_WIDTH * asked
            if vec > 1 and not roles and not _moves_vectors(found, threads, vec):
                vec = 1
    if roles and role_threads is None and thread_level is None:  # room for an even split among the roles
        share = SIMD_WIDTH * roles[0].num_roles
        threads = -(-max(threads, share) // share) * share
    if not 0 < threads <= MAX_THREADS:
        where = thread_level.loc if thread_level is not None else k.loc
        raise UnsupportedConstructError(f"a program of {threads} threads: Metal allows 1 to {MAX_THREADS}", where)
    if biggest > threads * MAX_ELEMENTS_PER_THREAD:
        tile = next(n for n in nodes if isinstance(n, Value) and not isinstance(n, SharedAlloc)
                    and isinstance(n.type, (TileType, PtrType)) and n.type.size == biggest)
        raise UnsupportedConstructError(
            f"a tile of {biggest} elements on this program's {threads} threads would hold {-(-biggest // threads)} "
            f"elements in each thread's registers; metile allows at most {MAX_ELEMENTS_PER_THREAD} per thread: run "
            f"more threads (num_simdgroups={-(-biggest // (SIMD_WIDTH * MAX_ELEMENTS_PER_THREAD))} or more) or "
            "loop over smaller tiles with metile.tile_range", tile.loc or k.loc)
    ranges, _ = role_ranges(roles, threads)
    return LaunchPlan(threads, vec, tuple(ranges[r] for r in sorted(ranges)))


def value_defs(found: Scan) -> dict[str, Value]:
    """The value each name stands for: a `Let`'s value, or the yield of a `simdgroup_role` result."""
    defs = {n.var.name: n.value for n in found.of(Let)}
    for n in found.of(SimdgroupRole):
        for r, y in zip(n.results, n.yields):
            defs[r.name] = y
    return defs


def axis_analysis(found: Scan) -> AxisAnalysis:
    """The axis analysis of the scanned kernel (over `value_defs`), made once per scan and shared by
    `plan_launch` and the lowering."""
    axes = found.derived.get("axes")
    if axes is None:
        loops = {s.index.name: (s.start, s.step) for s in found.of(For)}
        axes = found.derived["axes"] = AxisAnalysis(value_defs(found), loops)
    return axes


def _moves_vectors(found: Scan, threads: int, vec: int) -> bool:
    """Whether at least half of the loads and stores of tiles would move runs of `vec` elements at once on
    `threads` threads (the lowering's test, `metile.rewrite.axis_info.vector_width`, on the layout it would
    choose). With fewer, runs would mostly move element by element, each run with a vector path beside it: more
    code for little gain (a layer norm whose rows are not aligned, but its weights are)."""
    axes = axis_analysis(found)
    ptrs = [n.ptr for n in found.of(Load) if n.type.shape] + [n.ptr for n in found.of(Store) if n.ptr.type.shape]
    moving = sum(vector_width(axes, choose_vec(p.type.size, threads, vec), p) > 1 for p in ptrs)
    return moving > 0 and 2 * moving >= len(ptrs)


def _check_asked(asked: int | None, threads: int, why: str, loc) -> None:
    if asked is not None and SIMD_WIDTH * asked != threads:
        raise UnsupportedConstructError(
            f"num_simdgroups={asked} asks for {SIMD_WIDTH * asked} threads, but this kernel runs {threads}: {why}", loc)


def _dot_simdgroups(k: Kernel, dots: list[Dot]) -> int:
    """The launch's `num_simdgroups`, else a `NUM_SG` constexpr of the kernel's (meTile's way to choose), else the
    most of 4, 2, 1 among which every product's 8x8 pieces split evenly. Asked for more simdgroups than a product
    has pieces, some of them compute copies of others' pieces for it (`MmaGeometry.replicas`)."""
    asked = k.options.num_simdgroups or k.meta.get("NUM_SG")
    if asked:
        return asked
    for n in (DEFAULT_SIMDGROUPS, 2):
        if all(mma_split(d.type.shape[0], d.type.shape[1], n // _slices(k, d, n)) for d in dots if _dot_ok(d)):
            return n
    return 1


def _slices(k: Kernel, d: Dot, sgs: int) -> int:
    how = k.schedule.dots.get(d)
    return k_slices(d.type.shape[0], d.type.shape[1], d.a.type.shape[1], how.split if how else 1, sgs)


def _dot_ok(d: Dot) -> bool:
    return all(s % 8 == 0 for s in d.a.type.shape + d.b.type.shape)


def varying_names(k: Kernel) -> frozenset[str]:
    """The names of the variables of `k` that may differ between the threads of one program."""
    names: set[str] = set()
    facts = scan(k)

    def dep(v: Value | None) -> bool:
        return facts.depends(v, names)

    def mark(vs, flag: bool) -> bool:
        new = [v.name for v in vs if flag and v.name not in names]
        names.update(new)
        return bool(new)

    def body(stmts, forced: bool) -> bool:
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
                    changed |= body(inner, bounds)
                case If(cond, then, orelse, ty, ey, results):
                    branch = forced or dep(cond)
                    changed |= body(then, branch) | body(orelse, branch)
                    for r, a, b in zip(results, ty, ey):
                        changed |= mark([r], branch or dep(a) or dep(b))
                case While(carried, inits, cond_body, cond, inner, yields, results):
                    for c, i, y, r in zip(carried, inits, yields, results):
                        changed |= mark([c, r], forced or dep(i) or dep(y))
                    changed |= body(cond_body, forced)
                    loop = forced or dep(cond)
                    if loop:
                        changed |= mark(list(carried) + list(results), True)
                    changed |= body(inner, loop)
                case SimdgroupRole(_, _, _, inner):
                    changed |= body(inner, forced)
        return changed

    while body(k.body, False):
        pass
    return frozenset(names)


__all__ = ["MAX_THREADS", "SIMD_WIDTH", "assign_layouts", "plan_launch", "role_ranges", "varying_names",
           "vectorize_memory"]
