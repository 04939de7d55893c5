"""Native tests of the CPU runtime (metile/metal/cpu/runtime*.cpp), driven from pytest.

Builds the runtime library, the sanitizer hooks, a sanitized kernel library and the C++ test driver of
tests/native/runtime/ with the system compiler into a temporary folder, runs the driver once (all tests in one
process, so every launch after a fault also checks that the runtime stays usable) and reports each native test
as its own pytest case. Its benchmarks run from benchmarks/cpu_runtime.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from metile.metal.errors import CompilerNotFoundError

sys.path.insert(0, str(Path(__file__).resolve().parent / "native" / "runtime"))
from build_driver import BuildError, build_driver  # noqa: E402

# Keep in step with the RT_TEST names in tests/native/runtime/rt_tests_*.cpp (test_every_native_test_is_listed).
NATIVE_TESTS = (
    "positions_1d", "positions_2d", "positions_3d", "reverse_order", "barrier_ordering", "simdgroup_barrier",
    "exchange_sum_full", "exchange_sum_partial", "exchange_sum_exited_lanes", "exchange_frames_order", "yield_progress",
    "fp_control_per_thread", "fp_control_reset_after_fault", "threadgroup_memory_reuse_and_fill",
    "threadgroup_memory_limit", "multi_worker", "concurrent_launches", "launch_validation", "buffer_alloc",
    "buffer_reuse",
    "divergence_barrier_lines", "divergence_exit_while_waiting", "exchange_active_sets",
    "divergence_exit_after_collective_while_others_wait", "fault_bad_access", "fault_threadgroup_guard",
    "fault_stack_overflow",
    "fault_division_by_zero", "fault_trap", "fault_hang_watchdog", "fault_from_kernel_code",
    "fault_many_workers_and_handlers_restored", "fault_outside_kernel_code_is_chained",
    "sanitizer_uninitialised_read", "sanitizer_missing_barrier", "sanitizer_races_in_simdgroup_and_write_write",
    "sanitizer_clean_kernel",
)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    try:
        return build_driver(tmp_path_factory.mktemp("cpu_runtime_native"))
    except CompilerNotFoundError:
        pytest.skip("no C++ compiler (g++ >= 12 or clang++ >= 15) to build the CPU runtime with")
    except BuildError as e:
        pytest.fail(str(e))


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
