"""One dispatch on the CPU device, checked and bound once: `CpuDispatch`.

`CpuDevice.dispatch_threadgroups` and `dispatch_threads` make one and run it once; `prepare_threadgroups` and
`prepare_threads` return one to be called any number of times with the same arguments. Making it binds the
arguments against the kernel's signature, allocates guarded device memory for each numpy array (its span: a
strided view's gaps included) and each scalar, points the parameters that get no memory (removed by a function
constant, or passed as None) at placeholders (`metile.metal.cpu.placeholders`), and fills the runtime's launch
descriptor. Running it copies each
numpy array's current contents in, launches, and copies the results back into the arrays the kernel may write (a
strided view's own elements only, never its gaps); `metile.Buffer`s are bound as they are, without copies. An
array given to several parameters, or views of one array that overlap (`aliases`), are one allocation, copied in
and back once. The
runtime's watchpoints cover the bytes just before the array arguments (read-only ones first).

A dispatch made by `dispatch_threadgroups` or `dispatch_threads` is kept (`CpuDevice`, a few of them) and taken again
by a later one of the same kernel, grid and argument layouts (`layout_key`: each array's type, shape, strides and
whether it is written; each scalar's size): `rebind` points it at the new arrays and copies the new scalars' bytes,
so that a repeated launch neither allocates device memory nor fills a descriptor again. A kept dispatch holds no
reference to the arrays of its last run (`release`).
"""

from __future__ import annotations

import threading

import attrs
import numpy as np

from metile.metal.args import BoundArg, bind_arguments, data_address, staged_view
from metile.metal.buffer import Buffer
from metile.metal.cpu.build import TRAP_MEANS
from metile.metal.cpu.faults import BufferRange, to_exception
from metile.metal.cpu.profiling import ProfiledRun
from metile.metal.cpu.runtime_api import ffi
from metile.metal.errors import LaunchError
from metile.profile.counts import Launch, Profile


class _Array:
    """A numpy argument: its device memory, where its bytes come from, and how results go back."""

    __slots__ = ("bound", "memory", "source", "nbytes", "result", "writes")

    def __init__(self, b: BoundArg, memory, writes: bool | None = None):
        arr: np.ndarray = b.value
        self.bound = b
        self.memory = memory
        self.nbytes = b.nbytes
        self.writes = b.write_back if writes is None else writes   # its own write-back, or an alias's
        self.source = ffi.cast("void*", data_address(arr)) if b.strided else ffi.from_buffer(arr)
        # what a write-back reads: the elements in device memory, for a strided view or a read-only array
        viewed = self.writes and (b.strided or not arr.flags.writeable)
        self.result = staged_view(b, ffi.buffer(memory, b.nbytes)) if viewed else None

    def write_back(self) -> None:
        b = self.bound
        arr: np.ndarray = b.value
        if self.result is None:  # a writeable C-contiguous array: its bytes as they are
            ffi.memmove(self.source, self.memory, self.nbytes)
        elif arr.flags.writeable:
            np.copyto(arr, self.result)
        elif not np.array_equal(arr, self.result, equal_nan=arr.dtype.kind == "f"):
            raise LaunchError(f"kernel wrote to argument {b.param.index} (`{b.param.name}`), a read-only array")


