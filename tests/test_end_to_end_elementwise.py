"""End to end on the CPU device: 1-D element-wise kernels traced, lowered by `DEFAULT_PIPELINE`, emitted as
MSL, compiled and launched with `kernel[grid](...)`, compared with numpy."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import metile
from metile.ir import parse, pretty, walk
from metile.ir.ops import BinOp, Stage
from metile.ir.values import Binary, Cast, Var
from metile.rewrite.errors import UnsupportedConstructError
from metile.rewrite.lower import lower_tiles
from metile.rewrite.pipeline import DEFAULT_PIPELINE, run

BLOCK = 256


pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def vec_add(A, B, C, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    a = metile.load(A + offs, mask=live)
    b = metile.load(B + offs, mask=live)
    metile.store(C + offs, a + b, mask=live)


@metile.kernel
def bias_act(X, Bias, Y, n, scale, ACT: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    x = metile.load(X + offs, mask=live) * scale + metile.load(Bias + offs, mask=live)
    if ACT == "relu":
        y = metile.where(x > 0, x, 0.0)
    elif ACT == "relu_max":
        y = metile.maximum(x, 0.0)
    elif ACT == "gelu":
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        e = metile.exp(-2.0 * metile.abs(inner))
        t = (1.0 - e) / (1.0 + e)
        y = 0.5 * x * (1.0 + metile.where(inner < 0, -t, t))
    elif ACT == "gelu_tanh":
        y = 0.5 * x * (1.0 + metile.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    else:
        y = x / (1.0 + metile.exp(-x))
    metile.store(Y + offs, y, mask=live)


@metile.kernel
def floor_ops(A, B, Q, R, n, BLOCK: metile.constexpr):  # any element type: `other=1` converts to it
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    a = metile.load(A + offs, mask=live)
    b = metile.load(B + offs, mask=live, other=1)
    metile.store(Q + offs, a // b, mask=live)
    metile.store(R + offs, a % b, mask=live)


@metile.kernel
def scalar_floor(A, Q, R, n, d, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    a = metile.load(A + offs, mask=live)
    metile.store(Q + offs, a // d, mask=live)
    metile.store(R + offs, a % d, mask=live)


@metile.kernel
def cast_offset(X, Y, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    x = metile.load(X + offs, mask=live)
    metile.store(Y + offs, x * 0.5 + offs, mask=live)


@metile.kernel
def row_sum(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < n)
    total = metile.sum(x)
    metile.store(Out, total)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@pytest.mark.parametrize("n", [1, 1000, 4096])
def test_vector_add_matches_numpy(n):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    c = np.full(n, np.nan, np.float32)
    vec_add[(cdiv(n, BLOCK),)](a, b, c, n, BLOCK=BLOCK)
    np.testing.assert_array_equal(c, a + b)


def test_masked_edges_leave_memory_past_n_alone():
    n, size = 300, 2 * BLOCK
    a, b = np.ones(size, np.float32), np.ones(size, np.float32)
    c = np.full(size, -7.0, np.float32)
    vec_add[(cdiv(n, BLOCK),)](a, b, c, n, BLOCK=BLOCK)
    np.testing.assert_array_equal(c[:n], 2.0)
    np.testing.assert_array_equal(c[n:], -7.0)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


REFERENCE = {
    "relu": lambda x: np.where(x > 0, x, 0.0),
    "relu_max": lambda x: np.maximum(x, 0.0),
    "gelu": gelu_tanh,
    "gelu_tanh": gelu_tanh,
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}


@pytest.mark.parametrize("act", sorted(REFERENCE))
def test_activation_epilogues_match_numpy(act):
    n = 1000
    rng = np.random.default_rng(1)
    x, bias = rng.standard_normal(n, dtype=np.float32) * 3, rng.standard_normal(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    bias_act[(cdiv(n, BLOCK),)](x, bias, y, n, 1.5, ACT=act, BLOCK=BLOCK)
    ref = REFERENCE[act](x.astype(np.float64) * 1.5 + bias)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_integer_floor_division_and_modulo_follow_python():
    vals = np.arange(-9, 10, dtype=np.int32)
    divs = np.array([-4, -3, -2, -1, 1, 2, 3, 5], np.int32)
    a, b = (m.ravel().astype(np.int32) for m in np.meshgrid(vals, divs))
    n = a.size
    q, r = np.zeros(n, np.int32), np.zeros(n, np.int32)
    floor_ops[(cdiv(n, 64),)](a, b, q, r, n, BLOCK=64)
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)


@pytest.mark.parametrize("d", [3, -3])
def test_division_by_a_runtime_scalar(d):
    a = np.arange(-20, 21, dtype=np.int32)
    q, r = np.zeros_like(a), np.zeros_like(a)
    scalar_floor[(1,)](a, q, r, a.size, d, BLOCK=64)
    np.testing.assert_array_equal(q, a // d)
    np.testing.assert_array_equal(r, a % d)


def test_float_floor_division_and_modulo_follow_python():
    a = np.array([-7.5, -3.0, -0.5, 0.5, 3.0, 7.5], np.float32)
    q, r = np.zeros_like(a), np.zeros_like(a)
    scalar_floor[(1,)](a, q, r, a.size, 2.0, BLOCK=8)
    np.testing.assert_array_equal(q, a // np.float32(2.0))
    np.testing.assert_array_equal(r, a % np.float32(2.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float_floor_division_follows_numpy(dtype):
    """numpy's (and Python's) float `//` comes from the remainder, not from flooring the rounded quotient:
    `1.0 // 0.1` is 9, though 1.0 / 0.1 rounds to 10; `a == (a // b) * b + a % b` up to rounding."""
    rng = np.random.default_rng(7)
    special = [(1.0, 0.1), (5.375, -np.inf), (-5.0, np.inf), (np.inf, 2.0), (-4.0, 0.01785), (-129.0, 4.777),
               (7.0, 0.0), (-7.0, 0.0), (0.0, -3.0), (6.0, 3.0), (-6.0, 3.0), (6.0, -0.5)]
    a = np.concatenate([[p[0] for p in special], rng.standard_normal(2000) * 100]).astype(dtype)
    b = np.concatenate([[p[1] for p in special], rng.standard_normal(2000) * 3]).astype(dtype)
    q, r = np.zeros_like(a), np.zeros_like(a)
    floor_ops[(cdiv(a.size, 64),)](a, b, q, r, a.size, BLOCK=64)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(q, np.floor_divide(a, b))
        np.testing.assert_array_equal(r, np.remainder(a, b))


def test_casts_stay_casts():
    n = 100
    x = np.arange(-50, 50, dtype=np.int32)
    y = np.zeros(n, np.float32)
    cast_offset[(1,)](x, y, n, BLOCK=128)
    assert any(isinstance(v, Cast) for v in walk(cast_offset.compile(x, y, n, BLOCK=128).metal_ir))
    np.testing.assert_array_equal(y, x.astype(np.float32) * 0.5 + np.arange(n, dtype=np.float32))


def test_metal_ir_has_no_floor_operators():
    k = run(DEFAULT_PIPELINE, floor_ops.trace(*[np.zeros(4, np.int32)] * 4, 4, BLOCK=64))
    assert k.stage is Stage.METAL and k.plan.threads == 64
    ops = {n.op for n in walk(k) if isinstance(n, Binary)}
    assert BinOp.TRUNCDIV in ops and BinOp.REM in ops
    assert not ops & {BinOp.FLOORDIV, BinOp.MOD}


def _doubler(name: str):
    """A kernel called `name`, doubling `device` into `half` (parameter names that are MSL keywords too)."""

    def body(device, half, n, BLOCK: metile.constexpr):
        offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
        live = offs < n
        metile.store(half + offs, metile.load(device + offs, mask=live) * 2.0, mask=live)

    body.__name__ = body.__qualname__ = name
    return metile.kernel(body)


@pytest.mark.parametrize(("name", "entry"), [("kernel", "mtile_kernel"), ("abs", "mtile_abs"), ("half", "mtile_half")])
def test_kernels_named_like_msl_keywords_or_functions_compile_and_run(name, entry):
    k = _doubler(name)
    x, y = np.arange(-5, 5, dtype=np.float32), np.zeros(10, np.float32)
    assert k.compile(x, y, 10, BLOCK=32).entry == entry
    k[(1,)](x, y, 10, BLOCK=32)
    np.testing.assert_array_equal(y, 2 * x)


def _unicode_module(tmp_path, name: str):
    """A module whose kernel, parameters, constexpr and locals have non-ASCII names; `x\u0301` holds a
    combining mark, which Python allows in identifiers but the IR's word characters do not include."""
    path = tmp_path / f"{name}.py"
    path.write_text(
        "import metile\n"
        "@metile.kernel(debug=True)\n"
        "def café(Aα, Bβ, n, BLOCKΔ: metile.constexpr):\n"
        "    offs = metile.program_id(0) * BLOCKΔ + metile.arange(0, BLOCKΔ)\n"
        "    x\u0301 = metile.load(Aα + offs, mask=offs < n)\n"
        "    δ = x\u0301 * 2.0\n"
        "    metile.store(Bβ + offs, δ + 1.0, mask=offs < n)\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_non_ascii_names_compile_verify_and_run(tmp_path):
    k = _unicode_module(tmp_path, "unicode_kernel").café
    x, y = np.arange(40, dtype=np.float32), np.zeros(40, np.float32)
    k[(2,)](x, y, 40, BLOCKΔ=32)
    np.testing.assert_array_equal(y, 2 * x + 1)
    compiled = k.compile(x, y, 40, BLOCKΔ=32)
    assert compiled.entry == "mtile_cafu00e9" and compiled.msl.isascii()
    tile = compiled.tile_ir
    assert tile.name == "café" and [p.name for p in tile.params][:2] == ["Aα", "Bβ"]
    assert "BLOCKΔ" in tile.meta
    assert parse(pretty(tile)) == tile  # the IR text spells and reads the names back
    names = {n.name for n in walk(tile) if isinstance(n, Var)}
    assert "δ" in names and "x_" in names  # the combining mark became `_`


def test_compile_without_launching():
    x = np.zeros(16, np.float32)
    compiled = vec_add.compile(x, x, x, 16, BLOCK=BLOCK)
    assert "kernel void mtile_vec_add(" in compiled.msl
    assert compiled.entry == "mtile_vec_add" and compiled.threadgroup_memory == 0
    assert compiled.threadgroup_size == compiled.metal_ir.plan.threads == BLOCK // 4
    assert "float4" in compiled.msl  # 256 elements on 64 threads: aligned runs of four move as vectors
    assert compiled.tile_ir.stage is Stage.TILE and compiled.metal_ir.stage is Stage.METAL
    assert vec_add.compile(x, x, x, 16, BLOCK=BLOCK) is compiled
    assert vec_add.compile(x, x, x, 16, BLOCK=128) is not compiled
    names = [p.__name__ for p in metile.DEFAULT_PIPELINE]
    assert names[:2] == ["fold_constants", "skip_inactive"]
    assert names[-2:] == ["lower_tiles", "allocate_threadgroup_memory"]
    assert {"plan_launch", "vectorize_memory", "pad_staging", "multi_buffer"} <= set(names)


def test_row_sum_runs():
    x = np.arange(16, dtype=np.float32) - 20.0
    out = np.zeros(16, np.float32)
    row_sum[(1,)](x, out, 16, BLOCK=16)
    np.testing.assert_allclose(out[0], x.sum())


def test_lower_tiles_refuses_other_stages():
    x = np.zeros(16, np.float32)
    k = vec_add.compile(x, x, x, 16, BLOCK=BLOCK).metal_ir
    with pytest.raises(UnsupportedConstructError, match="takes a Tile IR kernel"):
        lower_tiles(k)


@metile.kernel
def outer(X, Y, BLOCK: metile.constexpr):
    r = metile.arange(0, BLOCK)
    metile.store(Y + r[:, None] * BLOCK + r[None, :], metile.load(X + r)[:, None] + metile.load(X + r)[None, :])


@metile.kernel
def looped(X, n, BLOCK: metile.constexpr):
    for c0 in metile.tile_range(0, n, BLOCK):
        offs = c0 + metile.arange(0, BLOCK)
        metile.store(X + offs, metile.load(X + offs, mask=offs < n) + 1.0, mask=offs < n)


def test_two_d_tiles_and_loops_run():
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(64, np.float32)
    outer[(1,)](x, y, BLOCK=8)
    np.testing.assert_array_equal(y.reshape(8, 8), x[:, None] + x[None, :])
    z = np.arange(50, dtype=np.float32)
    looped[(1,)](z, 50, BLOCK=8)
    np.testing.assert_array_equal(z, np.arange(50) + 1.0)


@metile.kernel
def row_scale(X, Y, n_cols, BLOCK: metile.constexpr):
    cols = metile.arange(0, BLOCK)
    ok = cols < n_cols
    row = metile.program_id(0) * n_cols  # a run-time row length: no access is provably aligned to 4
    x = metile.load(X + row + cols, mask=ok)
    metile.store(Y + row + cols, x * 2.0 + 1.0, mask=ok)


def test_runs_of_four_are_planned_only_when_an_access_moves_as_a_vector():
    x = np.zeros(1024, np.float32)
    vectors = vec_add.compile(x, x, x, 1024, BLOCK=BLOCK)
    assert vectors.metal_ir.plan.vector_width == 4 and vectors.threadgroup_size == BLOCK // 4
    scalars = row_scale.compile(x, x, 300, BLOCK=BLOCK)
    assert scalars.metal_ir.plan.vector_width == 1 and scalars.threadgroup_size == BLOCK  # one element each
    assert "float4" not in scalars.msl


@pytest.mark.parametrize(("n_cols", "block"), [(300, 512), (7, 256), (256, 256), (1000, 1024)])
def test_rows_of_a_run_time_length_match_numpy(n_cols, block):
    rows = 3
    x = np.random.default_rng(n_cols).standard_normal(rows * n_cols).astype(np.float32)
    y = np.full(rows * n_cols + 5, -7.0, np.float32)
    row_scale[(rows,)](x, y, n_cols, BLOCK=block)
    np.testing.assert_allclose(y[:rows * n_cols], x * 2.0 + 1.0, rtol=1e-6)
    assert (y[rows * n_cols:] == -7.0).all()
