"""The Apple GPU device: `MetalDevice`, `MetalLibrary` and `MetalFunction`, over the shim of `shim.h`.

It has the CPU device's interface: `compile(msl)` -> library, `library.function(name)` -> function
(`library.function(name, constants={index_or_name: value})` specialised with function constant values through
`MTLFunctionConstantValues`, checked first as the CPU device checks them; see `metile.metal.function_constants`),
`dispatch_threadgroups` / `dispatch_threads` (and `prepare_threadgroups` / `prepare_threads`, which check and
bind a launch once and return it to be queued again by calling it), `synchronize()`, and the memory hooks
`metile.Buffer` uses. `sanitize=True` and `timeout=` are refused: they are CPU device features.
Unlike the CPU device, launches are asynchronous: they are batched into command buffers and finish at
`synchronize()`, which also writes numpy arguments back and raises GPU errors (see `stream.py`).
`metile.Buffer` is zero-copy: its memory is a shared `MTLBuffer` whose contents numpy views directly.

The shim module is a constructor argument, so the tests run all of this against a C stand-in.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import attrs

from metile.emit.artifact import MslArtifact
from metile.ir.target import DEFAULT_TARGET, TARGETS, AppleTarget, target_named
from metile.metal.args import dim3, run_options_problem
from metile.metal.cpu.toolchain import find_compiler
from metile.metal.errors import (
    CompilerNotFoundError,
    DeviceError,
    DeviceUnavailableError,
    FunctionConstantError,
    LaunchError,
    MSLCompileError,
    ProfileError,
)
from metile.metal.function_constants import ConstantTable
from metile.metal.gpu.binding import (
    SHIM_CONSTANTS,
    Shim,
    check,
    load_shim,
    macos_version,
    real_macos_version,
    system_macos_version,
)
from metile.metal.gpu.capabilities import cached_tensor_probe, tensor_ops_accelerated
from metile.metal.gpu.compile import CompileSettings, MetalCompiler, Runner, pinned_language_version, run_command
from metile.metal.gpu.constants import constant_table, shim_constants
from metile.metal.gpu.launch import MetalDispatch, finish_producers, prepare_arguments
from metile.metal.gpu.memory import MetalMemory, new_memory
from metile.metal.gpu.stream import CommandStream
from metile.metal.msl_preprocess import (
    Preprocessed,
    has_quoted_include,
    include_directories,
    metal_version_code,
    needs_preprocessing,
    preprocess,
    read_msl_file,
    stub_headers,
)
from metile.metal.msl_signature import KernelSignature, kernel_signatures

SIMD_WIDTH = 32                  # every Apple GPU family runs 32-wide simdgroups
DISPATCH_THREADGROUPS = SHIM_CONSTANTS["MTS_DISPATCH_THREADGROUPS"]
DISPATCH_THREADS = SHIM_CONSTANTS["MTS_DISPATCH_THREADS"]
_DIM_LIMIT = 1 << 32


@attrs.frozen
class MetalOptions:
    """Settings of a Metal device (built by `metile.device()`)."""

    cache_dir: Path
    max_batch: int = 64          # launches per command buffer before it is committed
    max_in_flight: int = 16      # committed command buffers before the oldest is waited for
    language_version: str | None = None   # MSL version ("3.1", "3.2", "4.0"); None: the newest the OS has
    fast_math: bool = False      # Metal's fast math (off: IEEE-conforming, as on the CPU device)
    aot: bool | None = None      # None: AOT when `xcrun metal` exists; False: always JIT; True: require AOT
    os_version: str | None = None   # the macOS version to compile for; None: this system's
    encoder_status: bool = False    # a GPU fault names the kernel whose encoder faulted (Metal's per-encoder execution
                                    # status, which costs CPU time: off unless asked)


class MetalFunction:
    """A kernel of a library with its compute pipeline state."""

    __slots__ = ("library", "device", "signature", "name", "label", "handle", "max_total_threads_per_threadgroup",
                 "thread_execution_width", "static_threadgroup_memory", "threadgroup_params", "_prepared")

    def __init__(self, library: MetalLibrary, signature: KernelSignature, handle, info):
        self.library = library
        self.device = library.device
        self.signature = signature
        self.name = signature.name
        self.label = signature.name.encode("utf-8", "replace")   # its encoders' label, which a GPU fault names
        self.handle = handle
        self.max_total_threads_per_threadgroup = int(info.max_total_threads_per_threadgroup)
        self.thread_execution_width = int(info.thread_execution_width)
        self.static_threadgroup_memory = int(info.static_threadgroup_memory)
        self.threadgroup_params = signature.threadgroup_params
        self._prepared = None    # PreparedArgs of the latest launch (reused for the same arguments)

    def __repr__(self) -> str:
        return f"MetalFunction({self.name!r})"


class MetalLibrary:
    """MSL compiled by Metal (an `MTLLibrary`); functions get their pipeline on first request."""

    def __init__(self, device: MetalDevice, handle, source: str, metal_name: str,
                 kernels: tuple[KernelSignature, ...], include_dir: Path | None = None,
                 preprocessed: Preprocessed | None = None):
        self.device = device
        self.preprocessed = preprocessed
        self.handle = handle
        self.source = source
        self.metal_name = metal_name
        self.include_dir = include_dir
        self._kernels = {k.name: k for k in kernels}
        self._functions: dict[object, MetalFunction] = {}
        self._constants: ConstantTable | None = None

    @property
    def function_names(self) -> list[str]:
        return list(self._kernels)

    @property
    def function_constants(self) -> ConstantTable:
        """The function constants the source (and the headers it includes by path) declares."""
        if self._constants is None:
            pre = self.preprocessed   # a preprocessed source has its headers in its text
            dirs = (self.include_dir,) if self.include_dir is not None and pre is None else ()
            self._constants = constant_table(self.source if pre is None else pre.text, self.metal_name,
                                             tuple(self._kernels.values()), dirs,
                                             line_map=pre.line_map if pre is not None else None)
        return self._constants

    def function(self, name: str, constants: dict | None = None) -> MetalFunction:
        """The kernel `name`; `constants` gives function constant values by index or name
        (`newFunctionWithName:constantValues:error:`), checked against the constants' declared types."""
        sig = self._kernels.get(name)
        if sig is None:
            raise LaunchError(f"no kernel function `{name}` in {self.metal_name}; "
                              f"it defines: {', '.join(self._kernels) or 'none'}")
        table = self.function_constants
        if not table:
            if constants:
                raise FunctionConstantError(f"{self.metal_name} declares no function constants; kernel `{name}` "
                                            f"takes no constants= (got {constants!r})")
            fn = self._functions.get(name)
            if fn is None:
                fn = self._functions[name] = self.device._pipeline(self, sig)
            return fn
        values = table.resolve(name, constants, self.metal_name)
        given = {table.by_name(n).index: (n, v) for n, v in values.items()}
        named = {k for k in (constants or {}) if isinstance(k, str)}
        key = (name, tuple(sorted((i, repr(v)) for i, (_, v) in given.items())))
        fn = self._functions.get(key)
        if fn is None:
            spec = table.specialize_signature(sig, values, self.metal_name)
            entries = [(table.by_name(n), v, n in named) for n, v in values.items()]
            fn = self._functions[key] = self.device._pipeline(self, spec, entries)
        return fn

    def __repr__(self) -> str:
        return f"<MetalLibrary {self.metal_name} ({', '.join(self._kernels)})>"



