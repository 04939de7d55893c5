"""`@metile.func`: Python functions that kernels (and other such functions) call, inlined where they are called.

A call to a `Func` inside a kernel traces the function's body in place, with its parameters bound to the call's
arguments (traced values, Python values, tuples, other functions), its own names and its own module's globals:
the statements it emits join the kernel's, and its `return` value is the call's value. Errors inside it are
reported at its own lines, with a note naming the call that led there. A `return` may sit anywhere that tracing
decides at compile time (after the last statement, in a compile-time `if` or an unrolled `for`), not inside a
runtime `if`, loop or role block. Calls may nest (recursion that stops at compile time included) up to
`MAX_DEPTH` deep.
"""

from __future__ import annotations

import ast
import functools
import inspect
import types

from metile.frontend.errors import KernelArgumentError, KernelTypeError, OutsideKernelError, UnsupportedSyntaxError
from metile.frontend.source import parsed, visible_names
from metile.ir.errors import Loc, MetileError
from metile.language import constexpr

MAX_DEPTH = 64


class Func:
    """A function that `@metile.kernel` functions may call (`@metile.func`); inlined by the tracer."""

    def __init__(self, fn):
        if not isinstance(fn, types.FunctionType):
            raise UnsupportedSyntaxError(f"@metile.func applies to functions written with `def`, not to "
                                         f"{type(fn).__name__} {fn!r:.60}")
        self.fn = fn
        functools.update_wrapper(self, fn)
        self._signature: inspect.Signature | None = None

    @property
    def signature(self) -> inspect.Signature:
        if self._signature is None:
            self._signature = inspect.signature(self.fn)
        return self._signature

    def __call__(self, *args, **kwargs):
        raise OutsideKernelError(f"{self.fn.__name__}() is a @metile.func: it can only be called inside a "
                                 "@metile.kernel (or another @metile.func)")

    def __repr__(self) -> str:
        return f"<metile.func {self.fn.__module__}.{self.fn.__qualname__}>"


def func(fn):
    """Decorator: `@metile.func` marks a helper function that kernels may call (it is inlined)."""
    return Func(fn)


class Returned(Exception):  # noqa: N818 - control flow, not an error
    """A `return` statement reached while tracing a `Func`'s body: carries its value to the call."""

    def __init__(self, value):
        super().__init__()
        self.value = value


def call_func(tr, f: Func, args: list, kwargs: dict, loc: Loc):
    """The value of the call `f(*args, **kwargs)` in the tracer `tr`, its body traced in place."""
    name = f.fn.__name__
    try:
        bound = f.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise KernelArgumentError(f"{name}(): {e}", loc) from None
    bound.apply_defaults()
    if len(tr.calls) >= MAX_DEPTH:
        raise KernelTypeError(f"calls of @metile.func functions nest more than {MAX_DEPTH} deep here (a recursion "
                              "that does not stop at compile time?)", loc)
    source = parsed(f.fn, "metile.func")
    fdef = source.fdef
    if not isinstance(fdef, ast.FunctionDef):
        raise UnsupportedSyntaxError("@metile.func applies to plain `def` functions", loc)
    env = {k: v.value if isinstance(v, constexpr) else v for k, v in bound.arguments.items()}
    saved = (tr.env, tr.hidden, tr.prepared, tr.loc, tr.locs, tr.globals, tr.hint)
    tr.env, tr.hidden, tr.hint = env, {}, None
    tr.prepared = source.prepared
    tr.loc, tr.locs = source.prepared.loc, source.prepared.locs
    tr.globals = visible_names(f.fn)
    tr.calls.append(tr.depth)
    try:
        tr.visit_body(fdef.body)
        result = None
    except Returned as r:
        result = r.value
    except MetileError as e:
        note = f"in @metile.func {name}(), called at {loc}"
        if hasattr(e, "add_note"):
            e.add_note(note)
        raise
    finally:
        tr.calls.pop()
        tr.env, tr.hidden, tr.prepared, tr.loc, tr.locs, tr.globals, tr.hint = saved
    return result


def return_from_func(tr, node: ast.Return) -> None:
    """A `return` in a `Func`'s body: the call's value, unless it sits inside a runtime construct."""
    if tr.depth != tr.calls[-1]:
        raise UnsupportedSyntaxError("a @metile.func can only `return` where tracing decides it (not inside a runtime "
                                     "`if`, loop or simdgroup_role block): assign the value to a variable there and "
                                     "return it after", tr.loc(node))
    raise Returned(None if node.value is None else tr.eval(node.value))


__all__ = ["MAX_DEPTH", "Func", "Returned", "call_func", "func", "return_from_func"]
