"""metile: write GPU kernels as tile programs in Python and run them as Metal Shading Language."""

from __future__ import annotations

from metile.debug import DebugSettingError
from metile.devices import Buffer, device, synchronize
from metile.frontend.errors import LoweringUnavailableError
from metile.ir.errors import Loc, MetileError
from metile.kernel import JITKernel, kernel
from metile.language import (  # noqa: A004 - the language shadows abs, max, min and sum on purpose
    abs,
    arange,
    atomic_add,
    barrier,
    cdiv,
    constexpr,
    dot,
    exp,
    load,
    log,
    max,
    maximum,
    min,
    minimum,
    next_power_of_2,
    program_id,
    shared,
    simd_broadcast,
    simd_lane_id,
    simd_shuffle_xor,
    simdgroup_role,
    sqrt,
    store,
    sum,
    tanh,
    thread_id,
    tile_load,
    tile_range,
    tile_store,
    tile_swizzle,
    where,
    zeros,
)
from metile.metal.errors import (
    BufferError,
    CompilerNotFoundError,
    DeviceError,
    DeviceFault,
    DeviceUnavailableError,
    LaunchError,
    MSLCompileError,
    MSLUnsupportedError,
)
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.pipeline import DEFAULT_PIPELINE, PipelineError

__all__ = [
    "Buffer", "BufferError", "CompilerNotFoundError", "DEFAULT_PIPELINE", "DebugSettingError",
    "LoweringUnavailableError",
    "PipelineError", "UnsupportedConstructError", "DeviceError", "DeviceFault", "DeviceUnavailableError",
    "LaunchError", "Loc", "MSLCompileError", "MSLUnsupportedError", "MetileError", "device", "synchronize",
    "JITKernel", "kernel", "constexpr", "abs", "arange", "atomic_add", "barrier", "cdiv", "dot", "exp", "load",
    "log", "max", "maximum", "min", "minimum", "next_power_of_2", "program_id", "shared", "simd_broadcast",
    "simd_lane_id", "simd_shuffle_xor", "simdgroup_role", "sqrt", "store", "sum", "tanh", "thread_id",
    "tile_load", "tile_range", "tile_store", "tile_swizzle", "where", "zeros",
]
__version__ = "0.1.0"
