"""`metile.testing.do_bench`: Triton's benchmark for metile's devices, by wall time on the CPU device and by the
GPU's own timestamps of the command buffers on the Apple GPU device (here its C stand-in, whose command buffers
report 1 microsecond of GPU time per dispatch)."""

from __future__ import annotations

import numpy as np
import pytest
from metal_stub import KERNELS

import metile
from metile.testing import BenchmarkError, bench_calls, do_bench


@metile.kernel
def double(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Y + offs, metile.load(X + offs, mask=offs < n) * 2.0, mask=offs < n)


@pytest.mark.usefixtures("on_cpu")
def test_a_kernel_is_timed_in_milliseconds_on_the_cpu_device():
    x, y = np.ones(4096, np.float32), np.zeros(4096, np.float32)
    calls = []

    def run():
        calls.append(1)
        double[(16,)](x, y, 4096, BLOCK=256)

    ms = do_bench(run, warmup=1, rep=5)
    assert isinstance(ms, float) and 0 < ms < 1000
    assert len(calls) >= 1 + 5 + 1 + 1          # the first call, the estimate, a warm-up, a timed call
    low, mid, high = do_bench(run, warmup=1, rep=5, quantiles=[0.1, 0.5, 0.9])
    assert 0 < low <= mid <= high
    everything = do_bench(run, warmup=0, rep=5, return_mode="all")
    assert isinstance(everything, list) and min(everything) > 0
    np.testing.assert_array_equal(y, 2.0)


def test_the_gpu_device_reports_the_gpu_time_of_its_command_buffers(make_device):
    dev = make_device()
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    a, b, out = np.ones(1024, np.float32), np.ones(1024, np.float32), np.zeros(1024, np.float32)

    def three_launches():
        for _ in range(3):
            dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [a, b, out, 1024])

    assert dev.gpu_time() is None                # nothing waited for yet
    times = bench_calls(three_launches, 1, 4, device=dev)
    assert times == pytest.approx([3e-3] * 4)    # the stand-in's 1 us per dispatch, one command buffer per call
    assert do_bench(three_launches, warmup=0.01, rep=0.05, device=dev) == pytest.approx(3e-3)
    np.testing.assert_array_equal(out, 2.0)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"fn": 3}, "times a function of no arguments, not int"),
    ({"warmup": -1}, "warmup=-1 must be a number of milliseconds, >= 0"),
    ({"rep": 0}, "rep=0 must be a number of milliseconds, > 0"),
    ({"rep": float("nan")}, "rep=nan"),
    ({"quantiles": [0.5, 2]}, r"quantiles=\[0.5, 2\] must be a list of numbers in \[0, 1\]"),
    ({"return_mode": "best"}, "return_mode='best' must be one of median, mean, min, max, all"),
])
def test_bad_arguments_are_refused(kwargs, message):
    args = {"fn": lambda: None, **kwargs}
    with pytest.raises(BenchmarkError, match=message):
        do_bench(args.pop("fn"), **args)
    assert issubclass(BenchmarkError, metile.MetileError)
