"""metile: write GPU kernels as tile programs in Python and run them as Metal Shading Language."""

from __future__ import annotations

from metile.ir.errors import Loc, MetileError

__all__ = ["Loc", "MetileError"]
__version__ = "0.1.0"
