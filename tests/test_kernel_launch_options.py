"""Launch options of `@metile.kernel` launches: `sanitize=True` (and `METILE_SANITIZE`) runs the CPU device's sanitizer,
whose reports name the kernel's Python lines; `timeout=` sets the watchdog of one launch. They are no constexprs:
they do not recompile, a kernel parameter of the same name keeps the keyword, bad values are refused, and the Metal
device refuses both (through the C stand-in of its shim)."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest

import metile
from metile.debug import DebugSettingError
from metile.frontend.errors import KernelArgumentError
from tests.acceptance_kernels import docs_examples as docs
from tests.msl_source import kernel_line as line_of

kernel_module = importlib.import_module("metile.kernel")


@pytest.fixture(autouse=True)
def cpu_device(monkeypatch):
    monkeypatch.setenv("METILE_DEVICE", "cpu")
    monkeypatch.delenv("METILE_SANITIZE", raising=False)


@metile.kernel
def reads_unwritten(X, Y, BLOCK: metile.constexpr):
    t = metile.thread_id()
    tmp = metile.shared(BLOCK)
    if t < BLOCK // 2:
        metile.store(tmp + t, metile.load(X + t))
    metile.barrier()
    metile.store(Y + t, metile.load(tmp + (BLOCK - 1 - t)))  # the read


@metile.kernel
def races(X, Y, BLOCK: metile.constexpr):
    t = metile.thread_id()
    tmp = metile.shared(BLOCK)
    metile.store(tmp + t, 0.0)
    metile.barrier()
    metile.store(tmp + t, metile.load(X + t))  # the write
    metile.store(Y + t, metile.load(tmp + (BLOCK - 1 - t)))  # the racing read


@metile.kernel
def slow_sum(X, Y, n, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK,), dtype="f32")
    for i in metile.tile_range(0, n, 1):  # the loop
        acc = acc + metile.load(X + (i % BLOCK) + metile.arange(0, BLOCK))
    metile.store(Y + metile.arange(0, BLOCK), acc)


@metile.kernel
def with_timeout_parameter(X, timeout, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(X + offs, metile.load(X + offs) + timeout)


@metile.kernel
def with_sanitize_constexpr(X, BLOCK: metile.constexpr, sanitize: metile.constexpr = False):
    offs = metile.arange(0, BLOCK)
    if sanitize:
        metile.store(X + offs, metile.load(X + offs) * 2.0)


def vectors():
    return np.arange(64, dtype=np.float32), np.zeros(64, np.float32)


def test_sanitize_reports_a_read_of_unwritten_shared_memory_at_its_python_line():
    x, y = vectors()
    reads_unwritten[(1,)](x, y, BLOCK=64)          # without the sanitizer the launch goes through
    with pytest.raises(metile.DeviceFault) as info:
        reads_unwritten[(1,)](x, y, BLOCK=64, sanitize=True)
    err = info.value
    assert err.kind == "uninitialized-read"
    assert (err.loc.file, err.loc.line) == (__file__, line_of(reads_unwritten.fn, "# the read"))
    assert err.metal_loc.file == "reads_unwritten.metal" and "(generated MSL: reads_unwritten.metal:" in err.message


def test_sanitize_reports_a_race_at_both_python_lines():
    x, y = vectors()
    with pytest.raises(metile.DeviceFault) as info:
        races[(1,)](x, y, BLOCK=64, sanitize=True)
    err = info.value
    assert err.kind == "data-race"
    assert (err.loc.file, err.loc.line) == (__file__, line_of(races.fn, "# the write"))
    assert f"at line {line_of(races.fn, '# the racing read')} (races.metal:{err.other_loc.line})" in err.message


def test_kernels_the_compiler_synchronises_are_clean_under_the_sanitizer():
    """The compiler's own scratch (reductions, dot operands) is barriered: no report on correct kernels."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(64 * 300, dtype=np.float32)
    out = np.zeros_like(x)
    docs.softmax_rows[(64,)](x, out, 300, BLOCK=256, sanitize=True)
    rows = x.reshape(64, 300)
    want = np.exp(rows - rows.max(1, keepdims=True))
    np.testing.assert_allclose(out.reshape(64, 300), want / want.sum(1, keepdims=True), rtol=1e-5)
    a = rng.standard_normal((64, 64), dtype=np.float32)
    c = np.zeros((64, 64), np.float32)
    docs.matmul[(2, 2)](a, a, c, 64, 64, 64, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, sanitize=True)
    np.testing.assert_allclose(c, a @ a, rtol=1e-4, atol=1e-4)


