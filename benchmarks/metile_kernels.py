"""metile's own kernels for the GPU-model table (`benchmarks/gpu_model.py`): Triton's tutorial kernels as ported in
`tests/acceptance_kernels/triton_tutorials.py` (imported from there: the benchmark runs from a checkout).

- `matmul_kernel`: tutorial 03, bounded tiles in grouped order, f32 accumulator. One change: the result is stored
  in C's own type (`accumulator.to(c_ptr.dtype)`) where the tutorial always stores f16, so that the same kernel
  serves the f32 and the f16 GEMM; no activation.
- `softmax_kernel`: tutorial 02, one row per program, the row read whole.
- `layer_norm_fwd_fused`: tutorial 05's forward pass (it also stores each row's mean and 1/std).
- `attn_fwd`: tutorial 06's flash-attention forward pass (online softmax in base 2), with its inner loop.

The `run_*` functions launch them as the tutorials' host code does and return the kernel's `metile.Profile`.
"""

from __future__ import annotations

import numpy as np

import metile
from tests.acceptance_kernels.triton_tutorials import _attn_fwd as attn_fwd
from tests.acceptance_kernels.triton_tutorials import _layer_norm_fwd_fused as layer_norm_fwd_fused
from tests.acceptance_kernels.triton_tutorials import grouped_tile, softmax_kernel


def elem_strides(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


# ---- GEMM (tutorial 03)


@metile.kernel
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, lda, ldb, ldc,
                  BLOCK_SIZE_M: metile.constexpr, BLOCK_SIZE_N: metile.constexpr, BLOCK_SIZE_K: metile.constexpr,
                  GROUP_SIZE_M: metile.constexpr):
    pid = metile.program_id(axis=0)
    pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M)
    row, col = pid_m * BLOCK_SIZE_M, pid_n * BLOCK_SIZE_N
    accumulator = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    for k in metile.tile_range(0, K, BLOCK_SIZE_K):
        a = metile.tile_load(a_ptr, row, k, lda, (BLOCK_SIZE_M, BLOCK_SIZE_K), bounds=(M, K))
        b = metile.tile_load(b_ptr, k, col, ldb, (BLOCK_SIZE_K, BLOCK_SIZE_N), bounds=(K, N))
        accumulator = metile.dot(a, b, accumulator)
    c = accumulator.to(c_ptr.dtype)
    metile.tile_store(c_ptr, row, col, ldc, c, (BLOCK_SIZE_M, BLOCK_SIZE_N), bounds=(M, N))


GEMM_BLOCKS = {"float32": (64, 64, 16), "float16": (64, 64, 32)}   # (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K)
GEMM_STAGES = 2   # double-buffered K loop: the staged operands of both dtypes fit twice in 32 KB
GEMM_GROUP_M = 8


def gemm_config(dtype) -> str:
    return "{}x{}x{} stages {}".format(*GEMM_BLOCKS[np.dtype(dtype).name], GEMM_STAGES)


def run_matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray, profile, profile_only: bool = False,
               blocks: tuple[int, int, int] | None = None, num_stages: int = GEMM_STAGES, target: str | None = None,
               timeout: float | None = None):
    """The GEMM compiled for `target` (a `metile.target` name; the device's own when None). `timeout` (here and
    below): the CPU device's watchdog for the dispatch, in seconds (its own when None)."""
    (M, K), N = a.shape, b.shape[1]
    bm, bn, bk = blocks or GEMM_BLOCKS[a.dtype.name]
    grid = (metile.cdiv(M, bm) * metile.cdiv(N, bn),)
    options = {} if target is None else {"target": target}
    return matmul_kernel[grid](a, b, c, M, N, K, elem_strides(a)[0], elem_strides(b)[0], elem_strides(c)[0],
                               BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=GEMM_GROUP_M,
                               num_stages=num_stages, profile=profile, profile_only=profile_only, timeout=timeout,
                               **options)


# ---- softmax (tutorial 02)


def run_softmax(x: np.ndarray, y: np.ndarray, profile, profile_only: bool = False, timeout: float | None = None):
    n_rows, n_cols = x.shape
    return softmax_kernel[(n_rows,)](y, x, elem_strides(x)[0], elem_strides(y)[0], n_rows, n_cols,
                                     BLOCK_SIZE=metile.next_power_of_2(n_cols), profile=profile,
                                     profile_only=profile_only, timeout=timeout)


# ---- layer norm forward (tutorial 05)


def run_layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, y: np.ndarray, eps: float, profile,
                   profile_only: bool = False, timeout: float | None = None):
    """The tutorial's block: the whole row (at most 64 KB of it)."""
    M, N = x.shape
    block = min(65536 // x.itemsize, metile.next_power_of_2(N))
    mean = np.empty(M, np.float32)
    rstd = np.empty(M, np.float32)
    return layer_norm_fwd_fused[(M,)](x, y, w, b, mean, rstd, elem_strides(x)[0], N, eps, BLOCK_SIZE=block,
                                      profile=profile, profile_only=profile_only, timeout=timeout)


# ---- fused attention forward (tutorial 06)


ATTN_BLOCKS = {64: (32, 32), 128: (32, 32)}   # (BLOCK_M, BLOCK_N) by HEAD_DIM


def run_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, sm_scale: float, profile,
                  profile_only: bool = False, blocks: tuple[int, int] | None = None, timeout: float | None = None):
    """Non-causal attention over (batch, heads, sequence, head_dim) arrays (STAGE 1: every key)."""
    Z, H, N, D = q.shape
    block_m, block_n = blocks or ATTN_BLOCKS[D]
    lse = np.empty((Z, H, N), np.float32)
    grid = (metile.cdiv(N, block_m), Z * H, 1)
    return attn_fwd[grid](q, k, v, sm_scale, lse, o, *elem_strides(q), *elem_strides(k), *elem_strides(v),
                          *elem_strides(o), Z, H, N, HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n, STAGE=1,
                          profile=profile, profile_only=profile_only, timeout=timeout)
