#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

kernel void mtile_lanes(device const float* X [[buffer(0)]],
                        device float* Out [[buffer(1)]]) {
    const float4 v = *(device const float4*)(X);
    *(device float4*)(Out) = float4(v[1], v[0], v[3], v[2]) - float4(max(max(v[0], v[1]), max(v[2], v[3])));
}
