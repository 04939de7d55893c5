"""`plan_staging`: the chunk of k each product stages its operands by is decided on Tile IR before `lower_tiles`,
recorded in the printed IR (`dot ..., chunk 32`), and followed by the lowering; a product beside more of the kernel's
other scratch gets a smaller chunk, and computes what numpy computes."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import metile
from metile.ir import parse, pretty, verify
from metile.ir.errors import MetileError
from metile.ir.tile import Dot
from metile.rewrite.lower import lower_tiles
from metile.rewrite.pipeline import DEFAULT_PIPELINE, TILE_PIPELINE, PipelineError, check_pipeline, run
from metile.rewrite.scan import scan
from metile.rewrite.threadgroup_memory import allocate_threadgroup_memory

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def big_product(A, B, C):
    """`[128, 64] x [64, 128]` in f16: 35 KB staged whole, more than the target's 32 KB."""
    rows, k = metile.arange(0, 128), metile.arange(0, 64)
    a = metile.load(A + rows[:, None] * 64 + k[None, :])
    b = metile.load(B + k[:, None] * 128 + rows[None, :])
    metile.store(C + rows[:, None] * 128 + rows[None, :], metile.dot(a, b))


@metile.kernel
def product_and_exchange(A, B, X, C, Y, N: metile.constexpr):
    """A `[64, 128] x [128, 64]` f16 product (36 KB of f16 staged whole, 18 KB by chunks of 64, 9.5 KB by chunks of
    32), and beside it an `[N, 64]` f32 tile written transposed (handed between threads through f32 scratch, an arena
    of its own: 16 KB for N = 64)."""
    r, c, k = metile.arange(0, 64), metile.arange(0, 64), metile.arange(0, 128)
    a = metile.load(A + r[:, None] * 128 + k[None, :])
    b = metile.load(B + k[:, None] * 64 + c[None, :])
    metile.store(C + r[:, None] * 64 + c[None, :], metile.dot(a, b))
    n = metile.arange(0, N)
    x = metile.load(X + n[:, None] * 64 + c[None, :])
    metile.store(Y + c[:, None] * N + n[None, :], metile.trans(x))


def _chunks(k) -> list:
    return [k.schedule.dots[d].chunk if d in k.schedule.dots else None for d in scan(k).of(Dot)]


def _planned(kernel, *args, **consts):
    return run(TILE_PIPELINE, kernel.trace(*args, **consts))


def _half(*shape, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(np.float16)


def test_the_chunk_is_planned_before_lowering_and_printed():
    x = np.zeros(1, np.float16)
    before = run(TILE_PIPELINE[:-1], big_product.trace(x, x, np.zeros(1, np.float32)))
    assert TILE_PIPELINE[-1].name == "plan_staging" and _chunks(before) == [None]
    after = run(TILE_PIPELINE, big_product.trace(x, x, np.zeros(1, np.float32)))
    text = pretty(after)
    assert after.stage.name == "TILE" and ", chunk 32" in text   # 128 x 40 + 32 x 136 halves: 19 KB, under 24
    assert parse(text) == after
    verify(after, after="plan_staging")


def test_the_lowering_follows_the_recorded_chunk():
    """A chunk written into the plan by hand (16, where the pass chose 32) is the one the lowering stages by: its
    scratch is that of 16 columns of `a` and 16 rows of `b`."""
    x = np.zeros(1, np.float16)
    k = run(TILE_PIPELINE, big_product.trace(x, x, np.zeros(1, np.float32)))
    (d,) = scan(k).of(Dot)
    k16 = attrs.evolve(k, schedule=attrs.evolve(k.schedule, dots=k.schedule.dots.set(
        d, attrs.evolve(k.schedule.dots[d], chunk=16))))
    sizes = [allocate_threadgroup_memory(lower_tiles(kk)).plan.threadgroup_memory for kk in (k, k16)]
    assert sizes[1] < sizes[0] <= 32768


def test_a_product_beside_more_scratch_gets_a_smaller_chunk_and_computes_the_product():
    x = np.zeros(1, np.float16)
    f = np.zeros(1, np.float32)
    alone = _chunks(_planned(product_and_exchange, x, x, f, f, f, N=8))
    crowded = _chunks(_planned(product_and_exchange, x, x, f, f, f, N=64))
    assert (alone, crowded) == ([64], [32])
    a, b = _half(64, 128), _half(128, 64, seed=1)
    xs = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
    c, y = np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float32)
    compiled = product_and_exchange.compile(a, b, xs, c, y, N=64)
    assert compiled.metal_ir.plan.threadgroup_memory <= 32768
    product_and_exchange[(1,)](a, b, xs, c, y, N=64)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(y, xs.T)


