/* runtime_watch.cpp - hardware watchpoints on the bytes just before bound buffers.
 *
 * A buffer ends against its trailing guard page, so the bytes in front of its start share a page with its first
 * bytes and no page protection can cover them (runtime_buffers.cpp). What can: the CPU's debug registers, which
 * trap an access to a few aligned bytes at no cost to other accesses. On x86-64 Linux, where the kernel lets a
 * process set them on its own threads (perf_event_open with PERF_TYPE_BREAKPOINT and sigtrap, Linux >= 5.13; not
 * where a seccomp profile or perf_event_paranoid > 2 refuses it), each worker watches the 8 bytes before the start
 * of up to kWatches buffers a launch names (mt_launch_desc.watch_buffers, in order of preference), and the 8 bytes
 * before those when fewer buffers are named than there are registers (one buffer: the 32 bytes before it). An
 * access there is a synchronous SIGTRAP after the accessing instruction (runtime_signals.cpp), reported as a bad
 * access at that instruction's line. Elsewhere, or further before a start, the canary in front of each buffer
 * still makes a read return no plausible datum, and a write is found after the launch.
 *
 * A worker's watchpoints are retargeted before it runs a launch's threadgroups (a system call per register that
 * changes, none when the launch binds the buffers of the one before), and a register the launch does not use points
 * at a word of the worker's own that nothing touches: a stale watchpoint on memory reused for data would trap on
 * every access to it. The calling thread's worker (runtime.cpp) runs application code between launches, which must
 * never trap on them: its watchpoints are paused after each launch (disabled, their descriptors and debug-register
 * slots kept) and enabled again, retargeted where the next launch watches other bytes, before it runs kernel code,
 * one system call per register either way rather than opening and closing a perf event each.
 */
#include "runtime_internal.h"

#if defined(__linux__) && defined(__x86_64__) && __has_include(<linux/perf_event.h>) && __has_include(<linux/hw_breakpoint.h>)
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#ifdef PERF_ATTR_SIZE_VER7
#define MT_WATCH 1
#endif
#endif

#ifdef MT_WATCH
#include <errno.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace mtrt {

#ifdef MT_WATCH
namespace {

perf_event_attr watch_attr(uintptr_t addr) {
    perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_BREAKPOINT;
    a.size = sizeof a;
    a.bp_type = HW_BREAKPOINT_RW; /* x86 has no read-only data breakpoints: reads and writes */
    a.bp_addr = addr;
    a.bp_len = HW_BREAKPOINT_LEN_8;
    a.sample_period = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.remove_on_exec = 1; /* required by sigtrap */
    a.sigtrap = 1;
    return a;
}

/* A watchpoint on `addr` for this thread, in the group `leader` leads (-1: it leads one). */
int open_watch(uintptr_t addr, int leader = -1) {
    count_syscalls(1);
    perf_event_attr a = watch_attr(addr);
    return static_cast<int>(syscall(SYS_perf_event_open, &a, 0 /* this thread */, -1, leader, PERF_FLAG_FD_CLOEXEC));
}

/* 1 once a worker's watchpoints were set: the calling thread's paused ones hold its debug registers, so a probe on
 * that thread (mt_watch_available) would then find none free */
std::atomic<int> g_watch_worked{0};

void close_watches(Worker* w) {
    for (uint32_t i = 0; i < kWatches; ++i) {
        if (w->watch_fd[i] >= 0) {
            close(w->watch_fd[i]);
            count_syscalls(1);
        }
        w->watch_fd[i] = -1;
        w->watch_at[i] = 0;
    }
}

} // namespace
#endif

