"""The verifier's checks of the layouts a kernel's schedule records for its named tiles (`metile.ir.layouts`).

Each entry must name a tile the kernel binds, in a layout that can hold it where it is bound:
- `Blocked`: a positive thread count of whole simdgroups (or one group smaller than a simdgroup), a run width of
  1, 2 or 4, within the launch plan's threads when the kernel has a plan;
- `Fragments`: a 2-D f32 tile whose sides are multiples of 8, the arrangement dividing its 8x8 pieces, and its
  simdgroups (arrangement x slices of k x replicas, from its first) within the launch plan's;
- `Recomputed` and `InDevice`: the variable of a `Let` (of a `Load`, for `InDevice`);
- `Channel`: a result of a `simdgroup_role` block;
- `Shared`: never a named tile's: it is where a `convert_layout` moves a tile, whose source layout must be the one
  the schedule records for the tile it converts (when that is a named tile).
"""

from __future__ import annotations

from collections.abc import Iterator

from metile.ir.layouts import Blocked, Channel, Fragments, InDevice, Recomputed, Shared, TileLayout
from metile.ir.node import Node, walk
from metile.ir.stmts import For, If, Kernel, Let, While
from metile.ir.tile import ConvertLayout, SimdgroupRole
from metile.ir.types import DType, PtrType, TileType
from metile.ir.values import Load, Var


def bindings(k: Kernel) -> dict[str, tuple[str, Node, Var]]:
    """Per variable the kernel binds: `(how, binding statement, variable)`, `how` one of `let`, `carried`,
    `result`, `role_result`."""
    out: dict[str, tuple[str, Node, Var]] = {}
    for n in walk(k):
        match n:
            case Let(var, _):
                out[var.name] = ("let", n, var)
            case For() | While():
                for v in n.carried:
                    out[v.name] = ("carried", n, v)
                for v in n.results:
                    out[v.name] = ("result", n, v)
            case If():
                for v in n.results:
                    out[v.name] = ("result", n, v)
            case SimdgroupRole():
                for v in n.results:
                    out[v.name] = ("role_result", n, v)
    return out


def layout_problems(k: Kernel) -> Iterator[tuple[str, Node]]:
    """`(message, node)` for each entry of `k.schedule.layouts` that breaks the rules of the module docstring."""
    layouts = k.schedule.layouts
    if not layouts:
        return
    bound = bindings(k)
    for name, layout in layouts.items():
        found = bound.get(name)
        if found is None:
            yield f"schedule: a layout for %{name}, which the kernel does not bind", k
            continue
        how, stmt, var = found
        t = var.type
        if not isinstance(layout, TileLayout):
            yield f"schedule: the layout of %{name} is {layout!r}, not a TileLayout", stmt
        elif not (isinstance(t, (TileType, PtrType)) and t.shape):
            yield f"schedule: %{name} is not a tile ({t}) and has no layout", stmt
        else:
            problem = _problem(layout, how, stmt, t, k)
            if problem:
                yield f"schedule: %{name} cannot be {layout.text()}: {problem}", stmt
    for n in walk(k):
        if isinstance(n, ConvertLayout) and isinstance(n.x, Var) and layouts.get(n.x.name) != n.src:
            held = layouts.get(n.x.name)
            yield (f"convert_layout: %{n.x.name} is {held.text() if held is not None else 'not laid out'}, "
                   f"not {n.src.text()}"), n


def _problem(layout: TileLayout, how: str, stmt: Node, t: TileType | PtrType, k: Kernel) -> str | None:
    match layout:
        case Blocked(threads, vec, first_sg):
            whole = threads > 0 and (threads % 32 == 0 or first_sg == 0)
            if not (isinstance(threads, int) and whole and vec in (1, 2, 4) and first_sg >= 0):
                return "a blocked layout holds whole simdgroups, runs of 1, 2 or 4 and a first simdgroup >= 0"
            if k.plan is not None and threads + 32 * first_sg > k.plan.threads:
                return f"the program runs {k.plan.threads} threads"
        case Fragments(sg_m, sg_n, first_sg, split, replicas):
            if not isinstance(t, TileType) or len(t.shape) != 2 or t.dtype is not DType.F32 or t.shape[0] % 8 \
                    or t.shape[1] % 8:
                return "simdgroup matrices hold f32 tiles of two dimensions, multiples of 8"
            if min(sg_m, sg_n, split, replicas) < 1 or first_sg < 0:
                return "the arrangement, split and replicas are positive"
            if t.shape[0] % (8 * sg_m) or t.shape[1] % (8 * sg_n):
                return f"{sg_m}x{sg_n} simdgroups do not divide its 8x8 pieces"
            used = sg_m * sg_n * split * replicas
            if k.plan is not None and first_sg + used > k.plan.simdgroups:
                return (f"{sg_m}x{sg_n} simdgroups, {split} slice(s) of k and {replicas} replica(s) from simdgroup "
                        f"{first_sg} take {used} simdgroups, and the program runs {k.plan.simdgroups}")
        case Recomputed():
            if how != "let":
                return "only a Let's value is recomputed where it is read"
        case InDevice():
            if how != "let" or not isinstance(stmt.value, Load):
                return "only a Let of a load stays in device memory"
        case Channel():
            if how != "role_result":
                return "only a simdgroup_role result is handed over in threadgroup memory"
        case Shared():
            return "only a convert_layout's result is in shared scratch, for the statement reading it"
        case _:
            return "an unknown layout"
    return None


__all__ = ["bindings", "layout_problems"]
