"""`python -m metile doctor`: what metile finds on this machine, and a tiny kernel run on each device.

It prints plain `name: value` lines under headings (system, default device, cache, cpu device, metal device,
checks), so that the output can be pasted into a bug report, and returns 0 when every available device ran its
checks and matched numpy, 1 otherwise. The checks run an `@metile.kernel` vector add and a hand-written MSL
kernel (`dev.compile(...).function(...)`, `dev.dispatch_threadgroups(...)`) on each device. Every probe is
wrapped: a failure is reported on its line as the exception's type and the first line of its message, never
raised. The CPU device is always expected to work. The Metal device is checked where it can be created; where it
cannot (`DeviceUnavailableError`: not a Mac on Apple silicon, a virtual machine's paravirtual GPU, no clang for
the shim) it is reported unavailable, which is a problem only when it is the default device, since kernels then
fail to launch unless `METILE_DEVICE=cpu`.

Devices are the process's own (`metile.devices.device`), looked up through the module at each call. The
`@metile.kernel` check compiles a fresh kernel per device with `METILE_DEVICE` naming that device, restored
afterwards: that variable is how a kernel chooses its device.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable

import attrs
import numpy as np

import metile
from metile import cache, devices
from metile.metal.cpu.platform_support import runtime_facts
from metile.metal.cpu.toolchain import CANDIDATES, DEFAULT_CANDIDATES, find_compiler
from metile.metal.errors import DeviceUnavailableError

N = 1000                 # elements of the check kernels
MAX_MESSAGE = 240        # characters of an error kept on its line
MSL_CHECK = """#include <metal_stdlib>
using namespace metal;
kernel void doctor_axpb(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                        constant uint& n [[buffer(2)]], uint i [[thread_position_in_grid]]) {
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
"""

AOT_SETTINGS = {None: "auto: AOT when `xcrun metal` runs, else JIT", True: "AOT required", False: "always JIT"}

Fact = tuple[str, str]


@attrs.frozen
class Probed:
    """What a device section found: its facts, the device (None when it could not be created), why not, and
    whether that is a failure (`failed`) or the device is just not available here."""

    facts: list[Fact]
    device: object | None
    why: str = ""
    failed: bool = False


@attrs.frozen
class Check:
    """One check on one device: its name, whether it passed, and what it printed."""

    name: str
    ok: bool
    detail: str


def describe(e: BaseException) -> str:
    """An exception on one line: its type and the first line of its message, shortened to MAX_MESSAGE."""
    lines = str(e).strip().splitlines()
    first = lines[0].strip().removeprefix("error: ") if lines else ""   # a MetileError renders as `error: ...`
    text = f"{type(e).__name__}: {first}" if first else type(e).__name__
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def probe(fn: Callable[[], object]) -> str:
    """`fn()` as text, or the error it raised as `error: Type: message`."""
    try:
        return str(fn())
    except Exception as e:  # noqa: BLE001 - the doctor reports every failure
        return f"error: {describe(e)}"


def first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def yes_no(flag: object) -> str:
    return "yes" if flag else "no"


def _version(module: str) -> str:
    return getattr(__import__(module), "__version__", "unknown")


def _run(argv: list[str]) -> str:
    """The first line of a command's output, or why it did not run."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"not found ({describe(e)})"
    first = first_line(proc.stdout or proc.stderr)
    return first if proc.returncode == 0 else f"failed (exit {proc.returncode}{': ' + first if first else ''})"


# -- facts ----------------------------------------------------------------------------------------------------------

def system_facts() -> list[Fact]:
    system, machine = platform.system(), platform.machine()
    if system == "Darwin":
        from metile.metal.gpu.binding import system_macos_version  # 26.x where Python is told 16.x

        os_text = f"macOS {system_macos_version() or platform.release()} ({machine})"
    else:
        os_text = f"{system} {platform.release()} ({machine})"
    return [
        ("metile", probe(lambda: f"{metile.__version__} ({os.path.dirname(metile.__file__)})")),
        ("python", f"{platform.python_version()} {platform.python_implementation()} ({sys.executable})"),
        ("os", os_text),
        ("platform", probe(platform.platform)),
        ("cpu cores", str(os.cpu_count())),
        ("numpy", probe(lambda: _version("numpy"))),
        ("cffi", probe(lambda: _version("cffi"))),
    ]


def default_device_facts() -> tuple[list[Fact], str | None]:
    """The default device and why; the second item is a problem when the default device cannot exist."""
    setting = os.environ.get("METILE_DEVICE", "").strip()
    name = probe(devices.default_device_name)
    if setting:
        why = f"METILE_DEVICE={setting}"
    elif devices.metal_available():
        why = "an Apple GPU is present (macOS on arm64); METILE_DEVICE is unset"
    else:
        why = f"no Apple GPU here ({platform.system()} on {platform.machine()}); METILE_DEVICE is unset"
    problem = None
    if name.lower() not in devices.DEVICE_NAMES:
        problem = f"METILE_DEVICE={setting!r} names no device (choose {' or '.join(devices.DEVICE_NAMES)})"
    facts = [("default device", name), ("because", why)]
    return facts + ([("problem", problem)] if problem else []), problem


def cache_facts() -> list[Fact]:
    root = cache.cache_root()
    source = "METILE_CACHE_DIR" if os.environ.get("METILE_CACHE_DIR") else "the platform's user cache directory"
    facts: list[Fact] = [("directory", f"{root} ({source})")]
    try:
        parts = cache.cache_info(root)
    except Exception as e:  # noqa: BLE001
        return [*facts, ("contents", f"error: {describe(e)}")]
    for part in parts:
        unit = "choices" if part.name == "autotune" else "files"
        facts.append((f"{part.name}/", f"{part.files} {unit}, {part.bytes / 1e6:.1f} MB"))
    return facts


def open_device(name: str) -> tuple[object | None, str, bool]:
    """The process's device `name`, or None, why it could not be created and whether it said it is unavailable."""
    try:
        return devices.device(name), "", False
    except DeviceUnavailableError as e:
        return None, describe(e), True
    except Exception as e:  # noqa: BLE001
        return None, describe(e), False


def cpu_facts() -> Probed:
    """The CPU device, which every machine metile runs on is expected to have."""
    cxx = os.environ.get("CXX") or None
    dev, error, _ = open_device("cpu")
    looked = ", ".join(CANDIDATES.get(platform.system(), DEFAULT_CANDIDATES))
    facts: list[Fact] = [("CXX", cxx or f"unset (the first of {looked} on PATH)")]
    compiler_error = ""
    try:
        comp = dev.compiler if dev is not None else find_compiler(cxx)
        facts.append(("compiler", f"{comp.path} ({comp.kind} {comp.major}; {first_line(comp.version_text)})"))
    except Exception as e:  # noqa: BLE001
        compiler_error = describe(e)
        facts.append(("compiler", f"not found: {compiler_error}"))
    if dev is None:
        shown = "unavailable (no C++ compiler, see above)" if error == compiler_error else f"unavailable: {error}"
        return Probed([*facts, ("device", shown)], None, error, failed=True)
    opts = dev.options
    facts += [("device", f"ok {dev!r}"),
              ("workers", f"{opts.workers or os.cpu_count()}{' (one per core)' if not opts.workers else ''}"),
              ("timeout", f"{opts.timeout_s:g} s per dispatch" if opts.timeout_s else "none"),
              ("tensor ops", yes_no(dev.supports_tensor_ops)),
              ("tensor ops accelerated", yes_no(dev.tensor_ops_accelerated))]
    facts += runtime_facts(bool(dev.rt.mt_watch_available()))
    return Probed(facts, dev)


def _unified_memory(dev) -> str:
    """Whether the GPU shares memory with the CPU (`hasUnifiedMemory`), from the device or asked of the shim."""
    known = getattr(dev, "has_unified_memory", None)
    if known is not None:
        return yes_no(known)
    ffi, lib = dev.shim.ffi, dev.shim.lib
    info = ffi.new("mts_device_info*")
    if lib.mts_device_query(dev.handle, info, dev.errp) != 0:
        return "unknown (the device query failed)"
    return yes_no(info.has_unified_memory)


def _compile_mode(dev) -> str:
    compiler = dev.compiler
    mode = compiler.mode
    tool = compiler.toolchain
    if mode == "aot":
        return f"aot (xcrun metal -> .metallib, cached; {first_line(tool.version) if tool else ''})"
    if compiler.aot_fallback_reason:
        return f"jit (AOT given up: {first_line(compiler.aot_fallback_reason)[:MAX_MESSAGE]})"
    if compiler.aot is False:
        return "jit (AOT turned off)"
    return "jit (no offline Metal toolchain: Metal compiles each source at run time)"


def _compile_setting() -> str:
    """`METILE_METAL_COMPILE` as set, and what it means (read as `metile.devices` reads it)."""
    text = os.environ.get("METILE_METAL_COMPILE", "").strip()
    return f"{text or 'unset'} ({AOT_SETTINGS[devices.metal_compile_mode(os.environ)]})"


def metal_facts() -> Probed:
    """The Metal device where this machine may have one."""
    system, machine = platform.system(), platform.machine()
    if not devices.metal_available():
        if system == "Darwin":
            why = f"needs an Apple silicon Mac (arm64); this Mac is {machine}"
        else:
            why = f"the metal device needs macOS on Apple silicon; this machine runs {system} on {machine}"
        return Probed([("available", f"no ({why})")], None, why)
    facts: list[Fact] = [("platform", "macOS on Apple silicon" if system == "Darwin" else f"{system} on {machine}"),
                         ("METILE_METAL_COMPILE", probe(_compile_setting))]
    if system == "Darwin":
        from metile.metal.gpu.compile import find_toolchain, run_command

        def toolchain() -> str:
            tool = find_toolchain(run_command)
            return f"present ({first_line(tool.version)})" if tool else "absent (only JIT compiles are possible)"

        facts += [("developer dir", _run(["xcode-select", "-p"])),
                  ("clang", _run(["xcrun", "-f", "clang"])),
                  ("offline toolchain (xcrun metal)", probe(toolchain))]
    dev, error, unavailable = open_device("metal")
    if dev is None:
        return Probed([("available", f"no ({error})" if unavailable else f"error: {error}"), *facts], None, error,
                      failed=not unavailable)
    aot = getattr(dev.options, "aot", None)
    facts = [("available", "yes"), *facts]
    facts += [
        ("device", f"ok {dev!r}"),
        ("gpu", probe(lambda: dev.gpu_name)),
        ("apple gpu family", probe(lambda: f"Apple{dev.gpu_family}")),
        ("metal 4", probe(lambda: yes_no(dev.supports_metal4))),
        ("tensor ops", probe(lambda: yes_no(dev.supports_tensor_ops))),
        ("tensor ops accelerated", probe(lambda: yes_no(dev.tensor_ops_accelerated))),
        ("max threads per threadgroup", probe(lambda: dev.max_threads_per_threadgroup)),
        ("max threadgroup memory", probe(lambda: f"{dev.max_threadgroup_memory} bytes")),
        ("recommended working set", probe(lambda: f"{dev.recommended_working_set / 2**30:.1f} GiB")),
        ("unified memory", probe(lambda: _unified_memory(dev))),
        ("non-uniform threadgroups", probe(lambda: yes_no(dev.nonuniform_threadgroups))),
        ("msl version", probe(lambda: dev.compiler.settings.language_version or "the newest this macOS has")),
        ("MetalOptions.aot", f"{aot!r} ({AOT_SETTINGS.get(aot, 'unknown')})"),
        ("compiles go", probe(lambda: _compile_mode(dev))),
        ("shim", probe(lambda: dev.shim.origin)),
    ]
    return Probed(facts, dev)


# -- checks ---------------------------------------------------------------------------------------------------------

def _vector_add(X, Y, Out, n, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    live = offs < n
    metile.store(Out + offs, metile.load(X + offs, mask=live) + metile.load(Y + offs, mask=live), mask=live)


def _compared(got: np.ndarray, want: np.ndarray, took: float) -> tuple[bool, str]:
    err = float(np.abs(got.astype(np.float64) - want).max())
    if err <= 1e-6 * max(1.0, float(np.abs(want).max())):
        return True, f"OK ({took:.2f} s)"
    return False, f"FAIL: max |metile - numpy| = {err:.3g}"


def check_kernel(dev) -> tuple[bool, str]:
    """An `@metile.kernel` vector add of N floats launched on `dev`, compared with numpy."""
    x = np.arange(N, dtype=np.float32) * 0.5
    y = 1.0 - np.arange(N, dtype=np.float32) * 0.25
    out = np.zeros(N, np.float32)
    k = metile.kernel(_vector_add)   # a fresh kernel: its compile cache holds nothing for another device
    start = time.perf_counter()
    with devices.default_device_named(dev.name):
        k[(metile.cdiv(N, 256),)](x, y, out, N, BLOCK=256)
        dev.synchronize()
        ran_on = k.compile(x, y, out, N, BLOCK=256).device
    if ran_on is not dev:
        return False, f"FAIL: the kernel compiled for {ran_on!r}, not for this device"
    return _compared(out, (x + y).astype(np.float64), time.perf_counter() - start)


def check_msl(dev) -> tuple[bool, str]:
    """A hand-written MSL kernel through `dev.compile`, `.function` and `dispatch_threadgroups`."""
    x = np.linspace(-4.0, 4.0, N, dtype=np.float32)
    y = np.zeros(N, np.float32)
    start = time.perf_counter()
    fn = dev.compile(MSL_CHECK, name="doctor_axpb.metal").function("doctor_axpb")
    dev.dispatch_threadgroups(fn, (metile.cdiv(N, 256), 1, 1), (256, 1, 1), [x, y, np.uint32(N)])
    dev.synchronize()
    return _compared(y, 2.0 * x.astype(np.float64) + 1.0, time.perf_counter() - start)


CHECKS: tuple[tuple[str, Callable[[object], tuple[bool, str]]], ...] = (
    (f"@metile.kernel vector add ({N} floats)", check_kernel),
    ("hand-written MSL (compile, dispatch_threadgroups)", check_msl),
)


def run_checks(name: str, dev, why: str) -> list[Check]:
    """Every check on the device `name` (None when it could not be created, `why` saying why)."""
    if dev is None:
        return [Check(f"{name} device", False, f"FAIL: {why}")]
    out = []
    for what, check in CHECKS:
        try:
            ok, detail = check(dev)
        except Exception as e:  # noqa: BLE001
            ok, detail = False, f"FAIL: {describe(e)}"
        out.append(Check(f"{name} {what}", ok, detail))
    return out


# -- the command ----------------------------------------------------------------------------------------------------

def print_section(title: str, facts: list[Fact]) -> None:
    print(title)
    for name, value in facts:
        print(f"  {name}: {value}")
    print()


def doctor() -> int:
    """Print what metile finds and run the checks; 0 when every available device passed, 1 otherwise."""
    print("metile doctor (paste this output into a bug report)\n")
    print_section("system", system_facts())
    facts, problem = default_device_facts()
    print_section("default device", facts)
    problems = ["default device"] if problem else []
    print_section("cache", cache_facts())
    cpu = cpu_facts()
    print_section("cpu device", cpu.facts)
    gpu = metal_facts()
    print_section("metal device", gpu.facts)
    print("checks")
    checks: list[Check] = []
    for name, p in (("cpu", cpu), ("metal", gpu)):
        if p.device is None and not p.failed:
            print(f"  {name}: skipped (unavailable: {p.why})")
            continue
        for c in run_checks(name, p.device, p.why):
            print(f"  {c.name}: {c.detail}")
            checks.append(c)
    if probe(devices.default_device_name).lower() == "metal" and gpu.device is None and not gpu.failed:
        checks.append(Check("default device", False, "FAIL: it is metal, which is unavailable here, so kernels "
                                                     "cannot launch; METILE_DEVICE=cpu runs them on the CPU"))
        print(f"  default device: {checks[-1].detail}")
    problems += [c.name for c in checks if not c.ok]
    print()
    if problems:
        print(f"result: FAIL ({'; '.join(problems)})")
        return 1
    print("result: OK (every available device passed)")
    return 0


def main() -> int:
    """`doctor()`, with any failure the probes did not catch reported instead of raised."""
    try:
        return doctor()
    except Exception as e:  # noqa: BLE001 - the doctor never raises
        print(f"\ndoctor: internal error: {describe(e)}")
        return 1
