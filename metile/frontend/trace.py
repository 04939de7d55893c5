"""The tracer: walks a kernel function's `ast` and builds a Tile IR `Kernel`.

Python-level values (constexprs, Python numbers, tuples, modules, functions) are evaluated at
compile time; traced values are IR `Value`s. An assignment of a traced expression binds it with a
`Let` named after the variable (suffixed to stay unique), so the IR reads like the source. Each
`Loc` is built once per ast node, offset by the function's first line and indentation, and kept with
the parsed source (`Prepared`). Expressions are evaluated by `metile.frontend.exprs`; control flow
(`if`, `for`, `while`, `with`) lives in `metile.frontend.control`.
"""

from __future__ import annotations

import ast

from metile.frontend import semantic as sem
from metile.frontend.container_calls import call_method, method
from metile.frontend.containers import MUTABLE, Region, check_key, own, set_item
from metile.frontend.control import ControlFlow
from metile.frontend.device_debug import device_assert
from metile.frontend.dialect import METILE, Dialect
from metile.frontend.errors import KernelTypeError, UnsupportedSyntaxError
from metile.frontend.exits import EXITS, RETURN, body_exits
from metile.frontend.exprs import BINOPS, EVAL, SYNTAX, lookup
from metile.frontend.funcs import return_from_func
from metile.frontend.replay import PYTHON_ERRORS
from metile.frontend.source import Prepared
from metile.ir.errors import Loc, MetileError
from metile.ir.names import ir_name
from metile.ir.ops import Stage
from metile.ir.stmts import Kernel, Let
from metile.ir.tile import Full, SimdgroupId, SimdLaneId, ThreadId
from metile.ir.types import SCALAR_TYPES, DType, PtrType
from metile.ir.values import Const, Param, SharedAlloc, SimdBroadcast, SimdReduce, SimdShuffleXor, Stmt, Value, Var
from metile.language import constexpr

_I32_T = SCALAR_TYPES[DType.I32]
_NAMED = frozenset({Var, Param, Const})   # the values an assignment binds as they are (no IR class derives from them)

THREAD_LEVEL = frozenset({ThreadId, SimdLaneId, SimdgroupId, SimdShuffleXor, SimdBroadcast, SimdReduce, SharedAlloc})
"""The values that make a kernel thread-level: it then runs one thread per element (docs/language.md section 8)."""

# What Python raises when the compile-time part of a statement misuses a value (the truth of a numpy array,
# arithmetic between a constexpr and a string, an index out of range, ...): reported at the statement.
_PYTHON_ERRORS = PYTHON_ERRORS


class _Statements(dict):
    """Per ast class, the function tracing its statements (`Tracer.stmt_*`); for the classes kernels may not
    use, one raising their error."""

    def __missing__(self, cls):
        return _unsupported


def _unsupported(tr, stmt: ast.stmt) -> None:
    cls = stmt.__class__
    raise tr.dialect.unsupported(SYNTAX.get(cls, f"{cls.__name__} statements"), tr.loc(stmt))


def _assign(tr, stmt: ast.Assign) -> None:
    """An assignment; to one name, with `Tracer.assign` and `Tracer.bind` inline."""
    targets = stmt.targets
    target = targets[0]
    if len(targets) != 1 or target.__class__ is not ast.Name:
        tr.assign_value(targets, stmt.value)
        return
    name, value = target.id, stmt.value
    tr.hint = name
    value = EVAL[value.__class__](tr, value)
    tr.hint = None
    if tr.assigned is not None:   # the language's rule for what an assignment binds
        value = tr.assigned(value, tr.loc(stmt.value))
    if value.__class__ not in _NAMED and isinstance(value, Value):
        loc = tr.locs.get(target) or tr.loc(target)
        var = Var(tr.fresh(name), value.type, loc=loc)
        tr.stmts.append(Let(var, value, loc=loc))
        if value.type.__class__ is PtrType:
            tr.pointers[var.name] = value
        elif value.__class__ is Full:
            tr.active[var.name] = var
        value = var
    tr.env[name] = value
    tr.hidden.pop(name, None)


