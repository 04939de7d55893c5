/* runtime.cpp - the launch interface of the CPU runtime: worker pool, launch validation and watchdog, fault
 * records, device buffers.
 *
 * The thread calling mt_launch runs threadgroups too, as a worker of its own (caller_worker), rather than only
 * waiting for the pool: a launch then starts at once, and a small one (one threadgroup, or one the caller finishes
 * before the pool's threads are scheduled) needs no other thread at all. Pool workers take a launch up only once it
 * has run kJoinDelayNs on the caller alone, and those that have not taken it up when the caller has run out of
 * threadgroups are left out of it (Worker::joined), so the caller waits only for threadgroups that are running.
 * While it runs kernel code the caller has the runtime's signal stack, floating-point environment, watchpoints and
 * watchdog signal (a POSIX timer aimed at the thread, since no one else watches it), and gets its own back
 * afterwards (its debug registers too: the watchpoints are disabled). The timer and the watchpoints' perf events are
 * kept from one launch to the next (made again for another calling thread, or in a forked child), so that a launch
 * costs few system calls (mt_launch_syscalls counts them). Sanitized and profiled launches (and platforms without thread-directed
 * timers) keep to the pool.
 *
 * Build (one shared library from all runtime*.cpp files):
 *   g++ -std=c++17 -O2 -fPIC -shared -pthread -U_FORTIFY_SOURCE -fvisibility=hidden -I<this dir> runtime*.cpp
 *       -o libmetile_cpu_rt.so -ldl
 */
#include "runtime_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fenv.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#if defined(__linux__)
#include <sys/syscall.h> /* SYS_gettid, for the calling thread's watchdog timer */
#endif
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

/* MT_NO_CALLER_JOINS builds the pool-only runtime of macOS on Linux, for its tests */
#if defined(__linux__) && defined(SIGEV_THREAD_ID) && !defined(MT_NO_CALLER_JOINS)
#define MT_CALLER_JOINS 1
#endif

