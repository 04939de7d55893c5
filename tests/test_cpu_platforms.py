"""The CPU device on macOS, checked from Linux: the fiber switch assembles as Mach-O for arm64 and x86-64, the
macOS branches of runtime_platform.h compile against stand-ins for Apple's headers (tests/darwin_standin), kernel
code compiles for macOS with the flags metile uses there, the compiler is found and linked as on a Mac, and the
doctor says what of the runtime works where.

Compiling for macOS needs clang (`clang++ -target arm64-apple-macos14`); `.ci/run` installs it where it can (as
root with apt-get). What stays unchecked here (the rest of the runtime against Apple's SDK, linking with Apple's
linker, running) is checked by the macOS workflow."""

from __future__ import annotations

import os
import platform
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from metile import doctor
from metile.metal.cpu import build as B
from metile.metal.cpu import runtime_api
from metile.metal.cpu.msl import translate
from metile.metal.cpu.platform_support import runtime_facts
from metile.metal.cpu.toolchain import HERE, INCLUDE_DIR, Compiler, find_compiler, parse_version
from metile.metal.errors import CompilerNotFoundError

STANDIN = Path(__file__).resolve().parent / "darwin_standin"
MACOS_TARGETS = ("arm64-apple-macos14", "x86_64-apple-macos14")
ELF_TARGETS = ("x86_64-linux-gnu", "aarch64-linux-gnu")


def newest_clang() -> tuple[str | None, int]:
    """The newest clang++ on PATH (`clang++` or a versioned `clang++-NN`) and its major version."""
    names = {"clang++"} | {p.name for d in os.environ.get("PATH", "").split(os.pathsep) if d and Path(d).is_dir()
                           for p in Path(d).glob("clang++-[0-9]*")}
    found = []
    for name in names:
        path = shutil.which(name)
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout if path else ""
        comp = parse_version(path, out) if out else None
        if comp is not None and comp.family == "clang":
            found.append((comp.major, path))
    return (max(found)[1], max(found)[0]) if found else (None, 0)


CLANG, CLANG_MAJOR = newest_clang()
needs_clang = pytest.mark.skipif(CLANG is None, reason="clang++ is not installed (it cross-compiles for macOS; "
                                 ".ci/run installs it with apt-get where it runs as root)")
N_EXT, N_PEXT, N_TYPE, N_SECT, N_UNDF = 0x01, 0x10, 0x0E, 0x0E, 0x00


