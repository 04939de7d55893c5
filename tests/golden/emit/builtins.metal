#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

kernel void mtile_builtins(device uint* Out [[buffer(0)]],
                           uint3 thread_position_in_grid [[thread_position_in_grid]],
                           uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]],
                           uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
                           uint3 threads_per_threadgroup [[threads_per_threadgroup]],
                           uint3 threadgroups_per_grid [[threadgroups_per_grid]],
                           uint3 threads_per_grid [[threads_per_grid]],
                           uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],
                           uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],
                           uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]],
                           uint simdgroups_per_threadgroup [[simdgroups_per_threadgroup]],
                           uint threads_per_simdgroup [[threads_per_simdgroup]]) {
    const int linear = static_cast<int>(thread_position_in_grid.x + (threads_per_grid.x * (thread_position_in_grid.y + (threads_per_grid.y * thread_position_in_grid.z))));
    const int t0 = linear * 23;
    Out[t0 + 0] = thread_position_in_grid.x;
    Out[t0 + 1] = thread_position_in_grid.y;
    Out[t0 + 2] = thread_position_in_grid.z;
    Out[t0 + 3] = threadgroup_position_in_grid.x;
    Out[t0 + 4] = threadgroup_position_in_grid.y;
    Out[t0 + 5] = threadgroup_position_in_grid.z;
    Out[t0 + 6] = thread_position_in_threadgroup.x;
    Out[t0 + 7] = thread_position_in_threadgroup.y;
    Out[t0 + 8] = thread_position_in_threadgroup.z;
    Out[t0 + 9] = threads_per_threadgroup.x;
    Out[t0 + 10] = threads_per_threadgroup.y;
    Out[t0 + 11] = threads_per_threadgroup.z;
    Out[t0 + 12] = threadgroups_per_grid.x;
    Out[t0 + 13] = threadgroups_per_grid.y;
    Out[t0 + 14] = threadgroups_per_grid.z;
    Out[t0 + 15] = threads_per_grid.x;
    Out[t0 + 16] = threads_per_grid.y;
    Out[t0 + 17] = threads_per_grid.z;
    Out[t0 + 18] = thread_index_in_threadgroup;
    Out[t0 + 19] = thread_index_in_simdgroup;
    Out[t0 + 20] = simdgroup_index_in_threadgroup;
    Out[t0 + 21] = simdgroups_per_threadgroup;
    Out[t0 + 22] = threads_per_simdgroup;
}
