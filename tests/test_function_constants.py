"""Metal function constants on the CPU device: `lib.function(name, constants={...})` specialises a kernel, values
reach program-scope declarations, derived constants and optional buffer parameters, and what Metal refuses is
refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import metile
from metile.metal.cpu.msl import translate
from metile.metal.errors import FunctionConstantError, LaunchError, MSLCompileError, MSLUnsupportedError

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


# A steel-style addmm: D = A @ B, plus alpha * (A @ B) + beta * C when the constants ask for it. C and the
# alpha/beta parameters exist only when use_out_source is true, as in MLX's steel_gemm_fused.h.
ADDMM = HEAD + """
struct AddMMParams { float alpha; float beta; };
constant bool use_out_source [[function_constant(100)]];
constant bool do_axpby [[function_constant(110)]];
constant bool has_batch [[function_constant(10)]];
constant bool plain_product = !use_out_source && !has_batch;

kernel void addmm(const device float* A [[buffer(0)]],
                  const device float* B [[buffer(1)]],
                  const device float* C [[buffer(2), function_constant(use_out_source)]],
                  device float* D [[buffer(3)]],
                  constant uint& n [[buffer(4)]],
                  const constant AddMMParams* ab [[buffer(5), function_constant(use_out_source)]],
                  const constant uint* batch_stride [[buffer(6), function_constant(has_batch)]],
                  uint2 pos [[thread_position_in_grid]]) {
    uint off = has_batch ? batch_stride[0] * (pos.y / n) : 0u;
    uint row = pos.y % n, col = pos.x;
    float acc = 0.0f;
    for (uint k = 0; k < n; ++k) acc += A[off + row * n + k] * B[off + k * n + col];
    if (use_out_source) {
        float c = C[off + row * n + col];
        acc = do_axpby ? ab->alpha * acc + ab->beta * c : acc + c;
    }
    D[off + row * n + col] = plain_product ? acc : acc;
}
"""


def _addmm_inputs(n=8, batch=1):
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((batch, n, n)).astype(np.float32) for _ in range(3))
    return a, b, c


def test_steel_style_addmm_uses_alpha_beta_only_when_the_constants_say_so(cpu):
    lib = cpu.compile(ADDMM, name="addmm.metal")
    n = 8
    a, b, c = _addmm_inputs(n)
    ab = np.array([2.0, 0.5], np.float32)
    d = np.zeros_like(a)
    fn = lib.function("addmm", constants={100: True, 110: True, "has_batch": False})
    cpu.dispatch_threads(fn, (n, n), (n, n), [a, b, c, d, np.uint32(n), ab])
    np.testing.assert_allclose(d[0], 2 * a[0] @ b[0] + 0.5 * c[0], rtol=1e-5, atol=1e-5)

    fn2 = lib.function("addmm", constants={100: True, 110: False, "has_batch": False})
    cpu.dispatch_threads(fn2, (n, n), (n, n), [a, b, c, d, np.uint32(n), ab])
    np.testing.assert_allclose(d[0], a[0] @ b[0] + c[0], rtol=1e-5, atol=1e-5)

    # without an output source, C and the alpha/beta parameters do not exist: nothing is bound to them
    fn3 = lib.function("addmm", constants={"use_out_source": False, "do_axpby": True, "has_batch": False})
    cpu.dispatch_threads(fn3, (n, n), (n, n), [a, b, None, d, np.uint32(n)])
    np.testing.assert_allclose(d[0], a[0] @ b[0], rtol=1e-5, atol=1e-5)
    assert [p.name for p in fn3.signature.buffers] == ["A", "B", "D", "n"]
    assert fn is not fn2 and fn is lib.function("addmm", constants={"has_batch": False, 110: True, 100: True})


def test_optional_buffer_parameters_follow_their_constant(cpu):
    lib = cpu.compile(ADDMM, name="addmm.metal")
    n, batch = 4, 3
    a, b, c = _addmm_inputs(n, batch)
    d = np.zeros_like(a)
    fn = lib.function("addmm", constants={100: False, 110: False, 10: True})
    stride = np.array([n * n], np.uint32)
    cpu.dispatch_threads(fn, (n, n * batch), (n, n), [a, b, None, d, np.uint32(n), None, stride])
    np.testing.assert_allclose(d, a @ b, rtol=1e-5, atol=1e-5)
    with pytest.raises(LaunchError, match=r"no \[\[buffer\(2\)\]\]"):
        cpu.dispatch_threads(fn, (n, n * batch), (n, n), [a, b, c, d, np.uint32(n), None, stride])
    with pytest.raises(LaunchError, match="takes 7 buffer"):
        cpu.dispatch_threads(fn, (n, n), (n, n), [a, b, None, d, np.uint32(n)])


SCALARS = HEAD + """
constant int count [[function_constant(0)]];
constant float scale [[function_constant(1)]];
constant half bias [[function_constant(2)]];
constant uint mask [[function_constant(3)]];
constant bool has_bias = is_function_constant_defined(bias);
constant int doubled = count * 2;      // a derived constant: a compile-time constant of each specialisation

