"""Metal 4 tensors and MetalPerformancePrimitives' matmul2d on the CPU device (include/mt_tensor.h, mt_mpp.h).

Each kernel here is MSL as one writes it for an Apple GPU with neural accelerators; the results are compared with
numpy, the relaxed-precision ones with the inputs cut to TF32's 10 mantissa bits (mt_mpp.h says why), at a
tolerance the uncut product misses. The cooperative tensor layout is checked element by element against the one
MLX's NAX kernels write by hand (BaseNAXFrag in steel/gemm/nax.h).
"""

from __future__ import annotations

import numpy as np
import pytest

import metile

HEAD = """#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
using namespace metal;
using namespace mpp::tensor_ops;
"""

GEMM = HEAD + """
kernel void gemm(device {T}* A [[buffer(0)]], device {T}* B [[buffer(1)]], device float* C [[buffer(2)]],
                 constant int& M [[buffer(3)]], constant int& N [[buffer(4)]], constant int& K [[buffer(5)]],
                 uint3 tg [[threadgroup_position_in_grid]]) {{
    using ext = dextents<int32_t, 2>;
    auto tA = tensor<device {T}, ext, tensor_inline>(A, {TA} ? ext(M, K) : ext(K, M));
    auto tB = tensor<device {T}, ext, tensor_inline>(B, {TB} ? ext(K, N) : ext(N, K));
    auto tC = tensor<device float, ext, tensor_inline>(C, ext(N, M));
    const int m0 = int(tg.x) * {TM}, n0 = int(tg.y) * {TN};
    constexpr auto desc = matmul2d_descriptor({TM}, {TN}, {TK}, {TA}, {TB}, {RELAX},
                                              matmul2d_descriptor::mode::multiply_accumulate);
    matmul2d<desc, execution_simdgroup> op;
    auto a = op.get_left_input_cooperative_tensor<{T}, {T}, float>();
    auto b = op.get_right_input_cooperative_tensor<{T}, {T}, float>();
    auto c = op.get_destination_cooperative_tensor<decltype(a), decltype(b), float>();
    for (uint16_t i = 0; i < c.get_capacity(); ++i)
        if (c.is_valid_element(i)) c[i] = 0.0f;
    for (int k = 0; k < K; k += {TK}) {{
        a.load({TA} ? tA.slice(m0, k) : tA.slice(k, m0));
        b.load({TB} ? tB.slice(k, n0) : tB.slice(n0, k));
        op.run(a, b, c);
    }}
    c.store(tC.slice(n0, m0));
}}
"""


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 values cut toward zero to 10 mantissa bits."""
    return (np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def run_gemm(cpu, M, N, K, *, T="float", tile=(16, 16, 16), ta=False, tb=False, relax=False, seed=0):
    """C = A @ B with the GEMM kernel above; returns (C, A, B) with A, B as the float64 values the kernel saw."""
    TM, TN, TK = tile
    src = GEMM.format(T=T, TM=TM, TN=TN, TK=TK, TA=str(ta).lower(), TB=str(tb).lower(), RELAX=str(relax).lower())
    fn = cpu.compile(src, name=f"gemm_{T}_{TM}x{TN}x{TK}_{ta:d}{tb:d}{relax:d}.metal").function("gemm")
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    if T == "half":
        a, b = a.astype(np.float16), b.astype(np.float16)
        da, db = a, b
    elif T == "bfloat":
        da, db = bf16_bits(a), bf16_bits(b)
        a, b = bf16_values(da), bf16_values(db)
    else:
        da, db = a, b
    da = np.ascontiguousarray(da.T if ta else da)
    db = np.ascontiguousarray(db.T if tb else db)
    c = np.full((M, N), np.nan, np.float32)
    cpu.dispatch_threadgroups(fn, (-(-M // TM), -(-N // TN), 1), (32, 1, 1),
                              [da, db, c, np.int32(M), np.int32(N), np.int32(K)])
    return c, a.astype(np.float64), b.astype(np.float64)


def test_the_reference_tensor_ops_gemm_cuts_float_inputs_to_tf32(cpu):
    """Relaxed precision on float inputs: the product of the inputs cut to 10 mantissa bits, summed in float, and
    not the full float32 product (which differs by far more than float summation does)."""
    c, a, b = run_gemm(cpu, 64, 64, 128, tile=(32, 32, 32), relax=True)
    cut = tf32(a).astype(np.float64) @ tf32(b).astype(np.float64)
    np.testing.assert_allclose(c, cut, rtol=1e-5, atol=1e-4)
    assert np.abs(c - a @ b).max() > 1e-2


def test_without_relaxed_precision_float_inputs_keep_every_bit(cpu):
    c, a, b = run_gemm(cpu, 32, 48, 64, tile=(16, 16, 32), relax=False)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_transposed_operands(cpu, ta, tb):
    c, a, b = run_gemm(cpu, 32, 48, 64, tile=(16, 32, 16) if not ta else (32, 16, 16), ta=ta, tb=tb)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("T", ["half", "bfloat"])
def test_half_and_bfloat_inputs_accumulate_in_float(cpu, T):
    c, a, b = run_gemm(cpu, 32, 32, 64, T=T, tile=(16, 32, 16), relax=True)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


def test_edges_outside_the_tensors_read_zero_and_are_not_written(cpu):
    """M, N and K that are not multiples of the tile: loads past the extents read zero, stores past them write
    nothing (the NaN the output starts with stays only where nothing is written: nowhere inside)."""
    c, a, b = run_gemm(cpu, 40, 24, 40, tile=(16, 16, 16))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)


LAYOUT = HEAD + """
// MLX's BaseNAXFrag: lane l's element j of a 16 x 16 fragment, at row fm + (j / 4) * 8, column fn + j % 4
short2 coord(ushort l, short j) {
    const short qid = l >> 2;
    const short fm = ((qid & 4) | ((l >> 1) & 3)) + (j >> 2) * 8;
    const short fn = ((qid & 2) | (l & 1)) * 4 + j % 4;
    return short2(fn, fm);
}
kernel void frag(device const float* A [[buffer(0)]], device const float* B [[buffer(1)]],
                 device float* C [[buffer(2)]], device int* where [[buffer(3)]],
                 ushort l [[thread_index_in_simdgroup]]) {
    // A: 16 x 16, B: 16 x 32 as two 16 x 16 fragments side by side, C = A B: 16 x 32 likewise
    constexpr auto desc = matmul2d_descriptor(16, 32, 16, false, false, true,
                                              matmul2d_descriptor::mode::multiply_accumulate);
    matmul2d<desc, execution_simdgroup> op;
    auto a = op.get_left_input_cooperative_tensor<float, float, float>();
    auto b = op.get_right_input_cooperative_tensor<float, float, float>();
    auto c = op.get_destination_cooperative_tensor<remove_addrspace_t<decltype(a)>,
                                                   remove_addrspace_t<decltype(b)>, float>();
    for (short j = 0; j < 8; ++j) {
        short2 p = coord(l, j);
        a[j] = A[p.y * 16 + p.x];
        b[j] = B[p.y * 32 + p.x];
        b[8 + j] = B[p.y * 32 + 16 + p.x];
        c[j] = 0.0f;
        c[8 + j] = 0.0f;
    }
    op.run(a, b, c);
    for (short j = 0; j < 8; ++j) {
        short2 p = coord(l, j);
        C[p.y * 32 + p.x] = c[j];
        C[p.y * 32 + 16 + p.x] = c[8 + j];
    }
    for (ushort i = 0; i < c.get_capacity(); ++i) {
        auto idx = c.get_multidimensional_index(i);
        where[(l * 16 + i) * 2] = idx[0];
        where[(l * 16 + i) * 2 + 1] = idx[1];
    }
}
"""


def test_cooperative_tensor_elements_are_where_mlx_writes_them(cpu):
    """Elements written one by one in MLX's fragment layout multiply as the matrices they stand for, and
    get_multidimensional_index names the same places."""
    fn = cpu.compile(LAYOUT, name="frag.metal").function("frag")
    rng = np.random.default_rng(3)
    a = tf32(rng.standard_normal((16, 16)).astype(np.float32))
    b = tf32(rng.standard_normal((16, 32)).astype(np.float32))
    c = np.full((16, 32), np.nan, np.float32)
    where = np.full((32, 16, 2), -1, np.int32)
    cpu.dispatch_threadgroups(fn, (1, 1, 1), (32, 1, 1), [a, b, c, where])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    for lane in range(32):
        qid = lane >> 2
        for i in range(16):
            j = i % 8
            fm = ((qid & 4) | ((lane >> 1) & 3)) + (j >> 2) * 8
            fn_ = ((qid & 2) | (lane & 1)) * 4 + j % 4 + 16 * (i // 8)
            assert tuple(where[lane, i]) == (fn_, fm)


TENSOR_OPERANDS = HEAD + """
kernel void k(device const half* A [[buffer(0)]], device const half* B [[buffer(1)]], device float* C [[buffer(2)]],
              constant int& K [[buffer(3)]], uint l [[thread_index_in_simdgroup]]) {
    using ext = dextents<int32_t, 2>;
    // A row-major 16 x K with a row stride of K + 3 (padding), B 16 x K (transposed: N x K row-major)
    tensor<device const half, ext, tensor_inline> tA(A, ext(K, 16), array<int32_t, 2>{1, K + 3});
    tensor<device const half, ext, tensor_inline> tB(B, ext(K, 16));
    constexpr auto desc = matmul2d_descriptor(16, 16, static_cast<int>(dynamic_extent), false, true, false);
    matmul2d<desc, execution_simdgroup> op;
    auto c = op.get_destination_cooperative_tensor<decltype(tA), decltype(tB), float>();
    for (uint16_t i = 0; i < c.get_capacity(); ++i) c[i] = 5.0f;   // mode::multiply overwrites
    op.run(tA, tB, c);
    threadgroup float staged[16 * 20];
    tensor<threadgroup float, extents<int32_t, 16, 16>, tensor_inline> tS(staged, extents<int32_t, 16, 16>(),
                                                                        array<int32_t, 2>{1, 20});
    c.store(tS);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = l; i < 256; i += 32) C[i] = staged[(i / 16) * 20 + i % 16];
}
"""


def test_tensor_operands_strides_dynamic_k_and_threadgroup_tensors(cpu):
    fn = cpu.compile(TENSOR_OPERANDS, name="tensors.metal").function("k")
    rng = np.random.default_rng(5)
    K = 40
    a = rng.standard_normal((16, K + 3)).astype(np.float16)
    b = rng.standard_normal((16, K)).astype(np.float16)
    c = np.full((16, 16), np.nan, np.float32)
    cpu.dispatch_threadgroups(fn, (1, 1, 1), (32, 1, 1), [a, b, c, np.int32(K)])
    want = a[:, :K].astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)


def _refusal(cpu, src, name):
    with pytest.raises(metile.MSLUnsupportedError) as info:
        cpu.compile(src, name=name)
    return info.value


SCOPES = HEAD + """
// Apple's example: a 64 x 32 tile of C per threadgroup of 4 simdgroups, K read from the tensors
kernel void simdgroups(device half* A [[buffer(0)]], device half* B [[buffer(1)]], device float* C [[buffer(2)]],
                       constant int& M [[buffer(3)]], constant int& N [[buffer(4)]], constant int& K [[buffer(5)]],
                       uint2 tgid [[threadgroup_position_in_grid]]) {
    using ext = dextents<int32_t, 2>;
    auto tA = tensor<device half, ext, tensor_inline>(A, ext(K, M));
    auto tB = tensor<device half, ext, tensor_inline>(B, ext(N, K));
    auto tC = tensor<device float, ext, tensor_inline>(C, ext(N, M));
    constexpr auto desc = matmul2d_descriptor(64, 32, static_cast<int>(dynamic_extent));
    matmul2d<desc, execution_simdgroups<4>> op;
    auto mA = tA.slice(0, tgid.y * 64);
    auto mB = tB.slice(tgid.x * 32, 0);
    auto mC = tC.slice(tgid.x * 32, tgid.y * 64);
    op.run(mA, mB, mC);
}
kernel void one_thread(device half* A [[buffer(0)]], device half* B [[buffer(1)]], device float* C [[buffer(2)]],
                       constant int& M [[buffer(3)]], constant int& N [[buffer(4)]], constant int& K [[buffer(5)]]) {
    using ext = dextents<int32_t, 2>;
    auto tA = tensor<device half, ext, tensor_inline>(A, ext(K, M));
    auto tB = tensor<device half, ext, tensor_inline>(B, ext(N, K));
    auto tC = tensor<device float, ext, tensor_inline>(C, ext(N, M));
    constexpr auto desc = matmul2d_descriptor(48, 40, static_cast<int>(dynamic_extent));
    matmul2d<desc, execution_thread> op;
    op.run(tA, tB, tC);
}
"""


def test_execution_simdgroups_and_execution_thread_with_tensor_operands(cpu):
    lib = cpu.compile(SCOPES, name="scopes.metal")
    rng = np.random.default_rng(7)
    M, N, K = 96, 40, 24
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    args = [a, b, None, np.int32(M), np.int32(N), np.int32(K)]
    c = np.full((M, N), np.nan, np.float32)
    cpu.dispatch_threadgroups(lib.function("simdgroups"), (2, 2, 1), (128, 1, 1), [*args[:2], c, *args[3:]])
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4)
    c = np.full((M, N), np.nan, np.float32)
    cpu.dispatch_threadgroups(lib.function("one_thread"), (1, 1, 1), (1, 1, 1), [*args[:2], c, *args[3:]])
    np.testing.assert_allclose(c[:48], want[:48], rtol=1e-5, atol=1e-4)
    assert np.isnan(c[48:]).all()      # the op's 48 x 40 tile and nothing past it
    with pytest.raises(metile.DeviceFault, match="exactly N full simdgroups"):
        cpu.dispatch_threadgroups(lib.function("simdgroups"), (2, 2, 1), (64, 1, 1), [*args[:2], c, *args[3:]])


HELD = HEAD + """
// a 24 x 40 tile of C per threadgroup of 4 simdgroups, its destination cooperative tensor held across the k loop
kernel void held(device half* A [[buffer(0)]], device half* B [[buffer(1)]], device float* C [[buffer(2)]],
                 constant int& M [[buffer(3)]], constant int& N [[buffer(4)]], constant int& K [[buffer(5)]],
                 uint2 tgid [[threadgroup_position_in_grid]]) {
    using ext = dextents<int32_t, 2>;
    auto tA = tensor<device half, ext, tensor_inline>(A, ext(K, M));
    auto tB = tensor<device half, ext, tensor_inline>(B, ext(N, K));
    auto tC = tensor<device float, ext, tensor_inline>(C, ext(N, M));
    constexpr auto desc = matmul2d_descriptor(24, 40, 8, false, false, false,
                                              matmul2d_descriptor::mode::multiply_accumulate);
    matmul2d<desc, execution_simdgroups<4>> op;
    auto a0 = tA.slice<8, 24>(0, tgid.y * 24);
    auto b0 = tB.slice<40, 8>(tgid.x * 40, 0);
    auto c = op.get_destination_cooperative_tensor<decltype(a0), decltype(b0), float>();
    for (uint16_t i = 0; i < c.get_capacity(); ++i)
        if (c.is_valid_element(i)) c[i] = 0.0f;
    for (int k = 0; k < K; k += 8)
        op.run(tA.slice(k, tgid.y * 24), tB.slice(tgid.x * 40, k), c);
    c.store(tC.slice(tgid.x * 40, tgid.y * 24));
}
"""


def test_a_destination_of_execution_simdgroups_held_across_a_loop(cpu):
    """The cooperative destination of a matmul2d run by 4 simdgroups, spread over their 128 threads (the 960 elements
    of its 24 x 40 tile leave the last element of some threads past it), accumulates across the k loop and is
    stored once, clipped to C's edges."""
    lib = cpu.compile(HELD, name="held.metal")
    rng = np.random.default_rng(5)
    M, N, K = 40, 70, 36
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    cpu.dispatch_threadgroups(lib.function("held"), (2, 2, 1), (128, 1, 1),
                              [a, b, c, np.int32(M), np.int32(N), np.int32(K)])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_cooperative_tensors_of_other_execution_scopes_are_refused_at_their_line(cpu):
    src = GEMM.format(T="float", TM=16, TN=16, TK=16, TA="false", TB="false", RELAX="false")
    src = src.replace("matmul2d<desc, execution_simdgroup> op;", "matmul2d<desc, execution_simdgroups<4>> op;")
    err = _refusal(cpu, src, "scope.metal")
    assert "cooperative inputs of a matmul2d whose execution scope is not execution_simdgroup" in str(err)
    assert "get_left_input_cooperative_tensor" in src.splitlines()[err.loc.line - 1]


