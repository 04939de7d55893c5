"""The syntax of fuzzed programs and its rendering as `@metile.kernel` source.

A `Kernel` is a list of independent `Section`s (one fuzzed program each) batched into one kernel function, so
that one C++ compile runs several programs. Each section owns its parameters (input arrays, output arrays,
runtime scalars: names prefixed with the section's letter) and its statements. Expressions are small frozen
trees; the generator keeps them flat (one operation per assignment) so that repros read like SSA.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from tests.fuzz.dtypes import TYPES


@attrs.frozen
class Name:
    id: str


@attrs.frozen
class Num:
    """A Python number or bool in the kernel's source (weak in arithmetic, 3.3)."""
    value: Any


@attrs.frozen
class Py:
    """A compile-time Python value given to a call (an axis, a dtype name, a shape, a flag)."""
    value: Any


@attrs.frozen
class Tup:
    """A tuple of run-time scalars (`bounds=(rows, cols)`)."""
    items: tuple = attrs.field(converter=tuple)


@attrs.frozen
class Bin:
    op: str
    a: Expr
    b: Expr


@attrs.frozen
class Un:
    op: str             # "-" or "~"
    a: Expr


@attrs.frozen
class Call:
    fn: str             # a name in `metile` (exp, where, load, sum, dot, tile_load, ...)
    args: tuple = attrs.field(converter=tuple)
    kwargs: tuple = attrs.field(converter=tuple, default=())     # ((name, Expr), ...)

    def kw(self, name: str, default=None):
        return dict(self.kwargs).get(name, default)


@attrs.frozen
class To:
    a: Expr
    dtype: str
    bitcast: bool = False


@attrs.frozen
class Expand:
    a: Expr
    col: bool           # True: x[:, None]; False: x[None, :]


@attrs.frozen
class Trans:
    a: Expr


@attrs.frozen
class FnRef:
    """A `@metile.func` combine function of `tests.fuzz.combine_fns`, by name (its definition is rendered before the
    kernel)."""
    name: str


@attrs.frozen
class BoolOp:
    """`a and b`, `a or b` on traced scalars (short-circuit on the device), or `not a` (`b` None)."""
    op: str             # "and", "or", "not"
    a: Expr
    b: Expr | None = None


Expr = Name | Num | Py | Tup | Bin | Un | Call | To | Expand | Trans | FnRef | BoolOp


@attrs.frozen
class Assign:
    name: str
    value: Expr


@attrs.frozen
class Unpack:
    """`a, b = value` (split, a combine over a tuple of tiles)."""
    names: tuple = attrs.field(converter=tuple)
    value: Expr = None


@attrs.frozen
class Exit:
    """`return`, `break` or `continue`."""
    kind: str


@attrs.frozen
class Effect:
    call: Call          # store, tile_store


@attrs.frozen
class If:
    cond: Expr
    body: tuple = attrs.field(converter=tuple)
    orelse: tuple = attrs.field(converter=tuple, default=())




@attrs.frozen
class For:
    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: tuple = attrs.field(converter=tuple)
    stages: int = 0                 # num_stages= of the tile_range (0: not given)
    python_range: bool = False      # written as Python's range with traced bounds, the same loop (7.1)
    static: bool = False            # metile.static_range (with python_range and constant bounds: unrolled too)


@attrs.frozen
class While:
    cond: Expr
    body: tuple = attrs.field(converter=tuple)


Stmt = Assign | Unpack | Effect | For | If | While | Exit


@attrs.frozen
class Param:
    """A kernel parameter: an array (its value, or for a strided view the base array the view is cut from, by
    `view`: one (start, stop, step) per axis) or a scalar."""
    name: str
    role: str           # "in", "out" (arrays) or "scalar"
    value: Any = attrs.field(eq=False)
    view: tuple = ()

    def argument(self):
        """What a launch passes: a fresh copy (a view of a fresh copy of the base), or the scalar."""
        if not isinstance(self.value, np.ndarray):
            return self.value
        base = self.value.copy()
        return base[tuple(slice(*t) for t in self.view)] if self.view else base

    def offsets(self) -> np.ndarray:
        """The flat offsets in the base of the elements the kernel may use, row-major."""
        idx = np.arange(self.value.size).reshape(self.value.shape)
        return (idx[tuple(slice(*t) for t in self.view)] if self.view else idx).reshape(-1)

    def memory(self) -> np.ndarray:
        """The memory a kernel sees: a view spans its base from its first element to its last (2.4)."""
        off = self.offsets()
        return self.value.reshape(-1)[off.min():off.max() + 1].copy()


