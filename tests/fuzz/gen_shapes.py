"""Fuzzed programs of the tile functions that move elements (docs/language.md 3.5, 6.6, 6.8, 6.9):
- `shape`: 1-D, 2-D and 3-D tiles (3-D loads through `expand_dims` offsets, masked) through random `reshape`,
  `ravel`, `permute`, `trans`, `.T`, `expand_dims`, `broadcast_to`, `join`, `split`, `interleave` and `flip`,
  mixed with element-wise operations, reductions and scans along any axis;
- `combine`: `reduce` and `associative_scan` with combine functions of the kernel's own (`tests.fuzz.combine_fns`:
  integers exact, float maxima and minima, tuples, non-commutative ones, reversed), `gather`, `sort`, `topk`,
  `histogram`;
- `mm`: `dot` of ragged and small shapes (any M, N, K from 1), batched 3-D products, accumulators."""

from __future__ import annotations

import math

import numpy as np

from tests.fuzz.combine_fns import FNS
from tests.fuzz.dtypes import is_float, is_int
from tests.fuzz.gen import Gen, V, broadcasts_to, data
from tests.fuzz.gen_loads import LOAD_TYPES, PROFILES, in_param, load
from tests.fuzz.gen_ops import op_reduce, op_scan, random_op
from tests.fuzz.prog import Bin, Call, Expand, FnRef, Name, Num, Py, Trans, Tup, Unpack

SHAPES3 = [(2, 3, 4), (2, 4, 8), (4, 4, 4), (3, 5, 2), (1, 6, 3), (8, 2, 16), (2, 2, 2), (4, 1, 8), (3, 7, 5)]


def _expand3(g: Gen, r: V, axis: int):
    """`arange` as one axis of a 3-D tile: `expand_dims(r, (the other two))`, or `[:, None]` twice for axis 0."""
    others = tuple(a for a in range(3) if a != axis)
    if axis == 0 and g.chance(0.3):
        return Expand(Expand(Name(r.name), True), True)
    return Call("expand_dims", (Name(r.name), Py(others)))


def load3(g: Gen, shape: tuple, t: str | None = None) -> V:
    """A 3-D load: each axis an `arange` expanded, strides of a random axis order (so memory may be permuted),
    masked on one axis or by a flat bound, maybe with `other=`."""
    t = t or g.choice(LOAD_TYPES)
    order = [int(i) for i in g.rng.permutation(3)]           # memory axes from outer to inner
    strides = [0, 0, 0]
    s = 1
    for ax in reversed(order):
        strides[ax] = s
        s *= shape[ax]
    terms = []
    for ax in range(3):
        e = _expand3(g, g.arange(shape[ax]), ax)
        terms.append(e if strides[ax] == 1 else Bin("*", e, Num(strides[ax])))
    off = g.let(Bin("+", Bin("+", terms[0], terms[1]), terms[2]), "i32", shape, base="o", keep=False)
    arr = g.fresh("X")
    g.params.append(in_param(arr, data(g.rng, t, math.prod(shape), g.choice(PROFILES), g.f.nan_inf_data)))
    kw = []
    if g.chance(0.6):
        ax = int(g.rng.integers(3))
        lim = g.scalar(int(g.rng.integers(0, shape[ax] + 1)), base="n")
        if g.chance(0.5):
            kw.append(("mask", Bin("<", _expand3(g, g.arange(shape[ax]), ax), Name(lim.name))))
        else:
            flat = g.scalar(int(g.rng.integers(0, math.prod(shape) + 1)), base="n")
            kw.append(("mask", Bin("<", Name(off.name), Name(flat.name))))
        if g.chance(0.3):
            kw.append(("other", Num(0) if t != "bool" else Num(False)))
    return g.let(Call("load", (Bin("+", Name(arr), Name(off.name)),), kw), t, shape, base="x")


