"""Prepared dispatches of the device layer (`prepare_threadgroups` / `prepare_threads` on both devices): checked and
bound once, then dispatched by calling them, with numpy arrays copied in and back on every call and Buffers bound as
they are; and the `sanitize=` and `timeout=` options of every dispatch, checked on both devices and refused on the
Metal one (run against the C stand-in of its shim)."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from metal_stub import KERNELS

import metile
from metile.metal.buffer import Buffer

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"

GATHER = HEAD + """
kernel void gather(device const float* x [[buffer(0)]], device const int* at [[buffer(1)]],
                   device float* out [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    out[i] = x[at[i]] + 1.0f;   // GATHER
}
"""

HANG = HEAD + """
kernel void spin(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    volatile int s = 1;
    while (s) { }
    out[i] = 1.0f;
}
"""


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


@pytest.fixture(scope="module")
def gather(cpu):
    return cpu.compile(GATHER, name="gather.metal").function("gather")


def test_a_prepared_cpu_dispatch_takes_the_arrays_contents_at_each_call(cpu, gather):
    x = np.arange(64, dtype=np.float32)
    at = np.arange(64, dtype=np.int32)[::-1].copy()
    out = np.zeros(64, np.float32)
    run = cpu.prepare_threads(gather, 64, 32, [x, at, out])
    assert not out.any(), "preparing dispatches nothing"
    run()
    np.testing.assert_array_equal(out, x[::-1] + 1)
    x *= 10                 # new contents in, new results back, through the same arrays
    out[:] = -1
    run()
    np.testing.assert_array_equal(out, x[::-1] + 1)


def test_a_prepared_cpu_dispatch_binds_buffers_without_copies(cpu, gather):
    x = Buffer(np.arange(64, dtype=np.float32), device=cpu)
    at = Buffer(np.zeros(64, np.int32), device=cpu)
    out = Buffer.zeros(64, device=cpu)
    run = cpu.prepare_threadgroups(gather, 2, 32, [x, at, out])
    run()
    np.testing.assert_array_equal(out.numpy(), 1.0)
    at.numpy()[:] = 5
    run()
    np.testing.assert_array_equal(out.numpy(), 6.0)


def test_a_prepared_cpu_dispatch_reports_faults_and_runs_again(cpu, gather):
    x = np.arange(64, dtype=np.float32)
    at = np.zeros(64, np.int32)
    out = np.zeros(64, np.float32)
    run = cpu.prepare_threads(gather, 64, 32, [x, at, out])
    at[7] = 600              # past the end of x, into its guard page
    with pytest.raises(metile.DeviceFault) as info:
        run()
    assert info.value.kind == "bad-access" and info.value.buffer == 0 and info.value.loc.file == "gather.metal"
    at[7] = 3
    run()
    assert out[7] == 4.0 and out[0] == 1.0


def test_prepared_cpu_dispatches_are_checked_when_prepared(cpu, gather):
    x = np.zeros(64, np.float32)
    with pytest.raises(metile.LaunchError, match="takes 3 buffer argument"):
        cpu.prepare_threads(gather, 64, 32, [x, x])
    with pytest.raises(metile.LaunchError, match="needs int32 data, got float32"):
        cpu.prepare_threads(gather, 64, 32, [x, x, x])
    with pytest.raises(metile.LaunchError, match="allows at most 1024"):
        cpu.prepare_threads(gather, 64, 2048, [x, np.zeros(64, np.int32), x])


def test_a_prepared_cpu_dispatch_refuses_writes_to_a_read_only_array(cpu, gather):
    x = np.zeros(64, np.float32)
    out = np.zeros(64, np.float32)
    out.flags.writeable = False
    run = cpu.prepare_threads(gather, 64, 32, [x, np.zeros(64, np.int32), out])
    with pytest.raises(metile.LaunchError, match="read-only array"):
        run()


def test_threads_calling_one_prepared_cpu_dispatch_each_get_a_whole_run(cpu, gather):
    x = np.arange(4096, dtype=np.float32)
    out = np.zeros(4096, np.float32)
    run = cpu.prepare_threads(gather, 4096, 256, [x, np.arange(4096, dtype=np.int32), out])
    errors = []

    def work():
        try:
            for _ in range(20):
                run()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    np.testing.assert_array_equal(out, x + 1)


@pytest.mark.parametrize(("options", "says"), [
    ({"sanitize": "yes"}, "sanitize='yes' must be True or False"),
    ({"sanitize": 1}, "sanitize=1 must be True or False"),
    ({"timeout": -1.0}, r"timeout=-1.0 must be a number of seconds >= 0 \(0 or inf: no limit\)"),
    ({"timeout": math.nan}, "timeout=nan must be a number of seconds >= 0"),
    ({"timeout": True}, "timeout=True must be a number of seconds, or None"),
    ({"timeout": "5"}, "timeout='5' must be a number of seconds"),
])
def test_bad_sanitize_or_timeout_values_are_refused_by_the_cpu_device(cpu, gather, options, says):
    x = np.zeros(64, np.float32)
    args = [x, np.zeros(64, np.int32), x]
    with pytest.raises(metile.LaunchError, match=says):
        cpu.dispatch_threads(gather, 64, 32, args, **options)
    with pytest.raises(metile.LaunchError, match=says):
        cpu.prepare_threads(gather, 64, 32, args, **options)


def test_a_prepared_cpu_dispatch_keeps_its_timeout(cpu):
    fn = cpu.compile(HANG, name="spin.metal").function("spin")
    run = cpu.prepare_threads(fn, 4, 4, [np.zeros(4, np.float32)], timeout=0.3)
    with pytest.raises(metile.DeviceFault) as info:
        run()
    assert info.value.kind == "hang" and "0.3 s timeout" in str(info.value)


# -- the Metal device ---------------------------------------------------------------------------------------------

def test_a_prepared_metal_dispatch_queues_the_launch_at_each_call(stub, make_device):
    dev = make_device()
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    a, b = np.arange(100, dtype=np.float32), np.ones(100, np.float32)
    out = np.zeros(100, np.float32)
    run = dev.prepare_threads(add, 100, 32, [a, b, out, np.uint32(100)])
    assert stub.calls("commands_encode") == [], "preparing queues nothing"
    run()
    run()
    assert len(stub.calls("commands_encode")) == 2
    dev.synchronize()
    np.testing.assert_array_equal(out, a + b)
    a[:] = 7                              # the next stretch stages the arrays' new contents
    run()
    dev.synchronize()
    np.testing.assert_array_equal(out, 8.0)
    bufs = [Buffer(a, device=dev), Buffer(b, device=dev), Buffer.zeros(100, device=dev)]
    run = dev.prepare_threadgroups(add, 4, 32, [*bufs, np.uint32(100)])
    run()
    dev.synchronize()
    np.testing.assert_array_equal(bufs[2].numpy(), 8.0)


def test_prepared_metal_dispatches_are_checked_when_prepared(stub, make_device):
    dev = make_device()
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    x = np.zeros(16, np.float32)
    with pytest.raises(metile.LaunchError, match="takes 4 buffer argument"):
        dev.prepare_threads(add, 16, 16, [x, x, x])
    with pytest.raises(metile.LaunchError, match="allows at most 1024"):
        dev.prepare_threads(add, 16, 2048, [x, x, x, 16])
    run = dev.prepare_threads(add, 16, 16, [x, x, x, 16])
    dev.close()
    with pytest.raises(metile.DeviceError, match="closed"):
        run()


@pytest.mark.parametrize(("options", "says"), [
    ({"sanitize": True}, "sanitize=True is a CPU device feature"),
    ({"timeout": 5.0}, "timeout=5.0 is a CPU device feature: Metal cannot stop a running command buffer"),
    ({"timeout": 0}, "timeout=0 is a CPU device feature"),
    ({"sanitize": "yes"}, "sanitize='yes' must be True or False"),
    ({"timeout": -1}, "timeout=-1 must be a number of seconds >= 0"),
])
def test_the_metal_device_refuses_sanitize_and_timeout(stub, make_device, options, says):
    dev = make_device()
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    x = np.zeros(16, np.float32)
    for call in (dev.dispatch_threads, dev.prepare_threads):
        with pytest.raises(metile.LaunchError, match=says):
            call(add, 16, 16, [x, x, x, 16], **options)
    assert stub.calls("commands_encode") == []
    dev.dispatch_threads(add, 16, 16, [x, x, x, 16], sanitize=False, timeout=None)   # the defaults are taken
    dev.synchronize()
