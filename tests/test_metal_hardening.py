"""The Apple GPU device where Metal differs from a careful first reading, through the C stand-in of the shim,
which behaves as Metal does there (see tests/metal_stub/stub_shim.c): no-copy wraps that fail or come back
short, no default device without CoreGraphics, command buffers released before they finish or were committed,
the macOS gates of Metal 4, tensor ops, compile options and MSL versions, the checks of a dispatch before it is
encoded, faults named by their encoder, compiler warnings, 16 KiB pages and 16-byte threadgroup memory. Which device
is taken, the macOS gates and the checks of a dispatch are decided by the functions of metile/metal/gpu/shim_logic.h,
which shim.m and the stand-in both call (see also test_metal_shim_logic_stub)."""

from __future__ import annotations

import gc
import warnings

import ml_dtypes
import numpy as np
import pytest
from metal_stub import KERNELS, NUMPY_KERNELS, numpy_kernels

import metile
from metile.devices import metal_compile_mode
from metile.metal.errors import DeviceError, DeviceFault, DeviceUnavailableError, LaunchError, MSLCompileWarning
from metile.metal.gpu import _build
from metile.metal.gpu.binding import ERR_ARGUMENT
from metile.metal.gpu.device import MetalDevice, MetalOptions

N = 1000


def aligned(dev, n: int) -> np.ndarray:
    """A float32 array of `n` elements that starts on a page and spans whole pages (wrapped without a copy)."""
    page = dev.page_size
    raw = np.zeros(n * 4 + page, np.uint8)
    off = -raw.ctypes.data % page
    return raw[off:off + n * 4].view(np.float32)


def test_the_stand_in_has_the_pages_of_apple_silicon(dev):
    assert dev.page_size == 16384


@pytest.mark.parametrize("mode", ["nil", "short"])
def test_an_array_metal_will_not_wrap_whole_is_copied_and_its_results_arrive(stub, dev, add, mode):
    n = dev.page_size // 4 * 2
    a, b, out = aligned(dev, n), aligned(dev, n), aligned(dev, n)
    a[:], b[:] = np.arange(n), 1.0
    stub.set_wrap(mode)
    dev.dispatch_threads(add, n, 256, [a, b, out, n])
    dev.synchronize()
    np.testing.assert_array_equal(out, np.arange(n, dtype=np.float32) + 1)   # written back from the copy
    assert dev.stream.wraps_refused == 3
    assert len(stub.calls("buffer_wrap")) == 3 and len(stub.calls("buffer_new_copy")) == 3


def test_without_a_default_device_the_first_of_all_devices_is_used(stub, make_device):
    stub.set_system(15, default_device=False)
    dev = make_device()
    assert dev.gpu_family == 8 and "fallback=all_devices" in stub.calls("device_create")[-1]
    assert ("-framework", "CoreGraphics") == _build.FRAMEWORKS[-2:]      # what gives a command-line tool its device
    assert "CoreGraphics" in " ".join(_build.metal_shim_spec().link_args)


def test_a_device_dropped_with_work_in_flight_finishes_it_first(stub, tmp_path):
    from metal_stub import FakeXcrun

    stub.reset()
    stub.execute_with(numpy_kernels(NUMPY_KERNELS))
    dev = MetalDevice(MetalOptions(cache_dir=tmp_path / "cache", max_batch=2), shim=stub.shim,
                      runner=FakeXcrun(present=False))
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    a, b = np.arange(N, dtype=np.float32), np.ones(N, np.float32)
    outs = [np.zeros(N, np.float32) for _ in range(5)]
    for out in outs:   # two command buffers committed and one open, none waited for
        dev.dispatch_threads(add, N, 256, [a, b, out, N])
    del add, dev
    gc.collect()
    for out in outs:
        np.testing.assert_array_equal(out, a + 1)     # run, waited for and written back before anything was freed
    assert not [line for line in stub.calls("commands_release") if "at_release" in line]
    assert stub.live("commands") == 0 and stub.counts()["bad_releases"] == 0


