/* rt_tests_faults.cpp - every fault kind becomes an error return with the right details; the driver checks after
 * each test that the runtime still runs a plain launch correctly. */
#include <sched.h>
#include <setjmp.h>
#include <signal.h>

#include <thread>

#include "rt_harness.h"

/* ---- divergence ------------------------------------------------------------------------------------------------- */

static void barrier_lines(void* const*, const mt_thread_pos* pos) {
    if (pos->thread_index_in_threadgroup % 2) mt_threadgroup_barrier(20);
    else mt_threadgroup_barrier(10);
}

/* Lanes of one simdgroup at two barrier lines: the simdgroup's arrival would count for one of them. */
RT_TEST(divergence_barrier_lines) {
    Launch l(barrier_lines);
    l.groups(3, 1, 1, 64, 1, 1);
    CHECK(l.run() == MT_FAULT_BARRIER_DIVERGENCE, "%s", l.describe().c_str());
    CHECK(l.f.line == 20 && l.f.has_other && l.f.other_line == 10, "%s", l.describe().c_str());
    CHECK(l.f.thread[0] == 1 && l.f.other_thread[0] == 0, "%s", l.describe().c_str());
    CHECK(strstr(l.f.message, "line 10") && strstr(l.f.message, "line 20"), "%s", l.f.message);
    return true;
}

static void exit_while_waiting(void* const*, const mt_thread_pos* pos) {
    if (pos->thread_index_in_threadgroup == pos->threads_per_threadgroup[0] - 1) return;
    mt_threadgroup_barrier(33);
}

/* A thread returning while others wait does not hold the barrier with Apple GPUs' counting (apple_barriers); by
 * default, and with the sanitizer, it is a fault: MSL requires every thread to execute the barrier. */
RT_TEST(divergence_exit_while_waiting) {
    Launch l(exit_while_waiting);
    l.groups(1, 1, 1, 40, 1, 1);
    l.d.apple_barriers = 1;
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    l.d.apple_barriers = 0;
    CHECK(l.run() == MT_FAULT_BARRIER_DIVERGENCE, "%s", l.describe().c_str());
    l.d.sanitize = 1;
    CHECK(l.run() == MT_FAULT_BARRIER_DIVERGENCE, "%s", l.describe().c_str());
    CHECK(strstr(l.f.message, "returned from the kernel") != nullptr, "%s", l.f.message);
    CHECK(l.f.thread[0] == 39 && l.f.line == 33, "%s", l.describe().c_str());
    CHECK(strstr(l.f.message, "line 33") != nullptr, "%s", l.f.message);
    return true;
}

/* Collectives in divergent control flow run over the lanes that reach the same (site, line): each lane records the
 * mask it took part with and the sum of the published values of the lanes in it. */
static void record(void* const* buffers, const mt_thread_pos* pos, uint32_t live, const unsigned char* base) {
    uint32_t* out = static_cast<uint32_t*>(buffers[0]) + 2 * pos->thread_index_in_threadgroup;
    uint32_t sum = 0;
    for (uint32_t j = 0; j < 32; ++j)
        if ((live >> j) & 1u) {
            uint32_t v;
            memcpy(&v, base + j * MT_SLOT_BYTES, 4);
            sum += v;
        }
    out[0] = live;
    out[1] = sum;
}

static void exchange_lines(void* const* buffers, const mt_thread_pos* pos) {
    const uint32_t lane = pos->thread_index_in_simdgroup, v = lane + 1;
    uint32_t live;
    const unsigned char* s;
    if (lane < 16) s = exchange_live(&v, 4, 2, 5, &live);
    else s = exchange_live(&v, 4, 2, 6, &live);
    record(buffers, pos, live, s);
}

static void exchange_sites(void* const* buffers, const mt_thread_pos* pos) {
    const uint32_t lane = pos->thread_index_in_simdgroup, v = lane + 1;
    uint32_t live;
    const unsigned char* s = exchange_live(&v, 4, lane == 3 ? 9 : 2, 5, &live);
    record(buffers, pos, live, s);
}

/* lanes 0..9 take part in an exchange the others skip, then all meet at the next one (on a later line) */
static void exchange_then_reconverge(void* const* buffers, const mt_thread_pos* pos) {
    const uint32_t lane = pos->thread_index_in_simdgroup;
    uint32_t v = lane + 1, live;
    if (lane < 10) {
        const unsigned char* s = exchange_live(&v, 4, 2, 7, &live);
        memcpy(&v, s + 9 * MT_SLOT_BYTES, 4); /* lane 9's value: 10 */
    }
    const unsigned char* s = exchange_live(&v, 4, 2, 8, &live);
    record(buffers, pos, live, s);
}

