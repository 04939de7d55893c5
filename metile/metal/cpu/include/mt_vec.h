/* mt_vec.h - MSL vector types: vec<T, N> (N = 2, 3, 4) with components, swizzles, v[i], element-wise operators;
 * packed_* vectors; the floatN/halfN/intN/... names.
 *
 * Part of metal_compat.h; include that instead.
 *
 * Layout is MSL's: a vector of N elements has size and alignment N * sizeof(T), except that 3-element vectors are
 * as large and as aligned as 4-element ones (float3: 16 bytes). Packed vectors have the alignment of T and no
 * padding. Vectors are trivially copyable and standard layout, so `device float*` can be cast to `device float4*`.
 *
 * Swizzles are union members (mt_swizzle.h, generated) of type swz<T, Span, I...> (a repeated component: read
 * only) or swzw<T, Span, I...> (assignable and compound-assignable): Span elements from the lowest named
 * component, I the offsets of the named components. Reading one gives a vec<T, K>.
 * One limit comes from keeping vectors trivially copyable: assigning a swizzle from a *const* object's swizzle of
 * the same pattern (`a.xz = cb.xz` with `cb` const) copies every element between the lowest and highest component
 * (here also y). Patterns whose components are contiguous (xy, zw, yzw, ...) and any non-const or temporary
 * source are exact.
 */
#ifndef METILE_MT_VEC_H
#define METILE_MT_VEC_H

namespace metal {

template <class T, int N> struct vec;

namespace _mt {

template <class T, int N> struct vstore;
template <class T, int N> struct packed;

/* vt<X>: n = components (0 for a scalar, -1 for anything else), e = element type. */
template <class X> struct vt {
    static constexpr int n = kind<X>::value ? 0 : -1;
    typedef X e;
};
template <class T, int N> struct vt<vec<T, N>> {
    static constexpr int n = N;
    typedef T e;
};
template <class T, int N> struct vt<packed<T, N>> {
    static constexpr int n = N;
    typedef T e;
};
template <class X> using elem_t = typename vt<rm_t<X>>::e;
template <class X> constexpr int vn = vt<rm_t<X>>::n;

/* The value a vector-like argument stands for: scalars themselves, vectors as vec<T, N>. */
template <class X, int N = vn<X>> struct val { typedef vec<elem_t<X>, N> type; };
template <class X> struct val<X, 0> { typedef rm_t<X> type; };
template <class X> using val_t = typename val<X>::type;

template <class X, enable_if_t<kind<X>::value != 0, int> = 0> inline X at(const X& x, int) { return x; }
template <class T, int N> inline T at(const vec<T, N>& x, int i) { return x.v_[i]; }
template <class T, int N> inline T at(const packed<T, N>& x, int i) { return x.v_[i]; }

/* Swizzle members: swz for patterns with a repeated component (read only), swzw for the others. Both hold the
 * Span elements from the lowest named component; I are the offsets of the named components in that span. */
template <class T, int S, int... I> struct swz {
    T d_[S];
    operator vec<T, sizeof...(I)>() const { return vec<T, sizeof...(I)>(d_[I]...); }
};
template <class T, int S, int... I> struct swzw;
/* swz_from<S, X>::type exists when a writable swizzle S can be assigned from an X: a scalar, or a vector of as
 * many elements of the same type. */
template <class S, class X> struct swz_from {};
template <class T, int S, int... I, class X>
struct swz_from<swzw<T, S, I...>, X>
    : enable_if<vt<X>::n == 0 || (vt<X>::n == int(sizeof...(I)) && is_same<typename vt<X>::e, T>::value)> {};
template <class T, int S, int... I> struct swzw {
    T d_[S];
    swzw& operator=(const swzw&) = default; /* trivial: see the limit in the file comment */
    operator vec<T, sizeof...(I)>() const { return vec<T, sizeof...(I)>(d_[I]...); }
    template <class X, class = typename swz_from<swzw, rm_t<X>>::type> swzw& operator=(X&& x) {
        vec<T, sizeof...(I)> t(x); /* read everything first: the source may overlap */
        int k = 0;
        ((d_[I] = t.v_[k++]), ...);
        return *this;
    }
};
template <class T, int S, int... I> struct vt<swz<T, S, I...>> {
    static constexpr int n = sizeof...(I);
    typedef T e;
};
template <class T, int S, int... I> struct vt<swzw<T, S, I...>> {
    static constexpr int n = sizeof...(I);
    typedef T e;
};
template <class T, int S, int... I> inline T at(const swz<T, S, I...>& x, int i) {
    constexpr int idx[] = {I...};
    return x.d_[idx[i]];
}
template <class T, int S, int... I> inline T at(const swzw<T, S, I...>& x, int i) {
    constexpr int idx[] = {I...};
    return x.d_[idx[i]];
}
template <class T, int S, int... I> inline vec<T, sizeof...(I)> operator+(const swz<T, S, I...>& x) { return x; }
template <class T, int S, int... I> inline vec<T, sizeof...(I)> operator+(const swzw<T, S, I...>& x) { return x; }
#define MT_SWZ_COMPOUND(op)                                                                                      \
    template <class T, int S, int... I, class X, class = typename swz_from<swzw<T, S, I...>, X>::type>           \
    inline swzw<T, S, I...>& operator op##=(swzw<T, S, I...>& s, const X& x) {                                   \
        return s = vec<T, sizeof...(I)>(vec<T, sizeof...(I)>(s) op x);                                           \
    }
MT_SWZ_COMPOUND(+)
MT_SWZ_COMPOUND(-)
MT_SWZ_COMPOUND(*)
MT_SWZ_COMPOUND(/)
MT_SWZ_COMPOUND(%)
MT_SWZ_COMPOUND(&)
MT_SWZ_COMPOUND(|)
MT_SWZ_COMPOUND(^)
MT_SWZ_COMPOUND(<<)
MT_SWZ_COMPOUND(>>)
#undef MT_SWZ_COMPOUND

/* Element types built as GCC vectors by vec's element-wise constructor. */
template <class T>
constexpr bool lane_vector = is_same<T, float>::value || is_same<T, int>::value || is_same<T, uint>::value;

/* Components an argument of a vector constructor contributes. */
template <class X> constexpr int count = vn<X> == 0 ? 1 : (vn<X> > 0 ? vn<X> : -100);

}  // namespace _mt
}  // namespace metal

