"""Loading the compiled Metal shim, and turning its error codes into metile errors.

On macOS the shim (`shim.m`) is compiled on first use with the system clang into the cache directory
(`~/.cache/metile` or `$METILE_CACHE_DIR`), keyed by the shim's sources, the macOS version and the Python
ABI, under a file lock; elsewhere `load_shim` raises `DeviceUnavailableError` saying why. A `Shim` holds
the cffi `ffi` and `lib` of the real shim or of any stand-in built from the same header (the tests' C stub).
"""

from __future__ import annotations

import importlib.util
import platform
import re
import sys
import sysconfig
from pathlib import Path

import attrs
import cffi

from metile.metal.cpu.toolchain import BuildFailed, cached_build, sha256_hex
from metile.metal.errors import (
    DeviceError,
    DeviceFault,
    DeviceUnavailableError,
    LaunchError,
    MSLCompileError,
)
from metile.metal.gpu import _build
from metile.metal.gpu._build import HEADER, MODULE_NAME, OBJC_SOURCE, cdef_of

# The shim's constants, read from shim.h (its #defines), so that the header stays the one definition.
SHIM_CONSTANTS: dict[str, int] = {
    name: int(value) for name, value in re.findall(r"^#define (MTS_\w+) (\d+)$", cdef_of(HEADER.read_text()), re.M)
}
ABI_VERSION = SHIM_CONSTANTS["MTS_ABI_VERSION"]
OK = SHIM_CONSTANTS["MTS_OK"]
ERR_NO_DEVICE = SHIM_CONSTANTS["MTS_ERR_NO_DEVICE"]
ERR_COMPILE = SHIM_CONSTANTS["MTS_ERR_COMPILE"]
ERR_LOAD = SHIM_CONSTANTS["MTS_ERR_LOAD"]
ERR_NOT_FOUND = SHIM_CONSTANTS["MTS_ERR_NOT_FOUND"]
ERR_PIPELINE = SHIM_CONSTANTS["MTS_ERR_PIPELINE"]
ERR_ALLOC = SHIM_CONSTANTS["MTS_ERR_ALLOC"]
ERR_ARGUMENT = SHIM_CONSTANTS["MTS_ERR_ARGUMENT"]
ERR_STATE = SHIM_CONSTANTS["MTS_ERR_STATE"]
ERR_GPU = SHIM_CONSTANTS["MTS_ERR_GPU"]
ERR_EXCEPTION = SHIM_CONSTANTS["MTS_ERR_EXCEPTION"]
STATUS_NAMES = {
    ERR_NO_DEVICE: "no device", ERR_COMPILE: "compile error", ERR_LOAD: "load error", ERR_NOT_FOUND: "not found",
    ERR_PIPELINE: "pipeline error", ERR_ALLOC: "allocation failure", ERR_ARGUMENT: "invalid argument",
    ERR_STATE: "invalid state", ERR_GPU: "GPU error", ERR_EXCEPTION: "Objective-C exception",
}
_ERROR_CLASSES = {ERR_NO_DEVICE: DeviceUnavailableError, ERR_NOT_FOUND: LaunchError}


@attrs.frozen
class Shim:
    """A loaded implementation of shim.h: its cffi `ffi` and `lib`, and where it came from."""

    ffi: object
    lib: object
    origin: str


