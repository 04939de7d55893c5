"""Overloads on address space (`thread`, `device`, `threadgroup`, `constant`) on the CPU device.

The CPU device has one flat address space: overloads that differ only in address-space words are one
function there, kept once when their bodies agree, and refused when they do not. Pointer initializations
across address spaces, which Metal refuses, are refused too.
"""

from __future__ import annotations

import numpy as np
import pytest
from msl_source import HEAD, line_of

import metile
from metile.metal.cpu.msl import translate

# A complex-like value with a constructor and a conversion operator per address space of the object, an
# in-class declaration per space defined out of class, and a class template doing the same.
CONVERSIONS = HEAD + """
struct cplx {
  float re;
  float im;
  cplx() thread : re(0), im(0) {}
  cplx() threadgroup : re(0), im(0) {}
  cplx(float2 v) thread : re(v.x), im(v.y) {}
  cplx(float2 v) threadgroup : re(v.x), im(v.y) {}
  cplx(float2 v) device : re(v.x), im(v.y) {}
  cplx(float2 v) constant : re(v.x), im(v.y) {}
  operator float2() const thread { return float2(re, im); }
  operator float2() const threadgroup { return float2(re, im); }
  operator float2() const device { return float2(re, im); }
  operator float2() const constant { return float2(re, im); }
  float re_of() const thread { return re; }
  float re_of() const device;                     // declared in one space, defined in-class in another
  float norm2() const thread;
  float norm2() const device;
  float norm2() const constant;
};
float cplx::norm2() const thread { return re * re + im * im; }
float cplx::norm2() const device { return re * re + im * im; }
float cplx::norm2() const constant { return re * re + im * im; }

template <typename T>
struct pair_t {
  T a;
  T b;
  T sum() const thread;
  T sum() const threadgroup;
  T sum() const device;
};
template <typename T>
T pair_t<T>::sum() const thread { return a + b; }
template <typename T>
T pair_t<T>::sum() const threadgroup { return a + b; }
template <typename T>
T pair_t<T>::sum() const device { return a + b; }

kernel void k(device cplx* io [[buffer(0)]], constant cplx* cin [[buffer(1)]],
              device float* out [[buffer(2)]], device pair_t<float>* pairs [[buffer(3)]],
              uint i [[thread_position_in_grid]], uint lid [[thread_position_in_threadgroup]]) {
  threadgroup cplx tg[8];
  tg[lid] = cplx(float2(float(i), 1.0f));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  cplx here{float2(cin[i])};   // constant -> thread (with parentheses clang reads a function declaration)
  float2 from_device = io[i];                     // device operator
  float2 from_tg = tg[7 - lid];                   // threadgroup operator
  pair_t<float> p = pairs[i];
  threadgroup pair_t<float> tp[8];
  tp[lid] = p;
  out[i * 6 + 0] = here.norm2();
  out[i * 6 + 1] = io[i].norm2() + cin[i].norm2() + io[i].re_of() - here.re_of();
  out[i * 6 + 2] = from_device.x + from_device.y;
  out[i * 6 + 3] = from_tg.x;
  out[i * 6 + 4] = p.sum() + pairs[i].sum();
  out[i * 6 + 5] = tp[lid].sum();
  io[i] = cplx(from_device * 2.0f);
}
"""


def test_conversions_constructors_and_members_on_four_address_spaces(cpu):
    n = 8
    rng = np.random.default_rng(1)
    io = rng.standard_normal((n, 2)).astype(np.float32)
    cin = rng.standard_normal((n, 2)).astype(np.float32)
    pairs = rng.standard_normal((n, 2)).astype(np.float32)
    out = np.zeros(n * 6, np.float32)
    io0 = io.copy()
    fn = cpu.compile(CONVERSIONS, name="conv.metal").function("k")
    cpu.dispatch_threads(fn, (n, 1, 1), (n, 1, 1), [io, cin, out, pairs])
    o = out.reshape(n, 6)
    np.testing.assert_allclose(o[:, 0], (cin ** 2).sum(1), rtol=1e-6)
    np.testing.assert_allclose(o[:, 1], (io0 ** 2).sum(1) + (cin ** 2).sum(1) + io0[:, 0] - cin[:, 0], rtol=1e-6)
    np.testing.assert_allclose(o[:, 2], io0.sum(1), rtol=1e-6)
    np.testing.assert_array_equal(o[:, 3], np.arange(n)[::-1])
    np.testing.assert_allclose(o[:, 4], 2 * pairs.sum(1), rtol=1e-6)
    np.testing.assert_allclose(o[:, 5], pairs.sum(1), rtol=1e-6)
    np.testing.assert_allclose(io, io0 * 2, rtol=1e-6)


