#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

kernel void mtile_int_ops(device const int* A [[buffer(0)]],
                          device const int* B [[buffer(1)]],
                          device const uint* U [[buffer(2)]],
                          device const uint* V [[buffer(3)]],
                          device const uchar* C8 [[buffer(4)]],
                          device const short* S16 [[buffer(5)]],
                          device int* Out [[buffer(6)]],
                          device uint* OutU [[buffer(7)]],
                          device uchar* Out8 [[buffer(8)]],
                          device short* Out16 [[buffer(9)]],
                          uint3 thread_position_in_grid [[thread_position_in_grid]]) {
    const int tid = static_cast<int>(thread_position_in_grid.x);
    const int a = A[tid];
    const int b = B[tid];
    const uint u = U[tid];
    const uint v = V[tid];
    const uchar c = C8[tid];
    const short s = S16[tid];
    const int t0 = tid * 27;
    Out[t0 + 0] = a + b;
    Out[t0 + 1] = a - b;
    Out[t0 + 2] = a * b;
    Out[t0 + 3] = a / b;
    Out[t0 + 4] = a % b;
    Out[t0 + 5] = a & b;
    Out[t0 + 6] = a | b;
    Out[t0 + 7] = a ^ b;
    Out[t0 + 8] = max(a, b);
    Out[t0 + 9] = min(a, b);
    Out[t0 + 10] = a << (b & 7);
    Out[t0 + 11] = a >> 3;
    Out[t0 + 12] = -a;
    Out[t0 + 13] = ~a;
    Out[t0 + 14] = abs(a);
    const bool t1 = a < b;
    Out[t0 + 15] = t1 ? a : b;
    Out[t0 + 16] = max(a, (-2147483647 - 1));
    Out[t0 + 17] = static_cast<int>(t1);
    Out[t0 + 18] = static_cast<int>(a <= b);
    Out[t0 + 19] = static_cast<int>(a > b);
    Out[t0 + 20] = static_cast<int>(a >= b);
    Out[t0 + 21] = static_cast<int>(a == b);
    Out[t0 + 22] = static_cast<int>(a != b);
    const bool t2 = a > 0;
    Out[t0 + 23] = static_cast<int>(t1 && t2);
    Out[t0 + 24] = static_cast<int>(t1 || t2);
    Out[t0 + 25] = static_cast<int>(t1 != t2);
    Out[t0 + 26] = static_cast<int>(!t1);
    const int t3 = tid * 8;
    OutU[t3 + 0] = u + v;
    OutU[t3 + 1] = u - v;
    OutU[t3 + 2] = u / v;
    OutU[t3 + 3] = u % v;
    OutU[t3 + 4] = u >> 3u;
    OutU[t3 + 5] = ~u;
    OutU[t3 + 6] = u + 4000000000u;
    OutU[t3 + 7] = max(u, v);
    const int t4 = tid * 4;
    Out8[t4 + 0] = uchar(c + c);
    Out8[t4 + 1] = uchar(uchar(c + uchar(100u)) >> uchar(1u));
    Out8[t4 + 2] = uchar(c * uchar(3u));
    Out8[t4 + 3] = uchar(~c);
    const int t5 = tid * 3;
    Out16[t5 + 0] = short(s * s);
    Out16[t5 + 1] = short(-s);
    Out16[t5 + 2] = short(s - short(-30000));
}
