/* runtime_sched.cpp - running one threadgroup as fibers: positions, ready queue, barriers, simd exchanges,
 * thread exit (threadgroup memory: runtime_tgmem.cpp).
 *
 * Every fiber of a threadgroup is in one of: runnable (in the ready queue or running), waiting at the threadgroup
 * barrier, waiting at its simdgroup's barrier, waiting in a simd exchange, or done. A thread that blocks switches
 * straight to the next runnable fiber.
 *
 * The threadgroup barrier counts simdgroups, as Apple GPUs do: a simdgroup arrives when all its live lanes are
 * suspended and the first in program order (below) waits at the barrier; lanes masked off (waiting further on) or
 * returned take no part. When every simdgroup with live lanes arrived, whatever line, the waiting lanes go on. One
 * simdgroup at two barriers is a fault. MSL requires every thread of the threadgroup to execute each barrier
 * (barriers belong in uniform control flow), so unless the launch asks for Apple GPUs' counting alone
 * (apple_barriers), a barrier that completes while a thread of the threadgroup is elsewhere (returned, or waiting at
 * a simd collective) or simdgroups that arrive from two barrier lines are barrier-divergence faults: both are
 * undefined on a GPU. Every fully suspended simdgroup completes a collective or arrives, so deadlock() is only a
 * check.
 *
 * Simd collectives and simdgroup barriers run over the lanes that reach them, as on Apple GPUs in divergent control
 * flow: when every live lane of a simdgroup is suspended (at a collective, a simdgroup barrier or the threadgroup
 * barrier), one collective completes, with the lanes waiting at the same position as its active set; lanes elsewhere
 * or exited take no part. A position is the lane's frames (mt_runtime.h: the arms, loop iterations and calls of
 * functions with collectives it is in, kept by guards the front end puts into the code, metile/metal/cpu/arms.py and
 * include/mt_diverge.h), then the cursor of its innermost frame, the collective's .metal line and its site. The one
 * that runs is the first in program order (compare_positions): a lane still in an arm of an earlier loop iteration,
 * or inside an arm or call that the others have left, is behind them and runs first; two arms of one branch are
 * disjoint and run in source order. So a GPU's order is kept for branches, if/else (a helper called from both arms is
 * two collectives), loops left early or continued, lane-dependent trip counts, a loop whose body has a collective
 * before a divergent branch with one, and lanes leaving a helper at an early return. Code the front end does not
 * mark (see metile/metal/cpu/arms.py) runs collectives at the same frames in (line, site) order. README.md's
 * section on running Metal kernels without a Mac describes the model for users.
 */
#include "runtime_internal.h"

#include <stdarg.h>
#include <stdio.h>

#include <new>

