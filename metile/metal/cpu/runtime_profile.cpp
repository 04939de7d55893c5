/* runtime_profile.cpp - performance counters (mt_launch_desc::profile): the work and traffic of the threadgroups a
 * launch selects, per instruction of the kernel and per .metal line, as an Apple GPU would see them.
 *
 * The instrumented (sanitizer) build of a kernel reports every memory access with its instruction (the __tsan_*
 * hooks of mt_sanitizer_hooks.cpp, through mt_san_access) and every simdgroup_matrix operation (mt_prof_event,
 * called by the compatibility header in that build only); the scheduler reports completed barriers and collectives
 * (runtime_sched.cpp). Lane-level figures (bytes, accesses, atomics) are counted as they come. Simdgroup-wide
 * figures need the accesses of one instruction by the lanes of a simdgroup together: the fibers of a simdgroup run
 * one after another, so a lane's k-th execution of an instruction is matched with the other lanes' k-th execution
 * of it (what a GPU does, lanes that do not reach it being inactive), in a record that is complete when every live
 * lane of the simdgroup added to it, or at the next point where all its live lanes meet (a threadgroup barrier, a
 * collective over all of them, the end of the threadgroup). A complete record counts one instruction:
 * - device memory (the bound buffers): the distinct aligned segments its lanes touch (coalescing);
 *   a run of scalar instructions of one simdgroup that each lane of the same active lanes continues where its
 *   previous access in the run ended (an unrolled `x[i] = in[i]`, i < 4) is one vector instruction, as Apple's
 *   compilers make it (see `extend_run`), and counts once over the run's bytes;
 * - threadgroup memory: the passes beyond the fewest its distinct bank words need, where lanes reading different
 *   words of one bank take one pass each (bank conflicts);
 * - simdgroup_matrix loads, stores and multiply-accumulates, by dtype;
 * - events of the tensor header (mt_prof_count: matmul2d FLOPs and runs, cooperative loads and stores), each adding
 *   its amount, once per simdgroup or at each call; mt_prof_pause stops counting a thread's accesses meanwhile.
 * Device bytes are also marked in bitmaps, per threadgroup and for the launch, for the bytes touched once per
 * threadgroup and once overall (the traffic with no reuse across threadgroups and with perfect reuse), and each
 * threadgroup's segments are recorded in the order its device instructions touch them (runtime_trace.h).
 *
 * Each worker counts into its own tables; mt_launch merges them (prof_finish) into the caller's result.
 */
#include "runtime_internal.h"
#include "runtime_trace.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <mutex>

namespace mtrt {

namespace {

enum Cls : uint8_t { kDevice = 0, kThreadgroup = 1, kEvent = 2 };

/* Open addressing map from a 128-bit key to a uint32 value; entries of older stamps are empty, so clearing is one
 * increment. */
class FlatMap {
  public:
    uint32_t* find_or_add(uint64_t k1, uint64_t k2, bool* added) {
        if ((count_ + 1) * 2 > cap_) grow();
        for (size_t i = hash(k1, k2) & (cap_ - 1);; i = (i + 1) & (cap_ - 1)) {
            Slot& s = slots_[i];
            if (s.stamp != stamp_) {
                s = Slot{k1, k2, stamp_, 0};
                ++count_;
                *added = true;
                return &s.value;
            }
            if (s.k1 == k1 && s.k2 == k2) {
                *added = false;
                return &s.value;
            }
        }
    }
    void clear() {
        count_ = 0;
        if (++stamp_ == 0) { /* stamps wrapped: empty every slot for real */
            std::fill(slots_.begin(), slots_.end(), Slot{});
            stamp_ = 1;
        }
    }

