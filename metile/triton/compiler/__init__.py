"""`triton.compiler`: `CompiledKernel` and `CompilationError`. Triton's ahead-of-time `compile()` is not part of
metile (kernels compile when launched, or with `kernel.warmup(...)`)."""

from __future__ import annotations

from metile.triton.errors import CompilationError, NotSupportedYetError
from metile.triton.jit import CompiledKernel


def compile(src, target=None, options=None):  # noqa: A001 - Triton's name
    raise NotSupportedYetError("triton.compile() is not supported by metile: a kernel compiles at its first launch, "
                               "or with kernel.warmup(*args, grid=...)")


__all__ = ["CompilationError", "CompiledKernel", "compile"]
