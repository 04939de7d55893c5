"""The Metal device's Python side, run against a C stand-in for the Objective-C shim (no GPU needed).

Covers device properties, batching into command buffers, write-back of numpy arguments, the Buffer
zero-copy path, argument errors, shim errors as MetileError subclasses, GPU errors at synchronize()
and the release of every handle exactly once.
"""

from __future__ import annotations

import gc
import platform

import numpy as np
import pytest
from metal_stub import KERNELS, NUMPY_KERNELS, numpy_kernels

import metile
from metile.metal.buffer import Buffer
from metile.metal.gpu.binding import (
    ERR_ALLOC,
    ERR_EXCEPTION,
    ERR_GPU,
    ERR_NO_DEVICE,
    ERR_PIPELINE,
    ERR_STATE,
    load_shim,
)

N = 1000






def vectors(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)


def test_device_properties_come_from_the_shim(stub, make_device):
    stub.reset()
    stub.set_device_info(name=b"Apple M5 Max", apple_family=10, max_threadgroup_memory=65536,
                         max_threads_per_threadgroup=[1024, 1024, 1024], supports_metal4=1, tensor_probe=True)
    dev = make_device()
    assert (dev.name, dev.gpu_name, dev.gpu_family) == ("metal", "Apple M5 Max", 10)
    assert dev.max_threads_per_threadgroup == 1024
    assert dev.max_threadgroup_memory == 65536
    assert dev.simd_width == 32
    assert dev.supports_tensor_ops is True and dev.supports_metal4 is True
    assert "Apple M5 Max" in repr(dev) and "Apple10" in repr(dev)
    assert stub.calls("device_query")


def test_function_reports_pipeline_limits(stub, dev):
    stub.set_pipeline_info(max_total_threads_per_threadgroup=512, thread_execution_width=32,
                           static_threadgroup_memory=4096)
    fn = dev.compile(KERNELS, name="kernels.metal").function("block_sum")
    assert (fn.max_total_threads_per_threadgroup, fn.thread_execution_width) == (512, 32)
    assert fn.static_threadgroup_memory == 4096
    assert [p.name for p in fn.signature.buffers] == ["x", "sums"]
    with pytest.raises(metile.LaunchError, match="allows at most 512"):
        dev.dispatch_threadgroups(fn, 1, 1024, [np.zeros(1024, np.float32), np.zeros(1, np.float32)],
                                  threadgroup_memory=[4096])
    with pytest.raises(metile.LaunchError, match="besides the 4096 bytes the kernel declares"):
        dev.dispatch_threadgroups(fn, 1, 256, [np.zeros(256, np.float32), np.zeros(1, np.float32)],
                                  threadgroup_memory=[32768])


def test_launches_run_at_synchronize_and_numpy_results_are_written_back(stub, dev, add):
    a, b = vectors()
    out = np.zeros(N, np.float32)
    dev.dispatch_threads(add, (N, 1, 1), (256, 1, 1), [a, b, out, np.uint32(N)])
    assert not out.any(), "a launch must not finish before synchronize()"
    assert not stub.calls("commands_commit")
    dev.synchronize()
    np.testing.assert_array_equal(out, a + b)
    encode = stub.calls("commands_encode")
    assert encode == [f"commands_encode commands={encode[0].split('=')[1].split()[0]} function=add kind=threads "
                      f"size={N},1,1 threads=256,1,1 fence_wait=0 bindings=4 tg=0 encoder=1 label=add"]
    assert stub.calls("commands_wait")


def test_launches_are_batched_into_one_command_buffer_until_synchronize(stub, dev, add):
    a, b = vectors()
    outs = [np.zeros(N, np.float32) for _ in range(10)]
    for out in outs:
        dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [a, b, out, N])
    assert len(stub.calls("commands_begin")) == 1
    assert len(stub.calls("commands_encode")) == 10
    assert stub.calls("commands_commit") == []
    assert dev.stream.pending == 10
    dev.synchronize()
    assert len(stub.calls("commands_commit")) == 1 and len(stub.calls("commands_wait")) == 1
    assert dev.stream.pending == 0
    for out in outs:
        np.testing.assert_array_equal(out, a + b)
    assert len(dev.stream.last_timings) == 1
    start, end = dev.stream.last_timings[0]
    assert end > start