@attrs.frozen
class Section:
    tag: str            # the prefix of its names
    theme: str
    params: tuple = attrs.field(converter=tuple)
    body: tuple = attrs.field(converter=tuple)


@attrs.frozen
class Kernel:
    name: str
    sections: tuple = attrs.field(converter=tuple)
    grid: tuple = attrs.field(converter=tuple, default=(1,))
    options: tuple = attrs.field(converter=tuple, default=())     # launch keywords: ((name, value), ...)

    @property
    def programs(self) -> int:
        return int(np.prod(self.grid))

    @property
    def params(self) -> list[Param]:
        return [p for s in self.sections for p in s.params]


def subexprs(e) -> list:
    match e:
        case Bin(_, a, b):
            return [a, b]
        case Un(_, a) | To(a, _, _) | Expand(a, _) | Trans(a):
            return [a]
        case Call(_, args, kwargs):
            return list(args) + [v for _, v in kwargs]
        case Tup(items):
            return list(items)
        case BoolOp(_, a, b):
            return [a] if b is None else [a, b]
    return []


def names_in(e) -> set[str]:
    if isinstance(e, Name):
        return {e.id}
    out: set[str] = set()
    for c in subexprs(e):
        out |= names_in(c)
    return out


def used(body) -> set[str]:
    out: set[str] = set()
    for st in body:
        match st:
            case Assign(_, v) | Unpack(_, v):
                out |= names_in(v)
            case Effect(c):
                out |= names_in(c)
            case For(_, a, b, s, inner):
                out |= names_in(a) | names_in(b) | names_in(s) | used(inner)
            case While(c, inner):
                out |= names_in(c) | used(inner)
            case If(c, a, b):
                out |= names_in(c) | used(a) | used(b)
    return out


# ---- rendering

_PREC = {"|": 2, "^": 3, "&": 4, "<<": 5, ">>": 5, "+": 6, "-": 6, "*": 7, "/": 7, "//": 7, "%": 7, "**": 9}
_CMP = {"<", "<=", ">", ">=", "==", "!="}


def num_src(v) -> str:
    if isinstance(v, bool) or isinstance(v, int):
        return repr(v)
    v = float(v)
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(v)


def _prec(e) -> int:
    match e:
        case Bin(op, _, _):
            return 1 if op in _CMP else _PREC[op]
        case Un():
            return 8
        case BoolOp():
            return 0
        case Num(v) if not isinstance(v, bool) and (v < 0 or (isinstance(v, float) and math.copysign(1, v) < 0)
                                                    or not math.isfinite(v)):
            return 8
    return 10


def expr_src(e, ctx: int = 0) -> str:
    match e:
        case Name(i):
            s = i
        case Num(v):
            s = num_src(v)
        case Py(v):
            s = repr(v)
        case Tup(items):
            s = f"({', '.join(expr_src(x) for x in items)})"
        case Bin(op, a, b):
            p = _prec(e)
            right = p + 1 if op != "**" else p       # left-associative, except **; comparisons never chain
            left = p if op not in _CMP and op != "**" else p + 1
            s = f"{expr_src(a, left)} {op} {expr_src(b, right)}"
        case Un(op, a):
            s = f"{op}{expr_src(a, 8)}"
        case Call(fn, args, kwargs):
            parts = [expr_src(a) for a in args] + [f"{k}={expr_src(v)}" for k, v in kwargs]
            name = fn[len("builtin."):] if fn.startswith("builtin.") else f"metile.{fn}"
            s = f"{name}({', '.join(parts)})"
        case To(a, dt, bc):
            s = f"{expr_src(a, 11)}.to({dt!r}{', bitcast=True' if bc else ''})"
        case Expand(a, col):
            s = f"{expr_src(a, 11)}{'[:, None]' if col else '[None, :]'}"
        case Trans(a):
            s = f"{expr_src(a, 11)}.T"
        case FnRef(n):
            s = n
        case BoolOp("not", a, _):
            s = f"not {expr_src(a, 1)}"
        case BoolOp(op, a, b):
            s = f"{expr_src(a, 1)} {op} {expr_src(b, 1)}"
        case _:
            raise TypeError(f"not an expression: {e!r}")
    return f"({s})" if _prec(e) < min(ctx, 10) else s


