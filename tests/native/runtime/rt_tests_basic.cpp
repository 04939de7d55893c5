/* rt_tests_basic.cpp - positions, barriers, simd exchanges, yields, threadgroup memory, several workers. */
#include <fenv.h>
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <set>
#include <thread>

#include "rt_harness.h"

/* ---- positions ------------------------------------------------------------------------------------------------ */

static void record_pos(void* const* buffers, const mt_thread_pos* pos) {
    mt_thread_pos* out = static_cast<mt_thread_pos*>(buffers[0]);
    const uint32_t* n = pos->threads_per_grid;
    const uint32_t* g = pos->thread_position_in_grid;
    out[g[0] + n[0] * (g[1] + n[1] * g[2])] = *pos;
    if (mt_current_pos() != pos) out[g[0] + n[0] * (g[1] + n[1] * g[2])].thread_index_in_threadgroup = 9999;
}

static bool check_positions(std::string& why, uint32_t nx, uint32_t ny, uint32_t nz, uint32_t tx, uint32_t ty,
                            uint32_t tz, int workers) {
    const uint32_t n[3] = {nx, ny, nz}, t[3] = {tx, ty, tz};
    std::vector<mt_thread_pos> out(static_cast<size_t>(nx) * ny * nz);
    memset(out.data(), 0xAB, out.size() * sizeof out[0]);
    Launch l(record_pos);
    l.threads(nx, ny, nz, tx, ty, tz).buffers({out.data()});
    l.d.workers = workers;
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    for (uint32_t z = 0; z < nz; ++z)
        for (uint32_t y = 0; y < ny; ++y)
            for (uint32_t x = 0; x < nx; ++x) {
                const mt_thread_pos& p = out[x + nx * (y + ny * z)];
                const uint32_t gp[3] = {x, y, z};
                uint32_t size[3], local[3], tg[3];
                for (int k = 0; k < 3; ++k) {
                    tg[k] = gp[k] / t[k];
                    local[k] = gp[k] % t[k];
                    size[k] = std::min(t[k], n[k] - tg[k] * t[k]);
                    CHECK(p.thread_position_in_grid[k] == gp[k], "(%u,%u,%u) dim %d", x, y, z, k);
                    CHECK(p.threadgroup_position_in_grid[k] == tg[k], "(%u,%u,%u) dim %d", x, y, z, k);
                    CHECK(p.thread_position_in_threadgroup[k] == local[k], "(%u,%u,%u) dim %d", x, y, z, k);
                    CHECK(p.threads_per_threadgroup[k] == size[k], "(%u,%u,%u) dim %d: %u", x, y, z, k,
                          p.threads_per_threadgroup[k]);
                    CHECK(p.dispatch_threads_per_threadgroup[k] == t[k], "dim %d", k);
                    CHECK(p.threadgroups_per_grid[k] == (n[k] + t[k] - 1) / t[k], "dim %d", k);
                    CHECK(p.threads_per_grid[k] == n[k], "dim %d", k);
                }
                const uint32_t count = size[0] * size[1] * size[2];
                const uint32_t idx = local[0] + local[1] * size[0] + local[2] * size[0] * size[1];
                CHECK(p.thread_index_in_threadgroup == idx, "(%u,%u,%u): %u != %u", x, y, z,
                      p.thread_index_in_threadgroup, idx);
                CHECK(p.thread_index_in_simdgroup == idx % 32 && p.simdgroup_index_in_threadgroup == idx / 32,
                      "(%u,%u,%u)", x, y, z);
                CHECK(p.simdgroups_per_threadgroup == (count + 31) / 32, "(%u,%u,%u)", x, y, z);
                CHECK(p.threads_per_simdgroup == std::min(32u, count - idx / 32 * 32), "(%u,%u,%u): %u", x, y, z,
                      p.threads_per_simdgroup);
                CHECK(p.thread_index_in_quadgroup == idx % 4 && p.quadgroup_index_in_threadgroup == idx / 4, "quad");
                CHECK(p.quadgroups_per_threadgroup == (count + 3) / 4, "quads per threadgroup");
            }
    return true;
}

