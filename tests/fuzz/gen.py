"""Random, valid element-wise code for fuzzed programs: the values a section holds (`V`), input data with the
values that matter (signed zeros, infinities, NaN, integer extremes), Python numbers that fit their operand's
type, and one random operation at a time over the values in scope, typed by the rules of docs/language.md 3.3.

Every program it makes is valid by the documentation: integer divisors are never zero (`y | 1`, nonzero
numbers), shift counts lie in `0 .. bits - 1` (`y & (bits - 1)`), numbers fit the type they meet, shapes
broadcast, stores never give one address two values. `gen_themes` builds whole sections from these pieces."""

from __future__ import annotations

import math

import attrs
import numpy as np

from tests.fuzz.dtypes import (
    BITCAST_PAIRS,
    F8,
    FLOATS,
    INTS,
    TYPES,
    common,
    computed,
    float_max,
    int_range,
    is_float,
    is_int,
    literal_fits,
    promote,
    weak_type,
)
from tests.fuzz.model import MATH, arith_type, math_type
from tests.fuzz.model_reduce import sum_type
from tests.fuzz.prog import Assign, Bin, Call, Expand, Name, Num, Param, Py, To, Trans, Un

MAX_ELEMS = 4096


def broadcasts_to(s: tuple, shape: tuple) -> bool:
    try:
        return np.broadcast_shapes(s, shape) == tuple(shape)
    except ValueError:
        return False


@attrs.define
class V:
    name: str
    t: str
    shape: tuple


@attrs.frozen
class Features:
    """What the generator makes, and what the model checks strictly. Each flag names a construct or a detail
    with an open bug: False stops making the construct, or (the last three) checks that detail loosely."""
    unsigned_ptr_sub: bool = True           # P - offsets, the offsets unsigned
    prestrided_rows: bool = True            # (arange * stride)[:, None] + cols as addresses
    bool_reduce_inactive: bool = True       # max/min of bool tiles with inactive elements
    int_dot_big: bool = True                # integer dot with an i32 accumulator whose sums pass 2**24
    unsigned_math: bool = True              # math functions of unsigned integers
    drop_skip_inactive: bool = True         # a pipeline without skip_inactive (must be refused, or be right)
    nan_inf_data: bool = True               # infinities and NaN in float inputs and loop starts
    dot_acc_inactive: bool = True           # a dot accumulator with inactive elements (its result is active)
    dot_float_int_acc: bool = True          # a dot of float tiles into an i32 accumulator
    loop_zero_sign: bool = True             # the sign of a zero a loop-carried value keeps through inactive updates
    divmod_zero_sign: bool = True           # the sign of a zero result of float // and %
    lowp_dot_acc: bool = True               # a dot's f16/bf16 accumulator rounded once

    def relax(self) -> frozenset:
        """The details the model checks loosely (`tests.fuzz.model`, `tests.fuzz.interp`)."""
        return frozenset(n for n in ("loop_zero_sign", "divmod_zero_sign", "lowp_dot_acc") if not getattr(self, n))


FLOAT_LITS = (0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 3.0, -2.5, 0.125, 100.0, 1e-3, 7.75, float("inf"), float("-inf"))
INT_LITS = (0, 1, -1, 2, 3, 5, 7, -8, 100, -100, 127, 255, 1000)


def data(rng, t: str, n: int, profile: str, nan_inf: bool = True) -> np.ndarray:
    """`n` elements of type `t`: "small" exact-friendly values, "special" ones, or "wide" random ones."""
    d = TYPES[t]
    if t == "bool":
        return rng.random(n) < 0.5
    if d.kind in "iu":
        lo, hi = int_range(t)
        if profile == "small":
            v = rng.integers(max(lo, -9), min(hi, 9) + 1, n)
        elif profile == "special":
            pool = [x for x in (lo, hi, lo + 1, hi - 1, 0, 1, -1, 2, -2, 3, 64, -64, 127, -128, 255, 256)
                    if lo <= x <= hi]
            v = rng.choice(pool, n)
        else:
            v = rng.integers(lo, hi + 1, n, dtype=np.int64)
        return v.astype(d.np)
    fmax = float_max(t)
    if profile == "small":
        v = rng.integers(-16, 17, n) / rng.choice([1, 2, 4, 8], n)
        v = np.where(rng.random(n) < 0.08, -0.0, v)
    elif profile == "special":
        pool = [0.0, -0.0, 1.0, -1.0, 0.5, -1.5, 2.0, 1e-3, -7.0, fmax, -fmax, 2.0 ** (TYPES[t].emin - 3), 3.0, 40.0]
        if nan_inf:
            pool += [np.inf, -np.inf, np.nan]
        v = rng.choice(pool, n)
    else:
        v = rng.standard_normal(n) * 10.0 ** rng.integers(-2, 3, n)
    return np.asarray(v, np.float64).astype(d.np)


