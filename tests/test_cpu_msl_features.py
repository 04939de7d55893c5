"""MSL language features executed end to end on the CPU device and checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import metile

HEAD = "#include <metal_stdlib>\n#include <metal_simdgroup_matrix>\nusing namespace metal;\n"


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


def run(cpu, body: str, name: str, threads, tpt, args, **kw):
    fn = cpu.compile(HEAD + body, name=name).function("k")
    cpu.dispatch_threads(fn, threads, tpt, args, **kw)


SIMD = """
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              device uint* bits [[buffer(2)]],
              uint i [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]) {
    float v = x[i];
    device float* o = out + i * 12;
    o[0] = simd_sum(v);
    o[1] = simd_max(v);
    o[2] = simd_min(v);
    o[3] = simd_shuffle_xor(v, 5u);
    o[4] = simd_broadcast(v, 7u);
    o[5] = simd_shuffle(v, (lane * 3u) % 32u);
    o[6] = simd_shuffle_up(v, 2u);
    o[7] = simd_shuffle_down(v, 3u);
    o[8] = simd_prefix_inclusive_sum(v);
    o[9] = simd_prefix_exclusive_sum(v);
    o[10] = quad_sum(v);
    o[11] = quad_shuffle_xor(v, 1u);
    device uint* b = bits + i * 4;
    b[0] = simd_all(v > -100.0f) ? 1u : 0u;
    b[1] = simd_any(v > 1.5f) ? 1u : 0u;
    b[2] = uint(uint64_t(simd_ballot(v > 0.0f)));
    b[3] = uint(simd_product(int(lane % 3u == 0u ? 2 : 1)));
}
"""


def test_simd_collectives(cpu):
    n = 64
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    out = np.zeros(n * 12, np.float32)
    bits = np.zeros(n * 4, np.uint32)
    run(cpu, SIMD, "simd.metal", (n, 1, 1), (n, 1, 1), [x, out, bits])
    o = out.reshape(n, 12)
    b = bits.reshape(n, 4)
    for sg in range(n // 32):
        v = x[sg * 32:(sg + 1) * 32]
        rows = o[sg * 32:(sg + 1) * 32]
        lanes = np.arange(32)
        np.testing.assert_allclose(rows[:, 0], v.sum(), rtol=1e-5)
        assert (rows[:, 1] == v.max()).all() and (rows[:, 2] == v.min()).all()
        np.testing.assert_array_equal(rows[:, 3], v[lanes ^ 5])
        assert (rows[:, 4] == v[7]).all()
        np.testing.assert_array_equal(rows[:, 5], v[(lanes * 3) % 32])
        np.testing.assert_array_equal(rows[2:, 6], v[:-2])
        np.testing.assert_array_equal(rows[:-3, 7], v[3:])
        np.testing.assert_allclose(rows[:, 8], np.cumsum(v), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rows[:, 9], np.cumsum(v) - v, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(rows[:, 10], np.repeat(v.reshape(8, 4).sum(1), 4), rtol=1e-5)
        np.testing.assert_array_equal(rows[:, 11], v[lanes ^ 1])
        bb = b[sg * 32:(sg + 1) * 32]
        assert (bb[:, 0] == 1).all()
        assert (bb[:, 1] == int((v > 1.5).any())).all()
        assert (bb[:, 2] == sum(1 << int(j) for j in np.nonzero(v > 0)[0])).all()
        assert (bb[:, 3] == 2 ** 11).all()


def test_collectives_with_exited_lanes_and_partial_simdgroups(cpu):
    body = """
