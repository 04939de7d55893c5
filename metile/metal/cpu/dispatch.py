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
reference to the arrays of its last run (`release`). A launch repeated with torch tensors takes a `CopiedRuns` instead
(`metile.launch`): the same copies into the same guarded memory, without even binding the arguments again.

Every array is copied so by default, with a guard page after its device memory and a canary and watchpoint in front
of it, so that a kernel reading or writing past either end of an array raises `DeviceFault` naming it. A dispatch's
`in_place` opts out of the copies (`in_place_arguments`): True for every array that can be bound as its own memory,
argument indices for those among them, "checked" for every one in the kernel's checked build, None (the default)
for the device's setting (`CpuOptions.in_place_arrays`: True with `METILE_CPU_IN_PLACE=1`, else "auto": "checked"
when an array that can be bound so holds `CHECKED_BYTES` or more and the kernel has a checked build, else copies).
An array can be when the launch is not sanitized or profiled and the array is not empty, starts 16-byte aligned (as
the device's own buffers do, which the kernels' vector loads rely on), is writeable or bound to a `const` parameter,
and shares no byte with an array that is copied (and, for the checked build, is bound to a `device T*` parameter). It
is then bound with no copy in or back, and its bytes have no guard page after them and no canary or watchpoint in
front of them. In the plain build a bad access near it reads or writes the neighbouring memory silently, as on a GPU;
the checked build (`metile.metal.cpu.checked`) checks every access through a device pointer against the range of the
buffer it was bound to, which the dispatch keeps in `_bounds` (address and length per `[[buffer(i)]]` slot, its
address in the slot before the first buffer's) and a repeated launch sets again with the arrays' addresses.
"""

from __future__ import annotations

import threading

import attrs
import numpy as np

from metile.metal.args import BoundArg, bind_arguments, data_address, staged_view
from metile.metal.buffer import Buffer
from metile.metal.cpu.build import TRAP_MEANS
from metile.metal.cpu.checked import is_device_pointer
from metile.metal.cpu.faults import BufferRange, to_exception
from metile.metal.cpu.profiling import ProfiledRun
from metile.metal.cpu.registers import kernel_registers
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

    def write_back(self, copy) -> None:
        """The kernel's results back into the array (`copy`: the runtime's `mt_copy`)."""
        b = self.bound
        arr: np.ndarray = b.value
        if self.result is None:  # a writeable C-contiguous array: its bytes as they are
            copy(self.source, self.memory, self.nbytes)
        elif arr.flags.writeable:
            np.copyto(arr, self.result)
        elif not np.array_equal(arr, self.result, equal_nan=arr.dtype.kind == "f"):
            raise LaunchError(f"kernel wrote to argument {b.param.index} (`{b.param.name}`), a read-only array")


class CpuDispatch:
    """A dispatch of `fn` on `dev`, bound to `args` (see the module docstring); `run()` runs it, and calling it runs
    it under a lock (threads that call one prepared dispatch share its device memory)."""

    __slots__ = ("device", "function", "desc", "rec", "arrays", "written", "ranges", "sanitize", "owned", "lock",
                 "_ptrs", "_sizes", "_watch", "profiled", "_shape", "_array_memory", "_scalar_memory", "_aliases",
                 "placed", "held", "checked", "_bounds", "_slots")

    def __init__(self, dev, fn, groups, tpt, grid, args, tg_sizes: list[int], sanitize: bool, timeout,
                 profile: int | None = None, profile_only: bool = False, uniform_barriers: bool = True,
                 bound: list[BoundArg | None] | None = None, in_place=False, placed: frozenset[int] | None = None,
                 checked: bool = False):
        sig = fn.signature
        if bound is None:
            bound = bind_arguments(sig, list(args), Buffer)
        if placed is None:
            placed, checked = in_place_arguments(bound, in_place_request(in_place, dev.options.in_place_arrays),
                                                 sanitize or profile is not None, fn)
        self.placed = placed       # the arguments bound as their own memory
        self.checked = checked     # by the kernel's checked build (metile.metal.cpu.checked)
        self.held: list = []       # their arrays, until `release`
        # a slot for every [[buffer(i)]] of the kernel's C++ function: those a function constant removed and those
        # left unbound (None) point at placeholders (metile.metal.cpu.placeholders)
        # (and, in the slot before the first, the address of their ranges, address and length in bytes, which a
        # checked build reads: `_bounds`, made of `ranges`)
        n = max(len(bound), fn.buffer_slots, 1)
        self._slots = slots = ffi.new("void*[]", n + 1)
        ptrs = slots + 1
        self._bounds = slots[0] = ffi.new("uintptr_t[]", 2 * n)
        self.owned: list = []      # what the pointers point into
        self.arrays: list[_Array] = []
        self._array_memory: list[tuple[int, object]] = []    # (index, device memory) of each array argument
        self._scalar_memory: list[tuple[int, object, int]] = []   # the same for scalars, with their sizes
        # argument index -> (the argument holding its memory, its offset in it), among the arguments that are copied
        self._aliases = aliases([None if i in placed else b for i, b in enumerate(bound)])
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
            if i in placed:   # the array's own memory
                ptrs[i] = ffi.cast("void*", data_address(b.value))
                self.held.append(b.value)
                self.ranges.append(BufferRange(i, b.param.name, int(ffi.cast("uintptr_t", ptrs[i])), b.nbytes))
                if profile is not None:
                    spans.append((self.ranges[-1].address, self.ranges[-1].address + b.nbytes))
                continue
            held = self._aliases.get(i)
            if held is not None and held[0] != i:   # memory another argument holds: its place there
                continue
            ptrs[i] = self._stage(dev, b if held is None else self._span(bound, i))
            if isinstance(b.value, np.ndarray):
                self._array_memory.append((i, self.owned[-1]))
            elif not isinstance(b.value, Buffer):
                self._scalar_memory.append((i, self.owned[-1], b.nbytes))
            self.ranges.append(self._range(dev, i, b.param.name, ptrs[i], b.nbytes))
            if profile is not None and isinstance(b.value, (np.ndarray, Buffer)) and b.nbytes:
                # device memory for the profiler (scalars are set bytes on a GPU, not buffers)
                spans.append((self.ranges[-1].address, self.ranges[-1].address + b.nbytes))
        for i, (j, offset) in self._aliases.items():
            if i != j:
                ptrs[i] = ffi.cast("char*", ptrs[j]) + offset
                self.ranges.append(self._range(dev, i, bound[i].param.name, ptrs[i], bound[i].nbytes))
        self.written = [a for a in self.arrays if a.writes]
        self._set_bounds(self.ranges)
        sizes = ffi.new("size_t[]", tg_sizes or [0])
        desc = ffi.new("mt_launch_desc*")
        # counting runs the instrumented build (the sanitizer's) without its checks unless asked for
        desc.fn = fn.entry(sanitize or profile is not None, checked)
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
        # (not the arrays bound in place, whose neighbours in memory may be other arguments the kernel reaches)
        watch = sorted((i for i, b in enumerate(bound)
                        if b is not None and isinstance(b.value, (np.ndarray, Buffer)) and i not in placed),
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
        for i, mem, nbytes in self._scalar_memory:
            ffi.memmove(mem, bound[i].value, nbytes)
        if self.placed:
            self.held = [bound[i].value for i in self.placed]
            self.ranges = [r for r in self.ranges if r.index not in self.placed]
            for i in self.placed:
                b = bound[i]
                address = data_address(b.value)
                self._ptrs[i] = ffi.cast("void*", address)
                self.ranges.append(BufferRange(i, b.param.name, address, b.nbytes))
            self._set_bounds(self.ranges[-len(self.placed):])

    def _set_bounds(self, ranges: list[BufferRange]) -> None:
        """The address and length in bytes of each buffer of `ranges` in `_bounds`, where a checked build reads them: a
        placeholder's whole mapping (reads of a removed parameter give 0, as in the plain build)."""
        bounds = self._bounds
        for r in ranges:
            bounds[2 * r.index] = r.address
            bounds[2 * r.index + 1] = r.hi - r.lo if r.note else r.nbytes

    def scalar_sizes(self) -> tuple[tuple[int, int], ...]:
        """(argument index, bytes) of each scalar argument, in order."""
        return tuple((i, n) for i, _, n in self._scalar_memory)

    def placed_runs(self) -> PlacedRuns:
        """This dispatch, whose array arguments are all bound in place, as a `PlacedRuns` (it forgets its arrays)."""
        return PlacedRuns(self)

    def release(self) -> None:
        """Forget the arrays of the last run (a kept dispatch must not keep them alive)."""
        self.arrays = self.written = self.held = []

    def run(self, ranges=None) -> None:
        """Copy the numpy arguments in, launch, and copy the results back (or raise the kernel's fault; `ranges()`,
        when given, says where the buffers are, for its report)."""
        rt = self.device.rt
        for a in self.arrays:
            if a.nbytes:
                rt.mt_copy(a.memory, a.source, a.nbytes)
        rec = self.rec
        if rt.mt_launch(self.desc, rec) != 0:
            tr = self.function.library.translation
            raise to_exception(rec, kernel=self.function.name, metal_name=tr.metal_name, source=tr.source,
                               buffers=self.ranges if ranges is None else ranges(),
                               trap_is_misalignment=not self.sanitize and TRAP_MEANS == "misaligned",
                               user_file=tr.line_map.user_file if tr.line_map is not None else None)
        for a in self.written:
            a.write_back(rt.mt_copy)

    def profile(self) -> Profile:
        """The counts of the last run (a dispatch made with `profile=`)."""
        tr = self.function.library.translation
        sig = tr.kernel(self.function.name)
        registers = kernel_registers(tr.cpp if tr.line_map is not None else tr.source, sig) if sig else 0
        return self.profiled.result(self.device.rt, kernel=self.function.name, metal_name=tr.metal_name,
                                    source=tr.source, launch=self._shape, registers=registers,
                                    user_file=tr.line_map.user_file if tr.line_map is not None else None)

    def __call__(self) -> None:
        with self.lock:
            self.run()

    def __repr__(self) -> str:
        return f"<prepared CPU dispatch of {self.function.name}>"


