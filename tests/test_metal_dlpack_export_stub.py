"""What the Metal device binds of arrays of other libraries in Metal memory, by the shape of each library's DLPack
export (on the stand-in shim): MLX 0.32's capsule (the MTLBuffer and a `byte_offset`) is bound; MLX 0.25-0.31's
(the CPU contents pointer marked kDLCPU, in an array that reports kDLMetal) and torch 2.8's (a ValueError for an
`mps` tensor) are refused with `metile.MetalExportError`, before any pointer is handed to the shim."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.metal.errors import MetalExportError
from metile.metal.gpu import launch as gpu_launch
from tests.test_metal_hardening import MetalTensor

mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'metile[mlx]')")
N = 1000


@pytest.fixture
def finished(monkeypatch):
    """The arrays whose library metile waited for before binding them (the fakes have no queue to wait for)."""
    seen: list = []
    monkeypatch.setattr(gpu_launch, "_finish_producer", seen.append)
    return seen


class MLX32Array(MetalTensor):
    """An MLX 0.32 array in Metal memory: its capsule holds the MTLBuffer, at the array's `byte_offset`."""

    __module__ = "mlx.core"


class MLX31Array:
    """An MLX 0.25-0.31 array: it reports Metal memory (kDLMetal), but its capsule holds the CPU pointer of its
    contents, marked kDLCPU."""

    __module__ = "mlx.core"

    def __init__(self, values: np.ndarray):
        self.values = values
        self.dtype, self.shape, self.nbytes = values.dtype, values.shape, values.nbytes
        self.exported = 0

    def __dlpack_device__(self):
        return (8, 0)

    def __dlpack__(self, stream=None):
        self.exported += 1
        return self.values.__dlpack__()   # numpy's capsule: the CPU pointer, device kDLCPU


class OtherMismatch(MLX31Array):
    """An array of a library metile knows no version rule for, with the same mismatch."""

    __module__ = "elsewhere"


class Torch28Mps:
    """A torch 2.8 `mps` tensor: it reports Metal memory, and its `__dlpack__` raises ValueError."""

    __module__ = "torch"

    def __init__(self):
        self.dtype, self.shape, self.nbytes = np.dtype(np.float32), (N,), 4 * N
        self.exported = 0

    def __dlpack_device__(self):
        return (8, 0)

    def __dlpack__(self, stream=None):
        self.exported += 1
        raise ValueError("Unknown device type mps for Dlpack")


def _buffers(stub, dev, offset: int = 0):
    mems = [dev.allocate(4 * (N + offset)) for _ in range(3)]
    views = [np.frombuffer(stub.ffi.buffer(m.ptr, 4 * (N + offset)), np.float32) for m in mems]
    return mems, views


def test_an_mlx_032_array_is_bound_as_its_buffer_at_its_offset(stub, dev, add, finished, monkeypatch):
    monkeypatch.setattr(mx, "__version__", "0.32.0")
    mems, views = _buffers(stub, dev, 8)
    views[0][8:], views[1][8:] = np.arange(N), 3.0
    a, b = (MLX32Array(m, N, 8) for m in mems[:2])
    out = MetalTensor(mems[2], N, 8)   # an MLX array is not written (test_metal_interop_sync_stub)
    dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [a, b, out, N])
    dev.synchronize()
    np.testing.assert_array_equal(views[2][8:], np.arange(N) + 3)
    assert finished == [a, b, out]


@pytest.mark.parametrize("version", ["0.25.0", "0.31.1"])
def test_an_mlx_array_in_metal_memory_before_032_is_refused_before_its_capsule_is_read(stub, dev, add, finished,
                                                                                        monkeypatch, version):
    monkeypatch.setattr(mx, "__version__", version)
    x = MLX31Array(np.arange(N, dtype=np.float32))
    mem = dev.allocate(4 * N)
    with pytest.raises(MetalExportError, match=rf"argument 1 is an MLX array \(mlx {version}\) in Metal memory, "
                                               r"which mlx before 0\.32 does not hand over as its Metal buffer "
                                               r"through DLPack: upgrade to mlx>=0\.32 .*or pass a CPU copy"):
        dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [mem, x, mem, N])
    assert x.exported == 0 and finished == []
    assert stub.calls("commands_encode") == []


@pytest.mark.parametrize("cls", [MLX31Array, OtherMismatch])
def test_a_capsule_that_describes_cpu_memory_of_an_array_in_metal_memory_is_refused(stub, dev, add, finished,
                                                                                     monkeypatch, cls):
    monkeypatch.setattr(mx, "__version__", "0.32.0")   # past the version rule: the capsule's own device decides
    x = cls(np.arange(N, dtype=np.float32))
    mem = dev.allocate(4 * N)
    with pytest.raises(MetalExportError, match=r"argument 1 is .* that reports Metal memory \(its "
                                               r"`__dlpack_device__\(\)` is kDLMetal\) but whose DLPack capsule "
                                               r"describes kDLCPU memory: its data pointer is no Metal buffer"):
        dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [mem, x, mem, N])
    assert x.exported == 1
    assert stub.calls("commands_encode") == []
    assert isinstance(MetalExportError("x"), metile.MetileError) and metile.MetalExportError is MetalExportError