  private:
    struct Slot {
        uint64_t k1 = 0, k2 = 0;
        uint32_t stamp = 0, value = 0;
    };
    static size_t hash(uint64_t a, uint64_t b) {
        uint64_t h = (a ^ (b * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
        return static_cast<size_t>(h ^ (h >> 31));
    }
    void grow() {
        std::vector<Slot> old;
        old.swap(slots_);
        const uint32_t old_stamp = stamp_;
        cap_ = cap_ ? cap_ * 2 : 1024;
        slots_.assign(cap_, Slot{});
        stamp_ = 1;
        count_ = 0;
        for (const Slot& s : old) {
            if (s.stamp != old_stamp) continue;
            bool added;
            *find_or_add(s.k1, s.k2, &added) = s.value;
        }
    }
    std::vector<Slot> slots_;
    size_t cap_ = 0, count_ = 0;
    uint32_t stamp_ = 1;
};

/* One simdgroup-wide instruction being assembled (see the file comment). */
struct Record {
    uint32_t entry; /* its instruction's counters */
    uint32_t mask;  /* lanes added */
    uint8_t cls, kind;
    uint8_t access;  /* a memory record's: the access kind of mt_san_access (0 read, 1 write, 2-4 atomic) */
    uint8_t pieces;  /* scalar instructions a run (extend_run) holds, 0 for none */
    uint64_t amount; /* an event's: what it adds to its counter */
    uint64_t addr[MT_SIMD_WIDTH];
    uint32_t size[MT_SIMD_WIDTH];
};
constexpr uint32_t kDone = 0xffffffffu; /* a record already counted */
constexpr uint8_t kLoad = 1;             /* the kind of a memory record whose instruction only reads (a load) */
constexpr uint32_t kRunElements = 4;     /* a lane's most elements in one vector load or store */

/* Bytes (or segments) touched, one bit each; owns its mapping (moved, never copied). */
struct Bitmap {
    std::atomic<uint64_t>* words = nullptr;
    size_t n = 0, map_len = 0;
    Bitmap() = default;
    Bitmap(const Bitmap&) = delete;
    Bitmap& operator=(const Bitmap&) = delete;
    Bitmap(Bitmap&& o) noexcept : words(o.words), n(o.n), map_len(o.map_len) { o.words = nullptr; }
    bool alloc(size_t bytes) {
        n = (bytes + 63) / 64;
        map_len = round_up(n * sizeof(uint64_t) + 1, page_size());
        void* m = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) return false;
        words = static_cast<std::atomic<uint64_t>*>(m);
        return true;
    }
    ~Bitmap() {
        if (words) munmap(words, map_len);
    }
};

} // namespace

/* The counts of one launch, shared by its workers. */
struct ProfLaunch {
    mt_profile_desc d{};
    std::vector<uint64_t> tgs, dev_lo, dev_hi;
    uint32_t seg_shift = 6, bank_shift = 2;
    std::vector<Bitmap> seen;   /* per device buffer: bytes any counted threadgroup touched */
    std::vector<Bitmap> seen_seg; /* the same for segments (bit i: the i-th aligned segment from the buffer's) */
    std::mutex mu;              /* guards the merged results below */
    std::vector<mt_prof_entry> merged;
    uint64_t threadgroups = 0, unique_tg_bytes = 0, unique_bytes = 0, max_tg_memory = 0;
    uint64_t unique_tg_segments = 0, unique_segments = 0;
    TraceShared trace;
};

/* A worker's counters (see the file comment). */
struct Prof {
    ProfLaunch* launch = nullptr;
    std::vector<mt_prof_entry> entries;
    FlatMap entry_of;                  /* pc or line -> entries index */
    FlatMap occurrences;               /* (pc, thread) -> executions of the instruction by the thread */
    FlatMap records_of[kMaxSimdgroups]; /* (pc, class, occurrence) -> record index or kDone */
    std::vector<Record> records[kMaxSimdgroups];
    Record runs[kMaxSimdgroups][2][2];   /* per simdgroup, class (device, threadgroup) and read/write: the open run */
    uint32_t live[kMaxSimdgroups] = {};   /* lanes not exited, per simdgroup */
    std::vector<Bitmap> tg_seen;       /* per device buffer: bytes this threadgroup touched */
    std::vector<Bitmap> tg_seen_seg;   /* and segments */
    std::vector<std::pair<Bitmap*, size_t>> dirty; /* words of those to clear */
    uint64_t threadgroups = 0, unique_tg_bytes = 0, unique_bytes = 0, max_tg_memory = 0;
    uint64_t unique_tg_segments = 0, unique_segments = 0;
    std::vector<uint32_t> scratch;
    std::vector<uint64_t> scratch64;
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    TraceLocal trace;
};

namespace {

uint32_t log2u(uint32_t v) { return v ? 31u - static_cast<uint32_t>(__builtin_clz(v)) : 0u; }

mt_prof_entry& entry_for(Prof* p, uint64_t pc, uint32_t line, uint32_t* index = nullptr) {
    bool added;
    uint32_t* v = p->entry_of.find_or_add(pc, line, &added);
    if (added) {
        *v = static_cast<uint32_t>(p->entries.size());
        mt_prof_entry e;
        memset(&e, 0, sizeof e);
        e.pc_offset = pc; /* a raw pc until prof_finish */
        e.line = line;
        p->entries.push_back(e);
    }
    if (index) *index = *v;
    return p->entries[*v];
}

/* The device buffer holding [a, a + n), or -1. */
int device_buffer(const ProfLaunch* L, uint64_t a, uint32_t n) {
    for (size_t i = 0; i < L->dev_lo.size(); ++i)
        if (a >= L->dev_lo[i] && a + n <= L->dev_hi[i]) return static_cast<int>(i);
    return -1;
}

bool in_threadgroup_memory(const Worker* w, const char* a) {
    for (const Region& r : w->slots)
        if (r.ptr && r.tg_stamp == w->tg_stamp && a >= r.ptr && a < r.ptr + r.bytes) return true;
    for (const Region& r : w->params)
        if (r.ptr && a >= r.ptr && a < r.ptr + r.bytes) return true;
    return false;
}

/* Set bits [lo, hi) of `mine` (this threadgroup's) and `all` (the launch's); add the newly set ones to the counts. */
void mark(Prof* p, Bitmap& mine, Bitmap& all, uint64_t lo_bit, uint64_t hi_bit, uint64_t* tg_new, uint64_t* new_) {
    for (uint64_t bit = lo_bit; bit < hi_bit;) {
        const size_t word = bit / 64;
        const uint32_t lo = static_cast<uint32_t>(bit % 64);
        const uint32_t hi = hi_bit - word * 64 < 64 ? static_cast<uint32_t>(hi_bit - word * 64) : 64u;
        const uint64_t bits = (hi == 64 ? ~0ull : (1ull << hi) - 1) & ~((1ull << lo) - 1);
        const uint64_t had = mine.words[word].load(std::memory_order_relaxed);
        if (had == 0) p->dirty.emplace_back(&mine, word);
        mine.words[word].store(had | bits, std::memory_order_relaxed);
        *tg_new += static_cast<uint64_t>(__builtin_popcountll(bits & ~had));
        const uint64_t before = all.words[word].fetch_or(bits, std::memory_order_relaxed);
        *new_ += static_cast<uint64_t>(__builtin_popcountll(bits & ~before));
        bit = word * 64 + hi;
    }
}

/* Mark [a, a + n) of buffer b (starting at lo) as touched by this threadgroup and by the launch. */
void mark_bytes(Prof* p, int b, uint64_t a, uint32_t n) {
    ProfLaunch* L = p->launch;
    const uint64_t lo = L->dev_lo[b];
    mark(p, p->tg_seen[b], L->seen[b], a - lo, a - lo + n, &p->unique_tg_bytes, &p->unique_bytes);
    const uint32_t sh = L->seg_shift;
    mark(p, p->tg_seen_seg[b], L->seen_seg[b], (a >> sh) - (lo >> sh), ((a + n - 1) >> sh) - (lo >> sh) + 1,
         &p->unique_tg_segments, &p->unique_segments);
}

/* The bytes the lanes of a record touch, each once. */
uint64_t distinct_bytes(Prof* p, const Record& r) {
    std::vector<std::pair<uint64_t, uint64_t>>& spans = p->spans;
    spans.clear();
    for (uint32_t m = r.mask; m; m &= m - 1) {
        const uint32_t j = static_cast<uint32_t>(__builtin_ctz(m));
        spans.emplace_back(r.addr[j], r.addr[j] + r.size[j]);
    }
    std::sort(spans.begin(), spans.end());
    uint64_t total = 0, reach = 0;
    for (const auto& s : spans) {
        const uint64_t lo = s.first > reach ? s.first : reach;
        if (s.second > lo) total += s.second - lo;
        if (s.second > reach) reach = s.second;
    }
    return total;
}

/* Count a complete record. */
void count_record(Prof* p, const Record& r) {
    mt_prof_entry& e = p->entries[r.entry];
    if (r.cls == kEvent) {
        e.c[r.kind] += r.amount;
        return;
    }
    std::vector<uint64_t>& ids = p->scratch64;
    ids.clear();
    const uint32_t shift = r.cls == kDevice ? p->launch->seg_shift : p->launch->bank_shift;
    for (uint32_t m = r.mask; m; m &= m - 1) {
        const uint32_t j = static_cast<uint32_t>(__builtin_ctz(m));
        for (uint64_t u = r.addr[j] >> shift, last = (r.addr[j] + r.size[j] - 1) >> shift; u <= last; ++u)
            ids.push_back(u);
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (r.cls == kDevice) {
        e.c[MT_PROF_DEV_SIMD_OPS] += 1;
        e.c[MT_PROF_DEV_SEGMENTS] += ids.size();
        e.c[MT_PROF_DEV_ACTIVE_LANES] += static_cast<uint64_t>(__builtin_popcount(r.mask));
        for (uint64_t seg : ids) trace_touch(p->trace, seg);
        const uint64_t distinct = distinct_bytes(p, r);
        e.c[MT_PROF_DEV_DISTINCT_BYTES] += distinct;
        if (r.kind == kLoad) {
            e.c[MT_PROF_DEV_LOAD_SEGMENTS] += ids.size();
            e.c[MT_PROF_DEV_LOAD_DISTINCT_BYTES] += distinct;
        }
        return;
    }
    /* bank words: the most distinct words one bank holds is the passes the instruction needs */
    const uint32_t banks = p->launch->d.banks;
    std::vector<uint32_t>& per_bank = p->scratch;
    per_bank.assign(banks, 0);
    uint32_t passes = 0;
    for (uint64_t word : ids) passes = std::max(passes, ++per_bank[word % banks]);
    const uint64_t fewest = (ids.size() + banks - 1) / banks;
    e.c[MT_PROF_TG_SIMD_OPS] += 1;
    e.c[MT_PROF_TG_PASSES] += passes;
    e.c[MT_PROF_TG_CONFLICTS] += passes - fewest;
}

/* Whether complete record `r` continues `run`, the open run of its simdgroup, class and access: a scalar
 * instruction (1, 2 or 4 bytes a lane, aligned to its size) whose every lane, the run's lanes exactly, starts where
 * the lane's previous access in the run ended, up to kRunElements elements a lane. The instruction may be the run's
 * own again: the instrumented build keeps loops rolled that Apple's compiler unrolls (MLX's `for (i = 0; i <
 * N_READS; i++)`, a template constant, runs one load instruction four times on the CPU). Apple's GPUs load and store
 * up to four 8-, 16- or 32-bit elements a lane in one instruction (device_load and device_store take a mask of up to
 * 4 components of one type, i8, i16 or i32: Dougall Johnson's applegpu ISA notes; threadgroup memory's local_load and local_store likewise,
 * Mesa's AGX compiler agx_emit_local_load), and the compiler merges adjacent scalar accesses into them (Mesa's AGX
 * compiler runs nir_opt_load_store_vectorize on device memory with at most 4 components of at most 32 bits, aligned
 * to the element). Atomics never merge. */
bool extend_run(Record& run, const Record& r) {
    if (!run.pieces || run.mask != r.mask || run.access != r.access || r.access > 1 || run.pieces >= 4) return false;
    const uint32_t first = static_cast<uint32_t>(__builtin_ctz(r.mask));
    const uint32_t elem = r.size[first];
    if (elem != 1 && elem != 2 && elem != 4) return false;
    for (uint32_t m = r.mask; m; m &= m - 1) {
        const uint32_t j = static_cast<uint32_t>(__builtin_ctz(m));
        if (r.size[j] != elem || r.addr[j] % elem || run.size[j] % elem || r.addr[j] != run.addr[j] + run.size[j] ||
            run.size[j] + elem > kRunElements * elem || run.size[j] != run.size[first])
            return false;
    }
    if (run.size[first] / run.pieces != elem) return false; /* a run's pieces are one element each, all alike */
    for (uint32_t m = r.mask; m; m &= m - 1) run.size[__builtin_ctz(m)] += elem;
    ++run.pieces;
    return true;
}

/* Count the open run of simdgroup s, class c and access a, if any. */
void close_run(Prof* p, uint32_t s, uint32_t c, uint32_t a) {
    Record& run = p->runs[s][c][a];
    if (run.pieces) count_record(p, run);
    run.pieces = 0;
}

/* A complete record of simdgroup s: an event counts now; a plain load or store extends the open run of its class
 * and access or, counting that run, opens a new one (a store closes its class's open load run and a load its open
 * store run, as an access that may alias them keeps a compiler from merging across it); an atomic counts now. */
void complete_record(Prof* p, uint32_t s, const Record& r) {
    if (r.cls == kEvent || r.access > 1) {
        for (uint32_t a = 0; a < 2 && r.cls != kEvent; ++a) close_run(p, s, r.cls, a);
        count_record(p, r);
        return;
    }
    close_run(p, s, r.cls, 1 - r.access);
    Record& run = p->runs[s][r.cls][r.access];
    if (extend_run(run, r)) return;
    close_run(p, s, r.cls, r.access);
    run = r;
    run.pieces = 1;
}

/* Count every record of simdgroup `s` not counted yet, and its open runs, and forget them (all its live lanes meet
 * here). */
void flush_simdgroup(Prof* p, uint32_t s) {
    for (Record& r : p->records[s])
        if (r.mask) complete_record(p, s, r);
    for (uint32_t c = 0; c < 2; ++c)
        for (uint32_t a = 0; a < 2; ++a) close_run(p, s, c, a);
    p->records[s].clear();
    p->records_of[s].clear();
}

/* Add lane `lane` of the running fiber's simdgroup to the record of this execution of the instruction at `pc`. */
Record* add_lane(Worker* w, Prof* p, uint64_t pc, Cls cls, uint8_t kind, uint32_t* entry_index, uint8_t access = 0) {
    Fiber* f = w->cur;
    bool added;
    uint32_t* occ = p->occurrences.find_or_add(pc, f->index, &added);
    if (added) *occ = 0;
    const uint32_t k = (*occ)++;
    uint32_t* rec = p->records_of[f->sg].find_or_add(pc | static_cast<uint64_t>(cls) << 56, k, &added);
    std::vector<Record>& pool = p->records[f->sg];
    if (added) {
        *rec = static_cast<uint32_t>(pool.size());
        pool.emplace_back();
        Record& r = pool.back();
        r.mask = 0;
        r.cls = cls;
        r.kind = kind;
        r.access = access;
        r.pieces = 0;
        r.amount = 1;
        entry_for(p, pc, 0, &r.entry);
    } else if (*rec == kDone) {
        return nullptr; /* a lane of a record counted early (one that exited was waited for) */
    }
    Record& r = pool[*rec];
    if (entry_index) *entry_index = r.entry;
    r.mask |= 1u << f->lane;
    return &r;
}

/* After adding a lane: a record every live lane added to is complete. */
void maybe_complete(Worker* w, Prof* p, Record& r, uint64_t pc, Cls cls) {
    Fiber* f = w->cur;
    if (p->live[f->sg] & ~r.mask) return;
    complete_record(p, f->sg, r);
    r.mask = 0;
    bool added;
    uint32_t* occ = p->occurrences.find_or_add(pc, f->index, &added);
    uint32_t* rec = p->records_of[f->sg].find_or_add(pc | static_cast<uint64_t>(cls) << 56, *occ - 1, &added);
    *rec = kDone;
}

} // namespace

/* Segments buffer i of the launch spans (bits of its segment bitmap). */
size_t segments_of(const ProfLaunch* L, size_t i) {
    const uint32_t sh = L->seg_shift;
    return static_cast<size_t>(((L->dev_hi[i] - 1) >> sh) - (L->dev_lo[i] >> sh) + 1);
}

bool prof_prepare(Worker* w, Launch* L) {
    if (!L->prof) {
        w->prof_tg = 0;
        return true;
    }
    if (!w->prof) w->prof = new (std::nothrow) Prof();
    Prof* p = w->prof;
    if (!p) return false;
    p->launch = L->prof;
    p->entries.clear();
    p->entry_of.clear();
    p->threadgroups = p->unique_tg_bytes = p->unique_bytes = p->max_tg_memory = 0;
    p->unique_tg_segments = p->unique_segments = 0;
    const ProfLaunch* PL = L->prof;
    p->tg_seen.clear();
    p->tg_seen_seg.clear();
    p->tg_seen.resize(PL->dev_lo.size());
    p->tg_seen_seg.resize(PL->dev_lo.size());
    for (size_t i = 0; i < p->tg_seen.size(); ++i)
        if (!p->tg_seen[i].alloc(PL->dev_hi[i] - PL->dev_lo[i]) ||
            !p->tg_seen_seg[i].alloc(segments_of(PL, i)))
            return false;
    p->dirty.clear();
    trace_reset(p->trace);
    return true;
}

bool prof_wants(const ProfLaunch* L, uint64_t linear) {
    return !L->d.only_counted || std::binary_search(L->tgs.begin(), L->tgs.end(), linear);
}

void prof_begin_threadgroup(Worker* w, uint64_t linear) {
    Prof* p = w->prof;
    const ProfLaunch* L = w->launch->prof;
    w->prof_paused = 0;
    w->prof_tg = L && std::binary_search(L->tgs.begin(), L->tgs.end(), linear) ? 1 : 0;
    if (!w->prof_tg) return;
    p->occurrences.clear();
    for (uint32_t s = 0; s < w->tg->nsg; ++s) {
        p->records[s].clear();
        p->records_of[s].clear();
        for (auto& by_class : p->runs[s])
            for (Record& run : by_class) run.pieces = 0;
        const uint32_t lanes = w->sgs[s].lanes;
        p->live[s] = lanes >= 32 ? ~0u : (1u << lanes) - 1;
    }
    trace_begin(p->trace, linear);
}

void prof_end_threadgroup(Worker* w) {
    Prof* p = w->prof;
    for (uint32_t s = 0; s < w->tg->nsg; ++s) flush_simdgroup(p, s);
    trace_end(p->trace, w->launch->prof->trace);
    for (const auto& d : p->dirty) d.first->words[d.second].store(0, std::memory_order_relaxed);
    p->dirty.clear();
    ++p->threadgroups;
    if (w->tg->mem_used > p->max_tg_memory) p->max_tg_memory = w->tg->mem_used;
    w->prof_tg = 0;
}

void prof_tg_barrier(Worker* w, uint32_t line) {
    Prof* p = w->prof;
    entry_for(p, 0, line).c[MT_PROF_TG_BARRIERS] += 1;
    for (uint32_t s = 0; s < w->tg->nsg; ++s) flush_simdgroup(p, s);
    trace_step(p->trace);
}

void prof_collective(Worker* w, Simdgroup& sg, const Fiber* lead, uint32_t mask) {
    Prof* p = w->prof;
    if (lead->wait_site == 0) entry_for(p, 0, lead->wait_line).c[MT_PROF_SG_BARRIERS] += 1;
    else if (lead->wait_site < 64) entry_for(p, 0, lead->wait_line).c[MT_PROF_COLLECTIVES] += 1;
    /* every live lane takes part: all of them meet here */
    (void)sg;
    if (!(p->live[lead->sg] & ~mask)) flush_simdgroup(p, lead->sg);
}

void prof_exit(Worker* w, const Fiber* f) { w->prof->live[f->sg] &= ~(1u << f->lane); }

void prof_access(Worker* w, const void* addr, uint32_t size, int32_t kind, const void* pc) {
    if (w->prof_paused) return;
    Prof* p = w->prof;
    const uint64_t a = reinterpret_cast<uintptr_t>(addr);
    const int b = device_buffer(p->launch, a, size ? size : 1);
    Cls cls;
    if (b >= 0) cls = kDevice;
    else if (in_threadgroup_memory(w, static_cast<const char*>(addr))) cls = kThreadgroup;
    else return; /* private memory, program-scope constants */
    const uint64_t ipc = reinterpret_cast<uintptr_t>(pc);
    uint32_t ei = 0;
    Record* r = add_lane(w, p, ipc, cls, kind == 0 ? kLoad : 0, &ei, static_cast<uint8_t>(kind));
    if (!r) entry_for(p, ipc, 0, &ei);
    mt_prof_entry& e = p->entries[ei];
    const bool reads = kind == 0 || kind == 2 || kind == 4;
    const bool writes = kind == 1 || kind == 3 || kind == 4;
    if (kind >= 2) e.c[MT_PROF_ATOMICS] += 1;
    if (cls == kDevice) {
        if (reads) e.c[MT_PROF_DEV_READ_BYTES] += size;
        if (writes) e.c[MT_PROF_DEV_WRITE_BYTES] += size;
        e.c[MT_PROF_DEV_LANE_OPS] += 1;
        mark_bytes(p, b, a, size ? size : 1);
    } else {
        if (reads) e.c[MT_PROF_TG_READ_BYTES] += size;
        if (writes) e.c[MT_PROF_TG_WRITE_BYTES] += size;
        e.c[MT_PROF_TG_LANE_OPS] += 1;
    }
    if (!r) return;
    const uint32_t lane = w->cur->lane;
    r->addr[lane] = a;
    r->size[lane] = size ? size : 1;
    maybe_complete(w, p, *r, ipc, cls);
}

/* Merge a worker's counts into the launch's (after its threadgroups ran). */
void prof_merge(Worker* w) {
    Prof* p = w->prof;
    ProfLaunch* L = w->launch->prof;
    std::lock_guard<std::mutex> lk(L->mu);
    L->threadgroups += p->threadgroups;
    L->unique_tg_bytes += p->unique_tg_bytes;
    L->unique_bytes += p->unique_bytes;
    L->unique_tg_segments += p->unique_tg_segments;
    L->unique_segments += p->unique_segments;
    L->max_tg_memory = std::max(L->max_tg_memory, p->max_tg_memory);
    L->merged.insert(L->merged.end(), p->entries.begin(), p->entries.end());
    trace_merge(p->trace, L->trace);
    p->entries.clear();
    p->tg_seen.clear();
    p->tg_seen_seg.clear();
}

ProfLaunch* prof_launch_new(const mt_profile_desc* d) {
    ProfLaunch* L = new (std::nothrow) ProfLaunch();
    if (!L) return nullptr;
    L->d = *d;
    L->tgs.assign(d->threadgroups, d->threadgroups + d->n_threadgroups);
    std::sort(L->tgs.begin(), L->tgs.end());
    L->dev_lo.assign(d->device_lo, d->device_lo + d->n_device);
    L->dev_hi.assign(d->device_hi, d->device_hi + d->n_device);
    L->seg_shift = log2u(d->segment_bytes ? d->segment_bytes : 64);
    L->bank_shift = log2u(d->bank_bytes ? d->bank_bytes : 4);
    if (!L->d.banks) L->d.banks = 32;
    L->seen.resize(L->dev_lo.size());
    L->seen_seg.resize(L->dev_lo.size());
    for (size_t i = 0; i < L->seen.size(); ++i)
        if (!L->seen[i].alloc(L->dev_hi[i] - L->dev_lo[i]) || !L->seen_seg[i].alloc(segments_of(L, i))) {
            delete L;
            return nullptr;
        }
    return L;
}

void prof_launch_delete(ProfLaunch* L) { delete L; }

/* The merged counts into *out: entries of one pc or line added up, pcs turned into offsets in the kernel library. */
bool prof_finish(ProfLaunch* L, mt_profile_result* out) {
    std::sort(L->merged.begin(), L->merged.end(), [](const mt_prof_entry& a, const mt_prof_entry& b) {
        return a.pc_offset != b.pc_offset ? a.pc_offset < b.pc_offset : a.line < b.line;
    });
    std::vector<mt_prof_entry> sum;
    for (const mt_prof_entry& e : L->merged) {
        if (!sum.empty() && sum.back().pc_offset == e.pc_offset && sum.back().line == e.line) {
            for (int i = 0; i < MT_PROF_COUNTERS; ++i) sum.back().c[i] += e.c[i];
        } else {
            sum.push_back(e);
        }
    }
    memset(out, 0, sizeof *out);
    uintptr_t base = 0;
    for (mt_prof_entry& e : sum) {
        if (!e.pc_offset) continue;
        Dl_info info;
        if (!base && dladdr(reinterpret_cast<void*>(e.pc_offset), &info) && info.dli_fbase) {
            base = reinterpret_cast<uintptr_t>(info.dli_fbase);
            if (info.dli_fname) snprintf(out->module, sizeof out->module, "%s", info.dli_fname);
        }
        e.pc_offset -= base;
    }
    out->threadgroups = L->threadgroups;
    out->unique_tg_bytes = L->unique_tg_bytes;
    out->unique_bytes = L->unique_bytes;
    out->unique_tg_segments = L->unique_tg_segments;
    out->unique_segments = L->unique_segments;
    out->max_tg_memory = L->max_tg_memory;
    if (!trace_finish(L->trace, out)) return false;
    out->n_entries = static_cast<uint32_t>(sum.size());
    out->entries = static_cast<mt_prof_entry*>(malloc(sizeof(mt_prof_entry) * (sum.size() ? sum.size() : 1)));
    if (!out->entries) return false;
    memcpy(out->entries, sum.data(), sizeof(mt_prof_entry) * sum.size());
    return true;
}

} // namespace mtrt

using namespace mtrt;

MT_EXPORT void mt_prof_event(uint32_t kind, uint32_t dtype, uint32_t line) {
    Worker* w = tl_worker;
    if (!w || !w->prof_tg || !w->cur || kind > 2 || dtype > 3) return;
    const uint64_t pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1;
    const uint8_t counter = static_cast<uint8_t>((kind == 0 ? MT_PROF_MAT_LOAD : kind == 1 ? MT_PROF_MAT_STORE
                                                                                             : MT_PROF_MMA) + dtype);
    Prof* p = w->prof;
    if (Record* r = add_lane(w, p, pc, kEvent, counter, nullptr)) {
        entry_for(p, 0, line, &r->entry); /* counted at the line (the instruction may be a shared helper's) */
        maybe_complete(w, p, *r, pc, kEvent);
    }
}

MT_EXPORT void mt_prof_count(uint32_t counter, uint64_t amount, int32_t per_simdgroup, uint32_t line) {
    Worker* w = tl_worker;
    if (!w || !w->prof_tg || !w->cur || counter >= MT_PROF_COUNTERS) return;
    Prof* p = w->prof;
    if (!per_simdgroup) {
        entry_for(p, 0, line).c[counter] += amount;
        return;
    }
    const uint64_t pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1;
    if (Record* r = add_lane(w, p, pc, kEvent, static_cast<uint8_t>(counter), nullptr)) {
        r->amount = amount;
        entry_for(p, 0, line, &r->entry);
        maybe_complete(w, p, *r, pc, kEvent);
    }
}

MT_EXPORT void mt_prof_pause(int32_t paused) {
    Worker* w = tl_worker;
    if (w && w->prof_tg) w->prof_paused = paused ? 1 : 0;
}

MT_EXPORT void mt_profile_free(mt_profile_result* r) {
    if (!r) return;
    free(r->entries);
    free(r->trace);
    free(r->trace_threadgroups);
    r->entries = nullptr;
    r->trace = r->trace_threadgroups = nullptr;
    r->n_entries = 0;
    r->n_trace = r->n_trace_threadgroups = 0;
}
