"""Source lines of kernel-library instructions on Linux and macOS (metile.metal.cpu.symbolize): the tool chosen per
system, the commands run, and the reading of addr2line's and atos's output."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from msl_source import HEAD, line_of

import metile
from metile.metal.cpu import symbolize
from metile.metal.cpu.platform_support import runtime_facts
from metile.metal.cpu.symbolize import parse_atos_frames, source_frames, symbolizer

ATOS_INLINED = """\
metal::simd_shuffle(float, unsigned short) (in 3f2a.dylib) (/c/include/mt_simd.h:212)
k(float device*, unsigned int) (in 3f2a.dylib) (/c/kernels/3f/3f2a.cpp:9)
"""


def tools(*names):
    """A `which` that finds exactly `names` (at /usr/bin)."""
    return lambda name: f"/usr/bin/{name}" if name in names else None


def test_atos_frames_are_read_innermost_first_and_frames_without_a_line_are_dropped():
    assert parse_atos_frames(ATOS_INLINED) == (("/c/include/mt_simd.h", 212), ("/c/kernels/3f/3f2a.cpp", 9))
    assert parse_atos_frames("k(float device*) (in 3f2a.dylib) + 16\n") == ()
    assert parse_atos_frames("0x00001234\n") == ()
    assert parse_atos_frames("f(int (*)(int)) (in a.dylib) (k.metal:7)\n") == (("k.metal", 7),)


def test_each_system_reads_lines_with_a_tool_that_reads_its_libraries():
    assert symbolizer("Linux", tools("addr2line", "llvm-addr2line")) == ("addr2line", "/usr/bin/addr2line")
    assert symbolizer("Linux", tools("llvm-addr2line")) == ("addr2line", "/usr/bin/llvm-addr2line")
    # binutils' addr2line reads no Mach-O: on macOS only LLVM's, else atos
    assert symbolizer("Darwin", tools("addr2line", "atos")) == ("atos", "/usr/bin/atos")
    assert symbolizer("Darwin", tools("llvm-addr2line", "atos")) == ("addr2line", "/usr/bin/llvm-addr2line")
    assert symbolizer("Darwin", tools()) is None


def test_on_macos_lines_come_from_the_dwarf_file_beside_the_library_through_atos(tmp_path):
    lib = tmp_path / "3f2a.dylib"
    lib.write_bytes(b"")
    commands = []

    def run(command):
        commands.append(command)
        if "-i" in command:
            return ATOS_INLINED
        return "k (in 3f2a.dylib) (k.metal:4)\n0x00000080\nk (in 3f2a.dylib) (k.metal:6)\n"

    which = tools("atos")
    assert source_frames(str(lib), [0x40], system="Darwin", which=which, run=run) == {}   # no .dwarf yet
    assert commands == []
    (tmp_path / ("3f2a.dylib" + symbolize.DEBUG_SUFFIX)).write_bytes(b"")
    one = source_frames(str(lib), [0x40, 0], system="Darwin", which=which, run=run)
    assert one == {0x40: (("/c/include/mt_simd.h", 212), ("/c/kernels/3f/3f2a.cpp", 9))}
    assert commands[-1] == ["/usr/bin/atos", "-o", str(lib) + ".dwarf", "-l", "0x0", "-fullPath", "-i", "0x40"]
    # several addresses: one run, one line (the outermost frame) per address, in the order asked
    many = source_frames(str(lib), [0x80, 0x40, 0x90], system="Darwin", which=which, run=run)
    assert many == {0x40: (("k.metal", 4),), 0x90: (("k.metal", 6),)}
    assert commands[-1][-3:] == ["0x40", "0x80", "0x90"] and "-i" not in commands[-1]


def test_the_doctor_names_the_tools_that_give_lines():
    mac = dict(runtime_facts(False, system="Darwin", machine="arm64", which=tools("dsymutil", "atos")))
    assert mac["fault and profile lines"] == "yes (dsymutil, then atos: /usr/bin/atos)"
    assert dict(runtime_facts(False, system="Darwin", machine="arm64", which=tools("atos")))[
        "fault and profile lines"].startswith("no (dsymutil is not on PATH")
    assert dict(runtime_facts(False, system="Darwin", machine="arm64", which=tools("dsymutil")))[
        "fault and profile lines"].startswith("no (neither atos nor llvm-addr2line")
    assert dict(runtime_facts(False, system="Linux", machine="x86_64", which=tools()))[
        "fault and profile lines"].startswith("no (addr2line is not on PATH")


def test_without_dsymutil_a_mac_build_keeps_no_debug_file(tmp_path, monkeypatch):
    monkeypatch.setattr(symbolize.shutil, "which", tools())
    assert not symbolize.gather_debug_info(tmp_path / "a.dylib", tmp_path / "a.dylib.dwarf", lambda c: None)
    ran = []

    def fails(command):
        ran.append(command)
        (tmp_path / "a.dylib.dwarf").write_bytes(b"half")
        raise RuntimeError("dsymutil: no debug map")

    monkeypatch.setattr(symbolize.shutil, "which", tools("dsymutil"))
    assert not symbolize.gather_debug_info(tmp_path / "a.dylib", tmp_path / "a.dylib.dwarf", fails)
    assert ran == [["/usr/bin/dsymutil", "--flat", "-o", str(tmp_path / "a.dylib.dwarf"), str(tmp_path / "a.dylib")]]
    assert not (tmp_path / "a.dylib.dwarf").exists()


@pytest.mark.skipif(shutil.which("llvm-addr2line") is None, reason="LLVM's llvm-addr2line is not installed")
def test_a_fault_names_its_line_with_llvms_addr2line_alone(cpu, monkeypatch):
    real = shutil.which
    monkeypatch.setattr(symbolize.shutil, "which", lambda name: None if name == "addr2line" else real(name))
    src = HEAD + """
kernel void k(device float* out [[buffer(0)]], uint i [[thread_position_in_grid]]) {
    out[i * 4096 + 3] = 7.0f;   // FAR
}
"""
    fn = cpu.compile(src, name="llvm_lines.metal").function("k")
    with pytest.raises(metile.DeviceFault) as info:
        cpu.dispatch_threads(fn, (64, 1, 1), (64, 1, 1), [np.zeros(64, np.float32)])
    assert info.value.loc.file == "llvm_lines.metal" and info.value.loc.line == line_of(src, "// FAR")
