"""Acceptance: multi-axis grids and 2-D tiles.

- 2-D element-wise kernels over `program_id(0)` and `program_id(1)` with tiles built as
  `rows[:, None] * stride + cols[None, :]`, masked at edges that are not multiples of the block,
  and 1-D vectors broadcast along either axis;
- a 3-D grid whose third axis (`program_id(2)`) picks a batch;
- a 2-D grid of 1-D tiles (one row per `program_id(1)`);
- `tile_load` / `tile_store` outside GEMM: a strided window copy at arbitrary offsets, and `zeros`;
- `tile_swizzle` ("morton", "diagonal") in a GEMM gives the same result as no swizzle, also on grids
  with an odd number of tiles along an axis.
"""

from __future__ import annotations

import numpy as np
import pytest

import metile

pytestmark = pytest.mark.usefixtures("on_cpu")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@metile.kernel
def affine_2d(X, Y, RowScale, ColBias, Out, Coord, M, N, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    rows = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    offs = rows[:, None] * N + cols[None, :]
    ok = (rows[:, None] < M) & (cols[None, :] < N)
    x = metile.load(X + offs, mask=ok)
    y = metile.load(Y + offs, mask=ok)
    s = metile.load(RowScale + rows, mask=rows < M)
    b = metile.load(ColBias + cols, mask=cols < N)
    metile.store(Out + offs, x * s[:, None] + y + b[None, :], mask=ok)
    metile.store(Coord + offs, rows[:, None] * 1000 + cols[None, :], mask=ok)


@metile.kernel
def batched_scale(X, Scale, Out, M, N, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    batch = metile.program_id(2)
    rows = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    offs = batch * M * N + rows[:, None] * N + cols[None, :]
    ok = (rows[:, None] < M) & (cols[None, :] < N)
    s = metile.load(Scale + batch)
    metile.store(Out + offs, metile.load(X + offs, mask=ok) * s + batch, mask=ok)


@metile.kernel
def rows_of_blocks(X, Bias, Out, n_cols, BLOCK: metile.constexpr):
    row = metile.program_id(1)
    cols = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    ok = cols < n_cols
    x = metile.load(X + row * n_cols + cols, mask=ok)
    metile.store(Out + row * n_cols + cols, x * (row + 1) + metile.load(Bias + cols, mask=ok), mask=ok)


@metile.kernel
def copy_window(Src, Dst, Tag, src_r0, src_c0, src_stride, dst_r0, dst_c0, dst_stride,
                R: metile.constexpr, C: metile.constexpr):
    pid_r = metile.program_id(0)
    pid_c = metile.program_id(1)
    t = metile.tile_load(Src, src_r0 + pid_r * R, src_c0 + pid_c * C, src_stride, (R, C))
    metile.tile_store(Dst, dst_r0 + pid_r * R, dst_c0 + pid_c * C, dst_stride, t * 2.0 + 1.0, (R, C))
    tag = metile.zeros((R, C), dtype="i32") + (pid_r * 10 + pid_c)
    metile.tile_store(Tag, dst_r0 + pid_r * R, dst_c0 + pid_c * C, dst_stride, tag, (R, C))


@metile.kernel
def matmul_swizzled(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                    BLOCK_K: metile.constexpr, PATTERN: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    if PATTERN != "none":
        pid_m, pid_n = metile.tile_swizzle(pid_m, pid_n, pattern=PATTERN)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


@pytest.mark.parametrize(("M", "N"), [(64, 64), (50, 70), (1, 1), (33, 16), (16, 33)])
def test_2d_elementwise_grid_with_masked_edges(M, N):
    rng = np.random.default_rng(M * 1000 + N)
    bm, bn = 16, 32
    x, y = (rng.standard_normal((M, N), dtype=np.float32) for _ in range(2))
    s, b = rng.standard_normal(M, dtype=np.float32), rng.standard_normal(N, dtype=np.float32)
    # one extra row and column of sentinels around the live area, to catch unmasked edge stores
    out = np.full((M + 1) * (N + 1), -5.0, np.float32)
    coord = np.full((M + 1) * (N + 1), -5, np.int32)
    affine_2d[(cdiv(M, bm), cdiv(N, bn))](x, y, s, b, out, coord, M, N, BLOCK_M=bm, BLOCK_N=bn)
    np.testing.assert_allclose(out[:M * N].reshape(M, N), x * s[:, None] + y + b[None, :], rtol=1e-6, atol=1e-6)
    r, c = np.meshgrid(np.arange(M), np.arange(N), indexing="ij")
    np.testing.assert_array_equal(coord[:M * N].reshape(M, N), r * 1000 + c)
    np.testing.assert_array_equal(out[M * N:], -5.0)
    np.testing.assert_array_equal(coord[M * N:], -5)


@pytest.mark.parametrize(("batches", "M", "N"), [(3, 20, 40), (1, 16, 16), (5, 7, 3)])
def test_3d_grid_program_id_2_selects_the_batch(batches, M, N):
    rng = np.random.default_rng(batches + M + N)
    x = rng.standard_normal((batches, M, N), dtype=np.float32)
    scale = rng.standard_normal(batches, dtype=np.float32)
    out = np.zeros_like(x)
    batched_scale[(cdiv(M, 8), cdiv(N, 16), batches)](x, scale, out, M, N, BLOCK_M=8, BLOCK_N=16)
    ref = x * scale[:, None, None] + np.arange(batches, dtype=np.float32)[:, None, None]
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("rows", "cols"), [(4, 300), (7, 128), (1, 5)])
def test_2d_grid_of_1d_tiles(rows, cols):
    rng = np.random.default_rng(rows * cols)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    bias = rng.standard_normal(cols, dtype=np.float32)
    out = np.zeros_like(x)
    rows_of_blocks[(cdiv(cols, 128), rows)](x, bias, out, cols, BLOCK=128)
    ref = x * np.arange(1, rows + 1, dtype=np.float32)[:, None] + bias
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("tiles", "src_origin", "dst_origin"), [((2, 3), (5, 7), (3, 2)), ((1, 1), (0, 0), (0, 0)),
                                                                 ((4, 1), (8, 40), (0, 20))])
def test_tile_load_and_tile_store_copy_a_window(tiles, src_origin, dst_origin):
    R, C = 8, 16
    src = np.random.default_rng(11).standard_normal((40, 60), dtype=np.float32)
    dst = np.full((36, 56), -1.0, np.float32)
    tag = np.full((36, 56), -1, np.int32)
    (tr, tc), (sr, sc), (dr, dc) = tiles, src_origin, dst_origin
    copy_window[tiles](src, dst, tag, sr, sc, 60, dr, dc, 56, R=R, C=C)
    h, w = tr * R, tc * C
    ref = np.full_like(dst, -1.0)
    ref[dr:dr + h, dc:dc + w] = src[sr:sr + h, sc:sc + w] * 2.0 + 1.0
    np.testing.assert_allclose(dst, ref, rtol=1e-6)
    ref_tag = np.full_like(tag, -1)
    for i in range(tr):
        for j in range(tc):
            ref_tag[dr + i * R:dr + (i + 1) * R, dc + j * C:dc + (j + 1) * C] = i * 10 + j
    np.testing.assert_array_equal(tag, ref_tag)


SWIZZLE_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}


@pytest.mark.parametrize("pattern", ["morton", "diagonal"])
@pytest.mark.parametrize(("M", "N", "K"), [(128, 128, 64), (96, 160, 64), (160, 32, 32), (32, 96, 96)])
def test_tile_swizzle_does_not_change_the_gemm(pattern, M, N, K):
    rng = np.random.default_rng(M + N + K)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    plain = np.full((M, N), np.nan, np.float32)
    swizzled = np.full((M, N), np.nan, np.float32)
    grid = (M // 32, N // 32)
    matmul_swizzled[grid](a, b, plain, M, N, K, PATTERN="none", **SWIZZLE_BLOCKS)
    matmul_swizzled[grid](a, b, swizzled, M, N, K, PATTERN=pattern, **SWIZZLE_BLOCKS)
    np.testing.assert_allclose(plain, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(swizzled, plain, rtol=1e-6, atol=1e-6)