namespace mtrt {

__thread Worker* tl_worker = nullptr;
std::atomic<uint64_t> g_launch_syscalls{0};

namespace {
std::atomic<Worker*> g_worker_list{nullptr};
}

Worker* signal_worker() {
    const pthread_t self = pthread_self();
    for (Worker* w = g_worker_list.load(std::memory_order_acquire); w; w = w->next_worker)
        if (pthread_equal(w->thread, self)) return w;
    return nullptr;
}

namespace {

struct Pool {
    std::mutex launch_mu; /* serialises launches */
    std::mutex mu;        /* guards everything below and Launch::remaining, Worker::busy/seen_gen */
    std::condition_variable work_cv, done_cv;
    std::vector<Worker*> workers;
    uint64_t gen = 0;
    Launch* launch = nullptr;
    uint64_t next_launch_id = 1;
};

Pool* g_pool = nullptr;
#ifdef MT_CALLER_JOINS
void caller_after_fork();
#endif

Pool& pool() {
    static std::once_flag once;
    std::call_once(once, [] {
        g_pool = new Pool(); /* never destroyed: workers may still wait on it at exit */
        /* a forked child has none of the parent's workers (and maybe a locked mutex): start afresh */
        pthread_atfork(nullptr, nullptr, [] {
            g_pool = new Pool();
#ifdef MT_CALLER_JOINS
            caller_after_fork();
#endif
        });
    });
    return *g_pool;
}

void set_watchdog_blocked(bool blocked) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, watchdog_signal());
    pthread_sigmask(blocked ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
    count_syscalls(1);
}

/* The threadgroups of one launch on one worker, until the counter runs out or the launch aborts. */
__attribute__((noinline)) void run_threadgroups(Worker* w, Launch* L) {
    while (!L->abort.load(std::memory_order_relaxed)) {
        const uint64_t i = L->next_tg.fetch_add(1, std::memory_order_relaxed);
        if (i >= L->total_tgs) break;
        if (L->prof && !prof_wants(L->prof, i)) continue;
        run_threadgroup(w, L, i);
    }
}

void worker_launch(Worker* w, Launch* L) {
    fesetenv(FE_DFL_ENV); /* a kernel may have changed rounding or left a fault mid-way: start clean */
    w->launch = L;
    w->cur = nullptr;
    w->in_kernel = 0;
    /* a stale watchdog signal from an earlier launch is ignored by the handler; the calling thread's mask is set by
     * caller_launch */
    if (!w->caller) set_watchdog_blocked(false);
    if (!prepare_launch(w, L)) {
        if (mt_fault* f = claim_fault(L, w, MT_FAULT_INTERNAL, 0))
            snprintf(f->message, sizeof f->message, "cannot map threadgroup memory (out of memory or mappings)");
        L->abort.store(1);
    } else if (!prof_prepare(w, L)) {
        if (mt_fault* f = claim_fault(L, w, MT_FAULT_INTERNAL, 0))
            snprintf(f->message, sizeof f->message, "cannot map the profiler's tables (out of memory or mappings)");
        L->abort.store(1);
    } else if (sigsetjmp(w->jmp, 1) == 0) {
        run_threadgroups(w, L);
        if (L->prof) prof_merge(w);
    }
    /* after a fault the threadgroup's fibers are simply dropped: they are re-initialised before reuse */
    w->in_kernel = 0;
    w->cur = nullptr;
    if (!w->caller) set_watchdog_blocked(true);
}

void* worker_main(void* arg) {
    Worker* w = static_cast<Worker*>(arg);
    tl_worker = w;
    /* asynchronous signals (SIGINT, SIGALRM, ...) are for the application's threads; only the faults kernel code
     * raises and the watchdog (unblocked during launches) reach a worker */
    sigset_t mask;
    sigfillset(&mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) sigdelset(&mask, sig);
    pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    char name[16];
    snprintf(name, sizeof name, "metile-cpu-%u", w->id);
    platform::set_thread_name(name);
    stack_t ss;
    ss.ss_sp = w->altstack;
    ss.ss_size = 64 * 1024;
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
    Pool& p = pool();
    for (;;) {
        Launch* L;
        {
            std::unique_lock<std::mutex> lk(p.mu);
            p.work_cv.wait(lk, [&] { return p.gen != w->seen_gen; });
            w->seen_gen = p.gen;
            if (!w->busy) continue; /* not a participant of this launch (or left out of it) */
            L = p.launch;
            if (L->join_at_ns) { /* the caller runs it too: join only if it lasts */
                const auto at = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(L->join_at_ns));
                const uint64_t gen = p.gen;
                /* left out (the caller finished it alone), or even a later launch begun: L is gone */
                p.work_cv.wait_until(lk, at, [&] { return !w->busy || p.gen != gen; });
                if (!w->busy || p.gen != gen) continue;
            }
            w->joined = true;
        }
        worker_launch(w, L);
        {
            std::lock_guard<std::mutex> lk(p.mu);
            w->busy = false;
            if (--L->remaining == 0) p.done_cv.notify_all();
        }
    }
    return nullptr;
}

bool ensure_workers(Pool& p, uint32_t n, mt_fault* out) {
    while (p.workers.size() < n) {
        Worker* w = new Worker();
        w->id = static_cast<uint32_t>(p.workers.size());
        w->sgs = new Simdgroup[kMaxSimdgroups];
        w->tg = new Threadgroup();
        void* alt = mmap(nullptr, 64 * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (alt == MAP_FAILED) {
            snprintf(out->message, sizeof out->message, "cannot map a signal stack for a worker thread");
            return false;
        }
        w->altstack = static_cast<char*>(alt);
        {
            std::lock_guard<std::mutex> lk(p.mu);
            w->seen_gen = p.gen;
        }
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 1024 * 1024);
        const int err = pthread_create(&w->thread, &attr, worker_main, w);
        pthread_attr_destroy(&attr);
        if (err != 0) {
            snprintf(out->message, sizeof out->message, "cannot start a worker thread: %s", strerror(err));
            return false;
        }
        p.workers.push_back(w);
        w->next_worker = g_worker_list.load(std::memory_order_relaxed);
        g_worker_list.store(w, std::memory_order_release);
    }
    return true;
}