def test_a_full_batch_is_committed_without_waiting(stub, make_device):
    dev = make_device(max_batch=4)
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    a, b = vectors()
    out = np.zeros(N, np.float32)
    for _ in range(10):
        dev.dispatch_threads(add, N, 256, [a, b, out, N])
    assert len(stub.calls("commands_begin")) == 3
    assert len(stub.calls("commands_commit")) == 2   # two full batches of 4; the last 2 wait in the open one
    assert stub.calls("commands_wait") == []
    dev.synchronize()
    assert len(stub.calls("commands_commit")) == 3 and len(stub.calls("commands_wait")) == 3
    assert len(dev.stream.last_timings) == 3
    np.testing.assert_array_equal(out, a + b)


def test_too_many_command_buffers_in_flight_waits_for_the_oldest(stub, make_device):
    dev = make_device(max_batch=1, max_in_flight=2)
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    a, b = vectors()
    out = np.zeros(N, np.float32)
    for _ in range(5):
        dev.dispatch_threads(add, N, 256, [a, b, out, N])
    assert len(stub.calls("commands_wait")) == 3
    dev.synchronize()
    assert len(stub.calls("commands_wait")) == 5
    np.testing.assert_array_equal(out, a + b)


def test_later_launches_see_earlier_results_and_arrays_are_staged_once(stub, dev, add):
    a, b = vectors()
    mid, out = np.zeros(N, np.float32), np.zeros(N, np.float32)
    dev.dispatch_threads(add, N, 256, [a, b, mid, N])
    dev.dispatch_threads(add, N, 256, [mid, b, out, N])    # reads what the first launch wrote
    dev.synchronize()
    np.testing.assert_array_equal(mid, a + b)
    np.testing.assert_array_equal(out, (a + b) + b)
    assert len(stub.calls("buffer_new_copy")) == 4         # a, b, mid, out: each once


def test_an_array_read_first_and_written_later_is_written_back(stub, dev, add):
    a, b = vectors()
    out = np.zeros(N, np.float32)
    dev.dispatch_threads(add, N, 256, [a, b, out, N])     # a is only read here
    dev.dispatch_threads(add, N, 256, [out, b, a, N])     # and written here
    expect = (a + b) + b
    dev.synchronize()
    np.testing.assert_array_equal(a, expect)


def test_a_failed_staging_raises_and_encodes_nothing(stub, dev, add):
    a, b = vectors()
    out = np.zeros(N, np.float32)
    stub.fail("buffer_new_copy", ERR_ALLOC, "cannot allocate a Metal buffer", skip=2)
    with pytest.raises(metile.DeviceError, match="copying 4000 bytes into Metal memory: cannot allocate"):
        dev.dispatch_threads(add, N, 256, [a, b, out, N])
    out[:] = 5.0
    dev.synchronize()
    assert (out == 5.0).all()
    assert stub.calls("commands_encode") == []


def test_python_scalars_use_set_bytes_and_rebinding_sees_new_arguments(stub, dev, add):
    a, b = vectors()
    first, second = np.zeros(N, np.float32), np.zeros(N, np.float32)
    dev.dispatch_threads(add, N, 256, [a, b, first, 10])
    dev.dispatch_threads(add, N, 256, [a, b, second, N])
    dev.synchronize()
    np.testing.assert_array_equal(first[:10], (a + b)[:10])
    assert not first[10:].any()
    np.testing.assert_array_equal(second, a + b)


def test_page_aligned_arrays_are_wrapped_without_a_copy(stub, dev, add):
    page = dev.page_size
    n = page // 4 * 4        # 4 pages of float32

    def aligned():
        raw = np.zeros(n * 4 + page, np.uint8)
        off = -raw.ctypes.data % page
        return raw[off:off + n * 4].view(np.float32)

    a, b, out = aligned(), aligned(), aligned()
    a[:], b[:] = np.arange(n), 2.0
    dev.dispatch_threads(add, n, 256, [a, b, out, n])
    dev.synchronize()
    np.testing.assert_array_equal(out, np.arange(n, dtype=np.float32) + 2)
    assert len(stub.calls("buffer_wrap")) == 3 and stub.calls("buffer_new_copy") == []


