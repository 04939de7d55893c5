/* runtime_copy.cpp - mt_copy: the copies of arrays into device memory before a launch and back after it.
 *
 * The CPU device copies every array argument into guarded device memory and the written ones back
 * (metile/metal/cpu/dispatch.py); for large arrays those copies, not the kernel, can be most of a launch (Liger's
 * embedding copies an 8 MiB table in, and an 8 MiB gradient in and back). A plain memcpy reads each destination cache
 * line before writing it (a write-allocate) and leaves the copy in the caches, evicting what the kernel and the
 * application use next; from kStreamBytes up, on x86-64, mt_copy writes with non-temporal stores instead, which go to
 * memory without either: a third less memory traffic (measured on a shared 2-core x86-64 machine: an 8 MiB copy took
 * 1.0 ms instead of 1.8 ms). Below that size, and elsewhere, it is memcpy. The stores are ordered before the
 * function returns (sfence), so the workers of the launch that follows, or the application after it, read them.
 *
 * A host service of the Python binding (runtime_api.py), which kernels never call: it is declared there and here,
 * not in mt_runtime.h, which every kernel build includes (and is keyed by).
 */
#include "runtime_internal.h"

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define MT_STREAM_COPY 1
#endif

namespace {

constexpr size_t kStreamBytes = size_t(1) << 20; /* the size of a core's L2 on common x86-64 parts */

#ifdef MT_STREAM_COPY
void stream_copy(char* dst, const char* src, size_t bytes) {
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    memcpy(dst, src, head);
    size_t i = head;
    for (; i + 64 <= bytes; i += 64) {
        const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
        const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
        const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
        _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
    }
    _mm_sfence();
    memcpy(dst + i, src + i, bytes - i);
}
#endif

} // namespace

/* Copy `bytes` bytes from `src` to `dst`, which do not overlap. */
MT_EXPORT void mt_copy(void* dst, const void* src, size_t bytes) {
#ifdef MT_STREAM_COPY
    if (bytes >= kStreamBytes) {
        stream_copy(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
        return;
    }
#endif
    memcpy(dst, src, bytes);
}