def test_a_torch_28_mps_tensor_is_refused_before_its_capsule_is_asked_for(dev, add, finished, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "__version__", "2.8.0")
    t = Torch28Mps()
    with pytest.raises(MetalExportError, match=r"argument 0 is a torch tensor \(torch 2\.8\.0\) in Metal memory, "
                                               r"which torch before 2\.9 does not hand over .*torch>=2\.9"):
        dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [t, t, t, N])
    assert t.exported == 0


def test_a_library_that_refuses_to_export_metal_memory_raises_a_metile_error(dev, add, finished, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "__version__", "2.9.0")   # a version past the rule that still raises
    t = Torch28Mps()
    with pytest.raises(MetalExportError, match=r"argument 0 is a torch tensor \(torch 2\.9\.0\) in Metal memory that "
                                               r"its library does not export through DLPack \(ValueError: Unknown "
                                               r"device type mps for Dlpack\)"):
        dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [t, t, t, N])
    assert t.exported == 1


@metile.kernel
def double(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, 2.0 * metile.load(X + offs, mask=offs < n), mask=offs < n)


@pytest.mark.parametrize(("version", "reason"), [("0.31.1", r"is an MLX array \(mlx 0\.31\.1\) in Metal memory, which "
                                                            r"mlx before 0\.32"),
                                                 ("0.32.0", r"is an MLX array \(mlx 0\.32\.0\) that reports Metal "
                                                            r"memory .* describes kDLCPU memory")])
def test_a_kernel_launch_names_the_parameter_of_an_array_whose_library_does_not_export_its_buffer(
        stub, make_device, finished, monkeypatch, version, reason):
    import importlib

    from metal_stub import cpu_device_executor

    dev = make_device()
    stub.execute_with(cpu_device_executor(metile.device("cpu")))
    monkeypatch.setattr(importlib.import_module("metile.kernel"), "device", lambda name=None: dev)
    monkeypatch.setattr(mx, "__version__", version)
    k = metile.kernel(double.fn)
    x = MLX31Array(np.arange(8, dtype=np.float32))
    with pytest.raises(MetalExportError, match=f"argument 'X' {reason}") as e:
        k[(1,)](x, MetalTensor(dev.allocate(32), 8, 0), 8, BLOCK=8)
    assert e.value.loc is not None and e.value.loc.line == double.fn.__code__.co_firstlineno + 1   # its parameter
    assert stub.calls("commands_encode") == []


def _mps_tensor(torch, n: int):
    """A torch tensor as torch 2.8 and before have it on the `mps` device: `__dlpack_device__` raises ValueError."""

    class MpsTensor(torch.Tensor):
        @property
        def device(self):
            return torch.device("mps", 0)

        def __dlpack_device__(self):
            raise ValueError("Unknown device type mps for Dlpack")

        __dlpack__ = __dlpack_device__

    return torch.Tensor._make_subclass(MpsTensor, torch.zeros(n))


def test_a_torch_28_mps_tensor_whose_dlpack_device_raises_is_refused_by_version(dev, add, finished, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "__version__", "2.8.0")
    t = _mps_tensor(torch, N)
    with pytest.raises(MetalExportError, match=r"argument 0 is a torch tensor \(torch 2\.8\.0\) in Metal memory, "
                                               r"which torch before 2\.9 does not hand over .*`t\.cpu\(\)`"):
        dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [t, t, t, N])
    assert finished == []


def test_the_cpu_device_refuses_a_torch_28_mps_tensor_as_metal_memory(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("METILE_DEVICE", "cpu")
    t = _mps_tensor(torch, 8)
    with pytest.raises(metile.MetileError, match=r"argument 'X' is in Metal memory \(a torch 'mps' tensor, say\)"):
        double[(1,)](t, np.zeros(8, np.float32), 8, BLOCK=8)


def test_metile_waits_for_torch_before_binding_a_tensor_of_a_subclass_defined_elsewhere(dev, add, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "__version__", "2.9.0")
    synced: list = []
    monkeypatch.setattr(torch.mps, "synchronize", lambda: synced.append(1))
    t = _mps_tensor(torch, N)   # a class of this module, not of torch's
    with pytest.raises(MetalExportError, match=r"argument 0 is a torch tensor \(torch 2\.9\.0\) in Metal memory that "
                                               r"its library does not export through DLPack \(ValueError"):
        dev.dispatch_threadgroups(add, (4, 1, 1), (256, 1, 1), [t, t, t, N])
    assert synced == [1]
