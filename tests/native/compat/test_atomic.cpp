/* test_atomic.cpp - atomics under contention from several OS threads (device memory is shared by the runtime's
 * workers), compare-exchange, float atomics, and a spin-wait on a flag. */
#include "compat_harness.h"
#include "metal_compat.h"

TEST(atomics_under_contention) {
    const int iters = 2000;
    const uint32_t lanes = 8;
    atomic_uint counter;
    atomic_int signed_total, maxv, minv, cas_total, bits;
    atomic_float ftotal, fmaxv;
    atomic_bool flag;
    atomic_init(&counter, 0u);
    atomic_store_explicit(&signed_total, 0, memory_order_relaxed);
    atomic_store_explicit(&maxv, -1000, memory_order_relaxed);
    atomic_store_explicit(&minv, 1000, memory_order_relaxed);
    atomic_store_explicit(&cas_total, 0, memory_order_relaxed);
    atomic_store_explicit(&bits, 0, memory_order_relaxed);
    atomic_store_explicit(&ftotal, 0.0f, memory_order_relaxed);
    atomic_store_explicit(&fmaxv, -1.0f, memory_order_relaxed);
    atomic_store_explicit(&flag, false, memory_order_relaxed);
    uint32_t seen_flag[lanes] = {};
    mock_run_simdgroup(lanes, [&](uint32_t lane) {
        device atomic_uint* c = &counter; /* device pointers are plain pointers */
        for (int i = 0; i < iters; ++i) {
            atomic_fetch_add_explicit(c, 1u, memory_order_relaxed);
            atomic_fetch_sub_explicit(&signed_total, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&signed_total, 2, memory_order_relaxed);
            atomic_fetch_add_explicit(&ftotal, 0.5f, memory_order_relaxed);
            int expected = atomic_load_explicit(&cas_total, memory_order_relaxed);
            while (!atomic_compare_exchange_weak_explicit(&cas_total, &expected, expected + 3, memory_order_relaxed,
                                                          memory_order_relaxed)) {
            }
        }
        atomic_fetch_max_explicit(&maxv, int(lane) * 10, memory_order_relaxed);
        atomic_fetch_min_explicit(&minv, -int(lane), memory_order_relaxed);
        atomic_fetch_max_explicit(&fmaxv, float(lane) + 0.25f, memory_order_relaxed);
        atomic_fetch_or_explicit(&bits, 1 << lane, memory_order_relaxed);
        atomic_fetch_xor_explicit(&bits, 0, memory_order_relaxed);
        atomic_fetch_and_explicit(&bits, ~0, memory_order_relaxed);
        if (lane == lanes - 1) atomic_store_explicit(&flag, true, memory_order_relaxed);
        while (!atomic_load_explicit(&flag, memory_order_relaxed)) {
        }
        seen_flag[lane] = 1;
    });
    const uint32_t total = lanes * iters;
    CHECK(atomic_load_explicit(&counter, memory_order_relaxed) == total, "uint fetch_add");
    CHECK(atomic_load_explicit(&signed_total, memory_order_relaxed) == int(total), "int fetch_add/sub");
    CHECK(atomic_load_explicit(&ftotal, memory_order_relaxed) == 0.5f * float(total), "float fetch_add");
    CHECK(atomic_load_explicit(&cas_total, memory_order_relaxed) == int(3 * total), "compare-exchange loop");
    CHECK(atomic_load_explicit(&maxv, memory_order_relaxed) == int(lanes - 1) * 10, "fetch_max");
    CHECK(atomic_load_explicit(&minv, memory_order_relaxed) == -int(lanes - 1), "fetch_min");
    CHECK(atomic_load_explicit(&fmaxv, memory_order_relaxed) == float(lanes - 1) + 0.25f, "float fetch_max");
    CHECK(atomic_load_explicit(&bits, memory_order_relaxed) == int((1u << lanes) - 1), "fetch_or/xor/and");
    bool all_seen = true;
    for (uint32_t l = 0; l < lanes; ++l) all_seen = all_seen && seen_flag[l];
    CHECK(all_seen, "spin-wait on a flag");
    int old = atomic_exchange_explicit(&maxv, 5, memory_order_relaxed);
    int expected = 4;
    const bool swapped = atomic_compare_exchange_weak_explicit(&maxv, &expected, 6, memory_order_relaxed,
                                                               memory_order_relaxed);
    CHECK(old == int(lanes - 1) * 10 && !swapped && expected == 5, "exchange, failed compare-exchange");
    CHECK(atomic_compare_exchange_strong_explicit(&maxv, &expected, 6, memory_order_relaxed, memory_order_relaxed) &&
              atomic_load(&maxv) == 6,
          "strong compare-exchange");
}
