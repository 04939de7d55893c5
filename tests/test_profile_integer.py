"""The integer operations the Apple GPU model times (metile.metal.cpu.alu_counts' issue cycles, the ALU term): exact
counts on a kernel whose integer work is derived by hand, where address arithmetic in subscripts and loop control
are counted but issue nothing, adds and bitwise operations issue 1 cycle, multiplies 4 and divisions and remainders
8; then the ALU term on a hand-made profile, whose estimate adds those cycles to the float operations and whose bound
leaves them out."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.profile.counts import Counts, Launch, Profile
from metile.profile.gpus import gpu
from metile.profile.model import estimate

HASH = """
#include <metal_stdlib>
using namespace metal;

kernel void k(device uint* out [[buffer(0)]], device const uint* in [[buffer(1)]],
              uint tid [[thread_position_in_grid]]) {
    uint h = in[tid * 2 + 1];                                // line 7: 2 integer operations of the address
    for (uint i = 0; i < 4; i++)                             // loop control: 2 a trip, counted at line 9
        h = (h ^ (h >> 3)) * 2654435761u;                    // line 9: ^ 1, >> 1, * 4 cycles
    uint q = h / 7u + h % 5u;                                // line 10: / 8, % 8, + 1 cycles
    out[tid] = q & 255u;                                     // line 11: & 1 cycle
}
"""


def _line(p, line):
    c = p.line(line)
    return (c.integer_operations, c.integer_issue)


def test_integer_issue_cycles_leave_out_subscripts_and_loop_control():
    dev = metile.device("cpu")
    fn = dev.compile(HASH, name="hash.metal").function("k")
    src = np.arange(128, dtype=np.uint32) * 2654435761
    out = np.zeros(64, np.uint32)
    p = dev.dispatch_threadgroups(fn, (1, 1, 1), (64, 1, 1), [out, src], profile=True)
    h = src[np.arange(64) * 2 + 1].astype(np.uint64)
    for _ in range(4):
        h = ((h ^ (h >> 3)) * 2654435761) & 0xFFFFFFFF
    np.testing.assert_array_equal(out, ((h // 7 + h % 5) & 255).astype(np.uint32))
    sgs = 2
    assert _line(p, 7) == (2 * sgs, 0)                       # the address: counted, not issued
    assert _line(p, 9) == ((3 + 2) * 4 * sgs, (1 + 1 + 4) * 4 * sgs)   # the loop's test and step issue nothing
    assert _line(p, 10) == (3 * sgs, (8 + 8 + 1) * sgs)
    assert _line(p, 11) == (sgs, sgs)
    assert p.totals.integer_issue == (6 * 4 + 17 + 1) * sgs
    assert p.totals.alu_operations == 0
    assert "issue cycles timed" in p.estimate("M1").term("ALU").detail


def _profile(counts: Counts, tgs: int = 64, threads: int = 256) -> Profile:
    return Profile(kernel="k", totals=counts, lines=(), launch=Launch((tgs, 1, 1), (threads, 1, 1), 32, 0),
                   threadgroups_profiled=tgs, device_unique_bytes_per_threadgroup=0, device_unique_bytes=0)


def test_the_alu_term_issues_integer_cycles_beside_float_operations():
    m1 = gpu("M1")
    clocks = m1.gpu_cores * m1.clock_hz
    # 1e6 float simdgroup operations and 3e6 integer issue cycles share the 128 lanes a core clock; the integer
    # operations themselves (5e6, address arithmetic included) are not what is timed
    # operations themselves (5e6, address arithmetic included) are not what is timed; the bound leaves the integer
    # cycles out (the compiler may hoist or fold some)
    e = estimate(_profile(Counts(alu_operations=1e6, integer_operations=5e6, integer_issue=3e6)), m1)
    assert e.term("ALU").estimate_s == pytest.approx((1e6 + 3e6) * 32 / (128 * clocks) / e.occupancy.efficiency)
    assert e.term("ALU").bound_s == pytest.approx(1e6 * 32 / (128 * clocks))
    only_float = estimate(_profile(Counts(alu_operations=1e6, integer_operations=5e6)), m1)
    assert only_float.term("ALU").estimate_s == pytest.approx(1e6 * 32 / (128 * clocks) / e.occupancy.efficiency)


TEMPLATED = """
#include <metal_stdlib>
using namespace metal;
typedef half half_t;

