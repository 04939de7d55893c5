"""A C stand-in for the Metal shim, for testing the Metal device where there is no Metal.

`build_stub(workdir)` compiles `stub_shim.c` (an implementation of `metile/metal/gpu/shim.h`) with cffi
in API mode, as the real shim is built, and returns a `Stub`: the `Shim` to give `MetalDevice`, plus
access to the stand-in's call log, handle counts, failure injection and dispatch replay.

Replaying dispatches: `stub.execute_with(executor)` registers a Python function that receives each
dispatch at `mts_commands_wait` as a `Replay` (kernel source and name, grid, and numpy views of the bound
memory typed by the kernel's signature). `numpy_kernels({...})` makes an executor from plain Python
functions; `cpu_device_executor(cpu)` runs the MSL itself on metile's CPU device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np

from metile.metal.args import element_type
from metile.metal.cpu.toolchain import cached_build, sha256_hex
from metile.metal.gpu import _build
from metile.metal.gpu.binding import Shim, load_extension
from metile.metal.msl_signature import KernelSignature, kernel_signatures

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "stub_shim.c"
CONTROLS = HERE / "stub_controls.h"
MODULE_NAME = "_metile_metal_stub"


@attrs.frozen
class Replay:
    """One dispatch handed back by the stand-in: what ran, on what grid, and views of its arguments."""

    source: str
    function: str
    kind: str                                # "threadgroups" or "threads"
    size: tuple[int, int, int]
    threads_per_threadgroup: tuple[int, int, int]
    args: tuple                              # per [[buffer(i)]]: a numpy view, a numpy scalar, or None
    threadgroup_memory: tuple[int, ...]

    @property
    def grid(self) -> tuple[int, int, int]:
        """Threads in the grid."""
        if self.kind == "threads":
            return self.size
        return tuple(g * t for g, t in zip(self.size, self.threads_per_threadgroup))


Executor = Callable[[Replay], None]


class Stub:
    """The stand-in shim and its controls (one per process; `reset()` between tests)."""

    def __init__(self, shim: Shim):
        self.shim = shim
        self.ffi, self.lib = shim.ffi, shim.lib
        self._callback = None
        self.errors: list[BaseException] = []

    def reset(self) -> None:
        self.lib.mts_stub_reset()
        self._callback = None
        self.errors.clear()

    # -- call log and handles -----------------------------------------------------------------------------------
    def log(self) -> list[str]:
        return self.ffi.string(self.lib.mts_stub_log()).decode().splitlines()

    def calls(self, entry: str) -> list[str]:
        """Log lines of calls to `entry` (e.g. "library_from_source")."""
        return [line for line in self.log() if line.split(" ", 1)[0] == entry]

    def clear_log(self) -> None:
        self.lib.mts_stub_clear_log()

    def live(self, kind: str) -> int:
        return self.lib.mts_stub_live(kind.encode())

    def created(self, kind: str) -> int:
        return self.lib.mts_stub_created(kind.encode())

    def counts(self) -> dict[str, int]:
        kinds = ("device", "library", "pipeline", "buffer", "commands")
        return {k: self.live(k) for k in kinds} | {"bad_releases": self.lib.mts_stub_bad_releases(),
                                                   "buffers_in_memory": self.lib.mts_stub_buffers_in_memory()}

    # -- configuration ------------------------------------------------------------------------------------------
    def fail(self, entry: str, code: int, message: str, *, skip: int = 0, detail: int = 0) -> None:
        """Make a later call to `entry` fail with `code` and `message` (after `skip` more calls succeed)."""
        self.lib.mts_stub_fail(entry.encode(), skip, code, detail, message.encode())

    def set_device_info(self, *, tensor_probe: bool = False, **fields) -> None:
        """The device the stand-in reports (`mts_device_info` fields), and whether its tensor probe compiles."""
        self.lib.mts_stub_set_tensor_probe(int(tensor_probe))
        info = self.ffi.new("mts_device_info*")
        defaults = {"name": b"metile stub GPU (Apple M2)", "apple_family": 8,
                    "max_threads_per_threadgroup": [1024, 1024, 1024], "max_threadgroup_memory": 32768,
                    "recommended_working_set": 16 << 30, "has_unified_memory": 1, "nonuniform_threadgroups": 1}
        for key, value in (defaults | fields).items():
            setattr(info, key, value)
        self.lib.mts_stub_set_device_info(info)

    def set_pipeline_info(self, **fields) -> None:
        info = self.ffi.new("mts_pipeline_info*", {"max_total_threads_per_threadgroup": 1024,
                                                   "thread_execution_width": 32} | fields)
        self.lib.mts_stub_set_pipeline_info(info)

    def set_logging(self, on: bool) -> None:
        self.lib.mts_stub_set_logging(1 if on else 0)

    def set_wrap(self, mode: str) -> None:
        """What `newBufferWithBytesNoCopy` does: "whole", "nil" or "short" (a page less than asked)."""
        self.lib.mts_stub_set_wrap({"whole": 0, "nil": 1, "short": 2}[mode])

    def set_system(self, os_major: int, *, default_device: bool = True, metal4_family: bool = False,
                   tensor_probe: bool = False) -> None:
        """The macOS the stand-in models, whether it has a default Metal device, what supportsFamily: Metal4
        answers and whether the MSL 4 tensor probe compiles."""
        self.lib.mts_stub_set_system(os_major, int(default_device), int(metal4_family), int(tensor_probe))

    def set_compile_warnings(self, text: str) -> None:
        """What a successful compile returns as warnings."""
        self.lib.mts_stub_set_compile_warnings(text.encode())

    def execute_with(self, executor: Executor | None) -> None:
        """Run every dispatch through `executor` when its command buffer is waited for."""
        if executor is None:
            self._callback = None
            self.lib.mts_stub_set_executor(self.ffi.NULL)
            return

        def run(d, message, size):
            try:
                executor(self._replay(d))
                return 0
            except BaseException as e:   # a fault of the replayed kernel fails the command buffer
                self.errors.append(e)
                text = f"{type(e).__name__}: {e}".encode()[: size - 1]
                self.ffi.memmove(message, text + b"\0", len(text) + 1)
                return 1

        self._callback = self.ffi.callback("mts_stub_executor", run)
        self.lib.mts_stub_set_executor(self._callback)

    def _replay(self, d) -> Replay:
        ffi = self.ffi
        source = ffi.string(d.source).decode()
        function = ffi.string(d.function).decode()
        sig = _signature(source, function)
        params = {p.index: p for p in sig.buffers}
        args = []
        for i in range(d.n_bindings):
            p, data = params.get(i), d.binding_data[i]
            if p is None or data == ffi.NULL:
                args.append(None)
                continue
            raw = np.frombuffer(ffi.buffer(data, d.binding_length[i]), dtype=np.uint8)
            et = element_type(p.element_type)   # bfloat as its bits, as the CPU device takes it
            dtype = et.dtype or np.dtype(np.uint16 if et.scalar == "bfloat" else np.uint8)
            view = raw[: len(raw) // dtype.itemsize * dtype.itemsize].view(dtype)
            args.append(view[0] if d.binding_is_bytes[i] and p.is_reference else view)
        return Replay(source, function, "threads" if d.kind == 1 else "threadgroups", tuple(d.size),
                      tuple(d.threads_per_threadgroup), tuple(args),
                      tuple(d.threadgroup_memory[i] for i in range(d.n_threadgroup_memory)))


@functools.cache
def _signature(source: str, function: str) -> KernelSignature:
    return next(k for k in kernel_signatures(source) if k.name == function)


def stub_path(workdir: Path) -> Path:
    key = sha256_hex("metal-stub", SOURCE.read_bytes(), CONTROLS.read_bytes(), _build.HEADER.read_bytes(),
                     _build.LOGIC_HEADER.read_bytes(),
                     Path(_build.__file__).read_bytes())
    return workdir / f"{MODULE_NAME}-{key[:16]}.so"


def build_stub(workdir: Path) -> Stub:
    """Compile the stand-in (once per `workdir` and source version) and load it."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = stub_path(workdir)

    def build(out: Path) -> None:
        spec = _build.ModuleSpec(MODULE_NAME, (SOURCE,), extra_headers=(CONTROLS,), compile_args=("-Wall",))
        _build.compile_module(spec, out)

    stub = Stub(load_extension(cached_build(path, build), MODULE_NAME))
    stub.reset()
    return stub


