"""The runs of a tile staged from device memory (`memory.stage_in_vectors`): where each thread's runs lie, and the
bounds tests of a run or of the whole tile, made from the ends of its ranges.

Placement. A thread's runs of a `[rows, cols]` tile are `threads * width` elements apart. When that is a whole
number `down` of rows, each run after its first lies `down` rows lower in the same column (also where a
simdgroup's rows are spaced against bank conflicts, `spaced`, when its groups of rows divide evenly), so the first
run's row and column are computed once (`Placement.origin`) and each run adds `down` rows to them. Indices of
threads and runs are never negative: their divisions and remainders by powers of two are shifts and masks (a
signed division is not one shift).

Bounds. A mask of bounds checks (`0 <= row < rows`, `col < cols - k`, ...) read along one axis is true on an
interval of that axis: where it holds at two indices it holds at every index between them. Such a mask is then
tested over a run of elements, or over the whole tile, at the two ends alone (`ends`, `tile_inside`), instead of at
each element. `on_interval` decides it from the expression's form: a conjunction of terms that do not read the
index and of comparisons of a monotone function of the index (the index plus or minus terms that do not read it,
widened to a larger integer type) with a term that does not. The index arithmetic is taken not to overflow, as the
addresses of the elements between the ends already take it (the emitted code computes both in the same integer
type, where an overflow is undefined).
"""

from __future__ import annotations

import functools

import attrs

from metile.ir.errors import Loc
from metile.ir.node import children
from metile.ir.ops import BinOp, CmpOp
from metile.ir.types import DType
from metile.ir.values import Binary, Cast, Compare, Const, Param, Value, Var
from metile.rewrite import metal_ops as mo
from metile.rewrite.distribute import Blocked
from metile.rewrite.lower import lines as LN
from metile.rewrite.lower import values as V
from metile.rewrite.lower.state import Block, Lazy, Pt

LANES = 32   # the lanes of a simdgroup, whose runs `spaced` places together


