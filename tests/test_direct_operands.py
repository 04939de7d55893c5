"""`direct_operands=True`: `dot` operands loaded without a mask, row-major with unit column stride, are read by
each simdgroup straight from device memory into its simdgroup matrices; anything else is staged as before."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.frontend.errors import KernelArgumentError


@metile.kernel
def mm(A, B, C, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr, N: metile.constexpr,
       TRANSPOSED_B: metile.constexpr):
    row, col = metile.program_id(0) * BM, metile.program_id(1) * BN
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    rs, cs = row + metile.arange(0, BM), col + metile.arange(0, BN)
    for k in metile.tile_range(0, K, BK):
        ks = k + metile.arange(0, BK)
        a = metile.load(A + rs[:, None] * K + ks[None, :])   # unmasked: the blocks divide the matrices
        if TRANSPOSED_B:   # B stored as N x K: the operand's addresses go up down its columns
            b = metile.load(B + cs[None, :] * K + ks[:, None])
        else:
            b = metile.load(B + ks[:, None] * N + cs[None, :])
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, row, col, N, acc, (BM, BN))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("transposed_b", [False, True])
def test_direct_operands_skip_threadgroup_memory_and_stay_right(dtype, transposed_b):
    M, N, K = 64, 96, 96
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)
    b_arg = np.ascontiguousarray(b.T) if transposed_b else b
    consts = dict(BM=32, BN=32, BK=32, N=N, TRANSPOSED_B=transposed_b)
    want = a.astype(np.float32) @ b.astype(np.float32)
    staged_tg = mm.compile(a, b_arg, np.zeros((M, N), np.float32), K, **consts).threadgroup_memory
    for direct in (False, True):
        c = np.zeros((M, N), np.float32)
        mm[(2, 3)](a, b_arg, c, K, **consts, direct_operands=direct, sanitize=True)
        np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3)
    compiled = mm.compile(a, b_arg, c, K, **consts, direct_operands=True)
    if transposed_b:   # A read straight from memory, the transposed B still staged
        assert 0 < compiled.threadgroup_memory < staged_tg
    else:
        assert compiled.threadgroup_memory == 0 and "threadgroup_barrier" not in compiled.msl


def test_masked_operands_are_staged():
    """A bounded tile_load masks its elements: it is staged even when the launch asks for direct operands."""
    M, N, K = 40, 40, 40
    a, b = np.ones((M, K), np.float32), np.ones((K, N), np.float32)
    c = np.zeros((M, N), np.float32)

    @metile.kernel
    def bounded(A, B, C, M, N, K, BM: metile.constexpr):
        row, col = metile.program_id(0) * BM, metile.program_id(1) * BM
        acc = metile.zeros((BM, BM), dtype=metile.float32)
        for k in metile.tile_range(0, K, BM):
            acc = metile.dot(metile.tile_load(A, row, k, K, (BM, BM), bounds=(M, K)),
                             metile.tile_load(B, k, col, N, (BM, BM), bounds=(K, N)), acc)
        metile.tile_store(C, row, col, N, acc, (BM, BM), bounds=(M, N))

    bounded[(2, 2)](a, b, c, M, N, K, BM=32, direct_operands=True)
    assert (c == K).all()
    assert bounded.compile(a, b, c, M, N, K, BM=32, direct_operands=True).threadgroup_memory > 0


def test_direct_operands_takes_a_bool():
    z = np.zeros(64 * 64, np.float32).reshape(64, 64)
    with pytest.raises(KernelArgumentError, match="direct_operands=1 must be True or False"):
        mm[(1, 1)](z, z, z, 64, BM=32, BN=32, BK=32, N=64, TRANSPOSED_B=False, direct_operands=1)