def _expr(tr, stmt: ast.Expr) -> None:
    """An expression statement: its value is evaluated (a docstring is skipped)."""
    value = stmt.value
    if value.__class__ is ast.Constant and isinstance(value.value, str):
        return  # a docstring
    tr.unused = value   # the expression whose value nothing reads (a call may do less when its result is unused)
    EVAL[value.__class__](tr, value)


class Tracer(ControlFlow):
    """Builds the body of one kernel; `run()` returns the `Kernel`."""

    def __init__(self, fdef: ast.FunctionDef, *, name: str, file: str, line_offset: int, col_offset: int,
                 globals_: dict, env: dict, params: list[Param], meta: dict[str, int],
                 prepared: Prepared | None = None, dialect: Dialect = METILE):
        self.fdef, self.name, self.file = fdef, name, file
        self.dialect = dialect               # the rules of the kernel's language (`metile.frontend.dialect`)
        self.assigned = dialect.assigned     # read by every assignment
        self.unused: ast.expr | None = None  # the expression of the expression statement being traced
        self.line_offset, self.col_offset = line_offset, col_offset
        self.globals = globals_
        self.env: dict[str, object] = dict(env)
        self.params, self.meta = params, meta
        self.names: set[str] = {p.name for p in params}
        self.stmts: list[Stmt] = []
        self.depth = 0
        self.hidden: dict[str, str] = {}  # names defined only inside a runtime region -> why they are gone
        self.hint: str | None = None
        self.prepared = Prepared(file, line_offset, col_offset) if prepared is None else prepared
        self.loc = self.prepared.loc    # `tr.loc(node)`: the Loc of a node
        self.locs = self.prepared.locs  # read first by the hot paths: `tr.locs.get(node) or tr.loc(node)`
        self.taken: list[str] = []  # every fresh name, in order (`BodyMemo` records a statement's)
        self.subs: tuple | None = None  # how a statement traced again after a widening replays its parts (`widen`)
        self.calls: list[int] = []  # per @metile.func being traced (innermost last), the depth it was called at
        self.pointers: dict[str, Value] = {}   # the value each `Let` of a pointer binds (to find its array)
        # variables active at every element (`metile.frontend.matmul.active_everywhere`), by name
        self.active: dict[str, Var] = {}
        self.thread_level = False   # whether the kernel uses thread_id, simd_lane_id, shared or simdgroup exchanges
        self.lengths: dict[int, Param] = {}    # per pointer parameter index, the hidden length parameter
        self.owned: dict[int, tuple] = {}  # the lists and dicts the kernel's code built, by id: (it, its region)
        self.region = Region(None, "the kernel")  # where the trace is (`metile.frontend.containers`)
        self.statements = STMTS  # per ast class, the function tracing the statement (read by `visit_loop_body`)

    # ---- helpers used by builtins and control flow

    def fresh(self, base: str) -> str:
        if not base.isascii():
            base = ir_name(base)
        elif base[-1] == "!":   # a flag of `metile.frontend.exits` ("return!"): taken_return
            base = "taken_" + base[:-1]
        name, i = base, 1
        while name in self.names:
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        self.taken.append(name)
        return name

    def emit(self, stmt: Stmt) -> None:
        self.stmts.append(stmt)

    def bind(self, value, hint: str | None, loc: Loc | None, *, force: bool = False):
        """`value`, bound by a `Let` when it is a traced expression (always when `force`)."""
        if (not force and value.__class__ in _NAMED) or not isinstance(value, Value):
            return value
        var = Var(self.fresh(hint or "t"), value.type, loc=loc)
        self.emit(Let(var, value, loc=loc))
        if value.type.__class__ is PtrType:
            self.pointers[var.name] = value
        elif value.__class__ is Full:
            self.active[var.name] = var
        if value.__class__ in THREAD_LEVEL:
            self.thread_level = True
        return var

    def length_param(self, p: Param) -> Param:
        """The hidden parameter holding the number of elements of the array bound to pointer parameter `p`
        (`Param.length_of`), added after the user's parameters the first time it is asked for."""
        found = self.lengths.get(p.index)
        if found is None:
            found = Param(self.fresh(f"{p.name}_len"), len(self.params), _I32_T, length_of=p.index, loc=p.loc)
            self.params.append(found)
            self.lengths[p.index] = found
        return found

    def run(self) -> Kernel:
        body = self.fdef.body
        if "return" in body_exits(self.prepared, body):
            self.env[RETURN] = False
        self.visit_body(body)
        return Kernel(self.name, Stage.TILE, self.params, self.stmts, self.meta, loc=self.loc(self.fdef))

    # ---- statements

    def visit_body(self, body: list[ast.stmt]) -> None:
        for i, stmt in enumerate(body):
            cls = stmt.__class__
            try:
                STMTS[cls](self, stmt)
            except _PYTHON_ERRORS as e:
                raise self.python_error(e, stmt) from e
            if cls in EXITS and self.exiting(body, i + 1):  # a `break`, `continue` or `return` taken
                return

    def visit_stmt(self, node: ast.stmt) -> None:
        self.visit_body((node,))

    def python_error(self, e: Exception, node: ast.stmt) -> KernelTypeError:
        """A Python error raised by the compile-time part of statement `node` (the truth of a numpy array, a
        constexpr that cannot be added, ...), at that statement."""
        return KernelTypeError(f"running this statement at compile time raised {type(e).__name__}: {e}",
                               self.loc(node))

    def stmt_Pass(self, node: ast.Pass) -> None:
        return

    def assign_value(self, targets: list[ast.expr], value_node: ast.expr, *, static: bool = False) -> None:
        """`targets = value_node`; `static` keeps the value as it is (a name annotated `constexpr`), else the
        language's rule for assignments applies (`Dialect.assigned`)."""
        self.hint = targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else None
        value = self.eval(value_node)
        self.hint = None
        if self.assigned is not None and not static:
            value = self.assigned(value, self.loc(value_node))
        for target in targets:
            self.assign(target, value)

    def stmt_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.assign_value([node.target], node.value, static=self.assigned is not None
                              and self.annotated_constexpr(node.annotation))

    def annotated_constexpr(self, annotation: ast.expr) -> bool:
        """Whether `annotation` names `constexpr` (`x: tl.constexpr = 4`)."""
        try:
            return self.eval(annotation) is constexpr
        except MetileError:
            return False

    def stmt_AugAssign(self, node: ast.AugAssign) -> None:
        target, op, loc = node.target, BINOPS[type(node.op)], self.loc(node)
        match target:
            case ast.Name(id=name):
                current = self.lookup(name, target)
                if current.__class__ in MUTABLE:  # `xs += ys` changes the list in place, as in Python
                    self.augment_container(current, op, self.eval(node.value), name, loc)
                    return
                value = self.dialect.binary(op, current, self.eval(node.value), loc)
                self.assign(target, value if self.assigned is None else self.assigned(value, loc))
            case ast.Subscript(value=base_node, slice=key_node):
                base = self.eval(base_node)
                if isinstance(base, Value):
                    raise UnsupportedSyntaxError("assigning to an element (x[i] += ...) is not supported; write "
                                                 "memory with metile.store(ptr, value)", self.loc(target))
                key, name, at = self.eval(key_node), base_node.id if isinstance(base_node, ast.Name) else None, \
                    self.loc(target)
                if base.__class__ not in MUTABLE:
                    set_item(self, base, key, None, at, name)  # raises: only lists and dicts can be changed
                check_key(base, key, at)
                try:
                    current = base[key]
                except (IndexError, KeyError, TypeError) as e:
                    raise KernelTypeError(f"indexing failed at compile time: {e}", at) from None
                set_item(self, base, key, self.dialect.binary(op, current, self.eval(node.value), loc), at, name)
            case _:
                raise UnsupportedSyntaxError("augmented assignment only works on names and container items inside a "
                                             "kernel", loc)

    def augment_container(self, c, op: str, other, name: str, loc: Loc) -> None:
        """`c += other` (a list's `extend`, a dict's `|`) or `c *= n` on a list, in place."""
        if op == "add" and c.__class__ is list:
            call_method(self, method(c, "extend", name, loc), [other], {}, loc)
        elif op == "or" and c.__class__ is dict:
            call_method(self, method(c, "update", name, loc), [other], {}, loc)
        elif op == "mul" and c.__class__ is list and not isinstance(other, Value):
            call_method(self, method(c, "extend", name, loc), [c * (other - 1) if other > 1 else []], {}, loc)
            if other < 1:
                call_method(self, method(c, "clear", name, loc), [], {}, loc)
        else:
            raise KernelTypeError(f"`{sem.SYMBOLS.get(op, op)}=` is not defined on a {type(c).__name__}", loc)

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
                starred = [i for i, t in enumerate(elts) if isinstance(t, ast.Starred)]
                if len(starred) > 1:
                    raise UnsupportedSyntaxError("only one starred name may take the rest of an unpacking", loc)
                if starred:  # `first, *rest = xs`: `rest` is a new list of what the other names leave
                    i, tail = starred[0], len(elts) - starred[0] - 1
                    if len(value) < len(elts) - 1:
                        raise KernelTypeError(f"cannot unpack {len(value)} values into {len(elts) - 1} or more "
                                              "names", loc)
                    rest = own(self, list(value[i:len(value) - tail]))
                    value = [*value[:i], rest, *value[len(value) - tail:]]
                    elts = [*elts[:i], elts[i].value, *elts[i + 1:]]
                if len(value) != len(elts):
                    raise KernelTypeError(f"cannot unpack {len(value)} values into {len(elts)} names", loc)
                for t, v in zip(elts, value):
                    self.assign(t, v)
            case ast.Subscript(value=base_node, slice=key_node):
                base = self.eval(base_node)
                if isinstance(base, Value):
                    raise UnsupportedSyntaxError("assigning to an element (x[i] = ...) is not supported; write "
                                                 "memory with metile.store(ptr, value)", loc)
                set_item(self, base, self.eval(key_node), value, loc,
                         base_node.id if isinstance(base_node, ast.Name) else None)
            case _:
                raise UnsupportedSyntaxError(f"cannot assign to {type(target).__name__} inside a kernel", loc)

    def stmt_Return(self, node: ast.Return) -> None:
        if self.calls:  # in the body of a @metile.func
            return_from_func(self, node)
        if node.value is not None:
            raise UnsupportedSyntaxError("a kernel cannot return a value; write results with metile.store",
                                         self.loc(node))
        self.env[RETURN] = True   # the rest of the kernel is skipped, or guarded (`metile.frontend.exits`)

    def stmt_Assert(self, node: ast.Assert) -> None:
        from metile.frontend.errors import CompileTimeAssertionError

        cond = self.eval(node.test)
        if isinstance(cond, Value):   # checked on the device (`metile.frontend.device_debug`)
            msg = self.eval(node.msg) if node.msg is not None else ""
            device_assert(self, self.loc(node), cond, msg if isinstance(msg, str) else str(msg), what="assert")
            return
        if not cond:
            msg = self.eval(node.msg) if node.msg is not None else "assertion failed"
            raise CompileTimeAssertionError(f"compile-time assertion failed: {msg}", self.loc(node))

    # ---- expressions

    def eval(self, node: ast.expr):
        """The value of the expression `node` (see `metile.frontend.exprs`)."""
        return EVAL[node.__class__](self, node)

    def lookup(self, name: str, node: ast.AST):
        return lookup(self, name, node)


STMTS = _Statements({
    ast.Expr: _expr, ast.Pass: Tracer.stmt_Pass, ast.Assign: _assign, ast.AnnAssign: Tracer.stmt_AnnAssign,
    ast.AugAssign: Tracer.stmt_AugAssign, ast.Return: Tracer.stmt_Return, ast.Assert: Tracer.stmt_Assert,
    ast.If: Tracer.stmt_If, ast.For: Tracer.stmt_For, ast.While: Tracer.stmt_While, ast.With: Tracer.stmt_With,
    ast.Break: Tracer.stmt_Break, ast.Continue: Tracer.stmt_Continue})
__all__ = ["STMTS", "Prepared", "Tracer"]
