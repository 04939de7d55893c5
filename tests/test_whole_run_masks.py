"""A mask that is one value over each run of 4 elements a thread moves as one vector (`offs < n` with `offs` a
block of consecutive indices and `n` specialised as a multiple of 16: the axis analysis proves it,
`metile.rewrite.axis_info`) lets a run move as one vector or not at all: the lowering emits no
element-by-element path beside the vector one (`metile.rewrite.lower.memory`). Where the mask may cut a run (`n`
not known to be a multiple of 4) both paths stay, and both give the right result."""

from __future__ import annotations

import numpy as np
import pytest

import metile

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def vec_add(A, B, C, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    a = metile.load(A + offs, mask=live)
    b = metile.load(B + offs, mask=live, other=-1.5)
    metile.store(C + offs, a + b, mask=live)


@metile.kernel
def copy_with_other(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < n, other=-2.0)
    metile.store(Y + offs, x)


def _arrays(n: int, size: int = 1024):
    rng = np.random.default_rng(n)
    a, b = rng.random(size).astype(np.float32), rng.random(size).astype(np.float32)
    return a, b, np.full(size, 7.0, np.float32)


def test_a_mask_whole_over_runs_moves_each_run_as_one_vector():
    a, b, c = _arrays(1008)
    msl = vec_add.compile(a, b, c, 1008, BLOCK=256).artifact.msl
    assert "float4" in msl
    assert "? A[" not in msl and "? B[" not in msl and "C[" not in msl, msl   # no element-by-element path
    vec_add[(4,)](a, b, c, 1008, BLOCK=256)   # the last program's runs: 240 inside the mask, 16 outside
    np.testing.assert_array_equal(c[:1008], a[:1008] + b[:1008])
    assert (c[1008:] == 7.0).all()


def test_a_mask_that_may_cut_a_run_keeps_the_element_by_element_path():
    for n in (1001, 1002, 1003):
        a, b, c = _arrays(n)
        msl = vec_add.compile(a, b, c, n, BLOCK=256).artifact.msl
        assert "float4" in msl and "? A[" in msl, msl
        vec_add[(4,)](a, b, c, n, BLOCK=256)
        np.testing.assert_array_equal(c[:n], a[:n] + b[:n])
        assert (c[n:] == 7.0).all()


def test_runs_outside_a_whole_mask_read_other():
    x, y = np.arange(256, dtype=np.float32), np.zeros(256, np.float32)
    msl = copy_with_other.compile(x, y, 96, BLOCK=256).artifact.msl
    assert "? X[" not in msl, msl
    copy_with_other[(1,)](x, y, 96, BLOCK=256)
    np.testing.assert_array_equal(y, np.where(np.arange(256) < 96, x, -2.0))
