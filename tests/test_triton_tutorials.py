"""Triton's tutorials 01 to 06, ported in `tests/acceptance_kernels/triton_tutorials.py`, run on the CPU device with
each tutorial's shapes scaled down, against float64 numpy references: vector add, fused softmax (also on a strided
view and with persistent programs), f16 matrix multiplication in grouped order with a leaky ReLU (bounded tiles and
pointer tiles, and the 8-bit float check), dropout (seeded: bit for bit Triton's generator), layer norm forward and
backward, and the forward pass of flash attention, causal or not."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests import philox_reference as ref
from tests.acceptance_kernels import triton_tutorials as tt

pytestmark = pytest.mark.usefixtures("on_cpu")


def f64(*arrays):
    return [a.astype(np.float64) for a in arrays]


# ---- 01 vector add


@pytest.mark.parametrize("size", [98432, 1, 1023])
def test_01_vector_add(size):
    rng = np.random.default_rng(0)
    x, y = rng.random(size, dtype=np.float32), rng.random(size, dtype=np.float32)
    np.testing.assert_array_equal(tt.add(x, y), x + y)


# ---- 02 fused softmax


def softmax_ref(x):
    (x,) = f64(x)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("num_programs", [None, 8])
def test_02_softmax_of_a_strided_view(num_programs):
    """The tutorial's 781 columns, read from a view of the first 781 of every row of an 800-wide array."""
    wide = np.random.default_rng(1).standard_normal((123, 800)).astype(np.float32) * 4
    x = wide[:, :781]
    y = tt.softmax(x, num_programs)
    np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("n_cols", [1, 32, 100])
def test_02_softmax_of_short_rows(n_cols):
    x = np.random.default_rng(n_cols).uniform(-90, -80, (5, n_cols)).astype(np.float32)
    np.testing.assert_allclose(tt.softmax(x), softmax_ref(x), rtol=1e-5, atol=1e-7)


# ---- 03 matrix multiplication


def matmul_ref(a, b, activation=""):
    c = np.matmul(*f64(a, b))
    return np.where(c >= 0, c, 0.01 * c) if activation == "leaky_relu" else c


@pytest.mark.parametrize("pointers", [False, True], ids=["tiles", "pointers"])
@pytest.mark.parametrize("activation", ["", "leaky_relu"])
def test_03_matmul(pointers, activation):
    """Sizes that no block divides (the tutorial's 512 x 512 x 512, scaled down), 3 groups of tile rows, the last
    one short: every output tile is computed once and right."""
    rng = np.random.default_rng(3)
    M, N, K = 150, 110, 90
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = tt.matmul(a, b, activation, pointers, group_size_m=2)
    assert c.dtype == np.float16
    np.testing.assert_allclose(c, matmul_ref(a, b, activation), rtol=1e-3, atol=1e-3)
    big = tt.matmul(a, b, activation, pointers, block_m=128, block_n=64, group_size_m=2)   # the tutorial's blocks
    np.testing.assert_allclose(big, matmul_ref(a, b, activation), rtol=1e-3, atol=1e-3)


def test_03_matmul_of_strided_operands():
    """The pointer form takes any strides (B transposed, C column-major); the tiled form takes any row stride."""
    rng = np.random.default_rng(4)
    M, N, K = 70, 45, 100
    a = rng.standard_normal((M, K + 6)).astype(np.float16)[:, :K]
    b = rng.standard_normal((N, K)).astype(np.float16).T
    want = matmul_ref(a, b)
    np.testing.assert_allclose(tt.matmul(a, b, pointers=True, group_size_m=8), want, rtol=1e-3, atol=1e-3)
    c = np.zeros((N, M), np.float16).T
    tt.matmul_kernel_ptrs[(3 * 2,)](a, b, c, M, N, K, *tt.elem_strides(a), *tt.elem_strides(b), *tt.elem_strides(c),
                                    BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=8, ACTIVATION="")
    np.testing.assert_allclose(c, want, rtol=1e-3, atol=1e-3)
    b_rows = np.ascontiguousarray(b)
    np.testing.assert_allclose(tt.matmul(a, b_rows, group_size_m=1), want, rtol=1e-3, atol=1e-3)


