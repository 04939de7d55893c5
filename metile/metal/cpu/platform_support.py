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
- a fault's or a profile's `.metal` line is read from the kernel library's debug information (symbolize.py): on
  Linux with addr2line (binutils' or LLVM's); on macOS from the `<library>.dwarf` file `dsymutil` writes at build
  time (the linker leaves the DWARF in the object files), with Homebrew's llvm-addr2line or Apple's atos. Without
  those tools a fault names kernel, threadgroup, thread and buffer but no line.
"""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Callable

from metile.metal.cpu.symbolize import symbolizer

ASM_MACHINES = frozenset({"x86_64", "amd64", "arm64", "aarch64"})


def caller_runs_threadgroups(system: str) -> bool:
    """Whether the thread calling a dispatch runs threadgroups of it too (runtime.cpp's MT_CALLER_JOINS)."""
    return system == "Linux"


def fault_lines(system: str, which: Callable[[str], str | None] = shutil.which) -> str:
    """Whether faults and profiles name `.metal` lines on `system`, and with which tools (`which` finds one)."""
    tool = symbolizer(system, which)
    if system == "Darwin":
        if which("dsymutil") is None:
            return "no (dsymutil is not on PATH: install Xcode's command-line tools, xcode-select --install)"
        if tool is None:
            return "no (neither atos nor llvm-addr2line is on PATH: install Xcode's command-line tools)"
        return f"yes (dsymutil, then {os.path.basename(tool[1])}: {tool[1]})"
    if tool is None:
        return "no (addr2line is not on PATH: install binutils or LLVM)"
    return f"yes ({os.path.basename(tool[1])}: {tool[1]})"


def runtime_facts(watch_available: bool, system: str | None = None, machine: str | None = None,
                  which: Callable[[str], str | None] = shutil.which) -> list[tuple[str, str]]:
    """`name: value` lines for the doctor: the system the runtime runs on and what of it works there (`which`
    finds a tool on PATH)."""
    system = system or platform.system()
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
            ("fault and profile lines", fault_lines(system, which))]
