"""A `dot` result stored lane by lane from its pieces, by rows and columns (`store_by_lines`, for
`mma_use.fragment_store`).

Through a pointer grid with unit column stride that any thread can compute, each lane addresses its elements from a
pointer to the first element of each row of pieces it holds (the first computed from the grid, the others a
multiple of the row stride past it), and the terms of the store's mask that read only the row or only the column (an
edge tile's bounds checks: `split_mask`, `line_axes`) are computed once per row and once per column; only terms
reading both, or tiles that threads hold, and values other than the result itself, are read element by element.
"""

from __future__ import annotations

from metile.ir.metal import Builtin, Extract
from metile.ir.node import Node, children, map_children
from metile.ir.ops import BinOp
from metile.ir.stmts import For
from metile.ir.tile import Arange, Broadcast, ExpandDims, Full, NumPrograms, ProgramId, Reshape
from metile.ir.types import DType, TileType
from metile.ir.values import AddPtr, Binary, Cast, Compare, Const, Param, Unary, Value, Var, Where
from metile.rewrite import metal_ops as mo
from metile.rewrite.layouts import ROLL_SLOTS
from metile.rewrite.lower import mma as MM
from metile.rewrite.lower import mma_use as MU
from metile.rewrite.lower import statements as S
from metile.rewrite.lower import values as V
from metile.rewrite.lower.state import Block, Lazy, Mma, Pt, Scalar


def store_by_lines(blk: Block, cls, rep: Mma, ptr: Value, value: Value, mask: Value | None) -> bool:
    """`fragment_store` where `ptr` has unit column stride, is the same on every thread and can be computed at any
    element (`readable_anywhere`): each lane's elements are addressed from the pointer to the first element of each
    row it holds, and the parts of `mask` that depend only on the row or only on the column (the bounds checks of
    an edge tile) are evaluated once for all rows and once for all columns (`at_lines`), the rest element by
    element; the values are the matrices' elements where `value` is the held result. False, having emitted
    nothing, where `ptr` is not of that form."""
    found = V.strides_of(blk, ptr)
    if found is None or found[1] != 1 or S.is_varying(blk, ptr):
        return False
    # one walk of the pointer and the mask, whose index arithmetic they share, where both can be read anywhere (an
    # edge tile's bounds checks): the mask's terms are then not walked again (`split_mask`)
    every = mask is not None and readable_anywhere(blk, ptr, mask)
    if not every and not readable_anywhere(blk, ptr):
        return False
    geom, shape = rep.geom, ptr.type.shape
    row = found[0]
    ld = mo.const(row) if isinstance(row, int) else mo.mul(V.scalar(blk, row[1]), mo.const(row[0]))
    by_row, by_col, mixed = split_mask(blk, mask, every)
    held = MU.held_mma(blk, value)
    direct = held is not None and held.geom == geom
    if direct and not mixed and 2 * geom.pieces >= ROLL_SLOTS:
        rolled_by_lines(blk, cls, held, ptr, ld, by_row, by_col)
        return True
    rows, cols = coords = MU.piece_coords(blk, geom)
    points = None if direct and not mixed else MU.fragment_points(blk, geom, shape, coords)
    zero, lines = mo.const(0), []
    for i, r in enumerate(rows):   # column 0 of each row: ptr[r, c] is ptr[r, 0] + c, and rows are 8 * i apart
        at = (V.at(blk, ptr, Pt(shape, mo.mul(r, mo.const(shape[1])), None, (r, zero))) if i == 0 else
              AddPtr(lines[0], mo.mul(mo.const(8 * i), ld)))
        lines.append(blk.let(at, "line"))
    row_ok = at_lines(blk, by_row, shape, 0, rows)
    col_at = [ce for c in cols for ce in (c, mo.add(c, mo.const(1)))]
    col_ok = at_lines(blk, by_col, shape, 1, col_at)
    for p in range(geom.pieces):
        i, j = divmod(p, geom.per_n)
        for e in (0, 1):
            pt = points[p][e] if points is not None else None
            x = Extract(held.mats[p], e) if direct else V.at(blk, value, pt)
            m = mo.both(row_ok[i], col_ok[2 * j + e])
            if mixed:
                m = mo.all_of([m, *(V.at(blk, t, pt) for t in mixed)])
            blk.emit(cls(AddPtr(lines[i], col_at[2 * j + e]), x, m, loc=blk.loc))
    return True


