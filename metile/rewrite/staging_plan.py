"""`plan_staging`: how much of k each `dot` stages in threadgroup memory at a time, decided on Tile IR before
`lower_tiles` and recorded in the product's `MmaPlan` (`chunk`), which the lowering follows
(`metile.rewrite.lower.mma.k_chunk`).

A product on simdgroup matrices stages its operands in the scratch arena, `[m, k]` and `[k, n]` with their rows
padded; staged a chunk of `kc` columns of `a` (rows of `b`) at a time, it takes `[m, kc]` and `[kc, n]` instead,
every chunk behind a barrier on each side. The pass chooses the chunk from the target's threadgroup memory and a
bound on what the rest of the kernel takes there, worked out as `allocate_threadgroup_memory` will place it:
- the arrays that are the program's own (the user's `shared` arrays, operands hoisted before a loop, in a buffer of
  their own) are counted once;
- scratch has one arena per dtype, as long as its longest use, and each statement of each block is a use of its
  own (`metile.rewrite.lower.statements.lower_block`): the bound is, per dtype, the most any statement takes, which
  is at most the sum of what each of its nodes may take (`statement_scratch`: a tile a `convert_layout` hands
  between threads, a reduction's or scan's operand and partial sums, a product's result copied out of its matrices,
  the tiles read beside it at its elements, other products' staged operands...). It may count a node the lowering
  handles in registers (an over-estimate, which only ever chooses a smaller chunk), never less than it takes.

The choice, for each product whose operands are staged in scratch (not hoisted, read from device memory, rotated
through a pipelined loop's buffers or split over k):
- when its operands alone, staged whole, take more than the target's threadgroup memory (`[128, 64] x [64, 128]` in
  f16 takes 35 KB of 32), the largest multiple of 8 dividing k whose staging takes at most three quarters of it;
- then, while the kernel's bound exceeds the target's memory, the largest product is given the largest chunk that
  makes it fit (Liger's neighborhood attention stages 64 x 64 bf16 operands beside 16 KB of f32 scratch). When no
  choice of chunks makes it fit, the products keep the chunks of the first step: the kernel is refused at launch
  with the bytes of each line (`metile.launch.check_device_limits`), as smaller chunks would not save it.
"""

from __future__ import annotations

import attrs

from metile.ir.layouts import Blocked, Fragments, Recomputed
from metile.ir.node import children, evolve_node, walk
from metile.ir.stmts import For, If, Kernel, Let, Stmt, Store, While
from metile.ir.tile import (
    ArgReduce,
    Broadcast,
    ConvertLayout,
    Dot,
    Full,
    Gather,
    MmaEngine,
    MmaPlan,
    Reduce,
    Scan,
    SimdgroupRole,
    Transpose,
)
from metile.ir.types import DType
from metile.ir.values import Binary, Const, SharedAlloc, Var
from metile.rewrite.context import PassContext
from metile.rewrite.distribute import matrix_dims
from metile.rewrite.layouts import dot_accumulation
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.scan import Scan as KernelScan
from metile.rewrite.scan import scan
from metile.rewrite.staging import staging_pad

PLAIN = MmaPlan()
F32 = DType.F32


