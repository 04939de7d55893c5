/* mt_sanitizer_hooks.cpp - the __tsan_* entry points that `-fsanitize=thread` instrumentation calls, implemented
 * for metile's sanitizer instead of ThreadSanitizer's run-time library.
 *
 * A sanitized kernel library is built from the kernel object (compiled with -fsanitize=thread, compile step only)
 * and this file (compiled WITHOUT -fsanitize), linked without libtsan. Every symbol here has hidden visibility, so
 * each kernel library carries its own copy. Plain reads and writes go to mt_san_access in the runtime, which
 * tracks threadgroup memory only; atomics are performed with the compiler's __atomic builtins (always sequentially
 * consistent: at least as strong as any order asked for) and reported to mt_san_access as atomic accesses
 * (is_write 2 = load, 3 = store, 4 = read-modify-write), which never race with one another.
 *
 * The list covers what g++ >= 12 and clang >= 15 emit for C++ code: found with `-fsanitize=thread -c` and `nm -u`
 * on code using plain, vector, unaligned, volatile and virtual accesses, memcpy/memset and atomics of all widths.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mt_runtime.h"

#define HOOK extern "C" __attribute__((visibility("hidden"), no_sanitize_thread, used))
#define CALLER_PC ((const char*)__builtin_return_address(0) - 1) /* inside the instrumented call instruction */

namespace {

enum : int32_t { kRead = 0, kWrite = 1, kAtomicLoad = 2, kAtomicStore = 3, kAtomicRmw = 4 };

inline __attribute__((always_inline)) void access(const volatile void* p, size_t n, int32_t kind, const void* pc) {
    mt_san_access(const_cast<const void*>(p), static_cast<uint32_t>(n), kind, pc);
}

} // namespace

HOOK void __tsan_init() {}
HOOK void __tsan_func_entry(void*) {}
HOOK void __tsan_func_exit() {}
HOOK void __tsan_ignore_thread_begin() {}
HOOK void __tsan_ignore_thread_end() {}

#define MT_SIZED(N)                                                                                                  \
    HOOK void __tsan_read##N(void* p) { access(p, N, kRead, CALLER_PC); }                                            \
    HOOK void __tsan_write##N(void* p) { access(p, N, kWrite, CALLER_PC); }                                          \
    HOOK void __tsan_unaligned_read##N(const void* p) { access(p, N, kRead, CALLER_PC); }                            \
    HOOK void __tsan_unaligned_write##N(void* p) { access(p, N, kWrite, CALLER_PC); }                                \
    HOOK void __tsan_volatile_read##N(void* p) { access(p, N, kRead, CALLER_PC); }                                   \
    HOOK void __tsan_volatile_write##N(void* p) { access(p, N, kWrite, CALLER_PC); }                                 \
    HOOK void __tsan_unaligned_volatile_read##N(void* p) { access(p, N, kRead, CALLER_PC); }                         \
    HOOK void __tsan_unaligned_volatile_write##N(void* p) { access(p, N, kWrite, CALLER_PC); }                       \
    HOOK void __tsan_compound_read_write##N(void* p) {                                                               \
        access(p, N, kRead, CALLER_PC);                                                                              \
        access(p, N, kWrite, CALLER_PC);                                                                             \
    }                                                                                                                \
    HOOK void __tsan_unaligned_compound_read_write##N(void* p) {                                                     \
        access(p, N, kRead, CALLER_PC);                                                                              \
        access(p, N, kWrite, CALLER_PC);                                                                             \
    }
MT_SIZED(1)
MT_SIZED(2)
MT_SIZED(4)
MT_SIZED(8)
MT_SIZED(16)
#undef MT_SIZED

HOOK void __tsan_read_range(void* p, size_t n) { access(p, n, kRead, CALLER_PC); }
HOOK void __tsan_write_range(void* p, size_t n) { access(p, n, kWrite, CALLER_PC); }
HOOK void __tsan_vptr_read(void** p) { access(p, sizeof(void*), kRead, CALLER_PC); }
HOOK void __tsan_vptr_update(void** p, void* new_value) {
    if (*p != new_value) access(p, sizeof(void*), kWrite, CALLER_PC);
}

/* clang turns memcpy/memmove/memset intrinsics into these */
HOOK void* __tsan_memcpy(void* dst, const void* src, size_t n) {
    access(src, n, kRead, CALLER_PC);
    access(dst, n, kWrite, CALLER_PC);
    return __builtin_memcpy(dst, src, n);
}
HOOK void* __tsan_memmove(void* dst, const void* src, size_t n) {
    access(src, n, kRead, CALLER_PC);
    access(dst, n, kWrite, CALLER_PC);
    return __builtin_memmove(dst, src, n);
}
HOOK void* __tsan_memset(void* dst, int c, size_t n) {
    access(dst, n, kWrite, CALLER_PC);
    return __builtin_memset(dst, c, n);
}

HOOK void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
HOOK void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

#define SC __ATOMIC_SEQ_CST
#define MT_ATOMIC_RMW(N, T, OP)                                                                                      \
    HOOK T __tsan_atomic##N##_##OP(volatile T* a, T v, int) {                                                        \
        access(a, sizeof(T), kAtomicRmw, CALLER_PC);                                                                 \
        return __atomic_##OP(a, v, SC);                                                                              \
    }
