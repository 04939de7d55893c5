"""The MSL of atomic read-modify-writes (`AtomicAdd` statements and `AtomicRMW` values), and the helper functions
some of them call.

Metal's atomics are `atomic_int`, `atomic_uint` and `atomic_float` (MSL 3: add and exchange only), all relaxed. The
others are built here from them:
- f32 `max` and `min` from integer atomics on the float's bits (as Triton builds them on GPUs without float
  atomics): a value whose sign bit is clear orders like a signed integer against every float, so `max` of it is
  `atomic_fetch_max` on `atomic_int`; one whose sign bit is set orders in reverse as an unsigned integer, so its
  `max` is `atomic_fetch_min` on `atomic_uint` (and `min` the other way round). Choosing by the sign bit rather
  than `v >= 0` makes `-0.0` the larger of `-0.0` and a negative number.
- `cas` (compare and swap, returning the old value) loops on `atomic_compare_exchange_weak_explicit`, which may
  fail spuriously: it retries while the element still equals the compared value.
"""

from __future__ import annotations

from metile.emit.spell import ATOMIC, EmitError, literal
from metile.ir.ops import AtomicOp
from metile.ir.types import DType, PtrType
from metile.ir.values import AtomicRMW

_SPACES = ("device", "threadgroup")
_INTS = (DType.I32, DType.U32)


def _extreme(op: str, space: str) -> str:
    clear, sign_set = ("max", "min") if op == "max" else ("min", "max")
    return (f"static inline float mt_atomic_{op}_f32_{space}({space} float* p, float v) {{\n"
            f"    return as_type<int>(v) >= 0\n"
            f"        ? as_type<float>(atomic_fetch_{clear}_explicit(({space} atomic_int*)p, as_type<int>(v), "
            "memory_order_relaxed))\n"
            f"        : as_type<float>(atomic_fetch_{sign_set}_explicit(({space} atomic_uint*)p, as_type<uint>(v), "
            "memory_order_relaxed));\n}")


def _cas(t: DType, space: str) -> str:
    c = t.msl
    return (f"static inline {c} mt_atomic_cas_{c}_{space}({space} {c}* p, {c} cmp, {c} v) {{\n"
            f"    {c} expected = cmp;\n"
            f"    while (!atomic_compare_exchange_weak_explicit(({space} {ATOMIC[t]}*)p, &expected, v, "
            "memory_order_relaxed, memory_order_relaxed)) {\n"
            "        if (expected != cmp) break;   // another value: the swap fails and `expected` is the old value\n"
            "    }\n    return expected;\n}")


HELPERS = {
    **{f"mt_atomic_{op}_f32_{space}": _extreme(op, space) for op in ("max", "min") for space in _SPACES},
    **{f"mt_atomic_cas_{t.msl}_{space}": _cas(t, space) for t in _INTS for space in _SPACES},
}
"""Per helper function's name, its MSL (the emitter writes the ones a kernel calls before the kernel)."""


def atomic_call(op: AtomicOp, ptr_type: PtrType, ptr: str, value: str, compare: str | None = None) -> tuple[str, str]:
    """The MSL call of the atomic `op` on the element `ptr` (of `ptr_type`) with the operand `value` (and `compare`
    for `cas`), giving the old value, and the helper it calls ("" for none)."""
    space, t = ptr_type.space._value_, ptr_type.dtype
    if space not in _SPACES or (t not in _INTS and t is not DType.F32):
        raise EmitError(f"Metal has no atomic {op.value} on {ptr_type}")
    if op is AtomicOp.CAS:
        if t not in _INTS:
            raise EmitError(f"Metal has no atomic compare-and-swap on {ptr_type}")
        helper = f"mt_atomic_cas_{t.msl}_{space}"
        return f"{helper}({ptr}, {compare}, {value})", helper
    if t is DType.F32 and op in (AtomicOp.MAX, AtomicOp.MIN):
        helper = f"mt_atomic_{op.value}_f32_{space}"
        return f"{helper}({ptr}, {value})", helper
    if t is DType.F32 and op not in (AtomicOp.ADD, AtomicOp.XCHG):
        raise EmitError(f"Metal has no atomic {op.value} on {ptr_type}")
    fn = "atomic_exchange_explicit" if op is AtomicOp.XCHG else f"atomic_fetch_{op.value}_explicit"
    return f"{fn}(({space} {ATOMIC[t]}*)({ptr}), {value}, memory_order_relaxed)", ""


def rmw_text(v: AtomicRMW, expr) -> tuple[str, str, str]:
    """The MSL of the `AtomicRMW` value `v` (0 where its mask is false), `expr(x)` giving an operand's texts (bare,
    and safe inside an operator): its text, that text safe inside an operator, and the helper it calls."""
    compare = expr(v.compare)[0] if v.compare is not None else None
    text, helper = atomic_call(v.op, v.ptr.type, expr(v.ptr)[0], expr(v.value)[0], compare)
    if v.mask is None:
        return text, text, helper
    text = f"{expr(v.mask)[1]} ? {text} : {literal(0, v.type.dtype)}"
    return text, f"({text})", helper


__all__ = ["HELPERS", "atomic_call", "rmw_text"]
