"""Loads of fuzzed programs, with every documented way of addressing memory: contiguous (with a run-time base),
strided by a run-time stride (1 and multiples of 16 included, which specialise), reversed, through unsigned
offsets, `P - offsets`, per program (`program_id`), row-major 2-D with a run-time row stride (also as
`(rows * stride)[:, None] + cols`), transposed, and `tile_load` with and without `bounds=`. Masks bound the
addresses (so masked-off addresses may lie outside the array), follow a pattern, or come from data; `other=`
is a number or a value in scope. Input arrays are exactly as large as the addresses read need."""

from __future__ import annotations

import numpy as np

from tests.fuzz.dtypes import is_float, literal_fits
from tests.fuzz.gen import Gen, V, broadcasts_to, data
from tests.fuzz.prog import Bin, Call, Expand, Name, Num, Param, Py, To, Tup

LOAD_TYPES = ["f32"] * 10 + ["f16"] * 4 + ["bf16"] * 3 + ["i32"] * 4 + ["u32"] * 3 + ["i8"] * 3 + ["u8"] * 3 + \
    ["bool"] * 2 + ["i16", "u16", "f8e4m3", "f8e5m2"] + ["i64"] * 2 + ["u64"]
PROFILES = ["small"] * 5 + ["special"] * 3 + ["wide"] * 2


def _other(g: Gen, t: str, shape: tuple):
    """An `other=` for a load of type `t`: a number, or a value in scope (converted to `t`)."""
    if g.chance(0.6):
        if t == "bool":
            return Num(g.chance(0.5))
        n = g.literal(t)
        if n is None or (isinstance(n.value, float) and not is_float(t)) or not literal_fits(t, n.value):
            return Num(0)
        return n
    v = g.partner(V("_", t, shape), lambda v: broadcasts_to(v.shape, shape))
    return Name(v.name) if v is not None else Num(1 if t != "bool" else True)


def _mask_1d(g: Gen, r: V, n: int, kind: str):
    """A mask over `arange(n)` and the bools it gives (None: decided by data, so every address is read)."""
    if kind == "bound":
        m = int(g.choice([0, 1, n - 1, n, int(g.rng.integers(0, n + 1))]))
        lim = g.scalar(max(m, 0), base="n")
        return Bin("<", Name(r.name), Name(lim.name)), np.arange(n) < m
    if kind == "pattern":
        k = int(g.choice([2, 3, 5]))
        return Bin("!=", Bin("%", Name(r.name), Num(k)), Num(1)), np.arange(n) % k != 1
    cond = g.partner(V("_", "bool", (n,)), lambda v: v.t == "bool" and broadcasts_to(v.shape, (n,)))
    if cond is None:
        return None, np.ones(n, bool)
    return Name(cond.name), None


