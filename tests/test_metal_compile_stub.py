"""Compiling MSL on the Metal device, against the C stand-in for the shim and a fake `xcrun`.

Covers the shim header as the single source of declarations, compile and pipeline caching, Metal's
compiler messages mapped to `.metal` lines, and the choice between AOT (`xcrun metal` -> metallib,
cached on disk) and JIT (`newLibraryWithSource`).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from metal_stub import CONTROLS, KERNELS, SOURCE, FakeXcrun

import metile
from metile.metal.gpu import _build
from metile.metal.gpu.binding import ERR_COMPILE, ERR_LOAD
from metile.metal.gpu.compile import CompileSettings, compile_error

SHIM_FUNCTIONS = re.findall(r"\b(mts_\w+)\(", _build.cdef_of(_build.HEADER.read_text()))




# -- the header is the single source of truth ---------------------------------------------------------------
def test_cdef_is_read_from_the_header():
    cdef = _build.cdef_of(_build.HEADER.read_text())
    assert "int32_t mts_commands_encode(" in cdef and "#define MTS_ABI_VERSION 5" in cdef
    assert "#ifndef" not in cdef and "extern" not in cdef
    with pytest.raises(ValueError, match="CDEF BEGIN"):
        _build.cdef_of("int f(void);")
    assert len(SHIM_FUNCTIONS) >= 20


@pytest.mark.parametrize("implementation", [_build.OBJC_SOURCE, SOURCE], ids=["shim.m", "stub_shim.c"])
def test_every_entry_point_is_implemented(implementation):
    text = implementation.read_text()
    missing = [f for f in SHIM_FUNCTIONS if not re.search(rf"^\w[\w\s\*]*\b{f}\(", text, re.M)]
    assert not missing, f"{implementation.name} does not define {missing}"


def test_objective_c_entry_points_catch_exceptions():
    """Every shim.m entry point that calls into Objective-C does so inside @try with an @catch."""
    text = _build.OBJC_SOURCE.read_text()
    bodies = re.split(r"^(?=\w[\w\s\*]*\bmts_\w+\([^;]*?\)\s*\{)", text, flags=re.M)[1:]
    assert len(bodies) == len(SHIM_FUNCTIONS)
    for body in bodies:
        name = re.match(r"[\w\s\*]*\b(mts_\w+)\(", body).group(1)
        if "[" in body.split("{", 1)[1]:     # sends a message
            assert "@try" in body and "@catch" in body and "@autoreleasepool" in body, name


def test_objective_c_uses_the_documented_selectors():
    text = _build.OBJC_SOURCE.read_text()
    for selector in ["newLibraryWithSource:", "options:", "newLibraryWithURL:", "newFunctionWithName:",
                     "newComputePipelineStateWithFunction:", "dispatchThreadgroups:", "dispatchThreads:",
                     "threadsPerThreadgroup:", "setBytes:", "setBuffer:", "setThreadgroupMemoryLength:",
                     "newBufferWithBytesNoCopy:", "deallocator:", "newBufferWithLength:", "newBufferWithBytes:",
                     "supportsFamily:", "GPUStartTime", "GPUEndTime", "waitUntilCompleted", "endEncoding",
                     "setFastMathEnabled:", "setLanguageVersion:", "maxTotalThreadsPerThreadgroup",
                     "threadExecutionWidth", "maxThreadgroupMemoryLength", "maxThreadsPerThreadgroup",
                     "newFence", "waitForFence:", "updateFence:", "computeCommandEncoderWithDispatchType:",
                     "MTLDispatchTypeSerial", "setErrorOptions:", "operatingSystemVersion"]:
        assert selector in text, selector
    assert "(MTLGPUFamily)kFamilyMetal4" in text and "kFamilyMetal4 = 5002" in text


def test_stub_declares_its_controls_from_its_own_header():
    assert "mts_stub_set_executor" in _build.cdef_of(CONTROLS.read_text())


# -- compile and pipeline caches ------------------------------------------------------------------------------
def test_second_compile_of_the_same_source_does_not_compile_again(stub, make_device):
    dev = make_device()
    lib = dev.compile(KERNELS, name="kernels.metal")
    assert dev.compile(KERNELS, name="kernels.metal") is lib
    assert len(stub.calls("library_from_source")) == 1
    assert lib.function("add") is lib.function("add")
    assert len(stub.calls("pipeline_create")) == 1
    assert lib.function_names == ["add", "block_sum"]
    dev.compile(KERNELS.replace("add(", "add2("), name="kernels.metal")
    assert len(stub.calls("library_from_source")) == 2


def test_compile_settings_reach_the_driver(stub, make_device):
    dev = make_device(language_version="3.1", fast_math=True)
    dev.compile(KERNELS, name="kernels.metal")
    assert "language_version=196609 fast_math=1" in stub.calls("library_from_source")[0]
    assert CompileSettings("4.0").version_code == 4 << 16
    with pytest.raises(ValueError, match="look like '3.1'"):
        CompileSettings("metal3")


def test_compile_file_names_the_file(stub, make_device, tmp_path):
    path = tmp_path / "ops.metal"
    path.write_text(KERNELS)
    lib = make_device().compile_file(path)
    assert lib.metal_name == str(path)


# -- compiler messages mapped to .metal lines -----------------------------------------------------------------
BROKEN = KERNELS.replace("out[gid] = a[gid] + b[gid];", "out[gid] = a[gid] + c[gid];")
BROKEN_LINE = next(i for i, line in enumerate(BROKEN.splitlines(), 1) if "c[gid]" in line)
BROKEN_COL = BROKEN.splitlines()[BROKEN_LINE - 1].index("c[gid]") + 1


def test_jit_compile_error_points_at_the_metal_line(stub, make_device):
    dev = make_device()
    log = (f"Compilation failed: \n\nprogram_source:{BROKEN_LINE}:{BROKEN_COL}: error: use of undeclared "
           f"identifier 'c'\n        out[gid] = a[gid] + c[gid];\n                            ^\n"
           f"program_source:40:1: warning: unused\n")
    stub.fail("library_from_source", ERR_COMPILE, log)
    with pytest.raises(metile.MSLCompileError) as e:
        dev.compile(BROKEN, name="broken.metal")
    err = e.value
    assert err.message == "use of undeclared identifier 'c'"
    assert (err.loc.file, err.loc.line, err.loc.col) == ("broken.metal", BROKEN_LINE, BROKEN_COL - 1)
    text = str(err).splitlines()
    assert text[0] == f"broken.metal:{BROKEN_LINE}:{BROKEN_COL}: error: use of undeclared identifier 'c'"
    assert text[1].strip() == "out[gid] = a[gid] + c[gid];"
    assert text[2].index("^") == text[1].index("c[gid]")
    assert err.compiler_output == log
    stub.reset()
    assert dev.compile(KERNELS, name="broken.metal")     # nothing was cached for the failed source


def test_compile_error_in_a_header_and_without_location():
    err = compile_error("/usr/include/x.h:3:1: error: expected ';'\n", source=KERNELS, metal_name="k.metal")
    assert err.loc is None and "expected ';' (in /usr/include/x.h:3, included from k.metal)" in str(err)
    err = compile_error("fatal: out of memory\n", source=KERNELS, metal_name="k.metal")
    assert "the Metal compiler rejected k.metal:\nfatal: out of memory" in str(err)


# -- AOT or JIT ---------------------------------------------------------------------------------------------
def test_aot_with_xcrun_compiles_a_metallib_and_caches_it_on_disk(stub, make_device, tmp_path):
    xcrun = FakeXcrun()
    dev = make_device(runner=xcrun)
    lib = dev.compile(KERNELS, name="kernels.metal")
    assert dev.compiler.mode == "aot"
    compiles = xcrun.compiles()
    assert len(compiles) == 1
    cmd = compiles[0]
    assert cmd[:6] == ["xcrun", "-sdk", "macosx", "metal", "-c", "-O2"] and "-fno-fast-math" in cmd
    assert cmd[-3].endswith("kernels.metal") and cmd[-1].endswith("kernels.air")
    link = xcrun.calls[-1]
    assert link[:4] == ["xcrun", "-sdk", "macosx", "metallib"] and ".metallib" in link[-1]
    assert stub.calls("library_from_source") == [] and len(stub.calls("library_from_file")) == 1
    metallibs = list((tmp_path / "cache" / "metallib").rglob("*.metallib"))
    assert len(metallibs) == 1 and stub.calls("library_from_file")[0].endswith(str(metallibs[0]))
    assert lib.function("add").name == "add"

    again = FakeXcrun()
    make_device(runner=again).compile(KERNELS, name="kernels.metal")   # a new process: the disk cache hits
    assert again.compiles() == [] and len(stub.calls("library_from_file")) == 2

    stub.set_device_info(apple_family=9)
    other = FakeXcrun()
    make_device(runner=other).compile(KERNELS, name="kernels.metal")   # another GPU family: compiled again
    assert len(other.compiles()) == 1
    assert len(list((tmp_path / "cache" / "metallib").rglob("*.metallib"))) == 2


def test_aot_launches_run(stub, make_device):
    dev = make_device(runner=FakeXcrun())
    add = dev.compile(KERNELS, name="kernels.metal").function("add")
    a = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    dev.dispatch_threads(add, 8, 8, [a, a, out, 8])
    dev.synchronize()
    np.testing.assert_array_equal(out, 2 * a)


def test_without_xcrun_the_driver_compiles(stub, make_device):
    xcrun = FakeXcrun(present=False)
    dev = make_device(runner=xcrun)
    dev.compile(KERNELS, name="kernels.metal")
    assert dev.compiler.mode == "jit"
    assert len(stub.calls("library_from_source")) == 1 and stub.calls("library_from_file") == []
    assert xcrun.calls == [["xcrun", "-sdk", "macosx", "--find", "metal"]]


def test_a_compiler_that_cannot_run_counts_as_absent(stub, make_device):
    xcrun = FakeXcrun(runs=False)
    dev = make_device(runner=xcrun)
    dev.compile(KERNELS, name="kernels.metal")
    assert dev.compiler.mode == "jit" and xcrun.compiles() == []
    assert len(stub.calls("library_from_source")) == 1


def test_aot_can_be_turned_off_or_required(stub, make_device):
    xcrun = FakeXcrun()
    make_device(runner=xcrun, aot=False).compile(KERNELS, name="kernels.metal")
    assert xcrun.calls == [] and len(stub.calls("library_from_source")) == 1
    required = make_device(runner=FakeXcrun(present=False), aot=True)
    for _ in range(2):
        with pytest.raises(metile.DeviceError, match="aot=True needs the Metal toolchain"):
            required.compile(KERNELS, name="kernels.metal")
    broken = make_device(runner=FakeXcrun(link_fails=True), aot=True)
    with pytest.raises(metile.DeviceError, match="aot=True, but the Metal toolchain failed: `xcrun metallib`"):
        broken.compile(KERNELS, name="kernels.metal")
    assert len(stub.calls("library_from_source")) == 1    # only the aot=False device compiled in the driver


def test_aot_compile_error_points_at_the_users_file(stub, make_device):
    output = (f"{{src}}:{BROKEN_LINE}:{BROKEN_COL}: error: use of undeclared identifier 'c'\n"
              "1 error generated.\n")
    dev = make_device(runner=FakeXcrun(compile_output=output))
    with pytest.raises(metile.MSLCompileError) as e:
        dev.compile(BROKEN, name="broken.metal")
    assert str(e.value).startswith(f"broken.metal:{BROKEN_LINE}:{BROKEN_COL}: error: use of undeclared")
    assert stub.calls("library_from_source") == []


def test_a_broken_toolchain_falls_back_to_the_driver(stub, make_device):
    dev = make_device(runner=FakeXcrun(compile_output="error: unable to find Metal toolchain\n"))
    dev.compile(KERNELS, name="kernels.metal")
    assert "unable to find Metal toolchain" in dev.compiler.aot_fallback_reason
    assert dev.compiler.mode == "jit" and len(stub.calls("library_from_source")) == 1
    linker_broken = make_device(runner=FakeXcrun(link_fails=True))
    linker_broken.compile(KERNELS, name="kernels.metal")
    assert "metallib" in linker_broken.compiler.aot_fallback_reason


def test_a_metallib_the_driver_refuses_falls_back_to_jit(stub, make_device):
    dev = make_device(runner=FakeXcrun())
    stub.fail("library_from_file", ERR_LOAD, "cannot load x.metallib: library built for a newer OS")
    lib = dev.compile(KERNELS, name="kernels.metal")
    assert "newer OS" in dev.compiler.aot_fallback_reason
    assert len(stub.calls("library_from_source")) == 1
    assert lib.function("add")


# -- the stand-in can run the MSL itself on the CPU device ------------------------------------------------------
def _cpu_device_or_skip():
    """The CPU device, if it can build kernels in this checkout (the replay needs it, not what it tests)."""
    try:
        cpu = metile.device("cpu")
        cpu.compile("#include <metal_stdlib>\nusing namespace metal;\n"
                    "kernel void probe(device float* x [[buffer(0)]]) { x[0] = 1.0f; }", name="probe.metal")
    except metile.MetileError as e:
        pytest.skip(f"the CPU device cannot build kernels here: {str(e).splitlines()[0]}")
    return cpu


def test_replay_on_the_cpu_device(stub, make_device):
    from metal_stub import cpu_device_executor

    cpu = _cpu_device_or_skip()
    dev = make_device()
    stub.execute_with(cpu_device_executor(cpu))
    lib = dev.compile(KERNELS, name="kernels.metal")
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(300, dtype=np.float32), rng.standard_normal(300, dtype=np.float32)
    out, sums = np.zeros(300, np.float32), np.zeros(4, np.float32)
    dev.dispatch_threads(lib.function("add"), 300, 64, [a, b, out, np.uint32(300)])
    dev.dispatch_threadgroups(lib.function("block_sum"), 4, 64, [out, sums], threadgroup_memory=[256])
    dev.synchronize()
    assert not stub.errors, stub.errors
    np.testing.assert_array_equal(out, a + b)
    np.testing.assert_allclose(sums, (a + b)[:256].reshape(4, 64).sum(1), rtol=1e-5)


# -- building and loading the shim --------------------------------------------------------------------------------
def test_shim_cache_key_follows_the_os_version_and_python(monkeypatch, tmp_path):
    from metile.metal.gpu import binding

    first = binding.shim_path(tmp_path)
    assert first.parent == tmp_path / "metal" and first.name.startswith("_metile_metal_shim-")
    monkeypatch.setattr(binding, "macos_version", lambda: "99.1")
    assert binding.shim_path(tmp_path) != first


def test_a_failed_shim_build_says_how_to_get_clang(monkeypatch, tmp_path):
    from metile.metal.gpu import binding

    def no_compiler(spec, target):
        raise OSError("[Errno 2] No such file or directory: 'clang'")

    monkeypatch.setattr(_build, "compile_module", no_compiler)
    with pytest.raises(metile.DeviceUnavailableError, match="xcode-select --install"):
        binding.build_shim(tmp_path)


def test_a_shim_of_another_abi_is_refused(stub, monkeypatch, tmp_path_factory):
    from metal_stub import MODULE_NAME, stub_path

    from metile.metal.gpu import binding

    monkeypatch.setattr(binding, "ABI_VERSION", 99)
    with pytest.raises(metile.DeviceError, match="has ABI 5; this metile expects 99"):
        binding.load_extension(stub_path(tmp_path_factory.getbasetemp() / "metal_stub"), MODULE_NAME)


# -- includes -------------------------------------------------------------------------------------------------
INCLUDED = """#include <metal_stdlib>
using namespace metal;
#define instantiate(name, f, ...) \\
  template [[host_name(name)]] [[kernel]] decltype(f<__VA_ARGS__>) f<__VA_ARGS__>;
template <typename T>
[[kernel]] void add_t(device const T* a, device const T* b, device T* out, constant uint& n,
                      uint gid [[thread_position_in_grid]]) {
    if (gid < n) out[gid] = a[gid] + b[gid];
}
"""


def test_include_dirs_reach_both_compilers(stub, make_device, tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "ops.h").write_text(INCLUDED)
    src = '#include <metal_stdlib>\n#include "ops.h"\ninstantiate("add_float", add_t, float)\n'
    lib = make_device().compile(src, name="inc.metal", include_dirs=[tmp_path / "inc"])   # JIT: preprocessed
    sig = lib.function("add_float").signature
    assert [p.type_text for p in sig.buffers] == ["device const float*"] * 2 + ["device float*", "constant uint&"]
    sent = int(stub.calls("library_from_source")[0].rsplit("bytes=", 1)[1])
    assert sent > len(src) + len(INCLUDED) // 2     # the header's text went along, Metal's JIT has no include path
    xcrun = FakeXcrun()
    make_device(runner=xcrun).compile(src, name="inc.metal", include_dirs=[tmp_path / "inc"])
    compile_cmd = next(c for c in xcrun.calls if "-c" in c)
    assert f"-I{(tmp_path / 'inc').resolve()}" in compile_cmd
