"""A tile loaded only to be stored (a copy, a gather of rows, the value of a tile atomic) is left in device memory
by `assign_layouts` (`#in_device`) and read where the store writes it, in the store's run-time loop over its slots
(`metile.rewrite.lower.memory.store_run`): the C++ the CPU device builds, and its build time, no longer grow with
the tile. It is left there only where the store cannot write what the load reads at another element, so results
are those of loading the whole tile first."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.rewrite.lower import lower_tiles
from metile.rewrite.pipeline import TILE_PIPELINE, run

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def gather_rows(E, I, O, n, D: metile.constexpr, BM: metile.constexpr, BN: metile.constexpr):
    rows = metile.program_id(0) * BM + metile.arange(0, BM)
    cols = metile.program_id(1) * BN + metile.arange(0, BN)
    rm, cm = rows < n, cols < D
    idx = metile.load(I + rows, mask=rm, other=0)
    e = metile.load(E + idx[:, None] * D + cols[None, :], mask=rm[:, None] & cm[None, :], other=0.0)
    metile.store(O + rows[:, None] * D + cols[None, :], e, mask=rm[:, None] & cm[None, :])


@metile.kernel
def scatter_add_rows(G, W, I, n, D: metile.constexpr, BM: metile.constexpr, BN: metile.constexpr):
    rows = metile.program_id(0) * BM + metile.arange(0, BM)
    cols = metile.program_id(1) * BN + metile.arange(0, BN)
    rm, cm = rows < n, cols < D
    idx = metile.load(I + rows, mask=rm, other=0)
    g = metile.load(G + rows[:, None] * D + cols[None, :], mask=rm[:, None] & cm[None, :], other=0.0)
    metile.atomic_add(W + idx[:, None] * D + cols[None, :], g, mask=rm[:, None] & cm[None, :])


@metile.kernel
def shift_in_place(X, BLOCK: metile.constexpr, BY: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(X + offs + BY, x)


@metile.kernel
def copy_then_overwrite(X, Y, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(Y + offs, x)
    metile.store(X + offs, offs.to(metile.float32) * 2.0)


def _layout(kernel, *args, **kw) -> str:
    """The layout `assign_layouts` records for the kernel's tile loads, as the Tile IR prints them."""
    tile = run(TILE_PIPELINE, kernel.trace(*args, **kw))
    return str(tile.schedule.layouts)


def _f32(n=1):
    return np.zeros(n, np.float32)


def test_a_gathered_tile_is_read_where_it_is_stored():
    tile = run(TILE_PIPELINE, gather_rows.trace(_f32(), np.zeros(1, np.int32), _f32(), 500, D=256, BM=128, BN=128,
                                                num_simdgroups=4))
    assert "InDevice()" in str(tile.schedule.layouts)
    text = metile.ir.pretty(lower_tiles(tile))
    assert text.count("for %s") == 1 and text.count("vload") == 1 and text.count("vstore") == 1, text


@pytest.mark.parametrize(("n", "vocab", "dim"), [(500, 1000, 256), (37, 50, 200)])
def test_gathered_rows_are_right(n, vocab, dim):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((vocab, dim)).astype(np.float32)
    idx = rng.integers(0, vocab, n).astype(np.int32)
    out = np.full((n, dim), np.nan, np.float32)
    gather_rows[(-(-n // 128), -(-dim // 128))](table, idx, out, n, D=dim, BM=128, BN=128)
    np.testing.assert_array_equal(out, table[idx])


def test_scattered_atomic_adds_are_right():
    rng = np.random.default_rng(1)
    n, vocab, dim = 300, 40, 200
    grads = rng.standard_normal((n, dim)).astype(np.float32)
    idx = rng.integers(0, vocab, n).astype(np.int32)
    w = np.zeros((vocab, dim), np.float32)
    scatter_add_rows[(-(-n // 128), -(-dim // 128))](grads, w, idx, n, D=dim, BM=128, BN=128)
    want = np.zeros((vocab, dim), np.float64)
    np.add.at(want, idx, grads)
    np.testing.assert_allclose(w, want, rtol=1e-5, atol=1e-5)
    assert "InDevice()" in _layout(scatter_add_rows, _f32(), _f32(), np.zeros(1, np.int32), n, D=dim, BM=128, BN=128)


def test_a_store_into_the_buffer_it_reads_keeps_the_whole_tile_loaded_first():
    # one simdgroup, runs of 4: thread t's slots are 128 elements apart, so the store of one slot writes what the
    # load of the thread's next slot reads; reading each slot where it is stored would copy slot 0 everywhere
    x = np.arange(640, dtype=np.float32)
    assert "InDevice()" not in _layout(shift_in_place, _f32(), BLOCK=512, BY=128, num_simdgroups=1)
    shift_in_place[(1,)](x, BLOCK=512, BY=128, num_simdgroups=1)
    np.testing.assert_array_equal(x[128:], np.arange(512, dtype=np.float32))


def test_a_load_from_a_buffer_the_kernel_writes_stays_in_registers():
    # (the buffers a caller binds to two parameters may be one: a buffer the kernel also writes is not relied on)
    x, y = np.arange(512, dtype=np.float32) + 1, _f32(512)
    assert "InDevice()" not in _layout(copy_then_overwrite, _f32(), _f32(), BLOCK=512, num_simdgroups=1)
    copy_then_overwrite[(1,)](x, y, BLOCK=512, num_simdgroups=1)
    np.testing.assert_array_equal(y, np.arange(512, dtype=np.float32) + 1)
    np.testing.assert_array_equal(x, 2 * np.arange(512, dtype=np.float32))
