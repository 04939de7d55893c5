"""What of the CPU device's runtime works on which system: the facts `python -m metile doctor` prints for it.

The runtime (runtime*.cpp) builds on Linux (glibc, x86-64 and aarch64) and macOS (arm64 and x86-64); each system
difference it has is in runtime_platform.h. Three features depend on the system:

- the calling thread runs threadgroups of its own launches, next to the worker pool, only on Linux: its watchdog
  is a POSIX timer aimed at that thread (SIGEV_THREAD_ID), and macOS has neither thread-directed timers nor
  timer_create; there the calling thread waits for the pool, whose workers the watchdog signals one by one;
- the hardware watchpoints on the bytes just before each bound buffer only on x86-64 Linux, through perf_event_open
  (Linux >= 5.13, where perf_event_paranoid and seccomp allow it; runtime_watch.cpp): macOS has no perf_event_open
  (its only way to a thread's debug registers is Mach's thread_set_state, which metile does not use), and metile
  sets them on no other processor; without them the canary in front of each buffer still catches what it can;
- the fiber switch is assembly on x86-64 and arm64 / aarch64 (ucontext on other processors);
- a fault's or a profile's `.metal` line is read from the kernel library's debug information with addr2line
  (faults.py): on Linux where binutils is installed; not on macOS, which has no addr2line and whose linker leaves
  the debug information in the object files (metile keeps only the library), so there a fault names kernel,
  threadgroup, thread and buffer but no line.
"""

from __future__ import annotations

import platform
import shutil

ASM_MACHINES = frozenset({"x86_64", "amd64", "arm64", "aarch64"})


def caller_runs_threadgroups(system: str) -> bool:
    """Whether the thread calling a dispatch runs threadgroups of it too (runtime.cpp's MT_CALLER_JOINS)."""
    return system == "Linux"


def fault_lines(system: str, addr2line: str | None) -> str:
    """Whether faults and profiles name `.metal` lines on `system`, with `addr2line` where found."""
    if system == "Darwin":
        return ("no (macOS has no addr2line and its linker leaves debug information in object files, which metile "
                "does not keep: faults name kernel, thread and buffer, not the line)")
    return f"yes (addr2line: {addr2line})" if addr2line else "no (addr2line is not on PATH: install binutils)"


def runtime_facts(watch_available: bool, system: str | None = None, machine: str | None = None,
                  addr2line: str | None = "") -> list[tuple[str, str]]:
    """`name: value` lines for the doctor: the system the runtime runs on and what of it works there (`addr2line`:
    its path, None for none, "" to look it up on PATH)."""
    system = system or platform.system()
    addr2line = shutil.which("addr2line") if addr2line == "" else addr2line
    machine = (machine or platform.machine()).lower()
    fiber = ("assembly" if machine in ASM_MACHINES else "ucontext (no assembly switch for this processor)")
    if caller_runs_threadgroups(system):
        caller = "yes (it runs threadgroups next to the worker pool)"
    else:
        caller = f"no (it waits for the worker pool: {system} has no thread-directed POSIX timers for its watchdog)"
    if watch_available:
        watch = "yes (debug registers on the 8 bytes before bound buffers, via perf_event_open)"
    elif system == "Darwin":
        watch = "no (macOS has no perf_event_open; the canary in front of each buffer still catches what it can)"
    elif system == "Linux" and machine in ("x86_64", "amd64"):
        watch = "no (perf_event_open refused: Linux < 5.13, perf_event_paranoid > 2 or a seccomp profile)"
    else:
        watch = f"no (only on x86-64 Linux; this is {system} on {machine})"
    return [("runtime system", f"{system} {machine}"), ("fiber switch", fiber),
            ("calling thread joins its dispatches", caller), ("hardware watchpoints", watch),
            ("fault and profile lines", fault_lines(system, addr2line))]
