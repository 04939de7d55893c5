"""How the lowering's refusals name what they refuse: `what(node)` ("this reduction", "metile.barrier()") and
`line(loc)`."""

from __future__ import annotations

from metile.ir.errors import Loc
from metile.ir.node import Node
from metile.ir.values import Var

_NAMES = {"Reduce": "this reduction", "ArgReduce": "this arg-reduction", "Scan": "this scan", "Dot": "this dot",
          "For": "this loop", "While": "this while loop", "If": "this branch", "Barrier": "metile.barrier()",
          "Binary": "this dot", "SimdgroupRole": "simdgroup_role", "Load": "this load", "Store": "this store",
          "SimdShuffleXor": "metile.simd_shuffle_xor", "SimdBroadcast": "metile.simd_broadcast",
          "SimdReduce": "this simd reduction"}


def what(n: Node) -> str:
    if isinstance(n, Var):
        return f"using the tile {n.name!r} here"
    return _NAMES.get(type(n).__name__, type(n).__name__)


def line(loc: Loc | None) -> str:
    return "?" if loc is None else str(loc.line)


__all__ = ["line", "what"]