class _Runs:
    """What `PlacedRuns` and `CopiedRuns` share: a prepared dispatch whose scalar memory and grid a call sets again."""

    __slots__ = ("dispatch", "arrays", "_sizes", "_groups")

    def __init__(self, d: CpuDispatch):
        self.dispatch = d
        self._sizes = tuple((mem, nbytes) for _, mem, nbytes in d._scalar_memory)
        self._groups = tuple(d.desc.threadgroups)

    def _set(self, d: CpuDispatch, groups: tuple[int, int, int], scalars) -> None:
        """The call's `scalars` written into the dispatch's scalar memory, and its grid of `groups` threadgroups into
        its descriptor when it changed."""
        for (mem, size), v in zip(self._sizes, scalars):
            ffi.memmove(mem, v, size)
        if groups != self._groups:
            desc = d.desc
            desc.threadgroups = groups
            desc.grid_threads = [g * t for g, t in zip(groups, desc.threads_per_tg)]
            self._groups = groups


class PlacedRuns(_Runs):
    """A prepared dispatch whose array arguments are all bound in place, run again and again with other arrays (their
    addresses), other scalars and another grid: what a repeated launch of torch tensors takes (`metile.launch`), with
    no binding, allocation or copy. `__call__` returns False, running nothing, when another thread runs the dispatch
    or an address does not start 16-byte aligned (the caller then launches the general way)."""

    __slots__ = ("_at",)

    def __init__(self, d: CpuDispatch):
        assert not d.arrays and d.placed, "a dispatch of arrays bound in place only"
        super().__init__(d)
        self.arrays = tuple(sorted(d.placed))   # the argument indices of a call's addresses, in order
        self._at = ffi.cast("uintptr_t*", d._ptrs)
        d.release()

    def __call__(self, groups: tuple[int, int, int], addresses, scalars, spans) -> bool:
        """Run over `groups` with the arrays at `addresses` and the `scalars` (numpy scalars of their parameters'
        types); `spans()` gives each array's bytes, for the report of a fault (and, in a checked build, for its
        checks)."""
        d = self.dispatch
        if not d.lock.acquire(blocking=False):
            return False
        try:
            at = self._at
            for i, a in zip(self.arrays, addresses):
                if a % IN_PLACE_ALIGN:
                    return False
                at[i] = a
            if d.checked:
                bounds = d._bounds
                for i, a, n in zip(self.arrays, addresses, spans()):
                    bounds[2 * i] = a
                    bounds[2 * i + 1] = n
            self._set(d, groups, scalars)
            d.run(lambda: self._ranges(addresses, spans()))
        finally:
            d.lock.release()
        return True

    def _ranges(self, addresses, spans) -> list[BufferRange]:
        d = self.dispatch
        names = {r.index: r.name for r in d.ranges}
        return [r for r in d.ranges if r.index not in d.placed] + [
            BufferRange(i, names.get(i, ""), a, n) for i, a, n in zip(self.arrays, addresses, spans)]


