/* mt_matrix.h - simdgroup_matrix<T, 8, 8> (<metal_simdgroup_matrix>) for T = float, half, bfloat.
 *
 * Part of metal_compat.h; include that instead.
 *
 * A simdgroup matrix is spread over the 32 lanes of a simdgroup, two elements per lane, in Apple's layout: lane l
 * holds thread_elements()[e] = element (row, col) with
 *     row = (l / 16) * 4 + (l / 2) % 4,   col = ((l / 8) % 2) * 4 + (l % 2) * 2 + e
 * (so the four lanes of a row are {l, l^1, l^8, l^9}). Loads and stores are per lane and need no exchange;
 * simdgroup_multiply_accumulate exchanges each lane's elements of A and B once, and the runtime computes the product
 * for all when the exchange completes (see mat_product), accumulating in float in k order 0..7.
 */
#ifndef METILE_MT_MATRIX_H
#define METILE_MT_MATRIX_H

namespace metal {
namespace _mt {
inline uint32_t mat_lane() { return mt_current_pos()->thread_index_in_simdgroup; }
inline uint32_t mat_row(uint32_t lane) { return (lane / 16u) * 4u + (lane / 2u) % 4u; }
inline uint32_t mat_col(uint32_t lane) { return ((lane / 8u) % 2u) * 4u + (lane % 2u) * 2u; } /* of element 0 */
inline uint32_t mat_lane_of(uint32_t row, uint32_t col) {
    return (col / 2u) % 2u + 2u * (row % 4u) + 8u * (col / 4u) + 16u * (row / 4u);
}

/* THE ONE PLACE that decides where simdgroup_load / simdgroup_store find matrix element (row, col):
 *   src[(origin.y + row) * elements_per_row + origin.x + col]              without transpose,
 *   src[(origin.y + col) * elements_per_row + origin.x + row]              with transpose_matrix = true.
 * matrix_origin is taken in the coordinates of the memory (x: column offset, y: row offset) in both cases. Apple
 * does not document the transposed case; this reading keeps a transposed load of a block of a row-major array
 * (`simdgroup_load(m, p, ld, ulong2(k, 0), true)` reads columns k..k+7 of rows 0..7) inside that block. */
inline ulong mat_offset(uint32_t row, uint32_t col, ulong elements_per_row, ulong2 origin, bool transpose) {
    return transpose ? (origin.y + col) * elements_per_row + origin.x + row
                     : (origin.y + row) * elements_per_row + origin.x + col;
}

/* Instrumented builds (the sanitizer's, which profiling runs too) tell the runtime of each simdgroup_matrix load,
 * store and multiply (mt_prof_event); other builds carry no trace of it. */
#if defined(__SANITIZE_THREAD__)
#define MT_PROFILED_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MT_PROFILED_BUILD 1
#endif
#endif
template <class T> constexpr uint32_t prof_dtype() {
    return is_same<T, float>::value ? 0u : is_same<T, half>::value ? 1u : is_same<T, bfloat>::value ? 2u : 3u;
}
template <class T> inline void prof_event(uint32_t kind, uint32_t line) {
#ifdef MT_PROFILED_BUILD
    mt_prof_event(kind, prof_dtype<T>(), line);
#else
    (void)kind;
    (void)line;
#endif
}
}  // namespace _mt

template <class T, int Cols, int Rows> struct simdgroup_matrix {
    static_assert(Cols == 8 && Rows == 8, "the CPU device supports 8x8 simdgroup matrices only");
    vec<T, 2> e_;

    simdgroup_matrix() = default;
    /* A diagonal matrix: `d` on the diagonal, zero elsewhere. */
    simdgroup_matrix(T d) {
        const uint32_t lane = _mt::mat_lane(), row = _mt::mat_row(lane), col = _mt::mat_col(lane);
        e_.v_[0] = row == col ? d : T(0);
        e_.v_[1] = row == col + 1u ? d : T(0);
    }
    vec<T, 2>& thread_elements() { return e_; }
    const vec<T, 2>& thread_elements() const { return e_; }
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows = Cols>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(const T value) {
    simdgroup_matrix<T, Cols, Rows> m;
    m.e_.v_[0] = value;
    m.e_.v_[1] = value;
    return m;
}

namespace _mt {
/* The bodies of simdgroup_load and simdgroup_store, over a plain pointer or a checked one (mt_checked.h). */
template <class T, int Cols, int Rows, class P>
inline void mat_load(simdgroup_matrix<T, Cols, Rows>& d, P src, ulong elements_per_row, ulong2 matrix_origin,
                     bool transpose_matrix, uint32_t line) {
    prof_event<T>(0, line);
    const uint32_t lane = mat_lane(), row = mat_row(lane), col = mat_col(lane);
    for (uint32_t e = 0; e < 2u; ++e)
        d.e_.v_[e] = T(src[mat_offset(row, col + e, elements_per_row, matrix_origin, transpose_matrix)]);
}
template <class T, int Cols, int Rows, class P>
inline void mat_store(const simdgroup_matrix<T, Cols, Rows>& a, P dst, ulong elements_per_row, ulong2 matrix_origin,
                      bool transpose_matrix, uint32_t line) {
    prof_event<T>(1, line);
    const uint32_t lane = mat_lane(), row = mat_row(lane), col = mat_col(lane);
    for (uint32_t e = 0; e < 2u; ++e)
        dst[mat_offset(row, col + e, elements_per_row, matrix_origin, transpose_matrix)] =
            rm_t<decltype(dst[0])>(a.e_.v_[e]);
}
}  // namespace _mt

template <class T, int Cols, int Rows, class U>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows>& d, const U* src, ulong elements_per_row = Cols,
                           ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false,
                           uint32_t line = __builtin_LINE()) {
    _mt::mat_load(d, src, elements_per_row, matrix_origin, transpose_matrix, line);
}

template <class T, int Cols, int Rows, class U>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows>& a, U* dst, ulong elements_per_row = Cols,
                            ulong2 matrix_origin = ulong2(0), bool transpose_matrix = false,
                            uint32_t line = __builtin_LINE()) {
    _mt::mat_store(a, dst, elements_per_row, matrix_origin, transpose_matrix, line);
}

