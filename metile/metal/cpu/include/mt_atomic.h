/* mt_atomic.h - atomics (<metal_atomic>): atomic<T>, atomic_int, atomic_uint, atomic_bool, atomic_float, and the
 * *_explicit functions on pointers to them (device or threadgroup: address spaces are not types here).
 *
 * Part of metal_compat.h; include that instead.
 *
 * Operations are real atomic operations (compiler __atomic builtins): device memory is shared by the runtime's
 * worker threads. GPU threads are cooperative fibers, so a thread spinning on a value that another thread of its
 * own worker must change would never let it run: atomic_load_explicit and failed compare-exchanges therefore call
 * mt_yield() every 64th time (counted per OS thread). Float add/sub/min/max and integer min/max are
 * compare-exchange loops.
 */
#ifndef METILE_MT_ATOMIC_H
#define METILE_MT_ATOMIC_H

namespace metal {

template <class T> struct atomic {
    static_assert(_mt::kind<T>::value != 0 && sizeof(T) <= 8, "atomic<T> needs a scalar T of at most 8 bytes");
    alignas(sizeof(T)) T v_;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<bool> atomic_bool;
typedef atomic<float> atomic_float;
typedef atomic<long> atomic_long;
typedef atomic<ulong> atomic_ulong;

namespace _mt {
inline void spin_hint() {
    static thread_local uint32_t calls;
    if ((++calls & 63u) == 0) mt_yield();
}
template <class T> inline T aload(const volatile atomic<T>* o, int order) {
    T r;
    __atomic_load(const_cast<T*>(&o->v_), &r, order);
    return r;
}
template <class T> inline bool acas(volatile atomic<T>* o, T* expected, T desired, bool weak, int s, int f) {
    return __atomic_compare_exchange(const_cast<T*>(&o->v_), expected, &desired, weak, s, f);
}
/* fetch-op by compare-exchange: returns the old value */
template <class T, class Op> inline T fetch_cas(volatile atomic<T>* o, T arg, int order, Op op) {
    T old = aload(o, __ATOMIC_RELAXED);
    while (!acas(o, &old, T(op(old, arg)), true, order, __ATOMIC_RELAXED)) {
    }
    return old;
}
struct cas_add { template <class T> T operator()(T a, T b) const { return a + b; } };
struct cas_sub { template <class T> T operator()(T a, T b) const { return a - b; } };
struct cas_min { template <class T> T operator()(T a, T b) const { return b < a ? b : a; } };
struct cas_max { template <class T> T operator()(T a, T b) const { return a < b ? b : a; } };
}  // namespace _mt

/* Metal 3.2's trailing thread_scope argument is accepted and ignored (every operation is device-wide here). */
#define MT_SCOPE thread_scope = thread_scope_device
template <class T, class U> inline void atomic_init(volatile atomic<T>* obj, U value) {
    T v = T(value);
    __atomic_store(const_cast<T*>(&obj->v_), &v, __ATOMIC_RELAXED);
}
template <class T, class U>
inline void atomic_store_explicit(volatile atomic<T>* obj, U desired, memory_order order, MT_SCOPE) {
    T v = T(desired);
    __atomic_store(const_cast<T*>(&obj->v_), &v, int(order));
}
template <class T> inline T atomic_load_explicit(const volatile atomic<T>* obj, memory_order order, MT_SCOPE) {
    _mt::spin_hint();
    return _mt::aload(obj, int(order));
}
template <class T, class U>
inline T atomic_exchange_explicit(volatile atomic<T>* obj, U desired, memory_order order, MT_SCOPE) {
    T v = T(desired), r;
    __atomic_exchange(const_cast<T*>(&obj->v_), &v, &r, int(order));
    return r;
}
template <class T, class U>
inline bool atomic_compare_exchange_weak_explicit(volatile atomic<T>* obj, T* expected, U desired,
                                                  memory_order success, memory_order failure, MT_SCOPE) {
    if (_mt::acas(obj, expected, T(desired), true, int(success), int(failure))) return true;
    _mt::spin_hint();
    return false;
}
template <class T, class U>
inline bool atomic_compare_exchange_strong_explicit(volatile atomic<T>* obj, T* expected, U desired,
                                                    memory_order success, memory_order failure, MT_SCOPE) {
    if (_mt::acas(obj, expected, T(desired), false, int(success), int(failure))) return true;
    _mt::spin_hint();
    return false;
}

#define MT_ATOMIC_FETCH_INT(name, builtin)                                                                        \
    template <class T, class U, _mt::enable_if_t<_mt::is_int<T>, int> = 0>                                         \
    inline T atomic_fetch_##name##_explicit(volatile atomic<T>* obj, U arg, memory_order order, MT_SCOPE) {       \
        return builtin(const_cast<T*>(&obj->v_), T(arg), int(order));                                             \
    }
MT_ATOMIC_FETCH_INT(and, __atomic_fetch_and)
MT_ATOMIC_FETCH_INT(or, __atomic_fetch_or)
MT_ATOMIC_FETCH_INT(xor, __atomic_fetch_xor)
#undef MT_ATOMIC_FETCH_INT
template <class T, class U>
inline T atomic_fetch_add_explicit(volatile atomic<T>* obj, U arg, memory_order order, MT_SCOPE) {
    if constexpr (_mt::is_int<T>) return __atomic_fetch_add(const_cast<T*>(&obj->v_), T(arg), int(order));
    else return _mt::fetch_cas(obj, T(arg), int(order), _mt::cas_add());
}
template <class T, class U>
inline T atomic_fetch_sub_explicit(volatile atomic<T>* obj, U arg, memory_order order, MT_SCOPE) {
    if constexpr (_mt::is_int<T>) return __atomic_fetch_sub(const_cast<T*>(&obj->v_), T(arg), int(order));
    else return _mt::fetch_cas(obj, T(arg), int(order), _mt::cas_sub());
}
template <class T, class U>
inline T atomic_fetch_min_explicit(volatile atomic<T>* obj, U arg, memory_order order, MT_SCOPE) {
    return _mt::fetch_cas(obj, T(arg), int(order), _mt::cas_min());
}
template <class T, class U>
inline T atomic_fetch_max_explicit(volatile atomic<T>* obj, U arg, memory_order order, MT_SCOPE) {
    return _mt::fetch_cas(obj, T(arg), int(order), _mt::cas_max());
}
#undef MT_SCOPE

/* The forms without _explicit are sequentially consistent. */
template <class T, class U> inline void atomic_store(volatile atomic<T>* obj, U desired) {
    atomic_store_explicit(obj, desired, memory_order_seq_cst);
}
template <class T> inline T atomic_load(const volatile atomic<T>* obj) {
    return atomic_load_explicit(obj, memory_order_seq_cst);
}

}  // namespace metal

#endif