namespace mtrt {
namespace {

constexpr uint32_t kRqMask = kMaxThreads - 1;
/* the call instruction in the kernel that entered the runtime (the return address points past it) */
#define MT_CALLER_PC (static_cast<const char*>(__builtin_return_address(0)) - 1)

inline void rq_push(Threadgroup* tg, Fiber* f) { tg->rq[tg->rq_tail++ & kRqMask] = f; }
inline Fiber* rq_pop(Threadgroup* tg) { return tg->rq_head == tg->rq_tail ? nullptr : tg->rq[tg->rq_head++ & kRqMask]; }

const char* wait_name(Wait w) {
    switch (w) {
        case kTgBarrier: return "the threadgroup barrier";
        case kSgBarrier: return "a simdgroup barrier";
        case kExchange: return "a simd collective";
        default: return "nothing";
    }
}

/* The abort flag is set by another worker's fault or by the watchdog: drop this threadgroup. */
[[noreturn]] void stop_for_abort(Worker* w, const void* pc) {
    Launch* L = w->launch;
    if (L->timed_out.load(std::memory_order_relaxed)) {
        w->in_kernel = 0;
        if (claim_fault(L, w, MT_FAULT_HANG, 0)) L->pc = pc;
    }
    abandon(w);
}

/* Switch from the running fiber to `to` (the running fiber has already been queued or marked waiting). */
__attribute__((always_inline)) inline void switch_to(Worker* w, Fiber* from, Fiber* to) {
    if (__builtin_expect(w->launch->abort.load(std::memory_order_relaxed), 0))
        stop_for_abort(w, MT_CALLER_PC);
    w->cur = to;
    ctx_switch(&from->ctx, &to->ctx);
}

[[noreturn]] void deadlock(Worker* w) {
    w->in_kernel = 0;
    Threadgroup* tg = w->tg;
    char text[400];
    size_t len = 0;
    int32_t kind = MT_FAULT_SIMD_DIVERGENCE;
    text[0] = 0;
    for (uint32_t i = 0; i < tg->n && len < sizeof text - 80; ++i) {
        Fiber* f = w->fibers[i];
        if (f->wait == kRunnable || f->wait == kDone) continue;
        if (f->wait != kExchange) kind = MT_FAULT_BARRIER_DIVERGENCE;
        const uint32_t* t = f->pos.thread_position_in_threadgroup;
        len += static_cast<size_t>(snprintf(text + len, sizeof text - len, "%sthread (%u,%u,%u) waits at %s (line %u)",
                                            len ? ", " : "", t[0], t[1], t[2], wait_name(f->wait), f->wait_line));
    }
    raise_fault(w, kind, 0, "no thread of the threadgroup can continue: %s", text);
}

/* Block the running fiber (already marked waiting) and run the next runnable one. */
__attribute__((always_inline)) inline void block(Worker* w, Fiber* f) {
    Fiber* next = rq_pop(w->tg);
    if (__builtin_expect(next == nullptr, 0)) deadlock(w);
    switch_to(w, f, next);
}

/* Program order of the positions of two lanes waiting at collectives or simdgroup barriers (see the file comment):
 * < 0 when a's comes first, 0 when both wait at the same collective. At the first level where their frames differ,
 * frames compare by (order, sub, id, count); a frame and a call at a level by the frame's order and the call's
 * cursor (a tie puts the frame first: the call is then in a statement after the construct began); two calls by
 * (cursor, line, site). */
int compare_positions(const Fiber* a, const Fiber* b) {
    const mt_frames& x = a->frames;
    const mt_frames& y = b->frames;
    const uint32_t n = x.depth < y.depth ? x.depth : y.depth;
    for (uint32_t i = 1; i <= n; ++i) {
        const mt_frame& p = x.f[i];
        const mt_frame& q = y.f[i];
        if (p.order != q.order) return p.order < q.order ? -1 : 1;
        if (p.sub != q.sub) return p.sub < q.sub ? -1 : 1;
        if (p.id != q.id) return p.id < q.id ? -1 : 1;
        if (p.count != q.count) return p.count < q.count ? -1 : 1;
    }
    if (x.depth > n) return x.f[n + 1].order <= y.f[n].cursor ? -1 : 1;
    if (y.depth > n) return y.f[n + 1].order <= x.f[n].cursor ? 1 : -1;
    if (x.f[n].cursor != y.f[n].cursor) return x.f[n].cursor < y.f[n].cursor ? -1 : 1;
    if (a->wait_line != b->wait_line) return a->wait_line < b->wait_line ? -1 : 1;
    if (a->wait_site != b->wait_site) return a->wait_site < b->wait_site ? -1 : 1;
    return 0;
}

inline bool at_collective(const Fiber* f) { return f->wait == kExchange || f->wait == kSgBarrier; }

/* The quick test of compare_positions(a, b) == 0 (equal keys stand for equal frames and cursors). */
inline bool same_position(const Fiber* a, const Fiber* b) {
    return a->frames.key == b->frames.key && a->wait_line == b->wait_line && a->wait_site == b->wait_site;
}

/* Record where the running fiber waits. */
inline void wait_at(Fiber* f, Wait kind, uint32_t line, uint32_t site) {
    f->wait = kind;
    f->wait_line = line;
    f->wait_site = site;
}

void resolve(Worker* w, Simdgroup& sg); /* below; the threadgroup barrier first (see the file comment) */
uint32_t gather(Simdgroup& sg, Fiber** F);

/* same_position(f, lead) for `f` waiting at (line, site), read from the arguments rather than from the fields just
 * stored (a wide load of two narrow stores stalls). */
inline bool at_position(const Fiber* f, uint32_t line, uint32_t site, const Fiber* lead) {
    return f->frames.key == lead->frames.key && line == lead->wait_line && site == lead->wait_site;
}

/* The running fiber `f` suspends at a collective or simdgroup barrier (wait_at done): counted, and checked against
 * the first lane waiting at one for the fast path. */
inline void wait_collective(Simdgroup& sg, Fiber* f, uint32_t line, uint32_t site, uint32_t xbuf) {
    ++sg.suspended;
    if (sg.in_collective++ == 0) {
        sg.x_lead = f;
        sg.x_mixed = 0;
    } else if (!at_position(f, line, site, sg.x_lead) || (site && xbuf != sg.x_lead->xbuf)) {
        sg.x_mixed = 1;
    }
    sg.x_mask |= 1u << f->lane;
}

/* A barrier divergence of thread `self` at `line` with thread `other` at `other_line` (indices in the group). */
[[noreturn]] __attribute__((format(printf, 6, 7))) void barrier_fault(Worker* w, uint32_t self, uint32_t line,
                                                                      uint32_t other, uint32_t other_line,
                                                                      const char* fmt, ...) {
    w->in_kernel = 0;
    if (mt_fault* rec = claim_fault(w->launch, w, MT_FAULT_BARRIER_DIVERGENCE, line)) {
        thread_coords(w, self, rec->thread);
        rec->has_other = 1;
        thread_coords(w, other, rec->other_thread);
        rec->other_line = other_line;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(rec->message, sizeof rec->message, fmt, ap);
        va_end(ap);
    }
    abandon(w);
}

/* A barrier completes with only `tg->bar_count` of the threadgroup's threads waiting at it: name one that is not (the
 * first to return, else one waiting at a collective), at the barrier's line. */
[[noreturn]] void partial_barrier(Worker* w) {
    Threadgroup* tg = w->tg;
    if (tg->live < tg->n)
        barrier_fault(w, tg->exit_first, tg->bar_line, tg->bar_first, tg->bar_line,
                      "a thread returned from the kernel without reaching the threadgroup barrier at line %u, where "
                      "%u of the threadgroup's %u threads wait (every thread of a threadgroup must execute each "
                      "threadgroup_barrier: Metal leaves it undefined, a GPU may hang or let the others go on)",
                      tg->bar_line, tg->bar_count, tg->n);
    uint32_t i = 0;
    while (i + 1 < tg->n && w->fibers[i]->wait == kTgBarrier) ++i;
    const Fiber* away = w->fibers[i];
    barrier_fault(w, away->index, tg->bar_line, tg->bar_first, tg->bar_line,
                  "a thread waits at %s at line %u while %u of the threadgroup's %u threads pass the threadgroup "
                  "barrier at line %u (every thread of a threadgroup must execute each threadgroup_barrier: Metal "
                  "leaves it undefined, a GPU may hang or let the others go on)", wait_name(away->wait),
                  away->wait_line, tg->bar_count, tg->n, tg->bar_line);
}

/* Every simdgroup with live lanes arrived: release exactly the lanes waiting at the barrier (the running fiber, if
 * one of them, is made runnable without being queued). Lanes waiting at collectives stay waiting. */
void complete_tg_barrier(Worker* w) {
    Threadgroup* tg = w->tg;
    if (w->uniform && tg->bar_count != tg->n) partial_barrier(w);
    ++tg->epoch;
    tg->bar_count = tg->bar_sgs = 0;
    if (w->prof_tg) prof_tg_barrier(w, tg->bar_line);
    /* in run order, the lanes waiting at the barrier (bar_mask) of each simdgroup */
    for (uint32_t k = 0; k < tg->nsg; ++k) {
        Simdgroup& sg = w->sgs[w->reverse ? tg->nsg - 1 - k : k];
        ++sg.epoch;
        sg.suspended -= sg.tg_waiters;
        sg.tg_waiters = sg.arrived = 0;
        Fiber** F = w->fibers.data() + sg.first;
        for (uint32_t m = sg.bar_mask; m;) {
            const uint32_t i = w->reverse ? 31 - __builtin_clz(m) : __builtin_ctz(m);
            m &= ~(1u << i);
            Fiber* f = F[i];
            f->wait = kRunnable;
            if (f != w->cur) rq_push(tg, f);
        }
        sg.bar_mask = 0;
    }
}

inline void maybe_complete_tg_barrier(Worker* w) {
    if (w->tg->bar_sgs && w->tg->bar_sgs == w->tg->live_sgs) complete_tg_barrier(w);
}

/* Two lanes wait at one barrier: the same line in the same frames (cursors may differ: each is the statement its
 * lane ran last at the innermost level). */
bool same_barrier(const Fiber* a, const Fiber* b) {
    if (same_position(a, b)) return true;
    bool same = a->wait_line == b->wait_line && a->frames.depth == b->frames.depth;
    for (uint32_t i = 1; same && i <= a->frames.depth; ++i) {
        const mt_frame &p = a->frames.f[i], &q = b->frames.f[i];
        same = p.order == q.order && p.sub == q.sub && p.id == q.id && p.count == q.count;
    }
    return same;
}

/* Every live lane of `sg` is suspended and the first of them in program order, `first`, waits at the threadgroup
 * barrier: the simdgroup arrives (a GPU counts a barrier per simdgroup, whichever of its lanes are active). */
void arrive(Worker* w, Simdgroup& sg, const Fiber* first) {
    Threadgroup* tg = w->tg;
    Fiber** F = w->fibers.data() + sg.first;
    for (uint32_t i = 0; sg.bar_mixed && i < sg.lanes; ++i)
        if (const Fiber* f = F[i]; f->wait == kTgBarrier && !same_barrier(f, first))
            barrier_fault(w, f->index, f->wait_line, first->index, first->wait_line,
                          "lanes of one simdgroup wait at two threadgroup barriers, at line %u and at line %u%s (a GPU "
                          "counts a barrier once per simdgroup, so which of the two its arrival is for depends on "
                          "how the compiler orders the divergent paths)", f->wait_line, first->wait_line,
                          f->wait_line == first->wait_line ? " in different arms, iterations or calls" : "");
    if (tg->bar_sgs == 0) {
        tg->bar_line = first->wait_line;
        tg->bar_first = first->index;
    } else if (w->uniform && first->wait_line != tg->bar_line)
        barrier_fault(w, first->index, first->wait_line, tg->bar_first, tg->bar_line,
                      "simdgroups wait at the threadgroup barriers at line %u and at line %u (every thread of a "
                      "threadgroup must execute the same threadgroup_barrier: Metal leaves it undefined; Apple GPUs "
                      "count both as one barrier)", first->wait_line, tg->bar_line);
    sg.arrived = 1;
    ++tg->bar_sgs;
    maybe_complete_tg_barrier(w);
}

/* Every live lane of `sg` is suspended, some at the threadgroup barrier: the simdgroup arrives if a lane waiting at
 * the barrier comes first in program order, else the first collective completes. */
void settle(Worker* w, Simdgroup& sg) {
    Fiber** F = w->fibers.data() + sg.first;
    const Fiber* first = sg.bar_mixed ? nullptr : F[__builtin_ctz(sg.bar_mask)]; /* all at one position */
    for (uint32_t i = 0; sg.bar_mixed && i < sg.lanes; ++i)
        if (F[i]->wait == kTgBarrier && (!first || (!same_position(F[i], first) && compare_positions(F[i], first) < 0)))
            first = F[i];
    if (sg.in_collective)
        for (uint32_t i = 0; i < sg.lanes; ++i)
            if (at_collective(F[i]) && compare_positions(F[i], first) < 0) return resolve(w, sg);
    arrive(w, sg, first);
}

/* Every live lane of `sg` is suspended: complete the collective (or simdgroup barrier) that comes first in program
 * order over the lanes waiting at it (see the file comment). The lanes' published bytes are gathered into one slot
 * buffer: no lane reads slots while all are suspended, so any lane's other buffer is free. The running fiber, if it
 * takes part, is made runnable without being queued. */
void resolve(Worker* w, Simdgroup& sg) {
    Fiber** F = w->fibers.data() + sg.first;
    uint32_t mask = sg.x_mask, n = sg.in_collective; /* all at one position with one slot buffer (x_mixed 0) */
    if (sg.x_mixed) {
        mask = gather(sg, F);
        n = __builtin_popcount(mask);
    }
    ++sg.epoch;
    sg.suspended -= n;
    sg.in_collective -= n;
    sg.x_mask &= ~mask;
    const Fiber* lead = F[__builtin_ctz(mask)];
    if (lead->wait == kExchange && lead->wait_site == MT_SITE_MATRIX_PRODUCT) mat_multiply(sg);
    if (w->prof_tg) prof_collective(w, sg, lead, mask);
    /* release them in run order, the ready queue's tail kept in a register (the loop runs for every product) */
    Threadgroup* tg = w->tg;
    const Fiber* cur = w->cur;
    uint32_t tail = tg->rq_tail;
    auto release = [&](uint32_t i) {
        Fiber* f = F[i];
        f->wait = kRunnable;
        f->xmask = mask;
        if (f != cur) tg->rq[tail++ & kRqMask] = f;
    };
    if (!w->reverse)
        for (uint32_t m = mask; m; m &= m - 1u) release(__builtin_ctz(m));
    else
        for (uint32_t m = mask; m;) {
            const uint32_t i = 31 - __builtin_clz(m);
            m &= ~(1u << i);
            release(i);
        }
    tg->rq_tail = tail;
}

/* The lanes of `sg` waiting at the collective that comes first, their published bytes moved into one buffer. */
uint32_t gather(Simdgroup& sg, Fiber** F) {
    const Fiber* best = nullptr;
    bool same = true; /* every waiting lane is at one position (no second comparison) */
    for (uint32_t i = 0; i < sg.lanes; ++i) {
        if (!at_collective(F[i])) continue;
        if (!best) {
            best = F[i];
            continue;
        }
        const int c = same_position(F[i], best) ? 0 : compare_positions(F[i], best);
        if (c == 0) continue;
        same = false;
        if (c < 0) best = F[i];
    }
    uint32_t mask = 0, buf = 2;
    for (uint32_t i = 0; i < sg.lanes; ++i) {
        Fiber* f = F[i];
        if (!at_collective(f) || (!same && !same_position(f, best) && compare_positions(f, best) != 0)) continue;
        mask |= 1u << i;
        if (f->wait != kExchange) continue;
        if (buf == 2) buf = f->xbuf;
        if (f->xbuf != buf) {
            memcpy(sg.slots[buf][i], sg.slots[f->xbuf][i], MT_SLOT_BYTES);
            f->xbuf = buf;
            f->xnext = buf ^ 1u;
        }
    }
    return mask;
}

/* A lane of `sg` suspended or exited (already counted): if that was the last running lane, complete a collective or
 * let the simdgroup arrive at the threadgroup barrier. */
inline void maybe_resolve(Worker* w, Simdgroup& sg) {
    if (sg.suspended != sg.live || sg.arrived || sg.suspended == 0) return;
    sg.tg_waiters ? settle(w, sg) : resolve(w, sg);
}

void fill_positions(Worker* w, Launch* L) {
    Threadgroup* tg = w->tg;
    const mt_launch_desc& d = L->d;
    mt_thread_pos base;
    memset(&base, 0, sizeof base);
    for (int k = 0; k < 3; ++k) {
        base.threadgroup_position_in_grid[k] = tg->idx[k];
        base.threads_per_threadgroup[k] = tg->size[k];
        base.dispatch_threads_per_threadgroup[k] = d.threads_per_tg[k];
        base.threadgroups_per_grid[k] = d.threadgroups[k];
        base.threads_per_grid[k] = d.grid_threads[k];
    }
    base.simdgroups_per_threadgroup = tg->nsg;
    base.quadgroups_per_threadgroup = (tg->n + 3) / 4;
    const uint32_t sx = tg->size[0], sy = tg->size[1];
    for (uint32_t i = 0; i < tg->n; ++i) {
        Fiber* f = w->fibers[i];
        mt_thread_pos& p = f->pos;
        p = base;
        const uint32_t local[3] = {i % sx, (i / sx) % sy, i / (sx * sy)};
        for (int k = 0; k < 3; ++k) {
            p.thread_position_in_threadgroup[k] = local[k];
            p.thread_position_in_grid[k] = tg->idx[k] * d.threads_per_tg[k] + local[k];
        }
        p.thread_index_in_threadgroup = i;
        p.thread_index_in_simdgroup = i % MT_SIMD_WIDTH;
        p.simdgroup_index_in_threadgroup = i / MT_SIMD_WIDTH;
        p.threads_per_simdgroup = w->sgs[i / MT_SIMD_WIDTH].lanes;
        p.thread_index_in_quadgroup = i % 4;
        p.quadgroup_index_in_threadgroup = i / 4;
        f->index = i;
        f->sg = i / MT_SIMD_WIDTH;
        f->lane = i % MT_SIMD_WIDTH;
        f->mat_at = static_cast<uint8_t>(((f->lane / 16u) * 4u + (f->lane / 2u) % 4u) * 8u +
                                         ((f->lane / 8u) % 2u) * 4u + (f->lane % 2u) * 2u);
        f->wait = kRunnable;
        f->wait_line = 0;
        f->xbuf = f->xnext = f->xmask = 0;
        f->frames.depth = 0;
        f->frames.key = 0;
        f->frames.f[0] = mt_frame{};
        ctx_prepare(f);
    }
}

} // namespace

/* Per-launch setup of a worker, run on its own stack before any threadgroup: fiber stacks of the right size,
 * [[threadgroup]] parameter regions. */
bool prepare_launch(Worker* w, Launch* L) {
    w->reverse = L->d.reverse_order;
    if (w->fiber_stack != L->stack_bytes) {
        for (Fiber* f : w->fibers) {
            stack_free(f->stack);
            delete f;
        }
        w->fibers.clear();
        w->fiber_stack = L->stack_bytes;
    }
    bool regions_changed = false;
    if (w->params.size() < L->param_bytes.size()) w->params.resize(L->param_bytes.size());
    for (size_t i = 0; i < L->param_bytes.size(); ++i) {
        Region& r = w->params[i];
        if (!r.map || r.bytes != L->param_bytes[i]) {
            region_free(r);
            if (!region_alloc(r, L->param_bytes[i], 16)) return false;
            regions_changed = true;
        }
        r.launch = L->id;
    }
    w->san_on = L->d.sanitize ? 1 : 0;
    w->uniform = L->d.apple_barriers ? 0 : 1;
    watch_apply(w, L->watch);
    if (w->san_on) {
        for (size_t i = 0; i < L->param_bytes.size(); ++i)
            if (!w->params[i].shadow && !san_attach(w, w->params[i], 1, static_cast<uint32_t>(i))) return false;
        regions_changed = true;
    }
    if (regions_changed) san_rebuild(w);
    return true;
}

void run_threadgroup(Worker* w, Launch* L, uint64_t linear) {
    Threadgroup* tg = w->tg;
    const mt_launch_desc& d = L->d;
    tg->idx[0] = static_cast<uint32_t>(linear % d.threadgroups[0]);
    tg->idx[1] = static_cast<uint32_t>(linear / d.threadgroups[0] % d.threadgroups[1]);
    tg->idx[2] = static_cast<uint32_t>(linear / d.threadgroups[0] / d.threadgroups[1]);
    tg->n = 1;
    for (int k = 0; k < 3; ++k) {
        const uint32_t start = tg->idx[k] * d.threads_per_tg[k];
        const uint32_t left = d.grid_threads[k] - start;
        tg->size[k] = left < d.threads_per_tg[k] ? left : d.threads_per_tg[k];
        tg->n *= tg->size[k];
    }
    w->cur = nullptr;
    while (w->fibers.size() < tg->n) {
        Fiber* f = new (std::nothrow) Fiber();
        if (!f || !stack_alloc(f->stack, w->fiber_stack)) {
            delete f;
            raise_fault(w, MT_FAULT_INTERNAL, 0, "cannot map a %zu-byte fiber stack (out of memory or mappings)",
                        w->fiber_stack);
        }
        f->worker = w;
        w->fibers.push_back(f);
    }
    tg->nsg = (tg->n + MT_SIMD_WIDTH - 1) / MT_SIMD_WIDTH;
    for (uint32_t s = 0; s < tg->nsg; ++s) {
        Simdgroup& sg = w->sgs[s];
        sg.first = s * MT_SIMD_WIDTH;
        sg.lanes = tg->n - sg.first < MT_SIMD_WIDTH ? tg->n - sg.first : MT_SIMD_WIDTH;
        sg.live = sg.lanes;
        sg.suspended = sg.in_collective = sg.tg_waiters = sg.epoch = sg.arrived = sg.x_mask = sg.bar_mask = 0;
        /* the elements of lanes a partial simdgroup lacks read as zero in its products */
        if (sg.lanes < MT_SIMD_WIDTH) {
            memset(sg.mat_a, 0, sizeof sg.mat_a);
            memset(sg.mat_b, 0, sizeof sg.mat_b);
        }
    }
    fill_positions(w, L);
    /* threadgroup memory: a fresh fill for the regions of this launch */
    ++w->tg_stamp;
    tg->mem_used = L->params_total;
    for (size_t i = 0; i < L->param_bytes.size(); ++i) memset(w->params[i].ptr, d.tg_fill, w->params[i].bytes);
    for (Region& r : w->slots)
        if (r.map && r.launch == L->id) memset(r.ptr, d.tg_fill, r.bytes);
    if (w->san_on) san_begin_threadgroup(w);
    tg->live = tg->n;
    tg->live_sgs = tg->nsg;
    tg->bar_count = tg->bar_sgs = 0;
    tg->epoch = 0;
    tg->rq_head = tg->rq_tail = 0;
    if (!w->reverse)
        for (uint32_t i = 0; i < tg->n; ++i) rq_push(tg, w->fibers[i]);
    else
        for (uint32_t i = tg->n; i-- > 0;) rq_push(tg, w->fibers[i]);
    Fiber* first = rq_pop(tg);
    w->cur = first;
    if (L->prof) prof_begin_threadgroup(w, linear);
    w->in_kernel = 1;
    ctx_switch(&w->sched, &first->ctx);
    w->in_kernel = 0;
    w->cur = nullptr;
    if (w->prof_tg) prof_end_threadgroup(w);
}

} // namespace mtrt