class CpuDispatch:
    """A dispatch of `fn` on `dev`, bound to `args` (see the module docstring); `run()` runs it, and calling it runs
    it under a lock (threads that call one prepared dispatch share its device memory)."""

    __slots__ = ("device", "function", "desc", "rec", "arrays", "written", "ranges", "sanitize", "owned", "lock",
                 "_ptrs", "_sizes", "_watch", "profiled", "_shape", "_array_memory", "_scalar_memory", "_aliases")

    def __init__(self, dev, fn, groups, tpt, grid, args, tg_sizes: list[int], sanitize: bool, timeout,
                 profile: int | None = None, profile_only: bool = False, uniform_barriers: bool = True,
                 bound: list[BoundArg | None] | None = None):
        sig = fn.signature
        if bound is None:
            bound = bind_arguments(sig, list(args), Buffer)
        # a slot for every [[buffer(i)]] of the kernel's C++ function: those a function constant removed and those
        # left unbound (None) point at placeholders (metile.metal.cpu.placeholders)
        ptrs = ffi.new("void*[]", max(len(bound), fn.buffer_slots, 1))
        self.owned: list = []      # what the pointers point into
        self.arrays: list[_Array] = []
        self._array_memory: list[tuple[int, object]] = []    # (index, device memory) of each array argument
        self._scalar_memory: list[tuple[int, object]] = []   # the same for scalars
        self._aliases = aliases(bound)   # argument index -> (the argument holding its memory, its offset in it)
        self.ranges: list[BufferRange] = []
        spans: list[tuple[int, int]] = []
        for p in fn.removed:
            ptrs[p.index], where = dev.placeholders.switched_off(p)
            self.ranges.append(where)
        for i, b in enumerate(bound):
            if b is None:
                continue
            if b.value is None:
                ptrs[i], where = dev.placeholders.unbound(b.param)
                self.ranges.append(where)
                continue
            held = self._aliases.get(i)
            if held is not None and held[0] != i:   # memory another argument holds: its place there
                continue
            ptrs[i] = self._stage(dev, b if held is None else self._span(bound, i))
            if not isinstance(b.value, Buffer):
                (self._array_memory if isinstance(b.value, np.ndarray) else self._scalar_memory).append(
                    (i, self.owned[-1]))
            self.ranges.append(self._range(dev, i, b.param.name, ptrs[i], b.nbytes))
            if profile is not None and isinstance(b.value, (np.ndarray, Buffer)) and b.nbytes:
                # device memory for the profiler (scalars are set bytes on a GPU, not buffers)
                spans.append((self.ranges[-1].address, self.ranges[-1].address + b.nbytes))
        for i, (j, offset) in self._aliases.items():
            if i != j:
                ptrs[i] = ffi.cast("char*", ptrs[j]) + offset
                self.ranges.append(self._range(dev, i, bound[i].param.name, ptrs[i], bound[i].nbytes))
        self.written = [a for a in self.arrays if a.writes]
        sizes = ffi.new("size_t[]", tg_sizes or [0])
        desc = ffi.new("mt_launch_desc*")
        # counting runs the instrumented build (the sanitizer's) without its checks unless asked for
        desc.fn = fn.entry(sanitize or profile is not None)
        desc.buffers = ptrs
        desc.n_buffers = len(bound)
        desc.tg_param_bytes = sizes
        desc.n_tg_params = len(tg_sizes)
        desc.threadgroups = list(groups)
        desc.threads_per_tg = list(tpt)
        desc.grid_threads = list(grid)
        desc.workers = dev.options.workers
        desc.timeout_s = dev.options.timeout_s if timeout is None else float(timeout)
        desc.sanitize = 1 if sanitize else 0
        desc.apple_barriers = 0 if uniform_barriers else 1
        # the arrays whose bytes just before the start the runtime's watchpoints cover, read-only parameters first
        # (a write there is found after the dispatch anyway); not scalars, which no kernel indexes below 0
        watch = sorted((i for i, b in enumerate(bound) if b is not None and isinstance(b.value, (np.ndarray, Buffer))),
                       key=lambda i: not bound[i].param.is_const)
        self._watch = ffi.new("uint32_t[]", watch or [0])
        desc.watch_buffers = self._watch
        desc.n_watch_buffers = len(watch)
        desc.tg_fill = 0xFF
        desc.max_tg_memory = dev.max_threadgroup_memory
        desc.stack_bytes = dev.options.stack_bytes
        self.device, self.function, self.sanitize = dev, fn, bool(sanitize)
        self.desc, self.rec, self._ptrs, self._sizes = desc, ffi.new("mt_fault*"), ptrs, sizes
        self.lock = threading.Lock()
        self.profiled = self._shape = None
        if profile is not None:
            self._shape = Launch(tuple(groups), tuple(tpt), fn.thread_execution_width, 0)
            self.profiled = ProfiledRun(profile, self._shape.threadgroups_total, spans, profile_only)
            desc.profile, desc.profile_out = self.profiled.desc, self.profiled.out

    @staticmethod
    def _range(dev, index: int, name: str, ptr, nbytes: int) -> BufferRange:
        """Where buffer `index` lies, with its whole guarded mapping (for fault reports)."""
        ext = ffi.new("uint64_t[2]")
        found = dev.rt.mt_buffer_extent(ptr, ext, ext + 1)
        lo, hi = (int(ext[0]), int(ext[1])) if found else (0, 0)
        return BufferRange(index, name, int(ffi.cast("uintptr_t", ptr)), nbytes, lo, hi)

    def _stage(self, dev, b: BoundArg):
        """The device pointer for one argument: a Buffer's own memory, else new guarded memory (a scalar's bytes are
        copied now, an array's at each run)."""
        v = b.value
        if isinstance(v, Buffer):
            if v.device is not dev:
                raise LaunchError(f"argument {b.param.index} (`{b.param.name}`) lives on device "
                                  f"{v.device.name!r}, not on this CPU device")
            self.owned.append(v)
            return ffi.cast("void*", v._mem)
        mem = dev.allocate(b.nbytes, staging=b.nbytes > 0)   # every byte is written before each launch
        self.owned.append(mem)
        if isinstance(v, np.ndarray):
            self.arrays.append(_Array(b, mem))
        else:
            ffi.memmove(mem, v, b.nbytes)
        return ffi.cast("void*", mem)

    def _span(self, bound: list[BoundArg | None], j: int) -> BoundArg:
        """The bytes the arrays sharing memory with argument `j` (`aliases`, where `j` holds it) cover, as one
        argument: a byte view from `j`'s first byte, written back when any of them is."""
        members = [i for i, (k, _) in self._aliases.items() if k == j]
        nbytes = max(self._aliases[i][1] + bound[i].nbytes for i in members)
        first = bound[j].value.reshape(-1).view(np.uint8)
        view = np.lib.stride_tricks.as_strided(first, shape=(nbytes,), strides=(1,))
        return attrs.evolve(bound[j], value=view, nbytes=nbytes, write_back=any(bound[i].write_back for i in members))

    def rebind(self, bound: list[BoundArg | None]) -> None:
        """Take the arguments `bound`, of the layouts this dispatch was made for (`layout_key`, aliases included):
        the arrays' contents are copied in at the next run, the scalars' bytes now."""
        self.arrays = [_Array(bound[i] if i not in self._aliases else self._span(bound, i), mem)
                       for i, mem in self._array_memory]
        self.written = [a for a in self.arrays if a.writes]
        for i, mem in self._scalar_memory:
            b = bound[i]
            ffi.memmove(mem, b.value, b.nbytes)

    def release(self) -> None:
        """Forget the arrays of the last run (a kept dispatch must not keep them alive)."""
        self.arrays = self.written = []

    def run(self) -> None:
        """Copy the numpy arguments in, launch, and copy the results back (or raise the kernel's fault)."""
        for a in self.arrays:
            if a.nbytes:
                ffi.memmove(a.memory, a.source, a.nbytes)
        rec = self.rec
        if self.device.rt.mt_launch(self.desc, rec) != 0:
            tr = self.function.library.translation
            raise to_exception(rec, kernel=self.function.name, metal_name=tr.metal_name, source=tr.source,
                               buffers=self.ranges,
                               trap_is_misalignment=not self.sanitize and TRAP_MEANS == "misaligned",
                               user_file=tr.line_map.user_file if tr.line_map is not None else None)
        for a in self.written:
            a.write_back()

    def profile(self) -> Profile:
        """The counts of the last run (a dispatch made with `profile=`)."""
        tr = self.function.library.translation
        return self.profiled.result(self.device.rt, kernel=self.function.name, metal_name=tr.metal_name,
                                    source=tr.source, launch=self._shape,
                                    user_file=tr.line_map.user_file if tr.line_map is not None else None)

    def __call__(self) -> None:
        with self.lock:
            self.run()

    def __repr__(self) -> str:
        return f"<prepared CPU dispatch of {self.function.name}>"


