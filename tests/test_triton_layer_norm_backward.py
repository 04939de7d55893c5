"""Layer-norm backward as Triton's tutorial 05 computes it, under `triton.language`: each program writes its row of
dx and adds its partial dw and db into one of GROUP_SIZE_M row buffers, serialised by a spin lock per buffer
(`tl.atomic_cas` to take it, a first-writer count set with `tl.atomic_xchg`, `tl.atomic_xchg` to release it); a second
kernel sums the buffers. Checked against torch's autograd."""

from __future__ import annotations

import pytest
import torch

import metile.triton as triton
import metile.triton.language as tl

pytestmark = pytest.mark.usefixtures("on_cpu")


@triton.jit
def _layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N,
                             GROUP_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = tl.where(mask, xhat, 0.)
    wdy = tl.where(mask, wdy, 0.)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = (dy).to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:                                  # the first program of the group writes, the others add
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.debug_barrier()                              # every thread's stores before the release
    tl.atomic_xchg(Lock, 0)


@triton.jit
def _layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.)
        db += tl.load(DB + offs, mask=mask, other=0.)
    tl.store(FINAL_DW + cols, tl.sum(dw, axis=0), mask=cols < N)
    tl.store(FINAL_DB + cols, tl.sum(db, axis=0), mask=cols < N)


def layer_norm_backward(x, dy, w, mean, rstd, group_size_m):
    M, N = x.shape
    locks = torch.zeros(2 * group_size_m, dtype=torch.int32)
    _dw = torch.zeros((group_size_m, N), dtype=torch.float32)
    _db = torch.zeros((group_size_m, N), dtype=torch.float32)
    dw, db, dx = torch.empty(N), torch.empty(N), torch.empty_like(dy)
    _layer_norm_bwd_dx_fused[(M,)](dx, dy, _dw, _db, x, w, mean, rstd, locks, x.stride(0), N,
                                   GROUP_SIZE_M=group_size_m, BLOCK_SIZE_N=triton.next_power_of_2(N))
    assert (locks[:group_size_m] == 0).all() and (locks[group_size_m:] == 1).all()   # released; every group wrote
    _layer_norm_bwd_dwdb[(triton.cdiv(N, 64),)](_dw, _db, dw, db, group_size_m, N, BLOCK_SIZE_M=8, BLOCK_SIZE_N=64)
    return dx, dw, db


@pytest.mark.parametrize("M, N, group_size_m", [(151, 300, 8), (40, 64, 16)])
def test_layer_norm_backward_with_a_lock_per_group(M, N, group_size_m):
    torch.manual_seed(5)
    x = (-2.3 + 0.5 * torch.randn(M, N)).requires_grad_(True)
    w = torch.rand(N, requires_grad=True)
    b = torch.rand(N, requires_grad=True)
    dy = 0.1 * torch.randn(M, N)
    torch.nn.functional.layer_norm(x, (N,), w, b, 1e-5).backward(dy)
    with torch.no_grad():
        mean = x.mean(1)
        rstd = 1 / torch.sqrt(x.var(1, unbiased=False) + 1e-5)
        dx, dw, db = layer_norm_backward(x.detach(), dy, w.detach(), mean, rstd, group_size_m)
    torch.testing.assert_close(dx, x.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw, w.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(db, b.grad, rtol=1e-4, atol=1e-4)
