"""`insert_conversions` and the `convert_layout` node: every move of a register tile between threads is a node of
the Tile IR, printed, parsed and verified, that the lowering carries out (and without which it refuses to move a
tile); a pipeline without the pass, or with it before `assign_layouts`, is refused by name."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import metile
from metile.ir import ConvertLayout, VerifyError, parse, pretty, verify, walk
from metile.ir.layouts import Blocked, Shared
from metile.rewrite.context import PassContext
from metile.rewrite.conversions import insert_conversions
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.lower import lower_tiles
from metile.rewrite.pipeline import DEFAULT_PIPELINE, TILE_PIPELINE, PipelineError, check_pipeline, run
from metile.rewrite.plan import value_defs
from metile.rewrite.scan import scan
from metile.rewrite.threadgroup_memory import allocate_threadgroup_memory

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def softmax_t(X, Y):
    """Softmax of 8 rows of 32, stored transposed: a reduction's operand, two reductions' results broadcast along
    the rows, and a transpose, each read at elements other threads hold."""
    r, c = metile.arange(0, 8), metile.arange(0, 32)
    x = metile.load(X + r[:, None] * 32 + c[None, :])
    e = metile.exp(x - metile.max(x, axis=1)[:, None])
    metile.store(Y + c[:, None] * 8 + r[None, :], metile.trans(e / metile.sum(e, axis=1)[:, None]))


@metile.kernel
def add_row(X, B, Y):
    """A loaded row broadcast over the 16 rows of a loaded tile, and a permutation of the sum."""
    r, c = metile.arange(0, 16), metile.arange(0, 8)
    x = metile.load(X + r[:, None] * 8 + c[None, :])
    b = metile.load(B + c)
    y = metile.permute(metile.reshape(x + b[None, :], (2, 8, 8)), (2, 0, 1))
    metile.store(Y + metile.arange(0, 128), metile.reshape(y, (128,)))


@metile.kernel
def scale(X, Y, n):
    offs = metile.arange(0, 256)
    metile.store(Y + offs, metile.load(X + offs, mask=offs < n) * 2.0, mask=offs < n)


def _args(*shapes):
    return [np.zeros(s, np.float32) for s in shapes]


def test_the_moves_are_conversion_nodes_that_print_parse_and_verify():
    k = run(TILE_PIPELINE, softmax_t.trace(*_args(256, 256)))
    convs = {(getattr(n.x, "name", type(n.x).__name__), n.src, n.dst) for n in walk(k) if isinstance(n, ConvertLayout)}
    assert convs == {("x", Blocked(64, 4), Shared()), ("Reduce", Blocked(64, 1), Shared())}
    assert sum(isinstance(n, ConvertLayout) for n in walk(k)) == 3   # x, and the results of max and sum
    text = pretty(k)
    assert "convert_layout %x #blocked<64, 4> -> #shared : tile<8x32xf32>" in text
    assert parse(text) == k
    verify(k, after="insert_conversions")


def test_a_kernel_with_nothing_to_move_is_returned_as_it_is():
    k = run(TILE_PIPELINE[:-1], scale.trace(*_args(256, 256), 256))
    assert insert_conversions(k) is k


@pytest.mark.parametrize("kernel", [softmax_t, add_row])
def test_the_converted_kernels_compute_what_numpy_does(kernel):
    rng = np.random.default_rng(0)
    if kernel is softmax_t:
        x = rng.standard_normal(256).astype(np.float32)
        y = np.zeros(256, np.float32)
        softmax_t[(1,)](x, y)
        xx = x.reshape(8, 32)
        e = np.exp(xx - xx.max(1, keepdims=True))
        np.testing.assert_allclose(y.reshape(32, 8), (e / e.sum(1, keepdims=True)).T, rtol=1e-5, atol=1e-6)
    else:
        x, b = rng.standard_normal(128).astype(np.float32), rng.standard_normal(8).astype(np.float32)
        y = np.zeros(128, np.float32)
        add_row[(1,)](x, b, y)
        want = np.transpose((x.reshape(16, 8) + b).reshape(2, 8, 8), (2, 0, 1)).reshape(128)
        np.testing.assert_allclose(y, want, rtol=1e-6)


def test_a_pipeline_without_the_pass_or_with_it_too_early_is_refused_by_name():
    without = [p for p in DEFAULT_PIPELINE if p.name != "insert_conversions"]
    with pytest.raises(PipelineError, match="add insert_conversions before plan_staging"):
        check_pipeline(without)
    with pytest.raises(PipelineError, match="add insert_conversions before plan_staging"):
        metile.kernel(pipeline=without)(scale.fn)
    names = [p.name for p in without]
    early = list(without)
    early.insert(names.index("assign_layouts"), insert_conversions)
    with pytest.raises(PipelineError, match="insert_conversions needs the layout of every named tile; assign_layouts "
                                            "provides it, but runs after insert_conversions"):
        check_pipeline(early)


def test_the_lowering_moves_no_register_tile_without_a_conversion():
    """With the pass's contract bypassed (a plain function around `lower_tiles`), the lowering refuses the
    broadcast of a reduction's result instead of moving it on its own."""
    def lower(k):
        return allocate_threadgroup_memory(lower_tiles(k))

    plain = softmax_t.with_pipeline([p for p in TILE_PIPELINE if p.name not in ("insert_conversions", "plan_staging")]
                                    + [lower])
    with pytest.raises(metile.MetileError, match="no convert_layout: insert_conversions must run before lower_tiles"):
        plain[(1,)](*_args(256, 256))