template <int N> struct Width { static constexpr int value = N; };

kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    float lanes[doubled];                 // an array bound from function constants
    for (int j = 0; j < doubled; ++j) lanes[j] = float(j);
    float v = float(Width<count>::value) * scale + lanes[doubled - 1];
    if (has_bias) v += float(bias);
    out[i] = v + float(mask & 0xFu);
}
"""


def test_int_float_half_constants_by_index_and_by_name(cpu):
    lib = cpu.compile(SCALARS, name="scalars.metal")
    assert lib.function_constants.listing() == "0: int count; 1: float scale; 2: half bias; 3: uint mask"
    out = np.zeros(2, np.float32)
    fn = lib.function("k", constants={0: 3, "scale": 1.5, "mask": 0xF1})
    cpu.dispatch_threads(fn, 2, 2, [out])
    np.testing.assert_array_equal(out, 3 * 1.5 + 5 + 1)
    fn = lib.function("k", constants={"count": 2, 1: 0.25, 2: 0.5, 3: np.uint32(2)})
    cpu.dispatch_threads(fn, 2, 2, [out])
    np.testing.assert_array_equal(out, 2 * 0.25 + 3 + 0.5 + 2)


def test_is_function_constant_defined_is_true_exactly_when_a_value_was_given(cpu):
    src = HEAD + """
constant int a [[function_constant(4)]];
constant bool b [[function_constant(5)]];
kernel void k(device int* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    out[0] = is_function_constant_defined(a) ? a : -1;
    out[1] = is_function_constant_defined(b) ? int(b) + 10 : -1;
}
"""
    lib = cpu.compile(src, name="defined.metal")
    out = np.zeros(2, np.int32)
    cpu.dispatch_threads(lib.function("k"), 1, 1, [out])
    assert out.tolist() == [-1, -1]
    cpu.dispatch_threads(lib.function("k", constants={4: 0}), 1, 1, [out])
    assert out.tolist() == [0, -1]
    cpu.dispatch_threads(lib.function("k", constants={"b": False, "a": 7}), 1, 1, [out])
    assert out.tolist() == [7, 10]


def test_a_kernel_that_uses_no_constant_needs_none(cpu):
    src = SCALARS + """
