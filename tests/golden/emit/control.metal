#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

kernel void mtile_control(device const float* X [[buffer(0)]],
                          device const float* Vin [[buffer(1)]],
                          device const half* Hin [[buffer(2)]],
                          device float* Out [[buffer(3)]],
                          device float* VOut [[buffer(4)]],
                          device int* Cnt [[buffer(5)]],
                          device float* Tot [[buffer(6)]],
                          uint3 thread_position_in_grid [[thread_position_in_grid]],
                          uint3 thread_position_in_threadgroup [[thread_position_in_threadgroup]],
                          uint thread_index_in_simdgroup [[thread_index_in_simdgroup]]) {
    threadgroup float buf[64];
    const int tid = static_cast<int>(thread_position_in_grid.x);
    const int lid = static_cast<int>(thread_position_in_threadgroup.x);
    const int lane = static_cast<int>(thread_index_in_simdgroup);
    const float x = X[tid];
    buf[lid] = x;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const float nb = buf[63 - lid];
    threadgroup_barrier(mem_flags::mem_none);
    threadgroup_barrier(mem_flags::mem_device);
    threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    const float shx = simd_shuffle_xor(x, 1);
    const float bc = simd_broadcast(x, 3);
    const float r_sum = simd_sum(x);
    const float r_prod = simd_product(x);
    const float r_max = simd_max(x);
    const float r_min = simd_min(x);
    float r;
    if (x > 0.0f) {
        r = x * 2.0f;
    } else {
        r = -x;
    }
    int n = tid % 5;
    int acc = 0;
    while (true) {
        const bool again = n > 0;
        if (!again) break;
        const int next_n_0 = n - 1;
        const int next_acc_1 = acc + n;
        n = next_n_0;
        acc = next_acc_1;
    }
    int fa = 0;
    int fb = 1;
    for (int i = 0; i < (tid % 10); i += 1) {
        const int next_fa_2 = fb;
        const int next_fb_3 = fa + fb;
        fa = next_fa_2;
        fb = next_fb_3;
    }
    const int t4 = tid * 4;
    const float4 v = *(device const float4*)(Vin + t4);
    const half4 hv = *(device const half4*)(Hin + t4);
    const float4 t5 = float4(0.0f);
    const float4 w = select(v, t5, v < t5) + static_cast<float4>(hv);
    const float4 t6 = static_cast<float4>(static_cast<int4>(v));
    *(device float4*)(VOut + t4) = float4(w[3], t6[1], w[1], t6[3]);
    const int t7 = tid * 10;
    Out[t7 + 0] = nb;
    Out[t7 + 1] = shx;
    Out[t7 + 2] = bc;
    Out[t7 + 3] = r_sum;
    Out[t7 + 4] = r_prod;
    Out[t7 + 5] = r_max;
    Out[t7 + 6] = r_min;
    Out[t7 + 7] = r;
    Out[t7 + 8] = static_cast<float>(acc);
    Out[t7 + 9] = static_cast<float>(fa);
    if (lane == 0) {
        atomic_fetch_add_explicit((device atomic_int*)(Cnt), 1, memory_order_relaxed);
    }
    atomic_fetch_add_explicit((device atomic_float*)(Tot), x, memory_order_relaxed);
}
