"""Faults planted in small kernels are reported as DeviceFault with kernel, thread and .metal line,
and the device stays usable afterwards."""

from __future__ import annotations

import numpy as np
import pytest
from msl_source import HEAD, line_of

import metile


def still_usable(cpu):
    src = HEAD + """
kernel void twice(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) { x[i] = 2.0f * x[i]; }
"""
    fn = cpu.compile(src, name="twice.metal").function("twice")
    x = np.arange(100, dtype=np.float32)
    cpu.dispatch_threads(fn, (100, 1, 1), (32, 1, 1), [x])
    np.testing.assert_array_equal(x, 2 * np.arange(100))


def watchpoints(cpu) -> bool:
    """Whether this process can set the hardware watchpoints that cover the bytes just before buffers."""
    return bool(cpu.rt.mt_watch_available())


def run_fault(cpu, src, name, *, dispatch=("threads", (64, 1, 1), (64, 1, 1)), args=None, **kw):
    fn = cpu.compile(src, name=name).function("k")
    api, a, b = dispatch
    call = cpu.dispatch_threads if api == "threads" else cpu.dispatch_threadgroups
    with pytest.raises(metile.DeviceFault) as info:
        call(fn, a, b, args if args is not None else [np.zeros(64, np.float32)], **kw)
    still_usable(cpu)
    return info.value


def test_out_of_bounds_write_names_buffer_offset_thread_and_line(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    out[i * 1024] = 1.0f;   // OOB
}
"""
    err = run_fault(cpu, src, "oob.metal")
    assert err.kind == "bad-access"
    assert err.kernel == "k" and err.buffer == 0
    assert err.offset is not None and err.offset >= 256
    assert err.loc.file == "oob.metal" and err.loc.line == line_of(src, "// OOB")
    assert "past the end of buffer 0 (`out`, 256 bytes)" in str(err)
    assert "thread (" in str(err) and "threadgroup (0, 0, 0)" in str(err)


def test_integer_division_by_zero(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], constant int& d [[buffer(1)]], uint i [[thread_position_in_grid]]) {
    int q = int(i) / d;   // DIV
    out[i] = float(q);
}
"""
    err = run_fault(cpu, src, "div.metal", args=[np.zeros(64, np.float32), np.int32(0)])
    assert err.kind in ("division-by-zero", "trap")
    assert "division by zero" in str(err)
    assert err.loc.line == line_of(src, "// DIV")


def test_misaligned_vector_access(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    device float4* v = (device float4*)(out + 1);
    v[0] = float4(1.0f);   // MISALIGNED
}
"""
    err = run_fault(cpu, src, "misaligned.metal", dispatch=("threads", (1, 1, 1), (1, 1, 1)))
    assert err.kind in ("misaligned", "trap")
    assert "misaligned" in str(err)
    assert err.loc.line == line_of(src, "// MISALIGNED")


def test_barrier_divergence(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    if (i < 16) {
        threadgroup_barrier(mem_flags::mem_threadgroup);   // A
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);   // B
    }
    out[i] = 1.0f;
}
"""
    err = run_fault(cpu, src, "barrier.metal")
    assert err.kind == "barrier-divergence"
    text = str(err)
    assert "one simdgroup" in text
    assert str(line_of(src, "// A")) in text and str(line_of(src, "// B")) in text


@pytest.mark.parametrize("sanitize", [False, True])
def test_exit_while_others_wait_at_a_barrier(cpu, sanitize):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    if (i == 3) return;
    threadgroup_barrier(mem_flags::mem_threadgroup);   // WAIT
    out[i] = 1.0f;
}
"""
    err = run_fault(cpu, src, "exit.metal", sanitize=sanitize)
    assert err.kind == "barrier-divergence"
    assert "returned from the kernel" in str(err) and err.thread == (3, 0, 0)
    assert err.loc.line == line_of(src, "// WAIT")


def test_hang_is_stopped_by_the_watchdog(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    volatile int spin = 1;
    while (spin) { }   // SPIN
    out[i] = 1.0f;
}
"""
    err = run_fault(cpu, src, "hang.metal", dispatch=("threads", (4, 1, 1), (4, 1, 1)), timeout=0.5)
    assert err.kind == "hang"
    assert err.loc is not None and err.loc.line == line_of(src, "// SPIN")