def _factor(n: int, g: Gen) -> tuple:
    """A random shape of 1 to 3 dimensions with `n` elements."""
    divs = [d for d in range(1, n + 1) if n % d == 0]
    rank = int(g.choice([1, 2, 2, 3, 3]))
    if rank == 1:
        return (n,)
    a = int(g.choice(divs))
    if rank == 2:
        return (a, n // a)
    rest = [d for d in divs if (n // a) % d == 0 and d <= n // a]
    b = int(g.choice(rest))
    return (a, b, n // a // b)


def shape_op(g: Gen, a: V) -> V | None:
    """One random shape change of `a`."""
    nd = len(a.shape)
    size = math.prod(a.shape) if a.shape else 1
    k = g.choice(["reshape", "ravel", "permute", "trans", "T", "expand", "broadcast", "join", "split", "interleave",
                  "flip"])
    x = Name(a.name)
    if not a.shape and k not in ("expand", "broadcast", "join"):
        return None
    if k == "reshape":
        shape = _factor(size, g)
        return g.let(Call("reshape", (x, Py(shape))), a.t, shape)
    if k == "ravel":
        return g.let(Call("ravel", (x,)), a.t, (size,))
    if k == "permute" and nd >= 2:
        dims = tuple(int(i) for i in g.rng.permutation(nd))
        fn = g.choice(["permute", "trans"])
        return g.let(Call(fn, (x, Py(dims))), a.t, tuple(a.shape[d] for d in dims))
    if k in ("trans", "T") and nd >= 2:
        shape = a.shape[:-2] + (a.shape[-1], a.shape[-2])
        return g.let(Call("trans", (x,)) if k == "trans" else Trans(x), a.t, shape)
    if k == "expand" and nd < 3:
        ax = int(g.rng.integers(-(nd + 1), nd + 1))
        shape = list(a.shape)
        shape.insert(ax % (nd + 1), 1)
        v = g.let(Call("expand_dims", (x, Py(ax))), a.t, tuple(shape))
        if g.chance(0.5) and size * 3 <= 4096:
            big = tuple(int(g.choice([2, 3])) if d == 1 else d for d in shape)
            return g.let(Call("broadcast_to", (Name(v.name), Py(big))), a.t, big)
        return v
    if k == "broadcast" and nd >= 1 and 1 in a.shape:
        big = tuple(int(g.choice([2, 3, 4])) if d == 1 else d for d in a.shape)
        return g.let(Call("broadcast_to", (x, Py(big))), a.t, big)
    if k in ("join", "interleave") and size * 2 <= 4096 and nd <= (2 if k == "join" else 3):
        b = g.partner(a, lambda v: v.t == a.t and broadcasts_to(v.shape, a.shape) and v.name != a.name)
        lit = g.literal(a.t)
        if lit is not None and isinstance(lit.value, float) and not is_float(a.t):
            lit = Num(1)
        other = Name(b.name) if b is not None else (lit or Name(a.name))
        shape = a.shape + (2,) if k == "join" else (a.shape[:-1] + (2 * a.shape[-1],) if a.shape else (2,))
        args = (x, other) if g.chance(0.5) else (other, x)
        return g.let(Call(k, args), a.t, shape)
    if k == "split" and a.shape[-1] == 2:
        n1, n2 = g.fresh("h"), g.fresh("h")
        g.body.append(Unpack((n1, n2), Call("split", (x,))))
        for n in (n1, n2):
            g.scopes[-1].append(V(n, a.t, a.shape[:-1]))
        return V(n1, a.t, a.shape[:-1])
    if k == "flip":
        kw = (("dim", Py(int(g.rng.integers(-nd, nd)))),) if g.chance(0.5) else ()
        return g.let(Call("flip", (x,), kw), a.t, a.shape)
    return None


def theme_shape(g: Gen) -> None:
    if g.chance(0.6):
        xs = [load3(g, g.choice(SHAPES3))]
        if g.chance(0.5):
            xs.append(load3(g, xs[0].shape, t=g.choice([xs[0].t, "f32", "i32"])))
    else:
        n = int(g.choice([8, 12, 16, 24, 32, 60, 64]))
        xs = [load(g, shape=(n,)), load(g, shape=(n,))]
    made = []
    for _ in range(int(g.rng.integers(3, 9))):
        pool = [v for v in g.pool() if math.prod(v.shape) <= 4096]
        r = g.rng.random()
        if r < 0.55:
            v = shape_op(g, g.choice(pool))
        elif r < 0.65:
            v = op_reduce(g, g.choice(pool))
        elif r < 0.7:
            v = op_scan(g, g.choice(pool))
        else:
            v = random_op(g)
        if v is not None:
            made.append(v)
    from tests.fuzz.gen_themes import store_some
    store_some(g, made or xs, int(g.rng.integers(1, 4)))


# ---- combine functions, gathers, sorts


def theme_combine(g: Gen) -> None:
    shape = g.choice([(8,), (16,), (64,), (5,), (12,), (4, 8), (3, 16), (8, 5), (2, 2, 4)])
    ints = ["i32", "i32", "u32", "i8", "u8", "i16", "i64", "u64"]
    t = g.choice(ints + ["f32", "f16"])
    prof = g.choice(["small", "wide", "special"])
    xs = [load(g, t=t, shape=shape, profile=prof) if len(shape) <= 2 else load3(g, shape, t)]
    made = []
    for _ in range(int(g.rng.integers(2, 5))):
        x = g.choice(xs + [v for v in made if v.shape == xs[0].shape and v.t in ints + ["f32", "f16"]])
        k = g.choice(["reduce", "scan", "reduce2", "scan2", "gather", "sort", "topk", "hist", "flip"])
        v = combine_op(g, x, k)
        if v is not None:
            made.append(v)
    from tests.fuzz.gen_themes import store_some
    store_some(g, made or xs, 2)


def combine_op(g: Gen, x: V, k: str) -> V | None:
    nd = len(x.shape)
    if k in ("reduce", "scan"):
        names = [n for n, c in FNS.items() if c.arity == 1 and (c.floats or is_int(x.t))]
        fn = g.choice(names)
        axis = int(g.rng.integers(-nd, nd)) if nd > 1 or g.chance(0.7) else None
        if k == "scan" and axis is None:
            axis = nd - 1
        kw = []
        if k == "reduce":
            if g.chance(0.3):
                kw.append(("keep_dims", Py(True)))
            shape = _reduced(x.shape, axis, bool(kw))
            return g.let(Call("reduce", (Name(x.name), Py(axis), FnRef(fn)), kw), x.t, shape, base="red")
        if g.chance(0.4):
            kw.append(("reverse", Py(True)))
        return g.let(Call("associative_scan", (Name(x.name), Py(axis), FnRef(fn)), kw), x.t, x.shape, base="scan")
    if k in ("reduce2", "scan2"):
        fn = g.choice(["c_affine", "c_argmax"])
        if not is_int(x.t):                         # exact only on integers
            return None
        if fn == "c_affine":
            other = load(g, t=x.t, shape=x.shape, profile="small") if nd <= 2 else load3(g, x.shape, x.t)
        else:
            ax = int(g.rng.integers(nd))
            from tests.fuzz.gen_shapes import _expand3 as ex3
            r = g.arange(x.shape[ax])
            idx = Name(r.name) if nd == 1 else (ex3(g, r, ax) if nd == 3 else Expand(Name(r.name), ax == 0))
            other = g.let(Call("broadcast_to", (idx, Py(x.shape))), "i32", x.shape, base="ix")
        axis = int(g.rng.integers(-nd, nd))
        a, b = g.fresh("c"), g.fresh("c")
        if k == "reduce2":
            call = Call("reduce", (Tup((Name(x.name), Name(other.name))), Py(axis), FnRef(fn)))
            shape = _reduced(x.shape, axis, False)
        else:
            kw = (("reverse", Py(True)),) if g.chance(0.4) else ()
            call = Call("associative_scan", (Tup((Name(x.name), Name(other.name))), Py(axis), FnRef(fn)), kw)
            shape = x.shape
        g.body.append(Unpack((a, b), call))
        g.scopes[-1] += [V(a, x.t, shape), V(b, other.t, shape)]
        return V(b, other.t, shape)
    if k == "gather":
        ax = int(g.rng.integers(nd))
        n = x.shape[ax]
        ishape = tuple(int(g.choice([1, 3, n, 2 * n])) if d == ax else x.shape[d] for d in range(nd))
        vals = g.rng.integers(-n - 2, 2 * n + 2, math.prod(ishape)).astype(np.int32)
        arr = g.fresh("I")
        g.params.append(in_param(arr, vals))
        ir = g.let(Call("reshape", (Call("arange", (Num(0), Num(math.prod(ishape)))), Py(ishape))), "i32", ishape,
                   base="io", keep=False) if nd > 1 else V(g.arange(ishape[0]).name, "i32", ishape)
        idx = g.let(Call("load", (Bin("+", Name(arr), Name(ir.name)),)), "i32", ishape, base="idx")
        return g.let(Call("gather", (Name(x.name), Name(idx.name), Py(ax))), x.t, ishape)
    n = x.shape[-1]
    if k in ("sort", "topk") and n & (n - 1) == 0 and nd <= 2:
        desc = g.chance(0.5)
        if k == "sort":
            kw = (("descending", Py(desc)),) if desc or g.chance(0.3) else ()
            return g.let(Call("sort", (Name(x.name),), kw), x.t, x.shape)
        kk = int(g.choice([d for d in (1, 2, 4, 8) if d <= n]))
        kw = (("descending", Py(desc)),) if not desc or g.chance(0.3) else ()
        return g.let(Call("topk", (Name(x.name), Py(kk)), kw), x.t, x.shape[:-1] + (kk,))
    if k == "hist" and nd == 1 and x.t in ("i32", "u32"):
        bins = int(g.choice([1, 4, 8, 10, 16]))
        kw = ()
        if g.chance(0.4):
            lim = g.scalar(int(g.rng.integers(0, n + 1)), base="n")
            kw = (("mask", Bin("<", Name(g.arange(n).name), Name(lim.name))),)
        return g.let(Call("histogram", (Name(x.name), Py(bins)), kw), "i32", (bins,))
    if k == "flip":
        return g.let(Call("flip", (Name(x.name),), (("dim", Py(int(g.rng.integers(nd)))),)), x.t, x.shape)
    return None


def _reduced(shape: tuple, axis, keep: bool) -> tuple:
    if axis is None:
        return (1,) * len(shape) if keep else ()
    ax = axis % len(shape)
    return tuple(1 if i == ax else d for i, d in enumerate(shape)) if keep else \
        tuple(d for i, d in enumerate(shape) if i != ax)


# ---- dot of any shape


def theme_mm(g: Gen) -> None:
    """`dot` of ragged and small shapes, 2-D or batched 3-D, with accumulators of several kinds."""
    M_, N_, K_ = (int(g.choice([1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 33])) for _ in range(3))
    B_ = int(g.choice([0, 0, 1, 2, 3]))
    ta = g.choice(["f32", "f16", "bf16", "i8", "u8", "f8e4m3"])
    tb = g.choice([ta, ta, "f32", "f16", "i8"])
    if is_int(ta) != is_int(tb):
        tb = ta
    ints = is_int(ta)
    prof = g.choice(["small", "small", "wide"])

    def operand(t, shape):
        if len(shape) == 3:
            return load3(g, shape, t)
        return load(g, t=t, shape=shape, mask=g.choice(["none", "bound"]), profile=prof, other=False)

    lead = (B_,) if B_ else ()
    a = operand(ta, lead + (M_, K_))
    b = operand(tb, lead + (K_, N_))
    args = [Name(a.name), Name(b.name)]
    at = "i32" if ints else "f32"
    acc_kind = g.choice(["none", "num", "zeros", "load"])
    if acc_kind == "num":
        args.append(Num(0 if ints else 1.5))
    elif acc_kind == "zeros":
        at = at if ints else g.choice(["f32", "f16"])
        args.append(Call("zeros", (Py(lead + (M_, N_)),), (("dtype", Py(at)),)))
    elif acc_kind == "load":
        at = at if ints else g.choice(["f32", "f32", "bf16"])
        args.append(Name(operand(at, lead + (M_, N_)).name))
    d = g.let(Call("dot", args), at, lead + (M_, N_), base="d")
    made = [d]
    if g.chance(0.3):
        made.append(op_reduce(g, d) or d)
    from tests.fuzz.gen_themes import store_some
    store_some(g, made, 2)


__all__ = ["theme_combine", "theme_mm", "theme_shape", "load3", "shape_op", "data"]
