"""Runs a fuzzed `Kernel` on the numpy model: the traced semantics of docs/language.md (weak Python numbers,
pointers as element offsets, masked loads, stores, `tile_range` loops with loop-carried values, runtime `if`),
each program of the grid in turn. The result is each output array as the model expects it, with the error
bound of each element (see `tests.fuzz.model`)."""

from __future__ import annotations

import numpy as np

from tests.fuzz import interp_memory as mem_ops
from tests.fuzz import interp_more as more
from tests.fuzz import model as M
from tests.fuzz import model_math as MM
from tests.fuzz import model_reduce as R
from tests.fuzz.dtypes import TYPES, common, is_float, literal_fits, promote, weak_type
from tests.fuzz.interp_flow import Flow
from tests.fuzz.interp_memory import Memory, ModelError, Ptr, Undecidable
from tests.fuzz.interp_more import Signal
from tests.fuzz.prog import (
    Assign,
    Bin,
    BoolOp,
    Call,
    Effect,
    Exit,
    Expand,
    For,
    If,
    Kernel,
    Name,
    Num,
    Py,
    To,
    Trans,
    Un,
    Unpack,
    While,
)

CMP = ("<", "<=", ">", ">=", "==", "!=")


def scalar_mval(v) -> M.MVal:
    if isinstance(v, bool):
        return M.mval("i32", int(v))
    if isinstance(v, int):
        return M.mval("i32" if -2 ** 31 <= v < 2 ** 31 else ("i64" if v < 2 ** 63 else "u64"), v)     # 2.4
    if isinstance(v, float):
        return M.mval("f32", np.float32(v))
    name = next(n for n, t in TYPES.items() if t.np == np.asarray(v).dtype)
    return M.mval(name, np.asarray(v))


