/* rt_harness.h - a small test harness for the CPU runtime's native tests: launch helpers, checks, registry. */
#ifndef METILE_RT_HARNESS_H
#define METILE_RT_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <functional>
#include <string>
#include <vector>

#include "mt_runtime.h"

/* mt_simd_exchange, keeping only the mask of the lanes that took part */
inline const unsigned char* exchange_live(const void* src, uint32_t bytes, uint32_t site, uint32_t line,
                                          uint32_t* live) {
    mt_exchange_view view;
    const unsigned char* base = mt_simd_exchange(src, bytes, site, line, &view);
    *live = view.live;
    return base;
}

struct TestCase {
    const char* name;
    std::function<bool(std::string&)> fn; /* returns false with a reason on failure */
};

std::vector<TestCase>& registry();

struct Register {
    Register(const char* name, std::function<bool(std::string&)> fn) { registry().push_back({name, std::move(fn)}); }
};

#define RT_CONCAT2(a, b) a##b
#define RT_CONCAT(a, b) RT_CONCAT2(a, b)
#define RT_TEST(name)                                                                                               \
    static bool name(std::string& why);                                                                             \
    static Register RT_CONCAT(reg_, name)(#name, name);                                                             \
    static bool name(std::string& why)

std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(cond, ...)                                                                                            \
    do {                                                                                                            \
        if (!(cond)) {                                                                                              \
            why = strfmt("%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond) + strfmt(__VA_ARGS__);             \
            return false;                                                                                           \
        }                                                                                                           \
    } while (0)

/* A launch description with the usual defaults: one buffer list, fill 0xFF, 32 KiB of threadgroup memory. */
struct Launch {
    mt_launch_desc d;
    mt_fault f;
    std::vector<void*> bufs;
    std::vector<size_t> params;
    explicit Launch(mt_kernel_fn fn) {
        memset(&d, 0, sizeof d);
        memset(&f, 0, sizeof f);
        d.fn = fn;
        d.tg_fill = 0xFF;
        d.max_tg_memory = 32768;
        d.workers = 1;
        d.timeout_s = 20;
    }
    Launch& groups(uint32_t gx, uint32_t gy, uint32_t gz, uint32_t tx, uint32_t ty, uint32_t tz) {
        const uint32_t g[3] = {gx, gy, gz}, t[3] = {tx, ty, tz};
        for (int k = 0; k < 3; ++k) {
            d.threadgroups[k] = g[k];
            d.threads_per_tg[k] = t[k];
            d.grid_threads[k] = g[k] * t[k];
        }
        return *this;
    }
    Launch& threads(uint32_t nx, uint32_t ny, uint32_t nz, uint32_t tx, uint32_t ty, uint32_t tz) {
        const uint32_t n[3] = {nx, ny, nz}, t[3] = {tx, ty, tz};
        for (int k = 0; k < 3; ++k) {
            d.grid_threads[k] = n[k];
            d.threads_per_tg[k] = t[k];
            d.threadgroups[k] = (n[k] + t[k] - 1) / t[k];
        }
        return *this;
    }
    Launch& buffers(std::vector<void*> b) {
        bufs = std::move(b);
        return *this;
    }
    Launch& tg_params(std::vector<size_t> p) {
        params = std::move(p);
        return *this;
    }
    int32_t run() {
        d.buffers = bufs.data();
        d.n_buffers = static_cast<uint32_t>(bufs.size());
        d.tg_param_bytes = params.data();
        d.n_tg_params = static_cast<uint32_t>(params.size());
        return mt_launch(&d, &f);
    }
    std::string describe() const;
};

/* Offset of a function in its module (to compare with mt_fault.pc_offset). */
uint64_t offset_in_module(const void* fn);
/* True if a fault pc lies in `fn` (assumed shorter than `max_len` bytes). */
bool pc_in(const mt_fault& f, const void* fn, uint64_t max_len = 4096);

#endif
