"""MSL as real projects (Apple's MLX among them) write it, run on the CPU device and checked against numpy:
macros and includes through the preprocessor, kernel templates instantiated with `[[host_name]]`, parameters
without `[[buffer(i)]]`, array parameters, attribute expressions, class-scope member specializations."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.emit.msl import HEADER as EMITTED_HEADER
from metile.metal.msl_preprocess import needs_preprocessing
from metile.metal.msl_signature import ParamKind, kernel_signatures

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


TEMPLATED = HEAD + r"""
#define instantiate_kernel(name, func, ...) \
  template [[host_name(name)]] [[kernel]]   \
  decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;

template <typename T, int N = 2>
[[kernel]] void axpy(const device T* x [[buffer(0)]], device T* y [[buffer(1)]], constant T& a [[buffer(2)]],
                     uint i [[thread_position_in_grid]]) {
  y[i] = a * x[i] * T(N) + y[i];
}

instantiate_kernel("axpy_float", axpy, float)
instantiate_kernel("axpy_" "int3", axpy, int, 3)
kernel void untemplated(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) { y[i] = 7.0; }
"""


def test_a_kernel_template_instantiated_twice_by_a_macro(cpu):
    lib = cpu.compile(TEMPLATED, name="axpy.metal")
    assert sorted(lib.function_names) == ["axpy_float", "axpy_int3", "untemplated"]
    f = lib.function("axpy_float").signature
    assert [p.type_text for p in f.params[:3]] == ["const device float*", "device float*", "constant float&"]
    assert f.params[0].element_type == "float" and f.call_name == "axpy<float>"
    assert lib.function("axpy_int3").signature.params[1].type_text == "device int*"
    x = np.arange(8, dtype=np.float32)
    y = np.ones(8, np.float32)
    cpu.dispatch_threads(lib.function("axpy_float"), (8, 1, 1), (8, 1, 1), [x, y, 0.5])
    np.testing.assert_array_equal(y, 0.5 * x * 2 + 1)
    xi = np.arange(8, dtype=np.int32)
    yi = np.full(8, 10, np.int32)
    cpu.dispatch_threads(lib.function("axpy_int3"), (8, 1, 1), (8, 1, 1), [xi, yi, 2])
    np.testing.assert_array_equal(yi, 2 * xi * 3 + 10)
    with pytest.raises(metile.LaunchError, match="float32"):   # argument checks see the substituted types
        cpu.dispatch_threads(lib.function("axpy_int3"), (8, 1, 1), (8, 1, 1), [x, yi, 2])


def test_template_errors_name_the_instantiation_line(cpu):
    src = HEAD + ("template <typename T> [[kernel]] void f(device T* o [[buffer(0)]]) { o[0] = T(1); }\n"
                  "template [[kernel]] decltype(f<float>) f<float>;\n")
    with pytest.raises(metile.MSLCompileError, match="needs \\[\\[host_name") as e:
        cpu.compile(src, name="nohost.metal")
    assert (e.value.loc.file, e.value.loc.line) == ("nohost.metal", 4)
    bad = src.replace("[[kernel]] decltype", '[[host_name("g")]] [[kernel]] decltype').replace("f<float>", "h<float>")
    with pytest.raises(metile.MSLCompileError, match="`h` is not a kernel template"):
        cpu.compile(bad, name="unknown.metal")


def test_host_name_on_a_plain_kernel(cpu):
    src = HEAD + '[[kernel, host_name("renamed")]] void k(device float* o [[buffer(0)]]) { o[0] = 3.0; }\n'
    fn = cpu.compile(src, name="host.metal").function("renamed")
    out = np.zeros(1, np.float32)
    cpu.dispatch_threads(fn, (1, 1, 1), (1, 1, 1), [out])
    assert out[0] == 3.0


IMPLICIT = HEAD + """
kernel void rowsum(const device float* in, device float* out, constant int& n, threadgroup float* part,
                   uint row [[threadgroup_position_in_grid]], uint lid [[thread_position_in_threadgroup]]) {
  part[lid] = in[row * uint(n) + lid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lid == 0) {
    float s = 0.0f;
    for (int j = 0; j < n; j++) s += part[j];
    out[row] = s;
  }
}
"""


def test_parameters_without_buffer_indices_take_them_in_order(cpu):
    fn = cpu.compile(IMPLICIT, name="implicit.metal").function("rowsum")
    assert [(p.name, p.index) for p in fn.signature.buffers] == [("in", 0), ("out", 1), ("n", 2)]
    assert [(p.name, p.index) for p in fn.signature.threadgroup_params] == [("part", 0)]
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    out = np.zeros(3, np.float32)
    cpu.dispatch_threadgroups(fn, (3, 1, 1), (16, 1, 1), [x, out, 16], threadgroup_memory=[16 * 4])
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5)


def test_unindexed_buffers_after_indexed_ones_take_the_next_indices(cpu):
    """As MLX's rope kernel writes them: `in [[buffer(0)]], out [[buffer(1)]]`, then scalars bound at 2, 3."""
    src = HEAD + """kernel void k(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                  constant float& scale, constant int& n, uint i [[thread_position_in_grid]]) {
    if (int(i) < n) y[i] = x[i] * scale;
}
"""
    fn = cpu.compile(src, name="mixed.metal").function("k")
    assert [(p.name, p.index) for p in fn.signature.buffers] == [("x", 0), ("y", 1), ("scale", 2), ("n", 3)]
    x, y = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
    cpu.dispatch_threads(fn, (8, 1, 1), (8, 1, 1), [x, y, np.float32(3), np.int32(5)])
    assert np.array_equal(y, np.r_[x[:5] * 3, np.zeros(3, np.float32)])


