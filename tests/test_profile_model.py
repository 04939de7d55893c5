"""The Apple GPU model's terms (metile.profile.model), each checked on profiles whose counts are known by hand:
occupancy and waves, the device-memory bound and the reuse model, the matrix, tensor and threadgroup-memory terms,
how the estimate combines them, binned parts, and the profiled dispatch of a real kernel."""

from __future__ import annotations

import subprocess
import sys

import attrs
import pytest

from metile.profile import rates as R
from metile.profile.counts import Counts, Launch, Profile
from metile.profile.gpus import UnknownGpuError, binned, gpu
from metile.profile.model import device_traffic, estimate, occupancy

NONE = Counts()


def profile(counts: Counts = NONE, *, tgs=(64, 1, 1), threads=(256, 1, 1), tg_memory=0, per_tg_segments=0.0,
            segments=0.0) -> Profile:
    """A profile made by hand: `segments` the dispatch's distinct 64-byte segments, `per_tg_segments` the sum over
    threadgroups of each one's distinct segments."""
    return Profile(kernel="k", totals=counts, lines=(), launch=Launch(tgs, threads, 32, tg_memory),
                   threadgroups_profiled=tgs[0] * tgs[1] * tgs[2], device_unique_bytes_per_threadgroup=0,
                   device_unique_bytes=0, device_unique_segments_per_threadgroup=per_tg_segments,
                   device_unique_segments=segments)


def test_occupancy_is_limited_by_threads_or_threadgroup_memory_and_counts_waves():
    m1 = gpu("M1")                                     # 8 cores
    o = occupancy(profile(tgs=(100, 1, 1), threads=(256, 1, 1), tg_memory=12 * 1024), m1)
    # 1024 threads a core allow 4 threadgroups of 256; 32 KiB allow 2 of 12 KiB: 2 a core, 16 at once, 7 waves
    assert (o.per_core, o.limited_by, o.concurrent, o.waves) == (2, "threadgroup memory", 16, 7)
    assert o.wave_efficiency == pytest.approx(100 / (7 * 16))
    assert o.latency_hiding == 1.0                     # 2 x 8 simdgroups resident, 4 needed
    o = occupancy(profile(tgs=(8, 1, 1), threads=(64, 1, 1)), m1)
    # one threadgroup of 2 simdgroups a core (8 threadgroups, 8 cores): half the 4 simdgroups needed
    assert (o.per_core, o.limited_by, o.waves, o.wave_efficiency) == (16, "threads", 1, 1.0)
    assert o.latency_hiding == pytest.approx(2 / 4)


def test_the_device_bound_moves_the_footprint_less_what_the_cache_holds():
    m1 = gpu("M1")                                     # 8 MiB last-level cache
    big = 64 * 2**20 // 64                             # a 64 MiB footprint in segments
    e = estimate(profile(per_tg_segments=big, segments=big), m1)
    cache_bw = m1.gpu_cores * R.CACHE_BYTES_PER_CORE_CLOCK_BOUND * m1.clock_hz
    assert e.term("device memory").bound_s == pytest.approx(max(56 * 2**20 / m1.memory_bandwidth,
                                                                64 * 2**20 / cache_bw))
    # a footprint that fits the cache: bounded by the cache's bandwidth only
    small = 2**20 // 64
    e = estimate(profile(per_tg_segments=small, segments=small), m1)
    assert e.term("device memory").bound_s == pytest.approx(2**20 / cache_bw)
    # no reuse across threadgroups never enters the bound: 64 threadgroups each reading the same 64 MiB
    e = estimate(profile(per_tg_segments=64 * big, segments=big), m1)
    assert e.term("device memory").bound_s == pytest.approx(56 * 2**20 / m1.memory_bandwidth)


