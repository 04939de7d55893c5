"""`metile.tile_load` and `metile.tile_store`: a 2-D tile at (row offset, column offset) of a row-major matrix
of `stride` elements per row, clipped to bounds (given, or those of the array the pointer points into).

The addresses and the masks are element-wise arithmetic on the offsets, the stride and the bounds, which
`metile.frontend.semantic`'s operators type and broadcast. Where all of them are i32 scalars (traced, or Python
ints that i32 holds), which is nearly always, those rules have one answer: every operand is already i32, and
each shape is known from the tile's. The nodes they would build are then built directly (`_as_i32`, `_scalar`,
`_within`), the same nodes, without the general typing work per operator; any other operand goes through the
operators.
"""

from __future__ import annotations

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.builtins import _pointer, static_shape
from metile.frontend.errors import KernelTypeError, ShapeMismatchError
from metile.ir.errors import Loc
from metile.ir.ops import BinOp, CmpOp
from metile.ir.stmts import If, Store
from metile.ir.tile import Arange, Broadcast, ExpandDims, Full
from metile.ir.types import SCALAR_TYPES, DType, PtrType
from metile.ir.values import AddPtr, Binary, Compare, Const, Load, Param, SharedAlloc, Value, Var

_I32 = DType.I32
_I32_T, _BOOL_T = SCALAR_TYPES[_I32], SCALAR_TYPES[DType.BOOL]
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_ADD, _SUB, _MUL, _AND = BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.AND


def _as_i32(v, shape: tuple[int, ...], loc: Loc) -> Value | None:
    """The i32 scalar `v` (a traced one, or a Python int that i32 holds, not a bool) as an i32 value of `shape`, what
    `semantic.coerce(v, i32, shape)` builds; None when `v` is no i32 scalar."""
    if v.__class__ is int:
        if not _I32_MIN <= v <= _I32_MAX:
            return None
        v = Const(v, _I32, loc=loc)
        return Full(shape, v, loc=loc) if shape else v
    if not isinstance(v, Value) or v.type is not _I32_T:   # types are interned: one object per type
        return None
    if not shape:
        return v
    return Full(shape, v, loc=loc) if isinstance(v, Const) else Broadcast(v, shape, loc=loc)


def _scalar(name: str, a, b, loc: Loc):
    """`semantic.binary(name, a, b)` for `name` among add, sub and mul, built directly when `a` and `b` are i32
    scalars and one of them is traced (two Python ints are combined by Python, there)."""
    if a.__class__ is not int or b.__class__ is not int:
        x, y = _as_i32(a, (), loc), _as_i32(b, (), loc)
        if x is not None and y is not None:
            return Binary(sem.BINOPS[name], x, y, loc=loc)
    return sem.binary(name, a, b, loc)


def _both(a, b, loc: Loc):
    """`semantic.binary("and", a, b)`, built directly when `a` and `b` are traced bool scalars."""
    if isinstance(a, Value) and isinstance(b, Value) and a.type is _BOOL_T and b.type is _BOOL_T:
        return Binary(_AND, a, b, loc=loc)
    return sem.binary("and", a, b, loc)


def _within(i, extent, loc: Loc, zero: Const):
    """`0 <= i < extent` for a scalar `i` (`zero`: the i32 constant 0 at `loc`, one node shared by the tile's bounds),
    built directly when `i` is a traced i32 and `extent` an i32 scalar."""
    if isinstance(i, Value) and i.type is _I32_T and (e := _as_i32(extent, (), loc)) is not None:
        return _within_tile(i, e, zero, loc)
    return sem.binary("and", sem.compare("ge", i, 0, loc), sem.compare("lt", i, extent, loc), loc)


def _within_tile(i: Value, extent: Value, zeros: Value, loc: Loc) -> Value:
    """`0 <= i < extent` for an i32 value `i` (a scalar or an index tile), `extent` and `zeros` being i32 values of its
    shape (`_as_i32`)."""
    return Binary(_AND, Compare(CmpOp.GE, i, zeros, loc=loc), Compare(CmpOp.LT, i, extent, loc=loc), loc=loc)


def _outer(col: Value, row: Value, op: BinOp, rows: int, cols: int, loc: Loc) -> Value:
    """`col op row` of a `(rows, 1)` and a `(1, cols)` i32 or bool tile of one dtype, broadcast to `(rows, cols)`
    as `semantic.binary` broadcasts them."""
    if cols != 1:
        col = Broadcast(col, (rows, cols), loc=loc)
    if rows != 1:
        row = Broadcast(row, (rows, cols), loc=loc)
    return Binary(op, col, row, loc=loc)


