"""The Metal device's command stream: launches batched into command buffers, synchronize, write-back.

Launches go into one open command buffer (dispatches run in order; each run of one kernel's dispatches has an
encoder labelled with the kernel's name, which a GPU fault names when the device reports each encoder's execution
status, `MetalOptions.encoder_status`, off by default as it costs CPU time) until `max_batch` of them are in it; then it
is committed and the next launch opens another. `synchronize()` commits the open one, waits for every
committed one in order, writes numpy arguments back, releases the command buffers and raises the first GPU
error as a `DeviceFault` (results are not written back then). When more than `max_in_flight` committed command
buffers are outstanding, the oldest is waited for at once; its error, if any, is still raised by the next
`synchronize()`.

A numpy argument is staged once between two `synchronize()` calls, however many launches use it, so
later launches see what earlier ones wrote, as on a stream; the array itself receives the results at
`synchronize()`. A C-contiguous, writeable array that starts on a page boundary and spans whole pages
is wrapped without a copy (`newBufferWithBytesNoCopy`), so until `synchronize()` the GPU and the host
share it; any other array, or one Metal cannot wrap whole (virtualised Macs may refuse, or wrap fewer bytes
than asked), is copied into a shared buffer at its first launch and copied back.

A stream dropped with launches not yet synchronized (its device collected, or the process ending) finishes
them first: a finalizer, which holds the command buffers and the staged arrays, commits the open command
buffer, waits for every one and writes the results back, so the GPU never writes memory that was freed and
no launch is lost. A strided
view is copied as its span (from its first element to its last, gaps included) and only its own elements
are copied back (`metile.metal.args.staged_view`).
"""

from __future__ import annotations

import weakref
from collections import deque

import numpy as np

from metile.metal.args import data_address, staged_view
from metile.metal.errors import DeviceError, DeviceFault, LaunchError, MetileError
from metile.metal.gpu.binding import ERR_GPU, SHIM_CONSTANTS, Shim, check, shim_error, take_message
from metile.metal.gpu.launch import ArraySlot, PreparedArgs
from metile.metal.gpu.memory import MetalMemory, copy_to_memory, wrap_host_memory

# MTLCommandBufferError codes -> DeviceFault.kind
GPU_ERROR_KINDS = {
    1: "internal", 2: "hang", 3: "bad-access", 4: "access-revoked", 7: "not-permitted", 8: "out-of-memory",
    9: "invalid-resource", 10: "memoryless", 11: "device-removed", 12: "stack-overflow",
}


class Staged:
    """A numpy argument's device copy (or no-copy wrapper) for the current stretch between syncs."""

    __slots__ = ("array", "bound", "handle", "memory", "nbytes", "write_back", "index", "name")

    def __init__(self, array: np.ndarray, handle, memory: MetalMemory | None, slot: ArraySlot):
        self.array = array
        self.bound = slot.bound
        self.handle = handle
        self.memory = memory            # None when the array's own pages are bound
        self.nbytes = slot.nbytes
        self.write_back = slot.write_back and memory is not None
        self.index = slot.index
        self.name = slot.name


class CommandBuffer:
    __slots__ = ("handle", "kernels")

    def __init__(self, handle, kernels: list[str]):
        self.handle = handle
        self.kernels = kernels


