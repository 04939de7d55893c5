/* mt_math.h - MSL math, common, integer, relational and geometric functions, element-wise on vectors.
 *
 * Part of metal_compat.h; include that instead.
 *
 * Every function is a template constrained on its argument kinds (floating, integer, any), so that `abs(int)`,
 * `max(uint, uint)`, `exp(float)` or `max(x, 1.0f)` resolve without ambiguity next to the C library's functions.
 * Arguments may mix scalars and vectors of one size: scalars are converted to the vectors' element type and
 * broadcast. half and bfloat compute in float and round back. fast:: and precise:: name the same functions (the
 * CPU computes every function to the C library's precision), by using-declarations (see the end of the file).
 */
#ifndef METILE_MT_MATH_H
#define METILE_MT_MATH_H

namespace metal {
namespace _mt {

/* res<A...>: the element-wise result of arguments A: vec<E, N> when some argument is a vector of N elements (E its
 * element type), else the common scalar type. `pick` has no `type` when the sizes disagree. */
template <class... A> struct first_vec_elem { typedef void type; };
template <class A, class... R> struct first_vec_elem<A, R...> {
    typedef typename conditional<(vn<A> > 0), elem_t<A>, typename first_vec_elem<R...>::type>::type type;
};
template <class... A> struct common_all;
template <class A> struct common_all<A> { typedef rm_t<A> type; };
template <class A, class B, class... R>
struct common_all<A, B, R...> : common_all<typename common<rm_t<A>, rm_t<B>>::type, R...> {};
template <bool Ok, int N, class E> struct pick {};
template <int N, class E> struct pick<true, N, E> {
    typedef vec<E, N> type;
    typedef E elem;
};
template <class E> struct pick<true, 0, E> {
    typedef E type;
    typedef E elem;
};
constexpr int imax(int a, int b) { return a > b ? a : b; }
template <class... A> constexpr int res_n() {
    int m = 0;
    ((m = imax(m, vn<A>)), ...);
    return m;
}
template <class... A> using res_pick =
    pick<((vn<A> == 0 || vn<A> == res_n<A...>()) && ...),
         res_n<A...>(),
         typename conditional<(res_n<A...>() > 0), first_vec_elem<A...>, common_all<A...>>::type::type>;
/* Result types constrained on the element kind: floating, integer, integer or floating. */
template <class... A> using fres_t =
    enable_if_t<is_fp<typename res_pick<A...>::elem>, typename res_pick<A...>::type>;
template <class... A> using ires_t =
    enable_if_t<is_int<typename res_pick<A...>::elem>, typename res_pick<A...>::type>;
template <class... A> using nres_t =
    enable_if_t<kind<typename res_pick<A...>::elem>::value >= 2, typename res_pick<A...>::type>;
/* bool or vec<bool, N> of the same shape as R */
template <class R> using bool_of = typename conditional<(vn<R> > 0), vec<bool, (vn<R> > 0 ? vn<R> : 2)>, bool>::type;

/* Apply F::f element by element; arguments are converted to the result's element type, then to calc_t. */
template <class R, class F, class... A> inline R zip(const A&... a) {
    if constexpr (vn<R> == 0) {
        return R(F::f(calc_t<R>(a)...));
    } else {
        typedef elem_t<R> E;
        R r;
        MT_UNROLL
        for (int i = 0; i < vn<R>; ++i) r.v_[i] = E(F::f(calc_t<E>(E(at(a, i)))...));
        return r;
    }
}
/* The same for predicates: the result is bool or boolN. */
template <class R, class F, class... A> inline bool_of<R> zipb(const A&... a) {
    if constexpr (vn<R> == 0) {
        return F::f(calc_t<R>(a)...);
    } else {
        typedef elem_t<R> E;
        bool_of<R> r;
        MT_UNROLL
        for (int i = 0; i < vn<R>; ++i) r.v_[i] = F::f(calc_t<E>(E(at(a, i)))...);
        return r;
    }
}

template <class I> struct uns { typedef I type; };
template <> struct uns<char> { typedef unsigned char type; };
template <> struct uns<signed char> { typedef unsigned char type; };
template <> struct uns<short> { typedef unsigned short type; };
template <> struct uns<int> { typedef unsigned type; };
template <> struct uns<long> { typedef unsigned long type; };
template <> struct uns<long long> { typedef unsigned long long type; };
template <class I> using uns_t = typename uns<I>::type;
template <class I> constexpr int bits_of = int(sizeof(I) * 8);
template <class I> inline I lo_mask(int n) {
    return n >= bits_of<I> ? I(~uns_t<I>(0)) : I((uns_t<I>(1) << n) - 1u);
}

/* Scalar helpers of the integer functions and smoothstep. */
/* min/max of floats are fmin/fmax (a NaN operand loses), written out so they compile to a few instructions
 * instead of a call into the C library. */
struct op_min {
    template <class V> static V f(V x, V y) {
        const V m = y < x ? y : x; /* minss: no branch */
        return x != x ? y : m;
    }
};
struct op_max {
    template <class V> static V f(V x, V y) {
        const V m = x < y ? y : x; /* maxss: no branch */
        return x != x ? y : m;
    }
};
struct op_median3 {
    template <class V> static V f(V x, V y, V z) { return op_max::f(op_min::f(x, y), op_min::f(op_max::f(x, y), z)); }
};
struct op_max3 {
    template <class V> static V f(V x, V y, V z) { return op_max::f(op_max::f(x, y), z); }
};
struct op_min3 {
    template <class V> static V f(V x, V y, V z) { return op_min::f(op_min::f(x, y), z); }
};
struct op_clamp {
    template <class V> static V f(V x, V lo, V hi) { return op_min::f(op_max::f(x, lo), hi); }
};
template <class F> inline F smooth(F e0, F e1, F x) {
    F t = (x - e0) / (e1 - e0);
    t = t < F(0) ? F(0) : t > F(1) ? F(1) : t;
    return t * t * (F(3) - F(2) * t);
}
template <class I> inline I reverse1(I x) {
    uns_t<I> u = uns_t<I>(x), r = 0;
    MT_UNROLL
    for (int i = 0; i < bits_of<I>; ++i) r = uns_t<I>((r << 1) | ((u >> i) & 1u));
    return I(r);
}
template <class I> inline I mulhi1(I x, I y) {
    if constexpr (sizeof(I) == 8) {
        typedef typename conditional<is_signed_int<I>, __int128, unsigned __int128>::type W;
        return I((W(x) * W(y)) >> 64);
    } else {
        typedef typename conditional<is_signed_int<I>, long long, unsigned long long>::type W;
        return I((W(x) * W(y)) >> bits_of<I>);
    }
}
template <class I> inline I addsat1(I x, I y) {
    I r;
    if (!__builtin_add_overflow(x, y, &r)) return r;
    return y > I(0) ? numeric_limits<I>::max() : numeric_limits<I>::min();
}
template <class I> inline I subsat1(I x, I y) {
    I r;
    if (!__builtin_sub_overflow(x, y, &r)) return r;
    return y < I(0) ? numeric_limits<I>::max() : numeric_limits<I>::min();
}
template <class I> inline I rotate1(I x, I y) {
    const int n = bits_of<I>, s = int(uns_t<I>(y) % uns_t<I>(n));
    uns_t<I> u = uns_t<I>(x);
    return s == 0 ? x : I(uns_t<I>((u << s) | (u >> (n - s))));
}
template <class I> inline I extract1(I x, int offset, int bits) {
    if (bits <= 0) return I(0);
    uns_t<I> u = uns_t<I>(uns_t<I>(x) >> offset) & uns_t<I>(lo_mask<I>(bits));
    if (is_signed_int<I> && bits < bits_of<I> && ((u >> (bits - 1)) & 1u)) u |= uns_t<I>(~uns_t<I>(lo_mask<I>(bits)));
    return I(u);
}
template <class I> inline I low24(I x) {
    if constexpr (is_signed_int<I>) return I(int(unsigned(x) << 8) >> 8);
    else return I(x & 0xffffffu);
}

/* Scalar kernels: F::f for float and double (fp functions), or for any integer type. */
#define MT_FOP1(name, fexpr, dexpr)                                                                               \
    struct op_##name {                                                                                             \
        static float f(float x) { return fexpr; }                                                                  \
        static double f(double x) { return dexpr; }                                                                \
    };
#define MT_FOP2(name, fexpr, dexpr)                                                                               \
    struct op_##name {                                                                                             \
        static float f(float x, float y) { return fexpr; }                                                         \
        static double f(double x, double y) { return dexpr; }                                                      \
    };
