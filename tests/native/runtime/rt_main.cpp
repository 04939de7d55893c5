/* rt_main.cpp - driver of the CPU runtime's native tests.
 *
 *   rt_tests [--san LIB] [--list] [--bench] [NAME...]
 *
 * Runs every registered test (or the named ones) in this one process, so that each launch after a fault also
 * checks that the runtime stays usable; after every test a plain launch must still give correct results. Prints
 * one "PASS name" / "FAIL name: reason" line per test and a closing "N passed, M failed" line. Tests named
 * bench_* only run with --bench (they print timings and never fail on them).
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>

#include "rt_harness.h"

std::vector<TestCase>& registry() {
    static std::vector<TestCase> r;
    return r;
}

const char* g_san_library = nullptr; /* path of the sanitized test kernels (rt_tests_san.cpp) */

std::string strfmt(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

std::string Launch::describe() const {
    return strfmt("kind %d line %u tg (%u,%u,%u) thread (%u,%u,%u) addr %#llx pc %s+%#llx other %d (%u,%u,%u) "
                  "line %u pc %#llx: %s", f.kind, f.line, f.threadgroup[0], f.threadgroup[1], f.threadgroup[2],
                  f.thread[0], f.thread[1], f.thread[2], static_cast<unsigned long long>(f.address), f.module,
                  static_cast<unsigned long long>(f.pc_offset), f.has_other, f.other_thread[0], f.other_thread[1],
                  f.other_thread[2], f.other_line, static_cast<unsigned long long>(f.other_pc_offset), f.message);
}

uint64_t offset_in_module(const void* fn) {
    Dl_info info;
    if (!dladdr(fn, &info) || !info.dli_fbase) return 0;
    return reinterpret_cast<uintptr_t>(fn) - reinterpret_cast<uintptr_t>(info.dli_fbase);
}

bool pc_in(const mt_fault& f, const void* fn, uint64_t max_len) {
    const uint64_t start = offset_in_module(fn);
    return f.pc_offset >= start && f.pc_offset < start + max_len;
}

/* After every test: a plain launch on two workers still works. */
static void sanity_kernel(void* const* buffers, const mt_thread_pos* pos) {
    uint32_t* out = static_cast<uint32_t*>(buffers[0]);
    uint32_t* tg = static_cast<uint32_t*>(mt_threadgroup_alloc(0, 64 * 4, 16, 1));
    const uint32_t i = pos->thread_index_in_threadgroup;
    tg[i] = i * 7;
    mt_threadgroup_barrier(2);
    uint32_t live;
    const unsigned char* slots = exchange_live(&i, 4, 1, 3, &live);
    uint32_t s = 0;
    for (uint32_t j = 0; j < 32; ++j)
        if (live >> j & 1) s += *reinterpret_cast<const uint32_t*>(slots + j * MT_SLOT_BYTES);
    out[pos->thread_position_in_grid[0]] = tg[63 - i] + s;
}

static bool sanity(std::string& why) {
    std::vector<uint32_t> out(64 * 16, 0);
    Launch l(sanity_kernel);
    l.groups(16, 1, 1, 64, 1, 1).buffers({out.data()});
    l.d.workers = 2;
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    for (uint32_t g = 0; g < out.size(); ++g) {
        const uint32_t i = g % 64, base = i / 32 * 32;
        const uint32_t expect = (63 - i) * 7 + (base * 32 + 31 * 32 / 2);
        CHECK(out[g] == expect, "thread %u: %u != %u", g, out[g], expect);
    }
    return true;
}

int main(int argc, char** argv) {
    bool list = false, bench = false;
    std::vector<std::string> only;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--san" && i + 1 < argc) g_san_library = argv[++i];
        else if (a == "--list") list = true;
        else if (a == "--bench") bench = true;
        else only.push_back(a);
    }
    setvbuf(stdout, nullptr, _IOLBF, 0);
    int passed = 0, failed = 0;
    for (const TestCase& t : registry()) {
        const bool is_bench = strncmp(t.name, "bench_", 6) == 0;
        if (!only.empty()) {
            bool hit = false;
            for (const std::string& o : only) hit |= o == t.name;
            if (!hit) continue;
        } else if (is_bench != bench) {
            continue;
        }
        if (list) {
            printf("%s\n", t.name);
            continue;
        }
        std::string why;
        bool ok = t.fn(why);
        if (ok && !sanity(why)) {
            why = "runtime not usable after the test: " + why;
            ok = false;
        }
        if (ok) {
            ++passed;
            printf("PASS %s\n", t.name);
        } else {
            ++failed;
            printf("FAIL %s: %s\n", t.name, why.c_str());
        }
    }
    if (!list) printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
