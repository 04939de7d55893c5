"""The errors of metile's Triton front end, and the names Triton programs catch.

`NotSupportedYetError` is raised at the kernel's line for a part of `triton.language` that metile does not compile
yet (a name, a method of a tensor, a Python construct Triton kernels may use); every other mistake raises the
frontend's own errors (`metile.frontend.errors`). Triton's exception classes are served as metile's: `TritonError`
is `metile.MetileError` and `CompilationError` the frontend's `FrontendError`, so that `except
triton.CompilationError` catches the errors of tracing a kernel.
"""

from __future__ import annotations

from metile.frontend.errors import FrontendError, KernelTypeError
from metile.ir.errors import MetileError
from metile.metal.errors import LaunchError

TritonError = MetileError
CompilationError = FrontendError


class NotSupportedYetError(FrontendError):
    """A part of `triton.language` (a function, a tensor method, a construct) that metile does not compile yet."""


class OutOfResources(LaunchError):
    """A kernel that needs more threadgroup memory or threads than the device has (Triton's name)."""


class InterpreterError(MetileError):
    """Triton's interpreter is not part of metile (`TRITON_INTERPRET` has no effect)."""


class PTXASError(MetileError):
    """Never raised: metile compiles MSL, not PTX; the name exists for programs that catch it."""


def not_yet(what: str, loc, why: str = "") -> NotSupportedYetError:
    """The error for `what` (a Triton name or construct) at `loc`."""
    return NotSupportedYetError(f"{what} is not supported by metile yet{': ' + why if why else ''}", loc)


__all__ = ["CompilationError", "InterpreterError", "KernelTypeError", "NotSupportedYetError", "OutOfResources",
           "PTXASError", "TritonError", "not_yet"]
