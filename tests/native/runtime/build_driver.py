"""Build the native test driver of the CPU runtime (used by tests/test_cpu_runtime_native.py and
benchmarks/cpu_runtime.py): the runtime library, a sanitized kernel library and the driver executable,
with the same flags the CPU device uses."""

from __future__ import annotations

import subprocess
from pathlib import Path

from metile.metal.cpu.build import TRAP_CHECKS
from metile.metal.cpu.runtime_api import runtime_flags, runtime_sources
from metile.metal.cpu.toolchain import HERE as RUNTIME_DIR
from metile.metal.cpu.toolchain import find_compiler, shared_library

NATIVE_DIR = Path(__file__).resolve().parent


class BuildError(Exception):
    pass


def _build(cmd: list[str]) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise BuildError(f"build failed: {' '.join(cmd)}\n{res.stdout}{res.stderr}")


def build_driver(out: Path, defines: tuple[str, ...] = ()) -> Path:
    """The driver executable (raises CompilerNotFoundError without a suitable compiler, BuildError on failure), its
    runtime built with the macros `defines` (e.g. "MT_NO_CALLER_JOINS": the pool alone, as on macOS)."""
    cc = find_compiler()
    cxx = cc.path
    inc = [f"-I{RUNTIME_DIR}", f"-I{NATIVE_DIR}"]
    suffix, shared = shared_library()   # .so and -shared; .dylib and -dynamiclib on macOS
    runtime = out / f"libmetile_cpu_rt{suffix}"
    _build([cxx, *runtime_flags(cc), *[f"-D{d}" for d in defines], f"-I{RUNTIME_DIR}", *map(str, runtime_sources()),
            "-o", str(runtime), "-ldl"])
    # a sanitized kernel library, built the way the compile driver builds one
    hooks, san = out / "hooks.o", out / "san.o"
    _build([cxx, "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", *inc, "-c",
            str(RUNTIME_DIR / "mt_sanitizer_hooks.cpp"), "-o", str(hooks)])
    _build([cxx, "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-fsanitize=thread", *inc, "-c",
            str(NATIVE_DIR / "rt_san_kernels.cpp"), "-o", str(san)])
    _build([cxx, *shared, str(san), str(hooks), "-o", str(out / f"libsan_kernels{suffix}")])
    # the driver's kernels get the trap checks kernels get
    trap = ["-fsanitize-undefined-trap-on-error"] if cc.is_gcc else [f"-fsanitize-trap={TRAP_CHECKS}"]
    exe = out / "rt_tests"
    defs = [f"-D{d}" for d in defines]
    _build([cxx, "-std=c++17", "-O2", "-fwrapv", "-fno-strict-aliasing", f"-fsanitize={TRAP_CHECKS}", *trap, "-g1",
            "-fno-omit-frame-pointer", *defs, *inc, *map(str, sorted(NATIVE_DIR.glob("rt_*.cpp"))), "-o", str(exe),
            f"-L{out}", "-lmetile_cpu_rt", f"-Wl,-rpath,{out}", "-ldl", "-pthread"])
    return exe