using namespace mtrt;

extern "C" [[noreturn]] void mt_fiber_main(Fiber* f) {
    Worker* w = tl_worker;
    Launch* L = w->launch;
    L->d.fn(L->d.buffers, &f->pos);
    /* the thread exits */
    Threadgroup* tg = w->tg;
    Simdgroup& sg = w->sgs[f->sg];
    f->wait = kDone;
    if (w->prof_tg) prof_exit(w, f);
    if (tg->live-- == tg->n) tg->exit_first = f->index;
    if (--sg.live == 0) {
        --tg->live_sgs;
        maybe_complete_tg_barrier(w);
    } else {
        maybe_resolve(w, sg);
    }
    Fiber* next = rq_pop(tg);
    if (next) switch_to(w, f, next);
    else if (tg->live == 0) ctx_switch(&f->ctx, &w->sched);
    else deadlock(w);
    __builtin_trap(); /* a finished fiber is never resumed */
}

MT_EXPORT void mt_threadgroup_barrier(uint32_t line) {
    Worker* w = tl_worker;
    Fiber* f = w->cur;
    Simdgroup& sg = w->sgs[f->sg];
    wait_at(f, kTgBarrier, line, 0);
    ++w->tg->bar_count;
    ++sg.suspended;
    if (sg.tg_waiters++ == 0) {
        sg.bar_lead = f;
        sg.bar_mixed = 0;
    } else if (!at_position(f, line, 0, sg.bar_lead)) {
        sg.bar_mixed = 1;
    }
    sg.bar_mask |= 1u << f->lane;
    maybe_resolve(w, sg);
    if (f->wait != kRunnable) block(w, f);
}

