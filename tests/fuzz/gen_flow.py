"""Fuzzed programs of atomics and early exits (docs/language.md 5.5, 5.6, 7.2):
- `atomic`: every atomic (add, max, min, and, or, xor, xchg, cas) on i32, u32 and f32 memory as Metal allows, its
  old values used or not: per element on addresses of their own (old values and memory exact), a uniform scalar
  once per program, and many elements on one address where only order-free results are checked (the memory after
  commutative combines; the sum, maximum or sorted list of the old values of a constant add);
- `exit`: `tile_range`, `range` and `while` loops (`while True` too) with `break` and `continue` under traced
  conditions made of `and`, `or` and `not` (short-circuit: a load guarded by a bound is read only where the bound
  holds), stores skipped by `continue`, carried scalars and tiles, and `return` (at the top of a program or in a
  loop: such a section goes last in its kernel, since a `return` ends every program after it)."""

from __future__ import annotations

from tests.fuzz.gen import Gen, V, data
from tests.fuzz.gen_loads import in_param, load
from tests.fuzz.prog import Assign, Bin, BoolOp, Call, Effect, Exit, For, If, Name, Num, Py, While

OPS = {"i32": ["add", "max", "min", "and", "or", "xor", "xchg", "cas"], "f32": ["add", "max", "min", "xchg"]}
OPS["u32"] = OPS["i32"]
COMMUTATIVE = {"add", "max", "min", "and", "or", "xor"}


def _region_of(g: Gen, n: int, name: str):
    base = Name(name)
    if g.grid > 1:
        base = Bin("+", base, Bin("*", Name(g.program_id().name), Num(n)))
    return base, name


def _memory(g: Gen, name: str, t: str, size: int, small: bool) -> None:
    """The initial memory of atomic array `name` (no NaN: float atomics order every float but NaN)."""
    v = data(g.rng, t, size, "small" if small else g.choice(["small", "special", "wide"]), nan_inf=False)
    for j, p in enumerate(g.params):
        if p.name == name:
            g.params[j] = type(p)(p.name, "out", v)


def _value(g: Gen, t: str, n: int, small: bool):
    """A tile of `n` values for an atomic on `t` memory: loaded (of `t` or a type converted to it), or a number."""
    if g.chance(0.2) and not small:
        return Num(g.choice([1, 7, -1]) if t == "i32" else (g.choice([1, 3]) if t == "u32" else -2.5)), None
    lt = t if g.chance(0.7) else g.choice(["i32", "u8", "f32"] if t != "f32" else ["f16", "i32"])
    if t != "f32" and lt == "f32":
        lt = "i32"
    x = load(g, t=lt, shape=(n,), mask="none", profile="small" if small else g.choice(["small", "wide"]))
    return Name(x.name), x


def _use_old(g: Gen, old: str, t: str, n: int | None, order_free: bool) -> None:
    """Store the old values (or, where they depend on the order of the atomics, the sum, max or sorted list)."""
    if n is None:
        g.store(V(old, t, ()))
        return
    if not order_free:
        g.store(V(old, t, (n,)))
        return
    k = g.choice(["sum", "max", "min"] + (["sort"] if n & (n - 1) == 0 else []))
    if k == "sort":
        v = g.let(Call("sort", (Name(old),)), t, (n,))
    else:
        v = g.let(Call(k, (Name(old),)), t if k != "sum" or t != "f32" else "f32", ())
    g.store(v)


