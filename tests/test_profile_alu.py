"""Arithmetic counts of profiled dispatches (metile.metal.cpu.alu_counts) and the model's ALU term: exact counts on
small kernels whose operations are derived by hand (a loop of FMAs, a divergent branch, special functions, a helper
called twice, vector widths), braceless control flow kept as it runs, results the same as the plain build's, the
plain translation untouched, and the term's bound and estimate on a hand-made profile."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.metal.cpu import msl
from metile.profile import rates as R
from metile.profile.counts import Counts, Launch, Profile
from metile.profile.gpus import gpu
from metile.profile.model import estimate

COUNTED = """
#include <metal_stdlib>
using namespace metal;

inline float twice(float a, float b) { return a * b + b; }   // line 5: 2 float operations

kernel void k(device float* out [[buffer(0)]], device const float4* v [[buffer(1)]],
              constant uint& n [[buffer(2)]], uint tid [[thread_position_in_grid]]) {
    float acc = float(tid);
    for (uint i = 0; i < n; i++)
        acc = fma(acc, 0.5f, 1.0f);                          // line 11: 1 FMA a trip
    if (tid < 8)                                             // line 12: 1 integer compare
        acc = exp(acc) + rsqrt(acc + 1.0f);                  // line 13: exp 1+1 special, rsqrt 1 special, 2 adds
    else
        acc = acc * 2.0f;                                    // line 15: 1 multiply
    float4 x = v[tid] * 2.0f + v[tid];                       // line 16: 2 float4 operations = 8
    acc += twice(x.x, x.y) + twice(x.z, x.w);                // line 17: 2 adds (and line 5 twice)
    out[tid] = acc;
}
"""


@pytest.fixture(scope="module")
def dev():
    return metile.device("cpu")


def _line(p, line):
    c = p.line(line)
    return (c.alu_operations, c.integer_operations, c.special_operations)


def test_each_statement_counts_its_operations_once_per_simdgroup_that_runs_it(dev):
    fn = dev.compile(COUNTED, name="counted.metal").function("k")
    v = np.arange(64 * 4, dtype=np.float32).reshape(64, 4) / 100
    out, plain = np.zeros(64, np.float32), np.zeros(64, np.float32)
    n = 10
    p = dev.dispatch_threadgroups(fn, (1, 1, 1), (64, 1, 1), [out, v, np.uint32(n)], profile=True)
    dev.dispatch_threadgroups(fn, (1, 1, 1), (64, 1, 1), [plain, v, np.uint32(n)])
    np.testing.assert_array_equal(out, plain)          # the instrumented build computes the same
    sgs = 64 // 32
    # the FMA loop: n FMAs per lane = n * lanes / 32 simdgroup FMAs; its test and step (2 integer operations a trip)
    # count where its body starts
    assert _line(p, 11) == (n * sgs, 2 * n * sgs, 0)
    assert _line(p, 12) == (0, sgs, 0)
    # divergent: only lanes 0-7 (the first simdgroup) take the exp arm; both simdgroups have lanes in the other
    assert _line(p, 13) == (3, 0, 2)
    assert _line(p, 15) == (sgs, 0, 0)
    assert _line(p, 16) == (8 * sgs, 0, 0)              # float4: one operation per component
    assert _line(p, 17) == (2 * sgs, 0, 0)
    assert _line(p, 5) == (2 * 2 * sgs, 0, 0)           # the helper, inlined at two calls, counts at each
    t = p.totals
    assert (t.alu_operations, t.integer_operations, t.special_operations) == (
        n * sgs + 3 + sgs + 8 * sgs + 2 * sgs + 4 * sgs, 2 * n * sgs + sgs, 2)
    assert "arithmetic" in p.format_summary("M1")


BRACELESS = """
#include <metal_stdlib>
using namespace metal;

template <typename T> T pick(T a, T b, bool first) { return first ? a * b : a + b; }

