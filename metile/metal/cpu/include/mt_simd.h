/* mt_simd.h - barriers, simd-group and quad-group collectives (<metal_compute>, <metal_simdgroup>).
 *
 * Part of metal_compat.h; include that instead.
 *
 * Every collective is one mt_simd_exchange: each lane publishes its value, waits for the lanes of its simdgroup
 * that take part, and computes its own result from their slots, visiting lanes in increasing order so that all
 * lanes get bit-identical results (a simdgroup-wide reduction is computed once, by the first lane to resume, and read
 * by the others: see `once`). Each collective kind passes its own `site` number; the .metal line of the call
 * comes from a defaulted `__builtin_LINE()` argument (the front end's #line directives make it the .metal line).
 * The runtime lets the lanes that reach the same (site, line) in the same arm, loop iteration and call (the frames
 * of mt_diverge.h) take part, as Apple GPUs run a collective over the active lanes in divergent control flow (see
 * mt_runtime.h). Reading a lane that takes no part (it is elsewhere,
 * exited, or beyond a partial simdgroup) gives the caller's own value (Metal leaves it undefined); reductions,
 * scans, votes and broadcast_first cover the lanes that take part only. Quads are lanes 4q .. 4q+3.
 */
#ifndef METILE_MT_SIMD_H
#define METILE_MT_SIMD_H

namespace metal {

inline void threadgroup_barrier(mem_flags flags = mem_flags::mem_none, uint32_t line = __builtin_LINE()) {
    (void)flags;
    mt_threadgroup_barrier(line);
}
inline void simdgroup_barrier(mem_flags flags = mem_flags::mem_none, uint32_t line = __builtin_LINE()) {
    (void)flags;
    mt_simdgroup_barrier(line);
}
inline void atomic_thread_fence(mem_flags flags, memory_order order, thread_scope scope = thread_scope_device) {
    (void)flags;
    (void)scope;
    __atomic_thread_fence(int(order));
}

/* A ballot: bit j is lane j's vote (quad_vote: bit j is quad lane j). all() and any() look at the lanes that were
 * live when the vote was taken. */
struct simd_vote {
    typedef uint64_t vote_t;
    explicit constexpr simd_vote(vote_t v = 0) : v_(v), live_(0xffffffffu) {}
    constexpr simd_vote(vote_t v, vote_t live) : v_(v), live_(live) {}
    explicit constexpr operator vote_t() const { return v_; }
    constexpr bool all() const { return (v_ & live_) == live_; }
    constexpr bool any() const { return v_ != 0; }

  private:
    vote_t v_, live_;
};
struct quad_vote {
    typedef uint16_t vote_t;
    explicit constexpr quad_vote(vote_t v = 0) : v_(v), live_(0xf) {}
    constexpr quad_vote(vote_t v, vote_t live) : v_(v), live_(live) {}
    explicit constexpr operator vote_t() const { return v_; }
    constexpr bool all() const { return (v_ & live_) == live_; }
    constexpr bool any() const { return v_ != 0; }

