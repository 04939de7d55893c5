/* mt_checked.h - device pointers that check their accesses, for the CPU device's checked builds.
 *
 * Part of metal_compat.h; include that instead.
 *
 * An array the CPU device binds in place (no copy into guarded memory) has no guard page after it and no canary
 * before it. A checked build (metile/metal/cpu/checked.py) spells every `device T*` of the source as
 * `device_ptr<T>`: a pointer that carries the byte range of the buffer it was bound to, keeps it through pointer
 * arithmetic and casts, and checks each access against it. An access that does not lie wholly inside is a
 * bad-access fault at the address it would have touched (mt_bounds_fault), reported as a guard page's would be,
 * before any byte is read or written.
 *
 * No conversion drops the range: a device_ptr converts to a plain pointer only for the atomic functions and
 * simdgroup_load/simdgroup_store below, which check the object or the matrix they touch. Source that needs any other
 * conversion (a device pointer to an integer or back, a plain pointer into a buffer) does not compile as a checked
 * build, and the CPU device then copies its arrays instead (see metile/metal/cpu/dispatch.py).
 *
 * Addresses are computed as integers, never by pointer arithmetic, so that the compiler cannot assume an
 * out-of-range pointer away before the check.
 */
#ifndef METILE_MT_CHECKED_H
#define METILE_MT_CHECKED_H

