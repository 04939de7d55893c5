"""Expressions of a kernel, compiled into evaluators the tracer calls, once per parsed function.

`evaluator(node, loc_of, table)` turns an `ast.expr` into an evaluator `ev(tracer) -> value` that does
what walking that node does: it evaluates compile-time values (constexprs, Python numbers, tuples,
modules, functions) with Python and builds IR for traced values through `metile.frontend.semantic` and
the builtins. What only depends on the node (its `Loc`, operator, argument layout, its children's
evaluators) is found the first time a trace evaluates it and kept with the parsed source
(`metile.frontend.trace.Prepared`), instead of on every trace; a node the kernel may not use (a lambda,
`@`...) compiles to an evaluator that raises its error when it runs, as walking it would. An evaluator's
result is never a `metile.constexpr`: wrapped values are unwrapped, as names are.
"""

from __future__ import annotations

import ast
import builtins
import math
from collections.abc import Callable

from metile.frontend import semantic as sem
from metile.frontend.builtins import BUILTINS, bind_values
from metile.frontend.errors import (
    ConstexprRequiredError,
    KernelTypeError,
    RuntimeConditionError,
    ShapeMismatchError,
    UndefinedNameError,
    UnsupportedCallError,
    UnsupportedSyntaxError,
)
from metile.ir.errors import Loc
from metile.ir.tile import ExpandDims
from metile.ir.values import Value
from metile.language import constexpr

Evaluator = Callable[[object], object]   # takes the `Tracer`

BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
          ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
          ast.LShift: "lshift", ast.RShift: "rshift"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_PY_CMPOPS = {ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b, ast.In: lambda a, b: a in b,
              ast.NotIn: lambda a, b: a not in b}
_PY_CALLABLES = {builtins.int, builtins.float, builtins.bool, builtins.len, builtins.min, builtins.max,
                 builtins.abs, builtins.range, builtins.tuple, builtins.isinstance, builtins.str, builtins.round}
_SUGGEST = {builtins.min: "metile.minimum (element-wise) or metile.min (reduction)",
            builtins.max: "metile.maximum (element-wise) or metile.max (reduction)", builtins.abs: "metile.abs",
            builtins.range: "metile.tile_range(start, stop, step) for a loop with runtime bounds"}
SYNTAX = {ast.Lambda: "lambda expressions", ast.ListComp: "list comprehensions",
          ast.SetComp: "set comprehensions", ast.DictComp: "dict comprehensions",
          ast.GeneratorExp: "generator expressions", ast.NamedExpr: "assignment expressions (:=)",
          ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from", ast.Dict: "dict displays",
          ast.Set: "set displays", ast.Starred: "starred expressions", ast.JoinedStr: "f-strings",
          ast.Try: "try statements", ast.Raise: "raise statements", ast.ClassDef: "class definitions",
          ast.FunctionDef: "nested function definitions", ast.AsyncFunctionDef: "nested function definitions",
          ast.Global: "global statements", ast.Nonlocal: "nonlocal statements", ast.Delete: "del statements",
          ast.Import: "import statements", ast.ImportFrom: "import statements", ast.Match: "match statements",
          ast.Break: "break statements", ast.Continue: "continue statements", ast.AsyncFor: "async for",
          ast.AsyncWith: "async with"}
_UNSET = object()


def evaluator(node: ast.expr, loc_of: Callable[[ast.AST], Loc], table: dict[ast.expr, Evaluator]) -> Evaluator:
    """The evaluator of `node`, compiled into `table` (with its children's) the first time; `loc_of` gives the
    `Loc` of a node."""
    found = table.get(node)
    if found is None:
        found = table[node] = _COMPILERS.get(node.__class__, _unsupported)(node, loc_of(node), loc_of, table)
    return found


def lookup(tr, name: str, node: ast.AST):
    """The value of the name `name`: a variable, a global (or closure variable) or a Python builtin."""
    env = tr.env
    if name in env:
        return env[name]
    if name in tr.hidden:
        raise UndefinedNameError(f"name '{name}' is not defined here: {tr.hidden[name]}", tr.loc(node))
    if name in tr.globals:
        return tr.globals[name]
    if hasattr(builtins, name):
        return getattr(builtins, name)
    raise UndefinedNameError(f"name '{name}' is not defined", tr.loc(node))


# ---- one compiler per expression class: (node, its Loc, loc_of, table) -> evaluator

def _unsupported(node: ast.expr, loc: Loc, loc_of, table) -> Evaluator:
    what = SYNTAX.get(type(node), f"{type(node).__name__} expressions")

    def ev(tr):
        raise UnsupportedSyntaxError(f"{what} are not supported inside a @metile.kernel", loc)
    return ev


def _constant(node: ast.Constant, loc: Loc, loc_of, table) -> Evaluator:
    value = node.value

    def ev(tr):
        return value
    return ev


