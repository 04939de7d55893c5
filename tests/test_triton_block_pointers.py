"""Block pointers and tensor descriptors under `triton.language`: `tl.make_block_ptr`, `tl.advance` (carried through
runtime loops), loads and stores with `boundary_check` and `padding_option`, `tl.dot` of blocks, and
`tl.make_tensor_descriptor` with `.load` and `.store` (every dimension checked, zero padding); checked against
torch."""

from __future__ import annotations

import pytest
import torch

import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import KernelArgumentError, KernelTypeError, ShapeMismatchError

pytestmark = pytest.mark.usefixtures("on_cpu")


@triton.jit
def scale_rows(X, Y, M, N, sxm, sxn, sym, syn, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    x_ptr = tl.make_block_ptr(X, (M, N), (sxm, sxn), (pid_m * BM, 0), (BM, BN), (1, 0))
    y_ptr = tl.make_block_ptr(Y, (M, N), (sym, syn), (pid_m * BM, 0), (BM, BN), (1, 0))
    for _ in range(0, N, BN):                       # the block pointers are loop-carried
        x = tl.load(x_ptr, boundary_check=(0, 1), padding_option="zero")
        tl.store(y_ptr, x * 2, boundary_check=(0, 1))
        x_ptr = tl.advance(x_ptr, (0, BN))
        y_ptr = tl.advance(y_ptr, (0, BN))


@pytest.mark.parametrize("transposed", [False, True])
def test_blocks_walk_a_matrix_with_bounds_checked(transposed):
    M, N = 37, 70
    x = torch.randn(N, M).t() if transposed else torch.randn(M, N)   # a column-major view too
    y = torch.full((M, N), -1.0)
    scale_rows[(triton.cdiv(M, 16),)](x, y, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), BM=16, BN=32)
    assert torch.equal(y, x * 2)                    # nothing written outside the matrix


@triton.jit
def padded(X, Out, N, PAD: tl.constexpr):
    p = tl.make_block_ptr(X, (N,), (1,), (0,), (16,), (0,))
    if PAD == "nan":
        tl.store(Out + tl.arange(0, 16), tl.load(p, boundary_check=(0,), padding_option="nan"))
    else:
        tl.store(Out + tl.arange(0, 16), tl.load(p, boundary_check=(0,), padding_option="zero"))


def test_padding_options():
    x = torch.arange(1.0, 11.0)
    out = torch.empty(16)
    padded[(1,)](x, out, 10, PAD="nan")
    assert out[:10].tolist() == x.tolist() and out[10:].isnan().all()
    padded[(1,)](x, out, 10, PAD="zero")
    assert out[:10].tolist() == x.tolist() and (out[10:] == 0).all()


