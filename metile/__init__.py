"""metile: write GPU kernels as tile programs in Python and run them as Metal Shading Language.

`import metile` loads nothing but this module: each public name is imported from the module that defines it
the first time it is read (PEP 562's module `__getattr__`), so `import metile.layout` or `import metile.ir` costs
only what those packages need, and no device (`metile.metal`: the C++ toolchain, cffi, the Objective-C shim)
loads before a kernel is compiled, a `metile.Buffer` made or `metile.device()` called. `_PUBLIC` says where
each name lives; a name read once is then an ordinary attribute of the module.
"""

from __future__ import annotations

import importlib
import sys
import types

_LANGUAGE = (  # the kernel language, `metile.language`
    "abs", "arange", "argmax", "argmin", "associative_scan", "atomic_add", "atomic_and", "atomic_cas", "atomic_max",
    "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor", "barrier", "bfloat16", "bool_", "broadcast_to", "cast",
    "cdiv", "ceil", "clamp", "constexpr", "cos", "cumprod", "cumsum", "device_assert", "device_print", "dot", "erf",
    "exp", "exp2", "expand_dims", "fast_exp", "flip", "float16", "float32", "float8_e4m3", "float8_e5m2",
    "float8e4nv", "float8e5", "floor", "fma", "full", "gather", "histogram", "int1", "int16", "int32", "int64",
    "int8", "interleave", "join", "load", "log", "log2", "max", "max_constancy", "max_contiguous", "maximum", "min",
    "minimum", "multiple_of", "next_power_of_2", "num_programs", "permute", "pow", "program_id", "rand", "rand4x",
    "randint", "randint4x", "randn", "randn4x", "ravel", "reduce", "reshape", "reverse_bits", "rsqrt", "scalar",
    "shared", "sigmoid", "simd_broadcast", "simd_lane_id", "simd_max", "simd_shuffle_xor", "simd_sum",
    "simdgroup_role", "sin", "sort", "split", "sqrt", "static_range", "store", "sum", "tanh", "thread_id",
    "tile_load", "tile_range", "tile_store", "tile_swizzle", "topk", "trans", "uint16", "uint32", "uint64", "uint8",
    "where", "zeros",
)
_PUBLIC: dict[str, str] = {  # public name -> the module defining it
    **dict.fromkeys(_LANGUAGE, "metile.language"),
    **dict.fromkeys(("Loc", "MetileError"), "metile.ir.errors"),
    **dict.fromkeys(("AutotuneError", "Config", "autotune"), "metile.autotune"),
    "DebugSettingError": "metile.debug",
    **dict.fromkeys(("Buffer", "device", "synchronize"), "metile.devices"),
    "LoweringUnavailableError": "metile.frontend.errors",
    "func": "metile.frontend.funcs",
    **dict.fromkeys(("MslArtifact", "compile_to_msl"), "metile.emit.artifact"),
    **dict.fromkeys(("JITKernel", "kernel"), "metile.kernel"),
    **dict.fromkeys(("BufferError", "CompilerNotFoundError", "DeviceError", "DeviceFault", "DeviceUnavailableError",
                     "FunctionConstantError", "LaunchError", "MSLCompileError", "MSLCompileWarning",
                     "MSLUnsupportedError", "MetalExportError", "ProfileError"), "metile.metal.errors"),
    **dict.fromkeys(("Estimate", "Profile", "UnknownGpuError"), "metile.profile"),
    "UnsupportedConstructError": "metile.rewrite.errors",
    **dict.fromkeys(("AppleTarget", "TargetError", "target"), "metile.ir.target"),
    **dict.fromkeys(("DEFAULT_PIPELINE", "PipelineError"), "metile.rewrite.pipeline"),
    "testing": "",   # a module of its own, `metile.testing`
}
__all__ = sorted(_PUBLIC)
__version__ = "0.1.0"


def __getattr__(name: str):
    """A public name, imported from its module on first read (and kept here); else a submodule of metile."""
    where = _PUBLIC.get(name)
    if where is None:
        if name.startswith("__"):
            raise AttributeError(f"module 'metile' has no attribute {name!r}")
        try:
            return importlib.import_module(f"metile.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"metile.{name}":
                raise
            raise AttributeError(f"module 'metile' has no attribute {name!r}") from None
    value = importlib.import_module(f"metile.{name}") if not where else getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


class _Package(types.ModuleType):
    """The class of this module: importing the submodule `metile.kernel` (or `metile.autotune`) for the first time
    makes the import system set the package's attribute of that name to the module, which would hide the function
    `metile.kernel` (`metile.autotune`) of the same name; the function stays."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and _PUBLIC.get(name) == value.__name__ == f"metile.{name}":
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
