"""A `dot` with fewer 8x8 pieces than the program's simdgroups runs (as Triton runs a 16x16 `tl.dot` with
`num_warps=8`): simdgroups beyond those the pieces split among compute copies of their twins' pieces, and only the
owners store, reduce or publish the result, with and without `split_k`, in loops, with atomics (which copies would
add twice) and epilogues. Also scalars from `full(())`, and the limit on a tile's elements per thread."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.frontend.errors import LoweringUnavailableError
from metile.rewrite.pipeline import DEFAULT_PIPELINE

pytestmark = pytest.mark.usefixtures("on_cpu")
RNG = np.random.default_rng(5)
NO_SPLIT = [p for p in DEFAULT_PIPELINE if p.name != "split_k"]


def mm(A, B, C, S, M: metile.constexpr, N: metile.constexpr, K: metile.constexpr, BK: metile.constexpr):
    r, c = metile.arange(0, M), metile.arange(0, N)
    acc = metile.zeros((M, N), dtype=metile.float32)
    for k in metile.tile_range(0, K, BK):
        kk = k + metile.arange(0, BK)
        a = metile.load(A + r[:, None] * K + kk[None, :])
        b = metile.load(B + kk[:, None] * N + c[None, :])
        acc = metile.dot(a, b, acc)
    metile.store(C + r[:, None] * N + c[None, :], acc)
    metile.atomic_add(S + r, metile.sum(acc, axis=1))       # each row's sum added once


KERNELS = {"default": metile.kernel(mm), "no_split_k": metile.kernel(pipeline=NO_SPLIT)(mm)}


@pytest.mark.parametrize("pipeline", sorted(KERNELS))
@pytest.mark.parametrize(("m", "n", "k", "bk"), [(16, 16, 16, 16), (8, 8, 8, 8), (16, 16, 64, 32), (8, 16, 32, 8)])
@pytest.mark.parametrize("sgs", [8, 16, 32])
def test_a_product_with_fewer_pieces_than_simdgroups(pipeline, m, n, k, bk, sgs):
    a, b = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    c, s = np.zeros((m, n), np.float32), np.zeros(m, np.float32)
    KERNELS[pipeline][(1,)](a, b, c, s, M=m, N=n, K=k, BK=bk, num_simdgroups=sgs)
    metile.synchronize()
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s, (a @ b).sum(1), rtol=1e-4, atol=1e-4)


@metile.kernel
def epilogue(A, B, C, N: metile.constexpr):
    r = metile.arange(0, N)
    a = metile.load(A + r[:, None] * N + r[None, :])
    b = metile.load(B + r[:, None] * N + r[None, :])
    p = metile.dot(a, b)
    metile.store(C + r[:, None] * N + r[None, :], metile.maximum(p, 0.0) * 2.0 + 1.0,
                 mask=r[:, None] < N - 1)   # an element-wise epilogue and a masked store, read lane by lane


def test_an_epilogue_of_a_replicated_product_is_stored_once():
    a, b = RNG.standard_normal((8, 8)).astype(np.float32), RNG.standard_normal((8, 8)).astype(np.float32)
    c = np.full((8, 8), 7.0, np.float32)
    epilogue[(1,)](a, b, c, N=8, num_simdgroups=4)
    metile.synchronize()
    ref = np.maximum(a @ b, 0) * 2 + 1
    np.testing.assert_allclose(c[:7], ref[:7], rtol=1e-5, atol=1e-5)
    assert (c[7] == 7.0).all()


@metile.kernel
def scalars(Out, v):
    metile.store(Out, metile.full((), 3.0))
    metile.store(Out + 1, metile.full((), v, dtype="f32") + metile.zeros(()))
    metile.store(Out + 2, metile.zeros((), dtype="i32") + 7)
    metile.store(Out + 3, metile.full([], 2, dtype="f16"))


def test_full_and_zeros_of_the_empty_shape_are_scalars():
    out = np.zeros(4, np.float32)
    scalars[(1,)](out, 5)
    metile.synchronize()
    assert out.tolist() == [3.0, 5.0, 7.0, 2.0]


@metile.kernel
def shifted_by_max(X, Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(Out + offs, x - metile.max(x))


def test_a_tile_too_large_for_the_threads_names_the_limit():
    """65536 elements on one simdgroup would be 2048 registers per thread: refused with the way out, where it
    once failed as a 'chain of operations too deep' pointing at Python loops."""
    x = np.ones(65536, np.float32)
    with pytest.raises(LoweringUnavailableError, match=r"65536 elements on this program's 32 threads would hold "
                                                        r"2048 .* at most 256 per thread: run more threads "
                                                        r"\(num_simdgroups=8 or more\)"):
        shifted_by_max[(1,)](x, x.copy(), BLOCK=65536, num_simdgroups=1)
    out = np.zeros_like(x)
    shifted_by_max[(1,)](x, out, BLOCK=65536)
    metile.synchronize()
    assert (out == 0).all()
