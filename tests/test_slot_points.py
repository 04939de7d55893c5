"""The points of a thread's fixed slots (`metile.rewrite.lower.values.fixed_slot_pt`) are made once per process and
shared by every kernel: the MSL of a kernel is the same whether they are made by its own lowering or by another
kernel's before it, for tiles with padding slots (a tile smaller than a sweep of the threads) and without, and a
padding slot reads a real element and stores nothing."""

from __future__ import annotations

import hashlib

import numpy as np

import metile
from metile.emit.msl import emit_msl
from metile.rewrite.lower.values import fixed_slot_pt
from metile.rewrite.pipeline import DEFAULT_PIPELINE, run


def _two_sizes(X, Y, Z, n, BLOCK: metile.constexpr, HEAD: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(Y + offs, metile.load(X + offs, mask=live) * 3.0, mask=live)
    head = metile.program_id(0) * HEAD + metile.arange(0, HEAD)   # HEAD = 96 on 32 threads of 2: padding slots
    metile.store(Z + head, metile.load(X + head) + 1.0)


def _shifted(X, Y, Z, n, BLOCK: metile.constexpr, HEAD: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(Y + offs, metile.load(X + (offs + 1) % n, mask=live), mask=live)


def _args(n: int = 500) -> tuple:
    return np.zeros(512, np.float32), np.zeros(512, np.float32), np.zeros(512, np.float32), n


def _digest(fn, block: int, head: int) -> str:
    ir = metile.kernel(fn).trace(*_args(), BLOCK=block, HEAD=head)
    return hashlib.sha1(str(emit_msl(run(DEFAULT_PIPELINE, ir))).encode()).hexdigest()


def test_a_kernel_lowers_alike_with_slot_points_made_by_another_kernel():
    cases = [(_two_sizes, 128, 96), (_shifted, 128, 96), (_two_sizes, 256, 64), (_shifted, 64, 64)]
    alone = {}
    for case in cases:
        fixed_slot_pt.cache_clear()
        alone[case] = _digest(*case)
    fixed_slot_pt.cache_clear()
    for case in cases + cases[::-1]:
        assert _digest(*case) == alone[case]
    assert fixed_slot_pt.cache_info().hits > 0


def test_padding_slots_read_a_real_element_and_store_nothing():
    k = metile.kernel(_two_sizes)
    x = np.arange(512, dtype=np.float32)
    y = np.full(512, -1.0, np.float32)
    z = np.full(512, -1.0, np.float32)
    k[(4,)](x, y, z, 500, BLOCK=128, HEAD=96)
    np.testing.assert_array_equal(y[:500], x[:500] * 3.0)
    np.testing.assert_array_equal(y[500:], -1.0)
    np.testing.assert_array_equal(z[:384], x[:384] + 1.0)
    np.testing.assert_array_equal(z[384:], -1.0)
