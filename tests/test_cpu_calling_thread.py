"""The thread calling a dispatch on the CPU device runs threadgroups itself (runtime.cpp): a launch starts without
waiting for a pool thread to be scheduled, one threadgroup needs no other thread at all, and the caller gets its
own signal mask, signal stack and floating-point environment back, also after a fault or the watchdog stopped
kernel code running on it."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import metile
from metile.metal.cpu.platform_support import caller_runs_threadgroups

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    not caller_runs_threadgroups(platform.system()),
    reason=f"the calling thread joins its dispatches on Linux only ({platform.system()} has no thread-directed POSIX "
           "timers for its watchdog)")

FILL = """
#include <metal_stdlib>
using namespace metal;
kernel void fill(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
    out[gid] = float(gid);
}
"""

SPIN = """
#include <metal_stdlib>
using namespace metal;
kernel void spin(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
    while (((volatile device float*)out)[0] == 0.0f) { }   // volatile: a loop without side effects may be dropped
}
"""


def _threads() -> list[str]:
    return [(p / "comm").read_text().strip() for p in Path("/proc/self/task").iterdir()]


def test_a_one_threadgroup_dispatch_runs_on_the_calling_thread():
    # in a fresh process: no pool thread exists yet, and a launch of one threadgroup starts none
    code = textwrap.dedent(f"""
        import sys, numpy as np, metile
        from pathlib import Path
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from test_cpu_calling_thread import FILL, _threads
        cpu = metile.device("cpu")
        fn = cpu.compile(FILL, name="fill.metal").function("fill")
        out = np.zeros(64, np.float32)
        for _ in range(3):
            cpu.dispatch_threads(fn, (64, 1, 1), (64, 1, 1), [out])
        assert (out == np.arange(64)).all()
        print(sorted(t for t in _threads() if t.startswith("metile-cpu")))
    """)
    env = {**os.environ, "METILE_DEVICE": "cpu", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_caller_gets_its_signal_mask_and_stack_back():
    cpu = metile.device("cpu")
    fn = cpu.compile(FILL, name="fill.metal").function("fill")
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    out = np.zeros(256, np.float32)
    cpu.dispatch_threads(fn, (256, 1, 1), (64, 1, 1), [out])
    assert (out == np.arange(256)).all()
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask


def test_the_watchdog_stops_kernel_code_on_the_calling_thread():
    cpu = metile.device("cpu")
    fn = cpu.compile(SPIN, name="spin.metal").function("spin")
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    for _ in range(2):   # and the next launch works as usual
        try:
            cpu.dispatch_threads(fn, (1, 1, 1), (1, 1, 1), [np.zeros(1, np.float32)], timeout=0.3)
        except metile.DeviceFault as e:
            assert e.kind == "hang", str(e)
        else:
            raise AssertionError("the spinning kernel was not stopped")
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask
    out = np.ones(1, np.float32)
    cpu.dispatch_threads(fn, (1, 1, 1), (1, 1, 1), [out], timeout=5)