def raw_dispatch(stub, dev, add, *, commit: bool, wait: bool) -> np.ndarray:
    """Encode `add` into a command buffer through the shim directly, then release it as told; the output's memory."""
    ffi, lib = stub.ffi, stub.lib
    err = ffi.new("char**")
    out_mem = dev.allocate(N * 4)
    a_mem, b_mem = dev.allocate(N * 4), dev.allocate(N * 4)
    for mem, value in ((a_mem, 2.0), (b_mem, 3.0)):
        np.frombuffer(ffi.buffer(mem.ptr, N * 4), np.float32)[:] = value
    n = ffi.new("uint32_t*", N)
    table = ffi.new("mts_binding[4]")
    for i, mem in enumerate((a_mem, b_mem, out_mem)):
        table[i].buffer = mem.handle
    table[3].bytes, table[3].length = n, 4
    cmds = ffi.new("mts_commands**")
    assert lib.mts_commands_begin(dev.handle, 0, cmds, err) == 0
    assert lib.mts_commands_encode(cmds[0], add.handle, b"add", 1, N, 1, 1, 256, 1, 1, table, 4, ffi.NULL, 0, err) == 0
    if commit:
        assert lib.mts_commands_commit(cmds[0], err) == 0
    if wait:
        assert lib.mts_commands_wait(cmds[0], ffi.new("mts_completion*"), err) == 0
    lib.mts_commands_release(cmds[0])
    return np.frombuffer(ffi.buffer(out_mem.ptr, N * 4), np.float32)


@pytest.mark.parametrize(("commit", "note"), [(True, "waited_at_release=1"),
                                              (False, "committed_at_release=1 waited_at_release=1")])
def test_a_command_buffer_released_early_is_run_to_completion_not_dropped(stub, dev, add, commit, note):
    out = raw_dispatch(stub, dev, add, commit=commit, wait=False)
    np.testing.assert_array_equal(out, 5.0)
    assert stub.calls("commands_release")[-1].endswith(note)


@pytest.mark.parametrize(("os_major", "family", "probe", "metal4", "tensor"), [
    (15, True, True, False, False),     # macOS 15 knows no Metal 4 family: not asked
    (26, True, False, True, False),     # Metal 4, but the tensor probe does not compile
    (26, True, True, True, True),
    (26, False, True, False, False),
])
def test_metal4_and_tensor_ops_are_reported_only_where_they_exist(stub, make_device, os_major, family, probe, metal4,
                                                                 tensor):
    stub.set_system(os_major, metal4_family=family, tensor_probe=probe)
    dev = make_device()
    assert (dev.supports_metal4, dev.supports_tensor_ops) == (metal4, tensor)


@pytest.mark.parametrize(("os_version", "asked", "code", "math"), [
    ("14.6", None, (3 << 16) | 1, "fastMathEnabled"),    # the newest MSL of macOS 14, math by the old setter
    ("15.2", None, (3 << 16) | 2, "mathMode"),
    ("26.0", None, 4 << 16, "mathMode"),
    ("26.1", "3.1", (3 << 16) | 1, "mathMode"),
])
def test_compile_options_follow_the_macos_version(stub, make_device, os_version, asked, code, math):
    stub.set_system(int(os_version.split(".")[0]))
    dev = make_device(os_version=os_version, language_version=asked)
    dev.compile(KERNELS, name="kernels.metal")
    line = stub.calls("library_from_source")[-1]
    assert f"language_version={code} " in line and f"math={math}" in line


@pytest.mark.parametrize(("asked", "message"), [("4.0", "MSL 4.0 needs macOS 26 or later, and this Mac runs macOS 15"),
                                                ("9.9", "not an MSL version metile knows")])
def test_an_msl_version_the_system_does_not_have_is_refused(make_device, asked, message):
    with pytest.raises(DeviceError, match=message):
        make_device(os_version="15.3", language_version=asked)


@pytest.mark.parametrize(("change", "message"), [
    ("bindings", "more than 31 buffer or threadgroup memory bindings"),
    ("offset", "offset is past the end of its buffer"),
    ("zero", "a grid or threadgroup dimension is zero"),
    ("threads", "more threads per threadgroup than the pipeline's maxTotalThreadsPerThreadgroup"),
])
def test_the_shim_checks_a_dispatch_before_encoding_it(stub, dev, add, change, message):
    ffi, lib = stub.ffi, stub.lib
    err = ffi.new("char**")
    mem = dev.allocate(64)
    n_bindings = 32 if change == "bindings" else 1
    table = ffi.new(f"mts_binding[{n_bindings}]")
    table[0].buffer = mem.handle
    table[0].offset = 64 if change == "offset" else 0
    size = (0, 1, 1) if change == "zero" else (4, 1, 1)
    threads = (2048, 1, 1) if change == "threads" else (256, 1, 1)
    cmds = ffi.new("mts_commands**")
    assert lib.mts_commands_begin(dev.handle, 0, cmds, err) == 0
    code = lib.mts_commands_encode(cmds[0], add.handle, b"add", 0, *size, *threads, table, n_bindings, ffi.NULL, 0,
                                   err)
    assert code == ERR_ARGUMENT and message in ffi.string(err[0]).decode()
    lib.mts_string_free(err[0])
    assert "commands_encode " not in "\n".join(stub.log()).replace("commands_encode failed", "")
    lib.mts_commands_release(cmds[0])


