"""`metile.reduce`, `metile.associative_scan` (combine functions of the kernel's own, `@metile.func`) and
`metile.gather`, against numpy: sums, products, a linear recurrence carried by two tiles, a non-commutative combine
(order kept), reversed scans, tiles spread over several simdgroups, 2-D tiles along either axis; the Tile IR's
`gather` prints and parses back."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.ir import parse, pretty

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.func
def add(a, b):
    return a + b


@metile.func
def affine(a1, b1, a2, b2):
    return a1 * a2, b1 * a2 + b2


@metile.func
def concat_digits(v1, p1, v2, p2):   # (digits, 10 ** their count): associative, not commutative
    return v1 * p2 + v2, p1 * p2


@metile.kernel
def line(X, A, D, Sum, Scan, RecA, RecB, Rev, Digits, Picked, N: metile.constexpr):
    offs = metile.arange(0, N)
    x = metile.load(X + offs)
    a = metile.load(A + offs)
    metile.store(Sum, metile.reduce(x, 0, add))
    metile.store(Scan + offs, metile.associative_scan(x, 0, add))
    ra, rb = metile.associative_scan((a, x), 0, affine)
    metile.store(RecA + offs, ra)
    metile.store(RecB + offs, rb)
    metile.store(Rev + offs, metile.associative_scan(x, 0, add, reverse=True))
    d = metile.load(D + offs % 8)
    v, _ = metile.reduce((metile.where(offs < 8, d, 0), metile.where(offs < 8, 10, 1)), 0, concat_digits)
    metile.store(Digits, v)
    metile.store(Picked + offs, metile.gather(x, (N - 1) - offs, 0))


@pytest.mark.parametrize("n, sgs", [(8, 1), (64, 2), (1024, 4)])
def test_reduce_and_scan_with_combine_functions(n, sgs):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    a = rng.uniform(0.9, 1.0, n).astype(np.float32)
    digits = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.int32)
    outs = [np.zeros(1, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(n, np.float32),
            np.zeros(n, np.float32), np.zeros(1, np.int32), np.zeros(n, np.float32)]
    line[(1,)](x, a, digits, *outs, N=n, num_simdgroups=sgs)
    s, scan, ra, rb, rev, dig, picked = outs
    np.testing.assert_allclose(s[0], x.sum(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(scan, np.cumsum(x), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ra, np.cumprod(a), rtol=1e-4)
    want, acc = np.zeros(n), 0.0
    for t in range(n):
        acc = a[t] * acc + x[t]
        want[t] = acc
    np.testing.assert_allclose(rb, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rev, np.cumsum(x[::-1])[::-1], rtol=1e-4, atol=1e-4)
    assert dig[0] == 31415926   # the elements past the eighth are the empty string: (0, 1)
    np.testing.assert_array_equal(picked, x[::-1])


@metile.kernel
def grid2(X, Rows, Cols, ScanCols, R: metile.constexpr, C: metile.constexpr):
    r = metile.arange(0, R)[:, None]
    c = metile.arange(0, C)[None, :]
    x = metile.load(X + r * C + c)
    metile.store(Rows + metile.arange(0, R), metile.reduce(x, 1, add))
    metile.store(Cols + metile.arange(0, C)[None, :], metile.reduce(x, 0, add, keep_dims=True))
    metile.store(ScanCols + r * C + c, metile.associative_scan(x, 0, add))


def test_two_dimensional_tiles_along_either_axis():
    x = np.arange(8 * 16, dtype=np.int32).reshape(8, 16) % 7
    rows, cols, scan = np.zeros(8, np.int32), np.zeros(16, np.int32), np.zeros((8, 16), np.int32)
    grid2[(1,)](x, rows, cols, scan, R=8, C=16)
    np.testing.assert_array_equal(rows, x.sum(1))
    np.testing.assert_array_equal(cols, x.sum(0))
    np.testing.assert_array_equal(scan, np.cumsum(x, 0))


def test_gather_prints_and_parses_back():
    k = line.trace(*[np.zeros(8, np.float32)] * 2, np.zeros(8, np.int32), np.zeros(1, np.float32),
                   *[np.zeros(8, np.float32)] * 4, np.zeros(1, np.int32), np.zeros(8, np.float32), N=8)
    text = pretty(k)
    assert "gather " in text
    assert parse(text) == k


@metile.kernel
def bad_gather(X):
    x = metile.load(X + metile.arange(0, 8))
    metile.store(X + metile.arange(0, 4), metile.gather(x, metile.arange(0, 4)[:, None], 0))


def test_gather_refuses_an_index_of_another_rank():
    with pytest.raises(metile.MetileError, match="the index must have the source's rank \\(1\\)"):
        bad_gather.trace(np.zeros(8, np.float32))


@metile.kernel
def gather_columns(X, I, Out, R: metile.constexpr, C: metile.constexpr, K: metile.constexpr):
    r = metile.arange(0, R)[:, None]
    x = metile.load(X + r * C + metile.arange(0, C)[None, :])
    idx = metile.load(I + r * K + metile.arange(0, K)[None, :])
    metile.store(Out + r * K + metile.arange(0, K)[None, :], metile.gather(x, idx, 1))


@pytest.mark.parametrize("k", [1, 3, 10])
def test_gather_along_a_later_axis_takes_an_index_of_any_extent_there(k):
    """6.8: the index has the source's extents on the other axes and any extent along `axis`; an index of 3 or 10
    columns picks columns of a source of 5 (the extent along axis 1 was checked as if the axis were 0)."""
    x = np.arange(40, dtype=np.float32).reshape(8, 5)
    idx = np.random.default_rng(k).integers(0, 5, (8, k)).astype(np.int32)
    out = np.zeros((8, k), np.float32)
    gather_columns[(1,)](x, idx, out, R=8, C=5, K=k)
    assert (out == np.take_along_axis(x, idx, 1)).all()


@metile.kernel
def partly_inactive(X, Picked, Sum, Carried):
    offs = metile.arange(0, 8)
    x = metile.load(X + offs, mask=offs < 5)        # inactive from the sixth element (language.md 5.3)
    metile.store(Picked + offs, metile.gather(x, 7 - offs, 0))
    metile.store(Sum, metile.reduce(x, 0, add))
    acc = 100.0
    for _ in metile.tile_range(0, 2):
        acc = metile.reduce(x, 0, add)              # a result active everywhere: the loop takes it
    metile.store(Carried, acc)


def test_inactive_elements_enter_combine_functions_as_zero_and_results_are_active():
    x = np.arange(1, 9, dtype=np.float32)
    picked, s, carried = np.full(8, -1.0, np.float32), np.zeros(1, np.float32), np.zeros(1, np.float32)
    partly_inactive[(1,)](x, picked, s, carried)
    assert list(picked) == [0, 0, 0, 5, 4, 3, 2, 1]
    assert s[0] == 15 and carried[0] == 15
