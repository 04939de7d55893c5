"""The CPU device: compiles MSL text with the system C++ compiler and runs it with Metal's execution model.

`dev.compile(msl)` returns a `CpuLibrary`; `lib.function(name)` a `CpuFunction` (`lib.function(name,
constants={index_or_name: value})` one specialised with function constant values, each value set built once and
cached, see `metile.metal.function_constants`); `dispatch_threadgroups` and `dispatch_threads` run it on every core
(threadgroups are taken by one worker per core; the threads of a threadgroup are cooperative fibers). Dispatches
complete before they return, so `synchronize()` has nothing to wait for; numpy arrays are written back as soon as a
dispatch ends. Every array (a torch tensor too) is copied into guarded device memory, so that an access past its
end raises `DeviceFault`, except in a dispatch with an array of `CHECKED_BYTES` or more, which binds its arrays as
their own memory and runs the kernel's checked build, whose accesses are checked (`metile.metal.cpu.checked`);
`in_place=True` (or `CpuOptions.in_place_arrays`, `METILE_CPU_IN_PLACE=1`) binds arrays as their own memory in the
plain build, without copies, guard pages or checks (`metile.metal.cpu.dispatch`). `prepare_threadgroups` and
`prepare_threads` check and bind a dispatch once and return it (`metile.metal.cpu.dispatch.CpuDispatch`) to be called
again and again. `sanitize=True` runs a build of the
kernel that also reports reads of uninitialised threadgroup memory and data races on it; `timeout=` (seconds, 0 for
none) replaces the device's watchdog time for one dispatch. A threadgroup barrier that not every thread of its
threadgroup executes is a `DeviceFault`, as MSL requires them all to; `uniform_barriers=False` counts barriers per
simdgroup as Apple GPUs do instead (letting returned threads and other barrier lines pass), for kernels that rely on
it (MLX's gemv).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import attrs
import numpy as np

from metile.emit.artifact import MslArtifact
from metile.ir.target import DEFAULT_TARGET
from metile.metal.args import bind_arguments, dim3, run_options_problem, threadgroup_sizes
from metile.metal.buffer import Buffer
from metile.metal.cpu.build import KernelBuilder
from metile.metal.cpu.dispatch import (
    CHECKED_BYTES,
    COPIED_BYTES,
    CopiedRuns,
    CpuDispatch,
    copied_runs,
    in_place_arguments,
    in_place_request,
    layout_key,
)
from metile.metal.cpu.function_constants import explain_unseen, specialize
from metile.metal.cpu.msl import Translation, entry_symbol, translate
from metile.metal.cpu.placeholders import Placeholders
from metile.metal.cpu.profiling import sample_size
from metile.metal.cpu.runtime_api import ffi, load_runtime
from metile.metal.cpu.toolchain import Compiler, find_compiler
from metile.metal.errors import FunctionConstantError, LaunchError, MSLCompileError
from metile.metal.msl_preprocess import (
    include_directories,
    needs_preprocessing,
    preprocess,
    read_msl_file,
    stub_headers,
)
from metile.metal.msl_signature import KernelSignature, Param
from metile.profile.counts import Profile

CHECKED_BUILD = "checked"   # the key of a library's checked build among its builds (False: plain, True: sanitizer)
MAX_THREADS_PER_THREADGROUP = 1024
MAX_THREADGROUP_MEMORY = 32 * 1024
SIMD_WIDTH = 32


@attrs.frozen
class CpuOptions:
    """Settings of a CPU device (built by `metile.device()` from the environment)."""

    cache_dir: Path
    compiler: str | None = None      # $CXX
    workers: int = 0                 # 0: one per core
    timeout_s: float = 120.0         # watchdog per dispatch
    stack_bytes: int = 0             # per GPU thread; 0: runtime default
    in_place_arrays: bool = False    # $METILE_CPU_IN_PLACE: bind arrays as their own memory (no copy, no guard page)


class CpuFunction:
    """One kernel function of a compiled library (the counterpart of a compute pipeline state)."""

    def __init__(self, library: CpuLibrary, signature: KernelSignature, buffer_slots: int = 0,
                 removed: tuple[Param, ...] = ()):
        self.library = library
        self.signature = signature
        self.name = signature.name
        # [[buffer(i)]] slots of the kernel's C++ function, with the parameters a function constant removed
        self.buffer_slots = buffer_slots
        self.removed = removed   # those parameters (bound to read-only zeros, see metile.metal.cpu.placeholders)
        self._entry = {}

    @property
    def max_total_threads_per_threadgroup(self) -> int:
        return self.signature.max_total_threads or MAX_THREADS_PER_THREADGROUP

    @property
    def thread_execution_width(self) -> int:
        return SIMD_WIDTH

    def entry(self, sanitize: bool, checked: bool = False):
        """The runtime entry point of the plain, sanitizer or checked build (compiling the last two on first use)."""
        key = CHECKED_BUILD if checked else sanitize
        fn = self._entry.get(key)
        if fn is None:
            lib = self.library.handle(sanitize, checked)
            fn = ffi.cast("mt_kernel_fn", getattr(lib, entry_symbol(self.name)))
            self._entry[key] = fn
        return fn

    def __repr__(self) -> str:
        return f"CpuFunction({self.name!r})"


class CpuLibrary:
    """MSL compiled for the CPU device (the counterpart of an `MTLLibrary`)."""

    def __init__(self, device: CpuDevice, translation: Translation, source_dir: Path | None,
                 values: dict[str, object] | None = None):
        self.device = device
        self.source_dir = source_dir
        self._handles: dict[bool | str, object] = {}
        self._checked: bool | None = None   # whether the checked build compiled (None: not tried yet)
        self._specialized: dict[tuple, CpuLibrary] = {}
        self._unspecialized = translation
        slots = {k.name: max((p.index + 1 for p in k.buffers), default=0) for k in translation.kernels}
        conditional = any(p.function_constant for k in translation.kernels for p in k.params)
        if values is not None or translation.function_constants or conditional:
            translation = specialize(translation, values or {})
        self.translation = translation
        full = {k.name: k for k in self._unspecialized.kernels}
        self._functions = {k.name: CpuFunction(self, k, slots[k.name], _removed(full[k.name], k))
                           for k in translation.kernels}

    @property
    def function_names(self) -> list[str]:
        return list(self._functions)

    @property
    def function_constants(self):
        """The function constants the source (and the headers it includes by path) declares."""
        return self.translation.function_constants

    def function(self, name: str, constants: dict | None = None) -> CpuFunction:
        """The kernel `name`; `constants` gives function constant values by index or name (Metal's
        `newFunctionWithName:constantValues:error:`), refused if a value does not fit its constant or a constant
        the kernel requires has none."""
        fn = self._functions.get(name)
        if fn is None:
            raise LaunchError(f"no kernel function `{name}` in {self.translation.metal_name}; "
                              f"it defines: {', '.join(self._functions)}")
        table = self.translation.function_constants
        if not table:
            if constants:
                raise FunctionConstantError(f"{self.translation.metal_name} declares no function constants; "
                                            f"kernel `{name}` takes no constants= (got {constants!r})")
            return fn
        values = table.resolve(name, constants, self.translation.metal_name)
        if not values:
            return fn
        key = tuple(sorted((table.by_name(n).index, repr(v)) for n, v in values.items()))
        with self.device._lock:
            lib = self._specialized.get(key)
        if lib is None:
            lib = CpuLibrary(self.device, self._unspecialized, self.source_dir, values)
            lib.handle(False)  # compile now so that errors surface here
            with self.device._lock:
                lib = self._specialized.setdefault(key, lib)
        return lib._functions[name]

    @property
    def built(self) -> frozenset[str]:
        """The builds of the source compiled so far: "plain", "sanitizer" (also what a profile runs), "checked"."""
        names = {False: "plain", True: "sanitizer", CHECKED_BUILD: "checked"}
        return frozenset(names[k] for k in self._handles)

    def has_checked_build(self) -> bool:
        """Whether the source has a checked build (metile.metal.cpu.checked) that compiles, building it on first use;
        a source whose checked build does not compile is not an error (its arrays are copied instead)."""
        ok = self._checked
        if ok is None:
            ok = self.translation.checked_cpp is not None
            if ok:
                try:
                    self.handle(False, True)
                except MSLCompileError:
                    ok = False
            self._checked = ok
        return ok

    def handle(self, sanitize: bool, checked: bool = False):
        key = CHECKED_BUILD if checked else sanitize
        lib = self._handles.get(key)
        if lib is None:
            try:
                path = self.device.builder.build(self.translation, sanitize=sanitize, source_dir=self.source_dir,
                                                 checked=checked)
            except MSLCompileError as e:
                raise explain_unseen(e) from None
            cdefs = "".join(f"void {entry_symbol(n)}(void* const*, const mt_thread_pos*);\n"
                            for n in self._functions)
            kffi = _kernel_ffi(cdefs)
            lib = kffi.dlopen(str(path), ffi.RTLD_NOW | ffi.RTLD_LOCAL)
            self._handles[key] = lib
        return lib


def _removed(full: KernelSignature, specialised: KernelSignature) -> tuple[Param, ...]:
    """The buffer parameters of `full` that a function constant removed and whose index no other parameter takes."""
    present = {p.index for p in specialised.buffers}
    return tuple(p for p in full.buffers if p not in specialised.params and p.index not in present)


_ffi_lock = threading.Lock()
KEPT_DISPATCHES = 8   # dispatches a device keeps to take again (the most recently run)
_kernel_ffis: dict[str, object] = {}


def _kernel_ffi(cdefs: str):
    """A child FFI declaring a library's entry points (shared among libraries with the same names)."""
    with _ffi_lock:
        k = _kernel_ffis.get(cdefs)
        if k is None:
            import cffi

            k = cffi.FFI()
            k.include(ffi)
            k.cdef(cdefs)
            _kernel_ffis[cdefs] = k
        return k


