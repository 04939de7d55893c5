"""How the CPU device builds kernel libraries: the cache keys, the folder of headers and its precompiled header, and
the link (metile/metal/cpu/build.py)."""

from __future__ import annotations

import os
import platform

import attrs
import numpy as np
import pytest

import metile
from metile.metal.cpu import build as B
from metile.metal.cpu.device import CpuDevice, CpuOptions
from metile.metal.cpu.msl import translate
from metile.metal.cpu.toolchain import header_files

ADD = """
#include <metal_stdlib>
using namespace metal;
kernel void twice(device const float* a [[buffer(0)]], device float* out [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
    out[i] = 2.0f * a[i];
}
"""


@pytest.fixture(scope="module")
def cpu():
    return metile.device("cpu")


def _builder(cpu, tmp_path) -> B.KernelBuilder:
    return B.KernelBuilder(cpu.compiler, tmp_path)


def test_the_header_and_the_compiler_are_part_of_every_key(cpu, tmp_path):
    """A changed header or compiler never reuses a library or a precompiled header built before it."""
    tr = translate(ADD, "twice.metal")
    base = _builder(cpu, tmp_path)
    so = base.build(tr)
    new_header = _builder(cpu, tmp_path)
    new_header.header_digest = "another header"
    other = attrs.evolve(cpu.compiler, version_text=cpu.compiler.version_text + " (rebuilt)")
    new_compiler = B.KernelBuilder(other, tmp_path)
    paths = {so, new_header.build(tr), new_compiler.build(tr)}
    assert len(paths) == 3
    assert len({base.include_dir(False), new_header.include_dir(False), new_compiler.include_dir(False)}) == 3


def test_a_folder_of_headers_another_process_made_is_not_rewritten(cpu, tmp_path):
    """The headers appear in their folder all at once (renamed into place): a process that finds the folder without
    its precompiled header (another one is building it) builds that, and never rewrites a header under a compiler
    that may be reading it."""
    folder = _builder(cpu, tmp_path).include_dir(False)
    for leftover in [folder / ".complete", *folder.glob(B.HEADER + ".*")]:
        leftover.unlink()
    old = 1_000_000_000 * 10**9
    for f in folder.iterdir():
        os.utime(f, ns=(old, old))
    again = _builder(cpu, tmp_path).include_dir(False)
    assert again == folder and (folder / ".complete").exists()
    assert {f.name: (folder / f.name).stat().st_mtime_ns for f in header_files()} == {
        f.name: old for f in header_files()}
    if cpu.compiler.is_gcc:
        assert (folder / (B.HEADER + ".gch")).exists()
    assert not [p for p in folder.parent.iterdir() if p != folder]   # no temporary folder left behind


@pytest.mark.skipif(platform.system() != "Linux", reason="the lean link is made on Linux")
def test_kernel_libraries_are_linked_without_the_cpp_library(cpu, tmp_path):
    so = _builder(cpu, tmp_path).build(translate(ADD, "twice.metal"))
    assert b"libstdc++" not in so.read_bytes() and b"libc++" not in so.read_bytes()


def test_a_lean_link_that_fails_is_done_the_usual_way(tmp_path, monkeypatch):
    monkeypatch.setattr(B, "LEAN_LINK", ["-lmetile_no_such_library"])
    dev = CpuDevice(CpuOptions(cache_dir=tmp_path))
    a, out = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    dev.dispatch_threads(dev.compile(ADD, name="twice.metal").function("twice"), 64, 32, [a, out])
    assert (out == 2 * a).all()