/* The usable CPUs (the thread's affinity), read again at most every kAffinityNs: a launch then needs no system call
 * for it, and a change of affinity is seen within that time. Called with the pool's launch_mu held. */
constexpr uint64_t kAffinityNs = 1000000000;
uint64_t monotonic_ns();
uint32_t default_workers() {
    static uint32_t cpus = 0;
    static uint64_t read_at = 0;
    const uint64_t now = monotonic_ns();
    if (!cpus || now - read_at >= kAffinityNs) {
        cpus = platform::usable_cpus();
        read_at = now;
        count_syscalls(1);
    }
    return cpus;
}

int32_t internal_error(mt_fault* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
int32_t internal_error(mt_fault* out, const char* fmt, ...) {
    out->kind = MT_FAULT_INTERNAL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->message, sizeof out->message, fmt, ap);
    va_end(ap);
    return MT_FAULT_INTERNAL;
}

/* Checks the descriptor and fills the launch; returns MT_OK or the fault kind (details in *out). */
int32_t setup_launch(const mt_launch_desc* d, Launch* L, mt_fault* out) {
    if (!d->fn) return internal_error(out, "launch without a kernel function");
    if (d->n_buffers && !d->buffers) return internal_error(out, "%u buffers but no buffer array", d->n_buffers);
    if (d->n_tg_params && !d->tg_param_bytes)
        return internal_error(out, "%u threadgroup parameters but no size array", d->n_tg_params);
    uint64_t tg_threads = 1, total = 1;
    for (int k = 0; k < 3; ++k) {
        const uint32_t g = d->threadgroups[k], t = d->threads_per_tg[k], n = d->grid_threads[k];
        if (!g || !t || !n)
            return internal_error(out, "zero size in dimension %d (threadgroups %u, threads per threadgroup %u, "
                                  "grid %u)", k, g, t, n);
        if ((n + static_cast<uint64_t>(t) - 1) / t != g)
            return internal_error(out, "dimension %d: a grid of %u threads in threadgroups of %u needs %llu "
                                  "threadgroups, not %u", k, n, t,
                                  static_cast<unsigned long long>((n + static_cast<uint64_t>(t) - 1) / t), g);
        tg_threads *= t;
        total *= g;
    }
    if (tg_threads > kMaxThreads)
        return internal_error(out, "threadgroup of %u x %u x %u = %llu threads (at most %u)", d->threads_per_tg[0],
                              d->threads_per_tg[1], d->threads_per_tg[2], static_cast<unsigned long long>(tg_threads),
                              kMaxThreads);
    if (d->stack_bytes > kMaxStack)
        return internal_error(out, "stack of %zu bytes per thread (at most %zu)", d->stack_bytes, kMaxStack);
    L->d = *d;
    L->total_tgs = total;
    L->param_bytes.assign(d->tg_param_bytes, d->tg_param_bytes + d->n_tg_params);
    for (size_t b : L->param_bytes) L->params_total += b;
    if (d->max_tg_memory && L->params_total > d->max_tg_memory) {
        out->kind = MT_FAULT_TG_MEMORY;
        snprintf(out->message, sizeof out->message, "threadgroup memory: %zu bytes needed, the device allows %zu",
                 L->params_total, d->max_tg_memory);
        return MT_FAULT_TG_MEMORY;
    }
    const size_t stack = d->stack_bytes ? d->stack_bytes : kDefaultStack;
    L->stack_bytes = round_up(stack < kMinStack ? kMinStack : stack, page_size());
    return MT_OK;
}

