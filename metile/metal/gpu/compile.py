"""MSL -> Metal library: ahead of time with `xcrun metal` when it is installed, else JIT in the driver.

AOT compiles `.metal` -> `.air` (`xcrun -sdk macosx metal -c -O2`) -> `.metallib` (`xcrun -sdk macosx
metallib`) and caches the metallib on disk, keyed by the source (and the headers beside it), the macOS
version, the GPU family, the compile settings and the toolchain's version; the device loads it with
`newLibraryWithURL:`. Without the toolchain (a Mac with only the Command Line Tools) the source goes to
`newLibraryWithSource:options:error:`. Either way the compiler's messages are mapped to the `.metal`
file the user named (`program_source:12:5: error: ...` becomes `scale.metal:12:5: error: ...` with the
line quoted). Commands run through an injected runner, so tests can pretend `xcrun` is (or is not) there.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from metile.metal.cpu.toolchain import BuildFailed, cached_build, sha256_hex, tree_digest
from metile.metal.diagnostics import DIAGNOSTIC, first_error
from metile.metal.errors import DeviceError, MSLCompileError, MSLCompileWarning
from metile.metal.gpu.binding import ERR_COMPILE, ERR_LOAD, Shim, shim_error, take_message
from metile.metal.msl_preprocess import Preprocessed, has_quoted_include

JIT_FILE_NAME = "program_source"     # what Metal's runtime compiler calls the source it was given
HEADER_SUFFIXES = (".h", ".hpp", ".metal")


@attrs.frozen
class RunResult:
    returncode: int
    output: str


Runner = Callable[[Sequence[str]], RunResult]


def run_command(argv: Sequence[str]) -> RunResult:
    """Run a command and return its exit status with stderr and stdout (127 when it does not exist)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=600)
    except FileNotFoundError as e:
        return RunResult(127, str(e))
    except subprocess.TimeoutExpired:
        return RunResult(124, f"{argv[0]} timed out")
    return RunResult(proc.returncode, proc.stderr + proc.stdout)


@attrs.frozen
class CompileSettings:
    """How MSL is compiled: the language version ("3.1", "4.0"; None for the OS default) and fast math."""

    language_version: str | None = None
    fast_math: bool = False

    def __attrs_post_init__(self) -> None:
        if self.language_version is not None and not re.fullmatch(r"\d+\.\d+", self.language_version):
            raise ValueError(f"language_version must look like '3.1', got {self.language_version!r}")

    @property
    def version_code(self) -> int:
        """The MTLLanguageVersion value, (major << 16) | minor; 0 for the OS default."""
        if self.language_version is None:
            return 0
        major, minor = (int(x) for x in self.language_version.split("."))
        return (major << 16) | minor

    def metal_flags(self, os_version: str | None = None) -> list[str]:
        """`xcrun metal`'s flags for these settings on macOS `os_version`, with the math Metal's runtime compiler is
        given there (shim.m): from macOS 15 (Xcode 16), the math mode and the fp32 functions, as `mathMode` and
        `mathFloatingPointFunctions` (safe and precise, or fast and fast); before, `-f[no-]fast-math`, as the
        `fastMathEnabled` the runtime compiler is given there."""
        std = [f"-std=metal{self.language_version}"] if self.language_version else []
        major = os_major(os_version)
        if major is None or major < MATH_MODE_FROM_MACOS:
            return [*std, "-ffast-math" if self.fast_math else "-fno-fast-math"]
        mode, functions = ("fast", "fast") if self.fast_math else ("safe", "precise")
        return [*std, f"-fmetal-math-mode={mode}", f"-fmetal-math-fp32-functions={functions}"]


MATH_MODE_FROM_MACOS = 15   # MTLCompileOptions.mathMode and -fmetal-math-mode (shim_logic.h: mts_uses_math_mode)
MSL4_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<(metal_tensor>|MetalPerformancePrimitives/)", re.M)