def _name(node: ast.Name, loc: Loc, loc_of, table) -> Evaluator:
    name = node.id

    def ev(tr):
        value = tr.env.get(name, _UNSET)
        if value is _UNSET:
            value = lookup(tr, name, node)
        return value.value if isinstance(value, constexpr) else value
    return ev


def _attribute(node: ast.Attribute, loc: Loc, loc_of, table) -> Evaluator:
    base_ev, attr = evaluator(node.value, loc_of, table), node.attr

    def ev(tr):
        base = base_ev(tr)
        if isinstance(base, Value):
            if attr == "shape":
                return tuple(base.type.shape)
            if attr == "dtype":
                return str(base.type.dtype)
            raise KernelTypeError(f"traced values have no attribute '{attr}' (only .shape and .dtype)", loc)
        try:
            value = getattr(base, attr)
        except AttributeError:
            owner = getattr(base, "__name__", type(base).__name__)
            raise UndefinedNameError(f"'{owner}' has no attribute '{attr}'", loc) from None
        return value.value if isinstance(value, constexpr) else value
    return ev


def _tuple(node: ast.Tuple, loc: Loc, loc_of, table) -> Evaluator:
    elts = [evaluator(e, loc_of, table) for e in node.elts]

    def ev(tr):
        return tuple([e(tr) for e in elts])
    return ev


def _list(node: ast.List, loc: Loc, loc_of, table) -> Evaluator:
    elts = [evaluator(e, loc_of, table) for e in node.elts]

    def ev(tr):
        return [e(tr) for e in elts]
    return ev


def _binop(node: ast.BinOp, loc: Loc, loc_of, table) -> Evaluator:
    op = BINOPS.get(type(node.op))
    left, right = evaluator(node.left, loc_of, table), evaluator(node.right, loc_of, table)
    if op is None:
        def ev(tr):
            raise UnsupportedSyntaxError("the `@` operator is not supported; use metile.dot(a, b)", loc)
        return ev
    binary = sem.binary

    def ev(tr):
        value = binary(op, left(tr), right(tr), loc)
        return value.value if isinstance(value, constexpr) else value
    return ev


def _unaryop(node: ast.UnaryOp, loc: Loc, loc_of, table) -> Evaluator:
    operand, op = evaluator(node.operand, loc_of, table), node.op.__class__

    def ev(tr):
        x = operand(tr)
        if op is ast.USub:
            value = sem.unary("neg", x, loc)
        elif op is ast.UAdd:
            value = x
        elif op is ast.Invert:
            value = sem.unary("invert", x, loc)
        elif isinstance(x, Value):
            raise RuntimeConditionError("`not` cannot take a traced value; use `~mask` or `x == 0`", loc)
        else:
            value = not x
        return value.value if isinstance(value, constexpr) else value
    return ev


def _boolop(node: ast.BoolOp, loc: Loc, loc_of, table) -> Evaluator:
    word, sym = ("and", "&") if isinstance(node.op, ast.And) else ("or", "|")
    operands = [(evaluator(v, loc_of, table), loc_of(v)) for v in node.values]

    def ev(tr):
        value = None
        for operand, operand_loc in operands:
            value = operand(tr)
            if isinstance(value, Value):
                raise RuntimeConditionError(f"`{word}` cannot take a traced value; combine masks with `{sym}` "
                                            "(with parentheses around comparisons)", operand_loc)
            if (word == "and") != bool(value):
                break
        return value.value if isinstance(value, constexpr) else value
    return ev


def _compare(node: ast.Compare, loc: Loc, loc_of, table) -> Evaluator:
    first = evaluator(node.left, loc_of, table)
    steps = [(op.__class__, evaluator(right, loc_of, table)) for op, right in zip(node.ops, node.comparators)]

    def ev(tr):
        left = first(tr)
        result = None
        for op, right_ev in steps:
            right = right_ev(tr)
            name = _CMPOPS.get(op)
            if name is None:
                if isinstance(left, Value) or isinstance(right, Value):
                    raise KernelTypeError("`is`, `is not`, `in` and `not in` need compile-time operands", loc)
                part = _PY_CMPOPS[op](left, right)
            else:
                part = sem.compare(name, left, right, loc)
            result = part if result is None else sem.binary("and", result, part, loc)
            if not isinstance(result, Value) and not result:
                break
            left = right
        return result.value if isinstance(result, constexpr) else result
    return ev


def _ifexp(node: ast.IfExp, loc: Loc, loc_of, table) -> Evaluator:
    test, body, orelse = (evaluator(n, loc_of, table) for n in (node.test, node.body, node.orelse))

    def ev(tr):
        cond = test(tr)
        if isinstance(cond, Value):
            raise RuntimeConditionError("a conditional expression needs a compile-time condition; use "
                                        "metile.where(cond, a, b) to select per element", loc)
        return body(tr) if cond else orelse(tr)
    return ev


