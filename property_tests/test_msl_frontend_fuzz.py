"""The CPU device's MSL front end on truncated and garbled MSL: every failure is an `MSLCompileError` (or its
`MSLUnsupportedError`) naming a line, never a raw Python exception; what it accepts it accepts consistently
(the kernels `translate` finds are the ones `kernel_signatures` finds)."""

from __future__ import annotations

import shutil

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from metile.metal.cpu.msl import translate
from metile.metal.errors import MSLCompileError
from metile.metal.msl_preprocess import preprocess, stub_headers
from metile.metal.msl_signature import kernel_signatures

SEEDS = (
    """#include <metal_stdlib>
using namespace metal;
template <typename T, int N = 2>
[[kernel, max_total_threads_per_threadgroup(8 * 32)]] void scale(const device T* in, device T* out,
    constant int64_t strides[2], constant int& n [[function_constant(has_n)]], uint i [[thread_position_in_grid]]) {
  threadgroup T tile[N * 32];
  tile[i % 32] = in[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = tile[i % 32] * T(N) + T(strides[1]) + 1.5h;
}
template [[host_name("scale_float")]] [[kernel]] decltype(scale<float>) scale<float>;
template [[host_name("scale_" "int")]] [[kernel]] decltype(scale<int, 3>) scale<int, 3>;
""",
    """struct Op {
  template <typename T> T operator()(T x) thread { return x; }
  template <> int operator()<int>(int x) thread { return -x; }
};
template <typename T> void helper(threadgroup T* buf [[threadgroup(0)]], uint i) { buf[i] = T(i); }
kernel void k(device float* o [[buffer(0)]], threadgroup float* s [[threadgroup(0)]],
              uint3 g [[threadgroup_position_in_grid]], ushort l [[thread_index_in_simdgroup]]) {
  helper(s, l);
  o[g.x] = Op()(s[0]);
}
[[kernel, host_name("other")]] void k2(device float* o, constant float& s) { o[0] = s; }
""",
)
PREPROCESSED = """#include <metal_stdlib>
#include "helpers.h"
#define instantiate(name, f, ...) \\
  template [[host_name(name)]] [[kernel]] decltype(f<__VA_ARGS__>) f<__VA_ARGS__>;
#if defined(__METAL_VERSION__) && __METAL_VERSION__ >= 310
template <typename T> [[kernel]] void f(device T* o, constant int& n, uint i [[thread_position_in_grid]]) {
  o[i] = T(n) + TWICE(T(i));
}
#endif
instantiate("f_float", f, float)
instantiate("f_" "int", f, int)
"""
HELPERS = "#pragma once\n#define TWICE(x) ((x) * 2)\n"
PIECES = ("template", "<", ">", ">>", "[[", "]]", "(", ")", "{", "}", ";", ",", "kernel", "host_name", "\"x\"",
          "threadgroup", "=", "*", "&", "[", "]", "buffer", "decltype", "#define X", "\\\n", "\"", "'", "/*",
          "max_total_threads_per_threadgroup", "0x", "1e", ".", "::", "void", "int", "T", "N", "\n", " ")


@st.composite
def garbled(draw) -> str:
    src = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(0, 4))):
        cut = draw(st.integers(0, len(src)))
        match draw(st.sampled_from(("truncate", "delete", "insert", "swap"))):
            case "truncate":
                src = src[:cut]
            case "delete":
                src = src[:cut] + src[cut + draw(st.integers(1, 12)):]
            case "insert":
                src = src[:cut] + draw(st.sampled_from(PIECES)) + src[cut:]
            case "swap":
                other = draw(st.integers(0, len(src)))
                a, b = sorted((cut, other))
                src = src[:a] + src[b:b + 8] + src[a + 8:b] + src[a:a + 8] + src[b + 8:]
    return src


@settings(max_examples=300)
@given(garbled())
@example("template <")
@example("template [[host_name(\"a\")]] [[kernel]] decltype(f<float>) f<float>;")
@example("[[kernel]] void k(device float* o [[buffer(-1)]]) {}")
@example("template <typename T> [[kernel]] void f(device T* o) {}\ntemplate [[kernel]] decltype(f<float>) f<float>;")
@example("kernel void k(constant int x[) {}")
@example("kernel void k(device float* o) {\n  threadgroup float t[4] 32];\n}\n"
         "template [[host_name(\"x\")]] [[kernel]] decltype(f<float>) f<float>;\n")
@example("kernel void k(device float* o) {\n  threadgroup float t[;\n  o[0] = 1;\n}\n"
         "template [[host_name(\"x\")]] [[kernel]] decltype(f<float>) f<float>;\n")
def test_front_end_failures_are_msl_errors(src):
    try:
        tr = translate(src, "fuzz.metal")
    except MSLCompileError as e:
        assert e.loc is None or e.loc.line >= 0
        return
    assert [k.name for k in tr.kernels] == [k.name for k in kernel_signatures(src, "fuzz.metal")]


@pytest.fixture(scope="module")
def include_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz_include")
    (d / "helpers.h").write_text(HELPERS)
    return d


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("clang++") is None, reason="needs a C++ compiler")
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbled_preprocessed=st.lists(st.tuples(st.integers(0, len(PREPROCESSED)), st.sampled_from(
    PIECES + ("#if", "#endif", '#include "', "#include <", "#error x"))), max_size=3).map(
    lambda ops: _apply(PREPROCESSED, ops)))
@example(garbled_preprocessed=PREPROCESSED)
def test_preprocessed_front_end_failures_are_msl_errors(include_dir, tmp_path_factory, garbled_preprocessed):
    compiler = shutil.which("g++") or shutil.which("clang++")
    stubs = stub_headers(tmp_path_factory.getbasetemp() / "fuzz_cache")
    try:
        pre = preprocess(garbled_preprocessed, "fuzz.metal", compiler=compiler, stub_dir=stubs,
                         include_dirs=[include_dir])
        tr = translate(garbled_preprocessed, "fuzz.metal", preprocessed=pre)
    except MSLCompileError as e:
        assert e.loc is None or e.loc.line >= 0
        return
    if garbled_preprocessed == PREPROCESSED:
        assert [k.name for k in tr.kernels] == ["f_float", "f_int"]


def _apply(src: str, ops) -> str:
    for at, piece in sorted(ops, reverse=True):
        src = src[:at] + piece + src[at:]
    return src
