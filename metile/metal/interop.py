"""Arrays of other libraries as kernel arguments: torch tensors, MLX and JAX arrays, anything with `__dlpack__`,
and objects with the buffer protocol.

On a device that reads host memory (the CPU device, and the Apple GPU device through its staging), such an array
becomes a numpy view of its own memory (`host_view`); one in Metal memory goes to the Apple GPU device as it is,
which binds its buffer (`metile.metal.gpu.launch`). A host view is made with `numpy.from_dlpack` for DLPack
producers on the CPU, the buffer protocol otherwise. Strides are kept, as for numpy views. Element types numpy has
no name for (bfloat16 and the 8-bit floats of torch) are viewed through an integer type of their width and then as
`ml_dtypes`' type. Arrays of libraries whose arrays are immutable (JAX, MLX) are viewed read-only: a kernel that
writes one is refused after the launch, as for a read-only numpy array. An MLX array that reports Metal memory (as
MLX does on a Mac, whose memory is unified) is read on the host through its buffer protocol. Another array on a
device metile cannot reach (CUDA, ROCm, ...) is refused. `metal_export_problem` says which library versions do not
hand over the Metal buffer of an array in Metal memory (MLX before 0.32, torch before 2.9).

A torch tensor is first made one whose memory holds its values (`plain_array`): one that requires grad is read
through `.detach()`, which shares its memory (the kernel may read and write it, as Triton's do); one whose values are
a lazy view of its memory (the negative or conjugate bit, a zero tensor of autograd) is read through a copy with the
view resolved, and refused where the kernel writes it, since writes could not land in its memory as its values; a
layout without strided memory (sparse, mkldnn, nested) is refused. `TensorWatch` is what a prepared launch compares
before each call to see whether a tensor's memory moved (`resize_`, `set_`, a storage resized) since it was bound.
"""

from __future__ import annotations

import re
import sys

import numpy as np

from metile.metal.buffer import Buffer

DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_METAL, DL_ROCM = 1, 2, 3, 8, 10
_DEVICE_NAMES = {DL_CUDA: "CUDA", DL_CUDA_HOST: "CUDA host", 4: "OpenCL", 7: "Vulkan", DL_METAL: "Metal",
                 9: "VPI", DL_ROCM: "ROCm", 13: "CUDA managed", 14: "oneAPI"}
IMMUTABLE_LIBRARIES = ("jax", "jaxlib", "mlx")   # libraries whose arrays must not be written behind their back
_NUMPY_NAMES = {"float32": "float32", "float16": "float16", "half": "float16", "float": "float32",
                "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
                "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "bool": "bool", "bool_": "bool",
                "float64": "float64", "double": "float64", "complex64": "complex64", "complex128": "complex128"}
_ML_DTYPES = {"bfloat16": "bfloat16", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}
_EXTRAS = {"torch": "torch", "mlx": "mlx", "jax": "jax", "jaxlib": "jax"}   # each library's extra of metile


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
    return dtype_by_name(dtype, library_of(value))


def dtype_by_name(dtype, library: str = "") -> np.dtype:
    """A library's element type (torch's `torch.bfloat16`, MLX's `mlx.core.float16`, a numpy dtype) as numpy's (or
    `ml_dtypes`'); `library` (the array's, "torch" say) names the extra of metile to install when `ml_dtypes` is
    missing."""
    if isinstance(dtype, np.dtype):
        return dtype
    name = str(dtype).rsplit(".", 1)[-1]
    if name in _NUMPY_NAMES:
        return np.dtype(_NUMPY_NAMES[name])
    if name in _ML_DTYPES:
        return _ml_dtype(name, library)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise ForeignArrayError(f"has the element type {dtype!r}, which metile kernels do not take (they take arrays "
                                "of float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, int8, int16, int32, int64, "
                                "uint8, uint16, uint32, uint64 and bool)") from None


def _ml_dtype(name: str, library: str) -> np.dtype:
    try:
        import ml_dtypes
    except ImportError:
        extra = _EXTRAS.get(library)
        how = (f"pip install 'metile[{extra}]', which installs what {library} arrays need (or pip install ml-dtypes)"
               if extra else "pip install ml-dtypes")
        raise ForeignArrayError(f"is a {name} array, which metile reads on the host as a type of the ml_dtypes "
                                f"package, not installed: {how}") from None
    return np.dtype(getattr(ml_dtypes, _ML_DTYPES[name]))