def test_threadgroup_memory_over_the_limit(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    threadgroup float big[10000];   // BIG
    big[i] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = big[i];
}
"""
    err = run_fault(cpu, src, "big.metal")
    assert err.kind == "threadgroup-memory"
    assert "40000" in str(err) and "32768" in str(err)
    assert err.loc.line == line_of(src, "// BIG")


def test_stack_overflow_from_a_large_private_array(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    volatile float big[262144];   // 1 MiB of thread-private memory
    for (uint j = 0; j < 262144u; j += 1024u) big[j] = float(j);
    out[i] = big[(i * 7919u) % 262144u];
}
"""
    err = run_fault(cpu, src, "stack.metal", dispatch=("threads", (1, 1, 1), (1, 1, 1)))
    assert err.kind == "stack-overflow"


def test_sanitizer_reports_uninitialised_threadgroup_read(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    threadgroup float tile[64];
    if (i < 32) tile[i] = 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = tile[63 - i];   // UNINIT
}
"""
    err = run_fault(cpu, src, "uninit.metal", sanitize=True)
    assert err.kind == "uninitialized-read"
    assert err.loc.line == line_of(src, "// UNINIT")


def test_sanitizer_reports_a_missing_barrier(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    threadgroup float tile[64];
    tile[i] = 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    tile[i] = float(i);      // WRITE
    out[i] = tile[63 - i];   // READ
}
"""
    err = run_fault(cpu, src, "race.metal", sanitize=True)
    assert err.kind == "data-race"
    text = str(err)
    assert str(line_of(src, "// WRITE")) in text and str(line_of(src, "// READ")) in text


def test_sanitizer_is_quiet_on_a_correct_kernel(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    threadgroup float tile[64];
    tile[i] = float(i);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = tile[63 - i];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    tile[i] = v + 1.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = tile[i] + simd_sum(1.0f);
}
"""
    fn = cpu.compile(src, name="clean.metal").function("k")
    out = np.zeros(64, np.float32)
    cpu.dispatch_threads(fn, (64, 1, 1), (64, 1, 1), [out], sanitize=True)
    np.testing.assert_array_equal(out, 63 - np.arange(64) + 1 + 32)


THREE_BUFFERS = HEAD + """
kernel void k(device float* a [[buffer(0)]], device float* b [[buffer(1)]], device float* c [[buffer(2)]],
              constant int& which [[buffer(3)]], constant int& off [[buffer(4)]], uint i [[thread_position_in_grid]]) {
    device float* p = which == 0 ? a : which == 1 ? b : c;
    if (i == 0) p[off] = 1.0f;   // STRAY
}
"""


@pytest.mark.parametrize("which", [0, 1, 2])
@pytest.mark.parametrize("off", [64, 64 + 2000, -1, -3000])
def test_over_and_under_runs_name_the_right_one_of_three_buffers(cpu, which, off):
    """Over-runs fault in the buffer's own trailing guard (up to 64 KiB past its end), never in a neighbour's
    mapping; writes before the start fault in the leading guard, or, within the first page, which no guard can
    cover, in the hardware watchpoints on the bytes just before each buffer (or are found after the dispatch)."""
    names = "abc"
    args = [np.zeros(64, np.float32) for _ in range(3)] + [np.int32(which), np.int32(off)]
    err = run_fault(cpu, THREE_BUFFERS, "three.metal", dispatch=("threads", (4, 1, 1), (4, 1, 1)), args=args)
    assert err.kind == "bad-access" and err.buffer == which, str(err)
    where = f"{off * 4 - 256} bytes past the end" if off > 0 else f"{-off * 4} bytes before the start"
    if off == -1 and watchpoints(cpu):   # the watchpoint names the 8 bytes, not the byte
        assert err.offset == -8 and f"1 to 8 bytes before the start of buffer {which}" in str(err)
    else:
        assert err.offset == off * 4
        assert f"{where} of buffer {which} (`{names[which]}`, 256 bytes)" in str(err)
    if off == -1 and not watchpoints(cpu):  # found after the dispatch: no thread, no line
        assert err.thread is None and "in front of buffer" in str(err) and "thread (" not in str(err)
    else:
        assert err.thread == (0, 0, 0) and err.loc.line == line_of(THREE_BUFFERS, "// STRAY")


def test_a_write_in_front_of_a_buffer_is_caught_again_on_the_next_dispatch(cpu):
    fn = cpu.compile(THREE_BUFFERS, name="three.metal").function("k")
    args = [np.zeros(64, np.float32) for _ in range(3)] + [np.int32(1), np.int32(-2)]
    prepared = cpu.prepare_threads(fn, (1, 1, 1), (1, 1, 1), args)
    for _ in range(2):
        with pytest.raises(metile.DeviceFault, match="8 bytes before the start of buffer 1"):
            prepared()
    args[-1] = np.int32(5)
    cpu.dispatch_threads(fn, (1, 1, 1), (1, 1, 1), args)
    assert args[1][5] == 1.0


def test_the_sanitizer_catches_reads_in_front_of_a_buffer_with_thread_and_line(cpu):
    src = HEAD + """