def test_merged_overloads_are_blanked_keeping_lines():
    tr = translate(CONVERSIONS, "conv.metal")
    body = tr.cpp.split('#line 1 "conv.metal"\n', 1)[1].split('\n#line 1 "conv.metal.entry.cpp"')[0]
    assert body.count("\n") == CONVERSIONS.count("\n")
    lines = body.split("\n")
    kept = line_of(CONVERSIONS, "operator float2() const thread")
    for dropped in ("operator float2() const threadgroup", "cplx(float2 v) device", "T pair_t<T>::sum() const device"):
        assert lines[line_of(CONVERSIONS, dropped) - 1].strip() == ""
    assert "operator float2() const thread" in lines[kept - 1]
    # every line after the merged ones is where it was
    kline = line_of(CONVERSIONS, "kernel void k(")
    assert lines[kline - 1].startswith("static void k(")


# Partial specializations on pointer address spaces, and free functions overloaded on the address space of
# a reference or a pointer, declared first and defined later, in a namespace.
TRAITS = HEAD + """
template <typename T> struct elem {};
template <typename T> struct elem<thread T*> { using type = T; };
template <typename T> struct elem<device T*> { using type = T; };
template <typename T> struct elem<constant T*> { using type = T; };
template <typename T> struct elem<threadgroup T*> { using type = T; };

template <typename P>
typename elem<P>::type load_twice(P p, uint i) {
  using T = typename elem<P>::type;
  return T(2) * p[i];
}

namespace ops {
template <typename T> void bump(thread T& x, T by);
template <typename T> void bump(device T& x, T by);
template <typename T> void bump(threadgroup T& x, T by);

template <typename T> void bump(thread T& x, T by) { x += by; }
template <typename T> void bump(device T& x, T by) { x += by; }
template <typename T> void bump(threadgroup T& x, T by) { x += by; }

float first(const thread float* p) { return p[0]; }
float first(const device float* p) { return p[0]; }
float first(const constant float* p) { return p[0]; }

float add_one(device const float& x);       // declared first and used before the other spaces appear
float use_add_one(device const float* p) { return add_one(*p); }
float add_one(thread const float& x) { return x + 1.0f; }
float add_one(device const float& x) { return x + 1.0f; }
}  // namespace ops

// same names, other scopes: not overloads of each other, so their different bodies are fine
namespace other {
float first(const device float* p) { return p[1]; }
}
struct A { float get(device const float* p) const thread { return p[0]; } };
struct B { float get(device const float* p) const device { return p[2]; } };

kernel void k(device const float* x [[buffer(0)]], constant float* c [[buffer(1)]],
              device float* out [[buffer(2)]], device int* acc [[buffer(3)]],
              uint i [[thread_position_in_grid]], uint lid [[thread_position_in_threadgroup]]) {
  threadgroup float tg[8];
  tg[lid] = x[i] + 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float local[2] = {x[i], 3.0f};
  int t = int(i);
  ops::bump(t, 10);
  ops::bump(acc[i], t);
  threadgroup int tgi[8];
  tgi[lid] = 0;
  ops::bump(tgi[lid], 5);
  out[i * 8 + 0] = load_twice(x, i);
  out[i * 8 + 1] = load_twice(c, i);
  out[i * 8 + 2] = load_twice(tg, lid);
  out[i * 8 + 3] = load_twice(local, 1u);
  out[i * 8 + 4] = ops::first(x + i) + ops::first(c + i) + ops::first(local);
  out[i * 8 + 5] = other::first(x + i);
  out[i * 8 + 6] = A().get(x + i) + B().get(x + i) + ops::use_add_one(x + i);
  out[i * 8 + 7] = float(tgi[lid]);
}
"""


def test_specializations_and_free_overloads_on_pointer_and_reference_spaces(cpu):
    n = 8
    x = np.arange(n + 2, dtype=np.float32) * 1.5
    c = np.arange(n, dtype=np.float32) - 3
    out = np.zeros(n * 8, np.float32)
    acc = np.full(n, 100, np.int32)
    fn = cpu.compile(TRAITS, name="traits.metal").function("k")
    cpu.dispatch_threads(fn, (n, 1, 1), (n, 1, 1), [x, c, out, acc])
    o = out.reshape(n, 8)
    i = np.arange(n)
    np.testing.assert_allclose(o[:, 0], 2 * x[:n])
    np.testing.assert_allclose(o[:, 1], 2 * c)
    np.testing.assert_allclose(o[:, 2], 2 * (x[:n] + 1))
    np.testing.assert_allclose(o[:, 3], 6.0)
    np.testing.assert_allclose(o[:, 4], 2 * x[:n] + c)
    np.testing.assert_allclose(o[:, 5], x[1:n + 1])
    np.testing.assert_allclose(o[:, 6], x[:n] + x[2:n + 2] + x[:n] + 1)
    np.testing.assert_array_equal(o[:, 7], 5.0)
    np.testing.assert_array_equal(acc, 100 + i + 10)