#include "mt_swizzle.h"

namespace metal {

template <class T, int N> struct vec : _mt::vstore<T, N> {
    typedef T value_type;

    vec() = default;
    /* splat: float4(1.0f), and `float4 v = 0;` */
    template <class S, _mt::enable_if_t<_mt::vn<S> == 0, int> = 0> vec(const S& s) {
        MT_UNROLL
        for (int i = 0; i < N; ++i) this->v_[i] = T(s);
    }
    /* conversion between element types: float4(int4), half4(float4) */
    template <class X, _mt::enable_if_t<_mt::vn<X> == N && !_mt::is_same<_mt::elem_t<X>, T>::value, int> = 0>
    explicit vec(const X& x) {
        MT_UNROLL
        for (int i = 0; i < N; ++i) this->v_[i] = T(_mt::at(x, i));
    }
    /* element-wise and mixed: float4(a, b, c, d), float4(v2, z, w), float4(v3, w), float3(v2, z) */
    template <class A, class B, class... R,
              _mt::enable_if_t<_mt::count<A> + _mt::count<B> + (0 + ... + _mt::count<R>) == N, int> = 0>
    vec(const A& a, const B& b, const R&... r) {
        if constexpr (_mt::vn<A> == 0 && _mt::vn<B> == 0 && (true && ... && (_mt::vn<R> == 0)) &&
                      (N == 2 || N == 4) && _mt::lane_vector<T>) {
            /* N scalars: gathered in a register and stored at once. Stored one by one, they would be read back by
             * the 16-byte load of the vector's next use (a float4 store to device memory, say), which cannot take
             * its bytes from four narrower stores still in flight and waits for them to reach the cache. */
            typedef T lanes __attribute__((vector_size(N * sizeof(T))));
            const lanes v = {T(a), T(b), T(r)...};
            __builtin_memcpy(this->v_, &v, sizeof v);
        } else {
            int k = 0;
            put(k, a);
            put(k, b);
            (put(k, r), ...);
        }
    }

    T& operator[](int i) { return this->v_[i]; }
    const T& operator[](int i) const { return this->v_[i]; }

#define MT_VEC_COMPOUND(op)                                                                                       \
    template <class X, class = decltype(_mt::declval<const vec&>() op _mt::declval<const X&>())>                 \
    vec& operator op##=(const X& x) {                                                                             \
        return *this = vec(*this op x);                                                                           \
    }
    MT_VEC_COMPOUND(+)
    MT_VEC_COMPOUND(-)
    MT_VEC_COMPOUND(*)
    MT_VEC_COMPOUND(/)
    MT_VEC_COMPOUND(%)
    MT_VEC_COMPOUND(&)
    MT_VEC_COMPOUND(|)
    MT_VEC_COMPOUND(^)
    MT_VEC_COMPOUND(<<)
    MT_VEC_COMPOUND(>>)
#undef MT_VEC_COMPOUND
    vec& operator++() { return *this += T(1); }
    vec& operator--() { return *this -= T(1); }
    vec operator++(int) { vec t = *this; *this += T(1); return t; }
    vec operator--(int) { vec t = *this; *this -= T(1); return t; }

