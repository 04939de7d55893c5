"""Expressions of a kernel, evaluated by walking their `ast`.

`eval_expr(tracer, node)` does what an expression means in a kernel: it evaluates compile-time values
(constexprs, Python numbers, tuples, modules, functions) with Python and builds IR for traced values through
`metile.frontend.semantic` and the builtins. It dispatches on the node's class (`EVAL`, one function per
class); a node the kernel may not use (a lambda, `@`...) raises its error when it is evaluated. Nothing is
prepared per node ahead of time: most nodes are evaluated once or twice per trace, so compiling them first
would cost more than it saves. A node's `Loc` is found through the tracer (kept with the parsed source), and
only when an IR node or an error needs it. A result is never a `metile.constexpr`: wrapped values are
unwrapped, as names are.
"""

from __future__ import annotations

import ast
import builtins
import math

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.atomics import ATOMICS
from metile.frontend.builtins import BUILTINS
from metile.frontend.combine import LIBRARY as COMBINE_LIBRARY
from metile.frontend.container_calls import CONTAINER_BUILTINS, BoundMethod, call_method, container_builtin, method
from metile.frontend.containers import check_key, holds_traced, own
from metile.frontend.device_debug import LIBRARY as DEBUG_LIBRARY
from metile.frontend.displays import (
    dict_comprehension,
    dict_display,
    display_items,
    generator_expression,
    list_comprehension,
    list_display,
)
from metile.frontend.errors import (
    ConstexprRequiredError,
    KernelTypeError,
    RuntimeConditionError,
    ShapeMismatchError,
    UndefinedNameError,
    UnsupportedCallError,
    UnsupportedSyntaxError,
)
from metile.frontend.funcs import call_func
from metile.frontend.helpers import HELPERS
from metile.frontend.library import LIBRARY
from metile.frontend.shapes import SHAPES
from metile.frontend.sorting import LIBRARY as SORTING_LIBRARY
from metile.frontend.tile_access import TILE_ACCESS
from metile.ir.errors import Loc
from metile.ir.tile import ExpandDims
from metile.ir.values import Value
from metile.language import constexpr

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
SYNTAX = {ast.Lambda: "lambda expressions", ast.SetComp: "set comprehensions",
          ast.NamedExpr: "assignment expressions (:=)", ast.Await: "await", ast.Yield: "yield",
          ast.YieldFrom: "yield from", ast.Set: "set displays", ast.Starred: "starred expressions",
          ast.JoinedStr: "f-strings",
          ast.Try: "try statements", ast.Raise: "raise statements", ast.ClassDef: "class definitions",
          ast.FunctionDef: "nested function definitions", ast.AsyncFunctionDef: "nested function definitions",
          ast.Global: "global statements", ast.Nonlocal: "nonlocal statements", ast.Delete: "del statements",
          ast.Import: "import statements", ast.ImportFrom: "import statements", ast.Match: "match statements",
          ast.Break: "break statements", ast.Continue: "continue statements", ast.AsyncFor: "async for",
          ast.AsyncWith: "async with"}
_UNSET = object()
_STARRED, _NAME = ast.Starred, ast.Name
_MIN, _MAX = builtins.min, builtins.max
_CONTAINERS = (list, dict, tuple)
CALLS = {**BUILTINS, **TILE_ACCESS, **ATOMICS, **LIBRARY, **SHAPES, **COMBINE_LIBRARY, **SORTING_LIBRARY,
         **DEBUG_LIBRARY, **HELPERS}
"""Per language function, its implementation (`metile.frontend.builtins` and `metile.frontend.library`)."""
_METHODS = {"to": L.cast}
"""The methods of traced values, as the language functions they call with the value first (`x.to(dtype)`)."""


class Method:
    """`value.name`, a method of a traced value: calling it calls `fn(value, ...)`."""

    __slots__ = ("fn", "value")

    def __init__(self, fn, value: Value):
        self.fn, self.value = fn, value


class _Table(dict):
    """Per ast class, the function evaluating its nodes; `_unsupported` for the classes kernels may not use."""

    def __missing__(self, cls):
        return _unsupported


def eval_expr(tr, node: ast.expr):
    """The value of the expression `node` in the tracer `tr`."""
    return EVAL[node.__class__](tr, node)


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


# ---- one function per expression class: (tracer, node) -> value

def _unsupported(tr, node: ast.expr):
    raise tr.dialect.unsupported(SYNTAX.get(type(node), f"{type(node).__name__} expressions"), tr.loc(node))


def _constant(tr, node: ast.Constant):
    return node.value


def _name(tr, node: ast.Name):
    value = tr.env.get(node.id, _UNSET)
    if value is _UNSET:
        value = lookup(tr, node.id, node)
    return value.value if isinstance(value, constexpr) else value


