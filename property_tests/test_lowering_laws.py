"""Laws of the lowering's building blocks: thread-value layouts cover each element once, the MMA piece
split covers each 8x8 piece once, constant folding agrees with numpy's fixed-width arithmetic, and the stride
analysis describes every index tile it claims to."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from metile.ir.ops import BinOp, CmpOp
from metile.ir.tile import Arange, Broadcast, ExpandDims, Full
from metile.ir.types import DType, TileType
from metile.ir.values import Binary, Compare, Const, Param, Var, Where
from metile.rewrite.axis_info import strides
from metile.rewrite.distribute import MmaGeometry, blocked, mma_split
from metile.rewrite.fold import fold_binary

INT_TYPES = [DType.I8, DType.U8, DType.I16, DType.U16, DType.I32, DType.U32]


@given(st.integers(1, 5000), st.sampled_from([1, 2, 3, 32, 64, 100, 256]), st.sampled_from([1, 2, 4]))
def test_blocked_layout_holds_every_element_exactly_once(size, threads, vec):
    lay = blocked(size, threads, vec)
    held = [t * lay.thread_stride + lay.offset(s) for t in range(threads) for s in range(lay.slots)]
    real = [f for f in held if f < size]
    assert sorted(real) == list(range(size))
    for s in range(lay.slots):  # `padded` is exact: some thread's slot is past the end iff flagged
        assert lay.padded(s) == any(t * lay.thread_stride + lay.offset(s) >= size for t in range(threads))
    assert size % lay.vec == 0 and all(lay.offset(s) % lay.vec == s % lay.vec for s in range(lay.slots))


@given(st.integers(1, 16), st.integers(1, 16), st.sampled_from([1, 2, 4, 6, 8]))
def test_mma_split_gives_each_piece_to_one_simdgroup(pm, pn, sgs):
    split = mma_split(8 * pm, 8 * pn, sgs)
    if split is None:
        assert all(pm % a or pn % (sgs // a) for a in range(1, sgs + 1) if sgs % a == 0)
        return
    g = MmaGeometry(8 * pm, 8 * pn, *split)
    pieces = [(g.rows((sg, p)), g.cols((sg, p))) for sg in range(sgs) for p in range(g.pieces)]
    assert sorted(pieces) == [(i, j) for i in range(pm) for j in range(pn)]
    # the lowering's origin of each simdgroup's block is its first piece, in elements
    assert all((g.first_row(sg), g.first_col(sg)) == (8 * g.rows((sg, 0)), 8 * g.cols((sg, 0))) for sg in range(sgs))


OPS = [BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.AND, BinOp.OR, BinOp.XOR, BinOp.TRUNCDIV, BinOp.REM,
       BinOp.SHL, BinOp.SHR, BinOp.MAX, BinOp.MIN]


@st.composite
def int_operands(draw):
    dtype = draw(st.sampled_from(INT_TYPES))
    info = np.iinfo(dtype.numpy)
    a = draw(st.integers(int(info.min), int(info.max)))
    b = draw(st.integers(int(info.min), int(info.max)))
    return dtype, a, b


@given(int_operands(), st.sampled_from(OPS))
def test_fold_binary_matches_fixed_width_arithmetic(operands, op):
    dtype, a, b = operands
    folded = fold_binary(Binary(op, Const(a, dtype), Const(b, dtype)))
    x, y = np.array([a], dtype.numpy), np.array([b], dtype.numpy)
    with np.errstate(all="ignore"):
        if op in (BinOp.TRUNCDIV, BinOp.REM):
            if b == 0:
                assert folded is None
                return
            q = np.fix(x.astype(np.float64) / y.astype(np.float64)).astype(np.int64)
            expect = q if op is BinOp.TRUNCDIV else x.astype(np.int64) - q * y.astype(np.int64)
            expect = expect.astype(dtype.numpy)
        elif op in (BinOp.SHL, BinOp.SHR):
            if not 0 <= b < dtype.bits:
                assert folded is None
                return
            expect = (x << y) if op is BinOp.SHL else (x >> y)
        else:
            fn = {BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply, BinOp.AND: np.bitwise_and,
                  BinOp.OR: np.bitwise_or, BinOp.XOR: np.bitwise_xor, BinOp.MAX: np.maximum,
                  BinOp.MIN: np.minimum}[op]
            expect = fn(x, y)
    assert folded is not None and folded.dtype is dtype
    assert folded.value == int(expect.astype(dtype.numpy)[0])


# ---- the stride analysis (`metile.rewrite.axis_info.strides`) is sound on 2-D index tiles

SHAPES = [(1, 1), (2, 3), (4, 1), (3, 8)]
_LD = Param("ld", 0, TileType(DType.I32))  # a run-time scalar, given a value when the tile is evaluated


@st.composite
def index_tiles(draw, shape: tuple[int, int], depth: int = 3):
    """Random i32 tiles of `shape` made of aranges along either axis (or of one element, broadcast), scalars,
    fills, sums, products and selections (the last are not affine, and the analysis must say so or be right)."""
    kinds = ["row", "col", "thin", "scalar", "fill"] + (["add", "mul", "where", "scaled"] if depth else [])
    kind = draw(st.sampled_from(kinds))
    if kind in ("row", "col", "thin"):  # "thin": a one-element arange, broadcast along its own axis too
        axis = draw(st.sampled_from([0, 1])) if kind == "thin" else 0 if kind == "row" else 1
        start = draw(st.integers(0, 9))
        line = Arange(start, start + (1 if kind == "thin" else shape[axis]))
        return Broadcast(ExpandDims(line, 1 - axis), shape)
    if kind == "scalar":
        return Broadcast(draw(st.sampled_from([_LD, Const(draw(st.integers(-5, 5)), DType.I32)])), shape)
    if kind == "fill":
        return Full(shape, Const(draw(st.integers(-5, 5)), DType.I32))
    a, b = draw(index_tiles(shape, depth - 1)), draw(index_tiles(shape, depth - 1))
    if kind == "add":
        return Binary(BinOp.ADD, a, b)
    if kind == "mul":
        return Binary(BinOp.MUL, a, b)
    if kind == "scaled":  # a product with a broadcast scalar, on either side
        scale = Broadcast(draw(st.sampled_from([_LD, Const(3, DType.I32)])), shape)
        return Binary(BinOp.MUL, *((a, scale) if draw(st.booleans()) else (scale, a)))
    return Where(Compare(CmpOp.LT, a, b), a, b)


def _evaluate(v, ld: int) -> np.ndarray:
    match v:
        case Const(c):
            return np.array(c, np.int64)
        case Param():
            return np.array(ld, np.int64)
        case Arange(start, stop):
            return np.arange(start, stop, dtype=np.int64)
        case Full(shape, x):
            return np.broadcast_to(_evaluate(x, ld), shape)
        case Broadcast(x, shape):
            return np.broadcast_to(_evaluate(x, ld), shape)
        case ExpandDims(x, axis):
            return np.expand_dims(_evaluate(x, ld), axis)
        case Binary(op, a, b):
            return (np.add if op is BinOp.ADD else np.multiply)(_evaluate(a, ld), _evaluate(b, ld))
        case Where(Compare(_, a, b), x, y):
            return np.where(_evaluate(a, ld) < _evaluate(b, ld), _evaluate(x, ld), _evaluate(y, ld))
    raise AssertionError(f"unexpected {v!r}")


@given(st.sampled_from(SHAPES).flatmap(index_tiles), st.integers(-20, 20))
def test_strides_describe_the_tile_whenever_found(tile, ld):
    found = strides(tile, {})
    if found is None:
        return
    values = _evaluate(tile, ld)
    per_axis = [s if isinstance(s, int) else s[0] * ld for s in found]
    rows, cols = np.indices(values.shape)
    np.testing.assert_array_equal(values, values[0, 0] + rows * per_axis[0] + cols * per_axis[1])


def test_strides_of_a_tile_store_grid():
    """The grid `tile_store` makes, `(r0 + arange)[:, None] * ld + (c0 + arange)[None, :]`, read through `Let`s."""
    i32 = TileType(DType.I32)
    r0, c0 = Param("r0", 1, i32), Param("c0", 2, i32)
    rows = Binary(BinOp.ADD, Broadcast(r0, (4,)), Arange(0, 4))
    cols = Var("cols", TileType(DType.I32, (8,)))
    grid = Binary(BinOp.ADD, Broadcast(Binary(BinOp.MUL, ExpandDims(rows, 1), Broadcast(_LD, (4, 1))), (4, 8)),
                  Broadcast(ExpandDims(cols, 0), (4, 8)))
    defs = {"cols": Binary(BinOp.ADD, Broadcast(c0, (8,)), Arange(0, 8))}
    assert strides(grid, defs) == ((1, _LD), 1)
    assert strides(Binary(BinOp.MUL, grid, Full((4, 8), Const(2, DType.I32))), defs) == ((2, _LD), 2)
    assert strides(grid, {}) is None  # `cols` unknown
