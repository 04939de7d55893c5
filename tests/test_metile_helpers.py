"""The original meTile's `metile.scalar`, `metile.fast_exp`, `metile.simd_sum` and `metile.simd_max`, which its
decode kernels use (docs/language.md 6.1, 6.2 and 8.2): a traced scalar started from a number, `exp`, and the sum
and maximum over the lanes of a simdgroup (Metal's), the same value on every lane, also for a partial simdgroup;
and Triton's `metile.static_range`, a range unrolled while tracing (7.1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import metile
from metile.frontend import errors as E

pytestmark = pytest.mark.usefixtures("on_cpu")
LINES = Path(__file__).read_text().splitlines()


def line_of(case: str) -> int:
    return next(i + 1 for i, text in enumerate(LINES) if text.rstrip().endswith(f"# E:{case}"))


@metile.kernel
def simd_reductions(X, Sums, Maxima, BLOCK: metile.constexpr):
    t = metile.thread_id()
    v = metile.load(X + metile.program_id(0) * BLOCK + t)
    metile.store(Sums + metile.program_id(0) * BLOCK + t, metile.simd_sum(v))
    metile.store(Maxima + metile.program_id(0) * BLOCK + t, metile.simd_max(v))


@pytest.mark.parametrize("block", [32, 64, 256])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_simd_sum_and_max_over_each_simdgroup(block, dtype):
    rng = np.random.default_rng(block)
    x = (rng.standard_normal((2, block)) * 100).astype(dtype)
    sums, maxima = np.zeros_like(x), np.zeros_like(x)
    simd_reductions[(2,)](x, sums, maxima, BLOCK=block)
    metile.synchronize()
    groups = x.reshape(2, block // 32, 32)
    want_sum = np.repeat(groups.astype(np.float64).sum(-1), 32, axis=-1).reshape(2, block)
    want_max = np.repeat(groups.max(-1), 32, axis=-1).reshape(2, block)
    np.testing.assert_allclose(sums, want_sum, rtol=1e-5, atol=1e-3)
    np.testing.assert_array_equal(maxima, want_max)
    for lanes in sums.reshape(-1, 32):  # every lane holds the very same value, not just a close one
        assert (lanes == lanes[0]).all()


@metile.kernel
def online_max(X, Out, n, BLOCK: metile.constexpr):
    lane = metile.simd_lane_id()
    best = metile.scalar(-1e30)
    total = metile.scalar(0, "i32")
    for i in metile.tile_range(0, n):
        best = metile.maximum(best, metile.load(X + i * BLOCK + metile.thread_id()))
        total = total + 1
    metile.store(Out + metile.thread_id(), metile.fast_exp(metile.simd_max(best) * 0.0) + total, mask=lane >= 0)


def test_scalar_starts_loop_state_and_fast_exp_is_exp():
    x = np.random.default_rng(3).standard_normal((5, 64)).astype(np.float32)
    out = np.zeros(64, np.float32)
    online_max[(1,)](x, out, 5, BLOCK=64)
    metile.synchronize()
    np.testing.assert_allclose(out, 6.0)


@metile.kernel
def exp_both(X, Out, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    x = metile.load(X + c)
    metile.store(Out + c, metile.fast_exp(x) - metile.exp(x) + metile.scalar(2.5) + metile.fast_exp(0.0))


def test_fast_exp_equals_exp():
    x = np.linspace(-20, 20, 128, dtype=np.float32)
    out = np.zeros_like(x)
    exp_both[(1,)](x, out, BLOCK=128)
    metile.synchronize()
    np.testing.assert_array_equal(out, 3.5)


@metile.kernel
def unrolled(Out, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    acc = metile.zeros((BLOCK,))
    steps = []
    for i in metile.static_range(1, 8, 3):          # 1, 4, 7, unrolled: a Python int each time
        steps.append(i)
        acc = acc + c * i
    for j in metile.static_range(2):
        acc = acc + j
    metile.store(Out + c, acc + len(steps) * 100)


def test_static_range_unrolls_while_tracing():
    out = np.zeros(8, np.float32)
    unrolled[(1,)](out, BLOCK=8)
    metile.synchronize()
    np.testing.assert_array_equal(out, np.arange(8) * 12 + 1 + 300)
    text = str(unrolled.trace(out, BLOCK=8))
    assert "For(" not in text


@metile.kernel
def bit_reversal(X, Out, Lit, BITS: metile.constexpr, BLOCK: metile.constexpr):
    c = metile.arange(0, BLOCK)
    v = metile.load(X + c)
    metile.store(Out + c, metile.reverse_bits(v))
    metile.store(Out + BLOCK + c, metile.reverse_bits(c) >> (32 - BITS))   # an i32 index: the shift brings zeros in
    metile.store(Lit + 0, metile.reverse_bits(1) + metile.reverse_bits(-1) * 0)


@pytest.mark.parametrize("dtype", [np.uint32, np.int32])
def test_reverse_bits(dtype):
    rng = np.random.default_rng(11)
    x = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, 64, dtype=dtype, endpoint=True)
    out, lit = np.zeros(128, np.uint32), np.zeros(1, np.int64).astype(np.uint32)
    bit_reversal[(1,)](x, out, lit, BITS=6, BLOCK=64)
    metile.synchronize()
    want = [int(f"{int(v) & 0xFFFFFFFF:032b}"[::-1], 2) for v in x]
    np.testing.assert_array_equal(out[:64], want)
    np.testing.assert_array_equal(out[64:], [int(f"{i:06b}"[::-1], 2) for i in range(64)])
    assert lit[0] == 1 << 31


@metile.kernel
def k_reverse_float(X):
    metile.store(X, metile.reverse_bits(metile.load(X)))  # E:reverse_float


@metile.kernel
def k_static_traced(X, n):
    for i in metile.static_range(n):  # E:static_traced
        metile.store(X + i, 1.0)


@metile.kernel
def k_partial(X, Out, BLOCK: metile.constexpr):
    v = metile.load(X + metile.thread_id())
    metile.store(Out + metile.thread_id(), metile.simd_sum(v))


@metile.kernel
def k_no_block(X, n):
    v = metile.load(X + metile.thread_id())
    metile.store(X + metile.thread_id(), metile.simd_max(v))  # E:no_block


def test_simd_sum_of_a_partial_simdgroup_sums_its_lanes():
    """Metal's simd_sum combines the lanes a simdgroup runs: with 48 threads, the second simdgroup has 16."""
    x = np.arange(48, dtype=np.float32)
    out = np.zeros(48, np.float32)
    k_partial[(1,)](x, out, BLOCK=48)
    metile.synchronize()
    assert (out[:32] == x[:32].sum()).all() and (out[32:] == x[32:].sum()).all()