def _tile_ptr(loc, ptr, row_offset, col_offset, stride, dims: tuple[int, int], what):
    """The address tile of `what`, a tile of `dims`, its row and column index tiles, and whether those are i32 tiles
    built directly (a scalar pointer, and i32 offsets and stride)."""
    p = _pointer(ptr, what, loc)
    rows, cols = dims
    if not p.type.shape and (ro := _as_i32(row_offset, (rows,), loc)) is not None \
            and (co := _as_i32(col_offset, (cols,), loc)) is not None \
            and (st := _as_i32(stride, (rows, 1), loc)) is not None:
        ar = Arange(0, rows, loc=loc)
        r = Binary(_ADD, ro, ar, loc=loc)
        c = Binary(_ADD, co, ar if cols == rows else Arange(0, cols, loc=loc), loc=loc)   # one node when equal
        scaled = Binary(_MUL, ExpandDims(r, 1, loc=loc), st, loc=loc)
        offs = _outer(scaled, ExpandDims(c, 0, loc=loc), _ADD, rows, cols, loc)
        return AddPtr(Broadcast(p, (rows, cols), loc=loc), offs, loc=loc), (rows, cols), r, c, True
    for x, name in ((row_offset, "row offset"), (col_offset, "column offset"), (stride, "row stride")):
        _int_scalar(x, f"{what}: the {name}", loc)
    r = sem.binary("add", row_offset, Arange(0, rows, loc=loc), loc)
    c = sem.binary("add", col_offset, Arange(0, cols, loc=loc), loc)
    offs = sem.binary("add", sem.binary("mul", ExpandDims(r, 1, loc=loc), stride, loc), ExpandDims(c, 0, loc=loc), loc)
    return sem.pointer_arith("add", p, offs, loc), (rows, cols), r, c, False


def array_bounds(tr, ptr: Value, stride, loc: Loc) -> tuple[Value, Value]:
    """The bounds a `tile_load` or `tile_store` without `bounds=` clips its tile to: the array `ptr` points into,
    seen from `ptr` as rows of `stride` elements, `((elements - offset) // stride, stride)` (meTile's GEMM is then
    right at every size). The array is the one bound to the pointer parameter `ptr` is derived from (its length a
    hidden parameter, `Tracer.length_param`), or a `metile.shared` array; a pointer of other origin is refused."""
    offset, p = None, ptr   # None: no offset (`elements - 0` is not built, for `fold_constants` to undo)
    while True:
        match p:
            case Param():   # the commonest pointer: a parameter's
                elements = tr.length_param(p)
                break
            case AddPtr(base, off) if off.type.shape == ():
                offset, p = off if offset is None else sem.binary("add", offset, off, loc), base
            case Var(name) if name in tr.pointers:
                p = tr.pointers[name]
            case SharedAlloc():
                elements = p.size
                break
            case _:
                raise KernelTypeError(
                    "a tile_load or tile_store without bounds= keeps its tile inside the array its pointer points "
                    "into, which metile cannot tell for this pointer (one carried by a loop or chosen by a runtime "
                    "branch): give bounds=(rows, cols)", loc)
    left = elements if offset is None else _scalar("sub", elements, offset, loc)
    if isinstance(stride, Value) and stride.type is _I32_T and not isinstance(stride, Const) \
            and (x := _as_i32(left, (), loc)) is not None:
        # `left // max(stride, 1)`: a traced divisor, which `binary` checks only when it is a constant
        return Binary(BinOp.FLOORDIV, x, Binary(BinOp.MAX, stride, Const(1, _I32, loc=loc), loc=loc),
                      loc=loc), stride
    return sem.binary("floordiv", left, sem.binary("max", stride, 1, loc), loc), stride


def _int_scalar(x, what: str, loc: Loc) -> None:
    t = sem.type_of(x, loc)
    if isinstance(t, PtrType) or t.shape or not t.dtype.is_int:
        raise KernelTypeError(f"{what} must be an integer scalar, not {t}", loc)


def _bounds(bounds, what: str, loc: Loc) -> tuple:
    """`(rows, cols)`, the extent of the matrix a bounded `tile_load`/`tile_store` may touch."""
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise KernelTypeError(f"{what}: bounds must be a pair (rows, cols) of integer scalars, not {bounds!r:.60}",
                              loc)
    for b, name in zip(bounds, ("rows", "cols")):
        _int_scalar(b, f"{what}: the bound on {name}", loc)
    return tuple(bounds)