def library_of(value) -> str:
    """The top-level package of `value`'s class ("torch", "mlx", "jaxlib"...); "torch" for every torch tensor,
    instances of subclasses of `torch.Tensor` defined elsewhere too."""
    return "torch" if _is_torch(value) else (type(value).__module__ or "").split(".", 1)[0]



METAL_EXPORT_SINCE = {"mlx": (0, 32), "torch": (2, 9)}   # the first versions whose DLPack hands over MTLBuffers


def library_version(library: str) -> tuple[int, ...] | None:
    """The version of the imported library `library` ("mlx", "torch") as numbers, or None when it is not known."""
    module = sys.modules.get(f"{library}.core") or sys.modules.get(library)
    text = getattr(module, "__version__", None)
    if not isinstance(text, str):
        return None
    match = re.match(r"(\d+)\.(\d+)", text)   # "2.8.0+cpu", "0.31.1", "0.32.0.dev2026"
    return (int(match[1]), int(match[2])) if match else None


def describe_producer(value) -> str:
    """What made the array `value`, for messages: "an MLX array (mlx 0.31.0)", "a torch tensor (torch 2.8.0)"."""
    library = library_of(value)
    module = sys.modules.get(f"{library}.core") or sys.modules.get(library)
    version = getattr(module, "__version__", None)
    what = {"mlx": "an MLX array", "torch": "a torch tensor"}.get(library, f"an array of {library or 'a library'}")
    return f"{what} ({library} {version})" if isinstance(version, str) else what


def metal_export_problem(value) -> str | None:
    """Why the array `value` in Metal memory cannot be bound as its own MTLBuffer because of its library's version
    (MLX before 0.32 puts its CPU contents pointer, marked `kDLCPU`, in the capsule of an array it reports in Metal
    memory; torch before 2.9 does not export `mps` tensors through DLPack), or None."""
    library = library_of(value)
    since = METAL_EXPORT_SINCE.get(library)
    version = library_version(library) if since is not None else None
    if version is None or version >= since:
        return None
    need = ".".join(map(str, since))
    copy = "`np.array(x)`" if library == "mlx" else "`t.cpu()`"
    return (f"is {describe_producer(value)} in Metal memory, which {library} before {need} does not hand over as its "
            f"Metal buffer through DLPack: upgrade to {library}>={need} (pip install '{library}>={need}'), or pass a "
            f"CPU copy ({copy})")


def device_of(value) -> tuple[int, int]:
    """`value.__dlpack_device__()` (Metal for a torch `mps` tensor, whatever its version says), or the CPU for a
    buffer-protocol object; `ForeignArrayError` for an array with no memory a kernel can index (a sparse or mkldnn
    torch tensor, one on torch's 'meta' device) or whose library names no device."""
    probe = getattr(value, "__dlpack_device__", None)
    if probe is None:
        return (DL_CPU, 0)
    if _is_torch(value):
        problem = _torch_problem(value)
        if problem is not None:
            raise ForeignArrayError(problem)
        if value.device.type == "mps":   # torch before 2.9 names no DLPack device for it (a ValueError)
            return (DL_METAL, value.device.index or 0)
    try:
        kind, index = probe()
    except Exception as e:  # noqa: BLE001 - the library's refusal, reported at the parameter
        raise ForeignArrayError(f"names no device metile can read ({type(e).__name__}: {e})") from None
    return int(kind), int(index)


def host_view(value, *, written: bool = True) -> np.ndarray:
    """A numpy view of a foreign array's memory (no copy, but for a torch tensor read through `plain_array`), with
    its shape, strides and element type (see the module docstring); `ForeignArrayError` when it lives on a device
    metile cannot read, has an unknown element type or cannot be read in place. `written`: whether the kernel may
    write it (a parameter that is not `const`)."""
    kind, _ = device_of(value)
    if kind == DL_METAL and library_of(value) == "mlx":   # unified memory, which the CPU reads once MLX has written it
        return _read_only(_unified_view(value, foreign_dtype(value)))
    if kind != DL_CPU:
        where = _DEVICE_NAMES.get(kind, f"device type {kind}")
        if kind == DL_METAL:
            raise ForeignArrayError("is in Metal memory (a torch 'mps' tensor, say), which only the Metal device "
                                    "binds: launch on metile.device('metal'), or pass a CPU tensor (`.cpu()`)")
        raise ForeignArrayError(f"is on a {where} device, which metile cannot reach: copy it to the CPU first")
    want = foreign_dtype(value)
    if hasattr(value.__class__, "__dlpack__"):
        view = _from_dlpack(_plain_tensor(value, written) if _is_torch(value) else value, want)
    else:
        view = np.asarray(memoryview(value))
        if view.dtype != want:
            view = view.view(want)
    return _read_only(view) if library_of(value) in IMMUTABLE_LIBRARIES else view


