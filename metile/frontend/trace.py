"""The tracer: walks a kernel function's `ast` and builds a Tile IR `Kernel`.

Python-level values (constexprs, Python numbers, tuples, modules, functions) are evaluated at
compile time; traced values are IR `Value`s. An assignment of a traced expression binds it with a
`Let` named after the variable (suffixed to stay unique), so the IR reads like the source. Each
`Loc` is built once per ast node, offset by the function's first line and indentation.
Control flow (`if`, `for`, `while`, `with`) lives in `metile.frontend.control`.
"""

from __future__ import annotations

import ast
import builtins
import math

from metile.frontend import semantic as sem
from metile.frontend.builtins import BUILTINS, call_builtin
from metile.frontend.control import ControlFlow
from metile.frontend.errors import (
    ConstexprRequiredError,
    KernelTypeError,
    RuntimeConditionError,
    UndefinedNameError,
    UnsupportedCallError,
    UnsupportedSyntaxError,
)
from metile.ir.errors import Loc
from metile.ir.ops import Stage
from metile.ir.stmts import Kernel, Let
from metile.ir.values import Const, Param, Stmt, Value, Var
from metile.language import constexpr

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
           ast.LShift: "lshift", ast.RShift: "rshift"}
_CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_PY_CALLABLES = {builtins.int, builtins.float, builtins.bool, builtins.len, builtins.min, builtins.max,
                 builtins.abs, builtins.range, builtins.tuple, builtins.isinstance, builtins.str, builtins.round}
_SUGGEST = {builtins.min: "metile.minimum (element-wise) or metile.min (reduction)",
            builtins.max: "metile.maximum (element-wise) or metile.max (reduction)", builtins.abs: "metile.abs",
            builtins.range: "metile.tile_range(start, stop, step) for a loop with runtime bounds"}
