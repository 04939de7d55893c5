"""MSL functions for the conversions MSL lacks or may round twice: between `float` and the 8-bit float formats,
and from 32- and 64-bit integers to `bfloat`.

An 8-bit float is its bits in a `uchar`. Reading one is exact (f32 holds both formats); writing one rounds to
nearest, ties to even, as ml_dtypes converts numpy arrays: f8e4m3 (`float8_e4m3fn`, largest finite 448, no
infinities) turns anything beyond into its NaN, f8e5m2 (`float8_e5m2`, largest finite 57344) into infinity, and a
NaN stays a NaN of the same sign. The emitter adds the functions a kernel calls before the kernel
(`metile.emit.msl`), in `HELPERS` order.
"""

from __future__ import annotations

from metile.ir.types import DType

F8E4M3_TO_FLOAT = """inline float mt_f8e4m3_to_float(uchar b) {
    const uint e = (b >> 3) & 15u, m = b & 7u;
    const float v = (e == 15u && m == 7u) ? NAN
        : e == 0u ? float(m) * 0.001953125f : as_type<float>(((e + 120u) << 23) | (m << 20));
    return (b & 128u) ? -v : v;
}"""

F8E5M2_TO_FLOAT = """inline float mt_f8e5m2_to_float(uchar b) {
    return float(as_type<half>(ushort(ushort(b) << 8)));
}"""

def _float_to_f8(fmt: str, man: int, bias: int, top: int, over: int, nan: int) -> str:
    """The MSL of `mt_float_to_<fmt>`: f32 bits -> the 8-bit magnitude with `man` mantissa bits and exponent bias
    `bias`. A normal exponent keeps the top mantissa bits; a subnormal result counts units of the smallest
    subnormal; the bits shifted out round to nearest, ties to even (a carry may raise the exponent). Codes above
    `top` (the largest finite value) become `over`, NaN becomes `nan`, each with the input's sign."""
    low = 1 - bias  # the smallest normal exponent
    return f"""inline uchar mt_float_to_{fmt}(float x) {{
    const uint u = as_type<uint>(x), sign = (u >> 24) & 128u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return uchar(sign | {nan}u);
    const int e = int(a >> 23) - 127;
    uint r = 0u, rest = 0u, half_ulp = 1u;
    if (e >= {low}) {{
        r = (uint(e + {bias}) << {man}) | ((a & 0x7FFFFFu) >> {23 - man});
        rest = a & {hex((1 << (23 - man)) - 1)}u;
        half_ulp = {hex(1 << (22 - man))}u;
    }} else if (e >= {low - man - 1}) {{
        const uint sig = (a & 0x7FFFFFu) | 0x800000u, shift = uint({23 - man + low} - e);
        r = sig >> shift;
        rest = sig & ((1u << shift) - 1u);
        half_ulp = 1u << (shift - 1u);
    }}
    if (rest > half_ulp || (rest == half_ulp && (r & 1u) != 0u)) r += 1u;
    return uchar(sign | (r > {top}u ? {over}u : r));
}}"""


FLOAT_TO_F8E4M3 = _float_to_f8("f8e4m3", man=3, bias=7, top=126, over=127, nan=127)  # no infinity: beyond is NaN
FLOAT_TO_F8E5M2 = _float_to_f8("f8e5m2", man=2, bias=15, top=123, over=124, nan=126)  # beyond 57344: infinity

# An integer of more than 24 bits converted to bfloat through float would round twice (2**30 + 2**22 + 1 would
# become 2**30, a tie once rounded to float, instead of 2**30 + 2**23). Rounded to float "to odd" first (the bits
# shifted out leave the lowest bit kept set), it rounds once: float keeps 16 more bits than bfloat.
ULONG_TO_FLOAT_ODD = """inline float mt_ulong_to_float_odd(ulong m) {
    const float f = float(m);
    const int e = int((as_type<uint>(f) >> 23) & 255u) - 127;
    if (e < 24) return f;
    const uint shift = uint(e - 23);
    const ulong q = (m >> shift) | ((m & ((ulong(1) << shift) - 1ul)) != 0ul ? 1ul : 0ul);
    return float(q << shift);
}"""

LONG_TO_FLOAT_ODD = """inline float mt_long_to_float_odd(long x) {
    return x < 0 ? -mt_ulong_to_float_odd(ulong(0) - ulong(x)) : mt_ulong_to_float_odd(ulong(x));
}"""

HELPERS = {"mt_f8e4m3_to_float": F8E4M3_TO_FLOAT, "mt_f8e5m2_to_float": F8E5M2_TO_FLOAT,
           "mt_float_to_f8e4m3": FLOAT_TO_F8E4M3, "mt_float_to_f8e5m2": FLOAT_TO_F8E5M2,
           "mt_ulong_to_float_odd": ULONG_TO_FLOAT_ODD, "mt_long_to_float_odd": LONG_TO_FLOAT_ODD}

WIDE_INTS = (DType.I32, DType.U32, DType.I64, DType.U64)


def by_helper(src: DType, dst: DType) -> bool:
    """Whether a conversion from `src` to `dst` goes through `fp8_cast` rather than a `static_cast`."""
    return src.storage_only or dst.storage_only or (dst is DType.BF16 and src in WIDE_INTS)


def fp8_cast(x: str, src: DType, dst: DType) -> tuple[str, tuple[str, ...]]:
    """The MSL converting the expression `x` of `src` to `dst` (at least one of them an 8-bit float), through
    `float`, and the helper functions it calls."""
    used = []
    if dst is DType.BF16 and src in WIDE_INTS:
        signed = src in (DType.I32, DType.I64)
        used += ["mt_ulong_to_float_odd"] + (["mt_long_to_float_odd"] if signed else [])
        return f"static_cast<bfloat>({used[-1]}(static_cast<{'long' if signed else 'ulong'}>({x})))", tuple(used)
    if src.storage_only:
        used.append(f"mt_{src.value}_to_float")
        value = f"{used[-1]}({x})"
    else:
        value = x if src is DType.F32 else f"static_cast<float>({x})"
    if dst.storage_only:
        used.append(f"mt_float_to_{dst.value}")
        return f"{used[-1]}({value})", tuple(used)
    return (value if dst is DType.F32 else f"static_cast<{dst.msl}>({value})"), tuple(used)


__all__ = ["HELPERS", "by_helper", "fp8_cast"]
