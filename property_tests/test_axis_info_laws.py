"""The axis analysis (`metile.rewrite.axis_info`) claims only what holds: for random integer and pointer index
expressions (aranges, broadcasts and expansions, sums, differences, products, selects and conversions of them,
with kernel arguments, loop indices and program ids), evaluated on random argument values, every aligned run of
`contig` elements along the last dimension goes up by 1, every aligned run of `const` elements is one value, and
`div` divides each value at the start of a run of `contig` (for pointers, counted in elements from a 16-byte
aligned buffer). A claim that does not hold would let the lowering move misaligned or scattered elements as one
vector.
"""

from __future__ import annotations

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from metile.ir.ops import BinOp, CmpOp
from metile.ir.tile import Arange, Broadcast, ExpandDims, Full, ProgramId
from metile.ir.types import AddressSpace, DType, PtrType, TileType
from metile.ir.values import AddPtr, Binary, Cast, Compare, Const, Param, Value, Var, Where
from metile.rewrite.axis_info import BIG, AxisAnalysis

INT_TYPES = (DType.I32, DType.U32, DType.I16, DType.U16, DType.I8, DType.U8, DType.I64, DType.U64)
LOOP = "i"


@st.composite
def scalars(draw) -> Value:
    """An i32 scalar: a constant, an argument (maybe specialised as a multiple of 16), a program id or the loop
    index."""
    kind = draw(st.sampled_from(("const", "param", "pid", "loop")))
    if kind == "const":
        return Const(draw(st.integers(-64, 64)), DType.I32)
    if kind == "param":
        index = draw(st.integers(0, 2))
        return Param(f"n{index}", index, TileType(DType.I32), 16 if index == 0 else 1)
    if kind == "pid":
        return ProgramId(0)
    return Var(LOOP, TileType(DType.I32))


def lift(x: Value, shape: tuple[int, ...]) -> Value:
    """The scalar or 1-D `x` made a tile of `shape`."""
    if x.type.shape == shape:
        return x
    if x.type.shape == ():
        return Broadcast(x, shape)
    if len(shape) == 2 and x.type.shape == (shape[1],):
        return Broadcast(ExpandDims(x, 0), shape)
    return Broadcast(ExpandDims(x, 1), shape)   # a column of shape[0]


@st.composite
def leaves(draw, shape: tuple[int, ...]) -> Value:
    if draw(st.booleans()):
        return lift(draw(scalars()), shape)
    axis = draw(st.integers(0, len(shape) - 1))
    start = draw(st.integers(-8, 40))
    return lift(Arange(start, start + shape[axis]), shape) if axis == len(shape) - 1 or len(shape) == 1 else \
        Broadcast(ExpandDims(Arange(start, start + shape[0]), 1), shape)


@st.composite
def index_exprs(draw, shape: tuple[int, ...], depth: int = 3) -> Value:
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(leaves(shape))
    kind = draw(st.sampled_from(("add", "sub", "mul", "mul", "where", "cast", "full")))
    sub = index_exprs(shape, depth - 1)
    if kind == "full":
        return Full(shape, Const(draw(st.integers(-64, 64)), DType.I32))
    if kind == "cast":   # to another integer type and back to i32, wrapping where it narrows
        to = draw(st.sampled_from(INT_TYPES))
        return Cast(Cast(draw(sub), to), DType.I32)
    if kind == "where":
        c = Compare(draw(st.sampled_from((CmpOp.LT, CmpOp.EQ))), draw(sub), draw(sub))
        return Where(c, draw(sub), draw(sub))
    a, b = draw(sub), draw(sub)
    if kind == "mul" and draw(st.booleans()):   # a product with a scalar, as a row stride
        b = lift(draw(scalars()), shape)
    return Binary({"add": BinOp.ADD, "sub": BinOp.SUB, "mul": BinOp.MUL}[kind], a, b)