RT_TEST(positions_1d) { return check_positions(why, 100, 1, 1, 32, 1, 1, 1) && check_positions(why, 1000, 1, 1, 1024, 1, 1, 2); }
RT_TEST(positions_2d) { return check_positions(why, 10, 7, 1, 4, 3, 1, 2) && check_positions(why, 64, 64, 1, 16, 16, 1, 3); }
RT_TEST(positions_3d) { return check_positions(why, 5, 6, 7, 2, 3, 4, 2) && check_positions(why, 9, 9, 9, 8, 8, 8, 1); }

static void record_order(void* const* buffers, const mt_thread_pos* pos) {
    uint32_t* out = static_cast<uint32_t*>(buffers[0]);
    uint32_t* counter = static_cast<uint32_t*>(buffers[1]);
    out[pos->thread_index_in_threadgroup] = (*counter)++;
}

RT_TEST(reverse_order) {
    for (int reverse = 0; reverse < 2; ++reverse) {
        std::vector<uint32_t> out(40);
        uint32_t counter = 0;
        Launch l(record_order);
        l.groups(1, 1, 1, 40, 1, 1).buffers({out.data(), &counter});
        l.d.reverse_order = reverse;
        CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
        for (uint32_t i = 0; i < 40; ++i) CHECK(out[i] == (reverse ? 39 - i : i), "reverse %d thread %u: %u", reverse, i, out[i]);
    }
    return true;
}

/* ---- barriers ------------------------------------------------------------------------------------------------- */

static void barrier_rounds(void* const* buffers, const mt_thread_pos* pos) {
    uint32_t* out = static_cast<uint32_t*>(buffers[0]);
    const uint32_t n = pos->threads_per_threadgroup[0], i = pos->thread_index_in_threadgroup;
    uint32_t* a = static_cast<uint32_t*>(mt_threadgroup_alloc(0, 256 * 4, 16, 10));
    uint32_t* b = static_cast<uint32_t*>(mt_threadgroup_alloc(1, 256 * 4, 64, 11));
    a[i] = i * 3 + pos->threadgroup_position_in_grid[0];
    for (int round = 0; round < 4; ++round) {
        mt_threadgroup_barrier(14);
        b[i] = a[(i + 1) % n] + a[(i + 37) % n];
        mt_threadgroup_barrier(16);
        a[i] = b[(i + n - 1) % n] + 1;
    }
    out[pos->thread_position_in_grid[0]] = a[i];
}

static bool barrier_case(std::string& why, uint32_t n, uint32_t groups, int workers, int reverse) {
    std::vector<uint32_t> out(n * groups);
    Launch l(barrier_rounds);
    l.groups(groups, 1, 1, n, 1, 1).buffers({out.data()});
    l.d.workers = workers;
    l.d.reverse_order = reverse;
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    for (uint32_t g = 0; g < groups; ++g) {
        std::vector<uint32_t> a(n), b(n);
        for (uint32_t i = 0; i < n; ++i) a[i] = i * 3 + g;
        for (int round = 0; round < 4; ++round) {
            for (uint32_t i = 0; i < n; ++i) b[i] = a[(i + 1) % n] + a[(i + 37) % n];
            for (uint32_t i = 0; i < n; ++i) a[i] = b[(i + n - 1) % n] + 1;
        }
        for (uint32_t i = 0; i < n; ++i) CHECK(out[g * n + i] == a[i], "group %u thread %u", g, i);
    }
    return true;
}

RT_TEST(barrier_ordering) {
    return barrier_case(why, 256, 6, 1, 0) && barrier_case(why, 200, 9, 2, 1) && barrier_case(why, 64, 33, 4, 0);
}

static void simd_barrier_kernel(void* const* buffers, const mt_thread_pos* pos) {
    uint32_t* out = static_cast<uint32_t*>(buffers[0]);
    uint32_t* a = static_cast<uint32_t*>(mt_threadgroup_alloc(0, 128 * 4, 16, 1));
    const uint32_t i = pos->thread_index_in_threadgroup, lane = pos->thread_index_in_simdgroup;
    const uint32_t base = i - lane, lanes = pos->threads_per_simdgroup;
    a[i] = i * i;
    mt_simdgroup_barrier(5);
    out[i] = a[base + (lane + 1) % lanes];
}

