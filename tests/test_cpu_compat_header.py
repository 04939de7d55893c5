"""The CPU device's Metal compatibility header (metile/metal/cpu/include), compiled and run natively.

tests/native/compat holds C++ tests of the header that run on a mock of the runtime's kernel services (one
simdgroup of std::threads), MSL snippets shaped like the front end's output, and the generator of the swizzle
header. Here they are compiled with the system C++ compiler (g++ >= 12 or clang++ >= 15; another one found on PATH
is used for the compile-only checks too), the reference MSL kernels are compiled through the front end, and the
header's own compile time is measured.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from metile.metal.cpu.toolchain import MIN_VERSIONS, find_compiler
from metile.metal.errors import CompilerNotFoundError

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "metile" / "metal" / "cpu"
INCLUDE = CPU / "include"
NATIVE = Path(__file__).parent / "native" / "compat"
REFERENCE = Path(__file__).parent / "data" / "reference_msl"
SOURCES = ("compat_main", "mock_runtime", "test_vec", "test_scalar", "test_simd", "test_matrix", "test_atomic")
NATIVE_TESTS = (
    "components_and_indexing", "swizzle_reads", "swizzle_writes", "constructors_and_conversions", "operators",
    "half_semantics", "bfloat_rounding", "math_against_cmath", "geometric", "integer_functions",
    "as_type_and_limits", "simd_collectives_full_simdgroup", "simd_collectives_partial_simdgroup",
    "simd_collectives_with_exited_lanes", "simd_collectives_use_one_exchange_each", "barriers",
    "matrix_lane_layout", "matrix_load_store_stride_origin_transpose", "matrix_diagonal_and_filled",
    "matrix_multiply_accumulate_float", "matrix_multiply_accumulate_half_and_bfloat", "atomics_under_contention",
)
FORWARDING = ("metal_stdlib", "metal_simdgroup_matrix", "metal_simdgroup", "metal_atomic", "metal_math",
              "metal_compute", "metal_integer", "metal_common", "metal_relational", "metal_geometric",
              "metal_numeric", "metal_types")
# The flags kernels are built with (metile/metal/cpu/build.py), without the sanitizer traps.
KERNEL_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-fwrapv", "-fno-strict-aliasing", "-fvisibility=hidden",
                "-fvisibility-inlines-hidden", "-Wno-unknown-pragmas"]
WARN = ["-Wall", "-Wextra", "-Wno-unknown-pragmas"]
INC = [f"-I{INCLUDE}", f"-I{CPU}", f"-I{NATIVE}"]


def _primary() -> str:
    try:
        return find_compiler(os.environ.get("CXX") or None).path
    except CompilerNotFoundError as e:
        pytest.skip(f"no usable C++ compiler: {e}")


def _version(path: str) -> tuple[str, int] | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    family = "clang" if "clang" in out.lower() else "gcc"
    m = re.search(r"(\d+)\.\d+", out.splitlines()[0] if out else "")
    return (family, int(m.group(1))) if m else None


def _all_compilers() -> list[str]:
    """Every usable compiler on PATH (one per family), the primary first; [] if there is none."""
    try:
        primary = _primary()
    except pytest.skip.Exception:
        return []
    found = {_version(primary)[0]: primary}
    names = ["g++", *[f"g++-{v}" for v in range(15, 11, -1)], "clang++", *[f"clang++-{v}" for v in range(21, 14, -1)]]
    for name in names:
        path = shutil.which(name)
        info = _version(path) if path else None
        if info and info[0] not in found and info[1] >= MIN_VERSIONS[info[0]]:
            found[info[0]] = path
    return list(found.values())


COMPILERS = _all_compilers()
compiler_param = pytest.mark.parametrize("cxx", COMPILERS or ["none"], ids=lambda p: Path(p).name)


def _need(cxx: str) -> None:
    if cxx == "none":
        pytest.skip("no C++ compiler (g++ >= 12 or clang++ >= 15) on PATH")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def _header_diagnostics(output: str) -> list[str]:
    return [line for line in output.splitlines() if str(INCLUDE) in line and ("warning" in line or "error" in line)]


@pytest.fixture(scope="module")
def native_binary(tmp_path_factory):
    cxx = _primary()
    out = tmp_path_factory.mktemp("compat")

    def compile_one(name: str) -> subprocess.CompletedProcess:
        return _run([cxx, "-O1", "-std=c++17", *WARN, *INC, "-c", str(NATIVE / f"{name}.cpp"),
                     "-o", str(out / f"{name}.o")])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(compile_one, SOURCES))
    for name, r in zip(SOURCES, results):
        assert r.returncode == 0, f"{name}.cpp does not compile:\n{r.stderr}"
    exe = out / "compat_tests"
    link = _run([cxx, *[str(out / f"{n}.o") for n in SOURCES], "-o", str(exe), "-pthread"])
    assert link.returncode == 0, link.stderr
    return exe, "".join(r.stderr for r in results)


def test_native_suite_builds_without_header_warnings(native_binary):
    _, diagnostics = native_binary
    assert _header_diagnostics(diagnostics) == []


def test_native_suite_lists_every_test(native_binary):
    exe, _ = native_binary
    listed = _run([str(exe), "--list"]).stdout.split()
    assert sorted(listed) == sorted(NATIVE_TESTS)


@pytest.mark.parametrize("name", NATIVE_TESTS)
def test_native(native_binary, name):
    exe, _ = native_binary
    r = _run([str(exe), name])
    assert r.returncode == 0 and "1 passed, 0 failed" in r.stdout, r.stdout + r.stderr


def test_swizzle_header_is_generated_from_the_script():
    spec = importlib.util.spec_from_file_location("gen_swizzles", NATIVE / "gen_swizzles.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (INCLUDE / "mt_swizzle.h").read_text() == gen.render(), "run tests/native/compat/gen_swizzles.py"


def _swizzle_program() -> str:
    """C++ that reads every swizzle of float2/3/4 (both name sets) and writes every one without repeats."""
    import itertools

    lines = ['#include "metal_compat.h"', "#include <stdio.h>", "int main() {", "    int bad = 0;"]
    for n in (2, 3, 4):
        init = ", ".join(f"{i + 1}.0f" for i in range(n))
        for k in range(2, 5):
            for seq in itertools.product(range(n), repeat=k):
                for names in ("xyzw", "rgba"):
                    sw = "".join(names[i] for i in seq)
                    want = " && ".join(f"r[{j}] == {i + 1}.0f" for j, i in enumerate(seq))
                    lines.append(f"    {{ float{n} v({init}); float{k} r = v.{sw}; bad += !({want}); }}")
                    if len(set(seq)) == k:
                        vals = ", ".join(f"{10 * (j + 1)}.0f" for j in range(k))
                        after = [f"{i + 1}.0f" for i in range(n)]
                        for j, i in enumerate(seq):
                            after[i] = f"{10 * (j + 1)}.0f"
                        cond = " && ".join(f"v[{i}] == {a}" for i, a in enumerate(after))
                        lines.append(f"    {{ float{n} v({init}); v.{sw} = float{k}({vals}); bad += !({cond}); }}")
    lines += ['    printf("%d bad\\n", bad);', "    return bad != 0;", "}"]
    return "\n".join(lines) + "\n"


def test_every_swizzle_reads_and_writes(tmp_path):
    cxx = _primary()
    src = tmp_path / "swizzles.cpp"
    src.write_text(_swizzle_program())
    exe = tmp_path / "swizzles"
    r = _run([cxx, "-std=c++17", "-O0", *INC, str(src), "-o", str(exe)])
    assert r.returncode == 0, r.stderr[:3000]
    run = _run([str(exe)])
    assert run.returncode == 0 and run.stdout.strip() == "0 bad", run.stdout


@compiler_param
def test_header_alone_and_forwarding_headers_compile_cleanly(cxx, tmp_path):
    _need(cxx)
    for name in FORWARDING:
        assert (INCLUDE / name).read_text().count('#include "metal_compat.h"') == 1, name
    src = tmp_path / "all.cpp"
    src.write_text("".join(f"#include <{n}>\n" for n in FORWARDING) + "using namespace metal;\n")
    for unit in (INCLUDE / "metal_compat.h", src):
        r = _run([cxx, *KERNEL_FLAGS, *WARN, *INC, "-fsyntax-only", "-x", "c++", str(unit)])
        assert r.returncode == 0 and r.stderr == "", r.stderr


@compiler_param
def test_msl_snippets_compile(cxx):
    _need(cxx)
    r = _run([cxx, *KERNEL_FLAGS, *WARN, *INC, "-fsyntax-only", str(NATIVE / "msl_snippets.cpp")])
    assert r.returncode == 0, r.stderr
    assert _header_diagnostics(r.stderr) == [] and "warning" not in r.stderr, r.stderr


def _reference_cases() -> list[tuple[str, bool]]:
    cases = []
    for folder in sorted(p for p in REFERENCE.iterdir() if (p / "launch.json").exists()):
        if "metal_tensor" in (folder / "kernel.metal").read_text():
            continue  # Metal 4 tensor ops: C++20 (tests/test_cpu_tensor_ops.py, tests/test_reference_msl.py)
        status = json.loads((folder / "launch.json").read_text())["status"]
        cases.append((folder.name, status == "ok"))
    return cases


@compiler_param
def test_reference_kernels_compile_through_the_front_end(cxx, tmp_path):
    _need(cxx)
    from metile.metal.cpu.msl import translate

    def check(case: tuple[str, bool]) -> str | None:
        name, valid = case
        cpp = tmp_path / f"{name}.cpp"
        cpp.write_text(translate((REFERENCE / name / "kernel.metal").read_text(), "kernel.metal").cpp)
        r = _run([cxx, *KERNEL_FLAGS, *INC, "-fsyntax-only", str(cpp)])
        if valid and r.returncode != 0:
            return f"{name} does not compile:\n{r.stderr[:3000]}"
        if not valid and (r.returncode == 0 or "kernel.metal" not in r.stderr):
            return f"{name} is invalid MSL but compiled (or failed outside the .metal text)"
        if _header_diagnostics(r.stderr):
            return f"{name}: diagnostics in the header:\n{r.stderr[:3000]}"
        return None

    cases = _reference_cases()
    assert len(cases) >= 30
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        problems = [p for p in pool.map(check, cases) if p]
    assert problems == []


def _best_of(cmd: list[str], n: int = 3) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        r = _run(cmd)
        best = min(best, time.perf_counter() - t0)
        assert r.returncode == 0, r.stderr
    return best


def test_header_precompiles_and_the_precompiled_header_is_usable(tmp_path, record_property):
    """The header compiles on its own and as a precompiled header that a translation unit can use
    (the compile times are recorded for information; benchmarks/cpu_device.py is where speed is judged)."""
    cxx = _primary()
    inc = tmp_path / "include"
    shutil.copytree(INCLUDE, inc)
    shutil.copy(CPU / "mt_runtime.h", inc)
    src = tmp_path / "empty.cpp"
    src.write_text('#include "metal_compat.h"\n')
    cold = _best_of([cxx, *KERNEL_FLAGS, f"-I{inc}", "-c", str(src), "-o", str(tmp_path / "a.o")])
    gcc = _version(cxx)[0] == "gcc"
    pch = inc / ("metal_compat.h.gch" if gcc else "metal_compat.h.pch")
    r = _run([cxx, *KERNEL_FLAGS, "-x", "c++-header", str(inc / "metal_compat.h"), "-o", str(pch)])
    assert r.returncode == 0, r.stderr
    use = [] if gcc else ["-include-pch", str(pch)]
    warm = _best_of([cxx, *KERNEL_FLAGS, f"-I{inc}", *use, "-c", str(src), "-o", str(tmp_path / "b.o")])
    record_property("header_compile_s", round(cold, 3))
    record_property("header_compile_pch_s", round(warm, 3))
    print(f"\nempty TU with metal_compat.h: {cold:.3f} s, with a precompiled header: {warm:.3f} s")
