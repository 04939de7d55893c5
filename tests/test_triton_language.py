"""The names of `triton.language` in `@triton.jit` kernels on metile: the functions metile compiles give Triton's
results, every other name of Triton 3.4's `tl` exists and raises `NotSupportedYetError` at the kernel's line, and the
functions refuse to run outside a kernel."""

from __future__ import annotations

import math

import numpy as np
import pytest

import metile.triton as triton
import metile.triton.language as tl
from metile.frontend.errors import KernelTypeError, OutsideKernelError, UnsupportedCallError
from metile.triton.dialect import CALLS, REFUSED
from metile.triton.errors import NotSupportedYetError
from metile.triton.language.extra import libdevice
from tests.triton_kernels import kernel_from_source

pytestmark = pytest.mark.usefixtures("on_cpu")

TRITON_34_NAMES = (
    "PropagateNan TRITON_MAX_TENSOR_NUMEL abs add advance arange argmax argmin associative_scan assume async_task "
    "atomic_add atomic_and atomic_cas atomic_max atomic_min atomic_or atomic_xchg atomic_xor bfloat16 bitonic_merge "
    "block_type broadcast broadcast_to cast cat cdiv ceil clamp const constexpr constexpr_function cos cumprod cumsum "
    "debug_barrier device_assert device_print div_rn dot dot_scaled dtype erf exp exp2 expand_dims extra fdiv flip "
    "float16 float32 float64 float8e4b15 float8e4b8 float8e4nv float8e5 float8e5b16 floor fma full gather histogram "
    "inline_asm_elementwise int1 int16 int32 int64 int8 interleave join load load_tensor_descriptor log log2 "
    "make_block_ptr make_tensor_descriptor math max max_constancy max_contiguous maximum min minimum multiple_of "
    "num_programs pair_uniform_to_normal permute philox philox_impl pi32_t pointer_type program_id rand rand4x "
    "randint randint4x randn randn4x range ravel reduce reduce_or reshape rsqrt sigmoid sin slice softmax sort split "
    "sqrt sqrt_rn static_assert static_print static_range store store_tensor_descriptor sum swizzle2d tensor "
    "tensor_descriptor tensor_descriptor_type topk trans tuple tuple_type uint16 uint32 uint64 uint8 "
    "uint_to_uniform_float umulhi view void where xor_sum zeros zeros_like").split()


def test_every_name_of_triton_language_exists():
    missing = [n for n in TRITON_34_NAMES if not hasattr(tl, n)]
    assert not missing
    functions = [getattr(tl, n) for n in TRITON_34_NAMES if callable(getattr(tl, n)) and getattr(tl, n) in CALLS]
    assert len(functions) > 100   # every function and class a kernel may call has an implementation or a refusal


def test_the_docs_list_every_name():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "triton.md").read_text()
    table = page[page.index("## 3. triton.language, name by name"):page.index("## 4. The host side")]
    missing = [n for n in TRITON_34_NAMES if f"`{n}`" not in table]
    assert not missing, f"docs/triton.md section 3 does not list {missing}"


@triton.jit
def elementwise(X, Y, Out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=1.0, eviction_policy="evict_last", cache_modifier=".ca")
    y = tl.load(Y + offs, mask=mask, other=1.0)
    results = (tl.exp(x), tl.exp2(x), tl.log(y), tl.log2(y), tl.sqrt(y), tl.rsqrt(y), tl.sin(x), tl.cos(x),
               tl.abs(x), tl.sigmoid(x), tl.erf(x), tl.fma(x, y, x), tl.maximum(x, y), tl.minimum(x, y),
               tl.clamp(x, -0.5, 0.5), tl.where(x > 0, x, y), tl.floor(x), tl.ceil(x), tl.math.exp(x),
               libdevice.tanh(x), libdevice.pow(y, 2.0), libdevice.rint(x * 4), libdevice.trunc(x * 4),
               libdevice.round(x * 4), libdevice.isnan(x / 0.0).to(tl.float32), tl.fdiv(x, y), tl.div_rn(x, y),
               tl.sqrt_rn(y), libdevice.copysign(y, x), libdevice.fmod(x * 7, y))
    for i in tl.static_range(len(results)):
        tl.store(Out + i * n + offs, results[i], mask=mask, eviction_policy="evict_first")


