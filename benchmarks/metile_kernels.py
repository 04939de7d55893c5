"""metile's own kernels for the GPU-model table (`benchmarks/gpu_model.py`): Triton's tutorial kernels as ported in
`tests/acceptance_kernels/triton_tutorials.py`, copied here so that the benchmark does not import the tests.

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


def elem_strides(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


# ---- GEMM (tutorial 03)


@metile.func
def grouped_tile(pid, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N, GROUP_SIZE_M):
    num_pid_m = metile.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = metile.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


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


GEMM_BLOCKS = (64, 64, 32)   # (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K)
GEMM_GROUP_M = 8


def run_matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray, profile, profile_only: bool = False,
               blocks: tuple[int, int, int] = GEMM_BLOCKS):
    (M, K), N = a.shape, b.shape[1]
    bm, bn, bk = blocks
    grid = (metile.cdiv(M, bm) * metile.cdiv(N, bn),)
    return matmul_kernel[grid](a, b, c, M, N, K, elem_strides(a)[0], elem_strides(b)[0], elem_strides(c)[0],
                               BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=GEMM_GROUP_M,
                               profile=profile, profile_only=profile_only)


# ---- softmax (tutorial 02)


@metile.kernel
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: metile.constexpr):
    row_idx = metile.program_id(0)
    row_start_ptr = input_ptr + row_idx * input_row_stride
    col_offsets = metile.arange(0, BLOCK_SIZE)
    input_ptrs = row_start_ptr + col_offsets
    mask = col_offsets < n_cols
    row = metile.load(input_ptrs, mask=mask, other=-float("inf"))
    row_minus_max = row - metile.max(row, axis=0)
    numerator = metile.exp(row_minus_max)
    denominator = metile.sum(numerator, axis=0)
    softmax_output = numerator / denominator
    output_row_start_ptr = output_ptr + row_idx * output_row_stride
    metile.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)


def run_softmax(x: np.ndarray, y: np.ndarray, profile, profile_only: bool = False):
    n_rows, n_cols = x.shape
    return softmax_kernel[(n_rows,)](y, x, elem_strides(x)[0], elem_strides(y)[0], n_rows, n_cols,
                                     BLOCK_SIZE=metile.next_power_of_2(n_cols), profile=profile,
                                     profile_only=profile_only)


# ---- layer norm forward (tutorial 05)


@metile.kernel
def layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: metile.constexpr):
    row = metile.program_id(0)
    Y += row * stride
    X += row * stride
    mean = 0
    _mean = metile.zeros([BLOCK_SIZE], dtype=metile.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + metile.arange(0, BLOCK_SIZE)
        a = metile.load(X + cols, mask=cols < N, other=0.).to(metile.float32)
        _mean += a
    mean = metile.sum(_mean, axis=0) / N
    _var = metile.zeros([BLOCK_SIZE], dtype=metile.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + metile.arange(0, BLOCK_SIZE)
        x = metile.load(X + cols, mask=cols < N, other=0.).to(metile.float32)
        x = metile.where(cols < N, x - mean, 0.)
        _var += x * x
    var = metile.sum(_var, axis=0) / N
    rstd = 1 / metile.sqrt(var + eps)
    metile.store(Mean + row, mean)
    metile.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + metile.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = metile.load(W + cols, mask=mask)
        b = metile.load(B + cols, mask=mask)
        x = metile.load(X + cols, mask=mask, other=0.).to(metile.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        metile.store(Y + cols, y, mask=mask)


def run_layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, y: np.ndarray, eps: float, profile,
                   profile_only: bool = False):
    """The tutorial's block: the whole row (at most 64 KB of it)."""
    M, N = x.shape
    block = min(65536 // x.itemsize, metile.next_power_of_2(N))
    mean = np.empty(M, np.float32)
    rstd = np.empty(M, np.float32)
    return layer_norm_fwd_fused[(M,)](x, y, w, b, mean, rstd, elem_strides(x)[0], N, eps, BLOCK_SIZE=block,
                                      profile=profile, profile_only=profile_only)


# ---- fused attention forward (tutorial 06)


@metile.func
def _attn_fwd_inner(acc, l_i, m_i, q, K_ptr, V_ptr, stride_kn, stride_kk, stride_vn, stride_vk,
                    start_m, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N, STAGE, offs_m, offs_n, N_CTX):
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
    else:
        lo, hi = 0, N_CTX
    offs_d = metile.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = metile.multiple_of(start_n, BLOCK_N)
        keys = start_n + offs_n
        k = metile.load(K_ptr + offs_d[:, None] * stride_kk + keys[None, :] * stride_kn,
                        mask=keys[None, :] < N_CTX, other=0.0)
        qk = metile.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= keys[None, :]
            qk = qk * qk_scale + metile.where(mask, 0, -1.0e6)
            m_ij = metile.maximum(m_i, metile.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            qk = metile.where(keys[None, :] < N_CTX, qk, -1.0e6)
            m_ij = metile.maximum(m_i, metile.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = metile.exp2(qk)
        l_ij = metile.sum(p, 1)
        alpha = metile.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        acc = acc * alpha[:, None]
        v = metile.load(V_ptr + keys[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                        mask=keys[:, None] < N_CTX, other=0.0)
        p = p.to(metile.float16)
        acc = metile.dot(p, v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@metile.kernel
def attn_fwd(Q, K, V, sm_scale, M, Out,
             stride_qz, stride_qh, stride_qm, stride_qk,
             stride_kz, stride_kh, stride_kn, stride_kk,
             stride_vz, stride_vh, stride_vn, stride_vk,
             stride_oz, stride_oh, stride_om, stride_on,
             Z, H, N_CTX,
             HEAD_DIM: metile.constexpr, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
             STAGE: metile.constexpr):
    start_m = metile.program_id(0)
    off_hz = metile.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    q_offset = off_z * stride_qz + off_h * stride_qh
    k_offset = off_z * stride_kz + off_h * stride_kh
    v_offset = off_z * stride_vz + off_h * stride_vh
    o_offset = off_z * stride_oz + off_h * stride_oh
    offs_m = start_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = metile.arange(0, BLOCK_N)
    offs_d = metile.arange(0, HEAD_DIM)
    m_i = metile.zeros([BLOCK_M], dtype=metile.float32) - float("inf")
    l_i = metile.zeros([BLOCK_M], dtype=metile.float32) + 1.0
    acc = metile.zeros([BLOCK_M, HEAD_DIM], dtype=metile.float32)
    qk_scale = sm_scale
    qk_scale *= 1.44269504
    row_ok = offs_m[:, None] < N_CTX
    q = metile.load(Q + q_offset + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk, mask=row_ok, other=0.0)
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K + k_offset, V + v_offset, stride_kn, stride_kk,
                                        stride_vn, stride_vk, start_m, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N,
                                        4 - STAGE, offs_m, offs_n, N_CTX)
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K + k_offset, V + v_offset, stride_kn, stride_kk,
                                        stride_vn, stride_vk, start_m, qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N,
                                        2, offs_m, offs_n, N_CTX)
    m_i += metile.log2(l_i)
    acc = acc / l_i[:, None]
    metile.store(M + off_hz * N_CTX + offs_m, m_i, mask=offs_m < N_CTX)
    metile.store(Out + o_offset + offs_m[:, None] * stride_om + offs_d[None, :] * stride_on, acc.to(Out.dtype),
                 mask=row_ok)


ATTN_BLOCKS = (32, 32)   # (BLOCK_M, BLOCK_N): the largest that fits 32 KB of threadgroup memory at HEAD_DIM 64


def run_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, sm_scale: float, profile,
                  profile_only: bool = False, blocks: tuple[int, int] = ATTN_BLOCKS):
    """Non-causal attention over (batch, heads, sequence, head_dim) arrays (STAGE 1: every key)."""
    Z, H, N, D = q.shape
    block_m, block_n = blocks
    lse = np.empty((Z, H, N), np.float32)
    grid = (metile.cdiv(N, block_m), Z * H, 1)
    return attn_fwd[grid](q, k, v, sm_scale, lse, o, *elem_strides(q), *elem_strides(k), *elem_strides(v),
                          *elem_strides(o), Z, H, N, HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n, STAGE=1,
                          profile=profile, profile_only=profile_only)
