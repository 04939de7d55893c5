/* rt_san_kernels.cpp - kernels for the sanitizer tests. Compiled with -fsanitize=thread (compile step only) and
 * linked with mt_sanitizer_hooks.cpp into a shared library, as sanitized kernel libraries are. */
#include <stdint.h>

#include "mt_runtime.h"

#define KERNEL extern "C" __attribute__((visibility("default")))

/* reads threadgroup memory nobody wrote */
KERNEL void san_uninit(void* const* buffers, const mt_thread_pos* pos) {
    float* tg = static_cast<float*>(mt_threadgroup_alloc(0, 64 * 4, 16, 1));
    const uint32_t i = pos->thread_index_in_threadgroup;
    if (i != 5) tg[i] = 1.0f;
    mt_threadgroup_barrier(2);
    static_cast<float*>(buffers[0])[i] = tg[(i + 1) % 64];
}

/* [[threadgroup]] parameters only hold the fill: reading one before writing is uninitialised */
KERNEL void san_uninit_param(void* const* buffers, const mt_thread_pos* pos) {
    int* p = static_cast<int*>(mt_threadgroup_param(0));
    static_cast<int*>(buffers[0])[pos->thread_index_in_threadgroup] = p[3];
}

/* a K-loop without the barrier after the compute step: the next load overwrites what others still read */
KERNEL void san_race_missing_barrier(void* const* buffers, const mt_thread_pos* pos) {
    float* tile = static_cast<float*>(mt_threadgroup_alloc(0, 64 * 4, 16, 1));
    const uint32_t i = pos->thread_index_in_threadgroup, n = pos->threads_per_threadgroup[0];
    float acc = 0;
    for (int k = 0; k < 3; ++k) {
        tile[i] = static_cast<float>(k + i);
        mt_threadgroup_barrier(2);
        acc += tile[(i + 1) % n];
    }
    static_cast<float*>(buffers[0])[i] = acc;
}

/* two lanes of one simdgroup with no collective between write and read */
KERNEL void san_race_in_simdgroup(void* const* buffers, const mt_thread_pos* pos) {
    int* tg = static_cast<int*>(mt_threadgroup_alloc(0, 32 * 4, 16, 1));
    const uint32_t i = pos->thread_index_in_threadgroup;
    tg[i] = static_cast<int>(i);
    if (i & 1) static_cast<int*>(buffers[0])[i] = tg[i ^ 1]; /* lane 1 reads what lane 0 wrote */
}

/* two threads write one word */
KERNEL void san_race_write_write(void* const*, const mt_thread_pos* pos) {
    int* tg = static_cast<int*>(mt_threadgroup_alloc(0, 4, 4, 1));
    const uint32_t i = pos->thread_index_in_threadgroup;
    if (i == 0 || i == 40) *tg = static_cast<int>(i);
}

/* correct: barriers between phases, exchanges between lanes of a simdgroup, atomics on a counter */
KERNEL void san_clean(void* const* buffers, const mt_thread_pos* pos) {
    float* a = static_cast<float*>(mt_threadgroup_alloc(0, 128 * 4, 16, 1));
    uint32_t* counter = static_cast<uint32_t*>(mt_threadgroup_alloc(1, 4, 4, 2));
    int* p = static_cast<int*>(mt_threadgroup_param(0));
    const uint32_t i = pos->thread_index_in_threadgroup, n = pos->threads_per_threadgroup[0];
    if (i == 0) *counter = 0;
    if (i < 16) p[i] = static_cast<int>(i);
    mt_threadgroup_barrier(3);
    a[i] = static_cast<float>(i);
    mt_exchange_view view;
    mt_simd_exchange(&i, 4, 1, 4, &view); /* orders the lanes of this simdgroup */
    float s = a[i ^ 1];
    mt_threadgroup_barrier(5);
    s += a[(i + 7) % n];
    __atomic_fetch_add(counter, 1u, __ATOMIC_RELAXED);
    mt_threadgroup_barrier(6);
    a[(i + 3) % n] = s;
    mt_threadgroup_barrier(7);
    static_cast<float*>(buffers[0])[pos->thread_position_in_grid[0]] = a[i] + static_cast<float>(*counter + p[i % 16]);
}
