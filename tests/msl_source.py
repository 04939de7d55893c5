"""Pieces the tests of MSL run on the CPU device share: the usual first lines of a source, and finding a line."""

from __future__ import annotations

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


def line_of(src: str, marker: str) -> int:
    """The 1-based line of `src` where `marker` first appears."""
    return next(n for n, text in enumerate(src.splitlines(), 1) if marker in text)
