"""Masked-off elements of a load without `other=` are inactive (`metile.rewrite.inactive.skip_inactive`): they read
0 element-wise, loop updates keep the old value there, and reductions and scans skip them. These kernels check
each rule on the CPU device, and the pass's IR: unchanged kernels are returned as they are, and the activity of
`if` and role results is carried only where something reads it."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.ir.node import walk
from metile.ir.stmts import For, If
from metile.ir.tile import AllActive, SimdgroupRole
from metile.ir.values import Where
from metile.rewrite.driver import bottom_up
from metile.rewrite.fold import fold_constants
from metile.rewrite.inactive import skip_inactive
from tests.acceptance_kernels import docs_examples as docs
from tests.acceptance_kernels import seed_examples as seed
from tests.test_seed_examples import softmax_identity

F32 = np.zeros(16, np.float32)


pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def reductions(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < n)
    y = metile.exp(x) * 0.5 - 1.0                     # inactive where x is
    metile.store(Out + 0, metile.max(x))
    metile.store(Out + 1, metile.min(y))
    metile.store(Out + 2, metile.sum(y))
    metile.store(Out + 3, metile.argmax(x) * 1.0)
    metile.store(Out + 4, metile.argmin(metile.where(offs < n // 2, x, 5.0)) * 1.0)  # both sides count
    metile.store(Out + 5, metile.max(metile.cumsum(y)))
    metile.store(Out + 6, metile.sum(metile.load(X + offs, mask=offs < n, other=-2.0)))  # other= is active


@pytest.mark.parametrize("n", [1, 100, 255])
def test_reductions_and_scans_skip_inactive_elements(n):
    x = -np.random.default_rng(n).uniform(1, 5, 256).astype(np.float32)
    out = np.zeros(7, np.float32)
    reductions[(1,)](x, out, n, BLOCK=256)
    v = x[:n].astype(np.float64)
    y = np.exp(v) * 0.5 - 1.0
    half = np.where(np.arange(n) < n // 2, v, 5.0)
    want = [v.max(), y.min(), y.sum(), np.argmax(v), np.argmin(half), np.cumsum(y).max(), v.sum() - 2.0 * (256 - n)]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@metile.kernel
def other_tile(X, Y, Out, n, m, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    y = metile.load(Y + offs, mask=offs < m)                     # inactive from m on
    x = metile.load(X + offs, mask=offs < n, other=y)            # from n on: y's elements, with their activity
    metile.store(Out, metile.min(x))
    metile.store(Out + 1, metile.sum(x))


def test_a_load_takes_the_activity_of_its_other_tile():
    """Where its mask is false a load takes `other=`'s elements with their activity, as `where` takes the side it
    selects (5.2): elements of a tile `other` inactive there stay inactive, and reductions skip them."""
    x, y = np.full(64, 5.0, np.float32), np.full(64, 2.0, np.float32)
    out = np.zeros(2, np.float32)
    other_tile[(1,)](x, y, out, 10, 20, BLOCK=64)        # 10 of x, 10 of y, 44 inactive (they would read 0)
    assert out.tolist() == [2.0, 70.0]


@metile.kernel
def while_max(X, Out, n, BLOCK: metile.constexpr):
    c = 0
    m = metile.zeros((BLOCK,), dtype="f32") - 1e30
    while c < n:
        cols = c + metile.arange(0, BLOCK)
        m = metile.maximum(m, metile.load(X + cols, mask=cols < n))
        c = c + BLOCK
    metile.store(Out, metile.max(m))


def test_a_while_loop_keeps_the_old_value_at_inactive_elements():
    x = -np.random.default_rng(1).uniform(1, 5, 300).astype(np.float32)
    out = np.zeros(1, np.float32)
    while_max[(1,)](x, out, 300, BLOCK=128)
    assert out[0] == x.max()


@metile.kernel
def if_in_loop(X, Out, n, flag, BLOCK: metile.constexpr):
    s = metile.zeros((BLOCK,), dtype="f32")
    m = metile.zeros((BLOCK,), dtype="f32") - 1e30
    for i in metile.tile_range(0, n, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        x = metile.load(X + cols, mask=cols < n)
        if flag > 0:
            m = metile.maximum(m, x)
            s = s + metile.exp(x)
    metile.store(Out, metile.max(m))
    metile.store(Out + 1, metile.sum(s))


@pytest.mark.parametrize("flag", [0, 1])
def test_an_update_under_a_runtime_if_keeps_the_old_value(flag):
    x = -np.random.default_rng(2).uniform(1, 5, 200).astype(np.float32)
    out = np.zeros(2, np.float32)
    if_in_loop[(1,)](x, out, 200, flag, BLOCK=128)
    want = [x.max(), np.exp(x.astype(np.float64)).sum()] if flag else [-1e30, 0.0]
    np.testing.assert_allclose(out, want, rtol=1e-5)


@metile.kernel
def carried_from_a_masked_load(X, Out, n, BLOCK: metile.constexpr):
    cols = metile.arange(0, BLOCK)
    m = metile.load(X + cols, mask=cols < n)          # the first block, partly inactive when n < BLOCK
    for i in metile.tile_range(BLOCK, n, BLOCK):
        more = i + metile.arange(0, BLOCK)
        m = metile.maximum(m, metile.load(X + more, mask=more < n))
    metile.store(Out, metile.max(m))


@pytest.mark.parametrize("n", [5, 128, 300])
def test_a_loop_started_from_a_partly_inactive_tile_carries_its_activity(n):
    x = -np.random.default_rng(n).uniform(1, 5, n).astype(np.float32)
    out = np.zeros(1, np.float32)
    carried_from_a_masked_load[(1,)](x, out, n, BLOCK=128)
    assert out[0] == x.max()


def test_kernels_without_inactive_elements_are_returned_as_they_are():
    for k in (softmax_identity.trace(F32, F32, 300, BLOCK=256),           # the identity style: nothing to skip
              docs.vec_add.trace(F32, F32, F32, 10, BLOCK=256)):           # masked loads no reduction reads
        assert skip_inactive(fold_constants(k)) is fold_constants(k)
    # dot(a, b, acc) of an accumulator carried from zeros adds it as it is: it is active everywhere
    k = fold_constants(docs.matmul.trace(F32, F32, F32, 64, 64, 64, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32))
    assert not any(isinstance(n, AllActive) for n in walk(k)) and skip_inactive(k) is k
    # one carried from a masked load reads it through AllActive, which the pass removes; nothing else changes
    k = fold_constants(dot_from_a_masked_load.trace(F32, F32, F32, F32, 100, BLOCK=16))
    out = skip_inactive(k)
    assert any(isinstance(n, AllActive) for n in walk(k)) and not any(isinstance(n, AllActive) for n in walk(out))
    assert out == bottom_up(lambda n: n.x if isinstance(n, AllActive) else None, k)


@metile.kernel
def dot_from_a_masked_load(A, B, C, Out, n, BLOCK: metile.constexpr):
    r = metile.arange(0, BLOCK)
    idx = r[:, None] * BLOCK + r[None, :]
    acc = metile.load(C + idx, mask=idx < n)          # inactive from element n on
    for _k in metile.tile_range(0, BLOCK, BLOCK):
        acc = metile.dot(metile.load(A + idx), metile.load(B + idx), acc)   # active everywhere
    metile.store(Out, metile.sum(metile.sum(acc, axis=1)))


@metile.kernel
def dot_from_zeros(A, B, Out, BLOCK: metile.constexpr):
    r = metile.arange(0, BLOCK)
    idx = r[:, None] * BLOCK + r[None, :]
    zero = metile.zeros((BLOCK, BLOCK), dtype="f32")
    acc = zero
    for _k in metile.tile_range(0, BLOCK, BLOCK):
        acc = metile.dot(metile.load(A + idx, mask=idx < 100), metile.load(B + idx), acc)
    metile.store(Out, metile.sum(metile.sum(acc, axis=1)))


@pytest.mark.parametrize("n", [100, 256])
def test_a_product_is_active_everywhere_whatever_its_accumulator(n):
    rng = np.random.default_rng(n)
    a, b, c = (rng.integers(-3, 4, (16, 16)).astype(np.float32) for _ in range(3))
    out = np.zeros(1, np.float32)
    dot_from_a_masked_load[(1,)](a, b, c, out, n, BLOCK=16)
    want = np.where(np.arange(256).reshape(16, 16) < n, c, 0) + a @ b
    assert out[0] == want.sum()


def test_an_accumulator_carried_from_a_fill_is_read_without_all_active():
    # `acc = zero` binds the fill's variable again; the loop carries it from there
    k = dot_from_zeros.trace(F32, F32, F32, BLOCK=16)
    assert not any(isinstance(n, AllActive) for n in walk(k))
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-3, 4, (16, 16)).astype(np.float32) for _ in range(2))
    out = np.zeros(1, np.float32)
    dot_from_zeros[(1,)](a, b, out, BLOCK=16)
    assert out[0] == (np.where(np.arange(256).reshape(16, 16) < 100, a, 0) @ b).sum()


def test_the_seed_softmax_keeps_its_running_values_with_one_select_per_update():
    k = skip_inactive(seed.softmax.trace(F32, F32, 300, BLOCK=128))
    loops = [n for n in walk(k) if isinstance(n, For) and n.carried]
    assert len(loops) == 2
    for loop in loops:
        assert len(loop.carried) == 1                   # no activity carried: the start value is active
        (y,) = loop.yields
        assert isinstance(y, Where) and y.y == loop.carried[0]


@metile.kernel
def branch_result(X, Out, n, flag, BLOCK: metile.constexpr, READ: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    if flag > 0:
        x = metile.load(X + offs, mask=offs < n)
    if READ:
        metile.store(Out, metile.max(x))
    else:
        metile.store(Out + offs, x)


def test_an_if_result_carries_activity_only_when_it_is_read():
    def extra(k):
        (branch,) = [n for n in walk(k) if isinstance(n, If)]
        return len(branch.results)

    k_read = skip_inactive(branch_result.trace(F32, F32, 10, 1, BLOCK=32, READ=True))
    k_not = branch_result.trace(F32, F32, 10, 1, BLOCK=32, READ=False)
    assert extra(k_read) == 2 and skip_inactive(k_not) is k_not
    x = -np.arange(1, 33, dtype=np.float32)
    for flag, want in ((1, -1.0), (0, -1.0)):
        out = np.zeros(1, np.float32)
        branch_result[(1,)](x[::-1].copy(), out, 31, flag, BLOCK=32, READ=True)
        assert out[0] == (-2.0 if flag else want)     # the masked-off last element (-1) is skipped


def test_a_kernel_where_nothing_reads_activity_is_not_walked(monkeypatch):
    """Masked loads, an `if` result, stores, but no reduction, scan, loop or assertion: no rewrite could apply, so
    the pass returns the kernel without walking it (the walk, made to fail here, is not started)."""
    import metile.rewrite.inactive as inactive

    kernels = [docs.vec_add.trace(F32, F32, F32, 10, BLOCK=256),
               branch_result.trace(F32, F32, 10, 1, BLOCK=32, READ=False)]

    def no_walk(*args, **kwargs):
        raise AssertionError("skip_inactive walked a kernel in which nothing looks at activity")

    monkeypatch.setattr(inactive, "_Walk", no_walk)
    for k in kernels:
        assert skip_inactive(k) is k


@metile.kernel
def role_result(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    with metile.simdgroup_role(role=0, num_roles=2):
        x = metile.load(X + offs, mask=offs < n)
    with metile.simdgroup_role(role=1, num_roles=2):
        y = metile.exp(x)
    metile.store(Out, metile.sum(y))


def test_a_role_result_carries_its_activity():
    k = skip_inactive(role_result.trace(F32, F32, 10, BLOCK=64))
    roles = [n for n in walk(k) if isinstance(n, SimdgroupRole)]
    assert [len(r.results) for r in roles] == [2, 2]
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    out = np.zeros(1, np.float32)
    role_result[(1,)](x, out, 50, BLOCK=64)
    np.testing.assert_allclose(out[0], np.exp(x[:50].astype(np.float64)).sum(), rtol=1e-5)
