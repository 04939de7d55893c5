/* mt_base.h - scalar types, type traits, constants and enums of the MSL standard library (CPU device).
 *
 * Part of metal_compat.h; include that instead. Internals live in metal::_mt; the MSL surface in metal (made
 * visible at global scope by metal_compat.h). No std header is used: traits and limits are written here, and math
 * goes to compiler builtins, to keep kernel compiles fast.
 */
#ifndef METILE_MT_BASE_H
#define METILE_MT_BASE_H

/* Within one GPU thread the runtime's mt_current_pos() always returns the same pointer (the position block of that
 * thread), so it is declared `const` here: the compiler can then share one call between the many simdgroup loads,
 * stores and collectives of a kernel, which makes kernels compile and run faster. */
extern "C" const mt_thread_pos* mt_current_pos(void) __attribute__((const));

/* MSL's scalar type names. Same definitions as glibc's <sys/types.h>, so including both is harmless. */
typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned long ulong;
typedef unsigned char uchar;
typedef _Float16 half; /* IEEE binary16; arithmetic rounds to half after every operation, as on the GPU */
/* MSL's long and ulong are 64 bits, as the host's long is on the LP64 systems the CPU device runs on. */
static_assert(sizeof(long) == 8 && sizeof(ulong) == 8, "MSL's long is 64 bits: the host compiler must be LP64");

/* Function qualifier of Apple's <metal_stdlib> (always inline there; a plain inline function here). */
#define METAL_FUNC inline

/* Element loops over vector components are unrolled, so that the compiler sees straight-line code it can keep in
 * registers and vectorize. */
#define MT_UNROLL _Pragma("GCC unroll 4")

namespace metal {

/* <metal_type_traits>: every predicate is a bool_constant, as in C++. */
template <class T, T v> struct integral_constant {
    static constexpr T value = v;
    typedef T value_type;
    typedef integral_constant type;
    constexpr operator value_type() const noexcept { return value; }
    constexpr value_type operator()() const noexcept { return value; }
};
template <bool B> using bool_constant = integral_constant<bool, B>;
typedef bool_constant<true> true_type;
typedef bool_constant<false> false_type;

namespace _mt {

/* ---- minimal type traits ---------------------------------------------------------------------------------- */
template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { typedef T type; };
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;
template <bool B, class A, class C> struct conditional { typedef A type; };
template <class A, class C> struct conditional<false, A, C> { typedef C type; };
template <class T, class U> struct is_same : false_type {};
template <class T> struct is_same<T, T> : true_type {};
template <class T> struct rm { typedef T type; };
template <class T> struct rm<const T> { typedef T type; };
template <class T> struct rm<volatile T> { typedef T type; };
template <class T> struct rm<const volatile T> { typedef T type; };
template <class T> struct rm<T&> : rm<T> {};
template <class T> struct rm<T&&> : rm<T> {};
template <class T> using rm_t = typename rm<T>::type;
template <class T> T&& declval() noexcept;

/* Scalar kinds: 0 not a scalar, 1 bool, 2 integer, 3 floating point. */
template <class T> struct kind { static constexpr int value = 0; };
#define MT_KIND(T, K) template <> struct kind<T> { static constexpr int value = K; };
MT_KIND(bool, 1)
MT_KIND(char, 2)
MT_KIND(signed char, 2)
MT_KIND(unsigned char, 2)
MT_KIND(short, 2)
MT_KIND(unsigned short, 2)
MT_KIND(int, 2)
MT_KIND(unsigned int, 2)
MT_KIND(long, 2)
MT_KIND(unsigned long, 2)
MT_KIND(long long, 2)
MT_KIND(unsigned long long, 2)
MT_KIND(_Float16, 3)
MT_KIND(float, 3)
MT_KIND(double, 3)
template <class T> constexpr bool is_scalar = kind<T>::value != 0;
template <class T> constexpr bool is_int = kind<T>::value == 2;
template <class T> constexpr bool is_fp = kind<T>::value == 3;
template <class T, bool = kind<T>::value == 2> struct sgn { static constexpr bool value = false; };
template <class T> struct sgn<T, true> { static constexpr bool value = (T)(-1) < (T)(0); };
template <class T> constexpr bool is_signed_int = sgn<T>::value;

}  // namespace _mt

struct bfloat;
namespace _mt {
template <> struct kind<bfloat> { static constexpr int value = 3; };
}  // namespace _mt

/* ---- bfloat: brain float (8-bit exponent, 7-bit mantissa), round-to-nearest-even from float -------------------- */
struct bfloat {
    unsigned short bits;