def test_metile_sanitize_turns_the_sanitizer_on_for_every_launch(monkeypatch):
    x, y = vectors()
    races[(1,)](x, y, BLOCK=64)                    # cached without the sanitizer
    monkeypatch.setenv("METILE_SANITIZE", "1")
    with pytest.raises(metile.DeviceFault, match="data race"):
        races[(1,)](x, y, BLOCK=64)
    races[(1,)](x, y, BLOCK=64, sanitize=False)    # the launch's keyword comes first
    monkeypatch.setenv("METILE_SANITIZE", "0")
    races[(1,)](x, y, BLOCK=64)
    monkeypatch.delenv("METILE_SANITIZE")
    races[(1,)](x, y, BLOCK=64)
    with pytest.raises(metile.DeviceFault, match="data race"):
        races[(1,)](x, y, BLOCK=64, sanitize=True)


def test_the_settings_are_read_from_os_environ_on_every_launch(monkeypatch):
    """A change made through os.environ (as Python's documentation asks environment changes to be made) is read
    again by the next launch, in both directions."""
    x, y = vectors()
    races[(1,)](x, y, BLOCK=64)
    monkeypatch.setenv("METILE_SANITIZE", "1")
    with pytest.raises(metile.DeviceFault, match="data race"):
        races[(1,)](x, y, BLOCK=64)
    monkeypatch.delenv("METILE_SANITIZE")
    races[(1,)](x, y, BLOCK=64)


def test_metile_reads_no_private_attribute_of_os_environ():
    sources = Path(metile.__file__).parent.rglob("*.py")
    assert [str(p) for p in sources if "environ._data" in p.read_text()] == []


def test_a_bad_metile_sanitize_value_is_refused(monkeypatch):
    x, y = vectors()
    monkeypatch.setenv("METILE_SANITIZE", "maybe")
    with pytest.raises(DebugSettingError, match="METILE_SANITIZE='maybe' is not a setting: use 1"):
        races[(1,)](x, y, BLOCK=64)


def test_launch_options_do_not_recompile(monkeypatch):
    x, y = vectors()
    compiles = []
    real = kernel_module.emit_artifact
    monkeypatch.setattr(kernel_module, "emit_artifact", lambda k: compiles.append(k.name) or real(k))
    k = metile.kernel(reads_unwritten.fn)
    k[(1,)](x, y, BLOCK=64)
    k[(1,)](x, y, BLOCK=64, timeout=30.0)
    k[(1,)](x, y, BLOCK=64, timeout=10, sanitize=False)
    with pytest.raises(metile.DeviceFault):
        k[(1,)](x, y, BLOCK=64, sanitize=True)
    assert compiles == ["reads_unwritten"]
    assert len(k._compiled) == 1 and k.compile(x, y, BLOCK=64, sanitize=True, timeout=1.0) is next(
        iter(k._compiled.values()))


def test_timeout_stops_a_long_launch_at_its_python_line():
    x, y = vectors()
    with pytest.raises(metile.DeviceFault) as info:
        slow_sum[(1,)](x, y, 1 << 30, BLOCK=32, timeout=0.3)
    err = info.value
    assert err.kind == "hang" and "0.3 s timeout" in err.message
    assert err.loc.file == __file__ and line_of(slow_sum.fn, "# the loop") <= err.loc.line
    slow_sum[(1,)](x, y, 4, BLOCK=32, timeout=0)    # 0: no limit
    np.testing.assert_array_equal(y[:32], 4 * x[:32] + (0 + 1 + 2 + 3))


