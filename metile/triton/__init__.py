"""`triton` served by metile: Triton kernels (`@triton.jit`, `triton.language`) run unchanged on metile's devices.

Switch it on with `metile.triton.install()` (then `import triton` anywhere in the process gives this package), or run
a program with `python -m metile.triton script.py` / `python -m metile.triton -m pytest ...`. docs/triton.md says
what is served, what is refused (`NotSupportedYetError`) and where metile differs.

`__version__` is the Triton API level served ("3.4.0"): `triton.language` has Triton 3.4's names and semantics.
"""

from __future__ import annotations

from metile.triton import compiler, language, runtime, testing
from metile.triton.autotuner import Autotuner, Config, Heuristics, autotune, heuristics
from metile.triton.errors import (
    CompilationError,
    InterpreterError,
    NotSupportedYetError,
    OutOfResources,
    TritonError,
)
from metile.triton.install import install, installed, uninstall
from metile.triton.jit import JITFunction, KernelInterface, jit, launch_options
from metile.triton.language.core import must_use_result
from metile.triton.runtime.jit import MockTensor, TensorWrapper, reinterpret

__version__ = "3.4.0"

_allocator = None


def set_allocator(allocator) -> None:
    """Triton's allocator of scratch memory for tensor descriptors: kept, and unused (metile has none yet)."""
    global _allocator
    _allocator = allocator


def cdiv(x, y):
    """`(x + y - 1) // y`, on the host (Triton's `triton.cdiv`)."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """The smallest power of 2 >= n (Triton's `triton.next_power_of_2`: 0 for n = 0)."""
    n -= 1
    for shift in (1, 2, 4, 8, 16, 32):
        n |= n >> shift
    return n + 1


__all__ = [
    "Autotuner", "CompilationError", "Config", "Heuristics", "InterpreterError", "JITFunction", "KernelInterface",
    "MockTensor", "NotSupportedYetError", "OutOfResources", "TensorWrapper", "TritonError", "autotune", "cdiv",
    "compiler", "heuristics", "install", "installed", "jit", "language", "launch_options", "must_use_result",
    "next_power_of_2", "reinterpret", "runtime", "set_allocator", "testing", "uninstall",
]
