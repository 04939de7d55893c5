"""The MSL standard-library surface of the CPU device's compatibility header that real-world MSL (Apple MLX's
kernel headers) leans on: overloads users add to metal::fast / metal::precise, type traits, numeric limits,
metal::array, uniform, the __metal_* intrinsics and the METAL_FUNC qualifier. Each kernel is run and checked."""

from __future__ import annotations

import numpy as np
import pytest

import metile

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


def run(cpu, body: str, n: int, args, name: str = "stdlib.metal") -> None:
    fn = cpu.compile(HEAD + body, name=name).function("k")
    cpu.dispatch_threads(fn, (n, 1, 1), (min(n, 64), 1, 1), args)


USER_FAST_OVERLOADS = """
typedef bfloat bfloat16_t;
namespace metal {
namespace fast {
METAL_FUNC bfloat16_t exp(bfloat16_t x) { return bfloat16_t(-1.0f); }
METAL_FUNC bfloat16_t tanh(bfloat16_t x) { return bfloat16_t(-2.0f); }
}
namespace precise {
METAL_FUNC bfloat16_t exp(bfloat16_t x) { return bfloat16_t(-3.0f); }
}
}
kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
    float v = x[i];
    device float* o = out + i * 8;
    o[0] = fast::exp(v);
    o[1] = metal::exp(v);
    o[2] = precise::exp(v);
    o[3] = metal::fast::tanh(v);
    o[4] = metal::tanh(v);
    o[5] = fast::exp(bfloat16_t(v));      // the user's overload
    o[6] = precise::exp(bfloat16_t(v));
    o[7] = fast::max(v, 0.5f) + precise::sqrt(fabs(v));
}
"""


def test_user_overloads_in_fast_and_precise_add_to_the_library_functions(cpu):
    x = np.linspace(-4, 4, 64).astype(np.float32)
    out = np.zeros(64 * 8, np.float32)
    run(cpu, USER_FAST_OVERLOADS, 64, [x, out])
    o = out.reshape(64, 8)
    # fast:: and precise:: of a float compute in float: bit-identical to metal::, not rounded through bfloat
    np.testing.assert_array_equal(o[:, 0], o[:, 1])
    np.testing.assert_array_equal(o[:, 2], o[:, 1])
    np.testing.assert_array_equal(o[:, 3], o[:, 4])
    np.testing.assert_allclose(o[:, 1], np.exp(x.astype(np.float64)), rtol=2e-7)
    np.testing.assert_allclose(o[:, 4], np.tanh(x.astype(np.float64)), rtol=2e-7, atol=1e-7)
    assert (o[:, 5] == -1).all() and (o[:, 6] == -3).all()
    np.testing.assert_allclose(o[:, 7], np.maximum(x, 0.5) + np.sqrt(np.abs(x)), rtol=1e-6)


