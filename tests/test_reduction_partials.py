"""A reduction over more than one simdgroup combines the simdgroups' partials with a second simdgroup reduction
(`metile.rewrite.lower.reductions.across_threads`): lane `i` of every simdgroup reads partial `i`, the identity past
the last. These check the emitted shape (one load of the partials per thread, not one per simdgroup) and the result
for every operation, with 2 to 32 simdgroups (all 32 lanes reading a partial) and a count of simdgroups that is not
a power of two."""

from __future__ import annotations

import re

import numpy as np
import pytest

import metile

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def reduce_all(X, Out, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    metile.store(Out + 0, metile.sum(x))
    metile.store(Out + 1, metile.max(x))
    metile.store(Out + 2, metile.min(x))


@pytest.mark.parametrize("threads", [64, 96, 1024])
def test_partials_are_combined_by_a_second_simdgroup_reduction(threads):
    rng = np.random.default_rng(threads)
    x = rng.integers(-1000, 1000, threads).astype(np.int32)
    out = np.zeros(3, np.int32)
    msl = reduce_all.compile(x, out, BLOCK=threads, num_threads=threads).artifact.msl
    assert len(re.findall(r"\? partials(_\d+)?\[", msl)) == 3, msl   # one load of a partial per thread and reduction
    reduce_all[(1,)](x, out, BLOCK=threads, num_threads=threads)
    assert out.tolist() == [int(x.sum()), int(x.max()), int(x.min())]


def test_a_float_sum_over_many_simdgroups():
    x = np.random.default_rng(1).random(1024).astype(np.float32)
    out = np.zeros(3, np.float32)
    reduce_all[(1,)](x, out, BLOCK=1024, num_threads=1024)
    np.testing.assert_allclose(out, [x.sum(dtype=np.float64), x.max(), x.min()], rtol=1e-5)


def test_a_half_reduction_over_many_simdgroups_converts_the_combined_partials():
    """f16 reduces in f32 and converts the result back: the second simdgroup reduction is bound to a name first
    (a simdgroup collective is only ever a `Let`'s value, never the operand of the conversion)."""
    x = (np.random.default_rng(2).random(256) * 4).astype(np.float16)
    out = np.zeros(3, np.float16)
    reduce_all[(1,)](x, out, BLOCK=256, num_threads=256)
    np.testing.assert_allclose(out.astype(np.float32), [x.astype(np.float32).sum(), x.max(), x.min()], rtol=2e-3)