MT_EXPORT void mt_simdgroup_barrier(uint32_t line) {
    Worker* w = tl_worker;
    Fiber* f = w->cur;
    Simdgroup& sg = w->sgs[f->sg];
    wait_at(f, kSgBarrier, line, 0);
    wait_collective(sg, f, line, 0, 0);
    maybe_resolve(w, sg);
    if (f->wait != kRunnable) block(w, f);
}

MT_EXPORT const unsigned char* mt_simd_exchange(const void* src, uint32_t bytes, uint32_t site, uint32_t line,
                                                mt_exchange_view* view) {
    Worker* w = tl_worker;
    Fiber* f = w->cur;
    Simdgroup& sg = w->sgs[f->sg];
    if (__builtin_expect(bytes > MT_SLOT_BYTES, 0))
        raise_fault(w, MT_FAULT_KERNEL, line, "simd exchange of %u bytes (a lane may publish at most %u)", bytes,
                    MT_SLOT_BYTES);
    if (__builtin_expect(site == 0, 0)) raise_fault(w, MT_FAULT_KERNEL, line, "simd exchange site 0 is reserved");
    const uint32_t xbuf = f->xnext;
    f->xbuf = xbuf;
    f->xnext = xbuf ^ 1u;
    memcpy(sg.slots[xbuf][f->lane], src, bytes);
    wait_at(f, kExchange, line, site);
    wait_collective(sg, f, line, site, xbuf);
    maybe_resolve(w, sg);
    if (f->wait != kRunnable) block(w, f);
    view->live = f->xmask;
    view->lane = f->lane;
    return &sg.slots[f->xbuf][0][0];
}