def test_elementwise_functions():
    n = 300
    rng = np.random.default_rng(0)
    x = rng.uniform(-2, 2, n).astype(np.float32)
    y = rng.uniform(0.25, 3, n).astype(np.float32)
    out = np.zeros(30 * n, np.float32)
    elementwise[(triton.cdiv(n, 128),)](x, y, out, n, BLOCK=128)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = [np.exp(x), np.exp2(x), np.log(y), np.log2(y), np.sqrt(y), 1 / np.sqrt(y), np.sin(x), np.cos(x),
                np.abs(x), 1 / (1 + np.exp(-x)), np.array([math.erf(v) for v in x]), x * y + x, np.maximum(x, y),
                np.minimum(x, y), np.clip(x, -0.5, 0.5), np.where(x > 0, x, y), np.floor(x), np.ceil(x), np.exp(x),
                np.tanh(x), y ** 2, np.rint(x * 4), np.trunc(x * 4), np.sign(x * 4) * np.floor(np.abs(x * 4) + 0.5),
                np.isnan(x / np.float32(0)).astype(np.float32), x / y, x / y, np.sqrt(y), np.copysign(y, x),
                np.fmod(x * np.float32(7), y)]
    got = out.reshape(30, n)
    for i, w in enumerate(want):
        np.testing.assert_allclose(got[i], w.astype(np.float32), rtol=2e-6, atol=2e-6, err_msg=f"result {i}")


@triton.jit
def math_types(X, WHICH: tl.constexpr):
    x = tl.load(X + tl.arange(0, 4))
    if WHICH == 0:
        tl.store(X + tl.arange(0, 4), tl.exp(x))
    else:
        tl.store(X + tl.arange(0, 4), libdevice.tanh(x))


def test_math_functions_take_triton_types():
    with pytest.raises(KernelTypeError, match=r"expected dtype \[fp32\] but got fp16"):
        math_types[(1,)](np.zeros(4, np.float16), 0)
    with pytest.raises(KernelTypeError, match="input arg type does not match"):
        math_types[(1,)](np.zeros(4, np.float16), 1)


@triton.jit
def reductions(X, Out, I, ROWS: tl.constexpr, COLS: tl.constexpr):
    r = tl.arange(0, ROWS)
    c = tl.arange(0, COLS)
    x = tl.load(X + r[:, None] * COLS + c[None, :])
    tl.store(Out + r, tl.sum(x, axis=1))
    tl.store(Out + ROWS + r, tl.max(x, axis=1))
    tl.store(Out + 2 * ROWS + r, x.min(axis=1))
    tl.store(Out + 3 * ROWS + c, tl.sum(x, axis=0))
    values, where = tl.max(x, axis=1, return_indices=True)
    tl.store(I + r, where)
    tl.store(I + ROWS + r, tl.argmin(x, axis=1))
    tl.store(Out + 3 * ROWS + COLS + r[:, None] * COLS + c[None, :], tl.cumsum(x, axis=1))
    tl.store(Out + 3 * ROWS + COLS + ROWS * COLS + r[:, None] * COLS + c[None, :], tl.cumprod(x, axis=1))
    tl.store(Out + 3 * ROWS + COLS + 2 * ROWS * COLS + r, tl.softmax(x, dim=1, keep_dims=True).sum(axis=1) + values * 0)


def test_reductions_and_scans():
    rows, cols = 8, 16
    x = np.random.default_rng(1).uniform(0.5, 1.5, (rows, cols)).astype(np.float32)
    out = np.zeros(3 * rows + cols + 2 * rows * cols + rows, np.float32)
    idx = np.zeros(2 * rows, np.int32)
    reductions[(1,)](x, out, idx, rows, cols)
    np.testing.assert_allclose(out[:rows], x.sum(1), rtol=1e-5)
    assert (out[rows:2 * rows] == x.max(1)).all() and (out[2 * rows:3 * rows] == x.min(1)).all()
    np.testing.assert_allclose(out[3 * rows:3 * rows + cols], x.sum(0), rtol=1e-5)
    assert (idx[:rows] == x.argmax(1)).all() and (idx[rows:] == x.argmin(1)).all()
    scans = out[3 * rows + cols:3 * rows + cols + 2 * rows * cols].reshape(2, rows, cols)
    np.testing.assert_allclose(scans[0], np.cumsum(x, 1), rtol=1e-5)
    np.testing.assert_allclose(scans[1], np.cumprod(x, 1), rtol=1e-5)
    np.testing.assert_allclose(out[-rows:], 1.0, rtol=1e-5)


