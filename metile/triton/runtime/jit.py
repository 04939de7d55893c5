"""`triton.runtime.jit`: `JITFunction`, `jit` and Triton's tensor wrappers, which metile does not support yet."""

from __future__ import annotations

from metile.triton.errors import NotSupportedYetError
from metile.triton.jit import CompiledKernel, JITFunction, KernelInterface, jit


class MockTensor:
    """Triton's stand-in for a tensor given to `warmup` by dtype: metile warms kernels up with real arrays."""

    def __init__(self, dtype):
        raise NotSupportedYetError("triton.MockTensor is not supported by metile yet: warm a kernel up with arrays")

    @staticmethod
    def wrap_dtype(arg):
        return arg


class TensorWrapper:
    """Triton's reinterpretation of a tensor's dtype (not supported by metile yet)."""

    def __init__(self, base, dtype):
        raise NotSupportedYetError("triton.TensorWrapper (triton.reinterpret) is not supported by metile yet: view "
                                   "the array with the dtype instead (tensor.view(torch.float16))")


def reinterpret(tensor, dtype):
    return TensorWrapper(tensor, dtype)


__all__ = ["CompiledKernel", "JITFunction", "KernelInterface", "MockTensor", "TensorWrapper", "jit", "reinterpret"]
