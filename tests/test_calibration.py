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


def _reference_run():
    """A Run of one small dispatch whose counts the model can price (the reference GEMM, 128^3)."""
    import metile
    from benchmarks.calibration_runs import Run
    from benchmarks.gpu_model_runs import REFERENCE_GEMM

    dev = metile.device("cpu")
    fn = dev.compile(REFERENCE_GEMM.read_text(), name="gemm.metal").function("mtile_matmul")
    a = np.ones((128, 128), np.float32)
    prof = dev.dispatch_threadgroups(fn, (2, 2, 1), (128, 1, 1), [a, a, np.zeros_like(a), np.int32(128),
                                                                   np.int32(128), np.int32(128)], profile=True)
    return Run((prof, prof), "mtile_matmul")


def test_a_host_call_adds_its_cost_once_to_the_estimate_and_never_to_the_bound():
    """An entry timed as one host call (`timing = "host_call"`) is predicted as its dispatches' estimates plus
    HOST_CALL_S, once whatever the number of dispatches; its bound is the dispatches' bounds alone; an entry without
    the attribute gets no host cost."""
    import benchmarks.calibrate as calibrate

    run = _reference_run()
    entry = {"id": "x", "chip": "M1", "kind": "gemm", "time_s": 1.0}
    gpu_only = calibrate.predict(entry, run)
    per_call = calibrate.predict({**entry, "timing": "host_call"}, run)
    dispatches = [p.estimate(calibrate.spec_of(entry)) for p in run.profiles]
    assert gpu_only["estimate"] == pytest.approx(sum(e.estimate_s for e in dispatches))
    assert per_call["estimate"] == pytest.approx(gpu_only["estimate"] + calibrate.HOST_CALL_S)
    assert per_call["bound"] == gpu_only["bound"] == pytest.approx(sum(e.bound_s for e in dispatches))


def test_the_timed_entries_that_say_they_wait_per_call_are_the_host_call_entries():
    """`timing = "host_call"` sits on exactly the entries whose recorded method waits for the GPU per timed call."""
    entries = tomllib.loads(DATA.read_text())["measurement"]
    for e in entries:
        if e.get("time_s") is None:
            continue
        waits = "mx.eval" in e["method"] or "synchronize" in e["method"]
        assert (e.get("timing") == "host_call") == waits, e["id"]


def test_the_unfused_softmax_moves_eight_passes_of_its_array():
    """MLX's softmax as separate kernels over a (64, 1024) float32 array: max and sum read the array once and write
    one float a row; subtract and divide read it, the row's value and the two operands' 2-D strides (two int64 each)
    and write it; exp reads and writes it. That is 8 x 256 KiB, 4 x 256 B and 2 x 32 B of distinct device bytes, in
    five dispatches in that order."""
    from benchmarks.calibration_runs import _profile, run_softmax_graph

    rows, cols = 64, 1024
    profs = _profile(lambda dev: run_softmax_graph(dev, rows, cols), False)
    assert [p.kernel for p in profs] == ["row_reduce_simple_maxfloat32", "g2_Subtractfloat32", "vn_Expfloat32float32",
                                         "row_reduce_simple_sumfloat32", "g2_Dividefloat32"]
    array, column, strides = rows * cols * 4, rows * 4, 2 * 2 * 8
    assert [p.device_unique_bytes for p in profs] == [array + column, 2 * array + column + strides, 2 * array,
                                                      array + column, 2 * array + column + strides]


def test_an_unfused_entry_is_profiled_as_the_separate_kernels(monkeypatch):
    """`graph = "unfused"` on a softmax entry selects the five-kernel graph; without it the fused kernel runs."""
    from benchmarks import calibration_runs

    monkeypatch.setattr(calibration_runs, "softmax_graph", lambda rows, cols: ("graph", rows, cols))
    monkeypatch.setattr(calibration_runs, "softmax", lambda dtype, rows, cols: ("fused", rows, cols))
    entry = {"id": "mlxbench-softmax-m1max", "chip": "M1 Max", "kind": "softmax"}
    assert calibration_runs.run({**entry, "graph": "unfused"}).profiles == ("graph", 65536, 1024)
    assert calibration_runs.run(entry).profiles == ("fused", 65536, 1024)


def _row(name: str, measured: float, estimate: float, *, bound: float | None = None, holdout: bool = False,
         proxy: bool = False, chip: str = "M1", source: str = "https://example.org/table") -> dict:
    return {"id": name, "chip": chip, "measured": measured, "estimate": estimate, "holdout": holdout, "proxy": proxy,
            "bound": 0.5 * measured if bound is None else bound, "source": source}


def test_a_run_meeting_every_target_passes():
    from benchmarks.calibrate import failed_targets

    rows = [_row(f"e{i}", 1.0, 1.2, holdout=i % 3 == 2) for i in range(9)]
    assert failed_targets(rows, [{"name": "r", "tie": False, "ok": True}]) == []