def stmts_src(body, indent: str) -> list[str]:
    out = []
    for st in body:
        match st:
            case Assign(n, v):
                out.append(f"{indent}{n} = {expr_src(v)}")
            case Unpack(ns, v):
                out.append(f"{indent}{', '.join(ns)} = {expr_src(v)}")
            case Exit(kind):
                out.append(f"{indent}{kind}")
            case Effect(c):
                out.append(f"{indent}{expr_src(c)}")
            case For(var, a, b, step, inner, stages, py, static):
                more = f", num_stages={stages}" if stages else ""
                bounds = f"{expr_src(a)}, {expr_src(b)}, {expr_src(step)}{more}"
                fn = "metile.static_range" if static else ("range" if py else "metile.tile_range")
                out.append(f"{indent}for {var} in {fn}({bounds}):")
                out += stmts_src(inner, indent + "    ") or [indent + "    pass"]
            case While(c, inner):
                out.append(f"{indent}while {expr_src(c)}:")
                out += stmts_src(inner, indent + "    ") or [indent + "    pass"]
            case If(c, a, b):
                out.append(f"{indent}if {expr_src(c)}:")
                out += stmts_src(a, indent + "    ") or [indent + "    pass"]
                if b:
                    out.append(f"{indent}else:")
                    out += stmts_src(b, indent + "    ")
    return out


def kernel_src(k: Kernel) -> str:
    params = ", ".join(p.name for p in k.params)
    from tests.fuzz.combine_fns import func_defs
    lines = ["import metile", "", ""] + func_defs(k) + ["@metile.kernel", f"def {k.name}({params}):"]
    for s in k.sections:
        lines.append(f"    # program {s.tag} ({s.theme})")
        lines += stmts_src(s.body, "    ") or ["    pass"]
    return "\n".join(lines) + "\n"


def value_src(v) -> str:
    """Python source that rebuilds an argument (an array or a scalar) exactly."""
    if isinstance(v, np.ndarray):
        name = next((n for n, t in TYPES.items() if t.np == v.dtype), None)
        if v.dtype.kind == "f" or name in ("bf16", "f8e4m3", "f8e5m2"):
            bits = v.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[v.itemsize])
            kind = {1: "uint8", 2: "uint16", 4: "uint32"}[v.itemsize]
            dt = {"bf16": "ml_dtypes.bfloat16", "f8e4m3": "ml_dtypes.float8_e4m3fn",
                  "f8e5m2": "ml_dtypes.float8_e5m2"}.get(name, f"np.{v.dtype.name}")
            return f"np.array({bits.tolist()}, np.{kind}).view({dt})"
        return f"np.array({v.tolist()}, np.{v.dtype.name})"
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        if isinstance(v, np.floating):
            return f"np.{v.dtype.name}({num_src(float(v))})"
        return f"np.{v.dtype.name}({int(v)})"
    return num_src(v)


def _exprs(body):
    for st in body:
        match st:
            case Assign(_, v) | Unpack(_, v):
                yield v
            case Effect(c):
                yield c
            case For(_, a, b, s, inner):
                yield from (a, b, s)
                yield from _exprs(inner)
            case While(c, inner):
                yield c
                yield from _exprs(inner)
            case If(c, a, b):
                yield c
                yield from _exprs(a)
                yield from _exprs(b)


def _fnrefs(e) -> set[str]:
    out = {e.name} if isinstance(e, FnRef) else set()
    for c in subexprs(e):
        out |= _fnrefs(c)
    return out


def kernel_names_of_fns(k: Kernel) -> set[str]:
    """The combine functions (`FnRef`) the kernel's sections use."""
    out: set[str] = set()
    for s in k.sections:
        for e in _exprs(s.body):
            out |= _fnrefs(e)
    return out