def aliases(bound: list[BoundArg | None]) -> dict[int, tuple[int, int]]:
    """Writeable C-contiguous array arguments whose bytes overlap (one array given to two parameters, or two views
    of one array that share elements): each such argument -> (the one of its group starting at the lowest address,
    which holds the group's memory; its byte offset there). A group is one copy in device memory, its bytes copied
    in and back once, as they are one buffer on a GPU: what the kernel writes through one argument it reads through
    the others, and no write-back of one restores the old bytes of what it wrote through another."""
    spans = []
    for i, b in enumerate(bound):
        v = None if b is None else b.value
        if v.__class__ is np.ndarray and not b.strided and b.nbytes and v.flags.writeable:
            spans.append((b.nbytes, i))
    if len(spans) < 2:
        return {}
    starts = sorted((data_address(bound[i].value), n, i) for n, i in spans)
    out: dict[int, tuple[int, int]] = {}
    group: list[tuple[int, int]] = []
    end = -1
    for start, n, i in starts + [(None, 0, -1)]:
        if start is None or start >= end:   # the group so far ends here
            if len(group) > 1:
                first = group[0]
                out.update((k, (first[1], at - first[0])) for at, k in group)
            group, end = [], -1
            if start is None:
                break
        group.append((start, i))
        end = max(end, start + n)
    return out


def layout_key(bound: list[BoundArg | None]) -> tuple | None:
    """What a dispatch made for `bound` depends on besides its kernel and grid: each array's element type, shape,
    strides, span and whether it is written back, each scalar's size, and which slots are left unbound; None when
    `bound` holds a `metile.Buffer` (bound as it is: such a dispatch is not kept)."""
    key = []
    for b in bound:
        v = None if b is None else b.value
        if v is None:
            key.append(b is None)
        elif isinstance(v, np.ndarray):
            key.append((v.dtype.str, v.shape, v.strides, b.nbytes, b.strided, b.write_back, v.flags.writeable))
        elif isinstance(v, Buffer):
            return None
        else:
            key.append(b.nbytes)
    return tuple(key) + tuple(sorted(aliases(bound).items()))