def clang(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([CLANG, "-Wno-stdlibcxx-not-found", *args], capture_output=True, text=True, cwd=cwd)


def macho_symbols(path: Path) -> dict[str, int]:
    """name -> n_type of every symbol of a 64-bit Mach-O object (read from its LC_SYMTAB)."""
    data = path.read_bytes()
    magic, _, _, _, ncmds, _, _, _ = struct.unpack_from("<8I", data, 0)
    assert magic == 0xFEEDFACF, "not a 64-bit Mach-O file"
    off, symbols = 32, {}
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<2I", data, off)
        if cmd == 0x2:   # LC_SYMTAB
            symoff, nsyms, stroff, _ = struct.unpack_from("<4I", data, off + 8)
            for i in range(nsyms):
                strx, n_type, _, _, _ = struct.unpack_from("<IBBhQ", data, symoff + 16 * i)
                name = data[stroff + strx:data.index(b"\0", stroff + strx)].decode()
                symbols[name] = n_type
        off += size
    return symbols


@needs_clang
@pytest.mark.parametrize("target", MACOS_TARGETS)
def test_the_fiber_switch_assembles_as_mach_o(target, tmp_path):
    """Mach-O names C symbols with a leading underscore and has `.private_extern` where ELF has `.hidden`, and no
    `.type` or `.size`: the switch and the trampoline are defined, private to the runtime library, and the
    trampoline calls mt_fiber_main by its Mach-O name."""
    (tmp_path / "switch.cpp").write_text('#include "runtime_switch.h"\n')
    done = clang("-target", target, f"-I{HERE}", "-c", "switch.cpp", "-o", "switch.o", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    syms = macho_symbols(tmp_path / "switch.o")
    for name in ("_mt_ctx_switch", "_mt_fiber_trampoline"):
        assert syms[name] & N_TYPE == N_SECT and syms[name] & N_EXT and syms[name] & N_PEXT, (name, syms)
    assert syms["_mt_fiber_main"] & N_TYPE == N_UNDF
    assert "mt_ctx_switch" not in syms


@needs_clang
@pytest.mark.parametrize("target", ELF_TARGETS)
def test_the_fiber_switch_still_assembles_as_elf(target, tmp_path):
    (tmp_path / "switch.cpp").write_text('#include "runtime_switch.h"\n')
    done = clang("-target", target, f"-I{HERE}", "-c", "switch.cpp", "-o", "switch.o", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "switch.o").read_bytes()[:4] == b"\x7fELF"


PLATFORM_USE = """#include "runtime_platform.h"
#if defined(MAP_ANON)
static_assert(MAP_ANONYMOUS == MAP_ANON, "MAP_ANONYMOUS is MAP_ANON where the SDK has only the latter");
#endif
static_assert(mtrt::platform::protected_page_fault(SIGSEGV, SEGV_ACCERR), "");
#if defined(__APPLE__)
static_assert(mtrt::platform::protected_page_fault(SIGBUS, 0), "a guard page hit is SIGBUS on macOS");
#else
static_assert(!mtrt::platform::protected_page_fault(SIGBUS, 0), "SIGBUS is no guard page hit on Linux");
#endif
int use(const void* uc) {
    using namespace mtrt::platform;
    uintptr_t lo, hi;
    set_thread_name("metile-cpu-0");
    return (context_pc(uc) != nullptr) + (context_sp(uc) != nullptr) + int(usable_cpus())
           + code_segment(uc, &lo, &hi) + watchdog_signal();
}
"""


@needs_clang
@pytest.mark.parametrize("target", MACOS_TARGETS)
def test_the_macos_branches_of_the_platform_layer_compile(target, tmp_path):
    """Against the stand-in headers: the machine context behind a pointer (`uc_mcontext->__ss.__pc` / `__rip`),
    one-argument pthread_setname_np, no sched_getaffinity, the __TEXT segment by getsegmentdata, no SIGRTMIN, and
    MAP_ANON for MAP_ANONYMOUS; with warnings as errors."""
    (tmp_path / "use.cpp").write_text(PLATFORM_USE)
    done = clang("-target", target, "-std=c++17", "-fsyntax-only", "-nostdlibinc", "-Wall", "-Wextra", "-Werror",
                 "-isystem", str(STANDIN), f"-I{HERE}", "use.cpp", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_the_platform_layer_compiles_here_with_warnings_as_errors(cpu_compiler, tmp_path):
    (tmp_path / "use.cpp").write_text(PLATFORM_USE)
    done = subprocess.run([cpu_compiler.path, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror",
                           f"-I{HERE}", "use.cpp"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_the_runtime_sources_hold_no_system_conditionals_of_their_own():
    """Every Linux-only call sits behind runtime_platform.h or a `__linux__` guard: none is left bare in a runtime
    source (they stopped the build on macOS)."""
    bare = ("sched_getaffinity", "cpu_set_t", "dl_iterate_phdr", "<link.h>", "SIGRTMIN", "pthread_setname_np(",
            "uc_mcontext")
    for src in [*HERE.glob("runtime*.cpp"), HERE / "runtime_internal.h"]:
        text = src.read_text()
        for name in bare:
            assert name not in text, f"{src.name} uses {name} outside runtime_platform.h"


KERNEL = """#include <metal_stdlib>
using namespace metal;
kernel void scale(device const float* a [[buffer(0)]], device half* out [[buffer(1)]],
                  constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]],
                  uint lane [[thread_index_in_simdgroup]]) {
    float s = simd_sum(a[i]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (i < n) out[i] = half(s / float(lane + 1));
}
"""


@needs_clang
@pytest.mark.parametrize("target", MACOS_TARGETS)
def test_kernel_code_compiles_for_macos_with_the_macos_flags(target, tmp_path):
    """The translated kernel and the compatibility headers compile as Mach-O with kernel_flags for Darwin, none of
    them unused there (-fstack-clash-protection is, on macOS), and the object leaves the runtime's services to the
    library it is loaded beside."""
    if target.startswith("x86_64") and CLANG_MAJOR < 15:
        pytest.skip(f"clang {CLANG_MAJOR} has no _Float16 on x86-64 (metile needs clang >= 15)")
    compiler = parse_version(CLANG, clang("--version").stdout)
    flags = B.kernel_flags(compiler, False, system="Darwin")
    (tmp_path / "k.cpp").write_text(translate(KERNEL, "scale.metal").cpp)
    done = clang("-target", target, "-nostdlibinc", "-Werror=unused-command-line-argument", *flags,
                 f"-I{INCLUDE_DIR}", f"-I{HERE}", "-c", "k.cpp", "-o", "k.o", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    syms = macho_symbols(tmp_path / "k.o")
    assert any(name.startswith("___mt_entry_scale") and t & N_TYPE == N_SECT for name, t in syms.items()), syms
    assert syms["_mt_threadgroup_barrier"] & N_TYPE == N_UNDF


@needs_clang
@pytest.mark.parametrize("target", MACOS_TARGETS)
def test_a_sanitized_kernel_finds_every_hook_it_calls_on_macos(target, tmp_path):
    """A sanitized kernel library links the runtime's own ThreadSanitizer hooks (mt_sanitizer_hooks.cpp), never
    the sanitizer's runtime: every `__tsan_*` function Apple's target makes the kernel call is one the hooks
    define."""
    if target.startswith("x86_64") and CLANG_MAJOR < 15:
        pytest.skip(f"clang {CLANG_MAJOR} has no _Float16 on x86-64 (metile needs clang >= 15)")
    compiler = parse_version(CLANG, clang("--version").stdout)
    (tmp_path / "k.cpp").write_text(translate(KERNEL, "scale.metal").cpp)
    done = clang("-target", target, "-nostdlibinc", *B.kernel_flags(compiler, True, system="Darwin"),
                 f"-I{INCLUDE_DIR}", f"-I{HERE}", "-c", "k.cpp", "-o", "k.o", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    hooks = clang("-target", target, "-nostdlibinc", "-isystem", str(STANDIN), "-std=c++17", "-O2", "-fPIC",
                  "-fvisibility=hidden", f"-I{HERE}", "-c", str(HERE / "mt_sanitizer_hooks.cpp"), "-o", "hooks.o",
                  cwd=tmp_path)
    assert hooks.returncode == 0, hooks.stderr
    called = {n for n, t in macho_symbols(tmp_path / "k.o").items() if t & N_TYPE == N_UNDF and "tsan" in n}
    defined = {n for n, t in macho_symbols(tmp_path / "hooks.o").items() if t & N_TYPE == N_SECT}
    assert called and called <= defined, sorted(called - defined)


CLANG_FAULT = """
import numpy as np, metile
src = \'\'\'#include <metal_stdlib>
using namespace metal;
kernel void shift(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                  constant int& by [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    out[i] = x[int(i) + by] + 1.0f;
}
\'\'\'
dev = metile.device("cpu")
fn = dev.compile(src, name="shift.metal").function("shift")
try:
    dev.dispatch_threads(fn, 64, 64, [np.zeros(64, np.float32), np.zeros(64, np.float32), np.int32(1)],
                         in_place="checked")
except metile.DeviceFault as f:
    print(f.kind, f.loc.line if f.loc else None)
src = '''#include <metal_stdlib>
using namespace metal;
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    device float4* v = (device float4*)(out + 1);
    v[0] = float4(1.0f);
}
'''
fn = dev.compile(src, name="misaligned.metal").function("k")
try:
    dev.dispatch_threads(fn, 1, 1, [np.zeros(64, np.float32)])
except metile.DeviceFault as f:
    print(f.kind, f.loc.line if f.loc else None, "misaligned" in str(f))
"""


@needs_clang
@pytest.mark.skipif(platform.system() != "Linux", reason="the Linux symbolizer (binutils' addr2line) is the case")
def test_faults_of_a_clang_built_kernel_name_the_kernel_line(tmp_path):
    """A checked access past an array faults inside mt_checked.h's pointer, inlined into the kernel: the fault
    still names the kernel's line when clang built the kernel (its debug information keeps the inlined frames
    that binutils' addr2line reads). A float4 stored 4 bytes past a 16-byte boundary is a misaligned access at its
    line too: clang's alignment check does not cover a vector's copy, and its aligned store then raises a
    general-protection fault on x86-64 (the runtime names it)."""
    env = {**os.environ, "CXX": CLANG}
    done = subprocess.run([sys.executable, "-c", CLANG_FAULT], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    misaligned = ["misaligned", "5", "True"] if platform.machine() == "x86_64" else []   # arm64: no fault
    assert done.stdout.split() == ["bad-access", "5", *misaligned], done.stdout


def test_kernel_flags_keep_stack_clash_protection_on_linux():
    compiler = Compiler(path="g++", family="gcc", major=12, version_text="g++ 12")
    assert "-fstack-clash-protection" in B.kernel_flags(compiler, False, system="Linux")
    assert "-fstack-clash-protection" not in B.kernel_flags(compiler, False, system="Darwin")


APPLE_15 = """Apple clang version 15.0.0 (clang-1500.3.9.4)
Target: arm64-apple-darwin23.5.0
Thread model: posix
InstalledDir: /Library/Developer/CommandLineTools/usr/bin
"""
APPLE_14 = APPLE_15.replace("15.0.0 (clang-1500.3.9.4)", "14.0.3 (clang-1403.0.22.14.1)")
LLVM_18 = "Homebrew clang version 18.1.8\nTarget: arm64-apple-darwin23.5.0\n"
GCC_13 = "g++ (GCC) 13.2.0\nCopyright (C) 2023 Free Software Foundation, Inc.\n"


def test_apple_clang_is_told_from_llvm_clang():
    apple = parse_version("/usr/bin/clang++", APPLE_15)
    assert (apple.family, apple.major, apple.apple, apple.kind) == ("clang", 15, True, "apple-clang")
    llvm = parse_version("/opt/homebrew/opt/llvm/bin/clang++", LLVM_18)
    assert (llvm.family, llvm.major, llvm.apple, llvm.kind) == ("clang", 18, False, "clang")


def fake_compilers(tmp_path: Path, monkeypatch, **versions: str) -> Path:
    """Executables named as given on a PATH of their own, each printing its `--version` text."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, text in versions.items():
        exe = folder / name.replace("_", "+")
        (folder / f"{exe.name}.txt").write_text(text)
        exe.write_text(f"#!/bin/sh\nexec {shutil.which('cat')} '{folder / (exe.name + '.txt')}'\n")
        exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))
    return folder


def test_on_macos_apple_clang_comes_before_g_plus_plus(tmp_path, monkeypatch):
    folder = fake_compilers(tmp_path, monkeypatch, g__=GCC_13, clang__=APPLE_15)
    assert find_compiler(system="Darwin").path == str(folder / "clang++")
    assert find_compiler(system="Linux").path == str(folder / "g++")


def test_an_old_apple_clang_is_refused_with_what_a_mac_needs(tmp_path, monkeypatch):
    fake_compilers(tmp_path, monkeypatch, clang__=APPLE_14)
    with pytest.raises(CompilerNotFoundError) as e:
        find_compiler(system="Darwin")
    message = str(e.value)
    assert "Apple clang >= 15 (Xcode 15 or later, or its Command Line Tools)" in message
    assert "(apple-clang 14)" in message and "xcode-select --install" in message


def test_on_linux_the_rule_is_unchanged(tmp_path, monkeypatch):
    fake_compilers(tmp_path, monkeypatch, g__=GCC_13.replace("13.2.0", "11.4.0"))
    with pytest.raises(CompilerNotFoundError, match=r"needs g\+\+ >= 12 or clang\+\+ >= 15; .*\(gcc 11\)"):
        find_compiler(system="Linux")


def recording_compiler(tmp_path: Path) -> tuple[Compiler, Path]:
    log = tmp_path / "argv"
    exe = tmp_path / "cc"
    exe.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" >> '{log}'\n")
    exe.chmod(0o755)
    return Compiler(path=str(exe), family="clang", major=15, version_text=APPLE_15, apple=True), log


def test_on_macos_a_kernel_library_is_a_dylib_with_its_undefined_symbols_looked_up_at_load(tmp_path):
    compiler, log = recording_compiler(tmp_path)
    B.link_shared(compiler, [tmp_path / "k.o"], tmp_path / "k.dylib", lean=True, system="Darwin")
    argv = log.read_text().split()
    assert "-dynamiclib" in argv and "-Wl,-undefined,dynamic_lookup" in argv
    assert "-shared" not in argv and "-nodefaultlibs" not in argv   # one link: no Linux-only lean link first
    log.unlink()
    B.link_shared(compiler, [tmp_path / "k.o"], tmp_path / "k.so", lean=False, system="Linux")
    assert "-shared" in log.read_text().split()


def test_on_macos_the_runtime_library_is_built_without_elf_flags():
    apple = parse_version("/usr/bin/clang++", APPLE_15)
    flags = runtime_api.runtime_flags(apple, system="Darwin")
    assert "-dynamiclib" in flags and "-shared" not in flags
    assert not [f for f in flags if f.startswith("-mtls-dialect")]
    assert runtime_api.runtime_libraries("Darwin") == [] and runtime_api.runtime_libraries("Linux") == ["-ldl"]


def test_the_doctor_says_what_of_the_runtime_works_on_a_mac():
    facts = dict(runtime_facts(False, system="Darwin", machine="arm64", which=lambda name: None))
    assert facts["runtime system"] == "Darwin arm64"
    assert facts["fiber switch"] == "assembly"
    assert facts["calling thread joins its dispatches"].startswith("no (it waits for the worker pool")
    assert facts["hardware watchpoints"].startswith("no (macOS has no perf_event_open")
    assert facts["fault and profile lines"].startswith("no (dsymutil is not on PATH")
    linux = dict(runtime_facts(True, system="Linux", machine="x86_64",
                               which=lambda name: "/usr/bin/addr2line" if name == "addr2line" else None))
    assert linux["calling thread joins its dispatches"].startswith("yes")
    assert linux["hardware watchpoints"].startswith("yes")
    assert linux["fault and profile lines"] == "yes (addr2line: /usr/bin/addr2line)"
    arm = dict(runtime_facts(False, system="Linux", machine="aarch64", which=lambda name: None))
    assert arm["hardware watchpoints"] == "no (only on x86-64 Linux; this is Linux on aarch64)"


def test_the_doctor_prints_those_facts_for_this_machine():
    probed = doctor.cpu_facts()
    names = [name for name, _ in probed.facts]
    assert {"runtime system", "fiber switch", "calling thread joins its dispatches",
            "hardware watchpoints", "fault and profile lines"} <= set(names), names
    assert dict(probed.facts)["runtime system"].startswith(os.uname().sysname)


@pytest.fixture(scope="module")
def cpu_compiler():
    return find_compiler(os.environ.get("CXX") or None)
