"""`metile.dot` of every shape: sides that are not multiples of 8 (a decode step's 1 to 7 rows, ragged tiles) are
padded to 8x8 pieces where that at most doubles the work, and computed by per-thread multiply-adds otherwise, as
batched 3-D products are (`metile.rewrite.lower.fma`); checked against numpy with and without an accumulator, with
masked loads, infinities, in loops over k (multi-buffered too); products whose sides are multiples of 8 still run
on simdgroup matrices as they are."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.emit import compile_to_msl
from metile.frontend.errors import ShapeMismatchError

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def mm(A, B, C, Acc, M: metile.constexpr, N: metile.constexpr, K: metile.constexpr, WITH_ACC: metile.constexpr):
    m, n, k = metile.arange(0, M), metile.arange(0, N), metile.arange(0, K)
    a = metile.load(A + m[:, None] * K + k[None, :])
    b = metile.load(B + k[:, None] * N + n[None, :])
    if WITH_ACC:
        c = metile.dot(a, b, metile.load(Acc + m[:, None] * N + n[None, :]))
    else:
        c = metile.dot(a, b)
    metile.store(C + m[:, None] * N + n[None, :], c)


SHAPES = [(1, 16, 16), (3, 32, 16), (7, 64, 32), (5, 7, 3), (1, 1, 1), (24, 40, 12), (9, 17, 33), (2, 128, 40),
          (16, 16, 16)]


@pytest.mark.parametrize(("m", "n", "k"), SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["f16", "f32"])
def test_dot_of_any_shape_matches_numpy(m, n, k, dtype):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    acc = rng.standard_normal((m, n)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for with_acc in (False, True):
        c = np.zeros((m, n), np.float32)
        mm[(1,)](a, b, c, acc, M=m, N=n, K=k, WITH_ACC=with_acc)
        metile.synchronize()
        np.testing.assert_allclose(c, want + acc * with_acc, rtol=1e-5, atol=1e-5 * k)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, "bf16", "f8e4m3"])
@pytest.mark.parametrize(("m", "n", "k"), [(3, 5, 7), (6, 16, 16), (2, 8, 40)])
def test_ragged_products_of_every_operand_type(m, n, k, dtype):
    import ml_dtypes

    dt = {"bf16": ml_dtypes.bfloat16, "f8e4m3": ml_dtypes.float8_e4m3fn}.get(dtype, dtype)
    rng = np.random.default_rng(m * n * k)
    lo = 0 if dt is np.uint8 else -4
    a, b = (rng.integers(lo, 5, shape).astype(dt) for shape in ((m, k), (k, n)))
    c = np.zeros((m, n), np.int32 if dt in (np.int8, np.uint8) else np.float32)
    mm[(1,)](a, b, c, c, M=m, N=n, K=k, WITH_ACC=False)
    metile.synchronize()
    np.testing.assert_array_equal(c, a.astype(np.float64) @ b.astype(np.float64))   # small integers: exact


@metile.kernel
def decode_gemm(A, B, C, M, N, K, stride_am, stride_bk, stride_cm, BM: metile.constexpr, BN: metile.constexpr,
                BK: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.program_id(0) * BN + metile.arange(0, BN)
    acc = metile.zeros((BM, BN))
    for k0 in range(0, K, BK):
        rk = k0 + metile.arange(0, BK)
        a = metile.load(A + rm[:, None] * stride_am + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K),
                        other=0.0)
        b = metile.load(B + rk[:, None] * stride_bk + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N),
                        other=0.0)
        acc = metile.dot(a, b, acc)
    metile.store(C + rm[:, None] * stride_cm + rn[None, :], acc.to(metile.float16),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize(("m", "bm"), [(1, 1), (3, 4), (5, 8), (7, 7), (12, 16)])
def test_decode_gemm_with_masks_and_a_loop_over_k(m, bm):
    """A decode step: few rows of activations times a weight matrix, tiles of any size, ragged edges masked."""
    rng = np.random.default_rng(m)
    n, k = 45, 70
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float16)
    decode_gemm[(metile.cdiv(n, 24),)](a, b, c, m, n, k, k, n, n, BM=bm, BN=24, BK=12)
    metile.synchronize()
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(c.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)


@metile.kernel
def bmm(A, B, C, NB: metile.constexpr, M: metile.constexpr, N: metile.constexpr, K: metile.constexpr):
    z = metile.arange(0, NB)[:, None, None]
    i = metile.arange(0, M)[None, :, None]
    j = metile.arange(0, N)[None, None, :]
    kr = metile.arange(0, K)
    a = metile.load(A + z * (M * K) + i * K + kr[None, None, :], mask=i < M - 1, other=1.0)
    b = metile.load(B + z * (K * N) + kr[None, :, None] * N + j)
    c = metile.dot(a, b, metile.full((NB, M, N), 0.5))
    metile.store(C + z * (M * N) + i * N + j, c)


@pytest.mark.parametrize(("nb", "m", "n", "k"), [(2, 8, 8, 8), (3, 5, 6, 7), (4, 1, 16, 32), (2, 16, 3, 1),
                                                  (2, 12, 16, 16), (3, 16, 8, 24)])
def test_batched_dot(nb, m, n, k):
    rng = np.random.default_rng(nb + m + n + k)
    a = rng.standard_normal((nb, m, k)).astype(np.float32)
    b = rng.standard_normal((nb, k, n)).astype(np.float32)
    c = np.zeros((nb, m, n), np.float32)
    bmm[(1,)](a, b, c, NB=nb, M=m, N=n, K=k)
    metile.synchronize()
    am = a.copy()
    am[:, m - 1, :] = 1.0
    np.testing.assert_allclose(c, am @ b + 0.5, rtol=1e-5, atol=1e-5 * k)


@metile.kernel
def bad_batch(A, B, C):
    a = metile.zeros((2, 4, 4))
    b = metile.zeros((3, 4, 4))
    metile.store(C + metile.arange(0, 4), metile.sum(metile.sum(metile.dot(a, b), axis=0), axis=0))


@metile.kernel
def bad_rank(A, B, C):
    a = metile.zeros((2, 4, 4))
    b = metile.zeros((4, 4))
    metile.store(C + metile.arange(0, 4), metile.sum(metile.sum(metile.dot(a, b), axis=0), axis=0))


@pytest.mark.parametrize(("kernel", "message"), [(bad_batch, r"batches differ: \[2, 4, 4\] x \[3, 4, 4\]"),
                                                  (bad_rank, r"a 3-D tile times a 2-D tile")])
def test_batched_dot_shapes_are_checked(kernel, message):
    with pytest.raises(ShapeMismatchError, match=message):
        kernel[(1,)](np.zeros(1, np.float32), np.zeros(1, np.float32), np.zeros(4, np.float32))


def _msl(m, n, k):
    a, b, c = np.zeros((m, k), np.float32), np.zeros((k, n), np.float32), np.zeros((m, n), np.float32)
    return compile_to_msl(mm.trace(a, b, c, c, M=m, N=n, K=k, WITH_ACC=False)).msl


def test_each_shape_takes_its_way():
    """Read off the MSL: matrices for multiples of 8, padded matrices where padding at most doubles the work (12 rows
    padded to 16, k of 12 to 16, a decode step of 5 rows to 8), per-thread multiply-adds otherwise (3 rows would be
    2.7 times the work, a side of 33 more than twice)."""
    assert "simdgroup_multiply_accumulate" in _msl(16, 16, 16)
    for padded in [(12, 16, 16), (16, 16, 12), (5, 32, 32), (24, 40, 12)]:
        msl = _msl(*padded)
        assert "simdgroup_multiply_accumulate" in msl and "fma(" not in msl, padded
    for per_thread in [(3, 16, 16), (1, 64, 32), (9, 17, 33), (5, 7, 3)]:
        msl = _msl(*per_thread)
        assert "simdgroup_multiply_accumulate" not in msl and "fma(" in msl, per_thread


def test_batched_products_of_matrix_sizes_run_on_matrices():
    """A batch of products whose matrices are (or pad cheaply to) multiples of 8 runs each on simdgroup matrices,
    one after the other; a batch of 1-row products runs per thread."""
    def msl(nb, m, n, k):
        a, b, c = np.zeros((nb, m, k), np.float32), np.zeros((nb, k, n), np.float32), np.zeros((nb, m, n), np.float32)
        return compile_to_msl(bmm.trace(a, b, c, NB=nb, M=m, N=n, K=k)).msl

    for on_matrices in [(2, 16, 16, 16), (2, 12, 16, 16)]:
        assert "simdgroup_multiply_accumulate" in msl(*on_matrices), on_matrices
    assert "simdgroup_multiply_accumulate" not in msl(4, 1, 16, 32)


@pytest.mark.parametrize(("m", "n", "k"), [(12, 16, 12), (5, 32, 32), (3, 16, 16)])
def test_padding_adds_exact_zeros_next_to_infinities(m, n, k):
    """The padded rows and columns never reach a real element: infinities and NaNs in the operands give numpy's
    results, and a padded product of finite values is not made NaN by them."""
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[0, k - 1], b[k - 1, 1], b[0, n - 1] = np.inf, -np.inf, np.nan
    c = np.zeros((m, n), np.float32)
    mm[(1,)](a, b, c, c, M=m, N=n, K=k, WITH_ACC=False)
    metile.synchronize()
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


@metile.kernel
def staged_loop(A, B, C, M: metile.constexpr, N: metile.constexpr, K, BK: metile.constexpr):
    rm, rn = metile.arange(0, M), metile.arange(0, N)
    acc = metile.zeros((M, N))
    for k0 in metile.tile_range(0, K, BK, num_stages=3):
        rk = k0 + metile.arange(0, BK)
        a = metile.load(A + rm[:, None] * K + rk[None, :], mask=rk[None, :] < K, other=0.0)
        b = metile.load(B + rk[:, None] * N + rn[None, :], mask=rk[:, None] < K, other=0.0)
        acc = metile.dot(a, b, acc)
    metile.store(C + rm[:, None] * N + rn[None, :], acc)


@pytest.mark.parametrize(("m", "n", "bk"), [(3, 24, 8), (6, 16, 12), (16, 16, 16)])
def test_products_in_a_multi_buffered_loop(m, n, bk):
    rng = np.random.default_rng(m * bk)
    k = 50
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    staged_loop[(1,)](a, b, c, k, M=m, N=n, BK=bk)
    metile.synchronize()
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-4)


@metile.kernel
def decode_attention(Q, K, V, O, M: metile.constexpr, N: metile.constexpr, D: metile.constexpr):
    m, n, d = metile.arange(0, M), metile.arange(0, N), metile.arange(0, D)
    q = metile.load(Q + m[:, None] * D + d[None, :])
    k = metile.load(K + n[:, None] * D + d[None, :])
    v = metile.load(V + n[:, None] * D + d[None, :])
    s = metile.dot(q, metile.trans(k)) * 0.125
    p = metile.exp(s - metile.max(s, axis=1)[:, None])
    p = p / metile.sum(p, axis=1)[:, None]
    metile.store(O + m[:, None] * D + d[None, :], metile.dot(p.to(metile.float16), v))


@pytest.mark.parametrize(("m", "n", "d"), [(1, 16, 16), (3, 24, 32), (5, 40, 16), (12, 20, 24), (16, 16, 16)])
def test_attention_of_a_few_query_rows(m, n, d):
    """Two products in a row, the first of a transposed operand, the second of a softmax of the first: each takes
    its shape's way (per thread, padded or on matrices) and reads the other's result wherever it is held."""
    rng = np.random.default_rng(m)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((m, d), (n, d), (n, d)))
    o = np.zeros((m, d), np.float32)
    decode_attention[(1,)](q, k, v, o, M=m, N=n, D=d)
    metile.synchronize()
    s = q.astype(np.float32) @ k.astype(np.float32).T * 0.125
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(o, p.astype(np.float16).astype(np.float32) @ v.astype(np.float32), rtol=1e-4,
                               atol=1e-5)
