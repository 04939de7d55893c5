"""Lowered Metal IR to MSL text: pure string building.

Modules: `msl` (`emit_msl`, the emitter), `facts` (`scan`, one walk before any text is written: the stage
check, C names, bindings, written parameters, builtins, and in `Records`, one per structure, whether it has
two or more parents), `spell` (MSL spellings of types, literals, operators).
"""

from __future__ import annotations

from metile.emit.msl import emit_msl
from metile.emit.spell import EmitError

__all__ = ["EmitError", "emit_msl"]
