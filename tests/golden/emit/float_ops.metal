#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

kernel void mtile_float_ops(device const float* X [[buffer(0)]],
                            device const float* Y [[buffer(1)]],
                            device const half* H [[buffer(2)]],
                            device float* Out [[buffer(3)]],
                            device half* HOut [[buffer(4)]],
                            uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    const int tid = static_cast<int>(thread_position_in_grid.x);
    const float x = X[tid];
    const float y = Y[tid];
    const half h = H[tid];
    const int t0 = tid * 35;
    Out[t0 + 0] = x + y;
    Out[t0 + 1] = x - y;
    Out[t0 + 2] = x * y;
    Out[t0 + 3] = x / y;
    Out[t0 + 4] = fmod(x, y);
    Out[t0 + 5] = pow(x, y);
    Out[t0 + 6] = max(x, y);
    Out[t0 + 7] = min(x, y);
    Out[t0 + 8] = -x;
    Out[t0 + 9] = exp(x);
    Out[t0 + 10] = exp2(x);
    Out[t0 + 11] = log(x);
    Out[t0 + 12] = log2(x);
    Out[t0 + 13] = sqrt(x);
    Out[t0 + 14] = rsqrt(x);
    Out[t0 + 15] = abs(x);
    Out[t0 + 16] = tanh(x);
    Out[t0 + 17] = sin(x);
    Out[t0 + 18] = cos(x);
    Out[t0 + 19] = floor(x);
    Out[t0 + 20] = ceil(x);
    const bool t1 = x < y;
    Out[t0 + 21] = static_cast<float>(t1);
    Out[t0 + 22] = static_cast<float>(x <= y);
    Out[t0 + 23] = static_cast<float>(x > y);
    Out[t0 + 24] = static_cast<float>(x >= y);
    Out[t0 + 25] = static_cast<float>(x == y);
    Out[t0 + 26] = static_cast<float>(x != y);
    Out[t0 + 27] = t1 ? x : y;
    Out[t0 + 28] = x + 0.1f;
    Out[t0 + 29] = min(x, INFINITY);
    Out[t0 + 30] = x + NAN;
    Out[t0 + 31] = max(x, -INFINITY);
    Out[t0 + 32] = x * (-0.0f);
    Out[t0 + 33] = static_cast<float>(h);
    Out[t0 + 34] = static_cast<float>(static_cast<int>(x));
    const int t2 = tid * 6;
    HOut[t2 + 0] = h + half(0.099975586f);
    HOut[t2 + 1] = h * h;
    HOut[t2 + 2] = max(h, half(-1.0f));
    HOut[t2 + 3] = -h;
    HOut[t2 + 4] = static_cast<half>(x);
    HOut[t2 + 5] = min(h, half(INFINITY));
}
