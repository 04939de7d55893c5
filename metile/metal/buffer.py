"""`Buffer`: device-visible memory that numpy sees without copies (Apple GPUs have unified memory).

A buffer's bytes come from its device's allocator (guarded pages on the CPU device, a shared-storage
`MTLBuffer` on Apple GPUs); `.numpy()` is a view of them, and kernels bind them without copying.
"""

from __future__ import annotations

import math

import numpy as np

from metile.metal.errors import BufferError

_DLPACK_CPU = 1


class _NotGiven:
    """The default of `dtype`: float32 for a buffer of a shape, the data's own type for a buffer made from data."""

    def __repr__(self) -> str:
        return "float32"


NOT_GIVEN = _NotGiven()


def _shape_of(shape) -> tuple[int, ...]:
    """A shape as a tuple of non-negative ints (an int is a 1-D shape)."""
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        dims = tuple(dims)
    except TypeError:
        dims = None
    if dims is None or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0
                               for d in dims):
        raise BufferError(f"Buffer: the shape must be an int or a tuple of non-negative ints, not {shape!r}")
    return tuple(int(d) for d in dims)


def _dtype_of(dtype) -> np.dtype:
    """A numpy dtype from one (or its name), or from metile's element type names ("f32", "f16", "i8", ...)."""
    from metile.ir.types import DType, from_numpy, host_dtype

    if isinstance(dtype, str) and dtype in DType._value2member_map_:
        dt = DType(dtype)
        found = host_dtype(dt)
        if found is None:
            raise BufferError(f"Buffer: {dt} needs the ml_dtypes package (pip install ml_dtypes)")
        return found
    if dtype is None:
        raise BufferError("Buffer: dtype=None names no element type (use a numpy dtype or one of metile's names, such "
                          "as 'f32'; the default is float32)")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise BufferError(f"Buffer: {dtype!r} is not a dtype (use a numpy dtype or one of metile's names, such as "
                          "'f32')") from None
    if from_numpy(dt) is None:
        raise BufferError(f"Buffer: Metal kernels cannot hold {dt} elements (its element types are "
                          f"{', '.join(t.value for t in DType)}; convert the data first, e.g. with arr.astype)")
    return dt


class Buffer:
    """Zero-copy device memory with a numpy shape and dtype.

    `Buffer(data=arr, device=dev)` copies `arr` once into device memory; `Buffer.zeros`, `Buffer.empty`
    and `Buffer.from_numpy` are the usual constructors. `.numpy()` returns a view (no copy): writes
    through it are seen by kernels and vice versa.
    """

    def __init__(self, data=None, *, shape=None, dtype=NOT_GIVEN, device=None, _fill: int | None = 0):
        if device is None or not hasattr(device, "allocate"):
            raise BufferError(f"Buffer needs a device (a metile.device(...)), not {device!r}")
        if data is not None:
            if not hasattr(data, "dtype"):  # a shape given first (meTile's order), a list of Python numbers, ...
                raise BufferError(f"Buffer: the data must be an array (numpy, or one with a dtype), not "
                                  f"{type(data).__name__} {data!r:.60}; for a buffer of a given shape use "
                                  "Buffer.zeros(shape, dtype) or Buffer(shape=..., dtype=...)")
            arr = np.asarray(data)
            if shape is not None and _shape_of(shape) != arr.shape:
                raise BufferError(f"Buffer: shape {shape} does not match the data's shape {arr.shape}")
            if dtype is not NOT_GIVEN and _dtype_of(dtype) != arr.dtype:
                raise BufferError(f"Buffer: dtype {dtype} does not match the data's dtype {arr.dtype} (convert the "
                                  "data first, e.g. with arr.astype)")
            shape, dtype = arr.shape, arr.dtype
        elif shape is None:
            raise BufferError("Buffer needs `data` or a `shape`")
        if dtype is NOT_GIVEN:
            dtype = np.float32
        self._shape = _shape_of(shape)
        self._dtype = _dtype_of(dtype)
        self._nbytes = int(math.prod(self._shape)) * self._dtype.itemsize
        if self._nbytes >= 1 << 40:
            raise BufferError(f"Buffer of shape {self._shape} and dtype {self._dtype} needs {self._nbytes} bytes, more "
                              "than any device has")
        self.device = device
        self._mem = device.allocate(self._nbytes)
        view = self.numpy()
        if data is not None:
            view[...] = arr
        elif _fill is not None and self._nbytes:
            view.view(np.uint8).reshape(-1)[:] = _fill

    @classmethod
    def zeros(cls, shape, dtype=np.float32, **kw) -> Buffer:
        return cls(shape=shape, dtype=dtype, **kw)

    @classmethod
    def empty(cls, shape, dtype=np.float32, **kw) -> Buffer:
        return cls(shape=shape, dtype=dtype, _fill=None, **kw)

    @classmethod
    def from_numpy(cls, arr, **kw) -> Buffer:
        return cls(data=np.asarray(arr), **kw)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def size(self) -> int:
        return int(math.prod(self._shape))

    @property
    def address(self) -> int:
        return self.device.address_of(self._mem)

    def numpy(self) -> np.ndarray:
        """A view of the buffer's memory (no copy); it keeps the memory alive."""
        raw = self.device.memory_view(self._mem, self._nbytes)
        return np.frombuffer(raw, dtype=self._dtype, count=self.size).reshape(self._shape)

    def __array__(self, dtype=None, copy=None):
        view = self.numpy()
        return view if dtype is None else view.astype(dtype)

    def __dlpack__(self, *args, **kwargs):
        return self.numpy().__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return (_DLPACK_CPU, 0)

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d buffer")
        return self._shape[0]

    def __repr__(self) -> str:
        return f"Buffer(shape={self._shape}, dtype={self._dtype}, device={self.device.name!r})"
