"""Repeated launches of torch tensors copied into guarded memory (the CPU device's default): once a launch whose arrays
are all C-contiguous torch tensors has run the general way, later ones with tensors of the same sizes take its
`CopiedRuns` (`metile.launch.Launch.recopy`), which copies each tensor's bytes into the same guarded device memory and
the written ones back, without binding the arguments again. Each launch reads and writes the tensors it is given, an
access past a tensor's end still faults naming it, and what the fast way cannot take (another size, tensors sharing
memory other than as one tensor given to several parameters, a strided tensor, a numpy array, device memory taken
back) runs the general way with the same results.
"""

from __future__ import annotations

import numpy as np
import pytest

import metile
import metile.triton as triton
import metile.triton.language as tl
from metile.metal import args as metal_args
from metile.metal.cpu import dispatch
from metile.metal.errors import DeviceFault

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
pytestmark = pytest.mark.usefixtures("on_cpu")
N = 300


@triton.jit
def axpy(X, Y, Out, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Out + offs, a * tl.load(X + offs, mask=m) + tl.load(Y + offs, mask=m), mask=m)


def launch(x, y, out, a=2.0, n=N):
    axpy[(triton.cdiv(max(n, 1), 128),)](x, y, out, a, n, BLOCK=128)


@pytest.fixture
def binds(monkeypatch):
    """How often a dispatch binds its arguments against the kernel's signature (what the repeated way skips)."""
    calls = []
    bind = dispatch.bind_arguments

    def counting(*a, **kw):
        calls.append(1)
        return bind(*a, **kw)

    monkeypatch.setattr(dispatch, "bind_arguments", counting)
    monkeypatch.setattr(metal_args, "bind_arguments", counting)
    import metile.metal.cpu.device as device_module

    monkeypatch.setattr(device_module, "bind_arguments", counting)
    return calls


def test_repeated_launches_copy_the_tensors_each_is_given_without_binding_them_again(binds):
    done = []
    launch(torch.randn(N), torch.randn(N), torch.zeros(N))   # arms the repeated way (if no earlier test did)
    binds.clear()
    for k in range(6):
        x, y, out = torch.randn(N), torch.randn(N), torch.full((N,), -1.0)
        launch(x, y, out, a=float(k))
        torch.testing.assert_close(out, k * x + y)
        done.append((out.clone(), out))
    for seen, out in done:   # no later launch wrote an earlier output
        assert torch.equal(out, seen)
    assert binds == []


def test_elements_the_kernel_does_not_write_keep_their_values():
    for k in range(4):
        x, y = torch.randn(N), torch.randn(N)
        out = torch.full((N,), float(k))
        launch(x, y, out, n=100)   # writes the first 100 elements only
        torch.testing.assert_close(out[:100], 2 * x[:100] + y[:100])
        assert torch.equal(out[100:], torch.full((N - 100,), float(k)))


def test_an_access_past_the_end_in_a_repeated_launch_faults_naming_the_tensor(binds):
    """The repeated way copies into the same guarded memory: reading past the end of X faults as it does the first
    time, and a launch after the fault runs."""
    x, y, out = torch.randn(N), torch.randn(N), torch.zeros(N)
    for _ in range(3):
        launch(x, y, out)
    binds.clear()
    for _ in range(2):
        with pytest.raises(DeviceFault, match=r"past the end of buffer \d \(`X`") as e:
            launch(x, y, out, n=N + 40)   # the mask lets the last program read 40 elements past the end
        assert e.value.loc is not None and e.value.loc.file == __file__
    launch(x, y, out, a=3.0)
    torch.testing.assert_close(out, 3 * x + y)
    assert binds == []   # the faults, too, were the repeated way's


def test_tensors_of_another_size_are_bound_the_general_way_and_keep_their_guards():
    for _ in range(3):
        launch(torch.randn(N), torch.randn(N), torch.zeros(N))
    x, y, out = torch.randn(N - 44), torch.randn(N), torch.zeros(N)   # a shorter X: its own guarded memory
    with pytest.raises(DeviceFault, match=r"past the end of buffer \d \(`X`"):
        launch(x, y, out)
    x = torch.randn(2 * N)
    y, out = torch.randn(2 * N), torch.zeros(2 * N)
    launch(x, y, out, n=2 * N)
    torch.testing.assert_close(out, 2 * x + y)