def needs_msl4(source: str, preprocessed: Preprocessed | None = None) -> bool:
    """Whether a source uses Metal 4 tensors or tensor ops (includes <metal_tensor> or MetalPerformancePrimitives,
    itself or, when preprocessed, through a header of its own), which compile as MSL 4.0 only."""
    if MSL4_INCLUDE.search(source):
        return True
    headers = preprocessed.line_map.metal_headers() if preprocessed is not None else ()
    return any(h == "metal_tensor" or h.startswith("MetalPerformancePrimitives/") for h in headers)


LANGUAGE_VERSIONS = {"3.0": 13, "3.1": 14, "3.2": 15, "4.0": 26}
"""Each MSL version Metal's compiler takes (`MTLLanguageVersion`), with the first macOS major version that has it."""


def os_major(os_version: str | None) -> int | None:
    """The major version of a macOS version string ("15.3.1" -> 15), None for anything else."""
    m = re.match(r"(\d+)", os_version or "")
    return int(m.group(1)) if m else None


def pinned_language_version(asked: str | None, os_version: str | None) -> str | None:
    """The MSL version to compile with on macOS `os_version`: `asked`, or the newest the system has, so that a
    kernel compiles the same way whatever Metal's own default is; `DeviceError` when `asked` is newer than the
    system's Metal or unknown. Off macOS (no version to pin to), `asked` as it is."""
    major = os_major(os_version)
    if major is None:
        return asked
    if asked is None:
        return max((v for v, first in LANGUAGE_VERSIONS.items() if first <= major), key=_version_key, default=None)
    first = LANGUAGE_VERSIONS.get(asked)
    if first is None:
        raise DeviceError(f"language_version={asked!r} is not an MSL version metile knows "
                          f"({', '.join(LANGUAGE_VERSIONS)})")
    if first > major:
        raise DeviceError(f"language_version={asked!r}: MSL {asked} needs macOS {first} or later, and this Mac runs "
                          f"macOS {os_version}")
    return asked


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


@attrs.frozen
class Toolchain:
    """The offline Metal compiler (`xcrun metal`) and linker (`xcrun metallib`)."""

    version: str


def find_toolchain(runner: Runner) -> Toolchain | None:
    """The Metal toolchain if `xcrun` finds both tools and `metal` runs (full Xcode), else None.

    Xcode 26 ships the compiler as a separate component: `xcrun --find metal` may succeed while
    `metal` itself cannot run, hence the `--version` probe.
    """
    for tool in ("metal", "metallib"):
        if runner(["xcrun", "-sdk", "macosx", "--find", tool]).returncode != 0:
            return None
    version = runner(["xcrun", "-sdk", "macosx", "metal", "--version"])
    return Toolchain(version=version.output.strip()) if version.returncode == 0 else None


def compile_error(output: str, *, source: str, metal_name: str, aliases: Sequence[str] = (),
                  read_other: Callable[[str], str | None] | None = None) -> MSLCompileError:
    """The first error in Metal compiler output; `aliases` are the other names it used for the source, and
    `read_other` reads the files it included (see `first_error`)."""
    return first_error(output, source=source, metal_name=metal_name, aliases=(JIT_FILE_NAME, *aliases),
                       compiler="the Metal compiler", read_other=read_other)



