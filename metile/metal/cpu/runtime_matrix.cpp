/* runtime_matrix.cpp - the product of a simdgroup matrix exchange (mt_simd_matrix_product, runtime_sched.cpp).
 *
 * When the exchange completes, the lanes' elements of A and B sit in their simdgroup's 8x8 matrices; the product is
 * computed here once for all of them, each element summed in float in k order 0..7 from zero, as one lane would sum
 * it alone (the compatibility header adds the accumulator afterwards), so results are the same whichever lane's
 * arrival completes the exchange.
 */
#include "runtime_internal.h"

namespace mtrt {

void mat_multiply(Simdgroup& sg) {
    typedef float row8 __attribute__((vector_size(32)));
    row8 B[8];
    memcpy(B, sg.mat_b, sizeof B);
    const float* A = sg.mat_a;
#pragma GCC unroll 8
    for (uint32_t r = 0; r < 8u; ++r) {
        row8 acc = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma GCC unroll 8
        for (uint32_t k = 0; k < 8u; ++k) acc += A[r * 8u + k] * B[k];
        memcpy(sg.mat_c + r * 8u, &acc, sizeof acc);
    }
}

} // namespace mtrt
