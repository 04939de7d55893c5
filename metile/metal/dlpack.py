"""Reading DLPack capsules: what a producer's `__dlpack__()` hands over, for binding Metal memory directly.

A capsule named "dltensor" holds a `DLManagedTensor` (the DLPack C ABI): the tensor's data pointer, device,
element type, shape, strides (in elements, NULL when compact) and `byte_offset`. For a Metal tensor (device type
`kDLMetal`) the data pointer is the `id<MTLBuffer>` and `byte_offset` says where the tensor starts in it. The
capsule is read through the Python C API (`PyCapsule_IsValid`, `PyCapsule_GetPointer`) with cffi, and is not
consumed: the producer's deleter runs when the capsule is collected, so whoever holds the capsule (a `DLView`)
keeps the tensor's memory alive.
"""

from __future__ import annotations

import attrs
import cffi
import numpy as np

ffi = cffi.FFI()
ffi.cdef("""
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void* data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t* shape;
    int64_t* strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(struct DLManagedTensor*);
} DLManagedTensor;
int PyCapsule_IsValid(void* capsule, const char* name);
void* PyCapsule_GetPointer(void* capsule, const char* name);
""")
_api = ffi.dlopen(None)   # the running interpreter's own symbols
CAPSULE_NAME = b"dltensor"
_CODES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 1): "bool", (1, 8): "uint8",
          (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64", (2, 16): "float16", (2, 32): "float32",
          (2, 64): "float64", (6, 8): "bool"}


class DLPackError(ValueError):
    """A capsule metile cannot read (not a "dltensor" capsule, or an element type it does not know)."""


@attrs.frozen
class DLView:
    """What a DLPack capsule describes, holding the capsule (and so the producer's tensor) alive."""

    device_type: int
    device_id: int
    data: int                       # the data pointer (for Metal: the id<MTLBuffer>)
    byte_offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None   # in elements; None: compact row-major
    dtype: np.dtype
    capsule: object = attrs.field(repr=False, eq=False)

    @property
    def nbytes(self) -> int:
        """Bytes from the tensor's first element to just past its last (its span, gaps included)."""
        if not self.shape or 0 in self.shape:
            return 0 if self.shape else self.dtype.itemsize
        if self.strides is None:
            return int(np.prod(self.shape)) * self.dtype.itemsize
        last = sum((n - 1) * s for n, s in zip(self.shape, self.strides))
        return (last + 1) * self.dtype.itemsize


def read_capsule(capsule) -> DLView:
    """The tensor a "dltensor" capsule describes (raises `DLPackError`)."""
    address = ffi.cast("void*", id(capsule))   # CPython: an object's id is its address
    if not _api.PyCapsule_IsValid(address, CAPSULE_NAME):
        raise DLPackError("its __dlpack__() did not return a DLPack 'dltensor' capsule")
    managed = ffi.cast("DLManagedTensor*", _api.PyCapsule_GetPointer(address, CAPSULE_NAME))
    t = managed.dl_tensor
    name = _CODES.get((t.dtype.code, t.dtype.bits))
    if name is None and t.dtype.code == 4 and t.dtype.bits == 16:
        try:
            import ml_dtypes
        except ImportError:
            raise DLPackError("has bfloat16 elements, which metile reads as a type of the ml_dtypes package, not "
                              "installed: pip install 'metile[torch]' or 'metile[mlx]', which install it (or pip "
                              "install ml-dtypes)") from None
        dtype = np.dtype(ml_dtypes.bfloat16)
    elif name is None or t.dtype.lanes != 1:
        raise DLPackError(f"has a DLPack element type metile does not know (code {t.dtype.code}, {t.dtype.bits} "
                          f"bits, {t.dtype.lanes} lanes)")
    else:
        dtype = np.dtype(name)
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    strides = None if t.strides == ffi.NULL else tuple(int(t.strides[i]) for i in range(t.ndim))
    return DLView(int(t.device.device_type), int(t.device.device_id), int(ffi.cast("uintptr_t", t.data)),
                  int(t.byte_offset), shape, strides, dtype, capsule)


__all__ = ["CAPSULE_NAME", "DLPackError", "DLView", "ffi", "read_capsule"]