def load_extension(path: Path, module_name: str) -> Shim:
    """Import a cffi extension module built from shim.h and check its ABI version."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise DeviceError(f"cannot load the Metal shim from {path}")
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError) as e:   # built for another Python or architecture, or a framework missing
        raise DeviceUnavailableError(
            f"cannot load the Metal shim at {path} ({type(e).__name__}: {e}); delete it so that metile builds it "
            "again, or use metile.device('cpu')") from e
    version = module.lib.mts_abi_version()
    if version != ABI_VERSION:
        raise DeviceError(f"the Metal shim at {path} has ABI {version}; this metile expects {ABI_VERSION}")
    return Shim(ffi=module.ffi, lib=module.lib, origin=str(path))


COMPAT_MAJOR = {16: 26}
"""macOS majors a process may be told instead of the real one: macOS 26 reports 16.x to a program built with an SDK
older than 26 (Apple's system version compatibility, as macOS 11 reported 10.16), Python builds among them."""


def real_macos_version(text: str) -> str:
    """The macOS version `text` names ("16.0" from a Python built with an older SDK on macOS 26 is "26.0")."""
    m = re.match(r"(\d+)(.*)", text or "")
    if m is None or int(m[1]) not in COMPAT_MAJOR:
        return text
    return f"{COMPAT_MAJOR[int(m[1])]}{m[2]}"


def system_macos_version() -> str:
    """This system's macOS version ("26.1"), "" off macOS."""
    return real_macos_version(platform.mac_ver()[0])


def macos_version() -> str:
    return system_macos_version() or platform.release()


def shim_path(cache_dir: Path) -> Path:
    """Where the shim for these sources, this OS version and this Python lives in the cache."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    key = sha256_hex("metal-shim", HEADER.read_bytes(), OBJC_SOURCE.read_bytes(), _build.LOGIC_HEADER.read_bytes(),
                     Path(_build.__file__).read_bytes(),
                     " ".join(_build.extra_flags()),
                     macos_version(), platform.machine(), sys.implementation.cache_tag, suffix, cffi.__version__)
    return cache_dir / "metal" / f"{MODULE_NAME}-{key[:24]}{suffix}"


def build_shim(cache_dir: Path) -> Path:
    """Compile shim.m with the system clang into the cache (once; concurrent processes wait on a lock)."""
    path = shim_path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)

    def build(out: Path) -> None:
        _build.compile_module(_build.metal_shim_spec(), out)

    try:
        return cached_build(path, build)
    except (BuildFailed, OSError) as e:
        raise DeviceUnavailableError(
            f"cannot build the Metal shim with the system clang ({type(e).__name__}: {str(e).strip()}). "
            "Install the Command Line Tools with `xcode-select --install`, then try again."
        ) from e


def load_shim(cache_dir: Path) -> Shim:
    """The real Metal shim, built on first use; raises DeviceUnavailableError where Metal cannot exist."""
    system, machine = platform.system(), platform.machine()
    if system != "Darwin":
        raise DeviceUnavailableError(
            f"the Metal device needs macOS on Apple silicon; this machine runs {system} on {machine}, so the "
            "Metal shim is not built. Use metile.device('cpu') to run MSL on the CPU."
        )
    if machine != "arm64":
        raise DeviceUnavailableError(f"the Metal device needs an Apple silicon Mac (arm64); this Mac is {machine}")
    return load_extension(build_shim(cache_dir), MODULE_NAME)


def take_message(shim: Shim, errp) -> str:
    """The message a failed call stored in `*errp` (freed here, and the slot cleared for reuse)."""
    raw = errp[0]
    if raw == shim.ffi.NULL:
        return ""
    try:
        return shim.ffi.string(raw).decode("utf-8", "replace")
    finally:
        shim.lib.mts_string_free(raw)
        errp[0] = shim.ffi.NULL


def shim_error(code: int, message: str, what: str):
    """The metile error for a shim status code; `what` says which operation failed."""
    text = f"{what}: {message}" if message else f"{what} failed ({STATUS_NAMES.get(code, f'status {code}')})"
    if code in (ERR_COMPILE, ERR_PIPELINE):
        return MSLCompileError(text, compiler_output=message)
    if code == ERR_GPU:
        return DeviceFault(text, kind="gpu-error")
    return _ERROR_CLASSES.get(code, DeviceError)(text)


def check(shim: Shim, code: int, errp, what: str) -> None:
    """Raise the metile error for a failed shim call (`code` != 0), with the shim's message."""
    if code != OK:
        raise shim_error(code, take_message(shim, errp), what)
