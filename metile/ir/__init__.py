"""Tile IR and Metal IR: nodes, types, locations, errors, printer, parser and verifier."""

from __future__ import annotations

from metile.ir.errors import Loc, MetileError, render_diagnostic

__all__ = ["Loc", "MetileError", "render_diagnostic"]