@triton.jit
def block_matmul(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    a_ptr = tl.make_block_ptr(A, (M, K), (sam, sak), (pid_m * BM, 0), (BM, BK), (1, 0))
    b_ptr = tl.make_block_ptr(B, (K, N), (sbk, sbn), (0, pid_n * BN), (BK, BN), (1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptr, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_ptr, boundary_check=(0, 1), padding_option="zero")
        acc += tl.dot(a, b)
        a_ptr = tl.advance(a_ptr, (0, BK))
        b_ptr = tl.advance(b_ptr, (BK, 0))
    c_ptr = tl.make_block_ptr(C, (M, N), (scm, scn), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
    tl.store(c_ptr, acc.to(tl.float16), boundary_check=(0, 1))


def test_a_matmul_of_block_pointers():
    torch.manual_seed(0)
    M, N, K = 70, 50, 40
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    c = torch.zeros(M, N, dtype=torch.float16)
    block_matmul[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                                                           BM=32, BN=32, BK=16)
    torch.testing.assert_close(c, (a.double() @ b.double()).half(), atol=2e-2, rtol=1e-3)


@triton.jit
def descriptor_copy(X, Y, M, N, BM: tl.constexpr, BN: tl.constexpr):
    src = tl.make_tensor_descriptor(X, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(Y, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
    block = src.load([m, n])                          # zero outside the tensor
    dst.store([m, n], block + 1)                      # nothing stored outside it
    tl.store_tensor_descriptor(dst, [m, n], tl.load_tensor_descriptor(dst, [m, n]) * 10)


def test_tensor_descriptors_load_and_store_blocks():
    M, N = 20, 45
    x = torch.randn(M, N)
    y = torch.zeros(M, N)
    descriptor_copy[(triton.cdiv(M, 8), triton.cdiv(N, 16))](x, y, M, N, BM=8, BN=16)
    torch.testing.assert_close(y, (x + 1) * 10)


@triton.jit
def maybe_advanced(X, n):
    p = tl.make_block_ptr(X, (4,), (1,), (0,), (4,), (0,))
    if n > 0:                                       # a runtime `if`: the two branches' block pointers merge
        p = tl.advance(p, (1,))
    tl.store(p, tl.load(p, boundary_check=(0,)) + 1, boundary_check=(0,))


@pytest.mark.parametrize("n, want", [(2, [0.0, 2.0, 3.0, 4.0]), (-2, [1.0, 2.0, 3.0, 4.0])])
def test_a_block_pointer_advanced_in_one_branch(n, want):
    x = torch.arange(4.0)
    maybe_advanced[(1,)](x, n)
    assert x.tolist() == want


def test_mistakes_are_refused_at_their_line():
    @triton.jit
    def masked(X):
        p = tl.make_block_ptr(X, (4,), (1,), (0,), (4,), (0,))
        tl.load(p, mask=tl.arange(0, 4) < 2)

    @triton.jit
    def nan_ints(X):
        p = tl.make_block_ptr(X, (4,), (1,), (0,), (4,), (0,))
        tl.load(p, boundary_check=(0,), padding_option="nan")

    @triton.jit
    def bad_dim(X):
        p = tl.make_block_ptr(X, (4,), (1,), (0,), (4,), (0,))
        tl.load(p, boundary_check=(1,))

    @triton.jit
    def plain_advance(X):
        tl.load(tl.advance(X, (1,)))

    @triton.jit
    def not_pow2(X):
        tl.make_block_ptr(X, (6,), (1,), (0,), (6,), (0,))

    cases = [(masked, torch.zeros(4), KernelArgumentError, "cannot be specified for loading block pointers"),
             (nan_ints, torch.zeros(4, dtype=torch.int32), KernelTypeError, "`nan` is not supported for integer"),
             (bad_dim, torch.zeros(4), KernelArgumentError, "dimension 1 is out of range"),
             (plain_advance, torch.zeros(4), KernelTypeError, "tl.advance takes a block pointer"),
             (not_pow2, torch.zeros(6), ShapeMismatchError, "must be a power of 2, not 6")]
    for kernel, arg, error, message in cases:
        with pytest.raises(error, match=message) as e:
            kernel[(1,)](arg)
        assert e.value.loc.line == kernel.fn.__code__.co_firstlineno + (2 if kernel in (not_pow2, plain_advance) else 3)


@triton.jit
def _maybe_make_tensor_desc(desc_or_ptr, shape, strides, block_shape):
    if isinstance(desc_or_ptr, tl.tensor_descriptor):
        return desc_or_ptr
    else:
        return tl.make_tensor_descriptor(desc_or_ptr, shape, strides, block_shape)


@triton.jit
def add_one(X, M, N, BM: tl.constexpr, BN: tl.constexpr):
    desc = _maybe_make_tensor_desc(X, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    desc = _maybe_make_tensor_desc(desc, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    desc.store([0, 0], desc.load([0, 0]) + 1)


def test_tutorial_06s_descriptor_helper_and_the_host_descriptor():
    from metile.triton.tools.tensor_descriptor import TensorDescriptor

    x = torch.zeros(3, 5)
    add_one[(1,)](x, 3, 5, BM=4, BN=8)
    assert (x == 1).all()
    host = TensorDescriptor.from_tensor(x, [4, 8])
    assert host.shape == [3, 5] and host.strides == [5, 1] and host.block_shape == [4, 8]
    add_one[(1,)](host, 3, 5, BM=4, BN=8)     # a host descriptor is a descriptor in the kernel: the helper keeps it
    assert (x == 2).all()


def test_triton_tools_is_served(tmp_path):
    import subprocess
    import sys

    code = ("import metile.triton; metile.triton.install()\n"
            "from triton.tools.tensor_descriptor import TensorDescriptor\n"
            "import metile.triton.tools.tensor_descriptor as m\n"
            "assert TensorDescriptor is m.TensorDescriptor\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@triton.jit
def _attn_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, qk_scale, N_CTX, BLOCK_N: tl.constexpr):
    for _ in range(0, N_CTX, BLOCK_N):             # block pointers handed to a helper, advanced in its loop
        k = tl.load(K_block_ptr)
        qk = tl.dot(q, k)
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(tl.float16), tl.load(V_block_ptr), acc)
        m_i = m_ij
        V_block_ptr = tl.advance(V_block_ptr, (BLOCK_N, 0))
        K_block_ptr = tl.advance(K_block_ptr, (0, BLOCK_N))
    return acc, l_i, m_i


@triton.jit
def attention(Q, K, V, sm_scale, Out, stride_qh, stride_qm, stride_kh, stride_kn, stride_vh, stride_vk,
              stride_oh, stride_om, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m, off_h = tl.program_id(0), tl.program_id(1)
    q_ptr = tl.make_block_ptr(base=Q + off_h.to(tl.int64) * stride_qh, shape=(N_CTX, HEAD_DIM),
                              strides=(stride_qm, 1), offsets=(start_m * BLOCK_M, 0),
                              block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    k_ptr = tl.make_block_ptr(base=K + off_h.to(tl.int64) * stride_kh, shape=(HEAD_DIM, N_CTX),
                              strides=(1, stride_kn), offsets=(0, 0), block_shape=(HEAD_DIM, BLOCK_N), order=(0, 1))
    v_ptr = tl.make_block_ptr(base=V + off_h.to(tl.int64) * stride_vh, shape=(N_CTX, HEAD_DIM),
                              strides=(stride_vk, 1), offsets=(0, 0), block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    o_ptr = tl.make_block_ptr(base=Out + off_h.to(tl.int64) * stride_oh, shape=(N_CTX, HEAD_DIM),
                              strides=(stride_om, 1), offsets=(start_m * BLOCK_M, 0),
                              block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    q = tl.load(q_ptr)
    acc, l_i, m_i = _attn_inner(acc, l_i, m_i, q, k_ptr, v_ptr, sm_scale * 1.44269504, N_CTX, BLOCK_N)
    tl.store(o_ptr, (acc / l_i[:, None]).to(Out.type.element_ty))


def test_attention_with_block_pointers_as_tutorial_06_writes_it():
    torch.manual_seed(6)
    H, N_CTX, D = 2, 64, 32
    q, k, v = (torch.randn(H, N_CTX, D).half() for _ in range(3))
    out = torch.empty_like(q)
    attention[(N_CTX // 32, H)](q, k, v, 0.5, out, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0),
                                v.stride(1), out.stride(0), out.stride(1), N_CTX, HEAD_DIM=D, BLOCK_M=32, BLOCK_N=16)
    p = torch.softmax((q.double() @ k.double().transpose(1, 2)) * 0.5, dim=-1)
    torch.testing.assert_close(out.double(), p @ v.double(), atol=2e-3, rtol=0)
