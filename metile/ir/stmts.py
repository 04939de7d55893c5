"""Statements every IR level shares, structured control flow, and the `Kernel` root.

Control flow is structured and in SSA form, like MLIR's `scf`: a name is bound once, and a value that
changes across loop iterations or branches is threaded through `carried`/`yields`/`results` instead
of being reassigned. Scoping:
- `Let(var, value)` binds `var` from the next statement to the end of the enclosing body.
- `For`: `index` and `carried` are bound in `body` and `yields`; `results` after the loop. `inits`,
  `start`, `stop` and `step` are evaluated before the loop.
- `If`: `then_yields` are evaluated at the end of `then`, `else_yields` at the end of `orelse`;
  `results` are bound after the `If`.
- `While`: `carried` are bound in `cond_body`, `cond`, `body` and `yields`; what `cond_body` binds is
  also visible in `cond`, `body` and `yields`. Each iteration runs `cond_body`, then stops (with
  `results` = the current carried values) when `cond` is false, else runs `body` and carries `yields`.
Names bound inside a body are not visible after it.

Metal IR uses these same statements on per-thread values; the emitter renders loop-carried values
and results as mutable locals.
"""

from __future__ import annotations

import attrs
from pyrsistent import pmap, pvector
from pyrsistent.typing import PMap, PVector

from metile.ir.node import Node, as_tuple, lazy_hash, node
from metile.ir.ops import AtomicOp, Fence, Stage
from metile.ir.values import Param, Stmt, Value, Var


@node
class Let(Stmt):
    """Bind `var` to `value` (evaluated here, in statement order)."""

    var: Var
    value: Value


@node
class Store(Stmt):
    """Write `value` to the elements `ptr` points to, where `mask` is true (everywhere when None)."""

    ptr: Value
    value: Value
    mask: Value | None = None


@node
class AtomicAdd(Stmt):
    """Atomically combine `value` with the elements `ptr` points to by `op` (add by default; max, min, and, or, xor,
    or exchange), where `mask` is true (relaxed order). The old values are not kept."""

    ptr: Value
    value: Value
    mask: Value | None = None
    op: AtomicOp = AtomicOp.ADD


@node
class For(Stmt):
    """`for index in range(start, stop, step)` at run time, with loop-carried values (see the module
    docstring for scoping). `num_stages` is the user's `tile_range(..., num_stages=N)` (None when not
    given): how many K steps may be in flight at once. How many threadgroup buffers the staged operands of the
    products in `body` rotate through is the kernel's `schedule.loops[loop]` (`multi_buffer`; 1, one buffer
    reused behind a barrier, when absent)."""

    index: Var
    start: Value
    stop: Value
    step: Value
    carried: tuple[Var, ...] = attrs.field(converter=as_tuple)
    inits: tuple[Value, ...] = attrs.field(converter=as_tuple)
    body: PVector[Stmt] = attrs.field(converter=pvector)
    yields: tuple[Value, ...] = attrs.field(converter=as_tuple)
    results: tuple[Var, ...] = attrs.field(converter=as_tuple)
    num_stages: int | None = None


@node
class If(Stmt):
    """A run-time branch on a scalar bool, with results (one per `then_yields`/`else_yields` pair)."""

    cond: Value
    then: PVector[Stmt] = attrs.field(converter=pvector)
    orelse: PVector[Stmt] = attrs.field(factory=pvector, converter=pvector)
    then_yields: tuple[Value, ...] = attrs.field(default=(), converter=as_tuple)
    else_yields: tuple[Value, ...] = attrs.field(default=(), converter=as_tuple)
    results: tuple[Var, ...] = attrs.field(default=(), converter=as_tuple)


@node
class While(Stmt):
    """A run-time loop with a condition evaluated before each iteration (like `scf.while`)."""

    carried: tuple[Var, ...] = attrs.field(converter=as_tuple)
    inits: tuple[Value, ...] = attrs.field(converter=as_tuple)
    cond_body: PVector[Stmt] = attrs.field(converter=pvector)
    cond: Value
    body: PVector[Stmt] = attrs.field(converter=pvector)
    yields: tuple[Value, ...] = attrs.field(converter=as_tuple)
    results: tuple[Var, ...] = attrs.field(converter=as_tuple)


@node
class DevicePrint(Stmt):
    """Print `values` from the device (Triton's `device_print`), one line per element: `pid (x, y, z) idx (i, j)
    <prefix> <values...>`. In Tile IR the values are tiles of one shape (or scalars, printed once per program); in
    Metal IR they are one element's, `index` is the program's three coordinates then the element's, and a thread
    prints where `mask` holds. `hex` prints integers in hexadecimal and floats as hexadecimal floats."""

    prefix: str
    values: tuple[Value, ...] = attrs.field(converter=as_tuple)
    hex: bool = False
    index: tuple[Value, ...] = attrs.field(default=(), converter=as_tuple)
    mask: Value | None = None


@node
class DeviceAssert(Stmt):
    """Stop the kernel with a fault at this statement where the bool `cond` is false (and `mask`, in Metal IR,
    true); `msg` is the message. In Tile IR `cond` is a tile or a scalar."""

    cond: Value
    msg: str
    mask: Value | None = None


@node
class Barrier(Stmt):
    """Every thread of the threadgroup waits here; memory in `fence` written before is visible after."""

    fence: Fence = Fence.THREADGROUP


