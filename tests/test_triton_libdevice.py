"""libdevice's inverse trigonometric, hyperbolic and base-10 functions (`asin`, `acos`, `atan`, `tan`, `sinh`,
`cosh`, `asinh`, `acosh`, `atanh`, `exp10`, `log10`, `atan2`, `fdim`) in `@triton.jit` kernels on the CPU device:
each computes what numpy computes in float64 rounded to float32, within 2 units in the last place, over a sweep of
its domain and its edge cases (signed zeros, the ends of the domain, values outside it, infinities, NaN), and the
new IR operations print and read back."""

from __future__ import annotations

import numpy as np
import pytest

import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import KernelTypeError
from metile.ir import parse, pretty
from metile.ir.node import walk
from metile.ir.ops import BinOp, UnOp
from metile.ir.values import Binary, Unary
from metile.triton.language.extra import libdevice

pytestmark = pytest.mark.usefixtures("on_cpu")

BLOCK = 256


@triton.jit
def unary(X, Out, n, WHICH: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask)
    if WHICH == "asin":
        y = libdevice.asin(x)
    elif WHICH == "acos":
        y = libdevice.acos(x)
    elif WHICH == "atan":
        y = libdevice.atan(x)
    elif WHICH == "tan":
        y = libdevice.tan(x)
    elif WHICH == "sinh":
        y = libdevice.sinh(x)
    elif WHICH == "cosh":
        y = libdevice.cosh(x)
    elif WHICH == "asinh":
        y = libdevice.asinh(x)
    elif WHICH == "acosh":
        y = libdevice.acosh(x)
    elif WHICH == "atanh":
        y = libdevice.atanh(x)
    elif WHICH == "exp10":
        y = libdevice.exp10(x)
    elif WHICH == "log10":
        y = libdevice.log10(x)
    elif WHICH == "fast_tanf":
        y = libdevice.fast_tanf(x)
    elif WHICH == "fast_exp10f":
        y = libdevice.fast_exp10f(x)
    else:
        y = libdevice.fast_log10f(x)
    tl.store(Out + offs, y, mask=mask)


@triton.jit
def binary(X, Y, Out, n, WHICH: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask)
    y = tl.load(Y + offs, mask=mask)
    if WHICH == "atan2":
        z = libdevice.atan2(x, y)
    else:
        z = libdevice.fdim(x, y)
    tl.store(Out + offs, z, mask=mask)


SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1e-30, -1e-30, 1e-45, 2.0, -2.0, 10.0, 38.5, 39.0, 88.0, 89.5, -90.0,
           1e30, -1e30, 3.4e38, np.inf, -np.inf, np.nan, np.pi / 2, np.nextafter(np.float32(1), np.float32(0)),
           np.nextafter(np.float32(1), np.float32(2)), np.nextafter(np.float32(-1), np.float32(0))]

NUMPY = {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh,
         "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "exp10": lambda v: np.power(10.0, v),
         "log10": np.log10, "fast_tanf": np.tan, "fast_exp10f": lambda v: np.power(10.0, v),
         "fast_log10f": np.log10}
SWEEP = {"asin": (-1, 1), "acos": (-1, 1), "atanh": (-1, 1), "acosh": (1, 1e4), "log10": (1e-6, 1e6),
         "fast_log10f": (1e-6, 1e6), "tan": (-10, 10), "fast_tanf": (-10, 10)}


def _inputs(name: str) -> np.ndarray:
    lo, hi = SWEEP.get(name, (-40, 40))
    sweep = np.linspace(lo, hi, 2000)
    return np.concatenate([sweep, np.array(SPECIAL, np.float64)]).astype(np.float32)


def _check(got: np.ndarray, want64: np.ndarray, name: str) -> None:
    """`got` equals float64 `want64` rounded to float32 within 2 ulp, with its NaNs, infinities and zero signs."""
    with np.errstate(over="ignore"):
        want = want64.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{name}: NaNs")
    ok = ~np.isnan(want)
    g, w = got[ok], want[ok]
    np.testing.assert_array_equal(np.isinf(g), np.isinf(w), err_msg=f"{name}: infinities")
    np.testing.assert_array_equal(g[np.isinf(w)], w[np.isinf(w)], err_msg=f"{name}: infinities")
    zero = w == 0
    np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]), err_msg=f"{name}: signed zeros")
    fin = np.isfinite(w)
    ulp = np.spacing(np.abs(w[fin]).astype(np.float32))
    err = np.abs(g[fin].astype(np.float64) - w[fin].astype(np.float64))
    worst = int(np.argmax(err / ulp)) if err.size else 0
    assert np.all(err <= 2 * ulp), f"{name}: {err[worst] / ulp[worst]:.1f} ulp off at x = {got[fin][worst]}"


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_unary_function_against_numpy(name):
    x = _inputs(name)
    out = np.full_like(x, 7.0)
    unary[(triton.cdiv(x.size, BLOCK),)](x, out, x.size, WHICH=name, BLOCK=BLOCK)
    with np.errstate(all="ignore"):
        want = NUMPY[name](x.astype(np.float64))
    _check(out, want, name)


def _pairs() -> tuple[np.ndarray, np.ndarray]:
    values = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e-30, 1e30, np.inf, -np.inf, np.nan], np.float32)
    x, y = np.meshgrid(values, values)
    rng = np.random.default_rng(7)
    rx, ry = rng.uniform(-100, 100, 1500).astype(np.float32), rng.uniform(-100, 100, 1500).astype(np.float32)
    return np.concatenate([x.ravel(), rx]), np.concatenate([y.ravel(), ry])


def test_atan2_against_numpy():
    x, y = _pairs()
    out = np.zeros_like(x)
    binary[(triton.cdiv(x.size, BLOCK),)](x, y, out, x.size, WHICH="atan2", BLOCK=BLOCK)
    _check(out, np.arctan2(x.astype(np.float64), y.astype(np.float64)), "atan2")


def test_fdim_is_exact():
    x, y = _pairs()
    out = np.zeros_like(x)
    binary[(triton.cdiv(x.size, BLOCK),)](x, y, out, x.size, WHICH="fdim", BLOCK=BLOCK)
    with np.errstate(all="ignore"):
        want = np.where(np.isnan(x) | np.isnan(y), np.nan, np.where(x > y, x - y, 0.0)).astype(np.float32)
    np.testing.assert_array_equal(out, want)
    assert not np.signbit(out[want == 0]).any()     # fdim's zero is +0


def test_the_new_operations_print_and_read_back():
    x, o = np.zeros(4, np.float32), np.zeros(4, np.float32)
    for name, op in (("asin", UnOp.ASIN), ("acosh", UnOp.ACOSH), ("exp10", UnOp.EXP10), ("log10", UnOp.LOG10)):
        k = unary.kernel.trace(x, o, 4, WHICH=name, BLOCK=4)
        assert f" {op.value} " in pretty(k)
        assert parse(pretty(k)) == k
        assert any(isinstance(v, Unary) and v.op is op for v in walk(k))
    k = binary.kernel.trace(x, x, o, 4, WHICH="atan2", BLOCK=4)
    assert parse(pretty(k)) == k
    assert any(isinstance(v, Binary) and v.op is BinOp.ATAN2 for v in walk(k))


def test_the_functions_take_fp32():
    with pytest.raises(KernelTypeError, match="input arg type does not match"):
        unary[(1,)](np.zeros(4, np.float16), np.zeros(4, np.float16), 4, WHICH="asin", BLOCK=4)