void locate_pc(const void* pc, char* module, size_t module_len, uint64_t* offset) {
    Dl_info info;
    if (pc && dladdr(pc, &info) && info.dli_fbase) {
        *offset = reinterpret_cast<uintptr_t>(pc) - reinterpret_cast<uintptr_t>(info.dli_fbase);
        if (module && info.dli_fname) snprintf(module, module_len, "%s", info.dli_fname);
    }
}

/* Waits for the workers; past the timeout, aborts the launch and signals the busy workers until they stop. */
void wait_for_workers(Pool& p, Launch* L) {
    std::unique_lock<std::mutex> lk(p.mu);
    if (L->deadline_ns) {
        const auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(L->deadline_ns));
        if (p.done_cv.wait_until(lk, deadline, [&] { return L->remaining == 0; })) return;
        L->timed_out.store(1);
        L->abort.store(1);
        const int sig = watchdog_signal();
        while (L->remaining) {
            for (Worker* w : p.workers)
                if (w->busy && w->launch == L) pthread_kill(w->thread, sig);
            p.done_cv.wait_for(lk, std::chrono::milliseconds(20), [&] { return L->remaining == 0; });
        }
        return;
    }
    p.done_cv.wait(lk, [&] { return L->remaining == 0; });
}

/* The clock the condition variables' wait_until reads (steady_clock), which deadlines and join times are waited
 * with. On Linux it is CLOCK_MONOTONIC, the clock of the calling thread's timer and of the signal handler's check;
 * macOS's C++ library reads another one (CLOCK_MONOTONIC_RAW or CLOCK_UPTIME_RAW, by version), so a deadline taken
 * from CLOCK_MONOTONIC there would be off by however long the Mac has slept. */
uint64_t monotonic_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
}

/* How long the caller runs a launch alone before the pool workers take it up: a launch shorter than this needs no
 * other thread (no wake-up to wait for, no thread of another process or of torch's OpenMP team to share cores with);
 * a longer one loses at most this much of its parallel time. */
constexpr uint64_t kJoinDelayNs = 200000;

#ifdef MT_CALLER_JOINS
Worker* g_caller = nullptr; /* the calling thread's worker (one: launches are serialised), guarded by launch_mu */

/* The calling thread's watchdog timer, kept from launch to launch (a POSIX timer aimed at the thread: remade when
 * another thread launches, or in a forked child, which has no timers). */
struct CallerTimer {
    timer_t id;
    pid_t tid = 0; /* the thread it signals; 0: none made */
};
CallerTimer g_caller_timer;
__thread pid_t tl_tid = 0; /* this thread's id, asked for once */

/* In a forked child the calling thread's worker holds the parent's perf events and timer: drop them (closing the
 * child's descriptors leaves the parent's events alone). */
void caller_after_fork() {
    if (g_caller) watch_forget(g_caller);
    g_caller_timer.tid = 0;
    tl_tid = 0; /* the forking thread's id, in the child's only thread */
}