def _attribute(tr, node: ast.Attribute):
    base_node = node.value
    if base_node.__class__ is _NAME:  # `module.name`: `_name` inline, and `lookup` of a global
        name = base_node.id
        base = tr.env.get(name, _UNSET)
        if base is _UNSET:
            base = _UNSET if name in tr.hidden else tr.globals.get(name, _UNSET)
            if base is _UNSET:
                base = lookup(tr, name, base_node)
        if isinstance(base, constexpr):
            base = base.value
    else:
        base = EVAL[base_node.__class__](tr, base_node)
    attr = node.attr
    if isinstance(base, Value):
        return tr.dialect.attribute(tr, base, attr, tr.loc(node))
    if base.__class__ in _CONTAINERS:
        return method(base, attr, base_node.id if base_node.__class__ is ast.Name else None, tr.loc(node))
    try:
        value = getattr(base, attr)
    except AttributeError:
        owner = getattr(base, "__name__", type(base).__name__)
        raise UndefinedNameError(f"'{owner}' has no attribute '{attr}'", tr.loc(node)) from None
    return value.value if isinstance(value, constexpr) else value


def value_attribute(tr, base: Value, attr: str, loc: Loc):
    """`base.attr` of a traced value in a metile kernel: `.shape`, `.dtype` (its type's name), `.T` and `.to(...)`."""
    if attr == "shape":
        return tuple(base.type.shape)
    if attr == "dtype":
        return str(base.type.dtype)
    if attr == "T":
        return CALLS[L.trans](tr, loc, base, None)
    fn = _METHODS.get(attr)
    if fn is not None:
        return Method(fn, base)
    raise KernelTypeError(f"traced values have no attribute '{attr}' (they have .shape, .dtype, .T and "
                          ".to(dtype))", loc)


def _tuple(tr, node: ast.Tuple):
    elts = node.elts
    for e in elts:
        if e.__class__ is _STARRED:   # `(*xs, y)`: spread by `display_items`
            return tuple(display_items(tr, elts))
    return tuple([EVAL[e.__class__](tr, e) for e in elts])


def _binop(tr, node: ast.BinOp):
    op = BINOPS.get(node.op.__class__)
    if op is None:
        raise UnsupportedSyntaxError("the `@` operator is not supported; use metile.dot(a, b)", tr.loc(node))
    left, right = node.left, node.right
    value = tr.dialect.binary(op, EVAL[left.__class__](tr, left), EVAL[right.__class__](tr, right),
                              tr.locs.get(node) or tr.loc(node))
    if value.__class__ in _CONTAINERS:  # `a + b`, `a * 3` of lists (or tuples holding them): a new container
        return own(tr, value)
    return value.value if isinstance(value, constexpr) else value


def _unaryop(tr, node: ast.UnaryOp):
    operand = node.operand
    x = EVAL[operand.__class__](tr, operand)
    op = node.op.__class__
    if op is ast.USub:
        value = tr.dialect.unary("neg", x, tr.loc(node))
    elif op is ast.UAdd:
        value = x
    elif op is ast.Invert:
        value = tr.dialect.unary("invert", x, tr.loc(node))
    else:
        value = tr.dialect.logical_not(tr, x, node)
    return value.value if isinstance(value, constexpr) else value


def _boolop(tr, node: ast.BoolOp):
    return tr.dialect.boolop(tr, "and" if node.op.__class__ is ast.And else "or", node.values, tr.loc(node))


def _compare(tr, node: ast.Compare):
    left = node.left
    left = EVAL[left.__class__](tr, left)
    loc = tr.locs.get(node) or tr.loc(node)
    ops = node.ops
    if len(ops) == 1 and isinstance(left, Value) and (name := _CMPOPS.get(ops[0].__class__)) is not None:
        right = node.comparators[0]   # `x < y` of a traced `x`, the commonest comparison: the loop below, unrolled
        value = tr.dialect.compare(name, left, EVAL[right.__class__](tr, right), loc)
        return value.value if isinstance(value, constexpr) else value
    result = None
    for op, right in zip(ops, node.comparators):
        right = EVAL[right.__class__](tr, right)
        name = _CMPOPS.get(op.__class__)
        if name is None:
            if (isinstance(left, Value) or isinstance(right, Value)) and not (
                    tr.dialect.traced_identity and op.__class__ in (ast.Is, ast.IsNot)):
                raise KernelTypeError("`is`, `is not`, `in` and `not in` need compile-time operands", loc)
            if op.__class__ in (ast.In, ast.NotIn) and right.__class__ is not dict and holds_traced(right):
                raise KernelTypeError("`in` would compare with traced values, whose comparison is only known when the "
                                      "kernel runs: compare them with metile.where, or index by position", loc)
            part = _PY_CMPOPS[op.__class__](left, right)
        elif not isinstance(left, Value) and not isinstance(right, Value) and (holds_traced(left)
                                                                             or holds_traced(right)):
            raise KernelTypeError("comparing containers that hold traced values: their items are only known when the "
                                  "kernel runs; compare the items one by one", loc)
        else:
            part = tr.dialect.compare(name, left, right, loc)
        result = part if result is None else tr.dialect.binary("and", result, part, loc)
        if not isinstance(result, Value) and not result:
            break
        left = right
    return result.value if isinstance(result, constexpr) else result


