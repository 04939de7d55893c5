/* test_scalar.cpp - half, bfloat, math functions against <cmath>, integer functions, as_type, limits. */
#include "compat_harness.h"
#include "metal_compat.h"

static_assert(std::is_same<decltype(half(1) * 1.0f), float>::value, "half * float -> float");
static_assert(std::is_same<decltype(half(1) + half(1)), half>::value, "half + half -> half");
static_assert(std::is_same<decltype(bfloat(1) + bfloat(1)), bfloat>::value, "bfloat + bfloat -> bfloat");
static_assert(std::is_same<decltype(bfloat(1) * 2.0f), float>::value, "bfloat * float -> float");
static_assert(std::is_same<decltype(bfloat(1) * 2), bfloat>::value, "bfloat * int -> bfloat");
static_assert(std::is_same<decltype(exp(half(1))), half>::value, "exp(half) -> half");
static_assert(std::is_same<decltype(max(1u, 2u)), uint>::value, "max(uint, uint) -> uint");
static_assert(std::is_same<decltype(abs(-1)), int>::value, "abs(int) -> int");
static_assert(std::is_same<decltype(max(1.0f, 2)), float>::value, "max(float, int) -> float");
static_assert(std::is_same<decltype(exp(float4(1.0f))), float4>::value, "exp(float4) -> float4");
static_assert(std::is_same<decltype(isnan(float3(1.0f))), bool3>::value, "isnan(float3) -> bool3");
static_assert(std::is_same<decltype(clamp(float4(1.0f), 0.0f, 1.0f)), float4>::value, "clamp(float4, float, float)");

static uint16_t bf_bits(float f) { return bfloat(f).bits; }
static float from_bits32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

TEST(half_semantics) {
    half a = half(1.5f), b = 2;
    CHECK(float(a * b) == 3.0f && float(-a) == -1.5f && a < b && b >= a, "arithmetic and comparisons");
    half c = a;
    c += half(0.25f);
    c *= 2;
    CHECK(float(c) == 3.5f, "compound assignment");
    CHECK(bits_of(half(65504.0f) + half(65504.0f)) == 0x7c00u, "overflow to +inf");
    CHECK(bits_of(half(1.0f + 0x1p-11f)) == 0x3c00u, "ties to even (down)");
    CHECK(bits_of(half(1.0f + 3 * 0x1p-11f)) == 0x3c02u, "ties to even (up)");
    CHECK(bits_of(half(0x1p-24f)) == 0x0001u, "smallest subnormal");
    CHECK(float(half(7)) == 7.0f && int(half(2.75f)) == 2, "int conversions");
}

TEST(bfloat_rounding) {
    CHECK(bf_bits(1.0f) == 0x3f80, "1.0");
    CHECK(bf_bits(from_bits32(0x3f808000u)) == 0x3f80, "tie rounds to even (down)");
    CHECK(bf_bits(from_bits32(0x3f818000u)) == 0x3f82, "tie rounds to even (up)");
    CHECK(bf_bits(from_bits32(0x3f808001u)) == 0x3f81, "above the tie rounds up");
    CHECK(bf_bits(from_bits32(0x3f807fffu)) == 0x3f80, "below the tie rounds down");
    CHECK(bf_bits(from_bits32(0x7f7fffffu)) == 0x7f80, "FLT_MAX rounds to inf");
    CHECK(bf_bits(-2.0f) == 0xc000, "sign");
    CHECK((bf_bits(NAN) & 0x7fc0) == 0x7fc0, "NaN stays NaN");
    CHECK((bf_bits(from_bits32(0x7f800001u)) & 0x7fff) > 0x7f80, "signalling NaN does not become inf");
    CHECK(float(bfloat(3.0f)) == 3.0f, "to float");
    bfloat x = 1.0f, y = 0x1p-8f;
    CHECK((x + y).bits == 0x3f80 && (x + 2 * y).bits == 0x3f81, "bfloat + bfloat rounds to bfloat");
    CHECK(bfloat(1.00390625f) == bfloat(1.0f), "1 + 2^-8 ties to 1");
    CHECK(float(-x) == -1.0f && x > y && x == 1.0f, "negation and comparisons");
    CHECK(float(exp(bfloat(0.0f))) == 1.0f, "math on bfloat");
}

