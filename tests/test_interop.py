"""Arrays of other libraries as kernel arguments on the CPU device (`metile.metal.interop`): torch tensors, MLX and
JAX arrays through DLPack, buffer-protocol objects, each read in place with its element type (bfloat16 too), and
clear errors for arrays on devices metile cannot reach."""

from __future__ import annotations

import array

import numpy as np
import pytest

import metile
from metile.frontend.errors import KernelArgumentError

pytestmark = pytest.mark.usefixtures("on_cpu")
N = 1000


@metile.kernel
def axpy(X, Y, Out, a, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    m = offs < n
    metile.store(Out + offs, a * metile.load(X + offs, mask=m) + metile.load(Y + offs, mask=m), mask=m)


def launch(x, y, out, n=N):
    axpy[(metile.cdiv(n, 256),)](x, y, out, 2.0, n, BLOCK=256)


def test_torch_tensors_are_read_and_written_in_place():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    x, y, out = torch.randn(N), torch.randn(N), torch.zeros(N)
    launch(x, y, out)
    torch.testing.assert_close(out, 2 * x + y)
    prepared = axpy[(4,)].prepare(x, y, out, 2.0, N, BLOCK=256)   # bound to the tensors' own memory
    x.fill_(1.0)
    prepared()
    torch.testing.assert_close(out, 2 + y)
    xb, yb, ob = x.bfloat16(), y.bfloat16(), torch.zeros(N, dtype=torch.bfloat16)
    launch(xb, yb, ob)
    torch.testing.assert_close(ob.float(), (2 * xb.float() + yb.float()).bfloat16().float(), rtol=0, atol=0.02)


def test_torch_tensors_in_raw_dispatches():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    dev = metile.device("cpu")
    fn = dev.compile("""
#include <metal_stdlib>
using namespace metal;
kernel void twice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) { y[i] = 2.0f * x[i]; }
""", name="twice.metal").function("twice")
    x, y = torch.arange(64, dtype=torch.float32), torch.zeros(64)
    dev.dispatch_threadgroups(fn, (2, 1, 1), (32, 1, 1), [x, y])
    torch.testing.assert_close(y, 2 * x)


def test_mlx_arrays_are_inputs():
    mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'metile[mlx]')")
    x, y = mx.random.normal((N,)), mx.random.normal((N,))
    out = np.zeros(N, np.float32)
    launch(x, y, out)
    np.testing.assert_allclose(out, 2 * np.array(x) + np.array(y), rtol=1e-6, atol=1e-6)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    xb, yb = x.astype(mx.bfloat16), y.astype(mx.bfloat16)
    ob = np.zeros(N, ml_dtypes.bfloat16)
    launch(xb, yb, ob)
    want = 2 * np.array(xb.astype(mx.float32)) + np.array(yb.astype(mx.float32))
    np.testing.assert_allclose(ob.astype(np.float32), want, rtol=0, atol=0.05)
    with pytest.raises(metile.LaunchError, match="a read-only array"):   # MLX arrays are immutable
        launch(x, y, mx.zeros((N,)))


def test_jax_arrays_are_inputs():
    jnp = pytest.importorskip("jax.numpy", reason="jax is not installed")
    x, y = jnp.arange(N, dtype=jnp.float32), jnp.ones(N, dtype=jnp.float32)
    out = np.zeros(N, np.float32)
    launch(x, y, out)
    np.testing.assert_array_equal(out, 2 * np.arange(N, dtype=np.float32) + 1)
    launch(x.astype(jnp.bfloat16), y.astype(jnp.bfloat16), out)
    np.testing.assert_allclose(out, 2 * np.arange(N, dtype=np.float32) + 1, rtol=1e-2)


def test_buffer_protocol_objects_are_read_and_written_in_place():
    x, y = array.array("f", range(N)), bytearray(np.ones(N, np.float32).tobytes())
    out = array.array("f", bytes(4 * N))
    launch(x, memoryview(y).cast("f"), out)
    np.testing.assert_array_equal(np.frombuffer(out, np.float32), 2 * np.arange(N, dtype=np.float32) + 1)


class FarAway:
    """A DLPack producer on another device."""

    def __init__(self, kind: int):
        self.kind = kind
        self.dtype = np.dtype(np.float32)
        self.nbytes = 4 * N

    def __dlpack__(self, stream=None):
        raise AssertionError("metile must not read memory it cannot reach")

    def __dlpack_device__(self):
        return (self.kind, 0)


@pytest.mark.parametrize(("kind", "message"), [(2, "argument 'Y' is on a CUDA device, which metile cannot reach"),
                                               (10, "argument 'Y' is on a ROCm device"),
                                               (8, "argument 'Y' is in Metal memory")])
def test_an_array_on_a_device_metile_cannot_reach_is_refused_at_its_parameter(kind, message):
    x = np.zeros(N, np.float32)
    with pytest.raises(KernelArgumentError, match=message) as e:
        launch(x, FarAway(kind), x)
    assert e.value.loc is not None and e.value.loc.file.endswith("test_interop.py")


@metile.kernel
def widen(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs, mask=offs < n).to(metile.float32), mask=offs < n)


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "bfloat16", "float16"])
def test_torch_tensors_of_narrow_float_types_are_read_as_their_type(name):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    x = torch.linspace(-4, 4, 200).to(getattr(torch, name))
    out = torch.zeros(200)
    widen[(1,)](x, out, 200, BLOCK=256)
    torch.testing.assert_close(out, x.float(), rtol=0, atol=0)


class UnifiedMLXArray(bytearray):
    """An MLX array as MLX reports it on a Mac: in Metal memory (kDLMetal), which is unified, so its buffer protocol
    hands the CPU its contents; its DLPack capsule is not read."""

    __module__ = "mlx.core"
    dtype = np.dtype(np.float32)

    def __dlpack_device__(self):
        return (8, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("the CPU device reads an MLX array through its buffer protocol")


def test_the_cpu_device_reads_an_mlx_array_reported_in_metal_memory_in_place():
    x = UnifiedMLXArray(np.arange(N, dtype=np.float32).tobytes())
    y = UnifiedMLXArray(np.ones(N, np.float32).tobytes())
    out = np.zeros(N, np.float32)
    launch(x, y, out)
    np.testing.assert_array_equal(out, 2 * np.arange(N, dtype=np.float32) + 1)
    with pytest.raises(metile.LaunchError, match="Out"):   # an MLX array is immutable: not an output
        launch(x, y, UnifiedMLXArray(bytes(4 * N)))


def test_an_mlx_array_of_a_type_numpy_does_not_name_is_read_through_its_width():
    mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install 'metile[mlx]')")
    from metile.metal import interop

    x = mx.arange(8, dtype=mx.float32).astype(mx.bfloat16)
    view = interop._unified_view(x, interop.foreign_dtype(x))
    assert view.dtype.name == "bfloat16" and view.astype(np.float32).tolist() == list(range(8))


def test_a_tensor_of_a_torch_tensor_subclass_of_a_narrow_float_type_is_read_as_its_type():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")

    class Sub(torch.Tensor):   # a subclass defined outside torch, as libraries make them
        pass

    x = torch.linspace(-4, 4, 200).bfloat16().as_subclass(Sub)
    out = torch.zeros(200)
    widen[(1,)](x, out, 200, BLOCK=256)
    torch.testing.assert_close(out, x.float().as_subclass(torch.Tensor), rtol=0, atol=0)
