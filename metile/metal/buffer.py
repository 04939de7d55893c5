"""`Buffer`: device-visible memory that numpy sees without copies (Apple GPUs have unified memory).

A buffer's bytes come from its device's allocator (guarded pages on the CPU device, a shared-storage
`MTLBuffer` on Apple GPUs); `.numpy()` is a view of them, and kernels bind them without copying.
"""

from __future__ import annotations

import math

import numpy as np

_DLPACK_CPU = 1


class Buffer:
    """Zero-copy device memory with a numpy shape and dtype.

    `Buffer(data=arr, device=dev)` copies `arr` once into device memory; `Buffer.zeros`, `Buffer.empty`
    and `Buffer.from_numpy` are the usual constructors. `.numpy()` returns a view (no copy): writes
    through it are seen by kernels and vice versa.
    """

    def __init__(self, data=None, *, shape=None, dtype=np.float32, device=None, _fill: int | None = 0):
        if device is None:
            raise TypeError("Buffer needs a device")
        if data is not None:
            arr = np.asarray(data)
            if shape is not None and tuple(np.atleast_1d(shape)) != arr.shape:
                raise ValueError(f"shape {shape} does not match the data's shape {arr.shape}")
            shape, dtype = arr.shape, arr.dtype
        elif shape is None:
            raise TypeError("Buffer needs `data` or a `shape`")
        self._shape = tuple(int(s) for s in np.atleast_1d(shape)) if shape != () else ()
        self._dtype = np.dtype(dtype)
        if any(s < 0 for s in self._shape):
            raise ValueError(f"negative dimension in shape {shape}")
        self._nbytes = int(math.prod(self._shape)) * self._dtype.itemsize
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
