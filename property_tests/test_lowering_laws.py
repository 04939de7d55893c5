"""Laws of the lowering's building blocks: thread-value layouts cover each element once, the MMA piece
split covers each 8x8 piece once, and constant folding agrees with numpy's fixed-width arithmetic."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from metile.ir.ops import BinOp
from metile.ir.types import DType
from metile.ir.values import Binary, Const
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
