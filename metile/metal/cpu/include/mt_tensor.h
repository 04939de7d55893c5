/* mt_tensor.h - Metal 4 tensors (<metal_tensor>): extents, tensor, cooperative_tensor, execution scopes.
 *
 * The MSL front end includes it after metal_compat.h when a source includes <metal_tensor> or
 * <MetalPerformancePrimitives/MetalPerformancePrimitives.h> (whose part is mt_mpp.h, included last here); such a
 * source compiles as C++20, since matmul2d takes its descriptor as a template argument of class type.
 *
 * Coordinates follow Metal: index 0 is the innermost dimension (x, contiguous in a packed tensor), index 1 the next
 * (y). A tensor is a pointer, extents and strides (in elements; packed by default: stride 0 is 1, stride r the
 * product of the extents below r); every descriptor (tensor_inline, tensor_offset, tensor_handle) is that. A slice
 * moves the origin: `t.slice(x0, y0)` keeps the extents that remain past the origin, `t.slice<X, Y>(x0, y0)` has
 * extents X and Y (dynamic_extent: what remains), unchecked against `t`, as Apple's static slices are.
 *
 * A cooperative tensor spreads a 2-D tile over the 32 lanes of a simdgroup (execution_simdgroup, the one scope the
 * CPU device runs). The layout is Apple's implementation detail; the CPU device uses the one MLX's NAX kernels read
 * and write element by element (steel/gemm/nax.h, BaseNAXFrag): the tile is cut into 16 x 16 blocks taken in
 * row-major order (x fastest), and in each block lane l holds 8 elements, element j at
 *     x = ((l >> 3) & 1) * 8 + (l & 1) * 4 + j % 4,   y = ((l >> 4) & 1) * 4 + ((l >> 1) & 3) + (j / 4) * 8,
 * element index = block * 8 + j. Tiles whose sides are not multiples of 16 are refused. The destination of a matmul2d
 * run by N simdgroups (execution_simdgroups<N>) spreads its elements over the threadgroup's threads instead
 * (spread_layout): code that only zeroes, loads, stores and passes it to run() does not depend on the layout.
 */
#ifndef METILE_MT_TENSOR_H
#define METILE_MT_TENSOR_H