void watch_plan(const mt_launch_desc* d, WatchPlan& plan) {
    plan = WatchPlan{};
    if (!d->watch_buffers || d->sanitize) return; /* the sanitizer checks every access against the fronts itself */
    uint32_t n = 0;
    uintptr_t starts[kWatches];
    size_t fronts[kWatches];
    uint32_t indices[kWatches];
    for (uint32_t k = 0; k < d->n_watch_buffers && n < kWatches; ++k) {
        const uint32_t i = d->watch_buffers[k];
        if (i >= d->n_buffers) continue;
        const uintptr_t start = reinterpret_cast<uintptr_t>(d->buffers[i]);
        bool seen = false;
        for (uint32_t j = 0; j < n; ++j) seen = seen || starts[j] == start;
        size_t front = seen ? 0 : buffer_front_bytes(d->buffers[i]);
        if (front < 8) continue; /* not a buffer of ours, bound twice, or starting at a page: its guard is there */
        starts[n] = start;
        fronts[n] = front;
        indices[n++] = i;
    }
    /* 8 bytes before each start, then the 8 before those, round robin, within each front */
    for (uint32_t depth = 1; n && plan.n < kWatches; ++depth) {
        const uint32_t before = plan.n;
        for (uint32_t j = 0; j < n && plan.n < kWatches; ++j) {
            if (fronts[j] < 8 * depth) continue;
            plan.addr[plan.n] = starts[j] - 8 * depth;
            plan.buffer[plan.n] = indices[j];
            plan.start[plan.n] = starts[j];
            ++plan.n;
        }
        if (plan.n == before) break;
    }
}

void watch_apply(Worker* w, const WatchPlan& plan) {
#ifdef MT_WATCH
    /* nothing to watch: none open, or paused ones (disabled: they trap on nothing) stay as they are */
    if (w->watch_state < 0 || (plan.n == 0 && w->watch_state != 1)) return;
    const bool paused = w->watch_state == 2;
    for (uint32_t i = 0; i < kWatches; ++i) {
        /* a register the plan leaves free watches the worker's own idle word */
        const uintptr_t want = i < plan.n ? plan.addr[i] : reinterpret_cast<uintptr_t>(&w->watch_idle[i]);
        if (w->watch_at[i] == want) continue;
        if (w->watch_fd[i] < 0) {
            w->watch_fd[i] = open_watch(want, i ? w->watch_fd[0] : -1); /* the first leads the group */
        } else {
            /* retargeted and enabled (attr.disabled 0); one of a paused group counts only once the group is enabled */
            perf_event_attr a = watch_attr(want);
            count_syscalls(1);
            if (ioctl(w->watch_fd[i], PERF_EVENT_IOC_MODIFY_ATTRIBUTES, &a) != 0) {
                close(w->watch_fd[i]);
                w->watch_fd[i] = -1;
            }
        }
        if (w->watch_fd[i] < 0) { /* refused: this worker goes without (the canary remains) */
            close_watches(w);
            w->watch_state = -1;
            return;
        }
        w->watch_at[i] = want;
    }
    if (paused) {
        count_syscalls(1);
        if (ioctl(w->watch_fd[0], PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP) != 0) {
            close_watches(w);
            w->watch_state = -1;
            return;
        }
    }
    w->watch_state = 1;
    g_watch_worked.store(1, std::memory_order_relaxed);
#else
    (void)w;
    (void)plan;
#endif
}

void watch_pause(Worker* w) {
#ifdef MT_WATCH
    if (w->watch_state != 1) return;
    count_syscalls(1);
    if (ioctl(w->watch_fd[0], PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP) != 0) {
        watch_forget(w); /* a group that cannot be disabled is closed: the next launch opens it again */
        return;
    }
    w->watch_state = 2;
#else
    (void)w;
#endif
}

void watch_forget(Worker* w) {
#ifdef MT_WATCH
    close_watches(w);
    w->watch_state = 0;
#else
    (void)w;
#endif
}

int watch_slot(const Launch* L, uintptr_t addr) {
    for (uint32_t i = 0; i < L->watch.n; ++i)
        if (L->watch.addr[i] == addr) return static_cast<int>(i);
    return -1;
}

} // namespace mtrt

using namespace mtrt;

MT_EXPORT uint64_t mt_launch_syscalls(void) { return g_launch_syscalls.load(std::memory_order_relaxed); }

MT_EXPORT int32_t mt_watch_available(void) {
#ifdef MT_WATCH
    static const int32_t available = [] {
        if (g_watch_worked.load(std::memory_order_relaxed)) return 1;
        uint64_t word = 0;
        const int fd = open_watch(reinterpret_cast<uintptr_t>(&word));
        if (fd < 0) return 0;
        close(fd);
        return 1;
    }();
    return available;
#else
    return 0;
#endif
}