kernel void k(device const float* a [[buffer(0)]], device float* b [[buffer(1)]], uint i [[thread_position_in_grid]]) {
    b[i] = a[int(i) - 1];   // UNDER
}
"""
    args = [np.ones(64, np.float32), np.zeros(64, np.float32)]
    err = run_fault(cpu, src, "under.metal", dispatch=("threads", (4, 1, 1), (4, 1, 1)), args=args, sanitize=True)
    assert err.kind == "bad-access" and err.buffer == 0 and err.offset == -4 and err.thread == (0, 0, 0)
    assert "4 bytes before the start of buffer 0 (`a`, 256 bytes)" in str(err) and "reads" in str(err)
    assert err.loc.line == line_of(src, "// UNDER")


UNDER = HEAD + """
kernel void k(device const float* a [[buffer(0)]], device float* b [[buffer(1)]], constant int& back [[buffer(2)]],
              uint i [[thread_position_in_grid]]) {
    b[i] = a[int(i) - back];   // UNDER
}
"""


def test_a_read_just_before_a_buffer_faults_at_its_line_without_the_sanitizer(cpu):
    """The bytes between a buffer's leading guard and its start share a page with its first bytes, so no guard
    page covers them; hardware watchpoints on the bytes just before each buffer do (the 16 before `a` here: two
    arrays share the four watchpoints, the read-only one first)."""
    if not watchpoints(cpu):
        pytest.skip("this process cannot set hardware watchpoints (perf_event_open refused, or not x86-64 Linux)")
    for back, where in [(1, "1 to 8 bytes"), (2, "1 to 8 bytes"), (4, "9 to 16 bytes")]:
        args = [np.ones(64, np.float32), np.zeros(4, np.float32), np.int32(back)]
        err = run_fault(cpu, UNDER, "under.metal", dispatch=("threads", (4, 1, 1), (4, 1, 1)), args=args)
        assert err.kind == "bad-access" and err.buffer == 0 and err.thread == (0, 0, 0), str(err)
        assert f"is {where} before the start of buffer 0 (`a`, 256 bytes)" in str(err)
        assert "hardware watchpoint" in str(err) and err.loc.line == line_of(UNDER, "// UNDER")
    fn = cpu.compile(UNDER, name="under.metal").function("k")
    b = np.zeros(4, np.float32)
    run = cpu.prepare_threads(fn, 4, 4, [np.arange(64, dtype=np.float32), b, np.int32(0)])
    for _ in range(3):   # the watchpoints stay on the prepared buffers and a kernel staying inside faults nowhere
        run()
        assert b.tolist() == [0, 1, 2, 3]


def test_the_watchpoints_follow_the_buffers_from_launch_to_launch(cpu):
    """Each launch watches its own buffers: 5 arrays, the read-only ones first (8 bytes each for the first four)."""
    if not watchpoints(cpu):
        pytest.skip("this process cannot set hardware watchpoints (perf_event_open refused, or not x86-64 Linux)")
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], device const float* a [[buffer(1)]], device const float* b [[buffer(2)]],
              device const float* c [[buffer(3)]], device float* d [[buffer(4)]], constant int& which [[buffer(5)]],
              uint i [[thread_position_in_grid]]) {
    device const float* p = which == 0 ? out : which == 1 ? a : which == 2 ? b : which == 3 ? c : d;
    float v = p[i == 0 ? -1 : int(i)];   // READ
    out[i] = v + d[i];
}
"""
    fn = cpu.compile(src, name="five.metal").function("k")
    for which in (1, 2, 3, 0, 3, 1):
        args = [np.zeros(8, np.float32)] + [np.ones(64 + k, np.float32) for k in range(4)] + [np.int32(which)]
        err = run_fault(cpu, src, "five.metal", dispatch=("threads", (8, 1, 1), (4, 1, 1)), args=args)
        assert err.buffer == which and err.loc.line == line_of(src, "// READ"), str(err)
        assert err.thread == (0, 0, 0) and err.threadgroup == (0, 0, 0)
    out = np.zeros(8, np.float32)
    ones = [np.ones(64, np.float32) for _ in range(4)]   # four arrays (one array four times would be one buffer)
    cpu.dispatch_threads(fn, 8, 4, [out, *ones, np.int32(4)])   # d: not watched
    assert out[1:].tolist() == [2] * 7 and out[0] < -1e38