def test_an_unindexed_buffer_whose_index_metal_rules_could_read_two_ways_is_refused(cpu):
    src = HEAD + "kernel void k(device float* a [[buffer(1)]], device float* b) { b[0] = a[0]; }\n"
    with pytest.raises(metile.MSLUnsupportedError, match="binds it at 0 or 2: give it an index"):
        cpu.compile(src, name="mixed.metal")


def test_array_parameters_are_buffers_holding_the_array(cpu):
    src = HEAD + """
kernel void strided(device float* out [[buffer(0)]], constant int64_t strides[2] [[buffer(1)]],
                    uint2 p [[thread_position_in_grid]]) {
  out[p.y * uint(strides[0]) + p.x * uint(strides[1])] = float(p.y * 10 + p.x);
}
kernel void shape(device int* out, constant int dims[3], uint i [[thread_position_in_grid]]) {
  out[i] = dims[i] * 2;
}
"""
    src += """
template <int DIM>
[[kernel]] void firsts(device int* out, constant const int shape[DIM], uint i [[thread_position_in_grid]]) {
  out[i] = shape[DIM - 1 - i];
}
template [[host_name("firsts3")]] [[kernel]] decltype(firsts<3>) firsts<3>;
"""
    lib = cpu.compile(src, name="arrays.metal")
    assert lib.function("firsts3").signature.params[1].array == "[3]"
    rev = np.zeros(3, np.int32)
    cpu.dispatch_threads(lib.function("firsts3"), (3, 1, 1), (3, 1, 1), [rev, np.array([1, 2, 3], np.int32)])
    np.testing.assert_array_equal(rev, [3, 2, 1])
    p = lib.function("strided").signature.params[1]
    assert (p.kind, p.index, p.type_text, p.array) == (ParamKind.BUFFER, 1, "constant int64_t*", "[2]")
    out = np.zeros((2, 3), np.float32)
    cpu.dispatch_threads(lib.function("strided"), (3, 2, 1), (3, 2, 1), [out, np.array([3, 1], np.int64)])
    np.testing.assert_array_equal(out, [[0, 1, 2], [10, 11, 12]])
    got = np.zeros(3, np.int32)
    cpu.dispatch_threads(lib.function("shape"), (3, 1, 1), (3, 1, 1), [got, np.array([4, 5, 6], np.int32)])
    np.testing.assert_array_equal(got, [8, 10, 12])


def test_multi_line_defines_and_conditionals(cpu):
    src = HEAD + """#define SCALE(x) \\
    ((x) * 3.0)
#if defined(__METAL_VERSION__) && (__METAL_VERSION__ >= 310) && defined(__METAL__)
#define OFFSET 1.0
#else
#define OFFSET 100.0
#endif
#pragma METAL internals : enable
kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  o[i] = SCALE(float(i)) + OFFSET;
}
"""
    out = np.zeros(4, np.float32)
    cpu.dispatch_threads(cpu.compile(src, name="define.metal").function("k"), (4, 1, 1), (4, 1, 1), [out])
    np.testing.assert_array_equal(out, np.arange(4) * 3 + 1)


