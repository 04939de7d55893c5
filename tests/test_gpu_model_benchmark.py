"""`benchmarks/gpu_model.py --quick` end to end, in a subprocess as a user runs it: the table has a metile and an MLX
column for every problem and GPU, both sides ran whole and matched numpy, and the numbers are sane (the FLOPs
counted are the problem's, no estimate beats the ideal, the calibration line is there). MLX's side may be
unavailable (no wheel, no source checkout): then its column must say why."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_model") / "rows.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_model.py"), "--quick", "--json", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


@pytest.mark.slow
def test_the_table_has_both_columns_for_every_gpu(quick):
    text, data = quick
    assert data["gpus"] == ["M1", "M3 Max", "M5"]
    for name in ("== M1:", "== M3 Max:", "== M5:", "%peak", "bound ", "estimate ", "dev/w", "cnf/ins", "calibration:",
                 "measured 2.34 ms on an M1"):
        assert name in text, name
    kinds = {row["kind"] for row in data["rows"]}
    assert kinds == {"gemm", "softmax", "layer_norm", "attention"}
    for row in data["rows"]:
        assert row["problem"] in text
        assert set(row["metile"]) == set(row["mlx"]) == {"M1", "M3 Max", "M5"}
        assert all(run["impl"] == "metile" for run in row["metile"].values())
        # an f16 GEMM on the M5 runs on tensor ops, compiled for it; everything else for the CPU device's target
        tensor_ops = row["kind"] == "gemm" and row["dtype"] == "float16"
        assert row["metile"]["M5"]["kernel"].endswith(" for M5") == tensor_ops
        for run in row["mlx"].values():
            assert run["impl"] == "mlx"
            assert run["profile"] is not None or run["note"].startswith("unavailable:"), run["note"]


def _runs(data):
    for row in data["rows"]:
        for run in row["metile"].values():
            yield row, run
        for run in row["mlx"].values():
            if run["profile"] is not None:
                yield row, run


@pytest.mark.slow
def test_the_numbers_are_sane(quick):
    _, data = quick
    for row, run in _runs(data):
        p = run["profile"]
        assert run["note"].startswith("checked"), (row["problem"], run["impl"], run["note"])
        assert not run["failed"]
        if row["kind"] == "gemm":
            m, n, k = row["shape"]
            assert p["flops"] == 2 * m * n * k == row["flops"], (row["problem"], run["impl"])
        elif row["kind"] == "attention":
            assert p["flops"] == row["flops"] > 0
        else:
            assert p["flops"] == 0 and p["simdgroup_mma"] == 0
        # every byte the problem must move is moved at least once: the footprint covers the compulsory bytes
        assert p["device_traffic"] >= row["compulsory_bytes"]
        assert p["device_traffic_per_threadgroup"] >= p["device_traffic"]
        assert 0 < p["coalescing_efficiency"] <= 1
        for gpu, est in run["estimates"].items():
            assert est["seconds"] == est["bound_s"] == max(t["bound_s"] for t in est["terms"].values())
            assert est["bound_s"] <= est["estimate_s"], (row["problem"], run["impl"], gpu)
            assert 0 < est["fraction_of_peak"] <= 1 + 1e-9, (row["problem"], run["impl"], gpu)
            assert est["estimate_fraction_of_peak"] <= est["fraction_of_peak"]


@pytest.mark.slow
def test_the_calibration_gemm_is_the_reference_kernel(quick):
    _, data = quick
    cal = data["calibration"]
    assert cal["measured_m1_s"] == 2.34e-3
    assert cal["profile"]["kernel"] == "mtile_matmul"
    assert cal["profile"]["flops"] == 2 * 1024 ** 3
    assert cal["estimates"]["M1"]["seconds"] > 0


def test_mlx_runs_its_tensor_op_gemm_with_its_tile_on_the_m5_chips_only():
    from benchmarks.gpu_model_runs import Kind, Problem, mlx_key
    from metile.profile.gpus import gpu

    p = Problem(Kind.GEMM, "float16", (1024, 1024, 1024), True)
    assert mlx_key(p, gpu("M5"))[1] == ("nax", 128, 128, 512, 4, 4)
    assert mlx_key(p, gpu("M5 Max"))[1] == ("nax", 64, 128, 256, 2, 4)
    deep = Problem(Kind.GEMM, "float32", (512, 512, 8192), True)
    assert mlx_key(deep, gpu("M5 Pro"))[1] == ("nax", 64, 128, 64, 2, 4)
    assert mlx_key(p, gpu("M4 Max"))[1] == (64, 64, 16, 2, 2)
    assert mlx_key(Problem(Kind.ATTENTION, "float16", (1, 8, 1024, 64), False), gpu("M5"))[1] is None


@pytest.mark.slow
def test_on_m5_mlx_gemm_is_its_tensor_op_kernel_and_its_flops_are_counted(tmp_path):
    out = tmp_path / "m5.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_model.py"), "--quick", "--gpu", "M5",
                           "--kind", "gemm", "--json", str(out)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "tensor-op (Neural Accelerators)" in proc.stdout
    for row in json.loads(out.read_text())["rows"]:
        run = row["mlx"]["M5"]
        if run["profile"] is None:
            assert run["note"].startswith("unavailable:"), run["note"]
            continue
        assert run["kernel"].startswith("steel_gemm_fused_nax "), run["kernel"]
        m, n, k = row["shape"]
        assert run["profile"]["tensor_flops"] == run["profile"]["flops"] == 2 * m * n * k
        assert run["estimates"]["M5"]["compute_s"] > 0
