"""Pieces tests share: the usual first lines of an MSL source, and finding a line of MSL text or of a kernel."""

from __future__ import annotations

import inspect

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


def line_of(src: str, marker: str) -> int:
    """The 1-based line of `src` where `marker` first appears."""
    return next(n for n, text in enumerate(src.splitlines(), 1) if marker in text)


def kernel_line(fn, marker: str) -> int:
    """The file line of `fn`'s source (a function, e.g. `kernel.fn`) where `marker` first appears."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)
