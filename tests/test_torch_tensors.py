"""Torch tensors whose memory is not simply their values, as kernel arguments on the CPU device
(`metile.metal.interop.plain_array`): lazy views (the negative and conjugate bits, autograd's zero tensors) are read
through a resolved copy and refused where the kernel writes; tensors that require grad are read and written in place
through `.detach()`; layouts without strided memory are refused at the parameter; zero-size tensors launch; every
torch element type either round-trips through a kernel or is refused naming it."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.frontend.errors import KernelArgumentError
from metile.metal import interop
from metile.metal.interop import ForeignArrayError, host_view

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
pytestmark = [pytest.mark.usefixtures("on_cpu"), pytest.mark.filterwarnings("ignore::UserWarning")]
N = 300


@metile.kernel
def axpy(X, Y, Out, a, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    m = offs < n
    metile.store(Out + offs, a * metile.load(X + offs, mask=m) + metile.load(Y + offs, mask=m), mask=m)


def launch(x, y, out, n=N):
    axpy[(metile.cdiv(max(n, 1), 128),)](x, y, out, 2.0, n, BLOCK=128)


def negated() -> tuple:
    """A float tensor with torch's negative bit set (its values are minus its memory), and its values."""
    z = torch.randn(N, dtype=torch.complex64)
    t = z.conj().imag
    assert t.is_neg() and not torch.equal(t, z.imag)
    return t, t.clone()


def test_a_tensor_with_the_negative_bit_is_read_as_its_values():
    x, values = negated()
    y, out = torch.randn(N), torch.zeros(N)
    launch(x, y, out)
    torch.testing.assert_close(out, 2 * values + y)
    launch(y, x, out)   # as the second input too
    torch.testing.assert_close(out, 2 * y + values)


def test_a_tensor_with_the_negative_bit_is_refused_where_the_kernel_writes():
    x, _ = negated()
    with pytest.raises(KernelArgumentError, match="argument 'Out' is a torch tensor with the negative bit set") as e:
        launch(torch.randn(N), torch.randn(N), x)
    assert "resolve_neg()" in e.value.message
    assert e.value.loc is not None and e.value.loc.file == __file__


def test_raw_dispatches_read_lazy_views_and_refuse_to_write_them(cpu):
    fn = cpu.compile("""
#include <metal_stdlib>
using namespace metal;
kernel void twice(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) { y[i] = 2.0f * x[i]; }
""", name="twice.metal").function("twice")
    x, values = negated()
    y = torch.zeros(N)
    cpu.dispatch_threads(fn, N, 32, [x, y])
    torch.testing.assert_close(y, 2 * values)
    with pytest.raises(metile.LaunchError, match=r"argument 1 \(`y`.*negative bit"):
        cpu.dispatch_threads(fn, N, 32, [y, x])


def test_the_conjugate_bit_and_zero_tensors_are_resolved_for_reading_and_refused_for_writing():
    z = torch.randn(8, dtype=torch.complex64)
    c = z.conj()
    assert c.is_conj()
    np.testing.assert_array_equal(host_view(c, written=False), np.conj(z.numpy()))
    with pytest.raises(ForeignArrayError, match="conjugate bit"):
        host_view(c)
    zero = torch._efficientzerotensor(N)
    assert zero._is_zerotensor()
    y, out = torch.randn(N), torch.zeros(N)
    launch(zero, y, out)
    torch.testing.assert_close(out, y)
    with pytest.raises(KernelArgumentError, match="argument 'Out' is a torch tensor with no memory of its own"):
        launch(y, y, torch._efficientzerotensor(N))


def test_tensors_that_require_grad_are_read_and_written_in_place():
    x, y = torch.randn(N, requires_grad=True), torch.nn.Parameter(torch.randn(N))
    out = torch.zeros(N, requires_grad=True)
    launch(x, y, out)
    with torch.no_grad():
        torch.testing.assert_close(out, 2 * x + y)
    assert interop.plain_array(x, True).data_ptr() == x.data_ptr()   # the same memory, not a copy