  private:
    template <class X> void put(int& k, const X& x) {
        if constexpr (_mt::vn<X> == 0) {
            this->v_[k++] = T(x);
        } else {
            MT_UNROLL
            for (int j = 0; j < _mt::vn<X>; ++j) this->v_[k++] = T(_mt::at(x, j));
        }
    }
};

namespace _mt {

/* Packed vectors: no padding, alignment of T; they convert to and from vec<T, N>. */
template <class T, int N> struct pstore;
template <class T> struct pstore<T, 2> {
    union {
        T v_[2];
        struct { T x, y; };
        struct { T r, g; };
    };
};
template <class T> struct pstore<T, 3> {
    union {
        T v_[3];
        struct { T x, y, z; };
        struct { T r, g, b; };
    };
};
template <class T> struct pstore<T, 4> {
    union {
        T v_[4];
        struct { T x, y, z, w; };
        struct { T r, g, b, a; };
    };
};
template <class T, int N> struct packed : pstore<T, N> {
    typedef T value_type;
    packed() = default;
    packed(const vec<T, N>& v) {
        MT_UNROLL
        for (int i = 0; i < N; ++i) this->v_[i] = v.v_[i];
    }
    template <class A, class B, class... R, enable_if_t<count<A> + count<B> + (0 + ... + count<R>) == N, int> = 0>
    packed(const A& a, const B& b, const R&... r) : packed(vec<T, N>(a, b, r...)) {}
    operator vec<T, N>() const {
        vec<T, N> v;
        MT_UNROLL
        for (int i = 0; i < N; ++i) v.v_[i] = this->v_[i];
        return v;
    }
    T& operator[](int i) { return this->v_[i]; }
    const T& operator[](int i) const { return this->v_[i]; }
    template <class X, class = decltype(declval<vec<T, N>&>() += declval<const X&>())>
    packed& operator+=(const X& x) { return *this = vec<T, N>(*this) + x; }
    template <class X, class = decltype(declval<vec<T, N>&>() -= declval<const X&>())>
    packed& operator-=(const X& x) { return *this = vec<T, N>(*this) - x; }
    template <class X, class = decltype(declval<vec<T, N>&>() *= declval<const X&>())>
    packed& operator*=(const X& x) { return *this = vec<T, N>(*this) * x; }
    template <class X, class = decltype(declval<vec<T, N>&>() /= declval<const X&>())>
    packed& operator/=(const X& x) { return *this = vec<T, N>(*this) / x; }
};

/* ---- element-wise operators (found by argument-dependent lookup through vstore, swz and packed) ---------- */
/* vec op vec needs equal sizes and element types; a scalar operand is converted to the vector's element type. */
template <class A, class B, int NA = vt<A>::n, int NB = vt<B>::n> struct binv {};
template <class A, class B, int N>
struct binv<A, B, N, N> : enable_if<(N > 0) && is_same<typename vt<A>::e, typename vt<B>::e>::value,
                                    vec<typename vt<A>::e, N>> {};
template <class A, class B, int N> struct binv<A, B, N, 0> : enable_if<(N > 0), vec<typename vt<A>::e, N>> {};
template <class A, class B, int N> struct binv<A, B, 0, N> : enable_if<(N > 0), vec<typename vt<B>::e, N>> {};
template <class A, class B> struct binv<A, B, 0, 0> {};
template <class A, class B> using binv_t = typename binv<rm_t<A>, rm_t<B>>::type;
template <class A> using unv_t = enable_if_t<(vn<A> > 0), vec<elem_t<A>, (vn<A> > 0 ? vn<A> : 2)>>;

#define MT_VEC_BINOP(op)                                                                                          \
    template <class A, class B, class R = binv_t<A, B>> inline R operator op(const A& a, const B& b) {           \
        typedef typename R::value_type E;                                                                         \
        R r;                                                                                                      \
        MT_UNROLL                                                                                                \
        for (int i = 0; i < vt<R>::n; ++i) r.v_[i] = E(E(at(a, i)) op E(at(b, i)));                              \
        return r;                                                                                                 \
    }
MT_VEC_BINOP(+)
MT_VEC_BINOP(-)
MT_VEC_BINOP(*)
MT_VEC_BINOP(/)
MT_VEC_BINOP(%)
MT_VEC_BINOP(&)
MT_VEC_BINOP(|)
MT_VEC_BINOP(^)
MT_VEC_BINOP(<<)
MT_VEC_BINOP(>>)
#undef MT_VEC_BINOP

#define MT_VEC_CMPOP(op)                                                                                          \
    template <class A, class B, class R = binv_t<A, B>>                                                           \
    inline vec<bool, vt<R>::n> operator op(const A& a, const B& b) {                                              \
        typedef typename R::value_type E;                                                                         \
        vec<bool, vt<R>::n> r;                                                                                    \
        MT_UNROLL                                                                                                 \
        for (int i = 0; i < vt<R>::n; ++i) r.v_[i] = E(at(a, i)) op E(at(b, i));                                  \
        return r;                                                                                                 \
    }
MT_VEC_CMPOP(==)
MT_VEC_CMPOP(!=)
MT_VEC_CMPOP(<)
MT_VEC_CMPOP(<=)
MT_VEC_CMPOP(>)
MT_VEC_CMPOP(>=)
MT_VEC_CMPOP(&&)
MT_VEC_CMPOP(||)
#undef MT_VEC_CMPOP

#define MT_VEC_UNOP(op)                                                                                           \
    template <class A, class V = unv_t<A>> inline V operator op(const A& a) {                                    \
        V r;                                                                                                      \
        MT_UNROLL                                                                                                \
        for (int i = 0; i < vn<A>; ++i) r.v_[i] = typename V::value_type(op at(a, i));                           \
        return r;                                                                                                 \
    }
MT_VEC_UNOP(-)
MT_VEC_UNOP(~)
template <class A, class V = unv_t<A>> inline vec<bool, vn<A>> operator!(const A& a) {
    vec<bool, vn<A>> r;
    MT_UNROLL
    for (int i = 0; i < vn<A>; ++i) r.v_[i] = !at(a, i);
    return r;
}
#undef MT_VEC_UNOP
template <class T, int N> inline vec<T, N> operator+(const vec<T, N>& a) { return a; }
template <class T, int N> inline vec<T, N> operator+(const packed<T, N>& a) { return a; }

}  // namespace _mt

