"""The `constant` address space is read-only on the CPU device, in every function, as in MSL.

`constant T&` and `constant T*` parameters of helper functions, locals, casts and template arguments are `const`
in the C++ the front end writes (metile/metal/cpu/constant_space.py), so a helper taking `constant int&` accepts a
kernel's `const constant int&`, and a write to constant memory does not compile. Kernels' pointer and reference
parameters need an address space.
"""

from __future__ import annotations

import numpy as np
import pytest
from msl_source import HEAD, line_of

import metile
from metile.metal.cpu.constant_space import constant_spellings
from metile.metal.cpu.msl import translate
from metile.metal.msl_lex import tokenize

# MLX's quantized.h passes a kernel's `const constant int&` parameters to helpers declared with `constant int&`.
HELPERS = HEAD + """
int twice(constant int& v) { return 2 * v; }
float first(constant float* p) { return p[0]; }
float second(const constant float* p) { return p[1]; }
template <typename T> T last(constant T* p, constant int& n) { return p[n - 1]; }

kernel void k(device float* out [[buffer(0)]], const constant int& n [[buffer(1)]],
              const constant float* c [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  constant float* alias = c;
  out[i] = twice(n) + first(c) + second(alias) + last(c, n) + ((constant float*)c)[2];
}
"""


def test_helpers_take_constant_references_and_pointers_from_const_constant_parameters(cpu):
    fn = cpu.compile(HELPERS, name="helpers.metal").function("k")
    out = np.zeros(4, np.float32)
    c = np.array([1.0, 10.0, 100.0, 1000.0], np.float32)
    cpu.dispatch_threads(fn, 4, 4, [out, np.int32(4), c])
    assert out.tolist() == [2 * 4 + 1 + 10 + 1000 + 100] * 4


@pytest.mark.parametrize("write, marker", [
    ("void bump(constant int& v) { v += 1; }   // WRITE\n", "// WRITE"),
    ("void put(constant float* p) { p[0] = 2.0f; }   // WRITE\n", "// WRITE"),
    ("constant float scale = 2.0f;\nvoid set_scale() { scale = 3.0f; }   // WRITE\n", "// WRITE"),
])
def test_a_write_to_constant_memory_does_not_compile(cpu, write, marker):
    src = HEAD + write + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) { out[i] = 1.0f; }
"""
    with pytest.raises(metile.MSLCompileError) as info:
        cpu.compile(src, name="write_constant.metal")
    assert info.value.loc.line == line_of(src, marker)


def test_a_write_through_a_constant_kernel_parameter_does_not_compile(cpu):
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], constant int& n [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  n = 3;   // WRITE
  out[i] = n;
}
"""
    with pytest.raises(metile.MSLCompileError) as info:
        cpu.compile(src, name="write_param.metal")
    assert info.value.loc.line == line_of(src, "// WRITE")


# Member functions of objects in constant memory: a `constant` qualifier makes a const member function, except on
# a constructor; program-scope `constant` objects built by one and read through one.
MEMBERS = HEAD + """
struct scaled {
  float v;
  scaled(float x) constant : v(x) {}
  scaled(float x) thread : v(x) {}
  float get() constant { return v; }
  float get() thread { return v + 100.0f; }
  float twice() const constant;
};
float scaled::twice() const constant { return 2.0f * v; }
constant scaled table[2] = {scaled(1.0f), scaled(2.0f)};

kernel void k(device float* out [[buffer(0)]], constant scaled* s [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  scaled here(5.0f);
  out[i] = table[i % 2].get() + s[0].get() + s[0].twice() + here.get();
}
"""


def test_constant_member_functions_run_on_constant_objects(cpu):
    fn = cpu.compile(MEMBERS, name="members.metal").function("k")
    out = np.zeros(2, np.float32)
    cpu.dispatch_threads(fn, 2, 2, [out, np.array([3.0], np.float32)])
    assert out.tolist() == [1.0 + 3.0 + 6.0 + 105.0, 2.0 + 3.0 + 6.0 + 105.0]


def test_overloads_on_thread_and_constant_references_stay_two_functions(cpu):
    """`f(thread float&)` and `f(constant float&)` are `f(float&)` and `f(const float&)`: both are kept (a thread
    object picks the first, a constant one the second), while `f(const thread float&)` merges with the latter."""
    src = HEAD + """
float f(thread float& v) { return v + 1.0f; }
float f(constant float& v) { return v + 1.0f; }
float g(const thread float& v) { return v * 2.0f; }
float g(constant float& v) { return v * 2.0f; }
kernel void k(device float* out [[buffer(0)]], constant float& c [[buffer(1)]], uint i [[thread_position_in_grid]]) {
  float t = float(i);
  out[i] = f(t) + f(c) + g(t) + g(c);
}
"""
    cpp = " ".join(translate(src).cpp.split())
    assert "float f(thread float& v)" in cpp and "float f(const float& v)" in cpp
    assert "float g(const thread float& v)" in cpp and "float g(const float& v)" not in cpp   # merged
    fn = cpu.compile(src, name="overloads.metal").function("k")
    out = np.zeros(4, np.float32)
    cpu.dispatch_threads(fn, 4, 4, [out, np.float32(10.0)])
    assert out.tolist() == [i + 1 + 11 + 2 * i + 20 for i in range(4)]


def spelled(text: str) -> list[str]:
    toks = tokenize(text)
    return [s for _, s in sorted(constant_spellings(toks).items())]


@pytest.mark.parametrize("text, want", [
    ("int f(constant int& n);", ["const"]),
    ("int f(const constant int& n, constant const int* p, constant int const* q);", ["", "", ""]),
    ("constant float* const p = q;", ["const"]),
    ("constant float scale = 1.0f; static constant constexpr int N = 3;", ["const", "const"]),
    ("x = ((constant uint*)p)[0] + static_cast<constant vec<float, 2>*>(q)->x;", ["const", "const"]),
    ("template <typename T> struct E<constant T*> {};", ["const"]),
    ("struct S { float a; S(float x) constant : a(x) {} ~S() constant {} float g() constant; "
     "float h() const constant; };", ["", "", "const", ""]),
    ("template <typename T> S<T>::S(float x) constant {} float S::g() constant { return a; }", ["", "const"]),
])
def test_constant_is_spelled_const_where_it_qualifies_a_type_or_a_member_function(text, want):
    assert spelled(text) == want


@pytest.mark.parametrize("decl, what", [
    ("float* x [[buffer(0)]]", "pointer parameter `x` of kernel `k` has no address space"),
    ("const float& x [[buffer(0)]]", "reference parameter `x` of kernel `k` has no address space"),
    ("thread float* x [[buffer(0)]]", "pointer parameter `x` of kernel `k` is in the thread address space"),
    ("float x[4] [[buffer(0)]]", "pointer parameter `x` of kernel `k` has no address space"),
])
def test_a_kernel_pointer_parameter_needs_an_address_space(cpu, decl, what):
    src = HEAD + f"""
kernel void k(device float* out [[buffer(1)]],
              {decl},   // PARAM
              uint i [[thread_position_in_grid]]) {{ out[i] = 1.0f; }}
"""
    with pytest.raises(metile.MSLCompileError, match="must be declared `device`, `constant` or `threadgroup`") as info:
        cpu.compile(src, name="no_space.metal")
    assert what in str(info.value)
    assert (info.value.loc.line, info.value.loc.col) == (line_of(src, "// PARAM"), 14)
