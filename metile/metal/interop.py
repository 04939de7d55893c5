"""Arrays of other libraries as kernel arguments: torch tensors, MLX and JAX arrays, anything with `__dlpack__`,
and objects with the buffer protocol.

On a device that reads host memory (the CPU device, and the Apple GPU device through its staging), such an array
becomes a numpy view of its own memory (`host_view`); one in Metal memory goes to the Apple GPU device as it is,
which binds its buffer (`metile.metal.gpu.launch`). A host view is made with `numpy.from_dlpack` for DLPack
producers on the CPU, the buffer protocol otherwise. Strides are kept, as for numpy views. Element types numpy has
no name for (bfloat16 and the 8-bit floats of torch) are viewed through an integer type of their width and then as
`ml_dtypes`' type. Arrays of libraries whose arrays are immutable (JAX, MLX) are viewed read-only: a kernel that
writes one is refused after the launch, as for a read-only numpy array. An array on a device metile cannot reach
(CUDA, ROCm, ...) is refused.
"""

from __future__ import annotations

import numpy as np

from metile.metal.buffer import Buffer

DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_METAL, DL_ROCM = 1, 2, 3, 8, 10
_DEVICE_NAMES = {DL_CUDA: "CUDA", DL_CUDA_HOST: "CUDA host", 4: "OpenCL", 7: "Vulkan", DL_METAL: "Metal",
                 9: "VPI", DL_ROCM: "ROCm", 13: "CUDA managed", 14: "oneAPI"}
_IMMUTABLE = ("jax", "jaxlib", "mlx")   # libraries whose arrays must not be written behind their back
_NUMPY_NAMES = {"float32": "float32", "float16": "float16", "half": "float16", "float": "float32",
                "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
                "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "bool": "bool", "bool_": "bool",
                "float64": "float64", "double": "float64", "complex64": "complex64", "complex128": "complex128"}
_ML_DTYPES = {"bfloat16": "bfloat16", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}


class ForeignArrayError(ValueError):
    """Why a foreign array cannot be viewed (the caller turns it into an error at its parameter)."""


def is_foreign_array(value) -> bool:
    """Whether `value` is an array of another library: it has `__dlpack__`, or is a buffer-protocol object that is
    not a numpy array, a number, text or bytes."""
    cls = value.__class__
    if cls is np.ndarray or isinstance(value, (np.ndarray, np.generic, int, float, complex, str, bytes, Buffer)):
        return False
    return hasattr(cls, "__dlpack__") or isinstance(value, (memoryview, bytearray)) or _has_buffer(value)


def _has_buffer(value) -> bool:
    try:
        memoryview(value)
    except TypeError:
        return False
    return True


def foreign_dtype(value) -> np.dtype:
    """The numpy (or `ml_dtypes`) element type of a foreign array, read off its `dtype` by name (torch's
    `torch.bfloat16`, MLX's `mlx.core.float16`, JAX's numpy dtypes), or off its buffer's format."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return np.asarray(memoryview(value)).dtype
    return dtype_by_name(dtype)


def dtype_by_name(dtype) -> np.dtype:
    """A library's element type (torch's `torch.bfloat16`, MLX's `mlx.core.float16`, a numpy dtype) as numpy's (or
    `ml_dtypes`')."""
    if isinstance(dtype, np.dtype):
        return dtype
    name = str(dtype).rsplit(".", 1)[-1]
    if name in _NUMPY_NAMES:
        return np.dtype(_NUMPY_NAMES[name])
    if name in _ML_DTYPES:
        return _ml_dtype(name)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise ForeignArrayError(f"has the element type {dtype!r}, which metile does not know") from None


def _ml_dtype(name: str) -> np.dtype:
    try:
        import ml_dtypes
    except ImportError:
        raise ForeignArrayError(f"is a {name} array: install ml_dtypes (pip install ml-dtypes) for metile to read "
                                f"{name} arrays on the host") from None
    return np.dtype(getattr(ml_dtypes, _ML_DTYPES[name]))


def device_of(value) -> tuple[int, int]:
    """`value.__dlpack_device__()`, or the CPU for a buffer-protocol object."""
    probe = getattr(value, "__dlpack_device__", None)
    if probe is None:
        return (DL_CPU, 0)
    kind, index = probe()
    return int(kind), int(index)


def host_view(value) -> np.ndarray:
    """A numpy view of a foreign array's memory (no copy), with its shape, strides and element type (see the module
    docstring); `ForeignArrayError` when it lives on a device metile cannot read or has an unknown element type."""
    kind, _ = device_of(value)
    if kind != DL_CPU:
        where = _DEVICE_NAMES.get(kind, f"device type {kind}")
        if kind == DL_METAL:
            raise ForeignArrayError("is in Metal memory (a torch 'mps' tensor, say), which only the Metal device "
                                    "binds: launch on metile.device('metal'), or pass a CPU tensor (`.cpu()`)")
        raise ForeignArrayError(f"is on a {where} device, which metile cannot reach: copy it to the CPU first")
    want = foreign_dtype(value)
    if hasattr(value.__class__, "__dlpack__"):
        view = _from_dlpack(value, want)
    else:
        view = np.asarray(memoryview(value))
        if view.dtype != want:
            view = view.view(want)
    if (type(value).__module__ or "").split(".", 1)[0] in _IMMUTABLE and view.flags.writeable:
        view = view.view()
        view.flags.writeable = False
    return view


def _from_dlpack(value, want: np.dtype) -> np.ndarray:
    if want.kind in "fiub" and want.type.__module__ == "numpy":   # a type numpy's DLPack reader knows
        return np.from_dlpack(value)
    # bfloat16 and 8-bit floats: read as unsigned integers of their width, then reinterpreted
    carrier = getattr(value, "view", None) or getattr(value, "astype", None)
    if carrier is not None and type(value).__module__.split(".", 1)[0] == "torch":
        import torch

        raw = np.from_dlpack(carrier({1: torch.uint8, 2: torch.int16}[want.itemsize]))
        return raw.view(want)
    if carrier is not None and type(value).__module__.split(".", 1)[0] == "mlx":   # an MLX array (read-only)
        import mlx.core as mx

        return np.asarray(mx.view(value, {1: mx.uint8, 2: mx.uint16}[want.itemsize])).view(want)
    try:
        return np.from_dlpack(value)
    except (BufferError, TypeError, RuntimeError):
        pass
    try:   # JAX and MLX arrays expose such types through numpy's array protocol (ml_dtypes)
        view = np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as e:
        raise ForeignArrayError(f"is a {want.name} array metile cannot view without a copy ({e})") from None
    return view if view.dtype == want else view.view(want)


__all__ = ["DL_CPU", "DL_CUDA", "DL_METAL", "ForeignArrayError", "device_of", "dtype_by_name", "foreign_dtype",
           "host_view",
           "is_foreign_array"]
