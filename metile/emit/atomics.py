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
  fail spuriously: it retries while the element still equals the compared value. On f32 memory it is the same loop
  on `atomic_uint` over the float's bits, so it compares bits, as Triton's compare-and-swap on GPUs does (`-0.0` is
  not `+0.0`, a NaN matches its own bits).
- Every atomic on f16 and bf16 memory (`half`, `bfloat`): Metal has no 16-bit atomics, so it is a compare-and-swap
  loop on the 32-bit `atomic_uint` word holding the element, which rewrites only the element's half of the word (the
  other half is written back as it was read, and a change to it between the read and the swap makes the swap fail and
  the loop read again, so a neighbour is never lost). The word is found from the element's index `i` in the array of
  the pointer parameter it points into (`p - base`, a pointer difference, rather than the pointer's integer value): it
  starts at element `i - (i & 1)`, and the element is its low half when `i` is even (Apple GPUs are little-endian).
  That is the word the element shares with its neighbour only when the parameter's array starts at a 4-byte aligned
  address, which the launch makes sure of (`metile.launch`). The word of the last element of an array of odd length
  reaches two bytes past the array, inside the same 4-byte aligned unit of its allocation, so within its page (and the
  CPU device rounds a buffer up to 16 bytes), and never into another buffer, which starts 4-byte aligned; those bytes
  are only ever written back unchanged. The new element is computed in f32 and rounded once to the memory's type;
  `max` and `min` order the elements by their bits as f32 ones do (-0.0 below +0.0), and `cas` compares bits.
"""

from __future__ import annotations

from metile.emit.facts import bindings, pointer_roots, sole_root
from metile.emit.spell import ATOMIC, EmitError, literal
from metile.ir.errors import Loc
from metile.ir.node import walk
from metile.ir.ops import AtomicOp
from metile.ir.stmts import AtomicAdd, Kernel
from metile.ir.types import DType, PtrType
from metile.ir.values import AtomicRMW, Value

_SPACES = ("device", "threadgroup")
_INTS = (DType.I32, DType.U32)
_HALVES = (DType.F16, DType.BF16)
_HALF_OPS = (AtomicOp.ADD, AtomicOp.XCHG, AtomicOp.MAX, AtomicOp.MIN, AtomicOp.CAS)



def _key(b: str) -> str:
    """The bits `b` of a 16-bit float as an unsigned integer of the same order (-0.0 below +0.0, NaN aside)."""
    return f"((({b}) & 0x8000u) ? (~uint({b}) & 0xFFFFu) : (uint({b}) | 0x8000u))"


# The bits of the new element of a 16-bit atomic from the old element `e` (its bits `eb`) and the operand `v` (its
# bits `vb`).
_HALF_NEW = {
    AtomicOp.ADD: "as_type<ushort>({c}(float(e) + float(v)))",
    AtomicOp.XCHG: "vb",
    AtomicOp.MAX: f"{_key('vb')} > {_key('eb')} ? vb : eb",
    AtomicOp.MIN: f"{_key('vb')} < {_key('eb')} ? vb : eb",
}


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


def _cas_f32(space: str) -> str:
    return (f"static inline float mt_atomic_cas_float_{space}({space} float* p, float cmp, float v) {{\n"
            "    uint want = as_type<uint>(cmp);\n"
            "    uint expected = want;\n"
            f"    while (!atomic_compare_exchange_weak_explicit(({space} atomic_uint*)p, &expected, as_type<uint>(v), "
            "memory_order_relaxed, memory_order_relaxed)) {\n"
            "        if (expected != want) break;   // other bits: the swap fails and `expected` is the old value\n"
            "    }\n    return as_type<float>(expected);\n}")


def _half(op: AtomicOp, t: DType) -> str:
    """The helper of the atomic `op` on a 16-bit float of device memory, given the pointer parameter `base` the
    element `p` is in (see the module docstring)."""
    c, name = t.msl, f"mt_atomic_{op.value}_{t.msl}_device"
    cmp = f", {c} cmp" if op is AtomicOp.CAS else ""
    if op is AtomicOp.CAS:   # no write where the element's bits differ from the compared value's
        step = ("        if (eb != as_type<ushort>(cmp)) return e;\n"
                "        ushort nb = vb;\n")
    else:   # no write where the element would not change
        step = (f"        ushort nb = {_HALF_NEW[op].format(c=c)};\n"
                "        if (nb == eb) return e;\n")
    return (f"static inline {c} {name}(device {c}* base, device {c}* p{cmp}, {c} v) {{\n"
            "    long i = p - base;   // the element's index in its array, which starts 4-byte aligned\n"
            "    device atomic_uint* word = (device atomic_uint*)(p - (i & 1));\n"
            "    uint shift = uint(i & 1) * 16u;   // the element's half: the high one at an odd index\n"
            + ("" if op is AtomicOp.ADD else "    ushort vb = as_type<ushort>(v);\n") +
            "    uint old = atomic_load_explicit(word, memory_order_relaxed);\n"
            "    for (;;) {\n"
            "        ushort eb = ushort(old >> shift);\n"
            f"        {c} e = as_type<{c}>(eb);\n"
            + step +
            "        uint next = (old & ~(0xFFFFu << shift)) | (uint(nb) << shift);\n"
            "        if (atomic_compare_exchange_weak_explicit(word, &old, next, memory_order_relaxed, "
            "memory_order_relaxed)) {\n"
            "            return e;\n"
            "        }\n"
            "    }\n}")


HELPERS = {
    **{f"mt_atomic_{op}_f32_{space}": _extreme(op, space) for op in ("max", "min") for space in _SPACES},
    **{f"mt_atomic_cas_{t.msl}_{space}": _cas(t, space) for t in _INTS for space in _SPACES},
    **{f"mt_atomic_cas_float_{space}": _cas_f32(space) for space in _SPACES},
    **{f"mt_atomic_{op.value}_{t.msl}_device": _half(op, t) for op in _HALF_OPS for t in _HALVES},
}
"""Per helper function's name, its MSL (the emitter writes the ones a kernel calls before the kernel)."""

def atomic_call(op: AtomicOp, ptr_type: PtrType, ptr: str, value: str, compare: str | None = None,
                base: str | None = None) -> tuple[str, str]:
    """The MSL call of the atomic `op` on the element `ptr` (of `ptr_type`) with the operand `value` (and `compare`
    for `cas`), giving the old value, and the helper it calls ("" for none). A 16-bit element needs `base`, the
    pointer parameter it points into."""
    space, t = ptr_type.space._value_, ptr_type.dtype
    if t in _HALVES:
        if space != "device" or op not in _HALF_OPS or base is None:
            why = ("" if base is not None or space != "device" or op not in _HALF_OPS else
                   ": its pointer does not come from one pointer parameter")
            raise EmitError(f"Metal has no atomic {op.value} on {ptr_type}{why}")
        helper = f"mt_atomic_{op.value}_{t.msl}_device"
        cmp = f", {compare}" if op is AtomicOp.CAS else ""
        return f"{helper}({base}, {ptr}{cmp}, {value})", helper
    if space not in _SPACES or (t not in _INTS and t is not DType.F32):
        raise EmitError(f"Metal has no atomic {op.value} on {ptr_type}")
    if op is AtomicOp.CAS:
        helper = f"mt_atomic_cas_{t.msl}_{space}"
        return f"{helper}({ptr}, {compare}, {value})", helper
    if t is DType.F32 and op in (AtomicOp.MAX, AtomicOp.MIN):
        helper = f"mt_atomic_{op.value}_f32_{space}"
        return f"{helper}({ptr}, {value})", helper
    if t is DType.F32 and op not in (AtomicOp.ADD, AtomicOp.XCHG):
        raise EmitError(f"Metal has no atomic {op.value} on {ptr_type}")
    fn = "atomic_exchange_explicit" if op is AtomicOp.XCHG else f"atomic_fetch_{op.value}_explicit"
    return f"{fn}(({space} {ATOMIC[t]}*)({ptr}), {value}, memory_order_relaxed)", ""


def atomic_base(ptr: Value, defs: dict[str, tuple[Value, ...]], names: dict[str, str], loc: Loc | None) -> str | None:
    """The C name (from `names`) of the pointer parameter the element `ptr` of a 16-bit atomic is in, None for other
    atomics; `defs` are the kernel's bindings (`metile.emit.facts.bindings`)."""
    if ptr.type.dtype not in _HALVES:
        return None
    root = sole_root(ptr, defs)
    if root is None:
        raise EmitError(f"an atomic on {ptr.type} needs a pointer into the array of one pointer parameter (it finds "
                        "its 32-bit word from the element's index there), and this one may point elsewhere", loc)
    return names[root]


def word_aligned_params(k: Kernel) -> tuple[int, ...]:
    """The positions in `k.params` of the pointer parameters 16-bit atomics write through: the launch makes sure their
    arrays start 4-byte aligned (the words of their elements are counted from there)."""
    ptrs = [n.ptr for n in walk(k) if n.__class__ in (AtomicAdd, AtomicRMW) and n.ptr.type.dtype in _HALVES]
    if not ptrs:
        return ()
    roots = pointer_roots(ptrs, bindings(k))
    return tuple(i for i, p in enumerate(k.params) if p.name in roots)


def rmw_text(v: AtomicRMW, expr, base: str | None = None) -> tuple[str, str, str]:
    """The MSL of the `AtomicRMW` value `v` (0 where its mask is false), `expr(x)` giving an operand's texts (bare,
    and safe inside an operator), `base` the pointer parameter a 16-bit element is in: its text, that text safe
    inside an operator, and the helper it calls."""
    compare = expr(v.compare)[0] if v.compare is not None else None
    text, helper = atomic_call(v.op, v.ptr.type, expr(v.ptr)[0], expr(v.value)[0], compare, base)
    if v.mask is None:
        return text, text, helper
    text = f"{expr(v.mask)[1]} ? {text} : {literal(0, v.type.dtype)}"
    return text, f"({text})", helper


__all__ = ["HELPERS", "atomic_base", "atomic_call", "rmw_text", "word_aligned_params"]