@triton.jit
def halves(A, B, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(A + offs, tl.full((BLOCK,), 1.0, tl.float32))
    tl.store(B + BLOCK + offs, tl.full((BLOCK,), 2.0, tl.float32))


def test_tensors_sharing_memory_are_one_copy_as_the_general_way_makes_them(binds):
    """Copied apart, the write-back of B would put A's old first half back over what the kernel wrote through A."""
    for _ in range(3):
        halves[(1,)](torch.zeros(8), torch.zeros(8), BLOCK=4)
    assert len(binds) == 1   # armed
    for _ in range(3):
        t = torch.zeros(8)
        halves[(1,)](t, t, BLOCK=4)
        assert t.tolist() == [1, 1, 1, 1, 2, 2, 2, 2]


@triton.jit
def scale_in_place(X, dX, Loss, s, n, BLOCK: tl.constexpr):
    """Liger's JSD kernel's way: read X, write the gradient over it through dX (the same tensor) and a loss."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(X + offs, mask=m)
    tl.store(Loss + offs, x * x, mask=m)
    tl.store(dX + offs, x * s, mask=m)


def test_one_tensor_given_to_two_parameters_takes_the_repeated_way(binds):
    """A launch that reads and writes one tensor through two parameters (in place) is one copy, as the general way
    makes it, and repeated launches of that shape copy without binding again; a launch giving the two parameters
    different tensors runs the general way, right too."""
    for _ in range(2):
        t = torch.randn(N)
        scale_in_place[(3,)](t, t, torch.zeros(N), 2.0, N, BLOCK=128)
    binds.clear()
    for k in range(4):
        t, loss = torch.randn(N), torch.zeros(N)
        before = t.clone()
        scale_in_place[(3,)](t, t, loss, float(k), N, BLOCK=128)
        torch.testing.assert_close(t, k * before)
        torch.testing.assert_close(loss, before * before)
    assert binds == []
    x, dx, loss = torch.randn(N), torch.zeros(N), torch.zeros(N)
    scale_in_place[(3,)](x, dx, loss, 3.0, N, BLOCK=128)
    torch.testing.assert_close(dx, 3 * x)
    torch.testing.assert_close(loss, x * x)
    assert len(binds) == 1   # the general way
    t, loss = torch.randn(N), torch.zeros(N)
    with pytest.raises(DeviceFault, match=r"past the end of buffer \d \(`(X|dX)`"):
        scale_in_place[(3,)](t, t, loss, 1.0, N + 40, BLOCK=128)
    assert len(binds) == 1   # the fault was the repeated way's


def test_strided_tensors_and_numpy_arrays_run_the_general_way():
    for _ in range(3):
        launch(torch.randn(N), torch.randn(N), torch.zeros(N))
    wide = torch.randn(N, 2)
    y, out = torch.randn(N), torch.zeros(N)
    launch(wide[:, 0].contiguous(), y, out)
    torch.testing.assert_close(out, 2 * wide[:, 0] + y)
    x, y, out = np.random.rand(N).astype(np.float32), np.random.rand(N).astype(np.float32), np.zeros(N, np.float32)
    launch(x, y, out)
    np.testing.assert_allclose(out, 2 * x + y, rtol=1e-6)


def test_device_memory_taken_back_makes_the_launch_run_the_general_way(monkeypatch, binds):
    """The device keeps at most `COPIED_BYTES` of copies; a launch whose copies were retired runs the general way
    and arms them again, and its results are right either way."""
    monkeypatch.setattr(dispatch, "COPIED_BYTES", 4 * N * 4)
    import metile.metal.cpu.device as device_module

    monkeypatch.setattr(device_module, "COPIED_BYTES", 4 * N * 4)

    @triton.jit
    def scaled(X, Y, n, s, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(Y + offs, tl.load(X + offs, mask=offs < n) * s, mask=offs < n)

    for k in range(4):   # the two kernels' copies do not fit together: each arming retires the other's
        x, y, out = torch.randn(N), torch.randn(N), torch.zeros(N)
        launch(x, y, out, a=float(k))
        torch.testing.assert_close(out, k * x + y)
        z = torch.zeros(N)
        scaled[(3,)](x, z, N, float(k), BLOCK=128)
        torch.testing.assert_close(z, k * x)
    binds.clear()
    for k in range(3):   # one kernel alone: armed again once, then the repeated way
        x, y, out = torch.randn(N), torch.randn(N), torch.zeros(N)
        launch(x, y, out, a=float(k))
        torch.testing.assert_close(out, k * x + y)
    assert len(binds) == 1


def test_a_launch_of_metile_kernel_takes_the_repeated_way_too(binds):
    @metile.kernel
    def double(X, Y, n, BLOCK: metile.constexpr):
        offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
        metile.store(Y + offs, 2 * metile.load(X + offs, mask=offs < n), mask=offs < n)

    for _ in range(4):
        x, y = torch.randn(N), torch.zeros(N)
        double[(3,)](x, y, N, BLOCK=128)
        torch.testing.assert_close(y, 2 * x)
    assert len(binds) == 1
