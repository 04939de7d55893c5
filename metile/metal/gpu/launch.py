"""Launch arguments for the Metal device: checked once, turned into a cffi binding table, reused while unchanged.

`prepare_arguments` checks `args` against the kernel's `[[buffer(i)]]` parameters (`bind_arguments`,
shared with the CPU device) and the `threadgroup_memory` sizes against the device's limit, then builds
the `mts_binding[]` table: `metile.Buffer`s bind their `MTLBuffer`, scalars are copied for `setBytes`,
and numpy arrays get an `ArraySlot` that the command stream fills at each launch. An array of another library
in Metal memory (a torch `mps` tensor, an MLX array: DLPack device `kDLMetal`) binds its own `MTLBuffer` at its
`byte_offset`, with no copy, after its producer has finished writing it (`torch.mps.synchronize()`, `mx.eval`);
an MLX array (immutable) where the kernel may write is read through the host instead (`metal_views`). The kernel
writes into a torch tensor directly, and torch sees the results after `metile.synchronize()`. A function keeps its
last `PreparedArgs`; the next launch with the very same objects reuses it without checking again, but waits for the
producers of such arrays again (a prepared dispatch too, at each call): their library may have written them since.
Buffers and arrays are held there by weak reference, so a cached table never keeps memory alive.
"""

from __future__ import annotations

import weakref

import numpy as np

from metile.metal.args import BoundArg, bind_arguments, element_type, round_up, threadgroup_sizes
from metile.metal.buffer import Buffer
from metile.metal.dlpack import DLPackError, DLView, read_capsule
from metile.metal.errors import LaunchError, MetalExportError
from metile.metal.gpu.memory import MetalMemory
from metile.metal.interop import (
    DL_METAL,
    IMMUTABLE_LIBRARIES,
    describe_producer,
    device_of,
    is_foreign_array,
    library_of,
    metal_export_problem,
)

_DL_NAMES = {1: "kDLCPU", 2: "kDLCUDA", 3: "kDLCUDAHost", 7: "kDLVulkan", 10: "kDLROCM"}


class ArraySlot:
    """Where a numpy argument goes: its [[buffer(i)]] index, name, size (its span) and whether results come back."""

    __slots__ = ("bound", "index", "name", "nbytes", "write_back", "strided")

    def __init__(self, b: BoundArg):
        self.bound = b
        self.index = b.param.index
        self.name = b.param.name
        self.nbytes = b.nbytes
        self.write_back = b.write_back
        self.strided = b.strided


class PreparedArgs:
    """One launch's checked arguments and the cffi tables the shim reads."""

    __slots__ = ("refs", "tg_key", "table", "n", "tg", "n_tg", "arrays", "owned", "producers")

    def __init__(self, refs: tuple, tg_key: tuple, table, n: int, tg, n_tg: int,
                 arrays: tuple[ArraySlot, ...], owned: list, producers: tuple = ()):
        self.refs = refs          # the argument objects (Buffers and arrays as weak references)
        self.tg_key = tg_key      # the threadgroup_memory sizes as given (a tuple)
        self.table = table        # mts_binding[n]
        self.n = n
        self.tg = tg              # uint64_t[n_tg], rounded up to 16 bytes
        self.n_tg = n_tg
        self.arrays = arrays      # numpy arguments, staged per launch
        self.owned = owned        # cffi memory the table points into
        self.producers = producers   # arrays of other libraries bound in Metal memory: waited for at every launch

    def matches(self, args, tg_memory: tuple) -> bool:
        """Whether `args` are the same objects (and the same threadgroup sizes) this was prepared from."""
        refs = self.refs
        if len(args) != len(refs) or tg_memory != self.tg_key:
            return False
        for a, r in zip(args, refs):
            if a is not r and (r.__class__ is not weakref.ref or r() is not a):
                return False
        return True


def prepare_arguments(device, fn, args, tg_memory) -> PreparedArgs:
    """Check `args` for `fn` on `device` and build the binding table (raises LaunchError)."""
    ffi = device.shim.ffi
    sig = fn.signature
    sizes = threadgroup_sizes(sig, fn.threadgroup_params, tg_memory,
                              device.max_threadgroup_memory - fn.static_threadgroup_memory,
                              device.max_threadgroup_memory)
    args = tuple(args)
    written = frozenset(p.index for p in sig.buffers if not p.is_const and not p.is_reference)
    bound = bind_arguments(sig, metal_views(args, written=written), (Buffer, DLView))
    table = ffi.new("mts_binding[]", max(len(bound), 1))
    owned: list = []
    arrays: list[ArraySlot] = []
    for i, b in enumerate(bound):
        if b is None or b.value is None:   # no parameter, or one left unbound: Metal lets the index stay empty
            continue
        v = b.value
        if isinstance(v, Buffer):
            mem = v._mem
            if v.device is not device or not isinstance(mem, MetalMemory):
                raise LaunchError(f"argument {i} (`{b.param.name}`) lives on device {v.device.name!r}, "
                                  "not on this Metal device")
            table[i].buffer = mem.handle
            table[i].length, table[i].align = b.nbytes, type_alignment(b.param)
        elif isinstance(v, DLView):    # Metal memory of another library: its MTLBuffer, at its offset
            align = type_alignment(b.param)
            if align > 1 and v.byte_offset % align:
                raise LaunchError(f"argument {i} (`{b.param.name}`) starts {v.byte_offset} bytes into its Metal "
                                  f"buffer, not at a multiple of {align} bytes, the alignment of "
                                  f"`{b.param.element_type}` that Metal requires of a buffer's offset: pass a copy "
                                  "(`t.clone()`) or a view that starts at a whole element")
            table[i].buffer = ffi.cast("mts_buffer*", v.data)
            table[i].offset = v.byte_offset
            table[i].length, table[i].align = b.nbytes, align
            owned.append(v)            # holds the capsule, and so the producer's tensor
        elif isinstance(v, bytes):     # a scalar for a `constant T&` (the shim takes up to 4095 bytes)
            data = ffi.new("char[]", v)
            table[i].bytes = data
            table[i].length = len(v)
            owned.append(data)
        else:
            arrays.append(ArraySlot(b))
    refs = tuple(weakref.ref(a) if isinstance(a, (Buffer, np.ndarray)) else a for a in args)
    tg = ffi.new("uint64_t[]", [round_up(s) for s in sizes] or [0])
    producers = tuple(a for a in args if is_foreign_array(a) and device_of(a)[0] == DL_METAL)
    return PreparedArgs(refs, tuple(tg_memory), table, len(bound), tg, len(sizes), tuple(arrays), owned, producers)


