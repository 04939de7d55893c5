"""Lowered Metal IR to MSL text: pure string building.

Modules: `msl` (`emit_msl`, the emitter, and `emit_located`), `artifact` (`MslArtifact`: the text with the kernel's
signature, launch plan and the source location of each line; `emit_artifact`, and `compile_to_msl`, which runs a
pipeline first), `signature` (`KernelSignature`: the parameters as a device binds them), `source_map`
(`FaultLocator`: a `.metal` line of a fault back to a Python line), `facts` (`scan`, one walk before any text is
written: the stage check, C names, bindings, written parameters, builtins, and in `Records`, one per value
structure, whether it has two or more parents), `line_owners` (`LineOwners`: the location each line of the text
comes from, for `emit_located`), `spell` (MSL spellings of types, literals, operators).
"""

from __future__ import annotations

from metile.emit.artifact import MslArtifact, compile_to_msl, emit_artifact
from metile.emit.msl import emit_located, emit_msl
from metile.emit.signature import KernelSignature
from metile.emit.spell import EmitError

__all__ = ["EmitError", "KernelSignature", "MslArtifact", "compile_to_msl", "emit_artifact", "emit_located",
           "emit_msl"]
