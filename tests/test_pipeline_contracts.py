"""Pass contracts bind: a pipeline with any pass of the default schedule dropped, moved to the front or moved to the
end either is refused with a `PipelineError` naming the pass, or compiles kernels that are still right (a masked
maximum whose inactive elements must be skipped, a ragged GEMM, a softmax) — never a kernel computing something
else. Textual pipelines name passes and their options."""

from __future__ import annotations

import random

import numpy as np
import pytest

import metile
from metile.rewrite.passes import Pass, check_order, parse_pipeline
from metile.rewrite.pipeline import DEFAULT_PIPELINE, OPTIONAL_PASSES, PipelineError, check_pipeline, pipeline

pytestmark = pytest.mark.usefixtures("on_cpu")


def masked_max(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out, metile.max(metile.load(X + offs, mask=offs < n)))


def gemm(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    row, col = metile.program_id(0) * BM, metile.program_id(1) * BN
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, row, k, K, (BM, BK), bounds=(M, K))
        b = metile.tile_load(B, k, col, N, (BK, BN), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, row, col, N, acc, (BM, BN), bounds=(M, N))


def row_softmax(X, Out, n, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + row * n + cols, mask=cols < n, other=-float("inf"))
    e = metile.exp(x - metile.max(x))
    metile.store(Out + row * n + cols, e / metile.sum(e), mask=cols < n)


def check_kernels(pipe) -> None:
    x = np.full(16, -1.0, np.float32)
    out = np.zeros(1, np.float32)
    metile.kernel(pipeline=pipe)(masked_max)[(1,)](x, out, 5, BLOCK=16)
    metile.synchronize()
    assert out[0] == -1.0          # a masked-off 0 must not win the maximum

    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 50)).astype(np.float32)
    c = np.zeros((40, 50), np.float32)
    metile.kernel(pipeline=pipe)(gemm)[(2, 2)](a, b, c, 40, 50, 24, BM=32, BN=32, BK=8)
    metile.synchronize()
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)

    x = rng.standard_normal((3, 20)).astype(np.float32)
    y = np.zeros_like(x)
    metile.kernel(pipeline=pipe)(row_softmax)[(3,)](x, y, 20, BLOCK=32)
    metile.synchronize()
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5)


def variants():
    names = [p.name for p in DEFAULT_PIPELINE]
    for i, p in enumerate(DEFAULT_PIPELINE):
        rest = [q for q in DEFAULT_PIPELINE if q is not p]
        yield f"without-{names[i]}", rest, p
        yield f"{names[i]}-first", [p, *rest], p
        yield f"{names[i]}-last", [*rest, p], p


VARIANTS = list(variants())


