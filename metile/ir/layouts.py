"""Where the elements of a named tile live on the GPU: the layouts `assign_layouts` records for a kernel's values.

A Tile IR value is a whole tile of one program; the layout of a named tile (a `Let`'s variable, a loop's carried
values and results, the results of an `if` or a `simdgroup_role` block) says how the program's threads hold it:

| layout                                 | printed                      | held as                                      |
|----------------------------------------|------------------------------|----------------------------------------------|
| `Blocked(threads, vec, first_sg)`      | `blocked<128, 4>` (`@ sg 2`) | registers: each thread of the group holds    |
|                                        |                              | runs of `vec` consecutive elements           |
| `Fragments(sg_m, sg_n, first_sg, ...)` | `fragments<2x2>`             | the 8x8 simdgroup matrices of a `dot`        |
| `Recomputed()`                         | `recomputed`                 | nowhere: a pure expression, evaluated where  |
|                                        |                              | an element is read                           |
| `InDevice()`                           | `in_device`                  | device memory: a load read where needed      |
| `Channel()`                            | `channel`                    | threadgroup memory: a role's result          |
| `Shared()`                             | `shared`                     | threadgroup scratch, row-major: any thread   |
|                                        |                              | reads any element (a `convert_layout`'s      |
|                                        |                              | result, for the statement reading it)        |

The *group* of a layout is the threads running the region that computes it: the whole program, or the
simdgroups `first_sg ..` of a `simdgroup_role`. `Blocked` is CuTe's thread-value layout `(T, (V, R)) : (V, (1,
T*V))` over that group (`metile.rewrite.distribute.Blocked` evaluates it); `Fragments` arranges the group's
simdgroups over the product's 8x8 pieces (`metile.rewrite.distribute.MmaGeometry`). Scalars have no layout: every
thread holds the program's scalars.

`Shared` is the layout no named tile has: it is where a `metile.ir.tile.ConvertLayout` node moves a tile that a
statement reads at elements other threads hold (`insert_conversions`).
"""

from __future__ import annotations

import attrs


@attrs.frozen
class TileLayout:
    """The base of the layouts of named tiles (see the module docstring)."""

    def text(self) -> str:
        raise NotImplementedError


@attrs.frozen
class Blocked(TileLayout):
    """In registers: thread `t` of a group of `threads` threads (from simdgroup `first_sg`) holds runs of `vec`
    consecutive elements, the runs of consecutive threads consecutive."""

    threads: int
    vec: int = 1
    first_sg: int = 0

    def text(self) -> str:
        return f"blocked<{self.threads}, {self.vec}>" + (f" @ sg {self.first_sg}" if self.first_sg else "")


@attrs.frozen
class Fragments(TileLayout):
    """In simdgroup matrices: the result of a `dot`, its 8x8 pieces arranged over `sg_m x sg_n` simdgroups from
    `first_sg` (with `split` slices of k and `replicas` copies, `metile.rewrite.distribute.MmaGeometry`)."""

    sg_m: int
    sg_n: int
    first_sg: int = 0
    split: int = 1
    replicas: int = 1

    def text(self) -> str:
        extra = "".join(f", {k} {v}" for k, v in (("split", self.split), ("replicas", self.replicas)) if v != 1)
        return f"fragments<{self.sg_m}x{self.sg_n}{extra}>" + (f" @ sg {self.first_sg}" if self.first_sg else "")


@attrs.frozen
class Recomputed(TileLayout):
    """Nowhere: a pure expression, evaluated wherever one of its elements is read."""

    def text(self) -> str:
        return "recomputed"


@attrs.frozen
class InDevice(TileLayout):
    """In device memory: a tile load left there and read where its elements are needed (a `dot` operand staged
    straight from memory)."""

    def text(self) -> str:
        return "in_device"


@attrs.frozen
class Channel(TileLayout):
    """In threadgroup memory: a result of a `simdgroup_role` block, written by the role and read after its
    barrier."""

    def text(self) -> str:
        return "channel"


@attrs.frozen
class Shared(TileLayout):
    """In threadgroup scratch memory, row-major: every thread of the group reads any element. The destination of a
    `convert_layout`, written by the threads holding the tile and read back after a barrier."""

    def text(self) -> str:
        return "shared"


__all__ = ["Blocked", "Channel", "Fragments", "InDevice", "Recomputed", "Shared", "TileLayout"]
