"""Random operations of fuzzed programs, one at a time, over the values in scope of a `Gen`, typed by the rules
of docs/language.md 3.3: every one valid by the documentation (integer divisors never zero, shift counts in
range, numbers that fit their operand's type, shapes that broadcast)."""

from __future__ import annotations

import numpy as np

from tests.fuzz.dtypes import (
    BITCAST_PAIRS,
    F8,
    FLOATS,
    INTS,
    TYPES,
    common,
    computed,
    int_range,
    is_float,
    is_int,
    promote,
    weak_type,
)
from tests.fuzz.gen import MAX_ELEMS, Gen, V
from tests.fuzz.model import arith_type
from tests.fuzz.model_math import MATH, math_type
from tests.fuzz.model_reduce import sum_type
from tests.fuzz.prog import Bin, Call, Expand, Name, Num, Py, To, Trans, Un


def typ(op: str, a: V, b: V | None, lit) -> str:
    if b is None:
        return arith_type(op, weak_type(a.t, lit.value), weak_type(a.t, lit.value))
    return arith_type(op, a.t, b.t)

def random_op(g: Gen) -> V | None:
    pool = [v for v in g.pool() if int(np.prod(v.shape)) <= MAX_ELEMS]
    if not pool:
        return None
    a = g.choice(pool)
    kinds = ["arith"] * 8 + ["div"] * 2 + ["divmod"] * 3 + ["pow"] + ["bits"] * 2 + ["shift"] + ["cmp"] * 3 + \
        ["neg"] + ["not"] + ["math"] * 4 + ["ext"] * 2 + ["clamp"] + ["where"] * 3 + ["fma"] + ["cast"] * 3 + \
        ["bitcast"] + ["expand"] + ["trans"] + ["reduce"] + ["scan"] + ["full"]
    kind = g.choice(kinds)
    return OPS[kind](g, a)

def shape_of(a: V, b: V | None) -> tuple:
    return np.broadcast_shapes(a.shape, b.shape) if b is not None else a.shape

def op_arith(g: Gen, a: V) -> V:
    op = g.choice(["+", "-", "*"])
    be, b = g.operand(a)
    lit = be if b is None else None
    return g.let(Bin(op, Name(a.name), be), typ(op, a, b, lit), shape_of(a, b))

def op_div(g: Gen, a: V) -> V:
    be, b = g.operand(a)
    lit = be if b is None else None
    return g.let(Bin("/", Name(a.name), be), typ("/", a, b, lit), shape_of(a, b))

def op_divmod(g: Gen, a: V) -> V | None:
    op = g.choice(["//", "%"])
    be, b = g.operand(a, lit=0.4)
    t = typ(op, a, b, be if b is None else None)
    if is_int(t):
        if b is None:
            lo, hi = int_range(t)
            be = Num(g.choice([x for x in (1, 2, 3, 7, -1, -2, -3, 10, 100) if lo <= x <= hi]))
        elif b.t == "bool" or not is_int(b.t):
            return None
        else:
            be = Bin("|", be, Num(1))                   # odd, so never zero
    return g.let(Bin(op, Name(a.name), be), t, shape_of(a, b))

def op_pow(g: Gen, a: V) -> V | None:
    if a.t == "bool":
        return None
    if g.chance(0.6):
        be, b = Num(g.choice([2.0, 3.0, 0.5, -1.0, 0.0])), None
    else:
        be, b = g.operand(a, pred=lambda v: v.t != "bool", lit=0)
    if b is not None and b.t == "bool":
        return None
    t = arith_type("**", a.t if b is None else promote(a.t, b.t), a.t if b is None else b.t)
    t = weak_type(a.t, be.value) if b is None else t
    t = t if is_float(t) else "f32"
    return g.let(Bin("**", Name(a.name), be), t, shape_of(a, b))

def op_bits(g: Gen, a: V) -> V | None:
    if is_float(a.t):
        return None
    op = g.choice(["&", "|", "^"])
    be, b = g.operand(a, pred=lambda v: not is_float(v.t), lit=0.3 if a.t != "bool" else 0)
    if b is None and isinstance(be.value, float):
        return None
    t = common(a.t, b.t) if b is not None else a.t
    return g.let(Bin(op, Name(a.name), be), t, shape_of(a, b))

