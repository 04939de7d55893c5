"""The optimisation passes of the default schedule: each a pure function of Tile IR recording a decision in the
kernel (its `Schedule`: a `Dot`'s `MmaPlan`, a `For`'s buffers; or its program ids, rewritten) that `lower_tiles`
carries out. Recording a choice changes no node of the body, so the passes share one scan of it.

Each is optional: a pipeline without it still compiles every kernel correctly, the plain way.
- `group_programs` (launch option `group_programs=G`): programs of a 2-D grid run in groups of `G` rows of the
  grid, column by column within a group, so that programs running at the same time share operand tiles in the
  last-level cache (Triton's grouped ordering, done by the compiler). Without the option it does nothing.
- `split_k`: a product with fewer 8x8 pieces than the program has simdgroups has its k dimension cut into
  slices, one per group of simdgroups, whose partial sums are added at the end.
- `pad_staging`: each staged `dot` operand's rows are padded as the bank model of `metile.layout.banks` chooses
  (`metile.rewrite.staging.staging_pad`), so that the 8x8 `simdgroup_load`s meet no bank conflicts.
- `serpentine_mma`: the products of each 8-wide step of k run row by row, every other row backwards, so that
  consecutive multiply-accumulates share an operand.
- `preload_fragments`: the operands of the next 8-wide step of k are loaded from threadgroup memory before
  the products of this one (register double-buffering), for products of at least 8 steps (k >= 64).
- `hoist_staging`: an operand of a product in a loop's body that is the same in every iteration (attention's
  queries) is staged in threadgroup memory once, before the loop, instead of in every iteration, as long as the
  hoisted buffers together take at most half of the target's threadgroup memory.
- `direct_operands` (launch option `direct_operands=True`): an unmasked, row-major `dot` operand is read by each
  simdgroup straight from device memory into its simdgroup matrices instead of being staged.
- `multi_buffer`: a `tile_range` loop with `num_stages=N` (or the launch's `num_stages=N`) whose body stages
  `dot` operands rotates them through N threadgroup buffers (at most what fits in 32 KB), so that one barrier
  per iteration protects them instead of two.
"""

from __future__ import annotations

from metile.ir.node import children, evolve_node
from metile.ir.ops import BinOp
from metile.ir.stmts import For, If, Kernel, Let, Store, While
from metile.ir.tile import Dot, MmaPlan, NumPrograms, ProgramId, SimdgroupRole
from metile.ir.types import DType
from metile.ir.values import Binary, Const, Load, Var
from metile.rewrite.context import PassContext
from metile.rewrite.distribute import k_slices, matrix_dims, mma_split
from metile.rewrite.driver import substitute
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.plan import THREAD_LEVEL, axis_analysis
from metile.rewrite.scan import scan
from metile.rewrite.staging import staging_pad

PLAIN = MmaPlan()


def plan_of(k: Kernel, d: Dot) -> MmaPlan:
    """How the passes so far chose to compute `d` (the plain way when none chose)."""
    return k.schedule.dots.get(d, PLAIN)


def _plan_dots(k: Kernel, ctx: PassContext, choose) -> Kernel:
    """`k` with `choose(dot, plan)` (a new `MmaPlan`, or None to keep `plan`) recorded for each `Dot` in its
    schedule; the body is untouched."""
    dots = scan(k, ctx.analyses).of(Dot)
    plans = old = k.schedule.dots
    for d in dots:
        new = choose(d, old.get(d, PLAIN))
        if new is not None and new != old.get(d, PLAIN):
            plans = plans.set(d, new)
    return k if plans is old else evolve_node(k, schedule=evolve_node(k.schedule, dots=plans))


@define_pass(precedes=[Fact.STAGING, Fact.METAL_IR], optional=True)
def pad_staging(k: Kernel, ctx: PassContext) -> Kernel:
    """Pad the staged rows of each `dot` operand by the bank model's choice."""

    def choose(d: Dot, how: MmaPlan) -> MmaPlan:
        return evolve_node(how, pad=tuple(staging_pad(x.type.shape[-1], x.type.dtype.itemsize) for x in (d.a, d.b)))

    return _plan_dots(k, ctx, choose)


@define_pass(precedes=[Fact.METAL_IR], optional=True)
def serpentine_mma(k: Kernel, ctx: PassContext) -> Kernel:
    """Run the 8x8 products of each step in serpentine order."""
    return _plan_dots(k, ctx, lambda d, how: evolve_node(how, serpentine=True))


PRELOAD_STEPS = 8   # 8-wide steps of k from which a product preloads its operands