def _read_only(view: np.ndarray) -> np.ndarray:
    if view.flags.writeable:
        view = view.view()
        view.flags.writeable = False
    return view


def _unified_view(value, want: np.dtype) -> np.ndarray:
    """A numpy view of an MLX array that reports Metal memory (on a Mac MLX reports `kDLMetal` for its arrays): its
    memory is unified, and MLX's buffer protocol evaluates the array and hands over that memory, which the CPU reads
    in place. Types numpy has no name for are read through an unsigned integer type of their width."""
    if want.type.__module__ != "numpy":
        import mlx.core as mx

        value = mx.view(value, {1: mx.uint8, 2: mx.uint16}[want.itemsize])
    try:
        view = np.asarray(memoryview(value))
    except (TypeError, ValueError, BufferError, RuntimeError) as e:
        raise ForeignArrayError(f"is an MLX array in Metal memory that MLX does not hand over through the buffer "
                                f"protocol ({type(e).__name__}: {e}): pass a copy (`np.array(x)`)") from None
    return view if view.dtype == want else view.view(want)


def _from_dlpack(value, want: np.dtype) -> np.ndarray:
    try:
        return _dlpack_view(value, want)
    except (BufferError, RuntimeError, TypeError) as e:   # what the library refuses to export
        raise ForeignArrayError(f"cannot be read in place ({type(e).__name__}: {e})") from None


def _dlpack_view(value, want: np.dtype) -> np.ndarray:
    if want.kind in "fiubc" and want.type.__module__ == "numpy":   # a type numpy's DLPack reader knows
        return np.from_dlpack(value)
    # bfloat16 and 8-bit floats: read as unsigned integers of their width, then reinterpreted
    carrier = getattr(value, "view", None) or getattr(value, "astype", None)
    library = library_of(value)
    if carrier is not None and library == "torch":
        import torch

        raw = np.from_dlpack(carrier({1: torch.uint8, 2: torch.int16}[want.itemsize]))
        return raw.view(want)
    if carrier is not None and library == "mlx":   # an MLX array (read-only)
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


# -- torch tensors --------------------------------------------------------------------------------------------------