@pytest.mark.parametrize("ctype, dtype, want", [
    ("float", np.float32, np.uint32(0xFEFEFEFE).view(np.float32)),    # -1.7e38, not a value that looks like 0
    ("half", np.float16, np.nan),
    ("int", np.int32, -16843010),
])
def test_a_read_further_in_front_of_a_buffer_reads_no_plausible_datum(cpu, ctype, dtype, want):
    """Before the watched bytes (or without watchpoints), a read in front of a buffer is a fault only with
    sanitize=True, and otherwise reads bytes 0xFE."""
    src = HEAD + f"""
kernel void k(device const {ctype}* a [[buffer(0)]], device {ctype}* b [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {{
    b[i] = a[int(i) * 40 - 32];   // thread 0: 32 elements before the start; thread 1: element 8
}}
"""
    fn = cpu.compile(src, name=f"front_{ctype}.metal").function("k")
    b = np.zeros(2, dtype)
    cpu.dispatch_threads(fn, 2, 2, [np.ones(64, dtype), b])
    assert b[1] == 1
    np.testing.assert_array_equal(b[:1], np.array([want], dtype))
    with pytest.raises(metile.DeviceFault, match=f"{32 * b.itemsize} bytes before the start of buffer 0"):
        cpu.dispatch_threads(fn, 2, 2, [np.ones(64, dtype), b], sanitize=True)


UNBOUND = HEAD + """
kernel void k(device float* out [[buffer(0)]], const device float* bias [[buffer(1)]],
              constant int& mode [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    out[i] = mode == 1 ? bias[i] : 2.0f;   // READ
}
"""


@pytest.mark.parametrize("sanitize", [False, True])
def test_a_buffer_left_unbound_runs_until_the_kernel_touches_it(cpu, sanitize):
    """Metal lets a dispatch leave unbound a buffer the kernel does not access (MLX leaves gemv's bias so)."""
    fn = cpu.compile(UNBOUND, name="unbound.metal").function("k")
    out = np.zeros(64, np.float32)
    cpu.dispatch_threads(fn, 64, 64, [out, None, np.int32(0)], sanitize=sanitize)
    assert out.tolist() == [2.0] * 64
    run = cpu.prepare_threads(fn, 64, 64, [out, None, np.int32(1)], sanitize=sanitize)
    for _ in range(2):   # a prepared dispatch faults each time, and the device stays usable
        with pytest.raises(metile.DeviceFault) as info:
            run()
        err = info.value
        assert err.kind == "bad-access" and err.buffer == 1 and err.offset == 0
        assert err.loc.line == line_of(UNBOUND, "// READ")
        assert ("of buffer 1 (`bias`, [[buffer(1)]]), which was not bound (args[1] is None): a dispatch may leave "
                "unbound only a buffer the kernel does not access") in str(err)
        assert "guard page" not in str(err)
    err = run_fault(cpu, UNBOUND, "unbound.metal", args=[out, np.zeros(64, np.float32), None])
    assert err.buffer == 2 and "buffer 2 (`mode`, [[buffer(2)]]), which was not bound (args[2] is None)" in str(err)
    with pytest.raises(metile.LaunchError, match="takes 3 buffer"):
        cpu.dispatch_threads(fn, 64, 64, [out, None])
