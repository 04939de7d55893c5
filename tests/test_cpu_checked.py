"""Arrays bound in place in a kernel's checked build (metile.metal.cpu.checked, include/mt_checked.h): a dispatch left
to the device binds its arrays as their own memory when one of them holds at least `CHECKED_BYTES`, and runs the
build whose device pointers check every access against their buffer, so that an access outside an array still
raises `DeviceFault` naming it, before a byte is read or written, where a copy's guard page would have caught it (and
also where it would not: just past the end, before the start). Smaller arrays are copied as before; a source without a
checked build has its arrays copied, and `in_place="checked"` asks for the build explicitly."""

from __future__ import annotations

import numpy as np
import pytest
from test_function_constants import ADDMM

import metile
import metile.triton as triton
import metile.triton.language as tl
from metile.metal.cpu import dispatch
from metile.metal.cpu.checked import checked_type, pointer_edits
from metile.metal.errors import DeviceFault, LaunchError
from metile.metal.msl_lex import tokenize

pytestmark = pytest.mark.usefixtures("on_cpu")
BIG = dispatch.CHECKED_BYTES // 4   # float32 elements of an array the device binds in place by default

SRC = """
#include <metal_stdlib>
using namespace metal;
kernel void shift(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                  constant int& by [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    out[i] = x[int(i) + by] + 1.0f;
}
kernel void vec4(const device float* x [[buffer(0)]], device float* out [[buffer(1)]],
                 constant int& at [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    const float4 v = *(device const float4*)(x + at);
    out[i] = v.x + v.w;
}
kernel void count(device atomic_int* c [[buffer(0)]], constant int& at [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    atomic_fetch_add_explicit(c + at, 1, memory_order_relaxed);
}
"""


@pytest.fixture(scope="module")
def lib():
    return metile.device("cpu").compile(SRC, name="checked.metal")


def test_a_large_array_is_bound_in_place_in_the_checked_build(lib, copies):
    dev = metile.device("cpu")
    x = np.arange(BIG + 8, dtype=np.float32)
    out = np.zeros(BIG, np.float32)
    dev.dispatch_threads(lib.function("shift"), BIG, 256, [x, out, np.int32(8)])
    np.testing.assert_array_equal(out, x[8:] + 1)
    assert copies == []   # neither array copied in or back
    small_x, small_out = x[:264].copy(), np.zeros(256, np.float32)
    dev.dispatch_threads(lib.function("shift"), 256, 256, [small_x, small_out, np.int32(8)])
    np.testing.assert_array_equal(small_out, small_x[8:] + 1)
    assert sorted(copies) == [1024, 1024, 1056]   # small arrays: copied into guarded memory as before


@pytest.mark.parametrize("by, where", [(9, "0 bytes past the end"), (-1, "4 bytes before the start")])
def test_an_access_just_outside_an_array_bound_in_place_faults_naming_it(lib, by, where):
    # one element past the end or before the start: no guard page would catch either
    dev = metile.device("cpu")
    x = np.arange(BIG + 8, dtype=np.float32)
    out = np.full(BIG, -1.0, np.float32)
    with pytest.raises(DeviceFault) as e:
        dev.dispatch_threads(lib.function("shift"), BIG, 256, [x, out, np.int32(by)])
    f = e.value
    assert f.kind == "bad-access" and f.buffer == 0
    assert f"is {where} of buffer 0 (`x`, {4 * (BIG + 8)} bytes)" in str(f)
    assert "a checked access of 4 bytes" in str(f)
    assert f.loc.line == 6 and "x[int(i) + by]" in f.source_line   # the .metal line of the access


def test_a_vector_load_straddling_the_end_faults(lib):
    dev = metile.device("cpu")
    x = np.arange(BIG + 2, dtype=np.float32)   # the last float4 of it has two elements
    out = np.zeros(1, np.float32)
    dev.dispatch_threads(lib.function("vec4"), 1, 1, [x, out, np.int32(BIG - 4)])
    assert out[0] == (BIG - 4) + (BIG - 1)
    with pytest.raises(DeviceFault, match=f"at byte offset {4 * BIG} of buffer 0 .*a checked access of 16 bytes"):
        dev.dispatch_threads(lib.function("vec4"), 1, 1, [x, out, np.int32(BIG)])


