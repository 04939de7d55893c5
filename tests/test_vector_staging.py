"""A `dot` operand staged straight from device memory moves in runs of 4 elements: one vector load and one vector
store per run where the run is aligned and inside the mask (checked at run time), element by element otherwise,
with a simdgroup's rows spaced so that its stores meet no bank conflict."""

from __future__ import annotations

import numpy as np
import pytest

import metile


@metile.kernel
def gemm(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    row, col = metile.program_id(0) * BM, metile.program_id(1) * BN
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, row, k, K, (BM, BK), bounds=(M, K))
        b = metile.tile_load(B, k, col, N, (BK, BN), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, row, col, N, acc, (BM, BN), bounds=(M, N))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("K", [96, 90, 7])   # rows aligned, rows misaligned (runs fall back), shorter than a run
def test_runs_are_vectors_where_aligned_and_right_everywhere(dtype, K):
    M, N = 70, 36
    rng = np.random.default_rng(K)
    a, b = rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)
    c = np.zeros((M, N), np.float32)
    grid = (metile.cdiv(M, 64), metile.cdiv(N, 32))
    gemm[grid](a, b, c, M, N, K, BM=64, BN=32, BK=32, sanitize=True)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    msl = gemm.compile(a, b, c, M, N, K, BM=64, BN=32, BK=32).msl
    vector = "half4" if dtype == np.float16 else "float4"
    assert f"*(threadgroup {vector}*)" in msl and f"*(device const {vector}*)" in msl
    assert "& 3) == 0" in msl   # the run-time alignment check (K is not known)


def test_f16_staging_is_vectorised_without_bank_conflicts():
    n = 128
    a, b = np.ones((n, n), np.float16), np.ones((n, n), np.float16)
    c = np.zeros((n, n), np.float32)
    d = gemm[(2, 4)](a, b, c, n, n, n, BM=64, BN=32, BK=32, profile=True).to_dict()
    assert (c == n).all()
    assert d["threadgroup_instructions"] > 0 and d["bank_conflicts"] == 0   # staging stores and matrix loads alike
    assert d["load_coalescing_efficiency"] == 1.0


