/* runtime_internal.h - data structures shared by the runtime*.cpp files of the CPU runtime (not part of the
 * contract; kernel code only sees mt_runtime.h).
 *
 * Model: a persistent pool of OS worker threads, and the thread calling mt_launch, which takes part in its launch
 * too (runtime.cpp). A launch hands out threadgroups from an atomic counter; a worker runs one threadgroup at a time
 * as one cooperative fiber per GPU thread. Fibers switch directly to one another (runtime_fiber.cpp) when they
 * block in a barrier or simd exchange (runtime_sched.cpp). Signals raised by kernel code, runtime-detected faults
 * and the watchdog all end in a siglongjmp to the worker's launch loop, which drops the threadgroup
 * (runtime_signals.cpp, runtime.cpp). The sanitizer keeps shadow state for threadgroup memory
 * (runtime_sanitizer.cpp).
 */
#ifndef METILE_RUNTIME_INTERNAL_H
#define METILE_RUNTIME_INTERNAL_H

#undef _FORTIFY_SOURCE /* siglongjmp leaves fiber stacks and the signal stack: no __longjmp_chk */

#if (defined(__x86_64__) || defined(__aarch64__)) && !defined(MT_NO_ASM_SWITCH) /* the latter tests the fallback */
#define MT_ASM_SWITCH 1
#elif defined(__APPLE__) && !defined(_XOPEN_SOURCE)
/* Darwin's <ucontext.h> (getcontext and makecontext, for the fallback switch) refuses to compile without
 * _XOPEN_SOURCE, which has to come before any system header; _DARWIN_C_SOURCE keeps Darwin's extensions */
#define _XOPEN_SOURCE 700
#define _DARWIN_C_SOURCE 1
#endif

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#include <utility>
#include <vector>

#ifndef MT_ASM_SWITCH
#include <ucontext.h>
#endif

#include "mt_runtime.h"
#include "runtime_platform.h"

#define MT_EXPORT extern "C" __attribute__((visibility("default")))