#define MT_ATOMIC(N, T)                                                                                              \
    HOOK T __tsan_atomic##N##_load(const volatile T* a, int) {                                                       \
        access(a, sizeof(T), kAtomicLoad, CALLER_PC);                                                                \
        return __atomic_load_n(a, SC);                                                                               \
    }                                                                                                                \
    HOOK void __tsan_atomic##N##_store(volatile T* a, T v, int) {                                                    \
        access(a, sizeof(T), kAtomicStore, CALLER_PC);                                                               \
        __atomic_store_n(a, v, SC);                                                                                  \
    }                                                                                                                \
    HOOK T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {                                                    \
        access(a, sizeof(T), kAtomicRmw, CALLER_PC);                                                                 \
        return __atomic_exchange_n(a, v, SC);                                                                        \
    }                                                                                                                \
    MT_ATOMIC_RMW(N, T, fetch_add)                                                                                   \
    MT_ATOMIC_RMW(N, T, fetch_sub)                                                                                   \
    MT_ATOMIC_RMW(N, T, fetch_and)                                                                                   \
    MT_ATOMIC_RMW(N, T, fetch_or)                                                                                    \
    MT_ATOMIC_RMW(N, T, fetch_xor)                                                                                   \
    MT_ATOMIC_RMW(N, T, fetch_nand)                                                                                  \
    HOOK int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* expected, T v, int, int) {                 \
        access(a, sizeof(T), kAtomicRmw, CALLER_PC);                                                                 \
        return __atomic_compare_exchange_n(a, expected, v, false, SC, SC);                                           \
    }                                                                                                                \
    HOOK int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* expected, T v, int, int) {                   \
        access(a, sizeof(T), kAtomicRmw, CALLER_PC);                                                                 \
        return __atomic_compare_exchange_n(a, expected, v, false, SC, SC);                                           \
    }                                                                                                                \
    HOOK T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T expected, T v, int, int) {                      \
        access(a, sizeof(T), kAtomicRmw, CALLER_PC);                                                                 \
        __atomic_compare_exchange_n(a, &expected, v, false, SC, SC);                                                 \
        return expected;                                                                                             \
    }
MT_ATOMIC(8, uint8_t)
MT_ATOMIC(16, uint16_t)
MT_ATOMIC(32, uint32_t)
MT_ATOMIC(64, uint64_t)
#undef MT_ATOMIC
#undef MT_ATOMIC_RMW
#undef SC

#ifdef __SIZEOF_INT128__
/* 128-bit atomics (only with cmpxchg16b / LSE-class hardware in the kernel); done under a striped spin lock so that
 * this file needs no libatomic. Every 128-bit atomic of an instrumented kernel comes through here. */
namespace {
typedef unsigned __int128 u128;
volatile int g_locks128[64];
inline volatile int* lock_for(const volatile void* a) {
    return &g_locks128[(reinterpret_cast<uintptr_t>(a) >> 4) & 63];
}
struct Lock128 {
    volatile int* l;
    explicit Lock128(const volatile void* a) : l(lock_for(a)) {
        while (__atomic_exchange_n(l, 1, __ATOMIC_ACQUIRE)) {
        }
    }
    ~Lock128() { __atomic_store_n(l, 0, __ATOMIC_RELEASE); }
};
} // namespace
#define MT_RMW128(OP, EXPR)                                                                                          \
    HOOK u128 __tsan_atomic128_##OP(volatile u128* a, u128 v, int) {                                                 \
        access(a, 16, kAtomicRmw, CALLER_PC);                                                                        \
        Lock128 g(a);                                                                                                \
        const u128 old = *a;                                                                                         \
        *a = EXPR;                                                                                                   \
        return old;                                                                                                  \
    }
HOOK u128 __tsan_atomic128_load(const volatile u128* a, int) {
    access(a, 16, kAtomicLoad, CALLER_PC);
    Lock128 g(a);
    return *a;
}
HOOK void __tsan_atomic128_store(volatile u128* a, u128 v, int) {
    access(a, 16, kAtomicStore, CALLER_PC);
    Lock128 g(a);
    *a = v;
}
MT_RMW128(exchange, v)
MT_RMW128(fetch_add, old + v)
MT_RMW128(fetch_sub, old - v)
MT_RMW128(fetch_and, old & v)
MT_RMW128(fetch_or, old | v)
MT_RMW128(fetch_xor, old ^ v)
MT_RMW128(fetch_nand, ~(old & v))
#undef MT_RMW128
HOOK int __tsan_atomic128_compare_exchange_strong(volatile u128* a, u128* expected, u128 v, int, int) {
    access(a, 16, kAtomicRmw, CALLER_PC);
    Lock128 g(a);
    if (*a == *expected) {
        *a = v;
        return 1;
    }
    *expected = *a;
    return 0;
}
HOOK int __tsan_atomic128_compare_exchange_weak(volatile u128* a, u128* expected, u128 v, int mo, int fmo) {
    return __tsan_atomic128_compare_exchange_strong(a, expected, v, mo, fmo);
}
HOOK u128 __tsan_atomic128_compare_exchange_val(volatile u128* a, u128 expected, u128 v, int mo, int fmo) {
    __tsan_atomic128_compare_exchange_strong(a, &expected, v, mo, fmo);
    return expected;
}
#endif
