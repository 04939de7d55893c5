/* mt_mpp.h - MetalPerformancePrimitives' tensor ops (namespace mpp::tensor_ops): matmul2d.
 *
 * Part of mt_tensor.h; include that instead.
 *
 * matmul2d<descriptor, execution_simdgroup> computes, for the M x N destination (tensor extents (N, M)),
 *     d[m][n] = (multiply_accumulate ? d[m][n] : 0) + sum over k of a[m][k] * b[k][n]
 * with the left operand's extents (K, M), or (M, K) when transpose_left, and the right operand's (N, K), or (K, N)
 * when transpose_right. Operands are tensors (elements outside their extents read as zero and are not written) or
 * the cooperative tensors of the same op (get_left_input_cooperative_tensor, get_right_input_cooperative_tensor,
 * get_destination_cooperative_tensor; their layout: mt_tensor.h). K is the descriptor's k, or, when that is
 * dynamic, the left tensor's extent.
 *
 * Precision (how Apple's neural accelerators compute is not documented; the choices below are the CPU device's):
 * - Inputs are widened to float. With relaxed_precision, float inputs lose their 13 low mantissa bits (rounded
 *   toward zero to 10 explicit bits, the float exponent range kept: TF32's format). Measured, not documented: MLX
 *   issue 4411 reports float32 GEMM operands cut to about 11 significant bits on M5 (applegpu_g17s); the 512^3
 *   float32 GEMM of jundot/omlx issue 2135 has a relative Frobenius error of 7.70e-4 on an M5 Max, which cutting
 *   toward zero reproduces (7.69e-4 for the same normal data) and rounding to nearest does not (2.9e-4). half and
 *   bfloat inputs have no more than 10 mantissa bits and stay exact.
 * - Products are summed in float, in k order, after the destination's own value (multiply_accumulate); the
 *   result is rounded to the destination's element type once, at the end of run() (assumed: Apple documents
 *   neither the order nor the accumulator width).
 *
 * Scopes. execution_simdgroup: run by all 32 lanes of a full simdgroup; run() publishes each lane's cooperative
 * operands in one simd exchange (which also finds a run that only some lanes reach: a fault), every lane computes
 * its own destination elements, and a second exchange keeps them from changing their operands before the others
 * have read them. execution_simdgroups<N> and execution_thread take tensor inputs only (the layout of their
 * cooperative inputs is refused): one thread computes every element, or the N simdgroups, which must be the whole
 * threadgroup, share them after a threadgroup barrier (a thread that does not reach run() faults there). The
 * destination of execution_simdgroups<N> may also be its cooperative tensor, spread over the threadgroup's threads
 * (mt_tensor.h), each thread computing its own elements; that of execution_thread is refused.
 *
 * Profiling (instrumented builds): a run counts 2 m n k FLOPs by input type (float, TF32 = float relaxed, half,
 * bfloat) and scope (once per simdgroup at execution_simdgroup, once per threadgroup at execution_simdgroups<N>,
 * per thread at execution_thread), and each element of its tensor operands read once (touch), not once per product.
 */
#ifndef METILE_MT_MPP_H
#define METILE_MT_MPP_H

namespace mpp {
namespace tensor_ops {

enum class reduction_operation { sum, max, min };

struct matmul2d_descriptor {
    enum class mode { multiply, multiply_accumulate };
    int m, n, k;
    bool transpose_left, transpose_right;
    bool relaxed_precision;
    mode matmul_mode;

