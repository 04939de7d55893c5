"""A `tile_load` or `tile_store` without `bounds=` never leaves its array: its tile is clipped to the array its
pointer points into, seen as rows of `stride` elements, so the original meTile's README GEMM (which gives no
bounds) is right at every size, under the sanitizer, on both devices. The array's length is a hidden parameter the
launch fills in from the argument (numpy arrays and strided views, `metile.Buffer`s, torch tensors); pointers
offset from a parameter, bound to names or made by `metile.shared` are followed to their array, and one whose
array cannot be told is refused at its line."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import metile
from metile.frontend.errors import KernelTypeError
from metile.ir import parse, pretty, verify
from tests.acceptance_kernels.seed_examples import gemm

pytestmark = pytest.mark.usefixtures("on_cpu")
kernel_module = importlib.import_module("metile.kernel")
RNG = np.random.default_rng(11)
SHAPES = [(64, 64, 64), (50, 70, 33), (1, 1, 1), (100, 37, 129), (8, 200, 7), (33, 1, 65), (31, 31, 16)]


def run_gemm(M, N, K, **launch):
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    gemm[(metile.cdiv(M, 32), metile.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, **launch)
    metile.synchronize()
    return c, a @ b


@pytest.mark.parametrize(("M", "N", "K"), SHAPES)
def test_the_seed_gemm_is_right_at_every_size(M, N, K):
    c, ref = run_gemm(M, N, K, sanitize=True)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)


def test_the_lengths_are_hidden_parameters_that_print_and_parse():
    a = np.zeros((40, 24), np.float32)
    k = gemm.trace(a, a, a, 40, 24, 24, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    names = [(p.name, p.length_of) for p in k.params]
    assert names[-3:] == [("A_len", 0), ("B_len", 1), ("C_len", 2)]
    text = pretty(k)
    assert "%A_len: i32 length %A" in text
    back = parse(text)
    verify(back)
    assert back.params == k.params and pretty(back) == text


@metile.kernel
def through_names(X, Out, row, col, stride, R: metile.constexpr, C: metile.constexpr):
    base = X + row * stride          # a pointer bound to a name, offset by whole rows
    t = metile.tile_load(base, 0, col, stride, (R, C))
    metile.tile_store(Out, 0, 0, C, t, (R, C))


def test_a_pointer_offset_from_its_array_is_clipped_to_what_is_left_of_it():
    x = np.arange(7 * 5, dtype=np.float32)          # 7 rows of 5
    out = np.full((4, 4), -1.0, np.float32)
    through_names[(1,)](x, out, 5, 3, 5, R=4, C=4, sanitize=True)  # rows 5, 6 exist, columns 3, 4 exist
    metile.synchronize()
    expect = np.zeros((4, 4), np.float32)
    expect[:2, :2] = x.reshape(7, 5)[5:7, 3:5]
    assert (out == expect).all()


@metile.kernel
def shared_tile(X, Out, n, BLOCK: metile.constexpr):
    tid = metile.thread_id()
    buf = metile.shared(BLOCK, metile.float32)
    metile.store(buf + tid, metile.load(X + tid, mask=tid < n, other=0.0))
    metile.barrier()
    t = metile.tile_load(buf, 0, 0, 8, (8, 8))      # rows 0..7 of 8: past a 32-element shared array after row 3
    metile.tile_store(Out, 0, 0, 8, t, (8, 8))


def test_a_shared_array_clips_to_its_size():
    x = np.arange(32, dtype=np.float32)
    out = np.full((8, 8), -1.0, np.float32)
    shared_tile[(1,)](x, out, 32, BLOCK=32)
    metile.synchronize()
    assert (out[:4] == x.reshape(4, 8)).all() and (out[4:] == 0).all()


@metile.kernel
def carried_pointer(X, Out, K, BK: metile.constexpr):
    p = X
    acc = metile.zeros((8, BK), dtype=metile.float32)
    for _ in metile.tile_range(0, K, BK):
        acc = acc + metile.tile_load(p, 0, 0, K, (8, BK))
        p = p + BK
    metile.tile_store(Out, 0, 0, BK, acc, (8, BK))


def test_a_pointer_whose_array_cannot_be_told_is_refused_at_its_line():
    x = np.zeros(64, np.float32)
    with pytest.raises(KernelTypeError, match="cannot tell for this pointer .* give bounds=") as e:
        carried_pointer[(1,)](x, x, 8, BK=8)
    assert "tile_load(p, 0, 0, K" in str(e.value)


@metile.kernel
def copy_tile(X, Out, stride, R: metile.constexpr, C: metile.constexpr):
    t = metile.tile_load(X, 0, 0, stride, (R, C))
    metile.tile_store(Out, 0, 0, C, t, (R, C))


def test_the_length_of_a_strided_view_buffer_and_tensor():
    base = np.arange(10 * 6, dtype=np.float32).reshape(10, 6)
    view = base[1:4, 1:5]                 # spans 2 rows of 6 and 4 more: 16 elements from its first to its last
    out = np.full((4, 6), -1.0, np.float32)
    copy_tile[(1,)](view, out, 6, R=4, C=6, sanitize=True)
    metile.synchronize()
    flat = base.ravel()[7:7 + 16]
    expect = np.zeros(24, np.float32)
    expect[:12] = flat[:12]               # rows 0 and 1 of 6 are inside the 16 elements, row 2 is not
    assert (out.ravel() == expect).all()

    buf = metile.Buffer(np.arange(20, dtype=np.float32))
    out = np.full((4, 6), -1.0, np.float32)
    copy_tile[(1,)](buf, out, 6, R=4, C=6)
    metile.synchronize()
    assert (out[:3] == np.arange(18).reshape(3, 6)).all() and (out[3] == 0).all()

    torch = pytest.importorskip("torch")
    t = torch.arange(13, dtype=torch.float32)
    out = np.full((4, 6), -1.0, np.float32)
    copy_tile[(1,)](t, out, 6, R=4, C=6)
    metile.synchronize()
    assert (out[:2] == np.arange(12).reshape(2, 6)).all() and (out[2:] == 0).all()


def test_the_seed_gemm_on_the_metal_device_passes_the_lengths(stub, make_device, monkeypatch):
    from metal_stub import cpu_device_executor

    dev = make_device()
    stub.execute_with(cpu_device_executor(metile.device("cpu")))
    monkeypatch.setattr(kernel_module, "device", lambda name=None: dev)
    k = metile.kernel(gemm.fn)
    M, N, K = 50, 70, 33
    a, b = RNG.standard_normal((M, K)).astype(np.float32), RNG.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    k[(2, 3)](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    dev.synchronize()
    assert not stub.errors, stub.errors
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