def test_a_thread_level_kernel_without_a_thread_count_is_refused():
    with pytest.raises(metile.LoweringUnavailableError, match="give the launch num_threads=N"):
        k_no_block[(1,)](np.zeros(64, np.float32), 3)
    out = np.arange(64, dtype=np.float32)
    k_no_block[(1,)](out, 3, num_threads=64)
    metile.synchronize()
    assert (out == np.repeat([31.0, 63.0], 32)).all()


@metile.kernel
def k_scalar_traced(X):
    metile.store(X, metile.scalar(metile.load(X)))  # E:scalar_traced


@metile.kernel
def k_scalar_str(X):
    metile.store(X, metile.scalar("one"))  # E:scalar_str


@metile.kernel
def k_simd_tile(X, BLOCK: metile.constexpr):
    metile.store(X, metile.simd_sum(metile.load(X + metile.arange(0, BLOCK))))  # E:simd_tile


F32 = np.zeros(64, np.float32)
CASES = [
    ("scalar_traced", k_scalar_traced, {}, E.KernelTypeError, r"scalar\(\) takes a compile-time int or float"),
    ("scalar_str", k_scalar_str, {}, E.KernelTypeError, r"scalar\(\) takes a compile-time int or float, not str"),
    ("simd_tile", k_simd_tile, {"BLOCK": 64}, E.ShapeMismatchError, "takes a per-thread scalar"),
    ("reverse_float", k_reverse_float, {}, E.KernelTypeError, r"reverse_bits\(\) takes i32 or u32 values, not f32"),
    ("static_traced", k_static_traced, {}, E.ConstexprRequiredError,
     "the stop of metile.static_range must be a compile-time int"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_refused_at_the_line(case):
    name, kern, kwargs, cls, message = case
    args = (F32, 3) if name == "static_traced" else (F32,)
    with pytest.raises(cls, match=message) as info:
        kern.trace(*args, **kwargs)
    err = info.value
    assert err.loc is not None and err.loc.line == line_of(name), str(err)
    assert f"# E:{name}" in str(err) and "^" in str(err)