static void exchange_vs_simd_barrier(void* const* buffers, const mt_thread_pos* pos) {
    const uint32_t lane = pos->thread_index_in_simdgroup, v = lane + 1;
    uint32_t live = 0;
    const unsigned char* s = nullptr;
    if (lane < 8) s = exchange_live(&v, 4, 2, 13, &live);
    else mt_simdgroup_barrier(14);
    if (s) record(buffers, pos, live, s);
}

static bool active_sets(std::string& why, mt_kernel_fn fn, int reverse, const uint32_t* masks, const uint32_t* sums) {
    uint32_t out[64] = {0};
    Launch l(fn);
    l.groups(1, 1, 1, 32, 1, 1).buffers({out});
    l.d.reverse_order = reverse;
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    for (uint32_t i = 0; i < 32; ++i)
        CHECK(out[2 * i] == masks[i] && out[2 * i + 1] == sums[i], "lane %u: mask %#x sum %u, expected %#x %u", i,
              out[2 * i], out[2 * i + 1], masks[i], sums[i]);
    return true;
}

RT_TEST(exchange_active_sets) {
    uint32_t masks[32], sums[32];
    for (int reverse = 0; reverse < 2; ++reverse) {
        for (uint32_t i = 0; i < 32; ++i) {
            masks[i] = i < 16 ? 0xffffu : 0xffff0000u;
            sums[i] = i < 16 ? 136 : 392; /* 1+..+16, 17+..+32 */
        }
        if (!active_sets(why, exchange_lines, reverse, masks, sums)) return false;
        for (uint32_t i = 0; i < 32; ++i) {
            masks[i] = i == 3 ? 0x8u : ~0x8u;
            sums[i] = i == 3 ? 4 : 528 - 4;
        }
        if (!active_sets(why, exchange_sites, reverse, masks, sums)) return false;
        for (uint32_t i = 0; i < 32; ++i) {
            masks[i] = 0xffffffffu;
            sums[i] = 10 * 10 + (528 - 55); /* lanes 0..9 publish 10, the others lane + 1 */
        }
        if (!active_sets(why, exchange_then_reconverge, reverse, masks, sums)) return false;
        for (uint32_t i = 0; i < 32; ++i) {
            masks[i] = i < 8 ? 0xffu : 0;
            sums[i] = i < 8 ? 36 : 0;
        }
        if (!active_sets(why, exchange_vs_simd_barrier, reverse, masks, sums)) return false;
    }
    return true;
}

/* Lanes that leave the kernel after a collective while the others wait at the threadgroup barrier: the barrier
 * comes first in program order (line 12), each simdgroup arrives with its lanes 0-7, the collective then runs over
 * lanes 8-31. Fine on an Apple GPU (apple_barriers); by default the barrier, which lanes 8-31 never execute, is a
 * fault. */
static void exchange_vs_barrier(void* const* buffers, const mt_thread_pos* pos) {
    uint32_t* out = static_cast<uint32_t*>(buffers[0]);
    const uint32_t v = 1, sg = pos->simdgroup_index_in_threadgroup;
    uint32_t live;
    if (pos->thread_index_in_simdgroup < 8) {
        mt_threadgroup_barrier(12);
        ++out[64 + sg]; /* barrier lanes passed, per simdgroup */
    } else {
        exchange_live(&v, 4, 2, 13, &live);
        out[pos->thread_index_in_threadgroup] = live == 0xffffff00u ? out[64 + sg] : 99;
    }
}

RT_TEST(divergence_exit_after_collective_while_others_wait) {
    uint32_t* out = static_cast<uint32_t*>(mt_buffer_alloc(66 * 4));
    Launch b(exchange_vs_barrier);
    b.groups(1, 1, 1, 64, 1, 1).buffers({out});
    b.d.apple_barriers = 1;
    for (int reverse = 0; reverse < 2; ++reverse) {
        memset(out, 0, 66 * 4);
        b.d.reverse_order = reverse;
        CHECK(b.run() == MT_OK, "%s", b.describe().c_str());
        for (uint32_t i = 0; i < 64; ++i)
            CHECK(i % 32 < 8 || out[i] == 8, "reverse %d thread %u: %u", reverse, i, out[i]);
    }
    b.d.apple_barriers = 0;
    const int32_t status = b.run();
    mt_buffer_free(out);
    CHECK(status == MT_FAULT_BARRIER_DIVERGENCE, "%s", b.describe().c_str());
    CHECK(b.f.line == 12 && strstr(b.f.message, "waits at a simd collective at line 13"), "%s",
          b.describe().c_str());
    CHECK(b.f.thread[0] % 32 >= 8 && b.f.has_other && b.f.other_line == 12, "%s", b.describe().c_str());
    return true;
}

