"""`num_stages`: a pipelined loop's staged `dot` operands rotate through that many threadgroup buffers (as many as
fit), so each iteration waits at one barrier instead of two; the results never change."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.frontend.errors import KernelArgumentError
from metile.rewrite.pipeline import TILE_PIPELINE, run


@metile.kernel
def gemm(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr,
         STAGES: metile.constexpr):
    row, col = metile.program_id(0) * BM, metile.program_id(1) * BN
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    if STAGES:
        for k in metile.tile_range(0, K, BK, num_stages=STAGES):
            a = metile.tile_load(A, row, k, K, (BM, BK), bounds=(M, K))
            b = metile.tile_load(B, k, col, N, (BK, BN), bounds=(K, N))
            acc = metile.dot(a, b, acc)
    else:   # no num_stages of its own: the launch's applies
        for k in metile.tile_range(0, K, BK):
            a = metile.tile_load(A, row, k, K, (BM, BK), bounds=(M, K))
            b = metile.tile_load(B, k, col, N, (BK, BN), bounds=(K, N))
            acc = metile.dot(a, b, acc)
    metile.tile_store(C, row, col, N, acc, (BM, BN), bounds=(M, N))


def _buffers(compiled) -> list[int]:
    text = metile.ir.pretty(run(TILE_PIPELINE, compiled.tile_ir))
    return [int(line.split(" buffers ")[1].split()[0]) for line in text.splitlines() if " buffers " in line]


def _launch(dtype, blocks, stages, **options):
    M, N, K = 70, 50, 150
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((M, K)).astype(dtype), rng.standard_normal((K, N)).astype(dtype)
    c = np.zeros((M, N), np.float32)
    bm, bn, bk = blocks
    args = (a, b, c, M, N, K)
    consts = dict(BM=bm, BN=bn, BK=bk, STAGES=stages, **options)
    profile = gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](*args, **consts, profile=True, sanitize=False)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    return profile.to_dict(), gemm.compile(*args, **consts)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_two_stages_halve_the_barriers_per_step(dtype):
    one, single = _launch(dtype, (32, 32, 16), 1)
    two, double = _launch(dtype, (32, 32, 16), 2)
    steps = 150 // 16 + 1   # iterations of the K loop per program
    programs = 3 * 2
    assert _buffers(single) == [] and _buffers(double) == [2]
    assert one["barriers"] - two["barriers"] == programs * (steps - 1)   # one barrier per step, and one before
    assert double.threadgroup_memory > single.threadgroup_memory


def test_the_launch_gives_loops_without_their_own_stages_and_explicit_ones_win():
    _, launched = _launch(np.float16, (32, 32, 16), 0, num_stages=3)
    assert _buffers(launched) == [3]
    _, explicit = _launch(np.float16, (32, 32, 16), 1, num_stages=3)
    assert _buffers(explicit) == []


def test_as_many_buffers_as_fit():
    """64x64x32 f32 operands take 17.5 KB per stage: twice is more than 32 KB, so they keep one buffer; f16 ones
    (9.5 KB per stage) fit three times but not four."""
    _, big = _launch(np.float32, (64, 64, 32), 2)
    assert _buffers(big) == [] and big.threadgroup_memory <= 32 * 1024
    _, four = _launch(np.float16, (64, 64, 32), 4)
    assert _buffers(four) == [3]


def test_rings_that_do_not_fit_beside_the_rest_fall_back_to_one_buffer():
    """Twice 64x64x16 f32 (19 KB) fits alone, but not beside the 16 KB copy of a 64x64 result a reduction
    needs: the loop is lowered with one buffer, and the kernel still fits."""

    @metile.kernel
    def with_rowsum(A, B, S, K, BK: metile.constexpr):
        acc = metile.zeros((64, 64), dtype=metile.float32)
        for k in metile.tile_range(0, K, BK, num_stages=2):
            acc = metile.dot(metile.tile_load(A, 0, k, K, (64, BK)), metile.tile_load(B, k, 0, 64, (BK, 64)), acc)
        t = metile.trans(acc)   # read transposed: copied whole to scratch
        metile.store(S + metile.arange(0, 64), metile.sum(t, 0))

    K = 64
    a, b = np.ones((64, K), np.float32), np.ones((K, 64), np.float32)
    s = np.zeros(64, np.float32)
    with_rowsum[(1,)](a, b, s, K, BK=16)
    assert (s == 64 * K).all()
    compiled = with_rowsum.compile(a, b, s, K, BK=16)
    assert _buffers(compiled) == [2]                  # what multi_buffer chose
    assert "ring_" not in compiled.msl and compiled.threadgroup_memory <= 32 * 1024   # what fits


@pytest.mark.parametrize(("option", "value", "message"), [
    ("num_stages", 0, "num_stages=0 must be an int from 1 to 8"),
    ("num_stages", 2.0, "num_stages=2.0 must be an int from 1 to 8"),
    ("group_programs", 0, "group_programs=0 must be an int from 1"),
    ("group_programs", True, "group_programs=True must be an int from 1"),
])
def test_bad_schedule_options_are_refused_at_the_kernel(option, value, message):
    a = np.zeros((8, 8), np.float32)
    with pytest.raises(KernelArgumentError, match=message) as info:
        gemm[(1, 1)](a, a, a, 8, 8, 8, BM=8, BN=8, BK=8, STAGES=1, **{option: value})
    assert info.value.loc is not None and info.value.loc.line > 0
