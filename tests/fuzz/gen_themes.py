"""Whole fuzzed programs, each of a theme:
- `ew`: element-wise code on 1-D and 2-D tiles (promotion, casts, masks, broadcasting, `[:, None]`);
- `reduce`: reductions and scans over partly or wholly inactive tiles;
- `loop`: a `tile_range` loop with loop-carried values (signed zeros, infinities, NaN starts), maybe a runtime `if`;
- `branch`: a runtime `if` on a scalar;
- `dot`: products of f32/f16/bf16/i8/u8 tiles with accumulators, ragged masks and `tile_load(bounds=)`;
- `rows`, `gemm`: row-wise softmax-like code; a tiled GEMM over a loop on k;
- `shape`, `combine`, `mm` (`gen_shapes`) and `atomic`, `exit` (`gen_flow`).
`gen_kernel(seed)` batches a few programs into one kernel (one C++ compile runs them all)."""

from __future__ import annotations

import numpy as np

from tests.fuzz.dtypes import common, is_float, is_int, promote
from tests.fuzz.gen import Features, Gen, V, data
from tests.fuzz.gen_loads import PROFILES, in_param, load, scalar_operand
from tests.fuzz.gen_ops import op_reduce, op_scan, random_op
from tests.fuzz.prog import (
    Assign,
    Bin,
    Call,
    Effect,
    Expand,
    For,
    If,
    Kernel,
    Name,
    Num,
    Py,
    Section,
    Trans,
    Tup,
    While,
    used,
)


def ops(g: Gen, n: int) -> list[V]:
    made = []
    for _ in range(n * 3):
        if len(made) >= n:
            break
        v = random_op(g)
        if v is not None:
            made.append(v)
    return made


def store_some(g: Gen, made: list[V], k: int) -> None:
    """Store the values nothing else reads (so no operation is dead code), and a few others, `k` at least."""
    read = used(g.body)
    leaves = [v for v in made if v.name not in read]
    pick = leaves[-6:] + [g.choice(made) for _ in range(max(0, k - len(leaves)))] if made else []
    seen = set()
    for v in pick:
        if v.name not in seen and int(np.prod(v.shape)) <= 4096:
            seen.add(v.name)
            g.store(v)


def dims(g: Gen) -> tuple:
    if g.chance(0.5):
        return (int(g.choice([1, 3, 8, 16, 17, 32, 64, 100, 128, 256, 300, 512, 1024])),)
    if g.chance(0.2):
        return g.choice([(32, 64), (64, 16), (3, 100), (128, 8), (8, 128), (33, 31)])
    return (int(g.choice([1, 2, 4, 5, 8, 16])), int(g.choice([1, 3, 8, 16, 17, 32])))


def theme_ew(g: Gen) -> None:
    shape = dims(g)
    for _ in range(int(g.rng.integers(1, 4))):
        load(g, shape=shape if g.chance(0.7) else None)
    if g.chance(0.5):
        scalar_operand(g)
    made = ops(g, int(g.rng.integers(3, 10)))
    store_some(g, made, int(g.rng.integers(1, 4)))


def theme_reduce(g: Gen) -> None:
    shape = dims(g)
    xs = [load(g, shape=shape, mask=g.choice(["bound", "bound", "pattern", "none"]))
          for _ in range(int(g.rng.integers(1, 3)))]
    made: list[V] = []
    for _ in range(int(g.rng.integers(2, 5))):
        x = g.choice(xs + made)
        v = op_reduce(g, x) if g.chance(0.6) else op_scan(g, x)
        if v is not None:
            made.append(v)
    made += ops(g, int(g.rng.integers(0, 3)))
    store_some(g, made, int(g.rng.integers(2, 4)))


