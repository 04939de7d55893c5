"""`kernel[grid].prepare(*args, **constexprs)`: compiled, checked and bound once, then dispatched by each call with no
checks; numpy arrays keep a launch's semantics on every call, Buffers are bound as they are, errors at prepare are a
launch's errors, and faults in a prepared call are reported at the kernel's Python line (on the CPU device, and on
the Metal device through the C stand-in of its shim)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import metile
from metile.frontend.errors import GridError, KernelArgumentError, KernelTypeError
from tests.msl_source import kernel_line as line_of

kernel_module = importlib.import_module("metile.kernel")
launch_module = importlib.import_module("metile.launch")
cpu_dispatch = importlib.import_module("metile.metal.cpu.dispatch")


@pytest.fixture(autouse=True)
def cpu_device(monkeypatch):
    monkeypatch.setenv("METILE_DEVICE", "cpu")
    monkeypatch.delenv("METILE_SANITIZE", raising=False)


@metile.kernel
def axpy(X, Y, Out, n, alpha, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(Out + offs, alpha * metile.load(X + offs, mask=live) + metile.load(Y + offs, mask=live), mask=live)


@metile.kernel
def gather(X, At, Out, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    at = metile.load(At + offs)
    metile.store(Out + offs, metile.load(X + at))  # the gather


@metile.kernel
def races(X, Y, BLOCK: metile.constexpr):
    t = metile.thread_id()
    tmp = metile.shared(BLOCK)
    metile.store(tmp + t, 0.0)
    metile.barrier()
    metile.store(tmp + t, metile.load(X + t))  # the write
    metile.store(Y + t, metile.load(tmp + (BLOCK - 1 - t)))


@metile.kernel
def mistyped(X, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(X + offs, metile.load(X + offs) + "one")  # the mistake


def operands(n: int):
    rng = np.random.default_rng(n)
    return rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32), np.zeros(n, np.float32)


def test_a_prepared_launch_dispatches_at_each_call_with_the_arrays_current_contents():
    x, y, out = operands(1000)
    run = axpy[(4,)].prepare(x, y, out, 1000, 2.0, BLOCK=256)
    assert not out.any(), "prepare dispatches nothing"
    run()
    np.testing.assert_array_equal(out, 2 * x + y)
    x[:] = 1.0
    y[:500] = -2.0
    run()
    np.testing.assert_array_equal(out[:500], 0.0)
    np.testing.assert_array_equal(out[500:], 2 + y[500:])
    assert isinstance(run, kernel_module.PreparedLaunch) and run.grid == (4,)
    assert run.compiled is axpy.compile(x, y, out, 1000, 2.0, BLOCK=256)


def test_a_prepared_launch_binds_buffers_as_they_are():
    x, y, _ = operands(512)
    bx, by, bout = metile.Buffer(data=x), metile.Buffer(data=y), metile.Buffer.zeros(512)
    run = axpy[(2,)].prepare(bx, by, bout, 512, 1.0, BLOCK=256)
    run()
    np.testing.assert_array_equal(bout.numpy(), x + y)
    bx.numpy()[:] = 0.0
    run()
    np.testing.assert_array_equal(bout.numpy(), y)


def test_a_prepared_call_checks_nothing_again(monkeypatch):
    x, y, out = operands(256)
    run = axpy[(1,)].prepare(x, y, out, 256, 3.0, BLOCK=256)

    def refuse(*a, **kw):
        raise AssertionError("a prepared call checked its launch again")

    for module, name in [(kernel_module, "arg_type"), (kernel_module, "bind"), (launch_module, "grid3"),
                         (cpu_dispatch, "bind_arguments"), (kernel_module.JITKernel, "specialize")]:
        monkeypatch.setattr(module, name, refuse)
    run()
    np.testing.assert_array_equal(out, 3 * x + y)


def test_prepare_raises_what_a_launch_raises():
    x, y, out = operands(64)
    cases = [
        (lambda k: k(x, y, out, 64, 1.0), KernelArgumentError, "missing constexpr 'BLOCK'"),
        (lambda k: k(x.astype(np.float64), y, out, 64, 1.0, BLOCK=64), KernelArgumentError, "float64 array"),
        (lambda k: k(x, y, out, 2**64, 1.0, BLOCK=64), KernelArgumentError, "does not fit a 64-bit integer"),
        (lambda k: k(x[::-1], y, out, 64, 1.0, BLOCK=64), KernelArgumentError, "argument 'X' is a numpy view"),
        (lambda k: k(x, y, out, 64, 1.0, BLOCK=64, timeout=-1), KernelArgumentError, "timeout=-1 must be"),
    ]
    for call, error, says in cases:
        with pytest.raises(error, match=says):
            call(axpy[(1,)])
        with pytest.raises(error, match=says):
            call(axpy[(1,)].prepare)
    for grid in [(0,), 2.0, lambda meta: (0,)]:
        with pytest.raises(GridError):
            axpy[grid].prepare(x, y, out, 64, 1.0, BLOCK=64)
    with pytest.raises(GridError, match="too large for axpy: axis 0 allows at most"):
        axpy[(2**31 - 1,)].prepare(x, y, out, 64, 1.0, BLOCK=64)
    with pytest.raises(KernelTypeError) as info:
        mistyped[(1,)].prepare(x, 64, BLOCK=64)
    assert info.value.loc.line == line_of(mistyped.fn, "# the mistake")


def test_a_fault_in_a_prepared_call_is_reported_at_its_python_line():
    x = np.arange(256, dtype=np.float32)
    at = np.arange(256, dtype=np.int32)
    out = np.zeros(256, np.float32)
    run = gather[(1,)].prepare(x, at, out, BLOCK=256)
    run()
    np.testing.assert_array_equal(out, x)
    at[17] = 300                        # past the end of X
    with pytest.raises(metile.DeviceFault) as info:
        run()
    err = info.value
    assert err.kind == "bad-access" and err.buffer == 0
    assert (err.loc.file, err.loc.line) == (__file__, line_of(gather.fn, "# the gather"))
    at[17] = 0
    run()
    assert out[17] == 0.0


def test_prepare_takes_the_launch_options():
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    quiet = races[(1,)].prepare(x, y, BLOCK=64)
    loud = races[(1,)].prepare(x, y, BLOCK=64, sanitize=True)
    quiet()
    with pytest.raises(metile.DeviceFault, match="data race") as info:
        loud()
    assert info.value.loc.line == line_of(races.fn, "# the write")


def test_prepare_reads_metile_sanitize(monkeypatch):
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    monkeypatch.setenv("METILE_SANITIZE", "1")
    run = races[(1,)].prepare(x, y, BLOCK=64)
    monkeypatch.delenv("METILE_SANITIZE")        # read at prepare: the prepared launch keeps it
    with pytest.raises(metile.DeviceFault, match="data race"):
        run()


# -- the Metal device ---------------------------------------------------------------------------------------------

def test_a_prepared_launch_on_the_metal_device_queues_a_launch_per_call(stub, make_device, monkeypatch):
    from metal_stub import cpu_device_executor

    dev = make_device()
    stub.execute_with(cpu_device_executor(metile.device("cpu")))
    monkeypatch.setattr(kernel_module, "device", lambda name=None: dev)
    k = metile.kernel(axpy.fn)
    x, y, out = operands(300)
    run = k[(2,)].prepare(x, y, out, 300, 2.0, BLOCK=256)
    run()
    assert len(stub.calls("commands_encode")) == 1
    dev.synchronize()
    assert not stub.errors, stub.errors
    np.testing.assert_array_equal(out, 2 * x + y)
    y[:] = 0.0
    run()
    run()
    assert len(stub.calls("commands_encode")) == 3
    dev.synchronize()
    np.testing.assert_array_equal(out, 2 * x)
    with pytest.raises(metile.LaunchError, match="sanitize=True is a CPU device feature"):
        k[(2,)].prepare(x, y, out, 300, 2.0, BLOCK=256, sanitize=True)
    with pytest.raises(metile.LaunchError, match="timeout=1.0 is a CPU device feature"):
        k[(2,)].prepare(x, y, out, 300, 2.0, BLOCK=256, timeout=1.0)


# -- torch tensors whose memory moves -------------------------------------------------------------------------------

def torch_operands(n: int):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    return torch, torch.randn(n), torch.randn(n), torch.zeros(n)


def test_a_prepared_launch_binds_a_tensor_anew_when_its_storage_is_replaced():
    torch, x, y, out = torch_operands(1000)
    run = axpy[(4,)].prepare(x, y, out, 1000, 2.0, BLOCK=256)
    run()
    torch.testing.assert_close(out, 2 * x + y)
    first = out.clone()
    old = out[:]               # a view that keeps the old storage alive: a stale binding would write there, unseen
    out.set_(torch.zeros(1000))
    x.set_(torch.ones(1000))
    run()
    torch.testing.assert_close(out, 2 + y)
    torch.testing.assert_close(old, first)


def test_a_prepared_launch_binds_a_tensor_anew_when_its_storage_is_resized_under_it():
    torch, x, y, out = torch_operands(1000)
    run = axpy[(4,)].prepare(x, y, out, 1000, 2.0, BLOCK=256)
    kept = torch.zeros(1000)
    out.untyped_storage().resize_(8000)   # the storage reallocated (as FSDP frees and restores parameters)
    out.copy_(kept)
    run()
    torch.testing.assert_close(out, 2 * x + y)


RESIZED = """
import os, sys
os.environ["METILE_DEVICE"] = "cpu"
sys.path.insert(0, {root!r})
import torch
from tests.test_kernel_prepare import axpy