namespace metal {

template <class T> class device_ptr;

namespace _mt {
template <class A, class B> constexpr bool same_object = is_same<rm_t<A>, rm_t<B>>::value;
template <class T> struct is_integer_index : bool_constant<kind<rm_t<T>>::value == 2 || kind<rm_t<T>>::value == 1> {};
template <class T> using ptr_index_t = enable_if_t<is_integer_index<T>::value, device_ptr<void>*>;
inline constexpr uintptr_t no_range[2] = {0, 0};   /* the range of a null device_ptr: nothing */
}  // namespace _mt

#define MT_ALWAYS_INLINE __attribute__((always_inline))

template <class T> class device_ptr {
    /* The address, and the buffer's range: its first byte and its length in bytes, in memory the launch fills. */
    uintptr_t a_ = 0;
    const uintptr_t* range_ = _mt::no_range;
    template <class U> friend class device_ptr;

  public:
    typedef T element_type;

    device_ptr() = default;
    device_ptr(decltype(nullptr)) {}
    /* The pointer to the buffer at `base` whose range is `range` (the kernel's entry binds its parameters so). */
    static device_ptr bound(void* base, const uintptr_t* range) {
        device_ptr p;
        p.a_ = reinterpret_cast<uintptr_t>(base);
        p.range_ = range;
        return p;
    }
    /* The same element type with other qualifiers (`device float*` to `device const float*`): the same range. */
    template <class U, class = _mt::enable_if_t<_mt::same_object<U, T>>>
    device_ptr(const device_ptr<U>& o) : a_(o.a_), range_(o.range_) {}
    /* A cast to another element type (`(device float4*)p`): the same range. */
    template <class U, class = _mt::enable_if_t<!_mt::same_object<U, T>>, class = void>
    explicit device_ptr(const device_ptr<U>& o) : a_(o.a_), range_(o.range_) {}

    /* The address of the `n` bytes at byte offset `delta` from this pointer, after checking that they are in range
     * (always inlined, so that the fault's return address is in the kernel's own code, at the access's line). */
    MT_ALWAYS_INLINE T* checked(intptr_t delta, uintptr_t n) const {
        uintptr_t range[2];   /* read as bytes: the alignment checks of the build need not look at the range's own */
        __builtin_memcpy(range, range_, sizeof range);
        const uintptr_t a = a_ + uintptr_t(delta), lo = range[0], len = range[1], off = a - lo;
        if (__builtin_expect(off > len || len - off < n, 0))
            mt_bounds_fault(reinterpret_cast<const void*>(a), n, reinterpret_cast<const void*>(lo), len);
        return reinterpret_cast<T*>(a);
    }
    /* This pointer's element, checked, as a plain pointer: for the functions below that touch exactly it. */
    MT_ALWAYS_INLINE T* one() const { return checked(0, sizeof(T)); }

    template <class I, class = _mt::ptr_index_t<I>> MT_ALWAYS_INLINE T& operator[](I i) const {
        return *checked(intptr_t(i) * intptr_t(sizeof(T)), sizeof(T));
    }
    MT_ALWAYS_INLINE T& operator*() const { return *one(); }
    MT_ALWAYS_INLINE T* operator->() const { return one(); }

    template <class I, class = _mt::ptr_index_t<I>> device_ptr operator+(I i) const {
        device_ptr p = *this;
        p.a_ += uintptr_t(intptr_t(i) * intptr_t(sizeof(T)));
        return p;
    }
    template <class I, class = _mt::ptr_index_t<I>> friend device_ptr operator+(I i, const device_ptr& p) {
        return p + i;
    }
    template <class I, class = _mt::ptr_index_t<I>> device_ptr operator-(I i) const { return *this + -intptr_t(i); }
    intptr_t operator-(const device_ptr& o) const { return (intptr_t(a_) - intptr_t(o.a_)) / intptr_t(sizeof(T)); }
    template <class I, class = _mt::ptr_index_t<I>> device_ptr& operator+=(I i) { return *this = *this + i; }
    template <class I, class = _mt::ptr_index_t<I>> device_ptr& operator-=(I i) { return *this = *this - i; }
    device_ptr& operator++() { return *this += 1; }
    device_ptr& operator--() { return *this -= 1; }
    device_ptr operator++(int) {
        device_ptr p = *this;
        *this += 1;
        return p;
    }
    device_ptr operator--(int) {
        device_ptr p = *this;
        *this -= 1;
        return p;
    }

    explicit operator bool() const { return a_ != 0; }
    template <class U> bool operator==(const device_ptr<U>& o) const { return a_ == o.a_; }
    template <class U> bool operator!=(const device_ptr<U>& o) const { return a_ != o.a_; }
    template <class U> bool operator<(const device_ptr<U>& o) const { return a_ < o.a_; }
    template <class U> bool operator<=(const device_ptr<U>& o) const { return a_ <= o.a_; }
    template <class U> bool operator>(const device_ptr<U>& o) const { return a_ > o.a_; }
    template <class U> bool operator>=(const device_ptr<U>& o) const { return a_ >= o.a_; }
    bool operator==(decltype(nullptr)) const { return a_ == 0; }
    bool operator!=(decltype(nullptr)) const { return a_ != 0; }
};

/* A kernel parameter as its entry binds it: a checked pointer to its buffer, or the plain pointer of a parameter the
 * checked build leaves as it is (a `constant` one). */
template <class P> struct bind_param {
    static P at(void* base, const uintptr_t*) { return static_cast<P>(base); }
};
template <class T> struct bind_param<device_ptr<T>> {
    static device_ptr<T> at(void* base, const uintptr_t* range) { return device_ptr<T>::bound(base, range); }
};
template <class T> struct bind_param<const device_ptr<T>> : bind_param<device_ptr<T>> {};   /* `const device T*` */

/* The atomic functions on a checked pointer: each touches the one atomic object at it. */
#define MT_CHECKED_ATOMIC(name)                                                                                     \
    template <class A, class... R>                                                                                 \
    MT_ALWAYS_INLINE inline auto name(device_ptr<A> p, R... r)->decltype(name(p.one(), r...)) {                    \
        return name(p.one(), r...);                                                                                \
    }
MT_CHECKED_ATOMIC(atomic_init)
MT_CHECKED_ATOMIC(atomic_store)
MT_CHECKED_ATOMIC(atomic_load)
MT_CHECKED_ATOMIC(atomic_store_explicit)
MT_CHECKED_ATOMIC(atomic_load_explicit)
MT_CHECKED_ATOMIC(atomic_exchange_explicit)
MT_CHECKED_ATOMIC(atomic_compare_exchange_weak_explicit)
MT_CHECKED_ATOMIC(atomic_compare_exchange_strong_explicit)
MT_CHECKED_ATOMIC(atomic_fetch_add_explicit)
MT_CHECKED_ATOMIC(atomic_fetch_sub_explicit)
MT_CHECKED_ATOMIC(atomic_fetch_and_explicit)
MT_CHECKED_ATOMIC(atomic_fetch_or_explicit)
MT_CHECKED_ATOMIC(atomic_fetch_xor_explicit)
MT_CHECKED_ATOMIC(atomic_fetch_min_explicit)
MT_CHECKED_ATOMIC(atomic_fetch_max_explicit)
#undef MT_CHECKED_ATOMIC

/* simdgroup_load and simdgroup_store through a checked pointer: each element they touch is checked. */
template <class T, int Cols, int Rows, class U>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d, device_ptr<U> src, ulong elements_per_row = Cols,
                           ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false,
                           uint32_t line = __builtin_LINE()) {
    _mt::mat_load(d, src, elements_per_row, matrix_origin, transpose_matrix, line);
}
template <class T, int Cols, int Rows, class U>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows>& a, device_ptr<U> dst, ulong elements_per_row = Cols,
                            ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false,
                            uint32_t line = __builtin_LINE()) {
    _mt::mat_store(a, dst, elements_per_row, matrix_origin, transpose_matrix, line);
}

}  // namespace metal

#endif
