/* runtime_trace.cpp - the order in which profiled threadgroups touch device segments (see runtime_trace.h). */
#include "runtime_trace.h"

#include <stdlib.h>
#include <string.h>

#include <algorithm>

namespace mtrt {

bool StepSet::add(uint64_t seg) {
    if ((count_ + 1) * 2 > cap_) grow();
    uint64_t h = seg * 0x9E3779B97F4A7C15ull;
    for (size_t i = static_cast<size_t>(h ^ (h >> 29)) & (cap_ - 1);; i = (i + 1) & (cap_ - 1)) {
        Slot& s = slots_[i];
        if (s.stamp != stamp_) {
            s = Slot{seg, stamp_};
            ++count_;
            return true;
        }
        if (s.seg == seg) return false;
    }
}

void StepSet::grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    const uint32_t old_stamp = stamp_;
    cap_ = cap_ ? cap_ * 2 : 4096;
    slots_.assign(cap_, Slot{});
    stamp_ = 1;
    count_ = 0;
    for (const Slot& s : old)
        if (s.stamp == old_stamp) add(s.seg);
}

void trace_reset(TraceLocal& t) {
    t.segs.clear();
    t.tgs.clear();
    t.on = false;
}

void trace_begin(TraceLocal& t, uint64_t linear) {
    t.seen.clear();
    t.in_step = 0;
    t.tg_start = t.segs.size();
    t.linear = linear;
    t.on = true;
}

void trace_step(TraceLocal& t) {
    if (!t.on) return;
    if (t.in_step) t.segs.push_back(kTraceStepEnd);
    t.seen.clear();
    t.in_step = 0;
    if (t.segs.size() - t.tg_start > kTraceBudget) { /* more than a launch keeps: stop recording it */
        t.segs.resize(t.tg_start);
        t.on = false;
    }
}

void trace_end(TraceLocal& t, TraceShared& s) {
    trace_step(t);
    const bool kept = t.on;
    t.on = false;
    const uint64_t n = t.segs.size() - t.tg_start;
    if (!kept || s.used.fetch_add(n, std::memory_order_relaxed) + n > kTraceBudget) {
        t.segs.resize(t.tg_start);
        s.dropped.store(1, std::memory_order_relaxed);
        return;
    }
    t.tgs.insert(t.tgs.end(), {t.linear, t.tg_start, t.segs.size()});
}

void trace_merge(TraceLocal& t, TraceShared& s) {
    const uint64_t base = s.segs.size();
    s.segs.insert(s.segs.end(), t.segs.begin(), t.segs.end());
    for (size_t i = 0; i < t.tgs.size(); i += 3) s.tgs.insert(s.tgs.end(), {t.tgs[i], t.tgs[i + 1] + base,
                                                                             t.tgs[i + 2] + base});
    trace_reset(t);
}

/* The traces into *out, threadgroups in dispatch (linear) order, each threadgroup's start and end renumbered. */
bool trace_finish(TraceShared& s, mt_profile_result* out) {
    const size_t n = s.tgs.size() / 3;
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s.tgs[3 * a] < s.tgs[3 * b]; });
    out->trace = static_cast<uint64_t*>(malloc(sizeof(uint64_t) * (s.segs.size() ? s.segs.size() : 1)));
    out->trace_threadgroups = static_cast<uint64_t*>(malloc(sizeof(uint64_t) * (n ? 3 * n : 1)));
    if (!out->trace || !out->trace_threadgroups) return false;
    uint64_t at = 0;
    for (size_t k = 0; k < n; ++k) {
        const uint64_t* g = &s.tgs[3 * order[k]];
        const uint64_t len = g[2] - g[1];
        memcpy(out->trace + at, s.segs.data() + g[1], sizeof(uint64_t) * len);
        out->trace_threadgroups[3 * k] = g[0];
        out->trace_threadgroups[3 * k + 1] = at;
        out->trace_threadgroups[3 * k + 2] = at + len;
        at += len;
    }
    out->n_trace = at;
    out->n_trace_threadgroups = n;
    out->trace_complete = s.dropped.load() ? 0 : 1;
    out->trace_step_segments = kTraceStepSegments;
    return true;
}

} // namespace mtrt