@st.composite
def cases(draw):
    """`(expression, loop (start, step), argument values)`; the expression is an offset, or a pointer plus one."""
    shape = draw(st.sampled_from(((1,), (4,), (6,), (8,), (12,), (16,), (2, 4), (3, 8), (4, 6), (2, 16), (4, 1))))
    e = draw(index_exprs(shape))
    if draw(st.booleans()):
        dtype = draw(st.sampled_from((DType.F32, DType.F16, DType.U8)))
        e = AddPtr(Broadcast(Param("p", 5, PtrType(dtype, (), AddressSpace.DEVICE)), shape), e)
    loop = (draw(scalars().filter(lambda v: not isinstance(v, Var))),
            draw(scalars().filter(lambda v: not isinstance(v, Var))))
    env = {"n0": 16 * draw(st.integers(-4, 8)), "n1": draw(st.integers(-40, 40)), "n2": draw(st.integers(0, 99)),
           "pid": draw(st.integers(0, 9)), "iter": draw(st.integers(0, 5)), "base": draw(st.integers(0, 7))}
    return e, loop, env


def evaluate(v: Value, env: dict, loop) -> np.ndarray:
    """The values of `v` (int64; i32 arithmetic on these small values never wraps)."""
    ev = lambda x: evaluate(x, env, loop)  # noqa: E731
    match v:
        case Const(value):
            return np.array(value, np.int64)
        case Param("p", _, PtrType() as t):   # element offsets from a 16-byte aligned buffer start
            return np.array(env["base"] * (16 // t.dtype.itemsize), np.int64)
        case Param(name):
            return np.array(env[name], np.int64)
        case ProgramId():
            return np.array(env["pid"], np.int64)
        case Var(name) if name == LOOP:
            return ev(loop[0]) + env["iter"] * ev(loop[1])
        case Arange(start, stop):
            return np.arange(start, stop, dtype=np.int64)
        case Full(shape, value):
            return np.full(shape, value.value, np.int64)
        case Broadcast(x, shape):
            return np.broadcast_to(ev(x), shape)
        case ExpandDims(x, axis):
            return np.expand_dims(ev(x), axis)
        case Cast(x, dtype) if dtype.bits == 64:   # int64 holds the bits of both: a u64 of -1 is read back as -1
            return ev(x)
        case Cast(x, dtype):
            wrapped = ev(x) % (1 << dtype.bits)
            if dtype.is_signed:
                wrapped = np.where(wrapped >= 1 << (dtype.bits - 1), wrapped - (1 << dtype.bits), wrapped)
            return wrapped
        case AddPtr(p, off) | Binary(BinOp.ADD, p, off):
            return ev(p) + ev(off)
        case Binary(BinOp.SUB, a, b):
            return ev(a) - ev(b)
        case Binary(BinOp.MUL, a, b):
            return ev(a) * ev(b)
        case Compare(op, a, b):
            return _COMPARE[op](ev(a), ev(b))
        case Where(c, a, b):
            return np.where(ev(c), ev(a), ev(b))
    raise AssertionError(f"no value for {v!r}")


_COMPARE = {CmpOp.LT: np.less, CmpOp.LE: np.less_equal, CmpOp.GT: np.greater, CmpOp.GE: np.greater_equal,
            CmpOp.EQ: np.equal, CmpOp.NE: np.not_equal}


def check_claims(values: np.ndarray, contig: int, div: int, const: int) -> None:
    rows = values.reshape(-1, values.shape[-1]) if values.ndim else values.reshape(1, 1)
    n = rows.shape[1]
    for row in rows:
        for s in range(0, n, contig):
            run = row[s:s + contig]
            assert (run == run[0] + np.arange(len(run))).all(), f"not consecutive in [{s}, {s + contig}): {row}"
            assert run[0] % div == 0, f"{run[0]} at {s} is not a multiple of {div}: {row}"
        step = n if const == BIG else const
        for s in range(0, n, step):
            assert (row[s:s + step] == row[s]).all(), f"not constant in [{s}, {s + step}): {row}"


@given(cases())
@example((Binary(BinOp.MUL, Arange(0, 8), Broadcast(Param("n1", 1, TileType(DType.I32)), (8,))),
          (Const(0, DType.I32), Const(1, DType.I32)),
          {"n0": 0, "n1": 9, "n2": 0, "pid": 0, "iter": 0, "base": 0}))   # arange * stride: not a multiple of 2**30
@example((Binary(BinOp.ADD, Arange(0, 12), Broadcast(Const(4, DType.I32), (12,))),
          (Const(0, DType.I32), Const(1, DType.I32)),
          {"n0": 0, "n1": 0, "n2": 0, "pid": 0, "iter": 0, "base": 0}))   # runs of 12 stay runs of 12
def test_axis_facts_hold_on_the_values(case):
    e, loop, env = case
    info = AxisAnalysis({}, {LOOP: loop}).info(e)
    check_claims(evaluate(e, env, loop), info.contig, info.div, info.const)


def test_a_strided_row_start_is_not_proven_aligned():
    """`(rows * stride)[:, None] + cols`: each row starts at a multiple of the stride only, so with a stride not
    known to be a multiple of 4 a run of 4 is not known to be 16-byte aligned (it was taken as a multiple of
    2**30, and moved as a misaligned float4)."""
    stride = Param("stride", 1, TileType(DType.I32))
    rows = Binary(BinOp.MUL, Arange(0, 32), Broadcast(stride, (32,)))
    offs = Binary(BinOp.ADD, Broadcast(ExpandDims(rows, 1), (32, 64)), Broadcast(ExpandDims(Arange(0, 64), 0),
                                                                                  (32, 64)))
    info = AxisAnalysis({}, {}).info(offs)
    assert info.contig == 64 and info.div == 1
    aligned = Param("stride", 1, TileType(DType.I32), 16)
    rows16 = Binary(BinOp.MUL, Arange(0, 32), Broadcast(aligned, (32,)))
    offs16 = Binary(BinOp.ADD, Broadcast(ExpandDims(rows16, 1), (32, 64)), Broadcast(ExpandDims(Arange(0, 64), 0),
                                                                                      (32, 64)))
    assert AxisAnalysis({}, {}).info(offs16).div == 16


@st.composite
def comparisons(draw):
    """`(comparison, loop, argument values)`: two index expressions compared, often a block of consecutive indices
    against a bound (a scalar, maybe specialised as a multiple of 16), as a load's mask compares them."""
    e, loop, env = draw(cases())
    if isinstance(e, AddPtr):
        e = e.offset
    shape = e.type.shape
    other = lift(draw(scalars()), shape) if draw(st.booleans()) else draw(index_exprs(shape))
    op = draw(st.sampled_from(tuple(CmpOp)))
    a, b = (e, other) if draw(st.booleans()) else (other, e)
    return Compare(op, a, b), loop, env


@given(comparisons())
@example((Compare(CmpOp.LT, Binary(BinOp.ADD, Broadcast(ProgramId(0), (16,)), Arange(0, 16)),
                  Broadcast(Param("n0", 0, TileType(DType.I32), 16), (16,))),
          (Const(0, DType.I32), Const(1, DType.I32)),
          {"n0": 16, "n1": 0, "n2": 0, "pid": 3, "iter": 0, "base": 0}))   # pid + arange: runs of 1 only
@example((Compare(CmpOp.LE, Arange(0, 16), Broadcast(Param("n0", 0, TileType(DType.I32), 16), (16,))),
          (Const(0, DType.I32), Const(1, DType.I32)),
          {"n0": 0, "n1": 0, "n2": 0, "pid": 0, "iter": 0, "base": 0}))   # arange <= 0: true at the first only
def test_a_comparison_is_one_value_over_the_runs_it_claims(case):
    """A comparison claims runs of one value (`const`) only where they hold: `offs < n` over runs of 16 with `offs`
    consecutive from a multiple of 16 and `n` a multiple of 16, which a masked load moves as whole vectors."""
    e, loop, env = case
    info = AxisAnalysis({}, {LOOP: loop}).info(e)
    values = evaluate(e, env, loop).astype(np.int64)
    check_claims(values, 1, 1, info.const)


def test_a_block_against_a_multiple_of_16_is_whole_over_runs_of_16():
    n = Broadcast(Param("n", 0, TileType(DType.I32), 16), (256,))
    offs = Binary(BinOp.ADD, Broadcast(Binary(BinOp.MUL, ProgramId(0), Const(256, DType.I32)), (256,)),
                  Arange(0, 256))
    for op in (CmpOp.LT, CmpOp.GE):
        assert AxisAnalysis({}, {}).info(Compare(op, offs, n)).const == 16
    for op in (CmpOp.GT, CmpOp.LE):
        assert AxisAnalysis({}, {}).info(Compare(op, n, offs)).const == 16
        assert AxisAnalysis({}, {}).info(Compare(op, offs, n)).const == 1   # offs <= n: n itself is a run start
    unknown = Broadcast(Param("m", 1, TileType(DType.I32)), (256,))
    assert AxisAnalysis({}, {}).info(Compare(CmpOp.LT, offs, unknown)).const == 1