namespace metal {

namespace _mt {
/* Instrumented builds tell the runtime of each cooperative load and store and each matmul2d run (mt_prof_count),
 * once per simdgroup or at each call; their memory traffic is counted as any access is, where it goes. */
__attribute__((always_inline)) inline void prof_count(uint32_t counter, uint64_t amount, bool per_simdgroup, uint32_t line) {
#ifdef MT_PROFILED_BUILD
    mt_prof_count(counter, amount, per_simdgroup ? 1 : 0, line);
#else
    (void)counter;
    (void)amount;
    (void)per_simdgroup;
    (void)line;
#endif
}
inline void prof_pause(bool paused) {
#ifdef MT_PROFILED_BUILD
    mt_prof_pause(paused ? 1 : 0);
#else
    (void)paused;
#endif
}
}  // namespace _mt

/* Vectors of 8 and 16 elements (no swizzles), which the fragments of MLX's NAX kernels are (metal::vec<T, 8>), as
 * aligned as clang's extended vectors of that size. */
namespace _mt {
template <class T> struct alignas(sizeof(T) * 8) vstore<T, 8> { T v_[8]; };
template <class T> struct alignas(sizeof(T) * 16) vstore<T, 16> { T v_[16]; };
}  // namespace _mt

constexpr size_t dynamic_extent = size_t(-1);

/* ---- extents ------------------------------------------------------------------------------------------------ */
template <class IndexType, size_t... Exts> struct extents {
    typedef IndexType index_type;
    typedef size_t size_type;
    typedef size_t rank_type;
    static constexpr size_t rank_ = sizeof...(Exts);
    static constexpr size_t statics_[rank_ ? rank_ : 1] = {Exts...};
    IndexType e_[rank_ ? rank_ : 1];

    static constexpr size_t rank() { return rank_; }
    static constexpr size_t rank_dynamic() { return ((Exts == dynamic_extent ? 1 : 0) + ... + 0); }
    static constexpr size_t static_extent(size_t r) { return statics_[r]; }

    constexpr extents() : e_{IndexType(Exts == dynamic_extent ? 0 : Exts)...} {}
    /* all extents, or only the dynamic ones in order */
    template <class... I, _mt::enable_if_t<(sizeof...(I) > 0 && (sizeof...(I) == rank_ || sizeof...(I) == rank_dynamic())),
                                           int> = 0>
    constexpr extents(I... values) : e_{} {
        const IndexType given[] = {IndexType(values)...};
        size_t d = 0;
        for (size_t r = 0; r < rank_; ++r) {
            if (sizeof...(I) == rank_) e_[r] = given[r];
            else e_[r] = statics_[r] == dynamic_extent ? given[d++] : IndexType(statics_[r]);
        }
    }
    template <class J, size_t... Other, _mt::enable_if_t<sizeof...(Other) == rank_, int> = 0>
    constexpr extents(const extents<J, Other...>& o) : e_{} {
        for (size_t r = 0; r < rank_; ++r) e_[r] = IndexType(o.extent(r));
    }
    constexpr IndexType extent(size_t r) const { return e_[r]; }
    constexpr IndexType get_extent(size_t r) const { return e_[r]; }
};

namespace _mt {
template <class I, size_t R, size_t... E> struct make_dextents { typedef typename make_dextents<I, R - 1, dynamic_extent, E...>::type type; };
template <class I, size_t... E> struct make_dextents<I, 0, E...> { typedef metal::extents<I, E...> type; };
}  // namespace _mt
template <class IndexType, size_t Rank> using dextents = typename _mt::make_dextents<IndexType, Rank>::type;

/* ---- tensors ------------------------------------------------------------------------------------------------ */
struct tensor_inline {};
struct tensor_offset {};
struct tensor_handle {};

template <class ElementType, class Extents, class Descriptor = tensor_handle> struct tensor;

namespace _mt {
template <class T> struct is_tensor_t : false_type {};
template <class T, class E, class D> struct is_tensor_t<metal::tensor<T, E, D>> : true_type {};
template <class T> constexpr bool is_tensor = is_tensor_t<rm_t<T>>::value;
/* the unsupported-construct marker the device turns into MSLUnsupportedError at the line that needs it */
template <class...> constexpr bool never = false;
}  // namespace _mt

template <class ElementType, class Extents, class Descriptor> struct tensor {
    typedef ElementType element_type;
    typedef remove_cv_t<ElementType> value_type;
    typedef Extents extents_type;
    typedef typename Extents::index_type index_type;
    typedef Descriptor descriptor_type;
    static constexpr size_t R = Extents::rank();
    typedef array<index_type, R> strides_type;

    ElementType* data_ = nullptr;
    Extents ext_{};
    strides_type str_{};

    tensor() = default;
    tensor(ElementType* data, const Extents& e) : data_(data), ext_(e) {
        index_type s = 1;
        for (size_t r = 0; r < R; ++r) {
            str_[r] = s;
            s *= ext_.extent(r);
        }
    }
    tensor(ElementType* data, const Extents& e, const strides_type& strides) : data_(data), ext_(e), str_(strides) {}
    /* the same memory seen through another descriptor, or as const */
    template <class U, class D2, _mt::enable_if_t<is_convertible_v<U*, ElementType*>, int> = 0>
    tensor(const tensor<U, Extents, D2>& o) : data_(o.data_), ext_(o.ext_), str_(o.str_) {}

    static constexpr size_t get_rank() { return R; }
    constexpr const Extents& get_extents() const { return ext_; }
    constexpr const Extents& extents() const { return ext_; }
    constexpr index_type get_extent(size_t r) const { return ext_.extent(r); }
    constexpr index_type extent(size_t r) const { return ext_.extent(r); }
    constexpr const strides_type& get_strides() const { return str_; }
    constexpr const strides_type& strides() const { return str_; }
    constexpr index_type get_stride(size_t r) const { return str_[r]; }
    constexpr index_type stride(size_t r) const { return str_[r]; }
    ElementType* get_data_pointer() const { return data_; }

    /* the element at coordinates c (c[0] innermost), unchecked */
    ElementType* address(const long* c) const {
        long off = 0;
        for (size_t r = 0; r < R; ++r) off += c[r] * long(str_[r]);
        return data_ + off;
    }
    bool inside(const long* c) const {
        for (size_t r = 0; r < R; ++r)
            if (c[r] < 0 || c[r] >= long(ext_.extent(r))) return false;
        return true;
    }

    /* slice(origin...): the extents that remain past the origin; slice<E...>(origin...): extents E (dynamic_extent:
     * what remains), unchecked */
    template <size_t... SliceExts, class... I> auto slice(I... origin) const {
        static_assert(sizeof...(I) == R || sizeof...(I) == 0, "slice takes one origin coordinate per dimension");
        static_assert(sizeof...(SliceExts) == R || sizeof...(SliceExts) == 0, "slice takes one extent per dimension");
        long o[R ? R : 1] = {};
        if constexpr (sizeof...(I) > 0) {
            const long given[] = {long(origin)...};
            for (size_t r = 0; r < R; ++r) o[r] = given[r];
        }
        if constexpr (sizeof...(SliceExts) == 0) {
            Extents e = ext_;
            for (size_t r = 0; r < R; ++r) {
                const long left = long(ext_.extent(r)) - o[r];
                e.e_[r] = index_type(left > 0 ? left : 0);
            }
            return tensor<ElementType, Extents, tensor_offset>(address(o), e, str_);
        } else {
            typedef metal::extents<index_type, SliceExts...> E2;
            E2 e;
            for (size_t r = 0; r < R; ++r) {
                const long left = long(ext_.extent(r)) - o[r];
                e.e_[r] = E2::static_extent(r) == dynamic_extent ? index_type(left > 0 ? left : 0)
                                                                 : index_type(E2::static_extent(r));
            }
            return tensor<ElementType, E2, tensor_offset>(address(o), e, str_);
        }
    }
};

/* ---- execution scopes ---------------------------------------------------------------------------------------- */
struct execution_thread { static constexpr int simdgroups = 0; };
struct execution_simdgroup { static constexpr int simdgroups = 1; };
template <int N> struct execution_simdgroups { static constexpr int simdgroups = N; };

/* ---- cooperative tensors --------------------------------------------------------------------------------------- */
namespace _mt {
inline uint32_t coop_lane() { return mt_current_pos()->thread_index_in_simdgroup; }

/* A tile of X x Y elements (x fastest) over the 32 lanes of a simdgroup, in 16 x 16 blocks (see the top). */
template <int X, int Y> struct block_layout {
    static_assert(X % 16 == 0 && Y % 16 == 0 && X > 0 && Y > 0,
                  "metile-unsupported: cooperative tensors whose sides are not multiples of 16");
    static constexpr int capacity = X * Y / 32;
    static constexpr int width = X;
    static constexpr int height = Y;
    static uint32_t holder() { return coop_lane(); }
    static bool valid(uint32_t, int i) { return i >= 0 && i < capacity; }
    static void coord(uint32_t lane, int i, int& x, int& y) {
        const int block = i / 8, j = i % 8;
        x = (block % (X / 16)) * 16 + int((lane >> 3) & 1u) * 8 + int(lane & 1u) * 4 + j % 4;
        y = (block / (X / 16)) * 16 + int((lane >> 4) & 1u) * 4 + int((lane >> 1) & 3u) + (j / 4) * 8;
    }
    /* the lane and element index that hold (x, y) */
    static void owner(int x, int y, uint32_t& lane, int& i) {
        const int bx = x / 16, by = y / 16, lx = x % 16, ly = y % 16;
        const int row = ly % 8, col4 = lx / 4;
        lane = uint32_t(((row >> 2) & 1) << 4 | ((col4 >> 1) & 1) << 3 | (row & 3) << 1 | (col4 & 1));
        i = (by * (X / 16) + bx) * 8 + (ly / 8) * 4 + lx % 4;
    }
};
}  // namespace _mt

namespace _mt {
/* A tile of X x Y elements over the threads of N simdgroups (a destination of matmul2d with execution_simdgroups<N>,
 * whose layout Apple does not document): element e = x + X y is held by thread e % (32 N) of the threadgroup, as its
 * element e / (32 N); the last of a thread's elements may lie past the tile (is_valid_element false). */
template <int X, int Y, int N> struct spread_layout {
    static_assert(X > 0 && Y > 0 && N > 0, "a cooperative tensor of a positive size over some simdgroups");
    static constexpr int threads = 32 * N;
    static constexpr int capacity = (X * Y + threads - 1) / threads;
    static constexpr int width = X;
    static constexpr int height = Y;
    static uint32_t holder() { return mt_current_pos()->thread_index_in_threadgroup; }
    static bool valid(uint32_t t, int i) { return i >= 0 && i < capacity && int(t) + i * threads < X * Y; }
    static void coord(uint32_t t, int i, int& x, int& y) {
        const int e = int(t) + i * threads;
        x = e % X;
        y = e / X;
    }
};
}  // namespace _mt

template <class ElementType, class Extents, class Layout> struct cooperative_tensor {
    typedef ElementType element_type;
    typedef ElementType value_type;
    typedef Extents extents_type;
    typedef typename Extents::index_type index_type;
    typedef Layout layout;
    static constexpr int capacity_ = Layout::capacity;

    ElementType e_[capacity_];

    static constexpr uint16_t get_capacity() { return uint16_t(capacity_); }
    static constexpr uint16_t capacity() { return uint16_t(capacity_); }
    /* every element of a 16 x 16 block layout is held by some lane; a spread layout's last may lie past the tile */
    bool is_valid_element(uint16_t i) const { return Layout::valid(Layout::holder(), i); }
    bool get_mask(uint16_t i) const { return is_valid_element(i); }
    bool mask(uint16_t i) const { return is_valid_element(i); }

    ElementType& at(uint16_t i, uint32_t line) {
        if (i >= capacity_) mt_kernel_fault(MT_FAULT_KERNEL, "cooperative tensor element index out of range", line);
        return e_[i];
    }
    ElementType& operator[](uint16_t i) { return at(i, __builtin_LINE()); }
    const ElementType& operator[](uint16_t i) const { return const_cast<cooperative_tensor*>(this)->at(i, __builtin_LINE()); }

    /* (x, y) of this lane's element i in the tile */
    array<index_type, 2> get_multidimensional_index(uint16_t i) const {
        int x, y;
        Layout::coord(Layout::holder(), int(i), x, y);
        array<index_type, 2> r;
        r[0] = index_type(x);
        r[1] = index_type(y);
        return r;
    }
    array<index_type, 2> multidimensional_indices(uint16_t i) const { return get_multidimensional_index(i); }

    /* element iterators (begin, end, map_iterator) are not there yet */
    template <class... X> int begin(X...) const {
        static_assert(_mt::never<X...>, "metile-unsupported: iterators of cooperative tensors (begin)");
        return 0;
    }
    template <class... X> int end(X...) const {
        static_assert(_mt::never<X...>, "metile-unsupported: iterators of cooperative tensors (end)");
        return 0;
    }
    template <class... X> int map_iterator(X...) const {
        static_assert(_mt::never<X...>, "metile-unsupported: iterators of cooperative tensors (map_iterator)");
        return 0;
    }

    /* each lane reads its own elements; those outside the tensor's extents read as zero */
    template <class T, class E, class D> void load(const tensor<T, E, D>& t, uint32_t line = __builtin_LINE()) {
        static_assert(E::rank() == 2, "metile-unsupported: cooperative tensors of rank other than 2");
        _mt::prof_count(MT_PROF_COOP_LOADS, 1, true, line);
        const uint32_t lane = Layout::holder();
        for (int i = 0; i < capacity_; ++i) {
            if (!Layout::valid(lane, i)) continue;
            int x, y;
            Layout::coord(lane, i, x, y);
            const long c[2] = {x, y};
            e_[i] = t.inside(c) ? ElementType(*t.address(c)) : ElementType(0);
        }
    }
    /* each lane writes its own elements that lie inside the tensor's extents */
    template <class T, class E, class D> void store(const tensor<T, E, D>& t, uint32_t line = __builtin_LINE()) const {
        static_assert(E::rank() == 2, "metile-unsupported: cooperative tensors of rank other than 2");
        _mt::prof_count(MT_PROF_COOP_STORES, 1, true, line);
        const uint32_t lane = Layout::holder();
        for (int i = 0; i < capacity_; ++i) {
            if (!Layout::valid(lane, i)) continue;
            int x, y;
            Layout::coord(lane, i, x, y);
            const long c[2] = {x, y};
            if (t.inside(c)) *t.address(c) = remove_cv_t<T>(e_[i]);
        }
    }
};

namespace _mt {
template <class T> struct is_coop_t : false_type {};
template <class T, class E, class L> struct is_coop_t<metal::cooperative_tensor<T, E, L>> : true_type {};
template <class T> constexpr bool is_coop = is_coop_t<rm_t<T>>::value;
}  // namespace _mt

}  // namespace metal

#include "mt_mpp.h"

#endif
