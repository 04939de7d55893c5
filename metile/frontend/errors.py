"""The errors the frontend raises for user mistakes; each is a `MetileError` rendered at a `Loc`.

Every class names one kind of mistake so that tests and users can catch it precisely; the message
carries the details.
"""

from __future__ import annotations

from metile.ir.errors import MetileError


class FrontendError(MetileError):
    """A mistake in a kernel's source or in how it is called."""


class OutsideKernelError(FrontendError):
    """A `metile` language function was called as ordinary Python, outside a `@metile.kernel`."""


class KernelSourceError(FrontendError):
    """The source of a kernel function cannot be read (defined at an interactive prompt, by `exec`, or in a
    module shipped without its `.py` file): metile traces a kernel from its source."""


class UnsupportedSyntaxError(FrontendError):
    """Python syntax that kernels do not support (lambda, try, with, class, comprehensions...)."""


class UndefinedNameError(FrontendError):
    """A name that is neither a local, a parameter, a global nor a builtin."""


class UnsupportedCallError(FrontendError):
    """A call to something that is not a `metile` function or an allowed Python builtin."""


class KernelTypeError(FrontendError):
    """A wrong element type or a wrong kind of value (a pointer where a number is needed...)."""


class ShapeMismatchError(FrontendError):
    """Tile shapes that do not broadcast, or that an operation cannot take."""


class ConstexprRequiredError(FrontendError):
    """A runtime value where a compile-time value (constexpr, Python number) is needed."""


class RuntimeConditionError(FrontendError):
    """A traced value used where Python needs a truth value and no runtime construct applies."""


class KernelArgumentError(FrontendError):
    """Wrong argument count, kind or type at trace or launch, or a missing constexpr."""


class GridError(FrontendError):
    """A launch grid that is not 1 to 3 positive integers."""


class CompileTimeAssertionError(FrontendError):
    """An `assert` on compile-time values failed while tracing."""


class LoweringUnavailableError(FrontendError):
    """The launch needs the lowering passes to Metal, which do not exist yet."""


__all__ = [
    "CompileTimeAssertionError", "ConstexprRequiredError", "FrontendError", "GridError", "KernelArgumentError",
    "KernelTypeError", "LoweringUnavailableError", "OutsideKernelError", "RuntimeConditionError",
    "ShapeMismatchError", "UndefinedNameError", "UnsupportedCallError", "UnsupportedSyntaxError",
]