kernel void other(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) { out[i] = 4.0f; }
"""
    lib = cpu.compile(src, name="mixed.metal")
    out = np.zeros(2, np.float32)
    cpu.dispatch_threads(lib.function("other"), 2, 2, [out])
    assert out.tolist() == [4.0, 4.0]
    with pytest.raises(FunctionConstantError, match=r"`count` \(index 0, int\), `scale` \(index 1, float\), "
                                                    r"`mask` \(index 3, uint\)"):
        lib.function("k")


@pytest.mark.parametrize("constants, message", [
    ({0: True, 1: 1.0, 3: 1}, r"`count` \(index 0, `int`\) of scalars.metal is not a bool; got True"),
    ({0: 1.5, 1: 1.0, 3: 1}, r"`count` .* is an integer; got 1.5"),
    ({0: 1, 1: "x", 3: 1}, r"`scale` .* is a floating-point number; got 'x'"),
    ({0: 1, 1: 1e39, 3: 1}, r"1e\+39 overflows float"),
    ({0: 1, 1: 1.0, 3: -1}, r"`mask` .*: -1 does not fit \(0..4294967295\)"),
    ({0: 1, 1: 1.0, 3: 1, 9: 2}, r"declares no function constant with index 9; it declares: 0: int count; "
                                 r"1: float scale; 2: half bias; 3: uint mask"),
    ({0: 1, 1: 1.0, 3: 1, "cuont": 2}, r"no function constant with name `cuont`"),
    ({0: 1, "count": 2, 1: 1.0, 3: 1}, r"`count` \(index 0\) of scalars.metal is given twice"),
    ({0: 1, 3: 1}, r"requires a value for function constant\(s\) `scale` \(index 1, float\)"),
    ({1.0: 1}, r"keys are indices \(int\) or names \(str\)"),
])
def test_values_that_do_not_fit_are_refused(cpu, constants, message):
    lib = cpu.compile(SCALARS, name="scalars.metal")
    with pytest.raises(FunctionConstantError, match=message):
        lib.function("k", constants=constants)


def test_bool_constants_take_only_bools(cpu):
    lib = cpu.compile(ADDMM, name="addmm.metal")
    with pytest.raises(FunctionConstantError, match=r"`use_out_source` \(index 100, `bool`\) .* is a bool; got 1"):
        lib.function("addmm", constants={100: 1, 110: False, 10: False})


def test_a_kernel_with_required_constants_is_refused_without_values(cpu):
    lib = cpu.compile(ADDMM, name="addmm.metal")
    with pytest.raises(FunctionConstantError, match=r"kernel `addmm` of addmm.metal requires a value for function "
                                                    r"constant\(s\) `use_out_source` \(index 100, bool\), "
                                                    r"`do_axpby` \(index 110, bool\), `has_batch` \(index 10"):
        lib.function("addmm")
    assert issubclass(FunctionConstantError, LaunchError)


def test_constants_on_a_file_without_function_constants_are_refused(cpu):
    lib = cpu.compile(HEAD + "kernel void k(device int* o [[buffer(0)]]) { o[0] = 1; }", name="none.metal")
    with pytest.raises(FunctionConstantError, match="declares no function constants"):
        lib.function("k", constants={0: 1})


@pytest.mark.parametrize("decl, message", [
    ("constant int a [[function_constant(1)]];\nconstant int b [[function_constant(1)]];",
     r"function constants `a` \(bad.metal:3\) and `b` share index 1"),
    ("constant int a [[function_constant(1)]];\nconstant float a [[function_constant(2)]];",
     "function constant `a` is declared twice"),
    ("struct S { int x; };\nconstant S s [[function_constant(0)]];", "has type `S`; a function constant is a scalar"),
    ("constant int a [[function_constant(70000)]];", r"index 70000 is out of range \(0..65535\)"),
    ("constant int a [[function_constant(x)]];", "with an integer index"),
    ("constant bool a = is_function_constant_defined(zz);", "takes the name of a function constant declared"),
])
def test_bad_declarations_are_compile_errors(cpu, decl, message):
    src = HEAD + decl + "\nkernel void k(device int* o [[buffer(0)]]) { o[0] = 1; }\n"
    with pytest.raises(MSLCompileError, match=message) as e:
        cpu.compile(src, name="bad.metal")
    assert e.value.loc.file == "bad.metal"


HEADER = """
#define FC_CONST static constant constexpr const
FC_CONST int tile [[function_constant(7)]];
constant bool flip [[function_constant(8)]];
constant bool has_extra = is_function_constant_defined(extra_value);
constant float extra_value [[function_constant(9)]];
template <int N> struct Tile { static constexpr int size = N; };
inline float header_value(float x) { return flip ? -x * Tile<tile>::size : x * Tile<tile>::size; }
"""


def test_constants_declared_in_an_included_header(cpu, tmp_path: Path):
    (tmp_path / "fc_header.h").write_text(HEADER)
    src = HEAD + """#include "fc_header.h"
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    out[i] = header_value(float(i)) + (has_extra ? extra_value : 0.0f);
}
kernel void unrelated(device float* out [[buffer(0)]]) { out[0] = 1.0f; }
"""
    (tmp_path / "main.metal").write_text(src)
    lib = cpu.compile_file(tmp_path / "main.metal")
    out = np.zeros(3, np.float32)
    cpu.dispatch_threads(lib.function("k", constants={7: 4, "flip": True}), 3, 3, [out])
    assert out.tolist() == [0.0, -4.0, -8.0]
    cpu.dispatch_threads(lib.function("k", constants={7: 2, "flip": False, 9: 0.5}), 3, 3, [out])
    assert out.tolist() == [0.5, 2.5, 4.5]
    cpu.dispatch_threads(lib.function("unrelated"), 1, 1, [out])
    with pytest.raises(FunctionConstantError, match=r"`tile` \(index 7, int\), `flip` \(index 8, bool\): it uses"):
        lib.function("k")


def test_a_function_constant_the_front_end_cannot_see_is_a_compile_error(cpu, tmp_path: Path):
    """A header reached through a macro is not read by the front end; its constant must not silently be zero."""
    (tmp_path / "hidden.h").write_text("constant bool hidden [[function_constant(3)]];\n")
    src = HEAD + """#define HIDDEN "hidden.h"