class MetalCompiler:
    """Turns MSL text into `mts_library` handles for one device (AOT when possible, else JIT)."""

    def __init__(self, shim: Shim, device_handle, *, settings: CompileSettings, cache_dir: Path, gpu_family: int,
                 os_version: str, runner: Runner = run_command, aot: bool | None = None):
        self.shim = shim
        self.device_handle = device_handle
        self.settings = settings
        self.cache_dir = cache_dir
        self.gpu_family = gpu_family
        self.os_version = os_version
        self.runner = runner
        self.aot = aot                    # None: when the toolchain is found; False: never; True: required
        self._toolchain: Toolchain | None | bool = False   # False: not looked for yet
        self._err = shim.ffi.new("char**")
        self._warnings = shim.ffi.new("char**")
        self.aot_fallback_reason = ""     # why AOT was given up for this device, if it was

    @property
    def toolchain(self) -> Toolchain | None:
        if self.aot is False:
            return None
        if self._toolchain is False:
            self._toolchain = find_toolchain(self.runner)
        if self._toolchain is None and self.aot:
            raise DeviceError("aot=True needs the Metal toolchain (`xcrun metal`, from a full Xcode install); "
                              "`xcrun -sdk macosx --find metal` did not find one that runs")
        return self._toolchain

    @property
    def mode(self) -> str:
        """"aot" or "jit": how the next source will be compiled."""
        return "aot" if self.toolchain is not None and not self.aot_fallback_reason else "jit"

    def library(self, source: str, metal_name: str, include_dir: Path | None, *,
                include_dirs: Sequence[Path] = (), preprocessed: Preprocessed | None = None):
        """A library handle (owned by the caller through ffi.gc) for `source`; raises MSLCompileError.

        `include_dirs` go to `xcrun metal` as `-I`; Metal's runtime compiler has no include path, so a source
        that includes files of its own reaches it preprocessed (`preprocessed`, its `#line` directives naming
        the files), after `#include`s of the Metal headers it included."""
        settings = self.settings_for(source, metal_name, preprocessed)
        if self.mode == "aot":
            path = self.build_metallib(source, metal_name, include_dir, include_dirs, preprocessed, settings)
            handle = self._load(path) if path is not None else None
            if handle is not None:
                return handle
            if self.aot:
                raise DeviceError(f"aot=True, but the Metal toolchain failed: {self.aot_fallback_reason}")
        if preprocessed is not None and has_quoted_include(source):
            return self._jit(source, metal_name, preprocessed, settings)
        return self._jit(source, metal_name, settings=settings)

    def settings_for(self, source: str, metal_name: str, preprocessed: Preprocessed | None = None) -> CompileSettings:
        """The settings to compile `source` with: a source using Metal 4 tensors compiles as MSL 4.0 (`-std=metal4.0`
        ahead of time) when no version is set; `DeviceError` when an older one is."""
        if not needs_msl4(source, preprocessed):
            return self.settings
        version = self.settings.language_version
        if version is None:
            return attrs.evolve(self.settings, language_version="4.0")
        if _version_key(version) < (4, 0):
            raise DeviceError(f"{metal_name} uses Metal 4 tensors (<metal_tensor> or MetalPerformancePrimitives), "
                              f"which need MSL 4.0 (macOS 26), but this device compiles MSL {version} "
                              "(MetalOptions.language_version, or the newest this macOS has)")
        return self.settings

    # -- JIT ----------------------------------------------------------------------------------------------------
    def _jit(self, source: str, metal_name: str, preprocessed: Preprocessed | None = None,
             settings: CompileSettings | None = None):
        ffi, lib = self.shim.ffi, self.shim.lib
        settings = settings or self.settings
        text = source
        if preprocessed is not None:   # Metal's own headers come back, before the text they were taken from
            headers = dict.fromkeys(("metal_stdlib", *preprocessed.line_map.metal_headers()))
            text = "".join(f"#include <{h}>\n" for h in headers) + preprocessed.text
        opts = ffi.new("mts_compile_options*", {"language_version": settings.version_code,
                                                 "fast_math": int(settings.fast_math)})
        out = ffi.new("mts_library**")
        warned = self._warnings
        code = lib.mts_library_from_source(self.device_handle, text.encode(), opts, out, warned, self._err)
        if code == ERR_COMPILE:
            raise compile_error(take_message(self.shim, self._err), source=source, metal_name=metal_name,
                                read_other=preprocessed.line_map.user_file if preprocessed else None)
        if code:
            raise shim_error(code, take_message(self.shim, self._err), f"compiling {metal_name}")
        handle = ffi.gc(out[0], lib.mts_library_release)
        text = take_message(self.shim, warned)   # a successful compile's warnings
        if text:
            import warnings

            shown = text.replace(f"{JIT_FILE_NAME}:", f"{metal_name}:")
            warnings.warn(f"the Metal compiler warned about {metal_name}:\n{shown}", MSLCompileWarning, stacklevel=4)
        return handle

    # -- AOT ----------------------------------------------------------------------------------------------------
    def metallib_path(self, source: str, include_dir: Path | None, include_dirs: Sequence[Path] = (),
                      preprocessed: Preprocessed | None = None, settings: CompileSettings | None = None) -> Path:
        headers = sorted(p for p in include_dir.iterdir() if p.suffix in HEADER_SUFFIXES) if include_dir else []
        included = (preprocessed.text, *map(str, include_dirs)) if preprocessed is not None else ()
        key = sha256_hex("metallib", source, str(include_dir or ""), tree_digest(headers) if headers else "", *included,
                         self.os_version, f"apple{self.gpu_family}", repr(settings or self.settings),
                         self.toolchain.version)
        return self.cache_dir / "metallib" / key[:2] / f"{key[2:26]}.metallib"

    def build_metallib(self, source: str, metal_name: str, include_dir: Path | None,
                       include_dirs: Sequence[Path] = (), preprocessed: Preprocessed | None = None,
                       settings: CompileSettings | None = None) -> Path | None:
        """The cached .metallib for `source`, compiled with `xcrun metal -O2` on a miss.

        Compiler errors (`file:line:col: error: ...`) raise MSLCompileError; a toolchain failure of any
        other kind gives up AOT for this device (None, with `aot_fallback_reason` set), and the driver
        compiles instead.
        """
        settings = settings or self.settings
        path = self.metallib_path(source, include_dir, include_dirs, preprocessed, settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        stem = Path(metal_name).stem or "kernel"

        def build(out: Path) -> None:
            work = out.with_name(out.name + ".d")
            work.mkdir(exist_ok=True)
            try:
                src, air = work / f"{stem}.metal", work / f"{stem}.air"
                src.write_text(source)
                target = ["-target", f"air64-apple-macos{_major_minor(self.os_version)}"] if self.os_version else []
                includes = [f"-I{d}" for d in (*([include_dir] if include_dir else []), *include_dirs)]
                compile_cmd = ["xcrun", "-sdk", "macosx", "metal", "-c", "-O2", *settings.metal_flags(self.os_version),
                               *target, *includes, str(src), "-o", str(air)]
                result = self.runner(compile_cmd)
                if result.returncode != 0:
                    raise _MetalRejected(result.output, str(src))
                link_cmd = ["xcrun", "-sdk", "macosx", "metallib", str(air), "-o", str(out)]
                result = self.runner(link_cmd)
                if result.returncode != 0:
                    raise BuildFailed(link_cmd, result.output)
            finally:
                shutil.rmtree(work, ignore_errors=True)

        try:
            return cached_build(path, build)
        except _MetalRejected as e:
            if DIAGNOSTIC.search(e.output):   # the compiler ran and found errors in the source or its headers
                raise compile_error(e.output, source=source, metal_name=metal_name, aliases=(e.path,),
                                    read_other=preprocessed.line_map.user_file if preprocessed else None) from None
            self.aot_fallback_reason = f"`xcrun metal` failed: {e.output.strip()}"
        except BuildFailed as e:
            self.aot_fallback_reason = f"`xcrun metallib` failed: {e.output.strip()}"
        return None

    def _load(self, path: Path):
        """Load a metallib; on a load failure fall back to JIT for this device (and say why)."""
        ffi, lib = self.shim.ffi, self.shim.lib
        out = ffi.new("mts_library**")
        code = lib.mts_library_from_file(self.device_handle, str(path).encode(), out, self._err)
        if code == ERR_LOAD:
            self.aot_fallback_reason = take_message(self.shim, self._err)
            return None
        if code:
            raise shim_error(code, take_message(self.shim, self._err), f"loading {path}")
        return ffi.gc(out[0], lib.mts_library_release)


class _MetalRejected(Exception):
    def __init__(self, output: str, path: str):
        super().__init__(output)
        self.output = output
        self.path = path


def _major_minor(version: str) -> str:
    parts = (version.split(".") + ["0"])[:2]
    return ".".join(parts)
