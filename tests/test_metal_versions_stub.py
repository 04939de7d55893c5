"""What the Apple GPU device compiles for, through the C stand-in of the shim: the macOS version it reads (macOS 26 as
a Python built with an older SDK is told it, 16.x), the MSL version its host preprocessing gives `__METAL_VERSION__`,
the math of ahead-of-time compiles against the runtime compiler's, and a built shim that cannot be loaded."""

from __future__ import annotations

import platform

import pytest
from metal_stub import KERNELS, FakeXcrun

from metile.metal.errors import DeviceUnavailableError
from metile.metal.gpu import binding


@pytest.fixture
def macos_16(monkeypatch):
    """macOS 26 as Python builds made with an SDK older than 26 see it (Apple's system version compatibility)."""
    monkeypatch.setattr(platform, "mac_ver", lambda: ("16.0", ("", "", ""), "arm64"))


def test_macos_16_is_macos_26(stub, make_device, macos_16):
    stub.set_system(26)
    assert binding.system_macos_version() == "26.0" and binding.real_macos_version("16.2") == "26.2"
    assert binding.real_macos_version("15.6") == "15.6" and binding.real_macos_version("") == ""
    xcrun = FakeXcrun()
    dev = make_device(runner=xcrun)
    assert dev.compiler.settings.language_version == "4.0"       # the newest MSL of macOS 26, not 15's 3.2
    dev.compile(KERNELS, name="kernels.metal")
    cmd = xcrun.compiles()[-1]
    assert cmd[cmd.index("-target") + 1] == "air64-apple-macos26.0"
    assert make_device(language_version="4.0").compiler.settings.language_version == "4.0"   # not refused


VERSIONED = """
#include <metal_stdlib>
using namespace metal;
#if __METAL_VERSION__ >= 400
kernel void msl4(device float* x [[buffer(0)]]) {}
#elif __METAL_VERSION__ >= 320
kernel void msl32(device float* x [[buffer(0)]]) {}
#else
kernel void msl31(device float* x [[buffer(0)]]) {}
#endif
"""


@pytest.mark.parametrize(("os_version", "asked", "kernel"), [("26.0", None, "msl4"), ("15.4", None, "msl32"),
                                                             ("26.1", "3.1", "msl31"), ("26.1", "3.2", "msl32")])
def test_the_kernels_of_a_source_are_read_at_the_msl_version_it_compiles_as(stub, make_device, os_version, asked,
                                                                            kernel):
    stub.set_system(int(os_version.split(".")[0]))
    dev = make_device(os_version=os_version, language_version=asked)
    assert dev.compile(VERSIONED, name="versioned.metal").function_names == [kernel]


@pytest.mark.parametrize(("os_version", "fast", "flags"), [
    ("14.6", False, ["-fno-fast-math"]),
    ("14.6", True, ["-ffast-math"]),
    ("15.2", False, ["-fmetal-math-mode=safe", "-fmetal-math-fp32-functions=precise"]),
    ("26.0", True, ["-fmetal-math-mode=fast", "-fmetal-math-fp32-functions=fast"]),
])
def test_ahead_of_time_math_is_the_runtime_compilers(stub, make_device, os_version, fast, flags):
    """The runtime compiler is given mathMode safe and precise fp32 functions from macOS 15 (fastMathEnabled NO
    before, see test_metal_shim_logic_stub): `xcrun metal` is given the same."""
    stub.set_system(int(os_version.split(".")[0]))
    xcrun = FakeXcrun()
    make_device(runner=xcrun, os_version=os_version, fast_math=fast).compile(KERNELS, name="kernels.metal")
    cmd = xcrun.compiles()[-1]
    assert [f for f in cmd if f.startswith("-f")] == flags


def test_a_built_shim_that_cannot_be_loaded_leaves_the_gpu_unavailable(tmp_path):
    """An ImportError loading the built shim (another Python's, a missing framework) is DeviceUnavailableError, so
    that the default device falls back to the CPU one."""
    broken = tmp_path / "_metile_metal_shim.so"
    broken.write_bytes(b"not a shared library")
    with pytest.raises(DeviceUnavailableError, match=r"cannot load the Metal shim at .*ImportError"):
        binding.load_extension(broken, "_metile_metal_shim")


def test_doctor_names_macos_26_where_python_is_told_16(monkeypatch, macos_16):
    from metile import doctor

    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    facts = dict(doctor.system_facts())
    assert facts["os"].startswith("macOS 26.0 (")