@pytest.mark.parametrize(("label", "pipe", "moved"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_a_dropped_or_moved_pass_is_refused_by_name_or_changes_nothing_computed(label, pipe, moved):
    try:
        check_pipeline(pipe)
    except PipelineError as e:
        assert moved.name in str(e), str(e)
        return
    try:
        check_kernels(pipe)
    except PipelineError as e:   # a pipeline that stops before Metal IR (a lowering pass dropped) says so at compile
        assert moved.name in ("lower_tiles", "allocate_threadgroup_memory") and "ends in" in str(e), str(e)


def test_the_passes_the_meaning_depends_on_are_the_ones_not_optional():
    """Dropping a pass that is not optional is refused, except the ones whose work the lowering also does without
    them; every optional pass can be dropped."""
    required = {p.name for p in DEFAULT_PIPELINE if not p.optional}
    refused = set()
    for p in DEFAULT_PIPELINE:
        try:
            check_pipeline([q for q in DEFAULT_PIPELINE if q is not p])
        except PipelineError:
            refused.add(p.name)
    assert refused <= required
    assert {"skip_inactive", "plan_launch"} <= refused
    assert not refused & {p.name for p in OPTIONAL_PASSES}


def test_textual_pipelines():
    assert pipeline(",".join(p.name for p in DEFAULT_PIPELINE)) == DEFAULT_PIPELINE
    with pytest.raises(PipelineError, match="unknown pass 'fold_constant'"):
        pipeline("fold_constant,lower_tiles")
    with pytest.raises(PipelineError, match="cannot read the pipeline"):
        pipeline("skip_inactive,,lower_tiles")
    with pytest.raises(PipelineError, match="cannot read the option 'parts'"):
        pipeline("split_k{parts},lower_tiles")

    def mine(k, ctx, factor=1):
        return k

    custom = Pass("mine", mine)
    parsed = parse_pipeline("mine{factor=4},skip_inactive", [custom, *DEFAULT_PIPELINE])
    assert parsed[0].options == (("factor", 4),) and parsed[0].key.endswith("mine{factor=4}")
    with pytest.raises(PipelineError, match="pass mine has no option 'factr': its options are factor"):
        parse_pipeline("mine{factr=4}", [custom])
    with pytest.raises(PipelineError, match="pass split_k has no option 'parts': it takes none"):
        pipeline("split_k{parts=4}")

    def anything(k, ctx, **options):
        return k

    assert parse_pipeline("any{x=1,y=two}", [Pass("any", anything)])[0].options == (("x", 1), ("y", "two"))
    with pytest.raises(PipelineError, match="takes no options"):
        parse_pipeline("plain{x=1}", [lambda_like])


def lambda_like(k):
    return k


lambda_like.__name__ = "plain"


def test_a_plain_function_has_no_contract():
    check_order([lambda_like, *DEFAULT_PIPELINE, lambda_like])


def test_a_broken_pipeline_is_refused_when_the_kernel_is_defined():
    with pytest.raises(PipelineError, match="add skip_inactive before lower_tiles"):
        metile.kernel(pipeline=[p for p in DEFAULT_PIPELINE if p.name != "skip_inactive"])(masked_max)
    k = metile.kernel(masked_max)
    with pytest.raises(PipelineError, match="split_k must run before plan_launch"):
        names = [p.name for p in DEFAULT_PIPELINE]
        order = [p for p in DEFAULT_PIPELINE if p.name != "split_k"]
        order.insert(names.index("plan_launch"), DEFAULT_PIPELINE[names.index("split_k")])
        k.with_pipeline(order)


def test_run_refuses_a_broken_pipeline_after_running_a_good_one():
    """`run` checks a pipeline only when it differs from the one it ran last: the default pipeline run twice, then
    one of the same passes in another order, is refused all the same (and a list edited in place is seen anew)."""
    from metile.rewrite.pipeline import run

    k = metile.kernel(masked_max).trace(np.zeros(16, np.float32), np.zeros(1, np.float32), 5, BLOCK=16)
    pipe = list(DEFAULT_PIPELINE)
    run(pipe, k)
    run(pipe, k)
    pipe.insert(0, pipe.pop(pipe.index(next(p for p in pipe if p.name == "lower_tiles"))))
    with pytest.raises(PipelineError, match="lower_tiles"):
        run(pipe, k)
    with pytest.raises(PipelineError, match="lower_tiles"):
        run(pipe, k)


def _breaks_a_contract(passes) -> bool:
    """The contracts of `check_order`, on sets of facts."""
    provided = set()
    for p in passes:
        if isinstance(p, Pass):
            if not p.requires <= provided or p.precedes & provided:
                return True
            provided |= p.provides
    return False


def test_check_order_refuses_exactly_the_orders_that_break_a_contract():
    """`check_order` decides on bit sets of facts, and builds its message only for a pipeline it refuses: on random
    selections and orders of the default passes (and plain functions among them) it refuses those and only those
    that break a contract."""
    rng = random.Random(7)
    pool = [*DEFAULT_PIPELINE, lambda_like]
    refused = 0
    for _ in range(600):
        passes = rng.sample(pool, rng.randint(1, len(pool)))
        if rng.random() < 0.5:   # keep the default order of the passes taken
            passes.sort(key=pool.index)
        try:
            check_order(passes)
        except PipelineError:
            refused += 1
            assert _breaks_a_contract(passes), [getattr(p, "name", p) for p in passes]
        else:
            assert not _breaks_a_contract(passes), [getattr(p, "name", p) for p in passes]
    assert 0 < refused < 600