namespace _mt {
/* This lane's two elements of A*B, from one exchange of every lane's elements of A and B, which the runtime
 * multiplies once when the exchange completes (mt_simd_matrix_product: each element summed in float in k order
 * 0..7, so every lane gets the sums it would compute alone). */
template <class TA, class TB> inline const float* mat_product(const simdgroup_matrix<TA, 8, 8>& a,
                                                             const simdgroup_matrix<TB, 8, 8>& b, uint32_t line) {
    return mt_simd_matrix_product(mt_current_pos(), float(a.e_.v_[0]), float(a.e_.v_[1]), float(b.e_.v_[0]),
                                  float(b.e_.v_[1]), line);
}
}  // namespace _mt

/* d = a * b + c; the types may differ (half or bfloat inputs, float accumulator); d may alias a, b or c. */
template <class TD, class TA, class TB, class TC>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                          const simdgroup_matrix<TB, 8, 8>& b, const simdgroup_matrix<TC, 8, 8>& c,
                                          uint32_t line = __builtin_LINE()) {
    _mt::prof_event<TA>(2, line);
    const float c0 = float(c.e_.v_[0]), c1 = float(c.e_.v_[1]);
    const float* p = _mt::mat_product(a, b, line);
    d.e_.v_[0] = TD(p[0] + c0);
    d.e_.v_[1] = TD(p[1] + c1);
}

/* d = a * b */
template <class TD, class TA, class TB>
inline void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                               const simdgroup_matrix<TB, 8, 8>& b, uint32_t line = __builtin_LINE()) {
    _mt::prof_event<TA>(2, line);
    const float* p = _mt::mat_product(a, b, line);
    d.e_.v_[0] = TD(p[0]);
    d.e_.v_[1] = TD(p[1]);
}

}  // namespace metal

#endif