@metile.kernel
def gemm_strided(A, B, C, K, sak, sbn, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    m, n, k = metile.arange(0, BM), metile.arange(0, BN), metile.arange(0, BK)
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k0 in metile.tile_range(0, K, BK):
        a_offsets = m[:, None] * K * sak + (k0 + k)[None, :] * sak
        b_offsets = (k0 + k)[:, None] * BN * sbn + n[None, :] * sbn
        a = metile.load(A + a_offsets)   # offsets from the buffer's start, with a run-time column stride
        b = metile.load(B + b_offsets)
        acc = metile.dot(a, b, acc)
    metile.store(C + m[:, None] * BN + n[None, :], acc)


@pytest.mark.parametrize("step", [2, 3])
def test_a_column_stride_known_only_at_run_time_is_staged_element_by_element(step):
    """The element stride along the rows is a run-time argument: four consecutive elements may not be four
    consecutive addresses, so the runs are not vectors. (A stride of 1 is specialised: that compile knows it.)"""
    BM, BN, K = 32, 32, 64
    rng = np.random.default_rng(step)
    a_full = rng.standard_normal((BM, K * step)).astype(np.float32)
    b_full = rng.standard_normal((K, BN * step)).astype(np.float32)
    c = np.zeros((BM, BN), np.float32)
    gemm_strided[(1,)](a_full, b_full, c, K, step, step, BM=BM, BN=BN, BK=32)
    np.testing.assert_allclose(c, a_full[:, ::step] @ b_full[:, ::step], rtol=1e-4, atol=1e-4)
    assert "float4" not in gemm_strided.compile(a_full, b_full, c, K, step, step, BM=BM, BN=BN, BK=32).msl


@metile.kernel
def window_product(A, B, C, lda, off, BM: metile.constexpr, BK: metile.constexpr, BN: metile.constexpr):
    a = metile.tile_load(A, 0, off, lda, (BM, BK))    # no mask; aligned only when `off` is a multiple of 4
    b = metile.tile_load(B, 0, 0, BN, (BK, BN))
    acc = metile.dot(a, b)
    metile.tile_store(C, 0, 0, BN, acc, (BM, BN))


@pytest.mark.parametrize("off", [0, 1, 2, 4])
def test_unmasked_runs_fall_back_to_elements_where_misaligned(off):
    BM, BK, BN, lda = 32, 32, 32, 40
    rng = np.random.default_rng(off)
    a = rng.standard_normal((BM, lda)).astype(np.float32)
    b = rng.standard_normal((BK, BN)).astype(np.float32)
    c = np.zeros((BM, BN), np.float32)
    window_product[(1,)](a, b, c, lda, off, BM=BM, BK=BK, BN=BN, sanitize=True)
    np.testing.assert_allclose(c, a[:, off:off + BK] @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("N", "K", "checked"), [(32, 96, False), (32, 90, True), (36, 96, True)])
def test_row_strides_that_are_multiples_of_16_need_no_alignment_check(N, K, checked):
    """The launch specialises integer arguments that are multiples of 16 (as Triton does) and the loop index of
    `tile_range(0, K, 32)` is a multiple of 32, so every run of A and B is proven aligned when both row strides
    are multiples of 16: no test at run time, no element fallback."""
    M = 40
    rng = np.random.default_rng(N + K)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    gemm[(metile.cdiv(M, 64), metile.cdiv(N, 32))](a, b, c, M, N, K, BM=64, BN=32, BK=32, sanitize=True)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    msl = gemm.compile(a, b, c, M, N, K, BM=64, BN=32, BK=32).msl
    assert "*(device const float4*)" in msl
    assert ("& 3) == 0" in msl) == checked


@metile.kernel
def padded_gemm(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    rm = metile.program_id(0) * BM + metile.arange(0, BM)
    rn = metile.program_id(1) * BN + metile.arange(0, BN)
    acc = metile.zeros((BM, BN))
    for k0 in metile.tile_range(0, K, BK):
        rk = k0 + metile.arange(0, BK)
        mask = (rm[:, None] < M) & (rk[None, :] < K) & (rm[:, None] + rk[None, :] < M + K - 3)
        pad = metile.broadcast_to((rk[None, :] % 5).to(metile.float32) + 0.5, (BM, BK))
        a = metile.load(A + (rm[:, None] * K + rk[None, :]), mask=mask, other=pad)
        b = metile.load(B + (rk[:, None] * N + rn[None, :]), mask=(rk[:, None] < K) & (rn[None, :] < N), other=1.0)
        acc = metile.dot(a, b, acc)
    metile.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("K", [45, 96])   # runs cut by the mask and misaligned; aligned runs with a cut at the corner
def test_masked_runs_read_each_elements_own_mask_and_other(K):
    """A staged run's mask and `other` are evaluated once for the run and specialised to each of its elements: a
    mask mixing rows and columns and an `other` that differs along the run come out right at every element."""
    M, N, BM, BN, BK = 70, 36, 64, 32, 32
    rng = np.random.default_rng(K)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    grid = (metile.cdiv(M, BM), metile.cdiv(N, BN))
    padded_gemm[grid](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK, sanitize=True)
    kp = metile.cdiv(K, BK) * BK
    m, k = np.arange(M)[:, None], np.arange(kp)[None, :]
    ap = np.where((k < K) & (m + k < M + K - 3), np.pad(a, ((0, 0), (0, kp - K))), (k % 5) + 0.5)
    bp = np.pad(b, ((0, kp - K), (0, 0)), constant_values=1.0)
    np.testing.assert_allclose(c, ap.astype(np.float64) @ bp, rtol=1e-4, atol=1e-4)
    msl = padded_gemm.compile(a, b, c, M, N, K, BM=BM, BN=BN, BK=BK).msl
    assert "*(threadgroup float4*)" in msl   # staged in runs


@metile.kernel
def gemm_pointer_grid(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    rows = metile.program_id(0) * BM + metile.arange(0, BM)
    cols = metile.program_id(1) * BN + metile.arange(0, BN)
    ks = metile.arange(0, BK)
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k0 in metile.tile_range(0, K, BK):
        kk = k0 + ks
        # the pointer tile built as Triton programs build it: a column of row pointers broadcast along the row
        a = metile.load(A + rows[:, None] * K + kk[None, :], mask=(rows[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = metile.load(B + kk[:, None] * N + cols[None, :], mask=(kk[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = metile.dot(a, b, acc)
    metile.store(C + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@pytest.mark.parametrize("K", [96, 90, 7])
def test_a_pointer_grid_of_row_pointers_plus_columns_is_staged_in_vectors(K):
    M, N = 70, 36
    rng = np.random.default_rng(K)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    grid = (metile.cdiv(M, 64), metile.cdiv(N, 32))
    gemm_pointer_grid[grid](a, b, c, M, N, K, BM=64, BN=32, BK=32, sanitize=True)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    msl = gemm_pointer_grid.compile(a, b, c, M, N, K, BM=64, BN=32, BK=32).msl
    assert "*(threadgroup float4*)" in msl and "*(device const float4*)" in msl