def test_buffer_arguments_are_zero_copy(stub, dev, add):
    a, b = vectors()
    ba, bb = Buffer(a, device=dev), Buffer(b, device=dev)
    bout = Buffer.zeros(N, device=dev)
    assert len(stub.calls("buffer_new")) == 3
    assert ba.numpy().ctypes.data == ba.address
    view = bout.numpy()
    dev.dispatch_threads(add, N, 256, [ba, bb, bout, np.uint32(N)])
    dev.synchronize()
    np.testing.assert_array_equal(view, a + b)         # the kernel wrote into the very memory numpy views
    ba.numpy()[:] = 1.0                                 # host writes are seen by the next launch
    dev.dispatch_threads(add, N, 256, [ba, bb, bout, np.uint32(N)])
    dev.synchronize()
    np.testing.assert_array_equal(view, 1.0 + b)
    assert stub.calls("buffer_new_copy") == [] and stub.calls("buffer_wrap") == []


def test_buffer_view_outlives_the_buffer(stub, dev):
    gc.collect()
    stub.clear_log()
    buf = Buffer(np.arange(8, dtype=np.float32), device=dev)
    (created,) = stub.calls("buffer_new")
    release = "buffer_release " + created.split()[1]
    view = buf.numpy()
    del buf
    gc.collect()
    assert release not in stub.log()
    np.testing.assert_array_equal(view, np.arange(8))
    del view
    gc.collect()
    assert stub.log().count(release) == 1


def test_threadgroup_memory_is_rounded_up_to_16_bytes(stub, dev):
    fn = dev.compile(KERNELS, name="kernels.metal").function("block_sum")
    x = np.arange(256, dtype=np.float32)
    sums = np.zeros(4, np.float32)
    seen = []
    stub.execute_with(lambda r: seen.append(r.threadgroup_memory))
    dev.dispatch_threadgroups(fn, 4, 64, [x, sums], threadgroup_memory=[64 * 4 + 1])
    dev.synchronize()
    assert seen == [(272,)]


def test_read_only_array_written_by_a_kernel_is_an_error(dev, add):
    a, b = vectors()
    out = np.zeros(N, np.float32)
    out.flags.writeable = False
    dev.dispatch_threads(add, N, 256, [a, b, out, N])
    with pytest.raises(metile.LaunchError, match="read-only array"):
        dev.synchronize()


def test_a_buffer_may_be_left_unbound(stub, dev, add):
    """Metal lets a dispatch leave unbound an index the kernel does not access: None leaves it empty in the encoder
    (the stand-in replays it as None; the CPU device takes it too)."""
    from metal_stub import cpu_device_executor

    seen = []
    stub.execute_with(lambda r: seen.append(r.args))
    a, out = vectors()[0], np.zeros(N, np.float32)
    stub.clear_log()
    dev.dispatch_threads(add, N, 256, [a, None, out, 0])
    dev.synchronize()
    (args,) = seen
    assert [x is None for x in args] == [False, True, False, False]
    assert stub.calls("commands_encode")[0].endswith("bindings=4 tg=0 encoder=1 label=add")
    stub.execute_with(cpu_device_executor(metile.device("cpu")))
    dev.dispatch_threads(add, N, 256, [a, a, None, 0])
    dev.synchronize()
    assert not stub.errors, stub.errors
    with pytest.raises(metile.LaunchError, match="takes 4 buffer argument"):
        dev.dispatch_threads(add, N, 256, [a, None, out])


@pytest.mark.parametrize("make_args,msg", [
    (lambda a, out: [a, a, out], "takes 4 buffer argument"),
    (lambda a, out: [a.astype(np.float64), a, out, 1], "needs float32 data, got float64"),
    (lambda a, out: [a, a, 3.0, 1], "is a pointer"),
    (lambda a, out: [a, a, out, -1], "does not fit"),
    (lambda a, out: [a, a, out, "n"], "cannot bind a str"),
])
def test_argument_errors(dev, add, make_args, msg):
    a = np.zeros(16, np.float32)
    with pytest.raises(metile.LaunchError, match=msg):
        dev.dispatch_threads(add, 16, 16, make_args(a, np.zeros(16, np.float32)))