def load(g: Gen, t: str | None = None, shape: tuple | None = None, mask: str | None = None,
         profile: str | None = None, other: bool | None = None, mode: str | None = None) -> V:
    """A load of a new input array: addressed contiguously, strided, reversed, through unsigned offsets,
    `P - offsets`, row-major with a run-time stride, transposed, or by `tile_load`; masked or not."""
    t = t or g.choice(LOAD_TYPES)
    profile = profile or g.choice(PROFILES)
    mask = mask or g.choice(["none", "none", "bound", "bound", "pattern", "data"])
    other = g.chance(0.35) if other is None else other
    arr_name = g.fresh("X")
    P = Name(arr_name)
    mexpr, mvals = None, None
    view = None                 # a strided numpy view passed as the array: (base shape, (start, stop, step) per axis)
    if shape is None or len(shape) == 1:
        n = shape[0] if shape else int(g.choice([1, 3, 8, 16, 17, 32, 64, 100, 128]))
        shape = (n,)
        r = g.arange(n)
        modes = ["contig", "contig", "strided", "reversed", "unsigned", "ptrsub"] + (["pid"] if g.grid > 1 else [])
        mode = mode or g.choice(modes)
        R_ = Name(r.name)
        idx = np.arange(n)
        if mode == "contig":
            b = int(g.choice([0, 0, 1, 3, 16]))
            ptr = Bin("+", Bin("+", P, Name(g.scalar(b, base="b").name)), R_) if b or g.chance(0.5) else Bin("+", P, R_)
            off = b + idx
        elif mode == "strided":
            s = int(g.choice([1, 2, 3, 16]))
            ptr = Bin("+", P, Bin("*", R_, Name(g.scalar(s, base="st").name)))
            off = idx * s
            if s > 1 and g.chance(0.4):                    # x[start::s], indexed with its own stride
                start = int(g.choice([0, 1, 2]))
                view = ((start + s * (n - 1) + 1 + int(g.choice([0, 0, 3])),), ((start, start + s * (n - 1) + 1, s),))
        elif mode == "reversed":
            ptr = Bin("+", P, Bin("-", Num(n - 1), R_))
            off = n - 1 - idx
        elif mode == "unsigned":
            ptr = Bin("+", P, To(R_, "u32"))
            off = idx
            if g.chance(0.5):
                s = int(g.choice([1, 2, 5]))
                ptr = Bin("+", P, Bin("*", To(R_, "u32"), Name(g.scalar(np.uint32(s), base="su").name)))
                off = idx * s
        elif mode == "ptrsub":
            o = To(R_, "u32") if g.f.unsigned_ptr_sub and g.chance(0.5) else R_
            ptr = Bin("-", Bin("+", P, Num(n - 1)), o)
            off = n - 1 - idx
        else:
            pid = g.program_id()
            ptr = Bin("+", Bin("+", P, Bin("*", Name(pid.name), Num(n))), R_)
            off = idx + n * (g.grid - 1)
        if mask != "none":
            mexpr, mvals = _mask_1d(g, r, n, mask)
    else:
        R, C = shape
        rows, cols = g.arange(R), g.arange(C)
        ri, ci = np.arange(R)[:, None], np.arange(C)[None, :]
        modes = ["rowmajor", "rowmajor", "transposed", "tile", "tile"] + (["prestrided"] if g.f.prestrided_rows else [])
        mode = mode or g.choice(modes)
        if mode in ("rowmajor", "prestrided"):
            s = int(g.choice([C, C, C + 1, C + 5, 16 * (C // 16 + 1), 64 if C <= 64 else C]))
            sv = Name(g.scalar(s, base="st").name)
            if mode == "rowmajor":
                ptr = Bin("+", Bin("+", P, Bin("*", Expand(Name(rows.name), True), sv)), Expand(Name(cols.name), False))
                if s > C and g.chance(0.4):                # x[:, c0:c0 + C] of an (R, s) array, rows s apart
                    c0 = int(g.rng.integers(0, s - C + 1))
                    view = ((R, s), ((0, R, 1), (c0, c0 + C, 1)))
            else:
                ro = g.let(Bin("*", Name(rows.name), sv), "i32", (R,), base="ro", keep=False)
                ptr = Bin("+", Bin("+", P, Expand(Name(ro.name), True)), Expand(Name(cols.name), False))
            off = ri * s + ci
        elif mode == "transposed":
            s = int(g.choice([R, R + 3, 16 * (R // 16 + 1)]))
            sv = Name(g.scalar(s, base="st").name)
            ptr = Bin("+", Bin("+", P, Expand(Name(rows.name), True)), Bin("*", Expand(Name(cols.name), False), sv))
            off = ri + ci * s
        else:
            r0, c0 = int(g.choice([0, 0, 1, 3])), int(g.choice([0, 0, 2, 5]))
            s = int(g.choice([c0 + C, c0 + C + 3, 16 * ((c0 + C) // 16 + 1)]))
            bounded = g.chance(0.75)
            nr = int(g.rng.integers(0, r0 + R + 1)) if bounded else r0 + R
            nc = int(g.rng.integers(0, c0 + C + 1)) if bounded else c0 + C
            args = (P, Name(g.scalar(r0, base="r0").name), Name(g.scalar(c0, base="c0").name),
                    Name(g.scalar(s, base="st").name), Py((R, C)))
            kw = (("bounds", Tup((Name(g.scalar(nr, base="nr").name), Name(g.scalar(nc, base="nc").name)))),) \
                if bounded else ()
            rr, cc = r0 + ri, c0 + ci
            inside = (rr < nr) & (cc < nc)
            off = rr * s + cc
            size = int(off[inside].max()) + 1 if inside.any() else 1
            if not bounded and g.chance(0.7):           # whole rows: no clipping (else the last row is cut)
                size = (r0 + R) * s
            arr = data(g.rng, t, size, profile, g.f.nan_inf_data)
            g.params.append(in_param(arr_name, arr))
            return g.let(Call("tile_load", args, kw), t, shape, base="x")
        if mask != "none":
            kind = g.choice(["both", "rows", "cols"])
            mr, mc = int(g.rng.integers(0, R + 1)), int(g.rng.integers(0, C + 1))
            if mask == "pattern":
                mexpr = Bin("!=", Bin("%", Bin("+", Expand(Name(rows.name), True), Expand(Name(cols.name), False)),
                                      Num(3)), Num(0))
                mvals = (ri + ci) % 3 != 0
            elif kind == "rows" or mask == "data":
                mexpr = Bin("<", Expand(Name(rows.name), True), Name(g.scalar(mr, base="n").name))
                mvals = np.broadcast_to(ri < mr, shape)
            elif kind == "cols":
                mexpr = Bin("<", Expand(Name(cols.name), False), Name(g.scalar(mc, base="n").name))
                mvals = np.broadcast_to(ci < mc, shape)
            else:
                mexpr = Bin("&", Bin("<", Expand(Name(rows.name), True), Name(g.scalar(mr, base="n").name)),
                            Bin("<", Expand(Name(cols.name), False), Name(g.scalar(mc, base="n").name)))
                mvals = (ri < mr) & (ci < mc)
    off = np.broadcast_to(off, shape)
    live = off if mvals is None else off[np.broadcast_to(mvals, shape)]
    size = int(live.max()) + 1 if live.size else 1
    if view is None:
        g.params.append(in_param(arr_name, data(g.rng, t, size, profile, g.f.nan_inf_data)))
    else:
        base_shape, cut = view
        base = data(g.rng, t, int(np.prod(base_shape)), profile, g.f.nan_inf_data).reshape(base_shape)
        g.params.append(Param(arr_name, "in", base, cut))
    kw = []
    if mexpr is not None:
        kw.append(("mask", mexpr))
        if other:
            kw.append(("other", _other(g, t, shape)))
    return g.let(Call("load", (ptr,), kw), t, shape, base="x")


def in_param(name, arr) -> Param:
    return Param(name, "in", arr)


def scalar_operand(g: Gen) -> V:
    """A run-time scalar of one of the types a launch can pass (a Python int or float, a numpy scalar)."""
    kind = g.choice(["int", "float", "f16", "u8", "u32", "i8", "i64", "u64", "bigint"])
    val = {"int": int(g.choice([0, 1, -3, 7, 100, 2 ** 31 - 1, -2 ** 31])),
           "i64": np.int64(g.choice([-1, 5, 2 ** 40, -2 ** 63])), "u64": np.uint64(g.choice([0, 9, 2 ** 64 - 1])),
           "bigint": int(g.choice([2 ** 31, -2 ** 31 - 1, 3 * 2 ** 31])),          # an i64 argument (2.4)
           "float": float(g.choice([0.0, -0.0, 1.5, -2.0, 1e-3, 3.0e38])),
           "f16": np.float16(g.choice([0.5, -1.0, 65504.0, -0.0])),
           "u8": np.uint8(g.choice([0, 1, 200, 255])), "u32": np.uint32(g.choice([0, 3, 2 ** 32 - 1])),
           "i8": np.int8(g.choice([-128, -1, 5, 127]))}[kind]
    return g.scalar(val, base="k", keep=True)
