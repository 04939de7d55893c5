/* runtime_buffers.cpp - device memory for buffers: guarded mappings, and the check of the bytes in front of them.
 *
 * A buffer is one mapping: a PROT_NONE guard, the front (the rest of the first data page before the buffer's start),
 * the buffer's bytes rounded up to 16, and another guard. The buffer ends against its trailing guard, so reads and
 * writes past its end fault at once. Accesses far enough before its start land in the leading guard and fault too;
 * the front (less than a page) cannot be protected, since page protection cannot start at an arbitrary byte (a page
 * holding the buffer's first bytes cannot fault, and a buffer starting at a page would leave the bytes after its end
 * unguarded instead): it is filled with a canary, and after every launch the fronts of the bound buffers are
 * compared with it, so a write before a buffer's start is reported (without thread or line), and the canary is
 * restored. The canary byte 0xFE reads as no plausible datum: -1.7e38 as a float or bfloat, NaN as a half,
 * -16843010 as an int (an index far out of any buffer), where the bytes 0xA7 it replaced read as -4.7e-15, which
 * looks like zero. Hardware watchpoints cover the last bytes of the fronts of up to four buffers a launch binds
 * where the system allows them (runtime_watch.cpp). A sanitized launch checks every access against the fronts
 * (mt_san_access), so reads there are faults too, with thread and line. Guards are 64 KiB (or a page when pages
 * are bigger) of address space, so that an overrun of up to that many bytes faults in the overrun buffer's own
 * guard instead of reaching its neighbour, and fault reports can name the right buffer.
 *
 * A freed mapping is kept for reuse (up to kPoolBytes of mappings, the oldest unmapped first) rather than unmapped:
 * a dispatch stages every array argument in new device memory, and the page faults of fresh pages cost far more than
 * the copy itself (a 4 MiB argument: ~1000 faults, each zeroing a page). A reused mapping has the same length, so its
 * guards are where a new one's would be; mt_buffer_alloc zeroes its data (fresh pages read as zero),
 * mt_buffer_alloc_staging zeroes only the bytes after the buffer's end up to the guard (the caller writes the rest).
 */
#include "runtime_internal.h"

#include <stdio.h>
#include <sys/mman.h>

#include <map>
#include <mutex>
#include <vector>

namespace mtrt {
namespace {

constexpr unsigned char kCanary = 0xFE;

struct Mapping {
    char* map;
    size_t len;
    char* front; /* first byte of the front, which ends at the buffer's start */
};

/* a freed mapping kept for reuse: the whole mapping (guards, PROT_NONE; data, read-write) */
struct Pooled {
    char* map;
    size_t len;
};

constexpr size_t kPoolBytes = size_t(256) << 20;

struct BufferMap {
    std::mutex mu;
    std::map<const void*, Mapping> maps;
    std::vector<Pooled> pool; /* oldest first */
    size_t pooled = 0;        /* bytes of mappings in the pool */
};

BufferMap& buffers() {
    static BufferMap* m = new BufferMap();
    return *m;
}

size_t guard_bytes() { return page_size() > 64 * 1024 ? page_size() : 64 * 1024; }

/* The first byte of [p, end) that is not the canary (end if none), read a word at a time. */
const char* first_changed(const char* p, const char* end) {
    constexpr uint64_t kWord = 0x0101010101010101ull * kCanary;
    for (; p + 8 <= end; p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v != kWord) break;
    }
    for (; p < end; ++p)
        if (static_cast<unsigned char>(*p) != kCanary) return p;
    return end;
}

} // namespace

void check_buffer_fronts(const mt_launch_desc* d, mt_fault* f, std::atomic<int>* claimed) {
    BufferMap& b = buffers();
    std::lock_guard<std::mutex> lk(b.mu);
    for (uint32_t i = 0; i < d->n_buffers; ++i) {
        auto it = b.maps.find(d->buffers[i]);
        if (it == b.maps.end()) continue;
        const char* start = static_cast<const char*>(d->buffers[i]);
        if (const char* p = first_changed(it->second.front, start); p < start) {
            memset(f, 0, sizeof *f);
            f->kind = MT_FAULT_BAD_ACCESS;
            for (int k = 0; k < 3; ++k) f->thread[k] = f->threadgroup[k] = UINT32_MAX; /* not known */
            f->address = reinterpret_cast<uintptr_t>(p);
            snprintf(f->message, sizeof f->message,
                     "kernel code wrote in front of buffer %u (%zu bytes before its start, found after the dispatch: "
                     "the thread and the line are not known)", i, static_cast<size_t>(start - p));
            claimed->store(1);
            return;
        }
    }
}