RT_TEST(simdgroup_barrier) {
    std::vector<uint32_t> out(100);
    Launch l(simd_barrier_kernel);
    l.groups(1, 1, 1, 100, 1, 1).buffers({out.data()});
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    for (uint32_t i = 0; i < 100; ++i) {
        const uint32_t base = i / 32 * 32, lanes = std::min(32u, 100 - base);
        const uint32_t j = base + (i - base + 1) % lanes;
        CHECK(out[i] == j * j, "thread %u", i);
    }
    return true;
}

/* ---- simd exchange -------------------------------------------------------------------------------------------- */

struct SumOut {
    uint32_t sum, live, rounds, lane;
};

static void exchange_sum(void* const* buffers, const mt_thread_pos* pos) {
    SumOut* out = static_cast<SumOut*>(buffers[0]);
    const uint32_t exit_every = *static_cast<const uint32_t*>(buffers[1]);
    const uint32_t i = pos->thread_index_in_threadgroup;
    SumOut& o = out[pos->thread_position_in_grid[0]];
    if (exit_every && i % exit_every == 0) return;
    o.rounds = 0;
    for (uint32_t round = 0; round < 3; ++round) {
        const uint64_t v = static_cast<uint64_t>(i) * 1000 + round;
        mt_exchange_view view;
        const unsigned char* s = mt_simd_exchange(&v, 8, 7, 40, &view);
        uint64_t sum = 0;
        for (uint32_t j = 0; j < 32; ++j)
            if (view.live >> j & 1) sum += *reinterpret_cast<const uint64_t*>(s + j * MT_SLOT_BYTES);
        o.sum = static_cast<uint32_t>(sum);
        o.live = view.live;
        o.lane = view.lane;
        ++o.rounds;
        if (exit_every && round == 1 && i % exit_every == 1) return; /* leave between two exchanges */
    }
}

static bool exchange_case(std::string& why, uint32_t n, uint32_t exit_every, int reverse) {
    const uint32_t groups = 3;
    std::vector<SumOut> out(n * groups, SumOut{0, 0, 0, 99});
    Launch l(exchange_sum);
    l.groups(groups, 1, 1, n, 1, 1).buffers({out.data(), &exit_every});
    l.d.reverse_order = reverse;
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    for (uint32_t g = 0; g < groups; ++g)
        for (uint32_t i = 0; i < n; ++i) {
            const SumOut& o = out[g * n + i];
            const bool never = exit_every && i % exit_every == 0;
            const bool early = exit_every && i % exit_every == 1;
            if (never) {
                CHECK(o.rounds == 0, "thread %u ran", i);
                continue;
            }
            const uint32_t base = i / 32 * 32, lanes = std::min(32u, n - base);
            const uint32_t last_round = early ? 1 : 2;
            uint32_t mask = 0;
            uint64_t sum = 0;
            for (uint32_t j = 0; j < lanes; ++j) {
                const uint32_t t = base + j;
                if (exit_every && t % exit_every == 0) continue;
                if (last_round == 2 && exit_every && t % exit_every == 1) continue;
                mask |= 1u << j;
                sum += static_cast<uint64_t>(t) * 1000 + last_round;
            }
            CHECK(o.rounds == last_round + 1, "thread %u rounds %u", i, o.rounds);
            CHECK(o.live == mask, "n %u thread %u: live %#x != %#x", n, i, o.live, mask);
            CHECK(o.lane == i % 32, "n %u thread %u: lane %u", n, i, o.lane);
            CHECK(o.sum == static_cast<uint32_t>(sum), "n %u thread %u: sum %u != %u", n, i, o.sum,
                  static_cast<uint32_t>(sum));
        }
    return true;
}

RT_TEST(exchange_sum_full) { return exchange_case(why, 32, 0, 0) && exchange_case(why, 128, 0, 1); }
RT_TEST(exchange_sum_partial) { return exchange_case(why, 48, 0, 0) && exchange_case(why, 1, 0, 0) && exchange_case(why, 70, 0, 1); }
RT_TEST(exchange_sum_exited_lanes) { return exchange_case(why, 64, 5, 0) && exchange_case(why, 48, 3, 1) && exchange_case(why, 40, 2, 0); }

