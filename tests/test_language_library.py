"""The language's library: casts (`metile.cast`, `x.to`), the math functions, `num_programs`, arg-reductions and
scans, each run on the CPU device against numpy, and their refusals at the user's line."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import metile
from metile.frontend.errors import KernelArgumentError, KernelTypeError, ShapeMismatchError

BF16 = np.dtype(ml_dtypes.bfloat16)


pytestmark = pytest.mark.usefixtures("on_cpu")


# ---- casts


@metile.kernel
def convert(X, Y, n, DT: metile.constexpr, BITCAST: metile.constexpr, METHOD: metile.constexpr,
            BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    m = offs < n
    x = metile.load(X + offs, mask=m)
    if METHOD:
        y = x.to(DT, bitcast=BITCAST)
    else:
        y = metile.cast(x, DT, bitcast=BITCAST)
    metile.store(Y + offs, y, mask=m)


@pytest.mark.parametrize(("src", "dst"), [(np.float32, np.float16), (np.float32, np.int32), (np.float16, np.float32),
                                          (np.int32, np.float32), (np.int32, np.int8), (np.uint8, np.int32),
                                          (np.float32, BF16), (BF16, np.float32), (np.int32, np.bool_)])
@pytest.mark.parametrize("method", [False, True])
def test_cast_converts_by_c_rules(src, dst, method):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(300) * 50).astype(np.float64).astype(src)
    y = np.zeros(300, dst)
    name = np.dtype(dst).name
    dt = {"float16": metile.float16, "float32": metile.float32, "int32": "i32", "int8": metile.int8,
          "bfloat16": BF16, "bool": metile.int1}[name]
    convert[(2,)](x, y, 300, DT=dt, BITCAST=False, METHOD=method, BLOCK=256)
    if np.dtype(dst) == np.bool_:
        want = x != 0
    elif np.dtype(dst).kind in "iu" and np.dtype(src).kind == "f":
        want = np.trunc(x.astype(np.float64)).astype(dst)
    else:
        want = x.astype(dst)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize(("src", "dst"), [(np.float32, np.uint32), (np.uint32, np.float32), (np.float16, np.int16),
                                          (np.int8, np.uint8), (BF16, np.uint16)])
def test_bitcast_keeps_the_bits(src, dst):
    rng = np.random.default_rng(2)
    raw = rng.integers(0, 2**8, 300 * np.dtype(src).itemsize, dtype=np.uint8)
    x = raw.view(src).copy()
    y = np.zeros(300, dst)
    convert[(2,)](x, y, 300, DT=np.dtype(dst), BITCAST=True, METHOD=True, BLOCK=256)
    np.testing.assert_array_equal(y, x.view(dst))


def test_casts_of_python_numbers_fold_at_compile_time():
    @metile.kernel
    def consts(Y):
        metile.store(Y, metile.cast(-3.7, "i32") + metile.cast(1.5, "f32", bitcast=True).to("i32") * 0 + 7)

    y = np.zeros(1, np.int32)
    consts[(1,)](y)
    assert y[0] == 4


@metile.kernel
def bad_cast(X, Y, WHAT: metile.constexpr):
    x = metile.load(X + metile.arange(0, 32))
    if WHAT == "width":
        y = metile.cast(x, "f16", bitcast=True)
    elif WHAT == "dtype":
        y = x.to("f64")
    elif WHAT == "pointer":
        y = metile.cast(X, "i32")
    elif WHAT == "flag":
        y = metile.cast(x, "i32", bitcast=1)
    else:
        y = x.reshape(4, 8)
    metile.store(Y + metile.arange(0, 32), y)


@pytest.mark.parametrize(("what", "error", "words"), [
    ("width", KernelTypeError, "f32 has 32 bits and f16 has 16"), ("dtype", KernelTypeError, "unknown dtype 'f64'"),
    ("pointer", KernelTypeError, "is a pointer"), ("flag", KernelTypeError, "bitcast must be True or False"),
    ("method", KernelTypeError, "no attribute 'reshape'")])
def test_cast_mistakes_are_refused_at_their_line(what, error, words):
    x = np.zeros(32, np.float32)
    with pytest.raises(error, match=words) as e:
        bad_cast[(1,)](x, x, WHAT=what)
    assert e.value.loc.file == __file__
    assert "^" in str(e.value)


def test_dtype_names_are_the_strings_kernels_use():
    assert (metile.float32, metile.float16, metile.bfloat16, metile.int8, metile.uint32, metile.int1) == (
        "f32", "f16", "bf16", "i8", "u32", "bool")
    assert metile.float8e4nv == metile.float8_e4m3 == "f8e4m3"

    @metile.kernel
    def same(Y):
        x = metile.zeros((4,), dtype=metile.float16)
        metile.store(Y + metile.arange(0, 4), metile.where(x == 0.0, 1, 0) * (1 if x.dtype == metile.float16 else 2))

    y = np.zeros(4, np.int32)
    same[(1,)](y)
    assert (y == 1).all()


# ---- math


@metile.kernel
def math1(X, Y, n, FN: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    m = offs < n
    x = metile.load(X + offs, mask=m)
    metile.store(Y + offs, FN(x), mask=m)


UNARY = {
    metile.exp2: (np.exp2, (-10, 10)), metile.log2: (np.log2, (0.01, 100)), metile.sin: (np.sin, (-10, 10)),
    metile.cos: (np.cos, (-10, 10)), metile.rsqrt: (lambda v: 1 / np.sqrt(v), (0.01, 100)),
    metile.floor: (np.floor, (-10, 10)), metile.ceil: (np.ceil, (-10, 10)),
    metile.sigmoid: (lambda v: 1 / (1 + np.exp(-v)), (-100, 100)),
    metile.erf: (np.vectorize(math.erf), (-6, 6)),
}


@pytest.mark.parametrize("fn", list(UNARY), ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_math_functions_match_numpy(fn, dtype):
    ref, (lo, hi) = UNARY[fn]
    x = np.random.default_rng(3).uniform(lo, hi, 1000).astype(dtype)
    x[:5] = [lo, hi, 0.5 * (lo + hi), lo / 3, hi / 7]
    y = np.zeros(1000, dtype)
    math1[(4,)](x, y, 1000, FN=fn, BLOCK=256)
    want = ref(x.astype(np.float64))
    tol = 2e-6 if dtype == np.float32 else 2e-3
    np.testing.assert_allclose(y, want.astype(dtype), rtol=tol, atol=tol)


def test_erf_is_accurate_near_zero_and_in_the_tails():
    x = np.concatenate([np.linspace(-1e-3, 1e-3, 101), np.linspace(-6, 6, 1899), [1e-30, -1e-20]]).astype(np.float32)
    y = np.zeros_like(x)
    math1[(8,)](x, y, x.size, FN=metile.erf, BLOCK=256)
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(y, want, rtol=3e-7, atol=1e-37)


@metile.kernel
def math3(A, B, C, Y, FN: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    a, b, c = metile.load(A + offs), metile.load(B + offs), metile.load(C + offs)
    if FN == "fma":
        y = metile.fma(a, b, c)
    elif FN == "clamp":
        y = metile.clamp(a, b, c)
    else:
        y = metile.pow(a, b) + c * 0.0
    metile.store(Y + offs, y)


def test_fma_clamp_pow():
    rng = np.random.default_rng(4)
    a, b, c = (rng.uniform(0.5, 2, 256).astype(np.float32) for _ in range(3))
    lo, hi = np.minimum(b, c), np.maximum(b, c)
    for fn, args, want in [("fma", (a, b, c), a.astype(np.float64) * b + c), ("clamp", (a, lo, hi), np.clip(a, lo, hi)),
                           ("pow", (a, b, c), a.astype(np.float64) ** b)]:
        y = np.zeros(256, np.float32)
        math3[(1,)](*args, y, FN=fn, BLOCK=256)
        np.testing.assert_allclose(y, want, rtol=2e-6, err_msg=fn)


def test_fma_rounds_once():
    """`a * b + c` with a product that f32 cannot hold: the fused form keeps the low bits."""
    a = np.full(32, 1 + 2.0**-12, np.float32)
    c = np.full(32, -(1 + 2.0**-11), np.float32)
    y = np.zeros(32, np.float32)
    math3[(1,)](a, a, c, y, FN="fma", BLOCK=32)
    assert (y == np.float32(2.0**-24)).all()


def test_num_programs():
    @metile.kernel
    def grid(Y):
        metile.store(Y + metile.program_id(0) * 3 + metile.arange(0, 4) * 0,
                     metile.num_programs(0) * 100 + metile.num_programs(1) * 10 + metile.num_programs(2),
                     mask=metile.arange(0, 4) < 1)

    y = np.zeros(15, np.int32)
    grid[(5, 3, 2)](y)
    assert (y[::3] == 532).all()


def test_num_programs_refuses_a_bad_axis():
    @metile.kernel
    def bad(Y):
        metile.store(Y, metile.num_programs(3))

    with pytest.raises(KernelArgumentError, match="axis must be 0, 1 or 2"):
        bad[(1,)](np.zeros(1, np.int32))


# ---- arg-reductions and scans


@metile.kernel
def arg1(X, AM, AN, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < n)
    metile.store(AM, metile.argmax(x))
    metile.store(AN, metile.argmin(x))


@pytest.mark.parametrize(("n", "block"), [(1, 32), (20, 32), (200, 256), (1000, 1024), (5000, 8192)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint16])
def test_argmax_argmin_first_index_on_ties_and_skips_masked_elements(n, block, dtype):
    rng = np.random.default_rng(n)
    x = rng.integers(-100, -1, n).astype(dtype) if np.dtype(dtype).kind != "u" else rng.integers(1, 90, n).astype(dtype)
    x[n // 3] = x.max()   # ties: the first wins
    x[n // 2] = x.min()
    am, an = np.zeros(1, np.int32), np.zeros(1, np.int32)
    arg1[(1,)](x, am, an, n, BLOCK=block)
    assert (am[0], an[0]) == (np.argmax(x), np.argmin(x))  # the masked-off zeros (inactive) never win


@metile.kernel
def axis2(X, AM, AN, CS, CP, R: metile.constexpr, C: metile.constexpr, AX: metile.constexpr,
          REV: metile.constexpr):
    r = metile.arange(0, R)
    c = metile.arange(0, C)
    x = metile.load(X + r[:, None] * C + c[None, :])
    am, an = metile.argmax(x, axis=AX), metile.argmin(x, axis=AX)
    out = r if AX == 1 else c
    metile.store(AM + out, am)
    metile.store(AN + out, an)
    metile.store(CS + r[:, None] * C + c[None, :], metile.cumsum(x, axis=AX, reverse=REV))
    metile.store(CP + r[:, None] * C + c[None, :], metile.cumprod(x, axis=AX, reverse=REV))


@pytest.mark.parametrize(("rows", "cols", "axis"), [(8, 64, 1), (16, 32, 0), (4, 128, 1), (64, 16, 0), (3, 5, 1)])
@pytest.mark.parametrize("reverse", [False, True])
def test_axis_reductions_and_scans_of_2d_tiles(rows, cols, axis, reverse):
    rng = np.random.default_rng(rows * cols)
    x = rng.integers(-3, 4, (rows, cols)).astype(np.float32)
    n = rows if axis == 1 else cols
    am, an = np.zeros(n, np.int32), np.zeros(n, np.int32)
    cs, cp = np.zeros_like(x), np.zeros_like(x)
    axis2[(1,)](x, am, an, cs, cp, R=rows, C=cols, AX=axis, REV=reverse)
    np.testing.assert_array_equal(am, np.argmax(x, axis=axis))
    np.testing.assert_array_equal(an, np.argmin(x, axis=axis))
    flip = (lambda a: np.flip(a, axis)) if reverse else (lambda a: a)
    np.testing.assert_array_equal(cs, flip(np.cumsum(flip(x), axis=axis)))
    np.testing.assert_array_equal(cp, flip(np.cumprod(flip(x), axis=axis)))


@metile.kernel
def scan1(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < n)
    metile.store(Y + offs, metile.cumsum(x), mask=offs < n)


@pytest.mark.parametrize(("n", "block", "dtype"), [(1, 32, np.float32), (100, 128, np.int32), (1000, 1024, np.float32),
                                                   (3000, 4096, np.int32), (250, 256, np.uint8), (77, 128, np.float16)])
def test_cumsum_of_1d_tiles(n, block, dtype):
    x = np.random.default_rng(n).integers(0, 9, n).astype(dtype)
    y = np.zeros(n, dtype)
    scan1[(1,)](x, y, n, BLOCK=block)
    np.testing.assert_array_equal(y, np.cumsum(x, dtype=np.float64).astype(dtype) if dtype != np.uint8
                                  else np.cumsum(x).astype(np.uint8))


def test_scan_and_argmax_mistakes_are_refused():
    @metile.kernel
    def bad(X, WHAT: metile.constexpr):
        x = metile.load(X + metile.arange(0, 32))
        if WHAT == "scalar":
            metile.store(X, metile.cumsum(metile.sum(x)))
        elif WHAT == "axis":
            metile.store(X, metile.argmax(x, axis=1))
        else:
            metile.store(X + metile.arange(0, 32), metile.cumprod(x, reverse="yes"))

    x = np.zeros(32, np.float32)
    for what, error, words in [("scalar", ShapeMismatchError, "takes a tile"),
                               ("axis", ShapeMismatchError, "axis 1 is out of range"),
                               ("reverse", KernelTypeError, "reverse must be True or False")]:
        with pytest.raises(error, match=words):
            bad[(1,)](x, WHAT=what)


@metile.kernel
def scan_arg(X, CS, AM, AN, n, BLOCK: metile.constexpr, REV: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < n)
    metile.store(CS + offs, metile.cumsum(x, reverse=REV), mask=offs < n)
    metile.store(AM, metile.argmax(x))
    metile.store(AN, metile.argmin(x))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([32, 64, 256, 1024, 2048]), st.integers(1, 2048), st.booleans(), st.integers(0, 2**16))
def test_scans_and_arg_reductions_match_numpy(block, n, reverse, seed):
    n = min(n, block)
    x = np.random.default_rng(seed).integers(-50, 50, n).astype(np.int32)
    cs, am, an = np.zeros(n, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32)
    scan_arg[(1,)](x, cs, am, an, n, BLOCK=block, REV=reverse)
    want = np.cumsum(x[::-1])[::-1] if reverse else np.cumsum(x)
    np.testing.assert_array_equal(cs, want)
    assert (am[0], an[0]) == (np.argmax(x), np.argmin(x))