/* ---- the type names ------------------------------------------------------------------------------------------- */
#define MT_VEC_NAMES(T, name)                                                                                     \
    typedef vec<T, 2> name##2;                                                                                    \
    typedef vec<T, 3> name##3;                                                                                    \
    typedef vec<T, 4> name##4;                                                                                    \
    typedef _mt::packed<T, 2> packed_##name##2;                                                                   \
    typedef _mt::packed<T, 3> packed_##name##3;                                                                   \
    typedef _mt::packed<T, 4> packed_##name##4;
MT_VEC_NAMES(float, float)
MT_VEC_NAMES(half, half)
MT_VEC_NAMES(bfloat, bfloat)
MT_VEC_NAMES(int, int)
MT_VEC_NAMES(uint, uint)
MT_VEC_NAMES(short, short)
MT_VEC_NAMES(ushort, ushort)
MT_VEC_NAMES(signed char, char)
MT_VEC_NAMES(uchar, uchar)
MT_VEC_NAMES(long, long)
MT_VEC_NAMES(ulong, ulong)
MT_VEC_NAMES(bool, bool)
#undef MT_VEC_NAMES

template <class T, int N> using packed_vec = _mt::packed<T, N>;

/* <metal_type_traits> for vectors */
template <class T> struct is_vector { static constexpr bool value = _mt::vn<T> > 0; };
template <class T> constexpr bool is_vector_v = is_vector<T>::value;
template <class T> struct vec_elements { static constexpr int value = _mt::vn<T> > 0 ? _mt::vn<T> : 1; };

}  // namespace metal

#endif
