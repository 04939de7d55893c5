"""The register estimate of a kernel (metile.metal.cpu.registers) and the occupancy limit it sets in the Apple GPU
model: exact counts on kernels whose registers are derived by hand (each rule alone, then together), template
instantiations read with their arguments, the occupancy table on M1 and its absence on M3, and a profiled dispatch
carrying the estimate through `Profile`, `estimate(...)` and the summary."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.metal.cpu.registers import estimate_registers, kernel_registers
from metile.metal.msl_signature import kernel_signatures
from metile.profile import rates as R
from metile.profile.counts import Counts, Launch, Profile
from metile.profile.gpus import gpu
from metile.profile.model import estimate, occupancy


def _kernel(body: str, params: str = "uint tid [[thread_position_in_grid]]", before: str = "") -> str:
    return (f"#include <metal_stdlib>\nusing namespace metal;\n{before}\n"
            f"kernel void k(device float* out [[buffer(0)]], {params}) {{\n{body}\n}}\n")


# (body, 16-bit halves derived by hand, besides the `uint tid` argument's 2)
RULES = [
    ("float x = 1.0f; int i = 2;", 4),                             # two 32-bit scalars
    ("half h = 1.0h; short s = 2; bool b = true;", 3),             # 16-bit values take one half each
    ("float4 v = 0; half2 w = 0;", 8 + 2),                         # a vector's components
    ("ulong a = 0; float* p = nullptr;", 4 + 4),                   # 64-bit values and pointers
    ("float a[16];", 32),                                          # an array of 16 floats
    ("simdgroup_float8x8 m[3];", 3 * 4),                           # 8x8/32 lanes = 2 floats a lane each
    ("simdgroup_matrix<half, 8, 8> m;", 2),                        # 2 halves a lane
    ("simdgroup_bfloat8x8 m;", 2),
    ("thread float& r = out[0]; threadgroup float t[256];", 0),    # a reference and threadgroup memory: none
    ("device float* q = out;", 4),                                 # a pointer to device memory is a register pair
    ("{ float a[8]; } { float b[4]; }", 16),                       # sibling blocks reuse: the larger
    ("float x; { float a[8]; float y; }", 2 + 16 + 2),             # a nested block adds to what is live around it
    ("for (int i = 0; i < 4; ++i) { float4 v = 0; }", 2 + 8),      # a loop's counter and body
    ("if (tid) { float a[4]; } else { half b[4]; }", 8),           # the larger arm
    ("SomeType x; auto y = tid;", 2 + 2),                          # a type the reader cannot size: one register
]


@pytest.mark.parametrize(("body", "halves"), RULES)
def test_each_rule_counts_the_halves_derived_by_hand(body, halves):
    assert estimate_registers(_kernel(body), "k") == -(-(halves + 2) // 2)


def test_arrays_sized_by_constants_and_structs_of_the_source():
    before = """constexpr constant int N = 4;