def test_each_missed_target_is_named():
    from benchmarks.calibrate import failed_targets

    good = [_row(f"e{i}", 1.0, 1.1, holdout=i % 3 == 2) for i in range(10)]
    (miss,) = failed_targets([*good[:-1], _row("over", 1.0, 1.1, bound=1.01)], [])
    assert "bound above the measurement" in miss and "over" in miss
    # a median of 1.4x: every estimate off by 1.4
    median = failed_targets([_row(f"e{i}", 1.0, 1.4) for i in range(10)], [])
    assert any("all: estimate error median 1.40x" in m for m in median)
    # two of ten beyond 2x (80% within): the median is still fine
    (within,) = failed_targets([*good[:8], _row("x", 1.0, 2.5), _row("y", 1.0, 0.4)], [])
    assert "all: estimate within 2x on 80%" in within
    # the held-out third alone misses the median while the whole set meets it
    held = failed_targets([*[_row(f"t{i}", 1.0, 1.0) for i in range(8)],
                           *[_row(f"h{i}", 1.0, 1.5, holdout=True) for i in range(4)]], [])
    assert held == ["held-out: estimate error median 1.50x, above 1.35x"]
    # a proxy's estimate is not counted, its bound is
    assert failed_targets([*good, _row("p", 1.0, 9.0, proxy=True)], []) == []
    (wrong,) = failed_targets(good, [{"name": "a-beats-b", "tie": False, "ok": False},
                                     {"name": "c-beats-d", "tie": False, "ok": True}])
    assert wrong == "1 of 2 rankings wrong: a-beats-b"
    assert failed_targets(good, [], peak_fail=1) == ["1 published rates above the table's peak"]


def test_a_wrong_hand_listed_ranking_is_found():
    from benchmarks.calibrate import rankings

    data = {"ranking": [{"id": "fast-beats-slow", "measurements": ["fast", "slow"]}]}
    rows = {"fast": _row("fast", 1.0, 1.3), "slow": _row("slow", 1.5, 1.2)}
    _, checks = rankings(data, rows)
    assert [(c["name"], c["ok"]) for c in checks] == [("fast-beats-slow", False)]
    rows["slow"] = _row("slow", 1.5, 1.4)
    assert [c["ok"] for c in rankings(data, rows)[1]] == [True]


def test_an_estimate_beyond_its_targets_fails_the_run(monkeypatch, capsys):
    """A bound below the measurement no longer passes the run by itself: an estimate 3x off misses both estimate
    targets and the run exits 1 naming them."""
    import benchmarks.calibrate as calibrate

    real = calibrate.predict
    monkeypatch.setattr(calibrate, "predict", lambda entry, run: {**real(entry, run), "estimate": 3 * entry["time_s"]})
    assert calibrate.main(["--only", "metile-ci-m1-reference-gemm"]) == 1
    out = capsys.readouterr().out
    assert "TARGET MISSED: all: estimate error median 3.00x, above 1.35x" in out
    assert "TARGET MISSED: all: estimate within 2x on 0% of the entries, below 90%" in out
    monkeypatch.setattr(calibrate, "predict", real)
    assert calibrate.main(["--only", "metile-ci-m1-reference-gemm"]) == 0
    assert "every target met" in capsys.readouterr().out


def test_every_pair_from_one_source_on_one_chip_is_a_ranking():
    """Beyond the hand-listed rankings, two entries of one source on one chip measured 1.1x or more apart must be
    estimated in the same order; other sources, other chips and proxies are not paired."""
    from benchmarks.calibrate import rankings

    rows = {"a": _row("a", 1.0, 1.0), "b": _row("b", 2.0, 0.9),                  # estimated the wrong way round
            "c": _row("c", 3.0, 3.0, chip="M2"),                                  # another chip
            "d": _row("d", 4.0, 0.1, source="https://example.org/other"),         # another source
            "p": _row("p", 5.0, 0.1, proxy=True)}                                 # a proxy
    _, checks = rankings({"ranking": []}, rows)
    assert [(c["name"], c["tie"], c["ok"]) for c in checks] == [("a vs b", False, False)]
    rows["b"] = _row("b", 2.0, 1.1)
    assert [c["ok"] for c in rankings({"ranking": []}, rows)[1]] == [True]
    # a hand-listed ranking of the same pair is checked once, under its own name
    data = {"ranking": [{"id": "a-beats-b", "measurements": ["b", "a"]}]}
    assert [c["name"] for c in rankings(data, rows)[1]] == ["a-beats-b"]


