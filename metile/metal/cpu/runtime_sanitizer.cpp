/* runtime_sanitizer.cpp - shadow state for threadgroup memory (mt_san_access).
 *
 * Sanitized kernel libraries report every memory access through the __tsan_* hooks of mt_sanitizer_hooks.cpp.
 * Only accesses to the worker's threadgroup memory (slots and [[threadgroup]] parameters) are tracked: each byte
 * has a shadow cell holding the threadgroup generation it was last written in, its last writer and its last two
 * distinct readers, each with the synchronisation epochs of the access. Two accesses by different threads are
 * ordered when a threadgroup barrier completed between them (threadgroup epoch) or, for lanes of one simdgroup,
 * when a simdgroup barrier or simd collective completed between them (simdgroup epoch). Reported (first report
 * ends the launch like a fault): reads of bytes no thread of the threadgroup wrote (the launch's fill does not
 * count), and unordered write/read or write/write pairs.
 *
 * Accesses in front of a bound device buffer (the part of its first page before its start, which no guard page
 * covers) are bad-access faults.
 *
 * is_write: 0 read, 1 write, 2 atomic load, 3 atomic store, 4 atomic read-modify-write. Atomic accesses never
 * race with one another; loads and read-modify-writes of unwritten memory are still uninitialised reads, and
 * atomic writes count as writes for later plain accesses.
 */
#include "runtime_internal.h"

#include <stdio.h>
#include <sys/mman.h>

namespace mtrt {

struct SanAccess {
    uint16_t thread1; /* thread index + 1; 0: none */
    uint32_t tg_epoch, sg_epoch;
    const void* pc;
};

struct SanCell {
    uint32_t gen; /* threadgroup generation of the last write; any other value: not written in this threadgroup */
    SanAccess w, r, r2;
};

bool san_attach(Worker* w, Region& r, int is_param, uint32_t index) {
    (void)w;
    (void)is_param;
    (void)index;
    san_detach(r);
    if (!r.bytes) return true;
    const size_t len = round_up(r.bytes * sizeof(SanCell), page_size());
    void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    r.shadow = static_cast<SanCell*>(m);
    r.shadow_len = len;
    return true;
}

void san_detach(Region& r) {
    if (r.shadow) munmap(r.shadow, r.shadow_len);
    r.shadow = nullptr;
    r.shadow_len = 0;
}

void san_rebuild(Worker* w) {
    w->san_ranges.clear();
    w->san_lo = reinterpret_cast<char*>(UINTPTR_MAX);
    w->san_hi = nullptr;
    auto add = [w](Region& r, int is_param, uint32_t index) {
        if (!r.shadow) return;
        w->san_ranges.push_back(SanRange{r.ptr, r.ptr + r.bytes, r.shadow, is_param, index});
        if (r.ptr < w->san_lo) w->san_lo = r.ptr;
        if (r.ptr + r.bytes > w->san_hi) w->san_hi = r.ptr + r.bytes;
    };
    for (size_t i = 0; i < w->slots.size(); ++i) add(w->slots[i], 0, static_cast<uint32_t>(i));
    for (size_t i = 0; i < w->params.size(); ++i) add(w->params[i], 1, static_cast<uint32_t>(i));
}

void san_begin_threadgroup(Worker* w) {
    if (++w->san_gen == 0) { /* generations wrapped: forget everything */
        for (SanRange& r : w->san_ranges) memset(r.shadow, 0, static_cast<size_t>(r.hi - r.lo) * sizeof(SanCell));
        w->san_gen = 1;
    }
}

namespace {

[[noreturn]] void report(Worker* w, int32_t kind, const SanRange& range, const char* byte, const SanAccess* other,
                         const char* what, bool writing, const void* pc) {
    w->in_kernel = 0;
    Launch* L = w->launch;
    if (mt_fault* f = claim_fault(L, w, kind, 0)) {
        f->address = reinterpret_cast<uintptr_t>(byte);
        L->pc = pc;
        char where[96];
        snprintf(where, sizeof where, "byte %zu of %s %u", static_cast<size_t>(byte - range.lo),
                 range.is_param ? "[[threadgroup]] parameter" : "threadgroup variable", range.index);
        if (other) {
            uint32_t t[3];
            thread_coords(w, other->thread1 - 1u, t);
            f->has_other = 1;
            memcpy(f->other_thread, t, sizeof t);
            L->other_pc = other->pc;
            snprintf(f->message, sizeof f->message, "%s %s that thread (%u,%u,%u) %s, with no barrier between them",
                     writing ? "writes" : "reads", where, t[0], t[1], t[2], what);
        } else {
            snprintf(f->message, sizeof f->message, "reads %s, which no thread of this threadgroup has written", where);
        }
    }
    abandon(w);
}

/* An access in front of a device buffer (see runtime_buffers.cpp). */
[[noreturn]] void front_access(Worker* w, const char* a, const char* start, int32_t is_write, const void* pc) {
    w->in_kernel = 0;
    Launch* L = w->launch;
    if (mt_fault* f = claim_fault(L, w, MT_FAULT_BAD_ACCESS, 0)) {
        f->address = reinterpret_cast<uintptr_t>(a);
        L->pc = pc;
        snprintf(f->message, sizeof f->message, "%s %zu bytes before the start of a buffer (found by the sanitizer)",
                 is_write == 0 || is_write == 2 ? "reads" : "writes", static_cast<size_t>(start - a));
    }
    abandon(w);
}

} // namespace
} // namespace mtrt

