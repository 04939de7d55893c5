"""The Apple GPU table of the performance model: every family present, figures consistent with the derivations
its comments state and with the published figures they come from, and `gpu()` lookups by name."""

from __future__ import annotations

import math
import re
from pathlib import Path

import attrs
import pytest
import tomllib

from metile.ir.errors import MetileError
from metile.profile import gpus
from metile.profile.gpus import GPUS, GpuSpec, UnknownGpuError, gpu
from metile.profile.model import peak_flops

ROWS = list(GPUS.values())
TIER_ORDER = ("base", "Pro", "Max", "Ultra")


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel)


def test_every_family_has_a_base_chip_and_only_the_ultras_that_exist():
    families = {row.family for row in ROWS}
    assert families == {"M1", "M2", "M3", "M4", "M5"}
    assert {row.family for row in ROWS if row.tier == "base"} == families
    ultras = {row.name for row in ROWS if row.tier == "Ultra"}
    assert ultras == {"M1 Ultra", "M2 Ultra", "M3 Ultra"}   # Apple: no M4 Ultra; no M5 Ultra announced


def test_names_families_and_tiers_agree():
    for name, row in GPUS.items():
        assert row.name == name
        assert row.tier in TIER_ORDER
        expected = row.family if row.tier == "base" else f"{row.family} {row.tier}"
        assert name == expected