def test_reductions_and_odd_tile_shapes_are_refused(cpu):
    src = GEMM.format(T="float", TM=16, TN=16, TK=16, TA="false", TB="false", RELAX="false")
    red = src.replace("    c.store(tC.slice(n0, m0));", "    reduce_rows(c, c);\n    c.store(tC.slice(n0, m0));")
    err = _refusal(cpu, red, "reduce.metal")
    assert "reduce_rows" in str(err) and "reduce_rows" in red.splitlines()[err.loc.line - 1]
    odd = GEMM.format(T="float", TM=8, TN=16, TK=16, TA="false", TB="false", RELAX="false")
    err = _refusal(cpu, odd, "odd.metal")
    assert "multiples of 16" in str(err)


@pytest.mark.parametrize("construct,word", [
    ("for (auto it = c.begin(); false;) {}", "iterators"),
    ("(void)is_iterator_compatible(c, c);", "is_iterator_compatible"),
    ("auto a2 = op.get_left_input_cooperative_tensor<float, float, float>(c);", "cooperative inputs made from"),
])
def test_iterators_and_conversions_of_cooperative_tensors_are_refused(cpu, construct, word):
    src = GEMM.format(T="float", TM=16, TN=16, TK=16, TA="false", TB="false", RELAX="false")
    src = src.replace("    c.store(tC.slice(n0, m0));", f"    {construct}\n    c.store(tC.slice(n0, m0));")
    err = _refusal(cpu, src, "iter.metal")
    assert word in str(err) and construct[:12] in src.splitlines()[err.loc.line - 1]


