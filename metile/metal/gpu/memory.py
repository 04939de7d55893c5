"""Metal memory as Python objects: shared-storage buffers whose bytes numpy can view, and wrapped host memory.

`MetalMemory` is what `MetalDevice.allocate` returns (and what backs `metile.Buffer` on the Metal device):
the `mts_buffer` handle and the CPU address of its contents. The contents pointer owns the handle (an
`ffi.gc` destructor releases it), so any numpy view made through `ffi.buffer` keeps the buffer alive, and
the handle is released exactly once when the last view and the memory object are gone.
"""

from __future__ import annotations

from metile.metal.gpu.binding import ERR_ALLOC, Shim, check, take_message


class MetalMemory:
    """A shared-storage `MTLBuffer`: `handle` for binding, `ptr` (a `char*`) for the CPU's view."""

    __slots__ = ("handle", "ptr", "nbytes", "__weakref__")

    def __init__(self, handle, ptr, nbytes: int):
        self.handle = handle
        self.ptr = ptr
        self.nbytes = nbytes

    def __repr__(self) -> str:
        return f"<MetalMemory {self.nbytes} bytes>"


def _owner(shim: Shim, handle):
    """A destructor for the contents pointer that releases `handle` (bound now, called once by cffi)."""
    release = shim.lib.mts_buffer_release

    def release_buffer(_contents) -> None:
        release(handle)

    return release_buffer


def _finish(shim: Shim, handle, contents, nbytes: int) -> MetalMemory:
    ptr = shim.ffi.gc(shim.ffi.cast("char*", contents), _owner(shim, handle))
    return MetalMemory(handle, ptr, nbytes)


def new_memory(shim: Shim, device_handle, errp, nbytes: int) -> MetalMemory:
    """A new zero-filled shared buffer of `nbytes` (at least 1) bytes."""
    ffi = shim.ffi
    out, contents = ffi.new("mts_buffer**"), ffi.new("void**")
    n = max(int(nbytes), 1)
    check(shim, shim.lib.mts_buffer_new(device_handle, n, out, contents, errp), errp,
          f"allocating {n} bytes of Metal memory")
    return _finish(shim, out[0], contents[0], n)


def copy_to_memory(shim: Shim, device_handle, errp, data, nbytes: int) -> MetalMemory:
    """A new shared buffer holding a copy of `nbytes` bytes of `data` (a cffi pointer or buffer)."""
    ffi = shim.ffi
    if nbytes == 0:
        return new_memory(shim, device_handle, errp, 1)
    out, contents = ffi.new("mts_buffer**"), ffi.new("void**")
    check(shim, shim.lib.mts_buffer_new_copy(device_handle, data, nbytes, out, contents, errp), errp,
          f"copying {nbytes} bytes into Metal memory")
    return _finish(shim, out[0], contents[0], nbytes)


def wrap_host_memory(shim: Shim, device_handle, errp, address: int, nbytes: int):
    """An `mts_buffer` over page-aligned host memory (no copy), released by ffi.gc; None when Metal cannot wrap all
    of it (`newBufferWithBytesNoCopy` returned nothing, or fewer bytes than asked, as on virtualised Macs), so that
    the caller copies the memory instead. The caller keeps the memory alive for as long as the GPU may use it."""
    ffi = shim.ffi
    out = ffi.new("mts_buffer**")
    code = shim.lib.mts_buffer_wrap(device_handle, ffi.cast("void*", address), nbytes, out, errp)
    if code == ERR_ALLOC:
        take_message(shim, errp)
        return None
    check(shim, code, errp, f"wrapping {nbytes} bytes of host memory")
    return ffi.gc(out[0], shim.lib.mts_buffer_release)
