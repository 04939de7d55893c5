"""A kernel that needs more threadgroup memory than the device has is refused before it runs, with a list of what
needs the memory (the kernel's `metile.shared` arrays, the compiler's scratch for the statement that needs the most
of it, the channels of `simdgroup_role` blocks) and the error at the line that needs the most."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from tests.msl_source import kernel_line as line_of

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def two_shared(X, Y, BLOCK: metile.constexpr, A: metile.constexpr, B: metile.constexpr):
    t = metile.thread_id()
    small = metile.shared(B)  # the small one
    big = metile.shared(A)  # the big one
    metile.store(big + t, metile.load(X + t))
    metile.store(small + t, metile.load(X + t))
    metile.barrier()
    metile.store(Y + t, metile.load(big + t) + metile.load(small + t))


@metile.kernel
def row_sums(X, Y, R: metile.constexpr, C: metile.constexpr):
    rows = metile.arange(0, R)
    cols = metile.arange(0, C)
    x = metile.load(X + rows[:, None] * C + cols[None, :])
    total = metile.sum(x, axis=1)  # the reduction
    metile.store(Y + rows, total)


@metile.kernel
def matmul_tile(A, B, C, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    acc = metile.zeros((BM, BN), dtype="f32")
    a = metile.tile_load(A, 0, 0, BK, (BM, BK))
    b = metile.tile_load(B, 0, 0, BN, (BK, BN))
    acc = metile.dot(a, b, acc)  # the dot
    metile.tile_store(C, 0, 0, BN, acc, (BM, BN))


@metile.kernel
def matmul_sum(A, B, C, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    a = metile.tile_load(A, 0, 0, BK, (BM, BK))
    b = metile.tile_load(B, 0, 0, BN, (BK, BN))
    acc = metile.dot(a, b)
    metile.store(C, metile.sum(acc * acc))  # the sum


@metile.kernel
def handoff(X, Y, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    with metile.simdgroup_role(role=0, num_roles=2):  # the first role
        v = metile.load(X + offs) * 2.0
    with metile.simdgroup_role(role=1, num_roles=2):  # the second role
        w = metile.load(X + offs) + 1.0
    metile.store(Y + offs, v + w)


def refusal(launch) -> metile.LaunchError:
    with pytest.raises(metile.LaunchError) as info:
        launch()
    return info.value


def test_shared_arrays_over_the_limit_are_listed_and_the_largest_is_pointed_at():
    x = np.zeros(256, np.float32)
    err = refusal(lambda: two_shared[(1,)](x, x.copy(), BLOCK=256, A=6144, B=4096))
    small, big = line_of(two_shared.fn, "# the small one"), line_of(two_shared.fn, "# the big one")
    assert err.message == ("kernel two_shared uses 40960 bytes of threadgroup memory; device 'cpu' allows at most "
                           "32768 bytes:\n"
                           f"  24576 bytes at line {big}: metile.shared array `big` (6144 f32)\n"
                           f"  16384 bytes at line {small}: metile.shared array `small` (4096 f32)")
    assert (err.loc.file, err.loc.line) == (__file__, big)
    assert str(err).splitlines()[-1].strip() == "^"      # the caret under the allocation
    two_shared[(1,)](x, x.copy(), BLOCK=256, A=4096, B=2048)   # within the limit: runs


def test_scratch_of_an_axis_reduction_is_listed_at_the_reduction():
    x = np.zeros(64 * 256, np.float32)
    err = refusal(lambda: row_sums[(1,)](x, np.zeros(64, np.float32), R=64, C=256))
    at = line_of(row_sums.fn, "# the reduction")
    assert "kernel row_sums uses 65536 bytes of threadgroup memory" in err.message
    assert f"\n  65536 bytes at line {at}: the compiler's f32 scratch (16384 f32), through which threads" in err.message
    assert (err.loc.file, err.loc.line) == (__file__, at)


def test_scratch_of_a_large_product_is_listed_where_it_is_used():
    """A 128 x 128 x 64 f32 product stages its operands a slice of k at a time (docs/language.md 6.6), but a sum of its
    result reads it through scratch, 64 KB of it."""
    x = np.zeros(128 * 128, np.float32)
    matmul_tile.compile(x, x, x, BM=128, BN=128, BK=64)
    err = refusal(lambda: matmul_sum.compile(x, x, x, BM=128, BN=128, BK=64))
    at = line_of(matmul_sum.fn, "# the sum")
    assert f"bytes at line {at}: the compiler's f32 scratch" in err.message and "give to dot" in err.message
    assert (err.loc.file, err.loc.line) == (__file__, at)


def test_channels_of_role_blocks_are_listed_at_their_blocks():
    x = np.zeros(8192, np.float32)
    err = refusal(lambda: handoff[(1,)](x, x.copy(), BLOCK=8192))
    first, second = line_of(handoff.fn, "# the first role"), line_of(handoff.fn, "# the second role")
    assert "kernel handoff uses 65536 bytes of threadgroup memory" in err.message
    assert (f"\n  32768 bytes at line {first}: a channel (8192 f32) through which a simdgroup_role block hands a "
            "tile to other threads") in err.message
    assert f"\n  32768 bytes at line {second}: a channel (8192 f32)" in err.message
    assert (err.loc.file, err.loc.line) == (__file__, first)


def test_the_listing_adds_up_to_what_the_kernel_uses():
    from metile.launch import threadgroup_arrays

    x = np.zeros(256, np.float32)
    compiled = two_shared.compile(x, x, BLOCK=256, A=1024, B=512)
    uses = threadgroup_arrays(compiled.metal_ir, compiled.tile_ir)
    assert sum(n for n, _, _ in uses) == compiled.threadgroup_memory == 6144
    compiled = row_sums.compile(x, x, R=8, C=32)
    uses = threadgroup_arrays(compiled.metal_ir, compiled.tile_ir)
    assert sum(n for n, _, _ in uses) == compiled.threadgroup_memory > 0
    assert all(at is not None and at.file == __file__ for _, _, at in uses)


@metile.kernel
def queries_times_keys(Q, K, S, n, D: metile.constexpr, W: metile.constexpr):
    rows, d = metile.arange(0, 64), metile.arange(0, D)
    q = metile.load(Q + rows[:, None] * D + d[None, :])
    for start in metile.tile_range(0, n, 16):
        cols = start + metile.arange(0, 16)
        k = metile.load(K + d[:, None] * n + cols[None, :])
        metile.store(S + rows[:, None] * n + cols[None, :], metile.dot(q, k))  # the product
    wide = metile.arange(0, W)
    keys = metile.load(K + d[:, None] * n + wide[None, :])
    metile.store(S + wide, metile.sum(keys.T, axis=1))   # the key sums


def test_an_operand_staged_once_before_its_loop_is_named():
    """The queries (64 x 32, rows padded to 36) are staged once before the loop over keys, 9 KB of their own; the
    sums of 256 keys after it need 32 KB of scratch beside them."""
    q, k, s = np.zeros((64, 32), np.float32), np.zeros((32, 256), np.float32), np.zeros((64, 256), np.float32)
    err = refusal(lambda: queries_times_keys[(1,)](q, k, s, 256, D=32, W=256))
    product, sums = line_of(queries_times_keys.fn, "# the product"), line_of(queries_times_keys.fn, "# the key sums")
    assert f"\n  9216 bytes at line {product}: a dot operand staged once before its loop (2304 f32)" in err.message
    assert f"\n  32768 bytes at line {sums}: the compiler's f32 scratch" in err.message
    queries_times_keys[(1,)](q, k, s, 256, D=32, W=128)   # 16 KB of scratch: it fits
