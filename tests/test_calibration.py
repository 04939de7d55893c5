"""The calibration set and its runner (benchmarks/calibrate.py, benchmarks/calibration_runs.py): the held-out third
is fixed in the data file, the extrapolation from two reduced sizes reproduces a profile at a third size exactly,
and the bound-versus-measurement check fails loudly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "calibration" / "measurements.toml"


def test_a_fixed_third_of_the_timed_entries_is_held_out():
    entries = tomllib.loads(DATA.read_text())["measurement"]
    timed = [e["id"] for e in entries if e.get("time_s") is not None]
    held = [e["id"] for e in entries if e.get("holdout")]
    assert held == timed[2::3]                       # every third timed entry, in file order
    assert len(held) == len(timed) // 3


def test_extrapolating_two_k_sizes_gives_the_profile_at_a_third():
    """A GEMM's counts are affine in K: profiles at K = 64 and 128 extrapolated to 256 equal the one at 256."""
    import metile
    from benchmarks.calibration_runs import extrapolate
    from benchmarks.gpu_model_runs import REFERENCE_GEMM

    dev = metile.device("cpu")
    fn = dev.compile(REFERENCE_GEMM.read_text(), name="gemm.metal").function("mtile_matmul")

    def at(k: int):
        a, b = np.ones((128, k), np.float32), np.ones((k, 128), np.float32)
        return dev.dispatch_threadgroups(fn, (2, 2, 1), (128, 1, 1), [a, b, np.zeros((128, 128), np.float32),
                                                                      np.int32(128), np.int32(128), np.int32(k)],
                                         profile=True)

    got = extrapolate(at(64), at(128), 64, 128, 256, (2, 2, 1))
    want = at(256)
    assert got.totals == want.totals
    assert got.device_traffic == want.device_traffic
    assert got.device_traffic_per_threadgroup == want.device_traffic_per_threadgroup
    for gpu in ("M1", "M5 Max"):
        assert got.estimate(gpu).bound_s == pytest.approx(want.estimate(gpu).bound_s)
        assert got.estimate(gpu).estimate_s == pytest.approx(want.estimate(gpu).estimate_s)


def test_a_bound_above_a_measurement_fails_the_run(monkeypatch, capsys):
    import benchmarks.calibrate as calibrate
    from benchmarks import calibration_runs

    real = calibrate.predict

    def too_slow(entry, run):
        out = real(entry, run)
        return {**out, "bound": 2 * entry["time_s"]}

    monkeypatch.setattr(calibrate, "predict", too_slow)
    assert calibration_runs.run({"id": "metile-ci-m1-reference-gemm", "chip": "M1", "kind": "gemm"}) is not None
    assert calibrate.main(["--only", "metile-ci-m1-reference-gemm"]) == 1
    assert "BOUND ABOVE MEASURED" in capsys.readouterr().out
    monkeypatch.setattr(calibrate, "predict", real)
    assert calibrate.main(["--only", "metile-ci-m1-reference-gemm"]) == 0