@pytest.mark.parametrize("grid,tpt,msg", [
    ((0, 1, 1), (1, 1, 1), "positive"),
    ((1, 1, 1, 1), (1, 1, 1), "1 to 3 dimensions"),
    ((16,), (2048,), "allows at most 1024"),
    (None, (16,), "must be an int"),
])
def test_launch_shape_errors(dev, add, grid, tpt, msg):
    a = np.zeros(16, np.float32)
    with pytest.raises(metile.LaunchError, match=msg):
        dev.dispatch_threads(add, grid, tpt, [a, a, a, 16])


def test_launch_errors_about_functions_and_devices(stub, make_device, dev, add):
    with pytest.raises(metile.LaunchError, match="no kernel function `nope`.*add, block_sum"):
        dev.compile(KERNELS, name="kernels.metal").function("nope")
    with pytest.raises(metile.LaunchError, match="compiled by this Metal device"):
        dev.dispatch_threads("add", 1, 1, [])
    with pytest.raises(metile.LaunchError, match="CPU device feature"):
        dev.dispatch_threads(add, 1, 1, [np.zeros(1, np.float32)] * 3 + [1], sanitize=True)
    other = make_device()
    foreign = Buffer.zeros(16, device=other)
    a = np.zeros(16, np.float32)
    with pytest.raises(metile.LaunchError, match="not on this Metal device"):
        dev.dispatch_threads(add, 16, 16, [a, a, foreign, 16])
    fn = dev.compile(KERNELS, name="kernels.metal").function("block_sum")
    with pytest.raises(metile.LaunchError, match=r"threadgroup_memory sizes for \[\[threadgroup\(i\)\]\] "
                                                 r"parameters 0 \(`scratch`\)"):
        dev.dispatch_threadgroups(fn, 1, 16, [a, a])
    with pytest.raises(metile.LaunchError, match="non-negative"):
        dev.dispatch_threadgroups(fn, 1, 16, [a, a], threadgroup_memory=[-1])
    assert stub.calls("commands_encode") == []


def test_objective_c_errors_become_metile_errors(stub, make_device):
    stub.reset()
    stub.fail("device_create", ERR_NO_DEVICE, "MTLCreateSystemDefaultDevice found no Metal device")
    with pytest.raises(metile.DeviceUnavailableError, match="creating the Metal device: MTLCreateSystem"):
        make_device()
    dev = make_device()
    stub.fail("buffer_new", ERR_EXCEPTION, "mts_buffer_new: Objective-C exception NSInvalidArgumentException: x")
    with pytest.raises(metile.DeviceError, match="NSInvalidArgumentException"):
        Buffer.zeros(4, device=dev)
    stub.fail("buffer_new", ERR_ALLOC, "cannot allocate a Metal buffer of 4 bytes")
    with pytest.raises(metile.DeviceError, match="allocating 4 bytes of Metal memory: cannot allocate"):
        Buffer.zeros(1, device=dev)
    stub.fail("pipeline_create", ERR_PIPELINE, "cannot build a compute pipeline for 'add': too many registers")
    with pytest.raises(metile.MSLCompileError, match="too many registers"):
        dev.compile(KERNELS, name="kernels.metal").function("add")


def test_encode_failure_raises_at_the_launch_and_keeps_earlier_launches(stub, dev, add):
    a, b = vectors()
    first, failed = np.zeros(N, np.float32), np.zeros(N, np.float32)
    dev.dispatch_threads(add, N, 256, [a, b, first, N])
    stub.fail("commands_encode", ERR_EXCEPTION, "mts_commands_encode: Objective-C exception MTLDebug: bad")
    with pytest.raises(metile.DeviceError, match="encoding a launch of `add`.*MTLDebug"):
        dev.dispatch_threads(add, N, 256, [a, b, failed, N])
    failed[:] = 7.0
    dev.synchronize()
    np.testing.assert_array_equal(first, a + b)
    assert (failed == 7.0).all(), "the failed launch's array must not be written back"


def test_commit_failure_surfaces_at_synchronize(stub, dev, add):
    a, b = vectors()
    out = np.zeros(N, np.float32)
    dev.dispatch_threads(add, N, 256, [a, b, out, N])
    stub.fail("commands_commit", ERR_STATE, "mts_commands_commit: already committed")
    with pytest.raises(metile.DeviceError, match="committing a command buffer of 1 launch"):
        dev.synchronize()


