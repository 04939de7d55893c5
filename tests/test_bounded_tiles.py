"""`tile_load(..., bounds=(rows, cols))` reads 0 outside the matrix and `tile_store(..., bounds=...)` writes nothing
there, so the original meTile's GEMM with bounds is right for any M, N and K, 1 included, in f32, f16 and bf16.
A tile wholly inside the bounds is stored straight from its simdgroup matrices."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import metile
from metile.frontend.errors import KernelTypeError

BF16 = np.dtype(ml_dtypes.bfloat16)


pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def gemm(A, B, C, M, N, K,
         BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
         BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 150), st.integers(1, 150), st.integers(1, 150), st.sampled_from([np.float32, np.float16, BF16]),
       st.sampled_from([(32, 32, 16), (64, 32, 32), (16, 16, 8)]))
@example(1, 1, 1, np.float32, (32, 32, 16))
@example(64, 64, 64, np.float16, (32, 32, 16))
@example(1, 129, 1, BF16, (64, 32, 32))
def test_bounded_gemm_at_any_size(M, N, K, dtype, blocks):
    bm, bn, bk = blocks
    rng = np.random.default_rng(M * 10000 + N * 100 + K)
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    c = np.full((M, N), 7.0, np.float32)
    gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_the_store_stays_on_simdgroup_matrices_inside_the_bounds():
    z = np.zeros((4, 4), np.float32)
    msl = gemm.compile(z, z, z, 4, 4, 4, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16).msl
    assert msl.count("simdgroup_store") == 4  # 2x2 pieces per simdgroup, straight to C in the unmasked branch
    # the masked branch: one loop over the pieces, each lane storing its two elements of the piece it is at
    assert msl.count("thread_elements()") == 2 and "for (int p = 0; p < 4; p += 1)" in msl
    assert msl.count("simdgroup_multiply_accumulate") > 0


@metile.kernel
def copy(X, Y, rows, cols, ld, R: metile.constexpr, C: metile.constexpr):
    r0, c0 = metile.program_id(0) * R, metile.program_id(1) * C
    t = metile.tile_load(X, r0, c0, ld, (R, C), bounds=(rows, cols))
    metile.tile_store(Y, r0, c0, ld, t * 2.0 + 1.0, (R, C), bounds=(rows, cols))


@pytest.mark.parametrize(("rows", "cols"), [(5, 7), (32, 32), (33, 1), (1, 100)])
def test_bounded_load_and_store_touch_only_the_matrix(rows, cols):
    ld = cols + 3   # rows padded: the padding must stay untouched
    x = np.random.default_rng(rows).standard_normal((rows, ld)).astype(np.float32)
    y = np.full((rows, ld), -5.0, np.float32)
    copy[(metile.cdiv(rows, 16), metile.cdiv(cols, 16))](x, y, rows, cols, ld, R=16, C=16)
    np.testing.assert_array_equal(y[:, :cols], x[:, :cols] * 2 + 1)
    assert (y[:, cols:] == -5.0).all()


def test_bounds_must_be_a_pair_of_integers():
    @metile.kernel
    def bad(X, WHAT: metile.constexpr):
        if WHAT == "pair":
            t = metile.tile_load(X, 0, 0, 8, (8, 8), bounds=8)
        else:
            t = metile.tile_load(X, 0, 0, 8, (8, 8), bounds=(8, 2.5))
        metile.tile_store(X, 0, 0, 8, t, (8, 8))

    x = np.zeros(64, np.float32)
    with pytest.raises(KernelTypeError, match="bounds must be a pair"):
        bad[(1,)](x, WHAT="pair")
    with pytest.raises(KernelTypeError, match="the bound on cols must be an integer scalar"):
        bad[(1,)](x, WHAT="float")