/* ---- signals ---------------------------------------------------------------------------------------------------- */

__attribute__((noinline)) static void oob_write(void* const* buffers, const mt_thread_pos* pos) {
    float* out = static_cast<float*>(buffers[0]);
    out[250 + pos->thread_index_in_threadgroup] = 1.0f; /* 1000-byte buffer */
}

RT_TEST(fault_bad_access) {
    float* buf = static_cast<float*>(mt_buffer_alloc(1000));
    Launch l(oob_write);
    l.groups(2, 1, 1, 8, 1, 1).buffers({buf});
    const int32_t status = l.run();
    mt_buffer_free(buf);
    CHECK(status == MT_FAULT_BAD_ACCESS, "%s", l.describe().c_str());
    /* the buffer's end is padded to 16 bytes: thread 2 writes the first byte of the guard page */
    CHECK(l.f.address == reinterpret_cast<uintptr_t>(buf) + 1008, "%s", l.describe().c_str());
    CHECK(l.f.thread[0] == 2 && l.f.threadgroup[0] == 0, "%s", l.describe().c_str());
    CHECK(strstr(l.f.module, "rt_tests") && pc_in(l.f, reinterpret_cast<void*>(oob_write), 256), "%s",
          l.describe().c_str());
    return true;
}

static void tg_overrun(void* const*, const mt_thread_pos* pos) {
    uint32_t* a = static_cast<uint32_t*>(mt_threadgroup_alloc(0, 100 * 4, 16, 1));
    a[pos->thread_index_in_threadgroup] = 1; /* 128 threads, 100 elements */
}

RT_TEST(fault_threadgroup_guard) {
    Launch l(tg_overrun);
    l.groups(1, 1, 1, 128, 1, 1);
    CHECK(l.run() == MT_FAULT_BAD_ACCESS, "%s", l.describe().c_str());
    CHECK(l.f.thread[0] == 100, "%s", l.describe().c_str());
    return true;
}

__attribute__((noinline)) static uint64_t recurse(volatile uint64_t* p, uint64_t depth) {
    volatile uint64_t frame[64];
    frame[0] = depth;
    frame[63] = *p;
    return depth == ~0ull ? 0 : recurse(frame, depth + 1) + frame[0];
}

static void overflow_kernel(void* const* buffers, const mt_thread_pos*) {
    uint64_t seed = 1;
    *static_cast<uint64_t*>(buffers[0]) = recurse(&seed, 0);
}

RT_TEST(fault_stack_overflow) {
    uint64_t out = 0;
    Launch l(overflow_kernel);
    l.groups(1, 1, 1, 4, 1, 1).buffers({&out});
    CHECK(l.run() == MT_FAULT_STACK_OVERFLOW, "%s", l.describe().c_str());
    Launch big(overflow_kernel);
    big.groups(1, 1, 1, 4, 1, 1).buffers({&out});
    big.d.stack_bytes = 256 * 1024;
    CHECK(big.run() == MT_FAULT_STACK_OVERFLOW && strstr(big.f.message, "256 KiB"), "%s", big.describe().c_str());
    return true;
}

static void divide(void* const* buffers, const mt_thread_pos* pos) {
    volatile int divisor = static_cast<int>(pos->thread_index_in_threadgroup) - 5;
    int* out = static_cast<int*>(buffers[0]);
    out[pos->thread_index_in_threadgroup] = 1000 / divisor;
}

RT_TEST(fault_division_by_zero) {
    int out[16];
    Launch l(divide);
    l.groups(1, 1, 1, 16, 1, 1).buffers({out});
    const int32_t status = l.run();
#if defined(__x86_64__)
    CHECK(status == MT_FAULT_DIV_ZERO, "%s", l.describe().c_str());
#else /* an undefined-behaviour trap where the hardware does not trap */
    CHECK(status == MT_FAULT_DIV_ZERO || status == MT_FAULT_TRAP, "%s", l.describe().c_str());
#endif
    CHECK(l.f.thread[0] == 5 && pc_in(l.f, reinterpret_cast<void*>(divide), 256), "%s", l.describe().c_str());
    return true;
}

static void trap_kernel(void* const*, const mt_thread_pos* pos) {
    if (pos->thread_index_in_threadgroup == 3) __builtin_trap();
}

RT_TEST(fault_trap) {
    Launch l(trap_kernel);
    l.groups(1, 1, 1, 8, 1, 1);
    CHECK(l.run() == MT_FAULT_TRAP && l.f.thread[0] == 3, "%s", l.describe().c_str());
    CHECK(strstr(l.f.message, "undefined-behaviour trap"), "%s", l.f.message);
    return true;
}

