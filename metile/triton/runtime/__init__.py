"""`triton.runtime` on metile: the driver, `JITFunction`, the autotuner and Triton's runtime errors."""

from __future__ import annotations

from metile.triton.autotuner import Autotuner, Config, Heuristics, autotune, heuristics
from metile.triton.errors import InterpreterError, OutOfResources
from metile.triton.jit import JITFunction, KernelInterface
from metile.triton.runtime.driver import driver
from metile.triton.runtime.jit import MockTensor, TensorWrapper, reinterpret

__all__ = ["Autotuner", "Config", "Heuristics", "InterpreterError", "JITFunction", "KernelInterface", "MockTensor",
           "OutOfResources", "TensorWrapper", "autotune", "driver", "heuristics", "reinterpret"]