def test_only_sources_with_directives_are_preprocessed():
    assert not needs_preprocessing(EMITTED_HEADER + "kernel void k() {}\n")
    assert not needs_preprocessing(HEAD + "kernel void k() { int x = 1; }\n")
    assert needs_preprocessing(HEAD + "#define N 4\n")
    assert needs_preprocessing('#include "mine.h"\n')
    assert needs_preprocessing("#pragma once\n")


def test_includes_from_include_dirs_and_beside_the_file(cpu, tmp_path):
    inc = tmp_path / "inc"
    (inc / "lib").mkdir(parents=True)
    (inc / "lib" / "ops.h").write_text("#pragma once\n#include <metal_stdlib>\n"
                                       "inline float twice(float x) { return x * 2.0; }\n")
    (tmp_path / "local.h").write_text('#pragma once\n#include "lib/ops.h"\n#define K 5.0\n')
    path = tmp_path / "inc_test.metal"
    path.write_text(HEAD + '#include "local.h"\n#include "lib/ops.h"\n'
                    "kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
                    "  o[i] = twice(float(i)) + K;\n}\n")
    fn = cpu.compile(None, path=path, include_dirs=[inc]).function("k")
    out = np.zeros(4, np.float32)
    cpu.dispatch_threads(fn, (4, 1, 1), (4, 1, 1), [out])
    np.testing.assert_array_equal(out, np.arange(4) * 2 + 5)
    with pytest.raises(metile.MSLCompileError, match="lib/ops.h") as e:
        cpu.compile(None, path=path)                       # without the include directory
    assert (e.value.loc.file, e.value.loc.line) == (str(tmp_path / "local.h"), 2)


def test_errors_in_an_included_header_name_its_line(cpu, tmp_path):
    (tmp_path / "bad.h").write_text("#pragma once\n// helpers\ninline float f(float x) {\n  return x * +;\n}\n")
    src = HEAD + '#include "bad.h"\nkernel void k(device float* o [[buffer(0)]]) { o[0] = f(1.0); }\n'
    with pytest.raises(metile.MSLCompileError) as e:
        cpu.compile(src, name="uses_bad.metal", include_dirs=[tmp_path])
    assert (e.value.loc.file, e.value.loc.line) == (str(tmp_path / "bad.h"), 4)
    assert "return x * +;" in str(e.value)
    # a front-end error in a header names the header's line too
    (tmp_path / "kern.h").write_text("#pragma once\n\n[[kernel]] int k2(device float* o) { return 0; }\n")
    with pytest.raises(metile.MSLCompileError, match="must return void") as e:
        cpu.compile(HEAD + '#include "kern.h"\n', name="k2.metal", include_dirs=[tmp_path])
    assert (e.value.loc.file, e.value.loc.line) == (str(tmp_path / "kern.h"), 3)


def test_include_and_preprocessor_errors(cpu, tmp_path):
    with pytest.raises(metile.MSLCompileError, match="nothere.h") as e:
        cpu.compile(HEAD + '\n#include "nothere.h"\n', name="missing.metal")
    assert (e.value.loc.file, e.value.loc.line) == ("missing.metal", 4)
    with pytest.raises(metile.MSLCompileError) as e:
        cpu.compile(HEAD + "#if 1 +\n#endif\n", name="badif.metal")
    assert e.value.loc.line == 3
    (tmp_path / "rt.h").write_text("#include <metal_raytracing>\n")
    with pytest.raises(metile.MSLUnsupportedError, match="ray tracing") as e:
        cpu.compile(HEAD + '#include "rt.h"\n', name="t.metal", include_dirs=[tmp_path])
    assert (e.value.loc.file, e.value.loc.line) == (str(tmp_path / "rt.h"), 1)