def _refuse_profile(profile, profile_only) -> None:
    if (profile is not None and profile is not False) or profile_only:
        raise ProfileError("profile= counts on the CPU device (metile.device('cpu')); the Metal device runs kernels "
                           "on the GPU without counters")

class MetalDevice:
    """An Apple GPU. Properties come from the device; see the module docstring for launch semantics."""

    name = "metal"
    simd_width = SIMD_WIDTH
    supports_sanitize = False     # sanitize=True is the CPU device's
    supports_profile = False      # and so is profile=

    def __init__(self, options: MetalOptions, *, shim: Shim | None = None, runner: Runner = run_command):
        self.options = options
        self.shim = shim if shim is not None else load_shim(options.cache_dir)
        ffi, lib = self.shim.ffi, self.shim.lib
        self.errp = ffi.new("char**")
        out = ffi.new("mts_device**")
        check(self.shim, lib.mts_device_create(out, self.errp), self.errp, "creating the Metal device")
        self.handle = ffi.gc(out[0], lib.mts_device_release)
        info = ffi.new("mts_device_info*")
        check(self.shim, lib.mts_device_query(self.handle, info, self.errp), self.errp, "querying the Metal device")
        self.gpu_name: str = ffi.string(info.name).decode("utf-8", "replace")
        self.gpu_family: int = int(info.apple_family)
        if self.gpu_family == 0:   # a paravirtual device (a macOS virtual machine) or a GPU before Apple7
            ffi.release(self.handle)
            raise DeviceUnavailableError(
                f"the Metal device {self.gpu_name!r} is not an Apple7 (M1) or later GPU: metile's kernels need "
                "simdgroup matrices and non-uniform threadgroups of Apple silicon, which paravirtual devices of "
                "virtual machines do not have. Use metile.device('cpu') (METILE_DEVICE=cpu) there.")
        self.nonuniform_threadgroups: bool = bool(info.nonuniform_threadgroups)
        self.max_threads_per_threadgroup: int = int(info.max_threads_per_threadgroup[0])
        self.max_threadgroup_memory: int = int(info.max_threadgroup_memory)
        self.recommended_working_set: int = int(info.recommended_working_set)
        self.has_unified_memory: bool = bool(info.has_unified_memory)
        self.supports_metal4: bool = bool(info.supports_metal4)
        self.architecture: str = ffi.string(info.architecture).decode("utf-8", "replace")
        self.os_build: str = ffi.string(info.os_build).decode("utf-8", "replace")
        self.page_size: int = int(lib.mts_page_size())
        # "" off macOS; a Python built with an SDK older than 26 is told 16.x on macOS 26, which is 26.x
        system = real_macos_version(options.os_version if options.os_version is not None else system_macos_version())
        # tensor ops: whether an MSL 4 kernel using them compiles (probed once per OS build and device), and whether
        # they run on Neural Accelerators (metile.metal.gpu.capabilities)
        self.supports_tensor_ops: bool = self.supports_metal4 and cached_tensor_probe(
            options.cache_dir, self.os_build, self.gpu_name, self._probe_tensor_ops)
        self.tensor_ops_accelerated: bool = self.supports_tensor_ops and tensor_ops_accelerated(
            self.architecture, system)
        # what kernels compile for unless a launch gives `target=`: its GPU family, with tensor ops only where neural
        # accelerators run them (an Apple10 GPU compiles them emulated on macOS before 26.2)
        family = target_named(f"apple{min(self.gpu_family, 9)}") or DEFAULT_TARGET
        self.target: AppleTarget = TARGETS["M5"] if self.tensor_ops_accelerated else family
        language = pinned_language_version(options.language_version, system)
        os_version = system or macos_version()
        self.compiler = MetalCompiler(
            self.shim, self.handle, settings=CompileSettings(language, options.fast_math),
            cache_dir=options.cache_dir, gpu_family=self.gpu_family, os_version=os_version, runner=runner,
            aot=options.aot)
        self.stream = CommandStream(self.shim, self.handle, page_size=self.page_size, max_batch=options.max_batch,
                                    max_in_flight=options.max_in_flight, encoder_status=options.encoder_status)
        self._libraries: dict[tuple, MetalLibrary] = {}
        self._lock = threading.Lock()

    def _probe_tensor_ops(self) -> bool:
        ffi, lib = self.shim.ffi, self.shim.lib
        out = ffi.new("int32_t*")
        check(self.shim, lib.mts_device_probe_tensor_ops(self.handle, out, self.errp), self.errp,
              "asking the Metal device whether tensor ops compile")
        return bool(out[0])

    def __repr__(self) -> str:
        return f"<metile device 'metal' ({self.gpu_name}, Apple{self.gpu_family})>"

    # -- memory -------------------------------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> MetalMemory:
        """Shared-storage device memory of `nbytes` bytes (zero-filled), for `metile.Buffer`."""
        with self._lock:
            return new_memory(self.shim, self._live_handle(), self.errp, nbytes)

    def address_of(self, mem: MetalMemory) -> int:
        return int(self.shim.ffi.cast("uintptr_t", mem.ptr))

    def memory_view(self, mem: MetalMemory, nbytes: int):
        return self.shim.ffi.buffer(mem.ptr, nbytes)

    # -- compilation --------------------------------------------------------------------------------------------
    def compile(self, source: str | MslArtifact | None, *, name: str | None = None,
                path: str | os.PathLike | None = None, include_dirs: Sequence[str | os.PathLike] = (),
                build: bool = True) -> MetalLibrary:
        """Compile MSL text. `name` (or `path`) is the file name compiler messages use; `include_dirs` are
        searched by `#include` (quoted includes first beside `path`). A kernel metile emitted, an `MslArtifact`,
        compiles as it is: its text, under the file name it gives, its kernel bound as its signature says (its text
        is not read for it). Metal compiles the library at once, whatever `build` (the CPU device's `build=False`
        leaves its C++ build to the first dispatch)."""
        if isinstance(source, MslArtifact):
            return self._compile_artifact(source)
        if path is not None:
            path = Path(path)
            if source is None:
                source = read_msl_file(path)
        metal_name = str(path) if path is not None else (name or "kernel.metal")
        include_dir = path.parent if path is not None else None
        dirs = include_directories(include_dirs)
        pre = self._preprocess(source, metal_name, dirs, include_dir)   # each time: its headers may have changed
        key = (source, metal_name, str(include_dir or ""), tuple(map(str, dirs)), pre.text if pre else None)
        with self._lock:
            self._live_handle()
            lib = self._libraries.get(key)
            if lib is None:
                handle = self.compiler.library(source, metal_name, include_dir, include_dirs=dirs, preprocessed=pre)
                sigs = (kernel_signatures(source, metal_name) if pre is None else
                        kernel_signatures(source, metal_name, text=pre.text, line_map=pre.line_map))
                lib = MetalLibrary(self, handle, source, metal_name, sigs, include_dir, pre)
                self._libraries[key] = lib
        return lib

    def _compile_artifact(self, artifact: MslArtifact) -> MetalLibrary:
        key = (artifact.msl, artifact.metal_name, "", (), None)
        with self._lock:
            self._live_handle()
            lib = self._libraries.get(key)
            if lib is None:
                handle = self.compiler.library(artifact.msl, artifact.metal_name, None, include_dirs=(),
                                               preprocessed=None)
                lib = MetalLibrary(self, handle, artifact.msl, artifact.metal_name, (artifact.signature,))
                self._libraries[key] = lib
        return lib

    def _preprocess(self, source: str, metal_name: str, dirs: tuple[Path, ...],
                    include_dir: Path | None) -> Preprocessed | None:
        """The source through the C preprocessor (for its kernel signatures, and for Metal's runtime compiler when
        it includes files of its own); None when it needs none. When no C++ compiler is there, or the host's
        preprocessor rejects what Metal's may take (a Metal header it does not know), and the source includes no
        file of its own, the signatures are read from the text as written and Metal's compiler judges it."""
        if not needs_preprocessing(source):
            return None
        own_includes = bool(dirs) or has_quoted_include(source)
        try:
            compiler = find_compiler(None)
            return preprocess(source, metal_name, compiler=compiler.path, include_dirs=dirs,
                              stub_dir=stub_headers(self.options.cache_dir, refuse=False),
                              source_dir=include_dir.resolve() if include_dir is not None else None,
                              metal_version=metal_version_code(self._language_for(source, metal_name)))
        except CompilerNotFoundError as e:
            if own_includes:
                raise DeviceError(f"{metal_name} includes files of its own; reading its kernels then needs the "
                                  f"C preprocessor of a C++ compiler: {e}") from None
            return None
        except MSLCompileError:
            if own_includes:
                raise
            return None

    def _language_for(self, source: str, metal_name: str) -> str | None:
        """The MSL version `source` compiles as (what `__METAL_VERSION__` is while its kernels are read): the pinned
        one, or 4.0 for a source that includes Metal 4's tensor headers itself."""
        return self.compiler.settings_for(source, metal_name).language_version

    def compile_file(self, path: str | os.PathLike) -> MetalLibrary:
        return self.compile(None, path=path)

    def _pipeline(self, library: MetalLibrary, sig: KernelSignature, constants=None) -> MetalFunction:
        """The pipeline of `sig`'s function; `constants` ((FunctionConstant, value, by_name) triples, possibly none)
        specialises it, as every function of a library that declares function constants must be."""
        ffi, lib = self.shim.ffi, self.shim.lib
        out, info = ffi.new("mts_pipeline**"), ffi.new("mts_pipeline_info*")
        with self._lock:
            if constants is None:
                code = lib.mts_pipeline_create(self._live_handle(), library.handle, sig.name.encode(), out, info,
                                               self.errp)
            else:
                entries, keep = shim_constants(ffi, constants)
                code = lib.mts_pipeline_create_specialized(self._live_handle(), library.handle, sig.name.encode(),
                                                           entries, len(constants), out, info, self.errp)
                del keep
            check(self.shim, code, self.errp, f"building the pipeline of `{sig.name}` ({library.metal_name})")
        return MetalFunction(library, sig, ffi.gc(out[0], lib.mts_pipeline_release), info)

    # -- dispatch -----------------------------------------------------------------------------------------------
    def dispatch_threadgroups(self, fn: MetalFunction, threadgroups, threads_per_threadgroup, args=(), *,
                              threadgroup_memory=(), sanitize: bool = False, timeout: float | None = None,
                              profile=None, profile_only: bool = False) -> None:
        """Queue `fn` over `threadgroups` groups of `threads_per_threadgroup` threads (runs by synchronize()).

        `sanitize=True`, a `timeout` and `profile=` are CPU device features, refused here: Metal cannot stop a
        running command buffer, and the GPU's own watchdog ends kernels that run too long.
        """
        _refuse_profile(profile, profile_only)
        self._launch(fn, DISPATCH_THREADGROUPS, threadgroups, threads_per_threadgroup, args, threadgroup_memory,
                     sanitize, timeout)

    def dispatch_threads(self, fn: MetalFunction, threads, threads_per_threadgroup, args=(), *,
                         threadgroup_memory=(), sanitize: bool = False, timeout: float | None = None,
                         profile=None, profile_only: bool = False) -> None:
        """Queue `fn` over a grid of `threads` threads (edge threadgroups may be partial)."""
        _refuse_profile(profile, profile_only)
        self._launch(fn, DISPATCH_THREADS, threads, threads_per_threadgroup, args, threadgroup_memory, sanitize,
                     timeout)

    def prepare_threadgroups(self, fn: MetalFunction, threadgroups, threads_per_threadgroup, args=(), *,
                             threadgroup_memory=(), sanitize: bool = False,
                             timeout: float | None = None) -> MetalDispatch:
        """`dispatch_threadgroups` checked and bound once: calling the result queues it again."""
        return self._prepare(fn, DISPATCH_THREADGROUPS, threadgroups, threads_per_threadgroup, args,
                             threadgroup_memory, sanitize, timeout)

    def prepare_threads(self, fn: MetalFunction, threads, threads_per_threadgroup, args=(), *,
                        threadgroup_memory=(), sanitize: bool = False, timeout: float | None = None) -> MetalDispatch:
        """`dispatch_threads` checked and bound once: calling the result queues it again."""
        return self._prepare(fn, DISPATCH_THREADS, threads, threads_per_threadgroup, args, threadgroup_memory,
                             sanitize, timeout)

    def synchronize(self) -> None:
        """Wait for every queued launch; write numpy arguments back; raise GPU errors as DeviceFault."""
        with self._lock:
            self.stream.synchronize()

    def gpu_time(self) -> float | None:
        """Seconds the GPU spent on the command buffers the last `synchronize()` waited for (from each buffer's
        `GPUStartTime` to its `GPUEndTime`), or None when it waited for none (`metile.testing.do_bench`)."""
        spans = self.stream.last_timings
        return sum(end - start for start, end in spans) if spans else None

    def _launch(self, fn, kind, size, tpt, args, tg_memory, sanitize, timeout) -> None:
        size = _dim3(size, "threads" if kind == DISPATCH_THREADS else "threadgroups")
        tpt = _dim3(tpt, "threads_per_threadgroup")
        if fn.__class__ is not MetalFunction or fn.device is not self:
            raise _not_ours(fn)
        if sanitize is not False or timeout is not None:
            _refuse_run_options(sanitize, timeout)
        if tpt[0] * tpt[1] * tpt[2] > fn.max_total_threads_per_threadgroup:
            raise _too_many_threads(fn, tpt)
        if kind == DISPATCH_THREADS and not self.nonuniform_threadgroups:
            raise LaunchError(f"dispatch_threads of `{fn.name}` needs non-uniform threadgroups, which "
                              f"{self.gpu_name!r} does not have (MTLGPUFamilyApple4); use dispatch_threadgroups")
        if tg_memory.__class__ is not tuple:
            tg_memory = tuple(tg_memory) if tg_memory is not None else ()
        if args.__class__ is not list and args.__class__ is not tuple:
            args = tuple(args)
        prepared = fn._prepared
        if prepared is None or not prepared.matches(args, tg_memory):
            prepared = fn._prepared = prepare_arguments(self, fn, args, tg_memory)
        elif prepared.producers:   # bound before: what their library queued since is waited for again
            finish_producers(prepared)
        with self._lock:
            self.stream.encode(fn, prepared, args, kind, size, tpt)

    def _prepare(self, fn, kind, size, tpt, args, tg_memory, sanitize, timeout) -> MetalDispatch:
        size = _dim3(size, "threads" if kind == DISPATCH_THREADS else "threadgroups")
        tpt = _dim3(tpt, "threads_per_threadgroup")
        if fn.__class__ is not MetalFunction or fn.device is not self:
            raise _not_ours(fn)
        _refuse_run_options(sanitize, timeout)
        if tpt[0] * tpt[1] * tpt[2] > fn.max_total_threads_per_threadgroup:
            raise _too_many_threads(fn, tpt)
        if kind == DISPATCH_THREADS and not self.nonuniform_threadgroups:
            raise LaunchError(f"dispatch_threads of `{fn.name}` needs non-uniform threadgroups, which "
                              f"{self.gpu_name!r} does not have (MTLGPUFamilyApple4); use dispatch_threadgroups")
        args = tuple(args)
        tg_memory = tuple(tg_memory) if tg_memory is not None else ()
        self._live_handle()
        return MetalDispatch(self, fn, kind, size, tpt, args, prepare_arguments(self, fn, args, tg_memory))

    # -- life cycle ---------------------------------------------------------------------------------------------
    def _live_handle(self):
        if self.stream.device_handle is None:
            raise DeviceError("this Metal device is closed")
        return self.handle

    def close(self) -> None:
        """Finish pending work and release the device, its libraries and pipelines now (idempotent).

        Buffers stay usable as host memory views until they are dropped.
        """
        with self._lock:
            if self.stream.device_handle is None:
                return
            try:
                self.stream.synchronize()
            finally:
                self.stream.device_handle = None
                for lib in self._libraries.values():
                    for fn in lib._functions.values():  # by name, and by (name, values) for specialisations
                        fn._prepared = None
                        self.shim.ffi.release(fn.handle)
                    self.shim.ffi.release(lib.handle)
                self._libraries.clear()
                self.shim.ffi.release(self.handle)

    def __enter__(self) -> MetalDevice:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _dim3(value, what: str) -> tuple[int, int, int]:
    """`dim3` with fast paths for an int and a tuple of three ints in range (the usual launch shapes)."""
    if value.__class__ is int and 0 < value < _DIM_LIMIT:
        return (value, 1, 1)
    if value.__class__ is tuple and len(value) == 3:
        x, y, z = value
        if (x.__class__ is int and y.__class__ is int and z.__class__ is int
                and 0 < x < _DIM_LIMIT and 0 < y < _DIM_LIMIT and 0 < z < _DIM_LIMIT):
            return value
    return dim3(value, what)


def _not_ours(fn) -> LaunchError:
    return LaunchError(f"expected a function compiled by this Metal device, got {fn!r}")


def _too_many_threads(fn: MetalFunction, tpt: tuple[int, int, int]) -> LaunchError:
    return LaunchError(f"threads_per_threadgroup {tpt} has {tpt[0] * tpt[1] * tpt[2]} threads; kernel `{fn.name}` "
                       f"allows at most {fn.max_total_threads_per_threadgroup}")


def _refuse_run_options(sanitize, timeout) -> None:
    """`LaunchError` for a `sanitize=` or `timeout=` other than the defaults (or not of their types)."""
    problem = run_options_problem(sanitize, timeout)
    if problem is not None:
        raise LaunchError(problem)
    if sanitize:
        raise LaunchError("sanitize=True is a CPU device feature; run the kernel on metile.device('cpu')")
    if timeout is not None:
        raise LaunchError(f"timeout={timeout!r} is a CPU device feature: Metal cannot stop a running command "
                          "buffer (the GPU's own watchdog ends kernels that run too long); leave timeout unset, or "
                          "run the kernel on metile.device('cpu')")