def test_an_atomic_through_a_checked_pointer_is_checked(lib):
    dev = metile.device("cpu")
    c = np.zeros(BIG, np.int32)
    dev.dispatch_threads(lib.function("count"), 64, 64, [c, np.int32(BIG - 1)])
    assert c[-1] == 64 and c[:-1].sum() == 0
    with pytest.raises(DeviceFault, match="0 bytes past the end of buffer 0 \\(`c`"):
        dev.dispatch_threads(lib.function("count"), 64, 64, [c, np.int32(BIG)])


def test_in_place_checked_asks_for_the_build_and_in_place_false_copies(lib, copies):
    dev = metile.device("cpu")
    x = np.arange(264, dtype=np.float32)
    out = np.zeros(256, np.float32)
    dev.dispatch_threads(lib.function("shift"), 256, 256, [x, out, np.int32(8)], in_place="checked")
    assert copies == [] and (out == x[8:] + 1).all()
    with pytest.raises(DeviceFault, match="past the end of buffer 0"):
        dev.dispatch_threads(lib.function("shift"), 256, 256, [x, out, np.int32(9)], in_place="checked")
    big_x, big_out = np.arange(BIG + 8, dtype=np.float32), np.zeros(BIG, np.float32)
    dev.dispatch_threads(lib.function("shift"), BIG, 256, [big_x, big_out, np.int32(8)], in_place=False)
    assert len(copies) == 3 and (big_out == big_x[8:] + 1).all()


