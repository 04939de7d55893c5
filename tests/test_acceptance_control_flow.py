"""Acceptance: control flow decided at run time.

- `if` / `elif` / `else` on runtime scalars (a runtime argument, `program_id`), whose results (scalars and
  tiles) are used after the branch, and an `if` without `else`;
- `while` loops on runtime values, with tile and scalar loop-carried variables, including zero iterations;
- `tile_range` loops carrying tiles and scalars (reductions taken inside the loop), with a runtime start,
  with `num_stages=2` giving the same result as `num_stages=1`, and loops that run zero times;
- nested `tile_range` loops with a Python `for` unrolled inside and a runtime `if` holding a store.
"""

from __future__ import annotations

import numpy as np
import pytest

import metile

BLOCK = 128


pytestmark = pytest.mark.usefixtures("on_cpu")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@metile.kernel
def runtime_if(X, Y, Flags, n, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    x = metile.load(X + offs, mask=live)
    if n > 100:
        scale = 2.0
        shift = 1
        v = x * 3.0
    else:
        scale = 0.5
        shift = -1
        v = x - 1.0
    bonus = 0
    if pid % 2 == 1:
        bonus = 10
    if n > 1000:
        level = 3
    elif n > 100:
        level = 2
    else:
        level = 1
    metile.store(Y + offs, v * scale + shift + bonus, mask=live)
    metile.store(Flags + pid, level * 1000 + shift * 100 + bonus)


@metile.kernel
def runtime_while(X, Y, Info, n, steps, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    v = metile.load(X + offs, mask=live)
    i = 0
    p = 1
    while i < steps:
        v = v * 0.5 + 1.0
        p = p * 2
        i = i + 1
    q = 1
    while q < n:
        q = q * 2
    metile.store(Y + offs, v, mask=live)
    metile.store(Info + 0, p)
    metile.store(Info + 1, q)
    metile.store(Info + 2, i)


@metile.kernel
def loop_carried(X, RowSum, Total, Biggest, Count, n_cols, start, BLOCK: metile.constexpr,
                 STAGES: metile.constexpr):
    row = metile.program_id(0)
    acc = 0.0
    total = 0.0
    biggest = -3.0e38
    count = 0
    for c0 in metile.tile_range(start, n_cols, BLOCK, num_stages=STAGES):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        acc = acc + x
        total = total + metile.sum(x)
        biggest = metile.maximum(biggest, metile.max(metile.where(ok, x, -3.0e38)))
        count = count + 1
    metile.store(RowSum + row, metile.sum(acc))
    metile.store(Total + row, total)
    metile.store(Biggest + row, biggest)
    metile.store(Count + row, count)


@metile.kernel
def nested_loops(X, Out, Grand, n_rows, n_cols, ROWS: metile.constexpr, BLOCK: metile.constexpr,
                 REPEAT: metile.constexpr):
    pid = metile.program_id(0)
    grand = 0.0
    for r in metile.tile_range(pid * ROWS, pid * ROWS + ROWS):
        row_acc = 0.0
        for c0 in metile.tile_range(0, n_cols, BLOCK):
            cols = c0 + metile.arange(0, BLOCK)
            ok = (cols < n_cols) & (r < n_rows)
            x = metile.load(X + r * n_cols + cols, mask=ok)
            for rep in range(REPEAT):
                row_acc = row_acc + x * (rep + 1.0)
        s = metile.sum(row_acc)
        if r < n_rows:
            metile.store(Out + r, s)
        grand = grand + s
    metile.store(Grand + pid, grand)


# ---- if


@pytest.mark.parametrize("n", [50, 100, 101, 300, 2000])
def test_runtime_if_results_are_used_after_the_branch(n):
    x = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
    y = np.full(n, np.nan, np.float32)
    programs = cdiv(n, BLOCK)
    flags = np.full(programs, -1, np.int32)
    runtime_if[(programs,)](x, y, flags, n, BLOCK=BLOCK)
    scale, shift, v = (2.0, 1, x * 3.0) if n > 100 else (0.5, -1, x - 1.0)
    bonus = np.where((np.arange(n) // BLOCK) % 2 == 1, 10, 0)
    np.testing.assert_allclose(y, v * np.float32(scale) + shift + bonus, rtol=1e-6, atol=1e-6)
    level = 3 if n > 1000 else 2 if n > 100 else 1
    np.testing.assert_array_equal(flags, level * 1000 + shift * 100 + np.where(np.arange(programs) % 2 == 1, 10, 0))


# ---- while


def halve_and_add(x: np.ndarray, steps: int) -> np.ndarray:
    v = x.copy()
    for _ in range(steps):
        v = v * np.float32(0.5) + np.float32(1.0)
    return v


@pytest.mark.parametrize(("n", "steps"), [(300, 0), (300, 1), (5, 7), (129, 20), (1, 3)])
def test_runtime_while_loops(n, steps):
    x = np.random.default_rng(steps).standard_normal(n, dtype=np.float32) * 10
    y = np.zeros(n, np.float32)
    info = np.full(3, -1, np.int32)
    runtime_while[(cdiv(n, BLOCK),)](x, y, info, n, steps, BLOCK=BLOCK)
    np.testing.assert_allclose(y, halve_and_add(x, steps), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(info, [2**steps, 1 << max(n - 1, 0).bit_length(), steps])


# ---- tile_range with carried values


def run_loop_carried(x: np.ndarray, start: int, stages: int):
    rows, cols = x.shape
    outs = (np.zeros(rows, np.float32), np.zeros(rows, np.float32), np.zeros(rows, np.float32),
            np.full(rows, -1, np.int32))
    loop_carried[(rows,)](x, *outs, cols, start, BLOCK=BLOCK, STAGES=stages)
    return outs


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize(("cols", "start"), [(1000, 0), (128, 0), (300, 37), (77, 0), (64, 64), (10, 20)])
def test_tile_range_carries_tiles_and_scalars(stages, cols, start):
    x = np.random.default_rng(cols + start).standard_normal((3, cols), dtype=np.float32) - 2.0
    row_sum, total, biggest, count = run_loop_carried(x, start, stages)
    part = x[:, start:].astype(np.float64)
    iterations = len(range(start, cols, BLOCK))
    np.testing.assert_allclose(row_sum, part.sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(total, part.sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(biggest, part.max(1) if iterations else np.float32(-3.0e38))
    np.testing.assert_array_equal(count, iterations)


@pytest.mark.parametrize("cols", [1000, 300])
def test_num_stages_2_gives_the_same_result_as_1(cols):
    x = np.random.default_rng(cols).standard_normal((4, cols), dtype=np.float32)
    one, two = run_loop_carried(x, 0, 1), run_loop_carried(x, 0, 2)
    for a, b in zip(one, two):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)


# ---- nested


@pytest.mark.parametrize(("rows", "cols"), [(8, 300), (5, 128), (11, 1), (16, 129)])
def test_nested_runtime_loops(rows, cols):
    per_program = 4
    x = np.random.default_rng(rows * cols).standard_normal((rows, cols), dtype=np.float32)
    programs = cdiv(rows, per_program)
    out = np.full(rows + 1, -7.0, np.float32)
    grand = np.zeros(programs, np.float32)
    nested_loops[(programs,)](x, out, grand, rows, cols, ROWS=per_program, BLOCK=BLOCK, REPEAT=3)
    sums = x.astype(np.float64).sum(1) * 6.0
    np.testing.assert_allclose(out[:rows], sums, rtol=1e-5, atol=1e-4)
    assert out[rows] == -7.0
    padded = np.concatenate([sums, np.zeros(programs * per_program - rows)])
    np.testing.assert_allclose(grand, padded.reshape(programs, per_program).sum(1), rtol=1e-5, atol=1e-3)


@metile.kernel
def count_turns(Out, start, end, STEP: metile.constexpr):
    turns = 0
    last = 0
    for i in metile.tile_range(start, end, STEP):
        turns = turns + 1
        last = i
    metile.store(Out, turns)
    metile.store(Out + 1, last)


@pytest.mark.parametrize(("start", "end", "step"), [(2**31 - 10, 2**31 - 1, 7), (0, 2**31 - 1, 2**30), (0, 10, 3),
                                                    (-(2**31), 2**31 - 1, 2**30 + 1)])
def test_tile_range_near_the_i32_limit_runs_as_range(start, end, step):
    """The loop index never wraps around past 2**31 - 1 (which would loop forever or miscount)."""
    out = np.zeros(2, np.int32)
    count_turns[(1,)](out, start, end, STEP=step)
    r = range(start, end, step)
    np.testing.assert_array_equal(out, [len(r), r[-1]])