using namespace mtrt;

MT_EXPORT void mt_san_access(const void* addr, uint32_t size, int32_t is_write, const void* pc) {
    Worker* w = tl_worker;
    if (!w || !w->cur) return;
    if (w->prof_tg) prof_access(w, addr, size, is_write, pc);
    if (!w->san_on) return;
    const char* a = static_cast<const char*>(addr);
    for (const auto& fr : w->launch->fronts)
        if (a < fr.second && a + size > fr.first) front_access(w, a, fr.second, is_write, pc);
    if (a >= w->san_hi || a + size <= w->san_lo) return;
    Fiber* f = w->cur;
    const uint32_t me = f->index, my_sg = f->sg;
    const uint32_t tg_epoch = w->tg->epoch, sg_epoch = w->sgs[my_sg].epoch, gen = w->san_gen;
    /* an earlier access by another thread that is not ordered before this one */
    auto racy = [&](const SanAccess& o) {
        if (!o.thread1 || o.thread1 - 1u == me || o.tg_epoch != tg_epoch) return false;
        return (o.thread1 - 1u) / MT_SIMD_WIDTH != my_sg || o.sg_epoch == sg_epoch;
    };
    const SanAccess mine{static_cast<uint16_t>(me + 1), tg_epoch, sg_epoch, pc};
    for (const SanRange& r : w->san_ranges) {
        if (a >= r.hi || a + size <= r.lo) continue;
        const char* lo = a > r.lo ? a : r.lo;
        const char* hi = a + size < r.hi ? a + size : r.hi;
        for (const char* b = lo; b < hi; ++b) {
            SanCell& c = r.shadow[b - r.lo];
            const bool written = c.gen == gen;
            const bool reads = is_write == 0 || is_write == 2 || is_write == 4;
            if (reads && !written) report(w, MT_FAULT_SAN_UNINIT, r, b, nullptr, "", false, pc);
            if (is_write == 0) {
                if (racy(c.w)) report(w, MT_FAULT_SAN_RACE, r, b, &c.w, "wrote", false, pc);
                if (c.r.thread1 && c.r.thread1 - 1u != me && c.r.tg_epoch == tg_epoch) c.r2 = c.r;
                c.r = mine;
            } else if (is_write == 1) {
                if (written) {
                    if (racy(c.w)) report(w, MT_FAULT_SAN_RACE, r, b, &c.w, "wrote", true, pc);
                    if (racy(c.r)) report(w, MT_FAULT_SAN_RACE, r, b, &c.r, "read", true, pc);
                    if (racy(c.r2)) report(w, MT_FAULT_SAN_RACE, r, b, &c.r2, "read", true, pc);
                } else {
                    memset(&c, 0, sizeof c);
                    c.gen = gen;
                }
                c.w = mine;
            } else if (is_write >= 3) {
                if (!written) {
                    memset(&c, 0, sizeof c);
                    c.gen = gen;
                }
                c.w = mine;
            }
        }
    }
}
