"""Triton's host `TensorDescriptor` (`triton.tools.tensor_descriptor`) given to a kernel: its tensor, shape and strides
are runtime arguments of their own and its block shape part of the specialization, and the kernel's parameter loads
and stores blocks as a descriptor made with `tl.make_tensor_descriptor` does (zero outside the tensor on loads,
nothing stored outside it). Checked against torch, with block shapes set by an autotuner's pre-hook as Triton's
persistent matmul tutorial sets them."""

from __future__ import annotations

import pytest
import torch

import metile.triton as triton
import metile.triton.language as tl
from metile.triton.errors import NotSupportedYetError
from metile.triton.tools.tensor_descriptor import TensorDescriptor

pytestmark = pytest.mark.usefixtures("on_cpu")


def _set_block_shapes(nargs):
    bm, bn, bk = nargs["BM"], nargs["BN"], nargs["BK"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk]
    nargs["c_desc"].block_shape = [bm, bn]


@triton.autotune(configs=[triton.Config({"BM": 32, "BN": 32, "BK": 16}, num_warps=4, pre_hook=_set_block_shapes)],
                 key=["M", "N", "K"])
@triton.jit
def matmul_descriptors(a_desc, b_desc, c_desc, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    n_tiles_n = tl.cdiv(N, BN)
    for tile in range(pid, tl.cdiv(M, BM) * n_tiles_n, tl.num_programs(0)):   # a persistent loop over tiles
        om, on = (tile // n_tiles_n) * BM, (tile % n_tiles_n) * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            acc = tl.dot(a_desc.load([om, k]), b_desc.load([on, k]).T, acc)
        c_desc.store([om, on], acc.to(tl.float16))


@pytest.mark.parametrize("m, n, k", [(64, 64, 32), (50, 70, 40)])
def test_a_persistent_matmul_of_host_descriptors(m, n, k):
    torch.manual_seed(0)
    a, b = torch.randn(m, k).half(), torch.randn(n, k).half()      # b transposed, as the tutorial keeps it
    c = torch.full((m, n), 7.0).half()
    dummy = [1, 1]
    descs = [TensorDescriptor(t, list(t.shape), list(t.stride()), dummy) for t in (a, b, c)]
    matmul_descriptors[(3,)](*descs, m, n, k)
    torch.testing.assert_close(c.float(), (a.float() @ b.float().T).half().float(), atol=2e-2, rtol=2e-3)


@triton.jit
def scale_rows(x_desc, y_desc, factor, BM: tl.constexpr):
    om = tl.program_id(0) * BM
    y_desc.store([om], x_desc.load([om]) * factor)


def test_block_shapes_specialise_and_the_padding_is_checked():
    x = torch.arange(40, dtype=torch.float32)
    y = torch.full((40,), -1.0)
    for bm in (16, 8):   # another block shape compiles another specialization
        scale_rows[(triton.cdiv(40, bm),)](TensorDescriptor.from_tensor(x, [bm]), TensorDescriptor.from_tensor(y, [bm]),
                                           2.0, BM=bm)
        assert torch.equal(y, 2 * x)
        y.fill_(-1.0)
    with pytest.raises(ValueError, match="stride 1"):   # the last dimension must be contiguous, as Triton requires
        TensorDescriptor(x[::2], [20], [2], [8])
    with pytest.raises(NotSupportedYetError, match="padding='nan'") as e:
        scale_rows[(1,)](TensorDescriptor.from_tensor(x, [8], padding="nan"), TensorDescriptor.from_tensor(y, [8]),
                         2.0, BM=8)
    assert e.value.loc.line == scale_rows.fn.__code__.co_firstlineno + 1
