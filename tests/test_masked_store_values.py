"""A masked store whose run of elements may be stored as one vector (`metile.rewrite.lower.memory.store`) computes
its values once, before the test that picks the vector or the element-by-element path, when they are arithmetic
that cannot trap; values that could (an integer division, by a divisor a masked-off element may make zero) stay
inside each element's mask."""

from __future__ import annotations

import numpy as np
import pytest

import metile

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def two_stores(X, A, B, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    m = offs < n
    x = metile.load(X + offs, mask=m, other=0.0)
    e = metile.exp(x)
    metile.store(A + offs, e + 1.0, mask=m)
    metile.store(B + offs, e * 2.0, mask=m)


@metile.kernel
def masked_quotient(X, Q, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    m = offs < n
    d = metile.load(X + offs, mask=m, other=0)
    metile.store(Q + offs, 7 // d, mask=m)


def test_values_of_masked_vector_stores_are_computed_once():
    x = np.random.default_rng(0).random(509).astype(np.float32)
    a, b = np.zeros(509, np.float32), np.zeros(509, np.float32)
    msl = two_stores.compile(x, a, b, 509, BLOCK=512).artifact.msl
    held = msl.count("? X[") + msl.count("? t")   # the masked loads: one per element a thread holds
    assert msl.count("exp(") == held == 4, msl   # one exp per element, shared by both stores and both paths
    two_stores[(1,)](x, a, b, 509, BLOCK=512)
    np.testing.assert_allclose(a, np.exp(x) + 1, rtol=1e-6)
    np.testing.assert_allclose(b, np.exp(x) * 2, rtol=1e-6)


def test_an_integer_division_stays_under_its_mask():
    d, q = np.arange(1, 510, dtype=np.int32), np.zeros(509, np.int32)
    masked_quotient[(1,)](d, q, 509, BLOCK=512)   # the three masked-off elements divide by zero if computed
    assert (q == 7 // d).all()


def test_values_of_whole_run_stores_are_computed_once():
    """n a multiple of 16 (specialised as one): the mask is one value over each run of 4, so each run is stored
    as one vector or not at all; the values two such stores share are still computed once, before their tests."""
    x = np.random.default_rng(1).random(512).astype(np.float32)
    a, b = np.zeros(512, np.float32), np.zeros(512, np.float32)
    msl = two_stores.compile(x, a, b, 512, BLOCK=1024).artifact.msl
    assert "? X[" not in msl, msl   # whole runs: no element-by-element path
    held = 4 * msl.count("(device const float4*)(X")   # the elements a thread holds, read as vectors of 4
    assert held and msl.count("exp(") == held, msl   # one exp per element, not one per store
    two_stores[(1,)](x, a, b, 512, BLOCK=1024)
    np.testing.assert_allclose(a, np.exp(x) + 1, rtol=1e-6)
    np.testing.assert_allclose(b, np.exp(x) * 2, rtol=1e-6)
