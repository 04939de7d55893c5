"""Products of attention's backward size fit the 32 KB of threadgroup memory: with 128 x 64 f16 operands that are the
same in every iteration of several loops, and element-wise arithmetic on two products of 128 x 32 that feeds a third
product. Each computes what torch computes, and each was refused before for using more threadgroup memory than a
threadgroup may have (hoisted operands of 18 KB each, and the two products copied to scratch in f32, 34 KB)."""

from __future__ import annotations

import pytest
import torch

import metile
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


@triton.jit
def blocked_matmul(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm, rn, rk = pm * BM + tl.arange(0, BM), pn * BN + tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & (k + rk[None, :] < K), other=0.0)
        b = tl.load(B + (k + rk)[:, None] * N + rn[None, :], mask=(k + rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("bm, bn, bk, dtype", [(128, 128, 64, torch.float16), (128, 256, 64, torch.float16),
                                               (64, 64, 128, torch.float32)])
def test_products_whose_operands_exceed_threadgroup_memory(bm, bn, bk, dtype):
    """Operands of 35 to 66 KB staged whole (Triton's persistent matmul tutorial's blocks) are staged a chunk of k at
    a time."""
    torch.manual_seed(2)
    m, n, k = 150, 260, 3 * bk - 8          # ragged edges, and a last block of k cut by the masks
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    c = torch.zeros(m, n, dtype=dtype)
    blocked_matmul[(triton.cdiv(m, bm), triton.cdiv(n, bn))](a, b, c, m, n, k, BM=bm, BN=bn, BK=bk, num_warps=4)
    want = (a.float() @ b.float()).to(dtype).float()
    tol = dict(atol=0.07, rtol=4e-3) if dtype == torch.float16 else dict(atol=2e-4, rtol=2e-5)
    torch.testing.assert_close(c.float(), want, **tol)
    shared = blocked_matmul.warmup(a, b, c, m, n, k, BM=bm, BN=bn, BK=bk, grid=(1,), num_warps=4).metadata.shared
    assert shared <= 32768


@triton.jit
def normalized_times_transposed(A, Bt, C, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    a = tl.load(A + rm[:, None] * BK + rk[None, :]).to(tl.float32)
    a = (a / tl.max(tl.abs(a), 1)[:, None]).to(tl.float16)   # rows scaled by their maxima: held in registers
    bt = tl.load(Bt + rn[:, None] * BK + rk[None, :])
    tl.store(C + rm[:, None] * BN + rn[None, :], tl.dot(a, bt.T))


def test_chunks_of_operands_held_in_registers_and_of_a_transpose():
    torch.manual_seed(3)
    a, bt = torch.randn(128, 64).half(), torch.randn(128, 64).half()
    c = torch.zeros(128, 128)
    normalized_times_transposed[(1,)](a, bt, c, BM=128, BN=128, BK=64, num_warps=4)
    an = (a.float() / a.float().abs().amax(1, keepdim=True)).half().float()
    torch.testing.assert_close(c, an @ bt.float().T, atol=2e-3, rtol=1e-3)
    assert normalized_times_transposed.warmup(a, bt, c, BM=128, BN=128, BK=64, grid=(1,),
                                              num_warps=4).metadata.shared <= 32768


@triton.jit
def masked_scores(Q, K, Mask, Out, L: tl.constexpr, D: tl.constexpr):
    """Liger's neighborhood attention scores: a bf16 product selected by an f32 tile loaded from memory."""
    rows = tl.arange(0, L)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + rows[:, None] * D + offs_d[None, :])
    k = tl.load(K + rows[:, None] * D + offs_d[None, :])
    acc = tl.dot(q, tl.trans(k))
    near = tl.load(Mask + rows[:, None] * L + rows[None, :])
    tl.store(Out + rows[:, None] * L + rows[None, :], tl.where(near > 0.0, acc, float("-inf")))


def test_a_product_beside_scratch_of_another_dtype_stages_its_operands_in_chunks():
    """Its operands staged whole (26 KB of bf16) beside the f32 scratch that hands the product to the selection
    (16 KB) took 42 KB: `plan_staging` bounds that scratch before lowering, and stages them by chunks of k."""
    torch.manual_seed(0)
    q, k = (torch.randn(64, 64).to(torch.bfloat16) for _ in range(2))
    mask = (torch.rand(64, 64) > 0.5).float()
    out = torch.zeros(64, 64)
    compiled = masked_scores.warmup(q, k, mask, out, 64, 64, grid=(1,), num_warps=4)
    assert compiled.metadata.shared <= 32768
    masked_scores[(1,)](q, k, mask, out, 64, 64, num_warps=4)
    want = (q.float() @ k.float().T).masked_fill(mask == 0, float("-inf"))
    torch.testing.assert_close(out, want, atol=1e-3, rtol=1e-3)


@triton.jit
def subtiled_epilogue(A, B, C, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Tutorial 09's EPILOGUE_SUBTILE: the accumulator reshaped, permuted and split in halves, each stored."""
    rm, rn, rk, rh = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK), tl.arange(0, BN // 2)
    acc = tl.dot(tl.load(A + rm[:, None] * BK + rk[None, :]), tl.load(B + rk[:, None] * BN + rn[None, :]))
    acc0, acc1 = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))
    tl.store(C + rm[:, None] * BN + rh[None, :], acc0.to(tl.float16))
    tl.store(C + rm[:, None] * BN + BN // 2 + rh[None, :], acc1.to(tl.float16))


def test_a_subtiled_epilogue_of_a_large_accumulator_is_refused_by_its_threadgroup_memory():
    """The permutation hands the whole f32 accumulator between threads in one exchange through scratch: 66 KB for
    128 x 128, refused at launch with the bytes of each line; 64 x 64 fits and stores the product's halves."""
    torch.manual_seed(0)
    a, b = torch.randn(128, 64).half(), torch.randn(64, 128).half()
    with pytest.raises(metile.LaunchError, match=r"(?s)bytes of threadgroup memory.*66048 bytes at line"):
        subtiled_epilogue[(1,)](a, b, torch.zeros(128, 128).half(), 128, 128, 64, num_warps=4)
    c = torch.zeros(64, 64).half()
    subtiled_epilogue[(1,)](a[:64], b[:, :64].contiguous(), c, 64, 64, 64, num_warps=4)
    torch.testing.assert_close(c.float(), (a[:64].float() @ b[:, :64].float()).half().float(), atol=1e-2, rtol=1e-2)