def test_include_dirs_and_header_contents_are_part_of_the_library_key(cpu, tmp_path):
    for n, value in ((1, "1.0"), (2, "2.0")):
        (tmp_path / f"d{n}").mkdir()
        (tmp_path / f"d{n}" / "v.h").write_text(f"#define V {value}\n")
    src = HEAD + '#include "v.h"\nkernel void k(device float* o [[buffer(0)]]) { o[0] = V; }\n'
    got = []
    for n in (1, 2):
        out = np.zeros(1, np.float32)
        cpu.dispatch_threads(cpu.compile(src, name="v.metal", include_dirs=[tmp_path / f"d{n}"]).function("k"),
                             (1, 1, 1), (1, 1, 1), [out])
        got.append(out[0])
    (tmp_path / "d1" / "v.h").write_text("#define V 3.0\n")   # an edited header is read again
    out = np.zeros(1, np.float32)
    cpu.dispatch_threads(cpu.compile(src, name="v.metal", include_dirs=[tmp_path / "d1"]).function("k"),
                         (1, 1, 1), (1, 1, 1), [out])
    got.append(out[0])
    assert got == [1.0, 2.0, 3.0]


def test_max_total_threads_is_a_constant_expression(cpu):
    src = HEAD + """
template <int BLOCK>
[[kernel, max_total_threads_per_threadgroup(BLOCK * 2)]] void t(device float* o [[buffer(0)]]) { o[0] = 1.0; }
template [[host_name("t64")]] [[kernel]] decltype(t<64>) t<64>;
[[kernel, max_total_threads_per_threadgroup(8 * 32)]] void k(device float* o [[buffer(0)]]) { o[0] = 1.0; }
"""
    lib = cpu.compile(src, name="mtt.metal")
    assert lib.function("k").max_total_threads_per_threadgroup == 256
    assert lib.function("t64").max_total_threads_per_threadgroup == 128
    with pytest.raises(metile.LaunchError, match="at most 256"):
        cpu.dispatch_threads(lib.function("k"), (512, 1, 1), (512, 1, 1), [np.zeros(1, np.float32)])
    bad = HEAD + "[[kernel, max_total_threads_per_threadgroup(width)]] void k(device float* o [[buffer(0)]]) {}\n"
    with pytest.raises(metile.MSLUnsupportedError, match="integer constant expressions"):
        cpu.compile(bad, name="mtt_bad.metal")


SPECIALIZED = HEAD + """
struct Negate {
  template <typename T> T operator()(T x) thread { return x + T(1); }
  template <> int operator()(int x) thread { return -x; }
};
template <typename U>
struct Pick {
  template <typename T> T get(T x) { return x * T(2); }
  template <> float get<float>(float x) { return x + 0.5f; }
};
kernel void k(device int* i_out [[buffer(0)]], device float* f_out [[buffer(1)]]) {
  i_out[0] = Negate()(5);
  i_out[1] = Pick<int>().get(5);
  f_out[0] = Negate()(5.0f);
  f_out[1] = Pick<int>().get(5.0f);
}
"""


def test_class_scope_explicit_specializations(cpu):
    ints, floats = np.zeros(2, np.int32), np.zeros(2, np.float32)
    cpu.dispatch_threads(cpu.compile(SPECIALIZED, name="spec.metal").function("k"), (1, 1, 1), (1, 1, 1),
                         [ints, floats])
    np.testing.assert_array_equal(ints, [-5, 10])
    np.testing.assert_array_equal(floats, [6.0, 5.5])


def test_metal_attributes_on_helper_parameters_are_dropped(cpu):
    src = HEAD + """
template <typename T>
void fill(threadgroup T* buf [[threadgroup(0)]], uint lid [[thread_position_in_threadgroup]]) { buf[lid] = T(lid); }
kernel void k(device float* o [[buffer(0)]], uint lid [[thread_position_in_threadgroup]]) {
  threadgroup float tile[8];
  fill(tile, lid);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  o[lid] = tile[7 - lid];
}
"""
    out = np.zeros(8, np.float32)
    cpu.dispatch_threads(cpu.compile(src, name="helper.metal").function("k"), (8, 1, 1), (8, 1, 1), [out])
    np.testing.assert_array_equal(out, np.arange(8)[::-1])


def test_threadgroup_arrays_of_template_types(cpu):
    src = HEAD + """
template <typename T, int N>
void swap_halves(device T* o, uint lid) {
  threadgroup vec<T, 2> pairs[N], spare[1];
  pairs[lid] = vec<T, 2>(T(lid), T(10 * lid));
  if (lid == 0) spare[0] = vec<T, 2>(T(1), T(2));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  o[lid] = pairs[N - 1 - lid].y + spare[0].x;
}
kernel void k(device float* o [[buffer(0)]], uint lid [[thread_position_in_threadgroup]]) {
  swap_halves<float, 4>(o, lid);
}
"""
    out = np.zeros(4, np.float32)
    cpu.dispatch_threads(cpu.compile(src, name="tgvec.metal").function("k"), (4, 1, 1), (4, 1, 1), [out])
    np.testing.assert_array_equal(out, [31, 21, 11, 1])


