"""The default lowering pipeline, Tile IR -> Metal IR, and `run` to apply a list of passes.

A pass is a named function `Kernel -> Kernel`: the passes here are `metile.rewrite.passes.Pass` values with a
contract (what they need from the passes before them, what they provide), and any plain function of the user's is
one too. A pipeline is a list of passes that users may copy and edit (`[my_pass, *DEFAULT_PIPELINE]`), or the text
`pipeline("fold_constants,skip_inactive,...")` reads. `check_pipeline` turns such a list into the tuple a kernel
keeps, refusing entries that are not callable and orders that break a contract (dropping `skip_inactive`, or
putting `split_k` after `plan_launch`, is a `PipelineError` naming both passes, never a wrong kernel).

Verification is part of the debug mode: with `verify_each=True` (`@metile.kernel(debug=True)`, or any
`METILE_DEBUG`, e.g. `METILE_DEBUG=verify`) `run` verifies after every pass, so the first pass that breaks
the IR is the one named. A normal compile does not verify: the verifier checks the compiler, not the
user's program (the frontend has already type-checked that), and it would cost about a fifth of the
compile time. The test suite runs with `METILE_DEBUG=verify`. In both modes a pass that returns
something other than a `Kernel` raises `PipelineError` naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from metile.ir.errors import MetileError
from metile.ir.stmts import Kernel
from metile.ir.target import DEFAULT_TARGET, AppleTarget
from metile.ir.verify import verify
from metile.rewrite.context import PassContext
from metile.rewrite.conversions import insert_conversions
from metile.rewrite.fold import fold_constants
from metile.rewrite.inactive import skip_inactive
from metile.rewrite.layouts import assign_layouts
from metile.rewrite.lower import lower_tiles
from metile.rewrite.optimize import (
    direct_operands,
    group_programs,
    hoist_staging,
    multi_buffer,
    pad_staging,
    preload_fragments,
    serpentine_mma,
    split_k,
)
from metile.rewrite.passes import Pass, PipelineError, check_order, pass_key, pass_name
from metile.rewrite.passes import parse_pipeline as parse_named
from metile.rewrite.plan import plan_launch, vectorize_memory
from metile.rewrite.staging_plan import plan_staging
from metile.rewrite.tensor_ops import use_tensor_ops
from metile.rewrite.threadgroup_memory import allocate_threadgroup_memory

TILE_PIPELINE: list[Pass] = [
    fold_constants,       # constant integer arithmetic folded
    skip_inactive,        # work no element needs is skipped (masked-off loads, dead tiles)
    group_programs,       # launch option group_programs=G: a 2-D grid's programs in groups of G rows
    split_k,              # products with fewer 8x8 pieces than simdgroups: k cut into slices
    plan_launch,          # threads per program, simdgroups of each role
    vectorize_memory,     # runs of 4 consecutive elements per thread where loads and stores can move vectors
    assign_layouts,       # where every named tile lives (registers, simdgroup matrices, memory)
    pad_staging,          # staged dot operands padded against bank conflicts
    serpentine_mma,       # 8x8 products in serpentine order
    preload_fragments,    # the next step's operands loaded before this step's products
    hoist_staging,        # dot operands the same in every iteration of a loop staged once, before it
    direct_operands,      # launch option direct_operands=True: unmasked dot operands read straight into matrices
    use_tensor_ops,       # targets with Metal 4 tensor operations: products computed by matmul2d
    multi_buffer,         # tile_range(num_stages=N): staged operands rotate through N buffers
    insert_conversions,   # a register tile read at elements other threads hold: convert_layout to shared scratch
    plan_staging,         # products whose operands do not fit beside the kernel's other scratch: staged by chunks of k
]
"""The passes on Tile IR: what the lowering then carries out is decided and recorded here."""

LOWERING_PIPELINE: list[Pass] = [
    lower_tiles,                   # Tile IR -> SIMT IR: per-thread code, its threadgroup memory still symbolic
    allocate_threadgroup_memory,   # SIMT IR -> Metal IR: scratch arenas and rings placed (rings get one buffer
                                   # when they do not fit)
]
"""The passes from Tile IR to Metal IR."""

DEFAULT_PIPELINE: list[Pass] = [*TILE_PIPELINE, *LOWERING_PIPELINE]
OPTIONAL_PASSES: tuple[Pass, ...] = tuple(p for p in DEFAULT_PIPELINE if p.optional)
"""The passes of `DEFAULT_PIPELINE` that only make kernels faster: any of them may be removed."""


def check_pipeline(passes: Iterable) -> tuple:
    """`passes` as a tuple, or a `PipelineError` if it is not an iterable of callables or its order breaks a pass's
    contract (`metile.rewrite.passes.check_order`)."""
    if isinstance(passes, (str, bytes)) or not isinstance(passes, Iterable):
        raise PipelineError(f"a pipeline is a list of passes (functions Kernel -> Kernel), not {type(passes).__name__}")
    out = tuple(passes)
    for i, p in enumerate(out):
        if not callable(p):
            raise PipelineError(f"pipeline entry {i} ({p!r}) is not a pass: a pass is a function Kernel -> Kernel")
    check_order(out, DEFAULT_PIPELINE)
    return out


def parse_pipeline(spec: str, passes: Iterable | None = None) -> list:
    """The pipeline the text `spec` names, `"fold_constants,skip_inactive,..."`, each pass taken by name from
    `passes` (the passes of `DEFAULT_PIPELINE` when not given; `metile.rewrite.passes.parse_pipeline`), its order
    checked (`check_pipeline`)."""
    out = parse_named(spec, DEFAULT_PIPELINE if passes is None else passes)
    check_pipeline(out)
    return out


def pipeline(spec: str, extra: Iterable = ()) -> list:
    """`parse_pipeline(spec)` from the passes of `DEFAULT_PIPELINE` and `extra`."""
    return parse_pipeline(spec, [*DEFAULT_PIPELINE, *extra])


def run(passes: Sequence[Pass], k: Kernel, *, verify_each: bool = False,
        on_pass: Callable[[str, Kernel], None] | None = None, target: AppleTarget = DEFAULT_TARGET) -> Kernel:
    """`k` after each of `passes` in order, reported to `on_pass(name, kernel)` when given. The passes share one
    `PassContext`: `target`, and the analyses of this run.

    Verified after each pass when `verify_each` (see the module docstring).
    """
    check_order(passes, DEFAULT_PIPELINE)
    ctx = PassContext(target)
    for p in passes:
        k = _apply(p, k, ctx, verify_each)
        if on_pass is not None:
            on_pass(pass_name(p), k)
    return k


def _apply(p, k: Kernel, ctx: PassContext, verify_each: bool) -> Kernel:
    """`k` after the pass `p`, checked to be a kernel (and verified when `verify_each`)."""
    try:
        if p.__class__ is Pass and not p.options:   # `p(k, ctx)` without the call of `Pass.__call__`
            out = p.run(k, ctx)
        else:
            out = p(k, ctx) if isinstance(p, Pass) else p(k)
    except (MetileError, RecursionError):
        raise
    except Exception as e:  # noqa: BLE001 - a pass of the user's that does not take a Kernel, or fails on it
        raise PipelineError(f"pass {pass_name(p)} raised {type(e).__name__}: {e}", k.loc) from e
    if not isinstance(out, Kernel):
        raise PipelineError(f"pass {pass_name(p)} returned {type(out).__name__}, not a Kernel", k.loc)
    if verify_each:
        verify(out, after=pass_name(p))
    return out


__all__ = ["DEFAULT_PIPELINE", "LOWERING_PIPELINE", "OPTIONAL_PASSES", "TILE_PIPELINE", "Pass", "PipelineError",
           "check_pipeline", "parse_pipeline", "pass_key", "pass_name", "pipeline", "run"]
