"""Torch tensors bound as their own memory on the CPU device when a launch opts in (`in_place=True` at a launch or
dispatch, the device's `in_place_arrays`: `metile.metal.cpu.dispatch.in_place_arguments`), and the repeated launches
that then set only their addresses, the scalars and the grid (`PlacedRuns`, armed by `metile.launch.Launch`): no byte
of a tensor is copied, each launch writes the tensors it is given (never those of an earlier launch), and whatever the
fast way cannot take as it is (a strided output, a view not 16-byte aligned, an empty or lazy tensor, one sharing memory
with a numpy array that is copied, a sanitized launch) is bound the general way and still gets its results. Without the
opt-in, tensors are copied into guarded memory, so that an access past a tensor's end raises `DeviceFault` naming it.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import metile
import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import KernelArgumentError
from metile.metal.cpu import dispatch
from metile.metal.errors import DeviceFault

torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
pytestmark = pytest.mark.usefixtures("on_cpu")
N = 300


@metile.kernel
def axpy(X, Y, Out, a, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    m = offs < n
    metile.store(Out + offs, a * metile.load(X + offs, mask=m) + metile.load(Y + offs, mask=m), mask=m)


def launch(x, y, out, a=2.0, n=N, **kw):
    axpy[(metile.cdiv(max(n, 1), 128),)](x, y, out, a, n, BLOCK=128, in_place=True, **kw)


@pytest.fixture
def copies(monkeypatch):
    """The sizes of the copies the CPU device's dispatches make (array contents in and back with the runtime's
    `mt_copy`, scalars' bytes with cffi's `memmove`)."""
    made: list[int] = []
    dev = metile.device("cpu")
    monkeypatch.setattr(dispatch, "ffi", Counting(dispatch.ffi, "memmove", made))
    monkeypatch.setattr(dev, "rt", Counting(dev.rt, "mt_copy", made))
    return made


class Counting:
    """`of` (a cffi object or library) whose function `name` adds the size of each copy it makes to `made`."""

    def __init__(self, of, name: str, made: list[int]):
        self.of, self.name, self.made = of, name, made

    def __getattr__(self, name):
        if name != self.name:
            return getattr(self.of, name)

        def copy(dst, src, n):
            self.made.append(n)
            return getattr(self.of, name)(dst, src, n)

        return copy


def arrays_copied(made: list[int]) -> list[int]:
    return [n for n in made if n > 8]   # more than a scalar's bytes


def test_repeated_launches_write_the_tensors_each_is_given_and_copy_none(copies):
    done = []
    for k in range(5):   # the first binds the general way and arms the repeated launches; the others take them
        x, y, out = torch.randn(N), torch.randn(N), torch.full((N,), -1.0)
        launch(x, y, out, a=float(k))
        torch.testing.assert_close(out, k * x + y)
        done.append((x, y, out.clone(), out))
    for _x, _y, seen, out in done:   # no later launch wrote an earlier output (a stale binding would)
        assert torch.equal(out, seen)
    assert arrays_copied(copies) == []


def test_an_output_that_is_an_input_is_one_memory():
    for _ in range(3):
        x, y = torch.randn(N), torch.randn(N)
        x0, y0 = x.clone(), y.clone()
        launch(x, y, x)
        torch.testing.assert_close(x, 2 * x0 + y)
        launch(y, y, y)
        torch.testing.assert_close(y, 3 * y0)


@metile.kernel
def spread(X, Out, step, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    m = offs < n
    metile.store(Out + offs * step, 2 * metile.load(X + offs, mask=m), mask=m)


def test_strided_outputs_are_written_at_their_elements(copies):
    x = torch.randn(N)
    for _ in range(3):   # contiguous outputs, taken the fast way; strided ones, bound in place the general way
        out = torch.zeros(3 * N)
        spread[(3,)](x, out, 3, N, BLOCK=128, in_place=True)
        torch.testing.assert_close(out[::3], 2 * x)
        assert not out.reshape(N, 3)[:, 1:].any()
        wide = torch.zeros(6 * N)
        spread[(3,)](x, wide[::2], 6, N, BLOCK=128, in_place=True)   # 3 of the view's elements: 6 of memory
        torch.testing.assert_close(wide[::6], 2 * x)
        assert not wide.reshape(N, 6)[:, 1:].any()
    assert arrays_copied(copies) == []


def test_tensors_the_fast_way_cannot_take_are_bound_the_general_way(copies):
    x, y = torch.randn(N), torch.randn(N)
    for _ in range(2):   # armed
        launch(x, y, torch.zeros(N))
    base, out = torch.randn(N + 1), torch.zeros(N + 1)
    launch(base[1:], y, out[1:])   # views 4 bytes past 16-byte alignment: copied, so that vector accesses stay aligned
    torch.testing.assert_close(out[1:], 2 * base[1:] + y)
    assert out[0] == 0 and N * 4 in arrays_copied(copies)
    empty = torch.zeros(0)
    launch(empty, empty, torch.zeros(0), n=0)
    z = torch._neg_view(torch.randn(N))   # the negative bit on contiguous, aligned memory: read as its values
    assert z.is_neg() and z.is_contiguous()
    out = torch.zeros(N)
    launch(z, y, out)
    torch.testing.assert_close(out, 2 * z.resolve_neg() + y)
    with pytest.raises(KernelArgumentError, match="argument 'Out' is a torch tensor with the negative bit set"):
        launch(x, y, z)
    with pytest.raises(KernelArgumentError, match="argument 'Out' .*overlap"):   # one element, expanded
        launch(x, y, torch.zeros(1).expand(N))
    w, out = torch.randn(N, requires_grad=True), torch.nn.Parameter(torch.zeros(N))
    launch(w, y, out)   # tensors that require grad: in place, as Triton binds them
    with torch.no_grad():
        torch.testing.assert_close(out, 2 * w + y)
    out = torch.zeros(N)
    launch(x, y, out)   # and the fast way again
    torch.testing.assert_close(out, 2 * x + y)


def test_the_grid_and_the_scalars_of_each_launch_are_used():
    x, y = torch.randn(1000), torch.randn(1000)
    out = torch.zeros(1000)
    launch(x[:N], y[:N], out[:N], n=N)
    launch(x[:N], y[:N], out[:N], n=N)
    out = torch.zeros(1000)
    launch(x, y, out, a=-1.0, n=1000)   # 8 programs instead of 3, another n and a
    torch.testing.assert_close(out, y - x)


def test_a_sanitized_launch_copies_its_tensors(copies):
    x, y, out = torch.randn(N), torch.randn(N), torch.zeros(N)
    launch(x, y, out)
    launch(x, y, out, sanitize=True)
    axpy[(3,)](x, y, out, 2.0, N, BLOCK=128, sanitize=True)
    torch.testing.assert_close(out, 2 * x + y)
    assert arrays_copied(copies) == [N * 4] * 8   # in: x, y, out; back: out (twice)


@metile.kernel
def divide(X, Out, d):
    i = metile.arange(0, 16)
    metile.store(Out + i, metile.load(X + i) // d)


def test_a_fault_in_a_repeated_launch_is_reported_at_its_line_and_the_next_launch_runs():
    x = torch.arange(16, dtype=torch.int32) * 64
    for _ in range(2):
        out = torch.zeros(16, dtype=torch.int32)
        divide[(1,)](x, out, 32, in_place=True)
        assert torch.equal(out, x // 32)
    with pytest.raises(DeviceFault) as e:
        # 0 shares the token of 32: the same launch
        divide[(1,)](x, torch.zeros(16, dtype=torch.int32), 0, in_place=True)
    assert e.value.loc is not None and e.value.loc.file == __file__
    out = torch.zeros(16, dtype=torch.int32)
    divide[(1,)](x, out, 64, in_place=True)
    assert torch.equal(out, x // 64)


def test_threads_launching_one_kernel_each_get_their_results():
    failures = []

    def worker(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        for _ in range(50):
            x, y, out = torch.randn(N, generator=g), torch.randn(N, generator=g), torch.zeros(N)
            launch(x, y, out)
            if not torch.allclose(out, 2 * x + y):
                failures.append(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


@triton.jit
def scaled_copy(X, Y, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n) * scale, mask=offs < n)


def test_triton_launches_take_the_repeated_way(copies):
    outs = []
    for k in range(4):
        x = torch.randn(257)
        y = torch.empty_like(x)
        scaled_copy[(triton.cdiv(257, 64),)](x, y, 257, float(k + 1), BLOCK=64, in_place=True)
        torch.testing.assert_close(y, x * (k + 1))
        outs.append((y, y.clone()))
    assert all(torch.equal(a, b) for a, b in outs) and arrays_copied(copies) == []


HALVES = """
#include <metal_stdlib>
using namespace metal;
kernel void halves(device float* a [[buffer(0)]], device float* b [[buffer(1)]], uint gid [[thread_position_in_grid]]) {
    a[gid] = 1.0f;
    b[gid + 4] = 2.0f;
}
"""


def test_a_tensor_sharing_memory_with_a_copied_array_is_copied_with_it(cpu):
    """Were the tensor bound in place and the numpy array copied, the copy written back would undo the kernel's writes
    through the tensor; they are one copy instead, as they are one buffer on a GPU."""
    fn = cpu.compile(HALVES, name="halves.metal").function("halves")
    for _ in range(2):
        x = np.zeros(8, np.float32)
        cpu.dispatch_threads(fn, 4, 4, [torch.from_numpy(x), x], in_place=(0,))
        assert list(x) == [1, 1, 1, 1, 2, 2, 2, 2]
        x = np.zeros(8, np.float32)
        cpu.dispatch_threads(fn, 4, 4, [x, torch.from_numpy(x)], in_place=(1,))
        assert list(x) == [1, 1, 1, 1, 2, 2, 2, 2]


def test_raw_dispatches_bind_tensors_and_the_arrays_they_name_in_place(cpu, copies):
    fn = cpu.compile(HALVES, name="halves.metal").function("halves")
    t = torch.zeros(8)
    cpu.dispatch_threads(fn, 4, 4, [t, t], in_place=True)
    assert t.tolist() == [1, 1, 1, 1, 2, 2, 2, 2] and arrays_copied(copies) == []
    a, b = np.zeros(8, np.float32), np.zeros(8, np.float32)
    cpu.dispatch_threads(fn, 4, 4, [a, b], in_place=(1,))
    assert list(a) == [1, 1, 1, 1, 0, 0, 0, 0] and list(b) == [0, 0, 0, 0, 2, 2, 2, 2]
    assert arrays_copied(copies) == [32, 32]   # a in and back; b neither
    copies.clear()
    prepared = cpu.prepare_threads(fn, 4, 4, [a, b], in_place=(0, 1))
    a[:], b[:] = 5, 5
    prepared()
    assert list(a) == [1, 1, 1, 1, 5, 5, 5, 5] and list(b) == [5, 5, 5, 5, 2, 2, 2, 2]
    assert arrays_copied(copies) == []
    t = torch.zeros(8)
    # the sanitizer checks accesses in memory of its own
    cpu.dispatch_threads(fn, 4, 4, [t, t], sanitize=True, in_place=True)
    assert t.tolist() == [1, 1, 1, 1, 2, 2, 2, 2] and arrays_copied(copies) == [32, 32]


@metile.kernel
def unmasked_axpy(X, Y, Out, a, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Out + offs, a * metile.load(X + offs) + metile.load(Y + offs))   # no mask on the tail


@triton.jit
def unmasked_copy(X, Y, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs))   # no mask on the tail


PAST_END = r"past the end of buffer \d \(`{}`"


def test_by_default_tensors_are_copied_into_guarded_memory_and_an_unmasked_tail_faults():
    """Tensors bound as their own memory would have no guard page after them: the unmasked tail would read and write
    torch's heap silently. Copied (the default), the access past the end is a `DeviceFault` naming the tensor."""
    for _ in range(3):   # the repeated launches too
        x, y, out = torch.randn(N), torch.randn(N), torch.zeros(N)
        with pytest.raises(DeviceFault, match=PAST_END.format("X")) as e:
            unmasked_axpy[(3,)](x, y, out, 2.0, BLOCK=128)   # 384 elements of 300
        assert e.value.loc is not None and e.value.loc.file == __file__
    x, y, out = torch.randn(384), torch.randn(384), torch.zeros(N)
    with pytest.raises(DeviceFault, match=PAST_END.format("Out")):
        unmasked_axpy[(3,)](x, y, out, 2.0, BLOCK=128)
    for _ in range(3):
        x = torch.randn(N)
        with pytest.raises(DeviceFault, match=PAST_END.format("X")) as e:
            unmasked_copy[(3,)](x, torch.zeros(384), BLOCK=128)
        assert e.value.loc is not None and e.value.loc.file == __file__
        with pytest.raises(DeviceFault, match=PAST_END.format("Y")):
            unmasked_copy[(3,)](torch.randn(384), torch.zeros(N), BLOCK=128)


