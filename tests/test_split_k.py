"""`split_k`: a product with fewer 8x8 pieces than the program's simdgroups has its k cut into slices, one per
group of simdgroups, whose partial sums are added; every way its result is used afterwards reads the sum."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.rewrite.pipeline import TILE_PIPELINE, run


@metile.kernel
def gemv_like(A, B, C, Rowsum, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    rows = metile.program_id(0) * BM + metile.arange(0, BM)
    cols = metile.program_id(1) * BN + metile.arange(0, BN)
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k0 in metile.tile_range(0, K, BK):
        ks = k0 + metile.arange(0, BK)
        a = metile.load(A + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = metile.load(B + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = metile.dot(a, b, acc)
    live = (rows[:, None] < M) & (cols[None, :] < N)
    metile.store(C + rows[:, None] * N + cols[None, :], acc, mask=live)      # lane by lane, from the sum
    # a reduction of the sum: each program's row sums over its BN columns, in column pid_n of a [M, programs] array
    metile.store(Rowsum + rows * metile.num_programs(1) + metile.program_id(1), metile.sum(acc, 1), mask=rows < M)


def check_product(a, b, c, rowsum, bn: int, rtol: float, atol: float) -> None:
    """`c` is `a @ b` and `rowsum` the sums of its rows over each program's `bn` columns (`gemv_like`'s outputs)."""
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=rtol, atol=atol)
    blocks = np.pad(want, ((0, 0), (0, -want.shape[1] % bn))).reshape(want.shape[0], -1, bn).sum(2)
    np.testing.assert_allclose(rowsum, blocks, rtol=rtol, atol=10 * atol)


def _slices(compiled) -> list[int]:
    lowered = run(TILE_PIPELINE, compiled.tile_ir)
    return [int(line.split("split ")[1].split()[0].rstrip(":,")) for line in metile.ir.pretty(lowered).splitlines()
            if ", split " in line]


@pytest.mark.parametrize(("dtype", "shape", "blocks", "sgs"), [
    (np.float32, (13, 9, 300), (8, 8, 64), None),      # 4 slices of 16
    (np.float16, (7, 16, 100), (8, 16, 32), None),     # 2 pieces: 2 slices
    (np.float32, (8, 8, 256), (8, 8, 128), 8),         # 8 simdgroups asked: 8 slices
    (np.float32, (9, 8, 64), (8, 8, 16), None),        # k too short to split: one simdgroup, unchanged
])
def test_split_products_are_right_wherever_they_are_read(dtype, shape, blocks, sgs):
    M, N, K = shape
    bm, bn, bk = blocks
    rng = np.random.default_rng(M + N + K)
    a, b = rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)
    c, rowsum = np.zeros((M, N), np.float32), np.zeros((M, metile.cdiv(N, bn)), np.float32)
    options = {} if sgs is None else {"num_simdgroups": sgs}
    args = (a, b, c, rowsum, M, N, K)
    grid = (metile.cdiv(M, bm), metile.cdiv(N, bn))
    gemv_like[grid](*args, BM=bm, BN=bn, BK=bk, sanitize=True, **options)
    check_product(a, b, c, rowsum, bn, 1e-4, 1e-3)
    compiled = gemv_like.compile(*args, BM=bm, BN=bn, BK=bk, **options)
    pieces = (bm // 8) * (bn // 8)
    want_slices = {(8, 8, 64): [4], (8, 16, 32): [2], (8, 8, 128): [8], (8, 8, 16): []}[blocks]
    assert _slices(compiled) == want_slices
    assert compiled.threadgroup_size == 32 * (pieces * want_slices[0] if want_slices else 1)