/* The worker the calling thread runs threadgroups as; null when it cannot be made (the pool alone then). */
Worker* caller_worker() {
    Worker* w = g_caller;
    const pthread_t self = pthread_self();
    if (!w) {
        void* alt = mmap(nullptr, 64 * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        count_syscalls(1);
        if (alt == MAP_FAILED) return nullptr;
        w = new Worker();
        w->id = UINT32_MAX;
        w->caller = true;
        w->sgs = new Simdgroup[kMaxSimdgroups];
        w->tg = new Threadgroup();
        w->altstack = static_cast<char*>(alt);
        w->thread = self;
        w->next_worker = g_worker_list.load(std::memory_order_relaxed);
        g_worker_list.store(w, std::memory_order_release);
        g_caller = w;
    } else if (!pthread_equal(w->thread, self)) {
        watch_forget(w); /* its watchpoints are another thread's */
        w->thread = self;
    }
    return w;
}

/* Arms the calling thread's watchdog timer at L's deadline (and every 20 ms after it, as the pool's workers are
 * signalled: one that lands in runtime code leaves the stop to an abort check kernel code may never reach). */
bool arm_caller_timer(Launch* L, int dog) {
    if (!tl_tid) {
        tl_tid = static_cast<pid_t>(syscall(SYS_gettid));
        count_syscalls(1);
    }
    const pid_t tid = tl_tid;
    if (g_caller_timer.tid != tid) {
        if (g_caller_timer.tid) {
            timer_delete(g_caller_timer.id);
            count_syscalls(1);
        }
        g_caller_timer.tid = 0;
        sigevent ev;
        memset(&ev, 0, sizeof ev);
        ev.sigev_notify = SIGEV_THREAD_ID;
        ev.sigev_signo = dog;
        ev._sigev_un._tid = tid;
        count_syscalls(1);
        if (timer_create(CLOCK_MONOTONIC, &ev, &g_caller_timer.id) != 0) return false;
        g_caller_timer.tid = tid;
    }
    itimerspec at;
    memset(&at, 0, sizeof at);
    at.it_value.tv_sec = static_cast<time_t>(L->deadline_ns / 1000000000u);
    at.it_value.tv_nsec = static_cast<long>(L->deadline_ns % 1000000000u);
    at.it_interval.tv_nsec = 20000000;
    count_syscalls(1);
    return timer_settime(g_caller_timer.id, TIMER_ABSTIME, &at, nullptr) == 0;
}

/* Runs the launch's threadgroups on the calling thread, as worker `w`, and restores the thread's own signal mask,
 * signal stack and floating-point environment afterwards. The watchdog signal is unblocked only while the worker's
 * launch is L (a signal finds the launch it is for), and a timer that never reached its deadline sent nothing, so
 * only one that did needs its signals collected. */
void caller_launch(Worker* w, Launch* L) {
    const int dog = watchdog_signal();
    w->launch = L;
    w->cur = nullptr;
    w->in_kernel = 0;
    sigset_t block, saved_mask;
    sigemptyset(&block);
    sigaddset(&block, dog);
    stack_t ss, saved_stack;
    ss.ss_sp = w->altstack;
    ss.ss_size = 64 * 1024;
    ss.ss_flags = 0;
    sigaltstack(&ss, &saved_stack);
    fenv_t saved_env;
    fegetenv(&saved_env);
    const bool timed = L->deadline_ns && arm_caller_timer(L, dog);
    pthread_sigmask(SIG_UNBLOCK, &block, &saved_mask);
    count_syscalls(2);
    tl_worker = w;
    if (timed || !L->deadline_ns) {
        worker_launch(w, L);
    } else { /* no watchdog: the launch is not run unwatched */
        if (mt_fault* f = claim_fault(L, w, MT_FAULT_INTERNAL, 0))
            snprintf(f->message, sizeof f->message, "cannot arm the watchdog timer of the calling thread");
        L->abort.store(1);
    }
    tl_worker = nullptr;
    if (timed) {
        const itimerspec off{};
        timer_settime(g_caller_timer.id, 0, &off, nullptr);
        count_syscalls(1);
        if (monotonic_ns() >= L->deadline_ns) { /* it may have fired: collect what it sent */
            pthread_sigmask(SIG_BLOCK, &block, nullptr);
            const timespec now{0, 0};
            count_syscalls(2);
            while (sigtimedwait(&block, nullptr, &now) > 0) count_syscalls(1);
        }
    }
    watch_pause(w); /* the thread's own code must never trap on the kernel's watchpoints */
    w->launch = nullptr;
    fesetenv(&saved_env);
    sigaltstack(&saved_stack, nullptr);
    pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
    count_syscalls(2);
}
#endif

} // namespace

