"""`lower_tiles`: a planned Tile IR kernel -> a SIMT IR kernel (per-thread scalars, vectors, matrices).

Each Tile IR value is represented, per thread, by one of (`metile.rewrite.lower.state`):
- `Scalar(value)`: a per-thread scalar (program scalars are computed redundantly by every thread);
- `Regs(layout, regs)`: the elements this thread holds under the `Blocked` thread-value layout `assign_layouts`
  recorded (`metile.rewrite.distribute`); loads, loop-carried tiles and reduction results live here;
- `Mma(geometry, mats)`: 8x8 simdgroup matrices holding a `dot` result;
- `Lazy(expr)`: a pure tile expression (ranges, arithmetic on other values, shape changes), evaluated wherever an
  element is needed instead of being stored, so broadcasting it costs nothing;
- `Channel(base, shape)`: a `simdgroup_role` block's result in threadgroup memory.

The lowering is a set of rule functions, each taking the `Block` (the region being lowered) it emits into, over
the frozen `Facts` of the kernel:

- `statements`: the statement rules, barriers and the refusals of collectives under divergent control flow;
- `values`: `at(blk, v, pt)`, the Metal value of element `pt` of tile `v` (a point is a flat row-major index,
  plus, when it is slot `s` of layout `L` on this thread, the key `(L, s)`: a value held under `L` is read
  directly), and the representation of each named value;
- `exchange`: moving tiles between threads through threadgroup scratch (publish, barrier, read back); scratch is
  symbolic (`metile.ir.simt.Scratch`), one use per statement, placed by `allocate_threadgroup_memory`;
- `memory`: loads and stores, vectorised where the axis analysis proves it (`staged_runs`: where the runs of a `dot`
  operand staged from device memory lie, and their bounds tested once per tile or from a run's ends);
- `reductions`: reductions, arg-reductions and scans (per thread, per simdgroup, through scratch);
- `mma`, `mma_use`, `lines`: `dot` on simdgroup matrices and what becomes of its result (`lines`: stored lane by lane
  by rows and columns);
- `fma`: the products the matrices do not fit as they are, padded to 8x8 pieces or computed by per-thread
  multiply-adds (sides not multiples of 8, batched products);
- `rolled`: slots looped over at run time instead of unrolled;
- `control`: `For`, `If`, `While` and `simdgroup_role`.

Control flow keeps its structure. Barriers (the user's, and those of gathers and reductions) are only allowed
where control flow is uniform over the program and outside role blocks, simdgroup collectives where it is
uniform over each simdgroup; elsewhere the construct is refused at its line. Stores of program scalars are done
once per program (by its first thread).
"""

from __future__ import annotations

import attrs

from metile.ir.ops import BuiltinKind, Stage
from metile.ir.stmts import Kernel
from metile.ir.values import Param, SharedAlloc, Var
from metile.rewrite import metal_ops as mo
from metile.rewrite.context import PassContext
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.lower.state import Block, Facts, Group, KernelState
from metile.rewrite.lower.statements import lower_block
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.plan import axis_analysis
from metile.rewrite.scan import scan
from metile.rewrite.threadgroup_memory import BoundRegions, bound_regions, has_regions
from metile.rewrite.uniformity import lane_dependence, varying_names


def facts_of(k: Kernel, ctx: PassContext) -> Facts:
    """What the lowering knows of the planned kernel `k`, from the analyses of the run."""
    return Facts(k, ctx.target, scan(k, ctx.analyses), varying_names(k, ctx.analyses), lane_dependence(k, ctx.analyses),
                 axis_analysis(k, ctx.analyses), k.schedule.layouts)


@define_pass(requires=[Fact.ACTIVITY, Fact.LAUNCH_PLAN, Fact.MMA_LAYOUTS, Fact.CONVERSIONS, Fact.STAGING],
             provides=[Fact.SIMT_IR])
def lower_tiles(k: Kernel, ctx: PassContext) -> Kernel:
    """The SIMT IR kernel computing the planned Tile IR kernel `k` (see the module docstring); its scratch memory
    and rings are placed by `allocate_threadgroup_memory`."""
    if k.stage is not Stage.TILE or k.plan is None:
        raise UnsupportedConstructError("lower_tiles takes a Tile IR kernel planned by plan_launch", k.loc)
    facts = facts_of(k, ctx)
    found = facts.scan
    kernel = KernelState({n.name for n in found.of(Var)} | {n.name for n in found.of(Param)})
    group = Group(mo.builtin(BuiltinKind.THREAD_INDEX_IN_THREADGROUP), k.plan.threads, 0, k.plan.simdgroups)
    body, _ = lower_block(Block(facts, kernel, group), k.body)
    user = sum(n.size * n.dtype.itemsize for n in found.of(SharedAlloc))
    user += sum(c.value.size * c.value.dtype.itemsize for c in kernel.channels)
    plan = attrs.evolve(k.plan, threadgroup_memory=user)
    out = Kernel(k.name, Stage.SIMT, k.params, kernel.channels + kernel.bound + body, k.meta, plan, loc=k.loc)
    ctx.analyses.record(has_regions, out, kernel.regions > 0)   # so that placing them needs no walk when there are none
    rings = kernel.regions > len(kernel.bound)   # the other regions are rings' buffers, inside their loops
    first = len(kernel.channels)
    ctx.analyses.record(bound_regions, out, None if rings else BoundRegions(
        tuple(range(first, first + len(kernel.bound))), frozenset(kernel.taken)))   # nor a walk to place them
    return out


__all__ = ["Block", "Facts", "KernelState", "facts_of", "lower_tiles"]
