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
    F8,
    FLOATS,
    INTS,
    TYPES,
    float_max,
    int_range,
    is_float,
    literal_fits,
)
from tests.fuzz.prog import Assign, Bin, Call, Expand, Name, Num, Param, Py

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
    with an open bug: False stops making the construct, or (for the names `relax` lists) checks that detail
    loosely."""
    unsigned_ptr_sub: bool = True           # P - offsets, the offsets unsigned
    prestrided_rows: bool = True            # (arange * stride)[:, None] + cols as addresses
    bool_reduce_inactive: bool = True       # max/min of bool tiles with inactive elements
    int_dot_big: bool = True                # integer dot with an i32 accumulator whose sums pass 2**24
    unsigned_math: bool = True              # math functions of unsigned integers
    drop_skip_inactive: bool = True         # a pipeline without skip_inactive (must be refused, or be right)
    nan_inf_data: bool = True               # infinities and NaN in float inputs and loop starts
    dot_acc_inactive: bool = True           # a dot accumulator with inactive elements (its result is active)
    dot_float_int_acc: bool = True          # a dot of float tiles into an i32 accumulator
    f16_sigmoid: bool = True                # sigmoid of f16 tiles (its tail below -11 is subnormal)
    f8_with_bf16: bool = True               # 8-bit floats and bf16 in one operation
    floordiv_big_quotient: bool = True      # float // whose quotient passes 2**23 checked exactly
    loop_zero_sign: bool = True             # the sign of a zero a loop-carried value keeps through inactive updates
    divmod_zero_sign: bool = True           # the sign of a zero result of float // and %
    lowp_dot_acc: bool = True               # a dot's f16/bf16 accumulator rounded once

    def relax(self) -> frozenset:
        """The details the model checks loosely (`tests.fuzz.model`, `tests.fuzz.interp`)."""
        return frozenset(n for n in ("loop_zero_sign", "divmod_zero_sign", "lowp_dot_acc", "floordiv_big_quotient")
                         if not getattr(self, n))


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
            pool = [x for x in (lo, hi, lo + 1, hi - 1, 0, 1, -1, 2, -2, 3, 64, -64, 127, -128, 255, 256,
                                2 ** 31, -2 ** 31 - 1, 2 ** 32, 2 ** 53 + 1, 2 ** 63, -2 ** 40 - 1,
                                2 ** 30 + 2 ** 22 + 1, -2 ** 30 - 2 ** 22 - 1, 2 ** 60 + 2 ** 36 + 1)   # f32 ties
                    if lo <= x <= hi]
            v = np.array(pool, dtype=object)[rng.integers(len(pool), size=n)]
        else:
            v = rng.integers(lo, hi, n, dtype=np.uint64 if d.kind == "u" and d.bits == 64 else np.int64,
                             endpoint=True)
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
            t = "i32" if -2 ** 31 <= value < 2 ** 31 else ("i64" if value < 2 ** 63 else "u64")     # 2.4
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
            if not self.f.f8_with_bf16 and {a.t, v.t} & set(F8) and "bf16" in {a.t, v.t}:
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

    def store(self, v: V, mask_kind: str | None = None) -> None:
        """Store `v` into a new output array (its own type, sometimes another), every element at its own address."""
        if len(v.shape) > 2:                        # a 3-D tile: stored flat, or as a 2-D tile of its rows
            flat = (int(np.prod(v.shape)),) if self.chance(0.5) else (int(np.prod(v.shape[:-1])), v.shape[-1])
            e = Call("reshape", (Name(v.name), Py(flat))) if len(flat) == 2 else Call("ravel", (Name(v.name),))
            v = self.let(e, v.t, flat, keep=False)
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