    bfloat() = default;
    template <class U, _mt::enable_if_t<_mt::is_scalar<U> && !_mt::is_same<U, bfloat>::value, int> = 0>
    constexpr bfloat(U v) : bits(from_float(float(v))) {}
    constexpr operator float() const { return __builtin_bit_cast(float, (unsigned)bits << 16); }

    static constexpr bfloat from_bits(unsigned short b) {
        bfloat r{};
        r.bits = b;
        return r;
    }
    static constexpr unsigned short from_float(float f) {
        unsigned u = __builtin_bit_cast(unsigned, f);
        if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); /* NaN stays a quiet NaN */
        u += 0x7fffu + ((u >> 16) & 1u);
        return (unsigned short)(u >> 16);
    }

    /* bfloat op bfloat rounds the float result back to bfloat; with an integer the integer converts to bfloat;
     * with float (or half) the result is float, as for half op float. */
    template <class U> using other_t =
        typename _mt::conditional<_mt::is_int<U> || _mt::is_same<U, bool>::value, bfloat,
                                  typename _mt::conditional<_mt::is_same<U, double>::value, double, float>::type>::type;
#define MT_BF_ARITH(op)                                                                                          \
    friend constexpr bfloat operator op(bfloat a, bfloat b) { return bfloat(float(a) op float(b)); }             \
    template <class U, _mt::enable_if_t<_mt::is_scalar<U>, int> = 0>                                               \
    friend constexpr other_t<U> operator op(bfloat a, U b) { return other_t<U>(float(a) op float(b)); }          \
    template <class U, _mt::enable_if_t<_mt::is_scalar<U>, int> = 0>                                               \
    friend constexpr other_t<U> operator op(U a, bfloat b) { return other_t<U>(float(a) op float(b)); }          \
    template <class U, _mt::enable_if_t<_mt::is_scalar<U> || _mt::is_same<U, bfloat>::value, int> = 0>         \
    constexpr bfloat& operator op##=(U b) { return *this = bfloat(float(*this) op float(b)); }
    MT_BF_ARITH(+)
    MT_BF_ARITH(-)
    MT_BF_ARITH(*)
    MT_BF_ARITH(/)
#undef MT_BF_ARITH
#define MT_BF_CMP(op)                                                                                            \
    friend constexpr bool operator op(bfloat a, bfloat b) { return float(a) op float(b); }                       \
    template <class U, _mt::enable_if_t<_mt::is_scalar<U>, int> = 0>                                               \
    friend constexpr bool operator op(bfloat a, U b) { return float(a) op b; }                                    \
    template <class U, _mt::enable_if_t<_mt::is_scalar<U>, int> = 0>                                               \
    friend constexpr bool operator op(U a, bfloat b) { return a op float(b); }
    MT_BF_CMP(==)
    MT_BF_CMP(!=)
    MT_BF_CMP(<)
    MT_BF_CMP(<=)
    MT_BF_CMP(>)
    MT_BF_CMP(>=)
#undef MT_BF_CMP
    friend constexpr bfloat operator-(bfloat a) { return from_bits((unsigned short)(a.bits ^ 0x8000u)); }
    friend constexpr bfloat operator+(bfloat a) { return a; }
    friend constexpr bool operator!(bfloat a) { return !float(a); }
    constexpr bfloat& operator++() { return *this += 1; }
    constexpr bfloat& operator--() { return *this -= 1; }
    constexpr bfloat operator++(int) { bfloat t = *this; *this += 1; return t; }
    constexpr bfloat operator--(int) { bfloat t = *this; *this -= 1; return t; }
};