  private:
    vote_t v_, live_;
};

namespace _mt {

enum site : uint32_t {
    S_SHUFFLE = 1, S_SHUFFLE_XOR, S_SHUFFLE_UP, S_SHUFFLE_DOWN, S_ROTATE_UP, S_ROTATE_DOWN, S_FILL_UP, S_FILL_DOWN,
    S_BROADCAST, S_BROADCAST_FIRST, S_SUM, S_PRODUCT, S_MIN, S_MAX, S_AND, S_OR, S_XOR, S_PREFIX_INC_SUM,
    S_PREFIX_EXC_SUM, S_PREFIX_INC_PRODUCT, S_PREFIX_EXC_PRODUCT, S_ALL, S_ANY, S_BALLOT, S_ACTIVE_MASK, S_IS_FIRST,
    S_QUAD = 32, /* quad_* collectives use S_QUAD + the simd site of the same kind */
    S_MATRIX_MULTIPLY = MT_SITE_MATRIX_PRODUCT, /* mt_simd_matrix_product (mt_matrix.h) */
};

/* One exchange: publish v, then read any live lane's slot. */
struct xchg : mt_exchange_view { /* live, lane */
    const unsigned char* base;
    bool has(uint32_t j) const { return j < MT_SIMD_WIDTH && ((live >> j) & 1u); }
    template <class V> V get(uint32_t j) const {
        V v;
        __builtin_memcpy(&v, base + j * MT_SLOT_BYTES, sizeof(V));
        return v;
    }
};
template <class V> inline xchg exchange(const V& v, uint32_t site, uint32_t line) {
    static_assert(sizeof(V) <= MT_SLOT_BYTES, "a simd collective can exchange at most MT_SLOT_BYTES per lane");
    xchg x;
    x.base = mt_simd_exchange(&v, sizeof(V), site, line, &x);
    return x;
}

/* Value from lane j if it is live, else from this lane. */
template <class V> inline V pull(const xchg& x, uint32_t j, const V& own) { return x.has(j) ? x.get<V>(j) : own; }

/* Live lanes in [lo, hi) */
inline uint32_t lanes_in(const xchg& x, uint32_t lo, uint32_t hi) {
    const uint64_t below_hi = (uint64_t(1) << hi) - 1u, below_lo = (uint64_t(1) << lo) - 1u;
    return x.live & uint32_t(below_hi & ~below_lo);
}
/* The live lanes of [lo, hi), combined with op in increasing lane order, starting from init. */
template <class V, class Op> inline V fold(const xchg& x, uint32_t lo, uint32_t hi, V init, Op op) {
    V acc = init;
    for (uint32_t m = lanes_in(x, lo, hi); m; m &= m - 1u) acc = op(acc, x.get<V>(uint32_t(__builtin_ctz(m))));
    return acc;
}
struct add_op { template <class V> V operator()(const V& a, const V& b) const { return V(a + b); } };
struct mul_op { template <class V> V operator()(const V& a, const V& b) const { return V(a * b); } };
struct min_op { template <class V> V operator()(const V& a, const V& b) const { return V(metal::min(a, b)); } };
struct max_op { template <class V> V operator()(const V& a, const V& b) const { return V(metal::max(a, b)); } };
struct and_op { template <class V> V operator()(const V& a, const V& b) const { return V(a & b); } };
struct or_op { template <class V> V operator()(const V& a, const V& b) const { return V(a | b); } };
struct xor_op { template <class V> V operator()(const V& a, const V& b) const { return V(a ^ b); } };

/* The same, seeded with the first live lane's value (min, max, and, or); `own` when no lane of [lo, hi) is live. */
template <class V, class Op> inline V reduce(const xchg& x, uint32_t lo, uint32_t hi, const V& own, Op op) {
    uint32_t m = lanes_in(x, lo, hi);
    if (m == 0) return own;
    V acc = x.get<V>(uint32_t(__builtin_ctz(m)));
    for (m &= m - 1u; m; m &= m - 1u) acc = op(acc, x.get<V>(uint32_t(__builtin_ctz(m))));
    return acc;
}

/* A reduction every lane of the group gets the same result of (sum, product, min, max, and, or, xor over the
 * simdgroup), computed once: each lane publishes its value, a `done` word and room for the result; the first lane to
 * resume after the exchange folds the slots with `fn` and leaves the result in the lowest taking lane's slot, the
 * others read it. No exchange of the simdgroup completes before every lane of this one has resumed (each resumed
 * lane runs before the next completion needs it suspended again), and a lane's slot is written again only by its
 * own next exchange, so the slots hold until every lane has read. Quad groups, and values too wide for a slot with
 * room for their result, fold per lane. */
template <uint32_t G, class V, class Fn> inline V once(const V& v, uint32_t site, uint32_t line, Fn fn) {
    constexpr uint32_t kDone = (sizeof(V) + 3u) & ~3u, kResult = kDone + 4u;
    if constexpr (G != MT_SIMD_WIDTH || kResult + sizeof(V) > MT_SLOT_BYTES) {
        return fn(exchange(v, site, line));
    } else {
        unsigned char mine[kResult];
        __builtin_memcpy(mine, &v, sizeof(V));
        __builtin_memset(mine + sizeof(V), 0, kResult - sizeof(V));
        xchg x;
        x.base = mt_simd_exchange(mine, kResult, site, line, &x);
        /* the runtime's slot array, writable (see above); the interface's const keeps other collectives read-only */
        unsigned char* lead = const_cast<unsigned char*>(x.base) + __builtin_ctz(x.live) * MT_SLOT_BYTES;
        uint32_t done;
        __builtin_memcpy(&done, lead + kDone, sizeof done);
        V r;
        if (done) {
            __builtin_memcpy(&r, lead + kResult, sizeof(V));
            return r;
        }
        r = fn(x);
        __builtin_memcpy(lead + kResult, &r, sizeof(V));
        done = 1u;
        __builtin_memcpy(lead + kDone, &done, sizeof done);
        return r;
    }
}

template <class X> using cval_t = enable_if_t<(vn<X> >= 0), val_t<X>>;
template <class X> using cnum_t = enable_if_t<kind<elem_t<X>>::value >= 2, val_t<X>>;
template <class X> using cint_t = enable_if_t<kind<elem_t<X>>::value == 2 || kind<elem_t<X>>::value == 1, val_t<X>>;

}  // namespace _mt

/* Collectives over a group of G lanes (32: simd, 4: quad); B is the group's first lane, L the lane in the group. */
#define MT_GROUP(G) const uint32_t B = x.lane & ~(G - 1u), L = x.lane & (G - 1u); (void)B; (void)L;
#define MT_COLLECTIVES(P, G, SITE0)                                                                                   \
    template <class X, class V = _mt::cval_t<X>>                                                                    \
    inline V P##_shuffle(const X& data, ushort lane, uint32_t line = __builtin_LINE()) {                            \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_SHUFFLE, line); MT_GROUP(G)                      \
        return lane < G ? _mt::pull(x, B + lane, v) : v;                                                            \
    }                                                                                                               \
    template <class X, class V = _mt::cval_t<X>>                                                                    \
    inline V P##_shuffle_xor(const X& data, ushort mask, uint32_t line = __builtin_LINE()) {                        \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_SHUFFLE_XOR, line); MT_GROUP(G)                  \
        return (L ^ mask) < G ? _mt::pull(x, B + (L ^ mask), v) : v;                                                \
    }                                                                                                               \
    template <class X, class V = _mt::cval_t<X>>                                                                    \
    inline V P##_shuffle_up(const X& data, ushort delta, uint32_t line = __builtin_LINE()) {                        \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_SHUFFLE_UP, line); MT_GROUP(G)                   \
        return L >= delta ? _mt::pull(x, B + L - delta, v) : v;                                                     \
    }                                                                                                               \
    template <class X, class V = _mt::cval_t<X>>                                                                    \
    inline V P##_shuffle_down(const X& data, ushort delta, uint32_t line = __builtin_LINE()) {                      \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_SHUFFLE_DOWN, line); MT_GROUP(G)                 \
        return L + delta < G ? _mt::pull(x, B + L + delta, v) : v;                                                  \
    }                                                                                                               \
    template <class X, class V = _mt::cval_t<X>>                                                                    \
    inline V P##_shuffle_rotate_up(const X& data, ushort delta, uint32_t line = __builtin_LINE()) {                 \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_ROTATE_UP, line); MT_GROUP(G)                    \
        return _mt::pull(x, B + (L + G - delta % G) % G, v);                                                        \
    }                                                                                                               \
    template <class X, class V = _mt::cval_t<X>>                                                                    \
    inline V P##_shuffle_rotate_down(const X& data, ushort delta, uint32_t line = __builtin_LINE()) {               \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_ROTATE_DOWN, line); MT_GROUP(G)                  \
        return _mt::pull(x, B + (L + delta) % G, v);                                                                \
    }                                                                                                               \
    template <class X, class F, class V = _mt::cval_t<X>>                                                           \
    inline V P##_shuffle_and_fill_up(const X& data, const F& filling, ushort delta, ushort modulo = G,              \
                                     uint32_t line = __builtin_LINE()) {                                            \
        struct { V d, f; } p{V(data), V(filling)};                                                                  \
        _mt::xchg x = _mt::exchange(p, SITE0 + _mt::S_FILL_UP, line); MT_GROUP(G)                                 \
        const uint32_t m = modulo ? modulo : G, seg = B + L - L % m;                                                \
        const int src = int(L % m) - int(delta);                                                                    \
        if (src >= 0) return _mt::pull(x, seg + uint32_t(src), p).d;                                                \
        return _mt::pull(x, seg + uint32_t(src + int(m)), p).f;                                                     \
    }                                                                                                               \
    template <class X, class F, class V = _mt::cval_t<X>>                                                          \
    inline V P##_shuffle_and_fill_down(const X& data, const F& filling, ushort delta, ushort modulo = G,            \
                                       uint32_t line = __builtin_LINE()) {                                          \
        struct { V d, f; } p{V(data), V(filling)};                                                                  \
        _mt::xchg x = _mt::exchange(p, SITE0 + _mt::S_FILL_DOWN, line); MT_GROUP(G)                               \
        const uint32_t m = modulo ? modulo : G, seg = B + L - L % m, src = L % m + delta;                           \
        if (src < m) return _mt::pull(x, seg + src, p).d;                                                           \
        return _mt::pull(x, seg + src - m, p).f;                                                                    \
    }                                                                                                               \
    template <class X, class V = _mt::cval_t<X>>                                                                    \
    inline V P##_broadcast(const X& data, ushort lane, uint32_t line = __builtin_LINE()) {                          \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_BROADCAST, line); MT_GROUP(G)                    \
        return lane < G ? _mt::pull(x, B + lane, v) : v;                                                            \
    }                                                                                                               \
    template <class X, class V = _mt::cval_t<X>>                                                                    \
    inline V P##_broadcast_first(const X& data, uint32_t line = __builtin_LINE()) {                                 \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_BROADCAST_FIRST, line); MT_GROUP(G)              \
        for (uint32_t j = B; j < B + G; ++j) if (x.has(j)) return x.get<V>(j);                                      \
        return v;                                                                                                   \
    }                                                                                                               \
    template <class X, class V = _mt::cnum_t<X>> inline V P##_sum(const X& data, uint32_t line = __builtin_LINE()) { \
        V v(data);                                                                                                  \
        return _mt::once<G>(v, SITE0 + _mt::S_SUM, line, [&](const _mt::xchg& x) {                                  \
            MT_GROUP(G) return _mt::fold(x, B, B + G, V(0), _mt::add_op());                                         \
        });                                                                                                         \
    }                                                                                                               \
    template <class X, class V = _mt::cnum_t<X>>                                                                    \
    inline V P##_product(const X& data, uint32_t line = __builtin_LINE()) {                                         \
        V v(data);                                                                                                  \
        return _mt::once<G>(v, SITE0 + _mt::S_PRODUCT, line, [&](const _mt::xchg& x) {                              \
            MT_GROUP(G) return _mt::fold(x, B, B + G, V(1), _mt::mul_op());                                         \
        });                                                                                                         \
    }                                                                                                               \
    template <class X, class V = _mt::cnum_t<X>> inline V P##_min(const X& data, uint32_t line = __builtin_LINE()) { \
        V v(data);                                                                                                  \
        return _mt::once<G>(v, SITE0 + _mt::S_MIN, line, [&](const _mt::xchg& x) {                                  \
            MT_GROUP(G) return _mt::reduce(x, B, B + G, v, _mt::min_op());                                          \
        });                                                                                                         \
    }                                                                                                               \
    template <class X, class V = _mt::cnum_t<X>> inline V P##_max(const X& data, uint32_t line = __builtin_LINE()) { \
        V v(data);                                                                                                  \
        return _mt::once<G>(v, SITE0 + _mt::S_MAX, line, [&](const _mt::xchg& x) {                                  \
            MT_GROUP(G) return _mt::reduce(x, B, B + G, v, _mt::max_op());                                          \
        });                                                                                                         \
    }                                                                                                               \
    template <class X, class V = _mt::cint_t<X>> inline V P##_and(const X& data, uint32_t line = __builtin_LINE()) { \
        V v(data);                                                                                                  \
        return _mt::once<G>(v, SITE0 + _mt::S_AND, line, [&](const _mt::xchg& x) {                                  \
            MT_GROUP(G) return _mt::reduce(x, B, B + G, v, _mt::and_op());                                          \
        });                                                                                                         \
    }                                                                                                               \
    template <class X, class V = _mt::cint_t<X>> inline V P##_or(const X& data, uint32_t line = __builtin_LINE()) { \
        V v(data);                                                                                                  \
        return _mt::once<G>(v, SITE0 + _mt::S_OR, line, [&](const _mt::xchg& x) {                                   \
            MT_GROUP(G) return _mt::reduce(x, B, B + G, v, _mt::or_op());                                           \
        });                                                                                                         \
    }                                                                                                               \
    template <class X, class V = _mt::cint_t<X>> inline V P##_xor(const X& data, uint32_t line = __builtin_LINE()) { \
        V v(data);                                                                                                  \
        return _mt::once<G>(v, SITE0 + _mt::S_XOR, line, [&](const _mt::xchg& x) {                                  \
            MT_GROUP(G) return _mt::fold(x, B, B + G, V(0), _mt::xor_op());                                         \
        });                                                                                                         \
    }                                                                                                               \
    template <class X, class V = _mt::cnum_t<X>>                                                                    \
    inline V P##_prefix_inclusive_sum(const X& data, uint32_t line = __builtin_LINE()) {                            \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_PREFIX_INC_SUM, line); MT_GROUP(G)               \
        return _mt::fold(x, B, x.lane + 1, V(0), _mt::add_op());                                                    \
    }                                                                                                               \
    template <class X, class V = _mt::cnum_t<X>>                                                                    \
    inline V P##_prefix_exclusive_sum(const X& data, uint32_t line = __builtin_LINE()) {                            \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_PREFIX_EXC_SUM, line); MT_GROUP(G)               \
        return _mt::fold(x, B, x.lane, V(0), _mt::add_op());                                                        \
    }                                                                                                               \
    template <class X, class V = _mt::cnum_t<X>>                                                                    \
    inline V P##_prefix_inclusive_product(const X& data, uint32_t line = __builtin_LINE()) {                        \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_PREFIX_INC_PRODUCT, line); MT_GROUP(G)           \
        return _mt::fold(x, B, x.lane + 1, V(1), _mt::mul_op());                                                    \
    }                                                                                                               \
    template <class X, class V = _mt::cnum_t<X>>                                                                    \
    inline V P##_prefix_exclusive_product(const X& data, uint32_t line = __builtin_LINE()) {                        \
        V v(data); _mt::xchg x = _mt::exchange(v, SITE0 + _mt::S_PREFIX_EXC_PRODUCT, line); MT_GROUP(G)           \
        return _mt::fold(x, B, x.lane, V(1), _mt::mul_op());                                                        \
    }                                                                                                               \
    inline bool P##_all(bool expr, uint32_t line = __builtin_LINE()) {                                              \
        _mt::xchg x = _mt::exchange(expr, SITE0 + _mt::S_ALL, line); MT_GROUP(G)                                  \
        for (uint32_t j = B; j < B + G; ++j) if (x.has(j) && !x.get<bool>(j)) return false;                         \
        return true;                                                                                                \
    }                                                                                                               \
    inline bool P##_any(bool expr, uint32_t line = __builtin_LINE()) {                                              \
        _mt::xchg x = _mt::exchange(expr, SITE0 + _mt::S_ANY, line); MT_GROUP(G)                                  \
        for (uint32_t j = B; j < B + G; ++j) if (x.has(j) && x.get<bool>(j)) return true;                           \
        return false;                                                                                               \
    }                                                                                                               \
    inline P##_vote P##_ballot(bool expr, uint32_t line = __builtin_LINE()) {                                       \
        _mt::xchg x = _mt::exchange(expr, SITE0 + _mt::S_BALLOT, line); MT_GROUP(G)                               \
        P##_vote::vote_t v = 0, live = 0;                                                                           \
        for (uint32_t j = 0; j < G; ++j) if (x.has(B + j)) {                                                        \
            live |= P##_vote::vote_t(1) << j;                                                                       \
            if (x.get<bool>(B + j)) v |= P##_vote::vote_t(1) << j;                                                  \
        }                                                                                                           \
        return P##_vote(v, live);                                                                                   \
    }                                                                                                               \
    inline P##_vote P##_active_threads_mask(uint32_t line = __builtin_LINE()) {                                     \
        _mt::xchg x = _mt::exchange(true, SITE0 + _mt::S_ACTIVE_MASK, line); MT_GROUP(G)                          \
        P##_vote::vote_t live = P##_vote::vote_t((x.live >> B) & ((uint64_t(1) << G) - 1u));                        \
        return P##_vote(live, live);                                                                                \
    }                                                                                                               \
    inline bool P##_is_first(uint32_t line = __builtin_LINE()) {                                                    \
        _mt::xchg x = _mt::exchange(true, SITE0 + _mt::S_IS_FIRST, line); MT_GROUP(G)                             \
        for (uint32_t j = B; j < B + G; ++j) if (x.has(j)) return j == x.lane;                                      \
        return true;                                                                                                \
    }

MT_COLLECTIVES(simd, 32u, 0u)
MT_COLLECTIVES(quad, 4u, _mt::S_QUAD)
#undef MT_COLLECTIVES
#undef MT_GROUP

}  // namespace metal

#endif
