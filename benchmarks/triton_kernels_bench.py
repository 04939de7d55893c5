"""Two Triton kernels, GEMM and row softmax, written against `triton.language`, run by whichever `triton` the
process imports: metile's (`metile.triton.install()`) on the CPU device, or Triton's own CPU interpreter
(`TRITON_INTERPRET=1`). `benchmarks/cpu_vs_interpreter.py` runs this file in a subprocess per side:

    python benchmarks/triton_kernels_bench.py {gemm,softmax} SIZE REPS [--metile]

and reads the one line it prints: `first <s> median <s> error <max abs error against torch>`.
"""

from __future__ import annotations

import statistics
import sys
import time

if "--metile" in sys.argv:
    import metile.triton

    metile.triton.install()

import torch  # noqa: E402 - after the switch, which must come before `import triton`
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + ks
        a = tl.load(a_ptr + rows[:, None] * K + kk[None, :], mask=(rows[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * N + cols[None, :], mask=(kk[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def main() -> None:
    which, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.manual_seed(0)
    if which == "gemm":
        a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)

        def launch():
            gemm_kernel[(triton.cdiv(n, 64), triton.cdiv(n, 64))](a, b, c, n, n, n, BM=64, BN=64, BK=32)

        def error():
            return (c - a @ b).abs().max().item()
    else:
        x, y = torch.randn(n, n), torch.empty(n, n)

        def launch():
            softmax_kernel[(n,)](x, y, n, BLOCK=triton.next_power_of_2(n))

        def error():
            return (y - torch.softmax(x, -1)).abs().max().item()
    t = time.perf_counter()
    launch()
    first = time.perf_counter() - t
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        launch()
        times.append(time.perf_counter() - t)
    print(f"first {first} median {statistics.median(times)} error {error()}")


if __name__ == "__main__":
    main()