#define MT_FOP3(name, fexpr, dexpr)                                                                               \
    struct op_##name {                                                                                             \
        static float f(float x, float y, float z) { return fexpr; }                                                \
        static double f(double x, double y, double z) { return dexpr; }                                            \
    };
#define MT_IOP(name, params, expr)                                                                                \
    struct op_##name {                                                                                             \
        template <class I> static I f params { return I(expr); }                                                   \
    };

}  // namespace _mt

#define MT_F1(name, fexpr, dexpr)                                                                                 \
    namespace _mt { MT_FOP1(name, fexpr, dexpr) }                                                                  \
    template <class X, class R = _mt::fres_t<X>> inline R name(const X& x) { return _mt::zip<R, _mt::op_##name>(x); }
#define MT_F2(name, fexpr, dexpr)                                                                                 \
    namespace _mt { MT_FOP2(name, fexpr, dexpr) }                                                                  \
    template <class X, class Y, class R = _mt::fres_t<X, Y>> inline R name(const X& x, const Y& y) {              \
        return _mt::zip<R, _mt::op_##name>(x, y);                                                                  \
    }
#define MT_F3(name, fexpr, dexpr)                                                                                 \
    namespace _mt { MT_FOP3(name, fexpr, dexpr) }                                                                  \
    template <class X, class Y, class Z, class R = _mt::fres_t<X, Y, Z>>                                          \
    inline R name(const X& x, const Y& y, const Z& z) {                                                            \
        return _mt::zip<R, _mt::op_##name>(x, y, z);                                                               \
    }
#define MT_I1(name, expr)                                                                                         \
    namespace _mt { MT_IOP(name, (I x), expr) }                                                                    \
    template <class X, class R = _mt::ires_t<X>> inline R name(const X& x) { return _mt::zip<R, _mt::op_##name>(x); }
#define MT_I2(name, expr)                                                                                         \
    namespace _mt { MT_IOP(name, (I x, I y), expr) }                                                               \
    template <class X, class Y, class R = _mt::ires_t<X, Y>> inline R name(const X& x, const Y& y) {              \
        return _mt::zip<R, _mt::op_##name>(x, y);                                                                  \
    }
#define MT_I3(name, expr)                                                                                         \
    namespace _mt { MT_IOP(name, (I x, I y, I z), expr) }                                                          \
    template <class X, class Y, class Z, class R = _mt::ires_t<X, Y, Z>>                                          \
    inline R name(const X& x, const Y& y, const Z& z) {                                                            \
        return _mt::zip<R, _mt::op_##name>(x, y, z);                                                               \
    }

/* ---- floating-point functions --------------------------------------------------------------------------------- */
MT_F1(exp, __builtin_expf(x), __builtin_exp(x))
MT_F1(exp2, __builtin_exp2f(x), __builtin_exp2(x))
MT_F1(exp10, __builtin_powf(10.0f, x), __builtin_pow(10.0, x))
MT_F1(log, __builtin_logf(x), __builtin_log(x))
MT_F1(log2, __builtin_log2f(x), __builtin_log2(x))
MT_F1(log10, __builtin_log10f(x), __builtin_log10(x))
MT_F1(sqrt, __builtin_sqrtf(x), __builtin_sqrt(x))
MT_F1(rsqrt, 1.0f / __builtin_sqrtf(x), 1.0 / __builtin_sqrt(x))
MT_F1(sin, __builtin_sinf(x), __builtin_sin(x))
MT_F1(cos, __builtin_cosf(x), __builtin_cos(x))
MT_F1(tan, __builtin_tanf(x), __builtin_tan(x))
MT_F1(asin, __builtin_asinf(x), __builtin_asin(x))
MT_F1(acos, __builtin_acosf(x), __builtin_acos(x))
MT_F1(atan, __builtin_atanf(x), __builtin_atan(x))
MT_F1(sinh, __builtin_sinhf(x), __builtin_sinh(x))
MT_F1(cosh, __builtin_coshf(x), __builtin_cosh(x))
MT_F1(tanh, __builtin_tanhf(x), __builtin_tanh(x))
MT_F1(asinh, __builtin_asinhf(x), __builtin_asinh(x))
MT_F1(acosh, __builtin_acoshf(x), __builtin_acosh(x))
MT_F1(atanh, __builtin_atanhf(x), __builtin_atanh(x))
MT_F1(sinpi, __builtin_sinf(x * 3.14159265358979323846f), __builtin_sin(x * 3.14159265358979323846))
MT_F1(cospi, __builtin_cosf(x * 3.14159265358979323846f), __builtin_cos(x * 3.14159265358979323846))
MT_F1(tanpi, __builtin_tanf(x * 3.14159265358979323846f), __builtin_tan(x * 3.14159265358979323846))
MT_F1(floor, __builtin_floorf(x), __builtin_floor(x))
MT_F1(ceil, __builtin_ceilf(x), __builtin_ceil(x))
MT_F1(round, __builtin_roundf(x), __builtin_round(x))
MT_F1(rint, __builtin_rintf(x), __builtin_rint(x))
MT_F1(trunc, __builtin_truncf(x), __builtin_trunc(x))
MT_F1(fabs, __builtin_fabsf(x), __builtin_fabs(x))
MT_F1(fract, _mt::op_min::f(x - __builtin_floorf(x), 0x1.fffffep-1f),
      _mt::op_min::f(x - __builtin_floor(x), 0x1.fffffffffffffp-1))
MT_F1(saturate, _mt::op_min::f(_mt::op_max::f(x, 0.0f), 1.0f), _mt::op_min::f(_mt::op_max::f(x, 0.0), 1.0))
MT_F1(sign, x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : (x == x ? x : 0.0f),
      x > 0.0 ? 1.0 : x < 0.0 ? -1.0 : (x == x ? x : 0.0))
MT_F1(logb, __builtin_logbf(x), __builtin_logb(x))
MT_F2(pow, __builtin_powf(x, y), __builtin_pow(x, y))
MT_F2(powr, __builtin_powf(x, y), __builtin_pow(x, y))
MT_F2(atan2, __builtin_atan2f(x, y), __builtin_atan2(x, y))
MT_F2(fmod, __builtin_fmodf(x, y), __builtin_fmod(x, y))
MT_F2(remainder, __builtin_remainderf(x, y), __builtin_remainder(x, y))
MT_F2(copysign, __builtin_copysignf(x, y), __builtin_copysign(x, y))
MT_F2(fdim, __builtin_fdimf(x, y), __builtin_fdim(x, y))
MT_F2(nextafter, __builtin_nextafterf(x, y), __builtin_nextafter(x, y))
MT_F2(step, y < x ? 0.0f : 1.0f, y < x ? 0.0 : 1.0)
MT_F2(divide, x / y, x / y)
MT_F2(ldexp, __builtin_ldexpf(x, int(y)), __builtin_ldexp(x, int(y)))
MT_F2(pown, __builtin_powf(x, y), __builtin_pow(x, y))
MT_F2(rootn, __builtin_powf(x, 1.0f / y), __builtin_pow(x, 1.0 / y))
MT_F3(fma, __builtin_fmaf(x, y, z), __builtin_fma(x, y, z))
MT_F3(mad, x * y + z, x * y + z)
MT_F3(mix, x + (y - x) * z, x + (y - x) * z)
MT_F3(fmin3, _mt::op_min3::f(x, y, z), _mt::op_min3::f(x, y, z))
MT_F3(fmax3, _mt::op_max3::f(x, y, z), _mt::op_max3::f(x, y, z))
MT_F3(fmedian3, _mt::op_median3::f(x, y, z), _mt::op_median3::f(x, y, z))
MT_F3(smoothstep, _mt::smooth(x, y, z), _mt::smooth(x, y, z))


/* sincos(x, cosval): returns sin(x) and stores cos(x). modf(x, intval), frexp(x, exp). */
template <class X, class R = _mt::fres_t<X>> inline R sincos(const X& x, R& cosval) {
    cosval = cos(x);
    return sin(x);
}
template <class X, class R = _mt::fres_t<X>> inline R modf(const X& x, R& intval) {
    intval = trunc(x);
    return x - intval;
}
namespace _mt {
template <class F> inline F frexp1(F x, int& e) {
    if constexpr (is_same<F, double>::value) return __builtin_frexp(x, &e);
    else return F(__builtin_frexpf(float(x), &e));
}
}  // namespace _mt
template <class X, class I, class R = _mt::fres_t<X>>
inline R frexp(const X& x, I& e) {
    if constexpr (_mt::vn<X> == 0) {
        return _mt::frexp1(R(x), e);
    } else {
        R r;
        MT_UNROLL
        for (int i = 0; i < _mt::vn<X>; ++i) r.v_[i] = _mt::frexp1(_mt::at(x, i), e.v_[i]);
        return r;
    }
}

/* ---- functions of both integers and floats ----------------------------------------------------------------- */
namespace _mt {
struct op_abs {
    static float f(float x) { return __builtin_fabsf(x); }
    static double f(double x) { return __builtin_fabs(x); }
    template <class I> static I f(I x) { return x < I(0) ? I(-x) : x; }
};
}  // namespace _mt
template <class X, class R = _mt::nres_t<X>> inline R abs(const X& x) { return _mt::zip<R, _mt::op_abs>(x); }
template <class X, class Y, class R = _mt::nres_t<X, Y>> inline R min(const X& x, const Y& y) {
    return _mt::zip<R, _mt::op_min>(x, y);
}
template <class X, class Y, class R = _mt::nres_t<X, Y>> inline R max(const X& x, const Y& y) {
    return _mt::zip<R, _mt::op_max>(x, y);
}
template <class X, class Y, class R = _mt::fres_t<X, Y>> inline R fmin(const X& x, const Y& y) {
    return _mt::zip<R, _mt::op_min>(x, y);
}
template <class X, class Y, class R = _mt::fres_t<X, Y>> inline R fmax(const X& x, const Y& y) {
    return _mt::zip<R, _mt::op_max>(x, y);
}
#define MT_N3(name)                                                                                               \
    template <class X, class Y, class Z, class R = _mt::nres_t<X, Y, Z>>                                          \
    inline R name(const X& x, const Y& y, const Z& z) {                                                            \
        return _mt::zip<R, _mt::op_##name>(x, y, z);                                                               \
    }
MT_N3(clamp)
MT_N3(min3)
MT_N3(max3)
MT_N3(median3)
#undef MT_N3

/* ---- integer functions ------------------------------------------------------------------------------------- */
MT_I1(popcount, __builtin_popcountll((unsigned long long)(_mt::uns_t<I>)x))
MT_I1(clz, x == 0 ? _mt::bits_of<I>
                  : __builtin_clzll((unsigned long long)(_mt::uns_t<I>)x) - (64 - _mt::bits_of<I>))
MT_I1(ctz, x == 0 ? _mt::bits_of<I> : __builtin_ctzll((unsigned long long)(_mt::uns_t<I>)x))
MT_I1(reverse_bits, _mt::reverse1(x))
MT_I2(mulhi, _mt::mulhi1(x, y))
MT_I2(mul24, _mt::low24(x) * _mt::low24(y))
MT_I3(mad24, _mt::low24(x) * _mt::low24(y) + z)
MT_I3(madhi, _mt::mulhi1(x, y) + z)
MT_I2(absdiff, x > y ? _mt::uns_t<I>(x) - _mt::uns_t<I>(y) : _mt::uns_t<I>(y) - _mt::uns_t<I>(x))
MT_I2(addsat, _mt::addsat1(x, y))
MT_I2(subsat, _mt::subsat1(x, y))
MT_I2(rotate, _mt::rotate1(x, y))
MT_I2(hadd, (x >> 1) + (y >> 1) + (x & y & 1))
MT_I2(rhadd, (x >> 1) + (y >> 1) + ((x | y) & 1))
template <class X, class O, class B, class R = _mt::ires_t<X>>
inline R extract_bits(const X& x, const O& offset, const B& bits) {
    typedef _mt::elem_t<R> I;
    if constexpr (_mt::vn<R> == 0) {
        return _mt::extract1(I(x), int(offset), int(bits));
    } else {
        R r;
        MT_UNROLL
        for (int i = 0; i < _mt::vn<R>; ++i)
            r.v_[i] = _mt::extract1(I(_mt::at(x, i)), int(_mt::at(offset, i)), int(_mt::at(bits, i)));
        return r;
    }
}
template <class X, class Y, class O, class B, class R = _mt::ires_t<X, Y>>
inline R insert_bits(const X& base, const Y& insert, const O& offset, const B& bits) {
    R r = R(base);
    MT_UNROLL
    for (int i = 0; i < (_mt::vn<R> ? _mt::vn<R> : 1); ++i) {
        typedef _mt::elem_t<R> I;
        int o = int(_mt::at(offset, i)), n = int(_mt::at(bits, i));
        I m = I(_mt::lo_mask<I>(n) << o), v = I((I(_mt::at(insert, i)) << o) & m);
        if constexpr (_mt::vn<R> == 0) r = I((I(base) & ~m) | v);
        else r.v_[i] = I((r.v_[i] & ~m) | v);
    }
    return r;
}
template <class X, class Y, class R = _mt::ires_t<X, Y>> inline R abs_diff(const X& x, const Y& y) {
    return absdiff(x, y);
}
template <class X, class Y, class R = _mt::ires_t<X, Y>> inline R add_sat(const X& x, const Y& y) {
    return addsat(x, y);
}
template <class X, class Y, class R = _mt::ires_t<X, Y>> inline R sub_sat(const X& x, const Y& y) {
    return subsat(x, y);
}


/* ---- relational functions ---------------------------------------------------------------------------------- */
namespace _mt {
struct op_isnan { template <class F> static bool f(F x) { return __builtin_isnan(x); } };
struct op_isinf { template <class F> static bool f(F x) { return __builtin_isinf(x); } };
struct op_isfinite { template <class F> static bool f(F x) { return __builtin_isfinite(x); } };
struct op_isnormal { template <class F> static bool f(F x) { return __builtin_isnormal(x); } };
struct op_signbit { template <class F> static bool f(F x) { return __builtin_signbit(x); } };
struct op_isordered { template <class F> static bool f(F x, F y) { return x == x && y == y; } };
struct op_isunordered { template <class F> static bool f(F x, F y) { return x != x || y != y; } };
}  // namespace _mt
#define MT_PRED1(name)                                                                                            \
    template <class X, class R = _mt::fres_t<X>> inline _mt::bool_of<R> name(const X& x) {                        \
        return _mt::zipb<R, _mt::op_##name>(x);                                                                    \
    }
MT_PRED1(isnan)
MT_PRED1(isinf)
MT_PRED1(isfinite)
MT_PRED1(isnormal)
MT_PRED1(signbit)
#undef MT_PRED1
template <class X, class Y, class R = _mt::fres_t<X, Y>> inline _mt::bool_of<R> isordered(const X& x, const Y& y) {
    return _mt::zipb<R, _mt::op_isordered>(x, y);
}
template <class X, class Y, class R = _mt::fres_t<X, Y>> inline _mt::bool_of<R> isunordered(const X& x, const Y& y) {
    return _mt::zipb<R, _mt::op_isunordered>(x, y);
}

/* all / any of a bool or boolN */
template <class X, _mt::enable_if_t<_mt::is_same<_mt::elem_t<X>, bool>::value, int> = 0> inline bool all(const X& x) {
    MT_UNROLL
    for (int i = 0; i < (_mt::vn<X> ? _mt::vn<X> : 1); ++i)
        if (!_mt::at(x, i)) return false;
    return true;
}
template <class X, _mt::enable_if_t<_mt::is_same<_mt::elem_t<X>, bool>::value, int> = 0> inline bool any(const X& x) {
    MT_UNROLL
    for (int i = 0; i < (_mt::vn<X> ? _mt::vn<X> : 1); ++i)
        if (_mt::at(x, i)) return true;
    return false;
}

/* select(a, b, c): c ? b : a, element-wise when c is a boolN. */
template <class A, class B, class C, class R = typename _mt::res_pick<A, B>::type,
          _mt::enable_if_t<_mt::is_same<_mt::elem_t<C>, bool>::value && (_mt::vn<C> == 0 || _mt::vn<C> == _mt::vn<R>),
                           int> = 0>
inline R select(const A& a, const B& b, const C& c) {
    if constexpr (_mt::vn<R> == 0) {
        return c ? R(b) : R(a);
    } else {
        typedef _mt::elem_t<R> E;
        R r;
        MT_UNROLL
        for (int i = 0; i < _mt::vn<R>; ++i) r.v_[i] = _mt::at(c, i) ? E(_mt::at(b, i)) : E(_mt::at(a, i));
        return r;
    }
}

/* ---- geometric functions ------------------------------------------------------------------------------------ */
template <class X, class Y, class R = _mt::fres_t<X, Y>, _mt::enable_if_t<(_mt::vn<R> > 0), int> = 0>
inline _mt::elem_t<R> dot(const X& x, const Y& y) {
    typedef _mt::elem_t<R> E;
    _mt::calc_t<E> s = 0;
    MT_UNROLL
    for (int i = 0; i < _mt::vn<R>; ++i) s += _mt::calc_t<E>(E(_mt::at(x, i))) * _mt::calc_t<E>(E(_mt::at(y, i)));
    return E(s);
}
template <class X, class Y, class R = _mt::fres_t<X, Y>, _mt::enable_if_t<_mt::vn<R> == 3, int> = 0>
inline R cross(const X& x, const Y& y) {
    R a(x), b(y);
    return R(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
template <class X, class R = _mt::fres_t<X>> inline _mt::elem_t<R> length_squared(const X& x) {
    if constexpr (_mt::vn<R> == 0) return R(x) * R(x);
    else return dot(x, x);
}
template <class X, class R = _mt::fres_t<X>> inline _mt::elem_t<R> length(const X& x) {
    if constexpr (_mt::vn<R> == 0) return fabs(x);
    else return _mt::elem_t<R>(_mt::op_sqrt::f(_mt::calc_t<_mt::elem_t<R>>(dot(x, x))));
}
template <class X, class Y, class R = _mt::fres_t<X, Y>> inline _mt::elem_t<R> distance(const X& x, const Y& y) {
    return length(R(x) - R(y));
}
template <class X, class Y, class R = _mt::fres_t<X, Y>>
inline _mt::elem_t<R> distance_squared(const X& x, const Y& y) {
    return length_squared(R(x) - R(y));
}
template <class X, class R = _mt::fres_t<X>> inline R normalize(const X& x) {
    if constexpr (_mt::vn<R> == 0) return sign(x);
    else return R(x) * rsqrt(dot(x, x));
}
template <class X, class Y, class R = _mt::fres_t<X, Y>> inline R reflect(const X& i, const Y& n) {
    return R(i) - _mt::elem_t<R>(2) * dot(n, i) * R(n);
}
template <class X, class Y, class Z, class R = _mt::fres_t<X, Y, Z>>
inline R faceforward(const X& n, const Y& i, const Z& nref) {
    return dot(nref, i) < _mt::elem_t<R>(0) ? R(n) : R(-R(n));
}

/* ---- as_type: reinterpret the bits of a value as another type of the same size ------------------------------ */
template <class To, class From> inline To as_type(const From& from) {
    typedef _mt::val_t<From> V;
    static_assert(sizeof(To) == sizeof(V), "as_type: source and destination types must have the same size");
    V v = V(from);
    To to;
    __builtin_memcpy(&to, &v, sizeof to);
    return to;
}

/* fast:: and precise:: name the same functions through using-declarations, not a using-directive: a kernel that adds
 * an overload to metal::fast (say `bfloat exp(bfloat)`) must add to these, not hide them, or fast::exp(float) would
 * convert to bfloat. */
#define MT_MATH_NAMES(X)                                                                                          \
    X(exp) X(exp2) X(exp10) X(log) X(log2) X(log10) X(sqrt) X(rsqrt) X(sin) X(cos) X(tan) X(asin) X(acos) X(atan) \
    X(sinh) X(cosh) X(tanh) X(asinh) X(acosh) X(atanh) X(sinpi) X(cospi) X(tanpi) X(floor) X(ceil) X(round)       \
    X(rint) X(trunc) X(fabs) X(fract) X(saturate) X(sign) X(logb) X(pow) X(powr) X(atan2) X(fmod) X(remainder)    \
    X(copysign) X(fdim) X(nextafter) X(step) X(divide) X(ldexp) X(pown) X(rootn) X(fma) X(mad) X(mix) X(fmin3)    \
    X(fmax3) X(fmedian3) X(smoothstep) X(sincos) X(modf) X(frexp) X(abs) X(min) X(max) X(fmin) X(fmax) X(clamp)  \
    X(min3) X(max3) X(median3) X(isnan) X(isinf) X(isfinite) X(isnormal) X(signbit) X(dot) X(cross) X(length)    \
    X(length_squared) X(distance) X(distance_squared) X(normalize) X(reflect) X(faceforward)
#define MT_USING(name) using metal::name;
namespace fast { MT_MATH_NAMES(MT_USING) }
namespace precise { MT_MATH_NAMES(MT_USING) }
#undef MT_USING
#undef MT_MATH_NAMES

#undef MT_F1
#undef MT_F2
#undef MT_F3
#undef MT_I1
#undef MT_I2
#undef MT_I3
#undef MT_FOP1
#undef MT_FOP2
#undef MT_FOP3
#undef MT_IOP
}  // namespace metal

#endif