def test_numeric_fields_are_positive_and_bins_are_smaller_configurations():
    for row in ROWS:
        for field in attrs.fields(GpuSpec):
            value = getattr(row, field.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert value > 0, f"{row.name}.{field.name} = {value}"
        assert all(0 < b < row.gpu_cores for b in row.bins), row.name
        assert list(row.bins) == sorted(set(row.bins)), row.name


def test_fp16_and_matrix_peaks_are_at_least_fp32():
    for row in ROWS:
        assert row.fp16_matrix_flops >= row.fp16_flops >= row.fp32_flops, row.name


def test_fp32_is_cores_times_128_alus_times_an_fma_times_the_clock():
    for row in ROWS:
        assert close(row.fp32_flops, row.gpu_cores * 128 * 2 * row.clock_ghz * 1e9), row.name
        assert close(row.clock_hz, row.clock_ghz * 1e9)


def test_fp16_equals_fp32_before_m5_and_m5_figures_are_marked_assumed():
    for row in ROWS:
        if row.family != "M5":
            assert row.fp16_flops == row.fp32_flops == row.fp16_matrix_flops, row.name
        else:
            assert close(row.fp16_flops, 2 * row.fp32_flops), row.name
            assert close(row.fp16_matrix_flops, 4 * row.fp32_flops), row.name
            assert {"fp16_flops", "fp16_matrix_flops"} <= set(row.assumed), row.name


def test_memory_bandwidth_is_the_interface_peak():
    for row in ROWS:
        assert close(row.memory_bandwidth, row.memory_bus_bits / 8 * row.memory_mts * 1e6), row.name
        assert row.memory_bus_bits % 64 == 0, row.name


# Unified-memory bandwidth Apple states for each chip, GB/s (Apple's announcements of each chip).
APPLE_BANDWIDTH_GBS = {
    "M1": 68.25, "M1 Pro": 200, "M1 Max": 400, "M1 Ultra": 800,
    "M2": 100, "M2 Pro": 200, "M2 Max": 400, "M2 Ultra": 800,
    "M3": 100, "M3 Pro": 150, "M3 Max": 400, "M3 Ultra": 819,
    "M4": 120, "M4 Pro": 273, "M4 Max": 546,
    "M5": 153, "M5 Pro": 307, "M5 Max": 614,
}


def test_bandwidth_agrees_with_apples_figures_within_their_rounding():
    assert set(APPLE_BANDWIDTH_GBS) == set(GPUS)
    for name, gbs in APPLE_BANDWIDTH_GBS.items():
        ratio = GPUS[name].memory_bandwidth / (gbs * 1e9)
        assert 1.0 <= ratio <= 1.025, f"{name}: {ratio:.4f}"


# metal-benchmarks README, Overview table, GOPS32 column (billions of FP32 FLOP/s).
METAL_BENCHMARKS_GOPS32 = {"M1": 2617, "M1 Pro": 5308, "M1 Max": 10617, "M1 Ultra": 21233, "M2": 3579,
                           "M2 Pro": 6800, "M2 Max": 13600}
# FP32 peaks quoted by Wikipedia's "Apple M1" article, TFLOP/s.
WIKIPEDIA_TFLOPS = {"M1": 2.6, "M1 Max": 10.4, "M1 Ultra": 21}


def test_fp32_peaks_agree_with_published_figures():
    for name, gops in METAL_BENCHMARKS_GOPS32.items():
        assert close(GPUS[name].fp32_flops, gops * 1e9, rel=1e-3), name
    for name, tflops in WIKIPEDIA_TFLOPS.items():
        assert close(GPUS[name].fp32_flops, tflops * 1e12, rel=0.021), name


def test_clocks_are_not_below_public_measurements():
    assert GPUS["M4 Pro"].clock_ghz == 1.578                   # eclecticlight: powermetrics maximum
    assert GPUS["M5"].fp32_flops >= 4.1e12                     # meTile's probe: measured FP32 throughput
    assert GPUS["M5"].threadgroup_memory_bandwidth >= 3361e9   # meTile's probe: threadgroup-memory reads
    assert GPUS["M1"].clock_ghz == 1.278 and GPUS["M1 Max"].clock_ghz == 1.296   # metal-benchmarks


def test_threadgroup_memory_figures():
    for row in ROWS:
        assert row.threadgroup_memory == 32 * 1024
        assert row.simd_width == 32
        assert (row.tg_banks, row.tg_bank_bytes) == (32, 4)
        words = 1 if row.family in ("M1", "M2") else 2          # a word per bank per clock; M3 on two (assumed)
        assert row.tg_bytes_per_clock_per_core == words * row.tg_banks * row.tg_bank_bytes
        assert close(row.threadgroup_memory_bandwidth,
                     row.gpu_cores * row.tg_bytes_per_clock_per_core * row.clock_hz), row.name
        assert {"tg_bytes_per_clock_per_core", "threadgroup_memory_bandwidth"} <= set(row.assumed), row.name


def test_last_level_cache_sizes():
    expected_mib = {"base": 8, "Pro": 24, "Max": 48, "Ultra": 96}
    for row in ROWS:
        assert row.last_level_cache == expected_mib[row.tier] * 2**20, row.name
        if row.family in ("M3", "M4", "M5"):
            assert "last_level_cache" in row.assumed, row.name


@pytest.mark.parametrize("family", ["M1", "M2", "M3", "M4", "M5"])
def test_tiers_within_a_family_are_ordered_by_cores_and_bandwidth(family):
    rows = sorted((row for row in ROWS if row.family == family), key=lambda r: TIER_ORDER.index(r.tier))
    assert len(rows) >= 3
    for lower, higher in zip(rows, rows[1:]):
        assert lower.gpu_cores < higher.gpu_cores, (lower.name, higher.name)
        assert lower.memory_bandwidth < higher.memory_bandwidth, (lower.name, higher.name)
        assert lower.last_level_cache <= higher.last_level_cache, (lower.name, higher.name)


def test_every_row_names_documented_sources_and_real_assumed_fields():
    documented = gpus.__doc__
    fields = {f.name for f in attrs.fields(GpuSpec)}
    for row in ROWS:
        keys = [key.strip() for key in row.source.split(";")]
        assert row.source.strip() and all(keys), row.name
        for key in keys:
            assert f"``{key}``" in documented, f"{row.name}: source {key!r} is not described"
        assert set(row.assumed) <= fields, row.name
        assert len(row.assumed) == len(set(row.assumed)), row.name


@pytest.mark.parametrize("spelling", ["M3 Max", "m3max", "M3MAX", "  m3  max ", "M3-Max", "m3_max"])
def test_gpu_accepts_case_and_space_variants(spelling):
    assert gpu(spelling) is GPUS["M3 Max"]


def test_gpu_finds_every_row_by_its_own_name_and_compact_form():
    for name, row in GPUS.items():
        assert gpu(name) is row
        assert gpu(name.replace(" ", "").lower()) is row


@pytest.mark.parametrize("bad", ["M4 Ultra", "M6", "M1 Maxx", "", "A17 Pro", None, 3])
def test_unknown_gpu_raises_a_metile_error_listing_the_known_names(bad):
    with pytest.raises(UnknownGpuError) as info:
        gpu(bad)
    assert isinstance(info.value, MetileError)
    message = str(info.value)
    assert repr(bad) in message
    for name in GPUS:
        assert name in message


def test_rows_are_frozen():
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        GPUS["M1"].gpu_cores = 9


def _chips_toml_expected(spec: GpuSpec, figure: str) -> list[float] | None:
    """The numbers a `[[chip.figure]]` of benchmarks/calibration/chips.toml must begin its `table_value` with, in
    the units it prints them (TFLOP/s, GB/s, TB/s, MiB), for the figures that are numbers of the table."""
    if figure.startswith("gpu_cores"):
        return [spec.gpu_cores, *spec.bins]
    if figure == "clock_ghz":
        return [spec.clock_ghz]
    if figure.startswith("memory:"):
        return [spec.memory_bus_bits, spec.memory_mts, spec.memory_bandwidth / 1e9]
    if figure.startswith("fp32_flops"):
        return [spec.fp32_flops / 1e12]
    if figure.startswith("fp16_flops"):
        return [spec.fp16_flops / 1e12, spec.fp16_matrix_flops / 1e12]
    if figure.startswith("bf16 peak"):
        return [peak_flops(spec, "bfloat") / 1e12]
    if figure.startswith("threadgroup_memory_bandwidth"):
        return [spec.threadgroup_memory_bandwidth / 1e12]
    if figure == "last_level_cache":
        return [spec.last_level_cache / 2**20]
    return None


def test_the_sources_file_holds_the_tables_figures():
    """benchmarks/calibration/chips.toml lists each figure of the table beside its sources: a figure changed in
    gpus.py without its row there (the M5 family's clock once) leaves the sources vouching for a number the model
    does not use."""
    data = tomllib.loads((Path(__file__).resolve().parents[1] / "benchmarks/calibration/chips.toml").read_text())
    assert {c["name"] for c in data["chip"]} == set(GPUS)
    stale = []
    for chip in data["chip"]:
        spec = gpu(chip["name"])
        for fig in chip["figure"]:
            want = _chips_toml_expected(spec, fig["figure"])
            if want is None:
                continue
            got = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", str(fig["table_value"]))][:len(want)]
            if len(got) < len(want) or not all(math.isclose(g, w, rel_tol=1e-3, abs_tol=5e-4)
                                               for g, w in zip(got, want)):
                stale.append((chip["name"], fig["figure"], fig["table_value"], want))
    assert not stale, stale