def test_a_tie_must_not_be_estimated_far_apart():
    """Two entries measured within 1.1x of each other are a tie: either order is right, but estimates more than
    TIE_FACTOR apart are wrong."""
    from benchmarks.calibrate import TIE_FACTOR, rankings

    rows = {"a": _row("a", 1.0, 1.0), "b": _row("b", 1.05, 0.8)}
    assert [(c["tie"], c["ok"]) for c in rankings({"ranking": []}, rows)[1]] == [(True, True)]
    rows["b"] = _row("b", 1.05, 1.01 * TIE_FACTOR)
    assert [(c["tie"], c["ok"]) for c in rankings({"ranking": []}, rows)[1]] == [(True, False)]
    rows["b"] = _row("b", 1.05, 0.99 / TIE_FACTOR)
    assert [(c["tie"], c["ok"]) for c in rankings({"ranking": []}, rows)[1]] == [(True, False)]


def test_the_by_source_table_groups_entries_by_source_kernel_and_proxy():
    from benchmarks.calibrate import by_source

    url = "https://example.org/bench"
    rows = [{**_row("mlxbench-bmm-m1", 2.0, 2.4), "source": url, "kernel": "k", "chip": "M1"},
            {**_row("mlxbench-bmm-m2", 1.0, 0.9, holdout=True), "source": url, "kernel": "k", "chip": "M2"},
            {**_row("mlxbench-bmm-m3", 1.0, 1.1), "source": url, "kernel": "k", "chip": "M1"},
            {**_row("metile-ci-m1", 1.0, 1.5), "source": "a file", "kernel": "k", "chip": "M1", "proxy": True}]
    lines = by_source(rows).splitlines()
    assert len(lines) == 4     # the header, its rule and two groups
    # bound/measured is 0.5 on every row of _row; estimate/measured 1.2, 0.9 and 1.1: median 1.10
    assert lines[2] == f"| [mlxbench-bmm]({url}) | k | M1, M2 | 3 (1) | 0.50 | 1.10 (0.90-1.20) |"
    assert lines[3] == "| metile-ci | k (proxy) | M1 | 1 (0) | 0.50 | 1.50 (1.50-1.50) |"


def test_a_timed_norm_entry_that_does_not_run_says_why(capsys):
    import benchmarks.calibrate as calibrate
    from benchmarks import calibration_runs

    norms = [e for e in tomllib.loads(DATA.read_text())["measurement"] if e["kind"] == "norm" and e.get("time_s")]
    assert len(norms) == 3
    for e in norms:
        assert calibration_runs.run(e) is None and e["not_run"]
    assert calibrate.main(["--only", "mlxi4263-m2-rmsnorm-silu-float16"]) == 0
    out = capsys.readouterr().out
    assert "mlxi4263-m2-rmsnorm-silu-float16" in out and "not run: MLX's rms_norm kernel is defined only" in out


def test_the_fit_reads_the_training_entries_only_and_leaves_the_model_as_it_was(monkeypatch):
    """`--fit` chooses every constant of FIT_GRID on the training entries: a held-out entry (and a proxy) is never
    predicted, the lines name each constant, and the model's constants are the same afterwards."""
    import benchmarks.calibrate as calibrate
    from benchmarks.calibration_runs import Run
    from metile.profile import rates

    run = _reference_run()
    proxy = Run(run.profiles, "mtile_matmul", proxy=True)
    est = calibrate.predict({"id": "x", "chip": "M1", "kind": "gemm"}, run)["estimate"]
    data = {"measurement": [{"id": "train", "chip": "M1", "kind": "gemm", "time_s": 1.2 * est},
                            {"id": "held", "chip": "M1", "kind": "gemm", "time_s": 9 * est, "holdout": True},
                            {"id": "proxy", "chip": "M1", "kind": "gemm", "time_s": 9 * est}]}
    seen = []
    real = calibrate.predict

    def spy(entry, r, spec=None):
        seen.append(entry["id"])
        return real(entry, r, spec)

    monkeypatch.setattr(calibrate, "predict", spy)
    before = (rates.OVERLAP, rates.DISPATCH_S, calibrate.HOST_CALL_S, dict(rates.RATES))
    lines = calibrate.fit(data, {"train": run, "held": run, "proxy": proxy}).splitlines()
    assert set(seen) == {"train"}
    assert lines[0].startswith("fit on 1 training entries")
    assert [line.split()[0] for line in lines[1:]] == list(calibrate.FIT_GRID)
    assert (rates.OVERLAP, rates.DISPATCH_S, calibrate.HOST_CALL_S, dict(rates.RATES)) == before


def test_the_docs_quote_the_by_source_row_the_run_prints(capsys):
    """docs/performance.md holds the table calibrate.py prints: the row of meTile's reference GEMM (an entry quick to
    profile, whose estimate moves with every fitted constant of the M1) is the one a run prints today."""
    import benchmarks.calibrate as calibrate

    assert calibrate.main(["--only", "metile-ci-m1-reference-gemm"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| metile-ci |"))
    assert row in (ROOT / "docs" / "performance.md").read_text().splitlines()
