"""Constructs the lowering cannot compile correctly are refused at the user's line with a clear message,
never compiled into a kernel that hangs or computes something else."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import metile
from metile.frontend.errors import LoweringUnavailableError

F32 = np.zeros(256, np.float32)


def line_of(kern, text: str) -> int:
    lines, first = inspect.getsourcelines(kern.fn)
    return first + next(i for i, ln in enumerate(lines) if text in ln)


@metile.kernel
def barrier_in_role(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    with metile.simdgroup_role(role=0, num_roles=2):
        metile.barrier()
    metile.store(X + offs, 1.0)


@metile.kernel
def reduction_in_role(X, Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    with metile.simdgroup_role(role=0, num_roles=2, num_sgs=2):
        metile.store(Out, metile.sum(metile.load(X + offs)))
    with metile.simdgroup_role(role=1, num_roles=2, num_sgs=2):
        metile.store(Out + 1, 0.0)


@metile.kernel
def reduction_under_thread_branch(X, Out, BLOCK: metile.constexpr):
    t = metile.thread_id()
    offs = metile.arange(0, BLOCK)
    if t < 3:
        metile.store(Out + t, metile.sum(metile.load(X + offs)))


@metile.kernel
def simd_reduction_under_thread_branch(X, Out, BLOCK: metile.constexpr):
    t = metile.thread_id()
    x = metile.load(X + metile.arange(0, BLOCK))
    if t < 8:
        metile.store(Out + t, metile.sum(x))  # one simdgroup: a simd_sum, whose inactive lanes would not count


@metile.kernel
def shuffle_under_thread_branch(X, Out, BLOCK: metile.constexpr):
    t = metile.thread_id()
    v = metile.load(X + t)
    if t < 8:
        metile.store(Out + t, metile.simd_shuffle_xor(v, 16))


@metile.kernel
def broadcast_in_thread_loop(X, Out, BLOCK: metile.constexpr):
    t = metile.thread_id()
    v = metile.load(X + t)
    acc = 0.0
    i = 0
    while i < t:
        acc = acc + metile.simd_broadcast(v, 0)
        i = i + 1
    metile.store(Out + t, acc)


@metile.kernel
def dot_under_thread_branch(A, B, C, BLOCK: metile.constexpr):
    a = metile.tile_load(A, 0, 0, 8, (8, 8))
    b = metile.tile_load(B, 0, 0, 8, (8, 8))
    if metile.thread_id() < 4:
        metile.tile_store(C, 0, 0, 8, metile.dot(a, b), (8, 8))


@metile.kernel
def barrier_in_thread_while(X, Out, BLOCK: metile.constexpr):
    t = metile.thread_id()
    buf = metile.shared(BLOCK)
    v = metile.load(X + t)
    while v < 100.0:  # each thread leaves the loop after its own number of turns
        metile.store(buf + t, v)
        metile.barrier()
        v = v + metile.load(buf + (BLOCK - 1 - t)) + 1.0
    metile.store(Out + t, v)


@metile.kernel
def thread_level_without_block(X):
    t = metile.thread_id()
    metile.store(X + t, 1.0)


@metile.kernel
def too_many_threads(X, BLOCK: metile.constexpr):
    t = metile.thread_id()
    metile.store(X + t, 1.0)


@metile.kernel
def per_thread_value_out_of_role(X, BLOCK: metile.constexpr):
    t = metile.thread_id()
    with metile.simdgroup_role(role=0, num_roles=2):
        mine = metile.load(X + t) * 2.0
    with metile.simdgroup_role(role=1, num_roles=2):
        other = 1.0
    metile.store(X + t, mine + other)


CASES = [
    (barrier_in_role, (F32,), {"BLOCK": 128}, "metile.barrier()", "cannot be placed inside simdgroup_role"),
    (reduction_in_role, (F32, F32), {"BLOCK": 128}, "metile.sum(", "cannot be placed inside simdgroup_role"),
    (reduction_under_thread_branch, (F32, F32), {"BLOCK": 64}, "metile.sum(", "depends on the thread's lane"),
    (simd_reduction_under_thread_branch, (F32, F32), {"BLOCK": 32}, "metile.sum(",
     r"this reduction is a simdgroup collective, .*depends on the thread's lane \(line \d+\)"),
    (shuffle_under_thread_branch, (F32, F32), {"BLOCK": 32}, "metile.simd_shuffle_xor(",
     "metile.simd_shuffle_xor is a simdgroup collective"),
    (broadcast_in_thread_loop, (F32, F32), {"BLOCK": 32}, "metile.simd_broadcast(",
     "metile.simd_broadcast is a simdgroup collective"),
    (dot_under_thread_branch, (F32, F32, F32), {"BLOCK": 32}, "metile.dot(a, b)", "this dot is a simdgroup collective"),
    (barrier_in_thread_while, (F32, F32), {"BLOCK": 64}, "metile.barrier()",
     r"needs a barrier, but it runs under control flow that depends on the thread \(line \d+\)"),
    (thread_level_without_block, (F32,), {}, "metile.thread_id()", "BLOCK constexpr"),
    (too_many_threads, (F32,), {"BLOCK": 2048}, None, "2048 threads"),
    (per_thread_value_out_of_role, (F32,), {"BLOCK": 64}, "with metile.simdgroup_role(role=0",
     "assigned in this simdgroup_role block differs between threads"),
]


@pytest.mark.parametrize(("kern", "args", "consts", "text", "message"), CASES, ids=[c[0].fn.__name__ for c in CASES])
def test_refused_at_the_line(kern, args, consts, text, message):
    with pytest.raises(LoweringUnavailableError, match=message) as info:
        kern[(1,)](*args, **consts)
    err = info.value
    if text is not None:
        assert err.loc.line == line_of(kern, text)
    assert str(err).startswith(f"{err.loc.file}:{err.loc.line}:")


def test_reductions_inside_a_one_simdgroup_role_need_no_barrier():
    @metile.kernel
    def role_sum(X, Out, BLOCK: metile.constexpr):
        offs = metile.arange(0, BLOCK)
        with metile.simdgroup_role(role=1, num_roles=2, num_sgs=1):
            metile.store(Out, metile.sum(metile.load(X + offs)))
        with metile.simdgroup_role(role=0, num_roles=2, num_sgs=1):
            metile.store(Out + 1, metile.max(metile.load(X + offs)))

    x = np.arange(128, dtype=np.float32) - 1000.0
    out = np.zeros(2, np.float32)
    role_sum[(1,)](x, out, BLOCK=128)
    np.testing.assert_allclose(out, [x.sum(), x.max()])


def test_simd_collectives_under_a_uniform_branch_still_run():
    """A condition every thread agrees on (here a scalar argument) keeps whole simdgroups together."""

    @metile.kernel
    def uniform(X, Out, n, BLOCK: metile.constexpr):
        t = metile.thread_id()
        v = metile.load(X + t)
        x = metile.load(X + metile.arange(0, BLOCK))
        if n > 4:
            metile.store(Out + t, metile.simd_shuffle_xor(v, 1) + metile.sum(x))

    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    uniform[(1,)](x, out, 5, BLOCK=32)
    np.testing.assert_array_equal(out, (np.arange(32) ^ 1) + x.sum())


def test_a_while_loop_on_a_uniform_condition_may_carry_per_thread_values_across_barriers():
    """Every thread takes the same number of turns when the condition reads only uniform values, whatever else
    the loop carries."""

    @metile.kernel
    def mirror_sums(X, Out, n, BLOCK: metile.constexpr):
        t = metile.thread_id()
        buf = metile.shared(BLOCK)
        v = metile.load(X + t)
        k = 0
        while k < n:
            metile.store(buf + t, v)
            metile.barrier()
            v = v + metile.load(buf + (BLOCK - 1 - t))
            metile.barrier()
            k = k + 1
        metile.store(Out + t, v)

    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    mirror_sums[(1,)](x, out, 3, BLOCK=64)
    expected = x.astype(np.float64)
    for _ in range(3):
        expected = expected + expected[::-1]
    np.testing.assert_array_equal(out, expected)


@metile.kernel
def per_simdgroup_loop(X, Out, n, DIV: metile.constexpr, BLOCK: metile.constexpr):
    sg = metile.thread_id() // DIV
    acc = 0.0
    for i in metile.tile_range(sg, n, BLOCK // 32):
        acc = acc + metile.simd_shuffle_xor(metile.load(X + i), 1)
    metile.store(Out + metile.thread_id(), acc)


def test_a_collective_under_control_flow_every_lane_of_a_simdgroup_agrees_on_runs():
    """`thread_id() // 32` is the simdgroup's index: a loop starting there runs the same iterations on every lane
    of a simdgroup, so the shuffle inside is legal (the original meTile's decode attention does this); with
    `// 16`, two halves of a simdgroup run different iterations and the shuffle is refused."""
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(64, np.float32)
    per_simdgroup_loop[(1,)](x, out, 8, DIV=32, BLOCK=64)
    metile.synchronize()
    expect = [x[sg::2].sum() for sg in (0, 1)]   # the lane's own element and its neighbour's are the same load
    assert (out[:32] == expect[0]).all() and (out[32:] == expect[1]).all()
    with pytest.raises(LoweringUnavailableError, match="depends on the thread's lane"):
        per_simdgroup_loop[(1,)](x, out, 8, DIV=16, BLOCK=64)
