"""`return`, `break` and `continue`, and `and`/`or`/`not` on traced scalars, in metile kernels: each kernel's result
against the same loop computed in Python, the short-circuit of `and`/`or` at run time (the operand not evaluated
would fault), barriers after a `return` (allowed when the condition is the same on every thread, refused when it
is not), and the constructs refused."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.ir.node import walk
from metile.ir.stmts import If

pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def sum_live_programs(X, Y, n_programs, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    if pid >= n_programs:
        return
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(Y + pid, metile.sum(x * x))   # a reduction after the return: barriers all threads reach


def test_an_early_return_on_the_program_id_skips_the_rest_and_keeps_the_reduction_after_it():
    x = np.random.default_rng(0).standard_normal(4 * 64).astype(np.float32)
    y = np.full(4, -1.0, np.float32)
    sum_live_programs[(4,)](x, y, 2, BLOCK=64, num_simdgroups=2)
    np.testing.assert_allclose(y[:2], (x.reshape(4, 64)[:2] ** 2).sum(1), rtol=1e-5)
    assert list(y[2:]) == [-1.0, -1.0]


@metile.kernel
def first_above(X, Out, n, t):
    for i in metile.tile_range(0, n):
        if metile.load(X + i) > t:
            metile.store(Out, i)
            return
    metile.store(Out, -1)


@pytest.mark.parametrize("t, want", [(2.5, 3), (-10.0, 0), (100.0, -1)])
def test_a_return_inside_a_runtime_loop_ends_the_kernel(t, want):
    x = np.array([0, 1, 2, 3, 4, 5], np.float32)
    out = np.full(1, -7, np.int32)
    first_above[(1,)](x, out, 6, t)
    assert out[0] == want


@metile.kernel
def exits_in_loops(X, Out, n, m):
    acc = 0.0
    count = 0
    for i in metile.tile_range(0, n):
        v = metile.load(X + i)
        if v < 0.0:
            break
        if v == 0.0:
            continue
        acc += v
        count += 1
    inner = 0
    for r in metile.tile_range(0, m):         # an inner break ends only the inner loop
        for c in metile.tile_range(0, n):
            if c > r:
                break
            inner += 1
    j = 0
    while True:                               # `while True` with a break runs on the device
        if j >= n or not (metile.load(X + j) < 5.0):
            break
        j += 1
    k = 0
    while k < n:
        k += 1
        if k % 2 == 0:
            continue
        count += 100
    metile.store(Out, acc)
    metile.store(Out + 1, count * 1.0)
    metile.store(Out + 2, inner * 1.0)
    metile.store(Out + 3, j * 1.0)


def exits_in_loops_reference(x: np.ndarray, n: int, m: int) -> list[float]:
    acc, count = 0.0, 0
    for i in range(n):
        if x[i] < 0:
            break
        if x[i] == 0:
            continue
        acc += x[i]
        count += 1
    inner = sum(min(r + 1, n) for r in range(m))
    j = 0
    while j < n and x[j] < 5.0:
        j += 1
    count += 100 * ((n + 1) // 2)
    return [acc, count, inner, j]


@pytest.mark.parametrize("values", [[1, 2, 0, 3, -1, 7], [1, 2, 3, 4, 6, 0], [0, 0, 0, 0, 0, 0], [-1, 2, 3, 4, 5, 6]])
def test_break_and_continue_in_runtime_for_and_while_loops(values):
    x = np.array(values, np.float32)
    out = np.zeros(4, np.float32)
    exits_in_loops[(1,)](x, out, 6, 4)
    assert list(out) == exits_in_loops_reference(x, 6, 4)


@metile.kernel
def unrolled_break(X, Out, N: metile.constexpr):
    total = 0.0
    for i in metile.static_range(N):    # unrolled: the break on a traced value guards the later iterations
        v = metile.load(X + i)
        if v > 10.0:
            break
        total += v
    for i in range(N):                  # a break decided while tracing stops the unrolling
        if i == 2:
            break
        total += 1000.0
    metile.store(Out, total)


def test_break_in_unrolled_loops():
    x = np.array([1, 2, 30, 4], np.float32)
    out = np.zeros(1, np.float32)
    unrolled_break[(1,)](x, out, N=4)
    assert out[0] == 3 + 2000


@metile.kernel
def short_circuit(X, Out, n, i):
    # `i < n` false: the load of X + i is never evaluated (it would fault past the array)
    if i < n and metile.load(X + i) > 0.0:
        metile.store(Out, 1)
    else:
        metile.store(Out, 2)
    if i >= n or metile.load(X + i) > 0.0:
        metile.store(Out + 1, 1)
    else:
        metile.store(Out + 1, 2)
    ok = not (i < n)
    metile.store(Out + 2, ok.to(metile.int32))


@pytest.mark.parametrize("i, want", [(1, [1, 1, 0]), (0, [2, 2, 0]), (4, [2, 1, 1]), (100, [2, 1, 1])])
def test_and_or_short_circuit_on_traced_scalars(i, want):
    x = np.array([-1, 3, 4, 5], np.float32)
    out = np.zeros(3, np.int32)
    short_circuit[(1,)](x, out, 4, i, sanitize=True)
    assert list(out) == want


@metile.kernel
def assigned_after_guard(X, Out, n):
    if n > 3:
        if n > 10:
            return
        y = metile.load(X) * 2.0     # first assigned after the guard of the inner return
    else:
        y = 5.0
    metile.store(Out, y)


@pytest.mark.parametrize("n, want", [(2, 5.0), (5, 6.0), (20, -1.0)])
def test_a_variable_first_assigned_after_a_return_is_defined_after_the_branch(n, want):
    out = np.full(1, -1.0, np.float32)
    assigned_after_guard[(1,)](np.array([3.0], np.float32), out, n)
    assert out[0] == want


@metile.kernel
def compile_time_return(X, FLAG: metile.constexpr):
    if FLAG:
        return
    metile.store(X, 1.0)


def test_a_return_decided_while_tracing_leaves_no_branch():
    k = compile_time_return.trace(np.zeros(1, np.float32), FLAG=True)
    assert not k.body
    k = compile_time_return.trace(np.zeros(1, np.float32), FLAG=False)
    assert not any(isinstance(n, If) for s in k.body for n in walk(s))


@metile.kernel
def return_then_barrier(X, Y):
    t = metile.thread_id()
    buf = metile.shared(64)
    x = metile.load(X + t)
    if x > 3.0:
        return
    metile.store(buf + t, x)
    metile.barrier()
    metile.store(Y + t, metile.load(buf + (t + 1) % 32))


def test_a_barrier_after_a_return_that_depends_on_the_thread_is_refused():
    x = np.arange(32, dtype=np.float32)
    with pytest.raises(metile.MetileError, match="depends on the thread") as e:
        return_then_barrier[(1,)](x, np.zeros(32, np.float32), num_simdgroups=1)
    assert e.value.loc.line == return_then_barrier.fn.__code__.co_firstlineno + 8   # the barrier's line


@metile.kernel
def tile_and(X, Out):
    m = metile.arange(0, 4) < 2
    if m and m:
        metile.store(Out, 1.0)


@metile.kernel
def return_in_role(X):
    with metile.simdgroup_role(0, 2):
        return


@pytest.mark.parametrize("kernel, match", [
    (tile_and, "`and` takes scalars.*`&`"),
    (return_in_role, "cannot leave a simdgroup_role block"),
])
def test_refused(kernel, match):
    with pytest.raises(metile.MetileError, match=match):
        kernel.trace(np.zeros(4, np.float32), np.zeros(4, np.float32)) if kernel is tile_and else \
            kernel.trace(np.zeros(4, np.float32))


@metile.kernel
def bool_after_return(X, n):
    pid = metile.program_id(0)
    if pid >= n:
        return
    flag = pid > 2          # a bool first assigned after the guard: the path that left holds False for it
    metile.store(X + pid, metile.where(flag, 1.0, 2.0))


def test_a_bool_first_assigned_after_an_early_return():
    x = np.zeros(8, np.float32)
    bool_after_return[(8,)](x, 6)
    assert x.tolist() == [2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 0.0, 0.0]
