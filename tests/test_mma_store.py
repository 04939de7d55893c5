"""A `dot` result stored from its simdgroup matrices straight to device memory (`Collectives.mma_store`), and the
stores that must take the general path instead; every result is checked against numpy on the CPU device.

Straight: an unmasked store of the result itself, through a row-major address grid with unit column stride and a
row stride that is a run-time argument or a constant. General (through scratch, one element per thread): a
transposed grid, a masked store, a store converting to f16, and a result read element-wise by an epilogue.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import metile
from metile.ir.metal import MatrixStore
from metile.ir.node import walk
from metile.ir.ops import BinOp
from metile.ir.stmts import For, If, Store
from metile.ir.types import AddressSpace
from metile.ir.values import AddPtr, Binary, Var

DEVICE, THREADGROUP = AddressSpace.DEVICE, AddressSpace.THREADGROUP


pytestmark = pytest.mark.usefixtures("on_cpu")


def _operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)


def _matrix_stores(compiled) -> dict[AddressSpace, int]:
    """How many matrix stores the Metal IR makes to each address space."""
    return Counter(n.ptr.type.space for n in walk(compiled.metal_ir) if isinstance(n, MatrixStore))


@metile.kernel
def gemm_into(A, B, C, M, N, K, LDC, COL0, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    pid_m, pid_n = metile.program_id(0), metile.program_id(1)
    acc = metile.zeros((BM, BN), dtype="f32")
    for k in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, pid_m * BM, k, K, (BM, BK))
        b = metile.tile_load(B, k, pid_n * BN, N, (BK, BN))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BM, COL0 + pid_n * BN, LDC, acc, (BM, BN))


@pytest.mark.parametrize(("m", "n", "k", "bm", "bn", "bk"),
                         [(64, 64, 32, 64, 64, 32), (128, 64, 64, 32, 64, 32), (32, 96, 16, 32, 32, 16)])
def test_a_result_is_stored_from_its_matrices_into_a_wider_array(m, n, k, bm, bn, bk):
    a, b = _operands(m, n, k, m + n + k)
    col0, ldc = 5, n + 11  # C is a window of a wider array: its own row stride and first column
    c = np.full((m, ldc), -7.0, np.float32)
    consts = dict(BM=bm, BN=bn, BK=bk)
    compiled = gemm_into.compile(a, b, c, m, n, k, ldc, col0, **consts)
    # Each of the 4 simdgroups stores its own pieces, with the row stride LDC; only the operand staging has barriers.
    assert _matrix_stores(compiled) == {DEVICE: (bm // 8) * (bn // 8) // 4}
    assert compiled.msl.count(", LDC, 0, false);") == (bm // 8) * (bn // 8) // 4
    assert compiled.msl.count("threadgroup_barrier") == 2
    gemm_into[(m // bm, n // bn)](a, b, c, m, n, k, ldc, col0, **consts)
    want = np.full((m, ldc), -7.0, np.float32)
    want[:, col0:col0 + n] = a @ b
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


@metile.kernel
def square(A, B, C, BLOCK: metile.constexpr):
    a = metile.tile_load(A, 0, 0, BLOCK, (BLOCK, BLOCK))
    b = metile.tile_load(B, 0, 0, BLOCK, (BLOCK, BLOCK))
    metile.tile_store(C, 0, 0, BLOCK, metile.dot(a, b), (BLOCK, BLOCK))


def test_a_constant_row_stride_is_stored_straight_too():
    a, b = _operands(32, 32, 32, 3)
    c = np.zeros((32, 32), np.float32)
    compiled = square.compile(a, b, c, BLOCK=32)
    assert _matrix_stores(compiled) == {DEVICE: 4} and compiled.msl.count(", 32, 0, false);") == 4
    square[(1,)](a, b, c, BLOCK=32)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@metile.kernel
def general_stores(A, B, T, Masked, Half, Relu, M, BLOCK: metile.constexpr):
    a = metile.tile_load(A, 0, 0, BLOCK, (BLOCK, BLOCK))
    b = metile.tile_load(B, 0, 0, BLOCK, (BLOCK, BLOCK))
    acc = metile.dot(a, b)
    rows, cols = metile.arange(0, BLOCK)[:, None], metile.arange(0, BLOCK)[None, :]
    metile.store(T + cols * BLOCK + rows, acc)  # transposed: the column stride is not 1
    metile.store(Masked + rows * BLOCK + cols, acc, mask=rows < M)
    metile.tile_store(Half, 0, 0, BLOCK, acc, (BLOCK, BLOCK))  # converted to f16 on the way
    metile.tile_store(Relu, 0, 0, BLOCK, metile.maximum(acc, 0.0), (BLOCK, BLOCK))


def test_stores_the_matrices_cannot_make_are_stored_lane_by_lane():
    n, m = 32, 19
    a, b = _operands(n, n, n, 4)
    t, masked, relu = (np.full((n, n), -1.0, np.float32) for _ in range(3))
    half = np.zeros((n, n), np.float16)
    args = (a, b, t, masked, half, relu, m)
    compiled = general_stores.compile(*args, BLOCK=n)
    assert _matrix_stores(compiled) == {}   # no copy through scratch: each lane stores its elements of each piece
    # the masked store of the result itself: one loop over the 4 pieces reads elements 0 and 1 of the piece it is at;
    # the f16 and relu stores: 2 elements of each of 4 pieces, read once for both
    assert compiled.msl.count("thread_elements()") == 2 + 2 * 4
    assert "threadgroup_barrier" in compiled.msl.split("simdgroup_multiply_accumulate")[0]
    general_stores[(1,)](*args, BLOCK=n)
    want = a @ b
    np.testing.assert_allclose(t, want.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(masked[:m], want[:m], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(masked[m:], -1.0)
    np.testing.assert_allclose(half, want.astype(np.float16), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(relu, np.maximum(want, 0.0), rtol=1e-4, atol=1e-4)


@metile.kernel
def reshaped_epilogues(A, B, Bias, T, Biased, Wide, BLOCK: metile.constexpr):
    a = metile.tile_load(A, 0, 0, BLOCK, (BLOCK, BLOCK))
    b = metile.tile_load(B, 0, 0, BLOCK, (BLOCK, BLOCK))
    acc = metile.dot(a, b)
    bias = metile.load(Bias + metile.arange(0, BLOCK))
    metile.tile_store(T, 0, 0, BLOCK, metile.trans(acc) + 1.0, (BLOCK, BLOCK))   # read through a transpose
    metile.tile_store(Biased, 0, 0, BLOCK, acc + bias[None, :], (BLOCK, BLOCK))  # with a loaded tile
    wide = metile.tile_load(Wide, 0, 0, BLOCK, (BLOCK, BLOCK))
    metile.tile_store(Wide, 0, 0, BLOCK, acc * wide, (BLOCK, BLOCK))


@pytest.mark.parametrize("num_simdgroups", [1, 2, 4])
def test_epilogues_the_lanes_cannot_compute_alone_go_through_scratch(num_simdgroups):
    """An epilogue reading the result transposed, or beside a tile held in registers, is not stored lane by lane
    from the matrices (it would read elements other lanes hold): it copies the result to scratch, and is right."""
    n = 16
    a, b = _operands(n, n, n, 9)
    bias = np.arange(n, dtype=np.float32)
    t, biased = np.zeros((n, n), np.float32), np.zeros((n, n), np.float32)
    wide = np.random.default_rng(3).standard_normal((n, n)).astype(np.float32)
    want_wide = (a @ b) * wide
    reshaped_epilogues[(1,)](a, b, bias, t, biased, wide, BLOCK=n, num_simdgroups=num_simdgroups)
    want = a @ b
    np.testing.assert_allclose(t, want.T + 1.0, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(biased, want + bias[None, :], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(wide, want_wide, rtol=1e-4, atol=1e-4)


def _in_else(compiled) -> list:
    """The distinct Metal IR nodes of the `else` branch of the kernel's last `if` (a ragged tile's element-wise
    store)."""
    last = [s for s in compiled.metal_ir.body if isinstance(s, If)][-1]
    return list({id(n): n for s in last.orelse for n in walk(s)}.values())


def test_a_ragged_tile_is_stored_from_its_pieces_rows_and_columns():
    """On a tile past the array's edge each lane stores its elements of each piece under the bounds check, its
    address and check computed from the piece's row and column, in one loop over the pieces: no division of a flat
    index back into a row and a column per element, and the result is right on a problem whose sides are not
    multiples of the block."""
    m, n, k = 70, 50, 40
    a, b = _operands(m, n, k, 21)
    c = np.full((m, n), -7.0, np.float32)
    consts = dict(BM=64, BN=64, BK=32)
    compiled = gemm_into.compile(a, b, c, m, n, k, n, 0, **consts)
    nodes = _in_else(compiled)
    divisions = [x for x in nodes if isinstance(x, Binary) and x.op in (BinOp.TRUNCDIV, BinOp.REM)]
    stores = [x for x in nodes if isinstance(x, Store)]
    loops = [x for x in nodes if isinstance(x, For)]
    assert len(loops) == 1 and len(loops[0].carried) == 64 * 64 // 8 // 8 // 4   # the 16 pieces of a simdgroup
    assert len(stores) == 2                # elements 0 and 1 of the piece the loop is at
    # the lane's and simdgroup's place in their pieces and the piece's row and column of pieces, not one per element
    assert len(divisions) <= 12
    lines = {x.ptr.ptr for x in stores}    # each element's address: its row's first element plus its column
    assert all(isinstance(x.ptr, AddPtr) for x in stores) and len(lines) == 1
    assert all(isinstance(line, Var) for line in lines)
    gemm_into[(2, 1)](a, b, c, m, n, k, n, 0, **consts)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@metile.kernel
def triangle_into(A, B, C, M, BLOCK: metile.constexpr):
    a = metile.tile_load(A, 0, 0, BLOCK, (BLOCK, BLOCK))
    b = metile.tile_load(B, 0, 0, BLOCK, (BLOCK, BLOCK))
    acc = metile.dot(a, b)
    rows, cols = metile.arange(0, BLOCK)[:, None], metile.arange(0, BLOCK)[None, :]
    metile.store(C + rows * BLOCK + cols, acc * 2.0, mask=(rows < M) & (cols <= rows) & (cols < M + 3))


def test_a_mask_of_rows_and_columns_together_is_checked_per_element():
    """A store from the pieces whose mask has a term reading the row and the column together (a triangle) beside
    terms of the row alone and of the column alone checks that term element by element, and is right."""
    n, m = 32, 21
    a, b = _operands(n, n, n, 5)
    c = np.full((n, n), -1.0, np.float32)
    compiled = triangle_into.compile(a, b, c, m, BLOCK=n)
    assert _matrix_stores(compiled) == {}
    triangle_into[(1,)](a, b, c, m, BLOCK=n)
    rows, cols = np.arange(n)[:, None], np.arange(n)[None, :]
    keep = (rows < m) & (cols <= rows) & (cols < m + 3)
    np.testing.assert_allclose(c[keep], (2.0 * (a @ b))[keep], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(c[~keep], -1.0)


@metile.kernel
def loaded_mask_into(A, B, C, Keep, Offs, M, BLOCK: metile.constexpr):
    a = metile.tile_load(A, 0, 0, BLOCK, (BLOCK, BLOCK))
    b = metile.tile_load(B, 0, 0, BLOCK, (BLOCK, BLOCK))
    acc = metile.dot(a, b)
    rows, cols = metile.arange(0, BLOCK)[:, None], metile.arange(0, BLOCK)[None, :]
    keep = metile.load(Keep + metile.arange(0, BLOCK)) > 0   # a tile the threads hold in registers
    off = metile.load(Offs + metile.arange(0, BLOCK))
    metile.store(C + rows * BLOCK + cols, acc, mask=(rows < M) & keep[None, :])
    metile.store(C + BLOCK * BLOCK + rows * BLOCK + off[None, :], acc, mask=rows < M)   # a loaded column offset


def test_a_store_from_the_pieces_reading_tiles_the_threads_hold_reads_them_per_element():
    """A mask term or an address reading a tile the threads hold in registers (a loaded column mask, loaded column
    offsets) is read at each lane's elements, gathered through scratch, not computed once per column: only pure
    expressions can be computed by any thread; the stores are right."""
    n, m = 32, 19
    a, b = _operands(n, n, n, 7)
    keep = (np.arange(n) % 3 != 0).astype(np.int32)
    offs = np.arange(n, dtype=np.int32)[::-1].copy()
    c = np.full((2, n, n), -1.0, np.float32)
    loaded_mask_into[(1,)](a, b, c, keep, offs, m, BLOCK=n)
    want = a @ b
    sel = (np.arange(n)[:, None] < m) & (keep[None, :] > 0)
    np.testing.assert_allclose(c[0][sel], want[sel], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(c[0][~sel], -1.0)
    np.testing.assert_allclose(c[1][:m][:, offs], want[:m], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(c[1][m:], -1.0)


@metile.kernel
def ragged_gemm(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    pid_m, pid_n = metile.program_id(0), metile.program_id(1)
    acc = metile.zeros((BM, BN), dtype="f32")
    for k in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, pid_m * BM, k, K, (BM, BK), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BN, N, (BK, BN), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BM, pid_n * BN, N, acc, (BM, BN), bounds=(M, N))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(("m", "n", "k"), [(100, 77, 40), (64, 70, 32), (3, 130, 9)])
def test_an_edge_tile_is_stored_by_one_loop_over_the_pieces(dtype, m, n, k):
    """The edge tile of a GEMM (the masked branch of `tile_store`) stores each lane's two elements of each piece in
    one run-time loop over the pieces, whose bounds checks are computed from the loop index (the matrices rotate
    through the loop's carried values): the MSL reads the matrices' elements at one place, and every element inside
    the bounds, and none outside them, is written."""
    a, b = (x.astype(dtype) for x in _operands(m, n, k, m * n + k))
    c = np.full((m + 1, n), -7.0, np.float32)   # a row past the bounds, which no tile may write
    consts = dict(BM=64, BN=64, BK=32)
    compiled = ragged_gemm.compile(a, b, c, m, n, k, **consts)
    edge = compiled.msl.split("} else {")[-1]
    assert edge.count("thread_elements()") == 2 and "for (int p = 0; p < 16; p += 1)" in edge
    ragged_gemm[(metile.cdiv(m, 64), metile.cdiv(n, 64))](a, b, c, m, n, k, **consts)
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(c[:m], want, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(c[m:], -7.0)


def test_the_walk_for_element_wise_reads_skips_what_reads_no_tile(monkeypatch):
    """`pointwise_mma` does not enter a value that reads no tile and holds no product or reduction (the scan's facts
    say so: the index arithmetic of the addresses and bounds, `mma_use.reads_no_tile`): the MSL is the one found
    entering every value, and taking the names of the tiles away (so that a loaded bias, a loaded mask and the result
    itself are skipped too) changes it."""
    from metile.emit.msl import emit_msl
    from metile.rewrite.lower import mma_use as MU
    from metile.rewrite.lower.state import Facts
    from metile.rewrite.pipeline import DEFAULT_PIPELINE, run

    n = 32
    a, b = _operands(n, n, n, 3)
    f32 = np.zeros(1, np.float32)
    i32 = np.zeros(1, np.int32)
    traces = [lambda: reshaped_epilogues.trace(a, b, f32, f32, f32, f32, BLOCK=n),
              lambda: loaded_mask_into.trace(a, b, f32, i32, i32, 19, BLOCK=n),
              lambda: ragged_gemm.trace(f32, f32, f32, 100, 77, 40, BM=32, BN=32, BK=16)]

    def msl():
        return [emit_msl(run(DEFAULT_PIPELINE, trace())) for trace in traces]

    skipping = msl()
    reads_no_tile = MU.reads_no_tile
    monkeypatch.setattr(MU, "reads_no_tile", lambda facts, tiles, v: False)
    assert msl() == skipping
    monkeypatch.setattr(MU, "reads_no_tile", reads_no_tile)
    monkeypatch.setattr(Facts, "tile_names", property(lambda self: frozenset()))
    assert msl() != skipping
