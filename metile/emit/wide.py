"""SIMD-group collectives on 64-bit integers, which Metal's own `simd_*` functions do not take.

MSL's SIMD-group functions accept 8- to 32-bit scalars and vectors of them, not `long` or `ulong`. A shuffle or
broadcast moves a 64-bit value as the `uint2` of its bits (each half goes where the whole would). A reduction is
built from 32-bit ones, so that it covers the lanes taking part exactly as `simd_sum` does, in a partial simdgroup
too:
- `sum`: the four 16-bit pieces of each value are summed apart (32 lanes of at most 0xFFFF stay below 2**21, so no
  32-bit sum wraps) and put back at their places, modulo 2**64;
- `max`/`min`: the high halves first (signed for `long`), then the low halves (unsigned) of the lanes whose high
  half is the extreme; the others offer the identity (0 for `max`, 0xFFFFFFFF for `min`).
The emitter adds the functions a kernel calls before it (`metile.emit.msl`), as it does `metile.emit.fp8`'s.
"""

from __future__ import annotations

from metile.emit.spell import SIMD_REDUCE_BY_VALUE, EmitError
from metile.ir.errors import Loc
from metile.ir.ops import ReduceOp
from metile.ir.types import DType, TileType, Type

WIDE = (DType.I64, DType.U64)


def _bits_as(t: str, bits: str) -> str:
    """The `ulong` expression `bits` read as the type `t`."""
    return bits if t == "ulong" else f"as_type<{t}>({bits})"


def _sum(t: str) -> str:
    return f"""inline {t} mt_simd_sum({t} x) {{
    const ulong u = ulong(x);
    ulong total = 0UL;
    for (uint k = 0u; k < 64u; k += 16u) total += ulong(simd_sum(uint((u >> k) & 0xFFFFUL))) << k;
    return {_bits_as(t, "total")};
}}"""


def _extreme(op: str, t: str, identity: str) -> str:
    hi = "int" if t == "long" else "uint"
    return f"""inline {t} mt_simd_{op}({t} x) {{
    const {hi} high = {hi}(x >> 32), top = simd_{op}(high);
    const uint low = simd_{op}(high == top ? uint(x) : {identity});
    return {_bits_as(t, "(ulong(uint(top)) << 32) | ulong(low)")};
}}"""


HELPERS = {f"mt_simd_{op}_{t}": code for t in ("long", "ulong") for op, code in (
    ("sum", _sum(t)), ("max", _extreme("max", t, "0u")), ("min", _extreme("min", t, "0xFFFFFFFFu")))}

_REDUCE = {ReduceOp.SUM: "sum", ReduceOp.MAX: "max", ReduceOp.MIN: "min"}


def shuffle_text(function: str, x: str, lane: str, t: Type, loc: Loc | None) -> str:
    """`function(x, lane)`, a SIMD-group shuffle or broadcast (`simd_shuffle_xor`, `simd_broadcast`) of the expression
    `x` of type `t`; a 64-bit integer moves as the `uint2` of its bits."""
    dtype = t.dtype
    if dtype not in WIDE:
        return f"{function}({x}, {lane})"
    if t.__class__ is not TileType:
        raise EmitError(f"{function} of {t}: metile moves 64-bit integers between lanes one scalar at a time", loc)
    return f"as_type<{dtype.msl}>({function}(as_type<uint2>({x}), {lane}))"


def reduce_text(op: ReduceOp, x: str, t: Type, loc: Loc | None) -> tuple[str, str | None]:
    """The SIMD-group reduction `op` of the expression `x` of type `t`, and the helper of `HELPERS` it calls (None
    for Metal's own function). A 64-bit product has no form: metile's language never reduces with it across lanes."""
    dtype = t.dtype
    if dtype not in WIDE:
        return f"{SIMD_REDUCE_BY_VALUE[op._value_]}({x})", None
    name = _REDUCE.get(op)
    if name is None or t.__class__ is not TileType:
        raise EmitError(f"Metal has no SIMD-group {op.value} of {t}", loc)
    return f"mt_simd_{name}({x})", f"mt_simd_{name}_{dtype.msl}"


__all__ = ["HELPERS", "WIDE", "reduce_text", "shuffle_text"]