def test_a_pipeline_without_the_plan_or_with_a_staging_decision_after_it_is_refused_by_name():
    without = [p for p in DEFAULT_PIPELINE if p.name != "plan_staging"]
    with pytest.raises(PipelineError, match="lower_tiles needs the chunk of k .* add plan_staging before lower_tiles"):
        check_pipeline(without)
    names = [p.name for p in DEFAULT_PIPELINE]
    late = [p for p in DEFAULT_PIPELINE if p.name != "pad_staging"]
    late.insert(names.index("plan_staging"), DEFAULT_PIPELINE[names.index("pad_staging")])
    with pytest.raises(PipelineError, match="pad_staging must run before plan_staging"):
        check_pipeline(late)


def test_the_verifier_refuses_a_chunk_that_does_not_divide_k():
    x = np.zeros(1, np.float16)
    k = run(TILE_PIPELINE, big_product.trace(x, x, np.zeros(1, np.float32)))
    text = pretty(k).replace(", chunk 32", ", chunk 24")
    with pytest.raises(MetileError, match="chunk 24 of a dot over k = 64 is not a multiple of 8 dividing k"):
        verify(parse(text))


@metile.kernel
def tall_product(A, B, C):
    """`[1024, 8] x [8, 8]` in f32: 40 KB staged whole, and k = 8 cannot be staged by smaller chunks."""
    rows, k = metile.arange(0, 1024), metile.arange(0, 8)
    a = metile.load(A + rows[:, None] * 8 + k[None, :])
    b = metile.load(B + k[:, None] * 8 + k[None, :])
    metile.store(C + rows[:, None] * 8 + k[None, :], metile.dot(a, b))


def test_a_product_over_one_step_of_k_is_not_chunked():
    """Its staging is left whole (the kernel is then refused at launch for its threadgroup memory), never given a
    chunk the verifier refuses."""
    x = np.zeros(1, np.float32)
    k = run(TILE_PIPELINE, tall_product.trace(x, x, x), verify_each=True)
    assert _chunks(k) == [None]



@metile.kernel
def product_beside_reductions(A, B, C, R, S, U, V, W, K: metile.constexpr):
    """A product in a loop over k and statements around it, each of which takes scratch for one reason only: a
    reduction of a loaded vector (a heavy value), a tile read through a recomputed name of the product's result, the
    product's result read beside a tile held in registers (written by addresses made from scalars alone); and
    statements that take none (the scalars, the stores of tiles loaded and scaled)."""
    r, c, kk = metile.arange(0, 32), metile.arange(0, 32), metile.arange(0, 16)
    acc = metile.zeros((32, 32), dtype="f32")
    for k0 in metile.tile_range(0, K, 16):
        a = metile.load(A + r[:, None] * K + (k0 + kk)[None, :], mask=(k0 + kk)[None, :] < K)
        b = metile.load(B + (k0 + kk)[:, None] * 32 + c[None, :], mask=(k0 + kk)[:, None] < K)
        acc = metile.dot(a, b, acc)
    total = metile.sum(metile.load(V + r))
    scaled = acc * total
    metile.store(S + r, metile.sum(scaled, axis=1))
    metile.store(R + r, metile.max(acc, axis=1))
    metile.store(U + r[:, None] * 32 + c[None, :], scaled + metile.load(W + r[:, None] * 32 + c[None, :]))
    w = metile.tile_load(W, 0, 0, 32, (32, 32))
    metile.tile_store(W, 0, 0, 32, w * 2.0, (32, 32))
    metile.tile_store(C, 0, 0, 32, acc + w, (32, 32))