#pragma GCC visibility push(hidden)
namespace mtrt {

constexpr uint32_t kMaxThreads = 1024;
constexpr uint32_t kMaxSimdgroups = kMaxThreads / MT_SIMD_WIDTH;
constexpr size_t kDefaultStack = 64 * 1024;
constexpr size_t kMinStack = 16 * 1024;
constexpr size_t kMaxStack = 256u * 1024 * 1024;

size_t page_size();
/* PROT_NONE below each fiber stack: several pages (address space only), so that a frame with a large local array
 * still lands in it rather than in a neighbouring mapping */
inline size_t stack_guard_bytes() { return page_size() > 64 * 1024 ? page_size() : 64 * 1024; }
inline size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* ---- fibers (runtime_fiber.cpp) ----------------------------------------------------------------------------- */

struct Ctx {
#ifdef MT_ASM_SWITCH
    void* sp = nullptr; /* saved stack pointer; the callee-saved registers and FP control words sit below it */
#else
    ucontext_t uc;
#endif
};

struct Stack {
    char* map = nullptr; /* mapping: PROT_NONE guard (stack_guard_bytes), then the stack */
    size_t map_len = 0;
    char* lo = nullptr; /* lowest usable byte (the guard lies just below) */
    char* hi = nullptr; /* one past the highest usable byte */
};

enum Wait : uint8_t { kRunnable = 0, kTgBarrier, kSgBarrier, kExchange, kDone };

/* The fields a simd exchange touches come first, so that with the assembly switch they share one cache line with
 * the frames' depth and key. */
struct Worker;
struct alignas(64) Fiber {
    Ctx ctx;
    Worker* worker = nullptr; /* the worker whose pool holds it (simdgroup matrix products find it here, not in TLS) */
    uint32_t index = 0;
    uint8_t sg = 0, lane = 0;
    Wait wait = kRunnable;
    uint8_t mat_at = 0; /* where its elements sit in a simdgroup's 8x8 matrices: row * 8 + column of element 0 */
    uint32_t wait_line = 0, wait_site = 0; /* where it waits; wait_site 0 is a simdgroup barrier */
    uint32_t xbuf = 0;  /* slot buffer holding its published bytes, then the completed exchange's bytes */
    uint32_t xnext = 0; /* slot buffer its next exchange publishes into (each lane alternates) */
    uint32_t xmask = 0; /* lanes that took part in its last completed exchange */
    mt_frames frames;   /* where it is in the control flow around collectives (mt_runtime.h): while it waits, its
                           key, wait_line and wait_site are where (runtime_sched.cpp) */
    Stack stack;
    mt_thread_pos pos;
};

static_assert(offsetof(Fiber, frames) + offsetof(mt_frames, f) <= 64, "a simd exchange's fields share a cache line");

bool stack_alloc(Stack& s, size_t bytes);
void stack_free(Stack& s);
/* Make `f` start at mt_fiber_main(f) the next time it is switched to. */
void ctx_prepare(Fiber* f);
/* Save the running context in `from` and resume `to`. Returns when something switches back to `from`. */
#ifdef MT_ASM_SWITCH
extern "C" void mt_ctx_switch(void** save_sp, void* new_sp);
inline void ctx_switch(Ctx* from, Ctx* to) { mt_ctx_switch(&from->sp, to->sp); }
#else
void ctx_switch(Ctx* from, Ctx* to);
#endif
extern "C" [[noreturn]] void mt_fiber_main(Fiber* f);

/* ---- launches and workers ------------------------------------------------------------------------------------ */

/* Hardware watchpoints on the bytes before bound buffers (runtime_watch.cpp): kWatches of 8 bytes each, at addr[i]
 * in front of buffer[i], which starts at start[i]. */
constexpr uint32_t kWatches = 4;
struct WatchPlan {
    uint32_t n = 0;
    uintptr_t addr[kWatches] = {};
    uintptr_t start[kWatches] = {};
    uint32_t buffer[kWatches] = {};
};

struct SanCell; /* runtime_sanitizer.cpp */

struct Region { /* a [[threadgroup]] slot or parameter of one worker: bytes ending against a guard page */
    char* map = nullptr;
    size_t map_len = 0;
    char* ptr = nullptr;
    size_t bytes = 0, align = 0;
    uint64_t launch = 0;   /* last launch that used it (regions from older launches are not filled) */
    uint64_t tg_stamp = 0; /* last threadgroup that counted it towards the memory limit */
    SanCell* shadow = nullptr;
    size_t shadow_len = 0;
};

struct ProfLaunch; /* runtime_profile.cpp */
struct Prof;

struct Launch {
    mt_launch_desc d{};
    std::vector<size_t> param_bytes;
    size_t params_total = 0;
    size_t stack_bytes = 0;
    uint64_t id = 0;
    uint64_t total_tgs = 0;
    uint32_t participants = 0;
    uint32_t remaining = 0; /* pool workers still running (guarded by the pool mutex) */
    uint64_t deadline_ns = 0; /* CLOCK_MONOTONIC time the watchdog stops the launch at (0: none) */
    uint64_t join_at_ns = 0;  /* a launch the caller runs too: when pool workers take it up (0: at once) */
    alignas(64) std::atomic<uint64_t> next_tg{0};
    alignas(64) std::atomic<int> abort{0};
    std::atomic<int> timed_out{0};
    std::atomic<int> claimed{0};
    /* the first fault, filled by whoever claimed it; raw pcs are turned into (module, offset) after the launch */
    mt_fault fault{};
    const void* pc = nullptr;
    const void* other_pc = nullptr;
    int sig = 0, sig_code = 0;
    int trap_check = -1; /* clang's undefined-behaviour check number decoded from the trap, if any */
    /* sanitizer: the fronts of the bound buffers ([lo, hi) before each start), where any access is a fault */
    std::vector<std::pair<const char*, const char*>> fronts;
    WatchPlan watch;    /* the bytes before bound buffers the workers watch */
    int watch_hit = -1; /* the watchpoint (index in watch) that stopped the launch */
    ProfLaunch* prof = nullptr; /* performance counters (runtime_profile.cpp), when the launch asks for them */
};

/* Lanes of a simdgroup that reach simd collectives in divergent control flow: a collective completes when every live
 * lane of the simdgroup is suspended (at a collective, a simdgroup barrier or the threadgroup barrier); the lanes
 * waiting at the same position (frames, then the call) take part, the others do not (runtime_sched.cpp). */
struct Simdgroup {
    uint32_t lanes = 0, live = 0, first = 0; /* lanes, lanes not exited, index of lane 0 */
    uint32_t suspended = 0;  /* live lanes waiting at a collective, a simdgroup barrier or the threadgroup barrier */
    uint32_t in_collective = 0; /* of those, lanes waiting at a collective or a simdgroup barrier */
    uint32_t tg_waiters = 0; /* of those, lanes waiting at the threadgroup barrier */
    uint32_t arrived = 0;    /* 1: it arrived at the threadgroup barrier (runtime_sched.cpp), nothing of it runs */
    uint32_t epoch = 0;      /* sanitizer: synchronisations of this simdgroup */
    /* the fast paths of the usual case, every waiting lane at one position: the lanes waiting at collectives and
     * at the threadgroup barrier, one of each, and whether one differs from it (position, or slot buffer) */
    uint32_t x_mask = 0, bar_mask = 0, x_mixed = 0, bar_mixed = 0;
    const Fiber* x_lead = nullptr;
    const Fiber* bar_lead = nullptr;
    /* published bytes: lane j's k-th exchange writes slots[k-th buffer][j] (see Fiber::xnext) */
    alignas(64) unsigned char slots[2][MT_SIMD_WIDTH][MT_SLOT_BYTES];
    /* simdgroup matrix products (mt_simd_matrix_product): the lanes' elements of A and B, each lane's at its place
     * (Fiber::mat_at), and the product, computed once when the exchange completes (runtime_matrix.cpp) */
    alignas(64) float mat_a[64];
    float mat_b[64];
    float mat_c[64];
};

/* runtime_matrix.cpp: sg.mat_c = sg.mat_a * sg.mat_b, each element summed in k order 0..7 in float. */
void mat_multiply(Simdgroup& sg);

struct Threadgroup {
    uint32_t idx[3] = {0, 0, 0};
    uint32_t size[3] = {0, 0, 0};
    uint32_t n = 0, nsg = 0, live = 0;
    /* the threadgroup barrier: lanes waiting at one, simdgroups arrived, simdgroups with live lanes; the line and
     * a lane of the first simdgroup to arrive; the first thread to return (barrier-divergence reports) */
    uint32_t bar_count = 0, bar_sgs = 0, live_sgs = 0, bar_line = 0, bar_first = 0, exit_first = 0;
    uint32_t epoch = 0;
    size_t mem_used = 0;
    Fiber* rq[kMaxThreads]; /* ready queue: every fiber is in it at most once */
    uint32_t rq_head = 0, rq_tail = 0;
};

struct SanRange {
    char* lo;
    char* hi;
    SanCell* shadow;
    int is_param;
    uint32_t index;
};

struct alignas(64) Worker {
    uint32_t id = 0;
    pthread_t thread{};
    Launch* launch = nullptr;
    Fiber* cur = nullptr;
    volatile sig_atomic_t in_kernel = 0; /* 1 while fibers run kernel code: signals there become faults */
    int reverse = 0;
    int uniform = 1; /* barriers must be reached by every thread of the threadgroup (not mt_launch_desc.apple_barriers) */
    sigjmp_buf jmp;
    Ctx sched;
    std::vector<Fiber*> fibers;
    size_t fiber_stack = 0; /* stack size of the pooled fibers */
    Simdgroup* sgs = nullptr; /* kMaxSimdgroups of them */
    Threadgroup* tg = nullptr;
    std::vector<Region> slots, params;
    uint64_t tg_stamp = 0;
    /* sanitizer */
    int san_on = 0;
    uint32_t san_gen = 0;
    char* san_lo = nullptr;
    char* san_hi = nullptr;
    std::vector<SanRange> san_ranges;
    /* performance counters: this worker's (kept across launches), and whether the running threadgroup counts */
    Prof* prof = nullptr;
    int prof_tg = 0;
    int prof_paused = 0; /* mt_prof_pause: memory accesses not counted */
    /* hardware watchpoints (runtime_watch.cpp): their perf event descriptors, what each watches now, 1 when they
     * work on this thread (-1: refused, 0: none open, 2: open but paused), and the idle words free registers watch */
    int watch_fd[kWatches] = {-1, -1, -1, -1};
    uintptr_t watch_at[kWatches] = {};
    int watch_state = 0;
    uint64_t watch_idle[kWatches] = {};
    /* pool bookkeeping (guarded by the pool mutex) */
    Worker* next_worker = nullptr; /* list of all workers, read by signal handlers */
    uint64_t seen_gen = 0;
    bool busy = false;
    bool joined = false; /* it took up the launch it is busy with (one that has not may be left out of it) */
    bool caller = false; /* the worker of the thread calling mt_launch (runtime.cpp), not of the pool */
    char* altstack = nullptr;
};

/* The worker running on this OS thread (null on other threads). Global-dynamic TLS, through descriptors where the
 * compiler has them (runtime_api.py): initial-exec would be faster but can make dlopen of the runtime fail in
 * processes whose static TLS space is used up. */
extern __thread Worker* tl_worker;
/* The same, found without touching TLS (which a thread's first access may allocate): for signal handlers. */
Worker* signal_worker();

/* runtime_sched.cpp */
bool prepare_launch(Worker* w, Launch* L);
void run_threadgroup(Worker* w, Launch* L, uint64_t linear);

/* runtime_tgmem.cpp: map a region of `bytes` aligned to `align` ending against a guard page; unmap one. */
bool region_alloc(Region& r, size_t bytes, size_t align);
void region_free(Region& r);

/* runtime.cpp: fault records. claim_fault returns the launch's record if this call is the first fault, with kind,
 * threadgroup, thread (of w->cur) and line filled; the caller completes it and then calls abandon(). */
mt_fault* claim_fault(Launch* L, Worker* w, int32_t kind, uint32_t line);
[[noreturn]] void abandon(Worker* w);
[[noreturn]] void raise_fault(Worker* w, int32_t kind, uint32_t line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
void thread_coords(const Worker* w, uint32_t index, uint32_t out[3]);

/* runtime_buffers.cpp: after a launch, the bytes in front of each bound buffer (its first page up to its start, which
 * no guard page can cover) are checked for writes, which become a fault record if none was claimed yet, and reset. */
void check_buffer_fronts(const mt_launch_desc* d, mt_fault* f, std::atomic<int>* claimed);
void reset_buffer_fronts(const mt_launch_desc* d);
void collect_buffer_fronts(const mt_launch_desc* d, std::vector<std::pair<const char*, const char*>>& out);
/* The bytes in front of a buffer from mt_buffer_alloc (0 for other pointers, or one starting at a page). */
size_t buffer_front_bytes(const void* start);

/* runtime_watch.cpp: the watchpoints a launch wants (main thread, before it starts), set on a worker's own thread
 * before it runs the launch's threadgroups, and the index in L->watch of a watched address (-1: not one). */
void watch_plan(const mt_launch_desc* d, WatchPlan& plan);
void watch_apply(Worker* w, const WatchPlan& plan);
/* Close a worker's watchpoints (they belong to the thread that opened them): the next watch_apply reopens them. */
void watch_forget(Worker* w);
/* System calls made by launching threads (mt_launch_syscalls): count_syscalls(n) after making n of them. */
extern std::atomic<uint64_t> g_launch_syscalls;
inline void count_syscalls(uint64_t n) { g_launch_syscalls.fetch_add(n, std::memory_order_relaxed); }
/* Disable a worker's watchpoints until the next watch_apply, which enables them again (the calling thread's, between
 * launches: its own code must never trap on them). */
void watch_pause(Worker* w);
int watch_slot(const Launch* L, uintptr_t addr);

/* runtime_signals.cpp */
int watchdog_signal();
void install_handlers();
void restore_handlers();
void describe_signal(Launch* L);

/* runtime_profile.cpp: the launch's counters (from its description; null when out of memory), a worker's set-up
 * before its threadgroups, the scheduler's reports while a counted threadgroup runs (prof_tg), a worker's merge
 * after its threadgroups, and the merged result. */
ProfLaunch* prof_launch_new(const mt_profile_desc* d);
void prof_launch_delete(ProfLaunch* L);
bool prof_prepare(Worker* w, Launch* L);
void prof_begin_threadgroup(Worker* w, uint64_t linear);
void prof_end_threadgroup(Worker* w);
void prof_tg_barrier(Worker* w, uint32_t line);
void prof_collective(Worker* w, Simdgroup& sg, const Fiber* lead, uint32_t mask);
void prof_exit(Worker* w, const Fiber* f);
void prof_access(Worker* w, const void* addr, uint32_t size, int32_t kind, const void* pc);
void prof_merge(Worker* w);
bool prof_wants(const ProfLaunch* L, uint64_t linear); /* false: a threadgroup an only_counted launch skips */
bool prof_finish(ProfLaunch* L, mt_profile_result* out);

/* runtime_sanitizer.cpp */
void san_begin_threadgroup(Worker* w);
bool san_attach(Worker* w, Region& r, int is_param, uint32_t index);
void san_detach(Region& r);
void san_rebuild(Worker* w);

} // namespace mtrt
#pragma GCC visibility pop

#endif /* METILE_RUNTIME_INTERNAL_H */