#include HIDDEN
kernel void k(device int* out [[buffer(0)]]) { out[0] = hidden ? 1 : 2; }
"""
    (tmp_path / "macro_include.metal").write_text(src)
    with pytest.raises(MSLCompileError, match="function constant index 3 is declared or used in a file the CPU "
                                              "device's front end does not read"):
        cpu.compile_file(tmp_path / "macro_include.metal")


def test_specialisations_are_cached_on_disk(tmp_path: Path):
    """A new device with the same cache finds each value set's build: no compile the second time."""
    dev = metile.device("cpu")
    lib = dev.compile(SCALARS, name="scalars.metal")
    spec = lib.function("k", constants={0: 5, 1: 2.0, 3: 0})
    path = dev.builder.build(spec.library.translation, source_dir=None)
    assert path.exists()
    other = lib.function("k", constants={0: 6, 1: 2.0, 3: 0})
    assert dev.builder.build(other.library.translation, source_dir=None) != path


MLX = Path("/tmp/mlx-include/mlx/backend/metal/kernels/steel/gemm/kernels/steel_gemm_fused.h")


@pytest.mark.skipif(not MLX.exists(), reason="MLX's Metal headers are not unpacked at /tmp/mlx-include")
def test_mlx_steel_gemm_constants_are_found_in_its_header():
    """MLX declares steel GEMM's constants in a header: the front end must see them, or addmm reads them as 0."""
    src = ('#include <metal_stdlib>\n'
           '#include "mlx/backend/metal/kernels/steel/gemm/kernels/steel_gemm_fused.h"\n'
           'kernel void k(device int* o [[buffer(0)]]) { o[0] = use_out_source && do_axpby; }\n')
    tr = translate(src, "addmm.metal", include_dirs=("/tmp/mlx-include",))
    table = tr.function_constants
    assert table.listing() == ("10: bool has_batch; 100: bool use_out_source; 110: bool do_axpby; "
                               "200: bool align_M; 201: bool align_N; 202: bool align_K")
    assert [c.name for c in table.required("k")] == ["use_out_source", "do_axpby"]
    assert "#define __mt_function_constant_unknown_to_metile_110 = bool(__MT_FC_VALUE_do_axpby)" in tr.cpp


# -- the Apple GPU device, on the C stand-in for its shim ----------------------------------------------------------
def _hex(values: bytes) -> str:
    return values.ljust(32, b"\0").hex()