def test_by_default_tensors_are_copied_in_and_back(copies):
    for k in range(3):
        x, y, out = torch.randn(N), torch.randn(N), torch.full((N,), -1.0)
        axpy[(3,)](x, y, out, float(k), N, BLOCK=128)
        torch.testing.assert_close(out, k * x + y)
    assert arrays_copied(copies) == [N * 4] * 12   # in: x, y, out; back: out
    copies.clear()
    axpy[(3,)](x, y, out, 1.0, N, BLOCK=128, in_place=False)
    assert arrays_copied(copies) == [N * 4] * 4


def test_the_device_setting_binds_in_place_unless_a_dispatch_says_otherwise(copies, monkeypatch):
    from metile.metal.cpu.device import CpuDevice, CpuOptions

    dev = CpuDevice(CpuOptions(cache_dir=metile.device("cpu").options.cache_dir, in_place_arrays=True))
    monkeypatch.setattr(dev, "rt", Counting(dev.rt, "mt_copy", copies))
    fn = dev.compile(HALVES, name="halves.metal").function("halves")
    t = torch.zeros(8)
    dev.dispatch_threads(fn, 4, 4, [t, t])
    assert t.tolist() == [1, 1, 1, 1, 2, 2, 2, 2] and arrays_copied(copies) == []
    dev.dispatch_threads(fn, 4, 4, [t, t], in_place=False)
    assert arrays_copied(copies) == [32, 32]
    with pytest.raises(metile.LaunchError, match="in_place='yes' must be True, False, 'checked', None"):
        dev.dispatch_threads(fn, 4, 4, [t, t], in_place="yes")


def test_in_place_is_checked_and_read_from_the_environment(monkeypatch):
    from metile.devices import _cpu_options

    with pytest.raises(KernelArgumentError, match="in_place=1 must be True"):
        axpy[(3,)](torch.randn(N), torch.randn(N), torch.zeros(N), 2.0, N, BLOCK=128, in_place=1)
    assert not _cpu_options().in_place_arrays
    monkeypatch.setenv("METILE_CPU_IN_PLACE", "1")
    assert _cpu_options().in_place_arrays
    monkeypatch.setenv("METILE_CPU_IN_PLACE", "yes")
    with pytest.raises(metile.DeviceError, match="METILE_CPU_IN_PLACE"):
        _cpu_options()
