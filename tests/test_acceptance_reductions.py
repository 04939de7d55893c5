"""Acceptance: `metile.sum`, `metile.max` and `metile.min` over whole 1-D tiles and over one axis of 2-D tiles.

Masked-off elements are given the reduction's identity with `where`, so sizes that are not a multiple of
the block check both the masking and the identity the lowering uses to combine partial results
(all-negative data for `max`, all-positive data for `min`). Integer reductions, and `sum` of a bool tile
(a count, in i32), are compared exactly.
One specialization per kernel and element type; the data, sizes and grids vary at run time.
"""

from __future__ import annotations

import numpy as np
import pytest

import metile

F32_LOWEST, F32_HIGHEST = -3.0e38, 3.0e38
I32_LOWEST, I32_HIGHEST = -(2**31), 2**31 - 1


pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def row_reduce(X, Sum, Max, Min, Positive, n_cols, BLOCK: metile.constexpr, LOWEST: metile.constexpr,
               HIGHEST: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    ok = cols < n_cols
    x = metile.load(X + row * n_cols + cols, mask=ok)
    metile.store(Sum + row, metile.sum(x))
    metile.store(Max + row, metile.max(metile.where(ok, x, LOWEST)))
    metile.store(Min + row, metile.min(metile.where(ok, x, HIGHEST)))
    metile.store(Positive + row, metile.sum(ok & (x > 0)))


@metile.kernel
def block_reduce_2d(X, RowSum, RowMax, RowMin, ColSum, ColMax, ColMin, Total, M, N,
                    BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                    LOWEST: metile.constexpr, HIGHEST: metile.constexpr):
    pid = metile.program_id(0)
    rows = pid * BLOCK_M + metile.arange(0, BLOCK_M)
    cols = metile.arange(0, BLOCK_N)
    ok = (rows[:, None] < M) & (cols[None, :] < N)
    x = metile.load(X + rows[:, None] * N + cols[None, :], mask=ok)
    hi = metile.where(ok, x, LOWEST)
    lo = metile.where(ok, x, HIGHEST)
    row_ok = rows < M
    metile.store(RowSum + rows, metile.sum(x, axis=1), mask=row_ok)
    metile.store(RowMax + rows, metile.max(hi, axis=1), mask=row_ok)
    metile.store(RowMin + rows, metile.min(lo, axis=-1), mask=row_ok)
    col_ok = cols < N
    metile.store(ColSum + pid * N + cols, metile.sum(x, axis=0), mask=col_ok)
    metile.store(ColMax + pid * N + cols, metile.max(hi, axis=0), mask=col_ok)
    metile.store(ColMin + pid * N + cols, metile.min(lo, axis=0), mask=col_ok)
    metile.store(Total + pid, metile.sum(x))


ROW_BLOCK = 256
ROW_CONSTS = {
    "f32": {"BLOCK": ROW_BLOCK, "LOWEST": F32_LOWEST, "HIGHEST": F32_HIGHEST},
    "i32": {"BLOCK": ROW_BLOCK, "LOWEST": I32_LOWEST, "HIGHEST": I32_HIGHEST},
}
BM, BN = 16, 32
BLOCK_CONSTS = {
    "f32": {"BLOCK_M": BM, "BLOCK_N": BN, "LOWEST": F32_LOWEST, "HIGHEST": F32_HIGHEST},
    "i32": {"BLOCK_M": BM, "BLOCK_N": BN, "LOWEST": I32_LOWEST, "HIGHEST": I32_HIGHEST},
}


def make_data(kind: str, shape, seed: int, dtype) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "i32":
        lo, hi = {"mixed": (-1000, 1000), "negative": (-5000, -1), "positive": (1, 5000)}[kind]
        return rng.integers(lo, hi, shape, dtype=np.int32)
    x = rng.standard_normal(shape).astype(np.float32)
    if kind == "negative":
        return -np.abs(x) - 10.0
    if kind == "positive":
        return np.abs(x) + 10.0
    return x


def run_row_reduce(x: np.ndarray, dtype: str):
    rows, cols = x.shape
    out = [np.full(rows, 123, x.dtype) for _ in range(3)]
    positive = np.full(rows, -1, np.int32)
    row_reduce[(rows,)](x, *out, positive, cols, **ROW_CONSTS[dtype])
    np.testing.assert_array_equal(positive, (x > 0).sum(1))
    return out


@pytest.mark.parametrize("kind", ["mixed", "negative", "positive"])
@pytest.mark.parametrize("cols", [256, 100, 1, 255])
def test_whole_tile_reductions_f32(kind, cols):
    x = make_data(kind, (6, cols), cols, "f32")
    s, mx, mn = run_row_reduce(x, "f32")
    np.testing.assert_allclose(s, x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(mx, x.max(1))
    np.testing.assert_array_equal(mn, x.min(1))


@pytest.mark.parametrize("kind", ["mixed", "negative", "positive"])
@pytest.mark.parametrize("cols", [256, 37])
def test_whole_tile_reductions_i32_are_exact(kind, cols):
    x = make_data(kind, (5, cols), 7 + cols, "i32")
    s, mx, mn = run_row_reduce(x, "i32")
    np.testing.assert_array_equal(s, x.sum(1))
    np.testing.assert_array_equal(mx, x.max(1))
    np.testing.assert_array_equal(mn, x.min(1))


def blockwise_reference(x: np.ndarray):
    """Per row-block column partials and totals, as `block_reduce_2d` writes them."""
    M, N = x.shape
    blocks = -(-M // BM)
    acc = np.int64 if x.dtype == np.int32 else np.float64
    col_sum = np.stack([x[i * BM:(i + 1) * BM].sum(0, dtype=acc) for i in range(blocks)])
    col_max = np.stack([x[i * BM:(i + 1) * BM].max(0) for i in range(blocks)])
    col_min = np.stack([x[i * BM:(i + 1) * BM].min(0) for i in range(blocks)])
    total = np.array([x[i * BM:(i + 1) * BM].sum(dtype=acc) for i in range(blocks)])
    return col_sum, col_max, col_min, total


def run_block_reduce(x: np.ndarray, dtype: str):
    M, N = x.shape
    blocks = -(-M // BM)
    outs = [np.full(M, 77, x.dtype) for _ in range(3)] + [np.full(blocks * N, 77, x.dtype) for _ in range(3)]
    total = np.full(blocks, 77, x.dtype)
    block_reduce_2d[(blocks,)](x, *outs, total, M, N, **BLOCK_CONSTS[dtype])
    return outs[:3], [o.reshape(blocks, N) for o in outs[3:]], total


@pytest.mark.parametrize("kind", ["mixed", "negative", "positive"])
@pytest.mark.parametrize(("M", "N"), [(16, 32), (64, 32), (13, 29), (50, 7), (1, 1)])
def test_axis_reductions_of_2d_tiles_f32(kind, M, N):
    x = make_data(kind, (M, N), M * 100 + N, "f32")
    (rs, rmx, rmn), (cs, cmx, cmn), total = run_block_reduce(x, "f32")
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(rs, x64.sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(rmx, x.max(1))
    np.testing.assert_array_equal(rmn, x.min(1))
    ref_cs, ref_cmx, ref_cmn, ref_total = blockwise_reference(x)
    np.testing.assert_allclose(cs, ref_cs, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(cmx, ref_cmx)
    np.testing.assert_array_equal(cmn, ref_cmn)
    np.testing.assert_allclose(total, ref_total, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("kind", ["mixed", "negative", "positive"])
@pytest.mark.parametrize(("M", "N"), [(16, 32), (37, 20)])
def test_axis_reductions_of_2d_tiles_i32_are_exact(kind, M, N):
    x = make_data(kind, (M, N), M + N, "i32")
    (rs, rmx, rmn), (cs, cmx, cmn), total = run_block_reduce(x, "i32")
    np.testing.assert_array_equal(rs, x.sum(1))
    np.testing.assert_array_equal(rmx, x.max(1))
    np.testing.assert_array_equal(rmn, x.min(1))
    ref_cs, ref_cmx, ref_cmn, ref_total = blockwise_reference(x)
    np.testing.assert_array_equal(cs, ref_cs)
    np.testing.assert_array_equal(cmx, ref_cmx)
    np.testing.assert_array_equal(cmn, ref_cmn)
    np.testing.assert_array_equal(total, ref_total)


def test_masked_rows_and_columns_are_not_written():
    x = make_data("mixed", (13, 29), 3, "f32")
    per_row = [np.full(BM, 77, np.float32) for _ in range(3)]
    per_col = [np.full(BN, 77, np.float32) for _ in range(3)]
    block_reduce_2d[(1,)](x, *per_row, *per_col, np.zeros(1, np.float32), 13, 29, **BLOCK_CONSTS["f32"])
    for out in per_row:
        np.testing.assert_array_equal(out[13:], 77)
    for out in per_col:
        np.testing.assert_array_equal(out[29:], 77)
    np.testing.assert_array_equal(per_row[1][:13], x.max(1))
    np.testing.assert_array_equal(per_col[2][:29], x.min(0))


@metile.kernel
def any_all(X, Out, M, N, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr):
    rows = metile.arange(0, BLOCK_M)
    cols = metile.arange(0, BLOCK_N)
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    x = metile.load(X + rows[:, None] * N + cols[None, :], mask=inside)
    pos = x > 0.0
    metile.store(Out, metile.where(metile.max(pos & inside), 1, 0))  # any element positive
    outside = (rows[:, None] >= M) | (cols[None, :] >= N)
    metile.store(Out + 1, metile.where(metile.min(pos | outside), 1, 0))  # every element positive
    metile.store(Out + 2 + rows, metile.where(metile.max(pos & inside, axis=1), 1, 0), mask=rows < M)
    metile.store(Out + 2 + M + cols, metile.where(metile.min(pos | (rows[:, None] >= M), axis=0), 1, 0),
                 mask=cols < N)
    if metile.max(x > 100.0):  # a runtime branch on "any", as the error for a tile condition suggests
        metile.store(Out + 2 + M + N, 1)


@pytest.mark.parametrize("fill", ["mixed", "negative", "positive", "one_large"])
def test_max_and_min_of_bool_tiles_are_any_and_all(fill):
    M, N = 5, 7
    x = np.random.default_rng(M * N).standard_normal((M, N)).astype(np.float32)
    x = {"mixed": x, "negative": -np.abs(x) - 0.5, "positive": np.abs(x) + 0.5,
         "one_large": np.where(np.arange(M * N).reshape(M, N) == 17, 200.0, -np.abs(x)).astype(np.float32)}[fill]
    x[0, 0] = abs(x[0, 0]) + 0.5 if fill == "mixed" else x[0, 0]  # row 0 and column 0 have a positive element
    out = np.zeros(2 + M + N + 1, np.int32)
    any_all[(1,)](x, out, M, N, BLOCK_M=8, BLOCK_N=8)
    pos = x > 0
    expected = [pos.any(), pos.all(), *pos.any(axis=1), *pos.all(axis=0), (x > 100).any()]
    np.testing.assert_array_equal(out, np.array(expected, np.int32))
