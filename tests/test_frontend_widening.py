"""A runtime loop whose carried variable starts as a Python number and becomes a tile (`acc = 0.0`, then
`acc = acc + metile.load(...)`) traces its body once: the statement that widens the variable is traced again at once
with the wider type (`metile.frontend.widen`), replaying its operands that do not read the variable. The Tile IR,
and the errors, are those of tracing the body attempt after attempt until the types settle, which these tests
compare against by turning the early widening off."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.frontend import control
from metile.frontend.dialect import METILE
from metile.frontend.widen import Widening
from metile.ir import pretty
from metile.ir.errors import MetileError

F32 = np.zeros(64, np.float32)
I32 = np.zeros(64, np.int32)


@metile.kernel
def layernorm(X, W, Y, n_cols, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    part = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        part = part + metile.load(X + row * n_cols + cols, mask=cols < n_cols)
    mean = metile.sum(part) / n_cols
    sq = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        d = metile.where(ok, metile.load(X + row * n_cols + cols, mask=ok) - mean, 0.0)
        sq = sq + d * d
    rstd = 1.0 / metile.sqrt(metile.sum(sq) / n_cols + eps)
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        metile.store(Y + row * n_cols + cols, (x - mean) * rstd * metile.load(W + cols, mask=ok), mask=ok)


@metile.kernel
def running_max(X, Y, n, BLOCK: metile.constexpr):
    best = -3.0e38
    total = 0                                          # an int joined with f32 tiles: f32
    for c0 in metile.tile_range(0, n, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        x = metile.load(X + cols, mask=cols < n, other=0.0)
        best = metile.maximum(best, x)
        total += x
    metile.store(Y + metile.arange(0, BLOCK), best + total)


@metile.kernel
def scalar_sum(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0                                          # stays a scalar: nothing widens
    for c0 in metile.tile_range(0, n, BLOCK):
        acc += metile.sum(metile.load(X + c0 + metile.arange(0, BLOCK), mask=c0 + metile.arange(0, BLOCK) < n))
    metile.store(Y, acc)


@metile.kernel
def chained(X, Y, n, BLOCK: metile.constexpr):
    a = 0.0
    b = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        x = metile.load(X + c0 + metile.arange(0, BLOCK))
        a = a + x                                      # widens a
        b = b + a * 2.0                                # reads the widened a, widens b
    metile.store(Y + metile.arange(0, BLOCK), a + b)


@metile.kernel
def read_before(X, Y, n, BLOCK: metile.constexpr):
    a = 0.0
    b = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        x = metile.load(X + c0 + metile.arange(0, BLOCK))
        b = b + a                                      # reads a before the statement that widens it
        a = a + x
    metile.store(Y + metile.arange(0, BLOCK), a + b)


@metile.kernel
def written_twice(X, Y, n, BLOCK: metile.constexpr):
    a = 0
    for c0 in metile.tile_range(0, n, BLOCK):
        x = metile.load(X + c0 + metile.arange(0, BLOCK))
        a = a + x                                      # a f32 tile here...
        a = metile.sum(a) * 0.5                        # ...and a f32 scalar at the end of the body
    metile.store(Y, a)


@metile.kernel
def overwritten(X, Y, n, BLOCK: metile.constexpr):
    a = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        a = metile.load(X + c0 + metile.arange(0, BLOCK))   # assigned without being read
        a = a * 2.0
    metile.store(Y + metile.arange(0, BLOCK), a)


@metile.kernel
def nested(X, Y, n, m, BLOCK: metile.constexpr):
    total = 0.0
    for i in metile.tile_range(0, n):
        row = 0.0
        for j in metile.tile_range(0, m, BLOCK):
            row = row + metile.load(X + i * m + j + metile.arange(0, BLOCK))
        total = total + row
    metile.store(Y + metile.arange(0, BLOCK), total)


@metile.kernel
def in_branch(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        x = metile.load(X + c0 + metile.arange(0, BLOCK))
        if c0 > 3:
            acc = acc + x                              # in an `if`: the next attempt widens it
        acc = acc * 1.0
    metile.store(Y + metile.arange(0, BLOCK), acc)


@metile.kernel
def with_continue(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        if c0 == 16:
            continue
        acc = acc + metile.load(X + c0 + metile.arange(0, BLOCK))
    metile.store(Y + metile.arange(0, BLOCK), acc)


@metile.kernel
def while_loop(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0
    i = metile.program_id(0) * 0
    while i < n:
        acc = acc + metile.load(X + i + metile.arange(0, BLOCK))
        i += BLOCK
    metile.store(Y + metile.arange(0, BLOCK), acc)


@metile.kernel
def in_list(X, Y, n, BLOCK: metile.constexpr):
    accs = [0.0, 0.0]
    for c0 in metile.tile_range(0, n, BLOCK):
        x = metile.load(X + c0 + metile.arange(0, BLOCK))
        accs[0] = accs[0] + x
        accs[1] = accs[1] + x * x
    metile.store(Y + metile.arange(0, BLOCK), accs[0] + accs[1])


@metile.kernel
def list_and_scalar(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0
    seen = [0.0]
    for c0 in metile.tile_range(0, n, BLOCK):
        x = metile.load(X + c0 + metile.arange(0, BLOCK))
        acc = acc + x
        seen[0] = seen[0] + acc
    metile.store(Y + metile.arange(0, BLOCK), seen[0])


@metile.kernel
def two_dims(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        r = c0 + metile.arange(0, BLOCK)
        acc = acc + metile.load(X + r[:, None] * BLOCK + metile.arange(0, BLOCK)[None, :])
        acc = acc + metile.load(X + r[:, None] + 1)   # broadcast against the tile acc is
    metile.store(Y + metile.arange(0, BLOCK), metile.sum(acc, axis=1))


@metile.kernel
def dot_loop(A, B, C, K, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK, BLOCK), dtype="f32")   # a tile from the start: no early widening
    for k in metile.tile_range(0, K, BLOCK):
        a = metile.tile_load(A, 0, k, K, (BLOCK, BLOCK))
        b = metile.tile_load(B, k, 0, BLOCK, (BLOCK, BLOCK))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, 0, 0, BLOCK, acc, (BLOCK, BLOCK))


@metile.kernel
def int_then_float(X, Y, n, BLOCK: metile.constexpr):
    acc = 0
    for _c0 in metile.tile_range(0, n, BLOCK):
        acc = acc + 1                                  # an i32 scalar...
        acc = acc + 0.5                                # ...that this widens to f32: the last write decides
    metile.store(Y, acc)


@metile.kernel
def helper_call(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        acc = twice(acc) + metile.load(X + c0 + metile.arange(0, BLOCK))
    metile.store(Y + metile.arange(0, BLOCK), acc)


@metile.func
def twice(v):
    return v * 2.0


CASES = [
    (layernorm, (F32, F32, F32, 64, 1e-5), {"BLOCK": 16}),
    (running_max, (F32, F32, 64), {"BLOCK": 16}),
    (scalar_sum, (F32, F32, 64), {"BLOCK": 16}),
    (chained, (F32, F32, 64), {"BLOCK": 16}),
    (read_before, (F32, F32, 64), {"BLOCK": 16}),
    (written_twice, (F32, F32, 64), {"BLOCK": 16}),
    (overwritten, (F32, F32, 64), {"BLOCK": 16}),
    (nested, (F32, F32, 4, 16), {"BLOCK": 16}),
    (in_branch, (F32, F32, 64), {"BLOCK": 16}),
    (with_continue, (F32, F32, 64), {"BLOCK": 16}),
    (while_loop, (F32, F32, 64), {"BLOCK": 16}),
    (in_list, (F32, F32, 64), {"BLOCK": 16}),
    (list_and_scalar, (F32, F32, 64), {"BLOCK": 16}),
    (two_dims, (np.zeros(4096, np.float32), F32, 64), {"BLOCK": 16}),
    (dot_loop, (np.zeros(256, np.float32), np.zeros(256, np.float32), np.zeros(256, np.float32), 16),
     {"BLOCK": 16}),
    (int_then_float, (F32, F32, 64), {"BLOCK": 16}),
    (helper_call, (F32, F32, 64), {"BLOCK": 16}),
]


def _traced(kernel, args, constexprs) -> str:
    """The Tile IR text (with locations) of a fresh trace, or the error it raised."""
    try:
        return pretty(kernel.trace(*args, **constexprs), locs=True)
    except MetileError as e:
        return f"error: {e}"


@pytest.fixture
def attempts(monkeypatch):
    """Per runtime loop traced (by line), how many times its body was traced."""
    counts: dict[int, int] = {}
    trace_loop = control.ControlFlow.trace_loop

    def counting(self, names, node, trace_body, what, *rest):
        def body():
            counts[node.lineno] = counts.get(node.lineno, 0) + 1
            return trace_body()
        return trace_loop(self, names, node, body, what, *rest)

    monkeypatch.setattr(control.ControlFlow, "trace_loop", counting)
    return counts


@pytest.mark.parametrize(("kernel", "args", "constexprs"), CASES, ids=[c[0].fn.__name__ for c in CASES])
def test_the_ir_is_that_of_tracing_attempt_after_attempt(kernel, args, constexprs, monkeypatch):
    early = _traced(metile.kernel(kernel.fn), args, constexprs)
    monkeypatch.setattr(Widening, "candidates", lambda self, writes: [])
    assert early == _traced(metile.kernel(kernel.fn), args, constexprs)


def test_a_scalar_widened_to_a_tile_is_traced_once(attempts):
    metile.kernel(layernorm.fn).trace(F32, F32, F32, 64, 1e-5, BLOCK=16)
    assert sorted(attempts.values()) == [1, 1, 1]
    for kernel in (running_max, chained, overwritten, while_loop, helper_call):
        attempts.clear()
        metile.kernel(kernel.fn).trace(F32, F32, 64, BLOCK=16)
        assert list(attempts.values()) == [1], kernel.fn.__name__
    attempts.clear()
    metile.kernel(nested.fn).trace(F32, F32, 4, 16, BLOCK=16)   # the inner loop once per attempt at the outer one
    assert list(attempts.values()) == [1, 1]


@pytest.mark.parametrize(("kernel", "args", "constexprs"), CASES, ids=[c[0].fn.__name__ for c in CASES])
def test_widening_early_never_takes_more_attempts(kernel, args, constexprs, attempts, monkeypatch):
    """A variable read before the statement that widens it (`read_before`) or widened in an `if` needs the next
    attempt; one whose type at the end of the body is not the one the statement gave it (`written_twice`) is not
    widened early in the next attempts, whose count then stays as it was."""
    metile.kernel(kernel.fn).trace(*args, **constexprs)
    early = dict(attempts)
    attempts.clear()
    monkeypatch.setattr(Widening, "candidates", lambda self, writes: [])
    metile.kernel(kernel.fn).trace(*args, **constexprs)
    assert early.keys() == attempts.keys()
    assert all(early[line] <= attempts[line] for line in early)


def test_the_operands_that_do_not_read_the_variable_are_replayed(monkeypatch):
    """`part = part + metile.load(...)` is traced again after `part` widened, without tracing the load again."""
    loads = []
    impl = METILE.calls[metile.load]

    def counting(tr, loc, *args):
        loads.append(loc.line)
        return impl(tr, loc, *args)

    monkeypatch.setitem(METILE.calls, metile.load, counting)
    metile.kernel(layernorm.fn).trace(F32, F32, F32, 64, 1e-5, BLOCK=16)
    assert len(loads) == 4 and len(set(loads)) == 4    # each load of the kernel once


@metile.kernel
def unsettled(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        acc = metile.load(X + c0 + metile.arange(0, BLOCK)) + acc[None]   # one more axis each time
    metile.store(Y, metile.sum(metile.sum(acc)))


@metile.kernel
def pointer_then_number(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        acc = X + c0                                   # a pointer in a float's place
    metile.store(Y, acc)


@metile.kernel
def wider_then_refused(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        acc = acc + metile.load(X + c0 + metile.arange(0, BLOCK if acc.shape == () else 3))   # refused as a tile
    metile.store(Y, 1.0)


@metile.kernel
def refused_then_later(X, Y, n, BLOCK: metile.constexpr):
    acc = 0.0
    for c0 in metile.tile_range(0, n, BLOCK):
        acc = acc + metile.load(X + c0 + metile.arange(0, BLOCK if acc.shape == () else 3))
        total = metile.sum(acc, axis=2)                # refused in the first attempt, before the line above is
    metile.store(Y, total)


@pytest.mark.parametrize("kernel", [unsettled, pointer_then_number, wider_then_refused, refused_then_later],
                         ids=["unsettled", "pointer", "refused", "refused-later"])
def test_errors_are_those_of_tracing_attempt_after_attempt(kernel, monkeypatch):
    early = _traced(metile.kernel(kernel.fn), (F32, F32, 64), {"BLOCK": 16})
    assert early.startswith("error: ")
    monkeypatch.setattr(Widening, "candidates", lambda self, writes: [])
    assert early == _traced(metile.kernel(kernel.fn), (F32, F32, 64), {"BLOCK": 16})
