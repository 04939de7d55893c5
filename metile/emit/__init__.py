"""Lowered Metal IR to MSL text: pure string building.

Modules: `msl` (`emit_msl`, the emitter), `facts` (the stage check, written parameters, C names and
builtins, and `Records`, the per-structure table the emitter fills as it writes), `spell` (MSL spellings
of types, literals, operators).
"""

from __future__ import annotations

from metile.emit.msl import emit_msl
from metile.emit.spell import EmitError

__all__ = ["EmitError", "emit_msl"]