@pytest.mark.parametrize(("options", "says"), [
    ({"sanitize": "yes"}, r"races\[grid\]\(\.\.\.\): sanitize='yes' must be True or False"),
    ({"sanitize": None}, "sanitize=None must be True or False"),
    ({"timeout": -1}, r"timeout=-1 must be a number of seconds >= 0 \(0 or inf: no limit\)"),
    ({"timeout": float("nan")}, "timeout=nan must be a number of seconds >= 0"),
    ({"timeout": "5s"}, "timeout='5s' must be a number of seconds"),
])
def test_bad_launch_option_values_are_refused_at_the_kernel(options, says):
    x, y = vectors()
    races[(1,)](x, y, BLOCK=64)                    # a cached launch checks them too
    for _ in range(2):
        with pytest.raises(KernelArgumentError, match=says) as info:
            races[(1,)](x, y, BLOCK=64, **options)
        assert info.value.loc.line == line_of(races.fn, "def races")


def test_a_misspelt_launch_option_is_refused_with_a_hint():
    x, y = vectors()
    with pytest.raises(KernelArgumentError, match="unexpected keyword argument 'santize'.*did you mean 'sanitize'"):
        races[(1,)](x, y, BLOCK=64, santize=True)


def test_a_kernel_parameter_named_like_a_launch_option_keeps_it():
    x = np.zeros(64, np.float32)
    with_timeout_parameter[(1,)](x, 2.5, BLOCK=64)
    with_timeout_parameter[(1,)](x, timeout=1.5, BLOCK=64)
    np.testing.assert_array_equal(x, 4.0)
    x[:] = 1.0
    with_sanitize_constexpr[(1,)](x, BLOCK=64, sanitize=True)   # the constexpr, not the sanitizer
    with_sanitize_constexpr[(1,)](x, BLOCK=64)
    np.testing.assert_array_equal(x, 2.0)
    assert len(with_sanitize_constexpr._compiled) == 2


# -- the Metal device ---------------------------------------------------------------------------------------------

@pytest.fixture
def metal(stub, make_device, monkeypatch):
    dev = make_device()
    stub.execute_with(None)                        # launches are encoded, not replayed
    monkeypatch.setattr(kernel_module, "device", lambda name=None: dev)
    return dev


def test_the_metal_device_refuses_sanitize_and_timeout_on_kernel_launches(metal, stub, monkeypatch):
    k = metile.kernel(races.fn)
    x, y = vectors()
    with pytest.raises(metile.LaunchError, match="sanitize=True is a CPU device feature; kernel races runs on "
                                                 "device 'metal'") as info:
        k[(1,)](x, y, BLOCK=64, sanitize=True)
    assert info.value.loc.line == line_of(races.fn, "def races")
    with pytest.raises(metile.LaunchError, match="timeout=5.0 is a CPU device feature"):
        k[(1,)](x, y, BLOCK=64, timeout=5.0)
    for in_place in (True, "checked"):
        with pytest.raises(metile.LaunchError, match=f"in_place={in_place!r} is a CPU device feature"):
            k[(1,)](x, y, BLOCK=64, in_place=in_place)
    monkeypatch.setenv("METILE_SANITIZE", "1")
    with pytest.raises(metile.LaunchError, match="METILE_SANITIZE asks for the sanitizer, but it is a CPU device "
                                                 "feature"):
        k[(1,)](x, y, BLOCK=64)
    assert stub.calls("commands_encode") == []
    k[(1,)](x, y, BLOCK=64, sanitize=False)         # the launch's keyword comes first
    assert len(stub.calls("commands_encode")) == 1
