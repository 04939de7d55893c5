"""`kernel[grid](..., profile=True)`: the counts of a `@metile.kernel` launch at the kernel's Python lines, as a
launch option (no recompile), refused on the Metal device and by `prepare()`."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import metile
from metile.frontend.errors import KernelArgumentError
from tests.msl_source import kernel_line as line_of

kernel_module = importlib.import_module("metile.kernel")


pytestmark = pytest.mark.usefixtures("on_cpu")


@metile.kernel
def softmax_rows(X, Y, n_cols, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    mask = cols < n_cols
    v = metile.load(X + row * n_cols + cols, mask=mask, other=-float("inf"))  # the load
    e = metile.exp(v - metile.max(v, axis=0))  # the max
    metile.store(Y + row * n_cols + cols, e / metile.sum(e, axis=0), mask=mask)  # the store


@metile.kernel
def gather(X, Y, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Y + offs, metile.load(X + offs * 8))  # strided


def reference(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_a_kernel_profile_is_at_its_python_lines():
    x = np.random.default_rng(0).random((16, 256), dtype=np.float32)
    y = np.zeros_like(x)
    p = softmax_rows[(16,)](x, y, 256, BLOCK=256, profile=True)
    np.testing.assert_allclose(y, reference(x), rtol=1e-5)
    assert isinstance(p, metile.Profile)
    d = p.to_dict()
    assert d["device_bytes_read"] == x.nbytes and d["device_bytes_written"] == y.nbytes
    assert d["coalescing_efficiency"] == 1.0
    here = __file__
    load, store = line_of(softmax_rows.fn, "# the load"), line_of(softmax_rows.fn, "# the store")
    assert d["lines"][f"{here}:{load}"]["device_bytes_read"] == x.nbytes
    assert d["lines"][f"{here}:{store}"]["device_bytes_written"] == y.nbytes
    assert "# the load" in d["lines"][f"{here}:{load}"]["text"]
    # the reductions exchange partial results through threadgroup memory, with barriers
    reductions = p.line(line_of(softmax_rows.fn, "# the max"), here)
    assert reductions.threadgroup_bytes > 0 and reductions.barriers > 0
    assert softmax_rows[(16,)](x, y, 256, BLOCK=256) is None


def test_profile_is_a_launch_option_not_a_constexpr(monkeypatch):
    compiles = []
    real = kernel_module.emit_artifact
    monkeypatch.setattr(kernel_module, "emit_artifact", lambda k: compiles.append(k.name) or real(k))
    k = metile.kernel(gather.fn)
    x = np.arange(8 * 512, dtype=np.float32)
    y = np.zeros(512, np.float32)
    k[(4,)](x, y, BLOCK=128)
    p = k[(4,)](x, y, BLOCK=128, profile=2)
    np.testing.assert_array_equal(y, x[::8])
    assert compiles == ["gather"]
    d = p.to_dict()
    assert (d["threadgroups_profiled"], d["threadgroups_total"]) == (2, 4)
    strided = d["lines"][f"{__file__}:{line_of(gather.fn, '# strided')}"]
    assert strided["coalescing_efficiency"] < 0.2    # each lane's 4 bytes in its own 64-byte segment (reads)
    q = k[(4,)](x, y, BLOCK=128, profile=1, profile_only=True)
    assert q.threadgroups_profiled == 1


def test_bad_profile_values_and_prepare_are_refused():
    x = np.arange(8 * 512, dtype=np.float32)
    y = np.zeros(512, np.float32)
    with pytest.raises(KernelArgumentError, match=r"gather\[grid\]\(\.\.\.\): profile=-3 must be True, False, None "
                                                  "or a number of threadgroups") as info:
        gather[(4,)](x, y, BLOCK=128, profile=-3)
    assert info.value.loc.line == line_of(gather.fn, "def gather")
    with pytest.raises(KernelArgumentError, match="profile_only=True runs the counted threadgroups only"):
        gather[(4,)](x, y, BLOCK=128, profile_only=True)
    with pytest.raises(metile.ProfileError, match="not of prepare"):
        gather[(4,)].prepare(x, y, BLOCK=128, profile=True)


def test_the_metal_device_refuses_profile(stub, make_device, monkeypatch):
    dev = make_device()
    stub.execute_with(None)
    monkeypatch.setattr(kernel_module, "device", lambda name=None: dev)
    k = metile.kernel(gather.fn)
    x = np.arange(8 * 512, dtype=np.float32)
    y = np.zeros(512, np.float32)
    with pytest.raises(metile.ProfileError, match="profile= counts on the CPU device; kernel gather runs on device "
                                                  "'metal'") as info:
        k[(4,)](x, y, BLOCK=128, profile=True)
    assert info.value.loc.line == line_of(gather.fn, "def gather")
    lib = dev.compile("#include <metal_stdlib>\nusing namespace metal;\n"
                      "kernel void k(device float* a [[buffer(0)]]) {}\n", name="k.metal")
    with pytest.raises(metile.ProfileError, match="counts on the CPU device"):
        dev.dispatch_threads(lib.function("k"), (32, 1, 1), (32, 1, 1), [y], profile=True)


@metile.kernel
def row_sums_of_product(Q, K, Out, N: metile.constexpr, D: metile.constexpr):
    rows = metile.arange(0, N)
    cols = metile.arange(0, D)
    q = metile.load(Q + rows[:, None] * D + cols[None, :])
    k = metile.load(K + cols[:, None] * N + rows[None, :])
    qk = metile.dot(q, k)
    m = metile.max(qk, 1)  # row max
    metile.store(Out + rows, metile.sum(metile.exp(qk - m[:, None]), 1))  # row sum


def test_row_reductions_of_a_product_stay_in_its_matrices():
    """A row reduction over simdgroup matrices (and over an element-wise function of them) folds each lane's own
    elements and shuffles across the lanes of a row: the matrices are never copied to threadgroup memory, only
    one partial per row and simdgroup is."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((32, 16)).astype(np.float32)
    k = rng.standard_normal((16, 32)).astype(np.float32)
    out = np.zeros(32, np.float32)
    p = row_sums_of_product[(1,)](q, k, out, N=32, D=16, profile=True)
    qk = q @ k
    np.testing.assert_allclose(out, np.exp(qk - qk.max(1, keepdims=True)).sum(1), rtol=1e-5)
    d = p.to_dict()
    assert d["barriers"] <= 8                  # 2 to stage the product, 2 per reduction, 2 to gather the max
    assert d["simdgroup_stores"] == 0
    row_max = d["lines"][f"{__file__}:{line_of(row_sums_of_product.fn, '# row max')}"]
    assert row_max["barriers"] <= 2 and row_max["simd_collectives"] > 0
    assert row_max["threadgroup_bytes_written"] == 32 * 2 * 4  # a float per row from each of the 2 column groups