@attrs.frozen
class Placement:
    """Where the runs of `width` elements (`layout.vec`) of a `[rows, cols]` tile staged by `threads` threads lie,
    with a simdgroup's rows `spacing` apart (`staging.staging_row_spacing`)."""

    layout: Blocked
    shape: tuple[int, ...]
    spacing: int
    threads: int

    @property
    def down(self) -> int | None:
        """The rows between a thread's consecutive runs, when every run lies that many rows below the one before
        in the same column; None otherwise."""
        width, threads = self.layout.vec, self.threads
        if self.layout.has_padding or threads * width % self.shape[1]:
            return None
        if self.spacing > 1 and (threads % LANES or threads // LANES % self.spacing):
            return None
        return threads * width // self.shape[1]

    def origin(self, blk: Block, loc: Loc | None) -> tuple[Value, Value] | None:
        """The row and column of this thread's first run, bound to names in `blk` (located at `loc`), where `down`
        places the others from it; else None."""
        if self.down is None:
            return None
        r, c = _first_run(self, blk.group.tid, 0)
        return (r if r.__class__ in _LEAVES else blk.let(r, "row", loc),
                c if c.__class__ in _LEAVES else blk.let(c, "col", loc))

    def start(self, blk: Block, first: int | Value, origin: tuple[Value, Value] | None,
              loc: Loc | None) -> tuple[Value, Value]:
        """The row and column of this thread's run at slot `first` (an int, or a run-time slot): `down` rows per
        sweep below `origin`, when given; else from the run's index in the tile. Names it binds are at `loc`."""
        width, fixed = self.layout.vec, isinstance(first, int)
        sweep = first // width if fixed else shr(first, width)
        if origin is not None:
            r0, c0 = origin
            if fixed:
                return mo.add(r0, mo.const(sweep * self.down)), c0
            return blk.let(mo.add(r0, blk.let(times(sweep, self.down), "down", loc)), "row", loc), c0
        if fixed:
            return _first_run(self, blk.group.tid, first)
        return self.place(blk.group.tid, first, sweep)

    def place(self, tid: Value, first: int | Value, sweep: int | Value) -> tuple[Value, Value]:
        """`start` of thread `tid`'s run at slot `first` (sweep `sweep`) from the run's index in the tile."""
        width, fixed = self.layout.vec, isinstance(first, int)
        # runs of consecutive threads are consecutive (`layout`)
        run = mo.add(tid, mo.const(sweep * self.threads) if fixed else times(sweep, self.threads))
        if self.layout.padded(first) if fixed else self.layout.has_padding:
            run = mo.mod(run, self.layout.size // width)   # a padding slot reads a real element (`V.slot_pt`)
        per_row = self.shape[1] // width
        if self.spacing > 1:   # a simdgroup's rows `spacing` apart, against bank conflicts
            return spaced(run, per_row, self.spacing, width)
        return shr(run, per_row), times(low(run, per_row), width)


@functools.lru_cache(maxsize=256)
def _first_run(place: Placement, tid: Value, first: int) -> tuple[Value, Value]:
    """The row and column of thread `tid`'s run at the fixed slot `first` (`Placement.place`): a pure function of the
    placement and a builtin's node, built once per process."""
    return place.place(tid, first, first // place.layout.vec)


_LEAVES = (Const, Param, Var)


def spaced(run: Value, per_row: int, spacing: int, width: int, lanes: int = LANES) -> tuple[Value, Value]:
    """The row and column of the first element of run `run` when the runs lane `l` of a simdgroup writes (`lanes`
    consecutive runs, `lanes / per_row` rows' worth) go to rows `spacing` apart: group `q = run / lanes` takes rows
    `(q / spacing) * rows_per_group * spacing + q % spacing + i * spacing`, the lane's run `l % per_row` of its row.
    A bijection of the runs when the rows divide into such groups (`staging_row_spacing` checks)."""
    group = lanes // per_row
    lane, q = low(run, lanes), shr(run, lanes)
    row = mo.add(mo.add(times(shr(q, spacing), group * spacing), low(q, spacing)), times(shr(lane, per_row), spacing))
    return row, times(low(lane, per_row), width)


def _log2(n: int) -> int | None:
    return n.bit_length() - 1 if n > 1 and n & (n - 1) == 0 else None


def shr(x: Value, n: int) -> Value:
    """`x / n` for a non-negative 32-bit `x`: a shift where `n` is a power of two."""
    k = _log2(n)
    return mo.div(x, n) if k is None or x.__class__ is Const else Binary(BinOp.SHR, x, mo.const(k))


def low(x: Value, n: int) -> Value:
    """`x % n` for a non-negative 32-bit `x`: a mask where `n` is a power of two."""
    k = _log2(n)
    return mo.mod(x, n) if k is None or x.__class__ is Const else Binary(BinOp.AND, x, mo.const(n - 1))


def times(x: Value, n: int) -> Value:
    """`x * n` for a non-negative 32-bit `x`: a shift where `n` is a power of two."""
    k = _log2(n)
    return mo.mul(x, mo.const(n)) if k is None or x.__class__ is Const else Binary(BinOp.SHL, x, mo.const(k))


_ORDERED = frozenset({CmpOp.LT, CmpOp.LE, CmpOp.GT, CmpOp.GE, CmpOp.EQ})   # NE is true off an interval


def on_interval(v: Value, hole: Var, reads: dict[int, bool] | None = None) -> bool:
    """Whether the bool expression `v` of the integer name `hole` is true on an interval of `hole`'s values, as
    its form shows (the module docstring). `reads`: what is known already of which nodes of `v` read `hole`, by
    node identity (as `lines.fill` of `v` leaves it), added to as the walk finds more."""
    return _interval(v, hole, {} if reads is None else reads)


def _reads(n: Value, hole: Var, reads: dict[int, bool]) -> bool:
    """Whether `n` reads `hole` (memoised in `reads` by node identity; leaves other than `hole` are not entered)."""
    if n is hole:
        return True
    cls = n.__class__
    if cls in _LEAVES:
        return False
    found = reads.get(id(n))
    if found is None:
        found = False
        for c in (n.lhs, n.rhs) if cls is Binary or cls is Compare else children(n):
            if _reads(c, hole, reads):
                found = True
                break
        reads[id(n)] = found
    return found


def _interval(v: Value, hole: Var, reads: dict[int, bool]) -> bool:
    if not _reads(v, hole, reads):
        return True   # the same at every index
    match v:
        case Binary(BinOp.AND, a, b) if v.type.dtype is DType.BOOL:
            return _interval(a, hole, reads) and _interval(b, hole, reads)
        case Compare(op, a, b) if op in _ORDERED:
            ra, rb = _reads(a, hole, reads), _reads(b, hole, reads)
            return ra != rb and _monotone(a if ra else b, hole, reads)
    return False


def _monotone(v: Value, hole: Var, reads: dict[int, bool]) -> bool:
    """Whether the integer expression `v` only rises, or only falls, as `hole` does (`v` reads `hole`)."""
    while v is not hole:
        match v:
            case Binary(BinOp.ADD | BinOp.SUB, a, b) if v.type.dtype.is_int:
                ra, rb = _reads(a, hole, reads), _reads(b, hole, reads)
                if ra == rb:
                    return False
                v = a if ra else b
            case Cast(x, dtype) if (dtype.is_int and x.type.dtype.is_int and dtype.is_signed == x.type.dtype.is_signed
                                    and dtype.itemsize >= x.type.dtype.itemsize):
                v = x
            case _:
                return False
    return True


def ends(v: Value, hole: Var, values: list[Value]) -> tuple[list[Value], list[Value]]:
    """`v` at each of `values` of `hole` (`lines.fill`), and the terms of the test that it holds at all of them: the
    first and the last alone where `v` is true on an interval of `hole` and `values` rise one by one, else each."""
    reads: dict[int, bool] = {}
    at = LN.fill(v, hole, values, reads)
    return at, (at[:1] + at[-1:] if len(at) > 2 and on_interval(v, hole, reads) else at)


class Line:
    """A 2-D tile any thread can compute (`lines.readable_anywhere`) whose elements differ only along `axis`,
    evaluated once at a name standing for the coordinate along it (`hole`, never emitted): `at` copies it at any
    coordinates (`lines.fill_path`, the nodes holding the name found once for all copies), and `interval` says,
    found once, whether it is true on an interval of that coordinate (`on_interval`)."""

    __slots__ = ("_interval", "_plain", "expr", "hole", "holds", "path")

    def __init__(self, blk: Block, v: Value, shape: tuple[int, ...], axis: int):
        hole = self.hole = LN.HOLE
        self.expr, self.holds = LN.at_hole(blk, v, shape, axis), {}
        self.path = LN.hole_path(self.expr, hole, self.holds)
        self._interval: bool | None = None
        self._plain: bool | None = None

    def at(self, values: list[Value]) -> list[Value]:
        return LN.fill_path(self.expr, self.hole, self.path, values)

    @property
    def interval(self) -> bool:
        found = self._interval
        if found is None:
            found = self._interval = on_interval(self.expr, self.hole, self.holds)
        return found

    def at_index(self, value: Value) -> Value | None:
        """The copy at `value`, a coordinate that is not a constant, where it is the value evaluating the tile there
        gives (None elsewhere): where no sum or product of 32-bit integers holding the name has a constant operand,
        `fill` folds nothing, and the copy is the tile's expression at `value`, node for node."""
        plain = self._plain
        if plain is None:
            plain = self._plain = not any(n.__class__ is Binary and n.op in LN.FOLDED and n.type.dtype is DType.I32
                                          and (n.lhs.__class__ is Const or n.rhs.__class__ is Const)
                                          for n in self.path or ())
        return self.at([value])[0] if plain and value.__class__ is not Const else None


def line_of(blk: Block, v: Value, shape: tuple[int, ...], axis: int, lines: dict, keep: bool = True) -> Line:
    """`Line(blk, v, shape, axis)`, found in `lines` (by tile and axis) where it was made already, else made, and
    kept there when `keep`. The caller keeps `lines` for the tile it stages, so that its runs (`along_run`) copy
    what `tile_inside` evaluated before them; a line made by a run is not kept, as evaluating it may bind names
    (a scalar read from a role's channel) in that run's region alone."""
    key = (id(v), axis)
    found = lines.get(key)
    if found is None or found[0] is not v:
        found = (v, Line(blk, v, shape, axis))
        if keep:
            lines[key] = found
    return found[1]


def tile_inside(blk: Block, mask: Value, shape: tuple[int, ...], anywhere: bool = False,
                lines: dict | None = None) -> Value | None:
    """A test, the same for every element, that the 2-D bool tile `mask` (one any thread can compute,
    `lines.readable_anywhere`) holds at every element (a `Const` true when it always does); None where it cannot be
    had from the ends of the rows and columns: `mask` is not the conjunction of a part that reads only the row and
    one that reads only the column (as `lines.split_mask` splits it), each true on an interval of its axis.
    `anywhere`: `mask` is known to be `readable_anywhere` (its terms are then not walked again to find it). Each
    part is evaluated once (`Line`, kept in `lines` when given)."""
    rows, cols, mixed = LN.split_mask(blk, mask, anywhere)
    if mixed:
        return None
    lines = {} if lines is None else lines
    conds = []
    for axis, part in enumerate((rows, cols)):
        if part is None:
            continue
        line = line_of(blk, part, shape, axis, lines)
        found = line.at([mo.const(0), mo.const(shape[axis] - 1)])
        if not line.interval:
            return None
        conds += found
    return mo.all_of(dict.fromkeys(conds)) or mo.const(True, DType.BOOL)


def along_run(blk: Block, v: Value, p0: Pt, r: Value, c: Value, width: int,
              anywhere: bool, lines: dict | None = None) -> tuple[list[Value], Value | None]:
    """The elements of the 2-D tile `v` at the `width` points of a run that starts at `p0` (row `r`, column `c`) and
    goes along the row, and their conjunction (for a mask: the test that the whole run is inside it). A tile any
    thread can compute (`anywhere`, as `lines.readable_anywhere` finds: a mask of bounds checks) is evaluated once,
    at a name standing for the offset along the run, which is then replaced by each offset (`lines.fill`), and
    where it is true on an interval of the offsets (`on_interval`), the conjunction tests the run's first
    and last elements alone; another tile is read element by element, and the conjunction tests each. A part that
    differs only along the row is copied from its `Line` (kept in `lines`, shared with `tile_inside` and the other
    runs), at the run's columns."""
    if not anywhere:   # the run's elements share a row: their coordinates are known without dividing their index
        at = [V.at(blk, v, Pt(p0.shape, mo.add(p0.flat, mo.const(j)), None, (r, mo.add(c, mo.const(j)))))
              for j in range(width)]
        return at, mo.all_of(dict.fromkeys(at))
    lines = {} if lines is None else lines
    while v.__class__ is Var and (rep := blk.lookup(v.name)).__class__ is Lazy:   # a name of a pure expression
        v = rep.expr
    cols = None   # the run's columns, where a part is copied from its line
    if v.__class__ is Binary and v.op is BinOp.AND and v.lhs.type.shape == v.rhs.type.shape == v.type.shape:
        # `rows_ok[:, None] & cols_ok[None, :]`: a side the same along the row is one value for the whole run, and
        # only the other is copied for each element (as `V.at` would build the conjunction at each of them)
        axes = [LN.line_axes(blk, x) for x in (v.lhs, v.rhs)]
        if any(1 not in (a or (1,)) for a in axes):
            pt, sides = None, []   # `pt`: the run's point at the offset `lines.HOLE`, made when first read
            for x, a in zip((v.lhs, v.rhs), axes):
                if 1 not in (a or (1,)):   # one value along the row: a copy of the tile's row line where it has one
                    line = lines.get((id(x), 0))
                    value = line[1].at_index(r) if line is not None and line[0] is x else None
                    if value is None:
                        value = V.at(blk, x, pt if pt is not None else p0)
                    sides.append(([value] * width, [value]))
                elif a == _ALONG_ROW:
                    line = line_of(blk, x, p0.shape, 1, lines, keep=False)
                    cols = cols or [mo.add(c, mo.const(j)) for j in range(width)]
                    at = line.at(cols)
                    sides.append((at, at[:1] + at[-1:] if width > 2 and line.interval else at))
                else:
                    if pt is None:
                        pt = _run_point(p0, r, c)
                    sides.append(ends(V.at(blk, x, pt), LN.HOLE, [mo.const(j) for j in range(width)]))
            (lhs, lt), (rhs, rt) = sides
            at = [Binary(BinOp.AND, a, b, loc=v.loc) for a, b in zip(lhs, rhs)]
            return at, mo.all_of(dict.fromkeys(lt + rt))
    at, test = ends(V.at(blk, v, _run_point(p0, r, c)), LN.HOLE, [mo.const(j) for j in range(width)])
    return at, mo.all_of(dict.fromkeys(test))


def _run_point(p0: Pt, r: Value, c: Value) -> Pt:
    """The point of a run starting at `p0` (row `r`, column `c`) at the offset `lines.HOLE` along it, the name
    standing for the offset in a value evaluated once and copied at each (`ends`)."""
    hole = LN.HOLE
    return Pt(p0.shape, mo.add(p0.flat, hole), None, (r, mo.add(c, hole)))


_ALONG_ROW = frozenset({1})


__all__ = ["LANES", "Line", "Placement", "along_run", "ends", "line_of", "low", "on_interval",
           "shr", "spaced", "tile_inside", "times"]