@define_pass(precedes=[Fact.METAL_IR], optional=True)
def preload_fragments(k: Kernel, ctx: PassContext) -> Kernel:
    """Load the next step's operands before this step's products, in every `dot` of `PRELOAD_STEPS` steps of k or
    more. A shorter loop has a small constant trip count, which the Metal compiler unrolls and schedules itself:
    preloading would only add code."""
    return _plan_dots(k, ctx, lambda d, how: evolve_node(how, preload=True)
                      if d.a.type.shape[1] >= 8 * PRELOAD_STEPS else None)


@define_pass(precedes=[Fact.STAGING, Fact.METAL_IR], optional=True)
def hoist_staging(k: Kernel, ctx: PassContext) -> Kernel:
    """Mark the operands of the products in each loop's body that are the same in every iteration (a name bound
    before the loop: not its index, not a carried value, nothing the body binds), to be staged once before it."""
    found = scan(k, ctx.analyses)
    loops = found.of(For)
    if not loops or not found.of(Dot):
        return k
    marks: dict[Dot, tuple[bool, bool]] = {}
    for s in loops:
        bound = {s.index.name, *(c.name for c in s.carried), *_bound(s.body)}
        for d in _loop_dots(s, found):
            hoist = tuple(isinstance(x, Var) and x.name not in bound for x in (d.a, d.b))
            if d in marks:   # the same product in the bodies of two loops: hoisted only where both agree
                hoist = tuple(a and b for a, b in zip(hoist, marks[d]))
            marks[d] = hoist
    marks = _within_budget({d: h for d, h in marks.items() if any(h)}, k, ctx.target.threadgroup_memory // 2)

    return _plan_dots(k, ctx, lambda d, how: evolve_node(how, hoist=marks[d]) if d in marks else None) if marks else k


def _within_budget(marks: dict[Dot, tuple[bool, bool]], k: Kernel, budget: int) -> dict[Dot, tuple[bool, bool]]:
    """The marks whose buffers (each hoisted operand has its own, for the whole program) fit in `budget` bytes
    together, taken in program order: the rest of threadgroup memory is left to what every iteration stages and
    exchanges (attention's backward holds four 128 x 64 operands the same in every iteration, 72 KB)."""
    out: dict[Dot, tuple[bool, bool]] = {}
    used = 0
    for d, hoist in marks.items():
        pads = plan_of(k, d).pad
        keep = []
        for x, h, pad in zip((d.a, d.b), hoist, pads):
            size = x.type.size // x.type.shape[-1] * (x.type.shape[-1] + pad) * x.type.dtype.itemsize
            keep.append(h and used + size <= budget)
            used += size if keep[-1] else 0
        if any(keep):
            out[d] = (keep[0], keep[1])
    return out


def _bound(stmts) -> set[str]:
    """The names the statements bind, in nested blocks too."""
    out: set[str] = set()
    for st in stmts:
        match st:
            case Let(var):
                out.add(var.name)
            case For() | While() | If() | SimdgroupRole():
                out.update(v.name for f in ("index", "carried", "results") for v in _vars(getattr(st, f, ())))
                for f in ("body", "then", "orelse", "cond_body"):
                    out |= _bound(getattr(st, f, ()))
    return out


def _vars(x) -> tuple[Var, ...]:
    return (x,) if isinstance(x, Var) else tuple(x)


@define_pass(precedes=[Fact.LAUNCH_PLAN, Fact.STAGING, Fact.METAL_IR], optional=True)
def split_k(k: Kernel, ctx: PassContext) -> Kernel:
    """Cut the k dimension of the products too small for the program's simdgroups (fewer 8x8 pieces than it has
    simdgroups to share them) into as few slices as keep every simdgroup busy, when k has at least two 8-wide
    steps per slice: `[8, 512] x [512, 8]` on 4 simdgroups is 4 slices of 128. Only for kernels whose thread
    count the products decide (no thread-level code, no simdgroup roles); when some product cannot be split
    so, none is, and the program runs fewer simdgroups as before."""
    found = scan(k, ctx.analyses)
    dots = found.of(Dot)
    if not dots or found.of(SimdgroupRole) or found.has(THREAD_LEVEL):
        return k
    sgs = k.options.num_simdgroups or ctx.target.default_simdgroups
    splits: dict[Dot, int] = {}
    for d in dots:
        dims = matrix_dims(d)
        if dims is None:
            return k
        m, n, kk = dims
        if mma_split(m, n, sgs):
            continue
        s = next((s for s in range(2, sgs + 1) if k_slices(m, n, kk, s, sgs) == s), None)
        if s is None:
            return k
        splits[d] = s
    if not splits:
        return k
    return _plan_dots(k, ctx, lambda d, how: evolve_node(how, split=splits[d]) if d in splits else None)


@define_pass(precedes=[Fact.STAGING, Fact.METAL_IR], optional=True)
def direct_operands(k: Kernel, ctx: PassContext) -> Kernel:
    """With the launch option `direct_operands=True`: mark each `dot` operand that is a tile load with no mask
    whose addresses are row-major with unit column stride, to be read by each simdgroup straight from device
    memory into its simdgroup matrices (`simdgroup_load` from device), without staging in threadgroup memory. The
    lowering does so when the load was left in memory for the product (not loaded into registers first) and its
    addresses are the same on every thread. Newer GPUs (M3 on) cache device reads well enough for this to beat
    staging; on older ones staging is faster, hence the option."""
    if not k.options.direct_operands:
        return k
    axes = axis_analysis(k, ctx.analyses)

    def direct(x) -> bool:
        load = axes.defs.get(x.name) if isinstance(x, Var) else None
        if not isinstance(load, Load) or load.mask is not None or load.type.dtype != x.type.dtype:
            return False
        st = axes.strides(load.ptr)
        return st is not None and st[1] == 1

    return _plan_dots(k, ctx, lambda d, how: evolve_node(how, direct=(direct(d.a), direct(d.b))))


def staged_bytes(d: Dot, how: MmaPlan) -> int:
    """The bytes of threadgroup memory `d`'s operands take when staged with their padding in every iteration (a
    hoisted operand is staged once, apart; one read straight from device memory is not staged)."""
    return sum(x.type.size // x.type.shape[-1] * (x.type.shape[-1] + pad) * x.type.dtype.itemsize
               for x, pad, once, direct in zip((d.a, d.b), how.pad, how.hoist, how.direct) if not (once or direct))


def _loop_dots(s: For, found) -> list[Dot]:
    """The products read by the statements of `s`'s own body (not those of nested blocks) and by its yields (the walk
    enters only values that contain a product or a reduction, as the kernel's scan `found` knows)."""
    todo = [*s.yields]
    for st in s.body:
        if isinstance(st, (Let, Store)):
            todo += [c for c in children(st) if c is not None]
    seen: set[int] = set()
    out: dict[Dot, None] = {}
    heavy = found.heavy
    while todo:   # one walk over all the roots: their shared subtrees are visited once
        n = todo.pop()
        if id(n) in seen or not heavy(n):
            continue
        seen.add(id(n))
        if isinstance(n, Dot):
            out[n] = None
        todo += children(n)
    return list(out)


@define_pass(precedes=[Fact.STAGING, Fact.METAL_IR], optional=True)
def multi_buffer(k: Kernel, ctx: PassContext) -> Kernel:
    """Rotate the staged operands of each pipelined loop's products through `num_stages` buffers (as many as fit
    in threadgroup memory; loops that ask for one stage, or stage nothing, keep one buffer)."""
    default = k.options.num_stages
    chosen = old = k.schedule.loops
    found = scan(k, ctx.analyses)
    for s in found.of(For):
        stages = s.num_stages or default or 1
        if stages < 2 or s in old:
            continue
        per = sum(staged_bytes(d, plan_of(k, d)) for d in _loop_dots(s, found))
        fits = min(stages, ctx.target.threadgroup_memory // per) if per else 1
        if fits > 1:
            chosen = chosen.set(s, fits)
    return k if chosen is old else evolve_node(k, schedule=evolve_node(k.schedule, loops=chosen))


@define_pass(precedes=[Fact.METAL_IR], optional=True)
def group_programs(k: Kernel, ctx: PassContext) -> Kernel:
    """Renumber the programs of a 2-D grid in groups of `k.options.group_programs` rows (see the module docstring):
    program `(x, y)`, dispatched `l = x + y * nx`-th, computes the tile of `(m, n)` where the group of `G` rows
    `l // (G * ny)` is walked column by column. A bijection of the grid: every tile is still computed once."""
    g = k.options.group_programs
    if g is None or not any(p.axis in (0, 1) for p in scan(k, ctx.analyses).of(ProgramId)):
        return k
    i32 = DType.I32

    def op(o: BinOp, a, b):
        return Binary(o, a, b)

    nx, ny = NumPrograms(0), NumPrograms(1)
    linear = op(BinOp.ADD, ProgramId(0), op(BinOp.MUL, ProgramId(1), nx))
    span = op(BinOp.MUL, Const(g, i32), ny)
    first = op(BinOp.MUL, op(BinOp.FLOORDIV, linear, span), Const(g, i32))
    rows = op(BinOp.MIN, op(BinOp.SUB, nx, first), Const(g, i32))
    inside = op(BinOp.MOD, linear, span)
    return substitute(k, {ProgramId(0): op(BinOp.ADD, first, op(BinOp.MOD, inside, rows)),
                          ProgramId(1): op(BinOp.FLOORDIV, inside, rows)})


__all__ = ["PLAIN", "direct_operands", "group_programs", "hoist_staging", "multi_buffer", "pad_staging", "plan_of",
           "preload_fragments", "serpentine_mma", "split_k", "staged_bytes"]
