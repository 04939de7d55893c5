"""What Triton users write without thinking, accepted with Triton's meaning: `min`/`max` of traced values, `range`
with runtime bounds and `tile_range` with a runtime step, integer `where` conditions, grids computed from the
launch's arguments, `full`, `trans`/`.T`, `keep_dims`, `dot`'s `out_dtype`, and the hints that change nothing on
an Apple GPU (`multiple_of`, cache and eviction hints)."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.frontend.errors import GridError, KernelArgumentError, KernelTypeError, ShapeMismatchError

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def minmax(X, Y, Z, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(Y + offs, min(x, 0.5, x * 2.0))
    metile.store(Z + offs, max(x, -0.5))


def test_python_min_and_max_of_traced_values_are_element_wise():
    x = np.linspace(-2, 2, 64).astype(np.float32)
    y, z = np.zeros_like(x), np.zeros_like(x)
    minmax[(1,)](x, y, z, BLOCK=64)
    np.testing.assert_array_equal(y, np.minimum(np.minimum(x, 0.5), x * 2))
    np.testing.assert_array_equal(z, np.maximum(x, -0.5))


@metile.kernel
def strided_rows(X, Y, n_rows, n_cols, step, BLOCK: metile.constexpr):
    for row in metile.tile_range(metile.program_id(0), n_rows, step):   # a runtime step
        for c in range(0, n_cols, BLOCK):                                 # a runtime bound: a runtime loop
            cols = c + metile.arange(0, BLOCK)
            x = metile.load(X + row * n_cols + cols, mask=cols < n_cols)
            metile.store(Y + row * n_cols + cols, x + 1.0, mask=cols < n_cols)


@pytest.mark.parametrize("step", [1, 3, 4, 0, -2])
def test_runtime_bounds_and_steps(step):
    x = np.random.default_rng(0).standard_normal((10, 70)).astype(np.float32)
    y = np.zeros_like(x)
    programs = max(step, 1)
    strided_rows[(programs,)](x, y, 10, 70, step, BLOCK=32)
    if step > 0:
        np.testing.assert_array_equal(y, x + 1)
    else:  # a step below 1 runs no iteration
        assert (y == 0).all()


@metile.kernel
def int_where(X, Keep, Y, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Y + offs, metile.where(metile.load(Keep + offs), metile.load(X + offs), 0.0))


def test_where_takes_an_integer_condition_as_nonzero():
    x = np.arange(32, dtype=np.float32)
    keep = (np.arange(32) % 3).astype(np.int8)
    y = np.zeros(32, np.float32)
    int_where[(1,)](x, keep, y, BLOCK=32)
    np.testing.assert_array_equal(y, np.where(keep != 0, x, 0))


@metile.kernel
def add(X, Y, Out, n, BLOCK_SIZE: metile.constexpr = 64):
    offs = metile.program_id(0) * BLOCK_SIZE + metile.arange(0, BLOCK_SIZE)
    m = offs < n
    metile.store(Out + offs, metile.load(X + offs, mask=m) + metile.load(Y + offs, mask=m), mask=m)


def test_a_grid_computed_from_the_launch_arguments():
    n = 1000
    x, y, out = np.ones(n, np.float32), np.full(n, 2.0, np.float32), np.zeros(n, np.float32)
    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (metile.cdiv(meta["n"], meta["BLOCK_SIZE"]),)

    add[grid](x, y, out, n, BLOCK_SIZE=128)
    assert (out == 3).all() and seen[-1]["BLOCK_SIZE"] == 128 and seen[-1]["n"] == n and seen[-1]["X"] is x
    out[:] = 0
    add[grid](x, y, out, n)                    # the default of BLOCK_SIZE
    assert (out == 3).all() and seen[-1]["BLOCK_SIZE"] == 64
    out[:] = 0
    add[grid].prepare(x, y, out, n)()
    assert (out == 3).all()
    with pytest.raises(GridError, match="raised ZeroDivisionError"):
        add[lambda meta: (meta["n"] // 0,)](x, y, out, n)


@metile.kernel
def shapes(A, B, C, S, M: metile.constexpr, N: metile.constexpr):
    r, c = metile.arange(0, M), metile.arange(0, N)
    a = metile.load(A + r[:, None] * N + c[None, :])             # [M, N]
    b = metile.load(B + r[:, None] * N + c[None, :])             # [M, N]
    prod = metile.dot(a, b.T, out_dtype=metile.float16, input_precision="tf32")   # [M, M]
    metile.store(C + r[:, None] * M + r[None, :], prod)
    kept = metile.sum(a, axis=1, keep_dims=True) + metile.full((M, N), 1.0, metile.float32)
    at = metile.argmax(metile.trans(a), axis=0, keep_dims=True) * 1.0      # [1, M]
    metile.store(S + r[:, None] * N + c[None, :], kept + at.T + metile.max(a, keep_dims=True))


def test_full_trans_keep_dims_and_out_dtype():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 32)).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float32)
    c, s = np.zeros((16, 16), np.float16), np.zeros((16, 32), np.float32)
    shapes[(1,)](a, b, c, s, M=16, N=32)
    np.testing.assert_allclose(c, (a.astype(np.float64) @ b.T).astype(np.float16), rtol=2e-3, atol=2e-3)
    want = np.broadcast_to(a.sum(1, keepdims=True) + 1 + np.argmax(a, axis=1)[:, None] + a.max(), a.shape)
    np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-5)


@metile.kernel
def hinted(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.multiple_of(metile.program_id(0) * BLOCK, BLOCK) + metile.max_contiguous(metile.arange(0, BLOCK),
                                                                                            BLOCK)
    x = metile.load(X + offs, mask=offs < n, eviction_policy="evict_last", cache_modifier=".cg")
    metile.store(Y + offs, x, mask=offs < n, eviction_policy="evict_first")


def test_hints_are_accepted_and_change_nothing():
    x = np.arange(300, dtype=np.float32)
    y = np.zeros_like(x)
    hinted[(3,)](x, y, 300, BLOCK=128)
    np.testing.assert_array_equal(x, y)


@metile.kernel
def misuse(X, WHAT: metile.constexpr):
    offs = metile.arange(0, 32)
    x = metile.load(X + offs)
    if WHAT == "float where":
        y = metile.where(x, x, 0.0)
    elif WHAT == "eviction":
        y = metile.load(X + offs, eviction_policy="evict_sometimes")
    elif WHAT == "precision":
        y = metile.dot(x[:, None] * metile.full((32, 8), 1.0), metile.full((8, 32), 1.0), input_precision="fp64")
        y = metile.sum(y, axis=0)
    elif WHAT == "hint":
        y = metile.multiple_of(x, 4)
    else:
        y = metile.trans(x)
    metile.store(X + offs, y)


@pytest.mark.parametrize(("what", "error", "words"), [
    ("float where", KernelTypeError, "the condition must be bool .or an integer"),
    ("eviction", KernelArgumentError, "eviction_policy must be one of"),
    ("precision", KernelArgumentError, "input_precision must be one of"),
    ("hint", KernelTypeError, "multiple_of.. takes an integer tile"),
    ("trans", ShapeMismatchError, "it needs two dimensions or more"),
])
def test_misuse_is_refused(what, error, words):
    with pytest.raises(error, match=words):
        misuse[(1,)](np.zeros(32, np.float32), WHAT=what)


@metile.kernel
def narrow_sums(X, S, C, DT: metile.constexpr):
    offs = metile.arange(0, 64)
    x = metile.load(X + offs)
    if DT == "none":
        metile.store(S, metile.sum(x))
        metile.store(C + offs, metile.cumsum(x))
    else:
        metile.store(S, metile.sum(x, dtype=DT))
        metile.store(C + offs, metile.cumsum(x, dtype=DT))


def test_sums_of_narrow_integers_do_not_wrap():
    """As in Triton, integers narrower than 32 bits sum in 32 bits unless `dtype=` says otherwise."""
    x = np.full(64, 100, np.int8)
    s, c = np.zeros(1, np.int32), np.zeros(64, np.int32)
    narrow_sums[(1,)](x, s, c, DT="none")
    assert s[0] == 6400 and (c == np.arange(1, 65) * 100).all()
    narrow_sums[(1,)](x, s, c, DT="i8")
    wrapped = np.array(6400, np.int32).astype(np.int8)   # 0: the sum in i8 wraps around
    assert s[0] == wrapped and c[-1] == wrapped


@metile.kernel
def store_wider(Out, WHAT: metile.constexpr):
    r = metile.arange(0, 4)
    if WHAT == "value":
        metile.store(Out + r, r[:, None] * 1.0)
    else:
        metile.store(Out, r * 1.0)


@pytest.mark.parametrize("what", ["value", "scalar pointer"])
def test_a_store_of_more_values_than_addresses_is_refused(what):
    """Several values for one address would leave which one lands undefined: refused, not raced."""
    with pytest.raises(Exception, match="a store writes one value per address") as e:
        store_wider[(1,)](np.zeros(16, np.float32), WHAT=what)
    assert type(e.value).__name__ == "ShapeMismatchError"
