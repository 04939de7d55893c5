"""Every MSL helper the emitter may write before a kernel, by name: the Metal 4 tensor headers
(`metile.emit.tensor_ops`), 8-bit float conversions
(`metile.emit.fp8`), 64-bit SIMD-group reductions (`metile.emit.wide`), matrix element access
(`metile.emit.matrix_helpers`), atomics (`metile.emit.atomics`) and device printing and assertions
(`metile.emit.debug`). The emitter writes those a kernel calls, in this order."""

from __future__ import annotations

from metile.emit.atomics import HELPERS as ATOMICS
from metile.emit.debug import HELPERS as DEBUG
from metile.emit.fp8 import HELPERS as FP8
from metile.emit.matrix_helpers import HELPERS as MATRIX
from metile.emit.tensor_ops import HELPERS as TENSOR
from metile.emit.wide import HELPERS as WIDE

ALL_HELPERS: dict[str, str] = {**TENSOR, **FP8, **WIDE, **MATRIX, **ATOMICS, **DEBUG}

__all__ = ["ALL_HELPERS"]