def _subscript(node: ast.Subscript, loc: Loc, loc_of, table) -> Evaluator:
    base_ev, key_ev, index = evaluator(node.value, loc_of, table), evaluator(node.slice, loc_of, table), node.slice

    def ev(tr):
        base = base_ev(tr)
        if isinstance(base, Value):
            return expand(base, index, loc)
        key = key_ev(tr)
        try:
            value = base[key]
        except (IndexError, KeyError, TypeError) as e:
            raise KernelTypeError(f"indexing failed at compile time: {e}", loc) from None
        return value.value if isinstance(value, constexpr) else value
    return ev


def expand(base: Value, index: ast.expr, loc: Loc) -> Value:
    """`base[index]` for a traced `base`: `None` inserts an axis (`ExpandDims`), `:` keeps one."""
    items = index.elts if isinstance(index, ast.Tuple) else [index]
    ndim = len(base.type.shape)
    if sum(isinstance(i, ast.Slice) for i in items) > ndim:
        raise ShapeMismatchError(f"too many `:` in the index of a {ndim}-D value", loc)
    out, axis = base, 0
    for item in items:
        if isinstance(item, ast.Constant) and item.value is None:
            out = ExpandDims(out, axis, loc=loc)
        elif not (isinstance(item, ast.Slice) and item.lower is None and item.upper is None and item.step is None):
            raise UnsupportedSyntaxError("tiles can only be indexed with `:` and `None` (x[:, None], "
                                         "x[None, :]); element indexing is not supported", loc)
        axis += 1
    return out


def _slice(node: ast.Slice, loc: Loc, loc_of, table) -> Evaluator:
    parts = [None if e is None else evaluator(e, loc_of, table) for e in (node.lower, node.upper, node.step)]

    def ev(tr):
        return slice(*[None if p is None else p(tr) for p in parts])
    return ev


def _call(node: ast.Call, loc: Loc, loc_of, table) -> Evaluator:
    func = evaluator(node.func, loc_of, table)
    starred = any(isinstance(a, ast.Starred) for a in node.args)
    args_evs = [(isinstance(a, ast.Starred), evaluator(a.value if isinstance(a, ast.Starred) else a, loc_of, table))
                for a in node.args]
    plain_evs = [e for _, e in args_evs]
    keywords = [(kw.arg, evaluator(kw.value, loc_of, table)) for kw in node.keywords]

    def ev(tr):
        fn = func(tr)
        if starred:
            args = []
            for star, a in args_evs:
                if star:
                    args.extend(a(tr))
                else:
                    args.append(a(tr))
        else:
            args = [a(tr) for a in plain_evs]
        kwargs = {}
        for name, kw in keywords:
            if name is None:
                raise UnsupportedSyntaxError("`**kwargs` in calls is not supported inside a kernel", loc)
            kwargs[name] = kw(tr)
        impl = BUILTINS.get(fn)
        value = impl(tr, loc, *bind_values(fn, args, kwargs, loc)) if impl is not None else call(fn, args, kwargs, loc)
        return value.value if isinstance(value, constexpr) else value
    return ev


def call(fn, args: list, kwargs: dict, loc: Loc):
    """A call of something other than a `metile` builtin: `metile.constexpr(v)`, or a Python builtin or `math`
    function on compile-time values."""
    if fn is constexpr:
        return args[0] if args else None
    if fn in _PY_CALLABLES or getattr(fn, "__module__", None) == "math" or fn is math.prod:
        if any(isinstance(a, Value) for a in [*args, *kwargs.values()]):
            hint = _SUGGEST.get(fn, "a metile function")
            err = ConstexprRequiredError if fn is builtins.range else KernelTypeError
            raise err(f"{getattr(fn, '__name__', fn)}() cannot take traced values here; use {hint}", loc)
        try:
            return fn(*args, **kwargs)
        except (ArithmeticError, TypeError, ValueError) as e:
            raise KernelTypeError(f"{fn.__name__}() failed at compile time: {e}", loc) from None
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    if type(fn).__name__ == "JITKernel":
        raise UnsupportedCallError(f"calling the kernel '{name}' from inside a kernel is not supported", loc)
    raise UnsupportedCallError(f"cannot call '{name}' inside a @metile.kernel: only metile functions and "
                               "Python builtins on compile-time values can be called", loc)


_COMPILERS = {ast.Constant: _constant, ast.Name: _name, ast.Attribute: _attribute, ast.Tuple: _tuple,
              ast.List: _list, ast.BinOp: _binop, ast.UnaryOp: _unaryop, ast.BoolOp: _boolop, ast.Compare: _compare,
              ast.IfExp: _ifexp, ast.Subscript: _subscript, ast.Slice: _slice, ast.Call: _call}

__all__ = ["BINOPS", "SYNTAX", "Evaluator", "call", "evaluator", "expand", "lookup"]