def test_metal_device_passes_values_through_function_constant_values(stub, make_device):
    dev = make_device()
    lib = dev.compile(SCALARS, name="scalars.metal")
    stub.clear_log()
    fn = lib.function("k", constants={0: 3, "scale": 1.5, 3: np.uint32(7), "bias": 0.5})
    (line,) = stub.calls("pipeline_create_specialized")
    assert line.endswith("function=k"
                         f" constant=#0:29:{_hex(np.int32(3).tobytes())}"
                         f" constant=scale:3:{_hex(np.float32(1.5).tobytes())}"
                         f" constant=#3:33:{_hex(np.uint32(7).tobytes())}"
                         f" constant=bias:16:{_hex(np.float16(0.5).tobytes())}")
    assert lib.function("k", constants={"count": 3, 1: 1.5, 3: 7, 2: 0.5}) is fn
    assert len(stub.calls("pipeline_create_specialized")) == 1


def test_metal_device_specialises_every_function_of_a_library_with_constants(stub, make_device):
    """Metal cannot build a pipeline from a function that has function constants without specialising it."""
    dev = make_device()
    src = HEAD + """
constant int a [[function_constant(4)]];
kernel void k(device int* out [[buffer(0)]]) { out[0] = is_function_constant_defined(a) ? a : -1; }
"""
    lib = dev.compile(src, name="defined.metal")
    stub.clear_log()
    lib.function("k")
    assert [line.endswith("function=k") for line in stub.calls("pipeline_create_specialized")] == [True]
    assert stub.calls("pipeline_create") == []
    plain = dev.compile(HEAD + "kernel void p(device int* o [[buffer(0)]]) { o[0] = 1; }", name="plain.metal")
    plain.function("p")
    assert len(stub.calls("pipeline_create")) == 1


def test_metal_device_refuses_what_the_cpu_device_refuses(make_device):
    dev = make_device()
    lib = dev.compile(ADDMM, name="addmm.metal")
    with pytest.raises(FunctionConstantError, match=r"requires a value for function constant\(s\) `use_out_source`"):
        lib.function("addmm")
    with pytest.raises(FunctionConstantError, match=r"is a bool; got 1"):
        lib.function("addmm", constants={100: 1, 110: False, 10: False})
    with pytest.raises(FunctionConstantError, match="no function constant with index 5"):
        lib.function("addmm", constants={5: True})
    fn = lib.function("addmm", constants={100: False, 110: False, 10: False})
    assert [p.index for p in fn.signature.buffers] == [0, 1, 3, 4]


def test_vector_constants(cpu):
    src = HEAD + """
constant float2 offs [[function_constant(6)]];
constant int3 steps [[function_constant(7)]];
constant float first = offs.x;         // not a compile-time constant: a vector is an ordinary constant here
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    out[i] = first + offs.y * float(i) + float(steps.x + steps.y + steps.z);
}
"""
    lib = cpu.compile(src, name="vectors.metal")
    out = np.zeros(3, np.float32)
    cpu.dispatch_threads(lib.function("k", constants={6: (1.0, 0.5), "steps": np.array([1, 2, 3])}), 3, 3, [out])
    assert out.tolist() == [7.0, 7.5, 8.0]
    with pytest.raises(FunctionConstantError, match=r"`offs` \(index 6, `float2`\) .* takes 2 values, got 1.0"):
        lib.function("k", constants={6: 1.0, 7: (1, 2, 3)})
    with pytest.raises(FunctionConstantError, match=r"`steps` .* is an integer; got 1.5"):
        lib.function("k", constants={6: (1.0, 2.0), 7: (1, 1.5, 3)})


def test_a_parameter_conditional_on_an_unknown_constant_is_refused(cpu):
    src = HEAD + "kernel void k(device int* o [[buffer(0)]], device int* p [[buffer(1), function_constant(nope)]]) {}"
    with pytest.raises(MSLUnsupportedError, match="depends on `nope`, which is not a function constant"):
        cpu.compile(src, name="nope.metal")
