"""Errors raised by lowering passes."""

from __future__ import annotations

from metile.ir.errors import MetileError


class UnsupportedConstructError(MetileError):
    """A construct the lowering to Metal cannot compile correctly (refused at the construct's source line)."""


__all__ = ["UnsupportedConstructError"]
