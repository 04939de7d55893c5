"""The kernels of docs/language.md section 11 (worked examples), copied verbatim.

`tests/test_acceptance_docs_examples.py` checks that each function's source still appears word for word in
the language reference, and launches them with the examples' own shapes and more.
"""

from __future__ import annotations

import numpy as np

import metile


@metile.kernel
def vec_add(A, B, C, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    a = metile.load(A + offs, mask=live)
    b = metile.load(B + offs, mask=live)
    metile.store(C + offs, a + b, mask=live)


@metile.kernel
def softmax_rows(X, Y, n_cols, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    x_row = X + row * n_cols

    run_max = float("-inf")                            # pass 1: per-position maxima
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        x = metile.load(x_row + cols, mask=cols < n_cols)
        run_max = metile.maximum(run_max, x)
    row_max = metile.max(run_max)

    run_sum = 0.0                                      # pass 2: sum of exp(x - max)
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        x = metile.load(x_row + cols, mask=cols < n_cols)
        run_sum = run_sum + metile.exp(x - row_max)
    denom = metile.sum(run_sum)

    for c0 in metile.tile_range(0, n_cols, BLOCK):     # pass 3: write
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(x_row + cols, mask=ok)
        metile.store(Y + row * n_cols + cols, metile.exp(x - row_max) / denom, mask=ok)


@metile.kernel
def matmul(A, B, C, M, N, K,
           BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


@metile.kernel
def matmul_act(A, B, C, M, N, K,
               BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
               BLOCK_K: metile.constexpr, ACT: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    if ACT == "relu":
        acc = metile.maximum(acc, 0.0)
    elif ACT == "gelu":
        acc = acc * metile.sigmoid(1.702 * acc)
    elif ACT == "silu":
        acc = acc * metile.sigmoid(acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


@metile.kernel
def layernorm(X, W, Bias, Y, n_cols, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    x_row = X + row * n_cols

    part = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        part = part + metile.load(x_row + cols, mask=cols < n_cols)
    mean = metile.sum(part) / n_cols

    sq = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        d = metile.load(x_row + cols, mask=cols < n_cols) - mean
        sq = sq + d * d
    rstd = metile.rsqrt(metile.sum(sq) / n_cols + eps)

    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(x_row + cols, mask=ok)
        w = metile.load(W + cols, mask=ok)
        b = metile.load(Bias + cols, mask=ok)
        metile.store(Y + row * n_cols + cols, (x - mean) * rstd * w + b, mask=ok)


@metile.kernel
def rmsnorm(X, W, Y, n_cols, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    sq = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        x = metile.load(X + row * n_cols + cols, mask=cols < n_cols)
        sq = sq + x * x
    scale = metile.rsqrt(metile.sum(sq) / n_cols + eps)
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        w = metile.load(W + cols, mask=ok)
        metile.store(Y + row * n_cols + cols, x * scale * w, mask=ok)


@metile.kernel
def fft_rows(XR, XI, YR, YI, REV, WR, WI, n,
             LOG2N: metile.constexpr, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    t = metile.thread_id()
    ex_re = metile.shared(BLOCK)
    ex_im = metile.shared(BLOCK)

    dst = metile.load(REV + t)                         # bit-reversed position of my input
    metile.store(ex_re + dst, metile.load(XR + row * n + t))
    metile.store(ex_im + dst, metile.load(XI + row * n + t))
    metile.barrier()
    re = metile.load(ex_re + t)
    im = metile.load(ex_im + t)

    for s in range(LOG2N):
        h = 1 << s
        k = (t & (h - 1)) * (BLOCK // (2 * h))
        w_re = metile.load(WR + k)
        w_im = metile.load(WI + k)
        if h < 32:                                     # partner in my simdgroup
            o_re = metile.simd_shuffle_xor(re, h)
            o_im = metile.simd_shuffle_xor(im, h)
        else:                                          # partner in another simdgroup
            metile.barrier()
            metile.store(ex_re + t, re)
            metile.store(ex_im + t, im)
            metile.barrier()
            o_re = metile.load(ex_re + (t ^ h))
            o_im = metile.load(ex_im + (t ^ h))
        wo_re = o_re * w_re - o_im * w_im              # w * other
        wo_im = o_re * w_im + o_im * w_re
        wm_re = re * w_re - im * w_im                  # w * mine
        wm_im = re * w_im + im * w_re
        upper = (t & h) == 0
        re = metile.where(upper, re + wo_re, o_re - wm_re)
        im = metile.where(upper, im + wo_im, o_im - wm_im)

    metile.store(YR + row * n + t, re)
    metile.store(YI + row * n + t, im)


def bit_reverse(n_pts):
    bits = n_pts.bit_length() - 1
    return np.array([int(format(i, f"0{bits}b")[::-1], 2) for i in range(n_pts)], np.int32)


@metile.kernel
def matmul_pc(A, B, C, M, N, K,
              BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        with metile.simdgroup_role(role=0, num_roles=2, num_sgs=2):      # producers
            a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
            b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        with metile.simdgroup_role(role=1, num_roles=2, num_sgs=4):      # consumers
            acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))