x, y, out = torch.ones(1000), torch.ones(1000), torch.zeros(1000)
run = axpy[(4,)].prepare(x, y, out, 1000, 2.0, BLOCK=256)
run()
out.resize_(1 << 20)        # its memory moves: the old block is freed
out.zero_()
y.resize_(1 << 20)
y.fill_(5.0)
run()
assert out[:1000].eq(7.0).all() and out[1000:].eq(0.0).all(), out
print("ok")
"""


def test_a_prepared_launch_never_writes_into_memory_a_resized_tensor_gave_up():
    pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", RESIZED.format(root=root)], capture_output=True, text=True,
                          timeout=600, cwd=root)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_a_prepared_launch_of_tensors_rebinds_only_when_they_moved(monkeypatch):
    torch, x, y, out = torch_operands(1000)
    run = axpy[(4,)].prepare(x, y, out, 1000, 2.0, BLOCK=256)
    prepares = []
    real = launch_module.Launch.prepare
    monkeypatch.setattr(launch_module.Launch, "prepare", lambda self, *a: prepares.append(1) or real(self, *a))
    x.fill_(1.0)          # the values change in place: the same memory, bound as it was
    y.mul_(2.0)
    run()
    run()
    assert prepares == []
    torch.testing.assert_close(out, 2 + y)
    out.resize_(10, 100)  # the same memory, another shape: bound anew, as a launch would bind it
    run()
    assert prepares == [1]
    torch.testing.assert_close(out.reshape(1000), 2 + y)
    run()
    assert prepares == [1]


def test_a_prepared_launch_of_inference_tensors_sees_them_move():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    with torch.inference_mode():
        x, y, out = torch.ones(1000), torch.ones(1000), torch.zeros(1000)
        run = axpy[(4,)].prepare(x, y, out, 1000, 2.0, BLOCK=256)
        out.set_(torch.zeros(1000))
        run()
        assert out.eq(3.0).all()


def test_a_prepared_launch_reads_a_lazily_negated_tensor_as_it_is_at_each_call():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    z = torch.randn(1000, dtype=torch.complex64)
    x = z.conj().imag          # minus z.imag, lazily: read through a copy made at each call
    y, out = torch.zeros(1000), torch.zeros(1000)
    run = axpy[(4,)].prepare(x, y, out, 1000, 1.0, BLOCK=256)
    run()
    torch.testing.assert_close(out, -z.imag)
    z.numpy()[:] *= 2          # written behind torch's back: no version bump
    run()
    torch.testing.assert_close(out, -z.imag)