class CopiedRuns(_Runs):
    """A prepared dispatch whose array arguments are all copied into its guarded device memory (C-contiguous, none
    sharing bytes with another but one array given to several parameters), run again and again with other arrays of
    the same sizes (their addresses), other scalars and another grid: what a repeated launch of torch tensors takes by
    default (`metile.launch`). A call copies each array's bytes into the device memory the dispatch has for it and,
    after the kernel, those of the arrays the kernel may write back, as the general way does, without binding,
    allocating or filling a descriptor again; the device memory keeps its guard page, canary and watchpoint, so an
    access past an array's end faults as it does the general way. A dispatch made with one array given to several
    parameters (Liger's JSD kernel reads its input and writes its gradient through two parameters, in place) has one
    copy of it, as the general way makes it (`aliases`), and takes calls that give one array to those parameters
    again. `__call__` returns False, running nothing, when another thread runs the dispatch, an array's size is not
    the one it was made for, two arrays share a byte (other than as the one array it was made for), the parameters
    it was made for do not get one array, or the device took the memory back (`retire`): the caller then launches
    the general way. The device keeps at most `COPIED_BYTES` of such memory (`CpuDevice.keep_copied`)."""

    __slots__ = ("nbytes", "_plan", "_holders", "_same", "_expect")

    def __init__(self, d: CpuDispatch):
        assert d.arrays and not d.placed and not any(at for _, at in d._aliases.values()), \
            "a dispatch of copied arrays of their own memory (an array given to several parameters, whole)"
        super().__init__(d)
        order = sorted(d.arrays, key=_array_index)   # the arrays with device memory of their own
        same = {i: j for i, (j, _) in d._aliases.items() if i != j}   # a parameter given the array of another
        self.arrays = tuple(sorted([_array_index(a) for a in order] + list(same)))   # a call's arrays, in order
        at = {index: k for k, index in enumerate(self.arrays)}
        self._holders = tuple(at[_array_index(a)] for a in order)   # where each copied array is among a call's
        self._same = tuple((at[i], at[j]) for i, j in same.items())   # (position, the position of its array)
        size = {_array_index(a): a.nbytes for a in order}
        self._expect = tuple(size[same.get(i, i)] for i in self.arrays)
        self._plan = tuple((a.memory, a.nbytes, a.writes) for a in order)
        self.nbytes = sum(a.nbytes for a in order)
        d.release()

    def fits(self, nbytes) -> bool:
        """Whether arrays of these sizes (in `arrays` order) are those the dispatch was made for."""
        return all(n == e for n, e in zip(nbytes, self._expect))

    def __call__(self, groups: tuple[int, int, int], addresses, scalars) -> bool:
        """Run over `groups` with the arrays at `addresses` (in `arrays` order, each of the size it was made for:
        `fits`) and the `scalars` (numpy scalars of their parameters' types)."""
        d = self.dispatch
        if d is None or not d.lock.acquire(blocking=False):
            return False
        try:
            if self.dispatch is None:   # retired while this call waited
                return False
            for k, j in self._same:   # the parameters it was made for share one array again
                if addresses[k] != addresses[j]:
                    return False
            plan = self._plan
            if self._same:
                addresses = [addresses[k] for k in self._holders]
            if len(addresses) > 1:   # no two share a byte (the general way makes such arrays one copy)
                spans = sorted((a, a + p[1]) for a, p in zip(addresses, plan))
                if any(spans[k][1] > spans[k + 1][0] for k in range(len(spans) - 1)):
                    return False
            sources = [ffi.cast("void*", a) for a in addresses]
            copy = d.device.rt.mt_copy
            for (mem, nbytes, _), src in zip(plan, sources):
                copy(mem, src, nbytes)
            self._set(d, groups, scalars)
            d.run()   # the kernel's fault, if any, before any write-back (as the general way)
            for (mem, nbytes, writes), dst in zip(plan, sources):
                if writes:
                    copy(dst, mem, nbytes)
        finally:
            d.lock.release()
        return True

    def retire(self) -> None:
        """Give the device memory back: later calls return False."""
        d = self.dispatch
        if d is not None:
            with d.lock:
                self.dispatch = None


