#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace mpp::tensor_ops;

kernel void mtile_gemm(device const half* A [[buffer(0)]],
                       device const half* B [[buffer(1)]],
                       device float* C [[buffer(2)]],
                       constant int& M [[buffer(3)]],
                       constant int& N [[buffer(4)]],
                       constant int& K [[buffer(5)]],
                       uint3 threadgroup_position_in_grid [[threadgroup_position_in_grid]],
                       uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],
                       uint thread_index_in_simdgroup [[thread_index_in_simdgroup]],
                       uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]]) {
    threadgroup half scratch_f16[1408];
    threadgroup float scratch_f32[1024];
    threadgroup half* const region_f16 = scratch_f16;
    threadgroup half* const region_f16_1 = scratch_f16 + 768;
    threadgroup float* const region_f32 = scratch_f32;
    constexpr auto tacc_desc = matmul2d_descriptor(32, 32, 16, false, false, false, matmul2d_descriptor::mode::multiply_accumulate);
    matmul2d<tacc_desc, execution_simdgroups<4>> tacc_op;
    auto tacc = tacc_op.get_destination_cooperative_tensor<tensor<threadgroup half, dextents<int32_t, 2>, tensor_inline>, tensor<threadgroup half, dextents<int32_t, 2>, tensor_inline>, float>();
    for (uint16_t i = 0; i < tacc.get_capacity(); ++i) {
        if (tacc.is_valid_element(i)) {
            tacc[i] = 0.0f;
        }
    }
    for (int k0_1 = 0; k0_1 < K; k0_1 = static_cast<uint>(K) - static_cast<uint>(k0_1) > 16u ? k0_1 + 16 : K) {
        const int t0 = static_cast<int>(threadgroup_position_in_grid.x) * 32;
        const int t1 = static_cast<int>(thread_index_in_threadgroup);
        const int t2 = t1 / 16;
        const int t3 = t0 + t2;
        const int t4 = t1 % 16;
        const int t5 = k0_1 + t4;
        const half a_1 = ((t3 < M) && (t5 < K)) ? (A + (t3 * K))[t5] : half(0.0f);
        const int t6 = t1 + 128;
        const int t7 = t6 / 16;
        const int t8 = t0 + t7;
        const int t9 = t6 % 16;
        const int t10 = k0_1 + t9;
        const half a_2 = ((t8 < M) && (t10 < K)) ? (A + (t8 * K))[t10] : half(0.0f);
        const int t11 = t1 + 256;
        const int t12 = t11 / 16;
        const int t13 = t0 + t12;
        const int t14 = t11 % 16;
        const int t15 = k0_1 + t14;
        const half a_3 = ((t13 < M) && (t15 < K)) ? (A + (t13 * K))[t15] : half(0.0f);
        const int t16 = t1 + 384;
        const int t17 = t16 / 16;
        const int t18 = t0 + t17;
        const int t19 = t16 % 16;
        const int t20 = k0_1 + t19;
        const half a_4 = ((t18 < M) && (t20 < K)) ? (A + (t18 * K))[t20] : half(0.0f);
        const int t21 = t1 / 32;
        const int t22 = k0_1 + t21;
        const int t23 = static_cast<int>(threadgroup_position_in_grid.y) * 32;
        const int t24 = t1 % 32;
        const int t25 = t23 + t24;
        const half b_1 = ((t22 < K) && (t25 < N)) ? (B + (t22 * N))[t25] : half(0.0f);
        const int t26 = t6 / 32;
        const int t27 = k0_1 + t26;
        const int t28 = t6 % 32;
        const int t29 = t23 + t28;
        const half b_2 = ((t27 < K) && (t29 < N)) ? (B + (t27 * N))[t29] : half(0.0f);
        const int t30 = t11 / 32;
        const int t31 = k0_1 + t30;
        const int t32 = t11 % 32;
        const int t33 = t23 + t32;
        const half b_3 = ((t31 < K) && (t33 < N)) ? (B + (t31 * N))[t33] : half(0.0f);
        const int t34 = t16 / 32;
        const int t35 = k0_1 + t34;
        const int t36 = t16 % 32;
        const int t37 = t23 + t36;
        const half b_4 = ((t35 < K) && (t37 < N)) ? (B + (t35 * N))[t37] : half(0.0f);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        region_f16[(t2 * 24) + t4] = a_1;
        region_f16[(t7 * 24) + t9] = a_2;
        region_f16[(t12 * 24) + t14] = a_3;
        region_f16[(t17 * 24) + t19] = a_4;
        region_f16_1[(t21 * 40) + t24] = b_1;
        region_f16_1[(t26 * 40) + t28] = b_2;
        region_f16_1[(t30 * 40) + t32] = b_3;
        region_f16_1[(t34 * 40) + t36] = b_4;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        {
            constexpr auto desc = matmul2d_descriptor(32, 32, 16, false, false, false, matmul2d_descriptor::mode::multiply_accumulate);
            matmul2d<desc, execution_simdgroups<4>> op;
            auto ta = tensor<threadgroup half, dextents<int32_t, 2>, tensor_inline>(region_f16, dextents<int32_t, 2>(16, 32), array<int32_t, 2>{1, int32_t(24)});
            auto tb = tensor<threadgroup half, dextents<int32_t, 2>, tensor_inline>(region_f16_1, dextents<int32_t, 2>(32, 16), array<int32_t, 2>{1, int32_t(40)});
            op.run(ta, tb, tacc);
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    tacc.store(tensor<threadgroup float, dextents<int32_t, 2>, tensor_inline>(region_f32, dextents<int32_t, 2>(32, 32), array<int32_t, 2>{1, int32_t(32)}));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int t38 = static_cast<int>(simdgroup_index_in_threadgroup);
    const int t39 = (t38 / 2) * 16;
    const int t40 = t39 * 32;
    const int t41 = (t38 % 2) * 16;
    simdgroup_matrix<float, 8, 8> acc_4;
    simdgroup_load(acc_4, region_f32 + (t40 + t41), 32, 0, false);
    const int t42 = t41 + 8;
    simdgroup_matrix<float, 8, 8> acc_5;
    simdgroup_load(acc_5, region_f32 + (t40 + t42), 32, 0, false);
    const int t43 = (t39 + 8) * 32;
    simdgroup_matrix<float, 8, 8> acc_6;
    simdgroup_load(acc_6, region_f32 + (t43 + t41), 32, 0, false);
    simdgroup_matrix<float, 8, 8> acc_7;
    simdgroup_load(acc_7, region_f32 + (t43 + t42), 32, 0, false);
    const int t44 = static_cast<int>(thread_index_in_simdgroup);
    const int fr = ((t44 / 2) % 4) + ((t44 / 16) * 4);
    const int fc = ((t44 % 2) * 2) + (((t44 / 8) % 2) * 4);
    const int t45 = static_cast<int>(threadgroup_position_in_grid.x) * 32;
    const int t46 = static_cast<int>(threadgroup_position_in_grid.y) * 32;
    device float* const line = (C + ((t45 + (t39 + fr)) * N)) + (t46 + 0);
    simdgroup_matrix<float, 8, 8> frag = acc_4;
    simdgroup_matrix<float, 8, 8> frag_1 = acc_5;
    simdgroup_matrix<float, 8, 8> frag_2 = acc_6;
    simdgroup_matrix<float, 8, 8> frag_3 = acc_7;
    for (int p = 0; p < 4; p += 1) {
        const int t47 = (p / 2) * 8;
        device float* const line_1 = line + (t47 * N);
        const bool t48 = (t45 + (t39 + (fr + t47))) < M;
        const int t49 = t41 + (fc + ((p % 2) * 8));
        if (t48 && ((t46 + t49) < N)) {
            line_1[t49] = frag.thread_elements()[0];
        }
        const int t50 = t49 + 1;
        if (t48 && ((t46 + t50) < N)) {
            line_1[t50] = frag.thread_elements()[1];
        }
        const simdgroup_matrix<float, 8, 8> next_frag_51 = frag_1;
        const simdgroup_matrix<float, 8, 8> next_frag_1_52 = frag_2;
        const simdgroup_matrix<float, 8, 8> next_frag_2_53 = frag_3;
        const simdgroup_matrix<float, 8, 8> next_frag_3_54 = frag;
        frag = next_frag_51;
        frag_1 = next_frag_1_52;
        frag_2 = next_frag_2_53;
        frag_3 = next_frag_3_54;
    }
}
