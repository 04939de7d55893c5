"""Performance counters of Metal 4 tensor ops on the CPU device, checked exactly on kernels counted by hand, and
the Apple GPU model's compute bound for them (M5's Neural Accelerators against M1's simdgroup_matrix rate)."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.profile.gpus import gpu
from metile.profile.model import estimate
from tests.test_cpu_tensor_ops import GEMM, SCOPES


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


def gemm_profile(cpu, T: str, relax: bool, M=32, N=32, K=32, tile=16):
    src = GEMM.format(T=T, TM=tile, TN=tile, TK=tile, TA="false", TB="false", RELAX=str(relax).lower())
    fn = cpu.compile(src, name=f"pgemm_{T}_{relax:d}.metal").function("gemm")
    dt = {"half": np.float16, "float": np.float32, "bfloat": np.uint16}[T]
    a, b = np.ones((M, K), dt), np.ones((K, N), dt)
    if T == "bfloat":
        a[:], b[:] = 0x3F80, 0x3F80          # 1.0
    c = np.zeros((M, N), np.float32)
    p = cpu.dispatch_threadgroups(fn, (M // tile, N // tile, 1), (32, 1, 1),
                                  [a, b, c, np.int32(M), np.int32(N), np.int32(K)], profile=True)
    np.testing.assert_array_equal(c, K)
    return p


@pytest.mark.parametrize("T, relax, key", [("half", False, "half"), ("bfloat", False, "bfloat"),
                                            ("float", True, "tf32"), ("float", False, "float")])
def test_cooperative_gemm_counts_flops_by_input_type_runs_and_cooperative_traffic(cpu, T, relax, key):
    """4 threadgroups of one simdgroup, each 2 runs of a 16x16x16 op over cooperative tensors: 8 runs of 2 * 16^3
    FLOPs; per run a cooperative load of each 16x16 input, per threadgroup one store of the float 16x16 result."""
    p = gemm_profile(cpu, T, relax)
    t = p.totals
    size = 2 if T in ("half", "bfloat") else 4
    assert t.tensor_flops == {key: 8 * 2 * 16 ** 3}
    assert t.tensor_thread_flops == {}
    assert t.tensor_runs == {"simdgroup": 8}
    assert (t.cooperative_loads, t.cooperative_stores) == (16, 4)
    assert t.device_bytes_read == 8 * 2 * 256 * size          # each load reads its tile once
    assert t.device_bytes_written == 4 * 256 * 4
    assert t.threadgroup_bytes == 0 and t.flops == {}
    d = p.to_dict()
    assert d["flops"] == 8 * 2 * 16 ** 3 == d["tensor_flops"]
    assert d["tensor_runs_by_scope"] == {"simdgroup": 8}


def test_tensor_operands_are_read_once_a_run_at_every_scope(cpu):
    """execution_simdgroups<4>: 4 threadgroups of 128 threads, each one run of a 64x32 tile with k = 24 read from the
    tensors: its half inputs (64x24 and 24x32) read once, not once per product. execution_thread: one thread, one
    48x40x24 run."""
    lib = cpu.compile(SCOPES, name="pscopes.metal")
    M, N, K = 128, 64, 24
    a, b = np.ones((M, K), np.float16), np.ones((K, N), np.float16)
    c = np.zeros((M, N), np.float32)
    args = [a, b, c, np.int32(M), np.int32(N), np.int32(K)]
    t = cpu.dispatch_threadgroups(lib.function("simdgroups"), (2, 2, 1), (128, 1, 1), args, profile=True).totals
    assert t.tensor_flops == {"half": 4 * 2 * 64 * 32 * 24}
    assert t.tensor_runs == {"simdgroups": 4}
    assert t.device_bytes_read == 4 * (64 * 24 + 24 * 32) * 2
    assert t.device_bytes_written == 4 * 64 * 32 * 4
    t = cpu.dispatch_threadgroups(lib.function("one_thread"), (1, 1, 1), (1, 1, 1), args, profile=True).totals
    assert t.tensor_flops == {} and t.tensor_thread_flops == {"half": 2 * 48 * 40 * 24}
    assert t.tensor_runs == {"thread": 1}
    assert t.device_bytes_read == (48 * 24 + 24 * 40) * 2
    assert t.device_bytes_written == 48 * 40 * 4


def test_the_model_runs_tensor_ops_on_m5s_accelerators_and_at_the_matrix_rate_before(cpu):
    p = gemm_profile(cpu, "half", False, M=64, N=64, K=64)
    flops = 2 * 64 ** 3
    m5, m1, m4 = estimate(p, "M5"), estimate(p, "M1"), estimate(p, "M4")
    assert m5.flops == flops
    assert m5.compute_s == pytest.approx(flops / gpu("M5").tensor_fp16_flops)
    assert m1.compute_s == pytest.approx(flops / gpu("M1").fp16_matrix_flops)
    assert m4.compute_s == pytest.approx(flops / gpu("M4").fp16_matrix_flops)
    # an M5's 10 cores at 1024 FLOPs a clock against an M4's 10 at 256 (clocks 1.74 and 1.578 GHz)
    assert m4.compute_s / m5.compute_s == pytest.approx(4.0 * 1.74 / 1.578)
    tf32 = gemm_profile(cpu, "float", True, M=64, N=64, K=64)
    assert estimate(tf32, "M1").compute_s == pytest.approx(flops / gpu("M1").fp32_flops)
    assert estimate(tf32, "M5 Max").compute_s == pytest.approx(flops / gpu("M5 Max").tensor_fp32_flops)
    assert all(gpu(n).neural_accelerator for n in ("M5", "M5 Pro", "M5 Max"))
    assert not any(gpu(n).neural_accelerator for n in ("M1", "M2 Ultra", "M3 Max", "M4 Max"))


def test_the_summary_names_the_tensor_ops(cpu):
    text = gemm_profile(cpu, "half", False).format_summary("M5")
    assert "tensor ops       8 matmul2d runs = 65.5k FLOPs (half 65.5k), 16 cooperative loads, 4 stores" in text


def test_the_reference_tensor_ops_gemm_counts_exactly(cpu):
    """meTile's hardware-verified tensor_ops GEMM at 128^3 f32: 4 threadgroups of 4 simdgroups, each 4 relaxed
    32x32x32 runs over cooperative tensors loaded from device memory, and one 32x32 store."""
    from pathlib import Path

    ref = Path(__file__).resolve().parent / "data" / "reference_msl" / "gemm_tensor_ops_f32_64x64x32"
    fn = cpu.compile((ref / "kernel.metal").read_text(), name="gemm_tensor_ops.metal").function("mtile_matmul")
    n = 128
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    c = np.zeros((n, n), np.float32)
    p = cpu.dispatch_threadgroups(fn, (2, 2, 1), (128, 1, 1), [a, b, c, np.int32(n), np.int32(n), np.int32(n)],
                                  profile=True)
    t = p.totals
    assert t.tensor_flops == {"tf32": 2 * n ** 3}
    assert t.tensor_runs == {"simdgroup": 64}
    assert (t.cooperative_loads, t.cooperative_stores) == (128, 16)
    assert t.device_bytes_read == 64 * 2 * 32 * 32 * 4 and t.device_bytes_written == n * n * 4
    assert estimate(p, "M1").compute_s == pytest.approx(2 * n ** 3 / gpu("M1").fp32_flops)
    assert estimate(p, "M5").compute_s == pytest.approx(2 * n ** 3 / gpu("M5").tensor_fp32_flops)