class CommandStream:
    """Encodes launches for one device and finishes them at `synchronize()` (see the module docstring)."""

    def __init__(self, shim: Shim, device_handle, *, page_size: int, max_batch: int, max_in_flight: int,
                 encoder_status: bool = False):
        if max_batch < 1 or max_in_flight < 1:
            raise ValueError("max_batch and max_in_flight must be at least 1")
        self.shim = shim
        self.device_handle = device_handle
        self.page_size = page_size
        self.max_batch = max_batch
        self.max_in_flight = max_in_flight
        # whether command buffers report each encoder's execution status (a fault names its kernel; costs CPU time)
        self.begin_flags = SHIM_CONSTANTS["MTS_COMMANDS_ENCODER_STATUS"] if encoder_status else 0
        self._encode = shim.lib.mts_commands_encode
        self._err = shim.ffi.new("char**")
        self._done = shim.ffi.new("mts_completion*")
        self._open = None
        self._open_kernels: list[str] = []
        self._committed: deque[CommandBuffer] = deque()
        self._staged: dict[int, Staged] = {}
        self._error: MetileError | None = None
        self._timings: list[tuple[float, float]] = []
        self.last_timings: tuple[tuple[float, float], ...] = ()   # GPU (start, end) per command buffer
        self.command_buffers = 0
        self.wraps_refused = 0   # arrays Metal would not wrap whole, copied instead
        # finishes the launches of a stream dropped before synchronize(), holding its state (not the stream)
        weakref.finalize(self, _finish_dropped, self.__dict__)

    @property
    def pending(self) -> int:
        """Launches encoded since the last synchronize() that have not been waited for."""
        return len(self._open_kernels) + sum(len(cb.kernels) for cb in self._committed)

    def encode(self, fn, prepared: PreparedArgs, args, kind: int, size: tuple[int, int, int],
               tpt: tuple[int, int, int]) -> None:
        """Add one dispatch of `fn` to the open command buffer (opening one if needed)."""
        cmds = self._open
        if cmds is None:
            cmds = self._begin()
        added = self._stage(prepared, args) if prepared.arrays else ()
        code = self._encode(cmds, fn.handle, fn.label, kind, size[0], size[1], size[2], tpt[0], tpt[1], tpt[2],
                            prepared.table, prepared.n, prepared.tg, prepared.n_tg, self._err)
        if code:
            for key in added:     # the failed launch's arrays are not written back
                del self._staged[key]
            check(self.shim, code, self._err, f"encoding a launch of `{fn.name}`")
        kernels = self._open_kernels
        kernels.append(fn.name)
        if len(kernels) >= self.max_batch:
            self.flush()

    def flush(self) -> None:
        """Commit the open command buffer, if any (without waiting for it)."""
        cmds = self._open
        if cmds is None:
            return
        cb = CommandBuffer(cmds, self._open_kernels)
        self._open, self._open_kernels = None, []
        code = self.shim.lib.mts_commands_commit(cmds, self._err)
        if code:
            self._note(shim_error(code, take_message(self.shim, self._err),
                                  f"committing a command buffer of {len(cb.kernels)} launch(es)"))
            self.shim.ffi.release(cmds)
            return
        self._committed.append(cb)
        while len(self._committed) > self.max_in_flight:
            self._retire(self._committed.popleft())

    def synchronize(self) -> None:
        """Wait for every launch, write numpy arguments back, and raise the first error of the stretch."""
        try:
            self.flush()
        finally:
            while self._committed:
                self._retire(self._committed.popleft())
        error, self._error = self._error, None
        staged, self._staged = self._staged, {}
        self.last_timings, self._timings = tuple(self._timings), []
        if error is not None:
            raise error
        problems = [p for p in (self._write_back(s) for s in staged.values()) if p is not None]
        if problems:
            raise problems[0]

    @property
    def unfinished(self) -> bool:
        """Whether launches or staged arrays wait for a synchronize()."""
        return self._open is not None or bool(self._committed) or bool(self._staged)

    # -- internals ------------------------------------------------------------------------------------------------
    def _begin(self):
        if self.device_handle is None:
            raise DeviceError("this Metal device is closed")
        ffi = self.shim.ffi
        out = ffi.new("mts_commands**")
        code = self.shim.lib.mts_commands_begin(self.device_handle, self.begin_flags, out, self._err)
        check(self.shim, code, self._err, "opening a command buffer")
        self._open = ffi.gc(out[0], self.shim.lib.mts_commands_release)
        self.command_buffers += 1
        return self._open

    def _retire(self, cb: CommandBuffer) -> None:
        done = self._done
        code = self.shim.lib.mts_commands_wait(cb.handle, done, self._err)
        if code:
            self._note(self._fault(code, take_message(self.shim, self._err), cb.kernels))
        else:
            self._timings.append((done.gpu_start, done.gpu_end))
        self.shim.ffi.release(cb.handle)

    def _fault(self, code: int, message: str, kernels: list[str]) -> MetileError:
        names = ", ".join(dict.fromkeys(kernels))
        what = f"a command buffer of {len(kernels)} launch(es) of {names}"
        if code != ERR_GPU:
            return shim_error(code, message, f"waiting for {what}")
        kind = GPU_ERROR_KINDS.get(self._done.error_code, "gpu-error")
        faulted = self.shim.ffi.string(self._done.faulted).decode("utf-8", "replace")   # its encoder's label
        only = faulted or (kernels[0] if len(set(kernels)) == 1 else "")
        where = f" (the fault is in `{faulted}`)" if faulted and len(set(kernels)) > 1 else ""
        if not only and not self.begin_flags:
            where = (" (MetalOptions(encoder_status=True), or METILE_METAL_ENCODER_STATUS=1, names the kernel that "
                     "faulted)")
        return DeviceFault(f"the GPU failed {what}{where}: {message}", kind=kind, kernel=only)

    def _note(self, error: MetileError) -> None:
        if self._error is None:
            self._error = error

    def _stage(self, prepared: PreparedArgs, args) -> list[int]:
        """Bind the launch's numpy arrays to their staged buffers; returns the keys staged just now."""
        table, staged, added = prepared.table, self._staged, []
        try:
            for slot in prepared.arrays:
                arr = args[slot.index]
                key = id(arr)
                s = staged.get(key)
                if s is None:
                    if not isinstance(arr, np.ndarray):   # another library's array: its host view
                        arr = slot.bound.value
                    s = staged[key] = self._stage_array(arr, slot)
                    added.append(key)
                elif slot.write_back and s.memory is not None:
                    s.write_back = True
                table[slot.index].buffer = s.handle
        except BaseException:
            for key in added:
                del staged[key]
            raise
        return added

    def _stage_array(self, arr: np.ndarray, slot: ArraySlot) -> Staged:
        shim, ffi, page, nbytes = self.shim, self.shim.ffi, self.page_size, slot.nbytes
        if nbytes and nbytes % page == 0 and arr.flags.c_contiguous and arr.flags.writeable:
            address = arr.__array_interface__["data"][0]
            if address % page == 0:
                handle = wrap_host_memory(shim, self.device_handle, self._err, address, nbytes)
                if handle is not None:
                    return Staged(arr, handle, None, slot)
                self.wraps_refused += 1   # Metal would not wrap it whole: staged as a copy instead
        if not nbytes:
            data = ffi.NULL
        else:
            data = ffi.cast("void*", data_address(arr)) if slot.strided else ffi.from_buffer(arr)
        memory = copy_to_memory(shim, self.device_handle, self._err, data, nbytes)
        return Staged(arr, memory.handle, memory, slot)

    def _write_back(self, s: Staged) -> LaunchError | None:
        if not s.write_back:
            return None
        arr = s.array
        result = staged_view(s.bound, self.shim.ffi.buffer(s.memory.ptr, s.nbytes))
        if arr.flags.writeable:
            np.copyto(arr, result)
            return None
        if not np.array_equal(arr, result, equal_nan=arr.dtype.kind == "f"):
            return LaunchError(f"a kernel wrote to argument {s.index} (`{s.name}`), a read-only array")
        return None


def _finish_dropped(state: dict) -> None:
    """Synchronize a stream collected (or left at exit) with launches not yet synchronized, from its attributes
    `state`: commit, wait, write the results back. Errors cannot be raised here; they are reported as warnings."""
    stream = object.__new__(CommandStream)
    stream.__dict__ = state
    if not stream.unfinished:
        return
    try:
        stream.synchronize()
    except MetileError as e:
        import warnings

        warnings.warn(f"launches finished after their Metal device was dropped failed: {e}", RuntimeWarning,
                      stacklevel=1)
