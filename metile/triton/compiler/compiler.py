"""`triton.compiler.compiler`: the names programs import from Triton's compiler module. metile compiles a Triton
kernel at its first launch (or with `kernel.warmup(...)`), not through Triton's staged `compile()`, so `ASTSource`
and `make_backend` refuse with `NotSupportedYetError` when used; `CompiledKernel` is what a warm-up returns, and
`triton_key()` names the compiler (metile's version and the Triton API level it serves)."""

from __future__ import annotations

from metile.triton.backends.compiler import GPUTarget
from metile.triton.compiler import compile  # noqa: A004 - Triton's name
from metile.triton.errors import NotSupportedYetError
from metile.triton.jit import CompiledKernel
from metile.triton.runtime.cache import triton_key


class ASTSource:
    """Triton's source of its staged `compile()`, which metile does not have."""

    def __init__(self, fn, signature, constexprs=None, attrs=None):
        raise NotSupportedYetError("triton.compiler.ASTSource is not supported by metile: a kernel compiles at its "
                                   "first launch, or with kernel.warmup(*args, grid=...)")


def make_backend(target: GPUTarget):
    """Triton's compiler plug-in for `target`: metile has none (`triton.backends.backends` is empty)."""
    raise NotSupportedYetError(f"metile has no Triton compiler backend (asked for {target}): it compiles Triton "
                               "kernels itself, at their first launch")


__all__ = ["ASTSource", "CompiledKernel", "GPUTarget", "compile", "make_backend", "triton_key"]
