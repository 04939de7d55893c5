"""`triton.language.extra.hip.libdevice`: the same functions as `triton.language.extra.libdevice`."""

from __future__ import annotations

from metile.triton.language.extra.libdevice import *  # noqa: F403
from metile.triton.language.extra.libdevice import FUNCTIONS

globals().update(FUNCTIONS)
__all__ = sorted(FUNCTIONS)  # noqa: PLE0605