    constexpr matmul2d_descriptor(int m_, int n_, int k_ = static_cast<int>(metal::dynamic_extent),
                                  bool transpose_left_ = false, bool transpose_right_ = false,
                                  bool relaxed_precision_ = false, mode matmul_mode_ = mode::multiply)
        : m(m_), n(n_), k(k_), transpose_left(transpose_left_), transpose_right(transpose_right_),
          relaxed_precision(relaxed_precision_), matmul_mode(matmul_mode_) {}
};

namespace _detail {
using metal::_mt::rm_t;

enum : uint32_t { S_RUN = 80, S_RUN_DONE = 81 };

/* a float cut to TF32's 10 mantissa bits, toward zero (NaN and infinity as they are) */
inline float relaxed(float v) {
    uint32_t u;
    __builtin_memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u &= 0xffffe000u;
    __builtin_memcpy(&v, &u, 4);
    return v;
}

template <class T> constexpr bool input_type =
    metal::is_same<metal::remove_cv_t<T>, float>::value || metal::is_same<metal::remove_cv_t<T>, half>::value ||
    metal::is_same<metal::remove_cv_t<T>, metal::bfloat>::value;

template <class T> inline float widen(const T& v, bool relax) {
    float f = float(v);
    if constexpr (metal::is_same<metal::remove_cv_t<T>, float>::value) {
        if (relax) f = relaxed(f);
    }
    return f;
}

template <class Op> struct element_of { typedef typename rm_t<Op>::element_type type; };

/* One operand as seen by every lane during run(): element (x, y) of its tile, in its own coordinates. */
template <class Op, bool Coop = metal::_mt::is_coop<Op>> struct view;
template <class Op> struct view<Op, true> {
    typedef typename rm_t<Op>::element_type T;
    typedef typename rm_t<Op>::layout L;
    const void* const* lanes;   /* each lane's element array */
    float get(int x, int y, bool relax) const {
        if (x < 0 || y < 0 || x >= L::width || y >= L::height) return 0.0f;
        uint32_t lane;
        int i;
        L::owner(x, y, lane, i);
        return widen(static_cast<const T*>(lanes[lane])[i], relax);
    }
};
template <class Op> struct view<Op, false> {
    const Op* t;
    float get(int x, int y, bool relax) const {
        const long c[2] = {x, y};
        return t->inside(c) ? widen(*t->address(c), relax) : 0.0f;
    }
};

template <class Scope> struct scope_of;
template <> struct scope_of<metal::execution_simdgroup> { static constexpr int simdgroups = 1, single = 0; };
template <> struct scope_of<metal::execution_thread> { static constexpr int simdgroups = 0, single = 1; };
template <int N> struct scope_of<metal::execution_simdgroups<N>> { static constexpr int simdgroups = N, single = 0; };

/* The first destination element this thread computes and the step to its next one, for an op over tensors only:
 * every element in one thread (execution_thread), or element i in thread i % (32 N) of the N simdgroups, which must
 * be the whole threadgroup and all reach run(): the threadgroup barrier there faults when one does not. */
template <class Scope> inline void tensor_share(uint32_t line, int& first, int& step) {
    if constexpr (scope_of<Scope>::single) {
        first = 0;
        step = 1;
    } else {
        constexpr int N = scope_of<Scope>::simdgroups;
        const mt_thread_pos* p = mt_current_pos();
        const uint32_t threads = p->threads_per_threadgroup[0] * p->threads_per_threadgroup[1] *
                                 p->threads_per_threadgroup[2];
        if (threads != uint32_t(N) * MT_SIMD_WIDTH)
            mt_kernel_fault(MT_FAULT_KERNEL, "matmul2d with execution_simdgroups<N> runs in a threadgroup of exactly "
                                             "N full simdgroups", line);
        mt_threadgroup_barrier(line);
        first = int(p->thread_index_in_threadgroup);
        step = N * int(MT_SIMD_WIDTH);
    }
}

/* The counters of a run's inputs (instrumented builds): float with relaxed_precision is TF32; a float operand beside
 * a half or bfloat one makes it a float op. */
template <class TL, class TR> constexpr uint32_t prof_type(bool relaxed) {
    using metal::is_same;
    return is_same<TL, float>::value || is_same<TR, float>::value ? (relaxed ? MT_PROF_TENSOR_TF32 : MT_PROF_TENSOR_FLOAT)
           : is_same<TL, metal::bfloat>::value || is_same<TR, metal::bfloat>::value ? MT_PROF_TENSOR_BFLOAT
                                                                                    : MT_PROF_TENSOR_HALF;
}

/* Instrumented builds: the threads that share a run read each element of a tensor operand's w x h tile once (thread
 * `first`, then every `step`-th), so that its traffic is counted once per run as the accelerator would move it; the
 * inner products then read the operands with counting paused. */
template <class Op> inline void touch(const Op& t, int w, int h, int first, int step) {
#ifdef MT_PROFILED_BUILD
    for (int i = first; i < w * h; i += step) {
        const long c[2] = {i % w, i / w};
        if (!t.inside(c)) continue;
        auto v = *t.address(c);
        __asm__ volatile("" : : "r"(&v) : "memory");
    }
#else
    (void)t, (void)w, (void)h, (void)first, (void)step;
#endif
}

template <matmul2d_descriptor D, class Scope, class L, class R, class Dst>
inline void run(const L& left, const R& right, Dst& dst, uint32_t line) {
    using namespace metal::_mt;
    static_assert(is_coop<L> || is_tensor<L>, "matmul2d::run: the left operand is neither a tensor nor a cooperative tensor");
    static_assert(is_coop<R> || is_tensor<R>, "matmul2d::run: the right operand is neither a tensor nor a cooperative tensor");
    static_assert(is_coop<Dst> || is_tensor<Dst>, "matmul2d::run: the destination is neither a tensor nor a cooperative tensor");
    static_assert(input_type<typename element_of<L>::type> && input_type<typename element_of<R>::type>,
                  "metile-unsupported: matmul2d inputs other than float, half and bfloat");
    static_assert(input_type<typename element_of<Dst>::type>,
                  "metile-unsupported: matmul2d destinations other than float, half and bfloat");
    static_assert(D.m > 0 && D.n > 0, "metile-unsupported: matmul2d with a dynamic m or n");
    constexpr bool coop_in = is_coop<L> || is_coop<R>;
    if constexpr (is_coop<L>) {
        static_assert(rm_t<L>::layout::width == (D.transpose_left ? D.m : D.k) &&
                      rm_t<L>::layout::height == (D.transpose_left ? D.k : D.m),
                      "matmul2d::run: the left cooperative tensor is not this op's left input");
    }
    if constexpr (is_coop<R>) {
        static_assert(rm_t<R>::layout::width == (D.transpose_right ? D.k : D.n) &&
                      rm_t<R>::layout::height == (D.transpose_right ? D.n : D.k),
                      "matmul2d::run: the right cooperative tensor is not this op's right input");
    }
    if constexpr (is_coop<Dst>) {
        static_assert(rm_t<Dst>::layout::width == D.n && rm_t<Dst>::layout::height == D.m,
                      "matmul2d::run: the destination cooperative tensor is not this op's destination");
    }
    int K = D.k;
    if constexpr (D.k < 0) {
        static_assert(!is_coop<L>, "metile-unsupported: a cooperative left input of a matmul2d whose k is dynamic");
        K = int(left.get_extent(D.transpose_left ? 1 : 0));
    }

    constexpr bool simdgroup = metal::is_same<Scope, metal::execution_simdgroup>::value;
    static_assert(simdgroup || !coop_in,
                  "metile-unsupported: cooperative inputs of a matmul2d whose execution scope is not "
                  "execution_simdgroup");
    static_assert(simdgroup || !is_coop<Dst> || scope_of<Scope>::simdgroups > 0,
                  "metile-unsupported: a cooperative destination of a matmul2d with execution_thread");
    const void* lanes_l[MT_SIMD_WIDTH] = {};
    const void* lanes_r[MT_SIMD_WIDTH] = {};
    uint32_t lane = 0;
    int first = 0, step = 1;
    if constexpr (!simdgroup) {
        tensor_share<Scope>(line, first, step);
    } else {   /* every lane takes part (an exchange tells), and publishes its cooperative operands */
        struct slot { const void* l; const void* r; } mine = {nullptr, nullptr};
        if constexpr (is_coop<L>) mine.l = left.e_;
        if constexpr (is_coop<R>) mine.r = right.e_;
        mt_exchange_view v;
        const unsigned char* base = mt_simd_exchange(&mine, sizeof mine, S_RUN, line, &v);
        if (v.live != 0xffffffffu)
            mt_kernel_fault(MT_FAULT_KERNEL, "matmul2d::run with execution_simdgroup is reached by only some lanes of "
                                             "a simdgroup (every lane of a full simdgroup must run it)", line);
        for (uint32_t j = 0; j < MT_SIMD_WIDTH; ++j) {
            slot s;
            __builtin_memcpy(&s, base + j * MT_SLOT_BYTES, sizeof s);
            lanes_l[j] = s.l;
            lanes_r[j] = s.r;
        }
        lane = v.lane;
        first = int(lane);
        step = int(MT_SIMD_WIDTH);
    }
    {   /* counts: the FLOPs by input type and scope, once per run, and the tensor operands' traffic */
        typedef metal::remove_cv_t<typename element_of<L>::type> TL;
        typedef metal::remove_cv_t<typename element_of<R>::type> TR;
        constexpr uint32_t type = prof_type<TL, TR>(D.relaxed_precision);
        const uint64_t flops = 2ull * uint64_t(D.m) * uint64_t(D.n) * uint64_t(K);
        if constexpr (simdgroup) {
            metal::_mt::prof_count(MT_PROF_TENSOR_FLOPS + type, flops, true, line);
            metal::_mt::prof_count(MT_PROF_TENSOR_RUNS + 1, 1, true, line);
        } else if constexpr (scope_of<Scope>::single) {
            metal::_mt::prof_count(MT_PROF_TENSOR_THREAD_FLOPS + type, flops, false, line);
            metal::_mt::prof_count(MT_PROF_TENSOR_RUNS + 0, 1, false, line);
        } else if (first == 0) {
            metal::_mt::prof_count(MT_PROF_TENSOR_FLOPS + type, flops, false, line);
            metal::_mt::prof_count(MT_PROF_TENSOR_RUNS + 2, 1, false, line);
        }
        if constexpr (!is_coop<L>) touch(left, D.transpose_left ? D.m : K, D.transpose_left ? K : D.m, first, step);
        if constexpr (!is_coop<R>) touch(right, D.transpose_right ? K : D.n, D.transpose_right ? D.n : K, first, step);
    }
    view<L> a;
    view<R> b;
    if constexpr (is_coop<L>) a.lanes = lanes_l; else a.t = &left;
    if constexpr (is_coop<R>) b.lanes = lanes_r; else b.t = &right;
    const bool relax = D.relaxed_precision;
    constexpr bool accumulate = D.matmul_mode == matmul2d_descriptor::mode::multiply_accumulate;
    typedef metal::remove_cv_t<typename element_of<Dst>::type> TD;
    auto dot = [&](int m, int n, float acc) {
        metal::_mt::prof_pause(true);
        for (int k = 0; k < K; ++k) {
            const float x = D.transpose_left ? a.get(m, k, relax) : a.get(k, m, relax);
            const float y = D.transpose_right ? b.get(k, n, relax) : b.get(n, k, relax);
            acc += x * y;
        }
        metal::_mt::prof_pause(false);
        return acc;
    };
    if constexpr (is_coop<Dst>) {   /* each thread its own elements: a lane of the simdgroup, or of the N */
        typedef typename rm_t<Dst>::layout LD;
        const uint32_t holder = simdgroup ? lane : uint32_t(first);
        for (int i = 0; i < LD::capacity; ++i) {
            if (!LD::valid(holder, i)) continue;
            int n, m;
            LD::coord(holder, i, n, m);
            dst.e_[i] = TD(dot(m, n, accumulate ? float(dst.e_[i]) : 0.0f));
        }
    } else {
        for (int idx = first; idx < D.m * D.n; idx += step) {
            const long c[2] = {idx % D.n, idx / D.n};
            if (!dst.inside(c)) continue;
            auto* p = dst.address(c);
            *p = TD(dot(int(c[1]), int(c[0]), accumulate ? float(*p) : 0.0f));
        }
    }
    if constexpr (coop_in) {
        const unsigned char done = 0;
        mt_exchange_view v;
        mt_simd_exchange(&done, 1, S_RUN_DONE, line, &v);
    }
}
}  // namespace _detail

template <matmul2d_descriptor Descriptor, class Scope, class... Args> class matmul2d {
    static_assert(_detail::scope_of<Scope>::simdgroups > 0 || _detail::scope_of<Scope>::single,
                  "matmul2d's scope is execution_thread, execution_simdgroup or execution_simdgroups<N>");
    static constexpr bool coop_scope = metal::is_same<Scope, metal::execution_simdgroup>::value;
    static constexpr int LX = Descriptor.transpose_left ? Descriptor.m : Descriptor.k;
    static constexpr int LY = Descriptor.transpose_left ? Descriptor.k : Descriptor.m;
    static constexpr int RX = Descriptor.transpose_right ? Descriptor.k : Descriptor.n;
    static constexpr int RY = Descriptor.transpose_right ? Descriptor.n : Descriptor.k;

  public:
    static constexpr matmul2d_descriptor descriptor = Descriptor;
    typedef Scope scope;

    template <class A, class B, class C, class Coord = int, class... More>
    using cooperative_tensor_left_input_t =
        metal::cooperative_tensor<A, metal::extents<Coord, size_t(LX), size_t(LY)>, metal::_mt::block_layout<LX, LY>>;
    template <class A, class B, class C, class Coord = int, class... More>
    using cooperative_tensor_right_input_t =
        metal::cooperative_tensor<B, metal::extents<Coord, size_t(RX), size_t(RY)>, metal::_mt::block_layout<RX, RY>>;
    /* a destination spread over the threads of N simdgroups (execution_simdgroups<N>), or a simdgroup's lanes */
    template <class Left, class Right, class C, class Coord = int, class... More>
    using cooperative_tensor_destination_t = metal::cooperative_tensor<
        C, metal::extents<Coord, size_t(Descriptor.n), size_t(Descriptor.m)>,
        metal::conditional_t<coop_scope, metal::_mt::block_layout<Descriptor.n, Descriptor.m>,
                                  metal::_mt::spread_layout<Descriptor.n, Descriptor.m,
                                                            (_detail::scope_of<Scope>::simdgroups > 0
                                                                 ? _detail::scope_of<Scope>::simdgroups : 1)>>>;

    template <class A, class B, class C, class Coord = int, class... More>
    auto get_left_input_cooperative_tensor() const {
        static_assert(coop_scope, "metile-unsupported: cooperative inputs of a matmul2d whose execution scope is "
                                  "not execution_simdgroup");
        static_assert(Descriptor.k > 0, "metile-unsupported: a cooperative left input of a matmul2d whose k is dynamic");
        return cooperative_tensor_left_input_t<A, B, C, Coord>{};
    }
    template <class A, class B, class C, class Coord = int, class... More>
    auto get_right_input_cooperative_tensor() const {
        static_assert(coop_scope, "metile-unsupported: cooperative inputs of a matmul2d whose execution scope is "
                                  "not execution_simdgroup");
        static_assert(Descriptor.k > 0, "metile-unsupported: a cooperative right input of a matmul2d whose k is dynamic");
        return cooperative_tensor_right_input_t<A, B, C, Coord>{};
    }
    template <class Left, class Right, class C, class Coord = int, class... More>
    auto get_destination_cooperative_tensor() const {
        static_assert(_detail::scope_of<Scope>::simdgroups > 0, "metile-unsupported: a cooperative destination of a "
                                                                "matmul2d with execution_thread");
        return cooperative_tensor_destination_t<Left, Right, C, Coord>{};
    }
    /* a cooperative input made from another cooperative tensor, and the test whether one can be */
    template <class A, class B, class C, class Coord = int, class... More, class Src>
    int get_left_input_cooperative_tensor(const Src&) const {
        static_assert(metal::_mt::never<Src>, "metile-unsupported: cooperative inputs made from cooperative tensors");
        return 0;
    }
    template <class A, class B, class C, class Coord = int, class... More, class Src>
    int get_right_input_cooperative_tensor(const Src&) const {
        static_assert(metal::_mt::never<Src>, "metile-unsupported: cooperative inputs made from cooperative tensors");
        return 0;
    }
    template <class... X, class Src> bool is_compatible_as_left_input(const Src&) const {
        static_assert(metal::_mt::never<Src>, "metile-unsupported: is_compatible_as_left_input");
        return false;
    }
    template <class... X, class Src> bool is_compatible_as_right_input(const Src&) const {
        static_assert(metal::_mt::never<Src>, "metile-unsupported: is_compatible_as_right_input");
        return false;
    }
    template <class Left, class Right, class C, class Coord = int, class... More>
    int get_row_reduction_destination_cooperative_tensor() const {
        static_assert(metal::_mt::never<Left>, "metile-unsupported: matmul2d row reduction cooperative tensors");
        return 0;
    }
    template <class Left, class Right, class C, class Coord = int, class... More>
    int get_column_reduction_destination_cooperative_tensor() const {
        static_assert(metal::_mt::never<Left>, "metile-unsupported: matmul2d column reduction cooperative tensors");
        return 0;
    }

    template <class L, class R, class Dst>
    void run(const L& left, const R& right, Dst&& destination, uint32_t line = __builtin_LINE()) const {
        _detail::run<Descriptor, Scope>(left, right, destination, line);
    }
};

template <class... T> void reduce_rows(T&&...) {
    static_assert(metal::_mt::never<T...>, "metile-unsupported: reduce_rows of cooperative tensors");
}
template <class... T> void reduce_columns(T&&...) {
    static_assert(metal::_mt::never<T...>, "metile-unsupported: reduce_columns of cooperative tensors");
}
template <class... T> bool is_iterator_compatible(T&&...) {
    static_assert(metal::_mt::never<T...>, "metile-unsupported: is_iterator_compatible of cooperative tensors");
    return false;
}

}  // namespace tensor_ops
}  // namespace mpp

#endif