def test_the_tensor_headers_compile_without_warnings(tmp_path):
    """The reference tensor-ops kernel as the front end translates it, under -Wall -Wextra (C++20)."""
    import subprocess
    from pathlib import Path

    from metile.metal.cpu.msl import translate
    from metile.metal.cpu.toolchain import INCLUDE_DIR, find_compiler
    from metile.metal.msl_preprocess import preprocess, stub_headers

    cxx = find_compiler().path
    src = (Path(__file__).parent / "data" / "reference_msl" / "gemm_tensor_ops_f32_64x64x32" / "kernel.metal")
    pre = preprocess(src.read_text(), "kernel.metal", compiler=cxx, stub_dir=stub_headers(tmp_path))
    tr = translate(src.read_text(), "kernel.metal", preprocessed=pre)
    assert tr.cxx_standard == "c++20"
    (tmp_path / "k.cpp").write_text(tr.cpp)
    r = subprocess.run([cxx, "-std=c++20", "-O2", "-Wall", "-Wextra", "-Wno-unknown-pragmas", f"-I{INCLUDE_DIR}",
                        f"-I{INCLUDE_DIR.parent}", "-fsyntax-only", str(tmp_path / "k.cpp")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_a_tensor_kernel_parameter_is_refused(cpu):
    src = HEAD + ("kernel void k(tensor<device half, dextents<int32_t, 2>> A [[buffer(0)]],\n"
                  "              device float* out [[buffer(1)]]) { out[0] = 1.0f; }\n")
    err = _refusal(cpu, src, "param.metal")
    assert "kernel parameter of tensor type" in str(err) and err.loc.line == 6


def test_a_run_that_only_some_lanes_reach_faults(cpu):
    src = GEMM.format(T="float", TM=16, TN=16, TK=16, TA="false", TB="false", RELAX="false")
    src = src.replace("uint3 tg [[threadgroup_position_in_grid]]",
                      "uint3 tg [[threadgroup_position_in_grid]], uint l [[thread_index_in_simdgroup]]")
    src = src.replace("        op.run(a, b, c);", "        if (l < 16) op.run(a, b, c);")
    fn = cpu.compile(src, name="some.metal").function("gemm")
    z = np.zeros((16, 16), np.float32)
    with pytest.raises(metile.DeviceFault, match="only some lanes") as info:
        cpu.dispatch_threadgroups(fn, (1, 1, 1), (32, 1, 1), [z, z, z.copy(), np.int32(16), np.int32(16),
                                                              np.int32(16)])
    assert "op.run" in src.splitlines()[info.value.metal_loc.line - 1]


def test_a_cooperative_element_index_past_the_capacity_faults(cpu):
    src = GEMM.format(T="float", TM=16, TN=16, TK=16, TA="false", TB="false", RELAX="false")
    src = src.replace("        if (c.is_valid_element(i)) c[i] = 0.0f;", "        c[i + 1] = 0.0f;")
    fn = cpu.compile(src, name="index.metal").function("gemm")
    z = np.zeros((16, 16), np.float32)
    with pytest.raises(metile.DeviceFault, match="out of range"):
        cpu.dispatch_threadgroups(fn, (1, 1, 1), (32, 1, 1), [z, z, z.copy(), np.int32(16), np.int32(16),
                                                              np.int32(16)])


def test_runs_in_two_arms_of_a_divergent_branch_are_two_runs_and_fault(cpu):
    """A run is a simd collective for the front end: the two arms of a branch that splits the lanes call it apart
    (as a GPU runs the arms one after the other), so neither has every lane, even on one line."""
    src = GEMM.format(T="float", TM=16, TN=16, TK=16, TA="false", TB="false", RELAX="false")
    src = src.replace("uint3 tg [[threadgroup_position_in_grid]]",
                      "uint3 tg [[threadgroup_position_in_grid]], uint l [[thread_index_in_simdgroup]]")
    src = src.replace("        op.run(a, b, c);", "        if (l < 16) op.run(a, b, c); else op.run(a, b, c);")
    fn = cpu.compile(src, name="arms.metal").function("gemm")
    z = np.zeros((16, 16), np.float32)
    with pytest.raises(metile.DeviceFault, match="only some lanes"):
        cpu.dispatch_threadgroups(fn, (1, 1, 1), (32, 1, 1), [z, z, z.copy(), np.int32(16), np.int32(16),
                                                              np.int32(16)])


def test_the_exchange_of_cooperative_operands_is_clean_under_the_sanitizer(cpu):
    """Lanes read each other's cooperative operands between two exchanges: no race, no uninitialised read."""
    src = GEMM.format(T="float", TM=16, TN=16, TK=16, TA="false", TB="false", RELAX="false")
    fn = cpu.compile(src, name="sanitized.metal").function("gemm")
    rng = np.random.default_rng(11)
    a = rng.standard_normal((32, 32)).astype(np.float32)
    b = rng.standard_normal((32, 32)).astype(np.float32)
    c = np.zeros((32, 32), np.float32)
    cpu.dispatch_threadgroups(fn, (2, 2, 1), (32, 1, 1), [a, b, c, np.int32(32), np.int32(32), np.int32(32)],
                              sanitize=True)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_a_source_that_needs_no_preprocessor_gets_the_tensor_header_too(cpu):
    """`#include <metal_tensor>` beside `<metal_stdlib>` only: the source skips the preprocessor, and the
    translation still includes the tensor header, as C++20, in place of Metal's."""
    from metile.metal.cpu.msl import translate
    from metile.metal.msl_preprocess import needs_preprocessing

    src = ("#include <metal_stdlib>\n#include <metal_tensor>\nusing namespace metal;\n"
           "kernel void k(device float* x [[buffer(0)]]) {\n"
           "    auto t = tensor<device float, dextents<int32_t, 1>, tensor_inline>(x, dextents<int32_t, 1>(4));\n"
           "    x[0] = float(t.get_extent(0));\n}\n")
    assert not needs_preprocessing(src)
    tr = translate(src, "plain.metal")
    assert tr.cxx_standard == "c++20"
    assert '#include "mt_tensor.h"' in tr.cpp and "<metal_tensor>" not in tr.cpp
    plain = translate(src.replace("#include <metal_tensor>\n", "\n"), "plain.metal")
    assert plain.cxx_standard == "c++17" and "mt_tensor.h" not in plain.cpp
    x = np.zeros(4, np.float32)
    cpu.dispatch_threads(cpu.compile(src, name="plain.metal").function("k"), (1, 1, 1), (1, 1, 1), [x])
    assert x[0] == 4.0