struct Acc { float v[N * 2]; half h; static constexpr int k = 3; float sum() const { return v[0]; } };"""
    # Acc: 8 floats (16 halves) + 1 half; the static member and the member function hold nothing
    assert estimate_registers(_kernel("Acc acc; float w[N];", before=before), "k") == -(-(2 + 17 + 8) // 2)


def test_a_whole_kernel_adds_its_arguments_and_the_most_live_at_once():
    src = _kernel("""    float x = 1.0f;                 // 2
    float4 y[2];                    // 16
    { half t[8]; }                  // 8 at most inside, then gone
    for (int i = 0; i < 4; ++i) { float z = x; }   // 2 + 2 inside
    simdgroup_float8x8 m[2];        // 8
    simdgroup_matrix<half, 8, 8> h; // 2
    thread float& r = x;            // 0
    device float* p = out;          // 4
    out[tid.x] = x + r + p[0];""", "uint3 tid [[thread_position_in_grid]], uint lane [[thread_index_in_simdgroup]]")
    # arguments: uint3 6 + uint 2 halves; body: 2 + 16 + 8 + 2 + 4 = 32 live at the end; 8 + 32 = 40 halves
    assert estimate_registers(src, "k") == 20


TEMPLATE = """#include <metal_stdlib>
using namespace metal;
template <typename T, int N>
[[kernel]] void f(device T* a [[buffer(0)]], uint tid [[thread_position_in_grid]]) {
    T v[N];
    for (int i = 0; i < N; ++i) v[i] = a[tid * N + i];
    a[tid] = v[0];
}
template [[host_name("f_half_8")]] [[kernel]] decltype(f<half, 8>) f<half, 8>;
template [[host_name("f_float_16")]] [[kernel]] decltype(f<float, 16>) f<float, 16>;
"""


def test_a_template_instantiation_is_read_with_its_arguments():
    sigs = {s.name: s for s in kernel_signatures(TEMPLATE)}
    # tid 2 + v (8 halves of half / 16 floats = 32 halves) + i 2
    assert kernel_registers(TEMPLATE, sigs["f_half_8"]) == (2 + 8 + 2) // 2
    assert kernel_registers(TEMPLATE, sigs["f_float_16"]) == (2 + 32 + 2) // 2


def test_an_unreadable_or_missing_function_estimates_nothing():
    assert estimate_registers(_kernel("float x;"), "nope") == 0
    assert estimate_registers("kernel void k( {", "k") == 0


def _profile(registers: int, threads: int = 128, tgs: int = 64) -> Profile:
    return Profile(kernel="k", totals=Counts(), lines=(), launch=Launch((tgs, 1, 1), (threads, 1, 1), 32, 0),
                   threadgroups_profiled=tgs, device_unique_bytes_per_threadgroup=0, device_unique_bytes=0,
                   registers=registers)


@pytest.mark.parametrize(("registers", "threads"), [(1, 1024), (52, 1024), (53, 896), (64, 832), (100, 512),
                                                    (128, 384), (200, 384)])
def test_the_register_table_gives_threads_a_core(registers, threads):
    assert R.threads_for_registers(registers) == threads


def test_registers_limit_the_threadgroups_a_core_holds_on_m1_and_m2_only():
    # 100 registers = 200 halves: 512 threads a core, 4 threadgroups of 128 (threads alone would allow 8)
    o = occupancy(_profile(100), gpu("M1"))
    assert (o.per_core, o.limited_by, o.registers, o.register_threads) == (4, "registers", 100, 512)
    assert occupancy(_profile(100), gpu("M2")).limited_by == "registers"
    o = occupancy(_profile(100), gpu("M3"))            # Dynamic Caching: allocated as used
    assert (o.per_core, o.limited_by, o.register_threads) == (8, "threads", 0)
    o = occupancy(_profile(40), gpu("M1"))             # 80 halves: the full 1024 threads
    assert (o.per_core, o.limited_by) == (8, "threads")
    o = occupancy(_profile(0), gpu("M1"))              # unknown: no limit
    assert (o.per_core, o.limited_by, o.registers) == (8, "threads", 0)
    assert estimate(_profile(100), "M1").registers == 100


def test_a_profiled_dispatch_carries_the_estimate_to_the_model_and_summary():
    dev = metile.device("cpu")
    src = _kernel("float a[40];\n    for (int i = 0; i < 40; ++i) a[i] = float(tid + i);\n"
                  "    float s = 0;\n    for (int i = 0; i < 40; ++i) s += a[i] * a[(i * 7) % 40];\n"
                  "    out[tid] = s;")
    fn = dev.compile(src, name="regs.metal").function("k")
    out = np.zeros(256, np.float32)
    p = dev.dispatch_threadgroups(fn, (2, 1, 1), (128, 1, 1), [out], profile=True)
    # tid 2 + a 80 + s 2 + the loop counter 2 = 86 halves
    assert p.registers == 43 and p.to_dict()["registers"] == 43
    e = p.estimate("M1")
    assert e.registers == 43 and e.occupancy.register_threads == 1024
    text = p.format_summary("M1")
    assert "about 43 32-bit registers a thread, which hold 1024 threads a core" in text