def rolled_by_lines(blk: Block, cls, rep: Mma, ptr: Value, ld: Value, by_row: Value | None,
                    by_col: Value | None) -> None:
    """`store_by_lines` of the held result `rep` itself, its row and column bounds split as `split_mask` splits them,
    as one run-time loop over this simdgroup's pieces (`for (p = 0; p < pieces; ++p)`): piece `p` is in row
    `p / per_n` and column `p % per_n` of the pieces, and its line, its row's and its two columns' bounds are computed
    from `p`. The matrices, which no run-time index can address, are the loop's carried values, rotated by one each
    iteration, so that piece `p` is the first of them in iteration `p` (the loop ends with them where they started).
    The Metal compiler unrolls the constant trip count again, the rotation becoming a renaming."""
    geom, shape, zero = rep.geom, ptr.type.shape, mo.const(0)
    sm, sn = MM.simdgroup_coords(blk, geom)
    row, col = MU.lane_coords()
    row0, col0 = blk.let(row, "fr"), blk.let(col, "fc")
    first = mo.add(sm, row0)
    line0 = blk.let(V.at(blk, ptr, Pt(shape, mo.mul(first, mo.const(shape[1])), None, (first, zero))), "line")
    p = Var(blk.fresh("p"), TileType(DType.I32))
    frags = blk.fresh_vars("frag", rep.mats)
    inner = blk.body()
    down = mo.mul(mo.div(p, geom.per_n), mo.const(8))   # the piece's first row past the simdgroup's first
    r = mo.add(sm, mo.add(row0, down))
    c = mo.add(sn, mo.add(col0, mo.mul(mo.mod(p, geom.per_n), mo.const(8))))
    line = inner.let(AddPtr(line0, mo.mul(down, ld)), "line")
    (row_ok,) = at_lines(inner, by_row, shape, 0, [r])
    cols = [c, mo.add(c, mo.const(1))]
    col_ok = at_lines(inner, by_col, shape, 1, cols)
    for e in (0, 1):
        inner.emit(cls(AddPtr(line, cols[e]), Extract(frags[0], e), mo.both(row_ok, col_ok[e]), loc=inner.loc))
    blk.emit(For(p, zero, mo.const(len(frags)), mo.const(1), frags, rep.mats, inner.out, frags[1:] + frags[:1],
                 blk.fresh_vars("frag", frags), loc=blk.loc))


def at_lines(blk: Block, v: Value | None, shape: tuple[int, ...], axis: int, coords: list[Value]) -> list:
    """The 2-D tile `v` (computed from scalars by pure expressions, the same along the other axis) at each of
    `coords` along `axis`: evaluated once, at a name standing for the coordinate, which is then replaced by each
    (no element of `v` is walked again)."""
    if v is None:
        return [None] * len(coords)
    return fill(at_hole(blk, v, shape, axis), HOLE, coords)


def at_hole(blk: Block, v: Value, shape: tuple[int, ...], axis: int) -> Value:
    """`v`, a 2-D tile of `shape` whose elements differ only along `axis`, at `hole_point(shape, axis)`. Where `v`
    is (a name of) a broadcast of a line expanded to 2-D (`x[:, None]`, `x[None, :]`: an edge tile's bounds checks),
    the line `x` is read at `HOLE` itself, as `V.at` would read it (a broadcast and an expansion forward the point
    unmemoised), without the 2-D point nor its projection."""
    x = v
    while x.__class__ is Var and (rep := blk.lookup(x.name)).__class__ is Lazy:
        x = rep.expr
    if x.__class__ is Broadcast and x.x.__class__ is ExpandDims and len(shape) == 2 and shape[axis] > 1 \
            and x.x.type.shape == ((shape[0], 1) if axis == 0 else (1, shape[1])):
        line = x.x.x
        if line.type.shape == (shape[axis],):
            return V.at(blk, line, Pt(line.type.shape, HOLE))
    return V.at(blk, v, hole_point(shape, axis))


