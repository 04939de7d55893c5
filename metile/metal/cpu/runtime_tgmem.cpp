/* runtime_tgmem.cpp - threadgroup memory: the regions of `threadgroup` declarations in kernel bodies and of
 * [[threadgroup(i)]] parameters, each a mapping ending against a PROT_NONE guard page, filled with the launch's
 * pattern at the start of each threadgroup (runtime_sched.cpp). */
#include "runtime_internal.h"

#include <sys/mman.h>

namespace mtrt {

bool region_alloc(Region& r, size_t bytes, size_t align) {
    const size_t page = page_size();
    const size_t data = round_up(bytes + align, page);
    void* m = mmap(nullptr, data + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    char* base = static_cast<char*>(m);
    if (mprotect(base + data, page, PROT_NONE) != 0) {
        munmap(m, data + page);
        return false;
    }
    r.map = base;
    r.map_len = data + page;
    r.ptr = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(base + data - bytes) & ~(uintptr_t)(align - 1));
    r.bytes = bytes;
    r.align = align;
    return true;
}

void region_free(Region& r) {
    san_detach(r);
    if (r.map) munmap(r.map, r.map_len);
    r = Region{};
}

} // namespace mtrt

using namespace mtrt;

MT_EXPORT void* mt_threadgroup_alloc(uint32_t slot, size_t bytes, size_t align, uint32_t line) {
    Worker* w = tl_worker;
    if (__builtin_expect(slot < w->slots.size(), 1)) {
        Region& r = w->slots[slot];
        if (r.tg_stamp == w->tg_stamp && r.bytes == bytes) return r.ptr;
    }
    /* first use of the slot in this threadgroup */
    Launch* L = w->launch;
    w->in_kernel = 0;
    if (slot >= 65536) raise_fault(w, MT_FAULT_KERNEL, line, "threadgroup slot %u out of range", slot);
    if (align < 16) align = 16;
    if (align & (align - 1)) raise_fault(w, MT_FAULT_KERNEL, line, "threadgroup alignment %zu is not a power of 2", align);
    if (slot >= w->slots.size()) w->slots.resize(slot + 1);
    Region& r = w->slots[slot];
    if (r.tg_stamp == w->tg_stamp)
        raise_fault(w, MT_FAULT_KERNEL, line, "threadgroup slot %u requested with %zu and with %zu bytes", slot, r.bytes,
                    bytes);
    const size_t need = w->tg->mem_used + bytes;
    if (L->d.max_tg_memory && need > L->d.max_tg_memory)
        raise_fault(w, MT_FAULT_TG_MEMORY, line, "threadgroup memory: %zu bytes needed, the device allows %zu", need,
                    L->d.max_tg_memory);
    if (!r.map || r.bytes != bytes || r.align < align) {
        region_free(r);
        if (!region_alloc(r, bytes, align))
            raise_fault(w, MT_FAULT_INTERNAL, line, "cannot map %zu bytes of threadgroup memory", bytes);
        if (w->san_on) {
            if (!san_attach(w, r, 0, slot)) raise_fault(w, MT_FAULT_INTERNAL, line, "cannot map sanitizer shadow");
            san_rebuild(w);
        }
        memset(r.ptr, L->d.tg_fill, r.bytes);
    } else if (r.launch != L->id) {
        memset(r.ptr, L->d.tg_fill, r.bytes);
        if (w->san_on && !r.shadow) {
            if (!san_attach(w, r, 0, slot)) raise_fault(w, MT_FAULT_INTERNAL, line, "cannot map sanitizer shadow");
            san_rebuild(w);
        }
    }
    r.launch = L->id;
    r.tg_stamp = w->tg_stamp;
    w->tg->mem_used = need;
    w->in_kernel = 1;
    return r.ptr;
}

MT_EXPORT void* mt_threadgroup_param(uint32_t index) {
    Worker* w = tl_worker;
    if (__builtin_expect(index >= w->launch->param_bytes.size(), 0))
        raise_fault(w, MT_FAULT_KERNEL, 0, "no [[threadgroup(%u)]] parameter size was given at launch", index);
    return w->params[index].ptr;
}