/* Frames (as the guards of include/mt_diverge.h keep them): lanes below 16 enter an arm inside iteration 1 of a loop
 * and exchange there at line 30 while the others already wait at line 5 of iteration 2; the arm runs first (its
 * iteration comes first), then iteration 2's exchange has every lane. By line alone, line 5 would run first. */
static void set_key(mt_frames* s) {
    const mt_frame& top = s->f[s->depth];
    s->key = uint64_t(s->depth) << 48 ^ uint64_t(top.count) << 32 ^ top.order ^ uint64_t(top.cursor) << 16;
}

static void frames_kernel(void* const* buffers, const mt_thread_pos* pos) {
    uint32_t* out = static_cast<uint32_t*>(buffers[0]) + pos->thread_index_in_threadgroup * 4;
    mt_frames* s = mt_current_frames();
    out[3] = s != nullptr && s->depth == 0 && s == mt_current_frames();
    const uint32_t lane = pos->thread_index_in_simdgroup;
    uint32_t live = 0;
    s->depth = 1;
    s->f[1] = mt_frame{10, 0xffffffffu, 1, 1, 0, 0, 0};
    set_key(s);
    exchange_live(&lane, 4, 1, 5, &live);
    out[0] = live;
    if (lane < 16) {
        s->depth = 2;
        s->f[2] = mt_frame{20, 0xffffffffu, 2, 0, 0, 0, 0};
        set_key(s);
        exchange_live(&lane, 4, 1, 30, &live);
        out[1] = live;
        s->depth = 1;
    }
    s->f[1].count = 2;
    set_key(s);
    exchange_live(&lane, 4, 1, 5, &live);
    out[2] = live;
    s->depth = 0;
}

RT_TEST(exchange_frames_order) {
    std::vector<uint32_t> out(64 * 4, 0);
    Launch l(frames_kernel);
    l.groups(1, 1, 1, 64, 1, 1).buffers({out.data()});
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    for (uint32_t i = 0; i < 64; ++i) {
        const uint32_t* o = &out[i * 4];
        CHECK(o[3] == 1, "thread %u: frames pointer or depth", i);
        CHECK(o[0] == 0xffffffffu && o[2] == 0xffffffffu, "thread %u: live %#x then %#x", i, o[0], o[2]);
        CHECK(i % 32 >= 16 || o[1] == 0xffffu, "thread %u: arm live %#x", i, o[1]);
    }
    return true;
}

/* ---- yields, FP control words, threadgroup memory --------------------------------------------------------------- */

static void yield_spin(void* const* buffers, const mt_thread_pos* pos) {
    volatile uint32_t* flag = static_cast<volatile uint32_t*>(mt_threadgroup_alloc(0, 4, 4, 1));
    uint32_t* out = static_cast<uint32_t*>(buffers[0]);
    const uint32_t i = pos->thread_index_in_threadgroup;
    if (i == 0) {
        *flag = 0;
        mt_threadgroup_barrier(3);
        while (*flag != 7) mt_yield(); /* thread 9 sets it */
        out[0] = 1;
    } else {
        mt_threadgroup_barrier(3);
        if (i == 9) {
            for (int k = 0; k < 5; ++k) mt_yield();
            *flag = 7;
        }
    }
}

RT_TEST(yield_progress) {
    uint32_t out = 0;
    Launch l(yield_spin);
    l.groups(1, 1, 1, 10, 1, 1).buffers({&out});
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    CHECK(out == 1, "thread 0 did not see the flag");
    return true;
}

static void rounding_kernel(void* const* buffers, const mt_thread_pos* pos) {
    int* out = static_cast<int*>(buffers[0]);
    const uint32_t i = pos->thread_index_in_threadgroup;
    if (i == 0) fesetround(FE_UPWARD);
    mt_yield();
    out[i] = fegetround();
    mt_threadgroup_barrier(1);
    out[2 + i] = fegetround();
    if (i == 0) fesetround(FE_TONEAREST);
}