def test_function_constant_attributes_are_recorded():
    src = HEAD + ("kernel void k(device float* a [[buffer(0)]], device float* c [[buffer(5), "
                  "function_constant(has_c)]]) {}\n")
    (sig,) = kernel_signatures(src)
    assert [(p.index, p.function_constant) for p in sig.params] == [(0, ""), (5, "has_c")]


def test_a_fault_in_an_included_header_names_its_line(cpu, tmp_path):
    # a write just past the end lands in the buffer's guard (a write far past it could land in another mapping)
    (tmp_path / "poke.h").write_text("#pragma once\n// writes past the end\n"
                                     "__attribute__((noinline)) void poke(device float* o, uint i) {\n"
                                     "  o[i + 1024] = 1.0;\n}\n")
    src = HEAD + ('#include "poke.h"\n'
                  "kernel void k(device float* o [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
                  "  poke(o, i);\n}\n")
    fn = cpu.compile(src, name="poke.metal", include_dirs=[tmp_path]).function("k")
    with pytest.raises(metile.DeviceFault, match="invalid memory access") as e:
        cpu.dispatch_threads(fn, (1, 1, 1), (1, 1, 1), [np.zeros(4, np.float32)])
    assert (e.value.loc.file, e.value.loc.line) == (str(tmp_path / "poke.h"), 4)


def test_bad_paths_are_msl_errors(cpu, tmp_path):
    with pytest.raises(metile.MSLCompileError, match="does not exist"):
        cpu.compile(HEAD, name="x.metal", include_dirs=[tmp_path / "nowhere"])
    with pytest.raises(metile.MSLCompileError, match="cannot read the MSL file"):
        cpu.compile(None, path=tmp_path / "missing.metal")


def test_a_kernel_template_instantiated_with_a_template_argument(cpu):
    """`f<Sum<float>, 2>`: the template instantiated is `f`, not the last name followed by `<` (MLX's reductions)."""
    src = HEAD + """template <typename U> struct Sum { U operator()(U a, U b) { return a + b; } };
template <typename U> struct Max { U operator()(U a, U b) { return metal::max(a, b); } };
template <typename Op, int N>
[[kernel]] void fold(const device float* x [[buffer(0)]], device float* y [[buffer(1)]],
                     uint i [[thread_position_in_grid]]) {
  Op op;
  float acc = x[i * N];
  for (int k = 1; k < N; ++k) acc = op(acc, x[i * N + k]);
  y[i] = acc;
}
#define inst(name, op, n) template [[host_name(name)]] [[kernel]] decltype(fold<op, n>) fold<op, n>;
inst("fold_sum", Sum<float>, 3)
inst("fold_max", Max<float>, 3)
"""
    lib = cpu.compile(src, name="fold.metal")
    x = np.random.default_rng(0).standard_normal(12).astype(np.float32)
    for name, want in (("fold_sum", x.reshape(4, 3).sum(1)), ("fold_max", x.reshape(4, 3).max(1))):
        y = np.zeros(4, np.float32)
        cpu.dispatch_threads(lib.function(name), (4, 1, 1), (4, 1, 1), [x, y])
        assert np.allclose(y, want, rtol=1e-6)


def test_a_threadgroup_variable_initializer_compiles_and_is_not_run(cpu):
    """Metal compiles `threadgroup float t[4] = {0};` and documents no run of the initializer: the memory starts with
    the device's fill bytes (NaN for floats) until a thread writes it, so a kernel relying on it shows it."""
    src = HEAD + """kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_threadgroup]]) {
  threadgroup float t[4] = {0};
  threadgroup float u[4] = {0}, v = 1.0f;
  if (i == 0) { v = 2.0f; }
  u[i] = float(i);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[i] = t[i];
  out[4 + i] = u[3 - i] + v;
}
"""
    out = np.zeros(8, np.float32)
    cpu.dispatch_threadgroups(cpu.compile(src, name="tginit.metal").function("k"), (1, 1, 1), (4, 1, 1), [out])
    assert np.isnan(out[:4]).all()
    assert out[4:].tolist() == [5.0, 4.0, 3.0, 2.0]