def update(g: Gen, acc: V, x: V):
    """A new value of the loop-carried `acc`, combining it with `x` (any types: the carried type widens)."""
    a, xe = Name(acc.name), Name(x.name)
    kinds = ["add", "add", "max", "min", "where", "sub", "mul", "fma", "count", "keep"]
    if (is_int(acc.t) or acc.t == "bool") and (is_int(x.t) or x.t == "bool"):
        kinds += ["or", "xor"]
    k = g.choice(kinds)
    if k == "fma" and (x.t == "bool" or not is_float(acc.t)):    # an integer carried value stays an integer,
        k = "add"                                                # so that | and ^ stay valid on it
    return {"add": lambda: Bin("+", a, xe), "sub": lambda: Bin("-", a, xe), "mul": lambda: Bin("*", a, xe),
            "max": lambda: Call("maximum", (a, xe)), "min": lambda: Call("minimum", (xe, a)),
            "where": lambda: Call("where", (Bin(">", xe, a), xe, a)), "fma": lambda: Call("fma", (xe, xe, a)),
            "count": lambda: Bin("+", a, Bin("<", xe, Num(0.0 if is_float(x.t) else 0))),
            "keep": lambda: Call("where", (Bin("<", xe, Num(0.0 if is_float(x.t) else 1)), a, xe)),
            "or": lambda: Bin("|", a, xe), "xor": lambda: Bin("^", a, xe)}[k]()


def _start(g: Gen, n: int, t: str) -> V:
    """A loop-carried value's start: a Python number (NaN, -inf and -0.0 too), a tile, a partly inactive load."""
    kinds = ["0.0", "-0.0", "-inf", "nan", "0", "zeros", "negzeros", "load", "scalar"]
    kind = g.choice(kinds)
    if kind in ("nan", "-inf") and not g.f.nan_inf_data:
        kind = "0.0"
    if kind == "load":
        v = load(g, t=g.choice(["f32", "f16", t]), shape=(n,), mask=g.choice(["bound", "none"]))
    elif kind == "scalar":
        v = scalar_operand(g)
    else:
        dt = g.choice(["f32", "f16", "i32", "i64"])
        expr, at, shape = {
            "0.0": (Num(0.0), "f32", ()), "-0.0": (Num(-0.0), "f32", ()), "-inf": (Num(float("-inf")), "f32", ()),
            "nan": (Num(float("nan")), "f32", ()), "0": (Num(0), "i32", ()),
            "zeros": (Call("zeros", (Py((n,)),), (("dtype", Py(dt)),)), dt, (n,)),
            "negzeros": (Call("full", (Py((n,)), Num(-0.0)), (("dtype", Py("f32")),)), "f32", (n,))}[kind]
        v = V(g.fresh("acc"), at, shape)
        g.body.append(Assign(v.name, expr))
        return v
    for scope in g.scopes:                       # its type may widen in the loop: no other code may use it
        if v in scope:
            scope.remove(v)
    return v


def store_untyped(g: Gen, name: str, n: int) -> None:
    """Store a value whose type the generator does not follow (a loop's result) into an f32 array of `n`
    elements, a scalar broadcast to all of them."""
    out = g.param("out", data(g.rng, "f32", n * g.grid, "wide"), base="O")
    ptr = Name(out)
    if g.grid > 1:
        ptr = Bin("+", ptr, Bin("*", Name(g.program_id().name), Num(n)))
    g.body.append(Effect(Call("store", (Bin("+", ptr, Name(g.arange(n).name)), Name(name)))))


