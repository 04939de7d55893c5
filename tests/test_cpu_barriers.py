"""Threadgroup barriers on the CPU device: MSL requires every thread of a threadgroup to execute each
threadgroup_barrier, so a barrier that completes while a thread is elsewhere (returned, or waiting at a simd
collective) and simdgroups arriving from two barrier lines are `barrier-divergence` faults naming the kernel and the
barrier's line. With `uniform_barriers=False` barriers count simdgroups, as Apple GPUs do: a simdgroup arrives when
its lanes that come first in program order wait at a barrier (the others are masked off or returned), exited lanes
and simdgroups do not hold a barrier, and arrivals count whatever line they come from (MLX's gemv kernels rely on
it). Lanes of one simdgroup at two barrier lines are an error either way; a thread that returns after the last
barrier is fine."""

from __future__ import annotations

import numpy as np
import pytest
from msl_source import HEAD, line_of

import metile


def run(cpu, src, name, out, *, threads=(128, 1, 1), tpt=(64, 1, 1), **kw):
    fn = cpu.compile(src, name=name).function("k")
    cpu.dispatch_threads(fn, threads, tpt, [out], **kw)
    return out


def fault(cpu, src, name, out, **kw):
    with pytest.raises(metile.DeviceFault) as info:
        run(cpu, src, name, out, **kw)
    assert info.value.kind == "barrier-divergence"
    return info.value


