/* mock_runtime.cpp - the Part-1 services of mt_runtime.h for one simdgroup of std::threads (see mock_runtime.h). */
#include "mock_runtime.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "mt_runtime.h"

namespace {

struct Group {
    std::mutex m;
    std::condition_variable cv;
    uint32_t members = 0;  /* lanes still running */
    /* exchange */
    uint32_t x_arrived = 0, x_site = 0, x_line = 0, x_mask = 0;
    uint64_t x_gen = 0;
    uint32_t x_done_mask[2] = {0, 0};
    unsigned char slots[2][MT_SIMD_WIDTH][MT_SLOT_BYTES];
    /* barrier */
    uint32_t b_arrived = 0, b_line = 0;
    uint64_t b_gen = 0;
    uint64_t exchanges = 0;
};

Group g_group;
thread_local mt_thread_pos t_pos;
thread_local uint32_t t_lane;

[[noreturn]] void fail(const char* what, uint32_t line) {
    std::fprintf(stderr, "mock runtime: %s (line %u, lane %u)\n", what, line, t_lane);
    std::fflush(stderr);
    std::abort();
}

/* Called with the lock held when the last running lane arrived. */
void complete_exchange(Group& g) {
    const uint32_t buf = uint32_t(g.x_gen & 1u);
    g.x_done_mask[buf] = g.x_mask;
    g.x_arrived = 0;
    g.x_mask = 0;
    ++g.x_gen;
    ++g.exchanges;
    g.cv.notify_all();
}

void complete_barrier(Group& g) {
    g.b_arrived = 0;
    ++g.b_gen;
    g.cv.notify_all();
}

}  // namespace

extern "C" {

void mt_threadgroup_barrier(uint32_t line) {
    Group& g = g_group;
    std::unique_lock<std::mutex> lock(g.m);
    if (g.b_arrived == 0) g.b_line = line;
    else if (g.b_line != line) fail("barrier divergence", line);
    const uint64_t gen = g.b_gen;
    if (++g.b_arrived == g.members) {
        complete_barrier(g);
        return;
    }
    g.cv.wait(lock, [&] { return g.b_gen != gen; });
}

void mt_simdgroup_barrier(uint32_t line) { mt_threadgroup_barrier(line); }

const unsigned char* mt_simd_exchange(const void* src, uint32_t bytes, uint32_t site, uint32_t line,
                                      mt_exchange_view* view) {
    Group& g = g_group;
    if (bytes > MT_SLOT_BYTES) fail("exchange too large", line);
    std::unique_lock<std::mutex> lock(g.m);
    if (g.x_arrived == 0) {
        g.x_site = site;
        g.x_line = line;
    } else if (g.x_site != site || g.x_line != line) {
        fail("simd divergence", line);
    }
    const uint64_t gen = g.x_gen;
    const uint32_t buf = uint32_t(gen & 1u);
    std::memcpy(g.slots[buf][t_lane], src, bytes);
    g.x_mask |= 1u << t_lane;
    if (++g.x_arrived == g.members) {
        complete_exchange(g);
    } else {
        g.cv.wait(lock, [&] { return g.x_gen != gen; });
    }
    view->live = g.x_done_mask[buf];
    view->lane = t_lane;
    return &g.slots[buf][0][0];
}

/* The product through one exchange of every lane's elements; each lane sums its own two elements of A*B in k order
 * 0..7 from zero, as the runtime does for all of them. */
const float* mt_simd_matrix_product(const mt_thread_pos* pos, float a0, float a1, float b0, float b1, uint32_t line) {
    static thread_local float out[2];
    const float mine[4] = {a0, a1, b0, b1};
    mt_exchange_view view;
    const unsigned char* base = mt_simd_exchange(mine, sizeof mine, MT_SITE_MATRIX_PRODUCT, line, &view);
    const uint32_t lane = pos->thread_index_in_simdgroup;
    const uint32_t row = (lane / 16u) * 4u + (lane / 2u) % 4u, col = ((lane / 8u) % 2u) * 4u + (lane % 2u) * 2u;
    auto element = [&](uint32_t r, uint32_t c, uint32_t which) {  /* which: 0 A, 2 B */
        const uint32_t j = (c / 2u) % 2u + 2u * (r % 4u) + 8u * (c / 4u) + 16u * (r / 4u);
        float v;
        std::memcpy(&v, base + j * MT_SLOT_BYTES + (which + c % 2u) * sizeof(float), sizeof v);
        return v;
    };
    for (uint32_t e = 0; e < 2u; ++e) {
        float acc = 0.f;
        for (uint32_t k = 0; k < 8u; ++k) acc += element(row, k, 0) * element(k, col + e, 2);
        out[e] = acc;
    }
    return out;
}

void* mt_threadgroup_alloc(uint32_t slot, size_t bytes, size_t align, uint32_t line) {
    (void)slot;
    (void)align;
    static unsigned char storage[8][1 << 16] __attribute__((aligned(64)));
    if (slot >= 8 || bytes > sizeof storage[0]) fail("threadgroup allocation too large", line);
    return storage[slot];
}

void* mt_threadgroup_param(uint32_t index) {
    (void)index;
    return nullptr;
}

void mt_yield(void) { std::this_thread::yield(); }

const mt_thread_pos* mt_current_pos(void) { return &t_pos; }

void mt_kernel_fault(int32_t kind, const char* message, uint32_t line) {
    std::fprintf(stderr, "kernel fault %d: %s\n", kind, message);
    fail("kernel fault", line);
}

void mt_san_access(const void*, uint32_t, int32_t, const void*) {}

}  // extern "C"

void mock_run_simdgroup(uint32_t lanes, const std::function<void(uint32_t lane)>& fn) {
    Group& g = g_group;
    {
        std::lock_guard<std::mutex> lock(g.m);
        g.members = lanes;
        g.x_arrived = g.b_arrived = 0;
        g.x_mask = 0;
    }
    std::vector<std::thread> threads;
    for (uint32_t lane = 0; lane < lanes; ++lane) {
        threads.emplace_back([lane, lanes, &fn] {
            Group& g = g_group;
            t_lane = lane;
            std::memset(&t_pos, 0, sizeof t_pos);
            t_pos.thread_position_in_grid[0] = t_pos.thread_position_in_threadgroup[0] = lane;
            t_pos.thread_index_in_threadgroup = lane;
            t_pos.thread_index_in_simdgroup = lane;
            t_pos.threads_per_simdgroup = lanes;
            t_pos.simdgroups_per_threadgroup = 1;
            t_pos.threads_per_threadgroup[0] = lanes;
            t_pos.thread_index_in_quadgroup = lane % 4;
            t_pos.quadgroup_index_in_threadgroup = lane / 4;
            fn(lane);
            /* an exited lane no longer takes part: complete what the others wait for */
            std::lock_guard<std::mutex> lock(g.m);
            --g.members;
            if (g.members > 0 && g.x_arrived == g.members) complete_exchange(g);
            if (g.members > 0 && g.b_arrived == g.members) complete_barrier(g);
        });
    }
    for (auto& t : threads) t.join();
}

uint64_t mock_exchange_count() { return g_group.exchanges; }
