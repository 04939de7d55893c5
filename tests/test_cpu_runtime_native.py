"""Native tests of the CPU runtime (metile/metal/cpu/runtime*.cpp), driven from pytest.

Builds the runtime library, the sanitizer hooks, a sanitized kernel library and the C++ test driver of
tests/native/runtime/ with the system compiler into a temporary folder, runs the driver once (all tests in one
process, so every launch after a fault also checks that the runtime stays usable) and reports each native test
as its own pytest case. The benchmarks print their timings (`pytest -s`) and are not judged on them.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_DIR = ROOT / "metile" / "metal" / "cpu"
NATIVE_DIR = ROOT / "tests" / "native" / "runtime"

# Keep in step with the RT_TEST names in tests/native/runtime/rt_tests_*.cpp (test_every_native_test_is_listed).
NATIVE_TESTS = (
    "positions_1d", "positions_2d", "positions_3d", "reverse_order", "barrier_ordering", "simdgroup_barrier",
    "exchange_sum_full", "exchange_sum_partial", "exchange_sum_exited_lanes", "yield_progress",
    "fp_control_per_thread", "fp_control_reset_after_fault", "threadgroup_memory_reuse_and_fill",
    "threadgroup_memory_limit", "multi_worker", "concurrent_launches", "launch_validation", "buffer_alloc",
    "divergence_barrier_lines", "divergence_exit_while_waiting", "divergence_exchange_mismatch",
    "divergence_exchange_kinds", "fault_bad_access", "fault_threadgroup_guard", "fault_stack_overflow",
    "fault_division_by_zero", "fault_trap", "fault_hang_watchdog", "fault_from_kernel_code",
    "fault_many_workers_and_handlers_restored", "fault_outside_kernel_code_is_chained",
    "sanitizer_uninitialised_read", "sanitizer_missing_barrier", "sanitizer_races_in_simdgroup_and_write_write",
    "sanitizer_clean_kernel",
)


def _compiler() -> tuple[str, bool] | None:
    """(path, is_gcc) of a C++ compiler new enough for the runtime: g++ >= 12 or clang++ >= 15."""
    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else ["g++", "clang++"]
    for name in candidates:
        path = shutil.which(name)
        if not path:
            continue
        try:
            text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        is_clang = "clang" in text
        m = re.search(r"(\d+)\.\d+", text)
        if m and int(m.group(1)) >= (15 if is_clang else 12):
            return path, not is_clang
    return None


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


def _build(cmd: list[str]) -> None:
    res = _run(cmd)
    if res.returncode != 0:
        pytest.fail(f"build failed: {' '.join(cmd)}\n{res.stdout}{res.stderr}")


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    found = _compiler()
    if found is None:
        pytest.skip("no C++ compiler (g++ >= 12 or clang++ >= 15) to build the CPU runtime with")
    cxx, is_gcc = found
    out = tmp_path_factory.mktemp("cpu_runtime_native")
    inc = [f"-I{RUNTIME_DIR}", f"-I{NATIVE_DIR}"]
    runtime = out / "libmetile_cpu_rt.so"
    _build([cxx, "-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-U_FORTIFY_SOURCE", "-fvisibility=hidden",
            "-g1", f"-I{RUNTIME_DIR}", *map(str, sorted(RUNTIME_DIR.glob("runtime*.cpp"))), "-o", str(runtime),
            "-ldl"])
    # a sanitized kernel library, built the way the compile driver builds one
    hooks, san = out / "hooks.o", out / "san.o"
    _build([cxx, "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", *inc, "-c",
            str(RUNTIME_DIR / "mt_sanitizer_hooks.cpp"), "-o", str(hooks)])
    _build([cxx, "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-fsanitize=thread", *inc, "-c",
            str(NATIVE_DIR / "rt_san_kernels.cpp"), "-o", str(san)])
    _build([cxx, "-shared", str(san), str(hooks), "-o", str(out / "libsan_kernels.so")])
    # the driver's kernels get the trap checks kernels get (x86-64 traps integer division in hardware)
    checks = "alignment" if platform.machine() in ("x86_64", "AMD64") else "alignment,integer-divide-by-zero"
    trap = ["-fsanitize-undefined-trap-on-error"] if is_gcc else [f"-fsanitize-trap={checks}"]
    exe = out / "rt_tests"
    _build([cxx, "-std=c++17", "-O2", "-fwrapv", "-fno-strict-aliasing", f"-fsanitize={checks}", *trap, "-g1",
            "-fno-omit-frame-pointer", *inc, *map(str, sorted(NATIVE_DIR.glob("rt_*.cpp"))), "-o", str(exe),
            f"-L{out}", "-lmetile_cpu_rt", f"-Wl,-rpath,{out}", "-ldl", "-pthread"])
    return exe


@pytest.fixture(scope="module")
def results(driver) -> dict[str, str]:
    res = _run([str(driver), "--san", str(driver.parent / "libsan_kernels.so")])
    outcome: dict[str, str] = {}
    for line in res.stdout.splitlines():
        if line.startswith("PASS "):
            outcome[line[5:].strip()] = ""
        elif line.startswith("FAIL "):
            name, _, why = line[5:].partition(": ")
            outcome[name] = why or "failed"
    if not outcome:
        pytest.fail(f"the native test driver printed no results (exit {res.returncode})\n{res.stdout}\n{res.stderr}")
    outcome["<exit>"] = "" if res.returncode in (0, 1) else f"driver exited with {res.returncode}\n{res.stderr}"
    return outcome


def test_every_native_test_is_listed(driver):
    listed = _run([str(driver), "--list"]).stdout.split()
    assert sorted(listed) == sorted(NATIVE_TESTS)


@pytest.mark.parametrize("name", NATIVE_TESTS)
def test_native(results, name):
    assert results["<exit>"] == ""
    assert name in results, f"{name} did not run"
    assert results[name] == "", results[name]


def test_native_benchmarks(driver):
    res = _run([str(driver), "--bench"])
    print("\n" + "\n".join(line for line in res.stdout.splitlines() if line.startswith("BENCH")))
    assert res.returncode == 0, res.stdout + res.stderr