class CpuDevice:
    """Runs MSL on the CPU. Properties mirror an Apple GPU's limits so that kernels behave alike."""

    name = "cpu"
    max_threads_per_threadgroup = MAX_THREADS_PER_THREADGROUP
    max_threadgroup_memory = MAX_THREADGROUP_MEMORY
    simd_width = SIMD_WIDTH
    supports_tensor_ops = True    # Metal 4 tensors and matmul2d run (include/mt_tensor.h, mt_mpp.h)
    tensor_ops_accelerated = False  # on the CPU: no Neural Accelerators
    target = DEFAULT_TARGET       # what kernels compile for unless a launch gives `target=`: an M1 (tensor ops run too)
    supports_sanitize = True      # sanitize=True on a dispatch
    supports_profile = True       # profile= on a dispatch
    supports_addresses = True     # pointers made from integer addresses (the kernel runs in this process)
    binds_in_place = True         # in_place= on a dispatch (`metile.metal.cpu.dispatch.in_place_arguments`)
    checked_in_place_bytes = CHECKED_BYTES   # from this size up, an array left to the device is bound in place

    def __init__(self, options: CpuOptions):
        self.options = options
        self.compiler: Compiler = find_compiler(options.compiler)
        self.rt = load_runtime(self.compiler, options.cache_dir)
        self.builder = KernelBuilder(self.compiler, options.cache_dir)
        self.placeholders = Placeholders()   # what parameters without memory of their own point at
        self._libraries: dict[tuple[str, str, str, str | None], CpuLibrary] = {}
        self._lock = threading.Lock()
        self._kept: dict[tuple, CpuDispatch] = {}   # dispatches to take again (`metile.metal.cpu.dispatch`)
        self._copied: list[CopiedRuns] = []   # the `CopiedRuns` holding device memory, oldest first

    def __repr__(self) -> str:
        return f"<metile device 'cpu' ({self.compiler.kind} {self.compiler.major}, {os.cpu_count()} cores)>"

    # -- memory ---------------------------------------------------------------------------------------------------
    def allocate(self, nbytes: int, *, staging: bool = False):
        """Guarded device memory of `nbytes` bytes, zero, or with `staging=True` holding whatever a freed buffer left
        (for memory the caller fills at once: freed mappings are reused, see runtime_buffers.cpp)."""
        alloc = self.rt.mt_buffer_alloc_staging if staging else self.rt.mt_buffer_alloc
        raw = alloc(max(nbytes, 1))
        if raw == ffi.NULL:
            raise MemoryError(f"cannot allocate {nbytes} bytes of device memory")
        return ffi.gc(ffi.cast("char*", raw), self.rt.mt_buffer_free, size=nbytes)

    def address_of(self, mem) -> int:
        return int(ffi.cast("uintptr_t", mem))

    def memory_view(self, mem, nbytes: int):
        return ffi.buffer(mem, nbytes)

    # -- compilation ----------------------------------------------------------------------------------------------
    def compile(self, source: str | MslArtifact | None, *, name: str | None = None,
                path: str | os.PathLike | None = None, include_dirs: Sequence[str | os.PathLike] = (),
                build: bool = True) -> CpuLibrary:
        """Compile MSL text. `name` (or `path`) is the file name messages and faults use; `include_dirs` are
        searched by `#include` (quoted includes first beside `path`). A kernel metile emitted, an `MslArtifact`,
        compiles as it is: its text, under the file name it gives, its kernel bound as its signature says; with
        `build=False` its C++ build is left to its first dispatch, which builds only the build it runs (the plain
        one, or the checked one when its arrays are bound in place: a launch with a large array), instead of the
        plain one now and the checked one then."""
        if isinstance(source, MslArtifact):
            return self._compile_artifact(source, build)
        if path is not None:
            path = Path(path)
            if source is None:
                source = read_msl_file(path)
        if not isinstance(source, str):
            raise MSLCompileError(f"compile() takes MSL source text, not {type(source).__name__}")
        metal_name = str(path) if path is not None else (name or "kernel.metal")
        dirs = include_directories(include_dirs)
        pre = None
        if needs_preprocessing(source):   # each time: the headers it includes may have changed
            pre = preprocess(source, metal_name, compiler=self.compiler.path, include_dirs=dirs,
                             stub_dir=stub_headers(self.options.cache_dir),
                             source_dir=path.parent.resolve() if path is not None else None)
        key = (source, metal_name, str(path.parent if path else ""), pre.text if pre is not None else None)
        with self._lock:
            lib = self._libraries.get(key)
        if lib is not None:
            return lib
        tr = translate(source, metal_name, include_dirs=(path.parent,) if path is not None else (), preprocessed=pre)
        lib = CpuLibrary(self, tr, path.parent if path is not None else None)
        lib.handle(False)  # compile now so that errors surface at compile()
        with self._lock:
            self._libraries[key] = lib
        return lib

    def _compile_artifact(self, artifact: MslArtifact, build: bool) -> CpuLibrary:
        key = (artifact.msl, artifact.metal_name, "", None)
        with self._lock:
            lib = self._libraries.get(key)
        if lib is None:
            tr = translate(artifact.msl, artifact.metal_name, signatures=(artifact.signature,))
            lib = CpuLibrary(self, tr, None)
            with self._lock:
                lib = self._libraries.setdefault(key, lib)
        if build:
            lib.handle(False)  # compile now so that errors surface at compile()
        return lib

    def compile_file(self, path: str | os.PathLike) -> CpuLibrary:
        return self.compile(None, path=path)

    # -- dispatch -------------------------------------------------------------------------------------------------
    def dispatch_threadgroups(self, fn: CpuFunction, threadgroups, threads_per_threadgroup, args=(), *,
                              threadgroup_memory=(), sanitize: bool = False, timeout: float | None = None,
                              profile: bool | int | None = None, profile_only: bool = False,
                              uniform_barriers: bool = True, in_place=None) -> Profile | None:
        """Run `fn` on a grid of `threadgroups`; with `profile=True` (or a number of threadgroups to count) return
        its `metile.Profile` (metile.metal.cpu.profiling); `profile_only=True` runs the counted threadgroups only
        (the outputs are then incomplete): to count a dispatch too large to run whole. `uniform_barriers=False`
        counts barriers as Apple GPUs do (see the module docstring); `in_place=True` (or argument indices) binds arrays
        as their own memory, without copies or guard pages (None: the device's `in_place_arrays`)."""
        groups = dim3(threadgroups, "threadgroups")
        tpt = dim3(threads_per_threadgroup, "threads_per_threadgroup")
        grid = tuple(g * t for g, t in zip(groups, tpt))
        return self._run(fn, groups, tpt, grid, args, threadgroup_memory, sanitize, timeout, profile, profile_only,
                         uniform_barriers, in_place)

    def dispatch_threads(self, fn: CpuFunction, threads, threads_per_threadgroup, args=(), *,
                         threadgroup_memory=(), sanitize: bool = False, timeout: float | None = None,
                         profile: bool | int | None = None, profile_only: bool = False,
                         uniform_barriers: bool = True, in_place=None) -> Profile | None:
        """Run `fn` on `threads` (the edge threadgroups may be partial); options as for dispatch_threadgroups."""
        grid = dim3(threads, "threads")
        tpt = dim3(threads_per_threadgroup, "threads_per_threadgroup")
        groups = tuple(-(-g // t) for g, t in zip(grid, tpt))
        return self._run(fn, groups, tpt, grid, args, threadgroup_memory, sanitize, timeout, profile, profile_only,
                         uniform_barriers, in_place)

    def _run(self, fn, groups, tpt, grid, args, tg_memory, sanitize, timeout, profile, profile_only,
             uniform_barriers, in_place) -> Profile | None:
        n = sample_size(profile, profile_only)
        if n is None and isinstance(fn, CpuFunction) and fn.library.device is self:
            self._run_kept(fn, groups, tpt, grid, args, tg_memory, sanitize, timeout, uniform_barriers, in_place)
            return None
        d = self._prepare(fn, groups, tpt, grid, args, tg_memory, sanitize, timeout, n, bool(profile_only),
                          uniform_barriers, in_place=in_place)
        d.run()
        return None if n is None else d.profile()

    def _run_kept(self, fn, groups, tpt, grid, args, tg_memory, sanitize, timeout, uniform_barriers, in_place):
        """Run a dispatch kept from an earlier one of the same kernel, grid and argument layouts, or a new one that
        is kept in turn (see `metile.metal.cpu.dispatch`)."""
        bound = bind_arguments(fn.signature, list(args), Buffer)
        placed, checked = in_place_arguments(bound, in_place_request(in_place, self.options.in_place_arrays),
                                             sanitize is not False, fn)
        lk = layout_key(bound, placed, checked)
        try:
            key = (fn, groups, tpt, grid, tuple(tg_memory), lk,   # the options' types too: their checks see them
                   *((type(o), o) for o in (sanitize, timeout, uniform_barriers)))
            hash(key)
        except TypeError:   # an argument the checks below refuse, or one they take but cannot key
            key = lk = None
        d = None
        if lk is not None:
            with self._lock:
                d = self._kept.pop(key, None)
        if d is None or not d.lock.acquire(blocking=False):
            d = self._prepare(fn, groups, tpt, grid, args, tg_memory, sanitize, timeout,
                              uniform_barriers=uniform_barriers, bound=bound, placed=placed, checked=checked)
            d.lock.acquire()
        else:
            d.rebind(bound)
        try:
            d.run()
        finally:
            d.release()
            d.lock.release()
            if lk is not None:
                with self._lock:
                    self._kept[key] = d
                    while len(self._kept) > KEPT_DISPATCHES:
                        del self._kept[next(iter(self._kept))]

    def keep_copied(self, d: CpuDispatch, arrays: list[int], scalars: tuple[tuple[int, int], ...]) -> CopiedRuns | None:
        """`d`, a prepared dispatch just run, as a `CopiedRuns` (`metile.metal.cpu.dispatch.copied_runs`; None when
        it cannot be one), its device memory kept: the oldest are retired while they hold more than `COPIED_BYTES`."""
        runs = copied_runs(d, arrays, scalars)
        if runs is None or runs.nbytes > COPIED_BYTES:
            return None
        with self._lock:
            kept = self._copied
            kept.append(runs)
            held = sum(r.nbytes for r in kept)
            retired = []
            while held > COPIED_BYTES:
                old = kept.pop(0)
                held -= old.nbytes
                retired.append(old)
        for old in retired:
            old.retire()
        return runs

    def prepare_threadgroups(self, fn: CpuFunction, threadgroups, threads_per_threadgroup, args=(), *,
                             threadgroup_memory=(), sanitize: bool = False, timeout: float | None = None,
                             uniform_barriers: bool = True, in_place=None) -> CpuDispatch:
        """`dispatch_threadgroups` checked and bound once: calling the result dispatches it (with the arguments'
        contents at that time), as often as wanted."""
        groups = dim3(threadgroups, "threadgroups")
        tpt = dim3(threads_per_threadgroup, "threads_per_threadgroup")
        grid = tuple(g * t for g, t in zip(groups, tpt))
        return self._prepare(fn, groups, tpt, grid, args, threadgroup_memory, sanitize, timeout,
                             uniform_barriers=uniform_barriers, in_place=in_place)

    def prepare_threads(self, fn: CpuFunction, threads, threads_per_threadgroup, args=(), *,
                        threadgroup_memory=(), sanitize: bool = False, timeout: float | None = None,
                        uniform_barriers: bool = True, in_place=None) -> CpuDispatch:
        """`dispatch_threads` checked and bound once (see `prepare_threadgroups`)."""
        grid = dim3(threads, "threads")
        tpt = dim3(threads_per_threadgroup, "threads_per_threadgroup")
        groups = tuple(-(-g // t) for g, t in zip(grid, tpt))
        return self._prepare(fn, groups, tpt, grid, args, threadgroup_memory, sanitize, timeout,
                             uniform_barriers=uniform_barriers, in_place=in_place)

    def synchronize(self) -> None:
        """Dispatches on the CPU device complete before they return; nothing is pending."""

    def _prepare(self, fn, groups, tpt, grid, args, tg_memory, sanitize, timeout, profile=None,
                 profile_only=False, uniform_barriers=True, bound=None, in_place=None, placed=None,
                 checked=False) -> CpuDispatch:
        if not isinstance(fn, CpuFunction) or fn.library.device is not self:
            raise LaunchError(f"expected a function compiled by this CPU device, got {fn!r}")
        if sanitize.__class__ is not bool or timeout is not None:
            problem = run_options_problem(sanitize, timeout)
            if problem is not None:
                raise LaunchError(problem)
        if uniform_barriers.__class__ is not bool and not isinstance(uniform_barriers, np.bool_):
            raise LaunchError(f"uniform_barriers={uniform_barriers!r} must be True or False")
        sig = fn.signature
        threads = tpt[0] * tpt[1] * tpt[2]
        if threads > fn.max_total_threads_per_threadgroup:
            raise LaunchError(f"threads_per_threadgroup {tpt} has {threads} threads; kernel `{sig.name}` allows "
                              f"at most {fn.max_total_threads_per_threadgroup}")
        limit = self.max_threadgroup_memory  # memory the kernel declares is checked by the runtime
        tg_sizes = threadgroup_sizes(sig, sig.threadgroup_params, tg_memory, limit, limit)
        return CpuDispatch(self, fn, groups, tpt, grid, args, tg_sizes, bool(sanitize), timeout, profile,
                           profile_only, bool(uniform_barriers), bound, in_place, placed, checked)