def hole_point(shape: tuple[int, ...], axis: int) -> Pt:
    """The point of a 2-D tile of `shape` at the coordinate `HOLE` along `axis` and 0 along the other: where a tile
    whose elements differ only along `axis` is evaluated once, to be copied at coordinates (`fill`)."""
    zero = mo.const(0)
    return Pt(shape, mo.mul(HOLE, mo.const(shape[1])) if axis == 0 else HOLE, None,
              (HOLE, zero) if axis == 0 else (zero, HOLE))


def fill(v: Value, hole: Var, values: list[Value], holds: dict[int, bool] | None = None) -> list[Value]:
    """`v` with the name `hole` replaced by each of `values`; only the nodes that hold `hole` are rebuilt (found
    once, for all the values: `hole_path`, then `fill_path`). A sum or product of 32-bit integers that the
    replacement leaves with a constant operand is folded (`metal_ops.add`, `mul`), as evaluating `v` at that value
    would have folded it. `holds`, when given (empty), is left saying by node identity whether each node of `v` met
    holds `hole` (what `staged_runs.on_interval` asks of the same `v`)."""
    return fill_path(v, hole, hole_path(v, hole, {} if holds is None else holds), values)


def hole_path(v: Value, hole: Var, holds: dict[int, bool]) -> list[Node] | None:
    """The nodes of `v` holding the name `hole`, each after those it holds (what `fill_path` rebuilds); None when `v`
    does not hold it. `holds` is left saying by node identity whether each node met holds `hole`."""
    holds[id(hole)] = True
    path: list[Node] = []

    def has(n: Node) -> bool:   # `n` (not met yet) holds `hole`; a child met already, or a leaf, is not entered
        found = False
        for c in (n.lhs, n.rhs) if n.__class__ is Binary or n.__class__ is Compare else children(n):
            h = holds.get(id(c))
            if h is None:
                h = holds[id(c)] = False if c.__class__ in _LEAVES else has(c)
            found = h or found
        holds[id(n)] = found
        if found:
            path.append(n)
        return found

    try:
        return None if v is not hole and (v.__class__ in _LEAVES or not has(v)) else path
    finally:
        has = None   # it calls itself through its closure: a cycle that would wait for the collector


def fill_path(v: Value, hole: Var, path: list[Node] | None, values: list[Value]) -> list[Value]:
    """`v` with `hole` replaced by each of `values`, given the nodes holding it (`hole_path`; None: none do)."""
    if path is None:
        return [v] * len(values)
    out = []
    for value in values:
        done: dict[int, Node] = {id(hole): value}
        get = done.get
        for n in path:
            cls = n.__class__
            if cls is Binary:
                a, b = get(id(n.lhs), n.lhs), get(id(n.rhs), n.rhs)
                if n.op in FOLDED and (a.__class__ is Const or b.__class__ is Const) and n.type.dtype is DType.I32:
                    done[id(n)] = FOLDED[n.op](a, b)
                else:
                    done[id(n)] = Binary(n.op, a, b, loc=n.loc)
            elif cls is Compare:
                done[id(n)] = Compare(n.op, get(id(n.lhs), n.lhs), get(id(n.rhs), n.rhs), loc=n.loc)
            else:
                done[id(n)] = map_children(lambda c, get=get: get(id(c), c), n)
        out.append(done[id(v)])
    return out


HOLE = Var("at hole", TileType(DType.I32))
"""The name standing for a coordinate or an offset in a value evaluated once to be copied at several (`fill`): never
emitted, as every copy has it replaced, and named as no variable can be (its copies are made by identity). One name
for every such value: an element memoised at it is the same element wherever it is asked for there."""

FOLDED = {BinOp.ADD: mo.add, BinOp.MUL: mo.mul}
"""The operators `fill` folds where a replacement leaves a constant operand (of 32-bit integers)."""
_LEAVES = frozenset({Const, Param, Var, Builtin})   # values without children (`hole`, a `Var`, is met first)