def op_shift(g: Gen, a: V) -> V | None:
    if not is_int(a.t):
        return None
    op = g.choice(["<<", ">>"])
    b = g.partner(a, lambda v: is_int(v.t)) if g.chance(0.5) else None
    if b is None:
        return g.let(Bin(op, Name(a.name), Num(int(g.rng.integers(TYPES[a.t].bits)))), a.t, a.shape)
    t = common(a.t, b.t)
    count = Bin("&", Name(b.name), Num(TYPES[t].bits - 1))
    return g.let(Bin(op, Name(a.name), count), t, shape_of(a, b))

def op_cmp(g: Gen, a: V) -> V:
    op = g.choice(["<", "<=", ">", ">=", "==", "!="])
    be, b = g.operand(a)
    return g.let(Bin(op, Name(a.name), be), "bool", shape_of(a, b), base="m")

def op_neg(g: Gen, a: V) -> V:
    return g.let(Un("-", Name(a.name)), "i32" if a.t == "bool" else a.t, a.shape)

def op_not(g: Gen, a: V) -> V | None:
    if is_float(a.t):
        return None
    return g.let(Un("~", Name(a.name)), a.t, a.shape)

def op_math(g: Gen, a: V) -> V | None:
    if a.t == "bool":
        return None
    fn = g.choice(sorted(MATH))
    if fn == "sigmoid" and a.t == "f16" and not g.f.f16_sigmoid:
        return None
    if not g.f.unsigned_math and TYPES[a.t].kind == "u":
        return None
    if fn == "abs":   # an integer's keeps its type; an 8-bit float's is f16, as all its math (3.7)
        return g.let(Call("abs", (Name(a.name),)), computed(a.t), a.shape)
    return g.let(Call(fn, (Name(a.name),)), math_type(a.t), a.shape)

def op_ext(g: Gen, a: V) -> V:
    fn = g.choice(["maximum", "minimum"])
    be, b = g.operand(a)
    t = promote(a.t, b.t) if b is not None else weak_type(a.t, be.value)
    if g.chance(0.25):                               # Python's max and min of traced values are the same
        fn = {"maximum": "builtin.max", "minimum": "builtin.min"}[fn]
    return g.let(Call(fn, (Name(a.name), be)), t, shape_of(a, b))

def op_clamp(g: Gen, a: V) -> V | None:
    if a.t == "bool":
        return None
    lo, hi = g.literal(a.t), g.literal(a.t)
    if lo is None or hi is None:
        return None
    t = weak_type(weak_type(a.t, lo.value), hi.value)
    return g.let(Call("clamp", (Name(a.name), lo, hi)), t, a.shape)

def op_where(g: Gen, a: V) -> V | None:
    conds = [v for v in g.pool() if (v.t == "bool" or is_int(v.t))]
    c = g.partner(a, lambda v: v in conds)
    if c is None:
        return None
    shape = np.broadcast_shapes(a.shape, c.shape)
    tmp = V("_", a.t, shape)
    be, b = g.operand(tmp, lit=0.3)
    t = common(a.t, b.t) if b is not None else weak_type(a.t, be.value, computation=False)
    args = (Name(c.name), Name(a.name), be) if g.chance(0.5) else (Name(c.name), be, Name(a.name))
    return g.let(Call("where", args), t, shape_of(tmp, b))

def op_fma(g: Gen, a: V) -> V | None:
    b = g.partner(a, lambda v: v.t != "bool")
    if a.t == "bool" or b is None:
        return None
    c = g.partner(V("_", a.t, np.broadcast_shapes(a.shape, b.shape)), lambda v: v.t != "bool")
    if c is None:
        return None
    t = promote(promote(a.t, b.t), c.t)
    t = t if is_float(t) else "f32"
    return g.let(Call("fma", (Name(a.name), Name(b.name), Name(c.name))), t,
                    np.broadcast_shapes(a.shape, b.shape, c.shape))

