#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

kernel void mtile_add(device const float* X [[buffer(0)]],
                      device const float* Y [[buffer(1)]],
                      device float* Out [[buffer(2)]],
                      constant int& N [[buffer(3)]],
                      uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    const int tid = static_cast<int>(thread_position_in_grid.x);
    const int base = tid * 4;
    const int t0 = base + 4;
    if (t0 <= N) {
        const float4 xv = *(device const float4*)(X + base);
        const float4 yv = *(device const float4*)(Y + base);
        *(device float4*)(Out + base) = xv + yv;
    } else {
        for (int j = base; j < min(t0, N); j += 1) {
            const float x = X[j];
            const float y = Y[j];
            Out[j] = x + y;
        }
    }
}