/* The fiber whose position block `pos` is (mt_current_pos of the running thread). */
inline Fiber* fiber_of(const mt_thread_pos* pos) {
    return reinterpret_cast<Fiber*>(reinterpret_cast<uintptr_t>(pos) - offsetof(Fiber, pos));
}

/* A simd exchange whose lanes publish their elements straight into the simdgroup's matrices (at mat_at, where no
 * other lane writes) and whose completion computes the product once (resolve); the lane reads its two elements of
 * it before anything else of its simdgroup can run. No TLS lookup: the worker comes from the fiber. */
MT_EXPORT const float* mt_simd_matrix_product(const mt_thread_pos* pos, float a0, float a1, float b0, float b1,
                                              uint32_t line) {
    Fiber* f = fiber_of(pos);
    Worker* w = f->worker;
    Simdgroup& sg = w->sgs[f->sg];
    const uint32_t at = f->mat_at;
    sg.mat_a[at] = a0;
    sg.mat_a[at + 1] = a1;
    sg.mat_b[at] = b0;
    sg.mat_b[at + 1] = b1;
    wait_at(f, kExchange, line, MT_SITE_MATRIX_PRODUCT);
    wait_collective(sg, f, line, MT_SITE_MATRIX_PRODUCT, f->xbuf);
    maybe_resolve(w, sg);
    if (f->wait != kRunnable) block(w, f);
    return sg.mat_c + at;
}

MT_EXPORT void mt_yield(void) {
    Worker* w = tl_worker;
    if (!w || !w->cur) return;
    if (w->launch->abort.load(std::memory_order_relaxed)) stop_for_abort(w, MT_CALLER_PC);
    Threadgroup* tg = w->tg;
    if (tg->rq_head == tg->rq_tail) return;
    Fiber* f = w->cur;
    rq_push(tg, f);
    switch_to(w, f, rq_pop(tg));
}

MT_EXPORT mt_frames* mt_current_frames(void) {
    Worker* w = tl_worker;
    return w && w->cur ? &w->cur->frames : nullptr;
}

MT_EXPORT const mt_thread_pos* mt_current_pos(void) {
    Worker* w = tl_worker;
    return w && w->cur ? &w->cur->pos : nullptr;
}
