"""Arrays of other libraries in Metal memory on the Apple GPU device, through the C stand-in of the shim: a torch
tensor written by torch's own queue since it was bound is waited for again when a launch reuses its arguments or a
prepared dispatch is called again, and an MLX array (immutable, as on the CPU device) is never written by a kernel."""

from __future__ import annotations

import numpy as np
import pytest
from test_metal_hardening import MetalTensor

from metile.metal.errors import LaunchError

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
N = 1000


class TorchQueue:
    """torch's mps stream: writes queued on it land in the tensor's memory at `torch.mps.synchronize()` only."""

    def __init__(self):
        self.pending: list = []
        self.syncs = 0

    def write(self, view: np.ndarray, value: float) -> None:
        self.pending.append((view, value))

    def synchronize(self) -> None:
        self.syncs += 1
        for view, value in self.pending:
            view[:] = value
        self.pending.clear()


class TorchMps(MetalTensor):
    """A torch 2.9 mps tensor as metile sees it: its DLPack capsule holds its MTLBuffer, at its storage offset."""

    __module__ = "torch"


@pytest.fixture
def queue(monkeypatch):
    q = TorchQueue()
    monkeypatch.setattr(torch.mps, "synchronize", q.synchronize)
    monkeypatch.setattr(torch, "__version__", "2.9.0")
    return q


def _tensors(stub, dev):
    mems = [dev.allocate(4 * N) for _ in range(3)]
    views = [np.frombuffer(stub.ffi.buffer(m.ptr, 4 * N), np.float32) for m in mems]
    return [TorchMps(m, N, 0) for m in mems], views


def test_a_launch_that_reuses_its_arguments_waits_for_torch_again(stub, dev, add, queue):
    (x, y, out), (xv, yv, outv) = _tensors(stub, dev)
    yv[:] = 1.0
    args = [x, y, out, N]
    queue.write(xv, 1.0)
    dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), args)
    dev.synchronize()
    np.testing.assert_array_equal(outv, 2.0)
    queue.write(xv, 5.0)                            # torch writes x again, on its own queue
    dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), args)   # the same objects: the bound table is reused
    assert add._prepared.producers == (x, y, out)
    dev.synchronize()
    np.testing.assert_array_equal(outv, 6.0)        # not 2.0: torch's write was waited for


def test_a_prepared_dispatch_waits_for_torch_at_every_call(stub, dev, add, queue):
    (x, y, out), (xv, yv, outv) = _tensors(stub, dev)
    yv[:] = 1.0
    launch = dev.prepare_threadgroups(add, (4, 1, 1), (256, 1, 1), [x, y, out, N])
    for value in (3.0, 7.0):
        queue.write(xv, value)
        launch()
        dev.synchronize()
        np.testing.assert_array_equal(outv, value + 1)


class MLXMetalArray(bytearray):
    """An MLX 0.32 array in Metal memory: its capsule holds its MTLBuffer (`mem`), and its buffer protocol (how the
    host reads it, as MLX's does) its values, which are the same bytes on a Mac's unified memory."""

    __module__ = "mlx.core"

    def __init__(self, mem, values: np.ndarray):
        super().__init__(values.tobytes())
        self.tensor = MetalTensor(mem, values.size, 0)
        self.dtype, self.shape, self.nbytes = values.dtype, values.shape, values.nbytes

    def __dlpack_device__(self):
        return (8, 0)

    def __dlpack__(self, stream=None):
        return self.tensor.__dlpack__()


def test_a_kernel_may_not_write_an_mlx_array_bound_in_metal_memory(stub, dev, add, monkeypatch):
    mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'metile[mlx]')")
    monkeypatch.setattr(mx, "__version__", "0.32.0")
    from metile.metal.gpu import launch as gpu_launch

    monkeypatch.setattr(gpu_launch, "_finish_producer", lambda value: None)
    mems = [dev.allocate(4 * N) for _ in range(3)]
    views = [np.frombuffer(stub.ffi.buffer(m.ptr, 4 * N), np.float32) for m in mems]
    values = np.arange(N, dtype=np.float32)
    for v in views:
        v[:] = values
    a, b = MetalTensor(mems[0], N, 0), MetalTensor(mems[1], N, 0)
    out = MLXMetalArray(mems[2], values)
    dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [a, b, out, N])
    with pytest.raises(LaunchError, match=r"a kernel wrote to argument 2 \(`out`\), a read-only array"):
        dev.synchronize()
    np.testing.assert_array_equal(views[2], values)    # MLX's memory is not written
    np.testing.assert_array_equal(np.frombuffer(out, np.float32), values)
    copies = len(stub.calls("buffer_new_copy"))
    args = [MLXMetalArray(mems[0], values), b, MetalTensor(mems[2], N, 0), N]
    dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), args)
    dev.synchronize()                                   # read only: bound as its own buffer, no copy
    np.testing.assert_array_equal(views[2], 2 * values)
    assert len(stub.calls("buffer_new_copy")) == copies


def test_a_torch_tensor_in_host_memory_is_staged_through_its_host_view(dev, add):
    a, out = torch.arange(8, dtype=torch.float32), torch.zeros(8)
    dev.dispatch_threadgroups(add, (1, 1, 1), (8, 1, 1), [a, a, out, 8])
    dev.synchronize()
    torch.testing.assert_close(out, 2 * a)
