"""Compiler messages -> `MSLCompileError` on the user's `.metal` line (shared by both devices)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from metile.ir.errors import Loc
from metile.metal.errors import MSLCompileError

DIAGNOSTIC = re.compile(r"^(?P<file>[^\n]*?):(?P<line>\d+):(?P<col>\d+): (?:fatal )?error: (?P<msg>.*)$", re.M)
INSTANTIATED_FROM = re.compile(r"^(?P<file>[^\n]*?):(?P<line>\d+):(?P<col>\d+):\s+required from", re.M)   # g++
# clang (and so Apple's Metal compiler): the instantiations that led to an error are notes after it
REQUESTED_HERE = re.compile(
    r"^(?P<file>[^\n]*?):(?P<line>\d+):(?P<col>\d+): note: in instantiation of .* requested here$", re.M)


def first_error(output: str, *, source: str, metal_name: str, aliases: Iterable[str] = (),
                elsewhere: str = "included from", compiler: str = "the compiler",
                read_other: Callable[[str], str | None] | None = None) -> MSLCompileError:
    """The first error in compiler `output`, located on the `.metal` line when it lies in the source.

    `aliases` are other names the compiler used for the source (`program_source`, a temporary path);
    an error in another file is reported with that file's name and line, `elsewhere` the metal name.
    `read_other(file)` gives the text of another file the user's source included (a header), so that an
    error there that the source did not lead to is located on the header's line.
    """
    names = {metal_name, *aliases}
    diags = list(DIAGNOSTIC.finditer(output))
    def ours(d: re.Match) -> bool:
        return d.group("file") in names or (read_other is not None and read_other(d.group("file")) is not None)

    chosen = next((d for d in diags if ours(d)), diags[0] if diags else None)
    if chosen is None:
        return MSLCompileError(f"{compiler} rejected {metal_name}:\n{output.strip()}", compiler_output=output)
    msg = chosen.group("msg").strip()
    line, col = int(chosen.group("line")), int(chosen.group("col"))
    if chosen.group("file") not in names:
        where = f"{chosen.group('file')}:{line}"
        # an error inside a header, reached from the source: use the source line that led there
        site = next((m for m in INSTANTIATED_FROM.finditer(output) if m.group("file") in names), None)
        if site is None:   # clang's notes of this error: between it and the next error
            after = next((d.start() for d in diags if d.start() > chosen.start()), len(output))
            site = next((m for m in REQUESTED_HERE.finditer(output, chosen.end(), after) if m.group("file") in names),
                        None)
        other = read_other(chosen.group("file")) if read_other is not None and site is None else None
        if other is not None:
            lines = other.splitlines()
            text = lines[line - 1] if 0 < line <= len(lines) else ""
            return MSLCompileError(msg, Loc(chosen.group("file"), line, max(col - 1, 0)), source_line=text,
                                   compiler_output=output)
        if site is None:
            return MSLCompileError(f"{msg} (in {where}, {elsewhere} {metal_name})", compiler_output=output)
        msg = f"{msg} (in {where})"
        line, col = int(site.group("line")), int(site.group("col"))
    lines = source.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return MSLCompileError(msg, Loc(metal_name, line, max(col - 1, 0)), source_line=text, compiler_output=output)