def op_cast(g: Gen, a: V) -> V:
    t = g.choice(list(FLOATS + INTS + F8) + ["bool"])
    if g.chance(0.2):
        return g.let(Call("cast", (Name(a.name), Py(t))), t, a.shape)
    return g.let(To(Name(a.name), t), t, a.shape)

def op_bitcast(g: Gen, a: V) -> V | None:
    if a.t not in BITCAST_PAIRS:
        return None
    t = g.choice(BITCAST_PAIRS[a.t])
    return g.let(To(Name(a.name), t, True), t, a.shape)

def op_expand(g: Gen, a: V) -> V | None:
    if len(a.shape) != 1:
        return None
    col = g.chance(0.5)
    return g.let(Expand(Name(a.name), col), a.t, (a.shape[0], 1) if col else (1, a.shape[0]))

def op_trans(g: Gen, a: V) -> V | None:
    if len(a.shape) != 2:
        return None
    if g.chance(0.3):
        return g.let(Call("trans", (Name(a.name),)), a.t, a.shape[::-1])
    return g.let(Trans(Name(a.name)), a.t, a.shape[::-1])

def op_full(g: Gen, a: V) -> V | None:
    """A tile filled with a traced scalar, of its type or another."""
    scalars = [v for v in g.pool() if not v.shape]
    if not a.shape or not scalars:
        return None
    s = g.choice(scalars)
    kw = ()
    t = s.t
    if g.chance(0.4):
        t = g.choice(list(FLOATS + INTS))
        kw = (("dtype", Py(t)),)
    return g.let(Call("full", (Py(a.shape), Name(s.name)), kw), t, a.shape)

def op_reduce(g: Gen, a: V) -> V | None:
    if not a.shape:
        return None
    fn = g.choice(["sum", "max", "min", "argmax", "argmin"])
    if a.t == "bool" and fn in ("max", "min") and not g.f.bool_reduce_inactive:
        return None
    kw = []
    axis = None
    if g.chance(0.6):
        axis = int(g.rng.integers(-len(a.shape), len(a.shape)))
        kw.append(("axis", Py(axis)))
    keep = g.chance(0.3)
    if keep:
        kw.append(("keep_dims", Py(True)))
    t = {"sum": sum_type(a.t, None), "max": computed(a.t), "min": computed(a.t)}.get(fn, "i32")
    if fn == "sum" and g.chance(0.2):
        t = g.choice(["f32", "i32", "f16"])
        kw.append(("dtype", Py(t)))
    if axis is None:
        shape = (1,) * len(a.shape) if keep else ()
    else:
        ax = axis % len(a.shape)
        shape = tuple(1 if i == ax else d for i, d in enumerate(a.shape)) if keep else \
            tuple(d for i, d in enumerate(a.shape) if i != ax)
    return g.let(Call(fn, (Name(a.name),), kw), t, shape, base="red")

def op_scan(g: Gen, a: V) -> V | None:
    if not a.shape:
        return None
    fn = g.choice(["cumsum", "cumsum", "cumprod"])
    kw = []
    if len(a.shape) > 1 or g.chance(0.3):
        kw.append(("axis", Py(int(g.rng.integers(-len(a.shape), len(a.shape))))))
    if g.chance(0.4):
        kw.append(("reverse", Py(True)))
    t = sum_type(a.t, None)
    if g.chance(0.15):
        t = g.choice(["f32", "i32"])
        kw.append(("dtype", Py(t)))
    return g.let(Call(fn, (Name(a.name),), kw), t, a.shape, base="scan")

# ---- stores


OPS = {
    "arith": op_arith,
    "div": op_div,
    "divmod": op_divmod,
    "pow": op_pow,
    "bits": op_bits,
    "shift": op_shift,
    "cmp": op_cmp,
    "neg": op_neg,
    "not": op_not,
    "math": op_math,
    "ext": op_ext,
    "clamp": op_clamp,
    "where": op_where,
    "fma": op_fma,
    "cast": op_cast,
    "bitcast": op_bitcast,
    "expand": op_expand,
    "trans": op_trans,
    "full": op_full,
    "reduce": op_reduce,
    "scan": op_scan,
}
