"""The uniformity analyses (`metile.rewrite.uniformity`): a kernel with no source of variation between threads (or
between lanes) answers without walking its statements, and that answer is the one the full propagation gives."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.rewrite import uniformity
from metile.rewrite.scan import scan
from metile.rewrite.uniformity import lane_dependence, lane_varying_names, varying_names


@metile.kernel
def row_sum(X, Out, n_cols, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    acc = metile.zeros((BLOCK,), dtype="f32")
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        acc = acc + metile.load(X + row * n_cols + cols, mask=cols < n_cols)
    metile.store(Out + row, metile.sum(acc))


@metile.kernel
def per_simdgroup(X, Out, n, BLOCK: metile.constexpr):
    t = metile.thread_id()
    sg = t // 32
    lane = metile.simd_lane_id()
    v = metile.load(X + t)
    total = 0.0
    for i in metile.tile_range(sg, n, 4):
        total = total + v * i
    metile.store(Out + t, total + metile.simd_shuffle_xor(v, 1) + lane)


@metile.kernel
def broadcast_only(X, Out, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    v = metile.load(X + pid)
    metile.store(Out + pid, metile.simd_broadcast(v, 0) + metile.simd_sum(v))


def _traced(kernel):
    x, out = np.zeros(256, np.float32), np.zeros(256, np.float32)
    if kernel is row_sum:
        return kernel.trace(x, out, 256, BLOCK=128)
    if kernel is per_simdgroup:
        return kernel.trace(x, out, 64, BLOCK=128)
    return kernel.trace(x, out, BLOCK=64)


def _full_varying(k) -> frozenset[str]:
    facts = scan(k)
    return uniformity._fixpoint(k, lambda names: lambda v: facts.depends(v, names))


def _full_lane_varying(k) -> frozenset[str]:
    ids = uniformity._thread_id_names(k, None)
    return uniformity._fixpoint(k, lambda names: uniformity._lane_test(names, ids))


def test_nothing_varies_without_a_source_and_nothing_is_walked(monkeypatch):
    k = _traced(row_sum)

    def walked(*args):
        raise AssertionError("the statements were walked")

    monkeypatch.setattr(uniformity, "_fixpoint", walked)
    assert varying_names(k) == frozenset()
    assert lane_varying_names(k) == frozenset()
    dep = lane_dependence(k)
    assert not any(dep(s.value) for s in k.body if hasattr(s, "value"))


@pytest.mark.parametrize("kernel", [row_sum, per_simdgroup, broadcast_only])
def test_the_answers_are_those_of_the_full_propagation(kernel):
    k = _traced(kernel)
    assert varying_names(k) == _full_varying(k)
    assert lane_varying_names(k) == _full_lane_varying(k)
    full = uniformity._lane_test(set(_full_lane_varying(k)), uniformity._thread_id_names(k, None))
    dep = lane_dependence(k)
    values = [n for n in scan(k).nodes if isinstance(n, metile.ir.Value)]
    assert [dep(v) for v in values] == [full(v) for v in values]


def test_thread_level_kernels_still_vary():
    k = _traced(per_simdgroup)
    assert {"t", "lane", "v"} <= varying_names(k)
    lanes = lane_varying_names(k)
    assert "lane" in lanes and "sg" not in lanes
    assert "sg" in varying_names(k)
    assert lane_varying_names(_traced(broadcast_only)) == frozenset()
