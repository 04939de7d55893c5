/* test_vec.cpp - vector types: layout, components, swizzles, constructors, conversions, operators. */
#include "compat_harness.h"
#include "metal_compat.h"

#define LAYOUT(T, S, A)                                                                                           \
    static_assert(sizeof(T) == S && alignof(T) == A, #T ": size/alignment");                                      \
    static_assert(std::is_trivially_copyable<T>::value, #T ": trivially copyable");                               \
    static_assert(std::is_standard_layout<T>::value, #T ": standard layout");
LAYOUT(float2, 8, 8)
LAYOUT(float3, 16, 16)
LAYOUT(float4, 16, 16)
LAYOUT(half2, 4, 4)
LAYOUT(half3, 8, 8)
LAYOUT(half4, 8, 8)
LAYOUT(bfloat4, 8, 8)
LAYOUT(int3, 16, 16)
LAYOUT(uint2, 8, 8)
LAYOUT(uint3, 16, 16)
LAYOUT(short4, 8, 8)
LAYOUT(ushort2, 4, 4)
LAYOUT(char4, 4, 4)
LAYOUT(uchar3, 4, 4)
LAYOUT(long2, 16, 16)
LAYOUT(ulong3, 32, 32)
LAYOUT(ulong4, 32, 32)
LAYOUT(bool2, 2, 2)
LAYOUT(bool3, 4, 4)
LAYOUT(bool4, 4, 4)
LAYOUT(packed_float3, 12, 4)
LAYOUT(packed_half4, 8, 2)
LAYOUT(simdgroup_float8x8, 8, 8)
LAYOUT(simdgroup_half8x8, 4, 4)
LAYOUT(bfloat, 2, 2)
static_assert(std::is_same<vec<float, 4>, float4>::value, "vec<T, N> names the vector types");
static_assert(std::is_same<decltype(float4().xy), decltype(float4().zw)>::value, "contiguous patterns share a type");
static_assert(sizeof(long) == 8 && sizeof(ulong) == 8, "long is 64-bit");
static_assert(std::is_same<char4::value_type, signed char>::value, "MSL char is signed");
static_assert(std::is_trivially_copyable<atomic_uint>::value, "atomics are plain storage");

TEST(components_and_indexing) {
    float4 v(1.0f, 2.0f, 3.0f, 4.0f);
    CHECK(v.x == 1 && v.y == 2 && v.z == 3 && v.w == 4, "xyzw");
    CHECK(v.r == 1 && v.g == 2 && v.b == 3 && v.a == 4, "rgba");
    CHECK(v[0] == 1 && v[3] == 4, "v[i]");
    v[2] = 30.0f;
    v.a = 40.0f;
    CHECK(v.z == 30 && v[3] == 40, "writes through [] and .a");
    uint3 tg(7u, 8u, 9u);
    CHECK(tg.x == 7u && tg.y == 8u && tg.z == 9u, "uint3 position");
    int i = 1;
    const float4 c = v;
    CHECK(c[i] == 2.0f, "const indexing");
}

TEST(swizzle_reads) {
    float4 v(1.0f, 2.0f, 3.0f, 4.0f);
    float2 a = v.xy, b = v.wz, c = v.gr;
    float3 d = v.zyx, e = v.xxw, f = v.bga;
    float4 g = v.wzyx, h = v.xxxx, k = v.xyxy, m = v.abgr, n = v.yyzw;
    CHECK(a.x == 1 && a.y == 2 && b.x == 4 && b.y == 3 && c.x == 2 && c.y == 1, "2-component");
    CHECK(d.x == 3 && d.y == 2 && d.z == 1 && e.x == 1 && e.y == 1 && e.z == 4, "3-component");
    CHECK(f.x == 3 && f.y == 2 && f.z == 4, "rgba 3-component");
    CHECK(g.x == 4 && g.y == 3 && g.z == 2 && g.w == 1, "wzyx");
    CHECK(h.x == 1 && h.w == 1 && k.z == 1 && k.w == 2, "repeats");
    CHECK(m.x == 4 && m.w == 1 && n.x == 2 && n.y == 2 && n.w == 4, "abgr, yyzw");
    float3 t(5.0f, 6.0f, 7.0f);
    float4 u = t.zzyx;
    CHECK(u.x == 7 && u.y == 7 && u.z == 6 && u.w == 5, "float3.zzyx");
    half2 hv(half(1.5f), half(-2.0f));
    half4 hw = hv.yxyx;
    CHECK(float(hw.x) == -2.0f && float(hw.w) == 1.5f, "half2.yxyx");
    CHECK((v.zw + v.xy).x == 4.0f, "swizzle arithmetic");
    CHECK(dot(v.xy, v.zw) == 11.0f, "swizzle as function argument");
    CHECK(all(v.xy == float2(1.0f, 2.0f)), "swizzle comparison");
}

TEST(swizzle_writes) {
    float4 v(1.0f, 2.0f, 3.0f, 4.0f);
    v.xy = float2(10.0f, 20.0f);
    CHECK(v.x == 10 && v.y == 20 && v.z == 3 && v.w == 4, "xy =");
    v.zw += float2(100.0f, 200.0f);
    CHECK(v.z == 103 && v.w == 204, "zw +=");
    v.wx = v.xw;
    CHECK(v.x == 204 && v.w == 10 && v.y == 20, "wx = xw (overlapping)");
    v.zyx = float3(7.0f, 8.0f, 9.0f);
    CHECK(v.x == 9 && v.y == 8 && v.z == 7 && v.w == 10, "zyx =");
    float4 s(1.0f, 2.0f, 3.0f, 4.0f), d(0.0f);
    d.xz = s.xz; /* same non-contiguous pattern from a non-const source */
    CHECK(d.x == 1 && d.y == 0 && d.z == 3 && d.w == 0, "xz = xz");
    d = float4(0.0f);
    d.yw = float4(5.0f, 6.0f, 7.0f, 8.0f).yw; /* from a temporary */
    CHECK(d.x == 0 && d.y == 6 && d.z == 0 && d.w == 8, "yw = temporary.yw");
    d.xy = s.zw; /* same contiguous pattern at another offset */
    CHECK(d.x == 3 && d.y == 4 && d.z == 0 && d.w == 8, "xy = zw");
    d.rgb = 1.0f;
    CHECK(d.x == 1 && d.y == 1 && d.z == 1 && d.w == 8, "splat into rgb");
    d.xw *= 3.0f;
    CHECK(d.x == 3 && d.w == 24, "xw *=");
    int4 iv(1, 2, 3, 4);
    iv.yz <<= 2;
    iv.xw |= int2(8, 8);
    CHECK(iv.x == 9 && iv.y == 8 && iv.z == 12 && iv.w == 12, "integer compound on swizzles");
    float2 p(1.0f, 2.0f);
    p.yx = p;
    CHECK(p.x == 2 && p.y == 1, "float2.yx = itself");
}

TEST(constructors_and_conversions) {
    float4 a(2.0f), b = 0, c{}, d = {1.0f, 2.0f, 3.0f, 4.0f};
    CHECK(a.x == 2 && a.w == 2 && b.y == 0 && c.z == 0 && d.w == 4, "splat, zero, brace");
    float2 xy(1.0f, 2.0f);
    float3 xyz(xy, 3.0f);
    float4 e(xy, 3.0f, 4.0f), f(xyz, 4.0f), g(0.5f, xy, 5.0f), h(xy, xy.yx);
    CHECK(xyz.z == 3 && e.z == 3 && f.w == 4 && g.y == 1 && g.w == 5 && h.z == 2, "mixed constructors");
    float3 k = float3(d.xy, half(1.0f));
    CHECK(k.z == 1.0f, "float3(v.xy, half)");
    int4 i = int4(float4(1.7f, -1.7f, 2.5f, -0.5f));
    CHECK(i.x == 1 && i.y == -1 && i.z == 2 && i.w == 0, "int4(float4) truncates");
    float4 fi = float4(int4(1, -2, 3, -4));
    CHECK(fi.y == -2.0f, "float4(int4)");
    half4 hv = half4(float4(1.0f / 3.0f));
    CHECK(bits_of(hv.x) == 0x3555u, "half4(float4) rounds to nearest: %llx", (unsigned long long)bits_of(hv.x));
    uint2 u = uint2(int2(-1, 2));
    CHECK(u.x == 0xffffffffu && u.y == 2u, "uint2(int2)");
    bool4 bv = bool4(float4(0.0f, 1.0f, -2.0f, 0.0f));
    CHECK(!bv.x && bv.y && bv.z && !bv.w, "bool4(float4)");
    packed_float3 p = float3(1.0f, 2.0f, 3.0f);
    float3 q = p;
    CHECK(q.y == 2.0f && p[2] == 3.0f && p.x == 1.0f, "packed <-> vector");
    float3 sum = p + float3(1.0f);
    CHECK(sum.z == 4.0f, "packed arithmetic");
    float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    alignas(16) float abuf[8];
    std::memcpy(abuf, buf, sizeof buf);
    float4 second = *(float4*)(abuf + 4);
    *(float4*)abuf = second * 2.0f;
    CHECK(abuf[0] == 10 && abuf[3] == 16 && second.w == 8, "float* cast to float4*");
}

TEST(operators) {
    float4 a(1.0f, 2.0f, 3.0f, 4.0f), b(4.0f, 3.0f, 2.0f, 1.0f);
    float4 s = a + b, m = a * 2.0f, r = 12.0f / a, n = -a;
    CHECK(s.x == 5 && s.w == 5 && m.z == 6 && r.y == 6 && n.w == -4, "+ * / unary -");
    bool4 lt = a < b, eq = a == 2.0f;
    CHECK(lt.x && lt.y && !lt.z && !lt.w && eq.y && !eq.x, "comparisons give boolN");
    CHECK(all(a <= 4.0f) && any(a > 3.5f) && !any(a > 4.0f), "all / any");
    int4 i(7, -7, 12, 5), j(2, 2, 5, 3);
    int4 q = i / j, rm = i % j, sh = i << 1, bx = (i & j) | (i ^ 1), nt = ~i;
    CHECK(q.x == 3 && q.y == -3 && rm.y == -1 && rm.z == 2 && sh.x == 14 && nt.x == -8, "integer ops");
    CHECK(bx.x == ((7 & 2) | (7 ^ 1)), "bitwise");
    uint4 u(1u, 2u, 3u, 4u);
    uint4 ushr = (u * 0x80000000u) >> 31;
    CHECK(ushr.x == 1u && ushr.y == 0u, "unsigned wraparound and shift");
    float4 c = a;
    c += b;
    c *= 0.5f;
    c -= 1.0f;
    c /= float4(2.0f);
    CHECK(c.x == 0.75f, "compound assignment");
    c++;
    ++c;
    CHECK(c.x == 2.75f, "increment");
    bool4 nb = !lt;
    CHECK(!nb.x && nb.z, "!boolN");
    half4 h = half4(float4(1.0f)) + half(0.5f);
    CHECK((float(h.w) == 1.5f && std::is_same<decltype(h + h), half4>::value), "half4 arithmetic stays half");
    float4 mixed = 2.0f * a - 1;
    CHECK(mixed.y == 3.0f, "scalar on the left, int scalar");
    float4 sel = select(a, b, lt);
    CHECK(sel.x == 4 && sel.z == 3, "select with boolN");
    CHECK(select(1, 2, true) == 2 && select(1.0f, 2.0f, false) == 1.0f, "scalar select");
}