TEST(math_against_cmath) {
    const float xs[] = {-3.7f, -1.0f, -0.25f, 0.0f, 0.3f, 0.5f, 1.0f, 2.5f, 10.0f};
    for (float x : xs) {
        CHECK(exp(x) == std::exp(x) && exp2(x) == std::exp2(x) && close_to(exp10(x), std::pow(10.0, x), 1e-6),
              "exp %g", x);
        CHECK(sin(x) == std::sin(x) && cos(x) == std::cos(x) && tan(x) == std::tan(x), "trig %g", x);
        CHECK(atan(x) == std::atan(x) && sinh(x) == std::sinh(x) && tanh(x) == std::tanh(x), "atan %g", x);
        CHECK(floor(x) == std::floor(x) && ceil(x) == std::ceil(x) && trunc(x) == std::trunc(x), "rounding %g", x);
        CHECK(round(x) == std::round(x) && rint(x) == std::rint(x), "round %g", x);
        CHECK(abs(x) == std::fabs(x) && fabs(x) == std::fabs(x), "abs %g", x);
        CHECK(fract(x) == x - std::floor(x), "fract %g", x);
        CHECK(sign(x) == (x > 0 ? 1.0f : x < 0 ? -1.0f : 0.0f), "sign %g", x);
        CHECK(fma(x, 2.0f, 1.0f) == std::fma(x, 2.0f, 1.0f) && mad(x, 2.0f, 1.0f) == x * 2.0f + 1.0f, "fma %g", x);
        CHECK(fmod(x, 0.75f) == std::fmod(x, 0.75f) && copysign(2.0f, x) == std::copysign(2.0f, x), "fmod %g", x);
        CHECK(atan2(x, 0.5f) == std::atan2(x, 0.5f) && pow(2.0f, x) == std::pow(2.0f, x), "atan2/pow %g", x);
        CHECK(step(0.5f, x) == (x < 0.5f ? 0.0f : 1.0f) && saturate(x) == std::fmin(std::fmax(x, 0.0f), 1.0f),
              "step/saturate %g", x);
        if (x > 0) {
            CHECK(log(x) == std::log(x) && log2(x) == std::log2(x) && log10(x) == std::log10(x), "log %g", x);
            CHECK(sqrt(x) == std::sqrt(x) && close_to(rsqrt(x), 1.0 / std::sqrt(x), 1e-6), "sqrt %g", x);
            CHECK(powr(x, 1.5f) == std::pow(x, 1.5f), "powr %g", x);
        }
        if (x >= -1 && x <= 1) CHECK(asin(x) == std::asin(x) && acos(x) == std::acos(x), "asin %g", x);
    }
    CHECK(min(2, -3) == -3 && max(2u, 3u) == 3u && abs(-5) == 5 && clamp(7, 0, 3) == 3, "integer min/max/abs/clamp");
    CHECK(max(1.0f, 2) == 2.0f && min(NAN, 1.0f) == 1.0f && fmax(NAN, 2.0f) == 2.0f, "float min/max ignore NaN");
    CHECK(clamp(7.5f, 0.0f, 3.0f) == 3.0f && mix(0.0f, 10.0f, 0.25f) == 2.5f, "clamp, mix");
    CHECK(smoothstep(0.0f, 1.0f, 0.5f) == 0.5f && smoothstep(0.0f, 1.0f, 2.0f) == 1.0f, "smoothstep");
    CHECK(isnan(NAN) && isinf(-INFINITY) && isfinite(1.0f) && !isfinite(INFINITY) && signbit(-0.0f), "classes");
    CHECK(ldexp(1.5f, 3) == 12.0f && divide(1.0f, 4.0f) == 0.25f, "ldexp, divide");
    int ex = 0;
    float ip = 0;
    int2 ex2;
    float2 fr2 = frexp(float2(8.0f, 0.75f), ex2);
    CHECK(frexp(8.0f, ex) == 0.5f && ex == 4 && fr2.y == 0.75f && ex2.x == 4 && ex2.y == 0, "frexp");
    CHECK(modf(-2.75f, ip) == -0.75f && ip == -2.0f, "modf");
    float c = 0;
    float s = sincos(0.5f, c);
    CHECK(s == std::sin(0.5f) && c == std::cos(0.5f), "sincos");
    float4 v(0.25f, 1.0f, 4.0f, 9.0f);
    float4 sv = sqrt(v);
    CHECK(sv.x == 0.5f && sv.w == 3.0f, "element-wise sqrt");
    float4 cl = clamp(v, 0.5f, float4(2.0f));
    CHECK(cl.x == 0.5f && cl.w == 2.0f, "clamp with mixed scalar/vector");
    float4 mx = max(v, 2.0f), mn = min(3.0f, v);
    CHECK(mx.x == 2.0f && mx.w == 9.0f && mn.w == 3.0f && mn.x == 0.25f, "max/min vector-scalar");
    half4 hs = exp(half4(half(0.0f)));
    CHECK(float(hs.y) == 1.0f, "exp(half4)");
    CHECK(precise::sqrt(16.0f) + fast::exp(0.0f) == 5.0f && metal::fast::max(1.0f, 2.0f) == 2.0f, "fast/precise");
    CHECK(fmin3(3.0f, 1.0f, 2.0f) == 1.0f && median3(3, 1, 2) == 2 && max3(1u, 5u, 3u) == 5u, "3-argument forms");
}