# Words that only contain an address-space word, overloads in branches of #if, and overloads on const
# that the address spaces do not decide, are left alone.
TOKENS = HEAD + """
struct thread_t { int v; };
struct device_t { int v; };
template <typename T, T V> struct my_integral_constant { static constexpr T value = V; };
float pick(thread_t a) { return 1.0f + a.v; }
float pick(device_t a) { return 2.0f + a.v; }
#if 1
float twice(thread float& x) { return 2.0f * x; }
#else
float twice(device float& x) { return 3.0f * x; }
#endif
constant float scale = 4.0f;
// differ in const as well: kept both, which is right as long as their bodies agree
struct no_mask {
  char x;
  operator bool() thread { return true; }
  operator bool() const threadgroup { return true; }
  operator bool() const device { return true; }
};
// overloads on const defined alike in every space choose alike on the CPU, whatever their bodies
struct cell {
  float v;
  float at() thread { return v; }
  float at() device { return v; }
  float at() const thread { return v + 100.0f; }
  float at() const device { return v + 100.0f; }
};
kernel void k(device float* out [[buffer(0)]], device no_mask* masks [[buffer(1)]],
              device cell* cells [[buffer(2)]], uint thread_position [[thread_position_in_grid]]) {
  const device cell* fixed = cells;
  thread_t a{1};
  device_t b{2};
  float y = float(thread_position);
  no_mask m{0};
  float on = (m && masks[thread_position]) ? 1.0f : 0.0f;
  float c = cells[thread_position].at() + fixed[thread_position].at();
  out[thread_position] = pick(a) + pick(b) + twice(y) + scale * my_integral_constant<int, 3>::value + on + c;
}
"""


def test_what_is_not_an_address_space_overload_is_left_alone(cpu):
    out = np.zeros(4, np.float32)
    masks = np.zeros(4, np.int8)
    cells = np.arange(4, dtype=np.float32) * 10
    fn = cpu.compile(TOKENS, name="tokens.metal").function("k")
    cpu.dispatch_threads(fn, (4, 1, 1), (4, 1, 1), [out, masks, cells])
    np.testing.assert_allclose(out, 2 + 4 + 2 * np.arange(4) + 12 + 1 + 2 * cells + 100)


def test_overloads_with_different_bodies_are_refused_naming_both_lines(cpu):
    src = HEAD + """
float load(device const float& x) { return x; }
float load(thread const float& x) { return x * 2.0f; }
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) { out[i] = load(out[i]); }
"""
    with pytest.raises(metile.MSLUnsupportedError) as info:
        cpu.compile(src, name="clash.metal")
    e = info.value
    assert e.loc.file == "clash.metal" and e.loc.line == line_of(src, "float load(thread")
    assert f"clash.metal:{line_of(src, 'float load(device')}" in str(e)
    assert "differ only in address space" in str(e)


def test_member_and_specialization_clashes_are_refused():
    member = HEAD + """
struct S {
  float v;
  float get() const thread { return v; }
  float get() const device { return -v; }
};
kernel void k(device float* out [[buffer(0)]]) { out[0] = S{1.0f}.get(); }
"""
    with pytest.raises(metile.MSLUnsupportedError) as info:
        translate(member, "member.metal")
    assert f"member.metal:{line_of(member, 'float get() const thread')}" in str(info.value)
    assert info.value.loc.line == line_of(member, "float get() const device")
    spec = HEAD + """
template <typename T> struct space_of { static constant int value = 0; };
template <typename T> struct space_of<device T*> { static constant int value = 1; };
template <typename T> struct space_of<threadgroup T*> { static constant int value = 3; };
kernel void k(device int* out [[buffer(0)]]) { out[0] = space_of<device int*>::value; }
"""
    with pytest.raises(metile.MSLUnsupportedError) as info:
        translate(spec, "spec.metal")
    assert f"spec.metal:{line_of(spec, 'struct space_of<device')}" in str(info.value)
    assert info.value.loc.line == line_of(spec, "struct space_of<threadgroup")
    widened = HEAD + """
template <typename T> struct is_dev { static constant bool value = false; };
template <typename T> struct is_dev<device T*> { static constant bool value = true; };
kernel void k(device int* out [[buffer(0)]]) { out[0] = is_dev<device int*>::value; }
"""
    with pytest.raises(metile.MSLUnsupportedError, match=r"on the device address space but not on constant, "
                       r"thread, threadgroup.*struct is_dev` \(at widened\.metal:4\)") as info:
        translate(widened, "widened.metal")
    assert info.value.loc.line == 5
    # an empty primary says nothing the other spaces could get wrong; a pair of spaces is still partial
    translate(widened.replace("struct is_dev { static constant bool value = false; };", "struct is_dev {};"))
    with pytest.raises(metile.MSLUnsupportedError, match="on the device and threadgroup address space"):
        translate(widened.replace("<device T*>", "<threadgroup T*>") + widened.split("\n")[4] + "\n")
    by_const = member.replace("float get() const thread", "float get() thread")
    with pytest.raises(metile.MSLUnsupportedError, match="address space and const.*by const alone") as info:
        translate(by_const, "member.metal")
    assert info.value.loc.line == line_of(member, "float get() const device")