namespace _mt {
#undef MT_KIND

/* Type in which a function of a T is computed: half and bfloat go through float. */
template <class T> struct calc { typedef T type; };
template <> struct calc<_Float16> { typedef float type; };
template <> struct calc<bfloat> { typedef float type; };
template <class T> using calc_t = typename calc<T>::type;

/* Common type of two scalars: themselves if equal, else what C++ arithmetic gives (bfloat: see above); void if
 * one is not a scalar. */
template <class A, class B, bool = is_scalar<A> && is_scalar<B>> struct common { typedef void type; };
template <class A, class B> struct common<A, B, true> { typedef decltype(declval<A>() + declval<B>()) type; };
template <class A> struct common<A, A, true> { typedef A type; };
}  // namespace _mt

/* ---- enums of the synchronisation functions -------------------------------------------------------------------- */
enum class mem_flags : unsigned {
    mem_none = 0,
    mem_device = 1,
    mem_threadgroup = 2,
    mem_texture = 4,
    mem_threadgroup_imageblock = 8,
    mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) | unsigned(b)); }
constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) & unsigned(b)); }
constexpr mem_flags operator^(mem_flags a, mem_flags b) { return mem_flags(unsigned(a) ^ unsigned(b)); }
constexpr mem_flags operator~(mem_flags a) { return mem_flags(~unsigned(a) & 31u); }
constexpr mem_flags& operator|=(mem_flags& a, mem_flags b) { return a = a | b; }
constexpr mem_flags& operator&=(mem_flags& a, mem_flags b) { return a = a & b; }

enum memory_order {
    memory_order_relaxed = __ATOMIC_RELAXED,
    memory_order_consume = __ATOMIC_CONSUME,
    memory_order_acquire = __ATOMIC_ACQUIRE,
    memory_order_release = __ATOMIC_RELEASE,
    memory_order_acq_rel = __ATOMIC_ACQ_REL,
    memory_order_seq_cst = __ATOMIC_SEQ_CST,
};

enum thread_scope {
    thread_scope_thread = 0,
    thread_scope_simdgroup = 1,
    thread_scope_threadgroup = 2,
    thread_scope_device = 3,
};

/* ---- type traits of <metal_type_traits> ------------------------------------------------------------------------
 * Not here, because real-world MSL defines them in namespace metal itself (Apple's library does not have them):
 * is_empty, void_t, make_void. */
using _mt::conditional;
using _mt::enable_if;
using _mt::enable_if_t;
using _mt::is_same;
using _mt::declval;
template <bool B, class A, class C> using conditional_t = typename conditional<B, A, C>::type;
/* cv-qualifiers apply to a scalar's own type: is_integral<const int> holds (references do not count) */
template <class T> struct remove_const { typedef T type; };
template <class T> struct remove_const<const T> { typedef T type; };
template <class T> struct remove_volatile { typedef T type; };
template <class T> struct remove_volatile<volatile T> { typedef T type; };
template <class T> struct remove_cv { typedef typename remove_const<typename remove_volatile<T>::type>::type type; };
template <class T> struct remove_reference { typedef T type; };
template <class T> struct remove_reference<T&> { typedef T type; };
template <class T> struct remove_reference<T&&> { typedef T type; };
template <class T> struct remove_pointer { typedef T type; };
template <class T> struct remove_pointer<T*> { typedef T type; };
template <class T> struct remove_pointer<T* const> { typedef T type; };
/* address spaces are empty words on the CPU: nothing to remove */
template <class T> struct remove_addrspace { typedef T type; };
template <class T> struct remove_cvref { typedef typename remove_cv<typename remove_reference<T>::type>::type type; };
template <class T> using remove_const_t = typename remove_const<T>::type;
template <class T> using remove_volatile_t = typename remove_volatile<T>::type;
template <class T> using remove_cv_t = typename remove_cv<T>::type;
template <class T> using remove_reference_t = typename remove_reference<T>::type;
template <class T> using remove_pointer_t = typename remove_pointer<T>::type;
template <class T> using remove_addrspace_t = typename remove_addrspace<T>::type;
template <class T> using remove_cvref_t = typename remove_cvref<T>::type;
template <class T> struct is_floating_point : bool_constant<_mt::is_fp<remove_cv_t<T>>> {};
template <class T> struct is_integral
    : bool_constant<_mt::kind<remove_cv_t<T>>::value == 1 || _mt::kind<remove_cv_t<T>>::value == 2> {};