def test_the_verifier_checks_a_conversion_against_the_schedule():
    k = run(TILE_PIPELINE, softmax_t.trace(*_args(256, 256)))
    wrong = pretty(k).replace("convert_layout %x #blocked<64, 4>", "convert_layout %x #blocked<64, 1>")
    with pytest.raises(VerifyError, match="convert_layout: %x is blocked<64, 4>, not blocked<64, 1>"):
        verify(parse(wrong))
    elsewhere = pretty(k).replace("convert_layout %x #blocked<64, 4> -> #shared",
                                  "convert_layout %x #blocked<64, 4> -> #channel")
    with pytest.raises(VerifyError, match="moves a tile from a blocked layout to shared, not"):
        verify(parse(elsewhere))
    with pytest.raises(metile.MetileError, match="expected a layout"):
        parse(pretty(k).replace("-> #shared", "-> #sharde"))
    layouts = k.schedule.layouts.set("x", Shared())
    with pytest.raises(VerifyError, match="cannot be shared"):
        verify(attrs.evolve(k, schedule=attrs.evolve(k.schedule, layouts=layouts)))


def test_an_unconverted_move_in_the_ir_is_refused_not_miscompiled():
    """IR text with a conversion removed by hand (the printed kernel, edited) is refused at lowering."""
    k = run(TILE_PIPELINE, add_row.trace(*_args(128, 8, 128)))
    text = pretty(k)
    assert "%16 = add %12, %15" in text
    stripped = parse(text.replace("%16 = add %12, %15", "%16 = add %x, %15"))
    with pytest.raises(UnsupportedConstructError, match="insert_conversions must run before lower_tiles"):
        lower_tiles(stripped)


@metile.kernel
def normalize(X, Y, n):
    """Two reductions of a loaded row to scalars, broadcast back over it: nothing is read at another thread's
    elements (a scalar is every thread's)."""
    offs = metile.arange(0, 256)
    x = metile.load(X + offs, mask=offs < n)
    mean = metile.sum(x) / n
    rstd = 1.0 / metile.sqrt(metile.sum((x - mean) * (x - mean)) / n + 1.0)
    metile.store(Y + offs, (x - mean) * rstd, mask=offs < n)


def _before_pass(kernel, *args):
    return run(TILE_PIPELINE[:TILE_PIPELINE.index(insert_conversions)], kernel.trace(*args))


