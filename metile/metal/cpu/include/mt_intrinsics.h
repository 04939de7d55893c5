/* mt_intrinsics.h - the __metal_* builtins of Apple's metal_stdlib that real-world MSL calls directly (MLX's
 * bf16_math.h builds its bfloat overloads on them), and the math-mode tags they take.
 *
 * Part of metal_compat.h; include that instead. Each builtin is the metal:: function of the same name: the CPU
 * computes every function to the C library's precision, so the fast / precise tag is accepted and ignored. The
 * simd builtins pass the .metal line of their call on, as the metal:: collectives do.
 */
#ifndef METILE_MT_INTRINSICS_H
#define METILE_MT_INTRINSICS_H

namespace metal {
namespace _mt {
struct math_mode {
    bool fast;
};
}  // namespace _mt
}  // namespace metal

#define __METAL_FAST_MATH__ (::metal::_mt::math_mode{true})
#define __METAL_PRECISE_MATH__ (::metal::_mt::math_mode{false})
#define __METAL_MAYBE_FAST_MATH__ __METAL_FAST_MATH__ /* the Metal compiler's default is fast math */

#define MT_B1(name)                                                                                               \
    template <class X> inline auto __metal_##name(const X& x, ::metal::_mt::math_mode = {}) {                      \
        return ::metal::name(x);                                                                                   \
    }
#define MT_B2(name)                                                                                               \
    template <class X, class Y> inline auto __metal_##name(const X& x, const Y& y, ::metal::_mt::math_mode = {}) { \
        return ::metal::name(x, y);                                                                                \
    }
#define MT_B3(name)                                                                                               \
    template <class X, class Y, class Z>                                                                          \
    inline auto __metal_##name(const X& x, const Y& y, const Z& z, ::metal::_mt::math_mode = {}) {                 \
        return ::metal::name(x, y, z);                                                                             \
    }
MT_B1(acos) MT_B1(acosh) MT_B1(asin) MT_B1(asinh) MT_B1(atan) MT_B1(atanh) MT_B1(ceil) MT_B1(cos) MT_B1(cosh)
MT_B1(cospi) MT_B1(exp) MT_B1(exp10) MT_B1(exp2) MT_B1(fabs) MT_B1(floor) MT_B1(fract) MT_B1(log) MT_B1(log10)
MT_B1(log2) MT_B1(rint) MT_B1(round) MT_B1(rsqrt) MT_B1(sin) MT_B1(sinh) MT_B1(sinpi) MT_B1(sqrt) MT_B1(tan)
MT_B1(tanh) MT_B1(tanpi) MT_B1(trunc) MT_B1(saturate) MT_B1(sign) MT_B1(logb)
MT_B2(atan2) MT_B2(divide) MT_B2(fmax) MT_B2(fmin) MT_B2(fmod) MT_B2(pow) MT_B2(powr) MT_B2(nextafter) MT_B2(ldexp)
MT_B2(copysign) MT_B2(fdim) MT_B2(remainder) MT_B2(step)
MT_B3(fma) MT_B3(fmax3) MT_B3(fmin3) MT_B3(fmedian3) MT_B3(mix) MT_B3(clamp) MT_B3(smoothstep)
#undef MT_B1
#undef MT_B2
#undef MT_B3
template <class X, class I> inline auto __metal_frexp(const X& x, I* e) { return ::metal::frexp(x, *e); }
template <class X, class I> inline auto __metal_modf(const X& x, I* ip) { return ::metal::modf(x, *ip); }

/* thread attributes as builtins: __metal_get_thread_index_in_simdgroup(ushort()) */
template <class T> inline T __metal_get_thread_index_in_simdgroup(T) {
    return T(mt_current_pos()->thread_index_in_simdgroup);
}
template <class T> inline T __metal_get_simdgroup_size(T) { return T(mt_current_pos()->threads_per_simdgroup); }

#define MT_BS1(name)                                                                                              \
    template <class X> inline auto __metal_##name(const X& x, uint32_t line = __builtin_LINE()) {                  \
        return ::metal::name(x, line);                                                                             \
    }
#define MT_BS2(name)                                                                                              \
    template <class X> inline auto __metal_##name(const X& x, ushort k, uint32_t line = __builtin_LINE()) {        \
        return ::metal::name(x, k, line);                                                                          \
    }
MT_BS1(simd_sum) MT_BS1(simd_product) MT_BS1(simd_min) MT_BS1(simd_max) MT_BS1(simd_prefix_inclusive_sum) MT_BS1(simd_prefix_exclusive_sum)
MT_BS1(simd_prefix_inclusive_product) MT_BS1(simd_prefix_exclusive_product) MT_BS1(simd_broadcast_first)
MT_BS2(simd_shuffle) MT_BS2(simd_shuffle_xor) MT_BS2(simd_shuffle_up) MT_BS2(simd_shuffle_down)
MT_BS2(simd_shuffle_rotate_up) MT_BS2(simd_shuffle_rotate_down) MT_BS2(simd_broadcast)
#undef MT_BS1
#undef MT_BS2
/* the bitwise reductions also take floating-point values, as their bits */
namespace metal {
namespace _mt {
template <int Bytes> struct bits_type {};
template <> struct bits_type<2> { typedef ushort type; };
template <> struct bits_type<4> { typedef uint type; };
template <> struct bits_type<8> { typedef ulong type; };
}  // namespace _mt
}  // namespace metal
#define MT_BSBITS(name)                                                                                           \
    template <class X> inline auto __metal_##name(const X& x, uint32_t line = __builtin_LINE()) {                  \
        if constexpr (::metal::_mt::is_fp<::metal::_mt::elem_t<X>>) {                                             \
            typedef ::metal::_mt::val_t<X> V;                                                                      \
            typedef typename ::metal::_mt::bits_type<int(sizeof(::metal::_mt::elem_t<X>))>::type B;                \
            typedef typename ::metal::_mt::conditional<(::metal::_mt::vn<X> > 0),                                 \
                                                       ::metal::vec<B, (::metal::_mt::vn<X> > 0 ? ::metal::_mt::vn<X> : 2)>, \
                                                       B>::type W;                                                 \
            return ::metal::as_type<V>(::metal::name(::metal::as_type<W>(V(x)), line));                            \
        } else {                                                                                                   \
            return ::metal::name(x, line);                                                                         \
        }                                                                                                          \
    }
MT_BSBITS(simd_and) MT_BSBITS(simd_or) MT_BSBITS(simd_xor)
#undef MT_BSBITS
template <class X, class F>
inline auto __metal_simd_shuffle_and_fill_up(const X& x, const F& fill, ushort delta, ushort modulo,
                                             uint32_t line = __builtin_LINE()) {
    return ::metal::simd_shuffle_and_fill_up(x, fill, delta, modulo, line);
}
template <class X, class F>
inline auto __metal_simd_shuffle_and_fill_down(const X& x, const F& fill, ushort delta, ushort modulo,
                                               uint32_t line = __builtin_LINE()) {
    return ::metal::simd_shuffle_and_fill_down(x, fill, delta, modulo, line);
}

#endif