def _is_torch(value) -> bool:
    """Whether `value` is a torch tensor (torch is imported by whoever made one)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _torch_problem(t) -> str | None:
    """Why the torch tensor `t` has no memory a kernel can index, or None."""
    import torch

    if t.layout is not torch.strided or t.is_nested:
        layout = "nested" if t.is_nested else str(t.layout)
        dense = "" if t.is_nested else " (`.to_dense()`)"
        return (f"is a torch tensor of layout {layout}, which has no strided memory a kernel can index: pass a dense "
                f"tensor{dense}")
    if t.device.type == "meta":
        return "is a torch tensor on the 'meta' device, which has a shape but no memory"
    return None


def _lazy_view(t) -> str | None:
    """The lazy view torch keeps of the tensor `t`'s memory (what its values are, computed from it when read), or
    None when its memory holds its values."""
    if t.is_neg():
        return "the negative bit set (its values are the negation of its memory, as `z.conj().imag` makes)"
    if t.is_conj():
        return "the conjugate bit set (its values are the conjugates of its memory, as `z.conj()` makes)"
    if t._is_zerotensor():
        return "no memory of its own (an autograd zero tensor, whose values are all zero)"
    return None


def plain_array(value, written: bool):
    """`value`, or what a kernel binds in its place: for a torch tensor, one whose memory holds its values (see the
    module docstring); `written` says whether the kernel may write it. `ForeignArrayError` when there is none."""
    if not _is_torch(value):
        return value
    problem = _torch_problem(value)
    if problem is not None:
        raise ForeignArrayError(problem)
    return _plain_tensor(value, written)


def _plain_tensor(value, written: bool):
    """`plain_array` of a torch tensor with strided memory."""
    t = value.detach() if value.requires_grad else value   # the same memory, as Triton reads such tensors
    lazy = _lazy_view(t)
    if lazy is None:
        return t
    if written:
        raise ForeignArrayError(f"is a torch tensor with {lazy}, and the kernel writes it: its writes could not land "
                                "in the tensor's memory as its values. Pass a tensor whose memory holds its values "
                                "(`t.resolve_neg()`, `t.resolve_conj()` or `t.clone()`, which make one) and read the "
                                "results from it")
    if t._is_zerotensor():
        import torch

        return torch.zeros(t.shape, dtype=t.dtype, device=t.device)
    return t.resolve_neg().resolve_conj()


_PLAIN_TENSORS: tuple = ()   # torch.Tensor and torch.nn.Parameter, once torch is imported


def tensor_address(t, written: bool) -> int:
    """The address of the first element of `t` when it is a torch tensor (of class `torch.Tensor` or
    `torch.nn.Parameter`) whose memory a kernel can be given as it is, without `host_view`: a CPU tensor with strided
    memory that holds its values (no lazy view, see `plain_array`), not empty, and contiguous where the kernel writes
    it (`written`); 0 for anything else, which a launch binds the general way."""
    global _PLAIN_TENSORS
    if not _PLAIN_TENSORS:
        torch = sys.modules.get("torch")
        if torch is None:
            return 0
        _PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter, torch.strided)
    cls = t.__class__
    if cls is not _PLAIN_TENSORS[0] and cls is not _PLAIN_TENSORS[1]:
        return 0
    try:
        if (not t.is_cpu or t.layout is not _PLAIN_TENSORS[2] or t.is_nested or t.is_neg() or t.is_conj()
                or t._is_zerotensor() or not t.numel() or (written and not t.is_contiguous())):
            return 0
        return t.data_ptr()
    except RuntimeError:   # a tensor without storage (a functorch wrapper, say): the general way says why
        return 0


def tensor_nbytes(t) -> int:
    """The bytes from the first element of the torch tensor `t` to the end of its last."""
    return foreign_span(t) * t.element_size()


def foreign_span(value) -> int:
    """The elements of an array of another library from its first to its last (strides in elements, as torch's)."""
    shape = tuple(value.shape)
    stride = getattr(value, "stride", None)
    if callable(stride) and shape:   # a torch tensor: strides in elements
        return 1 + sum((n - 1) * st for n, st in zip(shape, stride()) if n > 0) if 0 not in shape else 0
    return int(np.prod(shape))


class TensorWatch:
    """What a prepared launch compares before each call to see whether a torch tensor it bound moved: its version
    (which every in-place change of its sizes, strides or storage bumps: `resize_`, `set_`, `as_strided_`), its data
    pointer (which a storage resized or replaced changes: `untyped_storage().resize_`, `t.data = ...`) and its
    layout. A tensor read through a copy (`plain_array`) is bound anew at every call, and one made in
    `torch.inference_mode` (which keeps no version) has its data pointer and layout compared at every call."""

    __slots__ = ("tensor", "version", "ptr", "layout", "copied")

    def __init__(self, t):
        self.tensor = t
        self.copied = _lazy_view(t) is not None
        self.version = None if self.copied or t.is_inference() else t._version
        self.ptr = t.data_ptr()
        self.layout = _layout(t)


def _layout(t) -> tuple:
    return t.shape, t.stride(), t.storage_offset()


def watch_tensors(values) -> tuple[TensorWatch, ...]:
    """A `TensorWatch` of each torch tensor among `values`."""
    return tuple(TensorWatch(v) for v in values if _is_torch(v))


def moved(watches: tuple[TensorWatch, ...]) -> bool:
    """Whether a tensor of `watches` must be bound anew (see `TensorWatch`). A version bumped by an in-place change of
    the values only (`x.fill_(1.0)`) moves nothing: the new version is kept, so the next call is fast again."""
    for w in watches:
        t = w.tensor
        version = w.version
        if version is not None and t._version == version and t.data_ptr() == w.ptr:
            continue
        if w.copied or t.data_ptr() != w.ptr or _layout(t) != w.layout:
            return True
        if version is not None:
            w.version = t._version
    return False


__all__ = ["DL_CPU", "DL_CUDA", "DL_METAL", "ForeignArrayError", "TensorWatch", "device_of", "dtype_by_name",
           "foreign_dtype", "host_view", "is_foreign_array", "moved", "plain_array", "tensor_address", "tensor_nbytes",
           "watch_tensors"]
