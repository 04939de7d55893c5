"""Reading the source lines of instructions of a kernel library from its debug information, on Linux and macOS.

On Linux the library itself carries its DWARF, read with binutils' `addr2line` (or LLVM's `llvm-addr2line`, which
takes the same arguments). On macOS the linker leaves the DWARF in the object files, which the build deletes, so
the build first gathers it with `dsymutil --flat` into `<library>.dwarf` beside the library (`DEBUG_SUFFIX`,
`gather_debug_info`); lines are then read from that file with `llvm-addr2line` when one is on PATH (Homebrew's
LLVM), else with Apple's `atos`, which every Xcode command-line tools install has. `atos` prints one line per frame
with no mark between addresses, so several addresses are asked for their outermost frame (the kernel function's
line, inlined frames not expanded) in one run, and a single address (a fault) for all its frames.

An instruction's offset is from the start of the library's image (the runtime subtracts `dladdr`'s base), which
is its address in the file for a shared object or a dylib, whose first segment starts at 0.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

DEBUG_SUFFIX = ".dwarf"
"""What `gather_debug_info` appends to a macOS kernel library's name for the file holding its DWARF."""

Frames = tuple[tuple[str, int], ...]


def gather_debug_info(library: Path, out: Path, run: Callable[[list[str]], None]) -> bool:
    """Write the DWARF of the Mach-O `library` (kept in the object files it was linked from, which must still
    exist) to `out` with `dsymutil --flat`, run by `run(command)`; False when no dsymutil is found or it fails
    (the library then works, but faults and profiles name no line)."""
    tool = shutil.which("dsymutil")
    if tool is None:
        return False
    try:
        run([tool, "--flat", "-o", str(out), str(library)])
    except Exception:  # noqa: BLE001 - any failure only costs the line numbers
        out.unlink(missing_ok=True)
        return False
    return out.exists()


def debug_file(module: str, system: str | None = None) -> str | None:
    """The file holding `module`'s DWARF: `module` itself on Linux, `<module>.dwarf` on macOS (None when absent)."""
    if (system or platform.system()) != "Darwin":
        return module
    side = module + DEBUG_SUFFIX
    return side if Path(side).exists() else None


def symbolizer(system: str | None = None, which: Callable[[str], str | None] = shutil.which) -> tuple[str, str] | None:
    """(kind, path) of the tool that reads lines on `system`: kind "addr2line" (binutils' or LLVM's, which read
    alike) or "atos"; None when there is none."""
    darwin = (system or platform.system()) == "Darwin"
    names = ("llvm-addr2line", "atos") if darwin else ("addr2line", "llvm-addr2line")   # binutils' reads no Mach-O
    for name in names:
        path = which(name)
        if path:
            return ("atos" if name == "atos" else "addr2line"), path
    return None


def source_frames(module: str, offsets: Iterable[int], *, system: str | None = None,
                  which: Callable[[str], str | None] = shutil.which,
                  run: Callable[[list[str]], str] | None = None) -> dict[int, Frames]:
    """(file, line) frames of each instruction of `module` at `offsets` (0s skipped), innermost first: every
    inlined frame with addr2line, and with atos when one offset is asked; with atos for several, the outermost.
    Instructions the tool cannot place are left out. `run(command)` returns the tool's output (a subprocess by
    default; tests give their own)."""
    wanted = sorted({o for o in offsets if o})
    found = debug_file(module, system) if module else None
    tool = symbolizer(system, which)
    if not wanted or found is None or tool is None:
        return {}
    kind, path = tool
    run = run or _run
    if kind == "addr2line":
        return parse_addr2line(run([path, "-e", found, "-i", "-a", *map(hex, wanted)]))
    command = [path, "-o", found, "-l", "0x0", "-fullPath"]
    if len(wanted) == 1:
        frames = parse_atos_frames(run([*command, "-i", hex(wanted[0])]))
        return {wanted[0]: frames} if frames else {}
    lines = run([*command, *map(hex, wanted)]).splitlines()
    out = {}
    for offset, line in zip(wanted, lines):
        frames = parse_atos_frames(line)
        if frames:
            out[offset] = frames
    return out


def _run(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def parse_addr2line(out: str) -> dict[int, Frames]:
    """The frames of `addr2line -i -a` output: each address on a line of its own, then its frames `file:line`
    (`file:line (discriminator n)` at times), innermost first."""
    found: dict[int, list[tuple[str, int]]] = {}
    frames: list[tuple[str, int]] | None = None
    for line in out.splitlines():
        if line.startswith("0x") and ":" not in line:
            frames = found.setdefault(int(line, 16), [])
            continue
        file, _, num = line.rpartition(":")
        num = num.split(" ")[0]
        if frames is not None and file and num.isdigit():
            frames.append((file, int(num)))
    return {o: tuple(f) for o, f in found.items()}


_ATOS_FRAME = re.compile(r"\((?P<file>[^()]+):(?P<line>\d+)\)\s*$")


def parse_atos_frames(out: str) -> Frames:
    """The frames of atos output for one address: a line per frame, `function (in library) (file:line)`, innermost
    first; a frame atos places by symbol alone (`function (in library) + 16`) or not at all (the address echoed)
    has no line and is left out."""
    frames = []
    for line in out.splitlines():
        m = _ATOS_FRAME.search(line)
        if m is not None:
            frames.append((m["file"], int(m["line"])))
    return tuple(frames)


__all__ = ["DEBUG_SUFFIX", "debug_file", "gather_debug_info", "parse_addr2line", "parse_atos_frames",
           "source_frames", "symbolizer"]
