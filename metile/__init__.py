"""metile: write GPU kernels as tile programs in Python and run them as Metal Shading Language."""

from __future__ import annotations

from metile.devices import Buffer, device, synchronize
from metile.ir.errors import Loc, MetileError
from metile.metal.errors import (
    CompilerNotFoundError,
    DeviceError,
    DeviceFault,
    DeviceUnavailableError,
    LaunchError,
    MSLCompileError,
    MSLUnsupportedError,
)

__all__ = [
    "Buffer", "CompilerNotFoundError", "DeviceError", "DeviceFault", "DeviceUnavailableError", "LaunchError",
    "Loc", "MSLCompileError", "MSLUnsupportedError", "MetileError", "device", "synchronize",
]
__version__ = "0.1.0"