def _tile_mask(r, c, rows, cols, dims: tuple[int, int], shape: tuple[int, ...], fast: bool, loc: Loc,
               zero: Const) -> Value:
    """Where the tile's element `(i, j)` is inside the bounds, `0 <= r[i] < rows and 0 <= c[j] < cols`, broadcast
    to `shape` (`fast`: `r` and `c` are the i32 index tiles of a `dims` tile that `_tile_ptr` built directly, whose
    addresses have that shape)."""
    if fast and (er := _as_i32(rows, (dims[0],), loc)) is not None \
            and (ec := _as_i32(cols, (dims[1],), loc)) is not None:
        rows_0 = Full((dims[0],), zero, loc=loc)
        cols_0 = rows_0 if dims[1] == dims[0] else Full((dims[1],), zero, loc=loc)   # one node when equal
        return _outer(ExpandDims(_within_tile(r, er, rows_0, loc), 1, loc=loc),
                      ExpandDims(_within_tile(c, ec, cols_0, loc), 0, loc=loc), _AND, dims[0], dims[1], loc)
    mask = sem.binary("and", ExpandDims(_within(r, rows, loc, zero), 1, loc=loc),
                      ExpandDims(_within(c, cols, loc, zero), 0, loc=loc), loc)
    return sem.broadcast_to(mask, shape, loc)


def tile_load(tr, loc, ptr, row_offset, col_offset, stride, shape, bounds):
    """A `Load` of the tile; without `bounds`, of the part of it inside the array `ptr` points into (the bounds
    `array_bounds` finds), so a tile past an array's edge reads inactive elements rather than other memory."""
    dims = static_shape(shape, "the shape of tile_load", loc)
    if len(dims) != 2:
        raise ShapeMismatchError("tile_load needs a 2-D shape (rows, cols)", loc)
    addr, dims, r, c, fast = _tile_ptr(loc, ptr, row_offset, col_offset, stride, dims, "tile_load")
    rows, cols = _bounds(bounds, "tile_load", loc) if bounds is not None else array_bounds(tr, ptr, stride, loc)
    mask = _tile_mask(r, c, rows, cols, dims, addr.type.shape, fast, loc, Const(0, _I32, loc=loc))
    return tr.bind(Load(addr, mask, loc=loc), tr.hint or "tile", loc, force=True)


def tile_store(tr, loc, ptr, row_offset, col_offset, stride, value, shape, bounds):
    """A bounded store is two: a plain one when the whole tile lies within the bounds (so a `dot` result keeps
    its direct matrix store), and a masked one for a tile on the edge."""
    dims = static_shape(shape, "the shape of tile_store", loc)
    if len(dims) != 2:
        raise ShapeMismatchError("tile_store needs a 2-D shape (rows, cols)", loc)
    addr, dims, r, c, fast = _tile_ptr(loc, ptr, row_offset, col_offset, stride, dims, "tile_store")
    vtype = sem.type_of(value, loc)
    if isinstance(vtype, PtrType):
        raise KernelTypeError("tile_store: cannot write a pointer", loc)
    if vtype.shape not in ((), dims):
        raise ShapeMismatchError(f"tile_store: the value has shape {list(vtype.shape)}, the tile is {list(dims)}", loc)
    v = sem.converted(value, addr.type.dtype, dims, loc)
    rows, cols = _bounds(bounds, "tile_store", loc) if bounds is not None else array_bounds(tr, ptr, stride, loc)
    zero = Const(0, _I32, loc=loc)
    inside = _within(row_offset, _scalar("sub", rows, dims[0] - 1, loc), loc, zero)
    inside = _both(inside, _within(col_offset, _scalar("sub", cols, dims[1] - 1, loc), loc, zero), loc)
    masked = Store(addr, v, _tile_mask(r, c, rows, cols, dims, dims, fast, loc, zero), loc=loc)
    if not isinstance(inside, Value):  # decided at compile time
        tr.emit(Store(addr, v, loc=loc) if inside else masked)
        return
    tr.emit(If(inside, [Store(addr, v, loc=loc)], [masked], loc=loc))


TILE_ACCESS = {L.tile_load: tile_load, L.tile_store: tile_store}

__all__ = ["TILE_ACCESS", "array_bounds", "tile_load", "tile_store"]