def numpy_kernels(kernels: dict[str, Callable[..., None]]) -> Executor:
    """An executor that runs each dispatch with `kernels[name](replay, *args)` (args are writable views)."""

    def execute(r: Replay) -> None:
        kernels[r.function](r, *r.args)

    return execute


def cpu_device_executor(cpu) -> Executor:
    """An executor that runs each dispatch's MSL on metile's CPU device, in place on the stand-in's memory."""

    def execute(r: Replay) -> None:
        fn = cpu.compile(r.source, name="replayed.metal").function(r.function)
        launch = cpu.dispatch_threads if r.kind == "threads" else cpu.dispatch_threadgroups
        launch(fn, r.size, r.threads_per_threadgroup, list(r.args), threadgroup_memory=list(r.threadgroup_memory))

    return execute


KERNELS = """
#include <metal_stdlib>
using namespace metal;

kernel void add(device const float* a [[buffer(0)]],
                device const float* b [[buffer(1)]],
                device float* out [[buffer(2)]],
                constant uint& n [[buffer(3)]],
                uint gid [[thread_position_in_grid]]) {
    if (gid < n) {
        out[gid] = a[gid] + b[gid];
    }
}

kernel void block_sum(device const float* x [[buffer(0)]],
                      device float* sums [[buffer(1)]],
                      threadgroup float* scratch [[threadgroup(0)]],
                      uint lid [[thread_position_in_threadgroup]],
                      uint tg [[threadgroup_position_in_grid]],
                      uint tpt [[threads_per_threadgroup]]) {
    scratch[lid] = x[tg * tpt + lid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid == 0) {
        float s = 0.0f;
        for (uint i = 0; i < tpt; i++) s += scratch[i];
        sums[tg] = s;
    }
}
"""


