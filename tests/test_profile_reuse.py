"""Device-memory reuse by replay (metile.profile.reuse, metile.profile.model.device_traffic): the segment traces the
CPU device records for each threadgroup, and the DRAM traffic of their replay through an LRU of the last-level
cache in dispatch order, checked on kernels whose answer is worked out by hand below."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import metile
from metile.profile.counts import STEP_END, SegmentTrace
from metile.profile.gpus import gpu
from metile.profile.model import Occupancy, device_traffic, estimate
from metile.profile.reuse import replay

SEG = 64   # the profiler's segment (metile.profile.counts.Model)
BLOCK = 16  # segments of 1 KiB

ROWS = """
#include <metal_stdlib>
using namespace metal;
kernel void rows(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                 uint t [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
    threadgroup float acc[256];
    acc[t] = 0;
    for (uint s = 0; s < 4; ++s) {
        acc[t] += x[s * 256 + t];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[g * 256 + t] = acc[t];
}
"""

# C = A B for A (M x 16) and B given transposed (N x 16), one 16 x 16 tile of C a threadgroup: stage the tile's rows
# of A, then its columns of B, in threadgroup memory, then write the tile. `swizzle` 1 takes the tiles of two tile
# rows column by column (Triton's grouped ordering, GROUP_SIZE_M = 2), 0 row by row.
GEMM = """
#include <metal_stdlib>
using namespace metal;
kernel void gemm(device const float* a [[buffer(0)]], device const float* bt [[buffer(1)]],
                 device float* c [[buffer(2)]], constant uint& swizzle [[buffer(3)]],
                 uint2 t [[thread_position_in_threadgroup]], uint2 g [[threadgroup_position_in_grid]],
                 uint2 grid [[threadgroups_per_grid]]) {
    uint ti = g.y, tj = g.x;
    if (swizzle) {
        uint l = g.y * grid.x + g.x, w = l % (2 * grid.x);
        ti = l / (2 * grid.x) * 2 + w % 2;
        tj = w / 2;
    }
    threadgroup float as[16][16], bs[16][16];
    as[t.y][t.x] = a[(ti * 16 + t.y) * 16 + t.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    bs[t.y][t.x] = bt[(tj * 16 + t.y) * 16 + t.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float acc = 0;
    for (uint k = 0; k < 16; ++k) acc += as[t.y][k] * bs[t.x][k];
    c[(ti * 16 + t.y) * (grid.x * 16) + tj * 16 + t.x] = acc;
}
"""

# one threadgroup of 32 threads sweeping 2048 segments (each lane a float every 64 bytes) twice, with no barrier
SWEEP = """
#include <metal_stdlib>
using namespace metal;
kernel void sweep(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                  uint t [[thread_position_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
    float s = 0;
    for (uint pass = 0; pass < 2; ++pass)
        for (uint i = 0; i < 64; ++i) s += x[((g * 64 + i) * 32 + t) * 16];
    out[g * 32 + t] = s;
}
"""


@pytest.fixture(scope="module")
def dev():
    return metile.device("cpu")


def occ(concurrent: int) -> Occupancy:
    return Occupancy(1, "threads", concurrent, 1, 1.0, 1.0)


def relative(trace: SegmentTrace, k: int) -> list[list[int]]:
    """The steps of threadgroup k, segments numbered from the trace's lowest."""
    low = int(trace.segments[trace.segments != STEP_END].min())
    return [[s - low for s in step] for step in trace.steps(k)]


def test_the_trace_holds_each_threadgroups_segments_step_by_step_in_dispatch_order(dev):
    fn = dev.compile(ROWS, name="rows.metal").function("rows")
    x = np.arange(1024, dtype=np.float32)
    out = np.zeros(512, np.float32)
    p = dev.dispatch_threadgroups(fn, (2, 1, 1), (256, 1, 1), [x, out], profile=True)
    np.testing.assert_array_equal(out, np.tile(x.reshape(4, 256).sum(0), 2))
    t = p.segment_trace
    assert p.whole_trace and t.complete and list(t.threadgroups) == [0, 1]
    # four steps of 16 segments (a KiB of x each, ended by a barrier), then the KiB of out, each segment once
    for k in (0, 1):
        steps = t.steps(k)
        assert [len(s) for s in steps] == [BLOCK] * 5
        assert all(len(set(s)) == BLOCK and max(s) - min(s) == BLOCK - 1 for s in steps)
        assert steps[:4] == t.steps(0)[:4]            # both read the same rows
    assert set(t.steps(0)[4]).isdisjoint(t.steps(1)[4])
    assert t.distinct() == 6 * BLOCK == p.device_unique_segments


def test_threadgroups_running_together_share_what_one_after_another_moves_twice(dev):
    fn = dev.compile(ROWS, name="rows.metal").function("rows")
    p = dev.dispatch_threadgroups(fn, (2, 1, 1), (256, 1, 1), [np.ones(1024, np.float32), np.zeros(512, np.float32)],
                                  profile=True)
    # blocks X0..X3 of x, then O0 or O1. Run together (2 slots), with a 2-block cache: X_s of the second follows
    # X_s of the first, a hit: X0..X3, O0, O1 move once, 6 blocks (the footprint)
    two = 2 * BLOCK * SEG
    assert device_traffic(p, occ(2), two) == 6 * BLOCK * SEG
    # one after the other: the second's X0 comes after X1..X3 and O0, beyond 2 blocks, and so does each of its X_s:
    # 5 + 5 blocks
    assert device_traffic(p, occ(1), two) == 10 * BLOCK * SEG
    # with 5 blocks of cache the first's rows are all there for the second
    assert device_traffic(p, occ(1), 5 * BLOCK * SEG) == 6 * BLOCK * SEG


@pytest.mark.parametrize("swizzle, blocks", [(0, 36), (1, 28)])
def test_a_grid_swizzle_that_keeps_tiles_of_two_rows_together_moves_less(dev, swizzle, blocks):
    fn = dev.compile(GEMM, name="gemm.metal").function("gemm")
    rng = np.random.default_rng(0)
    a = rng.random((64, 16), dtype=np.float32)
    bt = rng.random((64, 16), dtype=np.float32)
    c = np.zeros((64, 64), np.float32)
    p = dev.dispatch_threadgroups(fn, (4, 4, 1), (16, 16, 1), [a, bt, c, np.uint32(swizzle)], profile=True)
    np.testing.assert_allclose(c, a @ bt.T, rtol=1e-5)
    assert p.whole_trace
    # each threadgroup: A_i (a block), B_j (a block), C_ij (16 rows of 64 bytes: a block); 4 + 4 + 16 blocks in all
    assert all(len(s) == BLOCK for k in range(16) for s in p.segment_trace.steps(k))
    assert p.device_traffic == 24 * BLOCK * SEG
    # one threadgroup at a time, a 6-block cache. Row by row: A_i stays (B_j and C_ij between its uses), every B_j
    # misses again in the next row (9 blocks between), so 4 A + 16 B + 16 C = 36 blocks. Two rows column by column
    # (A0 B0 C00 A1 B0 C10 A0 B1 C01 ...): B_j is hit by the second row's tile (2 blocks between), A0 and A1 have 4
    # and 5 other blocks between their uses, all within 6: per pair of rows 2 A + 4 B + 8 C = 14, 28 in all
    cache = 6 * BLOCK * SEG
    assert device_traffic(p, occ(1), cache) == blocks * BLOCK * SEG
    # the same through a GPU whose last-level cache is 6 blocks and which runs one threadgroup at a time
    tiny = attrs.evolve(gpu("M1"), gpu_cores=1, last_level_cache=cache)
    e = estimate(attrs.evolve(p, launch=attrs.evolve(p.launch, threads_per_threadgroup=(1024, 1, 1))), tiny)
    assert e.occupancy.concurrent == 1
    assert f"moved {blocks * BLOCK * SEG:.4g} B" in e.term("device memory").detail
    # a cache holding the whole footprint moves it once either way
    assert device_traffic(p, occ(1), 24 * BLOCK * SEG) == 24 * BLOCK * SEG


def test_a_threadgroup_rereading_more_than_the_cache_holds_moves_it_again(dev):
    fn = dev.compile(SWEEP, name="sweep.metal").function("sweep")
    x = np.arange(2048 * 16, dtype=np.float32)
    out = np.zeros(32, np.float32)
    p = dev.dispatch_threadgroups(fn, (1, 1, 1), (32, 1, 1), [x, out], profile=True)
    np.testing.assert_allclose(out, 2 * x[::16].reshape(64, 32).sum(0), rtol=1e-6)
    t = p.segment_trace
    # no barrier: a step closes at 1024 segments, so each pass is two steps and the second pass re-reads the first's
    sizes = [len(s) for s in t.steps(0)]
    assert sizes == [t.step_segments] * 4 + [2] and t.step_segments == 1024
    assert relative(t, 0)[:2] == relative(t, 0)[2:4]
    # with room for 1500 segments the second pass finds none of the 2048 (a sweep through LRU), with 2049 all
    assert device_traffic(p, occ(1), 1500 * SEG) == (2 * 2048 + 2) * SEG
    assert device_traffic(p, occ(1), 2049 * SEG) == (2048 + 2) * SEG


def test_a_sampled_dispatch_replays_each_traced_threadgroup_through_its_share_of_the_cache(dev):
    fn = dev.compile(SWEEP, name="sweep.metal").function("sweep")
    x = np.arange(8 * 2048 * 16, dtype=np.float32)
    out = np.zeros(8 * 32, np.float32)
    p = dev.dispatch_threadgroups(fn, (8, 1, 1), (32, 1, 1), [x, out], profile=2)
    assert p.sampled and not p.whole_trace and list(p.segment_trace.threadgroups) == [0, 7]
    # 8 threadgroups with their own 2048 segments, 4 running at once: a 4 x 1500-segment cache leaves each 1500,
    # too few, so each moves its segments twice; a 4 x 2049 one keeps them. The segments the threadgroups share
    # (none here, but their outputs' segment) are estimated from the totals
    footprint = p.device_traffic
    assert device_traffic(p, occ(4), 4 * 1500 * SEG) == pytest.approx(footprint + 8 * 2048 * SEG, rel=1e-3)
    assert device_traffic(p, occ(4), 4 * 2049 * SEG) == pytest.approx(footprint, rel=1e-3)


def test_replay_runs_resident_threadgroups_step_by_step_and_refills_slots_in_dispatch_order():
    """Three threadgroups, two slots, a 2-segment cache: 0 reads [1] [2]; 1 reads [1] [3]; 2 reads [2] [1]."""
    end = int(STEP_END)
    segs = np.array([1, end, 2, end, 1, end, 3, end, 2, end, 1, end], np.uint64)
    t = SegmentTrace(np.arange(3, dtype=np.uint64), np.array([0, 4, 8, 12]), segs)
    # round 1: 0 reads 1 (miss), 1 reads 1 (hit); round 2: 0 reads 2 (miss), 1 reads 3 (miss, 1 out);
    # round 3: 2 takes slot 0 and reads 2 (hit), slot 1 is done; round 4: 2 reads 1 (miss): 4
    assert replay(t, 2, 2) == 4
    # one at a time: 1 2 | 1 3 | 2 1 with 2 segments: miss miss hit miss miss miss
    assert replay(t, 1, 2) == 5
    assert replay(t, 3, 3) == t.distinct() == 3


def test_metiles_grouped_program_order_moves_less_of_a_gemm_through_a_small_cache():
    """Triton's tutorial GEMM as metile runs it (programs in groups of GROUP_SIZE_M tile rows, taken column by
    column), 32 x 32 tiles of a 256 x 32 by 32 x 256 product: a grid of 8 x 8 tiles, 64 programs."""
    from benchmarks.metile_kernels import elem_strides, matmul_kernel

    rng = np.random.default_rng(1)
    a = rng.random((256, 32), dtype=np.float32)
    b = rng.random((32, 256), dtype=np.float32)
    moved = {}
    for group in (1, 4):
        c = np.zeros((256, 256), np.float32)
        p = matmul_kernel[(64,)](a, b, c, 256, 256, 32, *elem_strides(a)[:1], *elem_strides(b)[:1],
                                 *elem_strides(c)[:1], BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=16,
                                 GROUP_SIZE_M=group, profile=64)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4)
        # a program's rows of A (32 rows of 128 bytes), its columns of B (32 rows of 128 bytes) and its tile of C
        # (32 rows of 128 bytes) are 64 segments each; A, B and C are 512 + 512 + 4096 segments
        assert p.whole_trace and p.device_unique_segments == 5120
        moved[group] = device_traffic(p, occ(8), 64 * 1024) / SEG
        assert device_traffic(p, occ(8), 2**20) == p.device_traffic      # all of it fits: each segment once
    # 8 at a time through 1024 segments of cache. Row by row, the 8 running share their A, but the next row's use
    # of a column of B comes after 64 + 8 x 128 segments: every program moves its B (4096) besides A once (512) and
    # C (4096). In groups of 4 rows, the 8 running are 4 rows by 2 columns: they share B, and a row of A is used
    # again by the next 8 after less than 1024 segments; B is moved again only by the second group: 512 + 1024 + 4096
    assert moved == {1: 512 + 4096 + 4096, 4: 512 + 1024 + 4096}