template <class T> struct is_arithmetic : bool_constant<_mt::is_scalar<remove_cv_t<T>>> {};
template <class T> struct is_signed
    : bool_constant<_mt::is_fp<remove_cv_t<T>> || _mt::is_signed_int<remove_cv_t<T>>> {};
template <class T> struct is_unsigned : bool_constant<is_integral<T>::value && !_mt::is_signed_int<remove_cv_t<T>>> {};
template <class T> struct is_const : false_type {};
template <class T> struct is_const<const T> : true_type {};
template <class T> struct is_pointer : false_type {};
template <class T> struct is_pointer<T*> : true_type {};
template <class T> struct is_pointer<T* const> : true_type {};
template <class T> struct is_reference : false_type {};
template <class T> struct is_reference<T&> : true_type {};
template <class T> struct is_reference<T&&> : true_type {};
namespace _mt {
template <class T> void take(T) noexcept;
template <class F, class T, class = decltype(take<T>(declval<F>()))> true_type convertible(int);
template <class, class> false_type convertible(...);
}  // namespace _mt
/* From converts to To implicitly (void to void only) */
template <class From, class To> struct is_convertible : decltype(_mt::convertible<From, To>(0)) {};
template <class From> struct is_convertible<From, void> : bool_constant<_mt::is_same<remove_cv_t<From>, void>::value> {};
template <class From, class To> constexpr bool is_convertible_v = is_convertible<From, To>::value;
template <class T> constexpr bool is_const_v = is_const<T>::value;
template <class T> constexpr bool is_pointer_v = is_pointer<T>::value;
template <class T> constexpr bool is_reference_v = is_reference<T>::value;
/* make_signed / make_unsigned of the integer types (cv-qualifiers kept) */
namespace _mt {
template <class T> struct sign_pair {};
#define MT_SIGN_PAIR(S, U)                                                                                        \
    template <> struct sign_pair<S> { typedef S s; typedef U u; };                                               \
    template <> struct sign_pair<U> { typedef S s; typedef U u; };
MT_SIGN_PAIR(signed char, unsigned char)
MT_SIGN_PAIR(short, unsigned short)
MT_SIGN_PAIR(int, unsigned int)
MT_SIGN_PAIR(long, unsigned long)
MT_SIGN_PAIR(long long, unsigned long long)
#undef MT_SIGN_PAIR
template <> struct sign_pair<char> { typedef signed char s; typedef unsigned char u; };
}  // namespace _mt
template <class T> struct make_signed { typedef typename _mt::sign_pair<T>::s type; };
template <class T> struct make_signed<const T> { typedef const typename make_signed<T>::type type; };
template <class T> struct make_unsigned { typedef typename _mt::sign_pair<T>::u type; };
template <class T> struct make_unsigned<const T> { typedef const typename make_unsigned<T>::type type; };
template <class T> using make_signed_t = typename make_signed<T>::type;
template <class T> using make_unsigned_t = typename make_unsigned<T>::type;
/* the logical combinations of traits Apple's library has under `#pragma METAL internals` */
template <class... B> struct _disjunction : false_type {};
template <class B, class... R> struct _disjunction<B, R...> : bool_constant<bool(B::value) || _disjunction<R...>::value> {};
template <class... B> struct _conjunction : true_type {};
template <class B, class... R> struct _conjunction<B, R...> : bool_constant<bool(B::value) && _conjunction<R...>::value> {};
template <class B> struct _negation : bool_constant<!bool(B::value)> {};
template <class T, class U> constexpr bool is_same_v = is_same<T, U>::value;
template <class T> constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T> constexpr bool is_integral_v = is_integral<T>::value;
template <class T> constexpr bool is_arithmetic_v = is_arithmetic<T>::value;
template <class T> constexpr bool is_signed_v = is_signed<T>::value;
template <class T> constexpr bool is_unsigned_v = is_unsigned<T>::value;

/* ---- uniform<T>: a value the same in every thread (a hint to the GPU compiler; an ordinary value here) ------- */
template <class T> struct uniform {
    T value_;
    uniform() = default;
    constexpr uniform(const T& v) : value_(v) {}
    constexpr operator T() const { return value_; }
    template <class U> constexpr uniform& operator=(const U& v) { value_ = T(v); return *this; }
};
template <class T> constexpr uniform<T> make_uniform(const T& v) { return uniform<T>(v); }

