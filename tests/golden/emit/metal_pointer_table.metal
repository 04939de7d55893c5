#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

kernel void mtile_pointer_table(device const long* Table [[buffer(0)]],
                                device float* Out [[buffer(1)]],
                                uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    const int tid = static_cast<int>(thread_position_in_grid.x);
    const long addr = Table[tid];
    device float* const row = reinterpret_cast<device float*>(addr);
    const float x = row[2];
    Out[tid] = x;
}
