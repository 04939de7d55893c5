#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

static inline int mt_atomic_cas_int_device(device int* p, int cmp, int v) {
    int expected = cmp;
    while (!atomic_compare_exchange_weak_explicit((device atomic_int*)p, &expected, v, memory_order_relaxed, memory_order_relaxed)) {
        if (expected != cmp) break;   // another value: the swap fails and `expected` is the old value
    }
    return expected;
}

kernel void mtile_pointer_table(device const long* Table [[buffer(0)]],
                                device float* Out [[buffer(1)]],
                                device int* Counter [[buffer(2)]],
                                uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    const int tid = static_cast<int>(thread_position_in_grid.x);
    const long addr = Table[tid];
    device float* const row = reinterpret_cast<device float*>(addr);
    const float x = row[2];
    Out[tid] = x;
    const int ticket = atomic_fetch_add_explicit((device atomic_int*)(Counter), 1, memory_order_relaxed);
    const int flag = (tid < 2) ? mt_atomic_cas_int_device(Counter + 1, 0, 1) : 0;
    Counter[2 + tid] = ticket + flag;
}
