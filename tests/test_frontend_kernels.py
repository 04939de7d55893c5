"""The frontend on the language reference's kernels: the Tile IR they trace to verifies and has the
expected structure (loops, carried values, loads, stores, dot)."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import metile
from metile.frontend.errors import LoweringUnavailableError, OutsideKernelError
from metile.frontend.replay import statement_io
from metile.ir import For, If, Kernel, Let, Load, Store, While, pretty, verify, walk
from metile.ir.ops import BinOp, Stage
from metile.ir.values import Binary
from tests.frontend_kernels import future_mod, other_mod

F32 = np.zeros(16, np.float32)


@metile.kernel
def vec_add(A, B, C, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    a = metile.load(A + offs, mask=live)
    b = metile.load(B + offs, mask=live)
    metile.store(C + offs, a + b, mask=live)


@metile.kernel
def softmax_rows(X, Y, n_cols, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    run_max = -3.0e38
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        run_max = metile.maximum(run_max, metile.where(ok, x, -3.0e38))
    row_max = metile.max(run_max)
    run_sum = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        run_sum = run_sum + metile.where(ok, metile.exp(x - row_max), 0.0)
    denom = metile.sum(run_sum)
    for c0 in metile.tile_range(0, n_cols, BLOCK, num_stages=2):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        metile.store(Y + row * n_cols + cols, metile.exp(x - row_max) / denom, mask=ok)


@metile.kernel
def matmul(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


@metile.kernel
def layernorm(X, W, Bias, Y, n_cols, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    acc = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        acc = acc + metile.load(X + row * n_cols + cols, mask=cols < n_cols)
    mean = metile.sum(acc) / n_cols
    sq = 0.0
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        d = metile.where(ok, x - mean, 0.0)
        sq = sq + d * d
    rstd = 1.0 / metile.sqrt(metile.sum(sq) / n_cols + eps)
    for c0 in metile.tile_range(0, n_cols, BLOCK):
        cols = c0 + metile.arange(0, BLOCK)
        ok = cols < n_cols
        x = metile.load(X + row * n_cols + cols, mask=ok)
        w = metile.load(W + cols, mask=ok)
        b = metile.load(Bias + cols, mask=ok)
        metile.store(Y + row * n_cols + cols, (x - mean) * rstd * w + b, mask=ok)


@metile.kernel
def unrolled(X, Y, LOG2N: metile.constexpr, BLOCK: metile.constexpr, NEG: metile.constexpr):
    t = metile.arange(0, BLOCK)
    v = metile.load(X + t)
    for s in range(LOG2N):
        h = 1 << s
        if h < 2:
            v = v + 1.0
        else:
            v = v * 2.0
    if NEG:
        v = -v
    metile.store(Y + t, v)


@metile.kernel
def runtime_branch(X, Y, n, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = metile.arange(0, BLOCK)
    scale = 1.0
    if pid * BLOCK < n:
        scale = 2.0
        extra = 3
    else:
        extra = pid
    i = 1
    while i < n:
        i = i * 2
    x = metile.load(X + offs)
    metile.store(Y + offs, x * scale + extra + i)


@metile.kernel
def int_ops(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    q = (offs - n) // 3
    r = (offs - n) % 3
    rows = offs[:, None] + offs[None, :]
    metile.store(Y + offs, q + r + metile.sum(rows, axis=0) + (offs ^ 1) + (offs << 2) + (offs & 7))


def _check(k: Kernel) -> str:
    assert k.stage is Stage.TILE
    verify(k)
    return pretty(k)


def test_vector_add():
    k = vec_add.trace(F32, F32, F32, 16, BLOCK=256)
    text = _check(k)
    assert [p.name for p in k.params] == ["A", "B", "C", "n"] and dict(k.meta) == {"BLOCK": 256}
    assert "%a = load" in text and "mask %live" in text and "store" in text
    assert sum(isinstance(n, Load) for n in walk(k)) == 2


def test_softmax_three_passes():
    k = softmax_rows.trace(F32, F32, 300, BLOCK=256)
    text = _check(k)
    loops = [s for s in k.body if isinstance(s, For)]
    assert len(loops) == 3
    assert [len(lp.carried) for lp in loops] == [1, 1, 0] and loops[2].num_stages == 2
    assert str(loops[0].carried[0].type) == "tile<256xf32>"  # widened from the Python float -3e38
    assert "reduce max" in text and "reduce sum" in text


def test_gemm_dot_in_tile_range():
    k = matmul.trace(F32, F32, F32, 64, 64, 64, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    text = _check(k)
    (loop,) = [s for s in k.body if isinstance(s, For)]
    assert str(loop.carried[0].type) == "tile<32x32xf32>"
    assert "dot %a, %b : tile<32x32xf32>" in text and "expand_dims" in text
    last = k.body[-1]   # the unbounded tile_store, clipped to C: plain where the tile is inside, masked elsewhere
    assert isinstance(last, If) and isinstance(last.then[0], Store) and last.then[0].mask is None
    assert last.orelse[0].mask is not None and [p.length_of for p in k.params[-3:]] == [0, 1, 2]


def test_gemm_f16_inputs_accumulate_f32():
    h = np.zeros(4, np.float16)
    k = matmul.trace(h, h, F32, 64, 64, 64, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    assert "load %" in _check(k) and str(k.params[0].type) == "ptr<f16, device>"


def test_layernorm():
    k = layernorm.trace(F32, F32, F32, F32, 300, 1e-5, BLOCK=128)
    text = _check(k)
    assert sum(isinstance(s, For) for s in k.body) == 3
    assert "sqrt" in text and str(k.params[5].type) == "f32"


def test_constexpr_if_and_for_are_resolved_at_trace_time():
    k = unrolled.trace(F32, F32, LOG2N=3, BLOCK=32, NEG=True)
    text = _check(k)
    assert not any(isinstance(n, (For, If)) for n in walk(k))
    assert text.count(" mul ") == 2 and text.count(" add ") == 1 and "neg" in text
    assert "neg" not in _check(unrolled.trace(F32, F32, LOG2N=3, BLOCK=32, NEG=False))


def test_runtime_if_and_while():
    k = runtime_branch.trace(F32, F32, 100, BLOCK=64)
    text = _check(k)
    (branch,) = [s for s in k.body if isinstance(s, If)]
    assert [str(v.type) for v in branch.results] == ["f32", "i32"]
    (loop,) = [s for s in k.body if isinstance(s, While)]
    assert [v.name for v in loop.carried] == ["i"]
    assert "while" in text


def test_floor_division_and_broadcasting():
    text = _check(int_ops.trace(F32, np.zeros(4, np.int32), 5, BLOCK=16))
    assert "floordiv" in text and "mod" in text and "expand_dims" in text and "reduce sum" in text
    assert "xor" in text and "shl" in text


def test_future_annotations_module():
    k = future_mod.scale.trace(F32, F32, 16, 0.5, BLOCK=64, TWICE=True)
    assert [p.name for p in k.params] == ["X", "Out", "n", "alpha"]
    assert dict(k.meta) == {"BLOCK": 64, "TWICE": 1}
    assert _check(k).count("mul") >= 3


def test_cache_key_and_cache():
    args = (F32, F32, 16, 0.5)
    a = future_mod.scale.cache_key(*args, BLOCK=64)
    b = other_mod.scale.cache_key(*args, BLOCK=64)
    assert a != b
    assert a != future_mod.scale.cache_key(*args, BLOCK=128)
    assert a != future_mod.scale.cache_key(np.zeros(4, np.float16), F32, 16, 0.5, BLOCK=64)
    assert future_mod.scale.trace(*args, BLOCK=64) is future_mod.scale.trace(*args, BLOCK=64)


def test_locations_point_at_source():
    k = vec_add.trace(F32, F32, F32, 16, BLOCK=256)
    store = k.body[-1]
    assert store.loc.file.endswith("test_frontend_kernels.py")
    import inspect
    first = inspect.getsourcelines(vec_add.fn)[1]
    assert store.loc.line == first + 6 and store.loc.col == 4
    assert any(isinstance(s, Let) and s.var.name == "offs" for s in k.body)


@metile.kernel
def divergent_barrier(X, BLOCK: metile.constexpr):
    t = metile.thread_id()
    tmp = metile.shared(BLOCK)
    if t < 5:
        metile.barrier()
    metile.store(X + t, metile.load(tmp + t))


def test_launch_refuses_what_cannot_be_compiled_correctly_at_its_line():
    x = np.zeros(32, np.float32)
    with pytest.raises(LoweringUnavailableError, match="depends on the thread") as info:
        divergent_barrier[(1,)](x, BLOCK=32)
    import inspect
    lines, first = inspect.getsourcelines(divergent_barrier.fn)
    assert info.value.loc.line == first + next(i for i, ln in enumerate(lines) if "metile.barrier()" in ln)
    assert "metile.where" in str(info.value)


def test_language_outside_kernel():
    with pytest.raises(OutsideKernelError, match=r"metile.load\(\) can only be used inside a @metile.kernel"):
        metile.load(None)
    assert metile.cdiv(10, 4) == 3 and metile.next_power_of_2(17) == 32


def test_dot_with_accumulator_is_add():
    k = matmul.trace(F32, F32, F32, 64, 64, 64, BLOCK_M=16, BLOCK_N=16, BLOCK_K=8)
    (loop,) = [s for s in k.body if isinstance(s, For)]
    assert isinstance(loop.yields[0], (Binary,)) or loop.yields[0].name.startswith("acc")
    assert any(isinstance(n, Binary) and n.op is BinOp.ADD for n in walk(k))


def test_kernel_defined_inside_a_function_sees_its_closure():
    import metile as mt  # a local name: only the closure knows it

    @mt.kernel
    def scale(X, Y, n, BLOCK: mt.constexpr):
        offs = mt.program_id(0) * BLOCK + mt.arange(0, BLOCK)
        mt.store(Y + offs, mt.load(X + offs, mask=offs < n) * 2.0, mask=offs < n)

    k = scale.trace(F32, F32.copy(), 16, BLOCK=16)
    assert [p.name for p in k.params] == ["X", "Y", "n"]


@pytest.mark.parametrize("source", [
    "x = a + b * c", "a, (b, c), d = f(e)[g]", "y = [i for i in r if i > k]", "z = (w := q) + w",
    "x += y", "f(*a, k=v, **m)", "d = {**m, 'k': v}", "s.t = u[v:w]", "global g, h", "assert p, msg",
    "for i in r:\n    t = i + t", "if c:\n    a = 1\nelse:\n    (b, a) = 2, 3",
])
def test_statement_names_come_in_ast_walk_order(source):
    """The names a statement reads and assigns, as `ast.walk` meets them (the order of carried variables); the
    variables of a comprehension are its own, neither read nor assigned by the statement."""
    stmt = ast.parse(source).body[0]
    reads: dict[str, None] = {}
    writes: dict[str, None] = {}
    own = {id(m) for n in ast.walk(stmt) if isinstance(n, ast.comprehension) for m in ast.walk(n.target)}
    for n in ast.walk(stmt):
        if isinstance(n, ast.Name) and id(n) not in own:
            (writes if isinstance(n.ctx, ast.Store) else reads)[n.id] = None
    if isinstance(stmt, ast.AugAssign):
        reads[stmt.target.id] = None
    assert statement_io(stmt) == (tuple(reads), tuple(writes))