def test_dispatch_threads_needs_non_uniform_threadgroups(stub, make_device):
    stub.set_device_info(nonuniform_threadgroups=0)
    dev = make_device()
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    a = np.ones(N, np.float32)
    with pytest.raises(LaunchError, match="needs non-uniform threadgroups"):
        dev.dispatch_threads(add, N, 256, [a, a, a, N])
    dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [a, a, np.zeros(N, np.float32), N])
    dev.synchronize()


def test_a_paravirtual_device_is_refused(stub, make_device):
    stub.set_device_info(apple_family=0, name=b"Apple Paravirtual device")
    with pytest.raises(DeviceUnavailableError, match="'Apple Paravirtual device' is not an Apple7"):
        make_device()


@pytest.mark.parametrize("status", [True, False])
def test_a_fault_in_a_batch_names_the_kernel_whose_encoder_faulted_when_asked(stub, make_device, status):
    """Each encoder's execution status costs CPU time (Apple): command buffers report it only with encoder_status."""
    def faulting_sum(r, x, sums):
        raise MemoryError("the stand-in's fault")

    dev = make_device(encoder_status=status)
    stub.execute_with(numpy_kernels(NUMPY_KERNELS | {"block_sum": faulting_sum}))
    lib = dev.compile(KERNELS, name="kernels.metal")
    add, block_sum = lib.function("add"), lib.function("block_sum")
    a = np.ones(1024, np.float32)
    dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [a, a, np.zeros(1024, np.float32), 1024])
    dev.dispatch_threadgroups(block_sum, (4, 1, 1), (256, 1, 1), [a, np.zeros(4, np.float32)],
                              threadgroup_memory=[1024])
    dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [a, a, np.zeros(1024, np.float32), 1024])
    named = "the fault is in `block_sum`" if status else r"of add, block_sum \(MetalOptions\(encoder_status=True\)"
    with pytest.raises(DeviceFault, match=named) as e:
        dev.synchronize()
    assert e.value.kernel == ("block_sum" if status else "")
    labels = [line.split("label=")[1] for line in stub.calls("commands_encode")]
    encoders = [line.split("encoder=")[1].split()[0] for line in stub.calls("commands_encode")]
    assert labels == ["add", "block_sum", "add"] and encoders == ["1", "2", "3"]
    options = "encoder_execution_status" if status else "none"
    assert stub.calls("commands_begin")[-1].endswith(f"error_options={options}")


def test_threadgroup_memory_is_rounded_up_to_16_bytes(stub, dev):
    seen = []
    stub.execute_with(lambda r: seen.append(r.threadgroup_memory))
    block_sum = dev.compile(KERNELS, name="kernels.metal").function("block_sum")
    dev.dispatch_threadgroups(block_sum, (1, 1, 1), (250, 1, 1), [np.ones(250, np.float32), np.zeros(1, np.float32)],
                              threadgroup_memory=[1000])
    dev.synchronize()
    assert seen == [(1008,)]


def test_warnings_of_a_successful_compile_are_shown(stub, dev):
    stub.set_compile_warnings("program_source:5:11: warning: unused variable 'x' [-Wunused-variable]")
    with pytest.warns(MSLCompileWarning, match=r"kernels\.metal:5:11: warning: unused variable 'x'"):
        dev.compile(KERNELS, name="kernels.metal")
    stub.set_compile_warnings("")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dev.compile(KERNELS + "\n", name="quiet.metal")


@pytest.mark.parametrize(("text", "aot"), [("", None), ("auto", None), ("AOT", True), (" jit ", False)])
def test_the_metal_compile_mode_comes_from_the_environment(text, aot):
    assert metal_compile_mode({"METILE_METAL_COMPILE": text}) is aot


