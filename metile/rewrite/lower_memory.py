"""Loads and stores of tiles, for `metile.rewrite.lower_tiles` (mixed into its `Lowering`).

A tile load fills the registers of the thread-value layout (`Regs`), `layout.vec` elements at a time as one
vector access where the axis analysis proves the run consecutive and aligned, with a guarded element-by-element
fallback where a mask may cut the run. A store takes the first path that applies: one store per program for
program scalars, `simdgroup_store` of a held `dot` result (`mma_store`), each lane's own elements of it
(`fragment_store`), a run-time loop over the slots, or one store (or vector store) per slot.
"""

from __future__ import annotations

from metile.ir.metal import Extract, MakeVector, VecLoad, VecStore
from metile.ir.ops import CmpOp
from metile.ir.stmts import If, Let, Stmt, Store
from metile.ir.values import Compare, Load, Value, Var
from metile.rewrite import metal_ops as mo
from metile.rewrite.axis_info import vector_width
from metile.rewrite.distribute import Blocked


class Memory:
    """Mixed into `metile.rewrite.lower_tiles.Lowering`."""

    def vector_width(self, layout: Blocked, ptr: Value) -> int:
        """`layout.vec` when every run of `layout` is `vec` consecutive, aligned addresses, else 1."""
        return vector_width(self.axes, layout.vec, ptr)

    def load_regs(self, name: str, layout: Blocked, ptr, mask, other, where) -> tuple[Value, ...]:
        shape = ptr.type.shape
        width = self.vector_width(layout, ptr)
        regs: list[Value] = []
        for first in range(0, layout.slots, width):
            pts = [self.slot_pt(layout, s, shape) for s in range(first, first + width)]
            masks = [self.at(mask, pt) for pt in pts]
            scalar = [Load(self.at(ptr, pt), m, self.at(other, pt) if m is not None else None)
                      for pt, m in zip(pts, masks)]
            if width == 1:
                regs.append(self.let(scalar[0], name))
                continue
            cond = mo.all_of(masks + [self.guard(layout, first)])
            vec = VecLoad(self.at(ptr, pts[0]), width)
            if cond is None:
                v = self.let(vec, name)
                regs += [Extract(v, j) for j in range(width)]
                continue
            fast, slow = Var(self.fresh(name), vec.type), [Var(self.fresh(name), x.type) for x in scalar]
            results = [Var(self.fresh(name), x.type) for x in scalar]
            self.emit(If(cond, [Let(fast, vec)], [Let(s, x) for s, x in zip(slow, scalar)],
                         [Extract(fast, j) for j in range(width)], slow, results, loc=self.loc))
            regs += results
        return tuple(regs)

    def store(self, cls, ptr, value, mask, s: Stmt) -> None:
        shape = ptr.type.shape
        if shape == ():
            m = self.scalar(mask)
            if self.divergent is None and not self.is_varying(ptr, value, mask):
                m = mo.both(m, Compare(CmpOp.EQ, self.group.tid, mo.const(0)))
            self.emit(cls(self.scalar(ptr), self.scalar(value), m, loc=self.loc))
            return
        if cls is Store and mask is None and self.mma_store(ptr, value):
            return
        if self.fragment_store(cls, ptr, value, mask):
            return
        layout = self.layout(ptr.type.size)
        width = self.vector_width(layout, ptr) if cls is Store else 1
        mats = self.rollable(layout, (ptr, value, mask)) if width == 1 else None
        if mats is not None:
            for rep in mats:
                self.mma_in_scratch(rep, s)

            def one(slot: Value) -> None:
                pt = self.slot_pt(layout, slot, shape)
                guard = mo.both(self.at(mask, pt), self.guard(layout, slot))
                self.emit(cls(self.at(ptr, pt), self.at(value, pt), guard, loc=self.loc))

            self.slot_loop(layout, one)
            return
        for first in range(0, layout.slots, width):
            slots = range(first, first + width)
            pts = [self.slot_pt(layout, s, shape) for s in slots]
            masks = [mo.both(self.at(mask, pt), self.guard(layout, s)) for s, pt in zip(slots, pts)]
            scalar = [cls(self.at(ptr, pt), self.at(value, pt), m, loc=self.loc) for pt, m in zip(pts, masks)]
            if width == 1:
                self.emit(scalar[0])
                continue
            vec = VecStore(scalar[0].ptr, MakeVector([x.value for x in scalar]), loc=self.loc)
            cond = mo.all_of(masks)
            self.emit(vec if cond is None else If(cond, [vec], scalar, loc=self.loc))


__all__ = ["Memory"]