template <typename T, typename AccT = float>
[[kernel]] void scale(device T* out [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
    AccT x = AccT(out[tid]);
    T y = out[tid] * T(2);                                   // line 9: a float multiply of T
    out[tid] = T(x * AccT(3) + AccT(y));                     // line 10: two float operations of AccT
}
template [[host_name("scale_float")]] [[kernel]] decltype(scale<float>) scale<float>;
template [[host_name("scale_half")]] [[kernel]] decltype(scale<half_t>) scale<half_t>;
"""


def test_template_types_take_the_kind_their_instantiations_and_defaults_give():
    dev = metile.device("cpu")
    lib = dev.compile(TEMPLATED, name="templated.metal")
    for name, dtype in (("scale_float", np.float32), ("scale_half", np.float16)):
        out = np.arange(64, dtype=dtype)
        p = dev.dispatch_threadgroups(lib.function(name), (1, 1, 1), (64, 1, 1), [out], profile=True)
        np.testing.assert_allclose(out, np.arange(64) * 3 + np.arange(64) * 2, rtol=1e-3)
        c9, c10 = p.line(9), p.line(10)
        # T is float or half (half_t) in every instantiation, AccT float by default: float operations, no integer
        assert (c9.alu_operations, c9.integer_operations, c9.integer_issue) == (2, 0, 0)
        assert (c10.alu_operations, c10.integer_operations, c10.integer_issue) == (2 * 2, 0, 0)


FOLDED = """
#include <metal_stdlib>
using namespace metal;
constant constexpr uint N = 5;

kernel void k(device uint* out [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
    uint acc = tid;
    for (uint i = 0; i < 4; i++) {
        uint s = (i % 2) ? (N - 1 - i) : i * 3;              // line 9: loop counter and constants only: folded
        acc += s * tid;                                      // line 10: + 1 and * 4 cycles
    }
    out[tid] = acc;
}
"""


def test_arithmetic_of_loop_counters_and_constants_is_counted_but_not_issued():
    dev = metile.device("cpu")
    out = np.zeros(32, np.uint32)
    p = dev.dispatch_threadgroups(dev.compile(FOLDED, name="folded.metal").function("k"), (1, 1, 1), (32, 1, 1),
                                  [out], profile=True)
    s = [(5 - 1 - i) if i % 2 else i * 3 for i in range(4)]
    np.testing.assert_array_equal(out, np.arange(32) * (1 + sum(s)))
    # one simdgroup, 4 trips: % - - * and the select are 5 integer operations a trip, none issued
    assert _line(p, 9) == (5 * 4, 0)
    assert _line(p, 10) == (2 * 4, (1 + 4) * 4)
    assert _line(p, 8) == (2 * 4, 0)                         # the loop's test and step


ADDRESSES = """
#include <metal_stdlib>
using namespace metal;
typedef float acc_t;

kernel void k(device float* out [[buffer(0)]], device const float* in [[buffer(1)]],
              constant uint& stride [[buffer(2)]], uint tid [[thread_position_in_grid]]) {
    device const float* p = in + tid * stride;               // line 8: a pointer's address: 2 integer, none issued
    acc_t x = p[0];
    acc_t y = x * x;                                         // line 10: acc_t is float: 1 float operation
    out[tid] = y;
}
"""


def test_pointer_arithmetic_is_not_issued_and_typedefs_name_their_type():
    dev = metile.device("cpu")
    src = np.arange(64, dtype=np.float32)
    out = np.zeros(32, np.float32)
    fn = dev.compile(ADDRESSES, name="addresses.metal").function("k")
    p = dev.dispatch_threadgroups(fn, (1, 1, 1), (32, 1, 1), [out, src, np.uint32(2)], profile=True)
    np.testing.assert_array_equal(out, (np.arange(32) * 2.0) ** 2)
    assert _line(p, 8) == (2, 0)
    assert (p.line(10).alu_operations, p.line(10).integer_operations) == (1, 0)