__attribute__((noinline)) static void spin_kernel(void* const* buffers, const mt_thread_pos* pos) {
    volatile uint32_t* flag = static_cast<volatile uint32_t*>(buffers[0]);
    if (pos->threadgroup_position_in_grid[0] == 1)
        while (*flag == 0) {
        }
}

static void spin_yield_kernel(void* const* buffers, const mt_thread_pos*) {
    volatile uint32_t* flag = static_cast<volatile uint32_t*>(buffers[0]);
    while (*flag == 0) mt_yield();
}

RT_TEST(fault_hang_watchdog) {
    uint32_t flag = 0;
    Launch l(spin_kernel);
    l.groups(4, 1, 1, 2, 1, 1).buffers({&flag});
    l.d.workers = 2;
    l.d.timeout_s = 0.5;
    CHECK(l.run() == MT_FAULT_HANG, "%s", l.describe().c_str());
    CHECK(l.f.threadgroup[0] == 1 && pc_in(l.f, reinterpret_cast<void*>(spin_kernel), 256), "%s",
          l.describe().c_str());
    Launch y(spin_yield_kernel);
    y.groups(1, 1, 1, 4, 1, 1).buffers({&flag});
    y.d.timeout_s = 0.3;
    CHECK(y.run() == MT_FAULT_HANG, "%s", y.describe().c_str());
    return true;
}

static void kernel_fault_kernel(void* const*, const mt_thread_pos* pos) {
    if (pos->thread_index_in_threadgroup == 6) mt_kernel_fault(MT_FAULT_KERNEL, "index out of range", 42);
    mt_threadgroup_barrier(3);
}

RT_TEST(fault_from_kernel_code) {
    Launch l(kernel_fault_kernel);
    l.groups(2, 1, 1, 8, 1, 1);
    CHECK(l.run() == MT_FAULT_KERNEL, "%s", l.describe().c_str());
    CHECK(l.f.line == 42 && l.f.thread[0] == 6 && strcmp(l.f.message, "index out of range") == 0, "%s",
          l.describe().c_str());
    return true;
}

static void faulting_many(void* const* buffers, const mt_thread_pos* pos) {
    mt_threadgroup_barrier(1);
    if (pos->threadgroup_position_in_grid[0] % 7 == 3) *static_cast<volatile int*>(buffers[0]) = 1;
    mt_threadgroup_barrier(2);
}

static struct sigaction g_seen;
static void user_handler(int) {}

RT_TEST(fault_many_workers_and_handlers_restored) {
    struct sigaction mine, before;
    memset(&mine, 0, sizeof mine);
    mine.sa_handler = user_handler;
    sigaction(SIGSEGV, &mine, &before);
    bool ok = true;
    for (int k = 0; k < 10 && ok; ++k) {
        Launch l(faulting_many);
        l.groups(64, 1, 1, 32, 1, 1).buffers({nullptr});
        l.d.workers = 4;
        ok = l.run() == MT_FAULT_BAD_ACCESS && l.f.address == 0 && l.f.threadgroup[0] % 7 == 3;
        if (!ok) why = l.describe();
    }
    sigaction(SIGSEGV, &before, &g_seen);
    CHECK(ok, "%s", why.c_str());
    CHECK(g_seen.sa_handler == user_handler, "the SIGSEGV handler was not restored");
    return true;
}

/* A fault on a thread that is not running kernel code, during a launch, goes to the handler installed before. */
static sigjmp_buf g_user_jmp;
static volatile sig_atomic_t g_user_faults = 0;
static void user_segv(int, siginfo_t*, void*) {
    g_user_faults = g_user_faults + 1;
    siglongjmp(g_user_jmp, 1);
}

static void wait_for_release(void* const* buffers, const mt_thread_pos*) {
    volatile int* state = static_cast<volatile int*>(buffers[0]);
    *state = 1;
    while (*state != 2) mt_yield();
}

RT_TEST(fault_outside_kernel_code_is_chained) {
    struct sigaction mine, before;
    memset(&mine, 0, sizeof mine);
    mine.sa_sigaction = user_segv;
    mine.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &mine, &before);
    volatile int state = 0;
    Launch l(wait_for_release);
    l.groups(1, 1, 1, 1, 1, 1).buffers({const_cast<int*>(&state)});
    int32_t status = -1;
    std::thread launcher([&] { status = l.run(); });
    while (state != 1) sched_yield();
    if (sigsetjmp(g_user_jmp, 1) == 0) *static_cast<volatile int*>(nullptr) = 1; /* our own bug, not the kernel's */
    state = 2;
    launcher.join();
    sigaction(SIGSEGV, &before, nullptr);
    CHECK(g_user_faults == 1, "the application's handler ran %d times", static_cast<int>(g_user_faults));
    CHECK(status == MT_OK, "%s", l.describe().c_str());
    return true;
}