@metile.kernel
def product_with_transposed(A, BT, C, M: metile.constexpr, N: metile.constexpr, K: metile.constexpr,
                            BK: metile.constexpr):
    r, c, k = metile.arange(0, M), metile.arange(0, N), metile.arange(0, BK)
    acc = metile.zeros((M, N), dtype=metile.float32)
    for k0 in metile.tile_range(0, K, BK):
        a = metile.load(A + r[:, None] * K + (k0 + k)[None, :])
        b = metile.load(BT + (k0 + k)[:, None] + c[None, :] * K)  # the transposed read
        acc = metile.dot(a, b, acc)
    metile.store(C + r[:, None] * N + c[None, :], acc)


def test_an_operand_contiguous_down_its_columns_is_staged_column_by_column():
    """B given as its transpose (an N x K array, read as K x N blocks): the addresses of a block go up down its
    columns, so the loop that stages it for the dot walks the columns and every device load is coalesced."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    bt = rng.standard_normal((32, 64)).astype(np.float32)
    c = np.zeros((32, 32), np.float32)
    p = product_with_transposed[(1,)](a, bt, c, M=32, N=32, K=64, BK=32, profile=True)
    np.testing.assert_allclose(c, a @ bt.T, rtol=1e-4, atol=1e-4)
    read = p.to_dict()["lines"][f"{__file__}:{line_of(product_with_transposed.fn, '# the transposed read')}"]
    assert read["coalescing_efficiency"] == 1.0 and read["device_bytes_read"] == bt.nbytes