RT_TEST(fp_control_per_thread) {
    int out[4] = {0, 0, 0, 0};
    Launch l(rounding_kernel);
    l.groups(1, 1, 1, 2, 1, 1).buffers({out});
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    CHECK(out[0] == FE_UPWARD && out[2] == FE_UPWARD, "thread 0 lost its rounding mode: %d %d", out[0], out[2]);
    CHECK(out[1] == FE_TONEAREST && out[3] == FE_TONEAREST, "thread 1 saw thread 0's rounding mode");
    CHECK(fegetround() == FE_TONEAREST, "caller's rounding mode changed");
    return true;
}

static void rounding_then_fault(void* const*, const mt_thread_pos*) {
    fesetround(FE_DOWNWARD);
    mt_kernel_fault(MT_FAULT_KERNEL, "stop", 1);
}

RT_TEST(fp_control_reset_after_fault) {
    Launch f(rounding_then_fault);
    f.groups(1, 1, 1, 1, 1, 1);
    CHECK(f.run() == MT_FAULT_KERNEL, "%s", f.describe().c_str());
    int out[4] = {0, 0, 0, 0};
    Launch l(rounding_kernel);
    l.groups(1, 1, 1, 2, 1, 1).buffers({out});
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    CHECK(out[1] == FE_TONEAREST, "a new launch inherited the rounding mode of a faulted kernel");
    return true;
}

struct TgInfo {
    uintptr_t slot0, slot1, param0;
    uint32_t first0, first_param;
};

static void tg_memory_kernel(void* const* buffers, const mt_thread_pos* pos) {
    TgInfo* out = static_cast<TgInfo*>(buffers[0]);
    const size_t bytes = *static_cast<const size_t*>(buffers[1]);
    const size_t align = *static_cast<const size_t*>(buffers[2]);
    unsigned char* s0 = static_cast<unsigned char*>(mt_threadgroup_alloc(0, bytes, align, 1));
    unsigned char* s1 = static_cast<unsigned char*>(mt_threadgroup_alloc(1, 12, 4, 2));
    unsigned char* p0 = static_cast<unsigned char*>(mt_threadgroup_param(0));
    const uint32_t i = pos->thread_index_in_threadgroup;
    TgInfo& o = out[pos->thread_position_in_grid[0]];
    o.slot0 = reinterpret_cast<uintptr_t>(s0);
    o.slot1 = reinterpret_cast<uintptr_t>(s1);
    o.param0 = reinterpret_cast<uintptr_t>(p0);
    mt_threadgroup_barrier(3);
    if (i == 0) {
        o.first0 = s0[0] | s0[bytes - 1] << 8;
        o.first_param = p0[0];
        s0[0] = s0[bytes - 1] = 0x11;
        p0[0] = 0x22;
        s1[11] = 0x33;
    }
}

RT_TEST(threadgroup_memory_reuse_and_fill) {
    for (size_t bytes : {size_t(100), size_t(4096), size_t(100), size_t(5000)}) {
        const size_t align = bytes == 4096 ? 256 : 16;
        const uint32_t groups = 5, n = 8;
        std::vector<TgInfo> out(groups * n);
        Launch l(tg_memory_kernel);
        l.groups(groups, 1, 1, n, 1, 1).buffers({out.data(), &bytes, const_cast<size_t*>(&align)}).tg_params({40});
        l.d.tg_fill = static_cast<uint8_t>(bytes);
        CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
        const unsigned fill = static_cast<uint8_t>(bytes);
        for (uint32_t g = 0; g < groups; ++g) {
            const TgInfo& o0 = out[g * n];
            CHECK(o0.slot0 % align == 0, "slot 0 at %#lx not aligned to %zu", (unsigned long)o0.slot0, align);
            CHECK(o0.slot1 % 16 == 0 && o0.param0 % 16 == 0, "alignment of slot 1 / param 0");
            CHECK(o0.first0 == (fill | fill << 8), "group %u: slot 0 not filled (%#x)", g, o0.first0);
            CHECK(o0.first_param == fill, "group %u: param not filled", g);
            for (uint32_t i = 1; i < n; ++i) {
                const TgInfo& o = out[g * n + i];
                CHECK(o.slot0 == o0.slot0 && o.slot1 == o0.slot1 && o.param0 == o0.param0, "pointers differ in group");
            }
        }
    }
    return true;
}

