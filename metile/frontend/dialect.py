"""The rules a surface language brings to the tracer (`Dialect`), and metile's own (`METILE`).

The tracer walks a kernel's Python and builds Tile IR. What its operators mean, which functions it may call, what
an assignment binds, which loops run on the device and how a launch's arguments are typed are rules of the kernel's
language, not of the tracer: a `Dialect` holds them, and every kernel is traced with one (`JITKernel(dialect=...)`).
`METILE` is the language of `@metile.kernel` (docs/language.md); `metile.triton` defines Triton's for `@triton.jit`
kernels. A dialect only chooses which Tile IR the tracer builds: the passes never know which language a kernel was
written in, and the two never share a rule they disagree on (a `@metile.func` cannot be called from a Triton kernel,
nor a Triton function from a metile kernel).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs

from metile import language as L
from metile.frontend import logic
from metile.frontend import semantic as sem
from metile.frontend.binding import bind_values
from metile.frontend.errors import UnsupportedSyntaxError
from metile.frontend.exprs import CALLS, value_attribute
from metile.frontend.funcs import Func
from metile.ir.errors import Loc, MetileError


def _tile_range(tr, loc: Loc, args: list, kwargs: dict) -> tuple:
    """`metile.tile_range(start, stop, step=1, num_stages=None)` as the bounds of a runtime loop."""
    return tuple(bind_values(L.tile_range, args, kwargs, loc))   # its parameters, in that order


def _unsupported(what: str, loc: Loc | None) -> MetileError:
    return UnsupportedSyntaxError(f"{what} are not supported inside a @metile.kernel", loc)


def _same(f: Func) -> Func:
    return f


@attrs.frozen
class Dialect:
    """A surface language's rules, as the tracer and the launch consult them.

    Tracing:
    - `binary(op, a, b, loc)`, `compare(op, a, b, loc)`, `unary(op, x, loc)`: the operators (op names as in
      `metile.frontend.semantic`: "add", "floordiv", "lt", "neg", ...), on traced values and Python numbers.
    - `calls`: per function object of the language, its implementation `impl(tracer, loc, *arguments)`, the
      arguments bound by `bind(fn, args, kwargs, loc)`.
    - `attribute(tracer, value, name, loc)`: `value.name` of a traced value (`.shape`, `.dtype`, methods).
    - `helpers`: per class of callable, how to reach the `Func` a call of it inlines (`@metile.func` helpers).
    - `loops`: per function object whose call may be a `for` loop's iterable, the bounds of the runtime loop it
      makes, `(start, stop, step, num_stages)` from `(tracer, loc, args, kwargs)`.
    - `runtime_range`: a Python `range` of compile-time bounds is a runtime loop too (else it is unrolled).
    - `assigned(value, loc)`: what a name assignment binds for `value` (None: `value` itself).
    - `unsupported(what, loc)`: the error for a Python construct the language lacks in metile ("try statements").
    - `boolop(tracer, word, operand_nodes, loc)`: `and` or `or` (`word`) of the operands (ast nodes, evaluated in
      order by the rule); `logical_not(tracer, value, node)`: `not value`.
    - `traced_identity`: `is` and `is not` may compare a traced value, by Python identity (`ptr is None`).
    - `name`: how messages name a kernel of the language.

    Launching:
    - `arg_type(spec, value)`: the IR type of a runtime argument (None: metile's own,
      `metile.frontend.specialize.arg_type`).
    - `static_arg(value)`: true for an argument a runtime parameter takes as a compile-time value in this call
      (None: no such arguments).
    - `one_as_number`: an integer argument equal to 1, which is specialised on, reads as the Python number 1 in the
      kernel's body (else as the traced constant 1).
    - `composite(spec, value)`: for an argument passed as several (`metile.frontend.composite_args`), `(template,
      [(part name, part value)])`; None for the others (None: no such arguments).
    """

    name: str
    binary: Callable
    compare: Callable
    unary: Callable
    calls: Mapping
    attribute: Callable
    bind: Callable = bind_values
    helpers: Mapping = attrs.field(factory=dict)
    loops: Mapping = attrs.field(factory=dict)
    runtime_range: bool = False
    assigned: Callable | None = None
    unsupported: Callable = _unsupported
    boolop: Callable = logic.boolop
    logical_not: Callable = logic.logical_not
    traced_identity: bool = False
    arg_type: Callable | None = None
    static_arg: Callable | None = None
    one_as_number: bool = False
    composite: Callable | None = None


METILE = Dialect(name="@metile.kernel", binary=sem.binary, compare=sem.compare, unary=sem.unary, calls=CALLS,
                 attribute=value_attribute, helpers={Func: _same}, loops={L.tile_range: _tile_range})
"""The kernel language of `@metile.kernel` (docs/language.md)."""

__all__ = ["METILE", "Dialect"]