void thread_coords(const Worker* w, uint32_t index, uint32_t out[3]) {
    const uint32_t sx = w->tg->size[0], sy = w->tg->size[1];
    out[0] = index % sx;
    out[1] = index / sx % sy;
    out[2] = index / (sx * sy);
}

mt_fault* claim_fault(Launch* L, Worker* w, int32_t kind, uint32_t line) {
    w->in_kernel = 0; /* from here on the worker only leaves: the watchdog must not cut the record short */
    int expected = 0;
    if (!L->claimed.compare_exchange_strong(expected, 1)) return nullptr;
    mt_fault* f = &L->fault;
    f->kind = kind;
    f->line = line;
    memcpy(f->threadgroup, w->tg->idx, sizeof f->threadgroup);
    if (w->cur) memcpy(f->thread, w->cur->pos.thread_position_in_threadgroup, sizeof f->thread);
    return f;
}

void abandon(Worker* w) {
    w->in_kernel = 0;
    w->launch->abort.store(1);
    siglongjmp(w->jmp, 1);
}

void raise_fault(Worker* w, int32_t kind, uint32_t line, const char* fmt, ...) {
    w->in_kernel = 0;
    if (mt_fault* f = claim_fault(w->launch, w, kind, line)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(f->message, sizeof f->message, fmt, ap);
        va_end(ap);
    }
    abandon(w);
}

} // namespace mtrt

using namespace mtrt;

MT_EXPORT int32_t mt_launch(const mt_launch_desc* desc, mt_fault* fault) {
    if (!fault) return MT_FAULT_INTERNAL;
    memset(fault, 0, sizeof *fault);
    if (!desc) return internal_error(fault, "no launch description");
    if (tl_worker) return internal_error(fault, "mt_launch called from kernel code");
    Pool& p = pool();
    std::lock_guard<std::mutex> serial(p.launch_mu);
    std::unique_ptr<Launch> L(new Launch());
    if (int32_t status = setup_launch(desc, L.get(), fault)) return status;
    if (desc->sanitize) collect_buffer_fronts(desc, L->fronts);
    watch_plan(desc, L->watch);
    if (desc->profile) {
        if (!desc->profile_out) return internal_error(fault, "profiling without a result record");
        L->prof = prof_launch_new(desc->profile);
        if (!L->prof) return internal_error(fault, "cannot map the profiler's tables (out of memory or mappings)");
    }
    struct ProfDelete {
        Launch* L;
        ~ProfDelete() { prof_launch_delete(L->prof); }
    } prof_delete{L.get()};
    L->id = p.next_launch_id++;
    const uint32_t want = desc->workers ? desc->workers : default_workers();
    const uint32_t n = static_cast<uint32_t>(L->total_tgs < want ? L->total_tgs : want);
    if (desc->timeout_s > 0 && desc->timeout_s < 1e9)
        L->deadline_ns = monotonic_ns() + static_cast<uint64_t>(desc->timeout_s * 1e9);
    Worker* self = nullptr;
#ifdef MT_CALLER_JOINS
    if (!desc->sanitize && !desc->profile) self = caller_worker();
#endif
    const uint32_t helpers = self ? n - 1 : n; /* pool workers taking part */
    if (self && helpers) L->join_at_ns = monotonic_ns() + kJoinDelayNs;
    if (!ensure_workers(p, helpers, fault)) {
        fault->kind = MT_FAULT_INTERNAL;
        return MT_FAULT_INTERNAL;
    }
    L->participants = n;
    L->remaining = helpers;
    install_handlers();
    if (helpers) {
        {
            std::lock_guard<std::mutex> lk(p.mu);
            for (uint32_t i = 0; i < helpers; ++i) {
                p.workers[i]->busy = true;
                p.workers[i]->joined = false;
                p.workers[i]->launch = L.get();
            }
            p.launch = L.get();
            ++p.gen;
        }
        p.work_cv.notify_all();
    }
#ifdef MT_CALLER_JOINS
    if (self) {
        caller_launch(self, L.get());
        /* the threadgroups are all taken (or the launch stopped): a worker that has not joined yet is not needed */
        {
            std::lock_guard<std::mutex> lk(p.mu);
            for (uint32_t i = 0; i < helpers; ++i) {
                Worker* w = p.workers[i];
                if (w->busy && !w->joined) {
                    w->busy = false;
                    --L->remaining;
                }
            }
        }
        p.work_cv.notify_all(); /* the workers still waiting to join see they are left out */
    }
#endif
    wait_for_workers(p, L.get());
    restore_handlers();
    {
        std::lock_guard<std::mutex> lk(p.mu);
        p.launch = nullptr;
        for (uint32_t i = 0; i < helpers; ++i) p.workers[i]->launch = nullptr;
    }
    if (L->timed_out.load() && !L->claimed.load()) {
        L->fault.kind = MT_FAULT_HANG;
        L->claimed.store(1);
    }
    if (!L->claimed.load()) check_buffer_fronts(desc, &L->fault, &L->claimed);
    if (L->prof && !L->claimed.load() && !prof_finish(L->prof, desc->profile_out))
        return internal_error(fault, "out of memory for the profile");
    reset_buffer_fronts(desc);
    if (L->claimed.load()) {
        mt_fault& f = L->fault;
        locate_pc(L->pc, f.module, sizeof f.module, &f.pc_offset);
        if (L->watch_hit >= 0) f.address_span = 8;
        if (L->other_pc) locate_pc(L->other_pc, nullptr, 0, &f.other_pc_offset);
        if (!f.message[0]) describe_signal(L.get());
        if (f.kind == MT_FAULT_HANG && L->timed_out.load())
            snprintf(f.message, sizeof f.message, "the dispatch ran longer than its %.3g s timeout", desc->timeout_s);
        *fault = f;
    }
    return fault->kind;
}

