"""Triton's tutorials with torch CPU tensors as the kernels' arguments: the kernels of
`tests/acceptance_kernels/triton_tutorials.py`, launched by host code written as the tutorials write it (torch
tensors, `tensor.stride()`, `torch.empty_like`; no numpy), checked against torch's own operations."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")

import metile  # noqa: E402
from tests.acceptance_kernels import triton_tutorials as tt  # noqa: E402

pytestmark = pytest.mark.usefixtures("on_cpu")


def add(x, y):
    output = torch.empty_like(x)
    n_elements = output.numel()
    grid = lambda meta: (metile.cdiv(n_elements, meta["BLOCK_SIZE"]),)  # noqa: E731
    tt.add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)
    return output


def softmax(x):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    tt.softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_rows, n_cols,
                                 BLOCK_SIZE=metile.next_power_of_2(n_cols))
    return y


def matmul(a, b, activation=""):
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), dtype=torch.float16)
    grid = lambda meta: (metile.cdiv(M, meta["BLOCK_SIZE_M"]) * metile.cdiv(N, meta["BLOCK_SIZE_N"]),)  # noqa: E731
    tt.matmul_kernel_ptrs[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                                c.stride(1), BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=4,
                                ACTIVATION=activation)
    return c


def seeded_dropout(x, p, seed):
    output = torch.empty_like(x)
    n_elements = x.numel()
    tt._seeded_dropout[(metile.cdiv(n_elements, 1024),)](x, output, n_elements, p, seed, BLOCK_SIZE=1024)
    return output


def layer_norm(x, weight, bias, eps):
    x_arg = x.reshape(-1, x.shape[-1])
    M, N = x_arg.shape
    y = torch.empty_like(x_arg)
    mean = torch.empty(M, dtype=torch.float32)
    rstd = torch.empty(M, dtype=torch.float32)
    tt._layer_norm_fwd_fused[(M,)](x_arg, y, weight, bias, mean, rstd, x_arg.stride(0), N, eps,
                                   BLOCK_SIZE=metile.next_power_of_2(N))
    return y.reshape(x.shape), mean, rstd


def attention(q, k, v, causal, sm_scale):
    o = torch.empty_like(q)
    M = torch.empty(q.shape[:3], dtype=torch.float32)
    grid = (metile.cdiv(q.shape[2], 32), q.shape[0] * q.shape[1], 1)
    tt._attn_fwd[grid](q, k, v, sm_scale, M, o, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                       q.shape[0], q.shape[1], q.shape[2], HEAD_DIM=q.shape[-1], BLOCK_M=32, BLOCK_N=32,
                       STAGE=3 if causal else 1)
    return o


@pytest.mark.parametrize("size", [98432, 1023])
def test_01_vector_add_of_tensors(size):
    torch.manual_seed(0)
    x, y = torch.rand(size), torch.rand(size)
    assert torch.equal(add(x, y), x + y)


def test_02_softmax_of_a_strided_tensor():
    torch.manual_seed(1)
    x = (torch.randn(123, 800) * 4)[:, :781]
    torch.testing.assert_close(softmax(x), torch.softmax(x.double(), 1).float(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("activation", ["", "leaky_relu"])
def test_03_matmul_of_tensors_with_any_strides(activation):
    torch.manual_seed(3)
    a = torch.randn(150, 96, dtype=torch.float16)[:, :90]
    b = torch.randn(110, 90, dtype=torch.float16).T
    want = a.double() @ b.double()
    if activation:
        want = torch.where(want >= 0, want, 0.01 * want)
    torch.testing.assert_close(matmul(a, b, activation).double(), want, rtol=1e-3, atol=1e-3)


def test_04_seeded_dropout_of_a_tensor():
    torch.manual_seed(4)
    x = torch.randn(5000)
    out = seeded_dropout(x, 0.5, 123)
    kept = out != 0
    assert 0.4 < kept.float().mean() < 0.6
    torch.testing.assert_close(out[kept], x[kept] / 0.5)
    assert torch.equal(seeded_dropout(x, 0.5, 123), out)      # the same seed, the same mask


def test_05_layer_norm_of_tensors():
    torch.manual_seed(5)
    x, w, b = torch.randn(37, 300), torch.rand(300), torch.rand(300)
    y, mean, rstd = layer_norm(x, w, b, 1e-5)
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (300,), w, b, 1e-5), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mean, x.mean(1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_06_attention_of_tensors(causal):
    torch.manual_seed(6)
    q, k, v = (torch.randn(1, 2, 96, 64, dtype=torch.float16) for _ in range(3))
    o = attention(q, k, v, causal, 0.5)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                            scale=0.5)
    torch.testing.assert_close(o.float(), want, rtol=2e-2, atol=2e-2)


def test_a_tensor_on_an_unreachable_device_or_of_an_unknown_type_is_refused():
    x = torch.zeros(16)
    with pytest.raises(metile.MetileError, match="argument 'x_ptr' is a float64 array"):
        tt.add_kernel[(1,)](x.double(), x, x, 16, BLOCK_SIZE=16)
    with pytest.raises(metile.MetileError, match="argument 'y_ptr' is a complex64 array"):
        tt.add_kernel[(1,)](x, x.to(torch.complex64), x, 16, BLOCK_SIZE=16)
