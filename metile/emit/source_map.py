"""From a line of the emitted MSL back to the kernel's Python source: `FaultLocator`, for fault and profile reports.

The emitter notes the location each line comes from as it writes the text (`metile.emit.msl.emit_located`), and the
`MslArtifact` holds them; a locator adds what a fault at a line needs beside them (a bad access that the C++
compiler reports at the line of the consumer it folded the load into).
"""

from __future__ import annotations

import re

from metile.emit.artifact import MslArtifact
from metile.emit.msl import emit_located
from metile.ir.errors import Loc
from metile.ir.stmts import Kernel


def msl_locations(kernel: Kernel) -> tuple[str, dict[int, Loc]]:
    """`emit_msl(kernel)` and the location of each line of it that leads back to one (`emit_located`)."""
    text, _, locs = emit_located(kernel)
    return text, locs


class FaultLocator:
    """The Python locations of the lines of an artifact's `.metal` text, for a fault report, asked about any number of
    lines."""

    def __init__(self, artifact: MslArtifact):
        self.text, self.lines, self.locs = artifact.msl, artifact.msl.splitlines(), artifact.locations
        sig = artifact.signature
        self.buffers = {p.index: p.name for p in sig.buffers}
        self.body = sig.line + max(len(sig.params), 1) - 1   # the index in `lines` of the body's first line

    def location(self, line: int, buffer: int | None = None) -> Loc | None:
        """The Python location of `.metal` line `line`, None when it leads nowhere.

        For a bad access to the argument `buffer`, a line that does not touch that buffer is the consumer the C++
        compiler folded the faulting load into (it reports the instruction at the consumer's line): the access
        is then the nearest line above that reads the buffer, or a pointer made from it."""
        if buffer is not None:
            line = self.access_line(line, buffer)
        return self.locs.get(line)

    def access_line(self, line: int, buffer: int) -> int:
        """`line`, or the nearest line above it that reads buffer `buffer` when `line` does not (lines are numbered
        from 1)."""
        lines = self.lines
        name = self.buffers.get(buffer)
        if name is None or not 0 < line <= len(lines):
            return line
        aliases = {name}  # the buffer and the pointers made from it above `line`
        declarations: set[int] = set()  # the lines declaring those pointers
        for i in range(line):
            m = _POINTER.match(lines[i])
            if m is not None and aliases & set(_IDENT.findall(m.group(2))):
                aliases.add(m.group(1))
                declarations.add(i)
        if aliases & set(_IDENT.findall(lines[line - 1])):
            return line
        for i in range(line - 2, self.body - 1, -1):
            if i not in declarations and aliases & set(_IDENT.findall(lines[i])):
                return i + 1
        return line


_POINTER = re.compile(r"^\s*(?:device|threadgroup|constant)\b[^=;]*\*\s*(?:const\s+)?(\w+)\s*=\s*(.*);$")
_IDENT = re.compile(r"\w+")


__all__ = ["FaultLocator", "msl_locations"]