static void tg_param_limit_kernel(void* const*, const mt_thread_pos*) {
    mt_threadgroup_param(0);
    mt_threadgroup_alloc(0, 20000, 16, 77);
}

RT_TEST(threadgroup_memory_limit) {
    Launch l(tg_param_limit_kernel);
    l.groups(2, 1, 1, 4, 1, 1).tg_params({20000});
    CHECK(l.run() == MT_FAULT_TG_MEMORY, "%s", l.describe().c_str());
    CHECK(l.f.line == 77, "line %u", l.f.line);
    CHECK(strcmp(l.f.message, "threadgroup memory: 40000 bytes needed, the device allows 32768") == 0, "%s", l.f.message);
    Launch l2(tg_param_limit_kernel);
    l2.groups(1, 1, 1, 4, 1, 1).tg_params({40000});
    CHECK(l2.run() == MT_FAULT_TG_MEMORY, "%s", l2.describe().c_str());
    Launch l3(tg_param_limit_kernel);
    l3.groups(2, 1, 1, 4, 1, 1).tg_params({1000});
    CHECK(l3.run() == MT_OK, "%s", l3.describe().c_str());
    return true;
}

/* ---- several workers, concurrent launches ---------------------------------------------------------------------- */

static void worker_ids(void* const* buffers, const mt_thread_pos* pos) {
    unsigned long* out = static_cast<unsigned long*>(buffers[0]);
    mt_threadgroup_barrier(1);
    timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do { /* about 2 ms per threadgroup, so that the second worker surely gets some */
        mt_yield();
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 2000000L);
    out[pos->threadgroup_position_in_grid[0]] = static_cast<unsigned long>(pthread_self());
}

RT_TEST(multi_worker) {
    if (!barrier_case(why, 128, 64, 4, 0)) return false;
    for (uint32_t n : {32u, 48u, 96u})
        for (int rev = 0; rev < 2; ++rev) {
            const uint32_t exit_every = 3, groups = 40;
            std::vector<SumOut> out(n * groups, SumOut{0, 0, 0, 99});
            Launch l(exchange_sum);
            l.groups(groups, 1, 1, n, 1, 1).buffers({out.data(), const_cast<uint32_t*>(&exit_every)});
            l.d.workers = 3;
            l.d.reverse_order = rev;
            CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
        }
    std::vector<unsigned long> ids(64);
    Launch l(worker_ids);
    l.groups(64, 1, 1, 16, 1, 1).buffers({ids.data()});
    l.d.workers = 2;
    CHECK(l.run() == MT_OK, "%s", l.describe().c_str());
    CHECK(std::set<unsigned long>(ids.begin(), ids.end()).size() == 2, "threadgroups did not run on 2 workers");
    const size_t by_caller =
        std::set<unsigned long>(ids.begin(), ids.end()).count(static_cast<unsigned long>(pthread_self()));
#if defined(__linux__) && !defined(MT_NO_CALLER_JOINS)
    /* the launching thread is one of the two (it takes up threadgroups at once, the pool's worker a little later) */
    CHECK(by_caller == 1, "the launching thread did not run threadgroups");
#else
    /* without thread-directed timers for its watchdog (macOS) the launching thread only waits for the pool */
    CHECK(by_caller == 0, "the launching thread ran threadgroups");
#endif
    return true;
}

RT_TEST(concurrent_launches) {
    std::atomic<int> bad{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t)
        threads.emplace_back([&bad, t] {
            std::string why;
            for (int k = 0; k < 5; ++k)
                if (!barrier_case(why, 64 + 32 * t, 8, 1 + t, k & 1)) bad.fetch_add(1);
        });
    for (std::thread& th : threads) th.join();
    CHECK(bad.load() == 0, "%d concurrent launches gave wrong results", bad.load());
    return true;
}