def test_line_markers_inside_and_before_merged_declarations(cpu):
    src = HEAD + """#line 40 "lib.h"
float f(thread float& x) {
  return x;
}
float f(device float& x) {
#line 44 "lib.h"
  return x;
}
float g(thread float& x) { return x; }
float g(device float& x) { return -x; }
kernel void k(device float* out [[buffer(0)]]) { out[0] = f(out[0]); }
"""
    with pytest.raises(metile.MSLUnsupportedError) as info:
        translate(src, "main.metal")
    e = info.value
    assert (e.loc.file, e.loc.line) == ("lib.h", 47)
    assert "lib.h:46" in str(e)
    good = src.replace("return -x", "return x")
    cpp = translate(good, "main.metal").cpp
    assert cpp.count('#line 44 "lib.h"') == 1  # directives inside a dropped declaration stay
    assert "float f(device" not in cpp and "float g(device" not in cpp
    with pytest.raises(metile.MSLCompileError) as info:  # the compiler's lines after the merge are right
        cpu.compile(good.replace("out[0] = f(out[0]);", "out[0] = f(undeclared);"), name="main.metal")
    assert "lib.h:48" in str(info.value), str(info.value)


POINTER_MISMATCHES = [
    ("threadgroup float* t = src;", "`t` is a threadgroup pointer, but `src`.*points to device memory"),
    ("threadgroup const float* t = src + 4;", "threadgroup pointer, but `src`"),
    ("const constant float* t = &src[lid];", "constant pointer, but `src`"),
    ("device float* t = tg;", "device pointer, but `tg`.*threadgroup memory"),
    ("device float* d = src; thread float* t = d;", "thread pointer, but `d`"),
    ("threadgroup float* t = &ref;", "`ref`.*refers to device memory"),
]


@pytest.mark.parametrize("stmt,message", POINTER_MISMATCHES)
def test_pointer_initialized_from_another_address_space_is_refused(stmt, message):
    src = HEAD + f"""
kernel void k(device float* src [[buffer(0)]], device float& ref [[buffer(1)]],
              threadgroup float* tg [[threadgroup(0)]], uint lid [[thread_position_in_threadgroup]]) {{
  float x = src[lid];
  {stmt}
  src[lid] = x;
}}
"""
    with pytest.raises(metile.MSLCompileError, match=message) as info:
        translate(src, "mix.metal")
    assert info.value.loc.line == line_of(src, stmt)
    assert "MSL does not convert pointers between address spaces" in str(info.value)


def test_pointer_initializations_that_metal_accepts_or_that_are_not_read_run(cpu):
    src = HEAD + """
float helper(device const float* src, threadgroup float* tg, uint lid) {
  device const float* same = src + lid;           // same address space
  threadgroup float* mine = &tg[lid];
  *mine = *same;
  return *mine;
}
template <typename T>
T generic(device T* src) { threadgroup T* unused = nullptr; (void)unused; return src[0]; }
kernel void k(device float* src [[buffer(0)]], threadgroup float* tg [[threadgroup(0)]],
              uint lid [[thread_position_in_threadgroup]]) {
  float v = helper(src, tg, lid) + generic(src);
  {
    threadgroup float* src = tg;                  // a local that shadows the parameter
    src[lid] = v;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  src[lid] = tg[lid];
}
"""
    x = np.arange(4, dtype=np.float32) + 1
    fn = cpu.compile(src, name="ok.metal").function("k")
    cpu.dispatch_threadgroups(fn, (1, 1, 1), (4, 1, 1), [x], threadgroup_memory=[16])
    np.testing.assert_allclose(x, np.arange(4) + 1 + 1)
