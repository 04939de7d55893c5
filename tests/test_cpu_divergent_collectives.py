"""simd and quad collectives in divergent control flow on the CPU device: they run over the lanes that reach the
same call (the active lanes), as on Apple GPUs; lanes that skipped it, wait elsewhere or exited take no part, and a
shuffle from a lane that takes no part gives the reading lane its own value. Checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import metile

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
LANES = np.arange(32)


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


def run(cpu, body: str, x: np.ndarray, width: int, n: int = 64, tpt: int = 64) -> np.ndarray:
    fn = cpu.compile(HEAD + body, name="divergent.metal").function("k")
    out = np.full(n * width, -7.0, np.float32)
    cpu.dispatch_threads(fn, (n, 1, 1), (tpt, 1, 1), [x, out])
    return out.reshape(n, width)


PARTIAL = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i];
    device float* o = out + i * 6;
    if (lane < 13) {
        o[0] = simd_sum(v);
        o[1] = simd_max(v);
        o[2] = simd_prefix_exclusive_sum(v);
        o[3] = simd_shuffle_xor(v, ushort(8));
        o[4] = float(uint(uint64_t(simd_ballot(v > 0.0f))));
        o[5] = float(uint(uint64_t(simd_active_threads_mask())));
    }
}
"""


def test_collectives_over_the_lanes_of_a_branch(cpu):
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    o = run(cpu, PARTIAL, x, 6)
    for sg in range(2):
        v = x[sg * 32:sg * 32 + 13]
        rows = o[sg * 32:sg * 32 + 13]
        np.testing.assert_allclose(rows[:, 0], v.sum(), rtol=1e-5)
        assert (rows[:, 1] == v.max()).all()
        np.testing.assert_allclose(rows[:, 2], np.cumsum(v) - v, rtol=1e-5, atol=1e-6)
        partner = LANES[:13] ^ 8
        # lanes 5..12 read lanes 13..20, which are not active: they get their own value
        want = np.where(partner < 13, v[np.minimum(partner, 12)], v)
        np.testing.assert_array_equal(rows[:, 3], want)
        assert (rows[:, 4] == sum(1 << j for j in range(13) if v[j] > 0)).all()
        assert (rows[:, 5] == (1 << 13) - 1).all()
        assert (o[sg * 32 + 13:(sg + 1) * 32] == -7).all()


IF_ELSE_THEN_ALL = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i];
    float a;
    if (lane % 2 == 0) {
        a = simd_sum(v);
    } else {
        a = simd_max(v);
    }
    float b = simd_sum(v);        // every lane again
    float c = v;
    if (lane >= 20) c = simd_prefix_inclusive_sum(v);
    float d = simd_min(c);        // every lane again
    out[i * 4 + 0] = a;
    out[i * 4 + 1] = b;
    out[i * 4 + 2] = c;
    out[i * 4 + 3] = d;
}
"""


def test_if_else_arms_and_reconvergence(cpu):
    x = np.random.default_rng(2).standard_normal(64).astype(np.float32)
    o = run(cpu, IF_ELSE_THEN_ALL, x, 4)
    for sg in range(2):
        v = x[sg * 32:(sg + 1) * 32]
        rows = o[sg * 32:(sg + 1) * 32]
        even, odd = LANES % 2 == 0, LANES % 2 == 1
        np.testing.assert_allclose(rows[even, 0], v[even].sum(), rtol=1e-5)
        assert (rows[odd, 0] == v[odd].max()).all()
        np.testing.assert_allclose(rows[:, 1], v.sum(), rtol=1e-5)
        c = v.copy()
        c[20:] = np.cumsum(v[20:])
        np.testing.assert_allclose(rows[:, 2], c, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rows[:, 3], np.float32(c.min()), rtol=1e-6)


EARLY_EXIT = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i];
    float acc = 0.0f;
    for (uint it = 0; it < 4; ++it) {
        if (lane >= 8u * (4u - it)) break;   // lanes leave the loop early: 32, 24, 16, 8 lanes per iteration
        acc += simd_sum(v);
    }
    float q = 0.0f;
    if (lane < 16) {
        if (lane % 4 < 2) q = quad_sum(v);
    } else {
        if (lane == 30) return;             // exits: takes no part in what follows
    }
    out[i * 3 + 0] = acc;
    out[i * 3 + 1] = simd_sum(v);
    out[i * 3 + 2] = q;
}
"""


def test_loops_left_early_quads_and_exited_lanes(cpu):
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    o = run(cpu, EARLY_EXIT, x, 3)
    for sg in range(2):
        v = x[sg * 32:(sg + 1) * 32]
        rows = o[sg * 32:(sg + 1) * 32]
        sums = [v[:8 * (4 - it)].sum() for it in range(4)]
        want_acc = [sum(sums[it] for it in range(4) if lane < 8 * (4 - it)) for lane in range(32)]
        live = LANES != 30
        np.testing.assert_allclose(rows[live, 0], np.array(want_acc)[live], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rows[live, 1], v[live].sum(), rtol=1e-5)
        assert (rows[30] == -7).all()
        quads = np.array([v[4 * (lane // 4):4 * (lane // 4) + 2].sum() if lane < 16 and lane % 4 < 2 else 0.0
                          for lane in range(32)])
        np.testing.assert_allclose(rows[live, 2], quads[live], rtol=1e-5, atol=1e-6)


def test_a_collective_after_lanes_wait_at_the_threadgroup_barrier(cpu):
    src = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    threadgroup float t[64];
    float v = x[i];
    if (lane < 5) v = simd_sum(v);     // the others already wait at the barrier below
    t[i] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[i] = t[63 - i];
}
"""
    x = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    o = run(cpu, src, x, 1)[:, 0]
    want = x.copy()
    for sg in range(2):
        want[sg * 32:sg * 32 + 5] = x[sg * 32:sg * 32 + 5].sum()
    np.testing.assert_allclose(o, want[::-1], rtol=1e-5)
