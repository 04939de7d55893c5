"""`triton.language.extra.hip`: its `libdevice` is metile's (`triton.language.extra.libdevice`)."""

from __future__ import annotations

from metile.triton.language.extra.hip import libdevice

__all__ = ["libdevice"]
