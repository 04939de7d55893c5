"""The atomics of `metile.language` while tracing (`ATOMICS`, keyed like `BUILTINS`): `atomic_add`, `atomic_max`,
`atomic_min`, `atomic_and`, `atomic_or`, `atomic_xor`, `atomic_xchg` and `atomic_cas`.

Called as a statement of its own (its value unused), an atomic is an `AtomicAdd` statement of its operation over every
addressed element (once per program for one address and a value alike on every thread). Its value, the old
elements, is an `AtomicRMW` bound to a name (its pointer, value, mask and compared value broadcast to one shape).
`atomic_cas` is always a value. The memory types are `metile.ir.types.ATOMIC_DTYPES`: Metal's i32 and u32, f32 for
add, exchange, max, min and compare-and-swap, and f16 and bf16 of device memory (compare-and-swap loops on the
32-bit word holding the element, `metile.emit.atomics`) for all but the bitwise ones.
"""

from __future__ import annotations

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.builtins import _pointer, _store_like
from metile.frontend.errors import KernelTypeError
from metile.ir.errors import Loc
from metile.ir.ops import AtomicOp
from metile.ir.stmts import AtomicAdd
from metile.ir.types import ATOMIC_DTYPES, AddressSpace, DType, PtrType
from metile.ir.values import AtomicRMW, Value


def result_unused(tr, loc: Loc) -> bool:
    """Whether the call at `loc` is the whole expression of an expression statement (its value unused)."""
    node = tr.unused
    return node is not None and (tr.locs.get(node) or tr.loc(node)) == loc


def _memory(op: AtomicOp, ptr, loc: Loc) -> Value:
    name = f"atomic_{op.value}"
    p = _pointer(ptr, name, loc)
    dt, allowed = p.type.dtype, ATOMIC_DTYPES[op]
    if dt not in allowed:
        why = (f": Metal has no 64-bit atomic {op.value} (its only 64-bit atomics, on recent Apple GPUs, are min and "
               "max of u64)" if dt.bits == 64 else ": Metal's atomic_float only adds and exchanges (metile builds "
               "its max and min)" if dt is DType.F32 else f": a bitwise atomic takes integers, not {dt}" if dt.is_float
               and dt.bits == 16 else ": Metal has no atomics narrower than 32 bits (metile builds those of f16 and "
               "bf16)")
        *most, last = (str(d) for d in allowed)
        raise KernelTypeError(f"{name} works on {', '.join(most)} and {last} memory, not {dt}{why}", loc)
    if dt.bits == 16 and p.type.space is not AddressSpace.DEVICE:
        raise KernelTypeError(f"{name} on {dt} works on device memory only (a pointer parameter's array), not on "
                              f"{p.type.space.value} memory", loc)
    return p


def old_values(tr, loc: Loc, op: AtomicOp, ptr, value, mask, compare=None) -> Value:
    """The old elements `atomic_<op>` leaves, bound to a name (an `AtomicRMW`): the pointer, value, mask and compared
    value broadcast to one shape, each element performed once."""
    name = f"atomic_{op.value}"
    p = _memory(op, ptr, loc)
    shape = p.type.shape
    for x in (value, compare, mask):
        if x is not None:
            t = sem.type_of(x, loc)
            if isinstance(t, PtrType) and x is not mask:
                raise KernelTypeError(f"{name}: cannot write a pointer", loc)
            shape = sem.broadcast_shape(shape, t.shape, f"{name}'s operands", loc)
    dt = p.type.dtype
    m = None if mask is None else sem.converted(mask, DType.BOOL, shape, loc)
    c = None if compare is None else sem.converted(compare, dt, shape, loc)
    rmw = AtomicRMW(op, sem.broadcast_to(p, shape, loc), sem.converted(value, dt, shape, loc), m, c, loc=loc)
    return tr.bind(rmw, tr.hint or "old", loc, force=True)


def _atomic(op: AtomicOp):
    def impl(tr, loc, ptr, value, mask):
        if result_unused(tr, loc):
            _memory(op, ptr, loc)
            _store_like(AtomicAdd, tr, loc, ptr, value, mask, f"atomic_{op.value}", op)
            return None
        return old_values(tr, loc, op, ptr, value, mask)
    impl.__name__ = f"atomic_{op.value}"
    return impl


def atomic_cas(tr, loc, ptr, compare, value):
    return old_values(tr, loc, AtomicOp.CAS, ptr, value, None, compare)


ATOMICS = {**{getattr(L, f"atomic_{op.value}"): _atomic(op) for op in AtomicOp if op is not AtomicOp.CAS},
           L.atomic_cas: atomic_cas}

__all__ = ["ATOMICS", "atomic_cas", "old_values", "result_unused"]