kernel void k(device float* out [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
    float acc = 0.0f;
    int i = 0;
    while (i < 3) acc += 1.5f, i++;
    do acc *= 1.25f; while (acc < 10.0f);
    for (int j = 0; j < 4; j++) if (j % 2) acc -= 0.5f; else if (j == 2) acc += 2.0f; else acc *= 1.1f;
    switch (tid % 3) {
    case 0: acc = acc / 3.0f; break;
    case 1: { acc = sqrt(acc); break; }
    default: acc = pick(acc, 2.0f, tid % 2 == 0);
    }
    if (tid > 100) return;
    auto doubled = [](float x) { return x * 2.0f; };
    out[tid] = tid & 1 ? doubled(acc) : -acc;
}
"""


def test_braceless_bodies_loops_switches_and_returns_run_as_written(dev):
    tr = msl.translate(BRACELESS, "braceless.metal")
    assert "mt_prof_count" not in tr.cpp and "mt_prof_count" in tr.instrumented_cpp
    fn = dev.compile(BRACELESS, name="braceless.metal").function("k")
    out, plain = np.zeros(96, np.float32), np.zeros(96, np.float32)
    p = dev.dispatch_threadgroups(fn, (1, 1, 1), (96, 1, 1), [out], profile=True)
    dev.dispatch_threadgroups(fn, (1, 1, 1), (96, 1, 1), [plain])
    np.testing.assert_array_equal(out, plain)
    acc = 4.5
    while True:
        acc *= 1.25
        if acc >= 10:
            break
    for j in range(4):
        acc = acc - 0.5 if j % 2 else acc + 2 if j == 2 else acc * np.float32(1.1)
    want = np.array([[acc / 3, np.sqrt(acc), acc * 2 if t % 2 == 0 else acc + 2][t % 3] for t in range(96)])
    want = np.where(np.arange(96) & 1, want * 2, -want)
    np.testing.assert_allclose(out, want, rtol=1e-5)
    sgs = 3
    assert p.line(10).alu_operations == 3 * sgs and p.line(10).integer_operations == 2 * 3 * sgs
    # the square root: only lanes with tid % 3 == 1, which every simdgroup has
    assert p.line(15).special_operations == sgs
    assert p.totals.special_operations == sgs + sgs   # the division by 3.0 (a reciprocal) and the square root
    assert p.line(19).alu_operations == 0 and p.line(20).alu_operations == sgs   # a lambda counts nothing


def test_the_plain_translation_does_not_depend_on_the_counts(monkeypatch):
    before = msl.translate(COUNTED, "counted.metal")
    counted = before.instrumented_cpp
    monkeypatch.setattr(msl, "count_edits", lambda *a: [(0, 0, "garbage ")])
    after = msl.translate(COUNTED, "counted.metal")
    assert after.cpp == before.cpp and "garbage" not in after.cpp
    assert after.instrumented_cpp != counted and "garbage" in after.instrumented_cpp


def _profile(counts: Counts, tgs: int = 64, threads: int = 256) -> Profile:
    return Profile(kernel="k", totals=counts, lines=(), launch=Launch((tgs, 1, 1), (threads, 1, 1), 32, 0),
                   threadgroups_profiled=tgs, device_unique_bytes_per_threadgroup=0, device_unique_bytes=0)


def test_the_alu_term_issues_128_lanes_a_core_clock_and_special_functions_on_their_pipeline():
    m1 = gpu("M1")
    clocks = m1.gpu_cores * m1.clock_hz
    # 1e6 simdgroup FMAs: 1e6 * 32 lanes at 128 lanes per core per clock; integer operations (mostly loop and index
    # arithmetic the GPU's compiler folds) are not timed
    e = estimate(_profile(Counts(alu_operations=1e6, integer_operations=5e6)), m1)
    term = e.term("ALU")
    assert term.bound_s == pytest.approx(1e6 * 32 / (128 * clocks))
    assert term.estimate_s == pytest.approx(term.bound_s / e.occupancy.efficiency)
    assert e.bound_binding == "ALU"
    # special functions: 4 cycles a simdgroup instruction on each of 4 schedulers for the bound, 6 for the estimate
    e = estimate(_profile(Counts(alu_operations=1e5, special_operations=1e6)), m1)
    assert e.term("ALU").bound_s == pytest.approx(1e6 * R.SPECIAL_CYCLES_BOUND / (4 * clocks))
    assert e.term("ALU").estimate_s == pytest.approx(1e6 * 6 / (4 * clocks) / e.occupancy.efficiency)
    # the bound at the special pipeline's peak is the published 32 exp2 per core per clock (metal-benchmarks)
    assert R.ALU_LANES_PER_CORE_CLOCK / R.SPECIAL_CYCLES_BOUND == 32
    assert estimate(_profile(Counts()), m1).term("ALU").bound_s == 0


CONSTANT = """
#include <metal_stdlib>
using namespace metal;
constant int scale [[function_constant(0)]];
kernel void k(device float* out [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
    out[tid] = float(tid) * float(scale);
}
"""


def test_a_specialized_kernel_counts_with_its_constant_values(dev):
    lib = dev.compile(CONSTANT, name="constant.metal")
    for value in (2, 5):
        fn = lib.function("k", {"scale": value})
        out = np.zeros(32, np.float32)
        p = dev.dispatch_threadgroups(fn, (1, 1, 1), (32, 1, 1), [out], profile=True)
        np.testing.assert_array_equal(out, np.arange(32, dtype=np.float32) * value)
        assert p.line(6).alu_operations == 1


@metile.kernel
def scale_exp(X, Y, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    v = metile.load(X + offs)
    metile.store(Y + offs, metile.exp(v) * 2.0 + v)  # exp, multiply, add


def test_a_metile_kernel_counts_its_elementwise_math_at_its_python_line(monkeypatch):
    monkeypatch.setenv("METILE_DEVICE", "cpu")
    x = np.random.default_rng(0).random(1024, dtype=np.float32)
    y = np.zeros_like(x)
    p = scale_exp[(4,)](x, y, BLOCK=256, profile=True)
    np.testing.assert_allclose(y, np.exp(x) * 2 + x, rtol=1e-5)
    from tests.msl_source import kernel_line
    c = p.line(kernel_line(scale_exp.fn, "# exp, multiply, add"), __file__)
    # 1024 elements: exp is a special function and a multiply (its scaling), then a multiply and an add, each
    # element one lane component: 1024 / 32 lane-components per simdgroup operation
    assert (c.alu_operations, c.special_operations) == (3 * 1024 / 32, 1024 / 32)


FMA_LOOP = """
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* out [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
    float a = float(tid), b = 1.0f, c = 2.0f, d = 3.0f;
    for (int i = 0; i < 1024; i++) {
        a = fma(a, 0.999f, 0.5f); b = fma(b, 0.999f, 0.5f); c = fma(c, 0.999f, 0.5f); d = fma(d, 0.999f, 0.5f);
    }
    out[tid] = a + b + c + d;
}
"""


def test_an_fma_microbenchmark_is_bound_by_the_alus(dev):
    fn = dev.compile(FMA_LOOP, name="fma.metal").function("k")
    out = np.zeros(64 * 256, np.float32)
    # 2 of 64 threadgroups counted (and run), scaled to the grid
    p = dev.dispatch_threadgroups(fn, (64, 1, 1), (256, 1, 1), [out], profile=2, profile_only=True)
    lanes = 64 * 256
    assert p.line(7).alu_operations == 4 * 1024 * lanes / 32
    m1 = gpu("M1")
    e = p.estimate(m1)
    fmas = 4 * 1024 * lanes + 3 * lanes       # the loop's lane FMAs and the final adds
    assert e.bound_binding == "ALU" and e.binding == "ALU"
    assert e.term("ALU").bound_s == pytest.approx(fmas / (m1.gpu_cores * 128 * m1.clock_hz))


TRICKY = """
#include <metal_stdlib>
using namespace metal;

struct Acc {
    float total;
    int n;
    Acc(float t) thread : total(t * 2.0f), n(0) {}
    void add(float x) thread { total += x * x; n++; }
    float mean() const thread { return n > 0 ? total / float(n) : 0.0f; }
};

template <typename T, int N> struct Block {
    static constexpr int size() { return N * 2; }
    T v[N];
};

template <typename T> inline T square_sum(thread const T* p, int n) {
    T s = T(0);
#pragma unroll
    for (int i = 0; i < 4; ++i)
        if (i < n) s += p[i] * p[i];
    return s;
}

kernel void k(device float* out [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
    Acc a(1.0f);
    Block<float, 4> b;
    for (int i = 0; i < Block<float, 4>::size() / 2; i++) b.v[i] = float(tid + i);
    for (float x : b.v) a.add(x);
    int j = 0;
    while (true) { if (++j >= 3) break; else continue; }
    float r = square_sum(b.v, j) + a.mean();
    uint2 q = uint2(tid, tid >> 1);
    q.x += q.y << 1;
    out[tid] = r + float(q.x) + (tid % 2 == 0 ? 1.0f : -1.0f);
}
"""


def test_member_functions_constructors_templates_and_pragmas_still_compile_and_compute_the_same(dev):
    fn = dev.compile(TRICKY, name="tricky.metal").function("k")
    out, plain = np.zeros(64, np.float32), np.zeros(64, np.float32)
    p = dev.dispatch_threadgroups(fn, (1, 1, 1), (64, 1, 1), [out], profile=True)
    dev.dispatch_threadgroups(fn, (1, 1, 1), (64, 1, 1), [plain])
    np.testing.assert_array_equal(out, plain)
    t = np.arange(64, dtype=np.float64)
    v = t[:, None] + np.arange(4)
    want = (v[:, :3] ** 2).sum(1) + (2 + (v**2).sum(1)) / 4 + (t + (t // 2) * 2) + np.where(t % 2 == 0, 1, -1)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    assert p.line(9).alu_operations == 2 * 4 * 2   # the member function add: 2 float a call, 4 calls, 2 simdgroups
    assert p.line(10).special_operations == 2      # mean's division: a reciprocal