TRAITS = """
struct Empty {};
template <class T> struct wrapped { T v; };
static_assert(is_convertible_v<int, float> && is_convertible_v<bfloat, float> && !is_convertible_v<float, Empty>);
static_assert(is_convertible_v<Empty, Empty> && !is_convertible_v<wrapped<int>, int>);
static_assert(integral_constant<int, 3>::value == 3 && integral_constant<int, 3>{} == 3);
static_assert(bool_constant<true>::value && !false_type::value && true_type{});
static_assert(is_same_v<remove_cv_t<const volatile int>, int> && is_same_v<remove_addrspace_t<float>, float>);
static_assert(is_same_v<remove_reference_t<int&>, int> && is_same_v<remove_cvref_t<const int&>, int>);
static_assert(is_same_v<conditional_t<true, int, float>, int> && is_same_v<conditional_t<false, int, float>, float>);
static_assert(is_same_v<enable_if_t<true, short>, short>);
static_assert(is_floating_point_v<float> && is_floating_point_v<half> && is_floating_point_v<bfloat>);
static_assert(is_floating_point_v<const float> && !is_floating_point_v<int> && !is_floating_point_v<float4>);
static_assert(is_integral_v<bool> && is_integral_v<int64_t> && is_integral_v<const uchar> && !is_integral_v<half>);
static_assert(is_signed_v<int> && is_signed_v<half> && !is_signed_v<uint> && is_unsigned_v<ulong>);
static_assert(is_same_v<make_unsigned_t<int>, uint> && is_same_v<make_unsigned_t<long>, ulong>);
static_assert(is_same_v<make_unsigned_t<char>, uchar> && is_same_v<make_signed_t<ushort>, short>);
static_assert(is_same_v<make_unsigned_t<const int64_t>, const uint64_t>);
static_assert(is_floating_point<float>::value && is_integral<int>{} && is_same<int, int>{});
static_assert(_disjunction<is_same<int, float>, is_same<int, int>>::value);
static_assert(!_conjunction<is_same<int, float>, is_same<int, int>>::value && _negation<false_type>::value);
static_assert(sizeof(metal::array<half, 3>) == 6 && metal::array<int, 4>::size() == 4);
static_assert(sizeof(bfloat) == 2 && sizeof(bfloat4) == 8 && sizeof(half2) == 4);

template <class T> float lim(uint k) {
    return k == 0 ? float(numeric_limits<T>::max()) : k == 1 ? float(numeric_limits<T>::min())
         : k == 2 ? float(numeric_limits<T>::lowest()) : float(numeric_limits<T>::epsilon());
}

kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    device float* o = out + i * 4;
    uint kind = i % 4;
    switch (i / 4) {
        case 0: o[0] = lim<float>(kind); break;
        case 1: o[0] = lim<half>(kind); break;
        case 2: o[0] = lim<bfloat>(kind); break;
        case 3: o[0] = lim<int>(kind); break;
        case 4: o[0] = lim<uint>(kind); break;
        case 5: o[0] = lim<short>(kind); break;
        case 6: o[0] = lim<ushort>(kind); break;
        case 7: o[0] = lim<char>(kind); break;
        case 8: o[0] = lim<uchar>(kind); break;
        case 9: o[0] = lim<int64_t>(kind); break;
        case 10: o[0] = lim<uint64_t>(kind); break;
        case 11: o[0] = lim<bool>(kind); break;
    }
    o[1] = isinf(numeric_limits<bfloat>::infinity()) && isnan(float(numeric_limits<half>::quiet_NaN())) ? 1.0f : 0.0f;
    metal::array<float, 3> a = {1.0f, 2.0f, float(i)};
    float s = 0.0f;
    for (float v : a) s += v;
    o[2] = s + a[2] * float(a.size());
    const uniform<int> n = make_uniform(int(i));
    const uniform<int> two = make_uniform(2);
    uniform<int> q = n / two;
    o[3] = float(int(q) + (n < 3 ? 100 : 0));
}
"""