_SYNTAX = {ast.Lambda: "lambda expressions", ast.ListComp: "list comprehensions",
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


def node_locs(fdef: ast.AST, file: str, line_offset: int, col_offset: int) -> dict[int, Loc]:
    """The `Loc` of every node of `fdef` that has a position, by `id` of the node (`fdef` keeps them alive):
    built once per parsed function and shared by all its traces."""
    return {id(n): Loc(file, n.lineno + line_offset, n.col_offset + col_offset)
            for n in ast.walk(fdef) if getattr(n, "lineno", None) is not None}


class Tracer(ControlFlow):
    """Builds the body of one kernel; `run()` returns the `Kernel`."""

    def __init__(self, fdef: ast.FunctionDef, *, name: str, file: str, line_offset: int, col_offset: int,
                 globals_: dict, env: dict, params: list[Param], meta: dict[str, int],
                 locs: dict[int, Loc] | None = None):
        self.fdef, self.name, self.file = fdef, name, file
        self.line_offset, self.col_offset = line_offset, col_offset
        self.globals = globals_
        self.env: dict[str, object] = dict(env)
        self.params, self.meta = params, meta
        self.names: set[str] = {p.name for p in params}
        self.stmts: list[Stmt] = []
        self.depth = 0
        self.hidden: dict[str, str] = {}  # names defined only inside a runtime region -> why they are gone
        self.hint: str | None = None
        self._locs: dict[int, Loc] = node_locs(fdef, file, line_offset, col_offset) if locs is None else locs

    # ---- helpers used by builtins and control flow

    def loc(self, node: ast.AST) -> Loc:
        found = self._locs.get(id(node))
        if found is None:  # a node made while tracing, or one without a position
            line = getattr(node, "lineno", 1) + self.line_offset
            found = Loc(self.file, line, getattr(node, "col_offset", 0) + self.col_offset)
        return found

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.names:
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        return name

    def emit(self, stmt: Stmt) -> None:
        self.stmts.append(stmt)

    def bind(self, value, hint: str | None, loc: Loc | None, *, force: bool = False):
        """`value`, bound by a `Let` when it is a traced expression (always when `force`)."""
        if not isinstance(value, Value) or (isinstance(value, (Var, Param, Const)) and not force):
            return value
        var = Var(self.fresh(hint or "t"), value.type, loc=loc)
        self.emit(Let(var, value, loc=loc))
        return var

    def run(self) -> Kernel:
        body = self.fdef.body
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Return) and stmt.value is None and i == len(body) - 1:
                break
            self.visit_stmt(stmt)
        return Kernel(self.name, Stage.TILE, self.params, self.stmts, self.meta, loc=self.loc(self.fdef))

    # ---- statements

    def visit_body(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            method = _STMTS.get(stmt.__class__)
            if method is None:
                self.visit_stmt(stmt)
            else:
                method(self, stmt)

    def visit_stmt(self, node: ast.stmt) -> None:
        method = _STMTS.get(node.__class__)
        if method is None:
            what = _SYNTAX.get(type(node), f"{type(node).__name__} statements")
            raise UnsupportedSyntaxError(f"{what} are not supported inside a @metile.kernel", self.loc(node))
        method(self, node)

    def stmt_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring
        self.eval(node.value)

    def stmt_Pass(self, node: ast.Pass) -> None:
        return

    def stmt_Assign(self, node: ast.Assign) -> None:
        self.hint = node.targets[0].id if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) else None
        value = self.eval(node.value)
        self.hint = None
        for target in node.targets:
            self.assign(target, value)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.stmt_Assign(ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno,
                                        col_offset=node.col_offset))

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        if not isinstance(node.target, ast.Name):
            raise UnsupportedSyntaxError("augmented assignment only works on plain names inside a kernel",
                                         self.loc(node))
        value = sem.binary(_BINOPS[type(node.op)], self.lookup(node.target.id, node.target), self.eval(node.value),
                           self.loc(node))
        self.assign(node.target, value)

    def assign(self, target: ast.expr, value) -> None:
        loc = self.loc(target)
        match target:
            case ast.Name(id=name):
                self.env[name] = self.bind(value, name, loc)
                self.hidden.pop(name, None)
            case ast.Tuple(elts=elts) | ast.List(elts=elts):
                if not isinstance(value, (tuple, list)):
                    kind = "a traced value" if isinstance(value, Value) else type(value).__name__
                    raise KernelTypeError(f"cannot unpack {kind} into {len(elts)} names", loc)
                if len(value) != len(elts):
                    raise KernelTypeError(f"cannot unpack {len(value)} values into {len(elts)} names", loc)
                for t, v in zip(elts, value):
                    self.assign(t, v)
            case ast.Subscript():
                raise UnsupportedSyntaxError("assigning to an element (x[i] = ...) is not supported; write memory "
                                             "with metile.store(ptr, value)", loc)
            case _:
                raise UnsupportedSyntaxError(f"cannot assign to {type(target).__name__} inside a kernel", loc)

    def stmt_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            raise UnsupportedSyntaxError("a kernel cannot return a value; write results with metile.store",
                                         self.loc(node))
        raise UnsupportedSyntaxError("`return` is only supported as the last statement of a kernel", self.loc(node))

    def stmt_Assert(self, node: ast.Assert) -> None:
        from metile.frontend.errors import CompileTimeAssertionError

        cond = self.eval(node.test)
        if isinstance(cond, Value):
            raise RuntimeConditionError("`assert` needs a compile-time condition; this one is a traced value",
                                        self.loc(node))
        if not cond:
            msg = self.eval(node.msg) if node.msg is not None else "assertion failed"
            raise CompileTimeAssertionError(f"compile-time assertion failed: {msg}", self.loc(node))

    # ---- expressions

    def eval(self, node: ast.expr):
        cls = node.__class__
        if cls is ast.Name:  # the most common expression, looked up inline
            value = self.env.get(node.id, _UNSET)
            if value is _UNSET:
                value = self.lookup(node.id, node)
        else:
            method = _EXPRS.get(cls)
            if method is None:
                what = _SYNTAX.get(type(node), f"{type(node).__name__} expressions")
                raise UnsupportedSyntaxError(f"{what} are not supported inside a @metile.kernel", self.loc(node))
            value = method(self, node)
        return value.value if isinstance(value, constexpr) else value

    def expr_Constant(self, node: ast.Constant):
        return node.value

    def expr_Name(self, node: ast.Name):
        return self.lookup(node.id, node)

    def lookup(self, name: str, node: ast.AST):
        if name in self.env:
            return self.env[name]
        if name in self.hidden:
            raise UndefinedNameError(f"name '{name}' is not defined here: {self.hidden[name]}", self.loc(node))
        if name in self.globals:
            return self.globals[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise UndefinedNameError(f"name '{name}' is not defined", self.loc(node))

    def expr_Attribute(self, node: ast.Attribute):
        base = self.eval(node.value)
        loc = self.loc(node)
        if isinstance(base, Value):
            if node.attr == "shape":
                return tuple(base.type.shape)
            if node.attr == "dtype":
                return str(base.type.dtype)
            raise KernelTypeError(f"traced values have no attribute '{node.attr}' (only .shape and .dtype)", loc)
        try:
            return getattr(base, node.attr)
        except AttributeError:
            owner = getattr(base, "__name__", type(base).__name__)
            raise UndefinedNameError(f"'{owner}' has no attribute '{node.attr}'", loc) from None

    def expr_Tuple(self, node: ast.Tuple):
        return tuple(self.eval(e) for e in node.elts)

    def expr_List(self, node: ast.List):
        return [self.eval(e) for e in node.elts]

    def expr_BinOp(self, node: ast.BinOp):
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise UnsupportedSyntaxError("the `@` operator is not supported; use metile.dot(a, b)", self.loc(node))
        return sem.binary(op, self.eval(node.left), self.eval(node.right), self.loc(node))

    def expr_UnaryOp(self, node: ast.UnaryOp):
        x = self.eval(node.operand)
        loc = self.loc(node)
        match node.op:
            case ast.USub():
                return sem.unary("neg", x, loc)
            case ast.UAdd():
                return x
            case ast.Invert():
                return sem.unary("invert", x, loc)
        if isinstance(x, Value):
            raise RuntimeConditionError("`not` cannot take a traced value; use `~mask` or `x == 0`", loc)
        return not x

    def expr_BoolOp(self, node: ast.BoolOp):
        word, sym = ("and", "&") if isinstance(node.op, ast.And) else ("or", "|")
        value = None
        for operand in node.values:
            value = self.eval(operand)
            if isinstance(value, Value):
                raise RuntimeConditionError(f"`{word}` cannot take a traced value; combine masks with `{sym}` "
                                            "(with parentheses around comparisons)", self.loc(operand))
            if (word == "and") != bool(value):
                return value
        return value

    def expr_Compare(self, node: ast.Compare):
        left = self.eval(node.left)
        result = None
        for op, right_node in zip(node.ops, node.comparators):
            right = self.eval(right_node)
            name = _CMPOPS.get(type(op))
            loc = self.loc(node)
            if name is None:
                if isinstance(left, Value) or isinstance(right, Value):
                    raise KernelTypeError("`is`, `is not`, `in` and `not in` need compile-time operands", loc)
                part = {ast.Is: lambda a, b: a is b, ast.IsNot: lambda a, b: a is not b,
                        ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}[type(op)](left, right)
            else:
                part = sem.compare(name, left, right, loc)
            result = part if result is None else sem.binary("and", result, part, loc)
            if not isinstance(result, Value) and not result:
                return result
            left = right
        return result

    def expr_IfExp(self, node: ast.IfExp):
        cond = self.eval(node.test)
        if isinstance(cond, Value):
            raise RuntimeConditionError("a conditional expression needs a compile-time condition; use "
                                        "metile.where(cond, a, b) to select per element", self.loc(node))
        return self.eval(node.body if cond else node.orelse)

    def expr_Subscript(self, node: ast.Subscript):
        base = self.eval(node.value)
        loc = self.loc(node)
        if not isinstance(base, Value):
            key = self.eval(node.slice)
            try:
                return base[key]
            except (IndexError, KeyError, TypeError) as e:
                raise KernelTypeError(f"indexing failed at compile time: {e}", loc) from None
        return self.expand(base, node.slice, loc)

    def expand(self, base: Value, index: ast.expr, loc: Loc) -> Value:
        from metile.ir.tile import ExpandDims

        items = index.elts if isinstance(index, ast.Tuple) else [index]
        ndim = len(base.type.shape)
        if sum(isinstance(i, ast.Slice) for i in items) > ndim:
            raise ShapeError(f"too many `:` in the index of a {ndim}-D value", loc)
        out, axis = base, 0
        for item in items:
            if isinstance(item, ast.Constant) and item.value is None:
                out = ExpandDims(out, axis, loc=loc)
            elif not (isinstance(item, ast.Slice) and item.lower is None and item.upper is None and item.step is None):
                raise UnsupportedSyntaxError("tiles can only be indexed with `:` and `None` (x[:, None], "
                                             "x[None, :]); element indexing is not supported", loc)
            axis += 1
        return out

    def expr_Slice(self, node: ast.Slice):
        part = [None if e is None else self.eval(e) for e in (node.lower, node.upper, node.step)]
        return slice(*part)

    def expr_Call(self, node: ast.Call):
        fn = self.eval(node.func)
        loc = self.loc(node)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                args.extend(self.eval(a.value))
            else:
                args.append(self.eval(a))
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise UnsupportedSyntaxError("`**kwargs` in calls is not supported inside a kernel", loc)
            kwargs[kw.arg] = self.eval(kw.value)
        if fn in BUILTINS:
            return call_builtin(self, fn, args, kwargs, loc)
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


_UNSET = object()
_STMTS = {ast.Expr: Tracer.stmt_Expr, ast.Pass: Tracer.stmt_Pass, ast.Assign: Tracer.stmt_Assign,
          ast.AnnAssign: Tracer.stmt_AnnAssign, ast.AugAssign: Tracer.stmt_AugAssign, ast.Return: Tracer.stmt_Return,
          ast.Assert: Tracer.stmt_Assert, ast.If: Tracer.stmt_If, ast.For: Tracer.stmt_For,
          ast.While: Tracer.stmt_While, ast.With: Tracer.stmt_With}
_EXPRS = {ast.Constant: Tracer.expr_Constant, ast.Name: Tracer.expr_Name, ast.Attribute: Tracer.expr_Attribute,
          ast.Tuple: Tracer.expr_Tuple, ast.List: Tracer.expr_List, ast.BinOp: Tracer.expr_BinOp,
          ast.UnaryOp: Tracer.expr_UnaryOp, ast.BoolOp: Tracer.expr_BoolOp, ast.Compare: Tracer.expr_Compare,
          ast.IfExp: Tracer.expr_IfExp, ast.Subscript: Tracer.expr_Subscript, ast.Slice: Tracer.expr_Slice,
          ast.Call: Tracer.expr_Call}

ShapeError = sem.ShapeMismatchError

__all__ = ["Tracer", "node_locs"]
