"""A MetileError from a kernel reaches the user with the user's frames: metile's internal frames and the internal
exceptions it was raised from are dropped, and the traceback ends at the kernel's own line; METILE_TRACEBACK=full
keeps everything."""

from __future__ import annotations

import traceback
from pathlib import Path

import numpy as np
import pytest

import metile
from metile.debug import DebugSettingError
from metile.frontend.errors import GridError, KernelArgumentError, KernelTypeError
from tests.msl_source import kernel_line as line_of

PACKAGE = str(Path(metile.__file__).resolve().parent)


@pytest.fixture(autouse=True)
def short_tracebacks(monkeypatch):
    monkeypatch.setenv("METILE_DEVICE", "cpu")
    monkeypatch.delenv("METILE_TRACEBACK", raising=False)


@metile.kernel
def adds_a_string(A, B, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    a = metile.load(A + offs, mask=offs < n) + "one"  # the mistake
    metile.store(B + offs, a, mask=offs < n)


@metile.kernel
def reads_past(A, B, SHIFT: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    a = metile.load(A + offs + SHIFT)  # the bad load
    metile.store(B + offs, a)


@metile.kernel
def barrier_in_a_branch(X, BLOCK: metile.constexpr):
    t = metile.thread_id()
    if t < 4:
        metile.barrier()  # the barrier
    metile.store(X + t, 1.0)


def caught(call) -> BaseException:
    with pytest.raises(metile.MetileError) as info:
        call()
    return info.value


def frames(error: BaseException) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(error.__traceback__))


def metile_frames(error: BaseException) -> list[traceback.FrameSummary]:
    return [f for f in frames(error) if f.filename.startswith(PACKAGE)]


def assert_ends_at_the_kernel_line(error: BaseException, kernel, marker: str) -> str:
    """The traceback holds no frame of metile but the public entry point's, ends at the kernel's line, and shows no
    internal exception; returns it as printed."""
    inside = metile_frames(error)
    assert len(inside) <= 1, [f"{f.filename}:{f.lineno} {f.name}" for f in inside]
    assert all(Path(f.filename).name in ("kernel.py", "launch.py") for f in inside)   # an entry point
    last = frames(error)[-1]
    assert (last.filename, last.lineno, last.name) == (__file__, line_of(kernel.fn, marker), kernel.fn.__name__)
    text = "".join(traceback.format_exception(error))
    assert "During handling" not in text and "direct cause" not in text
    assert f'File "{__file__}", line {last.lineno}, in {kernel.fn.__name__}\n    {last.line}\n' in text
    assert f"    {last.line}\n    ^" not in text, "carets under a part of the kernel's line"
    return text


def test_a_trace_error_of_a_launch_ends_at_the_kernel_line():
    x = np.zeros(64, np.float32)
    err = caught(lambda: adds_a_string[(1,)](x, x, 64, BLOCK=64))
    assert isinstance(err, KernelTypeError)
    text = assert_ends_at_the_kernel_line(err, adds_a_string, "# the mistake")
    assert text.count("\n") < 14, text            # it used to take 28 lines, 9 of them metile's
    assert text.rstrip().endswith(str(err).splitlines()[-1].rstrip())  # the message and its caret come last


@pytest.mark.parametrize("entry", ["compile", "trace", "prepare", "cache_key"])
def test_every_entry_point_does_the_same(entry):
    x = np.zeros(64, np.float32)
    calls = {
        "compile": lambda: adds_a_string.compile(x, x, 64, BLOCK=64),
        "trace": lambda: adds_a_string.trace(x, x, 64, BLOCK=64),
        "prepare": lambda: adds_a_string[(1,)].prepare(x, x, 64, BLOCK=64),
        "cache_key": lambda: adds_a_string.cache_key(x, x, "many", BLOCK=64),
    }
    err = caught(calls[entry])
    if entry == "cache_key":
        assert isinstance(err, KernelArgumentError)
        assert_ends_at_the_kernel_line(err, adds_a_string, "def adds_a_string")
    else:
        assert_ends_at_the_kernel_line(err, adds_a_string, "# the mistake")


def test_a_fault_ends_at_the_faulting_line_of_a_launch_and_of_a_prepared_call():
    a, b = np.ones(64, np.float32), np.zeros(64, np.float32)
    err = caught(lambda: reads_past[(1,)](a, b, SHIFT=64, BLOCK=64))
    assert isinstance(err, metile.DeviceFault)
    assert_ends_at_the_kernel_line(err, reads_past, "# the bad load")
    run = reads_past[(1,)].prepare(a, b, SHIFT=64, BLOCK=64)
    err = caught(run)
    assert isinstance(err, metile.DeviceFault)
    assert_ends_at_the_kernel_line(err, reads_past, "# the bad load")


def test_an_error_raised_from_an_internal_one_hides_it_unless_full(monkeypatch):
    x = np.zeros(64, np.float32)
    err = caught(lambda: barrier_in_a_branch[(1,)](x, BLOCK=64))
    assert isinstance(err, metile.LoweringUnavailableError)
    assert_ends_at_the_kernel_line(err, barrier_in_a_branch, "# the barrier")
    monkeypatch.setenv("METILE_TRACEBACK", "full")
    err = caught(lambda: metile.kernel(barrier_in_a_branch.fn)[(1,)](x, BLOCK=64))
    text = "".join(traceback.format_exception(err))
    assert "direct cause" in text and "UnsupportedConstructError" in text


def test_an_error_without_a_python_line_ends_at_the_entry_point():
    x = np.zeros(64, np.float32)
    err = caught(lambda: reads_past[(0,)](x, x, SHIFT=0, BLOCK=64))
    assert isinstance(err, GridError) and err.loc is None
    assert [f.name for f in metile_frames(err)] == ["__call__"]
    assert frames(err)[-1].filename.startswith(PACKAGE)
    err = caught(lambda: adds_a_string(x, x, 64, BLOCK=64))
    assert isinstance(err, KernelArgumentError) and [f.name for f in metile_frames(err)] == ["__call__"]


def test_full_tracebacks_keep_metiles_frames(monkeypatch):
    monkeypatch.setenv("METILE_TRACEBACK", "full")
    x = np.zeros(64, np.float32)
    err = caught(lambda: metile.kernel(adds_a_string.fn)[(1,)](x, x, 64, BLOCK=64))
    names = {Path(f.filename).name for f in metile_frames(err)}
    assert {"kernel.py", "trace.py", "semantic.py"} <= names
    assert frames(err)[-1].filename.startswith(PACKAGE)    # where it was raised


def test_a_bad_metile_traceback_is_refused(monkeypatch):
    monkeypatch.setenv("METILE_TRACEBACK", "long")
    x = np.zeros(64, np.float32)
    with pytest.raises(DebugSettingError, match="METILE_TRACEBACK='long' is not a setting: use full") as info:
        adds_a_string[(1,)](x, x, 64, BLOCK=64)
    assert isinstance(info.value.__context__, KernelTypeError)   # the kernel's own error is not lost


def test_decorating_a_non_function_ends_at_the_user():
    err = caught(lambda: metile.kernel(print))
    assert metile_frames(err) == [] or [f.name for f in metile_frames(err)] == ["kernel"]
