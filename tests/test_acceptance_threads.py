"""Acceptance: kernels below the tile abstraction, and memory shared between threads.

- thread level (one element per thread, `BLOCK` threads per program): `thread_id`, `simd_lane_id`,
  `simd_broadcast` from a fixed and from a runtime lane, `simd_shuffle_xor` pairs and butterfly sums,
  per-thread `atomic_add` into a lane histogram;
- `shared` + `barrier`: the row reversal of docs/language.md 8.3 at thread level, and a tile-level
  reversal through an i32 threadgroup array;
- `atomic_add` from tiles: an i32 histogram, a u32 parity count, and f32 totals, both element-wise and
  once per program from a reduction.
Integer results are compared exactly; float atomics, whose order is not fixed, with a tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest

import metile

LANES = 32


pytestmark = pytest.mark.usefixtures("on_cpu")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@metile.kernel
def lanes(X, Tid, Lane, First, Picked, Pair, SimdSum, LaneHist, src_lane, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    t = metile.thread_id()
    lane = metile.simd_lane_id()
    g = pid * BLOCK + t
    v = metile.load(X + g)
    metile.store(Tid + g, t)
    metile.store(Lane + g, lane)
    metile.store(First + g, metile.simd_broadcast(v, 0))
    metile.store(Picked + g, metile.simd_broadcast(v, src_lane))
    metile.store(Pair + g, v + metile.simd_shuffle_xor(v, 1))
    total = v
    for m in (1, 2, 4, 8, 16):
        total = total + metile.simd_shuffle_xor(total, m)
    metile.store(SimdSum + g, total)
    metile.atomic_add(LaneHist + lane, 1)


@metile.kernel
def reverse_rows(X, Out, n, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    t = metile.thread_id()
    tmp = metile.shared(BLOCK)
    metile.store(tmp + t, metile.load(X + row * n + t))
    metile.barrier()
    metile.store(Out + row * n + t, metile.load(tmp + (BLOCK - 1 - t)))   # reverse a row


@metile.kernel
def reverse_prefix(X, Out, n, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    offs = metile.arange(0, BLOCK)
    live = offs < n
    tmp = metile.shared(BLOCK, dtype="i32")
    metile.store(tmp + offs, metile.load(X + row * n + offs, mask=live))
    metile.barrier()
    metile.store(Out + row * n + offs, metile.load(tmp + (n - 1 - offs), mask=live), mask=live)


@metile.kernel
def histogram(Bins, Vals, Hist, Parity, Totals, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    b = metile.load(Bins + offs, mask=live)
    metile.atomic_add(Hist + b, 1, mask=live)
    metile.atomic_add(Parity + (b & 1), 1, mask=live)
    v = metile.load(Vals + offs, mask=live)
    metile.atomic_add(Totals + 0, v, mask=live)
    metile.atomic_add(Totals + 1, metile.sum(v))  # a scalar: once per program


LANE_BLOCK = 64


def run_lanes(programs: int, src_lane: int):
    n = programs * LANE_BLOCK
    x = np.random.default_rng(programs).integers(-1000, 1000, n, dtype=np.int32)
    outs = [np.full(n, -1, np.int32) for _ in range(6)]
    hist = np.zeros(LANES, np.int32)
    lanes[(programs,)](x, *outs, hist, src_lane, BLOCK=LANE_BLOCK)
    return x, outs, hist


@pytest.mark.parametrize(("programs", "src_lane"), [(1, 5), (3, 31), (2, 0)])
def test_thread_ids_lanes_and_simd_collectives(programs, src_lane):
    x, (tid, lane, first, picked, pair, simd_sum), hist = run_lanes(programs, src_lane)
    n = x.size
    g = np.arange(n)
    groups = x.reshape(-1, LANES)
    np.testing.assert_array_equal(tid, g % LANE_BLOCK)
    np.testing.assert_array_equal(lane, g % LANES)
    np.testing.assert_array_equal(first, np.repeat(groups[:, 0], LANES))
    np.testing.assert_array_equal(picked, np.repeat(groups[:, src_lane], LANES))
    np.testing.assert_array_equal(pair, x + x[g ^ 1])
    np.testing.assert_array_equal(simd_sum, np.repeat(groups.sum(1), LANES))
    np.testing.assert_array_equal(hist, np.full(LANES, n // LANES))


@pytest.mark.parametrize("rows", [1, 5])
def test_shared_memory_reverses_a_row_at_thread_level(rows):
    block = 128
    x = np.random.default_rng(rows).standard_normal((rows, block), dtype=np.float32)
    out = np.zeros_like(x)
    reverse_rows[(rows,)](x, out, block, BLOCK=block)
    np.testing.assert_array_equal(out, x[:, ::-1])


@pytest.mark.parametrize("n", [256, 100, 1])
def test_shared_memory_reverses_a_prefix_at_tile_level(n):
    rows = 3
    x = np.random.default_rng(n).integers(-(2**31), 2**31 - 1, (rows, n), dtype=np.int32)
    out = np.full((rows, n), 7, np.int32)
    reverse_prefix[(rows,)](x, out, n, BLOCK=256)
    np.testing.assert_array_equal(out, x[:, ::-1])


@pytest.mark.parametrize(("n", "bins"), [(10_000, 16), (1000, 1), (3, 40)])
def test_atomic_histogram_and_totals(n, bins):
    rng = np.random.default_rng(n)
    b = rng.integers(0, bins, n, dtype=np.int32)
    v = rng.random(n, dtype=np.float32)
    hist = np.zeros(bins, np.int32)
    parity = np.zeros(2, np.uint32)
    totals = np.zeros(2, np.float32)
    histogram[(cdiv(n, 256),)](b, v, hist, parity, totals, n, BLOCK=256)
    np.testing.assert_array_equal(hist, np.bincount(b, minlength=bins))
    np.testing.assert_array_equal(parity, [np.sum(b % 2 == 0), np.sum(b % 2 == 1)])
    np.testing.assert_allclose(totals, [v.sum(dtype=np.float64)] * 2, rtol=1e-5)


def test_atomic_histogram_accumulates_across_launches():
    b = np.arange(512, dtype=np.int32) % 8
    v = np.ones(512, np.float32)
    hist = np.zeros(8, np.int32)
    parity = np.zeros(2, np.uint32)
    totals = np.zeros(2, np.float32)
    for _ in range(3):
        histogram[(2,)](b, v, hist, parity, totals, 512, BLOCK=256)
    np.testing.assert_array_equal(hist, np.full(8, 3 * 64))
    np.testing.assert_array_equal(parity, [768, 768])
    np.testing.assert_array_equal(totals, [1536.0, 1536.0])