class Interp(Flow):
    def __init__(self, kernel: Kernel, mem: Memory, pid: int, probe: bool = False, relax: frozenset = frozenset()):
        self.k, self.mem, self.pid, self.probe, self.relax = kernel, mem, pid, probe, relax

    def sub(self, probe: bool | None = None) -> Interp:
        return Interp(self.k, self.mem, self.pid, self.probe if probe is None else probe, self.relax)

    # ---- values

    def as_traced(self, x, like: str | None = None, computation: bool = True) -> M.MVal:
        if isinstance(x, M.MVal):
            return x
        if isinstance(x, Num):
            v = x.value
            t = "f32" if isinstance(v, float) else ("bool" if isinstance(v, bool) else "i32")
            if like is not None:
                t = weak_type(like, v, computation)
                if not literal_fits(t, v):
                    raise ModelError(f"{v!r} does not fit {t}")
            return M.literal(v, t)
        raise ModelError(f"not a value: {x!r}")

    def pair(self, a, b, computation: bool = True):
        """Two operands, a Python number taking the traced one's type (weak)."""
        if isinstance(a, Num) and isinstance(b, Num):
            raise ModelError("two Python numbers")
        if isinstance(a, Num):
            b = self.as_traced(b)
            return self.as_traced(a, b.t, computation), b
        if isinstance(b, Num):
            a = self.as_traced(a)
            return a, self.as_traced(b, a.t, computation)
        return a, b

    def ev(self, e):
        match e:
            case Name(i):
                return self.env[i]
            case Num() | Py():
                return e
            case Bin(op, a, b):
                return self.binop(op, self.ev(a), self.ev(b))
            case Un(op, a):
                x = self.ev(a)
                if isinstance(x, Num):
                    return Num(-x.value if op == "-" else ~x.value)
                return M.negate(x) if op == "-" else M.invert(x)
            case To(a, dt, bc):
                x = self.as_traced(self.ev(a))
                return M.bitcast(x, dt) if bc else M.cast(x, dt)
            case Expand(a, col):
                x = self.ev(a)
                f = (lambda z: z[:, None]) if col else (lambda z: z[None, :])
                if isinstance(x, Ptr):
                    return Ptr(x.buf, x.t, f(x.off))
                return M.MVal(x.t, f(x.v), f(x.act), f(x.err))
            case Trans(a):
                x = self.ev(a)
                if x.v.ndim == 3:
                    return more.S.swap_last(x)
                return M.MVal(x.t, x.v.T.copy(), x.act.T.copy(), x.err.T.copy())
            case BoolOp():
                return more.bool_op(self, e)
            case Call():
                return self.call(e)
        raise ModelError(f"cannot evaluate {e!r}")

    def binop(self, op, a, b):
        if isinstance(a, Ptr) or isinstance(b, Ptr):
            p, o = (a, b) if isinstance(a, Ptr) else (b, a)
            if isinstance(o, Num):
                off = np.int64(o.value)
            else:
                if TYPES[o.t].kind not in "iu" or o.err.max(initial=0) > 0:
                    raise ModelError("pointer offsets are exact integers")
                off = o.i().astype(np.int64)
            if op == "+":
                return Ptr(p.buf, p.t, p.off + off)
            if op == "-" and p is a:
                return Ptr(p.buf, p.t, p.off - off)
            raise ModelError(f"pointer {op}")
        if isinstance(a, Num) and isinstance(b, Num):
            return Num(eval(f"a.value {op} b.value", {}, {"a": a, "b": b}))
        a, b = self.pair(a, b)
        if op in CMP:
            t = promote(a.t, b.t)
            return M.binary(op, M.cast(a, t), M.cast(b, t), "bool")
        t = M.arith_type(op, a.t, b.t)
        if op == "**":
            return MM.math_fn("pow", a, b)
        return M.binary(op, M.cast(a, t), M.cast(b, t), t, self.relax)

    # ---- calls

    def call(self, c: Call):
        fn, args = c.fn, c.args
        kw = {k: v for k, v in c.kwargs}
        got = more.call(self, c)
        if got is not None:
            return got
        if fn == "arange":
            return M.mval("i32", np.arange(args[0].value, args[1].value))
        if fn == "program_id":
            a = args[0].value
            return M.mval("i32", self.pid[a] if a < len(self.pid) else 0)
        if fn == "num_programs":
            a = args[0].value
            return M.mval("i32", self.k.grid[a] if a < len(self.k.grid) else 1)
        if fn == "zeros":
            return M.mval(kw.get("dtype", Py("f32")).value, np.zeros(args[0].value))
        if fn == "full":
            shape = args[0].value
            x = self.ev(args[1])
            dt = kw["dtype"].value if "dtype" in kw else None
            if isinstance(x, Num):
                t = dt or ("f32" if isinstance(x.value, float) else "i32")
                return M.literal(x.value, t, shape)
            return M.bcast(M.cast(x, dt or x.t), shape)
        if fn == "load":
            return mem_ops.load(self, self.ev(args[0]), kw.get("mask"), kw.get("other"))
        if fn == "tile_load":
            return mem_ops.tile_load(self, c)
        if fn in ("store", "tile_store"):
            raise ModelError("a store is a statement")
        if fn in MM.MATH:
            return MM.math_fn(fn, self.as_traced(self.ev(args[0])))
        if fn == "pow":
            a, b = self.pair(self.ev(args[0]), self.ev(args[1]))
            return MM.math_fn("pow", a, b)
        if fn.startswith("builtin."):
            fn = {"builtin.max": "maximum", "builtin.min": "minimum"}[fn]
        if fn in ("maximum", "minimum"):
            a, b = self.pair(self.ev(args[0]), self.ev(args[1]))
            t = promote(a.t, b.t)
            return M.extremum(M.cast(a, t), M.cast(b, t), fn == "maximum")
        if fn == "clamp":
            lo = self.binop_ext("maximum", self.ev(args[0]), self.ev(args[1]))
            return self.binop_ext("minimum", lo, self.ev(args[2]))
        if fn == "where":
            cnd = self.as_traced(self.ev(args[0]))
            a, b = self.pair(self.ev(args[1]), self.ev(args[2]), computation=False)
            t = common(a.t, b.t)                 # a selection: 3.3's common type, 8-bit floats as themselves
            return M.where(cnd, M.cast(a, t), M.cast(b, t))
        if fn == "fma":
            return MM.fma(*(self.as_traced(self.ev(a)) for a in args))
        if fn in ("sum", "max", "min", "argmax", "argmin"):
            x = self.as_traced(self.ev(args[0]))
            axis = kw["axis"].value if "axis" in kw else None
            keep = kw["keep_dims"].value if "keep_dims" in kw else False
            if fn == "sum":
                return R.reduce_sum(x, axis, keep, kw["dtype"].value if "dtype" in kw else None)
            if fn in ("max", "min"):
                return R.reduce_extremum(x, axis, keep, fn == "max")
            return R.reduce_arg(x, axis, keep, fn == "argmax")
        if fn in ("cumsum", "cumprod"):
            x = self.as_traced(self.ev(args[0]))
            axis = kw["axis"].value if "axis" in kw else 0
            rev = kw["reverse"].value if "reverse" in kw else False
            return R.scan(x, axis, rev, kw["dtype"].value if "dtype" in kw else None, fn == "cumprod")
        if fn == "dot":
            a, b = self.ev(args[0]), self.ev(args[1])
            acc = self.ev(args[2]) if len(args) > 2 else None
            out = kw["out_dtype"].value if "out_dtype" in kw else None
            if isinstance(acc, Num):
                return R.dot(a, b, None, acc.value, out, self.relax)
            return R.dot(a, b, acc, None, out, self.relax)
        if fn == "trans":
            x = self.ev(args[0])
            if x.v.ndim == 3:
                return more.S.swap_last(x)
            return M.MVal(x.t, x.v.T.copy(), x.act.T.copy(), x.err.T.copy())
        if fn == "cast":
            return M.cast(self.as_traced(self.ev(args[0])), args[1].value)
        raise ModelError(f"no model for metile.{fn}")

    def binop_ext(self, fn, a, b):
        a, b = self.pair(a, b)
        t = promote(a.t, b.t)
        return M.extremum(M.cast(a, t), M.cast(b, t), fn == "maximum")

    # ---- statements

    def run(self, body, env: dict) -> dict:
        self.env = env
        for st in body:
            self.stmt(st)
        return self.env

    def stmt(self, st) -> None:
        match st:
            case Assign(n, v):
                self.env[n] = self.ev(v)
            case Unpack(ns, v):
                got = self.ev(v)
                if len(got) != len(ns):
                    raise ModelError("unpacking the wrong number of values")
                for n, x in zip(ns, got):
                    self.env[n] = x
            case Exit(kind):
                if not self.probe:               # finding a loop's types: every statement runs
                    raise Signal(kind)
            case Effect(c):
                if c.fn.startswith("atomic_"):
                    more.atomic(self, c)
                elif c.fn == "store":
                    mem_ops.store(self, c)
                elif c.fn == "tile_store":
                    mem_ops.tile_store(self, c)
                else:
                    raise ModelError(f"no statement metile.{c.fn}")
            case For():
                self.loop(st)
            case While():
                self.while_loop(st)
            case If():
                self.branch(st)



def run_model(k: Kernel, relax: frozenset = frozenset()) -> tuple[Memory, set[str]]:
    """The memory after the kernel runs on the model (each array as the kernel sees it: a view's span), and the
    tags of sections the model cannot decide."""
    arrays = {p.name: p.memory() for p in k.params if p.role != "scalar"}
    mem = Memory(arrays, {n: np.zeros(a.size) for n, a in arrays.items()})
    undecided: set[str] = set()
    for pid in np.ndindex(*k.grid):
        for s in k.sections:
            env = {}
            for p in s.params:
                if p.role == "scalar":
                    env[p.name] = scalar_mval(p.value)
                else:
                    t = next(n for n, d in TYPES.items() if d.np == p.value.dtype)
                    env[p.name] = Ptr(p.name, t, np.int64(0))
            try:
                Interp(k, mem, pid, relax=relax).run(s.body, env)
            except Undecidable:
                undecided.add(s.tag)
            except Signal as e:                 # `return` ends the program: the sections after it do not run
                if e.kind != "return":
                    raise ModelError(f"{e.kind} outside a loop") from None
                break
    return mem, undecided


def float_like(t: str) -> bool:
    return is_float(t)