def _ifexp(tr, node: ast.IfExp):
    cond = EVAL[node.test.__class__](tr, node.test)
    if isinstance(cond, Value):
        raise RuntimeConditionError("a conditional expression needs a compile-time condition; use "
                                    "metile.where(cond, a, b) to select per element", tr.loc(node))
    branch = node.body if cond else node.orelse
    return EVAL[branch.__class__](tr, branch)


def _subscript(tr, node: ast.Subscript):
    base = EVAL[node.value.__class__](tr, node.value)
    if isinstance(base, Value):
        return expand(base, node.slice, tr.loc(node))
    key = EVAL[node.slice.__class__](tr, node.slice)
    if isinstance(key, Value) or base.__class__ in _CONTAINERS:
        check_key(base, key, tr.loc(node.slice))
    try:
        value = base[key]
    except (IndexError, KeyError, TypeError) as e:
        raise KernelTypeError(f"indexing failed at compile time: {e}", tr.loc(node)) from None
    if key.__class__ is slice and value.__class__ is list:  # a slice of a list is a new list
        return own(tr, value)
    return value.value if isinstance(value, constexpr) else value


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


def _slice(tr, node: ast.Slice):
    return slice(*[None if e is None else EVAL[e.__class__](tr, e) for e in (node.lower, node.upper, node.step)])


def _call(tr, node: ast.Call):
    func = node.func
    fn = EVAL[func.__class__](tr, func)
    args = []
    for a in node.args:
        if a.__class__ is _STARRED:
            args.extend(EVAL[a.value.__class__](tr, a.value))
        else:
            args.append(EVAL[a.__class__](tr, a))
    kwargs = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise UnsupportedSyntaxError("`**kwargs` in calls is not supported inside a kernel", tr.loc(node))
        kwargs[kw.arg] = EVAL[kw.value.__class__](tr, kw.value)
    loc = tr.locs.get(node) or tr.loc(node)
    dialect = tr.dialect
    impl = dialect.calls.get(fn)
    if impl is not None and fn is not _MIN and fn is not _MAX:   # a function of the language (the commonest call)
        value = impl(tr, loc, *dialect.bind(fn, args, kwargs, loc))
        return value.value if isinstance(value, constexpr) else value
    if fn.__class__ is Method:
        args.insert(0, fn.value)
        fn = fn.fn
    elif fn.__class__ is BoundMethod:
        return call_method(tr, fn, args, kwargs, loc)
    elif fn in CONTAINER_BUILTINS or ((fn is builtins.min or fn is builtins.max) and len(args) == 1):
        value = container_builtin(tr, fn, args, kwargs, loc)
        if value is not NotImplemented:
            return value
    elif (helper := dialect.helpers.get(fn.__class__)) is not None:   # a function the call inlines
        value = call_func(tr, helper(fn), args, kwargs, loc)
        return value.value if isinstance(value, constexpr) else value
    impl = dialect.calls.get(fn)
    value = impl(tr, loc, *dialect.bind(fn, args, kwargs, loc)) if impl is not None else call(fn, args, kwargs, loc,
                                                                                                dialect)
    return value.value if isinstance(value, constexpr) else value


def call(fn, args: list, kwargs: dict, loc: Loc, dialect=None):
    """A call of something other than a builtin of the kernel's language (`dialect`, metile's by default):
    `metile.constexpr(v)`, or a Python builtin or `math` function on compile-time values."""
    if fn is constexpr:
        return args[0] if args else None
    if (fn is builtins.min or fn is builtins.max) and len(args) >= 2 and not kwargs \
            and any(isinstance(a, Value) for a in args):  # element-wise, as Triton reads them
        binary = sem.binary if dialect is None else dialect.binary
        out = args[0]
        for a in args[1:]:
            out = binary("min" if fn is builtins.min else "max", out, a, loc)
        return out
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
    if dialect is not None and dialect.name != "@metile.kernel":
        raise UnsupportedCallError(f"cannot call '{name}' inside a {dialect.name}: only its language's functions, "
                                   "its helper functions and Python builtins on compile-time values can be called",
                                   loc)
    raise UnsupportedCallError(f"cannot call '{name}' inside a @metile.kernel: only metile functions, @metile.func "
                               "helpers and Python builtins on compile-time values can be called (mark a helper "
                               "function with @metile.func to call it here)", loc)


EVAL = _Table({ast.Constant: _constant, ast.Name: _name, ast.Attribute: _attribute, ast.Tuple: _tuple,
               ast.List: list_display, ast.Dict: dict_display, ast.ListComp: list_comprehension,
               ast.DictComp: dict_comprehension, ast.GeneratorExp: generator_expression, ast.BinOp: _binop,
               ast.UnaryOp: _unaryop, ast.BoolOp: _boolop, ast.Compare: _compare, ast.IfExp: _ifexp,
               ast.Subscript: _subscript, ast.Slice: _slice, ast.Call: _call})

__all__ = ["BINOPS", "CALLS", "EVAL", "SYNTAX", "Method", "call", "eval_expr", "expand", "lookup", "value_attribute"]