def test_03_matmul_in_fp8():
    """The tutorial's 8-bit check: A and B (stored transposed) in float8 e5m2, the product in f16."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((64, 80)).astype(ml_dtypes.float8_e5m2)
    b = rng.standard_normal((48, 80)).astype(ml_dtypes.float8_e5m2).T
    np.testing.assert_allclose(tt.matmul(a, b, pointers=True), matmul_ref(a, b), rtol=1e-3, atol=1e-3)


# ---- 04 low-memory dropout


def test_04_dropout_with_a_keep_mask():
    rng = np.random.default_rng(5)
    x = rng.standard_normal(10).astype(np.float32)
    p = 0.5
    x_keep = (rng.random(10) > p).astype(np.int32)
    np.testing.assert_array_equal(tt.dropout(x, x_keep, p), np.where(x_keep, x / (np.float32(1) - np.float32(p)), 0))


@pytest.mark.parametrize(("n", "p", "seed"), [(10, 0.5, 123), (10_000, 0.3, 512), (3000, 0.9, -7)])
def test_04_seeded_dropout_is_triton_s(n, p, seed):
    """The kept elements are those whose `rand(seed, offset)` is above p, the generator's words bit for bit
    Triton's; the same seed gives the same mask, another seed another."""
    x = np.random.default_rng(6).standard_normal(n).astype(np.float32) + 5.0  # no zero among the kept values
    out = tt.seeded_dropout(x, p, seed)
    keep = ref.rand(seed, np.arange(n, dtype=np.int32)) > np.float32(p)
    np.testing.assert_array_equal(out != 0, keep)
    np.testing.assert_array_equal(out, np.where(keep, x / (np.float32(1) - np.float32(p)), 0))
    np.testing.assert_array_equal(tt.seeded_dropout(x, p, seed), out)
    assert (tt.seeded_dropout(x, p, seed + 1) != out).any()
    if n >= 1000:
        assert abs(keep.mean() - (1 - p)) < 0.03


# ---- 05 layer norm


def layer_norm_ref(x, w, b, dy, eps):
    """y, mean, rstd, dx, dw and db in float64."""
    x, w, b, dy = f64(x, w, b, dy)
    mean = x.mean(1)
    rstd = 1 / np.sqrt(x.var(1) + eps)
    xhat = (x - mean[:, None]) * rstd[:, None]
    wdy = w * dy
    c1 = (xhat * wdy).mean(1, keepdims=True)
    c2 = wdy.mean(1, keepdims=True)
    dx = (wdy - (xhat * c1 + c2)) * rstd[:, None]
    return xhat * w + b, mean, rstd, dx, (dy * xhat).sum(0), dy.sum(0)


@pytest.mark.parametrize(("M", "N", "block_size"), [(151, 1000, None), (40, 300, 128), (3, 1, None)])
def test_05_layer_norm_forward_and_backward(M, N, block_size):
    """The tutorial's f16 test (1151 x 8192, scaled down); `block_size` 128 takes three blocks per row."""
    rng = np.random.default_rng(7)
    eps = 1e-5
    x = (rng.standard_normal((M, N)) * 2 - 2.3).astype(np.float16)
    w = rng.random(N).astype(np.float16)
    b = rng.random(N).astype(np.float16)
    dy = (0.1 * rng.standard_normal((M, N))).astype(np.float16)
    y, mean, rstd = tt.layer_norm(x, w, b, eps, block_size)
    y_ref, mean_ref, rstd_ref, dx_ref, dw_ref, db_ref = layer_norm_ref(x, w, b, dy, eps)
    np.testing.assert_allclose(mean, mean_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd, rstd_ref, rtol=1e-4)
    np.testing.assert_allclose(y, y_ref, rtol=1e-3, atol=2e-3)
    dx, dw, db = tt.layer_norm_backward(dy, x, w, mean, rstd)
    assert dx.dtype == dw.dtype == db.dtype == np.float16
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(dw, dw_ref, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(db, db_ref, rtol=2e-3, atol=2e-3)


# ---- 06 fused attention


def attention_ref(q, k, v, causal, sm_scale):
    """The output and the base-2 log-sum-exp of each row of scaled scores."""
    q, k, v = f64(q, k, v)
    s = q @ k.swapaxes(-1, -2) * sm_scale
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    top = s.max(-1, keepdims=True)
    e = np.exp(s - top)
    total = e.sum(-1, keepdims=True)
    return e / total @ v, (top + np.log(total))[..., 0] / np.log(2)


# The tutorial's blocks (BLOCK_M 64 or 128, BLOCK_N 32 or 64) need more than the 32 KB of threadgroup memory a
# program has here (the compiler's scratch for the tiles of this kernel); 32 x 32 is the largest that fits at
# HEAD_DIM 64.
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(("Z", "H", "N_CTX", "HEAD_DIM", "blocks"), [
    (1, 2, 128, 64, (32, 32)),   # the tutorial's (1, 2, 1024, 64), scaled down
    (2, 3, 100, 32, (32, 16)),   # a sequence that no block divides
    (1, 1, 17, 16, (32, 32)),    # shorter than a block
])
def test_06_attention_forward(Z, H, N_CTX, HEAD_DIM, blocks, causal):
    rng = np.random.default_rng(N_CTX)
    q, k, v = (rng.normal(0.0, 0.5, (Z, H, N_CTX, HEAD_DIM)).astype(np.float16) for _ in range(3))
    sm_scale = 0.5
    o, M = tt.attention(q, k, v, causal, sm_scale, *blocks)
    o_ref, M_ref = attention_ref(q, k, v, causal, sm_scale)
    assert o.dtype == np.float16
    np.testing.assert_allclose(o, o_ref, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(M, M_ref, rtol=1e-5, atol=1e-5)
