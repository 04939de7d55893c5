"""The CPU device's public interface: compile, function, dispatch, arguments, Buffer, errors, cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import metile
from metile.metal.cpu.device import CpuDevice, CpuOptions
from metile.metal.cpu.toolchain import shared_library

SUFFIX = shared_library()[0]   # of the kernel libraries in the cache: .so, .dylib on macOS
VECTOR_ADD = """
#include <metal_stdlib>
using namespace metal;

kernel void add(device const float* a [[buffer(0)]],
                device const float* b [[buffer(1)]],
                device float* out [[buffer(2)]],
                constant uint& n [[buffer(3)]],
                uint gid [[thread_position_in_grid]]) {
    if (gid < n) {
        out[gid] = a[gid] + b[gid];
    }
}
"""


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


@pytest.fixture(scope="module")
def add_fn(cpu):
    return cpu.compile(VECTOR_ADD, name="add.metal").function("add")


def test_device_properties(cpu):
    assert cpu.name == "cpu"
    assert cpu.max_threads_per_threadgroup == 1024
    assert cpu.max_threadgroup_memory == 32 * 1024
    assert cpu.simd_width == 32
    assert cpu.supports_tensor_ops is True and cpu.tensor_ops_accelerated is False
    assert metile.device("cpu") is cpu


def test_default_device_follows_environment():
    code = "import metile; print(metile.device().name)"
    env = dict(os.environ, METILE_DEVICE="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "cpu"


def test_unknown_and_unavailable_devices():
    with pytest.raises(metile.DeviceUnavailableError, match="unknown device"):
        metile.device("cuda")
    if sys.platform != "darwin":
        with pytest.raises(metile.DeviceUnavailableError, match="macOS"):
            metile.device("metal")


@pytest.mark.parametrize("n", [1, 255, 256, 1000, 4097])
def test_vector_add_non_uniform_dispatch(cpu, add_fn, n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    cpu.dispatch_threads(add_fn, (n, 1, 1), (256, 1, 1), [a, b, out, np.uint32(n)])
    np.testing.assert_array_equal(out, a + b)


def test_dispatch_threadgroups_and_python_int_scalar(cpu, add_fn):
    n = 512
    a = np.arange(n, dtype=np.float32)
    out = np.zeros(n, np.float32)
    cpu.dispatch_threadgroups(add_fn, (2, 1, 1), (256, 1, 1), [a, a, out, n])
    np.testing.assert_array_equal(out, 2 * a)
    metile.synchronize()
    cpu.synchronize()


POSITIONS = """
#include <metal_stdlib>
using namespace metal;
kernel void pos(device uint* out [[buffer(0)]],
                uint3 gid [[thread_position_in_grid]],
                uint3 tg [[threadgroup_position_in_grid]],
                uint3 lid [[thread_position_in_threadgroup]],
                uint3 tpt [[threads_per_threadgroup]],
                uint3 ntg [[threadgroups_per_grid]],
                uint3 grid [[threads_per_grid]],
                uint li [[thread_index_in_threadgroup]],
                uint lane [[thread_index_in_simdgroup]],
                uint sg [[simdgroup_index_in_threadgroup]],
                ushort2 lid2 [[thread_position_in_threadgroup]]) {
    uint linear = gid.x + grid.x * (gid.y + grid.y * gid.z);
    device uint* o = out + linear * 16;
    o[0] = gid.x; o[1] = gid.y; o[2] = gid.z;
    o[3] = tg.x; o[4] = tg.y; o[5] = tg.z;
    o[6] = lid.x; o[7] = lid.y; o[8] = lid.z;
    o[9] = tpt.x * 10000 + tpt.y * 100 + tpt.z;
    o[10] = ntg.x * 10000 + ntg.y * 100 + ntg.z;
    o[11] = li; o[12] = lane; o[13] = sg;
    o[14] = lid2.x + 1000 * lid2.y;
    o[15] = grid.x * 10000 + grid.y * 100 + grid.z;
}
"""


@pytest.mark.parametrize("grid,tpt", [((8, 1, 1), (8, 1, 1)), ((10, 6, 3), (4, 4, 2)), ((70, 3, 2), (64, 1, 1))])
def test_thread_position_attributes(cpu, grid, tpt):
    fn = cpu.compile(POSITIONS, name="pos.metal").function("pos")
    total = grid[0] * grid[1] * grid[2]
    out = np.zeros(total * 16, np.uint32)
    cpu.dispatch_threads(fn, grid, tpt, [out])
    o = out.reshape(grid[2], grid[1], grid[0], 16)
    z, y, x = np.meshgrid(np.arange(grid[2]), np.arange(grid[1]), np.arange(grid[0]), indexing="ij")
    np.testing.assert_array_equal(o[..., 0], x)
    np.testing.assert_array_equal(o[..., 1], y)
    np.testing.assert_array_equal(o[..., 2], z)
    np.testing.assert_array_equal(o[..., 3], x // tpt[0])
    np.testing.assert_array_equal(o[..., 5], z // tpt[2])
    lx, ly, lz = x % tpt[0], y % tpt[1], z % tpt[2]
    np.testing.assert_array_equal(o[..., 6], lx)
    # edge threadgroups of a non-uniform dispatch are smaller
    ax = np.minimum(tpt[0], grid[0] - (x // tpt[0]) * tpt[0])
    ay = np.minimum(tpt[1], grid[1] - (y // tpt[1]) * tpt[1])
    az = np.minimum(tpt[2], grid[2] - (z // tpt[2]) * tpt[2])
    np.testing.assert_array_equal(o[..., 9], ax * 10000 + ay * 100 + az)
    ntg = [-(-g // t) for g, t in zip(grid, tpt)]
    assert (o[..., 10] == ntg[0] * 10000 + ntg[1] * 100 + ntg[2]).all()
    linear = lx + ax * (ly + ay * lz)
    np.testing.assert_array_equal(o[..., 11], linear)
    np.testing.assert_array_equal(o[..., 12], linear % 32)
    np.testing.assert_array_equal(o[..., 13], linear // 32)
    np.testing.assert_array_equal(o[..., 14], lx + 1000 * ly)
    assert (o[..., 15] == grid[0] * 10000 + grid[1] * 100 + grid[2]).all()


TG_PARAM = """
#include <metal_stdlib>
using namespace metal;
kernel void rev(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                threadgroup float* scratch [[threadgroup(0)]],
                uint lid [[thread_position_in_threadgroup]], uint tg [[threadgroup_position_in_grid]],
                uint n [[threads_per_threadgroup]]) {
    scratch[lid] = x[tg * n + lid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    y[tg * n + lid] = scratch[n - 1 - lid];
}
"""


def test_threadgroup_parameter_and_barrier(cpu):
    fn = cpu.compile(TG_PARAM, name="rev.metal").function("rev")
    x = np.arange(4 * 128, dtype=np.float32)
    y = np.zeros_like(x)
    cpu.dispatch_threadgroups(fn, (4, 1, 1), (128, 1, 1), [x, y], threadgroup_memory=[128 * 4])
    np.testing.assert_array_equal(y.reshape(4, 128), x.reshape(4, 128)[:, ::-1])
    with pytest.raises(metile.LaunchError, match="threadgroup_memory"):
        cpu.dispatch_threadgroups(fn, (4, 1, 1), (128, 1, 1), [x, y])
    with pytest.raises(metile.LaunchError, match="device allows 32768"):
        cpu.dispatch_threadgroups(fn, (4, 1, 1), (128, 1, 1), [x, y], threadgroup_memory=[40000])


def test_buffer_is_zero_copy(cpu, add_fn):
    n = 300
    a = metile.Buffer(np.arange(n, dtype=np.float32))
    b = metile.Buffer.zeros((n,), device=cpu)
    out = metile.Buffer.empty((n,))
    assert a.shape == (n,) and a.dtype == np.float32 and a.nbytes == 4 * n
    view = b.numpy()
    view[:] = 1.0  # a write through the view is what the kernel reads
    cpu.dispatch_threads(add_fn, (n, 1, 1), (64, 1, 1), [a, b, out, np.uint32(n)])
    got = out.numpy()
    np.testing.assert_array_equal(got, np.arange(n) + 1.0)
    assert np.shares_memory(got, out.numpy()) or got.ctypes.data == out.numpy().ctypes.data
    assert out.numpy().ctypes.data == out.address
    assert np.from_dlpack(out).ctypes.data == out.address
    c = metile.Buffer.from_numpy(np.ones((2, 3), np.int32))
    assert c.shape == (2, 3) and c.numpy().sum() == 6


def test_buffer_view_outlives_buffer():
    view = metile.Buffer(np.arange(10, dtype=np.float32)).numpy()
    import gc

    gc.collect()
    assert view.sum() == 45


ARG_ERRORS = [
    (lambda a, o: [a, a, o], "takes 4 buffer argument"),
    (lambda a, o: [a, a, o, np.uint32(4), a], "takes 4 buffer argument"),
    (lambda a, o: [a.astype(np.float64), a, o, np.uint32(4)], "needs float32 data, got float64"),
    (lambda a, o: [a, a, o, np.int32(4)], "needs a uint32 scalar, got int32"),
    (lambda a, o: [a, a, o, -1], "does not fit"),
    (lambda a, o: [a, a, o, 2.5], "integer parameter"),
    (lambda a, o: [a, 1.0, o, np.uint32(4)], "is a pointer"),
    (lambda a, o: [a, "x", o, np.uint32(4)], "cannot bind a str"),
]


@pytest.mark.parametrize("make,msg", ARG_ERRORS)
def test_argument_errors(cpu, add_fn, make, msg):
    a = np.ones(4, np.float32)
    o = np.zeros(4, np.float32)
    with pytest.raises(metile.LaunchError, match=msg):
        cpu.dispatch_threads(add_fn, (4, 1, 1), (4, 1, 1), make(a, o))


def test_vector_pointer_size_must_be_whole(cpu):
    src = """
    #include <metal_stdlib>
    using namespace metal;
    kernel void k(device float4* v [[buffer(0)]], uint i [[thread_position_in_grid]]) { v[i] *= 2.0f; }
    """
    fn = cpu.compile(src, name="v4.metal").function("k")
    with pytest.raises(metile.LaunchError, match="not a whole number of `float4`"):
        cpu.dispatch_threads(fn, (1, 1, 1), (1, 1, 1), [np.ones(6, np.float32)])
    v = np.arange(8, dtype=np.float32)
    cpu.dispatch_threads(fn, (2, 1, 1), (2, 1, 1), [v])
    np.testing.assert_array_equal(v, 2 * np.arange(8))


@pytest.mark.parametrize("grid,tpt,msg", [
    ((0, 1, 1), (1, 1, 1), "positive"),
    ((4, 1, 1), (2048, 1, 1), "at most 1024"),
    ((4, 1, 1), (32, 32, 2), "at most 1024"),
    ((1, 2, 3, 4), (1, 1, 1), "1 to 3 dimensions"),
])
def test_launch_shape_errors(cpu, add_fn, grid, tpt, msg):
    a = np.ones(4, np.float32)
    with pytest.raises(metile.LaunchError, match=msg):
        cpu.dispatch_threads(add_fn, grid, tpt, [a, a, a.copy(), np.uint32(4)])


def test_unknown_function_name(cpu):
    lib = cpu.compile(VECTOR_ADD, name="add.metal")
    with pytest.raises(metile.LaunchError, match="no kernel function `sub`.*defines: add"):
        lib.function("sub")


def test_compile_error_points_at_metal_line(cpu):
    src = textwrap.dedent("""\
        #include <metal_stdlib>
        using namespace metal;
        kernel void k(device float* x [[buffer(0)]], uint i [[thread_position_in_grid]]) {
            float y = x[i] * undefined_thing;
            x[i] = y;
        }
        """)
    with pytest.raises(metile.MSLCompileError) as info:
        cpu.compile(src, name="broken.metal")
    e = info.value
    assert e.loc.file == "broken.metal" and e.loc.line == 4
    assert "undefined_thing" in str(e)
    assert "float y = x[i] * undefined_thing;" in str(e)


def test_kernel_value_parameter_without_attribute_is_an_error(cpu):
    # a pointer without [[buffer(i)]] takes the next buffer index (see test_cpu_msl_realworld.py); a value cannot
    src = "kernel void k(device float* x, float s, uint i [[thread_position_in_grid]]) { x[i] = s; }"
    with pytest.raises(metile.MSLCompileError, match="needs an attribute"):
        cpu.compile(src, name="noattr.metal")


def test_no_kernel_is_an_error(cpu):
    with pytest.raises(metile.MSLCompileError, match="no kernel function"):
        cpu.compile("float f(float x) { return x; }", name="nokernel.metal")


def test_cache_hit_in_a_new_process_and_corruption_is_rebuilt(tmp_path):
    env = dict(os.environ, METILE_CACHE_DIR=str(tmp_path))
    code = textwrap.dedent(f"""
        import time, metile, numpy as np
        dev = metile.device('cpu')
        t = time.perf_counter()
        fn = dev.compile({VECTOR_ADD!r}, name='add.metal').function('add')
        dt = time.perf_counter() - t
        a = np.ones(64, np.float32); o = np.zeros(64, np.float32)
        dev.dispatch_threads(fn, (64, 1, 1), (32, 1, 1), [a, a, o, np.uint32(64)])
        assert (o == 2).all()
        print(dt)
    """)

    def run():
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return float(out.stdout.strip())

    first = run()
    second = run()
    assert second < first / 3, (first, second)
    sos = list((tmp_path / "kernels").rglob(f"*{SUFFIX}"))
    assert len(sos) == 1
    sos[0].write_bytes(b"not a shared object")
    run()  # detected through the checksum sidecar and rebuilt
    assert sos[0].read_bytes()[:4] in (b"\x7fELF", b"\xcf\xfa\xed\xfe")   # ELF, or 64-bit Mach-O on macOS


def test_concurrent_processes_share_one_cache_entry(tmp_path):
    env = dict(os.environ, METILE_CACHE_DIR=str(tmp_path))
    code = ("import metile; lib = metile.device('cpu').compile(open(__import__('sys').argv[1]).read(), "
            "name='add.metal'); print('ok')")
    src = tmp_path / "add.metal"
    src.write_text(VECTOR_ADD)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(src)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert len(list((tmp_path / "kernels").rglob(f"*{SUFFIX}"))) == 1
    assert not list(tmp_path.rglob("*.tmp"))


def test_missing_compiler_gives_a_clear_error(tmp_path):
    with pytest.raises(metile.CompilerNotFoundError, match="g\\+\\+ >= 12 or clang\\+\\+ >= 15"):
        CpuDevice(CpuOptions(cache_dir=tmp_path, compiler="no-such-compiler-xyz"))
