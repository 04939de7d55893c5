#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

kernel void mtile_row_sum(device const float* X [[buffer(0)]],
                          device float* Out [[buffer(1)]],
                          constant int& N [[buffer(2)]],
                          uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]],
                          uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
                          uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],
                          uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]]) {
    threadgroup float partials[8];
    const int row = static_cast<int>(threadgroup_position_in_grid.x);
    const int lid = static_cast<int>(thread_position_in_threadgroup.x);
    const int sg = static_cast<int>(simdgroup_index_in_threadgroup);
    const uint lane = thread_index_in_simdgroup;
    device const float* const row_ptr = X + (row * N);
    float acc = 0.0f;
    for (int i = lid; i < N; i = static_cast<uint>(N) - static_cast<uint>(i) > 256u ? i + 256 : N) {
        const float x = row_ptr[i];
        acc = acc + x;
    }
    const float s = simd_sum(acc);
    if (lane == 0u) {
        partials[sg] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float p = (lid < 8) ? partials[lid] : 0.0f;
    const float t = simd_sum(p);
    if (lid == 0) {
        Out[row] = t;
    }
}