def _words(n: int) -> int:
    """`n` elements as the arena places a region: rounded up to 4."""
    return -(-n // 4) * 4


def staging(d: Dot, how: MmaPlan, chunk: int | None) -> dict[DType, int]:
    """The elements of each dtype `d`'s operands take in scratch, staged `chunk` columns of `a` at a time (None:
    whole), with the paddings of `how` (a hoisted or device-read operand takes none here)."""
    (m, k), n = d.a.type.shape, d.b.type.shape[1]
    kc = k if chunk is None else chunk
    pad_a = (staging_pad(kc, d.a.type.dtype.itemsize) if chunk is not None else how.pad[0]) if how.pad[0] else 0
    out: dict[DType, int] = {}
    for x, size, once, direct in ((d.a, m * (kc + pad_a), how.hoist[0], how.direct[0]),
                                  (d.b, kc * (n + how.pad[1]), how.hoist[1], how.direct[1])):
        if not (once or direct):
            out[x.type.dtype] = out.get(x.type.dtype, 0) + _words(size)
    return out


def _add(into: dict[DType, int], dtype: DType, n: int) -> None:
    into[dtype] = into.get(dtype, 0) + _words(n)


def _result_copy(shape: tuple[int, ...]) -> int:
    """The elements of an `[m, n]` product copied out of its matrices (rows one longer, `mma_row_stride`)."""
    m, n = shape[-2], shape[-1]
    return m * (n + 1)


@attrs.frozen
class Need:
    """What one statement (a scratch use) needs: `other` the elements per dtype of everything but the staging of the
    `planned` products, which it stages too, each with what staging it by chunks adds (its operands read element by
    element: a product's result among them copied out of its matrices) and what staging it whole adds (a transposed
    operand's conversion, which staging by chunks does without)."""

    other: dict
    planned: tuple[tuple[Dot, dict, dict], ...]


_COUNTED = frozenset({ConvertLayout, Reduce, ArgReduce, Scan, Gather, Dot, Binary})
"""The node classes `_Survey.statement` counts scratch for."""


class _Survey:
    """The scratch uses of a kernel (see the module docstring), from one walk of its statements."""

    def __init__(self, k: Kernel, threads: int, limit: int, candidates: frozenset[Dot], found: KernelScan):
        self.k, self.threads, self.limit, self.candidates = k, threads, limit, candidates
        self.layouts = dict(k.schedule.layouts.items())   # read for every name met: a dict reads faster than a PMap
        self.facts = found.facts
        self.converts = found.has(ConvertLayout)
        self.defs: dict[str, object] = {}
        self.uses: list[Need] = []
        self.own = 0   # bytes of the program's own arrays: the user's, and hoisted operands
        self.done: set = set()   # products, reductions... already computed (each once, where first met)
        self.defined: dict[tuple[str, bool], tuple[dict, dict]] = {}   # `walk` of each recomputed definition
        self.marked = self._marked(found)
        self.block(k.body)

    def _marked(self, found: KernelScan) -> frozenset[str] | None:
        """The names whose reads `walk` looks at (a product's result in matrices, a tile held in registers, a tile
        defined by a `Let` and recomputed where it is read, whose definition it walks); None in a kernel with
        conversions, where `walk` looks at every node."""
        if self.converts:
            return None
        out = {name for name, lay in self.layouts.items() if lay.__class__ is Fragments or lay.__class__ is Blocked}
        for n in found.of(Let):
            lay = self.layouts.get(n.var.name)
            if n.var.type.shape and (lay is None or lay.__class__ is Recomputed):
                out.add(n.var.name)
        return frozenset(out)

    def block(self, stmts) -> None:
        for s in stmts:
            if isinstance(s, Let):
                self.defs[s.var.name] = s.value
        for s in stmts:
            match s:
                case For(_, start, stop, step, _, inits, body, yields):
                    self.statement(s, [start, stop, step, *inits], kept=True)
                    self.block(body)
                    self.statement(s, yields, kept=True)
                case If(cond, then, orelse, then_yields, else_yields):
                    self.statement(s, [cond])
                    self.block(then)
                    self.block(orelse)
                    self.statement(s, [*then_yields, *else_yields], kept=True)
                case While(_, inits, cond_body, cond, body, yields):
                    self.statement(s, inits, kept=True)
                    self.block(cond_body)
                    self.statement(s, [cond])
                    self.block(body)
                    self.statement(s, yields, kept=True)
                case SimdgroupRole(body=body, yields=yields):
                    self.block(body)
                    self.statement(s, yields, kept=True)
                case Let(var, value) if var.type.shape and self.recomputed(var):
                    self.statement(s, [value], heavy_only=True)
                case _:
                    self.statement(s, [c for c in children(s) if c is not None])

    def recomputed(self, v: Var) -> bool:
        """`v` names a pure expression evaluated where it is read (so its nodes count in the reading statement)."""
        lay = self.layouts.get(v.name)
        return v.name in self.defs and (lay is None or isinstance(lay, Recomputed))

    def statement(self, s: Stmt, roots: list, kept: bool = False, heavy_only: bool = False) -> None:
        """Record the scratch the statement `s` (its values `roots`) may take; `kept`: values a loop or branch
        carries (a product's result stays in its matrices); `heavy_only`: the definition of a recomputed tile, where
        only its products, reductions, scans and gathers are computed, with the conversions of their operands (the
        rest is evaluated where it is read)."""
        if self.plain(roots):
            self.uses.append(Need({}, ()))
            return
        other: dict[DType, int] = {}
        planned: list[Dot] = []
        nodes, reads = self.nodes(roots)
        accumulated: set[int] = set()   # products and accumulators of `acc + dot(a, b)`: kept in matrices
        pairs: dict[int, tuple] = {}
        for n in nodes:
            if n.__class__ is Binary and (pair := dot_accumulation(n)) is not None:
                pairs[id(n)] = pair
                accumulated.update((id(pair[0]), id(pair[1])))
        kept = kept or isinstance(s, Store) or (isinstance(s, Let) and isinstance(self.layouts.get(s.var.name),
                                                                                  Fragments))
        element_wise = [v for v in reads
                        if isinstance(self.layouts.get(v.name), Fragments) and id(v) not in accumulated]
        whole: dict[Dot, dict[DType, int]] = {}   # what a planned product needs only when staged whole
        flipped: set[int] = set()
        for d in nodes:
            if d.__class__ is Dot and d in self.candidates and d not in self.done:
                for x in (d.a, d.b):   # a transposed operand converted: staged by chunks, each thread writes its own
                    if isinstance(x, Transpose) and isinstance(x.x, ConvertLayout) and id(x.x) not in flipped:
                        flipped.add(id(x.x))
                        _add(whole.setdefault(d, {}), x.x.x.type.dtype, x.x.x.type.size)
        for n in nodes:
            cls = n.__class__   # the classes below have no subclasses: one test per node, most of them plain
            if cls not in _COUNTED:
                continue
            match n:
                case ConvertLayout(x) if id(n) not in flipped:   # in a recomputed definition too: a product's
                    _add(other, x.type.dtype, x.type.size)        # operand is converted there
                case Reduce(_, x) | ArgReduce(_, x) | Scan(_, x) | Gather(x) if n not in self.done:
                    self.done.add(n)
                    self.exchange(n, x, other)
                case Dot() if n not in self.done:
                    self.done.add(n)
                    self.product(n, other, planned)
                case Binary() if not heavy_only and (pair := pairs.get(id(n))) is not None \
                        and not self.in_matrices(pair[1]):
                    _add(other, F32, n.type.size)   # an accumulator not held in matrices, published to load them
                    if id(n) not in accumulated:
                        element_wise.append(n)
        if element_wise and not heavy_only:   # a result read element by element: copied out, or read beside tiles
            for v in element_wise:
                if not kept:
                    _add(other, F32, _result_copy(v.type.shape))
            for v in reads:
                if isinstance(self.layouts.get(v.name), Blocked):
                    _add(other, v.type.dtype, v.type.size)
        self.uses.append(Need(other, tuple((d, self.chunked_reads(d), whole.get(d, {})) for d in planned)))

    def plain(self, roots: list) -> bool:
        """Whether `statement` finds nothing the values `roots` take in scratch, known from the kernel's scan without a
        walk: no product, reduction, scan or gather in them (nor a conversion in the kernel), and no name they read is a
        recomputed tile (whose definition the walk would visit) or a product's result held in matrices (read element
        by element)."""
        if self.converts:
            return False
        facts, layouts, defs = self.facts, self.layouts, self.defs
        for r in roots:
            if r is None:
                continue
            f = facts.get(id(r))
            if f is None or f[2]:   # built after the scan, or heavy
                return False
            for name in f[1]:
                lay = layouts.get(name)
                if lay.__class__ is Fragments:
                    return False
                d = defs.get(name)
                if d is not None and d.type.shape and (lay is None or lay.__class__ is Recomputed):
                    return False
        return True

    def chunked_reads(self, d: Dot) -> dict[DType, int]:
        """What staging `d`'s operands by chunks adds: each product result they read, copied out of its matrices."""
        out: dict[DType, int] = {}
        nodes, reads = self.nodes([d.a, d.b])
        for v in [*nodes, *reads]:
            if isinstance(v, Dot) or isinstance(v, Var) and isinstance(self.layouts.get(v.name), Fragments):
                _add(out, F32, _result_copy(v.type.shape))
        return out

    def in_matrices(self, acc) -> bool:
        """Whether an accumulator is held in simdgroup matrices, or a constant they are filled with."""
        match acc:
            case Var(name=name):
                return isinstance(self.layouts.get(name), Fragments)
            case Full() | Broadcast(Const()):
                return True
        return False

    def nodes(self, roots: list) -> tuple[list, list[Var]]:
        """The distinct nodes of `roots` (through names of recomputed expressions), and the named tiles read other
        than as a product's operands (those a product stages are counted with it)."""
        out, reads = self.walk(roots, False)
        return list(out.values()), list(reads.values())

    def walk(self, roots: list, operand: bool) -> tuple[dict, dict]:
        """`nodes` of `roots` read as a product's operands (`operand`) or not, as dicts by id; the nodes of a recomputed
        name's definition are found once per kernel (`defined`) and added where the name is read."""
        seen: set[int] = set()   # 2 * id(node) + operand
        out: dict[int, object] = {}
        reads: dict[int, Var] = {}
        todo = [(r, operand) for r in roots if r is not None]
        pop, add = todo.pop, seen.add
        # A value of the kernel that holds no product, reduction, scan or gather and reads none of the names `marked`
        # adds nothing to `out` that its callers count, nor to `reads` (the kernel's scan says so): not walked.
        marked, facts = self.marked, self.facts
        while todo:
            n, operand = pop()
            key = id(n) << 1 | operand
            if key in seen:
                continue
            add(key)
            cls = n.__class__
            if marked is not None and cls is not Var and (f := facts.get(id(n))) is not None and not f[2] \
                    and f[1].isdisjoint(marked):
                continue
            if cls is Var:
                if not n.type.shape:
                    continue
                if self.recomputed(n):
                    found = self.defined.get((n.name, operand))
                    if found is None:
                        found = self.defined[n.name, operand] = self.walk([self.defs[n.name]], operand)
                    out.update(found[0])
                    reads.update(found[1])
                elif not operand:
                    reads[id(n)] = n
                continue
            out[id(n)] = n
            if cls is Dot:
                todo += [(n.a, True), (n.b, True)]
            else:
                todo += [(c, operand) for c in children(n) if c is not None and not isinstance(c, Stmt)]
        return out, reads

    def exchange(self, n, x, other: dict[DType, int]) -> None:
        """A reduction, scan or gather of `x` (`metile.rewrite.lower.reductions`): the tiles it reads that threads
        hold in registers published (a product's result copied out of its matrices first), partial sums (one per
        simdgroup, and per row of a product's result), a scan's two tiles of its accumulator, a gather's source."""
        nodes, reads = self.nodes([x, getattr(n, "valid", None)])
        acc = F32 if x.type.dtype.is_float else x.type.dtype
        for v in [*reads, *(d for d in nodes if isinstance(d, Dot))]:
            lay = self.layouts.get(v.name) if isinstance(v, Var) else None
            if isinstance(v, Dot) or isinstance(lay, Fragments):
                _add(other, F32, _result_copy(v.type.shape))
                _add(other, acc, v.type.shape[-2] * max(1, self.threads // 32))
            elif isinstance(lay, Blocked):
                _add(other, v.type.dtype, v.type.size)
        sgs = max(1, self.threads // 32)
        _add(other, acc, sgs)
        if isinstance(n, ArgReduce):
            _add(other, DType.I32, sgs)
        if isinstance(n, Scan):
            _add(other, acc, 2 * x.type.size)
        if isinstance(n, Gather):
            _add(other, x.type.dtype, x.type.size)

    def product(self, d: Dot, other: dict[DType, int], planned: list[Dot]) -> None:
        """A product: its staged operands (a planned one's are counted apart), its partial sums over slices of k,
        an accumulator not held in matrices, a tensor operation's destination; a product not on matrices pads its
        operands to 8x8 pieces and copies out its result."""
        how = self.k.schedule.dots.get(d, PLAIN)
        (m, k), n = d.a.type.shape[-2:], d.b.type.shape[-1]
        if matrix_dims(d) is None:   # operands published, then staged padded (or as a product's), result copied
            batch = max(1, d.a.type.size // (m * k))
            m8, n8, k8 = (-(-x // 8) * 8 for x in (m, n, k))
            _add(other, d.a.type.dtype, d.a.type.size + batch * max(m8 * k8, m * (k + how.pad[0])))
            _add(other, d.b.type.dtype, d.b.type.size + batch * max(k8 * n8, k * (n + how.pad[1])))
            _add(other, F32, batch * m8 * (n8 + 1))
            return
        if d in self.candidates:
            planned.append(d)
        else:
            for dtype, size in staging(d, how, how.chunk).items():
                _add(other, dtype, size)
        for x, once, pad in zip((d.a, d.b), how.hoist, how.pad):
            if once:   # a buffer of its own, before the loop (counted in every statement it is met in)
                self.own += _words(x.type.size // x.type.shape[-1] * (x.type.shape[-1] + pad)) * x.type.dtype.itemsize
        if how.split > 1:
            _add(other, F32, (how.split - 1) * m * n)
        if how.engine is not MmaEngine.SIMDGROUP_MATRIX:   # a tensor operation's destination: at most half the rest
            _add(other, F32, self.limit // 2 // 4)


def _chunks(k: int) -> list[int]:
    """The chunks of k a product may stage, largest first: multiples of 8 dividing k, short of k."""
    return [kc for kc in range(k - 8, 7, -8) if k % kc == 0]


class _Bound:
    """The kernel's threadgroup memory for a choice of chunks (see the module docstring)."""

    def __init__(self, survey: _Survey, fixed: int):
        self.survey, self.fixed = survey, fixed

    def bytes(self, chunks: dict[Dot, int | None]) -> int:
        longest: dict[DType, int] = {}
        for use in self.survey.uses:
            need = dict(use.other)
            for d, by_chunks, whole in use.planned:
                chunk = chunks.get(d)
                for dtype, n in staging(d, self.survey.k.schedule.dots.get(d, PLAIN), chunk).items():
                    need[dtype] = need.get(dtype, 0) + n
                for dtype, n in (whole if chunk is None else by_chunks).items():
                    need[dtype] = need.get(dtype, 0) + n
            for dtype, n in need.items():
                longest[dtype] = max(longest.get(dtype, 0), n)
        return self.fixed + self.survey.own + sum(n * dtype.itemsize for dtype, n in longest.items())


def _staged_bytes(d: Dot, how: MmaPlan, chunk: int | None) -> int:
    return sum(n * dtype.itemsize for dtype, n in staging(d, how, chunk).items())


def _candidates(k: Kernel, dots: list[Dot], pipelined: set[Dot]) -> list[Dot]:
    """The products whose operands are staged in the scratch arena, and could be staged by chunks."""
    out = []
    for d in dots:
        how = k.schedule.dots.get(d, PLAIN)
        if matrix_dims(d) is None or how.split > 1 or any(how.hoist) or any(how.direct) or d in pipelined:
            continue
        out.append(d)
    return out


def _pipelined(k: Kernel) -> set[Dot]:
    """The products in the bodies of loops that rotate staged operands through buffers (`multi_buffer`)."""
    out: set[Dot] = set()

    def visit(stmts, inside: bool) -> None:
        for s in stmts:
            match s:
                case For(body=body):
                    ring = inside or k.schedule.loops.get(s, 1) > 1
                    if ring:
                        out.update(n for n in walk(s) if isinstance(n, Dot))
                    visit(body, ring)
                case If(then=then, orelse=orelse):
                    visit(then, inside)
                    visit(orelse, inside)
                case While(cond_body=cb, body=body):
                    visit(cb, inside)
                    visit(body, inside)
                case SimdgroupRole(body=body):
                    visit(body, inside)
    try:
        visit(k.body, False)
    finally:
        visit = None   # it calls itself through its closure: a cycle that would wait for the collector
    return out


def choose_chunks(k: Kernel, limit: int, threads: int, dots: list[Dot], analyses=None) -> dict[Dot, int | None]:
    """The chunk of k of each product (None: whole), as the module docstring says; `analyses`, the pass's, whose scan
    of the kernel (made anyway) lists its arrays."""
    cands = _candidates(k, dots, _pipelined(k))
    if not cands:
        return {}
    chunks: dict[Dot, int | None] = {}
    for d in cands:   # operands that alone, staged whole, exceed the target's memory
        how = k.schedule.dots.get(d, PLAIN)
        options = _chunks(d.a.type.shape[1])
        if options and _staged_bytes(d, how, None) > limit:   # k = 8 cannot be cut
            chunks[d] = next((kc for kc in options if _staged_bytes(d, how, kc) <= limit * 3 // 4), options[-1])
    found = scan(k, analyses)
    fixed = sum(n.size * n.dtype.itemsize for n in found.of(SharedAlloc))
    bound = _Bound(_Survey(k, threads, limit, frozenset(cands), found), fixed)
    if bound.bytes(chunks) <= limit:
        return chunks
    tried = dict(chunks)
    order = sorted(cands, key=lambda d: -_staged_bytes(d, k.schedule.dots.get(d, PLAIN), tried.get(d)))
    for d in order:   # the largest first: the largest chunk that makes the kernel fit, else its smallest
        k_ = d.a.type.shape[1]
        smaller = [kc for kc in _chunks(k_) if tried.get(d) is None or kc < tried[d]]
        fit = next((kc for kc in smaller if bound.bytes({**tried, d: kc}) <= limit), None)
        if fit is not None:
            tried[d] = fit
            return tried
        if smaller:
            tried[d] = smaller[-1]
    return chunks


@define_pass(requires=[Fact.LAUNCH_PLAN, Fact.CONVERSIONS], provides=[Fact.STAGING], precedes=[Fact.METAL_IR])
def plan_staging(k: Kernel, ctx: PassContext) -> Kernel:
    """Record in each product's plan the chunk of k its operands are staged by (see the module docstring)."""
    dots = scan(k, ctx.analyses).of(Dot)
    if not dots or k.plan is None:
        return k
    chosen = choose_chunks(k, ctx.target.threadgroup_memory, k.plan.threads, dots, ctx.analyses)
    plans = old = k.schedule.dots
    for d in dots:
        how = old.get(d, PLAIN)
        new = evolve_node(how, chunk=chosen.get(d))
        if new != how:
            plans = plans.set(d, new)
    return k if plans is old else evolve_node(k, schedule=evolve_node(k.schedule, dots=plans))


__all__ = ["choose_chunks", "plan_staging", "staging"]