/* ---- launch validation ------------------------------------------------------------------------------------------ */

static void nothing(void* const*, const mt_thread_pos*) {}

RT_TEST(launch_validation) {
    {
        Launch l(nothing);
        l.groups(1, 0, 1, 4, 1, 1);
        CHECK(l.run() == MT_FAULT_INTERNAL && strstr(l.f.message, "zero"), "%s", l.describe().c_str());
    }
    {
        Launch l(nothing);
        l.groups(1, 1, 1, 64, 32, 1);
        CHECK(l.run() == MT_FAULT_INTERNAL && strstr(l.f.message, "2048"), "%s", l.describe().c_str());
    }
    {
        Launch l(nothing);
        l.groups(4, 1, 1, 4, 1, 1);
        l.d.grid_threads[0] = 40;
        CHECK(l.run() == MT_FAULT_INTERNAL, "%s", l.describe().c_str());
    }
    {
        Launch l(nullptr);
        l.groups(1, 1, 1, 1, 1, 1);
        CHECK(l.run() == MT_FAULT_INTERNAL, "%s", l.describe().c_str());
    }
    mt_fault f;
    CHECK(mt_launch(nullptr, &f) == MT_FAULT_INTERNAL, "null descriptor");
    CHECK(mt_runtime_abi_version() == MT_RUNTIME_ABI_VERSION, "abi version");
    CHECK(mt_current_pos() == nullptr, "position outside a launch");
    return true;
}

RT_TEST(buffer_alloc) {
    for (size_t n : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(1000), size_t(4096), size_t(100001)}) {
        unsigned char* p = static_cast<unsigned char*>(mt_buffer_alloc(n));
        CHECK(p != nullptr, "alloc %zu", n);
        CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0, "alignment of %zu bytes", n);
        const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
        const uintptr_t guard = (end + 4095) / 4096 * 4096;
        CHECK(guard - end < 16, "%zu bytes: end %#lx is %lu bytes before the guard", n, (unsigned long)end,
              (unsigned long)(guard - end));
        memset(p, 0x5A, n);
        mt_buffer_free(p);
    }
    mt_buffer_free(nullptr);
    return true;
}

/* A freed mapping is reused for a buffer of the same size: mt_buffer_alloc_staging leaves the data as the last user
 * left it (the bytes after it up to the guard zero, the front the canary again), mt_buffer_alloc zeroes it. */
RT_TEST(buffer_reuse) {
    for (size_t n : {size_t(40), size_t(5000), size_t(100001)}) { /* fronts of a page or less */
        unsigned char* p = static_cast<unsigned char*>(mt_buffer_alloc(n));
        CHECK(p != nullptr, "alloc %zu", n);
        const size_t used = (n + 15) / 16 * 16;
        memset(p, 0x5A, used);
        p[-1] = 0x11; /* a write in front of the buffer, as an overrunning kernel would leave */
        mt_buffer_free(p);
        unsigned char* q = static_cast<unsigned char*>(mt_buffer_alloc_staging(n - 3));
        CHECK(q != nullptr, "staging alloc %zu", n - 3);
        bool kept = true, tail_zero = true;
        for (size_t i = 0; i < n - 3; ++i) kept = kept && q[i] == 0x5A;
        for (size_t i = n - 3; i < (n - 3 + 15) / 16 * 16; ++i) tail_zero = tail_zero && q[i] == 0;
        CHECK(kept, "%zu bytes: the staging buffer is not the freed mapping reused", n);
        CHECK(tail_zero, "%zu bytes: the bytes after a staging buffer are not zero", n);
        CHECK(q[-1] == 0xFE, "%zu bytes: the front of a reused mapping is not the canary again", n);
        memset(q, 0x5A, n - 3);
        mt_buffer_free(q);
        unsigned char* z = static_cast<unsigned char*>(mt_buffer_alloc(n));
        bool zero = true;
        for (size_t i = 0; i < used; ++i) zero = zero && z[i] == 0;
        CHECK(zero, "%zu bytes: a reused mapping from mt_buffer_alloc is not zero", n);
        mt_buffer_free(z);
    }
    return true;
}
