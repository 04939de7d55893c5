"""Device selection: `metile.device()`, `metile.synchronize()` and the default-device `metile.Buffer`.

The default device is `metal` where an Apple GPU is present and `cpu` elsewhere; the environment
variable `METILE_DEVICE` overrides it. Device settings of the CPU device come from the environment
here, once, and reach the device as a frozen options object.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import threading
from collections.abc import Iterator
from pathlib import Path

from metile.metal.buffer import NOT_GIVEN
from metile.metal.buffer import Buffer as _DeviceBuffer
from metile.metal.cpu.device import CpuDevice, CpuOptions
from metile.metal.cpu.toolchain import default_cache_dir
from metile.metal.errors import DeviceError, DeviceUnavailableError

DEVICE_NAMES = ("cpu", "metal")
_devices: dict[str, object] = {}
_lock = threading.Lock()


def metal_available() -> bool:
    """True when this machine may run the Apple GPU device (macOS on Apple silicon; a virtual machine's paravirtual
    GPU is refused when the device is created, see `metal_usable`)."""
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def metal_usable() -> bool:
    """True when the Apple GPU device can be created here (it is, once: `device("metal")`)."""
    if not metal_available():
        return False
    try:
        device("metal")
    except DeviceUnavailableError:
        return False
    return True


MAX_CPU_WORKERS = 1024


def _cpu_options() -> CpuOptions:
    env = os.environ
    return CpuOptions(
        cache_dir=_cache_dir(),
        compiler=env.get("CXX") or None,
        workers=_setting(env, "METILE_CPU_WORKERS", 0, int, lambda n: 0 <= n <= MAX_CPU_WORKERS,
                         f"a whole number of worker threads from 0 (one per core) to {MAX_CPU_WORKERS}"),
        timeout_s=_setting(env, "METILE_CPU_TIMEOUT", 120.0, float, lambda t: math.isfinite(t) and t >= 0,
                           "the seconds a dispatch may run, a number >= 0 (0: no limit)"),
        in_place_arrays=_setting(env, "METILE_CPU_IN_PLACE", 0, int, lambda n: n in (0, 1),
                                 "1 (bind arrays as their own memory: no copy, no guard page) or 0 (copy them)") == 1,
    )


def _setting(env, name: str, default, kind, ok, rule: str):
    """The environment variable `name` read as `kind` (`default` when unset or blank), refused unless `ok`."""
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise DeviceError(f"{name}={text!r} is not a valid setting of the CPU device: it takes {rule}")
    return value


def _cache_dir() -> Path:
    """The kernel cache directory (see `default_cache_dir`), made if missing; refused when it cannot be used."""
    path = default_cache_dir(os.environ)
    try:
        path.mkdir(parents=True, exist_ok=True)
        usable = os.access(path, os.W_OK | os.X_OK)
        why = "it is not writable"
    except OSError as e:
        usable, why = False, e.strerror or str(e)
    if not usable:
        raise DeviceError(f"metile cannot use {str(path)!r} as its kernel cache directory ({why}); set "
                          "METILE_CACHE_DIR to a writable directory")
    return path


def _create(name: str):
    if name == "cpu":
        return CpuDevice(_cpu_options())
    if not metal_available():
        raise DeviceUnavailableError(
            f"the `metal` device needs macOS on Apple silicon; this machine runs {platform.system()} "
            f"on {platform.machine()}. Use metile.device('cpu') (or METILE_DEVICE=cpu) to run MSL on the CPU."
        )
    from metile.metal.gpu.device import MetalDevice, MetalOptions

    return MetalDevice(MetalOptions(cache_dir=_cache_dir(), aot=metal_compile_mode(os.environ),
                                    encoder_status=metal_encoder_status(os.environ)))


METAL_COMPILE_ENV = "METILE_METAL_COMPILE"
_METAL_MODES = {"": None, "auto": None, "aot": True, "jit": False}


def metal_compile_mode(env) -> bool | None:
    """How the Metal device compiles MSL, from `METILE_METAL_COMPILE`: "aot" (`xcrun metal`, required), "jit" (Metal's
    runtime compiler, always), "auto" or unset (AOT when the toolchain is installed); the `aot` of `MetalOptions`."""
    text = env.get(METAL_COMPILE_ENV, "").strip().lower()
    if text not in _METAL_MODES:
        raise DeviceError(f"{METAL_COMPILE_ENV}={text!r}: use aot, jit or auto")
    return _METAL_MODES[text]


METAL_ENCODER_STATUS_ENV = "METILE_METAL_ENCODER_STATUS"


def metal_encoder_status(env) -> bool:
    """Whether the Metal device's command buffers report each encoder's execution status, so that a GPU fault names the
    kernel that faulted (`METILE_METAL_ENCODER_STATUS=1`; Metal's option costs CPU time, so it is off by default)."""
    text = env.get(METAL_ENCODER_STATUS_ENV, "").strip().lower()
    if text not in ("", "0", "1"):
        raise DeviceError(f"{METAL_ENCODER_STATUS_ENV}={text!r}: use 1 or 0")
    return text == "1"


def default_device_name() -> str:
    name = os.environ.get("METILE_DEVICE", "").strip().lower()
    if name:
        return name
    return "metal" if metal_available() else "cpu"


def device(name: str | None = None):
    """The device called `name` ("cpu" or "metal"), or the default device; created once per process. When the
    default is `metal` (no METILE_DEVICE, an Apple silicon Mac) but metile cannot use the GPU (a virtual machine's
    paravirtual device), the default is the CPU device, with a warning the first time."""
    if name is not None and not isinstance(name, str):
        raise DeviceUnavailableError(f"a device is named by a string (\"cpu\" or \"metal\"), not {name!r}")
    chosen = (name or default_device_name()).lower()
    if chosen not in DEVICE_NAMES:
        raise DeviceUnavailableError(f"unknown device {chosen!r}; choose one of {', '.join(DEVICE_NAMES)}")
    by_default = name is None and not os.environ.get("METILE_DEVICE", "").strip()
    if by_default and chosen == "metal" and "metal" in _refused:
        chosen = "cpu"
    with _lock:
        dev = _devices.get(chosen)
        if dev is None:
            try:
                dev = _devices[chosen] = _create(chosen)
            except DeviceUnavailableError as e:
                if not by_default or chosen != "metal":
                    raise
                import warnings

                _refused["metal"] = e.message
                warnings.warn(f"metile uses the CPU device: {e.message}", RuntimeWarning, stacklevel=2)
                dev = _devices.get("cpu") or _devices.setdefault("cpu", _create("cpu"))
    return dev


_refused: dict[str, str] = {}   # devices the default could not use, and why


@contextlib.contextmanager
def default_device_named(name: str) -> Iterator[None]:
    """`METILE_DEVICE=name` for the duration of the block (how an `@metile.kernel` chooses the device it compiles
    for), restored afterwards."""
    old = os.environ.get("METILE_DEVICE")
    os.environ["METILE_DEVICE"] = name
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("METILE_DEVICE", None)
        else:
            os.environ["METILE_DEVICE"] = old


def _default_if_none(dev):
    """The device `dev` stands for: the default one for None, the one of that name for a string."""
    return device(dev) if dev is None or isinstance(dev, str) else dev


def synchronize() -> None:
    """Wait for every dispatch on every device created so far."""
    for dev in list(_devices.values()):
        dev.synchronize()


class Buffer(_DeviceBuffer):
    """Zero-copy device memory on the default device (or `device=`, a device or its name); see
    `metile.metal.buffer.Buffer`."""

    def __init__(self, data=None, *, shape=None, dtype=NOT_GIVEN, device=None, _fill: int | None = 0):
        super().__init__(data, shape=shape, dtype=dtype, device=_default_if_none(device), _fill=_fill)