def theme_loop(g: Gen) -> None:
    """Loop-carried accumulators over rows of an array: starts of every kind, inactive updates, a runtime `if`."""
    n = int(g.choice([1, 4, 8, 16, 17, 32]))
    t = g.choice(["f32", "f32", "f16", "bf16", "i32", "u8", "i8", "bool", "i64", "u64"])
    rows = int(g.rng.integers(1, 6))
    lo = int(g.choice([0, 0, 1]))
    hi = min(int(g.choice([lo, lo + 1, rows, rows])), rows)
    step = int(g.choice([1, 1, 1, 2]))
    accs = [_start(g, n, t) for _ in range(int(g.rng.integers(1, 4)))]
    stride = int(g.choice([n, n + 1, 16 * (n // 16 + 1)]))
    arr = g.fresh("X")
    g.params.append(in_param(arr, data(g.rng, t, max(rows * stride, 1), g.choice(PROFILES), g.f.nan_inf_data)))
    st, lov, hiv = g.scalar(stride, base="st"), g.scalar(lo, base="lo"), g.scalar(hi, base="hi")
    stepe = Num(step) if g.chance(0.7) else Name(g.scalar(step, base="step").name)
    r = g.arange(n)
    lim = g.scalar(int(g.choice([0, n // 2, n - 1, n])), base="n")
    ivar = g.fresh("i")
    g.push()
    ptr = Bin("+", Bin("+", Name(arr), Bin("*", Name(ivar), Name(st.name))), Name(r.name))
    x = g.let(Call("load", (ptr,), (("mask", Bin("<", Name(r.name), Name(lim.name))),)), t, (n,), base="x")
    if g.chance(0.4):
        g.scopes[-1].append(V(ivar, "i32", ()))
        more = [v for v in ops(g, int(g.rng.integers(1, 3))) if v.shape == (n,) and v.t != "bool"]
        x = more[-1] if more else x
    updates = []
    for acc in accs:
        if g.chance(0.25):
            k = g.scalar(int(g.rng.integers(0, rows + 1)), base="k")
            parity = Bin("==", Bin("%", Name(ivar), Num(2)), Num(0))
            cond = parity if g.chance(0.5) else Bin("<", Name(ivar), Name(k.name))
            orelse = [Assign(acc.name, update(g, acc, x))] if g.chance(0.5) else []
            g.body.append(If(cond, [Assign(acc.name, update(g, acc, x))], orelse))
        else:
            updates.append(Assign(acc.name, update(g, acc, x)))
    g.body.extend(updates)
    body = g.pop()
    if g.chance(0.25):                          # the same loop as a while on a carried counter
        g.body.append(Assign(ivar, Name(lov.name) if g.chance(0.7) else Num(lo)))
        body = body + [Assign(ivar, Bin("+", Name(ivar), stepe))]
        g.body.append(While(Bin("<", Name(ivar), Name(hiv.name)), body))
    else:
        g.body.append(For(ivar, Name(lov.name), Name(hiv.name), stepe, body, python_range=g.chance(0.2)))
    for acc in accs:
        store_untyped(g, acc.name, n)
        if g.chance(0.5):
            fn = g.choice(["sum", "max", "min", "argmax"])
            if fn in ("max", "min") and not g.f.bool_reduce_inactive and t == "bool":
                fn = "sum"
            red = g.fresh("red")
            g.body.append(Assign(red, Call(fn, (Name(acc.name),))))
            store_untyped(g, red, 1)


def theme_branch(g: Gen) -> None:
    """A runtime `if` on a scalar (a run-time flag or a reduction of loaded data) choosing a value."""
    shape = dims(g)
    x, y = load(g, shape=shape), load(g, shape=shape)
    cond = None
    if g.chance(0.5):
        red = op_reduce(g, x)
        if red is not None and not red.shape:
            cond = Bin(">", Name(red.name), Num(0)) if red.t != "bool" else Name(red.name)
    if cond is None:
        cond = Name(g.scalar(int(g.choice([0, 1, 5])), base="flag").name)
    name = g.fresh("br")
    picks = []
    for default in (x, y):
        g.push()
        made = [v for v in ops(g, int(g.rng.integers(1, 3))) if v.shape == shape] or [default]
        g.body.append(Assign(name, Name(made[-1].name)))
        picks.append((made[-1], g.pop()))
    (a, body), (b, orelse) = picks
    g.body.append(If(cond, body, orelse))
    v = V(name, common(a.t, b.t), shape)
    g.scopes[-1].append(v)
    g.store(v)


def theme_dot(g: Gen) -> None:
    """`dot` of f32/f16/bf16/f8/i8/u8 tiles: ragged masks, bounded tile_loads, a transposed operand, accumulators
    of several types, and an epilogue: a bias row, a reduction of the product, a second product, a transpose."""
    M_, N_ = (int(g.choice([8, 16, 24, 32])) for _ in range(2))
    K_ = int(g.choice([8, 16, 24, 32, 64, 128]))
    ta = g.choice(["f32", "f16", "bf16", "i8", "u8", "f8e4m3", "f8e5m2"])
    tb = g.choice([ta, ta, "f32", "f16", "bf16", "i8", "u8", "f8e4m3"])
    ints = is_int(ta) and is_int(tb)
    prof = g.choice(["small", "small", "wide", "special"])
    modes = ["rowmajor", "transposed", "tile"]
    a = load(g, t=ta, shape=(M_, K_), mask=g.choice(["none", "bound"]), profile=prof, other=False,
             mode=g.choice(modes))
    if g.chance(0.25):                                    # b given as its transpose
        bt = load(g, t=tb, shape=(N_, K_), mask=g.choice(["none", "bound"]), profile=prof, other=False,
                  mode=g.choice(modes))
        b = g.let(Trans(Name(bt.name)), tb, (K_, N_), keep=False)
    else:
        b = load(g, t=tb, shape=(K_, N_), mask=g.choice(["none", "bound"]), profile=prof, other=False,
                 mode=g.choice(modes))
    args = [Name(a.name), Name(b.name)]
    at = g.choice(["i32", "i32", "f32"]) if ints else g.choice(["f32", "f32", "f16", "bf16"])
    if not ints and g.f.dot_float_int_acc and g.chance(0.1):
        at = "i32"
    acc_kind = g.choice(["none", "num", "zeros", "load"])
    if acc_kind == "num":
        args.append(Num(0 if ints else 0.0))
        at = "i32" if ints else "f32"
    elif acc_kind == "zeros":
        args.append(Call("zeros", (Py((M_, N_)),), (("dtype", Py(at)),)))
    elif acc_kind == "load":
        prof_acc = "special" if (at == "i32" and g.f.int_dot_big) else "small"
        mode = None if g.f.dot_acc_inactive else "rowmajor"      # a clipped or bounded tile_load is partly inactive
        args.append(Name(load(g, t=at, shape=(M_, N_), mask="none", profile=prof_acc, mode=mode).name))
    else:
        at = "i32" if ints else "f32"
    kw = ()
    if g.chance(0.2):
        at = g.choice(["f32", "f16"])
        kw = (("out_dtype", Py(at)),)
    d = g.let(Call("dot", args, kw), at, (M_, N_), base="d")
    made = [d]
    if g.chance(0.3):
        bias = load(g, t=g.choice(["f32", "f16", at]), shape=(N_,), mask="none")
        made.append(g.let(Bin("+", Name(d.name), Expand(Name(bias.name), False)), promote(at, bias.t), (M_, N_)))
    if g.chance(0.25):
        made.append(op_reduce(g, d) or d)
    if g.chance(0.2) and at in ("f32", "f16", "bf16"):
        P_ = int(g.choice([8, 16]))
        c = load(g, t=g.choice(["f32", "f16"]), shape=(N_, P_), mask="none", profile="small")
        made.append(g.let(Call("dot", (Name(d.name), Name(c.name))), "f32", (M_, P_), base="d"))
    if g.chance(0.15):
        made.append(g.let(Trans(Name(d.name)), at, (N_, M_)))
    store_some(g, made + ops(g, int(g.rng.integers(0, 3))), 2)


def theme_rows(g: Gen) -> None:
    """Row-wise code as in softmax and layer norm: reductions with keep_dims broadcast back over ragged rows."""
    R, C = g.choice([(1, 8), (4, 17), (8, 32), (3, 100), (16, 64), (2, 256)])
    x = load(g, t=g.choice(["f32", "f32", "f16", "bf16", "i32"]), shape=(R, C),
             mask=g.choice(["bound", "bound", "none"]), mode=g.choice(["rowmajor", "tile", "transposed"]))
    fn = g.choice(["max", "min", "sum"])
    m = g.let(Call(fn, (Name(x.name),), (("axis", Py(1)), ("keep_dims", Py(True)))), x.t if fn != "sum" else
              {"i32": "i32"}.get(x.t, x.t), (R, 1), base="red")
    d = g.let(Bin("-", Name(x.name), Name(m.name)), x.t, (R, C))
    made = [m, d]
    if is_float(x.t) or g.chance(0.5):
        e = g.let(Call("exp", (Name(d.name),)), x.t if is_float(x.t) else "f32", (R, C))
        s_ = g.let(Call("sum", (Name(e.name),), (("axis", Py(-1)), ("keep_dims", Py(True)))), e.t, (R, 1), base="red")
        y = g.let(Bin("/", Name(e.name), Name(s_.name)), e.t, (R, C))
        made += [e, s_, y]
    made += ops(g, int(g.rng.integers(0, 4)))
    store_some(g, made, 2)


def theme_gemm(g: Gen) -> None:
    """A tiled GEMM: each program computes its (M, N) tile of C (program_id(0), program_id(1)) over a loop on k,
    with bounded tile_loads at the ragged edges, a dot accumulator carried, a bounded tile_store; sometimes
    `num_stages`, an operand loaded once before the loop, a runtime `if` in the loop, an epilogue."""
    M_, N_, BK = (int(g.choice([8, 16, 32])) for _ in range(3))
    ta = g.choice(["f32", "f16", "bf16", "i8", "f16", "f8e4m3"])
    tb = g.choice([ta, ta, "f32", "f16", "bf16"] if ta not in ("i8", "u8") else ["i8", "u8", "f16"])
    ints = is_int(ta) and is_int(tb)
    gm, gn = g.dims[0], g.dims[1] if len(g.dims) > 1 else 1
    Mt, Nt = int(g.rng.integers(max(1, gm * M_ - M_ + 1), gm * M_ + 1)), int(g.rng.integers(max(1, gn * N_ - N_ + 1),
                                                                                             gn * N_ + 1))
    hoist = g.chance(0.25)
    K = BK if hoist else int(g.choice([0, BK, 2 * BK, 3 * BK - 5, 2 * BK + 1, 4 * BK]))
    prof = g.choice(["small", "small", "wide"])
    A = g.param("in", data(g.rng, ta, max(Mt * max(K, 1), 1), prof, False), base="A")
    steps = int(g.choice([1, 2, 3])) if hoist else 1
    Bcols = Nt * steps
    B = g.param("in", data(g.rng, tb, max(max(K, 1) * Bcols, 1), prof, False), base="B")
    Kv, Mv, Nv = (Name(g.scalar(v, base=b).name) for v, b in ((K, "K"), (Mt, "M"), (Nt, "N")))
    Bw = Name(g.scalar(Bcols, base="ldb").name)
    pm = g.let(Bin("*", Call("program_id", (Num(0),)), Num(M_)), "i32", (), base="pm", keep=False)
    pn = g.let(Bin("*", Call("program_id", (Num(1),)), Num(N_)), "i32", (), base="pn", keep=False)
    at = "i32" if ints else g.choice(["f32", "f32", "f16", "bf16"])
    acc = g.fresh("acc")
    g.body.append(Assign(acc, Call("zeros", (Py((M_, N_)),), (("dtype", Py(at)),))))
    kv = g.fresh("k")
    zero = Num(0)
    if hoist:                   # a (M, K) operand loaded before a loop over blocks of B's columns
        g.body.append(Assign(f"{acc}_a", Call("tile_load", (Name(A), Name(pm.name), zero, Kv, Py((M_, BK))),
                                              (("bounds", Tup((Mv, Kv))),))))
        b_load = Call("tile_load", (Name(B), zero, Bin("+", Name(pn.name), Name(kv)), Bw, Py((BK, N_))),
                      (("bounds", Tup((Kv, Bw))),))
        body = [Assign(f"{acc}_b", b_load)]
        stop, step = Num(Nt * steps), Num(Nt)
    else:
        a_load = Call("tile_load", (Name(A), Name(pm.name), Name(kv), Kv, Py((M_, BK))), (("bounds", Tup((Mv, Kv))),))
        b_load = Call("tile_load", (Name(B), Name(kv), Name(pn.name), Bw, Py((BK, N_))), (("bounds", Tup((Kv, Nv))),))
        body = [Assign(f"{acc}_a", a_load), Assign(f"{acc}_b", b_load)]
        stop, step = Kv, Num(BK)
    update = Assign(acc, Call("dot", (Name(f"{acc}_a"), Name(f"{acc}_b"), Name(acc))))
    if g.chance(0.2):
        body.append(If(Bin("<", Name(kv), Name(g.scalar(int(g.choice([0, BK, 2 * BK])), base="kk").name)),
                       [update]))
    else:
        body.append(update)
    g.body.append(For(kv, Num(0), stop, step, body, int(g.choice([0, 0, 2, 3]))))
    C = g.param("out", data(g.rng, at, Mt * Nt, "wide"), base="C")
    val = Name(acc)
    if g.chance(0.4) and not ints:
        val = Bin("+", Bin("*", val, Num(0.5)), Num(1.0))
    g.body.append(Effect(Call("tile_store", (Name(C), Name(pm.name), Name(pn.name), Nv, val, Py((M_, N_))),
                              (("bounds", Tup((Mv, Nv))),))))


def _more():
    from tests.fuzz.gen_flow import theme_atomic, theme_exit
    from tests.fuzz.gen_shapes import theme_combine, theme_mm, theme_shape
    return {"shape": (theme_shape, 3), "combine": (theme_combine, 2), "mm": (theme_mm, 2),
            "atomic": (theme_atomic, 2), "exit": (theme_exit, 2)}


THEMES = {"ew": (theme_ew, 5), "reduce": (theme_reduce, 3), "loop": (theme_loop, 3), "branch": (theme_branch, 1),
          "dot": (theme_dot, 2), "rows": (theme_rows, 2), "gemm": (theme_gemm, 2), **_more()}


def gen_section(rng, tag: str, feats: Features, grid: int, theme: str | None = None) -> Section:
    names = list(THEMES)
    w = np.array([THEMES[n][1] for n in names], float)
    theme = theme or names[int(rng.choice(len(names), p=w / w.sum()))]
    g = Gen(rng, tag, feats, grid)
    THEMES[theme][0](g)
    return Section(tag, theme, g.params, g.blocks[0])


ALL = Features()


def gen_kernel(seed: int, feats: Features = ALL, sections: int | None = None, theme: str | None = None) -> Kernel:
    """A kernel of 1 to 4 random programs (sections), launched on a grid of 1 to 3 programs."""
    rng = np.random.default_rng(seed)
    grid = [(1,), (1,), (1,), (2,), (3,), (2, 2), (1, 3)][int(rng.integers(7))]
    count = sections or int(rng.integers(1, 5))
    secs = [gen_section(rng, "abcdefgh"[j], feats, grid, theme) for j in range(count)]
    from tests.fuzz.gen_flow import uses_return
    ends = [s for s in secs if uses_return(s)]       # a return ends the program: one such section, the last
    secs = [s for s in secs if not uses_return(s)] + ends[:1]
    options = {}
    if rng.random() < 0.25:
        options["num_simdgroups"] = int(rng.choice([1, 2, 4, 8]))
    if rng.random() < 0.3:
        options["num_stages"] = int(rng.choice([2, 3]))
    if len(grid) == 2 and rng.random() < 0.5:
        options["group_programs"] = int(rng.choice([1, 2]))
    if rng.random() < 0.15:
        options["direct_operands"] = True
    return Kernel(f"fz{seed}", secs, grid, tuple(options.items()))