class Axpy(torch.autograd.Function):
    """2 * x + y computed by a metile kernel, as a Triton kernel inside a torch.autograd.Function is."""

    @staticmethod
    def forward(ctx, x, y):
        out = torch.empty_like(x)
        launch(x, y, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        gx = torch.empty_like(grad)
        launch(grad, torch.zeros_like(grad), gx)
        return gx, grad


def test_an_autograd_function_launches_on_the_tensors_it_receives():
    x, y = torch.randn(N, requires_grad=True), torch.randn(N, requires_grad=True)
    out = Axpy.apply(x, y)
    assert out.requires_grad
    torch.testing.assert_close(out.detach(), (2 * x + y).detach())
    w = torch.randn(N)
    (out * w).sum().backward()
    torch.testing.assert_close(x.grad, 2 * w)
    torch.testing.assert_close(y.grad, w)


def layouts():
    dense = torch.randn(N)
    return [
        pytest.param(lambda: dense.to_sparse(), "layout torch.sparse_coo", id="sparse_coo"),
        pytest.param(lambda: dense.reshape(15, 20).to_sparse_csr(), "layout torch.sparse_csr", id="sparse_csr"),
        pytest.param(lambda: dense.to_mkldnn(), "layout torch._mkldnn", id="mkldnn"),
        pytest.param(lambda: torch.nested.nested_tensor([dense[:100], dense[100:]]), "layout nested", id="nested"),
        pytest.param(lambda: torch.nested.nested_tensor([dense[:100], dense[100:]], layout=torch.jagged),
                     "layout nested", id="nested_jagged"),
        pytest.param(lambda: torch.empty(N, device="meta"), "'meta' device", id="meta"),
    ]


@pytest.mark.parametrize(("make", "says"), layouts())
@pytest.mark.parametrize("at", [0, 2])
def test_a_tensor_without_strided_memory_is_refused_at_its_parameter(make, says, at):
    args = [torch.randn(N), torch.randn(N), torch.zeros(N)]
    args[at] = make()
    name = "XYO"[at]
    with pytest.raises(KernelArgumentError, match=f"argument '{name}\\w*' is a torch tensor .*{says}") as e:
        launch(*args)
    assert e.value.loc is not None and e.value.loc.file == __file__
    with pytest.raises(KernelArgumentError, match=says):   # also once a launch of dense tensors is cached
        launch(torch.randn(N), torch.randn(N), torch.zeros(N))
        launch(*args)


def test_zero_size_tensors_launch():
    empty = torch.zeros(0)
    launch(empty, empty, torch.zeros(0), n=0)
    launch(torch.zeros(0, 3).t(), torch.zeros(3, 0), torch.zeros(0, 4)[:, 1:], n=0)
    prepared = axpy[(1,)].prepare(empty, empty, torch.zeros(0, dtype=torch.float32), 2.0, 0, BLOCK=128)
    prepared()
    out = torch.zeros(0, dtype=torch.bfloat16)
    launch(out, out, out, n=0)


@metile.kernel
def copy(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs, mask=offs < n), mask=offs < n)


def name_of(dt) -> str:
    return str(dt).rsplit(".", 1)[-1]


TAKEN = {"float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8", "int16", "int32", "int64", "uint8",
         "uint16", "uint32", "uint64", "bool"}
DTYPES = sorted({name_of(v) for v in vars(torch).values() if isinstance(v, torch.dtype)})


def sample(dt) -> torch.Tensor | None:
    """Eight elements of `dt` (distinct bit patterns where torch can make them), or None when torch cannot."""
    if name_of(dt).startswith(("qint", "quint")):
        return torch.quantize_per_tensor(torch.linspace(-1, 1, 8), 0.1, 0, dt)
    try:
        return torch.arange(8).to(dt) if dt is not torch.bool else torch.arange(8) % 2 == 1
    except (RuntimeError, TypeError, NotImplementedError):
        pass
    try:
        return torch.empty(8, dtype=dt)
    except (RuntimeError, TypeError, NotImplementedError):
        return None


@pytest.mark.parametrize("name", DTYPES)
def test_every_torch_element_type_round_trips_or_is_refused_naming_it(name):
    dt = getattr(torch, name)
    x = sample(dt)
    if x is None:
        pytest.skip(f"torch cannot make a {name} tensor")
    if name in TAKEN:
        out = torch.zeros_like(x)
        copy[(1,)](x, out, 8, BLOCK=8)
        assert torch.equal(out.view(torch.uint8), x.view(torch.uint8))
        return
    out = torch.zeros(8)
    with pytest.raises(KernelArgumentError, match=f"argument 'X' .*{name}") as e:
        copy[(1,)](x, out, 8, BLOCK=8)
    assert e.value.loc is not None