# MLX's gemv: lane 0 of each simdgroup writes, waits at the barrier and (simdgroup 0) reads; the other lanes skip
# the block and return.
PARTIAL_LANES = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]],
              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
              uint tg [[threadgroup_position_in_grid]]) {
    threadgroup float part[2];
    float v = float(tg * 64 + lid);
    v = simd_sum(v);
    if (lane == 0) {
        part[sg] = v;
        threadgroup_barrier(mem_flags::mem_threadgroup);   // BAR
        if (sg == 0) out[tg] = part[0] + part[1];
    }
}
"""


def test_partial_lanes_reach_the_barrier_counted_as_apple_gpus_count(cpu):
    out = run(cpu, PARTIAL_LANES, "partial.metal", np.zeros(2, np.float32), uniform_barriers=False)
    np.testing.assert_array_equal(out, np.arange(128, dtype=np.float32).reshape(2, 64).sum(axis=1))


@pytest.mark.parametrize("sanitize", [False, True])
def test_partial_lanes_are_a_barrier_divergence(cpu, sanitize):
    err = fault(cpu, PARTIAL_LANES, "partial.metal", np.zeros(2, np.float32), sanitize=sanitize)
    text = str(err)
    assert "kernel `k`" in text and "returned from the kernel without reaching the threadgroup barrier" in text
    assert f"at line {line_of(PARTIAL_LANES, '// BAR')}, where 2 of the threadgroup's 64 threads wait" in text
    assert err.loc.line == line_of(PARTIAL_LANES, "// BAR") and err.thread[0] % 32 != 0


def test_a_prepared_dispatch_reports_each_time_and_the_device_stays_usable(cpu):
    fn = cpu.compile(PARTIAL_LANES, name="partial.metal").function("k")
    run_it = cpu.prepare_threads(fn, (128, 1, 1), (64, 1, 1), [np.zeros(2, np.float32)])
    for _ in range(2):
        with pytest.raises(metile.DeviceFault, match="barrier divergence"):
            run_it()
    out = run(cpu, PARTIAL_LANES, "partial.metal", np.zeros(2, np.float32), uniform_barriers=False)
    assert out.tolist() == [2016.0, 6112.0]


def test_threads_that_return_after_the_last_barrier_are_fine(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]]) {
    threadgroup float buf[64];
    buf[lid] = float(lid);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = buf[63 - lid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid % 3 == 0) return;           // after the last barrier
    out[lid] = v + simd_sum(1.0f);      // the simd_sum runs over the lanes that are left
}
"""
    out = run(cpu, src, "after.metal", np.full(64, -1, np.float32), threads=(64, 1, 1))
    lanes = np.arange(64)
    left = np.array([sum(1 for j in range(32 * (i // 32), 32 * (i // 32) + 32) if j % 3) for i in lanes])
    np.testing.assert_array_equal(out, np.where(lanes % 3 == 0, -1.0, 63.0 - lanes + left).astype(np.float32))


def test_a_thread_at_a_collective_while_the_others_pass_a_barrier(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]],
              uint lane [[thread_index_in_simdgroup]]) {
    float v = float(lid);
    if (lane < 16) {
        threadgroup_barrier(mem_flags::mem_threadgroup);   // BAR
    } else {
        v = simd_sum(v);   // SUM
    }
    out[lid] = v;
}
"""
    err = fault(cpu, src, "collective.metal", np.zeros(64, np.float32), threads=(64, 1, 1))
    text = str(err)
    assert (f"waits at a simd collective at line {line_of(src, '// SUM')} while 32 of the threadgroup's 64 threads "
            f"pass the threadgroup barrier at line {line_of(src, '// BAR')}") in text
    assert err.loc.line == line_of(src, "// BAR") and err.thread[0] % 32 >= 16
    out = run(cpu, src, "collective.metal", np.zeros(64, np.float32), threads=(64, 1, 1), uniform_barriers=False)
    assert out[16] == sum(range(16, 32))


def test_uniform_barriers_takes_a_bool(cpu):
    fn = cpu.compile(PARTIAL_LANES, name="partial.metal").function("k")
    with pytest.raises(metile.LaunchError, match="uniform_barriers=1 must be True or False"):
        cpu.dispatch_threads(fn, (128, 1, 1), (64, 1, 1), [np.zeros(2, np.float32)], uniform_barriers=1)


def test_lanes_return_while_others_wait(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]],
              uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float buf[64];
    if (lane >= 16) return;
    buf[lid] = float(lid) * 2.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[lid] = buf[(lid + 32) % 64];
}
"""
    out = run(cpu, src, "ret.metal", np.full(64, -1, np.float32), threads=(64, 1, 1), uniform_barriers=False)
    want = np.full(64, -1, np.float32)
    lanes = np.array([i for i in range(64) if i % 32 < 16])
    want[lanes] = ((lanes + 32) % 64) * 2.0
    np.testing.assert_array_equal(out, want)
    err = fault(cpu, src, "ret.metal", np.zeros(64, np.float32), threads=(64, 1, 1))
    assert "returned from the kernel" in str(err) and err.thread[0] % 32 >= 16


# MLX's gemv_t: lanes (and in the second group, whole simdgroups) skip a loop with barriers, then meet the others at
# a simd collective after it; the collective must wait until the looping lanes reach it.
SKIP_LOOP = HEAD + """
kernel void k(device float* out [[buffer(0)]], constant int& n [[buffer(1)]],
              uint lid [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
              uint tg [[threadgroup_position_in_grid]]) {
    threadgroup float buf[64];
    float acc = 0.0f;
    if (lane < 8 + 8 * tg && lid < 40 + 24 * tg) {
        for (int i = 0; i < n; ++i) {
            threadgroup_barrier(mem_flags::mem_threadgroup);
            buf[lid] = float(i * 100 + lid);
            threadgroup_barrier(mem_flags::mem_threadgroup);
            acc += buf[lid ^ 1];
        }
    }
    out[tg * 64 + lid] = simd_sum(acc);
}
"""


def skip_loop_reference(n: int) -> np.ndarray:
    want = np.zeros(128, np.float32)
    for tg in range(2):
        acc = np.zeros(64)
        for lid in range(64):
            if lid % 32 < 8 + 8 * tg and lid < 40 + 24 * tg:
                acc[lid] = sum(i * 100 + (lid ^ 1) for i in range(n))
        for sg in range(2):
            want[tg * 64 + sg * 32:tg * 64 + sg * 32 + 32] = acc[sg * 32:sg * 32 + 32].sum()
    return want


@pytest.mark.parametrize("n", [0, 1, 3])
def test_lanes_skip_a_loop_with_barriers_before_a_collective(cpu, n):
    fn = cpu.compile(SKIP_LOOP, name="skip.metal").function("k")
    out = np.zeros(128, np.float32)
    cpu.dispatch_threads(fn, (128, 1, 1), (64, 1, 1), [out, np.int32(n)], uniform_barriers=False)
    np.testing.assert_array_equal(out, skip_loop_reference(n))
    if n:   # lanes at the simd_sum while the others pass the loop's barriers: not uniform
        with pytest.raises(metile.DeviceFault, match="waits at a simd collective"):
            cpu.dispatch_threads(fn, (128, 1, 1), (64, 1, 1), [out, np.int32(n)])


# Simdgroup 0 loops over a barrier; simdgroup 1 goes straight to a barrier on a later line, whose arrival counts
# for simdgroup 0's first iteration (then simdgroup 1 returns and no longer holds a barrier).
TWO_LINES = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]],
              uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float flag[1];
    float seen = 0.0f;
    if (sg == 0) {
        for (int i = 0; i < 3; ++i) {
            threadgroup_barrier(mem_flags::mem_threadgroup);   // LOOP
            if (i == 0) seen = flag[0];
        }
    } else {
        if (lid == 32) flag[0] = 7.0f;
    }
    float x = simd_sum(1.0f);
    if (sg == 1) threadgroup_barrier(mem_flags::mem_threadgroup);   // AFTER
    out[lid] = seen + x;
}
"""


def test_simdgroups_at_different_barrier_lines_counted_as_apple_gpus_count(cpu):
    out = run(cpu, TWO_LINES, "lines.metal", np.zeros(64, np.float32), threads=(64, 1, 1), uniform_barriers=False)
    np.testing.assert_array_equal(out, np.r_[np.full(32, 39.0), np.full(32, 32.0)].astype(np.float32))


@pytest.mark.parametrize("sanitize", [False, True])
def test_simdgroups_at_different_barrier_lines_are_a_barrier_divergence(cpu, sanitize):
    err = fault(cpu, TWO_LINES, "lines.metal", np.zeros(64, np.float32), threads=(64, 1, 1), sanitize=sanitize)
    text = str(err)
    assert f"line {line_of(TWO_LINES, '// LOOP')}" in text and f"line {line_of(TWO_LINES, '// AFTER')}" in text


def test_one_simdgroup_at_two_barrier_lines_is_an_error(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint lid [[thread_index_in_threadgroup]],
              uint sg [[simdgroup_index_in_threadgroup]]) {
    if (sg == 1 && lid % 2 == 1) {
        threadgroup_barrier(mem_flags::mem_threadgroup);   // ODD
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);   // EVEN
    }
    out[lid] = 1.0f;
}
"""
    err = fault(cpu, src, "one.metal", np.zeros(64, np.float32), threads=(64, 1, 1))
    text = str(err)
    assert "one simdgroup" in text
    assert f"line {line_of(src, '// ODD')}" in text and f"line {line_of(src, '// EVEN')}" in text
    assert err.thread[0] >= 32


def test_waiting_on_a_thread_that_never_arrives_hangs(cpu):
    # simdgroup 1 spins until simdgroup 0 passes the barrier, which needs simdgroup 1: a deadlock on a GPU too
    src = HEAD + """
kernel void k(device atomic_int* flag [[buffer(0)]], uint sg [[simdgroup_index_in_threadgroup]]) {
    if (sg == 1) {
        while (atomic_load_explicit(flag, memory_order_relaxed) == 0) { }
    }
    threadgroup_barrier(mem_flags::mem_device);
    if (sg == 0) atomic_store_explicit(flag, 1, memory_order_relaxed);
}
"""
    fn = cpu.compile(src, name="dead.metal").function("k")
    with pytest.raises(metile.DeviceFault) as info:
        cpu.dispatch_threads(fn, (64, 1, 1), (64, 1, 1), [np.zeros(1, np.int32)], timeout=0.5)
    assert info.value.kind == "hang"
