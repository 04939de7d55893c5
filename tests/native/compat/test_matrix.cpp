/* test_matrix.cpp - simdgroup_matrix: Apple's lane layout, loads/stores (strided, offset, transposed), diagonal
 * and filled matrices, multiply(-accumulate) against a naive 8x8 product, with float, half and bfloat inputs. */
#include "compat_harness.h"
#include "metal_compat.h"

namespace {

const uint32_t W = 32;
uint32_t row_of(uint32_t l) { return (l / 16) * 4 + (l / 2) % 4; }
uint32_t col_of(uint32_t l, uint32_t e) { return ((l / 8) % 2) * 4 + (l % 2) * 2 + e; }
float value(uint32_t r, uint32_t c, float seed) { return std::sin(seed + float(r * 17 + c * 5)) * 2.0f; }

}  // namespace

TEST(matrix_lane_layout) {
    float a[64];
    for (uint32_t i = 0; i < 64; ++i) a[i] = float(i);
    float got[W][2];
    mock_run_simdgroup(W, [&](uint32_t lane) {
        simdgroup_float8x8 m;
        simdgroup_load(m, a);
        got[lane][0] = m.thread_elements()[0];
        got[lane][1] = m.thread_elements()[1];
    });
    for (uint32_t l = 0; l < W; ++l)
        for (uint32_t e = 0; e < 2; ++e)
            CHECK(got[l][e] == float(row_of(l) * 8 + col_of(l, e)), "lane %u element %u holds %g", l, e, got[l][e]);
    /* every element is held exactly once */
    int seen[64] = {};
    for (uint32_t l = 0; l < W; ++l) seen[int(got[l][0])]++, seen[int(got[l][1])]++;
    bool once = true;
    for (int i = 0; i < 64; ++i) once = once && seen[i] == 1;
    CHECK(once, "the 32 lanes hold the 64 elements once each");
}

TEST(matrix_load_store_stride_origin_transpose) {
    const uint32_t LD = 20;
    float src[16 * LD];
    for (uint32_t i = 0; i < 16 * LD; ++i) src[i] = float(i);
    float plain[64], offset[64], trans[64], trans_offset[64];
    float stored[16 * LD], stored_t[16 * LD];
    for (uint32_t i = 0; i < 16 * LD; ++i) stored[i] = stored_t[i] = -1.0f;
    mock_run_simdgroup(W, [&](uint32_t lane) {
        simdgroup_float8x8 m;
        simdgroup_load(m, src, LD);
        simdgroup_store(m, plain, 8);
        simdgroup_load(m, src, LD, ulong2(8, 4));
        simdgroup_store(m, offset, 8);
        simdgroup_load(m, src, LD, ulong2(0, 0), true);
        simdgroup_store(m, trans, 8);
        simdgroup_load(m, src, LD, ulong2(8, 4), true);
        simdgroup_store(m, trans_offset, 8);
        simdgroup_load(m, src, LD);
        simdgroup_store(m, stored, LD, ulong2(3, 5));
        simdgroup_store(m, stored_t, LD, ulong2(3, 5), true);
        (void)lane;
    });
    for (uint32_t r = 0; r < 8; ++r)
        for (uint32_t c = 0; c < 8; ++c) {
            CHECK(plain[r * 8 + c] == src[r * LD + c], "strided load (%u,%u)", r, c);
            CHECK(offset[r * 8 + c] == src[(4 + r) * LD + 8 + c], "origin (x=8, y=4) (%u,%u)", r, c);
            CHECK(trans[r * 8 + c] == src[c * LD + r], "transposed load (%u,%u)", r, c);
            CHECK(trans_offset[r * 8 + c] == src[(4 + c) * LD + 8 + r], "transposed load with origin (%u,%u)", r, c);
            CHECK(stored[(5 + r) * LD + 3 + c] == src[r * LD + c], "store with origin (%u,%u)", r, c);
            CHECK(stored_t[(5 + c) * LD + 3 + r] == src[r * LD + c], "transposed store with origin (%u,%u)", r, c);
        }
    int untouched = 0;
    for (uint32_t i = 0; i < 16 * LD; ++i) untouched += stored[i] == -1.0f;
    CHECK(untouched == int(16 * LD - 64), "a store writes 64 elements only");
}