def numpy_add(r: Replay, a, b, out, n) -> None:
    out[:n] = a[:n] + b[:n]


def numpy_block_sum(r: Replay, x, sums) -> None:
    tpt = r.threads_per_threadgroup[0]
    groups = r.size[0] if r.kind == "threadgroups" else -(-r.size[0] // tpt)
    sums[:groups] = x[: groups * tpt].reshape(groups, tpt).sum(axis=1)


NUMPY_KERNELS = {"add": numpy_add, "block_sum": numpy_block_sum}


class FakeXcrun:
    """Stands in for `xcrun`: absent, or a Metal toolchain whose "metallib" is a copy of the source."""

    def __init__(self, present: bool = True, compile_output: str | None = None, link_fails: bool = False,
                 runs: bool = True):
        self.present = present
        self.runs = runs                       # False: found by `xcrun --find` but cannot run (no toolchain)
        self.compile_output = compile_output   # "{src}" is replaced with the source path
        self.link_fails = link_fails
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        from metile.metal.gpu.compile import RunResult

        argv = list(argv)
        self.calls.append(argv)
        if not self.present:
            return RunResult(127, "[Errno 2] No such file or directory: 'xcrun'")
        if "--find" in argv:
            return RunResult(0, f"/Applications/Xcode.app/usr/bin/{argv[-1]}\n")
        if not self.runs:
            return RunResult(1, "error: cannot execute tool 'metal' due to missing Metal Toolchain\n")
        if "--version" in argv:
            return RunResult(0, "Apple metal version 32023.404 (metalfe-32023.404)\n")
        src, out = argv[-3], argv[-1]
        if "-c" in argv:
            if self.compile_output is not None:
                return RunResult(1, self.compile_output.replace("{src}", src))
        elif self.link_fails:
            return RunResult(1, "metallib: error: cannot link\n")
        Path(out).write_bytes(Path(src).read_bytes())
        return RunResult(0, "")

    def compiles(self) -> list[list[str]]:
        return [c for c in self.calls if "-c" in c]
