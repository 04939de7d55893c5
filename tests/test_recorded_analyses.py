"""Analyses a pass records for the kernel it builds (`Analyses.record`) are the ones the analysis computes: the
lowering records whether it made symbolic regions of threadgroup memory, so that `allocate_threadgroup_memory`
needs no walk of a kernel without them, and where it bound them (each scratch region by a `Let` at the kernel's
start), so that placing them needs no walk either; a wrong record would leave regions unplaced or place none.
`skip_inactive` and
`fold_constants` (when something folds) record the scan of the kernel they rebuilt, made from the scan of the kernel
they were given (`Scan(k, prior)`), so that the passes after them do not walk the statements they kept again; a wrong
one would mislead every pass after it."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.rewrite.context import Analyses, PassContext
from metile.rewrite.fold import fold_constants
from metile.rewrite.inactive import skip_inactive
from metile.rewrite.pipeline import LOWERING_PIPELINE, TILE_PIPELINE
from metile.rewrite.scan import Scan, scan_analysis
from metile.rewrite.threadgroup_memory import bound_regions, has_regions
from tests.acceptance_kernels import docs_examples as ex
from tests.test_multi_buffer import gemm as pipelined_gemm


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


def _lowered(kernel, args, constexprs):
    """The kernel before `allocate_threadgroup_memory`, and the context its passes recorded analyses in."""
    k = kernel.trace(*args, **constexprs)
    ctx = PassContext()
    for p in [*TILE_PIPELINE, *LOWERING_PIPELINE]:
        if p.name == "allocate_threadgroup_memory":
            break
        k = p(k, ctx)
    return k, ctx


CASES = {
    "add": (add, (_f32(300), _f32(300), _f32(300), 300), {"BLOCK": 256}, False),
    "softmax": (row_softmax, (_f32(900), _f32(900), 300), {"BLOCK": 512}, True),
    "gemm": (ex.matmul, (_f32(40 * 24), _f32(24 * 40), _f32(40 * 40), 40, 40, 24),
             {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16}, True),
}


@pytest.mark.parametrize("name", CASES)
def test_the_lowering_records_whether_it_made_regions(name):
    kernel, args, constexprs, expected = CASES[name]
    k, ctx = _lowered(kernel, args, constexprs)
    recorded = ctx.analyses.of(has_regions, k)
    assert recorded is has_regions(k, Analyses()) is expected


@pytest.mark.parametrize("name", [*CASES, "pipelined"])
def test_the_lowering_records_where_it_bound_its_regions(name):
    """Each scratch region is bound by a `Let` at the kernel's start, and the lowering records where; a loop whose
    operands rotate through a ring of buffers has regions inside it, and the lowering records that they are not
    all bound (so that placing them walks the kernel)."""
    if name == "pipelined":
        k, ctx = _lowered(pipelined_gemm, (_f32(70 * 150), _f32(150 * 50), _f32(70 * 50), 70, 50, 150),
                          {"BM": 32, "BN": 32, "BK": 16, "STAGES": 2})
    else:
        kernel, args, constexprs, _ = CASES[name]
        k, ctx = _lowered(kernel, args, constexprs)
    recorded = ctx.analyses.kept(bound_regions, k)
    computed = bound_regions(k, Analyses())
    assert recorded == computed
    if name == "pipelined":
        assert recorded is None
    else:
        assert recorded is not None and len(recorded.lets) == (0 if name == "add" else 2)
        assert recorded.taken >= computed.taken


def _gemm_without_bounds():
    return ex.matmul_act.trace(_f32(40 * 24), _f32(24 * 40), _f32(40 * 40), 40, 40, 24,
                               BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, ACT="relu")


@metile.kernel
def gemm_onto(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    """`C += A @ B`, its accumulator loaded from `C`: read by `dot` through `AllActive` (the trace does not know a
    loaded tile active everywhere)."""
    pid_m, pid_n = metile.program_id(0), metile.program_id(1)
    acc = metile.tile_load(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, (BLOCK_M, BLOCK_N))
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


@pytest.mark.parametrize("name", ["rmsnorm", "gemm"])
def test_skip_inactive_records_the_scan_of_the_kernel_it_rebuilt(name):
    """The RMS norm's first loop keeps the old sums where the load is masked off (its statements rebuilt); the
    GEMM has no masked load, and only loses the mark of its accumulator, which every element is active in."""
    if name == "rmsnorm":
        k = ex.rmsnorm.trace(_f32(4 * 300), _f32(300), _f32(4 * 300), 300, 1e-5, BLOCK=256)
    else:
        k = gemm_onto.trace(_f32(40 * 24), _f32(24 * 40), _f32(40 * 40), 40, 40, 24, BLOCK_M=32, BLOCK_N=32,
                            BLOCK_K=16)
    ctx = PassContext()
    out = skip_inactive(k, ctx)
    assert out is not k
    kept = ctx.analyses.kept(scan_analysis, out)
    assert kept is not None, "skip_inactive recorded no scan of its kernel"
    _same_scan(kept, Scan(out))


@metile.kernel
def scaled_rows(X, Out, n, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    for c0 in metile.tile_range(0, n, BLOCK):
        cols = c0 + metile.arange(0, BLOCK) * 1   # `* 1` folds, inside the loop
        x = metile.load(X + row * n + cols, mask=cols < n)
        metile.store(Out + row * n + cols, x * 2.0, mask=cols < n)


def test_fold_constants_records_the_scan_of_the_kernel_it_folded():
    """A product by one inside a loop folds, so the loop and the statements holding it are rebuilt."""
    k = scaled_rows.trace(_f32(4 * 300), _f32(4 * 300), 300, BLOCK=128)
    ctx = PassContext()
    out = fold_constants(k, ctx)
    assert out is not k
    kept = ctx.analyses.kept(scan_analysis, out)
    assert kept is not None, "fold_constants recorded no scan of its kernel"
    _same_scan(kept, Scan(out))


def test_a_tile_without_bounds_leaves_nothing_to_fold():
    """The bounds a `tile_load` or `tile_store` without `bounds=` clips to are built without `length - 0` (for a
    pointer that is the array's start), so a GEMM's trace has nothing `fold_constants` would rebuild and rescan."""
    k = _gemm_without_bounds()
    assert fold_constants(k, PassContext()) is k


def _same_scan(kept, fresh):
    assert len(kept.nodes) == len(fresh.nodes) and all(a is b for a, b in zip(kept.nodes, fresh.nodes))
    # a scan made from an earlier one may keep facts of nodes the kernel no longer has (`Scan`): the kernel's match
    assert {key: kept.facts.get(key) for key in fresh.facts} == fresh.facts
    assert not {id(n) for n in kept.nodes} & (kept.facts.keys() - fresh.facts.keys())
    assert [(c, [id(n) for n in ns]) for c, ns in kept.classes()] == [(c, [id(n) for n in ns])
                                                                       for c, ns in fresh.classes()]


def test_analyses_keep_the_result_of_each_body_while_others_are_asked_of():
    """`Analyses.of` computes an analysis once per body (parameters and statements, by identity), whichever body was
    asked of in between, and a body recorded later is answered with what was recorded for it."""
    kernels = [add.trace(_f32(300), _f32(300), _f32(300), 300, BLOCK=b) for b in (128, 256)]
    calls = []

    def counted(k, analyses):
        calls.append(k)
        return len(calls)

    analyses = Analyses()
    first, second = kernels
    assert [analyses.of(counted, k) for k in (first, first, second, first, second)] == [1, 1, 2, 1, 2]
    assert calls == [first, second]
    third = _with_own_body(first)
    analyses.record(counted, third, 7)
    assert analyses.of(counted, third) == 7 and analyses.kept(counted, third) == 7
    assert analyses.of(counted, first) == 1 and analyses.kept(counted, second) == 2
    assert len(calls) == 2


def _with_own_body(k):
    """`k` with a body of its own (an equal vector that is another object)."""
    from pyrsistent import pvector

    from metile.ir.node import evolve_node
    return evolve_node(k, body=pvector(list(k.body)))



@pytest.mark.parametrize("which", ["softmax", "gemm"])
def test_a_compile_leaves_nothing_for_the_garbage_collector(which):
    """No stage of a compile leaves a reference cycle (a nested function calling itself through its closure, an object
    holding a bound method of itself): the trace, each pass of the default pipeline and the scans they make free their
    tables when the last reference goes, not at the collector's next pass, which would have to walk them."""
    import gc

    from metile.ir.target import DEFAULT_TARGET
    from metile.rewrite.passes import pass_name
    from metile.rewrite.pipeline import DEFAULT_PIPELINE, _apply

    kernel, args, constexprs = (row_softmax, (_f32(64), _f32(64), 64), {"BLOCK": 64}) if which == "softmax" else \
        (pipelined_gemm, (_f32(70 * 150), _f32(150 * 50), _f32(70 * 50), 70, 50, 150),
         {"BM": 32, "BN": 32, "BK": 16, "STAGES": 2})
    gc.collect()
    gc.disable()
    try:
        k = kernel.trace(*args, **constexprs)
        assert gc.collect() == 0, "the trace"
        del Scan(k).nodes   # a scan, dropped at once
        assert gc.collect() == 0, "a scan"
        ctx = PassContext(DEFAULT_TARGET)
        for p in DEFAULT_PIPELINE:
            k = _apply(p, k, ctx, False)
            assert gc.collect() == 0, pass_name(p)
    finally:
        gc.enable()
