"""`triton.language.extra.cuda`: its `libdevice` is metile's (`triton.language.extra.libdevice`)."""

from __future__ import annotations

from metile.triton.language.extra.cuda import libdevice

__all__ = ["libdevice"]