def test_a_bad_metal_compile_mode_is_refused():
    with pytest.raises(DeviceError, match="METILE_METAL_COMPILE='sometimes': use aot, jit or auto"):
        metal_compile_mode({"METILE_METAL_COMPILE": "sometimes"})
    assert issubclass(DeviceError, metile.MetileError)


def test_jit_is_used_when_asked_even_with_the_toolchain_installed(stub, make_device):
    from metal_stub import FakeXcrun

    dev = make_device(runner=FakeXcrun(present=True), aot=False)
    assert dev.compiler.mode == "jit"
    dev.compile(KERNELS, name="kernels.metal")
    assert stub.calls("library_from_source") and not stub.calls("library_from_file")


def test_the_default_device_is_the_cpu_where_the_gpu_cannot_be_used(monkeypatch):
    """An Apple silicon Mac whose GPU metile refuses (a virtual machine's paravirtual device): the default device is
    the CPU one, said once; asking for `metal` by name still raises why."""
    from metile import devices

    cpu = metile.device("cpu")

    def create(name):   # called under the devices' lock
        if name == "metal":
            raise DeviceUnavailableError("the Metal device 'Apple Paravirtual device' is not an Apple7 (M1) or later")
        return cpu

    monkeypatch.delenv("METILE_DEVICE", raising=False)
    monkeypatch.setattr(devices, "metal_available", lambda: True)
    monkeypatch.setattr(devices, "_create", create)
    monkeypatch.setattr(devices, "_devices", {})
    monkeypatch.setattr(devices, "_refused", {})
    with pytest.warns(RuntimeWarning, match="metile uses the CPU device: the Metal device 'Apple Paravirtual"):
        assert devices.device() is cpu
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert devices.device() is cpu
    with pytest.raises(DeviceUnavailableError, match="Paravirtual"):
        devices.device("metal")
    monkeypatch.setenv("METILE_DEVICE", "metal")
    with pytest.raises(DeviceUnavailableError, match="Paravirtual"):
        devices.device()


class MetalTensor:
    """A tensor of another library in Metal memory: `n` elements of `dtype` (numpy's name; "bfloat16" is carried as
    uint16 and labelled kDLBfloat) at element `offset` of a Metal buffer. Its DLPack capsule is numpy's, pointed at
    the buffer (device kDLMetal, the MTLBuffer as data, the offset in bytes)."""

    def __init__(self, mem, n: int, offset: int, dtype: str = "float32"):
        self.mem, self.n, self.offset = mem, n, offset
        self.bfloat = dtype == "bfloat16"
        self.carrier = np.dtype(np.uint16 if self.bfloat else dtype)
        self.dtype = np.dtype(ml_dtypes.bfloat16) if self.bfloat else self.carrier
        self.shape = (n,)
        self.nbytes = self.carrier.itemsize * n

    def __dlpack_device__(self):
        return (8, 0)

    def __dlpack__(self, stream=None):
        from metile.metal import dlpack

        capsule = np.zeros(self.n, self.carrier).__dlpack__()
        raw = dlpack._api.PyCapsule_GetPointer(dlpack.ffi.cast("void*", id(capsule)), b"dltensor")
        t = dlpack.ffi.cast("DLManagedTensor*", raw).dl_tensor
        t.data = dlpack.ffi.cast("void*", self.mem.handle)
        t.device.device_type = 8
        t.byte_offset = self.carrier.itemsize * self.offset
        if self.bfloat:
            t.dtype.code = 4   # kDLBfloat
        return capsule


def test_a_metal_tensor_of_another_library_is_bound_as_its_buffer_at_its_offset(stub, dev, add):
    offset = 16
    mems = [dev.allocate(4 * (N + offset)) for _ in range(3)]
    views = [np.frombuffer(stub.ffi.buffer(m.ptr, 4 * (N + offset)), np.float32) for m in mems]
    views[0][offset:] = np.arange(N)
    views[1][offset:] = 10.0
    a, b, out = (MetalTensor(m, N, offset) for m in mems)
    dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [a, b, out, N])
    dev.synchronize()
    np.testing.assert_array_equal(views[2][offset:], np.arange(N) + 10)      # written in place, no copy
    assert not views[2][:offset].any()
    assert stub.calls("buffer_new_copy") == [] and stub.calls("buffer_wrap") == []
