"""Slots looped over at run time (`metile.rewrite.lower.rolled`): the code is a loop, and the results are those
of numpy, with padding, masks, `dot` epilogues and deferred operand loads.

- a store of a pure expression to a tile larger than one sweep of the threads, padded and masked;
- GEMM: operand staging and the epilogue are loops, for several shapes;
- a `dot` result with an element-wise epilogue stored through a loop;
- operand loads that must not be deferred: a tile also read elsewhere, and a tile read after a store to the
  same memory (the result must use the values loaded before the store).
"""

from __future__ import annotations

import numpy as np
import pytest

import metile

ROLLED = "for (int s"


pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def coords(Out, M, N, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr):
    rows = metile.program_id(0) * BLOCK_M + metile.arange(0, BLOCK_M)
    cols = metile.arange(0, BLOCK_N)
    ok = (rows[:, None] < M) & (cols[None, :] < N)
    metile.store(Out + rows[:, None] * N + cols[None, :], rows[:, None] * 1000 + cols[None, :], mask=ok)


@pytest.mark.parametrize(("m", "n", "bm", "bn"), [(70, 47, 48, 48), (33, 44, 48, 44), (256, 63, 64, 64)])
def test_a_padded_masked_store_of_an_expression_loops_over_slots(m, n, bm, bn):
    # row strides that are not multiples of 16: the rows are not proven aligned, so elements move one by one
    out = np.full(m * n, -1, np.int32)
    compiled = coords.compile(out, m, n, BLOCK_M=bm, BLOCK_N=bn)
    assert ROLLED in compiled.msl
    coords[(-(-m // bm),)](out, m, n, BLOCK_M=bm, BLOCK_N=bn)
    r, c = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
    np.testing.assert_array_equal(out.reshape(m, n), r * 1000 + c)


@metile.kernel
def matmul(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr,
           RELU: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    if RELU:
        acc = metile.maximum(acc, 0.0) * 2.0
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


@pytest.mark.parametrize(("m", "n", "k", "bm", "bn", "bk", "relu"),
                         [(128, 128, 64, 64, 64, 32, False), (64, 96, 96, 32, 32, 32, True),
                          (64, 64, 128, 64, 32, 64, True)])
def test_gemm_stages_operands_and_stores_results_in_loops(m, n, k, bm, bn, bk, relu):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, RELU=relu)
    msl = matmul.compile(a, b, c, m, n, k, **consts).msl
    # Staging both operands loops over slots; a bare result inside C is stored straight from its matrices (row
    # stride N), the epilogue, and a tile on C's edge (the store is clipped to C), by each lane from its elements.
    assert msl.count(ROLLED) >= 2 and "for (int kk" in msl
    assert (", N, 0, false);" in msl) is not relu
    assert "thread_elements()" in msl
    matmul[(m // bm, n // bn)](a, b, c, m, n, k, **consts)
    want = a @ b
    if relu:
        want = np.maximum(want, 0.0) * 2.0
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)


@metile.kernel
def dot_and_copy(A, B, C, Acopy, K: metile.constexpr, BLOCK: metile.constexpr):
    a = metile.tile_load(A, 0, 0, K, (BLOCK, K))
    b = metile.tile_load(B, 0, 0, BLOCK, (K, BLOCK))
    acc = metile.dot(a, b)
    metile.tile_store(Acopy, 0, 0, K, a, (BLOCK, K))
    metile.tile_store(C, 0, 0, BLOCK, acc, (BLOCK, BLOCK))


def test_an_operand_read_again_after_the_dot_is_loaded_into_registers():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 32), dtype=np.float32)
    b = rng.standard_normal((32, 64), dtype=np.float32)
    c, copy = np.zeros((64, 64), np.float32), np.zeros((64, 32), np.float32)
    dot_and_copy[(1,)](a, b, c, copy, K=32, BLOCK=64)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(copy, a)


@metile.kernel
def dot_after_overwrite(A, B, C, K: metile.constexpr, BLOCK: metile.constexpr):
    a = metile.tile_load(A, 0, 0, K, (BLOCK, K))
    b = metile.tile_load(B, 0, 0, BLOCK, (K, BLOCK))
    metile.tile_store(A, 0, 0, K, metile.zeros((BLOCK, K), dtype="f32"), (BLOCK, K))
    acc = metile.dot(a, b)
    metile.tile_store(C, 0, 0, BLOCK, acc, (BLOCK, BLOCK))


def test_an_operand_loaded_before_a_store_to_its_memory_keeps_the_old_values():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 32), dtype=np.float32)
    b = rng.standard_normal((32, 64), dtype=np.float32)
    want = a @ b
    c = np.zeros((64, 64), np.float32)
    dot_after_overwrite[(1,)](a, b, c, K=32, BLOCK=64)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4)
    assert not a.any()