@pytest.mark.parametrize("code,kind", [(3, "bad-access"), (2, "hang"), (1, "internal"), (99, "gpu-error")])
def test_gpu_error_at_synchronize_is_a_device_fault(stub, dev, add, code, kind):
    a, b = vectors()
    out = np.zeros(N, np.float32)
    dev.dispatch_threads(add, N, 256, [a, b, out, N])
    dev.dispatch_threads(add, N, 256, [a, b, out, N])
    stub.fail("commands_wait", ERR_GPU, "the command buffer failed: Caused GPU Address Fault Error",
              detail=code)
    with pytest.raises(metile.DeviceFault, match="2 launch.*of add: the command buffer failed: Caused GPU") as e:
        dev.synchronize()
    assert e.value.kind == kind and e.value.kernel == "add"
    assert not out.any(), "results of a failed command buffer are not written back"
    dev.dispatch_threads(add, N, 256, [a, b, out, N])      # the device stays usable
    dev.synchronize()
    np.testing.assert_array_equal(out, a + b)


def test_a_fault_inside_a_replayed_kernel_is_a_device_fault(stub, dev, add):
    def crash(r):
        raise IndexError("out of bounds in add")

    stub.execute_with(crash)
    a = np.zeros(4, np.float32)
    dev.dispatch_threads(add, 4, 4, [a, a, a, 4])
    with pytest.raises(metile.DeviceFault, match="out of bounds in add") as e:
        dev.synchronize()
    assert e.value.kind == "bad-access"


def test_many_launches_release_every_handle_exactly_once(stub, make_device):
    stub.reset()
    stub.execute_with(numpy_kernels(NUMPY_KERNELS))
    stub.set_logging(False)
    gc.collect()
    before = stub.counts()
    dev = make_device(max_batch=16)
    lib = dev.compile(KERNELS, name="kernels.metal")
    add, block_sum = lib.function("add"), lib.function("block_sum")
    a, b = vectors(256)
    bufs = [Buffer(a, device=dev) for _ in range(4)]
    for i in range(500):
        out = np.zeros(256, np.float32)
        dev.dispatch_threads(add, 256, 64, [a, bufs[i % 4], out, 256])
        dev.dispatch_threadgroups(block_sum, 4, 64, [Buffer(a, device=dev), np.zeros(4, np.float32)],
                                  threadgroup_memory=[256])
        if i % 100 == 99:
            dev.synchronize()
    dev.synchronize()
    during = stub.counts()
    assert during["commands"] - before["commands"] == 0
    assert during["buffer"] - before["buffer"] == 4          # only the Buffers still referenced
    dev.close()
    dev.close()
    del add, block_sum, lib, bufs, out, dev
    gc.collect()
    after = stub.counts()
    assert after == before, f"leaked handles: before {before}, after {after}"
    assert stub.created("commands") >= 500 * 2 / 16


def test_closed_device_refuses_work(stub, make_device):
    dev = make_device()
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    dev.close()
    a = np.zeros(4, np.float32)
    with pytest.raises(metile.DeviceError, match="closed"):
        dev.dispatch_threads(add, 4, 4, [a, a, a, 4])
    with pytest.raises(metile.DeviceError, match="closed"):
        dev.compile(KERNELS + "\n", name="other.metal")
    with pytest.raises(metile.DeviceError, match="closed"):
        Buffer.zeros(4, device=dev)


def test_the_real_shim_is_not_built_off_macos(tmp_path):
    if platform.system() == "Darwin":
        pytest.skip("macOS builds the real shim")
    with pytest.raises(metile.DeviceUnavailableError, match=f"needs macOS on Apple silicon; this machine runs "
                                                            f"{platform.system()}"):
        load_shim(tmp_path)
    assert not (tmp_path / "metal").exists()
    with pytest.raises(metile.DeviceUnavailableError, match="macOS"):
        metile.device("metal")


def test_launch_overhead_stays_small(stub, make_device):
    """A smoke bound on the Python-side cost per launch (the benchmark measures it properly)."""
    import time

    stub.set_logging(False)
    stub.execute_with(None)
    dev = make_device(max_batch=256)
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    bufs = [Buffer.zeros(1024, device=dev) for _ in range(3)]
    args = [*bufs, np.uint32(1024)]
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(2000):
            dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), args)
        dev.synchronize()
        best = min(best, (time.perf_counter() - t) / 2000)
    assert best < 50e-6, f"{best * 1e6:.1f} us per launch"
