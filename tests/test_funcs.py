"""`@metile.func` helpers: inlined where a kernel calls them, calling each other, returning tuples, returning from
compile-time branches, and reporting errors at their own lines."""

from __future__ import annotations

import math
import traceback

import numpy as np
import pytest

import metile
from metile.frontend.errors import (
    KernelArgumentError,
    KernelTypeError,
    OutsideKernelError,
    UnsupportedCallError,
    UnsupportedSyntaxError,
)
from tests.frontend_kernels import helpers

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.func
def offsets(block):
    return metile.program_id(0) * block + metile.arange(0, block)


@metile.func
def load_row(ptr, offs, n):
    mask = offs < n
    return metile.load(ptr + offs, mask=mask), mask


@metile.func
def activation(x, kind):
    if kind == "relu":
        return metile.maximum(x, 0.0)
    if kind == "gelu":
        return helpers.gelu(x)          # a helper calling a helper of another module
    return helpers.scaled(x)            # its default comes from its own module's globals


@metile.func
def power(x, n):
    if n == 0:
        return x * 0.0 + 1.0
    return x * power(x, n - 1)          # recursion that stops at compile time


@metile.func
def store_twice(ptr, offs, value, mask):
    metile.store(ptr + offs, value, mask=mask)     # a helper may emit statements and return nothing
    metile.store(ptr + offs, value, mask=mask)


@metile.kernel
def apply(X, Y, n, KIND: metile.constexpr, BLOCK: metile.constexpr):
    offs = offsets(BLOCK)
    x, mask = load_row(X, offs, n)
    y = activation(x, KIND) + power(x, 3)
    store_twice(Y, offs, y, mask)


REFS = {"relu": lambda x: np.maximum(x, 0), "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
        "scale": lambda x: 3.0 * x}


@pytest.mark.parametrize("kind", sorted(REFS))
def test_helpers_are_inlined(kind):
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    y = np.zeros_like(x)
    apply[(4,)](x, y, 1000, KIND=kind, BLOCK=256)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(y, REFS[kind](x64) + x64**3, rtol=1e-5, atol=1e-5)


@metile.func
def running(acc, x):
    return acc + x


@metile.kernel
def loop_sum(X, Out, n, BLOCK: metile.constexpr):
    acc = 0.0
    for i in metile.tile_range(0, n, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        acc = running(acc, metile.load(X + cols, mask=cols < n))
    metile.store(Out, metile.sum(acc))


def test_a_helper_called_in_a_runtime_loop():
    x = np.random.default_rng(1).standard_normal(700).astype(np.float32)
    out = np.zeros(1, np.float32)
    loop_sum[(1,)](x, out, 700, BLOCK=128)
    np.testing.assert_allclose(out[0], x.sum(dtype=np.float64), rtol=1e-5)


@metile.func
def returns_in_a_runtime_if(x, flag):
    if flag > 0:
        return x
    return x * 2.0


@metile.kernel
def uses(X, Y, flag, WHAT: metile.constexpr):
    offs = metile.arange(0, 32)
    x = metile.load(X + offs)
    if WHAT == "runtime return":
        y = returns_in_a_runtime_if(x, flag)
    elif WHAT == "bad arguments":
        y = load_row(X, offs)
    elif WHAT == "inside":
        y = helpers.broken(x)
    elif WHAT == "recursion":
        y = power(x, 1000)
    else:
        y = undecorated(x)
    metile.store(Y + offs, y)


def undecorated(x):
    return x


@pytest.mark.parametrize(("what", "error", "words", "where"), [
    ("runtime return", UnsupportedSyntaxError, "can only `return` where tracing decides it", "return x"),
    ("bad arguments", KernelArgumentError, "load_row\\(\\): missing a required argument: 'n'", "load_row(X, offs)"),
    ("inside", KernelTypeError, "expected a number or a traced value, not str", "x + \"text\""),
    ("recursion", KernelTypeError, "nest more than 64 deep", "power(x, n - 1)"),
    ("plain", UnsupportedCallError, "mark a helper function with @metile.func", "undecorated(x)"),
])
def test_helper_mistakes_are_reported_at_their_own_lines(what, error, words, where):
    x = np.zeros(32, np.float32)
    with pytest.raises(error, match=words) as e:
        uses[(1,)](x, x, 1, WHAT=what)
    assert where in str(e.value)
    if what == "inside":
        assert e.value.loc.file == helpers.__file__
        notes = "".join(traceback.format_exception(e.value))
        assert "in @metile.func broken(), called at" in notes and __file__ in notes


def test_a_helper_called_outside_a_kernel_says_so():
    with pytest.raises(OutsideKernelError, match="can only be called inside a @metile.kernel"):
        offsets(4)
