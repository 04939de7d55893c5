"""User-facing errors and source locations.

`MetileError` is the root of every error metile raises for a user mistake. It carries an
optional `Loc` and renders as ``file:line:col: error: message`` followed by the source line
and a caret, like a C compiler diagnostic.
"""

from __future__ import annotations

import linecache
from typing import NoReturn

import attrs


@attrs.frozen
class Loc:
    """A position in a source file (1-based line, 0-based column, as Python's ``ast``: the column counts the
    line's UTF-8 bytes, so a line with non-ASCII characters before the position renders its caret and column
    at the character instead)."""

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"


def render_diagnostic(message: str, loc: Loc | None, *, kind: str = "error",
                      source_line: str | None = None) -> str:
    """Format ``message`` at ``loc`` with the source line and a caret under the column."""
    if loc is None:
        return f"{kind}: {message}"
    text = source_line if source_line is not None else linecache.getline(loc.file, loc.line)
    text = text.rstrip("\n")
    col = max(loc.col, 0)
    if not text.isascii():  # the column counts bytes: the character it falls in
        col = len(text.encode()[:col].decode(errors="ignore"))
    head = f"{Loc(loc.file, loc.line, col)}: {kind}: {message}"
    if not text:
        return head
    caret = " " * min(col, len(text)) + "^"
    return f"{head}\n    {text}\n    {caret}"


class MetileError(Exception):
    """Root of all errors metile raises for user mistakes."""

    def __init__(self, message: str, loc: Loc | None = None, *, source_line: str | None = None):
        self.message = message
        self.loc = loc
        self.source_line = source_line
        super().__init__(render_diagnostic(message, loc, source_line=source_line))


def assert_never(value: object) -> NoReturn:
    """The last case of a `match` that must cover every node kind (as `typing.assert_never`, which
    Python 3.10 lacks): reaching it is a bug in metile, not a user error."""
    raise AssertionError(f"unhandled {type(value).__name__}: {value!r}")