class Gen:
    """The state of one section while it is generated: names, parameters, statements and values in scope."""

    def __init__(self, rng, tag: str, feats: Features, grid: tuple):
        self.rng, self.tag, self.f, self.dims = rng, tag, feats, tuple(grid)
        self.grid = int(np.prod(grid))           # programs: each writes its own part of every output
        self.params: list[Param] = []
        self.blocks: list[list] = [[]]
        self.scopes: list[list[V]] = [[]]
        self.aranges: list[dict[int, V]] = [{}]
        self.n = 0
        self.pid: V | None = None

    # ---- plumbing

    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def fresh(self, base: str) -> str:
        self.n += 1
        return f"{self.tag}_{base}{self.n}"

    @property
    def body(self) -> list:
        return self.blocks[-1]

    def pool(self) -> list[V]:
        return [v for s in self.scopes for v in s]

    def let(self, expr, t: str, shape: tuple, base: str = "v", keep: bool = True) -> V:
        v = V(self.fresh(base), t, tuple(shape))
        self.body.append(Assign(v.name, expr))
        if keep:
            self.scopes[-1].append(v)
        return v

    def push(self) -> None:
        self.blocks.append([])
        self.scopes.append([])
        self.aranges.append({})

    def pop(self) -> list:
        self.scopes.pop()
        self.aranges.pop()
        return self.blocks.pop()

    def param(self, role: str, value, base: str) -> str:
        name = self.fresh(base)
        self.params.append(Param(name, role, value))
        return name

    def scalar(self, value, base: str = "s", keep: bool = False) -> V:
        name = self.param("scalar", value, base)
        if isinstance(value, bool) or isinstance(value, int):
            t = "i32"
        elif isinstance(value, float):
            t = "f32"
        else:
            t = next(n for n, d in TYPES.items() if d.np == np.asarray(value).dtype)
        v = V(name, t, ())
        if keep:
            self.scopes[0].append(v)
        return v

    def arange(self, n: int) -> V:
        for scope in reversed(self.aranges):
            if n in scope:
                return scope[n]
        v = self.let(Call("arange", (Num(0), Num(n))), "i32", (n,), base=f"r{n}_", keep=False)
        self.aranges[-1][n] = v
        return v

    def program_id(self) -> V:
        """The program's index in the grid, row-major (`program_id(0) * num_programs(1) + program_id(1)`)."""
        if self.pid is None:
            self.pid = V(self.fresh("pid"), "i32", ())
            e = Call("program_id", (Num(0),))
            if len(self.dims) == 2:
                e = Bin("+", Bin("*", e, Call("num_programs", (Num(1),))), Call("program_id", (Num(1),)))
            self.blocks[0].insert(0, Assign(self.pid.name, e))
        return self.pid

    # ---- numbers

    def literal(self, t: str):
        """A Python number that `t` holds, as `Num` (None when none suits: bools take no numbers here)."""
        if t == "bool":
            return None
        if is_float(t):
            lit = self.choice([x for x in FLOAT_LITS if literal_fits(t, x)])
            if not self.f.nan_inf_data and not math.isfinite(lit):
                lit = 2.0
            return Num(lit)
        if self.chance(0.1):
            return Num(self.choice([0.5, -1.5, 2.0]))            # a float with an integer operand: f32
        lo, hi = int_range(t)
        return Num(int(self.choice([x for x in INT_LITS + (lo, hi) if lo <= x <= hi])))

    # ---- operations

    def partner(self, a: V, pred=None) -> V | None:
        ok = []
        for v in self.pool():
            if pred is not None and not pred(v):
                continue
            try:
                s = np.broadcast_shapes(a.shape, v.shape)
            except ValueError:
                continue
            if int(np.prod(s)) <= MAX_ELEMS:
                ok.append(v)
        return self.choice(ok) if ok else None

    def operand(self, a: V, pred=None, lit: float = 0.3):
        """A second operand for `a`: a value in scope that broadcasts with it, or a Python number."""
        if a.t != "bool" and self.chance(lit):
            n = self.literal(a.t)
            if n is not None:
                return n, None
        b = self.partner(a, pred)
        if b is None:
            n = self.literal(a.t)
            return (n, None) if n is not None else (Name(a.name), a)
        return Name(b.name), b

    @staticmethod
    def typ(op: str, a: V, b: V | None, lit) -> str:
        if b is None:
            return arith_type(op, weak_type(a.t, lit.value), weak_type(a.t, lit.value))
        return arith_type(op, a.t, b.t)

    def random_op(self) -> V | None:
        pool = [v for v in self.pool() if int(np.prod(v.shape)) <= MAX_ELEMS]
        if not pool:
            return None
        a = self.choice(pool)
        kinds = ["arith"] * 8 + ["div"] * 2 + ["divmod"] * 3 + ["pow"] + ["bits"] * 2 + ["shift"] + ["cmp"] * 3 + \
            ["neg"] + ["not"] + ["math"] * 4 + ["ext"] * 2 + ["clamp"] + ["where"] * 3 + ["fma"] + ["cast"] * 3 + \
            ["bitcast"] + ["expand"] + ["trans"] + ["reduce"] + ["scan"] + ["full"]
        kind = self.choice(kinds)
        return getattr(self, f"op_{kind}")(a)

    def _shape(self, a: V, b: V | None) -> tuple:
        return np.broadcast_shapes(a.shape, b.shape) if b is not None else a.shape

    def op_arith(self, a: V) -> V:
        op = self.choice(["+", "-", "*"])
        be, b = self.operand(a)
        lit = be if b is None else None
        return self.let(Bin(op, Name(a.name), be), self.typ(op, a, b, lit), self._shape(a, b))

    def op_div(self, a: V) -> V:
        be, b = self.operand(a)
        lit = be if b is None else None
        return self.let(Bin("/", Name(a.name), be), self.typ("/", a, b, lit), self._shape(a, b))

    def op_divmod(self, a: V) -> V | None:
        op = self.choice(["//", "%"])
        be, b = self.operand(a, lit=0.4)
        t = self.typ(op, a, b, be if b is None else None)
        if is_int(t):
            if b is None:
                lo, hi = int_range(t)
                be = Num(self.choice([x for x in (1, 2, 3, 7, -1, -2, -3, 10, 100) if lo <= x <= hi]))
            elif b.t == "bool" or not is_int(b.t):
                return None
            else:
                be = Bin("|", be, Num(1))                   # odd, so never zero
        return self.let(Bin(op, Name(a.name), be), t, self._shape(a, b))

    def op_pow(self, a: V) -> V | None:
        if a.t == "bool":
            return None
        if self.chance(0.6):
            be, b = Num(self.choice([2.0, 3.0, 0.5, -1.0, 0.0])), None
        else:
            be, b = self.operand(a, pred=lambda v: v.t != "bool", lit=0)
        if b is not None and b.t == "bool":
            return None
        t = arith_type("**", a.t if b is None else promote(a.t, b.t), a.t if b is None else b.t)
        t = weak_type(a.t, be.value) if b is None else t
        t = t if is_float(t) else "f32"
        return self.let(Bin("**", Name(a.name), be), t, self._shape(a, b))

    def op_bits(self, a: V) -> V | None:
        if is_float(a.t):
            return None
        op = self.choice(["&", "|", "^"])
        be, b = self.operand(a, pred=lambda v: not is_float(v.t), lit=0.3 if a.t != "bool" else 0)
        if b is None and isinstance(be.value, float):
            return None
        t = common(a.t, b.t) if b is not None else a.t
        return self.let(Bin(op, Name(a.name), be), t, self._shape(a, b))

    def op_shift(self, a: V) -> V | None:
        if not is_int(a.t):
            return None
        op = self.choice(["<<", ">>"])
        b = self.partner(a, lambda v: is_int(v.t)) if self.chance(0.5) else None
        if b is None:
            return self.let(Bin(op, Name(a.name), Num(int(self.rng.integers(TYPES[a.t].bits)))), a.t, a.shape)
        t = common(a.t, b.t)
        count = Bin("&", Name(b.name), Num(TYPES[t].bits - 1))
        return self.let(Bin(op, Name(a.name), count), t, self._shape(a, b))

    def op_cmp(self, a: V) -> V:
        op = self.choice(["<", "<=", ">", ">=", "==", "!="])
        be, b = self.operand(a)
        return self.let(Bin(op, Name(a.name), be), "bool", self._shape(a, b), base="m")

    def op_neg(self, a: V) -> V:
        return self.let(Un("-", Name(a.name)), "i32" if a.t == "bool" else a.t, a.shape)

    def op_not(self, a: V) -> V | None:
        if is_float(a.t):
            return None
        return self.let(Un("~", Name(a.name)), a.t, a.shape)

    def op_math(self, a: V) -> V | None:
        if a.t == "bool":
            return None
        fn = self.choice(sorted(MATH))
        if not self.f.unsigned_math and TYPES[a.t].kind == "u":
            return None
        if fn == "abs":
            return self.let(Call("abs", (Name(a.name),)), a.t, a.shape)
        return self.let(Call(fn, (Name(a.name),)), math_type(a.t), a.shape)

    def op_ext(self, a: V) -> V:
        fn = self.choice(["maximum", "minimum"])
        be, b = self.operand(a)
        t = promote(a.t, b.t) if b is not None else weak_type(a.t, be.value)
        if self.chance(0.25):                               # Python's max and min of traced values are the same
            fn = {"maximum": "builtin.max", "minimum": "builtin.min"}[fn]
        return self.let(Call(fn, (Name(a.name), be)), t, self._shape(a, b))

    def op_clamp(self, a: V) -> V | None:
        if a.t == "bool":
            return None
        lo, hi = self.literal(a.t), self.literal(a.t)
        if lo is None or hi is None:
            return None
        t = weak_type(weak_type(a.t, lo.value), hi.value)
        return self.let(Call("clamp", (Name(a.name), lo, hi)), t, a.shape)

    def op_where(self, a: V) -> V | None:
        conds = [v for v in self.pool() if (v.t == "bool" or is_int(v.t))]
        c = self.partner(a, lambda v: v in conds)
        if c is None:
            return None
        shape = np.broadcast_shapes(a.shape, c.shape)
        tmp = V("_", a.t, shape)
        be, b = self.operand(tmp, lit=0.3)
        t = common(a.t, b.t) if b is not None else weak_type(a.t, be.value, computation=False)
        args = (Name(c.name), Name(a.name), be) if self.chance(0.5) else (Name(c.name), be, Name(a.name))
        return self.let(Call("where", args), t, self._shape(tmp, b))

    def op_fma(self, a: V) -> V | None:
        b = self.partner(a, lambda v: v.t != "bool")
        if a.t == "bool" or b is None:
            return None
        c = self.partner(V("_", a.t, np.broadcast_shapes(a.shape, b.shape)), lambda v: v.t != "bool")
        if c is None:
            return None
        t = promote(promote(a.t, b.t), c.t)
        t = t if is_float(t) else "f32"
        return self.let(Call("fma", (Name(a.name), Name(b.name), Name(c.name))), t,
                        np.broadcast_shapes(a.shape, b.shape, c.shape))

    def op_cast(self, a: V) -> V:
        t = self.choice(list(FLOATS + INTS + F8) + ["bool"])
        if self.chance(0.2):
            return self.let(Call("cast", (Name(a.name), Py(t))), t, a.shape)
        return self.let(To(Name(a.name), t), t, a.shape)

    def op_bitcast(self, a: V) -> V | None:
        if a.t not in BITCAST_PAIRS:
            return None
        t = self.choice(BITCAST_PAIRS[a.t])
        return self.let(To(Name(a.name), t, True), t, a.shape)

    def op_expand(self, a: V) -> V | None:
        if len(a.shape) != 1:
            return None
        col = self.chance(0.5)
        return self.let(Expand(Name(a.name), col), a.t, (a.shape[0], 1) if col else (1, a.shape[0]))

    def op_trans(self, a: V) -> V | None:
        if len(a.shape) != 2:
            return None
        if self.chance(0.3):
            return self.let(Call("trans", (Name(a.name),)), a.t, a.shape[::-1])
        return self.let(Trans(Name(a.name)), a.t, a.shape[::-1])

    def op_full(self, a: V) -> V | None:
        """A tile filled with a traced scalar, of its type or another."""
        scalars = [v for v in self.pool() if not v.shape]
        if not a.shape or not scalars:
            return None
        s = self.choice(scalars)
        kw = ()
        t = s.t
        if self.chance(0.4):
            t = self.choice(list(FLOATS + INTS))
            kw = (("dtype", Py(t)),)
        return self.let(Call("full", (Py(a.shape), Name(s.name)), kw), t, a.shape)

    def op_reduce(self, a: V) -> V | None:
        if not a.shape:
            return None
        fn = self.choice(["sum", "max", "min", "argmax", "argmin"])
        if a.t == "bool" and fn in ("max", "min") and not self.f.bool_reduce_inactive:
            return None
        kw = []
        axis = None
        if self.chance(0.6):
            axis = int(self.rng.integers(-len(a.shape), len(a.shape)))
            kw.append(("axis", Py(axis)))
        keep = self.chance(0.3)
        if keep:
            kw.append(("keep_dims", Py(True)))
        t = {"sum": sum_type(a.t, None), "max": computed(a.t), "min": computed(a.t)}.get(fn, "i32")
        if fn == "sum" and self.chance(0.2):
            t = self.choice(["f32", "i32", "f16"])
            kw.append(("dtype", Py(t)))
        if axis is None:
            shape = (1,) * len(a.shape) if keep else ()
        else:
            ax = axis % len(a.shape)
            shape = tuple(1 if i == ax else d for i, d in enumerate(a.shape)) if keep else \
                tuple(d for i, d in enumerate(a.shape) if i != ax)
        return self.let(Call(fn, (Name(a.name),), kw), t, shape, base="red")

    def op_scan(self, a: V) -> V | None:
        if not a.shape:
            return None
        fn = self.choice(["cumsum", "cumsum", "cumprod"])
        kw = []
        if len(a.shape) > 1 or self.chance(0.3):
            kw.append(("axis", Py(int(self.rng.integers(-len(a.shape), len(a.shape))))))
        if self.chance(0.4):
            kw.append(("reverse", Py(True)))
        t = sum_type(a.t, None)
        if self.chance(0.15):
            t = self.choice(["f32", "i32"])
            kw.append(("dtype", Py(t)))
        return self.let(Call(fn, (Name(a.name),), kw), t, a.shape, base="scan")

    # ---- stores

    def store(self, v: V, mask_kind: str | None = None) -> None:
        """Store `v` into a new output array (its own type, sometimes another), every element at its own address."""
        t = v.t
        if self.chance(0.2):
            t = self.choice(list(FLOATS + INTS) + ["bool"])
        size = int(np.prod(v.shape)) if v.shape else 1
        total = size * self.grid
        init = data(self.rng, t, total, "wide")
        step = 1
        if len(v.shape) == 1 and self.chance(0.15):        # into x[start::step]: the gaps must stay as they were
            step, start = int(self.choice([2, 3])), int(self.choice([0, 1]))
            base = data(self.rng, t, start + step * (total - 1) + 1 + int(self.choice([0, 2])), "wide")
            out = self.fresh("O")
            self.params.append(Param(out, "out", base, ((start, start + step * (total - 1) + 1, step),)))
        else:
            out = self.param("out", init, base="O")
        ptr = Name(out)
        if self.grid > 1:
            ptr = Bin("+", ptr, Bin("*", Name(self.program_id().name), Num(size * step)))
        mask = None
        if not v.shape:
            addr = ptr
        elif len(v.shape) == 1:
            r = self.arange(v.shape[0])
            addr = Bin("+", ptr, Name(r.name))
            if step > 1:
                addr = Bin("+", ptr, Bin("*", Name(r.name), Name(self.scalar(step, base="st").name)))
            if mask_kind == "bound" or (mask_kind is None and self.chance(0.25)):
                lim = self.scalar(int(self.rng.integers(0, v.shape[0] + 1)), base="n")
                mask = Bin("<", Name(r.name), Name(lim.name))
        else:
            R, C = v.shape
            rows, cols = self.arange(R), self.arange(C)
            if self.chance(0.2):                                        # column-major
                addr = Bin("+", Bin("+", ptr, Expand(Name(rows.name), True)),
                           Bin("*", Expand(Name(cols.name), False), Num(R)))
            else:
                addr = Bin("+", Bin("+", ptr, Bin("*", Expand(Name(rows.name), True), Num(C))),
                           Expand(Name(cols.name), False))
            if mask_kind == "bound" or (mask_kind is None and self.chance(0.25)):
                lim = self.scalar(int(self.rng.integers(0, R + 1)), base="n")
                mask = Bin("<", Expand(Name(rows.name), True), Name(lim.name))
        kw = (("mask", mask),) if mask is not None else ()
        from tests.fuzz.prog import Effect
        self.body.append(Effect(Call("store", (addr, Name(v.name)), kw)))