def test_shared_segments_are_moved_again_in_the_share_of_the_live_set_beyond_the_cache():
    m1 = gpu("M1")
    seg = 64
    # 64 threadgroups of 1024 threads (one a core: 8 run at once), each touching 4 MiB, 1 MiB of it its own
    per_tg = 4 * 2**20 // seg
    p = profile(tgs=(64, 1, 1), threads=(1024, 1, 1), per_tg_segments=64 * per_tg, segments=64 * 2**20 // seg)
    occ = occupancy(p, m1)
    assert occ.concurrent == 8
    live = 8 * 4 * 2**20                               # no barriers, no instructions: one step, all 4 MiB live
    miss = 1 - m1.last_level_cache / live
    footprint = 64 * 2**20
    assert device_traffic(p, occ, m1.last_level_cache) == pytest.approx(footprint + (64 * 4 * 2**20 - footprint)
                                                                        * miss)
    # with 32 steps (64 barriers a threadgroup) the live set fits: shared segments are moved once
    staged = profile(Counts(barriers=64 * 64), tgs=(64, 1, 1), threads=(1024, 1, 1), per_tg_segments=64 * per_tg,
                     segments=64 * 2**20 // seg)
    assert device_traffic(staged, occupancy(staged, m1), m1.last_level_cache) == pytest.approx(footprint)
    # so with 256 device instructions a simdgroup (32 simdgroups, 8 instructions a step)
    looped = profile(Counts(device_instructions=64 * 32 * 256), tgs=(64, 1, 1), threads=(1024, 1, 1),
                     per_tg_segments=64 * per_tg, segments=64 * 2**20 // seg)
    assert device_traffic(looped, occupancy(looped, m1), m1.last_level_cache) == pytest.approx(footprint)


def test_a_threadgroup_rereading_its_own_segments_beyond_its_share_of_the_cache_moves_them_again():
    m1 = gpu("M1")                                     # 8 MiB last-level cache
    # 4 threadgroups (one a core) each reading its own 4 MiB three times, in one step: a 2 MiB share of the cache
    own = 4 * 2**20 // 64
    p = profile(Counts(device_load_segments=4 * 3 * own), tgs=(4, 1, 1), threads=(1024, 1, 1),
                per_tg_segments=4 * own, segments=4 * own)
    occ = occupancy(p, m1)
    miss = 1 - (8 * 2**20 / 4) / (4 * 2**20)
    assert device_traffic(p, occ, m1.last_level_cache) == pytest.approx(16 * 2**20 + 4 * 8 * 2**20 * miss)
    # the cache term carries every segment the instructions touch, re-reads included, at the cache's rate
    e = estimate(attrs_evolve(p, Counts(device_load_segments=4 * 3 * own, device_segments=4 * 3 * own)), m1)
    assert e.term("cache").estimate_s == pytest.approx(
        4 * 3 * 4 * 2**20 / (m1.gpu_cores * R.rates(m1).cache_bytes * m1.clock_hz * e.occupancy.latency_hiding))


def attrs_evolve(p: Profile, counts: Counts) -> Profile:
    import attrs

    return attrs.evolve(p, totals=counts)


def test_matrix_and_threadgroup_terms_at_the_peak_and_at_the_achieved_rates():
    m2 = gpu("M2")
    n = 2**20                                          # simdgroup multiply-accumulates of float inputs
    counts = Counts(simdgroup_mma={"float": n}, threadgroup_passes=8 * n)
    e = estimate(profile(counts, tgs=(1000, 1, 1), threads=(256, 1, 1)), m2)
    flops = n * 1024
    assert e.term("matrix").bound_s == pytest.approx(flops / m2.fp32_flops)
    occ = e.occupancy
    assert e.term("matrix").estimate_s == pytest.approx(flops / (m2.gpu_cores * 205 * m2.clock_hz * occ.efficiency))
    assert e.term("threadgroup memory").bound_s == pytest.approx(8 * n * 128 / m2.threadgroup_memory_bandwidth)
    assert e.term("threadgroup memory").estimate_s == pytest.approx(
        8 * n * 128 / (m2.gpu_cores * 128 * m2.clock_hz * occ.efficiency))
    # the estimate: the largest term, the share of the rest that does not overlap it, and the dispatch
    times = sorted((t.estimate_s for t in e.terms if t.name != "dispatch"), reverse=True)
    assert e.estimate_s == pytest.approx(R.DISPATCH_S + times[0] + R.OVERLAP * sum(times[1:]))
    assert e.bound_s == max(t.bound_s for t in e.terms) <= e.estimate_s
    # 8 passes of 128 B a multiply-accumulate outweigh its 1024 FLOPs at 205 a clock
    assert e.binding == "threadgroup memory" and e.seconds == e.bound_s and e.term("cache").bound_s == 0


def test_tensor_ops_run_at_the_accelerators_share_on_m5_and_the_matrix_rate_before():
    counts = Counts(tensor_flops={"bfloat": 1e12})
    # 1600 threadgroups of 256 threads fill whole waves on 40 cores and on 10 (4 a core)
    m5, m4 = estimate(profile(counts, tgs=(1600, 1, 1)), "M5 Max"), estimate(profile(counts, tgs=(1600, 1, 1)), "M4")
    assert m5.term("tensor").bound_s == pytest.approx(1e12 / gpu("M5 Max").tensor_fp16_flops)
    assert m5.term("tensor").estimate_s == pytest.approx(1e12 / (gpu("M5 Max").tensor_fp16_flops * 0.8))  # fitted share
    assert m4.term("tensor").estimate_s == pytest.approx(1e12 / (gpu("M4").tensor_fp16_flops * 205 / 256))


def test_a_binned_part_scales_its_compute_and_keeps_its_memory():
    full = gpu("M3 Ultra")
    part = binned(full, 60)
    assert part.gpu_cores == 60 and part.fp32_flops == pytest.approx(full.fp32_flops * 0.75)
    assert part.memory_bandwidth == full.memory_bandwidth and part.last_level_cache == full.last_level_cache
    with pytest.raises(UnknownGpuError, match="at most 80"):
        binned(full, 96)


def test_the_bound_of_the_reference_gemm_is_its_flops_at_the_peak_and_the_estimate_is_above_it():
    import numpy as np

    import metile
    from benchmarks.gpu_model_runs import REFERENCE_GEMM

    dev = metile.device("cpu")
    fn = dev.compile(REFERENCE_GEMM.read_text(), name="gemm.metal").function("mtile_matmul")
    n = 128
    a = np.ones((n, n), np.float32)
    p = dev.dispatch_threadgroups(fn, (2, 2, 1), (128, 1, 1), [a, a, np.zeros_like(a), np.int32(n), np.int32(n),
                                                               np.int32(n)], profile=True)
    e = p.estimate("M1")
    assert e.term("matrix").bound_s == pytest.approx(2 * n**3 / gpu("M1").fp32_flops)
    assert e.bound_s <= e.estimate_s
    d = e.to_dict()
    assert d["bound_s"] == e.bound_s and d["estimate_s"] == e.estimate_s and set(d["terms"]) == {
        "matrix", "tensor", "device memory", "cache", "threadgroup memory", "ALU", "dispatch"}


def test_a_dispatch_without_profile_never_loads_the_model():
    """The model costs a dispatch nothing unless `profile=` is given: a plain dispatch does not even import it."""
    code = (
        "import sys, numpy as np, metile\n"
        "dev = metile.device('cpu')\n"
        "fn = dev.compile('''#include <metal_stdlib>\nusing namespace metal;\n"
        "kernel void k(device float* a [[buffer(0)]], uint i [[thread_position_in_grid]]) { a[i] += 1; }''',"
        " name='k.metal').function('k')\n"
        "a = np.zeros(64, np.float32)\n"
        "dev.dispatch_threads(fn, (64, 1, 1), (32, 1, 1), [a])\n"
        "assert a.sum() == 64\n"
        "print(sorted(m for m in sys.modules if m.startswith('metile.profile')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "metile.profile.model" not in out and "metile.profile.rates" not in out


def test_the_m3_family_takes_the_higher_published_clock():
    """Two aggregators put the M3 family's GPU at 1.6 GHz (radargit, huggingface.js's 4.1 TFLOP/s for 10 cores) and
    one at 1.398 GHz (hmc-tech); the table takes the higher, so 2^20 float simdgroup multiply-accumulates (1024
    FLOPs each) bound at 2^30 / (10 cores x 256 x 1.6 GHz) on an M3, below the M2's 1.398 GHz bound for the same
    work."""
    work = profile(Counts(simdgroup_mma={"float": 2**20}))
    m3, m2 = estimate(work, "M3").term("matrix").bound_s, estimate(work, "M2").term("matrix").bound_s
    assert m3 == pytest.approx(2**30 / (10 * 256 * 1.6e9))
    assert m2 == pytest.approx(2**30 / (10 * 256 * 1.398e9))
    assert "clock_ghz" in gpu("M3 Max").assumed and gpu("M3 Ultra").clock_ghz == gpu("M3").clock_ghz == 1.6


def test_terms_add_where_one_simdgroup_a_scheduler_fences_its_loads_from_its_products():
    m3max = gpu("M3 Max")                              # 40 cores, 4 schedulers each
    n = 2**20                                          # multiply-accumulates
    fenced = Counts(simdgroup_mma={"half": n}, simdgroup_barriers=1.5 * n, threadgroup_passes=4 * n,
                    alu_operations=n)
    # 32 threadgroups of 4 simdgroups on 40 cores: 0.8 simdgroups a scheduler, nothing to issue while one waits
    e = estimate(profile(fenced, tgs=(1, 32, 1), threads=(32, 4, 1)), m3max)
    assert e.occupancy.serial == 1.0
    times = [t.estimate_s for t in e.terms if t.name != "dispatch"]
    assert e.estimate_s == pytest.approx(R.DISPATCH_S + sum(times))          # no overlap at all
    assert e.bound_s == max(t.bound_s for t in e.terms) <= e.estimate_s      # the bound does not change
    # half a barrier a multiply-accumulate fences half the products: half the rest beyond OVERLAP
    half = estimate(profile(attrs.evolve(fenced, simdgroup_barriers=0.5 * n), tgs=(1, 32, 1), threads=(32, 4, 1)),
                    m3max)
    assert half.occupancy.serial == 0.5
    top = max(times)
    share = R.OVERLAP + (1 - R.OVERLAP) * 0.5
    assert half.estimate_s == pytest.approx(R.DISPATCH_S + top + share * (sum(times) - top))
    # 60 threadgroups: 1.5 simdgroups a scheduler, halfway to two that issue in turn
    assert estimate(profile(fenced, tgs=(1, 60, 1), threads=(32, 4, 1)), m3max).occupancy.serial == 0.5
    # 3 threadgroups a core (12 simdgroups, 3 a scheduler), no simdgroup barriers, or no products: OVERLAP alone
    for p in (profile(fenced, tgs=(1, 120, 1), threads=(32, 4, 1)),
              profile(attrs.evolve(fenced, simdgroup_barriers=0), tgs=(1, 32, 1), threads=(32, 4, 1)),
              profile(attrs.evolve(fenced, simdgroup_mma={}), tgs=(1, 32, 1), threads=(32, 4, 1))):
        e = estimate(p, m3max)
        times = sorted((t.estimate_s for t in e.terms if t.name != "dispatch"), reverse=True)
        assert e.occupancy.serial == 0.0
        assert e.estimate_s == pytest.approx(R.DISPATCH_S + times[0] + R.OVERLAP * sum(times[1:]))
