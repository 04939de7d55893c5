"""Lowered Metal IR to MSL text: pure string building.

Modules: `msl` (`emit_msl`, the emitter), `facts` (whole-kernel facts it needs first: stage check, use
counts, written parameters, C names, builtins), `spell` (MSL spellings of types, literals, operators).
"""

from __future__ import annotations

from metile.emit.msl import emit_msl
from metile.emit.spell import EmitError

__all__ = ["EmitError", "emit_msl"]
