"""`triton.runtime.driver` on metile: the active driver is metile's default device.

`driver.active` answers what Triton programs ask of their driver: `get_current_device()` (0),
`get_current_stream()` (0), `get_active_torch_device()` (torch's `mps` device when metile runs on an Apple GPU,
`cpu` on the CPU device), `get_current_target()` (a `GPUTarget` whose backend is `"metal"`, neither `"cuda"` nor
`"hip"`, and whose arch is the Apple GPU family metile compiles for), `get_device_interface()` (`synchronize()`),
`get_benchmarker()` (`triton.testing.do_bench`) and `utils.get_device_properties(device)`:
`multiprocessor_count` (the CPU's cores on the CPU device; an Apple GPU's cores where metile's table of Apple GPUs
knows its name), `max_shared_mem` (threadgroup memory, 32768 bytes), `warpSize` (32, a simdgroup), `max_num_regs`
(a nominal 65536: Metal reports no register counts) and `max_threads_per_sm` (1024).
"""

from __future__ import annotations

import os
import time

import metile
from metile.ir.target import DEFAULT_TARGET
from metile.profile.gpus import UnknownGpuError, gpu
from metile.triton.backends.compiler import GPUTarget


def metal_target() -> str:
    """The Apple GPU family kernels compile for: the Apple GPU's own (`apple9`...), or the family the CPU device runs
    Metal code as."""
    family = getattr(metile.device(), "gpu_family", None)
    return f"apple{family}" if family else DEFAULT_TARGET.family


def _cores(dev) -> int:
    """An Apple GPU's cores (from metile's table of Apple GPUs, by the device's name), else the CPU's cores."""
    name = getattr(dev, "gpu_name", None)
    if name:
        try:
            return gpu(name.removeprefix("Apple").strip()).gpu_cores
        except UnknownGpuError:
            pass
    return os.cpu_count() or 1


class _Event:
    """A timing event of `get_device_interface()` (`elapsed_time` in milliseconds, after `synchronize()`)."""

    def __init__(self, enable_timing: bool = True):
        self.at = None

    def record(self, stream=None) -> None:
        metile.synchronize()
        self.at = time.perf_counter()

    def elapsed_time(self, end: _Event) -> float:
        return 1e3 * (end.at - self.at)

    def synchronize(self) -> None:
        metile.synchronize()


class _DeviceInterface:
    """The module-like object `get_device_interface()` returns (as `torch.cuda` is for Triton's NVIDIA driver)."""

    Event = _Event

    @staticmethod
    def synchronize(device=None) -> None:
        metile.synchronize()

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True


class _Utils:
    """`driver.active.utils`."""

    @staticmethod
    def get_device_properties(device=None) -> dict:
        dev = metile.device()
        return {"multiprocessor_count": _cores(dev), "max_shared_mem": int(dev.max_threadgroup_memory),
                "warpSize": DEFAULT_TARGET.simd_width, "max_num_regs": 65536,
                "max_threads_per_sm": int(dev.max_threads_per_threadgroup)}


class MetileDriver:
    """The active driver: metile's default device (see the module docstring)."""

    utils = _Utils()

    @classmethod
    def is_active(cls) -> bool:
        return True

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device) -> None:
        if device not in (0, None):
            raise ValueError(f"metile has one device (0), not {device!r}")

    def get_current_stream(self, device=None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("metal", metal_target(), DEFAULT_TARGET.simd_width)

    def get_active_torch_device(self):
        import torch

        return torch.device("mps" if metile.device().name == "metal" else "cpu")

    def get_device_interface(self) -> _DeviceInterface:
        return _DeviceInterface()

    def get_benchmarker(self):
        from metile.triton.testing import do_bench

        return do_bench

    def get_empty_cache_for_benchmark(self):
        return None   # nothing to flush: timings are of the kernels as they run

    def clear_cache(self, cache) -> None:
        return None

    def __repr__(self) -> str:
        return "<metile driver>"


class DriverConfig:
    """`triton.runtime.driver`: `active` (and `default`) is metile's driver; `set_active`/`reset_active` as Triton's."""

    def __init__(self):
        self.default = MetileDriver()
        self.active = self.default

    def set_active(self, driver) -> None:
        self.active = driver

    def reset_active(self) -> None:
        self.active = self.default


driver = DriverConfig()

__all__ = ["DriverConfig", "GPUTarget", "MetileDriver", "driver", "metal_target"]