MT_EXPORT uint32_t mt_runtime_abi_version(void) { return MT_RUNTIME_ABI_VERSION; }

MT_EXPORT void mt_device_print(const char* format, ...) {
    static std::mutex print_mu;
    char buf[2048];
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf(buf, sizeof buf, format, ap);
    va_end(ap);
    if (n < 0) return;
    size_t len = static_cast<size_t>(n) < sizeof buf ? static_cast<size_t>(n) : sizeof buf - 1;
    std::lock_guard<std::mutex> lk(print_mu);
    fwrite(buf, 1, len, stdout);
    fflush(stdout);
}

MT_EXPORT void mt_kernel_fault(int32_t kind, const char* message, uint32_t line) {
    Worker* w = tl_worker;
    if (!w || !w->launch || !w->cur) {
        fprintf(stderr, "metile CPU runtime: kernel fault outside a launch: %s\n", message ? message : "");
        abort();
    }
    if (kind <= MT_OK || kind > MT_FAULT_INTERNAL) kind = MT_FAULT_KERNEL;
    raise_fault(w, kind, line, "%s", message ? message : "");
}

MT_EXPORT void mt_bounds_fault(const void* address, uintptr_t bytes, const void* base, uintptr_t length) {
    Worker* w = tl_worker;
    if (!w || !w->launch || !w->cur) {
        fprintf(stderr, "metile CPU runtime: checked access outside a launch at %p\n", address);
        abort();
    }
    Launch* L = w->launch;
    if (mt_fault* f = claim_fault(L, w, MT_FAULT_BAD_ACCESS, 0)) {
        f->address = reinterpret_cast<uintptr_t>(address);
        L->pc = static_cast<const char*>(__builtin_return_address(0)) - 1; /* the call, in the kernel's code */
        snprintf(f->message, sizeof f->message,
                 "a checked access of %zu bytes (the array is bound in place, %zu bytes at %p): nothing was read or "
                 "written", static_cast<size_t>(bytes), static_cast<size_t>(length), base);
    }
    abandon(w);
}
