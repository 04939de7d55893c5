/* rt_bench.cpp - timings of the fiber machinery (run with --bench; printed, never asserted).
 *
 * bench_switch: threads of one threadgroup that only call mt_yield: every call is one fiber-to-fiber switch.
 * bench_mma: a 512^3 f32 GEMM in the shape of a simdgroup-matrix kernel: 64x64 tiles, 128-thread threadgroups,
 * each simdgroup doing 16 8x8 tiles per 8-wide K step; one 8x8x8 multiply-accumulate = one simd exchange
 * (every lane publishes its 2 elements of A and B, then computes its 2 elements of C), i.e. 32 suspensions.
 * 262144 multiply-accumulates in all. Also run with the arithmetic left out, to isolate the exchange cost.
 */
#include <math.h>
#include <time.h>

#include "rt_harness.h"

static double now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

static void yield_loop(void* const* buffers, const mt_thread_pos*) {
    const uint32_t n = *static_cast<const uint32_t*>(buffers[0]);
    for (uint32_t k = 0; k < n; ++k) mt_yield();
}

RT_TEST(bench_switch) {
    for (uint32_t threads : {2u, 32u, 128u, 1024u}) {
        uint32_t iters = 4000000 / threads;
        Launch l(yield_loop);
        l.groups(1, 1, 1, threads, 1, 1).buffers({&iters});
        const double t0 = now();
        CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
        const double dt = now() - t0;
        printf("BENCH switch: %4u threads per threadgroup: %.1f ns per fiber switch (%u switches in %.3f s)\n",
               threads, dt * 1e9 / (static_cast<double>(iters) * threads), iters * threads, dt);
    }
    return true;
}

struct Gemm {
    const float* a;
    const float* b;
    float* c;
    uint32_t n;
    uint32_t math;
};

static void gemm_kernel(void* const* buffers, const mt_thread_pos* pos) {
    const Gemm& g = *static_cast<const Gemm*>(buffers[0]);
    const uint32_t n = g.n, sg = pos->simdgroup_index_in_threadgroup, lane = pos->thread_index_in_simdgroup;
    const uint32_t row0 = pos->threadgroup_position_in_grid[1] * 64 + (sg / 2) * 32;
    const uint32_t col0 = pos->threadgroup_position_in_grid[0] * 64 + (sg % 2) * 32;
    const uint32_t r = lane / 4, c = (lane % 4) * 2; /* this lane's 2 elements of every 8x8 fragment */
    float acc[16][2] = {};
    for (uint32_t k0 = 0; k0 < n; k0 += 8)
        for (uint32_t i = 0; i < 4; ++i)
            for (uint32_t j = 0; j < 4; ++j) {
                const float* ap = g.a + static_cast<size_t>(row0 + i * 8 + r) * n + k0 + c;
                const float* bp = g.b + static_cast<size_t>(k0 + r) * n + col0 + j * 8 + c;
                const float mine[4] = {ap[0], ap[1], bp[0], bp[1]};
                uint32_t live;
                const unsigned char* s = exchange_live(mine, sizeof mine, 1, 0, &live);
                if (!g.math) continue;
                for (uint32_t e = 0; e < 2; ++e) {
                    float sum = 0;
                    for (uint32_t k = 0; k < 8; ++k) {
                        const float* al = reinterpret_cast<const float*>(s + (r * 4 + k / 2) * MT_SLOT_BYTES);
                        const float* bl = reinterpret_cast<const float*>(s + (k * 4 + (c + e) / 2) * MT_SLOT_BYTES);
                        sum += al[k % 2] * bl[2 + (c + e) % 2];
                    }
                    acc[i * 4 + j][e] += sum;
                }
            }
    for (uint32_t i = 0; i < 4; ++i)
        for (uint32_t j = 0; j < 4; ++j)
            for (uint32_t e = 0; e < 2; ++e)
                g.c[static_cast<size_t>(row0 + i * 8 + r) * n + col0 + j * 8 + c + e] = acc[i * 4 + j][e];
}

RT_TEST(bench_mma) {
    const uint32_t n = 512;
    std::vector<float> a(n * n), b(n * n), c(n * n);
    for (uint32_t i = 0; i < n * n; ++i) {
        a[i] = static_cast<float>((i * 7u) % 13u) - 6.0f;
        b[i] = static_cast<float>((i * 5u) % 11u) - 5.0f;
    }
    const double mmas = static_cast<double>(n / 8) * (n / 8) * (n / 8);
    for (uint32_t math : {1u, 0u})
        for (uint32_t workers : {1u, 2u}) {
            Gemm g{a.data(), b.data(), c.data(), n, math};
            Launch l(gemm_kernel);
            l.groups(n / 64, n / 64, 1, 128, 1, 1).buffers({&g});
            l.d.workers = workers;
            const double t0 = now();
            CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
            const double dt = now() - t0;
            printf("BENCH mma: 512^3 GEMM, %.0f 8x8x8 MMAs (%.0f lane suspensions), %s, %u worker(s): %.3f s "
                   "(%.0f ns per exchange, %.1f ns per lane)\n", mmas, mmas * 32, math ? "with arithmetic" :
                   "exchanges only", workers, dt, dt * 1e9 / mmas * workers, dt * 1e9 / (mmas * 32) * workers);
            if (math) {
                for (uint32_t t = 0; t < 2000; ++t) {
                    const uint32_t i = (t * 7919u) % n, j = (t * 104729u) % n;
                    double ref = 0;
                    for (uint32_t k = 0; k < n; ++k) ref += static_cast<double>(a[i * n + k]) * b[k * n + j];
                    CHECK(fabs(ref - c[i * n + j]) < 1e-3 * (1 + fabs(ref)), "C[%u][%u] = %f, expected %f", i, j,
                          c[i * n + j], ref);
                }
            }
        }
    return true;
}