@triton.jit
def shapes_and_dot(A, B, C, D, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(A + tl.expand_dims(m, 1) * K + k[None, :])
    b = tl.load(B + k[:, None] * N + tl.expand_dims(n, axis=0))
    acc = tl.zeros((M, N), dtype=tl.float32)
    for _ in tl.range(0, 2, num_stages=2, loop_unroll_factor=1):
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(C + m[:, None] * N + n[None, :], acc)
    t = tl.trans(acc)
    tl.store(D + n[:, None] * M + m[None, :], t + tl.broadcast_to(acc.T, N, M) * 0 + tl.zeros_like(t))
    ones = tl.full((M, N), 1, tl.int32) + tl.zeros_like(acc).to(tl.int32) + tl.dot(a.to(tl.int8), b.to(tl.int8)) * 0
    tl.atomic_add(C + m[:, None] * N + n[None, :], ones.to(tl.float32), mask=ones > 0)


def test_shapes_and_dot():
    M = N = K = 16
    rng = np.random.default_rng(2)
    a = rng.integers(-3, 4, (M, K)).astype(np.float16)
    b = rng.integers(-3, 4, (K, N)).astype(np.float16)
    c, d = np.zeros((M, N), np.float32), np.zeros((N, M), np.float32)
    shapes_and_dot[(1,)](a, b, c, d, M, N, K)
    want = 2 * (a.astype(np.float32) @ b.astype(np.float32))
    assert (c == want + 1).all() and (d == want.T).all()


@triton.jit
def swizzled(Out, GRID: tl.constexpr):
    i, j = tl.program_id(0), tl.program_id(1)
    ni, nj = tl.swizzle2d(i, j, GRID, GRID, 2)
    tl.store(Out + (i * GRID + j) * 2, ni)
    tl.store(Out + (i * GRID + j) * 2 + 1, tl.cdiv(nj + 1, 1) - 1 + tl.num_programs(1) * 0)


def test_swizzle2d_is_a_permutation_of_the_grid():
    out = np.zeros(2 * 9, np.int32)
    swizzled[(3, 3)](out, 3)
    pairs = {(int(out[2 * p]), int(out[2 * p + 1])) for p in range(9)}
    assert pairs == {(i, j) for i in range(3) for j in range(3)}


def _refusing_module(tmp_path, body: str):
    return kernel_from_source(tmp_path, "refused",
                              "import metile.triton as triton\nimport metile.triton.language as tl\n"
                              "from metile.triton.language.extra import libdevice\n\n\n@triton.jit\ndef kernel(X):\n"
                              "    x = tl.load(X + tl.arange(0, 4))\n" + body)


REFUSED_CALLS = [
    "y = tl.inline_asm_elementwise('', '', [x], tl.float32, True, 1)", "y = libdevice.erfinv(x)",
    "y = x.item()", "y = tl.philox(1, x, x, x, x)",
]


@pytest.mark.parametrize("body", REFUSED_CALLS)
def test_names_not_compiled_yet_are_refused_at_their_line(tmp_path, body):
    kernel = _refusing_module(tmp_path, f"    {body}\n")
    with pytest.raises(NotSupportedYetError, match="not supported by metile yet") as e:
        kernel.kernel.trace(np.zeros(4, np.float32))
    assert e.value.loc.line == 9 and e.value.loc.file.endswith("refused.py")


REFUSED_SYNTAX = [
    ("    try:\n        pass\n    finally:\n        pass\n", "try statements"),
    ("    del x\n", "del statements"),
]


@pytest.mark.parametrize("body, what", REFUSED_SYNTAX, ids=[w for _, w in REFUSED_SYNTAX])
def test_python_constructs_not_compiled_yet_are_refused(tmp_path, body, what):
    kernel = _refusing_module(tmp_path, body)
    with pytest.raises(NotSupportedYetError, match=what):
        kernel.kernel.trace(np.zeros(4, np.float32))


def test_every_refused_name_says_why():
    assert all(why for why in REFUSED.values())
    assert all(f in CALLS for f in REFUSED)


def test_functions_refuse_to_run_outside_a_kernel():
    with pytest.raises(OutsideKernelError, match="tl.load"):
        tl.load(None)
    with pytest.raises(OutsideKernelError, match="libdevice.tanh"):
        libdevice.tanh(1.0)
    with pytest.raises(OutsideKernelError):
        tl.exp(1.0)
    assert tl.cdiv(10, 4) == 3


@triton.jit
def calls_metile_helper(X):
    tl.store(X, helper_of_metile(1.0))


def _metile_helper():
    import metile

    @metile.func
    def helper_of_metile(x):
        return x * 2

    return helper_of_metile


helper_of_metile = _metile_helper()


def test_a_triton_kernel_cannot_call_a_metile_helper():
    with pytest.raises(UnsupportedCallError, match="@triton.jit kernel"):
        calls_metile_helper[(1,)](np.zeros(1, np.float32))
