"""Which node classes each `Stage` admits, and which values must be the direct value of a `Let`.

- `Stage.TILE`: the shared nodes plus the Tile IR nodes (`metile.ir.tile`).
- `Stage.METAL`: the shared nodes plus the Metal IR nodes (`metile.ir.metal`), with scalar shapes only.
- `Stage.SIMT`: per-thread code whose compiler-owned threadgroup memory is still symbolic (`metile.ir.simt`):
  the shared and Metal IR nodes plus the SIMT ones (and the Tile IR ones, for a lowering in progress).
"""

from __future__ import annotations

from metile.ir.metal import METAL_STMTS, METAL_VALUES, MatrixLoad, MatrixMultiplyAccumulate, VecLoad
from metile.ir.node import Node
from metile.ir.ops import Stage
from metile.ir.simt import SIMT_STMTS, SIMT_VALUES
from metile.ir.stmts import COMMON_STMTS
from metile.ir.tile import TILE_STMTS, TILE_VALUES
from metile.ir.values import COMMON_VALUES, AtomicRMW, Load, SharedAlloc, SimdBroadcast, SimdReduce, SimdShuffleXor

VALUE_CLASSES = COMMON_VALUES + TILE_VALUES + METAL_VALUES + SIMT_VALUES
STMT_CLASSES = COMMON_STMTS + TILE_STMTS + METAL_STMTS + SIMT_STMTS

ADMITTED: dict[Stage, frozenset[type[Node]]] = {
    Stage.TILE: frozenset(COMMON_VALUES + TILE_VALUES + COMMON_STMTS + TILE_STMTS),
    Stage.METAL: frozenset(COMMON_VALUES + METAL_VALUES + COMMON_STMTS + METAL_STMTS),
    Stage.SIMT: frozenset(VALUE_CLASSES + STMT_CLASSES),
}

LET_ONLY: frozenset[type[Node]] = frozenset({
    Load, AtomicRMW, SharedAlloc, SimdShuffleXor, SimdBroadcast, SimdReduce, VecLoad, MatrixLoad,
    MatrixMultiplyAccumulate,
})


def admits(stage: Stage, cls: type[Node]) -> bool:
    return cls in ADMITTED[stage]


__all__ = ["ADMITTED", "LET_ONLY", "STMT_CLASSES", "VALUE_CLASSES", "admits"]
