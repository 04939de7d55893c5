"""Analyses a pass records for the kernel it builds (`Analyses.record`) are the ones the analysis computes: the
lowering records whether it made symbolic regions of threadgroup memory, so that `allocate_threadgroup_memory`
needs no walk of a kernel without them, and which statements may hold one, so that it walks only those; a wrong
record would leave regions unplaced or place none. `skip_inactive`
records the scan of the kernel it rebuilt, made from the scan of the kernel it was given (`Scan(k, prior)`), so that
the passes after it do not walk the statements it kept again; a wrong one would mislead every pass after it."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.ir.printer import pretty
from metile.rewrite.context import Analyses, PassContext
from metile.rewrite.inactive import skip_inactive
from metile.rewrite.pipeline import LOWERING_PIPELINE, TILE_PIPELINE
from metile.rewrite.scan import Scan, scan_analysis
from metile.rewrite.threadgroup_memory import allocate_threadgroup_memory, has_regions, region_holders
from tests.acceptance_kernels import docs_examples as ex


@metile.kernel
def add(X, Y, Out, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs, mask=offs < n) + metile.load(Y + offs, mask=offs < n),
                 mask=offs < n)


@metile.kernel
def row_softmax(X, Out, n, BLOCK: metile.constexpr):
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + metile.program_id(0) * n + cols, mask=cols < n, other=-float("inf"))
    e = metile.exp(x - metile.max(x))
    metile.store(Out + metile.program_id(0) * n + cols, e / metile.sum(e), mask=cols < n)


def _f32(n):
    return np.zeros(n, np.float32)


CASES = {
    "add": (add, (_f32(300), _f32(300), _f32(300), 300), {"BLOCK": 256}, False),
    "softmax": (row_softmax, (_f32(900), _f32(900), 300), {"BLOCK": 512}, True),
    "gemm": (ex.matmul, (_f32(40 * 24), _f32(24 * 40), _f32(40 * 40), 40, 40, 24),
             {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, True),
}


@pytest.mark.parametrize("name", CASES)
def test_the_lowering_records_whether_it_made_regions(name):
    kernel, args, constexprs, expected = CASES[name]
    k = kernel.trace(*args, **constexprs)
    ctx = PassContext()
    for p in [*TILE_PIPELINE, *LOWERING_PIPELINE]:
        if p.name == "allocate_threadgroup_memory":
            break
        k = p(k, ctx)
    recorded = ctx.analyses.of(has_regions, k)
    assert recorded is has_regions(k, Analyses()) is expected


@pytest.mark.parametrize("name", CASES)
def test_the_lowering_records_the_statements_that_may_hold_regions(name):
    kernel, args, constexprs, expected = CASES[name]
    k = kernel.trace(*args, **constexprs)
    ctx = PassContext()
    for p in TILE_PIPELINE:
        k = p(k, ctx)
    k = LOWERING_PIPELINE[0](k, ctx)
    recorded = ctx.analyses.kept(region_holders, k)
    if not expected:
        assert recorded is None
        return
    found = region_holders(k)
    assert found.statements and set(found.statements) <= set(recorded.statements)
    assert found.names <= recorded.names
    placed = allocate_threadgroup_memory(k, ctx)             # walking only the statements recorded
    walked = allocate_threadgroup_memory(k, PassContext())   # walking the whole kernel
    assert placed == walked and pretty(placed) == pretty(walked)


def test_skip_inactive_records_the_scan_of_the_kernel_it_rebuilt():
    k = ex.rmsnorm.trace(_f32(4 * 300), _f32(300), _f32(4 * 300), 300, 1e-5, BLOCK=256)
    ctx = PassContext()
    out = skip_inactive(k, ctx)
    assert out is not k   # the first loop's update keeps the old sums where the load is masked off
    kept = ctx.analyses.kept(scan_analysis, out)
    assert kept is not None, "skip_inactive recorded no scan of its kernel"
    fresh = Scan(out)
    assert len(kept.nodes) == len(fresh.nodes) and all(a is b for a, b in zip(kept.nodes, fresh.nodes))
    assert kept.facts == fresh.facts
    assert [(c, [id(n) for n in ns]) for c, ns in kept.classes()] == [(c, [id(n) for n in ns])
                                                                       for c, ns in fresh.classes()]
