"""Printing and assertions on the device: `tl.device_print`, Python's `print`, `tl.device_assert` and `assert` on a
traced condition in Triton kernels, `metile.device_print` and `metile.device_assert` in metile's; on the CPU device
each element is printed once with its program and index, and a failed assertion is a `DeviceFault` at the kernel's
line; for an Apple GPU the MSL defines both as nothing (they compile out)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import metile
import metile.triton as triton
import metile.triton.language as tl

pytestmark = pytest.mark.usefixtures("on_cpu")


@triton.jit
def printing(X, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n, other=-1.0)
    tl.device_print("x", x)
    print("pid", pid)
    tl.device_print("bits", offs, hex=True)


def test_device_print_prints_every_element_once(capfd):
    printing[(2,)](np.arange(6, dtype=np.float32) * 1.5, 6, BLOCK=4)
    lines = sorted(capfd.readouterr().out.splitlines())
    want = sorted([f"pid ({p}, 0, 0) idx ({i}) x: {(p * 4 + i) * 1.5 if p * 4 + i < 6 else -1.0:f}"
                   for p in range(2) for i in range(4)]
                  + [f"pid ({p}, 0, 0) idx () pid: {p}" for p in range(2)]
                  + [f"pid ({p}, 0, 0) idx ({i}) bits: {hex(p * 4 + i)}" for p in range(2) for i in range(4)])
    assert lines == want


@triton.jit
def checking(X, n, LIMIT: tl.constexpr):
    offs = tl.arange(0, 8)
    x = tl.load(X + offs)
    tl.device_assert(x < LIMIT, "x is too large")
    assert tl.sum(x, axis=0) > -100.0, "the sum is too small"
    tl.store(X + offs, x + 1.0)


def test_a_failed_device_assert_is_a_fault_at_its_line():
    x = np.arange(8, dtype=np.float32)
    checking[(1,)](x, 8, LIMIT=100.0)
    assert x[0] == 1.0                       # assertions that hold change nothing
    x[3] = 500.0
    with pytest.raises(metile.DeviceFault, match="device assertion failed: x is too large") as e:
        checking[(1,)](x, 8, LIMIT=100.0)
    assert e.value.loc.line == checking.fn.__code__.co_firstlineno + 4
    x[:] = -50.0
    with pytest.raises(metile.DeviceFault, match="the sum is too small") as e:
        checking[(1,)](x, 8, LIMIT=100.0)
    assert e.value.loc.line == checking.fn.__code__.co_firstlineno + 5


@metile.kernel
def own(X, Out, BLOCK: metile.constexpr):
    r = metile.arange(0, 2)[:, None]
    c = metile.arange(0, BLOCK)[None, :]
    x = metile.load(X + r * BLOCK + c)
    metile.device_print("m", x, r)
    metile.device_assert(x >= 0, "negative", mask=c < BLOCK - 1)   # the last column is not checked
    assert metile.sum(x) < 1000, "too large"
    metile.store(Out + r * BLOCK + c, x * 2)


def test_metile_device_print_and_assert(capfd):
    x = np.arange(8, dtype=np.int32).reshape(2, 4)
    x[1, 3] = -7
    out = np.zeros_like(x)
    own[(1,)](x, out, BLOCK=4)
    lines = sorted(capfd.readouterr().out.splitlines())
    assert lines == sorted(f"pid (0, 0, 0) idx ({i}, {j}) m: {x[i, j]}, {i}" for i in range(2) for j in range(4))
    np.testing.assert_array_equal(out, x * 2)
    x[0, 1] = -1
    with pytest.raises(metile.DeviceFault, match="device assertion failed: negative"):
        own[(1,)](x, out, BLOCK=4)
    x[0, 1] = 1000
    with pytest.raises(metile.DeviceFault, match="too large"):
        own[(1,)](x, out, BLOCK=4)


def test_on_an_apple_gpu_the_statements_compile_out():
    msl = own.compile(np.zeros(8, np.int32), np.zeros(8, np.int32), BLOCK=4).artifact.msl
    assert "#ifndef METILE_DEVICE_DEBUG" in msl
    cpp = shutil.which("cpp")
    if cpp is None:
        pytest.skip("no C preprocessor")
    text = "\n".join(line for line in msl.splitlines() if not line.startswith("#include"))
    done = subprocess.run([cpp, "-P"], input=text, capture_output=True, text=True, check=True)
    assert "metile_device_print(" not in done.stdout and "metile_device_assert(" not in done.stdout
    assert re.search(r"\(\(void\)0\);", done.stdout)


@pytest.mark.parametrize("call, match", [
    ("tl.device_print(1, x)", "the prefix must be a string"),
    ("print(x)", "the prefix must be a string"),
    ("tl.device_assert(x > 0, 3)", "the message must be a string"),
])
def test_misuses_are_refused(tmp_path, call, match):
    import importlib.util

    path = tmp_path / "debug_refused.py"
    path.write_text("import metile.triton as triton\nimport metile.triton.language as tl\n\n\n@triton.jit\n"
                    f"def kernel(X):\n    x = tl.load(X + tl.arange(0, 4))\n    {call}\n")
    spec = importlib.util.spec_from_file_location("debug_refused", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(metile.MetileError, match=match) as e:
        module.kernel.kernel.trace(np.zeros(4, np.float32))
    assert e.value.loc.line == 8


@triton.jit
def masked_check(X, n):
    offs = tl.arange(0, 8)
    x = tl.load(X + offs, mask=offs < n)       # inactive past n (language.md 5.3): not checked
    tl.device_assert(x > 0, "not positive")


def test_an_assertion_skips_inactive_elements():
    x = np.array([1, 2, 3, -4, -5, -6, -7, -8], np.float32)
    masked_check[(1,)](x, 3)
    with pytest.raises(metile.DeviceFault, match="not positive"):
        masked_check[(1,)](x, 4)
