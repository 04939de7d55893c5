/* runtime_trace.h - the device segments each profiled threadgroup touches, in order (runtime_trace.cpp): what
 * metile.profile.reuse replays through a model of the last-level cache, threadgroups in dispatch order.
 *
 * A threadgroup's trace is a sequence of steps, each the distinct segments (address >> log2 segment_bytes) its
 * simdgroup-wide device instructions touch, in the order the instructions complete, a segment once a step. A step
 * ends at a threadgroup barrier, at the end of the threadgroup, and once it holds kTraceStepSegments segments, so a
 * threadgroup without barriers that sweeps more data than that shows its re-reads. The runtime keeps at most
 * kTraceBudget segments a launch: a threadgroup that would go beyond is left out (mt_profile_result.trace_complete 0).
 */
#ifndef METILE_RUNTIME_TRACE_H
#define METILE_RUNTIME_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <vector>

#include "mt_runtime.h"

#pragma GCC visibility push(hidden)
namespace mtrt {

constexpr uint32_t kTraceStepSegments = 1024;  /* segments a step holds at most */
constexpr uint64_t kTraceBudget = 1ull << 22;   /* segments a launch keeps (32 MiB) */
constexpr uint64_t kTraceStepEnd = ~0ull;       /* ends a step in the recorded sequence */

/* The distinct segments of the current step: open addressing, cleared by a stamp. */
class StepSet {
  public:
    bool add(uint64_t seg); /* true when seg is new in this step */
    void clear() {
        count_ = 0;
        if (++stamp_ == 0) {
            std::fill(slots_.begin(), slots_.end(), Slot{});
            stamp_ = 1;
        }
    }

  private:
    struct Slot {
        uint64_t seg = 0;
        uint32_t stamp = 0;
    };
    void grow();
    std::vector<Slot> slots_;
    size_t cap_ = 0, count_ = 0;
    uint32_t stamp_ = 1;
};

/* A launch's traces: each threadgroup's (linear index, start, end) in `segs`, merged from its workers. */
struct TraceShared {
    std::atomic<uint64_t> used{0};    /* segments reserved against kTraceBudget */
    std::atomic<uint32_t> dropped{0}; /* a counted threadgroup was left out */
    std::vector<uint64_t> segs, tgs;
};

/* A worker's traces and the step being recorded. */
struct TraceLocal {
    std::vector<uint64_t> segs, tgs;
    StepSet seen;
    uint32_t in_step = 0;
    size_t tg_start = 0;
    uint64_t linear = 0;
    bool on = false;
};

void trace_reset(TraceLocal& t);
void trace_begin(TraceLocal& t, uint64_t linear);
void trace_step(TraceLocal& t);
void trace_end(TraceLocal& t, TraceShared& s);
void trace_merge(TraceLocal& t, TraceShared& s); /* under the launch's lock */
bool trace_finish(TraceShared& s, mt_profile_result* out);

inline void trace_touch(TraceLocal& t, uint64_t seg) {
    if (!t.on || !t.seen.add(seg)) return;
    t.segs.push_back(seg);
    if (++t.in_step >= kTraceStepSegments) trace_step(t);
}

} // namespace mtrt
#pragma GCC visibility pop

#endif /* METILE_RUNTIME_TRACE_H */