def split_mask(blk: Block, mask: Value | None,
               anywhere: bool = False) -> tuple[Value | None, Value | None, list[Value]]:
    """The 2-D bool tile `mask` as the conjunction of three parts: one that depends only on the row, one only on the
    column (each None for "true"), and a list of terms that may depend on both or read tiles held by threads, read
    element by element. Its terms are found through `&` and names of pure expressions (`line_axes` says what each
    depends on). `anywhere`: `mask` is known to be `readable_anywhere`, and so is each of its terms (the nodes its
    walk reaches are among those of the mask's), which are then not walked again."""
    by = {0: None, 1: None}
    mixed: list[Value] = []
    todo = [] if mask is None else [mask]
    while todo:
        v = todo.pop()
        if isinstance(v, Var) and isinstance(rep := blk.lookup(v.name), Lazy):
            todo.append(rep.expr)
            continue
        if isinstance(v, Binary) and v.op is BinOp.AND and v.type.dtype is DType.BOOL:
            todo += [v.rhs, v.lhs]
            continue
        axes = line_axes(blk, v)
        if axes is None or len(axes) > 1 or not (anywhere or readable_anywhere(blk, v)):
            mixed.append(v)
        else:
            axis = 0 if not axes else next(iter(axes))
            by[axis] = v if by[axis] is None else Binary(BinOp.AND, by[axis], v)
    return by[0], by[1], mixed


def line_axes(blk: Block, v: Value) -> frozenset[int] | None:
    """The axes along which the elements of the 2-D tile `v` may differ, as far as they are seen: a broadcast does not
    differ along the axes it broadcasts, element-wise arithmetic differs where its operands do, a scalar or a
    constant tile nowhere; names followed to pure expressions. None for anything else (read element by element)."""
    match v:
        case Const() | Param() | Full():
            return frozenset()
        case Var(name):
            rep = blk.lookup(name)
            if isinstance(rep, Scalar):
                return frozenset()
            return line_axes(blk, rep.expr) if isinstance(rep, Lazy) else None
        case Broadcast(x, shape):
            xs = (1,) * (len(shape) - len(x.type.shape)) + tuple(x.type.shape)
            return frozenset(d for d, n in enumerate(xs) if n != 1)
        case Binary() | Compare() | Unary() | Where() | Cast():
            out: frozenset[int] = frozenset()
            for c in children(v):
                if not c.type.shape:
                    continue
                if c.type.shape != v.type.shape or (axes := line_axes(blk, c)) is None:
                    return None
                out |= axes
            return out
    return None


_ANYWHERE = frozenset({Const, Param, Full, Arange, Broadcast, ExpandDims, Reshape, Binary, Compare, Unary, Where, Cast,
                       AddPtr, ProgramId, NumPrograms})


def readable_anywhere(blk: Block, v: Value, *more: Value) -> bool:
    """Whether the tile `v` is computed from scalars by pure tile expressions alone (names followed to them), so that
    any thread can compute any of its elements, at a point without a register key. With `more`: whether each of
    `v` and `more` is (one walk, the nodes they share entered once)."""
    todo, seen = [v, *more], set()
    push, note = todo.append, seen.add
    while todo:
        x = todo.pop()
        if id(x) in seen:
            continue
        note(id(x))
        cls = x.__class__
        if cls is Binary or cls is Compare:   # the commonest, their operands read at once (both tiles of its shape)
            push(x.lhs)
            push(x.rhs)
        elif cls is Broadcast or cls is ExpandDims:
            if x.x.type.shape:   # a scalar is read anywhere: not entered
                push(x.x)
        elif not x.type.shape:
            continue
        elif cls is Var:
            rep = blk.lookup(x.name)
            if rep.__class__ is Lazy:
                push(rep.expr)
            elif rep.__class__ is not Scalar:
                return False
        elif cls in _ANYWHERE:
            todo += children(x)
        else:
            return False
    return True


__all__ = ["FOLDED", "HOLE", "at_hole", "at_lines", "fill", "fill_path", "hole_path", "hole_point", "line_axes",
           "readable_anywhere", "rolled_by_lines", "split_mask", "store_by_lines"]