TEST(matrix_diagonal_and_filled) {
    float diag[64], filled[64];
    half hdiag[64];
    mock_run_simdgroup(W, [&](uint32_t) {
        simdgroup_float8x8 d = simdgroup_float8x8(2.5f);
        simdgroup_store(d, diag);
        simdgroup_half8x8 h(half(1.0f));
        simdgroup_store(h, hdiag);
        simdgroup_float8x8 f = make_filled_simdgroup_matrix<float, 8, 8>(-1.0f);
        simdgroup_store(f, filled);
    });
    for (uint32_t r = 0; r < 8; ++r)
        for (uint32_t c = 0; c < 8; ++c) {
            CHECK(diag[r * 8 + c] == (r == c ? 2.5f : 0.0f), "diagonal (%u,%u)", r, c);
            CHECK(float(hdiag[r * 8 + c]) == (r == c ? 1.0f : 0.0f), "half diagonal (%u,%u)", r, c);
            CHECK(filled[r * 8 + c] == -1.0f, "filled (%u,%u)", r, c);
        }
}

namespace {
/* d = a * b + c with float accumulation in k order, as the header promises. */
template <class TA, class TB> void naive(const TA* a, const TB* b, const float* c, float* d) {
    for (int r = 0; r < 8; ++r)
        for (int col = 0; col < 8; ++col) {
            float acc = 0.0f;
            for (int k = 0; k < 8; ++k) acc += float(a[r * 8 + k]) * float(b[k * 8 + col]);
            d[r * 8 + col] = c ? acc + c[r * 8 + col] : acc;
        }
}
}  // namespace

TEST(matrix_multiply_accumulate_float) {
    float a[64], b[64], c[64], want[64], got[64], got_mul[64], want_mul[64], twice[64];
    for (uint32_t r = 0; r < 8; ++r)
        for (uint32_t k = 0; k < 8; ++k) {
            a[r * 8 + k] = value(r, k, 0.1f);
            b[r * 8 + k] = value(r, k, 1.3f);
            c[r * 8 + k] = value(r, k, 2.7f);
        }
    naive(a, b, c, want);
    naive(a, b, (const float*)nullptr, want_mul);
    mock_run_simdgroup(W, [&](uint32_t) {
        simdgroup_float8x8 ma, mb, mc, md;
        simdgroup_load(ma, a);
        simdgroup_load(mb, b);
        simdgroup_load(mc, c);
        simdgroup_multiply_accumulate(md, ma, mb, mc);
        simdgroup_store(md, got);
        simdgroup_multiply(md, ma, mb);
        simdgroup_store(md, got_mul);
        simdgroup_multiply(mc, mc, simdgroup_float8x8(2.0f)); /* d aliases a */
        simdgroup_store(mc, twice);
    });
    for (int i = 0; i < 64; ++i) {
        CHECK(bits_of(got[i]) == bits_of(want[i]), "mma element %d: %g vs %g", i, got[i], want[i]);
        CHECK(bits_of(got_mul[i]) == bits_of(want_mul[i]), "multiply element %d", i);
        CHECK(twice[i] == 2.0f * c[i], "multiply by a diagonal, aliased %d", i);
    }
}

TEST(matrix_multiply_accumulate_half_and_bfloat) {
    half ah[64], bh[64];
    bfloat ab[64], bb[64];
    float c[64], want_h[64], want_b[64], got_h[64], got_b[64];
    half got_hh[64];
    for (uint32_t r = 0; r < 8; ++r)
        for (uint32_t k = 0; k < 8; ++k) {
            ah[r * 8 + k] = half(value(r, k, 0.4f));
            bh[r * 8 + k] = half(value(r, k, 3.1f));
            ab[r * 8 + k] = bfloat(value(r, k, 0.4f));
            bb[r * 8 + k] = bfloat(value(r, k, 3.1f));
            c[r * 8 + k] = value(r, k, 5.0f);
        }
    naive(ah, bh, c, want_h);
    naive(ab, bb, c, want_b);
    mock_run_simdgroup(W, [&](uint32_t) {
        simdgroup_half8x8 ha, hb;
        simdgroup_bfloat8x8 ba, bbm;
        simdgroup_float8x8 acc, acc2;
        simdgroup_load(ha, ah);
        simdgroup_load(hb, bh);
        simdgroup_load(acc, c);
        simdgroup_multiply_accumulate(acc2, ha, hb, acc);
        simdgroup_store(acc2, got_h);
        simdgroup_half8x8 out;
        out.thread_elements()[0] = half(acc2.thread_elements()[0]);
        out.thread_elements()[1] = half(acc2.thread_elements()[1]);
        simdgroup_store(out, got_hh);
        simdgroup_load(ba, ab);
        simdgroup_load(bbm, bb);
        simdgroup_multiply_accumulate(acc, ba, bbm, acc);
        simdgroup_store(acc, got_b);
    });
    for (int i = 0; i < 64; ++i) {
        CHECK(bits_of(got_h[i]) == bits_of(want_h[i]), "half inputs, float accumulator %d", i);
        CHECK(bits_of(got_hh[i]) == bits_of(half(want_h[i])), "half output through thread_elements %d", i);
        CHECK(bits_of(got_b[i]) == bits_of(want_b[i]), "bfloat inputs %d", i);
    }
}
