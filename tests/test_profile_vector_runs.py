"""Adjacent scalar accesses of one thread count as the vector instruction Apple's compilers make of them: a run of
loads (or stores) of one simdgroup whose every lane continues where its previous one ended, up to 4 elements a lane,
is one device or threadgroup instruction (metile/metal/cpu/runtime_profile.cpp, `extend_run`). Checked exactly on
kernels whose counts are known by hand."""

from __future__ import annotations

import numpy as np
import pytest

import metile

RUNS = """
#include <metal_stdlib>
using namespace metal;
// MLX softmax's N_READS loop: each thread reads 4 adjacent floats and writes 4
kernel void four(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
    float v[4];
    for (int k = 0; k < 4; k++) v[k] = in[i * 4 + k];
    for (int k = 0; k < 4; k++) out[i * 4 + k] = v[k] * 2.0f;
}
// the same four floats a lane through threadgroup memory
kernel void staged(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                   uint i [[thread_position_in_grid]], uint t [[thread_position_in_threadgroup]]) {
    threadgroup float tile[256 * 4];
    for (int k = 0; k < 4; k++) tile[t * 4 + k] = in[i * 4 + k];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int k = 0; k < 4; k++) out[i * 4 + k] = tile[t * 4 + k] + 1.0f;
}
// eight adjacent halves a lane: two loads of 4 (a load takes at most 4 elements of its type)
kernel void eight(device const half* in [[buffer(0)]], device float* out [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    float s = 0;
    for (int k = 0; k < 8; k++) s += float(in[i * 8 + k]);
    out[i] = s;
}
// four floats a lane 4 KiB apart: not adjacent, four instructions
kernel void apart(device const float* in [[buffer(0)]], device float* out [[buffer(1)]],
                  uint i [[thread_position_in_grid]], uint n [[threads_per_grid]]) {
    float s = 0;
    for (int k = 0; k < 4; k++) s += in[i + k * n];
    out[i] = s;
}
"""


@pytest.fixture(scope="module")
def lib():
    return metile.device("cpu").compile(RUNS, name="runs.metal")


def _run(lib, name: str, n: int = 1024):
    dev = metile.device("cpu")
    x = np.arange(4 * n, dtype=np.float32)
    y = np.zeros(4 * n, np.float32)
    p = dev.dispatch_threads(lib.function(name), (n, 1, 1), (256, 1, 1), [x, y], profile=True)
    return x, y, p.to_dict()


def test_four_adjacent_floats_a_lane_are_one_load_and_one_store(lib):
    x, y, d = _run(lib, "four")
    assert (y == 2 * x).all()
    # 1024 lanes, 32 simdgroups: one 16-byte load and one 16-byte store a lane, each simdgroup's 512 bytes 8 whole
    # segments (as scalar instructions: 8 loads and stores a simdgroup of 8 segments each, 25% coalesced)
    assert (d["device_accesses"], d["device_bytes_read"], d["device_bytes_written"]) == (8192, 16384, 16384)
    assert (d["device_instructions"], d["device_segments"], d["device_load_segments"]) == (64, 512, 256)
    assert d["coalescing_efficiency"] == d["load_coalescing_efficiency"] == 1.0


def test_four_adjacent_words_a_lane_in_threadgroup_memory_take_the_fewest_passes(lib):
    x, y, d = _run(lib, "staged")
    assert (y == x + 1).all()
    # a simdgroup's vector store and load touch 128 words, 4 in each of the 32 banks: 4 passes, none beyond the
    # fewest (as scalar instructions, each lane's word k of every lane falls in 8 banks: 4 passes each, 16 for four)
    assert d["threadgroup_instructions"] == 32 * 2
    assert (d["threadgroup_passes"], d["bank_conflicts"]) == (32 * 2 * 4, 0)
    assert d["device_instructions"] == 64 and d["device_segments"] == 512


def test_accesses_that_do_not_continue_each_other_stay_apart(lib):
    x, y, d = _run(lib, "apart")
    n = 1024
    assert np.allclose(y[:n], x[:n] + x[n:2 * n] + x[2 * n:3 * n] + x[3 * n:])
    # 4 loads a simdgroup, each 128 bytes in 2 segments, and one store
    assert (d["device_instructions"], d["device_segments"]) == (32 * 5, 32 * 5 * 2)


def test_a_load_takes_at_most_four_elements_of_its_type(lib):
    dev = metile.device("cpu")
    x = (np.arange(8 * 1024) % 7).astype(np.float16)
    y = np.zeros(1024, np.float32)
    d = dev.dispatch_threads(lib.function("eight"), (1024, 1, 1), (256, 1, 1), [x, y], profile=True).to_dict()
    assert (y == x.astype(np.float32).reshape(1024, 8).sum(axis=1)).all()
    # a simdgroup's 32 lanes x 16 bytes: two 8-byte loads a lane (not one of 16), each over the 512 bytes' 8
    # segments, half of each used, and one 4-byte store a lane in 2 segments
    assert (d["device_instructions"], d["device_segments"]) == (32 * 3, 32 * (2 * 8 + 2))
    assert d["load_coalescing_efficiency"] == 0.5