void reset_buffer_fronts(const mt_launch_desc* d) {
    BufferMap& b = buffers();
    std::lock_guard<std::mutex> lk(b.mu);
    for (uint32_t i = 0; i < d->n_buffers; ++i) {
        auto it = b.maps.find(d->buffers[i]);
        if (it == b.maps.end()) continue;
        char* start = static_cast<char*>(const_cast<void*>(d->buffers[i]));
        if (first_changed(it->second.front, start) < start) /* most launches write nothing there */
            memset(it->second.front, kCanary, static_cast<size_t>(start - it->second.front));
    }
}

void collect_buffer_fronts(const mt_launch_desc* d, std::vector<std::pair<const char*, const char*>>& out) {
    BufferMap& b = buffers();
    std::lock_guard<std::mutex> lk(b.mu);
    out.clear();
    for (uint32_t i = 0; i < d->n_buffers; ++i) {
        auto it = b.maps.find(d->buffers[i]);
        if (it != b.maps.end()) out.emplace_back(it->second.front, static_cast<const char*>(d->buffers[i]));
    }
}

size_t buffer_front_bytes(const void* start) {
    BufferMap& b = buffers();
    std::lock_guard<std::mutex> lk(b.mu);
    auto it = b.maps.find(start);
    return it == b.maps.end() ? 0 : static_cast<size_t>(static_cast<const char*>(start) - it->second.front);
}

} // namespace mtrt

using namespace mtrt;

namespace {

/* A mapping of `len` bytes, guards PROT_NONE and `data` bytes after the leading guard read-write: one from the pool
 * when it holds one of that length (*reused set), else a new one (its data pages untouched, reading as zero). */
char* take_mapping(size_t len, size_t data, bool* reused) {
    BufferMap& b = buffers();
    {
        std::lock_guard<std::mutex> lk(b.mu);
        for (size_t i = b.pool.size(); i-- > 0;) {
            if (b.pool[i].len != len) continue;
            char* m = b.pool[i].map;
            b.pool.erase(b.pool.begin() + static_cast<std::ptrdiff_t>(i));
            b.pooled -= len;
            *reused = true;
            return m;
        }
    }
    *reused = false;
    void* m = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    char* base = static_cast<char*>(m);
    if (data && mprotect(base + guard_bytes(), data, PROT_READ | PROT_WRITE) != 0) {
        munmap(m, len);
        return nullptr;
    }
    return base;
}

void* buffer_alloc(size_t bytes, bool zeroed) {
    const size_t page = page_size(), guard = guard_bytes();
    const size_t used = round_up(bytes, 16);
    if (used < bytes) return nullptr;
    const size_t data = round_up(used, page);
    const size_t len = data + 2 * guard;
    if (len < data) return nullptr;
    bool reused = false;
    char* base = take_mapping(len, data, &reused);
    if (!base) return nullptr;
    char* start = base + guard + data - used;
    if (reused) /* the data as a fresh mapping's (zero), or only the padding after the caller's bytes */
        memset(zeroed ? start : start + bytes, 0, zeroed ? used : used - bytes);
    memset(base + guard, kCanary, static_cast<size_t>(start - (base + guard)));
    BufferMap& b = buffers();
    std::lock_guard<std::mutex> lk(b.mu);
    b.maps[start] = Mapping{base, len, base + guard};
    return start;
}

} // namespace

MT_EXPORT void* mt_buffer_alloc(size_t bytes) { return buffer_alloc(bytes, true); }

MT_EXPORT void* mt_buffer_alloc_staging(size_t bytes) { return buffer_alloc(bytes, false); }

MT_EXPORT void mt_buffer_free(void* data) {
    if (!data) return;
    BufferMap& b = buffers();
    std::vector<Pooled> unmap;
    {
        std::lock_guard<std::mutex> lk(b.mu);
        auto it = b.maps.find(data);
        if (it == b.maps.end()) return;
        const Mapping m = it->second;
        b.maps.erase(it);
        if (m.len > kPoolBytes) {
            unmap.push_back(Pooled{m.map, m.len});
        } else {
            b.pool.push_back(Pooled{m.map, m.len});
            b.pooled += m.len;
            size_t drop = 0;
            while (b.pooled > kPoolBytes) {
                b.pooled -= b.pool[drop].len;
                unmap.push_back(b.pool[drop++]);
            }
            b.pool.erase(b.pool.begin(), b.pool.begin() + static_cast<std::ptrdiff_t>(drop));
        }
    }
    for (const Pooled& p : unmap) munmap(p.map, p.len);
}

MT_EXPORT int32_t mt_buffer_extent(const void* data, uint64_t* lo, uint64_t* hi) {
    BufferMap& b = buffers();
    std::lock_guard<std::mutex> lk(b.mu);
    auto it = b.maps.find(data);
    if (it == b.maps.end()) return 0;
    *lo = reinterpret_cast<uintptr_t>(it->second.map);
    *hi = *lo + it->second.len;
    return 1;
}
