"""From a line of the emitted MSL back to the kernel's Python source: `msl_locations` and `FaultLocator`.

Emission itself does not track locations (it runs on every compile); these emit again, for the rare reader,
a fault report.
"""

from __future__ import annotations

import re

from metile.emit.msl import _Emitter
from metile.ir.errors import Loc
from metile.ir.stmts import Kernel
from metile.ir.values import Stmt, Value


def msl_locations(kernel: Kernel) -> tuple[str, dict[int, Loc]]:
    """`emit_msl(kernel)` and, for each of its lines (numbered from 1) that a located node wrote, that location:
    - a named value's declaration: the value's own `loc`, else that of the innermost located value it is written
      for (the expansion of a `//`, say);
    - the assignments of a loop's or a branch's carried values: the first located value assigned;
    - any other line: the innermost statement with a `loc` whose emission wrote it.
    The lowering gives its statements the location of the Tile IR statement they come from (a tile load that a
    `dot` stages, the load's), and the element-wise values it rebuilds the location of their Tile IR value, so a
    `.metal` line leads back to a Python line (an expression written inline leads to the statement it is part
    of)."""
    emitter = _Locating(kernel)
    text = emitter.run()
    first = text.count("\n") - len(emitter.lines)  # the line number of the body's first line
    return text, {first + i: loc for i, loc in emitter.owner.items()}


class FaultLocator:
    """The Python locations `locs` of the lines of the `.metal` text `text`, for a fault report, asked about any
    number of lines; `FaultLocator.of(kernel, msl)` makes one by a single re-emission (`msl_locations`)."""

    def __init__(self, text: str, locs: dict[int, Loc]):
        self.text, self.lines, self.locs = text, text.splitlines(), locs

    @classmethod
    def of(cls, kernel: Kernel, msl: str) -> FaultLocator:
        """The locator of `msl`, the text `kernel` emits (when it is not, no line leads anywhere)."""
        text, locs = msl_locations(kernel)
        return cls(msl, locs if text == msl else {})

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
        name = next((m.group(1) for m in _BUFFER.finditer(self.text) if int(m.group(2)) == buffer), None)
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
        head = next((i for i, t in enumerate(lines) if t.startswith("kernel void")), 0)
        body = next((i + 1 for i in range(head, len(lines)) if lines[i].endswith(") {")), 0)  # its first line
        for i in range(line - 2, body - 1, -1):
            if i not in declarations and aliases & set(_IDENT.findall(lines[i])):
                return i + 1
        return line


_BUFFER = re.compile(r"(\w+) \[\[buffer\((\d+)\)\]\]")
_POINTER = re.compile(r"^\s*(?:device|threadgroup|constant)\b[^=;]*\*\s*(?:const\s+)?(\w+)\s*=\s*(.*);$")
_IDENT = re.compile(r"\w+")


class _Locating(_Emitter):
    """`_Emitter`, noting which located node wrote each line of the body (see `msl_locations`)."""

    def __init__(self, k: Kernel):
        super().__init__(k)
        self.owner: dict[int, Loc] = {}  # index in `lines` -> the location of the node that wrote it
        self.within: Loc | None = None  # the location of the innermost located value being written

    def own(self, start: int, loc: Loc | None) -> None:
        """Give the lines written since `start` that have no owner yet to `loc`."""
        if loc is not None:
            owner = self.owner
            for i in range(start, len(self.lines)):
                owner.setdefault(i, loc)

    def stmt(self, s: Stmt) -> None:
        start = len(self.lines)
        super().stmt(s)
        self.own(start, s.loc)  # after the inner statements and values, which keep their lines

    def expr(self, v: Value) -> tuple[str, ...]:
        loc = v.loc
        if loc is None or loc is self.within:
            return super().expr(v)
        saved, self.within = self.within, loc
        try:
            return super().expr(v)
        finally:
            self.within = saved

    def named(self, name: str, v: Value, text: str) -> None:
        loc = v.loc or self.within
        if loc is not None:
            self.owner[len(self.lines)] = loc
        super().named(name, v, text)

    def assign(self, targets, values) -> None:
        start = len(self.lines)
        super().assign(targets, values)
        self.own(start, next((v.loc for v in values if v.loc is not None), None))


__all__ = ["FaultLocator", "msl_locations"]
