"""Turning a runtime fault record into a `DeviceFault` that names kernel, thread, buffer and `.metal` line
(`metile.kernel` then leads the `.metal` line back to the kernel's Python line)."""

from __future__ import annotations

import functools
import mmap
from collections.abc import Callable
from pathlib import Path

import attrs

from metile.ir.errors import Loc
from metile.metal.cpu.runtime_api import FAULT_KINDS, ffi
from metile.metal.cpu.symbolize import source_frames
from metile.metal.errors import DeviceFault, LaunchError

PAGE = mmap.PAGESIZE   # the system's page: 4 KiB on x86-64, 16 KiB on Apple silicon
_TITLES = {
    "bad-access": "invalid memory access",
    "misaligned": "misaligned memory access",
    "division-by-zero": "integer division by zero",
    "barrier-divergence": "barrier divergence",
    "simd-divergence": "simd collective divergence",
    "hang": "kernel did not finish (watchdog timeout)",
    "threadgroup-memory": "too much threadgroup memory",
    "stack-overflow": "thread stack overflow",
    "trap": "undefined-behaviour trap in kernel code (misaligned access, out-of-bounds array index "
            "or integer division by zero)",
    "uninitialized-read": "read of uninitialised threadgroup memory",
    "data-race": "data race on threadgroup memory",
    "kernel": "fault reported by kernel code",
    "internal": "CPU runtime error",
}


@attrs.frozen
class BufferRange:
    """A bound buffer: its start and size, and the extent [lo, hi) of its mapping, guards included (0, 0 when
    unknown). The runtime's mappings never overlap, so an address in one names that buffer."""
    index: int
    name: str
    address: int
    nbytes: int
    lo: int = 0
    hi: int = 0
    note: str = ""   # why the parameter has no memory of its own (see metile.metal.cpu.placeholders)


@functools.lru_cache(maxsize=4096)
def source_lines(module: str, offset: int) -> tuple[tuple[str, int], ...]:
    """(file, line) frames for an instruction, innermost first (inlined frames included)."""
    return source_frames(module, (offset,)).get(offset, ())


def metal_line(module: str, offset: int, metal_name: str,
               user_file: Callable[[str], str | None] | None = None) -> tuple[str, int]:
    """The file and line of the instruction at `offset` in `module` (line 0 when unknown): a `.metal` line, or a
    line of a header the source included when `user_file(file)` knows that file.

    The kernel's C++ translation unit (`module`'s name with `.cpp`, built from `<hash>.cpp`, or `<hash>-san.so`
    for the sanitizer build) is `#include` and `#line 1 "<metal_name>"` followed by the MSL, so every line of
    code in it is a `.metal` line; some tools name the unit itself for such lines (addr2line on DWARF 5 line
    tables names file 0, the unit), with the `.metal` line number, so those frames count too."""
    return pick_metal_line(source_lines(module, offset), module, metal_name, user_file)


def pick_metal_line(frames, module: str, metal_name: str,
                    user_file: Callable[[str], str | None] | None = None) -> tuple[str, int]:
    """metal_line's choice among an instruction's frames."""
    unit = str(Path(module).with_name(Path(module).stem.removesuffix("-san") + ".cpp")) if module else ""
    for file, line in frames:
        if file == metal_name or file.endswith("/" + metal_name) or file == unit:
            return metal_name, line
        if user_file is not None and user_file(file) is not None:
            return file, line
    return metal_name, 0


def locate(address: int, buffers: list[BufferRange]) -> tuple[BufferRange, int] | None:
    """The buffer an address falls in or next to, and the offset from its start: the buffer whose mapping holds the
    address, else (mapping unknown) the nearest buffer within a page either side."""
    for b in buffers:
        if b.lo <= address < b.hi:
            return b, address - b.address
    near = [(_distance(address, b), b) for b in buffers if not b.hi and b.address - PAGE <= address < b.address
            + b.nbytes + PAGE]
    if not near:
        return None
    b = min(near, key=lambda t: (t[0], t[1].index))[1]
    return b, address - b.address


def _distance(address: int, b: BufferRange) -> int:
    return b.address - address if address < b.address else max(0, address - (b.address + b.nbytes) + 1)


def to_exception(rec, *, kernel: str, metal_name: str, source: str, buffers: list[BufferRange],
                 trap_is_misalignment: bool = False,
                 user_file: Callable[[str], str | None] | None = None) -> Exception:
    """A DeviceFault (or LaunchError for runtime errors) from an `mt_fault` record.

    `trap_is_misalignment`: the kernel was built so that an undefined-behaviour trap can only be a
    misaligned access (see build.TRAP_CHECKS). `user_file` reads the headers a preprocessed source included,
    so that a fault in one is reported at its line."""
    kind = FAULT_KINDS.get(rec.kind, "internal")
    if kind == "trap" and trap_is_misalignment:
        kind = "misaligned"
    module = ffi.string(rec.module).decode(errors="replace")
    detail = ffi.string(rec.message).decode(errors="replace")
    tg = tuple(rec.threadgroup)
    th = tuple(rec.thread)
    file, line = (metal_name, rec.line) if rec.line else metal_line(module, rec.pc_offset, metal_name, user_file)
    parts = [f"{_TITLES.get(kind, kind)} in kernel `{kernel}`"]
    known = max(th) != 0xFFFFFFFF  # a write in front of a buffer is found after the dispatch, by no thread
    if (kind not in ("internal", "threadgroup-memory") or rec.line) and known:
        parts.append(f"thread {th} of threadgroup {tg}")
    buffer = offset = None
    if kind in ("bad-access", "misaligned") and rec.address:
        hit = locate(rec.address, buffers)
        if hit is not None:
            b, off = hit
            buffer, offset = b.index, off
            if b.note:   # a placeholder: the runtime's words about guard pages do not apply
                parts.append(f"address {rec.address:#x} is at byte offset {off} of buffer {b.index} (`{b.name}`, "
                             f"[[buffer({b.index})]]), which {b.note}")
                detail = ""
            else:
                span = getattr(rec, "address_span", 0)
                where = (f"{off - b.nbytes} bytes past the end" if off >= b.nbytes
                         else f"{-off - span + 1} to {-off} bytes before the start" if off < 0 and span > 1
                         else f"{-off} bytes before the start" if off < 0 else f"at byte offset {off}")
                parts.append(f"address {rec.address:#x} is {where} of buffer {b.index} (`{b.name}`, "
                             f"{b.nbytes} bytes)")
        else:
            parts.append(f"address {rec.address:#x}")
    if detail:
        parts.append(detail)
    other_loc = None
    if rec.has_other:
        other_file, other_line = ((metal_name, rec.other_line) if rec.other_line else
                                  metal_line(module, rec.other_pc_offset, metal_name, user_file))
        other = f"other thread {tuple(rec.other_thread)}"
        if other_line:
            other += f" at {other_file}:{other_line}"
            other_loc = Loc(other_file, other_line, 0)
        parts.append(other)
    message = "; ".join(parts)
    if kind == "internal":
        return LaunchError(message)
    text = source if file == metal_name else (user_file(file) if user_file is not None else None) or ""
    lines = text.splitlines()
    loc = Loc(file, line, _first_col(lines[line - 1])) if 0 < line <= len(lines) else None
    return DeviceFault(message, loc, kind=kind, kernel=kernel, threadgroup=tg if known else None,
                       thread=th if known else None, buffer=buffer,
                       offset=offset, source_line=lines[line - 1] if loc else None, other_loc=other_loc)


def _first_col(text: str) -> int:
    return len(text) - len(text.lstrip())
