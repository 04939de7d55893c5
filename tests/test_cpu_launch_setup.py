"""What a launch of the CPU device costs besides its threadgroups: the system calls that set it up (signal handlers,
masks and stack, the watchdog timer, watchpoints; `mt_launch_syscalls` counts them), kept few by keeping the calling
thread's timer and watchpoints from launch to launch, and what keeping them must not break: the thread's own code
never traps on the paused watchpoints, and a forked child launches with timers and watchpoints of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import metile

ADD = """
#include <metal_stdlib>
using namespace metal;
kernel void add(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                constant float& k [[buffer(2)]], uint gid [[thread_position_in_grid]]) {
    out[gid] = a[gid] + k;
}
"""


def prepared_add(cpu, n=100):
    """A prepared one-threadgroup dispatch of `add` over arrays of `n` floats (not a page: their fronts are watched)."""
    fn = cpu.compile(ADD, name="add.metal").function("add")
    a, out = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    return cpu.prepare_threads(fn, (n, 1, 1), (n, 1, 1), [a, out, np.float32(1)]), a, out


def test_a_repeated_launch_makes_few_system_calls():
    """A launch like the one before it installs and restores the six signal handlers (12 calls), sets and restores
    the calling thread's signal stack and mask (4), arms and disarms its watchdog timer (2) and enables and disables
    its watchpoints (2, one perf event group): no timer or perf event is made or closed, and no thread id or CPU
    affinity asked for again (which made it 32)."""
    cpu = metile.device("cpu")
    run, _, _ = prepared_add(cpu)
    run()
    run()
    before = cpu.rt.mt_launch_syscalls()
    for _ in range(10):
        run()
    per_launch = (cpu.rt.mt_launch_syscalls() - before) / 10
    assert 0 < per_launch <= 20, per_launch


def test_the_calling_thread_touches_the_watched_bytes_between_launches_without_a_trap():
    """The calling thread's watchpoints are paused between launches, not left set: its own code reading and writing
    the 8 bytes before a bound buffer (which a launch watches) neither traps nor makes the next launch fail (a trap
    there would kill the process: the runtime's handlers are not installed between launches)."""
    code = textwrap.dedent("""
        import numpy as np, metile
        from metile.metal.cpu.runtime_api import ffi
        from tests.test_cpu_launch_setup import prepared_add
        cpu = metile.device("cpu")
        run, a, out = prepared_add(cpu)
        run()
        front = ffi.cast("unsigned char*", run.desc.buffers[0]) - 8
        for k in range(8):
            front[k] = front[k]   # a read and a write of each byte, on the calling thread
        run()
        assert (out == a + 1).all()
        print("watchpoints", cpu.rt.mt_watch_available())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_launches_with_its_own_timer_and_watchpoints():
    """A child forked after launches has none of the parent's timers and only copies of its perf event descriptors:
    its first launch makes its own (the parent's kept ones would fail to arm, or watch the parent's thread)."""
    cpu = metile.device("cpu")
    run, a, out = prepared_add(cpu)
    run()
    pid = os.fork()
    if pid == 0:   # the child: exit 0 only if its launch ran and gave the right result
        status = 1
        try:
            out[:] = 0
            run()
            status = 0 if (out == a + 1).all() else 2
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    run()
    assert (out == a + 1).all()
