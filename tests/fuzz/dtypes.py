"""Element types of fuzzed programs: names, numpy types, the promotion rules of docs/language.md 3.3, and
correct rounding of float64 values to each float format (with the unit in the last place for error bounds)."""

from __future__ import annotations

import attrs
import ml_dtypes
import numpy as np


@attrs.frozen
class DT:
    name: str
    np: np.dtype
    kind: str           # "f" float, "i" signed int, "u" unsigned int, "b" bool
    bits: int
    mant: int = 0       # float: significand bits including the hidden one
    emin: int = 0       # float: exponent of the smallest normal number


TYPES: dict[str, DT] = {t.name: t for t in (
    DT("f32", np.dtype(np.float32), "f", 32, 24, -126),
    DT("f16", np.dtype(np.float16), "f", 16, 11, -14),
    DT("bf16", np.dtype(ml_dtypes.bfloat16), "f", 16, 8, -126),
    DT("i8", np.dtype(np.int8), "i", 8), DT("i16", np.dtype(np.int16), "i", 16),
    DT("i32", np.dtype(np.int32), "i", 32), DT("u8", np.dtype(np.uint8), "u", 8),
    DT("u16", np.dtype(np.uint16), "u", 16), DT("u32", np.dtype(np.uint32), "u", 32),
    DT("i64", np.dtype(np.int64), "i", 64), DT("u64", np.dtype(np.uint64), "u", 64),
    DT("bool", np.dtype(np.bool_), "b", 8),
    DT("f8e4m3", np.dtype(ml_dtypes.float8_e4m3fn), "f", 8, 4, -6),
    DT("f8e5m2", np.dtype(ml_dtypes.float8_e5m2), "f", 8, 3, -14),
)}
FLOATS = ("f32", "f16", "bf16")
F8 = ("f8e4m3", "f8e5m2")
INTS = ("i8", "i16", "i32", "u8", "u16", "u32", "i64", "u64")
BITCAST_PAIRS = {"f32": ("i32", "u32"), "i32": ("f32", "u32"), "u32": ("f32", "i32"), "f16": ("i16", "u16", "bf16"),
                 "bf16": ("i16", "u16", "f16"), "i16": ("f16", "bf16", "u16"), "u16": ("f16", "bf16", "i16"),
                 "i8": ("u8", "f8e4m3", "f8e5m2"), "u8": ("i8", "f8e4m3"), "f8e4m3": ("u8", "i8", "f8e5m2"),
                 "f8e5m2": ("u8", "f8e4m3"), "i64": ("u64",), "u64": ("i64",)}


def is_float(t: str) -> bool:
    return TYPES[t].kind == "f"


def is_int(t: str) -> bool:
    return TYPES[t].kind in "iu"


def int_range(t: str) -> tuple[int, int]:
    d = TYPES[t]
    if d.kind == "u":
        return 0, 2 ** d.bits - 1
    if d.kind == "b":
        return 0, 1
    return -(2 ** (d.bits - 1)), 2 ** (d.bits - 1) - 1


def computed(t: str) -> str:
    """The type a value of type `t` computes in: 8-bit floats compute as f16 (3.7)."""
    return "f16" if t in F8 else t


def float_max(t: str) -> float:
    if t == "f8e4m3":
        return 448.0
    d = TYPES[t]
    emax = -d.emin + 1
    return float((2 - 2.0 ** (1 - d.mant)) * 2.0 ** emax)


def common(a: str, b: str) -> str:
    """The common type of two traced values by the rules of 3.3, which `where`, runtime `if` and loop-carried
    values use; two bools give bool (arithmetic makes that i32 itself). See `promote` for computations."""
    if a == b:
        return a
    da, db = TYPES[a], TYPES[b]
    if da.kind == "b":
        return b
    if db.kind == "b":
        return a
    if da.kind == "f" and db.kind == "f":
        if {a, b} == {"f16", "bf16"} or (a in F8 and b in F8):
            return "f32" if a not in F8 else "f16"
        return a if da.bits >= db.bits else b
    if da.kind == "f":
        return a
    if db.kind == "f":
        return b
    if da.kind == db.kind:
        return a if da.bits >= db.bits else b
    u, s = (da, db) if da.kind == "u" else (db, da)
    return u.name if u.bits >= s.bits else s.name


