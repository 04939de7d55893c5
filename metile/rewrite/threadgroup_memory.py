"""`allocate_threadgroup_memory`: SIMT IR -> Metal IR, placing the threadgroup memory the lowering asked for.

The lowering leaves its threadgroup memory symbolic (`metile.ir.simt`): regions of scratch, each part of one use
(the gathers of a statement, a reduction's partial sums), and the ring buffers of pipelined loops. This pass
places them, as pure rules over the kernel:
- the scratch arena: one array per dtype (`scratch_f32`), in the order the dtypes are first used; the regions of
  a use follow one another (each rounded up to 4 elements), and every use starts again at the beginning, since
  uses are separated by barriers; an arena is as long as its longest use;
- rings: one array per region (`ring_f32`) of `buffers` copies, this iteration's at `stage * size`; when the
  program's threadgroup memory with every ring would exceed the target's, each ring gets one buffer (no copies,
  no stage counter), and the `RingBarrier`s of the lowering become the barriers that needs: `kept` ones (before a
  pipelined loop) disappear, the others (before each write of a buffer) become barriers;
- the launch plan's `threadgroup_memory` is the sum of every array's bytes: the user's `metile.shared` arrays and
  the lowering's channels (already counted) plus the arenas and rings.
The lowering binds each scratch region to a name by a `Let` at the kernel's start and records where
(`bound_regions`): placing them then rewrites those `Let`s alone, with no walk of the kernel; rings' buffers, inside
their loops, and regions met anywhere else are found by one walk (`survey`) and replaced where they are.
What is still over the device's limit after that is reported at launch (`metile.launch.check_device_limits`).
"""

from __future__ import annotations

import attrs

from metile.ir.node import children, evolve_node
from metile.ir.ops import Stage
from metile.ir.simt import RingBarrier, RingBuffer, Scratch
from metile.ir.stmts import Barrier, For, If, Kernel, Let, While
from metile.ir.tile import SimdgroupRole
from metile.ir.types import AddressSpace, DType, PtrType
from metile.ir.values import AddPtr, SharedAlloc, Value, Var
from metile.rewrite import metal_ops as mo
from metile.rewrite.context import Analyses, PassContext
from metile.rewrite.driver import replace
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.passes import Fact, define_pass


@attrs.frozen
class Placement:
    """Where each symbolic region goes: `scratch` maps a `Scratch` to its arena and offset, `rings` a
    `(stage name, part)` to its array, and `kept` says whether rings keep their buffers."""

    scratch: dict
    rings: dict
    kept: bool
    stages: frozenset[str]   # the stage counters of the rings (dropped with the rings' buffers)


def place_region(n, at: Placement) -> Value | None:
    """A rule: a symbolic region -> its place (see the module docstring)."""
    match n:
        case Scratch():
            base, offset = at.scratch[n]
            return base if offset == 0 else AddPtr(base, mo.const(offset), loc=n.loc)
        case RingBuffer(stage, use, part, dtype, size, _) if at.kept:
            return AddPtr(at.rings[stage.name, use, part], mo.mul(stage, mo.const(size)), loc=n.loc)
        case RingBuffer(_, use, part, dtype, size, _):
            base, offset = at.scratch[Scratch(use, part, dtype, size)]
            return base if offset == 0 else AddPtr(base, mo.const(offset), loc=n.loc)
    return None


def place_statements(stmts, at: Placement, following: frozenset[str]) -> list:
    """`stmts` with ring barriers decided, and (rings dropped) the stage counters and their updates removed."""
    out = []
    for s in stmts:
        match s:
            case RingBarrier(_, kept):
                if kept == at.kept:
                    out.append(Barrier(loc=s.loc))
            case Let(var, _) if var.name in following:
                pass
            case For():
                keep = [i for i, c in enumerate(s.carried) if at.kept or c.name not in at.stages]
                out.append(evolve_node(
                    s, carried=[s.carried[i] for i in keep], inits=[s.inits[i] for i in keep],
                    yields=[s.yields[i] for i in keep], results=[s.results[i] for i in keep],
                    body=place_statements(s.body, at, following)))
            case If():
                out.append(evolve_node(s, then=place_statements(s.then, at, following),
                                        orelse=place_statements(s.orelse, at, following)))
            case While():
                out.append(evolve_node(s, cond_body=place_statements(s.cond_body, at, following),
                                        body=place_statements(s.body, at, following)))
            case SimdgroupRole():
                out.append(evolve_node(s, body=place_statements(s.body, at, following)))
            case _:
                out.append(s)
    return out