TEST(geometric) {
    float3 a(1.0f, 0.0f, 0.0f), b(0.0f, 1.0f, 0.0f);
    float3 c = cross(a, b);
    CHECK(c.z == 1.0f && c.x == 0.0f, "cross");
    float4 v(1.0f, 2.0f, 2.0f, 4.0f);
    CHECK(dot(v, v) == 25.0f && length(v) == 5.0f && length_squared(v) == 25.0f, "dot/length");
    CHECK(distance(float2(0.0f), float2(3.0f, 4.0f)) == 5.0f, "distance");
    float4 n = normalize(v);
    CHECK(close_to(n.w, 0.8, 1e-6), "normalize");
    float2 r = reflect(float2(1.0f, -1.0f), float2(0.0f, 1.0f));
    CHECK(r.x == 1.0f && r.y == 1.0f, "reflect");
}

TEST(integer_functions) {
    CHECK(popcount(0xf0f0u) == 8u && popcount(-1) == 32 && popcount(ushort(0xffff)) == 16, "popcount");
    CHECK(clz(1u) == 31u && clz(0u) == 32u && clz(uchar(1)) == 7 && clz(-1) == 0, "clz");
    CHECK(ctz(8u) == 3u && ctz(0u) == 32u && ctz(ulong(1) << 40) == 40ul, "ctz");
    CHECK(reverse_bits(1u) == 0x80000000u && reverse_bits(uchar(0x0f)) == 0xf0, "reverse_bits");
    CHECK(extract_bits(0xabcdu, 4u, 8u) == 0xbcu && extract_bits(int(0xf0), 4u, 4u) == -1, "extract_bits");
    CHECK(insert_bits(0xffffu, 0u, 4u, 8u) == 0xf00fu && insert_bits(0u, 0xffu, 28u, 8u) == 0xf0000000u,
          "insert_bits");
    CHECK(mulhi(0x80000000u, 4u) == 2u && mulhi(-2, 0x40000000) == -1, "mulhi 32");
    CHECK(mulhi(ulong(1) << 63, ulong(4)) == 2ul, "mulhi 64");
    CHECK(mul24(0x1000001u, 3u) == 3u && mad24(2, 3, 4) == 10 && mul24(0xffffff, 1) == -1, "mul24/mad24");
    CHECK(absdiff(3, -5) == 8 && abs_diff(2u, 7u) == 5u, "absdiff");
    CHECK(addsat(0x7fffffff, 1) == 0x7fffffff && add_sat(uchar(250), uchar(10)) == 255 &&
              subsat(0u, 1u) == 0u && sub_sat(-0x7fffffff - 1, 1) == -0x7fffffff - 1,
          "saturating add/sub");
    CHECK(rotate(0x80000001u, 1u) == 3u && rotate(uchar(0x81), uchar(4)) == 0x18, "rotate");
    CHECK(hadd(0x7fffffff, 0x7fffffff) == 0x7fffffff && rhadd(1u, 2u) == 2u && hadd(1u, 2u) == 1u, "hadd/rhadd");
    uint4 p = popcount(uint4(1u, 3u, 7u, 15u));
    CHECK(p.x == 1u && p.w == 4u, "element-wise popcount");
}

TEST(as_type_and_limits) {
    CHECK(as_type<uint>(1.0f) == 0x3f800000u && as_type<float>(0x40000000u) == 2.0f, "scalar as_type");
    uint2 u = as_type<uint2>(ulong(0x0000000200000001ul));
    CHECK(u.x == 1u && u.y == 2u, "as_type<uint2>(ulong)");
    half2 h = as_type<half2>(0x3c004000u);
    CHECK(float(h.x) == 2.0f && float(h.y) == 1.0f, "as_type<half2>(uint)");
    float4 f = as_type<float4>(int4(0x3f800000));
    CHECK(f.z == 1.0f, "as_type<float4>(int4)");
    float4 v(1.0f, 2.0f, 3.0f, 4.0f);
    CHECK(as_type<ulong>(v.zw) == as_type<ulong>(float2(3.0f, 4.0f)), "as_type of a swizzle");
    CHECK(numeric_limits<float>::max() == FLT_MAX && numeric_limits<float>::infinity() == INFINITY, "float limits");
    CHECK(float(numeric_limits<half>::max()) == 65504.0f && float(HALF_MAX) == 65504.0f, "half limits");
    CHECK(numeric_limits<int>::min() == INT_MIN && numeric_limits<uint>::max() == UINT_MAX, "int limits");
    CHECK(numeric_limits<bfloat>::max().bits == 0x7f7f && isnan(float(numeric_limits<bfloat>::quiet_NaN())),
          "bfloat limits");
    CHECK(M_PI_F == 3.14159265358979323846f && close_to(M_E_F, 2.718281828, 1e-7) && M_SQRT2_F * M_SQRT2_F > 1.99f,
          "constants");
    CHECK(HUGE_VALF == INFINITY && FLT_MIN == 0x1p-126f && isnan(NAN), "HUGE_VALF, FLT_MIN, NAN");
    CHECK(is_floating_point<half>::value && is_integral<uint>::value && is_vector<float4>::value &&
              !is_vector<float>::value && vec_elements<int3>::value == 3,
          "type traits");
}
