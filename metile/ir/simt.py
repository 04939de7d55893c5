"""SIMT IR only: threadgroup memory the lowering asks for but has not placed yet.

A kernel at `Stage.SIMT` is per-thread code, as Metal IR, whose compiler-owned threadgroup memory is still
symbolic; `metile.rewrite.threadgroup_memory.allocate_threadgroup_memory` places it and makes the kernel Metal IR:

| node                                      | printed                               | placed as                      |
|-------------------------------------------|---------------------------------------|--------------------------------|
| `Scratch(use, part, dtype, size)`         | `scratch 3.1 [256] : ptr<f32, ...>`   | a region of the scratch arena  |
| `RingBuffer(stage, use, part, ...)`       | `ring %stage 3.0 [512] x 2 : ptr<...>`| this iteration's buffer of a   |
|                                           |                                       | pipelined loop's ring          |
| `RingBarrier(ring, kept)` (a statement)   | `ring_barrier stage kept`             | a barrier, or nothing          |

The regions (`part`s) of one scratch *use* are live at once (a statement's gathers, a reduction's partials) and
those of different uses never are (each use sits between barriers), so uses share the arena. A pipelined loop
(`multi_buffer`) rotates its staged operands through a ring of `n` buffers indexed by its carried stage counter;
when the rings do not fit in the target's threadgroup memory beside everything else, the allocation gives each
loop one buffer instead, with no second lowering: the ring's `RingBarrier`s say which barriers each choice needs
(`kept`: only with the ring, before the loop; otherwise: only with one buffer, before each write).
"""

from __future__ import annotations

from functools import cached_property

from metile.ir.node import node
from metile.ir.types import AddressSpace, DType, PtrType
from metile.ir.values import Stmt, Value, Var


@node
class Scratch(Value):
    """Region `part` (`size` elements of `dtype`) of scratch use `use` (see the module docstring)."""

    use: int
    part: int
    dtype: DType
    size: int

    @cached_property
    def type(self) -> PtrType:
        return PtrType(self.dtype, (), AddressSpace.THREADGROUP)


@node
class RingBuffer(Value):
    """Region `part` (`size` elements of `dtype`) of scratch use `use`, in this iteration's buffer of the ring of
    `buffers` buffers of the loop whose carried stage counter is `stage` (given one buffer, the region is placed
    as a `Scratch` of that use)."""

    stage: Var
    use: int
    part: int
    dtype: DType
    size: int
    buffers: int

    @cached_property
    def type(self) -> PtrType:
        return PtrType(self.dtype, (), AddressSpace.THREADGROUP)


@node
class RingBarrier(Stmt):
    """A barrier of the loop whose stage counter is named `ring`, needed only when its ring is kept (`kept`) or only
    when it is not (a name, not a use: the barrier before the loop is outside the counter's scope)."""

    ring: str
    kept: bool


SIMT_VALUES: tuple[type[Value], ...] = (Scratch, RingBuffer)
SIMT_STMTS: tuple[type[Stmt], ...] = (RingBarrier,)

__all__ = ["SIMT_STMTS", "SIMT_VALUES", "RingBarrier", "RingBuffer", "Scratch"]
