"""Acceptance: the worked examples of docs/language.md section 11 run on the CPU device and match numpy.

The kernels live verbatim in `tests/acceptance_kernels/docs_examples.py`; the first tests check that they
still match the reference word for word and that the frontend traces them. The launches use the
examples' own shapes, block sizes and tolerances, with seeded data, plus a few extra shapes for the same
compiled specializations (runtime sizes only, so no extra compiles).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import metile
from tests.acceptance_kernels import docs_examples as ex

DOCS = Path(__file__).resolve().parents[1] / "docs" / "language.md"
KERNELS = ("vec_add", "softmax_rows", "matmul", "matmul_act", "layernorm", "rmsnorm", "fft_rows", "matmul_pc")


pytestmark = pytest.mark.usefixtures("on_cpu")


def worked_examples() -> str:
    """The section of the reference that holds the worked examples, from its heading to the next one."""
    text = DOCS.read_text()
    start = re.search(r"^## \d+\. Worked examples$", text, re.M)
    assert start is not None, "docs/language.md has no 'Worked examples' section"
    end = re.compile(r"^## ", re.M).search(text, start.end())
    return text[start.start():end.start() if end else len(text)]


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_is_a_verbatim_copy_of_the_reference(name):
    source = inspect.getsource(getattr(ex, name).fn)
    blocks = "\n".join(re.findall(r"```python\n(.*?)```", worked_examples(), re.S))
    assert source in blocks


F32, I32 = np.zeros(16, np.float32), np.zeros(16, np.int32)
TRACE_ARGS = {
    "vec_add": ((F32, F32, F32, 16), {"BLOCK": 256}),
    "softmax_rows": ((F32, F32, 300), {"BLOCK": 256}),
    "matmul": ((F32, F32, F32, 200, 130, 72), {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
    "matmul_act": ((F32, F32, F32, 128, 64, 96), {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "ACT": "gelu"}),
    "layernorm": ((F32, F32, F32, F32, 300, 1e-5), {"BLOCK": 256}),
    "rmsnorm": ((F32, F32, F32, 1000, 1e-6), {"BLOCK": 128}),
    "fft_rows": ((F32, F32, F32, F32, I32, F32, F32, 256), {"LOG2N": 8, "BLOCK": 256}),
    "matmul_pc": ((F32, F32, F32, 128, 128, 128), {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}),
}


@pytest.mark.parametrize("name", KERNELS)
def test_reference_kernel_traces(name):
    args, consts = TRACE_ARGS[name]
    kernel = getattr(ex, name).trace(*args, **consts)
    assert kernel.name == name


# ---- 11.1 vector add


@pytest.mark.parametrize("n", [10_007, 1, 256])
def test_11_1_vector_add(n):
    rng = np.random.default_rng(51)
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    ex.vec_add[(metile.cdiv(n, 256),)](a, b, c, n, BLOCK=256)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


# ---- 11.2 softmax


def softmax_ref(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize(("rows", "cols"), [(64, 300), (3, 256), (5, 1000), (2, 1)])
def test_11_2_softmax_three_passes(rows, cols):
    rng = np.random.default_rng(52)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    y = np.zeros_like(x)
    ex.softmax_rows[(rows,)](x, y, cols, BLOCK=256)
    np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-4, atol=1e-6)


def test_11_2_softmax_of_large_negative_rows():
    """Every value below zero: the row maximum must not be clamped to 0 by a wrong reduction identity."""
    rng = np.random.default_rng(520)
    x = rng.uniform(-90.0, -80.0, (4, 300)).astype(np.float32)
    y = np.zeros_like(x)
    ex.softmax_rows[(4,)](x, y, 300, BLOCK=256)
    np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-4, atol=1e-6)


# ---- 11.3 GEMM


def test_11_3_gemm_with_buffers_and_synchronize():
    rng = np.random.default_rng(53)
    M, N, K = 200, 130, 72
    A = metile.Buffer(data=rng.standard_normal((M, K), dtype=np.float32))
    B = metile.Buffer(data=rng.standard_normal((K, N), dtype=np.float32))
    C = metile.Buffer.zeros((M, N))
    ex.matmul[(metile.cdiv(M, 64), metile.cdiv(N, 64))](A, B, C, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    metile.synchronize()
    np.testing.assert_allclose(C.numpy(), A.numpy() @ B.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("M", "N", "K"), [(128, 128, 128), (192, 64, 96), (64, 256, 32), (1, 1, 1), (65, 3, 33),
                                           (7, 130, 200)])
def test_11_3_gemm_with_numpy_arrays_at_any_size(M, N, K):
    """The bounds make the GEMM right when the blocks do not divide M, N or K, and untouched outside C."""
    rng = np.random.default_rng(530 + K)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.full((M + 1, N), 7.0, np.float32)          # a row past the matrix that must stay as it is
    ex.matmul[(metile.cdiv(M, 64), metile.cdiv(N, 64))](a, b, c, M, N, K, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
    np.testing.assert_allclose(c[:M], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    assert (c[M:] == 7.0).all()


# ---- 11.4 fused epilogues

EPILOGUES = {
    "relu": lambda z: np.maximum(z, 0),
    "gelu": lambda z: z / (1 + np.exp(-1.702 * z)),
    "silu": lambda z: z / (1 + np.exp(-z)),
}


@pytest.mark.parametrize("act", sorted(EPILOGUES))
def test_11_4_fused_activation_epilogue(act):
    rng = np.random.default_rng(54)
    a = rng.standard_normal((128, 96), dtype=np.float32)
    b = rng.standard_normal((96, 64), dtype=np.float32)
    c = np.zeros((128, 64), np.float32)
    ex.matmul_act[(4, 2)](a, b, c, 128, 64, 96, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, ACT=act)
    np.testing.assert_allclose(c, EPILOGUES[act](a.astype(np.float64) @ b), rtol=1e-4, atol=1e-3)


# ---- 11.5 layernorm, 11.6 rmsnorm


@pytest.mark.parametrize(("rows", "cols"), [(32, 300), (4, 256), (3, 1000)])
def test_11_5_layernorm(rows, cols):
    rng = np.random.default_rng(55)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    w = rng.random(cols, dtype=np.float32)
    b = rng.random(cols, dtype=np.float32)
    y = np.zeros_like(x)
    ex.layernorm[(rows,)](x, w, b, y, cols, 1e-5, BLOCK=256)
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("rows", "cols"), [(16, 1000), (2, 128), (3, 77)])
def test_11_6_rmsnorm(rows, cols):
    rng = np.random.default_rng(56)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    w = rng.random(cols, dtype=np.float32)
    y = np.zeros_like(x)
    ex.rmsnorm[(rows,)](x, w, y, cols, 1e-6, BLOCK=128)
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 * x64).mean(1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


# ---- 11.7 FFT


@pytest.mark.parametrize("npts", [16, 64, 256])
def test_11_7_fft_rows(npts):
    rng = np.random.default_rng(57)
    rows = 4
    xr = rng.standard_normal((rows, npts), dtype=np.float32)
    xi = rng.standard_normal((rows, npts), dtype=np.float32)
    ang = -2.0 * np.pi * np.arange(npts // 2) / npts
    wr, wi = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    yr, yi = np.zeros_like(xr), np.zeros_like(xi)
    log2n = npts.bit_length() - 1
    ex.fft_rows[(rows,)](xr, xi, yr, yi, ex.bit_reverse(npts), wr, wi, npts, LOG2N=log2n, BLOCK=npts)
    ref = np.fft.fft(xr.astype(np.float64) + 1j * xi, axis=1)
    np.testing.assert_allclose(yr + 1j * yi, ref, rtol=1e-3, atol=1e-3)


# ---- 11.8 producer/consumer GEMM


@pytest.mark.parametrize(("M", "N", "K"), [(128, 128, 128), (64, 96, 32)])
def test_11_8_producer_consumer_gemm(M, N, K):
    rng = np.random.default_rng(58)
    a = rng.standard_normal((M, K), dtype=np.float32)
    b = rng.standard_normal((K, N), dtype=np.float32)
    c = np.zeros((M, N), np.float32)
    ex.matmul_pc[(M // 32, N // 32)](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