def _array_index(a: _Array) -> int:
    return a.bound.param.index


COPIED_BYTES = 256 << 20   # device memory a CPU device keeps for `CopiedRuns` (the oldest retired first)


def copied_runs(d: CpuDispatch, arrays: list[int], scalars: tuple[tuple[int, int], ...]) -> CopiedRuns | None:
    """`d` (just run) as a `CopiedRuns` when it copied exactly the arguments `arrays`, each C-contiguous (and
    writeable where it is written back) and none sharing memory with another but one array given whole to several
    parameters, and its scalars are `scalars` ((index, bytes), in order); else None (and `d` is released)."""
    copied = [_array_index(a) for a in d.arrays]
    same = [i for i, (j, _) in d._aliases.items() if i != j]
    if (sorted(copied + same) != sorted(arrays) or d.placed or any(at for _, at in d._aliases.values())
            or any(a.result is not None for a in d.arrays) or any(a.bound.strided for a in d.arrays)
            or d.scalar_sizes() != scalars or d.profiled is not None or d.sanitize):
        d.release()
        return None
    return CopiedRuns(d)


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


def in_place_request(in_place, default: bool):
    """A dispatch's `in_place=` checked: True (every array that can be), a frozenset of argument indices, "checked"
    (every array that can be, in the kernel's checked build), False, or None: the device's `default` when that is
    True, else "auto" (the arrays of a dispatch that has a large one, in the checked build: `CHECKED_BYTES`). A
    `LaunchError` for anything else."""
    if in_place is None:
        return True if default else AUTO
    if in_place.__class__ is bool or isinstance(in_place, np.bool_):
        return bool(in_place)
    if in_place.__class__ is str and in_place == CHECKED:
        return CHECKED
    try:
        asked = frozenset(in_place) if in_place.__class__ is not str else None
    except TypeError:
        asked = None
    if asked is None or not all(i.__class__ is int and i >= 0 for i in asked):
        raise LaunchError(f"in_place={in_place!r} must be True, False, 'checked', None (the device's setting) or "
                          "argument indices (ints >= 0)")
    return asked


