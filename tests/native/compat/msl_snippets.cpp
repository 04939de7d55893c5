/* msl_snippets.cpp - MSL constructs as the front end hands them to the C++ compiler (compiled with
 * -fsyntax-only). The text below is MSL after the front end's rewrites only: kernels are static functions without
 * [[...]] attributes, `threadgroup T a[N];` in a body is a reference to runtime storage, half literals are
 * half(...) and float literals carry an f. Everything else (address spaces, mem_flags, pragmas, using namespace
 * metal, #include <metal_stdlib>) is left to the header. */
#include "metal_compat.h"
#line 1 "snippets.metal"
#include <metal_stdlib>
#include <metal_simdgroup_matrix>
#include <metal_atomic>
using namespace metal;

constant float kScale = 0.5f;
constant int kTable[4] = {1, 2, 3, 4};

struct Params {
    uint n;
    float alpha;
    packed_float3 offset;
};

static inline float gelu(float x) { return 0.5f * x * (1.0f + tanh(0.7978845608f * (x + 0.044715f * x * x * x))); }
static inline void accumulate(thread float4& acc, device const float4* p, uint i) { acc += p[i]; }
static inline half hscale(threadgroup const half* t, uint i) { return t[i] * half(2.0f); }

static void mtile_matmul(
    device const float* A ,
    device const float* B ,
    device float* C ,
    constant int& M ,
    constant int& N ,
    constant int& K ,
    uint3 tgp_id ,
    uint sgid ,
    uint slid
) {
    const uint block_row = tgp_id.x * 64u;
    const uint block_col = ((tgp_id.y + tgp_id.x) % ((uint(N) + 63u) / 64u)) * 64u;
    using __mt_tg_t0 = float [2112]; __mt_tg_t0& shared_a_0 = *reinterpret_cast<__mt_tg_t0*>(mt_threadgroup_alloc(0u, sizeof(__mt_tg_t0), alignof(__mt_tg_t0), __LINE__));
    using __mt_tg_t1 = float [2112]; __mt_tg_t1& shared_a_1 = *reinterpret_cast<__mt_tg_t1*>(mt_threadgroup_alloc(1u, sizeof(__mt_tg_t1), alignof(__mt_tg_t1), __LINE__));
    simdgroup_matrix<float, 8, 8> acc[2][2];
    acc[0][0] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    acc[0][1] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    acc[1][0] = simdgroup_float8x8(0.0f);
    acc[1][1] = simdgroup_matrix<float, 8, 8>(0);
    simdgroup_matrix<float, 8, 8> a_tile[2], b_tile[2];
    threadgroup float* sa_curr = shared_a_0;
    threadgroup float* sa_next = shared_a_1;
    for (int kb = 0; kb < K; kb += 32) {
        for (uint _i = sgid * 32u + slid; _i < 2048u; _i += 128u) {
            uint _r = _i / 32u, _c = _i % 32u;
            uint _gr = block_row + _r, _gc = kb + _c;
            sa_next[_r * 33 + _c] = (_gr < uint(M) && _gc < uint(K)) ? A[_gr * K + _gc] : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        #pragma clang loop unroll(full)
        for (int kk = 0; kk < 32; kk += 8) {
            simdgroup_load(a_tile[0], sa_curr + kk, 33);
            simdgroup_load(a_tile[1], sa_curr + 8 * 33 + kk, 33);
            simdgroup_load(b_tile[0], B + kk * N + block_col, N);
            simdgroup_load(b_tile[1], B, ulong(N), ulong2(block_col + 8, kk), false);
            simdgroup_load(b_tile[1], B, N, 0, true);
            simdgroup_multiply_accumulate(acc[0][0], a_tile[0], b_tile[0], acc[0][0]);
            simdgroup_multiply_accumulate(acc[1][1], a_tile[1], b_tile[1], acc[1][1]);
        }
        threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
        { threadgroup float* _t = sa_curr; sa_curr = sa_next; sa_next = _t; }
    }
    if (block_row + 8 <= uint(M)) {
        simdgroup_store(acc[0][0], C + block_row * N + block_col, N);
        simdgroup_matrix<half, 8, 8> _out;
        _out.thread_elements()[0] = half(acc[0][1].thread_elements()[0]);
        _out.thread_elements()[1] = half(acc[0][1].thread_elements()[1]);
        float2 te = acc[1][0].thread_elements();
        C[0] = te.x + float(_out.thread_elements()[1]);
        simdgroup_store(acc[1][1], C, ulong(N), ulong2(0, 8), true);
    }
}

static void mtile_softmax(
    device const float* X ,
    device float* Out ,
    device half* H ,
    constant int& N ,
    constant Params& params ,
    uint tgp_id_x ,
    uint lid ,
    uint sgid ,
    uint slid
) {
    float _acc_0 = -1e+38f;
    for (int v2 = 0; v2 < (N / 1024) * 1024; v2 += 1024) {
        int v4 = v2 + static_cast<int>(lid) * 4;
        uint off = tgp_id_x * static_cast<uint>(N) + static_cast<uint>(v4);
        float4 v9 = *(device const float4*)(X + off);
        _acc_0 = max(_acc_0, max(max(v9.x, v9.y), max(v9.z, v9.w)));
        float4 e = exp(v9 - _acc_0) / 2.0f;
        *(device float4*)(Out + off) = e;
        accumulate(e, (device const float4*)X, lid);
        e.xy = e.yx * kScale;
        e.zw += float2(fast::exp(e.x), precise::sqrt(abs(e.y)));
        float3 rgb = e.rgb * e.a + float3(params.offset);
        Out[lid] = rgb.r + dot(rgb, float3(1.0f)) + length(e) + gelu(e.w);
    }
    using __mt_tg_t2 = float [8]; __mt_tg_t2& shared_reduce_0 = *reinterpret_cast<__mt_tg_t2*>(mt_threadgroup_alloc(2u, sizeof(__mt_tg_t2), alignof(__mt_tg_t2), __LINE__));
    using __mt_tg_t3 = half [64]; __mt_tg_t3& tile_h = *reinterpret_cast<__mt_tg_t3*>(mt_threadgroup_alloc(3u, sizeof(__mt_tg_t3), alignof(__mt_tg_t3), __LINE__));
    float v12;
    {
        float _simd_val = simd_max(_acc_0);
        if (slid == 0u) shared_reduce_0[sgid] = _simd_val;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float _partial = (lid < 8u) ? shared_reduce_0[lid] : 0.0f;
        float _result = simd_sum(_partial) + simd_shuffle_xor(_partial, 1) + simd_shuffle_down(_partial, 2u);
        if (lid == 0u) shared_reduce_0[0] = _result;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        v12 = shared_reduce_0[0];
    }
    tile_h[lid % 64u] = half(v12);
    half h = hscale(tile_h, lid % 64u) + half(1.5f) * H[lid];
    H[lid] = h > half(0.0f) ? h : half(0);
    half4 h4 = half4(h, h, half(1.0f), half(2.0f));
    h4 = select(h4, -h4, h4 < half(0.0f));
    H[lid + 1] = h4.w * h4.x + dot(h4.xy, h4.zw);
    bfloat bf = bfloat(v12) * bfloat(2.0f);
    Out[lid] += float(bf) + float(kTable[lid % 4u]) + as_type<float>(as_type<uint>(v12));
    int mixed = int(lid) - 3;
    uint u = uint(mixed) + lid;
    Out[u % 4u] = float(mixed < 0 ? -mixed : mixed) + float(popcount(u)) + float(clz(u));
    if (simd_all(v12 > 0.0f) || simd_any(isnan(v12))) Out[0] = float(uint64_t(simd_ballot(v12 > 0.0f)) & 1u);
    Out[1] = quad_sum(v12) + quad_shuffle_xor(v12, 1u) + simd_prefix_exclusive_sum(v12) + simd_broadcast(v12, 0u);
    simdgroup_barrier(mem_flags::mem_none);
}

static void mtile_atomics(
    device atomic_uint* counter ,
    device atomic_float* total ,
    device uint* out ,
    uint tid ,
    uint lid
) {
    using __mt_tg_t4 = atomic_int; __mt_tg_t4& local = *reinterpret_cast<__mt_tg_t4*>(mt_threadgroup_alloc(4u, sizeof(__mt_tg_t4), alignof(__mt_tg_t4), __LINE__));
    if (lid == 0) atomic_store_explicit(&local, 0, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&local, 1, memory_order_relaxed);
    uint old = atomic_fetch_add_explicit(counter, 1u, memory_order_relaxed);
    atomic_fetch_add_explicit(total, 0.5f, memory_order_relaxed);
    uint expected = old + 1;
    atomic_compare_exchange_weak_explicit(counter, &expected, expected + 1, memory_order_relaxed, memory_order_relaxed);
    out[tid] = atomic_load_explicit(counter, memory_order_relaxed) + uint(atomic_load_explicit(&local, memory_order_relaxed));
    atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
}
#line 1 "snippets.metal.entry.cpp"
extern "C" __attribute__((visibility("default"))) void __mt_entry_all(void* const* __b, const mt_thread_pos* __p) {
    mtile_matmul((device const float*)__b[0], (device const float*)__b[1], (device float*)__b[2], *(constant int*)__b[3],
                 *(constant int*)__b[4], *(constant int*)__b[5],
                 uint3(__p->threadgroup_position_in_grid[0], __p->threadgroup_position_in_grid[1],
                       __p->threadgroup_position_in_grid[2]),
                 uint(__p->simdgroup_index_in_threadgroup), uint(__p->thread_index_in_simdgroup));
    mtile_softmax((device const float*)__b[0], (device float*)__b[1], (device half*)__b[2], *(constant int*)__b[3],
                  *(constant Params*)__b[4], uint(__p->threadgroup_position_in_grid[0]),
                  uint(__p->thread_position_in_threadgroup[0]), uint(__p->simdgroup_index_in_threadgroup),
                  uint(__p->thread_index_in_simdgroup));
    mtile_atomics((device atomic_uint*)__b[0], (device atomic_float*)__b[1], (device uint*)__b[2],
                  uint(__p->thread_position_in_grid[0]), uint(__p->thread_position_in_threadgroup[0]));
}
