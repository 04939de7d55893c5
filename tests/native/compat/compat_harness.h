/* compat_harness.h - checks and a test registry for the compatibility header's native tests.
 *
 * Include this first (it pulls in the std headers the tests need), then "metal_compat.h": the header's
 * address-space macros (`thread`, `device`, ...) must come after every std header.
 */
#ifndef METILE_COMPAT_HARNESS_H
#define METILE_COMPAT_HARNESS_H

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <type_traits>
#include <vector>

#include "mock_runtime.h"

struct CompatTest {
    const char* name;
    void (*fn)();
};
std::vector<CompatTest>& compat_tests();
extern int compat_check_failures;

struct CompatRegister {
    CompatRegister(const char* name, void (*fn)()) { compat_tests().push_back({name, fn}); }
};

#define COMPAT_CAT2(a, b) a##b
#define COMPAT_CAT(a, b) COMPAT_CAT2(a, b)
#define TEST(name)                                                                                                \
    static void name();                                                                                           \
    static CompatRegister COMPAT_CAT(reg_, name)(#name, name);                                                    \
    static void name()

/* CHECK(cond, fmt, ...): records a failure with file:line and a message, and goes on. */
#define CHECK(cond, ...)                                                                                          \
    do {                                                                                                          \
        if (!(cond)) {                                                                                            \
            std::fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                         \
            std::fprintf(stderr, " " __VA_ARGS__);                                                                \
            std::fprintf(stderr, "\n");                                                                           \
            __atomic_add_fetch(&compat_check_failures, 1, __ATOMIC_RELAXED);                                      \
        }                                                                                                         \
    } while (0)

/* Bits of a value, to compare floats exactly. */
template <class T> inline uint64_t bits_of(const T& v) {
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof v < 8 ? sizeof v : 8);
    return b;
}

inline bool close_to(double got, double want, double rtol = 1e-6, double atol = 1e-6) {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isinf(want)) return got == want;
    return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

#endif