def theme_atomic(g: Gen) -> None:
    for _ in range(int(g.rng.integers(1, 4))):
        t = g.choice(["i32", "i32", "u32", "f32"])
        op = g.choice(OPS[t])
        kind = g.choice(["distinct", "distinct", "scalar", "shared", "loop"])
        if kind == "loop":
            _atomic_loop(g)
            continue
        if kind == "shared" and op not in COMMUTATIVE:
            kind = "distinct"
        n = int(g.choice([1, 4, 8, 16, 17, 32, 64]))
        used = g.chance(0.6) or op == "cas"
        name = g.fresh("A")
        if kind == "shared" and not used:             # one array every program meets on
            k = int(g.choice([1, 2, 3, 5]))
            g.params.append(_param(name))
            _memory(g, name, t, k, small=True)
            r = g.arange(n)
            small = t == "f32" and op == "add"         # exact in any order
            val, _ = _value(g, t, n, small)
            addr = Bin("+", Name(name), Bin("%", Name(r.name), Num(k))) if k > 1 else Name(name)
            g.body.append(Effect(Call(f"atomic_{op}", (addr, val), _mask(g, r, n))))
            continue
        g.params.append(_param(name))
        size = (1 if kind == "scalar" else (n if kind == "distinct" else 3)) * g.grid
        _memory(g, name, t, size, small=kind == "shared")
        base, _ = _region_of(g, size // g.grid, name)
        if kind == "scalar":
            x = load(g, t=g.choice(["i32", t] + (["f32"] if t == "f32" else [])), shape=(n,), mask="none",
                     profile="small")
            red = g.let(Call(g.choice(["sum", "max", "min"]), (Name(x.name),)), x.t, (), base="red")
            args = (base, Name(red.name)) if op != "cas" else (base, Name(red.name), Num(5 if t != "f32" else 5.0))
            n_old = None
        elif kind == "distinct":
            r = g.arange(n)
            addr = Bin("+", base, Name(r.name)) if g.chance(0.7) else Bin("-", Bin("+", base, Num(n - 1)), Name(r.name))
            val, _ = _value(g, t, n, False)
            if op == "cas":
                cur = g.let(Call("load", (addr,)), t, (n,), base="cur", keep=False)
                cmp = g.let(Call("where", (Bin("==", Bin("%", Name(r.name), Num(3)), Num(0)), Name(cur.name),
                                           Num(0 if t != "f32" else 0.0))), t, (n,), keep=False)
                args = (addr, Name(cmp.name), val)
            else:
                args = (addr, val)
            n_old = n
        else:                                          # constant adds to 3 addresses of this program's own
            r = g.arange(n)
            op = "add"
            addr = Bin("+", base, Bin("%", Name(r.name), Num(3)))
            args = (addr, Num(1 if t != "f32" else 1.0))
            n_old = n
        kw = _mask(g, g.arange(n), n) if kind == "distinct" and op != "cas" else ()
        if used:
            old = g.fresh("old")
            g.body.append(Assign(old, Call(f"atomic_{op}", args, kw)))
            _use_old(g, old, t, n_old, kind == "shared")
        else:
            g.body.append(Effect(Call(f"atomic_{op}", args, kw)))


def _atomic_loop(g: Gen) -> None:
    """A uniform scalar atomic in a `tile_range` loop (once per program per iteration), its old values summed: a
    ticket counter, the same on every thread."""
    t = g.choice(["i32", "u32", "f32"])
    name = g.fresh("A")
    g.params.append(_param(name))
    _memory(g, name, t, g.grid, small=True)
    base, _ = _region_of(g, 1, name)
    i, got = g.fresh("i"), g.fresh("got")
    g.body.append(Assign(got, Num(0) if t != "f32" else Num(0.0)))
    step = Num(int(g.choice([1, 2, 3])) if t != "f32" else 0.5)
    upd = Assign(got, Bin("+", Name(got), Call("atomic_add", (base, step))))
    body = [upd]
    if g.chance(0.4):                               # an exit on the old value: the same on every thread
        body.insert(0, If(Bin(">", Call("atomic_add", (base, Num(0) if t != "f32" else Num(0.0))),
                              Num(4 if t != "f32" else 4.0)), [Exit("break")]))
    g.body.append(For(i, Num(0), Name(g.scalar(int(g.rng.integers(0, 6)), base="k").name), Num(1), body))
    g.store(V(got, "i32" if t != "f32" else "f32", ()))


def _param(name: str):
    from tests.fuzz.prog import Param
    return Param(name, "out", None)


def _mask(g: Gen, r: V, n: int) -> tuple:
    if not g.chance(0.35):
        return ()
    lim = g.scalar(int(g.rng.integers(0, n + 1)), base="n")
    return (("mask", Bin("<", Name(r.name), Name(lim.name))),)


# ---- early exits


def _cond(g: Gen, v: str, i: str, n: int):
    """A traced scalar condition on the loaded value `v` and the counter `i`, maybe with and/or/not."""
    def atom():
        k = g.choice(["v", "v", "i", "vi"])
        if k == "v":
            return Bin(g.choice(["<", ">", "==", "<="]), Name(v), Num(float(g.choice([0.0, 1.0, -2.0, 3.5]))))
        if k == "i":
            return Bin(g.choice(["<", ">=", "=="]), Name(i), Num(int(g.rng.integers(0, n + 1))))
        return Bin("<", Name(v), Call("cast", (Name(i), Py("f32"))))
    c = atom()
    r = g.rng.random()
    if r < 0.25:
        c = BoolOp("and", c, atom())
    elif r < 0.45:
        c = BoolOp("or", c, atom())
    elif r < 0.55:
        c = BoolOp("not", c)
    return c


def theme_exit(g: Gen) -> None:
    n = int(g.rng.integers(1, 9))
    X = g.fresh("X")
    g.params.append(in_param(X, data(g.rng, "f32", n, "small", False)))
    tn = int(g.choice([1, 4, 8, 16]))
    T = g.fresh("T")
    g.params.append(in_param(T, data(g.rng, "f32", n * tn, "small", False)))
    rt = g.arange(tn)
    cnt, tot, acc = g.fresh("cnt"), g.fresh("tot"), g.fresh("acc")
    g.body.extend([Assign(cnt, Num(0)), Assign(tot, Num(0.0)),
               Assign(acc, Call("zeros", (Py((tn,)),), (("dtype", Py("f32")),)))])
    seen = g.param("out", data(g.rng, "f32", n * g.grid, "wide"), base="O")
    seen_ptr = Name(seen) if g.grid == 1 else Bin("+", Name(seen), Bin("*", Name(g.program_id().name), Num(n)))
    i, v = g.fresh("i"), g.fresh("v")
    form = g.choice(["for", "for", "range", "unrolled", "static", "while", "while_true"])
    iv = i if form in ("for", "range", "unrolled", "static") else g.fresh("j")     # a while reads it before it moves
    lo, hi = 0, n
    body = [Assign(v, Call("load", (Bin("+", Name(X), Name(iv)),)))]
    exits = []
    for _ in range(int(g.rng.integers(1, 3))):
        kind = g.choice(["break", "continue", "continue", "return"] if form != "while_true" else ["break", "return"])
        exits.append(kind)
        pre = [Assign(cnt, Bin("+", Name(cnt), Num(100)))] if g.chance(0.3) else []
        body.append(If(_cond(g, v, iv, n), pre + [Exit(kind)]))
    tkw = ()
    if g.chance(0.4):                                # partly inactive: those elements keep their old values (5.3)
        tkw = (("mask", Bin("<", Name(rt.name), Name(g.scalar(int(g.rng.integers(0, tn + 1)), base="n").name))),)
    tile = Call("load", (Bin("+", Bin("+", Name(T), Bin("*", Name(iv), Num(tn))), Name(rt.name)),), tkw)
    if g.chance(0.3):                                # an inner loop whose break and continue are its own
        k, w = g.fresh("k"), g.fresh("w")
        inner = [Assign(w, Call("load", (Bin("+", Name(X), Name(k)),))),
                 If(Bin(g.choice(["<", ">"]), Name(w), Name(v)), [Exit(g.choice(["break", "continue"]))]),
                 Assign(cnt, Bin("+", Name(cnt), Num(1000)))]
        body.append(For(k, Num(0), Name(g.scalar(n, base="n").name), Num(1), inner))
    body += [Assign(cnt, Bin("+", Name(cnt), Num(1))), Assign(tot, Bin("+", Name(tot), Name(v))),
             Assign(acc, Call("maximum", (Name(acc), tile)) if g.chance(0.3) else Bin("+", Name(acc), tile)),
             Effect(Call("store", (Bin("+", seen_ptr, Name(iv)), Name(v))))]
    hi_v = Name(g.scalar(hi, base="hi").name)
    if form in ("for", "range"):
        g.body.append(For(i, Num(lo), hi_v, Num(1), body, python_range=form == "range"))
    elif form in ("unrolled", "static"):             # unrolled while tracing: a traced exit sets a flag (7.2)
        g.body.append(For(i, Num(lo), Num(hi), Num(1), body, python_range=form == "unrolled",
                          static=form == "static"))
    else:
        g.body.append(Assign(i, Num(lo)))
        body = [Assign(iv, Name(i)), Assign(i, Bin("+", Name(i), Num(1)))] + body
        step: list = []
        if form == "while":
            guard = BoolOp("and", Bin("<", Name(i), hi_v), Bin("!=", Call("load", (Bin("+", Name(X), Name(i)),)),
                                                                   Num(float(g.choice([99.0, 1.0, -3.0])))))
            g.body.append(While(guard, body + step))
        else:
            stop = [If(Bin(">=", Name(i), hi_v), [Exit("break")])]
            g.body.append(While(Num(True), stop + body + step))
    if g.chance(0.3):                                # a return at the top, on a uniform condition
        flag = g.scalar(int(g.choice([0, 1])), base="flag")
        cond = Bin("!=", Name(flag.name), Num(0))
        if g.grid > 1 and g.chance(0.5):
            cond = BoolOp("and", cond, Bin("==", Name(g.program_id().name), Num(0)))
        g.body.insert(1 if g.pid is not None else 0, If(cond, [Exit("return")]))     # after the program id
    for name, t, shape in ((cnt, "i32", ()), (tot, "f32", ()), (acc, "f32", (tn,))):
        g.store(V(name, t, shape))
    if g.chance(0.4):                                # a reduction (barriers) after the exits
        g.store(g.let(Call(g.choice(["sum", "max"]), (Name(acc),)), "f32", (), base="red") if g.chance(0.5) else
                g.let(Call("cumsum", (Name(acc),)), "f32", (tn,), base="scan"))


def uses_return(section) -> bool:
    def walk(body) -> bool:
        for st in body:
            if isinstance(st, Exit) and st.kind == "return":
                return True
            for inner in (getattr(st, "body", ()), getattr(st, "orelse", ())):
                if walk(inner):
                    return True
        return False
    return walk(section.body)


__all__ = ["theme_atomic", "theme_exit", "uses_return"]