def _arena_bytes(scratches) -> int:
    """The bytes of the scratch arenas the regions `scratches` need (as `allocate_threadgroup_memory` places them)."""
    ends: dict[tuple[DType, int], int] = {}
    for s in scratches:
        ends[s.dtype, s.use] = ends.get((s.dtype, s.use), 0) + -(-s.size // 4) * 4
    longest: dict[DType, int] = {}
    for (dtype, _), n in ends.items():
        longest[dtype] = max(longest.get(dtype, 0), n)
    return sum(n * dtype.itemsize for dtype, n in longest.items())


def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


@define_pass(requires=[Fact.SIMT_IR], provides=[Fact.METAL_IR])
def allocate_threadgroup_memory(k: Kernel, ctx: PassContext) -> Kernel:
    """`k` (SIMT IR) as Metal IR, its scratch arenas and rings placed (see the module docstring)."""
    if k.stage is not Stage.SIMT or k.plan is None:
        raise UnsupportedConstructError("allocate_threadgroup_memory takes a planned SIMT IR kernel", k.loc)
    if not ctx.analyses.of(has_regions, k):   # recorded by `lower_tiles`, which made them
        return evolve_node(k, stage=Stage.METAL)
    bound = ctx.analyses.of(bound_regions, k)   # recorded by `lower_tiles` too: then nothing is walked
    found = survey(k) if bound is None else None
    regions = found.regions if found is not None else [k.body[i].value for i in bound.lets]
    scratches = dict.fromkeys(n for n in regions if n.__class__ is Scratch)
    rings: dict[tuple[str, int, int], RingBuffer] = {}
    for n in regions:
        if n.__class__ is RingBuffer:
            rings.setdefault((n.stage.name, n.use, n.part), n)
    full = sum(r.size * r.buffers * r.dtype.itemsize for r in rings.values())
    kept = k.plan.threadgroup_memory + _arena_bytes(scratches) + full <= ctx.target.threadgroup_memory
    if not kept:   # each ring one buffer: its regions are scratch regions of their use
        for r in rings.values():
            scratches.setdefault(Scratch(r.use, r.part, r.dtype, r.size, loc=r.loc))
    taken = set(found.names if found is not None else bound.taken) | {p.name for p in k.params}
    prefix: list = []
    placed: dict[Scratch, tuple[Value, int]] = {}
    arenas: dict[DType, tuple[Var, int, object]] = {}   # dtype -> (base, elements, the location needing the most)
    ends: dict[tuple[DType, int], int] = {}               # (dtype, use) -> elements its regions take so far
    for s in sorted(scratches, key=lambda x: (x.use, x.part)):
        dtype = s.dtype
        base, size, loc = arenas.get(dtype) or (Var(_fresh(f"scratch_{dtype.value}", taken),
                                                    PtrType(dtype, (), AddressSpace.THREADGROUP)), 0, None)
        off = ends.get((dtype, s.use), 0)
        end = ends[dtype, s.use] = off + -(-s.size // 4) * 4
        if end > size:
            size, loc = end, s.loc
        arenas[dtype] = (base, size, loc)
        placed[s] = (base, off)
    for dtype, (base, size, loc) in arenas.items():
        prefix.append(Let(base, SharedAlloc((size,), dtype), loc=loc))
    scratch_bytes = sum(size * dtype.itemsize for dtype, (_, size, _) in arenas.items())
    bases = {}
    for key, r in rings.items() if kept else ():
        base = Var(_fresh(f"ring_{r.dtype.value}", taken), PtrType(r.dtype, (), AddressSpace.THREADGROUP))
        prefix.append(Let(base, SharedAlloc((r.size * r.buffers,), r.dtype), loc=r.loc))
        bases[key] = base
    stages = frozenset(name for name, _, _ in rings)
    at = Placement(placed, bases, kept, stages)
    if found is None:   # each region is the value of its `Let`: only those are rebuilt
        body = list(k.body)
        for i in bound.lets:
            s = body[i]
            body[i] = Let(s.var, place_region(s.value, at), loc=s.loc)
    else:
        body = replace(k, {id(n): place_region(n, at) for n in found.regions}, found.holding).body
    if rings:
        body = place_statements(body, at, frozenset() if kept else _following(found, stages))
    total = k.plan.threadgroup_memory + scratch_bytes + (full if kept else 0)
    plan = evolve_node(k.plan, threadgroup_memory=total)
    return evolve_node(k, stage=Stage.METAL, body=[*prefix, *body], plan=plan)


@attrs.frozen
class BoundRegions:
    """A kernel whose symbolic regions are all `Scratch` regions, each the value of a `Let` of its body's top level
    and found nowhere else (as `lower_tiles` makes them: `metile.rewrite.lower.exchange.scratch`): `lets` are the
    positions of those `Let`s in the body, `taken` names the arenas may not take (the kernel's variables, or more:
    `lower_tiles` gives every name it took, which is not compared)."""

    lets: tuple[int, ...]
    taken: frozenset[str] = attrs.field(eq=False)


def bound_regions(k: Kernel, analyses: Analyses | None = None) -> BoundRegions | None:
    """The `BoundRegions` of `k`, or None when some region is elsewhere (a ring's buffer, a region used inline)."""
    found = survey(k)
    lets = tuple(i for i, s in enumerate(k.body) if s.__class__ is Let and s.value.__class__ is Scratch)
    holders = {id(k)} | {id(k.body[i]) for i in lets} | {id(k.body[i].value) for i in lets} if lets else set()
    if len(found.regions) != len(lets) or found.holding != holders:
        return None
    return BoundRegions(lets, frozenset(found.names))


def has_regions(k: Kernel, analyses: Analyses | None = None) -> bool:
    """Whether `k` has a symbolic region (`Scratch`, `RingBuffer`) to place."""
    seen: set[int] = set()
    stack: list = [k]
    while stack:
        n = stack.pop()
        if n.__class__ is Scratch or n.__class__ is RingBuffer:
            return True
        for c in children(n):
            if id(c) not in seen:
                seen.add(id(c))
                stack.append(c)
    return False


def _following(found: Survey, stages: frozenset[str]) -> frozenset[str]:
    """The names each dropped stage counter's loop yields as its next value (bound by a `Let` in the body)."""
    return frozenset(y.name for n in found.loops for c, y in zip(n.carried, n.yields)
                     if c.name in stages and isinstance(y, Var))


@attrs.frozen
class Survey:
    """What the pass needs of a kernel, from one walk: its symbolic regions (`Scratch`, `RingBuffer`) in the order
    they are first met (children before parents, first child first), the names of its variables, its loops, and
    the ids of the nodes containing a region (the only ones placing the regions rebuilds)."""

    regions: list
    names: set[str]
    loops: list
    holding: set[int]


def survey(k: Kernel) -> Survey:
    """The `Survey` of `k`: one walk over its distinct nodes, without the per-value facts of
    `metile.rewrite.scan.Scan`, which this pass does not need."""
    regions: list = []
    names: set[str] = set()
    loops: list = []
    holding: set[int] = set()
    seen: set[int] = set()
    stack: list = [(k, None)]
    pop, push, add = stack.pop, stack.append, seen.add
    while stack:
        n, kids = pop()
        if kids is None:
            if id(n) in seen:
                continue
            add(id(n))
            cls = n.__class__
            if cls is Var:
                names.add(n.name)
                continue
            if cls is Scratch or cls is RingBuffer:
                regions.append(n)
                holding.add(id(n))
                if cls is Scratch:
                    continue
            elif cls is For:
                loops.append(n)
            kids = children(n)
            if kids:
                push((n, kids))
                for i in range(len(kids) - 1, -1, -1):
                    c = kids[i]
                    if id(c) not in seen:
                        push((c, None))
            continue
        for c in kids:
            if id(c) in holding:
                holding.add(id(n))
                break
    return Survey(regions, names, loops, holding)


__all__ = ["BoundRegions", "Placement", "Survey", "allocate_threadgroup_memory", "bound_regions", "has_regions",
           "place_region", "place_statements", "survey"]