def type_alignment(p) -> int:
    """The alignment of what the buffer parameter `p` points at, which Metal requires of its buffer's offset (its
    size's largest power-of-two factor, at most 16: a `float4` 16, a `packed_float3` 4); 0 when it is not known."""
    size = element_type(p.element_type).size
    return min(size & -size, 16) if size else 0


def finish_producers(prepared: PreparedArgs) -> None:
    """Wait for what the libraries of the arrays a reused launch binds in Metal memory have queued on the GPU since
    they were bound: torch may have written the same tensor since (metile's command queue is another one)."""
    done = set()
    for value in prepared.producers:
        library = library_of(value)
        if library != "mlx" and library in done:   # torch waits for all its work at once
            continue
        done.add(library)
        _finish_producer(value)


def metal_views(args: tuple, first: int = 0, written: frozenset = frozenset()) -> tuple:
    """`args` (arguments `first`, `first + 1`... of the launch) with each array of another library that lives in
    Metal memory replaced by the `DLView` of its DLPack capsule, once its producer has finished writing it. The
    capsule must describe Metal memory too: its data pointer is then the `id<MTLBuffer>` the shim binds, and a
    capsule that says otherwise (MLX before 0.32 exports its CPU contents pointer as `kDLCPU`) is refused with
    `MetalExportError` before anything reads its pointer, as is a library version known to export no buffer.
    An array of a library whose arrays are immutable (MLX) at an index in `written` (a parameter the kernel may write)
    stays as it is: it is read through the host, as on the CPU device, into a copy that a kernel writing it makes a
    `LaunchError` at `synchronize()`, and its own memory is never written."""
    out = list(args)
    for i, a in enumerate(args, first):
        if is_foreign_array(a) and device_of(a)[0] == DL_METAL:
            if i in written and library_of(a) in IMMUTABLE_LIBRARIES:
                continue
            out[i - first] = _metal_view(a, i)
    return tuple(out)


def _metal_view(value, i: int) -> DLView:
    problem = metal_export_problem(value)
    if problem is not None:
        raise MetalExportError(f"argument {i} {problem}", index=i, reason=problem)
    _finish_producer(value)
    try:
        view = read_capsule(value.__dlpack__())
    except DLPackError as e:
        raise LaunchError(f"argument {i} {e}") from None
    except (ValueError, TypeError, RuntimeError, BufferError) as e:   # the library's refusal (torch 2.8 on mps)
        reason = (f"is {describe_producer(value)} in Metal memory that its library does not export through DLPack "
                  f"({type(e).__name__}: {e}): upgrade it (mlx>=0.32, torch>=2.9 export Metal memory), or pass a CPU "
                  "copy")
        raise MetalExportError(f"argument {i} {reason}", index=i, reason=reason) from None
    if view.device_type != DL_METAL:
        where = _DL_NAMES.get(view.device_type, f"device type {view.device_type}")
        reason = (f"is {describe_producer(value)} that reports Metal memory (its `__dlpack_device__()` is kDLMetal) "
                  f"but whose DLPack capsule describes {where} memory: its data pointer is no Metal buffer and metile "
                  "does not bind it (MLX before 0.32 exports Metal arrays so): upgrade the library (pip install "
                  "'mlx>=0.32'), or pass a CPU copy (`np.array(x)`)")
        raise MetalExportError(f"argument {i} {reason}", index=i, reason=reason)
    return view


def _finish_producer(value) -> None:
    """Wait for the work the array's library has queued on the GPU (metile's command queue is another one)."""
    library = library_of(value)
    if library == "torch":
        import torch

        torch.mps.synchronize()
    elif library == "mlx":
        import mlx.core as mx

        mx.eval(value)


class MetalDispatch:
    """A launch checked and bound once (`MetalDevice.prepare_threadgroups` / `prepare_threads`): calling it queues
    it again with the same arguments, as a dispatch with them would (numpy arrays are staged and written back at
    `synchronize()`), without checking them again."""

    __slots__ = ("device", "function", "kind", "size", "tpt", "args", "prepared")

    def __init__(self, device, fn, kind: int, size, tpt, args, prepared: PreparedArgs):
        self.device, self.function, self.kind, self.size, self.tpt = device, fn, kind, size, tpt
        self.args = args            # held, so that the table's weak references stay valid
        self.prepared = prepared

    def __call__(self) -> None:
        dev = self.device
        if self.prepared.producers:
            finish_producers(self.prepared)
        with dev._lock:
            dev.stream.encode(self.function, self.prepared, self.args, self.kind, self.size, self.tpt)

    def __repr__(self) -> str:
        return f"<prepared Metal dispatch of {self.function.name}>"
