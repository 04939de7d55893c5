"""The lowering remembers, per statement, which register tiles it has put in threadgroup scratch, so a second read
of the same tile reuses the copy. Tiles are remembered by identity: a temporary tile published and then dropped
must not leave its scratch to another tile that CPython places at the same address."""

from __future__ import annotations

import gc
import hashlib

import numpy as np

import metile
from metile.emit.msl import emit_msl
from metile.rewrite.lower.state import KernelState
from metile.rewrite.pipeline import DEFAULT_PIPELINE, run


class _Tile:
    """Stands in for the lowering's register tiles: a small object whose address CPython reuses once it is freed."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n


def test_a_dropped_tile_does_not_lend_its_scratch_to_a_new_one():
    state = KernelState(set())
    base = object()   # where the tile's copy starts (a pointer value in the lowering)
    where = _publish_a_temporary(state, base)
    gc.collect()
    tiles = [_Tile(n) for n in range(1000)]   # CPython hands a freed address out again, to one of these
    assert [id(t) == where for t in tiles if state.published_base(t) is not None] == []


def _publish_a_temporary(state: KernelState, base: object) -> int:
    tile = _Tile(0)
    state.publish(tile, base)
    if state.published_base(tile) is not base:
        raise AssertionError("a published tile is not found again")
    return id(tile)


def _reductions_then_gather(X, Out, Gathered, N: metile.constexpr):
    offs = metile.arange(0, N)
    x = metile.load(X + offs)
    metile.store(Out, metile.sum(x))
    metile.store(Out + 1, metile.max(x))
    metile.store(Gathered + offs, metile.gather(x, (offs * 5) % N, 0))


def _msl_digest() -> str:
    k = metile.kernel(_reductions_then_gather)
    ir = k.trace(np.zeros(64, np.int32), np.zeros(2, np.int32), np.zeros(64, np.int32), N=64)
    return hashlib.sha1(str(emit_msl(run(DEFAULT_PIPELINE, ir))).encode()).hexdigest()


def test_the_same_kernel_lowers_to_the_same_msl_every_time():
    first = _msl_digest()
    assert all(_msl_digest() == first for _ in range(5))


def test_fresh_names_are_the_names_successive_fresh_calls_give():
    """Naming a loop's carried values in one call takes the same names, around names the kernel already has, as one
    `fresh` call per value would (later names, and so the MSL, depend on them)."""
    for taken in (set(), {"acc"}, {"acc", "acc_2", "acc_3"}, {"acc_1", "acc_5"}):
        for before in range(3):
            one, batch = KernelState(set(taken)), KernelState(set(taken))
            for _ in range(before):
                assert one.fresh("acc") == batch.fresh("acc")
            assert batch.fresh_names("acc", 5) == [one.fresh("acc") for _ in range(5)]
            assert batch.fresh("acc") == one.fresh("acc")
            assert batch.taken == one.taken
    assert KernelState(set()).fresh_names("acc", 0) == []
