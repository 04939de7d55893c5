"""`triton.language.extra`: the libdevice functions (`extra.libdevice`, and its `cuda` and `hip` paths)."""

from __future__ import annotations

from metile.triton.language.extra import cuda, hip, libdevice

__all__ = ["cuda", "hip", "libdevice"]