def test_a_simdgroup_load_through_a_checked_pointer_checks_every_element():
    src = """
#include <metal_stdlib>
using namespace metal;
kernel void mm(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
               constant uint& ld [[buffer(2)]], uint lane [[thread_index_in_simdgroup]]) {
    simdgroup_float8x8 m;
    simdgroup_load(m, a, ld);
    simdgroup_store(m, out, 8);
}
"""
    dev = metile.device("cpu")
    fn = dev.compile(src, name="mm.metal").function("mm")
    a = np.arange(BIG, dtype=np.float32)
    out = np.zeros(64, np.float32)
    dev.dispatch_threadgroups(fn, 1, 32, [a, out, np.uint32(BIG // 8)])
    np.testing.assert_array_equal(out.reshape(8, 8), a.reshape(8, -1)[:, :8])
    with pytest.raises(DeviceFault, match="past the end of buffer 0"):   # row 7 starts beyond the array
        dev.dispatch_threadgroups(fn, 1, 32, [a, out, np.uint32(BIG // 7)])


def test_a_source_without_a_checked_build_has_its_arrays_copied(copies):
    src = """
#include <metal_stdlib>
using namespace metal;
kernel void via_address(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                        uint i [[thread_position_in_grid]]) {
    device const float* p = reinterpret_cast<device const float*>(reinterpret_cast<ulong>(x));
    out[i] = p[i] * 2.0f;
}
"""
    dev = metile.device("cpu")
    fn = dev.compile(src, name="via_address.metal").function("via_address")
    x = np.arange(BIG, dtype=np.float32)
    out = np.zeros(BIG, np.float32)
    dev.dispatch_threads(fn, BIG, 256, [x, out])
    np.testing.assert_array_equal(out, 2 * x)
    assert len(copies) == 3 and not fn.library.has_checked_build()
    with pytest.raises(LaunchError, match="in_place='checked': kernel `via_address` has no checked build"):
        dev.dispatch_threads(fn, BIG, 256, [x, out], in_place="checked")


@triton.jit
def _add_one(X, Out, n, BLOCK: tl.constexpr, SPILL: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Out + offs, tl.load(X + offs, mask=offs < n) + 1, mask=offs < n + SPILL)


def test_large_torch_tensors_run_in_place_and_an_overrun_faults_at_the_triton_line(copies):
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'metile[torch]')")
    n = BIG + 5
    for _ in range(3):   # the general way, then the repeated one (PlacedRuns), with new tensors each time
        x, out = torch.randn(n), torch.empty(n)
        _add_one[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024, SPILL=0)
        torch.testing.assert_close(out, x + 1)
    assert copies == []
    x, out = torch.randn(n), torch.empty(n)
    with pytest.raises(DeviceFault) as e:
        _add_one[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024, SPILL=1)
    assert "past the end of buffer 1 (`Out`" in str(e.value)
    assert e.value.loc.file == __file__ and "tl.store(Out + offs" in str(e.value)   # at the kernel's Python line


def _add_two(X, Out, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs, mask=offs < n) + 2.0, mask=offs < n)


def _builds(kernel) -> list[frozenset[str]]:
    """The builds of each compiled specialization of `kernel` so far."""
    return [c.function.library.built for c in kernel._compiled.values()]


def test_a_launch_builds_only_the_build_it_runs_and_compile_builds_the_plain_one():
    k = metile.kernel(_add_two)
    x = np.arange(BIG, dtype=np.float32)
    out = np.zeros_like(x)
    k[(metile.cdiv(BIG, 1024),)](x, out, BIG, BLOCK=1024)   # a large array: bound in place, the checked build
    np.testing.assert_array_equal(out, x + 2)
    assert _builds(k) == [{"checked"}]   # not the plain one beside it
    compiled = k.compile(x, out, BIG, BLOCK=1024)   # the launch's compiled kernel, its plain build made now
    assert compiled.function.library.built == {"checked", "plain"} and _builds(k) == [{"checked", "plain"}]


def test_a_launch_of_small_arrays_builds_the_plain_build_only():
    k = metile.kernel(_add_two)
    x = np.arange(3000, dtype=np.float32)
    out = np.zeros_like(x)
    k[(6,)](x, out, 3000, BLOCK=512)   # another MSL text than the test above's, so another library
    np.testing.assert_array_equal(out, x + 2)
    assert _builds(k) == [{"plain"}]


def test_pointer_spellings_of_the_checked_build():
    def spelled(src):
        toks = [t for t in tokenize(src) if t.kind.value != "ws"]
        edits = pointer_edits(toks)
        if edits is None:
            return None
        out, pos = [], 0
        for s, e, text in sorted(edits):
            out += [src[pos:s], text]
            pos = e
        return "".join(out + [src[pos:]])

    assert spelled("device const float* p = q;") == "device_ptr< const float> p = q;"
    assert spelled("const device half4* p;") == "const device_ptr< half4> p;"
    assert spelled("S<device T*> s; device T& r = x;") == "S<device_ptr< T>> s; device T& r = x;"
    assert spelled("x = *(device vec<float, 4>*)(p);") == "x = *(device_ptr< vec<float, 4>>)(p);"
    assert spelled("T device* p;") is None and spelled("f(device);") is None
    # what could make a plain pointer into a buffer: an element's address, a variable of deduced type
    assert spelled("device float* p; f(&p[2]);") is None and spelled("device float* p; x = &(p[i]);") is None
    assert spelled("device float* p; auto q = p;") is None
    assert spelled("device int* p; f(a & b[1], &expected);") == "device_ptr< int> p; f(a & b[1], &expected);"
    assert checked_type("device const float*") == "device_ptr<const float>"
    assert checked_type("device float* const") == "device_ptr<float> const"
    assert checked_type("constant float*") == "constant float*" and checked_type("device int&") == "device int&"



def test_a_specialised_kernel_has_a_checked_build_too():
    dev = metile.device("cpu")
    lib = dev.compile(ADDMM, name="addmm.metal")   # C and alpha/beta exist only with use_out_source (constant 100)
    n = 8
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(3))
    d = np.zeros_like(a)
    plain = lib.function("addmm", constants={100: False, 110: False, "has_batch": False})
    dev.dispatch_threads(plain, (n, n), (n, n), [a, b, None, d, np.uint32(n)], in_place="checked")
    np.testing.assert_allclose(d, a @ b, rtol=1e-5, atol=1e-5)
    axpby = lib.function("addmm", constants={100: True, 110: True, "has_batch": False})
    ab = np.array([2.0, 0.5], np.float32)
    dev.dispatch_threads(axpby, (n, n), (n, n), [a, b, c, d, np.uint32(n), ab], in_place="checked")
    np.testing.assert_allclose(d, 2 * a @ b + c / 2, rtol=1e-5, atol=1e-5)
    assert plain.library.has_checked_build() and axpby.library.has_checked_build()