CHECKED = "checked"
AUTO = "auto"
# From this size up, a dispatch left to the device's default binds its arrays in place in the kernel's checked build
# rather than copying them: about what copying costs as much as the checks of a kernel that reads each element once
# (an 8 MiB copy takes ~0.7 ms on a 2-core x86-64 machine).
CHECKED_BYTES = 1 << 20


def in_place_arguments(bound: list[BoundArg | None], asked, copy_all: bool,
                       fn=None) -> tuple[frozenset[int], bool]:
    """The array arguments bound as their own memory (see the module docstring), and whether the kernel runs its checked
    build: those at the indices `asked` (every one when `asked` is True; `in_place_request`) that can be, none when
    `copy_all` (a sanitized or profiled dispatch). For "checked" and "auto" those of `device T*` parameters, in the
    checked build of `fn` (a `LaunchError` for "checked" when it has none; "auto": none unless one of them holds at
    least `CHECKED_BYTES` and the build exists)."""
    if copy_all or not asked:
        return _NONE
    if asked is AUTO and all(b is None or b.nbytes < CHECKED_BYTES for b in bound):   # the common case, at once
        return _NONE
    checked = asked.__class__ is str
    found = set()
    for i, b in enumerate(bound):
        v = None if b is None else b.value
        if (v.__class__ is np.ndarray and b.nbytes and (checked or asked is True or i in asked)
                and not b.param.is_reference and (v.flags.writeable or b.param.is_const)
                and not data_address(v) % IN_PLACE_ALIGN and (not checked or is_device_pointer(b.param.type_text))):
            found.add(i)
    if not found or (asked is AUTO and all(bound[i].nbytes < CHECKED_BYTES for i in found)):
        return _NONE
    copied = [_extent(b) for i, b in enumerate(bound)
              if i not in found and b is not None and b.value.__class__ is np.ndarray and b.nbytes]
    while copied:   # an array sharing bytes with one that is copied is copied too (`aliases` makes them one copy)
        clash = [i for i in found if any(_overlap(_extent(bound[i]), c) for c in copied)]
        if not clash:
            break
        found.difference_update(clash)
        copied += [_extent(bound[i]) for i in clash]
    if not found:
        return _NONE
    if checked and not fn.library.has_checked_build():
        if asked is AUTO:
            return _NONE
        raise LaunchError(f"in_place='checked': kernel `{fn.name}` has no checked build (its source spells a device "
                          "pointer in a way the CPU device cannot check, or turns one into an integer or back; see "
                          "metile.metal.cpu.checked); bind its arrays with in_place=True (unchecked) or let them be "
                          "copied")
    return frozenset(found), checked


_NONE = (frozenset(), False)


IN_PLACE_ALIGN = 16   # what every buffer of the device starts at a multiple of (runtime_buffers.cpp rounds to 16)


def _extent(b: BoundArg) -> tuple[int, int]:
    start = data_address(b.value)
    return start, start + b.nbytes


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def layout_key(bound: list[BoundArg | None], placed: frozenset[int] = frozenset(),
               checked: bool = False) -> tuple | None:
    """What a dispatch made for `bound` depends on besides its kernel and grid: each array's element type, shape,
    strides, span and whether it is written back, each scalar's size, which slots are left unbound, which arrays
    are bound in place (`placed`) and whether the kernel's checked build runs; None when `bound` holds a
    `metile.Buffer` (bound as it is: such a dispatch is not kept)."""
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
    copied = [None if i in placed else b for i, b in enumerate(bound)] if placed else bound
    return tuple(key) + tuple(sorted(aliases(copied).items())) + (tuple(sorted(placed)), checked)