@pytest.mark.parametrize("case", ["big_product", "product_beside_reductions"])
def test_statements_skipped_by_the_scan_take_what_the_walk_finds(case, monkeypatch):
    """The survey gives a statement whose values the kernel's scan shows hold nothing that takes scratch an empty use
    without walking it (`_Survey.plain`); with that shortcut turned off, every statement walked, the uses found
    (and so the chunks chosen from them) are the same."""
    from metile.rewrite import staging_plan as sp

    f16, f32 = np.zeros(1, np.float16), np.zeros(1, np.float32)
    kernel = {"big_product": lambda: big_product.trace(f16, f16, f32),
              "product_beside_reductions": lambda: product_beside_reductions.trace(*[f32] * 8, K=64)}[case]
    k = run(TILE_PIPELINE[:-1], kernel())
    found, dots = scan(k), scan(k).of(Dot)
    cands = frozenset(sp._candidates(k, dots, sp._pipelined(k)))

    def uses():
        survey = sp._Survey(k, k.plan.threads, 32768, cands, found)
        return [(u.other, u.planned) for u in survey.uses], survey.own

    skipped = []
    plain = sp._Survey.plain
    monkeypatch.setattr(sp._Survey, "plain", lambda self, roots: skipped.append(plain(self, roots)) or skipped[-1])
    shortcut = uses()
    assert any(skipped) and not all(skipped)   # the kernel has statements of both kinds
    monkeypatch.setattr(sp._Survey, "plain", lambda self, roots: False)
    assert shortcut == uses()


@metile.kernel
def product_beside_index_sum(A, B, C, S):
    """A product, and a reduction of index arithmetic that reads no name (it takes scratch all the same)."""
    r, k = metile.arange(0, 32), metile.arange(0, 32)
    a = metile.load(A + r[:, None] * 32 + k[None, :])
    b = metile.load(B + k[:, None] * 32 + r[None, :])
    metile.store(C + r[:, None] * 32 + r[None, :], metile.dot(a, b))
    metile.store(S, metile.sum(metile.arange(0, 32) * 3))


@pytest.mark.parametrize("case", ["big_product", "product_beside_reductions", "product_beside_index_sum"])
def test_values_the_walk_skips_by_the_scan_add_nothing_it_counts(case, monkeypatch):
    """The survey's walk does not enter a value that the kernel's scan shows holds no product, reduction, scan or
    gather and reads no name whose reads it counts (`_Survey.marked`: products' results in matrices, tiles held in
    registers, recomputed tiles): with every statement walked, the uses found with that shortcut and without it are
    the same, the shortcut skips nodes, and it gives other uses when those names are not marked."""
    from metile.rewrite import staging_plan as sp

    f16, f32 = np.zeros(1, np.float16), np.zeros(1, np.float32)
    kernel = {"big_product": lambda: big_product.trace(f16, f16, f32),
              "product_beside_reductions": lambda: product_beside_reductions.trace(*[f32] * 8, K=64),
              "product_beside_index_sum": lambda: product_beside_index_sum.trace(*[f32] * 4)}[case]
    k = run(TILE_PIPELINE[:-1], kernel())
    found, dots = scan(k), scan(k).of(Dot)
    cands = frozenset(sp._candidates(k, dots, sp._pipelined(k)))
    monkeypatch.setattr(sp._Survey, "plain", lambda self, roots: False)
    visited = []
    children = sp.children
    monkeypatch.setattr(sp, "children", lambda n: visited.append(n) or children(n))

    def uses():
        visited.clear()
        survey = sp._Survey(k, k.plan.threads, 32768, cands, found)
        return [(u.other, u.planned) for u in survey.uses], survey.own, len(visited)

    *shortcut, fewer = uses()
    marked = sp._Survey._marked
    monkeypatch.setattr(sp._Survey, "_marked", lambda self, found: None)
    *walked, every = uses()
    assert shortcut == walked and fewer < every
    if case == "product_beside_reductions":
        monkeypatch.setattr(sp._Survey, "_marked", lambda self, found: marked(self, found) - {
            n for n, lay in k.schedule.layouts.items() if lay.__class__.__name__ in ("Blocked", "Fragments")})
        assert uses()[:2] != walked
