#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

template <typename T>
inline simdgroup_matrix<T, 8, 8> mt_matrix_of(T x, T y) {
    simdgroup_matrix<T, 8, 8> m;
    m.thread_elements()[0] = x;
    m.thread_elements()[1] = y;
    return m;
}

kernel void mtile_matmul(device const half* A [[buffer(0)]],
                         device const half* B [[buffer(1)]],
                         device float* C [[buffer(2)]],
                         constant int& M [[buffer(3)]],
                         constant int& N [[buffer(4)]],
                         constant int& K [[buffer(5)]],
                         uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]]) {
    const int row0 = static_cast<int>(threadgroup_position_in_grid.x) * 8;
    const int col0 = static_cast<int>(threadgroup_position_in_grid.y) * 16;
    simdgroup_matrix<float, 8, 8> acc0 = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    simdgroup_matrix<float, 8, 8> acc1 = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (int k = 0; k < K; k = static_cast<uint>(K) - static_cast<uint>(k) > 8u ? k + 8 : K) {
        simdgroup_matrix<half, 8, 8> a;
        simdgroup_load(a, A + ((row0 * K) + k), K, 0, false);
        const int t0 = k * N;
        const int t1 = col0 + 0;
        simdgroup_matrix<half, 8, 8> b0;
        simdgroup_load(b0, B + (t0 + t1), N, 0, false);
        simdgroup_matrix<float, 8, 8> d0;
        simdgroup_multiply_accumulate(d0, a, b0, acc0);
        const int t2 = col0 + 8;
        simdgroup_matrix<half, 8, 8> b1;
        simdgroup_load(b1, B + (t0 + t2), N, 0, false);
        simdgroup_matrix<float, 8, 8> d1;
        simdgroup_multiply_accumulate(d1, a, b1, acc1);
        acc0 = d0;
        acc1 = d1;
    }
    const simdgroup_matrix<float, 8, 8> same = mt_matrix_of(acc1.thread_elements()[0], acc1.thread_elements()[1]);
    const int t3 = row0 * N;
    const int t4 = col0 + 0;
    simdgroup_store(acc0, C + (t3 + t4), N, 0, false);
    const int t5 = col0 + 8;
    simdgroup_store(same, C + (t3 + t5), N, 0, false);
}
