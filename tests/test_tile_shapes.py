"""The shape functions of metile's language (`reshape`, `ravel`, `permute`, `trans`, `expand_dims`, `broadcast_to`,
`join`, `split`, `interleave`) and 3-D tiles through loads, stores, arithmetic and reductions along every axis,
checked against numpy at ragged shapes and with masked loads; a reshape keeps elements where they are (no exchange
through threadgroup memory), a permutation moves them once; bad shapes are refused at the call."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.emit import compile_to_msl
from metile.frontend.errors import KernelTypeError, ShapeMismatchError

pytestmark = pytest.mark.usefixtures("on_cpu")


def offsets3(A, B, C):
    a = metile.arange(0, A)[:, None, None]
    b = metile.arange(0, B)[None, :, None]
    c = metile.arange(0, C)[None, None, :]
    return a, b, c


@metile.kernel
def three_d(X, Y, S0, S1, S2, M2, A: metile.constexpr, B: metile.constexpr, C: metile.constexpr, n):
    a = metile.arange(0, A)[:, None, None]
    b = metile.arange(0, B)[None, :, None]
    c = metile.arange(0, C)[None, None, :]
    offs = a * (B * C) + b * C + c
    x = metile.load(X + offs, mask=offs < n, other=-1.0)            # the last elements masked off
    metile.store(Y + offs, metile.exp(x) * 2.0 + x, mask=offs < n)
    rb, rc = metile.arange(0, B), metile.arange(0, C)
    metile.store(S0 + rb[:, None] * C + rc[None, :], metile.sum(x, axis=0))
    metile.store(S1 + metile.arange(0, A)[:, None] * C + rc[None, :], metile.sum(x, axis=1))
    metile.store(S2 + metile.arange(0, A)[:, None] * B + rb[None, :], metile.max(x, axis=2))
    metile.store(M2 + metile.arange(0, A), metile.min(metile.min(x, axis=2), axis=1))


@pytest.mark.parametrize(("a", "b", "c"), [(2, 3, 4), (3, 5, 7), (4, 8, 16), (1, 6, 3)])
def test_three_d_tiles_load_store_and_reduce_along_every_axis(a, b, c):
    rng = np.random.default_rng(a * b * c)
    x = rng.standard_normal((a, b, c)).astype(np.float32)
    n = x.size - 3
    y = np.zeros_like(x)
    s0, s1, s2, m2 = (np.zeros(s, np.float32) for s in ((b, c), (a, c), (a, b), a))
    three_d[(1,)](x, y, s0, s1, s2, m2, n, A=a, B=b, C=c)
    metile.synchronize()
    xm = x.ravel().copy()
    xm[n:] = -1.0
    xm = xm.reshape(a, b, c)
    np.testing.assert_allclose(y.ravel()[:n], (np.exp(xm) * 2 + xm).ravel()[:n], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s0, xm.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s1, xm.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(s2, xm.max(2))
    np.testing.assert_array_equal(m2, xm.min((1, 2)))


@metile.kernel
def reshapes(X, P, R, T, E, BR, A: metile.constexpr, B: metile.constexpr, C: metile.constexpr):
    a = metile.arange(0, A)[:, None, None]
    b = metile.arange(0, B)[None, :, None]
    c = metile.arange(0, C)[None, None, :]
    x = metile.load(X + a * (B * C) + b * C + c, mask=c < C - 1)     # the last column inactive: 0 where used
    flat = metile.arange(0, A * B * C)
    metile.store(P + flat, metile.ravel(metile.permute(x, (2, 0, 1))))
    r = metile.reshape(x, (A * B, C))
    metile.store(R + flat, metile.reshape(r * 3.0, A * B * C))
    metile.store(T + flat, metile.ravel(metile.trans(x)))             # the last two dimensions swapped
    metile.store(E + flat, metile.ravel(metile.trans(metile.expand_dims(r, 0), (2, 0, 1))))
    row = metile.load(X + metile.arange(0, C))
    metile.store(BR + flat, metile.ravel(metile.broadcast_to(row, (A, B, C)) + metile.sum(metile.permute(x, (1, 2, 0)),
                                                                                            axis=2)))


@pytest.mark.parametrize(("a", "b", "c"), [(2, 3, 4), (3, 5, 7), (4, 4, 8)])
def test_reshape_permute_trans_expand_dims_and_broadcast(a, b, c):
    rng = np.random.default_rng(a + b + c)
    x = rng.standard_normal((a, b, c)).astype(np.float32)
    outs = [np.zeros(a * b * c, np.float32) for _ in range(5)]
    reshapes[(1,)](x, *outs, A=a, B=b, C=c)
    metile.synchronize()
    xm = x.copy()
    xm[:, :, c - 1] = 0.0
    p, r, t, e, br = outs
    np.testing.assert_array_equal(p, xm.transpose(2, 0, 1).ravel())
    np.testing.assert_array_equal(r, (xm * 3).ravel())
    np.testing.assert_array_equal(t, xm.transpose(0, 2, 1).ravel())
    np.testing.assert_array_equal(e, xm.reshape(1, a * b, c).transpose(2, 0, 1).ravel())
    want = np.broadcast_to(x[0, 0][None, None, :] + xm.sum(0)[None], (a, b, c))
    np.testing.assert_allclose(br, want.ravel(), rtol=1e-6, atol=1e-6)


@metile.kernel
def joins(X, J, H, IL, SC, N: metile.constexpr, M: metile.constexpr):
    r = metile.arange(0, N)[:, None]
    c = metile.arange(0, M)[None, :]
    x = metile.load(X + r * M + c)
    j = metile.join(x, x * 10.0)                                       # (N, M, 2)
    metile.store(J + metile.arange(0, N * M * 2), metile.ravel(j))
    lo, hi = metile.split(metile.permute(metile.permute(j, (2, 0, 1)), (1, 2, 0)))   # (N, M, 2) again
    metile.store(H + r * M + c, hi - lo)
    metile.store(IL + r * (2 * M) + metile.arange(0, 2 * M)[None, :], metile.interleave(x, -x))
    p, q = metile.split(metile.join(metile.sum(x), 1.5))                # two scalars
    metile.store(SC + metile.arange(0, 2), metile.interleave(p, q + 0.0))


@pytest.mark.parametrize(("n", "m"), [(1, 4), (3, 5), (8, 16), (6, 2)])
def test_join_split_and_interleave(n, m):
    rng = np.random.default_rng(n * m)
    x = rng.standard_normal((n, m)).astype(np.float32)
    j, h, il, sc = np.zeros(n * m * 2, np.float32), np.zeros((n, m), np.float32), np.zeros((n, 2 * m), np.float32), \
        np.zeros(2, np.float32)
    joins[(1,)](x, j, h, il, sc, N=n, M=m)
    metile.synchronize()
    np.testing.assert_array_equal(j, np.stack([x, x * 10], -1).ravel())
    np.testing.assert_array_equal(h, x * 10 - x)
    np.testing.assert_array_equal(il, np.stack([x, -x], -1).reshape(n, 2 * m))
    np.testing.assert_allclose(sc, [x.sum(), 1.5], rtol=1e-5)


@metile.kernel
def only_reshape(X, Y, N: metile.constexpr):
    x = metile.load(X + metile.arange(0, N * 4))
    y = metile.reshape(x * 2.0, (N, 4))
    metile.store(Y + metile.arange(0, N)[:, None] * 4 + metile.arange(0, 4)[None, :], y)


@metile.kernel
def with_permute(X, Y, N: metile.constexpr):
    x = metile.load(X + metile.arange(0, N * 4))
    y = metile.trans(metile.reshape(x * 2.0, (N, 4)))
    metile.store(Y + metile.arange(0, 4)[:, None] * N + metile.arange(0, N)[None, :], y)


def test_a_reshape_moves_nothing_and_a_transpose_moves_once():
    x, y = np.arange(256, dtype=np.float32), np.zeros(256, np.float32)
    plain = compile_to_msl(only_reshape.trace(x, y, N=64)).msl
    moved = compile_to_msl(with_permute.trace(x, y, N=64)).msl
    assert "threadgroup_barrier" not in plain
    assert moved.count("threadgroup_barrier") == 2     # one exchange: publish, barrier, read back
    with_permute[(1,)](x, y, N=64)
    metile.synchronize()
    np.testing.assert_array_equal(y, (x * 2).reshape(64, 4).T.ravel())


@metile.kernel
def bad_shape(X, WHICH: metile.constexpr):
    x = metile.load(X + metile.arange(0, 8))
    if WHICH == 0:
        y = metile.reshape(x, (3, 3))
    elif WHICH == 1:
        y = metile.permute(metile.reshape(x, (2, 4)), (0, 0))
    elif WHICH == 2:
        y, _ = metile.split(metile.reshape(x, (2, 4)))
    elif WHICH == 3:
        y = metile.join(x, metile.arange(0, 8))
    elif WHICH == 4:
        y = metile.trans(x)
    else:
        y = metile.expand_dims(x, 3)
    metile.store(X + metile.arange(0, 8), metile.ravel(y))


@pytest.mark.parametrize(("which", "error", "message"), [
    (0, ShapeMismatchError, r"shape \[8\] \(8 elements\) cannot become shape \[3, 3\] \(9 elements\)"),
    (1, ShapeMismatchError, r"\[0, 0\] are not a permutation of 0 .. 1"),
    (2, ShapeMismatchError, "the last dimension must be 2, not 4"),
    (3, KernelTypeError, "different element types, f32 and i32"),
    (4, ShapeMismatchError, "it needs two dimensions or more"),
    (5, ShapeMismatchError, "axis 3 is out of range for a result of 2 dimensions"),
])
def test_bad_shapes_are_refused_at_the_call(which, error, message):
    with pytest.raises(error, match=message) as e:
        bad_shape[(1,)](np.zeros(8, np.float32), WHICH=which)
    assert e.value.loc is not None and e.value.loc.line > bad_shape.fn.__code__.co_firstlineno


@metile.kernel
def scans3(X, O, AM, A: metile.constexpr, B: metile.constexpr, C: metile.constexpr, AX: metile.constexpr):
    a = metile.arange(0, A)[:, None, None]
    b = metile.arange(0, B)[None, :, None]
    c = metile.arange(0, C)[None, None, :]
    offs = a * (B * C) + b * C + c
    x = metile.load(X + offs, mask=b < B - 1)                       # the last row of each matrix inactive
    metile.store(O + offs, metile.cumsum(x, axis=AX))
    am = metile.argmax(x, axis=AX)
    metile.store(AM + metile.arange(0, am.shape[0] * am.shape[1]), metile.ravel(am))


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_three_d_scans_and_arg_reductions_along_every_axis(axis):
    a, b, c = 3, 5, 6
    x = np.random.default_rng(axis).random((a, b, c)).astype(np.float32)
    out = np.zeros_like(x)
    rest = [a, b, c]
    rest.pop(axis)
    am = np.zeros(rest[0] * rest[1], np.int32)
    scans3[(1,)](x, out, am, A=a, B=b, C=c, AX=axis)
    metile.synchronize()
    zeroed, skipped = x.copy(), x.copy()
    zeroed[:, b - 1, :], skipped[:, b - 1, :] = 0.0, -np.inf
    np.testing.assert_allclose(out, np.cumsum(zeroed, axis=axis), rtol=1e-6)
    np.testing.assert_array_equal(am, skipped.argmax(axis).ravel())


@metile.kernel
def permuted_pointers(X, Y, A: metile.constexpr, B: metile.constexpr):
    r = metile.arange(0, A)[:, None]
    c = metile.arange(0, B)[None, :]
    p = metile.trans(X + r * B + c)                                     # a tile of pointers, transposed
    x = metile.load(p, mask=metile.trans(c < B - 1), other=5.0)        # the mask transposed with it
    lo, hi = metile.split(metile.reshape(x, (B, A // 2, 2)))
    metile.store(Y + metile.arange(0, B)[:, None] * (A // 2) + metile.arange(0, A // 2)[None, :], hi * 10.0 + lo)


@pytest.mark.parametrize(("a", "b"), [(6, 5), (2, 3), (8, 8)])
def test_pointer_tiles_and_masks_change_shape_too(a, b):
    x = np.random.default_rng(a * b).random((a, b)).astype(np.float32)
    y = np.zeros((b, a // 2), np.float32)
    permuted_pointers[(1,)](x, y, A=a, B=b)
    metile.synchronize()
    xt = x.T.copy()
    xt[b - 1, :] = 5.0
    pairs = xt.reshape(b, a // 2, 2)
    np.testing.assert_allclose(y, pairs[..., 1] * 10 + pairs[..., 0], rtol=1e-6)


@metile.kernel
def permuted_in_a_loop(X, Y, n, A: metile.constexpr, B: metile.constexpr, C: metile.constexpr):
    a = metile.arange(0, A)[:, None, None]
    b = metile.arange(0, B)[None, :, None]
    c = metile.arange(0, C)[None, None, :]
    x = metile.load(X + a * (B * C) + b * C + c)
    y = metile.permute(x, (2, 0, 1))                   # bound once: moved between threads here, before the loop
    acc = metile.zeros((C, A, B))
    for _ in range(n):
        acc = acc * 0.5 + y
    metile.store(Y + metile.arange(0, A * B * C), metile.ravel(acc))


def test_a_bound_permutation_of_a_held_tile_moves_once_before_a_loop_that_reads_it():
    """`assign_layouts` keeps a permutation of a tile held in registers in registers where it is bound: its elements
    cross threads once, before the loop, instead of in every iteration of the loop that reads it."""
    a, b, c = 4, 8, 8
    x = np.random.default_rng(7).random((a, b, c)).astype(np.float32)
    y = np.zeros(a * b * c, np.float32)
    msl = compile_to_msl(permuted_in_a_loop.trace(x, y, 3, A=a, B=b, C=c)).msl
    before, loop = msl.split("for (", 1)
    assert before.count("threadgroup_barrier") == 2 and "threadgroup_barrier" not in loop
    permuted_in_a_loop[(1,)](x, y, 3, A=a, B=b, C=c)
    metile.synchronize()
    p = x.transpose(2, 0, 1).ravel()
    np.testing.assert_allclose(y, p * 1.75, rtol=1e-6)
