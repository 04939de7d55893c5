"""Performance counters of the CPU device (`profile=`), checked exactly on kernels whose counts are known by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import metile
from metile.profile.model import estimate
from tests.msl_source import line_of

REF = Path(__file__).resolve().parent / "data" / "reference_msl"

COPIES = """
#include <metal_stdlib>
using namespace metal;
kernel void copy(device const float* a [[buffer(0)]], device float* b [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
    b[i] = a[i];
}
kernel void strided(device const float* a [[buffer(0)]], device float* b [[buffer(1)]],
                    uint i [[thread_position_in_grid]]) {
    b[i] = a[i * 16];
}
kernel void vec4(device const float4* a [[buffer(0)]], device float4* b [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
    b[i] = a[i];
}
"""

TRANSPOSE = """
#include <metal_stdlib>
using namespace metal;
template <int PAD>
void transpose_tile(device const float* in, device float* out, uint2 t, uint2 g, uint n) {
    threadgroup float tile[32][32 + PAD];
    tile[t.y][t.x] = in[(g.y * 32 + t.y) * n + g.x * 32 + t.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[(g.x * 32 + t.y) * n + g.y * 32 + t.x] = tile[t.x][t.y];
}
kernel void plain(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                  constant uint& n [[buffer(2)]], uint2 t [[thread_position_in_threadgroup]],
                  uint2 g [[threadgroup_position_in_grid]]) {
    transpose_tile<0>(in, out, t, g, n);
}
kernel void padded(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                   constant uint& n [[buffer(2)]], uint2 t [[thread_position_in_threadgroup]],
                   uint2 g [[threadgroup_position_in_grid]]) {
    transpose_tile<1>(in, out, t, g, n);
}
"""

REDUCE = """
#include <metal_stdlib>
using namespace metal;
kernel void tree(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                 device atomic_uint* count [[buffer(2)]],
                 uint t [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
    threadgroup float part[256];
    part[t] = x[g * 256 + t];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = 128; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (t == 0) out[g] = part[0];
    atomic_fetch_add_explicit(count, 1u, memory_order_relaxed);
}
kernel void simd(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                 uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = simd_sum(x[i]);
    v = simd_max(v);
    if (lane == 0) out[i / 32] = v;
}
"""

MATRIX = """
#include <metal_stdlib>
using namespace metal;
kernel void mm(device const half* a [[buffer(0)]], device const half* b [[buffer(1)]],
               device float* c [[buffer(2)]], uint sg [[simdgroup_index_in_threadgroup]]) {
    simdgroup_matrix<half, 8, 8> x, y;
    simdgroup_matrix<float, 8, 8> acc = simdgroup_matrix<float, 8, 8>(0);
    for (int k = 0; k < 4; ++k) {
        simdgroup_load(x, a + k * 8, 32);
        simdgroup_load(y, b + k * 8 * 8, 8);
        simdgroup_multiply_accumulate(acc, x, y, acc);
    }
    simdgroup_store(acc, c + sg * 64, 8);
}
"""


@pytest.fixture(scope="module")
def dev():
    return metile.device("cpu")


def test_a_dispatch_without_profile_returns_nothing(dev):
    fn = dev.compile(COPIES, name="copies.metal").function("copy")
    a = np.arange(64, dtype=np.float32)
    b = np.zeros(64, np.float32)
    assert dev.dispatch_threads(fn, (64, 1, 1), (64, 1, 1), [a, b]) is None
    assert (b == a).all()


def test_a_dispatch_without_profile_costs_what_it_did_before_any_profiled_one(dev):
    """`profile=` leaves the plain path alone: a dispatch without it runs the plain build and makes the same Python
    calls (counted by cProfile, a count that does not depend on the machine's load) whether or not the same kernel
    was profiled before it, and of the profiler it calls only the check of the `profile=` argument. A profiled
    dispatch builds the instrumented library beside the plain one instead of replacing it."""
    import cProfile
    import pstats

    lib = dev.compile(COPIES.replace("copy(", "copy_cost("), name="copies_cost.metal")
    fn = lib.function("copy_cost")
    a = np.arange(4096, dtype=np.float32)
    b = np.zeros(4096, np.float32)

    def plain_calls() -> tuple[int, set[str]]:
        dev.dispatch_threads(fn, (4096, 1, 1), (256, 1, 1), [a, b])      # the kept dispatch is made here
        prof = cProfile.Profile()
        prof.enable()
        assert dev.dispatch_threads(fn, (4096, 1, 1), (256, 1, 1), [a, b]) is None
        prof.disable()
        stats = pstats.Stats(prof).stats
        return sum(calls for calls, *_ in stats.values()), {f"{file}:{name}" for file, _, name in stats}

    before, _ = plain_calls()
    assert set(lib._handles) == {False}
    assert dev.dispatch_threads(fn, (4096, 1, 1), (256, 1, 1), [a, b], profile=True) is not None
    assert set(lib._handles) == {False, True}
    after, called = plain_calls()
    assert after == before
    # of the profiler, only the check that reads the (absent) `profile=` argument runs
    assert [c.rsplit("/", 1)[-1] for c in called if "profil" in c] == ["profiling.py:sample_size"]
    assert (b == a).all()


def test_coalesced_and_strided_copies(dev):
    lib = dev.compile(COPIES, name="copies.metal")
    a = np.arange(4096 * 16, dtype=np.float32)
    b = np.zeros(4096, np.float32)
    p = dev.dispatch_threads(lib.function("copy"), (4096, 1, 1), (256, 1, 1), [a, b], profile=True)
    assert (b == a[:4096]).all()
    d = p.to_dict()
    # 4096 lanes read and write 4 bytes: 128 simdgroups, one read and one write instruction each, two 64-byte
    # segments per instruction
    assert (d["device_bytes_read"], d["device_bytes_written"]) == (16384, 16384)
    assert (d["device_accesses"], d["device_instructions"], d["device_segments"]) == (8192, 256, 512)
    assert d["coalescing_efficiency"] == d["load_coalescing_efficiency"] == 1.0
    assert d["device_load_segments"] == 256
    assert d["device_unique_bytes"] == d["device_unique_bytes_per_threadgroup"] == 32768
    assert (d["threadgroups_profiled"], d["threadgroups_total"], d["sampled"]) == (16, 16, False)
    assert d["lines"][f"copies.metal:{line_of(COPIES, 'b[i] = a[i];')}"]["device_segments"] == 512
    p = dev.dispatch_threads(lib.function("strided"), (4096, 1, 1), (256, 1, 1), [a, b], profile=True)
    d = p.to_dict()
    # each read's 32 lanes are 64 bytes apart: 32 segments; the writes stay 2
    assert d["device_segments"] == 128 * 32 + 128 * 2
    assert d["coalescing_efficiency"] == pytest.approx(32768 / ((128 * 32 + 128 * 2) * 64))
    assert d["device_load_segments"] == 128 * 32    # the loads alone: each reads 128 of its 32 segments' 2048 bytes
    assert d["load_coalescing_efficiency"] == pytest.approx(16384 / (128 * 32 * 64))
    assert d["device_traffic"] == 4096 * 64 + 16384    # memory moves the whole segment of every read
    assert d["device_unique_bytes"] == 32768
    # float4: one 16-byte access per lane, 8 segments per instruction
    a4 = np.arange(4096 * 4, dtype=np.float32)
    b4 = np.zeros_like(a4)
    d = dev.dispatch_threads(lib.function("vec4"), (4096, 1, 1), (256, 1, 1), [a4, b4], profile=True).to_dict()
    assert (d["device_accesses"], d["device_instructions"], d["device_segments"]) == (8192, 256, 256 * 8)
    assert d["device_bytes_read"] == 4096 * 16
    assert (b4 == a4).all()


@pytest.mark.parametrize("kernel, conflicts", [("plain", 31), ("padded", 0)])
def test_transpose_bank_conflicts(dev, kernel, conflicts):
    fn = dev.compile(TRANSPOSE, name="transpose.metal").function(kernel)
    n = 64
    x = np.arange(n * n, dtype=np.float32).reshape(n, n)
    y = np.zeros_like(x)
    p = dev.dispatch_threadgroups(fn, (2, 2, 1), (32, 32, 1), [x, y, np.uint32(n)], profile=True)
    assert (y == x.T).all()
    d = p.to_dict()
    # per threadgroup: 32 simdgroups (one row each) write a row of the tile (no conflict) and read a column of it:
    # 32 words in one bank without padding (32 passes, 31 beyond the one needed), one word per bank with it
    assert d["threadgroup_instructions"] == 4 * 32 * 2
    assert d["bank_conflicts"] == 4 * 32 * conflicts
    assert d["threadgroup_passes"] == 4 * 32 * (1 + 1 + conflicts)
    assert d["threadgroup_bytes"] == 4 * 1024 * 4 * 2
    assert d["barriers"] == 4
    column = p.line(line_of(TRANSPOSE, "= tile[t.x][t.y]"))
    assert column.bank_conflicts == 4 * 32 * conflicts
    assert p.launch.threadgroup_memory == 32 * (32 + (kernel == "padded")) * 4


def test_reduction_barriers_atomics_and_collectives(dev):
    lib = dev.compile(REDUCE, name="reduce.metal")
    x = np.random.default_rng(0).random(8 * 256, dtype=np.float32)
    out = np.zeros(8, np.float32)
    count = np.zeros(1, np.uint32)
    p = dev.dispatch_threadgroups(lib.function("tree"), (8, 1, 1), (256, 1, 1), [x, out, count], profile=True)
    np.testing.assert_allclose(out, x.reshape(8, 256).sum(1), rtol=1e-5)
    d = p.to_dict()
    assert d["barriers"] == 8 * (1 + 8)          # one after the store, one per halving step
    assert d["atomics"] == 8 * 256
    first = line_of(REDUCE, "threadgroup_barrier")
    assert d["lines"][f"reduce.metal:{first}"]["barriers"] == 8
    assert d["lines"][f"reduce.metal:{first + 3}"]["barriers"] == 8 * 8
    assert d["simd_collectives"] == 0
    sums = np.zeros(1024 // 32, np.float32)
    p = dev.dispatch_threads(lib.function("simd"), (1024, 1, 1), (128, 1, 1), [x, sums], profile=True)
    np.testing.assert_allclose(sums, x[:1024].reshape(32, 32).sum(1), rtol=1e-5)
    d = p.to_dict()
    assert d["simd_collectives"] == 2 * 1024 // 32
    assert d["lines"][f"reduce.metal:{line_of(REDUCE, 'simd_sum')}"]["simd_collectives"] == 1024 // 32


def test_simdgroup_matrix_counts_by_dtype(dev):
    fn = dev.compile(MATRIX, name="mm.metal").function("mm")
    rng = np.random.default_rng(1)
    a = rng.random((8, 32)).astype(np.float16)
    b = rng.random((32, 8)).astype(np.float16)
    c = np.zeros((2, 8, 8), np.float32)
    p = dev.dispatch_threadgroups(fn, (3, 1, 1), (64, 1, 1), [a, b, c], profile=True)
    np.testing.assert_allclose(c[0], a.astype(np.float32) @ b.astype(np.float32), rtol=2e-3)
    d = p.to_dict()
    sgs = 3 * 2
    assert d["simdgroup_loads_by_dtype"] == {"half": sgs * 8}
    assert d["simdgroup_mma_by_dtype"] == {"half": sgs * 4}
    assert d["simdgroup_stores_by_dtype"] == {"float": sgs}
    assert d["flops"] == sgs * 4 * 1024
    assert d["lines"][f"mm.metal:{line_of(MATRIX, 'simdgroup_multiply')}"]["simdgroup_mma"] == sgs * 4


def test_reference_gemm_traffic_follows_from_its_tiles(dev):
    src = (REF / "gemm_f32_64x64x32" / "kernel.metal").read_text()
    fn = dev.compile(src, name="gemm.metal").function("mtile_matmul")
    n = 128
    rng = np.random.default_rng(2)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    p = dev.dispatch_threadgroups(fn, (2, 2, 1), (128, 1, 1), [a, b, c, np.int32(n), np.int32(n), np.int32(n)],
                                  profile=True)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)
    d = p.to_dict()
    tiles = 4
    # each 64x64 tile of C reads a 64 x n panel of A and an n x 64 panel of B once and writes its tile
    per_tile = 64 * n * 4 * 2 + 64 * 64 * 4
    assert d["device_unique_bytes_per_threadgroup"] == tiles * per_tile
    assert d["device_traffic_per_threadgroup"] == tiles * per_tile    # panels are whole 64-byte segments
    assert d["device_unique_bytes"] == 3 * n * n * 4
    assert d["device_bytes_read"] == tiles * 64 * n * 4 * 2
    assert d["device_bytes_written"] == tiles * 64 * 64 * 4
    assert d["flops"] == 2 * n ** 3
    assert d["simdgroup_mma"] == n ** 3 // 512
    assert d["barriers"] == tiles * (n // 32) * 2
    e = estimate(p, "M1")
    assert e.flops == 2 * n ** 3
    assert e.compute_s == pytest.approx(2 * n ** 3 / e.gpu.fp32_flops)
    assert e.bound_binding in ("matrix", "device memory", "threadgroup memory")
    assert e.binding in ("matrix", "device memory", "cache", "threadgroup memory", "dispatch")


def test_a_sample_of_threadgroups_is_scaled_to_the_grid(dev):
    fn = dev.compile(COPIES, name="copies.metal").function("copy")
    a = np.arange(64 * 256, dtype=np.float32)
    b = np.zeros_like(a)
    full = dev.dispatch_threads(fn, (a.size, 1, 1), (256, 1, 1), [a, b], profile=64).to_dict()
    part = dev.dispatch_threads(fn, (a.size, 1, 1), (256, 1, 1), [a, b], profile=4)
    d = part.to_dict()
    assert (d["threadgroups_profiled"], d["threadgroups_total"], d["sampled"], d["scale"]) == (4, 64, True, 16.0)
    for key in ("device_bytes_read", "device_segments", "device_instructions", "device_unique_bytes",
                "device_unique_bytes_per_threadgroup"):
        assert d[key] == full[key], key
    assert "counted 4 of 64 threadgroups" in part.format_summary()


def test_profile_only_runs_the_counted_threadgroups(dev):
    fn = dev.compile(COPIES, name="copies.metal").function("copy")
    a = np.arange(8 * 256, dtype=np.float32) + 1
    b = np.zeros_like(a)
    p = dev.dispatch_threads(fn, (a.size, 1, 1), (256, 1, 1), [a, b], profile=2, profile_only=True)
    done = (b.reshape(8, 256) != 0).all(axis=1)
    assert done.tolist() == [True] + [False] * 6 + [True]    # the first and the last threadgroup
    assert p.to_dict()["device_bytes_read"] == a.size * 4


@pytest.mark.parametrize("kw, message", [
    ({"profile": 0}, "number of threadgroups"),
    ({"profile": "all"}, "number of threadgroups"),
    ({"profile_only": True}, "needs profile=True"),
    ({"profile": True, "profile_only": 1}, "profile_only=1 must be True or False"),
])
def test_bad_profile_arguments(dev, kw, message):
    fn = dev.compile(COPIES, name="copies.metal").function("copy")
    a = np.zeros(64, np.float32)
    with pytest.raises(metile.ProfileError, match=message):
        dev.dispatch_threads(fn, (64, 1, 1), (64, 1, 1), [a, a.copy()], **kw)


def test_summary_prints_the_estimate_and_the_busiest_lines(dev, capsys):
    fn = dev.compile(COPIES, name="copies.metal").function("strided")
    a = np.arange(4096 * 16, dtype=np.float32)
    p = dev.dispatch_threads(fn, (4096, 1, 1), (256, 1, 1), [a, np.zeros(4096, np.float32)], profile=True)
    p.summary(gpu="M3 Max")
    out = capsys.readouterr().out
    assert "on M3 Max" in out and "bound by device memory" in out
    assert f"copies.metal:{line_of(COPIES, 'a[i * 16]')}" in out and "b[i] = a[i * 16];" in out
    with pytest.raises(metile.UnknownGpuError):
        p.estimate("M9")
