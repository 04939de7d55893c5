"""Metal 4 tensor ops on the Metal device, through the C stand-in for the shim: whether they compile (a probe cached
per OS build and device) and whether they are accelerated (as MLX decides it), and MSL 4 for the sources that use
them, ahead of time with `-std=metal4.0`."""

from __future__ import annotations

import pytest
from metal_stub import FakeXcrun

import metile
from metile.metal.gpu.capabilities import gpu_generation, probe_path

TENSOR_SOURCE = """#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace metal;
kernel void add(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
                device float* c [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    c[i] = a[i] + b[i];
}
"""


def m5(stub, *, architecture=b"applegpu_g17s", os_major=26, build=b"25C56", name=b"Apple M5 Max", probe=True):
    stub.set_device_info(name=name, apple_family=10, architecture=architecture, os_build=build)
    stub.set_system(os_major, metal4_family=True, tensor_probe=probe)


@pytest.mark.parametrize(("architecture", "os_version", "accelerated"), [
    (b"applegpu_g17s", "26.2", True),      # M5 Max on macOS 26.2
    (b"applegpu_g17g", "26.3.1", True),    # M5
    (b"applegpu_g17s", "26.1", False),     # MLX's NAX kernels need macOS 26.2
    (b"applegpu_g16s", "26.2", False),     # M4 Pro: tensor ops compile, no Neural Accelerators
    (b"applegpu_g17p", "26.2", False),     # an architecture ending in 'p' needs generation 18
    (b"applegpu_g18p", "26.2", True),
    (b"", "26.2", False),                  # no architecture name (before macOS 14)
])
def test_tensor_ops_compile_and_accelerated_are_reported_apart(stub, make_device, architecture, os_version,
                                                              accelerated):
    m5(stub, architecture=architecture)
    dev = make_device(os_version=os_version)
    assert dev.supports_tensor_ops is True
    assert dev.tensor_ops_accelerated is accelerated
    assert dev.architecture == architecture.decode()
    # kernels compile for tensor ops (metile.target("M5")) only where the neural accelerators run them
    assert dev.target == metile.target("M5" if accelerated else "M4")


def test_without_the_probe_compiling_nothing_is_accelerated(stub, make_device):
    m5(stub, probe=False)
    dev = make_device(os_version="26.2")
    assert (dev.supports_tensor_ops, dev.tensor_ops_accelerated) == (False, False)


def test_the_tensor_probe_is_cached_per_os_build_and_device(stub, make_device, tmp_path):
    cache = tmp_path / "probe-cache"
    m5(stub)
    assert make_device(cache_dir=cache, os_version="26.2").supports_tensor_ops
    assert len(stub.calls("device_probe_tensor_ops")) == 1
    assert probe_path(cache, "25C56", "Apple M5 Max").read_text() == "1\n"
    for _ in range(2):      # the same build and device: no compile
        assert make_device(cache_dir=cache, os_version="26.2").supports_tensor_ops
    assert len(stub.calls("device_probe_tensor_ops")) == 1
    m5(stub, build=b"25D5", probe=False)      # a new OS build asks again
    assert make_device(cache_dir=cache, os_version="26.3").supports_tensor_ops is False
    m5(stub, name=b"Apple M5 Pro")             # and so does another device
    assert make_device(cache_dir=cache, os_version="26.2").supports_tensor_ops is True
    assert len(stub.calls("device_probe_tensor_ops")) == 3
    m5(stub, build=b"")                        # an unknown build is never cached
    make_device(cache_dir=cache, os_version="26.2")
    make_device(cache_dir=cache, os_version="26.2")
    assert len(stub.calls("device_probe_tensor_ops")) == 5


def test_no_probe_without_metal4(stub, make_device):
    m5(stub, os_major=15)
    dev = make_device(os_version="15.5")
    assert dev.supports_tensor_ops is False and not stub.calls("device_probe_tensor_ops")


def test_a_tensor_source_compiles_as_msl4_ahead_of_time_and_by_the_driver(stub, make_device):
    xcrun = FakeXcrun()
    dev = make_device(runner=xcrun)       # no macOS version known: no version pinned
    dev.compile(TENSOR_SOURCE, name="tensor.metal")
    assert "-std=metal4.0" in xcrun.compiles()[-1]
    dev.compile(TENSOR_SOURCE.replace("c[i] =", "c[i] = 2 *"), name="plain.metal")
    dev = make_device()                   # the driver: MTLLanguageVersion4_0
    dev.compile(TENSOR_SOURCE, name="tensor.metal")
    assert f"language_version={4 << 16} " in stub.calls("library_from_source")[-1]
    dev.compile(TENSOR_SOURCE.split("#include <metal_tensor>")[0] + TENSOR_SOURCE.split("PerformancePrimitives.h>")[1],
                name="plain.metal")
    assert "language_version=0 " in stub.calls("library_from_source")[-1]


def test_a_tensor_source_with_an_older_msl_version_is_refused(stub, make_device):
    m5(stub)
    dev = make_device(os_version="26.2", language_version="3.2")
    with pytest.raises(metile.DeviceError, match=r"tensor.metal uses Metal 4 tensors .* need MSL 4.0 .* MSL 3.2"):
        dev.compile(TENSOR_SOURCE, name="tensor.metal")


def test_gpu_generation_reads_the_two_digits_before_the_last_letter():
    assert gpu_generation("applegpu_g17s") == (17, "s")
    assert gpu_generation("applegpu_g13g") == (13, "g")
    assert gpu_generation("") == (0, "")