@attrs.frozen
class RoleSpan:
    """The simdgroups of one `simdgroup_role`: `count` of them from simdgroup `first`."""

    first: int
    count: int


@attrs.frozen
class LaunchPlan:
    """What the compiler decided about a kernel's launch (`metile.rewrite.plan.plan_launch`, then the lowering;
    facts about the kernel, not IR nodes: no pass walks into them):
    `threads` per threadgroup, the `vector_width` of each thread's runs of elements, the simdgroups of each
    role (`roles[i]` for role i), and the bytes of `threadgroup_memory` the lowered kernel declares."""

    threads: int
    vector_width: int = 1
    roles: tuple[RoleSpan, ...] = attrs.field(default=(), converter=as_tuple)
    threadgroup_memory: int = 0

    @property
    def simdgroups(self) -> int:
        return -(-self.threads // 32)


@attrs.frozen
class CompileOptions:
    """Compiler options a launch gives (`kernel[grid](..., num_simdgroups=8)`), apart from the kernel's own
    constexprs: None where the compiler chooses. `num_simdgroups`: 32 threads each per program; `num_stages`: the
    stages of every `tile_range` loop that does not give its own; `group_programs`: programs of a 2-D grid run in
    groups of that many rows (`metile.rewrite.optimize.group_programs`); `direct_operands` (1: asked): `dot`
    operands read straight from device memory into simdgroup matrices where they can be
    (`metile.rewrite.optimize.direct_operands`); `num_threads`: the threads per program of a thread-level kernel (one
    that uses `thread_id`, `shared` or simdgroup exchanges), meTile's `BLOCK` when the launch does not say; `mma`:
    what multiplies the operands of `dot` where the target has tensor operations, the index in `MMA_CHOICES` of the
    launch's `mma=` (`use_tensor_ops`)."""

    num_simdgroups: int | None = None
    num_stages: int | None = None
    group_programs: int | None = None
    direct_operands: int | None = None
    num_threads: int | None = None
    mma: int | None = None

    FIELDS = ("num_simdgroups", "num_stages", "group_programs", "direct_operands", "num_threads", "mma")


MMA_CHOICES = ("simdgroup", "tensor_ops", "tensor_ops_simdgroup", "tensor_ops_threadgroup")
"""The values of the compiler option `mma=`, in the order `CompileOptions.mma` numbers them: simdgroup matrices;
Metal 4's `matmul2d` where the target has it, in the execution mode the schedule chooses; `matmul2d` run by each
simdgroup on its block of the result (`execution_simdgroup`); `matmul2d` run by the whole threadgroup on the whole
product (`execution_simdgroups<N>`)."""


_PMAP = type(pmap())


def as_pmap(m) -> PMap:
    """`pmap(m)`, or `m` itself when it is a persistent map already (`pmap` would copy it, bucket by bucket)."""
    return m if m.__class__ is _PMAP else pmap(m)


def _items(m) -> frozenset:
    """What a `Schedule` compares and hashes of a map: the set of its items (equal for equal maps). A map's own
    first `hash` asks `hasattr` for its cached hash, which pyrsistent answers by raising and catching a `KeyError`,
    and passes build a new schedule, with new maps, whenever they choose something."""
    return frozenset(m.items())


@attrs.frozen(cache_hash=True)   # hashed with every kernel built, and kept by most of them
class Schedule:
    """What the optimisation passes chose for a kernel's nodes (facts, not IR nodes: no pass walks into them, and
    choosing changes no node of the body): `dots` maps a `Dot` to its `metile.ir.tile.MmaPlan`, `loops` a `For` to
    the threadgroup buffers its staged operands rotate through, `layouts` a named tile to its layout. Entries are
    found by structural equality (layouts by the variable's name); a node without one is computed the plain way,
    so a pass that rebuilds a node only loses its optimisation."""

    dots: PMap = attrs.field(factory=pmap, converter=as_pmap, eq=_items)
    loops: PMap = attrs.field(factory=pmap, converter=as_pmap, eq=_items)
    layouts: PMap = attrs.field(factory=pmap, converter=as_pmap, eq=_items)
    """Per named tile (a variable's name), its `metile.ir.layouts.TileLayout`, as `assign_layouts` chose."""


@lazy_hash   # rebuilt by most passes, hashed by none of them
@node
class Kernel(Node):
    """A kernel: `params` in buffer order, a body, the user's constexpr values (`meta`, integers), the
    compiler's launch decisions (`plan`, None until `plan_launch`), the launch's compiler `options` and the
    optimisation passes' `schedule`. `stage` says which node set the body may use."""

    name: str
    stage: Stage
    params: tuple[Param, ...] = attrs.field(converter=as_tuple)
    body: PVector[Stmt] = attrs.field(converter=pvector)
    meta: PMap[str, int] = attrs.field(factory=pmap, converter=pmap)
    plan: LaunchPlan | None = None
    options: CompileOptions = CompileOptions()
    schedule: Schedule = Schedule()


COMMON_STMTS: tuple[type[Stmt], ...] = (Let, Store, AtomicAdd, For, If, While, Barrier, DevicePrint, DeviceAssert)

__all__ = ["COMMON_STMTS", "MMA_CHOICES", "AtomicAdd", "Barrier", "CompileOptions", "DeviceAssert", "DevicePrint",
           "For", "If", "Kernel", "LaunchPlan", "Let", "RoleSpan", "Schedule", "Store", "While"]
