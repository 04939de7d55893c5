"""The Metal device on a real Apple GPU (macOS on Apple silicon); skipped elsewhere with the reason shown.

Run on a Mac with `python -m pytest -m metal tests/test_metal_gpu.py`.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from metal_stub import KERNELS

import metile
from metile.devices import metal_usable

pytestmark = [
    pytest.mark.metal,
    pytest.mark.skipif(not metal_usable(), reason="needs a Metal GPU: macOS on Apple silicon, not a virtual machine"),
]

SOURCE = KERNELS + """
kernel void row_sums(device const float* x [[buffer(0)]],
                     device float* sums [[buffer(1)]],
                     threadgroup float* partial [[threadgroup(0)]],
                     uint lid [[thread_position_in_threadgroup]],
                     uint row [[threadgroup_position_in_grid]],
                     uint tpt [[threads_per_threadgroup]]) {
    float v = x[row * tpt + lid];
    float s = simd_sum(v);
    if (lid % 32 == 0) partial[lid / 32] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid == 0) {
        float total = 0.0f;
        for (uint i = 0; i < tpt / 32; i++) total += partial[i];
        sums[row] = total;
    }
}
"""


@pytest.fixture(scope="module")
def gpu():
    return metile.device("metal")


@pytest.fixture(scope="module")
def lib(gpu):
    return gpu.compile(SOURCE, name="gpu_test.metal")


def test_device_properties(gpu):
    assert gpu.name == "metal" and gpu.gpu_name.startswith("Apple")
    assert 7 <= gpu.gpu_family <= 10
    assert gpu.max_threads_per_threadgroup == 1024
    assert gpu.max_threadgroup_memory >= 32 * 1024
    assert gpu.simd_width == 32
    assert isinstance(gpu.supports_tensor_ops, bool) and isinstance(gpu.tensor_ops_accelerated, bool)
    assert gpu.tensor_ops_accelerated <= gpu.supports_tensor_ops


@pytest.mark.parametrize("n", [1, 255, 256, 100_003])
def test_vector_add(gpu, lib, n):
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    gpu.dispatch_threads(lib.function("add"), n, 256, [a, b, out, np.uint32(n)])
    gpu.synchronize()
    np.testing.assert_array_equal(out, a + b)


def test_threadgroup_memory_and_barrier(gpu, lib):
    x = np.arange(256, dtype=np.float32)
    sums = np.zeros(4, np.float32)
    gpu.dispatch_threadgroups(lib.function("block_sum"), 4, 64, [x, sums], threadgroup_memory=[64 * 4])
    gpu.synchronize()
    np.testing.assert_array_equal(sums, x.reshape(4, 64).sum(1))


def test_threadgroup_memory_and_simd_sum(gpu, lib):
    fn = lib.function("row_sums")
    assert fn.thread_execution_width == 32
    x = np.random.default_rng(0).standard_normal((64, 256), dtype=np.float32)
    sums = np.zeros(64, np.float32)
    gpu.dispatch_threadgroups(fn, 64, 256, [x, sums], threadgroup_memory=[8 * 4])
    gpu.synchronize()
    np.testing.assert_allclose(sums, x.sum(1), rtol=1e-4, atol=1e-4)


def test_buffers_are_zero_copy_and_batches_chain(gpu, lib):
    fn = lib.function("add")
    n = 1 << 20
    a = metile.Buffer(np.ones(n, np.float32), device=gpu)
    out = metile.Buffer.zeros(n, device=gpu)
    view = out.numpy()
    for _ in range(100):
        gpu.dispatch_threads(fn, n, 256, [a, out, out, np.uint32(n)])
    gpu.synchronize()
    assert (view == 100).all()
    assert gpu.stream.last_timings and all(end >= start for start, end in gpu.stream.last_timings)


def test_compile_error_points_at_the_metal_line(gpu):
    src = SOURCE.replace("out[gid] = a[gid] + b[gid];", "out[gid] = a[gid] + c[gid];")
    with pytest.raises(metile.MSLCompileError) as e:
        gpu.compile(src, name="broken.metal")
    line = next(i for i, t in enumerate(src.splitlines(), 1) if "c[gid]" in t)
    assert (e.value.loc.file, e.value.loc.line) == ("broken.metal", line)
    assert "c" in e.value.message


def test_many_launches_do_not_leak(gpu, lib):
    fn = lib.function("add")
    a = np.ones(4096, np.float32)
    for _ in range(3):
        for _ in range(2000):
            gpu.dispatch_threads(fn, 4096, 256, [a, a, np.zeros(4096, np.float32), 4096])
        gpu.synchronize()
        gc.collect()
    assert gpu.stream.pending == 0