kernel void k(device float* out [[buffer(0)]], constant uint& n [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
    if (i >= n) return;
    out[i] = simd_sum(1.0f);
}
"""
    out = np.zeros(48, np.float32)
    run(cpu, body, "partial.metal", (48, 1, 1), (48, 1, 1), [out, np.uint32(40)])
    np.testing.assert_array_equal(out[:32], 32)
    np.testing.assert_array_equal(out[32:40], 8)
    np.testing.assert_array_equal(out[40:], 0)


MMA = """
kernel void k(device const float* a [[buffer(0)]], device const half* b [[buffer(1)]],
              device float* c [[buffer(2)]], device float* lanes [[buffer(3)]],
              uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 ma;
    simdgroup_half8x8 mb;
    simdgroup_load(ma, a, 16, ulong2(8, 0));            // columns 8..15 of a 8x16 matrix
    simdgroup_load(mb, b, 8, ulong2(0, 0), true);       // transposed
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
    simdgroup_multiply_accumulate(acc, ma, mb, acc);
    simdgroup_float8x8 id2 = simdgroup_float8x8(2.0f);
    simdgroup_multiply(acc, acc, id2);
    simdgroup_store(acc, c, 8);
    lanes[lane * 2] = ma.thread_elements()[0];
    lanes[lane * 2 + 1] = ma.thread_elements()[1];
}
"""


def test_simdgroup_matrix_load_transpose_multiply_store_and_lane_layout(cpu):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((8, 8)).astype(np.float16)
    c = np.zeros((8, 8), np.float32)
    lanes = np.zeros(64, np.float32)
    run(cpu, MMA, "mma.metal", (32, 1, 1), (32, 1, 1), [a, b, c, lanes])
    ma = a[:, 8:]
    want = (ma @ b.astype(np.float32).T + 1.0) * 2.0
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    for lane in range(32):
        row = (lane // 16) * 4 + (lane // 2) % 4
        col = ((lane // 8) % 2) * 4 + (lane % 2) * 2
        assert lanes[2 * lane] == ma[row, col] and lanes[2 * lane + 1] == ma[row, col + 1]


MMA_GROUPS = """
kernel void k(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
              device float* c [[buffer(2)]], uint g [[threadgroup_position_in_grid]],
              uint sg [[simdgroup_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]]) {
    const uint m = (g * 3u + sg) * 64u;
    simdgroup_float8x8 ma, mb;
    simdgroup_load(ma, a + m, 8);
    simdgroup_load(mb, b + m, 8);
    if (lane % 3u == 0u) ma.thread_elements()[1] = float(lane);
    const float s = simd_sum(float(lane));
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(s);
    simdgroup_multiply_accumulate(acc, ma, mb, acc);
    simdgroup_multiply_accumulate(acc, mb, ma, acc);
    simdgroup_store(acc, c + m, 8);
}
"""


def _lane_of(row: int, col: int) -> int:
    return (col // 2) % 2 + 2 * (row % 4) + 8 * (col // 4) + 16 * (row // 4)


def test_simdgroup_matrix_products_of_several_and_partial_simdgroups(cpu):
    """Each simdgroup of a threadgroup multiplies its own matrices, around another collective and after lanes wrote
    their own elements divergently; in a partial simdgroup (16 lanes) the elements of the lanes it lacks read as zero,
    whatever a full simdgroup of an earlier dispatch left there."""
    fn = cpu.compile(HEAD + MMA_GROUPS, name="mma_groups.metal").function("k")
    rng = np.random.default_rng(7)
    groups = 4
    a = rng.standard_normal((groups * 3, 8, 8)).astype(np.float32)
    b = rng.standard_normal((groups * 3, 8, 8)).astype(np.float32)
    c = np.zeros_like(a)
    cpu.dispatch_threadgroups(fn, (groups, 1, 1), (96, 1, 1), [a, b, c])
    ma = a.astype(np.float64)
    for lane in range(0, 32, 3):
        row = (lane // 16) * 4 + (lane // 2) % 4
        col = ((lane // 8) % 2) * 4 + (lane % 2) * 2
        ma[:, row, col + 1] = lane
    mb = b.astype(np.float64)
    np.testing.assert_allclose(c, 496.0 + ma @ mb + mb @ ma, rtol=1e-5, atol=1e-4)
    c[:] = -1.0
    cpu.dispatch_threadgroups(fn, (1, 1, 1), (80, 1, 1), [a, b, c])
    np.testing.assert_allclose(c[:2], 496.0 + ma[:2] @ mb[:2] + mb[:2] @ ma[:2], rtol=1e-5, atol=1e-4)
    half_a, half_b = ma[2].copy(), mb[2].copy()
    for row in range(8):
        for col in range(8):
            if _lane_of(row, col) >= 16:
                half_a[row, col] = half_b[row, col] = 0.0
    want = 120.0 + half_a @ half_b + half_b @ half_a
    np.testing.assert_allclose(c[2, :4], want[:4], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(c[2, 4:], -1.0)


ATOMICS = """
kernel void k(device atomic_uint* counter [[buffer(0)]], device atomic_float* total [[buffer(1)]],
              device uint* hist [[buffer(2)]], uint i [[thread_position_in_grid]],
              uint lid [[thread_position_in_threadgroup]]) {
    threadgroup atomic_int local;
    if (lid == 0) atomic_store_explicit(&local, 0, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&local, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
    atomic_fetch_add_explicit(total, 0.5f, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid == 0) hist[i / 128] = uint(atomic_load_explicit(&local, memory_order_relaxed));
}
"""


def test_device_and_threadgroup_atomics_across_workers(cpu):
    groups = 64
    counter = np.zeros(1, np.uint32)
    total = np.zeros(1, np.float32)
    hist = np.zeros(groups, np.uint32)
    run(cpu, ATOMICS, "atomics.metal", (groups * 128, 1, 1), (128, 1, 1), [counter, total, hist])
    assert counter[0] == groups * 128
    assert total[0] == groups * 128 * 0.5
    assert (hist == 128).all()


VECTORS = """
kernel void k(device const float4* x [[buffer(0)]], device float4* y [[buffer(1)]],
              device half4* h [[buffer(2)]], device int* misc [[buffer(3)]],
              uint i [[thread_position_in_grid]]) {
    float4 v = x[i];
    float4 w = v.wzyx;
    w.xy = v.zw * 2.0f;
    w.z += v[0];
    float3 t = float3(v.xy, 1.0h);
    y[i] = select(w, float4(t, v.w), v < float4(0.0f));
    h[i] = half4(fma(v, v, float4(1.0f)));
    if (i == 0) {
        misc[0] = as_type<int>(1.0f);
        misc[1] = int(clamp(7.5f, 0.0f, 3.0f) * 10.0f);
        misc[2] = int(mix(0.0f, 10.0f, 0.25f) * 100.0f);
        misc[3] = int(saturate(1.7f) * 10.0f);
        misc[4] = int(bfloat(1.00390625f) == bfloat(1.0f));
        misc[5] = int(precise::sqrt(16.0f) + fast::exp(0.0f));
        misc[6] = -7 / 2;
        misc[7] = -7 % 3;
    }
}
"""


def test_vectors_swizzles_half_bfloat_and_math(cpu):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    y = np.zeros_like(x)
    h = np.zeros((16, 4), np.float16)
    misc = np.zeros(8, np.int32)
    run(cpu, VECTORS, "vectors.metal", (16, 1, 1), (16, 1, 1), [x, y, h, misc])
    w = x[:, ::-1].copy()
    w[:, 0:2] = x[:, 2:4] * 2
    w[:, 2] += x[:, 0]
    t = np.stack([x[:, 0], x[:, 1], np.ones(16, np.float32), x[:, 3]], 1)
    np.testing.assert_allclose(y, np.where(x < 0, t, w), rtol=1e-6)
    np.testing.assert_allclose(h, (x * x + 1).astype(np.float16), rtol=1e-3)
    assert misc[0] == np.float32(1.0).view(np.int32)
    assert list(misc[1:]) == [30, 250, 10, 1, 5, -3, -1]


SCALAR_VECTORS = """
kernel void k(device const float* x [[buffer(0)]], device float4* f [[buffer(1)]], device int2* i2 [[buffer(2)]],
              device uint4* u4 [[buffer(3)]], device float2* f2 [[buffer(4)]], device half4* h4 [[buffer(5)]],
              uint i [[thread_position_in_grid]]) {
    const float a = x[4 * i], b = x[4 * i + 1], c = x[4 * i + 2], d = x[4 * i + 3];
    f[i] = float4(d, c, b, a);                                  // four floats, stored whole at once
    i2[i] = int2(int(a * 100.0f), -int(i) - 1);                 // ints
    u4[i] = uint4(i, 7u, uint(i * 3u), int(i) + 2);             // uints, one converted from an int
    f2[i] = float2(int(i) - 5, uint(i) * 2u);                   // floats converted from an int and a uint
    h4[i] = half4(a, 1.0f, half(b), c);                         // halves: element by element
}
"""


def test_vectors_from_scalars_keep_order_and_conversions(cpu):
    """A vector built from N scalars (gathered in a register on the CPU device) holds them in order, each converted
    to the element type, for float, int and uint vectors of 2 and 4 elements and element by element for halves."""
    rng = np.random.default_rng(5)
    n = 64
    x = rng.standard_normal(4 * n).astype(np.float32)
    f = np.zeros((n, 4), np.float32)
    i2 = np.zeros((n, 2), np.int32)
    u4 = np.zeros((n, 4), np.uint32)
    f2 = np.zeros((n, 2), np.float32)
    h4 = np.zeros((n, 4), np.float16)
    run(cpu, SCALAR_VECTORS, "scalar_vectors.metal", (n, 1, 1), (32, 1, 1), [x, f, i2, u4, f2, h4])
    q = x.reshape(n, 4)
    idx = np.arange(n)
    np.testing.assert_array_equal(f, q[:, ::-1])
    np.testing.assert_array_equal(i2, np.stack([(q[:, 0] * np.float32(100)).astype(np.int32), -idx - 1], 1))
    np.testing.assert_array_equal(u4, np.stack([idx, np.full(n, 7), idx * 3, idx + 2], 1).astype(np.uint32))
    np.testing.assert_array_equal(f2, np.stack([idx - 5, idx * 2], 1).astype(np.float32))
    np.testing.assert_array_equal(h4, np.stack([q[:, 0], np.ones(n), q[:, 1], q[:, 2]], 1).astype(np.float16))