def promote(a: str, b: str) -> str:
    """The type a computation (arithmetic, math, comparisons) on `a` and `b` happens in: 8-bit floats are
    converted to f16 first (3.7), then `common`."""
    return common(computed(a), computed(b))


def weak_type(t: str, lit, computation: bool = True) -> str:
    """The type of traced `t` combined with the Python number `lit` (weak: 3.3); in a computation an 8-bit float
    counts as f16."""
    if isinstance(lit, float) and not is_float(t):
        return "f32"
    return computed(t) if computation else t


def literal_fits(t: str, lit) -> bool:
    """Whether `t` holds the Python number `lit` (else metile refuses it)."""
    if isinstance(lit, bool):
        return True
    if is_float(t):
        return not np.isfinite(lit) or abs(lit) <= float_max(t)
    if isinstance(lit, float):
        return True
    lo, hi = int_range(t)
    return lo <= lit <= hi


def round_to(x, t: str) -> np.ndarray:
    """float64 values rounded once to the float format `t` (nearest, ties to even), as float64."""
    x = np.asarray(x, np.float64)
    d = TYPES[t]
    with np.errstate(all="ignore"):
        _, e = np.frexp(x)                          # x = m * 2**e with 0.5 <= |m| < 1
        q = np.maximum(e - d.mant, d.emin - d.mant + 1)   # exponent of the unit in the last place
        y = np.ldexp(np.rint(np.ldexp(x, -q)), q)
        y = np.where(np.abs(y) > float_max(t), np.copysign(np.inf, x), y)
    y = np.where(np.isfinite(x), y, x)
    if t == "f8e4m3":                                   # no infinity: beyond 448 is NaN (3.7)
        y = np.where(np.isinf(y), np.nan, y)
    return y


def ulp(x, t: str) -> np.ndarray:
    """The unit in the last place of `t` at float64 values `x` (of the largest finite value at infinities)."""
    x = np.asarray(x, np.float64)
    d = TYPES[t]
    with np.errstate(all="ignore"):
        ax = np.where(np.isfinite(x), np.abs(x), float_max(t))
        _, e = np.frexp(ax)
        e = np.where(ax == 0, d.emin, e)
        return np.ldexp(1.0, np.maximum(e - d.mant, d.emin - d.mant + 1))


def wrap(x, t: str) -> np.ndarray:
    """Python/int64 integers wrapped into the integer type `t` (two's complement), as int64 (64-bit types: as
    `t`'s own numpy type; int64 inputs are read modulo 2**64, so wrapped int64 arithmetic gives the right bits)."""
    lo, hi = int_range(t)
    span = hi - lo + 1
    if TYPES[t].bits == 64:
        x = np.asarray(x)
        if x.dtype.kind in "iu":
            x = x.astype(TYPES[t].np)              # the same bits, read as t
            return x
        x = np.vectorize(int, otypes=[object])(x) if x.size else x.astype(object)
        return np.asarray((x - lo) % span + lo, dtype=object).astype(TYPES[t].np)
    x = np.asarray(x).astype(np.int64) if np.asarray(x).dtype != object else np.asarray(x)
    return np.asarray((x - lo) % span + lo).astype(np.int64)


def ints(v: np.ndarray, t: str) -> np.ndarray:
    """The integer values of an array of type `t` exactly: int64, or Python ints for 64-bit types (so that u64
    values past 2**63 keep their order)."""
    if TYPES[t].bits == 64:
        return np.asarray(v).astype(object) if np.size(v) else np.asarray(v).astype(object)
    return np.asarray(v).astype(np.int64)


def int_to_float(x: np.ndarray, t: str) -> np.ndarray:
    """Integers (Python ints or int64) rounded once to the float format `t` (nearest, ties to even), as float64."""
    d = TYPES[t]

    def one(n: int) -> float:
        n = int(n)
        a = abs(n)
        shift = a.bit_length() - d.mant
        if shift > 0:
            q, r = divmod(a, 1 << shift)
            half = 1 << (shift - 1)
            if r > half or (r == half and q & 1):
                q += 1
            a = q << shift
        f = float(a) if a < 2 ** 1000 else float("inf")
        return -f if n < 0 else f
    out = np.vectorize(one, otypes=[np.float64])(x) if np.size(x) else np.asarray(x, np.float64)
    return round_to(out, t)


def as_f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def from_f64(x, t: str) -> np.ndarray:
    """float64 values already representable in `t` as an array of `t`."""
    return np.asarray(x, np.float64).astype(TYPES[t].np)
