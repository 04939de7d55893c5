/* test_simd.cpp - simd_* and quad_* collectives on the mock runtime, against direct computations. */
#include "compat_harness.h"
#include "metal_compat.h"

namespace {

const uint32_t W = 32;
float fval(uint32_t l) { return float(l) * 0.375f - 3.0f + (l % 3 == 0 ? 0.125f : 0.0f); }
int ival(uint32_t l) { return int(l * 7u % 11u) - 5; }

/* What every lane produced, per collective. */
struct LaneOut {
    float shuffle, shuffle_xor, up, down, rot_up, rot_down, fill_up, fill_down, bcast, bfirst;
    float sum, product, mn, mx, psum_inc, psum_exc, pprod_inc, pprod_exc;
    int iand, ior, ixor, isum;
    bool all_pos, any_big, first;
    uint64_t ballot, active;
    float4 vsum, vshuf;
    half hsum;
    float qsum, qshuffle, qxor, qup, qdown, qbcast, qmax, qpsum;
    uint16_t qballot, qactive;
    bool qall, qany, qfirst;
    float qmin, qprod, qpexc, qrot, qbfirst, qfill;
    int qand;
};

void run_collectives(uint32_t lanes, uint32_t exit_from, std::vector<LaneOut>& out) {
    out.assign(W, LaneOut());
    mock_run_simdgroup(lanes, [&](uint32_t lane) {
        if (lane >= exit_from) return; /* exited GPU threads */
        const float v = fval(lane);
        const int iv = ival(lane);
        LaneOut& o = out[lane];
        o.shuffle = simd_shuffle(v, ushort((lane * 3u + 1u) % W));
        o.shuffle_xor = simd_shuffle_xor(v, 5);
        o.up = simd_shuffle_up(v, 2u);
        o.down = simd_shuffle_down(v, 3u);
        o.rot_up = simd_shuffle_rotate_up(v, 4u);
        o.rot_down = simd_shuffle_rotate_down(v, 6u);
        o.fill_up = simd_shuffle_and_fill_up(v, -v, 3u, 8u);
        o.fill_down = simd_shuffle_and_fill_down(v, -v, 3u);
        o.bcast = simd_broadcast(v, 7u);
        o.bfirst = simd_broadcast_first(v);
        o.sum = simd_sum(v);
        o.product = simd_product(1.0f + v / 64.0f);
        o.mn = simd_min(v);
        o.mx = simd_max(v);
        o.psum_inc = simd_prefix_inclusive_sum(v);
        o.psum_exc = simd_prefix_exclusive_sum(v);
        o.pprod_inc = simd_prefix_inclusive_product(1.0f + v / 64.0f);
        o.pprod_exc = simd_prefix_exclusive_product(1.0f + v / 64.0f);
        o.iand = simd_and(iv | 0x100);
        o.ior = simd_or(iv & 0xf);
        o.ixor = simd_xor(iv);
        o.isum = simd_sum(iv);
        o.all_pos = simd_all(v > -10.0f);
        o.any_big = simd_any(v > 7.0f);
        o.ballot = uint64_t(simd_ballot(v > 0.0f));
        const simd_vote vote = simd_ballot(v > -100.0f);
        o.all_pos = o.all_pos && vote.all() && vote.any() && !simd_ballot(false).any();
        o.active = simd_vote::vote_t(simd_active_threads_mask());
        o.first = simd_is_first();
        o.vsum = simd_sum(float4(v, 1.0f, float(iv), 2.0f * v));
        o.vshuf = simd_shuffle_xor(float4(v, float(lane), 0.0f, 1.0f).wzyx, ushort(1));
        o.hsum = simd_sum(half(iv));
        o.qsum = quad_sum(v);
        o.qshuffle = quad_shuffle(v, ushort(3u - lane % 4u));
        o.qxor = quad_shuffle_xor(v, 1u);
        o.qup = quad_shuffle_up(v, 1u);
        o.qdown = quad_shuffle_down(v, 2u);
        o.qbcast = quad_broadcast(v, 2u);
        o.qmax = quad_max(v);
        o.qpsum = quad_prefix_inclusive_sum(v);
        o.qballot = quad_vote::vote_t(quad_ballot(v > 0.0f));
        o.qall = quad_all(v < 100.0f);
        o.qany = quad_any(v > 0.0f);
        o.qfirst = quad_is_first();
        o.qactive = quad_vote::vote_t(quad_active_threads_mask());
        o.qmin = quad_min(v);
        o.qprod = quad_product(v);
        o.qpexc = quad_prefix_exclusive_sum(v);
        o.qrot = quad_shuffle_rotate_down(v, 1u);
        o.qbfirst = quad_broadcast_first(v);
        o.qfill = quad_shuffle_and_fill_down(v, -v, 1u);
        o.qand = quad_and(iv | 0x100);
    });
}

bool live(uint32_t j, uint32_t n) { return j < n; }
float pick(uint32_t j, uint32_t l, uint32_t n) { return live(j, n) ? fval(j) : fval(l); }

void check_simd(uint32_t lanes, uint32_t exit_from) {
    std::vector<LaneOut> out;
    run_collectives(lanes, exit_from, out);
    const uint32_t n = lanes < exit_from ? lanes : exit_from; /* live lanes are 0 .. n-1 */
    float sum = 0, product = 1, mn = INFINITY, mx = -INFINITY;
    int iand = -1, ior = 0, ixor = 0, isum = 0;
    uint64_t ballot = 0;
    for (uint32_t j = 0; j < n; ++j) {
        sum += fval(j);
        product *= 1.0f + fval(j) / 64.0f;
        mn = std::fmin(mn, fval(j));
        mx = std::fmax(mx, fval(j));
        iand &= ival(j) | 0x100;
        ior |= ival(j) & 0xf;
        ixor ^= ival(j);
        isum += ival(j);
        if (fval(j) > 0) ballot |= uint64_t(1) << j;
    }
    float psum = 0, pprod = 1;
    for (uint32_t l = 0; l < n; ++l) {
        const LaneOut& o = out[l];
        const float v = fval(l);
        CHECK(o.shuffle == pick((l * 3u + 1u) % W, l, n), "shuffle lane %u of %u", l, n);
        CHECK(o.shuffle_xor == pick(l ^ 5u, l, n), "shuffle_xor lane %u", l);
        CHECK(o.up == (l >= 2 ? pick(l - 2, l, n) : v), "shuffle_up lane %u", l);
        CHECK(o.down == (l + 3 < W ? pick(l + 3, l, n) : v), "shuffle_down lane %u", l);
        CHECK(o.rot_up == pick((l + W - 4) % W, l, n), "rotate_up lane %u", l);
        CHECK(o.rot_down == pick((l + 6) % W, l, n), "rotate_down lane %u", l);
        const uint32_t seg = l - l % 8;
        const float fu = l % 8 >= 3 ? pick(l - 3, l, n) : -pick(seg + (l % 8) + 8 - 3, l, n);
        CHECK(o.fill_up == fu, "fill_up lane %u: %g vs %g", l, o.fill_up, fu);
        const float fd = l + 3 < W ? pick(l + 3, l, n) : -pick(l + 3 - W, l, n);
        CHECK(o.fill_down == fd, "fill_down lane %u", l);
        CHECK(o.bcast == pick(7, l, n) && o.bfirst == fval(0), "broadcast lane %u", l);
        CHECK(bits_of(o.sum) == bits_of(sum) && bits_of(o.product) == bits_of(product), "sum/product lane %u", l);
        CHECK(o.mn == mn && o.mx == mx, "min/max lane %u", l);
        const float psum_before = psum, pprod_before = pprod;
        psum += v;
        pprod *= 1.0f + v / 64.0f;
        CHECK(bits_of(o.psum_inc) == bits_of(psum) && bits_of(o.psum_exc) == bits_of(psum_before),
              "prefix sums lane %u", l);
        CHECK(bits_of(o.pprod_inc) == bits_of(pprod) && bits_of(o.pprod_exc) == bits_of(pprod_before),
              "prefix products lane %u", l);
        CHECK(o.iand == iand && o.ior == ior && o.ixor == ixor && o.isum == isum, "integer reductions lane %u", l);
        CHECK(o.all_pos && o.any_big == (mx > 7.0f), "all/any lane %u", l);
        CHECK(o.ballot == ballot, "ballot lane %u: %llx vs %llx", l, (unsigned long long)o.ballot,
              (unsigned long long)ballot);
        CHECK(o.active == (n == 32 ? 0xffffffffull : (1ull << n) - 1), "active mask lane %u", l);
        CHECK(o.first == (l == 0), "is_first lane %u", l);
        CHECK(o.vsum.x == o.sum && o.vsum.y == float(n) && o.vsum.z == float(isum), "vector sum lane %u", l);
        const uint32_t x1 = l ^ 1u;
        const float4 want = live(x1, n) ? float4(fval(x1), float(x1), 0.0f, 1.0f).wzyx
                                        : float4(v, float(l), 0.0f, 1.0f).wzyx;
        CHECK(all(o.vshuf == want), "vector shuffle lane %u", l);
        CHECK(float(o.hsum) == float(isum), "half sum lane %u", l);
        const uint32_t q = l & ~3u;
        float qs = 0, qm = -INFINITY, qp = 0;
        uint16_t qb = 0;
        for (uint32_t j = q; j < q + 4; ++j)
            if (live(j, n)) {
                qs += fval(j);
                qm = std::fmax(qm, fval(j));
                if (j <= l) qp += fval(j);
                if (fval(j) > 0) qb |= uint16_t(1u << (j - q));
            }
        CHECK(o.qsum == qs && o.qmax == qm && o.qpsum == qp && o.qballot == qb && o.qall, "quad reductions lane %u", l);
        CHECK(o.qshuffle == pick(q + 3 - l % 4, l, n) && o.qxor == pick(l ^ 1, l, n), "quad shuffles lane %u", l);
        CHECK(o.qup == (l % 4 >= 1 ? pick(l - 1, l, n) : v) && o.qdown == (l % 4 + 2 < 4 ? pick(l + 2, l, n) : v),
              "quad up/down lane %u", l);
        CHECK(o.qbcast == pick(q + 2, l, n), "quad broadcast lane %u", l);
        float qmin = INFINITY, qprod = 1, qpexc = 0;
        int qand = -1;
        bool qany = false;
        uint16_t qactive = 0;
        uint32_t qfirst = 99;
        for (uint32_t j = q; j < q + 4; ++j)
            if (live(j, n)) {
                qmin = std::fmin(qmin, fval(j));
                qprod *= fval(j);
                if (j < l) qpexc += fval(j);
                qand &= ival(j) | 0x100;
                qany = qany || fval(j) > 0;
                qactive = uint16_t(qactive | (1u << (j - q)));
                if (qfirst == 99) qfirst = j;
            }
        CHECK(o.qmin == qmin && o.qprod == qprod && o.qpexc == qpexc && o.qand == qand && o.qany == qany,
              "more quad reductions lane %u", l);
        CHECK(o.qactive == qactive && o.qfirst == (l == qfirst) && o.qbfirst == fval(qfirst), "quad votes lane %u", l);
        CHECK(o.qrot == pick(q + (l % 4 + 1) % 4, l, n), "quad rotate lane %u", l);
        CHECK(o.qfill == (l % 4 + 1 < 4 ? pick(l + 1, l, n) : -pick(q, l, n)), "quad fill lane %u", l);
    }
}

}  // namespace

TEST(simd_collectives_full_simdgroup) { check_simd(32, 32); }
TEST(simd_collectives_partial_simdgroup) { check_simd(21, 32); }
TEST(simd_collectives_with_exited_lanes) { check_simd(32, 13); }

TEST(simd_collectives_use_one_exchange_each) {
    const uint64_t before = mock_exchange_count();
    mock_run_simdgroup(32, [](uint32_t lane) {
        float v = float(lane);
        v = simd_sum(v) + simd_max(v);
        (void)v;
    });
    CHECK(mock_exchange_count() - before == 2, "two collectives, two exchanges");
}

TEST(barriers) {
    int stage[W] = {};
    int seen_early[W] = {};
    mock_run_simdgroup(32, [&](uint32_t lane) {
        stage[lane] = 1;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        int sum = 0;
        for (uint32_t j = 0; j < W; ++j) sum += __atomic_load_n(&stage[j], __ATOMIC_RELAXED);
        seen_early[lane] = sum;
        simdgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
    });
    bool ok = true;
    for (uint32_t l = 0; l < W; ++l) ok = ok && seen_early[l] == 32;
    CHECK(ok, "every lane wrote before any lane passed the barrier");
}
