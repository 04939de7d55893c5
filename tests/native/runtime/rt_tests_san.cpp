/* rt_tests_san.cpp - the sanitizer: kernels from rt_san_kernels.cpp (built like a sanitized kernel library) report
 * uninitialised reads and missing barriers, with both parties; a correct kernel reports nothing. */
#include <dlfcn.h>

#include "rt_harness.h"

extern const char* g_san_library;

static mt_kernel_fn san_kernel(const char* name, std::string& why) {
    if (!g_san_library) {
        why = "no sanitized kernel library given (--san)";
        return nullptr;
    }
    void* lib = dlopen(g_san_library, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        why = dlerror();
        return nullptr;
    }
    mt_kernel_fn fn = reinterpret_cast<mt_kernel_fn>(dlsym(lib, name));
    if (!fn) why = strfmt("no kernel %s", name);
    return fn;
}

#define SAN_KERNEL(var, name)                                                                                       \
    mt_kernel_fn var = san_kernel(name, why);                                                                       \
    if (!var) return false

RT_TEST(sanitizer_uninitialised_read) {
    SAN_KERNEL(fn, "san_uninit");
    std::vector<float> out(64);
    Launch l(fn);
    l.groups(2, 1, 1, 64, 1, 1).buffers({out.data()});
    l.d.sanitize = 1;
    CHECK(l.run() == MT_FAULT_SAN_UNINIT, "%s", l.describe().c_str());
    CHECK(l.f.thread[0] == 4 && l.f.threadgroup[0] == 0, "%s", l.describe().c_str());
    CHECK(strstr(l.f.message, "byte 20 of threadgroup variable 0") && strstr(l.f.module, "san"), "%s",
          l.describe().c_str());
    CHECK(l.f.pc_offset != 0, "%s", l.describe().c_str());
    /* without the sanitizer the same kernel runs (reading the fill) */
    Launch plain(fn);
    plain.groups(2, 1, 1, 64, 1, 1).buffers({out.data()});
    CHECK(plain.run() == MT_OK, "%s", plain.describe().c_str());
    SAN_KERNEL(param, "san_uninit_param");
    Launch p(param);
    p.groups(1, 1, 1, 4, 1, 1).buffers({out.data()}).tg_params({64});
    p.d.sanitize = 1;
    CHECK(p.run() == MT_FAULT_SAN_UNINIT && strstr(p.f.message, "parameter 0"), "%s", p.describe().c_str());
    return true;
}

RT_TEST(sanitizer_missing_barrier) {
    SAN_KERNEL(fn, "san_race_missing_barrier");
    for (uint32_t n : {64u, 32u}) {
        std::vector<float> out(n);
        Launch l(fn);
        l.groups(1, 1, 1, n, 1, 1).buffers({out.data()});
        l.d.sanitize = 1;
        CHECK(l.run() == MT_FAULT_SAN_RACE, "%s", l.describe().c_str());
        CHECK(l.f.has_other && l.f.thread[0] == 0 && l.f.other_thread[0] == n - 1, "%s", l.describe().c_str());
        CHECK(l.f.other_pc_offset != 0 && l.f.pc_offset != 0 && l.f.other_pc_offset != l.f.pc_offset, "%s",
              l.describe().c_str());
        CHECK(strstr(l.f.message, "writes") && strstr(l.f.message, "read"), "%s", l.f.message);
    }
    return true;
}

RT_TEST(sanitizer_races_in_simdgroup_and_write_write) {
    SAN_KERNEL(simd, "san_race_in_simdgroup");
    std::vector<int> out(32);
    Launch a(simd);
    a.groups(1, 1, 1, 32, 1, 1).buffers({out.data()});
    a.d.sanitize = 1;
    CHECK(a.run() == MT_FAULT_SAN_RACE, "%s", a.describe().c_str());
    CHECK(a.f.thread[0] == 1 && a.f.other_thread[0] == 0, "%s", a.describe().c_str());
    SAN_KERNEL(ww, "san_race_write_write");
    Launch b(ww);
    b.groups(1, 1, 1, 64, 1, 1);
    b.d.sanitize = 1;
    CHECK(b.run() == MT_FAULT_SAN_RACE, "%s", b.describe().c_str());
    CHECK(b.f.thread[0] == 40 && b.f.other_thread[0] == 0 && strstr(b.f.message, "wrote"), "%s", b.describe().c_str());
    return true;
}

RT_TEST(sanitizer_clean_kernel) {
    SAN_KERNEL(fn, "san_clean");
    const uint32_t n = 128, groups = 6;
    for (int reverse = 0; reverse < 2; ++reverse) {
        std::vector<float> out(n * groups);
        Launch l(fn);
        l.groups(groups, 1, 1, n, 1, 1).buffers({out.data()}).tg_params({64});
        l.d.sanitize = 1;
        l.d.workers = 2;
        l.d.reverse_order = reverse;
        CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
        for (uint32_t g = 0; g < groups; ++g)
            for (uint32_t i = 0; i < n; ++i) {
                const uint32_t j = (i + n - 3) % n;
                const float expect = static_cast<float>((j ^ 1) + (j + 7) % n + n + i % 16);
                CHECK(out[g * n + i] == expect, "thread %u: %f != %f", i, out[g * n + i], expect);
            }
    }
    return true;
}
