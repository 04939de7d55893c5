"""A `dot` operand staged from device memory tests its bounds once per tile: a tile wholly inside the matrix (every
tile but those on its edges) is copied by runs that test nothing, and only an edge tile's runs test the mask, each
from its first and last elements (element by element where the run is cut). Right at every size (ragged M, N and
K, K not a multiple of 4, tiny sizes, strided and transposed operands, f16, bf16 and f32), with masks that are not
true on an interval of the row (`!=`, `%`) still tested element by element; and the interior tiles' integer work,
counted on the CPU device, is what the hand count of their emitted code says."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import metile
from metile.ir.ops import BinOp, CmpOp
from metile.ir.types import DType, TileType
from metile.ir.values import Binary, Cast, Compare, Const, Var
from metile.rewrite.lower.staged_runs import on_interval

pytestmark = pytest.mark.usefixtures("on_cpu")

BF16 = np.dtype(ml_dtypes.bfloat16)


@metile.kernel
def gemm(A, B, C, M, N, K, lda, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    row, col = metile.program_id(0) * BM, metile.program_id(1) * BN
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, row, k, lda, (BM, BK), bounds=(M, K))
        b = metile.tile_load(B, k, col, N, (BK, BN), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, row, col, N, acc, (BM, BN), bounds=(M, N))


def _run_gemm(M, N, K, dtype, lda=None, seed=0):
    lda = K if lda is None else lda
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (M, lda)).astype(dtype)
    b = rng.uniform(-1, 1, (K, N)).astype(dtype)
    c = np.full((M, N), np.nan, np.float32)
    gemm[(metile.cdiv(M, 32), metile.cdiv(N, 32))](a, b, c, M, N, K, lda, BM=32, BN=32, BK=32, sanitize=True)
    want = a[:, :K].astype(np.float64) @ b.astype(np.float64)
    tol = 1e-4 if dtype == np.float32 else 2e-2
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol)


SIZES = [(64, 64, 64),    # interior tiles only
         (130, 70, 100),  # interior and edge tiles on every axis
         (96, 40, 67),    # K not a multiple of 4: rows misaligned, runs cut by the edge
         (33, 65, 7),     # K shorter than a run
         (5, 3, 2),       # one edge tile
         (1, 1, 1)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: "x".join(map(str, s)))
def test_ragged_f32_gemm_is_right_on_interior_and_edge_tiles(size):
    _run_gemm(*size, np.float32)


@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("size", [(130, 70, 100), (96, 40, 67), (5, 3, 2)], ids=lambda s: "x".join(map(str, s)))
def test_ragged_half_gemm_is_right_on_interior_and_edge_tiles(size, dtype):
    _run_gemm(*size, dtype)


@pytest.mark.parametrize("lda", [100, 103])   # rows aligned; rows misaligned, tested run by run
def test_a_strided_operand_is_right_on_interior_and_edge_tiles(lda):
    _run_gemm(70, 40, 96, np.float32, lda=lda)


@metile.kernel
def gemm_at(At, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    row, col = metile.program_id(0) * BM, metile.program_id(1) * BN
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k in metile.tile_range(0, K, BK):
        at = metile.tile_load(At, k, row, M, (BK, BM), bounds=(K, M))   # A stored transposed: [K, M]
        b = metile.tile_load(B, k, col, N, (BK, BN), bounds=(K, N))
        acc = metile.dot(metile.trans(at), b, acc)
    metile.tile_store(C, row, col, N, acc, (BM, BN), bounds=(M, N))


@pytest.mark.parametrize("size", [(96, 64, 64), (70, 45, 37)], ids=lambda s: "x".join(map(str, s)))
def test_a_transposed_operand_is_right_on_interior_and_edge_tiles(size):
    M, N, K = size
    rng = np.random.default_rng(M)
    at, b = rng.standard_normal((K, M)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    gemm_at[(metile.cdiv(M, 32), metile.cdiv(N, 32))](at, b, c, M, N, K, BM=32, BN=32, BK=32, sanitize=True)
    np.testing.assert_allclose(c, at.T @ b, rtol=1e-4, atol=1e-4)


@metile.kernel
def gemm_masked(A, B, C, M, N, K, skip, MODE: metile.constexpr, BM: metile.constexpr, BN: metile.constexpr,
                BK: metile.constexpr):
    rows = metile.program_id(0) * BM + metile.arange(0, BM)
    cols = metile.program_id(1) * BN + metile.arange(0, BN)
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k0 in metile.tile_range(0, K, BK):
        kk = k0 + metile.arange(0, BK)
        if MODE == 0:     # bounds as Triton writes them, one-sided, one of them falling with the index
            keep = (rows[:, None] < M) & (K - kk[None, :] > 0)
        elif MODE == 1:   # a column left out: true off an interval
            keep = (rows[:, None] < M) & (kk[None, :] < K) & (kk[None, :] != skip)
        else:             # every eighth column from `skip` left out: not monotone
            keep = (rows[:, None] < M) & (kk[None, :] < K) & (kk[None, :] % 8 != skip % 8)
        a = metile.load(A + rows[:, None] * K + kk[None, :], mask=keep, other=0.0)
        b = metile.load(B + kk[:, None] * N + cols[None, :], mask=(kk[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = metile.dot(a, b, acc)
    metile.store(C + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@pytest.mark.parametrize("mode", [0, 1, 2], ids=["one-sided", "not-equal", "modulo"])
@pytest.mark.parametrize("K", [96, 70])
def test_masks_read_at_the_ends_only_where_they_hold_on_an_interval(mode, K):
    """Column 37 (mid-run: runs are columns 36..39) is left out by modes 1 and 2; a test of the run's or tile's
    ends alone would read it."""
    M, N, skip = 70, 36, 37
    rng = np.random.default_rng(K + mode)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    grid = (metile.cdiv(M, 32), metile.cdiv(N, 32))
    gemm_masked[grid](a, b, c, M, N, K, skip, MODE=mode, BM=32, BN=32, BK=32, sanitize=True)
    kept = a.copy()
    if mode == 1:
        kept[:, skip] = 0.0
    elif mode == 2:
        kept[:, np.arange(K) % 8 == skip % 8] = 0.0
    np.testing.assert_allclose(c, kept @ b, rtol=1e-4, atol=1e-4)
    assert "*(threadgroup float4*)" in gemm_masked.compile(a, b, c, M, N, K, skip, MODE=mode, BM=32, BN=32,
                                                           BK=32).msl


def _i32(name: str) -> Var:
    return Var(name, TileType(DType.I32))


def test_on_interval_reads_the_form_of_a_mask():
    h, x, n = _i32("h"), _i32("x"), _i32("n")
    at = Binary(BinOp.ADD, x, h)
    lt, ge = Compare(CmpOp.LT, at, n), Compare(CmpOp.GE, at, Const(0, DType.I32))
    assert on_interval(Binary(BinOp.AND, ge, lt), h)                                  # 0 <= x + h < n
    assert on_interval(Compare(CmpOp.GT, Binary(BinOp.SUB, n, at), Const(0, DType.I32)), h)   # n - (x + h) > 0
    assert on_interval(Compare(CmpOp.LT, Cast(at, DType.I64), Cast(n, DType.I64)), h)  # widened
    assert on_interval(Compare(CmpOp.LT, x, n), h)                                     # the same at every index
    assert not on_interval(Compare(CmpOp.NE, at, n), h)                                # true off one index
    assert not on_interval(Binary(BinOp.OR, ge, lt), h)                                # a union
    assert not on_interval(Compare(CmpOp.LT, Binary(BinOp.REM, at, Const(8, DType.I32)), n), h)
    assert not on_interval(Compare(CmpOp.LT, Binary(BinOp.MUL, at, x), n), h)          # sign of x unknown
    assert not on_interval(Compare(CmpOp.LT, at, Binary(BinOp.ADD, n, h)), h)          # the index on both sides
    assert not on_interval(Compare(CmpOp.LT, Binary(BinOp.ADD, h, h), n), h)


def _staging_issue(msl: str, M: int, N: int, K: int) -> float:
    """The integer issue cycles of the staging code (the K loop's body up to the barrier before the products) of
    `gemm`'s MSL, run on the CPU device over the whole grid."""
    dev = metile.device("cpu")
    fn = dev.compile(msl, name="staging.metal").function("mtile_gemm")
    a, b = np.ones((M, K), np.float32), np.ones((K, N), np.float32)
    c = np.zeros((M, N), np.float32)
    args = [a, b, c, np.int32(M), np.int32(N), np.int32(K), np.int32(K)]
    p = dev.dispatch_threadgroups(fn, (metile.cdiv(M, 32), metile.cdiv(N, 32), 1), (128, 1, 1), args, profile=True)
    assert (c == K).all()
    lines = msl.splitlines()
    first = next(i for i, s in enumerate(lines, 1) if "for (int k_1" in s) + 1    # the loop's first barrier
    last = next(i for i, s in enumerate(lines, 1) if i > first and "threadgroup_barrier" in s)
    assert "threadgroup_barrier" in lines[first - 1]
    return sum(lc.counts.integer_issue for lc in p.lines if first < lc.line < last)


def test_interior_tiles_test_their_bounds_once_and_runs_test_nothing():
    """64^3 f32 in 32^3 tiles: 4 threadgroups of 4 simdgroups, 2 steps of k, every tile inside the matrices.
    Per simdgroup and step (adds, compares, `&&`, shifts and masks issue 1 cycle; statements reading only the loop
    counters and pointer declarations issue none):
      the thread's first run, shared by both operands: `row = tid >> 3` 1, `col = (tid & 7) << 2` 2;
      A's tile test: `row_1 >= 0` 1, `row_1 + 31` 1, the `if` 8 (its k terms read only the loop counter);
      B's tile test: `col_1 >= 0` 1, `col_1 + 31` 1, the `if` 8;
      per run, 2 runs an operand: the run's row in the tile `row + down` 1, in the matrix `row_1 + row` (A) or
      `k + row` (B) 1, and its column `k + col` (A) or `col_1 + col` (B) 1; a branch on the tile's test.
    Before, each run computed its row and column from its slot (divisions and remainders) and tested each of its 4
    elements' bounds: 288 cycles a step, 8 times this."""
    M = N = K = 64
    a, b, c = np.zeros((M, K), np.float32), np.zeros((K, N), np.float32), np.zeros((M, N), np.float32)
    msl = gemm.compile(a, b, c, M, N, K, K, BM=32, BN=32, BK=32, num_simdgroups=4).msl
    per_step = (1 + 2) + (1 + 1 + 8) + (1 + 1 + 8) + 2 * 2 * (1 + 1 + 1)
    assert _staging_issue(msl, M, N, K) == 4 * 4 * 2 * per_step
    # the edge tiles of a ragged size run the masked runs: more per tile than an interior one
    M2 = N2 = 48
    msl2 = gemm.compile(a, b, c, M2, N2, K, K, BM=32, BN=32, BK=32, num_simdgroups=4).msl
    assert _staging_issue(msl2, M2, N2, K) > 4 * 4 * 2 * per_step
