"""Native tests of the CPU runtime (metile/metal/cpu/runtime*.cpp), driven from pytest.

Builds the runtime library, the sanitizer hooks, a sanitized kernel library and the C++ test driver of
tests/native/runtime/ with the system compiler into a temporary folder, runs the driver once (all tests in one
process, so every launch after a fault also checks that the runtime stays usable) and reports each native test
as its own pytest case. Its benchmarks run from benchmarks/cpu_runtime.py.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from metile.metal.cpu.toolchain import shared_library
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


def _build(folder: Path, defines: tuple[str, ...] = ()) -> Path:
    try:
        return build_driver(folder, defines)
    except CompilerNotFoundError:
        pytest.skip("no C++ compiler (g++ >= 12 or clang++ >= 15) to build the CPU runtime with")
    except BuildError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("cpu_runtime_native"))


@pytest.fixture(scope="module")
def pool_only_driver(tmp_path_factory) -> Path:
    """The driver on the runtime macOS gets: no thread-directed POSIX timers there, so the calling thread never runs
    threadgroups (MT_CALLER_JOINS is off) and the watchdog signals the pool's workers alone; no real-time signals
    either, so the watchdog signal is SIGURG (MT_NO_RT_SIGNALS)."""
    return _build(tmp_path_factory.mktemp("cpu_runtime_native_pool_only"), ("MT_NO_CALLER_JOINS", "MT_NO_RT_SIGNALS"))


@pytest.fixture(scope="module")
def results(driver) -> dict[str, str]:
    return _results(driver)


@pytest.fixture(scope="module")
def pool_only_results(pool_only_driver) -> dict[str, str]:
    return _results(pool_only_driver)


def _results(driver: Path) -> dict[str, str]:
    res = _run([str(driver), "--san", str(driver.parent / f"libsan_kernels{shared_library()[0]}")])
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


def _undefined(library: Path) -> set[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = _run([nm, "-D", "--undefined-only", str(library)]).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


@pytest.mark.skipif(platform.system() != "Linux", reason="the calling thread's part of the runtime is Linux's")
def test_the_pool_alone_needs_none_of_the_calls_macos_lacks_but_its_platform_layer(driver, pool_only_driver):
    """Built without the calling thread's part (as on macOS, which has neither), the runtime calls no timer_create,
    timer_settime or sigtimedwait; the other Linux-only calls are in runtime_platform.h, with macOS branches of their
    own (tests/test_cpu_platforms.py)."""
    full = _undefined(driver.parent / "libmetile_cpu_rt.so")
    alone = _undefined(pool_only_driver.parent / "libmetile_cpu_rt.so")
    assert {"timer_create", "sigtimedwait"} <= full   # the check sees them where they are
    assert not {"timer_create", "timer_settime", "sigtimedwait"} & alone
    assert "__libc_current_sigrtmin" in full and "__libc_current_sigrtmin" not in alone   # glibc's SIGRTMIN


@pytest.mark.parametrize("name", NATIVE_TESTS)
def test_native_with_the_pool_alone(pool_only_results, name):
    """Every native test again on the pool-only runtime of macOS (the calling thread waits, the watchdog signals
    workers)."""
    assert pool_only_results["<exit>"] == ""
    assert name in pool_only_results, f"{name} did not run"
    assert pool_only_results[name] == "", pool_only_results[name]
