"""Device selection: `metile.device()`, `metile.synchronize()` and the default-device `metile.Buffer`.

The default device is `metal` where an Apple GPU is present and `cpu` elsewhere; the environment
variable `METILE_DEVICE` overrides it. Device settings of the CPU device come from the environment
here, once, and reach the device as a frozen options object.
"""

from __future__ import annotations

import os
import platform
import threading

import numpy as np

from metile.metal.buffer import Buffer as _DeviceBuffer
from metile.metal.cpu.device import CpuDevice, CpuOptions
from metile.metal.cpu.toolchain import default_cache_dir
from metile.metal.errors import DeviceUnavailableError

DEVICE_NAMES = ("cpu", "metal")
_devices: dict[str, object] = {}
_lock = threading.Lock()


def metal_available() -> bool:
    """True when this machine can run the Apple GPU device."""
    return platform.system() == "Darwin" and platform.machine() == "arm64"


def _cpu_options() -> CpuOptions:
    env = os.environ
    return CpuOptions(
        cache_dir=default_cache_dir(env),
        compiler=env.get("CXX") or None,
        workers=int(env.get("METILE_CPU_WORKERS", "0") or 0),
        timeout_s=float(env.get("METILE_CPU_TIMEOUT", "120") or 120),
    )


def _create(name: str):
    if name == "cpu":
        return CpuDevice(_cpu_options())
    if not metal_available():
        raise DeviceUnavailableError(
            f"the `metal` device needs macOS on Apple silicon; this machine runs {platform.system()} "
            f"on {platform.machine()}. Use metile.device('cpu') (or METILE_DEVICE=cpu) to run MSL on the CPU."
        )
    from metile.metal.gpu.device import MetalDevice, MetalOptions

    return MetalDevice(MetalOptions(cache_dir=default_cache_dir(os.environ)))


def default_device_name() -> str:
    name = os.environ.get("METILE_DEVICE", "").strip().lower()
    if name:
        return name
    return "metal" if metal_available() else "cpu"


def device(name: str | None = None):
    """The device called `name` ("cpu" or "metal"), or the default device; created once per process."""
    if name is not None and not isinstance(name, str):
        raise DeviceUnavailableError(f"a device is named by a string (\"cpu\" or \"metal\"), not {name!r}")
    name = (name or default_device_name()).lower()
    if name not in DEVICE_NAMES:
        raise DeviceUnavailableError(f"unknown device {name!r}; choose one of {', '.join(DEVICE_NAMES)}")
    with _lock:
        dev = _devices.get(name)
        if dev is None:
            dev = _devices[name] = _create(name)
    return dev


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

    def __init__(self, data=None, *, shape=None, dtype=np.float32, device=None, _fill: int | None = 0):
        super().__init__(data, shape=shape, dtype=dtype, device=_default_if_none(device), _fill=_fill)