/* ---- array<T, N> of <metal_array> ------------------------------------------------------------------------------ */
template <class T, unsigned long N> struct array {
    T elems_[N ? N : 1];
    typedef T value_type;
    constexpr T& operator[](unsigned long i) { return elems_[i]; }
    constexpr const T& operator[](unsigned long i) const { return elems_[i]; }
    static constexpr unsigned long size() { return N; }
    static constexpr bool empty() { return N == 0; }
    constexpr T* data() { return elems_; }
    constexpr const T* data() const { return elems_; }
    constexpr T* begin() { return elems_; }
    constexpr T* end() { return elems_ + N; }
    constexpr const T* begin() const { return elems_; }
    constexpr const T* end() const { return elems_ + N; }
    constexpr T& front() { return elems_[0]; }
    constexpr T& back() { return elems_[N - 1]; }
};

/* ---- numeric_limits ------------------------------------------------------------------------------------------ */
template <class T> struct numeric_limits {
    static constexpr bool is_specialized = false;
};
#define MT_INT_LIMITS(T, LO, HI, DIGITS)                                                                          \
    template <> struct numeric_limits<T> {                                                                        \
        static constexpr bool is_specialized = true, is_signed = (T)(-1) < (T)(0), is_integer = true;               \
        static constexpr bool has_infinity = false, has_quiet_NaN = false;                                       \
        static constexpr int digits = DIGITS;                                                                     \
        static constexpr T min() { return (T)(LO); }                                                                   \
        static constexpr T max() { return (T)(HI); }                                                                   \
        static constexpr T lowest() { return (T)(LO); }                                                                \
        static constexpr T epsilon() { return 0; }                                                                \
    };
MT_INT_LIMITS(bool, false, true, 1)
MT_INT_LIMITS(char, (char)(char(-1) < 0 ? -128 : 0), (char)(char(-1) < 0 ? 127 : 255), char(-1) < 0 ? 7 : 8)
MT_INT_LIMITS(signed char, -128, 127, 7)
MT_INT_LIMITS(unsigned char, 0, 255, 8)
MT_INT_LIMITS(short, -32768, 32767, 15)
MT_INT_LIMITS(unsigned short, 0, 65535, 16)
MT_INT_LIMITS(int, -2147483647 - 1, 2147483647, 31)
MT_INT_LIMITS(unsigned int, 0u, 4294967295u, 32)
MT_INT_LIMITS(long, -9223372036854775807L - 1, 9223372036854775807L, 63)
MT_INT_LIMITS(unsigned long, 0ul, 18446744073709551615ul, 64)
MT_INT_LIMITS(long long, -9223372036854775807LL - 1, 9223372036854775807LL, 63)
MT_INT_LIMITS(unsigned long long, 0ull, 18446744073709551615ull, 64)
#undef MT_INT_LIMITS
#define MT_FP_LIMITS(T, BITS, U, MINB, MAXB, EPSB, INFB, NANB, DIGITS)                                          \
    template <> struct numeric_limits<T> {                                                                        \
        static constexpr bool is_specialized = true, is_signed = true, is_integer = false;                       \
        static constexpr bool has_infinity = true, has_quiet_NaN = true;                                         \
        static constexpr int digits = DIGITS;                                                                     \
        static constexpr T min() { return BITS((U)(MINB)); }                                                        \
        static constexpr T max() { return BITS((U)(MAXB)); }                                                        \
        static constexpr T lowest() { return -max(); }                                                            \
        static constexpr T epsilon() { return BITS((U)(EPSB)); }                                                    \
        static constexpr T infinity() { return BITS((U)(INFB)); }                                                   \
        static constexpr T quiet_NaN() { return BITS((U)(NANB)); }                                                  \
        static constexpr T denorm_min() { return BITS((U)(1)); }                                                    \
    };
