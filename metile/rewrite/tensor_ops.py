"""`use_tensor_ops`: the products that a target's Metal 4 tensor operations (`matmul2d`) compute.

On a target with `tensor_ops` (the M5 on: `metile.ir.target.TARGETS`), each `dot` that `matmul2d` computes exactly as
asked gets `MmaEngine.MATMUL2D_SIMDGROUP` or `MATMUL2D_THREADGROUP` in its `MmaPlan` (`engine`), by one rule,
`tensor_engine`, over the frozen `Dot` and its plan; the lowering (`metile.rewrite.lower.tensor_ops`) carries it out.
A product qualifies when
- its operands are f16 or bf16 (multiplied exactly, summed in f32), or f32 with `Dot.tf32` (`input_precision="tf32"`:
  `matmul2d`'s `relaxed_precision` cuts them to TF32); exact f32 products (`"ieee"`, metile's default) keep
  simdgroup matrices, and so do products of integers (their exactness rests on f32 sums of known width, which
  Apple does not document for the tensor units);
- it is one 2-D product whose sides are multiples of 16, computed as one (not split along k by `split_k`) from
  operands staged in threadgroup memory (not read straight from device memory, `direct_operands`).
The launch's compiler option `mma=` (`metile.ir.MMA_CHOICES`) chooses: `"simdgroup"` keeps simdgroup matrices;
`"tensor_ops_simdgroup"` and `"tensor_ops_threadgroup"` ask for a mode; `"tensor_ops"` (and no option) lets the
rule choose: each simdgroup its own block (`execution_simdgroup`, the original meTile's default) where every
simdgroup's block has sides that are multiples of 16, else the whole threadgroup (`execution_simdgroups<N>`).
Targets without tensor operations (M1 to M4) are left as they are. The pass is optional: without it every product
runs on simdgroup matrices, as correct.
"""

from __future__ import annotations

import attrs

from metile.ir.node import evolve_node
from metile.ir.stmts import MMA_CHOICES, Kernel
from metile.ir.tile import Dot, MmaEngine, MmaPlan
from metile.ir.types import DType
from metile.ir.values import Cast
from metile.rewrite.context import PassContext
from metile.rewrite.distribute import mma_arrangement
from metile.rewrite.passes import Fact, define_pass
from metile.rewrite.scan import scan

_PLAIN = MmaPlan()
SIMDGROUP, AUTO, PER_SIMDGROUP, WHOLE_THREADGROUP = range(len(MMA_CHOICES))
ATOM = 16   # the sides of each matmul2d are multiples of this (as MLX's NAX kernels use it: 16 x 16 fragments)


@attrs.frozen
class EngineCtx:
    """What `tensor_engine` reads beside the product: the launch's `mma=` choice (an index in `MMA_CHOICES`) and the
    simdgroups of the program."""

    choice: int
    simdgroups: int


def tensor_engine(d: Dot, how: MmaPlan, ctx: EngineCtx) -> MmaPlan | None:
    """`how` with the engine that computes `d`, or None to keep simdgroup matrices (see the module docstring)."""
    match d:
        case Dot(a, b) if _from_integers(a) or _from_integers(b):
            return None   # a product of integers, multiplied in float matrices
        case Dot(a, b) if a.type.dtype is not b.type.dtype or len(a.type.shape) != 2:
            return None
        case Dot(a, _) if a.type.dtype is DType.F32 and not d.tf32:
            return None   # exact f32 products
        case Dot(a, b) if a.type.dtype not in (DType.F32, DType.F16, DType.BF16):
            return None
        case Dot(a, b) if any(side % ATOM for side in (*a.type.shape, b.type.shape[1])):
            return None
    if how.split != 1 or any(how.direct):
        return None
    return evolve_node(how, engine=_mode(d, how, ctx))


def _from_integers(x) -> bool:
    """Whether the operand `x` is integers the frontend converts to a matrix type."""
    match x:
        case Cast(y, _):
            return y.type.dtype.is_int
    return False


def _mode(d: Dot, how: MmaPlan, ctx: EngineCtx) -> MmaEngine:
    """The execution mode: the launch's, else each simdgroup its own block where every block's sides are multiples
    of `ATOM`, else the whole threadgroup."""
    if ctx.choice == PER_SIMDGROUP:
        return MmaEngine.MATMUL2D_SIMDGROUP
    if ctx.choice == WHOLE_THREADGROUP:
        return MmaEngine.MATMUL2D_THREADGROUP
    (m, _), n = d.a.type.shape, d.b.type.shape[1]
    arranged = how.simdgroups or (mma_arrangement(m, n, ctx.simdgroups) or (1, 1, 1))[:2]
    blocks = (m // arranged[0], n // arranged[1])
    return MmaEngine.MATMUL2D_SIMDGROUP if not (blocks[0] % ATOM or blocks[1] % ATOM) else \
        MmaEngine.MATMUL2D_THREADGROUP


@define_pass(requires=[Fact.LAUNCH_PLAN], precedes=[Fact.STAGING, Fact.METAL_IR], optional=True)
def use_tensor_ops(k: Kernel, ctx: PassContext) -> Kernel:
    """Record `matmul2d` as the engine of each product it computes, on a target with tensor operations (see the
    module docstring); the body is untouched."""
    choice = AUTO if k.options.mma is None else k.options.mma
    if not ctx.target.tensor_ops or choice == SIMDGROUP:
        return k
    dots = scan(k, ctx.analyses).of(Dot)
    if not dots:
        return k
    rule_ctx = EngineCtx(choice, k.plan.simdgroups if k.plan is not None else ctx.target.default_simdgroups)
    plans = old = k.schedule.dots
    for d in dots:
        before = old.get(d, _PLAIN)
        new = tensor_engine(d, before, rule_ctx)
        if new is not None and new != before:
            plans = plans.set(d, new)
    if plans is old:
        return k
    return evolve_node(k, schedule=evolve_node(k.schedule, dots=plans))


__all__ = ["ATOM", "EngineCtx", "tensor_engine", "use_tensor_ops"]
