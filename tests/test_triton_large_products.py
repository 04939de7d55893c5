"""Products of attention's backward size fit the 32 KB of threadgroup memory: with 128 x 64 f16 operands that are the
same in every iteration of several loops, and element-wise arithmetic on two products of 128 x 32 that feeds a third
product. Each computes what torch computes, and each was refused before for using more threadgroup memory than a
threadgroup may have (hoisted operands of 18 KB each, and the two products copied to scratch in f32, 34 KB)."""

from __future__ import annotations

import pytest
import torch

import metile.triton as triton
import metile.triton.language as tl

pytestmark = pytest.mark.usefixtures("on_cpu")


@triton.jit
def _accumulate(acc, a, B, offs_k, start, N: tl.constexpr, steps):
    """`acc + sum over blocks of (a @ B_blk^T) as f16 @ B_blk`, B's blocks of N rows from row `start`."""
    offs_n = start + tl.arange(0, N)
    bT_ptrs = B + offs_n[None, :] * 64 + offs_k[:, None]
    for _ in range(steps):
        bT = tl.load(bT_ptrs)
        s = tl.dot(a, bT).to(tl.float16)
        acc += tl.dot(s, tl.trans(bT))
        bT_ptrs += N * 64
    return acc


@triton.jit
def invariant_operands(A, C, B, D, Out, N1: tl.constexpr, N2: tl.constexpr):
    rows = tl.arange(0, 128)
    offs_k = tl.arange(0, 64)
    a = tl.load(A + rows[:, None] * 64 + offs_k[None, :])
    c = tl.load(C + rows[:, None] * 64 + offs_k[None, :])
    acc = tl.zeros([128, 64], dtype=tl.float32)
    acc = _accumulate(acc, a, B, offs_k, 0, N1, 2)       # a, then c: the same in every iteration of four loops
    acc = _accumulate(acc, a, B, offs_k, 2 * N1, N2, 2)
    acc = _accumulate(acc, c, D, offs_k, 0, N1, 2)
    acc = _accumulate(acc, c, D, offs_k, 2 * N1, N2, 2)
    tl.store(Out + rows[:, None] * 64 + offs_k[None, :], acc)


def _reference(a, c, b, d, n1, n2):
    acc = torch.zeros(128, 64)
    for x, y in ((a, b), (c, d)):
        for start, n in ((0, n1), (2 * n1, n2)):
            for i in range(2):
                blk = y[start + i * n:start + (i + 1) * n].float()
                acc += (x.float() @ blk.T).half().float() @ blk
    return acc


def test_operands_the_same_in_every_iteration_of_four_loops():
    torch.manual_seed(0)
    a, c = (torch.randn(128, 64).half() * 0.3 for _ in range(2))
    b, d = (torch.randn(256, 64).half() * 0.3 for _ in range(2))
    out = torch.zeros(128, 64)
    invariant_operands[(1,)](a, c, b, d, out, 16, 32, num_warps=4)
    torch.testing.assert_close(out, _reference(a, c, b, d, 16, 32), atol=2e-2, rtol=1e-3)
    compiled = invariant_operands.warmup(a, c, b, d, out, 16, 32, grid=(1,), num_warps=4)
    assert compiled.metadata.shared <= 32768


@triton.jit
def two_products(Q, K, DO, V, Di, Out):
    rows = tl.arange(0, 128)
    cols = tl.arange(0, 32)
    offs_k = tl.arange(0, 64)
    q = tl.load(Q + rows[:, None] * 64 + offs_k[None, :])
    do = tl.load(DO + rows[:, None] * 64 + offs_k[None, :])
    kT = tl.load(K + cols[None, :] * 64 + offs_k[:, None])
    vT = tl.load(V + cols[None, :] * 64 + offs_k[:, None])
    d = tl.load(Di + rows)
    p = tl.math.exp2(tl.dot(q, kT))
    dp = tl.dot(do, vT)
    ds = (p * (dp - d[:, None])).to(tl.float16)     # two products of one shape, read element by element together
    tl.store(Out + rows[:, None] * 64 + offs_k[None, :], tl.dot(ds, tl.trans(kT)))


def test_element_wise_arithmetic_on_two_products_feeds_a_third():
    torch.manual_seed(1)
    q, do = (torch.randn(128, 64).half() * 0.2 for _ in range(2))
    k, v = (torch.randn(32, 64).half() * 0.2 for _ in range(2))
    di = torch.randn(128)
    out = torch.zeros(128, 64)
    two_products[(1,)](q, k, do, v, di, out, num_warps=4)
    p = torch.exp2(q.float() @ k.float().T)
    ds = (p * (do.float() @ v.float().T - di[:, None])).half().float()
    torch.testing.assert_close(out, ds @ k.float(), atol=2e-2, rtol=1e-3)
    assert two_products.warmup(q, k, do, v, di, out, grid=(1,), num_warps=4).metadata.shared <= 32768