#define MT_BITS_F(u) __builtin_bit_cast(float, u)
#define MT_BITS_H(u) __builtin_bit_cast(_Float16, u)
#define MT_BITS_D(u) __builtin_bit_cast(double, u)
MT_FP_LIMITS(float, MT_BITS_F, unsigned, 0x00800000u, 0x7f7fffffu, 0x34000000u, 0x7f800000u, 0x7fc00000u, 24)
MT_FP_LIMITS(_Float16, MT_BITS_H, unsigned short, 0x0400u, 0x7bffu, 0x1400u, 0x7c00u, 0x7e00u, 11)
MT_FP_LIMITS(bfloat, bfloat::from_bits, unsigned short, 0x0080u, 0x7f7fu, 0x3c00u, 0x7f80u, 0x7fc0u, 8)
MT_FP_LIMITS(double, MT_BITS_D, unsigned long long, 0x0010000000000000ull, 0x7fefffffffffffffull,
             0x3cb0000000000000ull, 0x7ff0000000000000ull, 0x7ff8000000000000ull, 53)
#undef MT_BITS_F
#undef MT_BITS_H
#undef MT_BITS_D
#undef MT_FP_LIMITS
template <class T> struct numeric_limits<const T> : numeric_limits<T> {};

}  // namespace metal

/* ---- constants of <metal_math> ------------------------------------------------------------------------------- */
#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif
#ifndef NAN
#define NAN (__builtin_nanf(""))
#endif
#ifndef HUGE_VALF
#define HUGE_VALF (__builtin_huge_valf())
#endif
#ifndef HUGE_VALH
#define HUGE_VALH ((half)__builtin_huge_valf())
#endif
#ifndef MAXFLOAT
#define MAXFLOAT 0x1.fffffep+127f
#endif
#ifndef FLT_MAX
#define FLT_MAX 0x1.fffffep+127f
#define FLT_MIN 0x1p-126f
#define FLT_EPSILON 0x1p-23f
#define FLT_DIG 6
#define FLT_MANT_DIG 24
#define FLT_MAX_EXP 128
#define FLT_MIN_EXP (-125)
#endif
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)0x1p-14f)
#define HALF_EPSILON ((half)0x1p-10f)
#define MAXHALF HALF_MAX
#ifndef CHAR_BIT
#define CHAR_BIT 8
#define SCHAR_MAX 127
#define SCHAR_MIN (-128)
#define UCHAR_MAX 255
#define CHAR_MAX SCHAR_MAX
#define CHAR_MIN SCHAR_MIN
#define SHRT_MAX 32767
#define SHRT_MIN (-32768)
#define USHRT_MAX 65535
#define INT_MAX 2147483647
#define INT_MIN (-2147483647 - 1)
#define UINT_MAX 4294967295u
#define LONG_MAX 9223372036854775807L
#define LONG_MIN (-9223372036854775807L - 1)
#define ULONG_MAX 18446744073709551615ul
#endif
#define M_E_F 2.71828182845904523536f
#define M_LOG2E_F 1.44269504088896340736f
#define M_LOG10E_F 0.434294481903251827651f
#define M_LN2_F 0.693147180559945309417f
#define M_LN10_F 2.30258509299404568402f
#define M_PI_F 3.14159265358979323846f
#define M_PI_2_F 1.57079632679489661923f
#define M_PI_4_F 0.785398163397448309616f
#define M_1_PI_F 0.318309886183790671538f
#define M_2_PI_F 0.636619772367581343076f
#define M_2_SQRTPI_F 1.12837916709551257390f
#define M_SQRT2_F 1.41421356237309504880f
#define M_SQRT1_2_F 0.707106781186547524401f
#define M_E_H ((half)M_E_F)
#define M_LOG2E_H ((half)M_LOG2E_F)
#define M_LOG10E_H ((half)M_LOG10E_F)
#define M_LN2_H ((half)M_LN2_F)
#define M_LN10_H ((half)M_LN10_F)
#define M_PI_H ((half)M_PI_F)
#define M_PI_2_H ((half)M_PI_2_F)
#define M_PI_4_H ((half)M_PI_4_F)
#define M_1_PI_H ((half)M_1_PI_F)
#define M_2_PI_H ((half)M_2_PI_F)
#define M_2_SQRTPI_H ((half)M_2_SQRTPI_F)
#define M_SQRT2_H ((half)M_SQRT2_F)
#define M_SQRT1_2_H ((half)M_SQRT1_2_F)

#endif
