"""`device_print` and `device_assert` in the lowering: each thread prints or checks the elements it holds.

A tile is read slot by slot in the default layout of its size (`values.layout`): the thread prints (or checks) the
element of each slot, guarded where the slot is padding, so every element is printed (checked) exactly once, with its
coordinates. A scalar that is the same on every thread is printed by the group's first thread; one that differs
between threads (a thread-level kernel's) by each. An assertion of a scalar is checked by every thread.
"""

from __future__ import annotations

import math

from metile.ir.ops import BuiltinKind, CmpOp
from metile.ir.stmts import DeviceAssert, DevicePrint
from metile.ir.values import Compare, Value
from metile.rewrite import metal_ops as mo
from metile.rewrite.lower import exchange as X
from metile.rewrite.lower import statements as S
from metile.rewrite.lower import values as V
from metile.rewrite.lower.state import Block


def _pid() -> list[Value]:
    return [mo.builtin(BuiltinKind.THREADGROUP_POSITION_IN_GRID, axis) for axis in range(3)]


def print_stmt(blk: Block, s: DevicePrint) -> None:
    for v in s.values:
        X.prepare(blk, v)
    shape = next((v.type.shape for v in s.values if v.type.shape), ())
    if not shape:
        vals = [V.scalar(blk, v) for v in s.values]
        mask = None if S.is_varying(blk, *s.values) else Compare(CmpOp.EQ, blk.group.tid, mo.const(0))
        blk.emit(DevicePrint(s.prefix, vals, s.hex, _pid(), mask, loc=s.loc))
        return
    layout = V.layout(blk, math.prod(shape))
    for slot in range(layout.slots):
        pt = V.slot_pt(blk, layout, slot, shape)
        vals = [V.at(blk, v, pt) if v.type.shape else V.scalar(blk, v) for v in s.values]
        coords = V.coords(blk, pt) if len(shape) > 1 else [pt.flat]
        blk.emit(DevicePrint(s.prefix, vals, s.hex, [*_pid(), *coords], V.guard(blk, layout, slot), loc=s.loc))


def assert_stmt(blk: Block, s: DeviceAssert) -> None:
    X.prepare(blk, s.cond)
    shape = s.cond.type.shape
    if not shape:
        blk.emit(DeviceAssert(V.scalar(blk, s.cond), s.msg, loc=s.loc))
        return
    layout = V.layout(blk, math.prod(shape))
    for slot in range(layout.slots):
        pt = V.slot_pt(blk, layout, slot, shape)
        blk.emit(DeviceAssert(V.at(blk, s.cond, pt), s.msg, V.guard(blk, layout, slot), loc=s.loc))


__all__ = ["assert_stmt", "print_stmt"]