def test_type_traits_limits_array_and_uniform(cpu):
    out = np.zeros(48 * 4, np.float32)
    run(cpu, TRAITS, 48, [out], name="traits.metal")
    o = out.reshape(48, 4)
    def lims(t):
        if np.dtype(t).kind == "f":
            f = np.finfo(t)
            return [f.max, f.tiny, -f.max, f.eps]
        if t is bool:
            return [1, 0, 0, 0]
        info = np.iinfo(t)
        return [info.max, info.min, info.min, 0]
    bf = [3.3895313892515355e38, 2.0 ** -126, -3.3895313892515355e38, 2.0 ** -7]
    want = [lims(np.float32), lims(np.float16), bf, lims(np.int32), lims(np.uint32), lims(np.int16),
            lims(np.uint16), lims(np.int8), lims(np.uint8), lims(np.int64), lims(np.uint64), lims(bool)]
    np.testing.assert_allclose(o[:, 0], np.array(want, np.float64).ravel().astype(np.float32), rtol=1e-6)
    assert (o[:, 1] == 1).all()
    i = np.arange(48)
    np.testing.assert_array_equal(o[:, 2], 3 + i + 3 * i)
    np.testing.assert_array_equal(o[:, 3], i // 2 + np.where(i < 3, 100, 0))


INTRINSICS = """
typedef bfloat bf16;
namespace metal {
// an overload built on the builtins, the way real-world MSL adds bfloat math
METAL_FUNC bf16 exp2(bf16 x) {
    return static_cast<bf16>(__metal_exp2(static_cast<float>(x), __METAL_MAYBE_FAST_MATH__));
}
METAL_FUNC bf16 simd_sum(bf16 x) { return static_cast<bf16>(__metal_simd_sum(static_cast<float>(x))); }
}
struct cplx { bf16 re, im; };
static_assert(sizeof(cplx) == 4, "two bfloats");

kernel void k(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
              device long* wide [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    float v = x[i];
    device float* o = out + i * 12;
    o[0] = __metal_exp(v, __METAL_FAST_MATH__) - metal::exp(v);
    o[1] = __metal_fmax3(v, 0.25f, -v, __METAL_PRECISE_MATH__);
    o[2] = float(metal::exp2(bf16(v)));
    o[3] = float(metal::simd_sum(bf16(v)));
    o[4] = __metal_simd_xor(v);   // the bits of the floats
    o[5] = float(__metal_get_simdgroup_size(ushort())) * 100.0f
         + float(__metal_get_thread_index_in_simdgroup(ushort()));
    ushort bits = as_type<ushort>(bf16(v));
    o[6] = float(as_type<bf16>(ushort(bits ^ 0x8000u)));
    bf16 b = bf16(v) * bf16(2.0f) + bf16(1.0f);
    o[7] = float(b);
    bfloat4 b4 = bfloat4(bf16(v), bf16(1.0f), bf16(2.0f), bf16(3.0f));
    half2 h2 = half2(half(v), half(0.5f)) * half(2.0f);
    o[8] = float(b4.x + b4.w) + float(h2.x);
    o[9] = metal::max(v, 0) + metal::min(int(i), 3);
    int e;
    o[10] = __metal_frexp(v, &e) + float(e) * 10.0f;
    o[11] = __metal_fma(v, 2.0f, 1.0f);
    long w = long(i) << 40;
    wide[i * 3 + 0] = simd_sum(w);
    wide[i * 3 + 1] = long(simd_shuffle_xor(ulong(w), ushort(1)));
    wide[i * 3 + 2] = simd_max(-w);
}
"""


def _bf16(a: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat (nearest even) and back."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def test_metal_builtins_bfloat_half_and_64_bit_collectives(cpu):
    n = 32
    x = np.linspace(-3, 3, n).astype(np.float32)
    out = np.zeros(n * 12, np.float32)
    wide = np.zeros(n * 3, np.int64)
    fn = cpu.compile(HEAD + INTRINSICS, name="builtins.metal").function("k")
    cpu.dispatch_threads(fn, (n, 1, 1), (n, 1, 1), [x, out, wide])
    o = out.reshape(n, 12)
    assert (o[:, 0] == 0).all()
    np.testing.assert_array_equal(o[:, 1], np.maximum(np.maximum(x, 0.25), -x))
    np.testing.assert_allclose(o[:, 2], _bf16(np.exp2(_bf16(x).astype(np.float64)).astype(np.float32)), rtol=0)
    np.testing.assert_allclose(o[:, 3], _bf16(np.float32(_bf16(x).astype(np.float64).sum())), rtol=1e-2)
    xor_all = np.bitwise_xor.reduce(x.view(np.uint32))
    np.testing.assert_array_equal(o[:, 4].view(np.uint32), np.full(n, xor_all, np.uint32))
    np.testing.assert_array_equal(o[:, 5], 3200 + np.arange(n))
    np.testing.assert_array_equal(o[:, 6], -_bf16(x))
    np.testing.assert_array_equal(o[:, 7], _bf16(_bf16(_bf16(x) * 2) + 1))
    h2x = (x.astype(np.float16) * np.float16(2)).astype(np.float32)
    np.testing.assert_array_equal(o[:, 8], _bf16(_bf16(x) + 3) + h2x)
    np.testing.assert_array_equal(o[:, 9], np.maximum(x, 0) + np.minimum(np.arange(n), 3).astype(np.float32))
    m, e = np.frexp(x)
    np.testing.assert_array_equal(o[:, 10], m + (e * 10).astype(np.float32))
    np.testing.assert_array_equal(o[:, 11], x * 2 + 1)
    w = np.arange(n, dtype=np.int64) << 40
    wd = wide.reshape(n, 3)
    assert (wd[:, 0] == w.sum()).all()
    np.testing.assert_array_equal(wd[:, 1], w[np.arange(n) ^ 1])
    assert (wd[:, 2] == 0).all()