def test_a_kernel_with_nothing_to_move_is_answered_from_its_scan_without_a_walk(monkeypatch):
    """The scan the run already keeps says there is no transpose, permute, join, take, broadcast of a tile, n-D
    reduction or tile in other runs, so the pass returns the kernel itself (its analyses stay valid for the
    lowering) without walking it: the walk is made to fail here."""
    import metile.rewrite.conversions as conversions

    for k in (_before_pass(normalize, *_args(256, 256), 256), _before_pass(scale, *_args(256, 256), 256)):
        ctx = PassContext()
        found = scan(k, ctx.analyses)
        with monkeypatch.context() as m:
            m.setattr(conversions, "_Rewriter", None)
            assert insert_conversions(k, ctx) is k
        assert scan(k, ctx.analyses) is found
        assert not conversions.may_move(found, k.schedule.layouts, k.plan.vector_width)
        # and the walk agrees: it changes nothing either
        body = conversions._Rewriter(conversions.ConvertFacts(k.schedule.layouts, value_defs(found), {},
                                                              k.plan.vector_width)).stmts(
            k.body, conversions.reading(False, k.plan.threads, 0))
        assert body is k.body


@metile.kernel
def normalize_t(X, Y, n):
    """`normalize` over an 8x32 tile, stored transposed: the same scalar divisions by `n` in two statements (equal
    values, distinct objects), and a transpose to convert."""
    r, c = metile.arange(0, 8), metile.arange(0, 32)
    x = metile.load(X + r[:, None] * 32 + c[None, :])
    mean = metile.sum(metile.reshape(x, (256,))) / n
    rstd = 1.0 / metile.sqrt(metile.sum(metile.reshape((x - mean) * (x - mean), (256,))) / n + 1.0)
    metile.store(Y + c[:, None] * 8 + r[None, :], metile.trans((x - mean) * rstd))


@pytest.mark.parametrize("kernel, args", [(softmax_t, _args(256, 256)), (add_row, _args(128, 8, 128)),
                                          (normalize_t, (*_args(256, 256), 256))])
def test_a_kernel_with_moves_keeps_every_statement_that_has_none(kernel, args):
    """Only the statements reading a converted tile are rebuilt: the others are the same objects, so equal values
    elsewhere in the kernel are not swapped in for them."""
    k = _before_pass(kernel, *args)
    out = insert_conversions(k)
    assert len(out.body) == len(k.body)
    for before, after in zip(k.body, out.body):
        moves = any(isinstance(n, ConvertLayout) for n in walk(after))
        assert (after is before) != moves, pretty(before)


@metile.kernel
def masked_scores(A, B, Mask, C, n):
    """A product's result selected by a loaded mask and stored under a mask of rows: the store is computed on the
    lanes of the product's matrices (`pointwise_mma`), which read the mask (held in registers) through scratch."""
    r, k = metile.arange(0, 16), metile.arange(0, 16)
    a = metile.load(A + r[:, None] * 16 + k[None, :])
    b = metile.load(B + k[:, None] * 16 + r[None, :])
    m = metile.load(Mask + r[:, None] * 16 + r[None, :])
    s = metile.where(m > 0.0, metile.dot(a, b) * 0.5, -1.0e30)
    metile.store(C + r[:, None] * 16 + r[None, :], s, mask=r[:, None] < n)


def test_a_product_selected_by_a_register_tile_is_stored_from_its_matrices():
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(256).astype(np.float16) for _ in range(2))
    mask = (rng.random(256) < 0.5).astype(np.float32)
    c = np.zeros(256, np.float32)
    masked_scores[(1,)](a, b, mask, c, 12, num_simdgroups=1)
    want = np.where(mask.reshape(16, 16) > 0, (a.reshape(16, 16).astype(np.float32)
                                                @ b.reshape(16, 16).astype(np.float32)) * 0.5, -1.0e30)
    np.testing.assert_allclose(c.reshape(16, 16)[:12], want[:12], rtol=1e-3, atol=1e-3)
    assert not c.reshape(16, 16)[12:].any()
