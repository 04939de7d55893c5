"""The verifier catches each kind of broken IR with a message naming the problem, the pass and the place."""

from __future__ import annotations

import pytest
from test_ir_examples import EXAMPLES, f32, i32, ptr, scalar

from metile.ir import (
    AddPtr,
    AddressSpace,
    Arange,
    AtomicAdd,
    Barrier,
    Binary,
    BinOp,
    Broadcast,
    Builtin,
    BuiltinKind,
    Cast,
    CmpOp,
    Compare,
    Const,
    Dot,
    DType,
    ExpandDims,
    Extract,
    For,
    Full,
    If,
    Join,
    Kernel,
    Let,
    Load,
    Loc,
    MatrixFill,
    MatrixMultiplyAccumulate,
    MatrixType,
    MetileError,
    Param,
    Permute,
    ProgramId,
    PtrType,
    Reduce,
    ReduceOp,
    Reshape,
    SharedAlloc,
    SimdgroupRole,
    SimdReduce,
    SimdShuffleXor,
    Stage,
    Store,
    Take,
    TileType,
    Unary,
    UnOp,
    Var,
    VecLoad,
    VectorType,
    VerifyError,
    Where,
    While,
    verify,
)

F32, F16, I32, BOOL = DType.F32, DType.F16, DType.I32, DType.BOOL
X, OUT, N = ptr("X", 0), ptr("Out", 1), scalar("N", 2)
CONST = Param("C", 3, PtrType(F32, (), AddressSpace.CONSTANT))
PARAMS = (X, OUT, N, CONST)
x4 = Var("x4", TileType(F32, (4,)))
i4 = Var("i4", TileType(I32, (4,)))
LETS = [Let(x4, Full((4,), f32(1.0))), Let(i4, Arange(0, 4))]
HERE = Loc("kernel.py", 12, 8)


def tile(*body, params=PARAMS, **meta) -> Kernel:
    return Kernel("k", Stage.TILE, params, [*LETS, *body], meta)


def metal(*body) -> Kernel:
    return Kernel("k", Stage.METAL, (X, OUT, N), list(body), {})


def let(name, value, **kw) -> Let:
    try:
        ty = value.type
    except (AttributeError, IndexError):  # ill-typed on purpose
        ty = TileType(F32)
    return Let(Var(name, ty), value, **kw)


def loop(body=(), carried=(), inits=(), yields=(), results=(), start=None, **kw) -> For:
    return For(Var("i", TileType(I32)), start or i32(0), N, i32(1), carried, inits, body, yields, results, **kw)


s = Var("s", TileType(F32))
CASES = {
    # operand types
    "binary operand types": (tile(let("y", Binary(BinOp.ADD, x4, i4))), "operand types differ: tile<4xf32> and"),
    "div on integers": (tile(let("y", Binary(BinOp.DIV, i4, i4))), "div needs float operands, not i32"),
    "shift on floats": (tile(let("y", Binary(BinOp.SHL, x4, x4))), "shl needs integer operands"),
    "arithmetic on bool": (tile(let("b", Compare(CmpOp.LT, i4, i4)),
                                let("y", Binary(BinOp.ADD, *[Var("b", TileType(BOOL, (4,)))] * 2))),
                           "add is not defined on bool"),
    "float op on int": (tile(let("y", Unary(UnOp.EXP, i4))), "exp needs a float operand, not i32"),
    "compare types": (tile(let("y", Compare(CmpOp.LT, x4, Full((4,), Const(1.0, F16))))), "operand types differ"),
    "where shapes": (tile(let("y", Where(Compare(CmpOp.LT, i4, i4), x4, Full((2,), f32(0.0))))),
                     "where: the two sides differ"),
    "where condition": (tile(let("y", Where(i4, x4, x4))), "where: the condition must be bool"),
    "cast of pointer": (tile(let("y", Cast(X, I32))), "cast: the operand must be a value, not ptr<f32, device>"),
    "addptr offset": (tile(let("p", AddPtr(Broadcast(X, (4,)), x4))), "offset must be an integer tile of shape (4,)"),
    "constant range": (tile(let("y", Const(300, DType.I8))), "constant 300 does not fit i8"),
    "broadcast shape": (tile(let("y", Broadcast(x4, (4, 8)))), "cannot broadcast tile<4xf32> to shape (4, 8)"),
    "reshape size": (tile(let("y", Reshape(x4, (3,)))), "cannot reshape tile<4xf32> to shape (3,)"),
    "expand_dims axis": (tile(let("y", ExpandDims(x4, 2))), "expand_dims: axis 2 is out of range"),
    "reduce axis": (tile(let("y", Reduce(ReduceOp.SUM, x4, 1))), "reduce sum: axis 1 is out of range"),
    "dot inner dims": (tile(let("y", Dot(Full((4, 8), f32(0.0)), Full((4, 8), f32(0.0))))),
                       "dot: inner dimensions differ: [4, 8] x [4, 8]"),
    "permute order": (tile(let("y", Permute(Broadcast(x4, (2, 4)), (0, 0)))),
                      "permute: [0, 0] is not a permutation of the dimensions of tile<2x4xf32>"),
    "join types": (tile(let("y", Join(x4, i4))), "join: needs two tiles of one type, not tile<4xf32> and tile<4xi32>"),
    "take range": (tile(let("y", Take(x4, 0, 4))), "take: element 4 of axis 0 is out of range for tile<4xf32>"),
    "dot rank": (tile(let("y", Dot(x4, x4))), "dot: needs two 2-D or two 3-D tiles"),
    "dot batch": (tile(let("y", Dot(Full((2, 4, 8), f32(0.0)), Full((3, 8, 4), f32(0.0))))),
                  "dot: inner dimensions differ: [2, 4, 8] x [3, 8, 4]"),
    "dot dtypes": (tile(let("y", Dot(Full((4, 8), f32(0.0)), Full((8, 4), Const(0.0, F16))))),
                   "dot: operands must have one numeric dtype"),
    "arange bounds": (tile(let("y", Arange(4, 4))), "arange 4, 4: needs integers with start < stop"),
    "program axis": (tile(let("y", ProgramId(3))), "the grid axis must be 0, 1 or 2"),
    "full of non-const": (tile(let("y", Full((4,), N))), "full: the fill value must be a Const"),
    "enum as string": (tile(let("y", Binary("add", x4, x4))), "Binary is not a well-formed value node"),
    # memory
    "load mask dtype": (tile(let("y", Load(Broadcast(X, (4,)), i4))), "the mask must be tile<4xbool>"),
    "load mask shape": (tile(let("y", Load(Broadcast(X, (4,)), Full((2,), Const(True, BOOL))))),
                        "the mask must be tile<4xbool> (the pointer's shape)"),
    "load other type": (tile(let("y", Load(Broadcast(X, (4,)), None, i4))), "'other' must be tile<4xf32>"),
    "load from value": (tile(let("y", Load(x4))), "load: the address must be a pointer, not tile<4xf32>"),
    "store value shape": (tile(Store(Broadcast(OUT, (4,)), Full((2,), f32(0.0)))),
                          "store: the value must be tile<4xf32> to match"),
    "store mask": (tile(Store(Broadcast(OUT, (4,)), x4, x4)), "store: the mask must be tile<4xbool>"),
    "store to constant": (tile(Store(CONST, f32(1.0))), "store: cannot write to constant memory"),
    "atomic dtype": (tile(AtomicAdd(Broadcast(Param("H", 4, PtrType(DType.I16, (), AddressSpace.DEVICE)), (4,)),
                                    Full((4,), Const(1, DType.I16))), params=(*PARAMS, Param("H", 4, PtrType(
                                        DType.I16, (), AddressSpace.DEVICE)))),
                     "atomic_add: needs i32, u32, f32, f16 or bf16"),
    "atomic 16-bit shared": (tile(let("buf", SharedAlloc((8,), F16)), AtomicAdd(Var("buf", PtrType(
        F16, (), AddressSpace.THREADGROUP)), Const(1.0, F16))),
                             "atomic_add: atomics on f16 work on device memory only"),
    # let-only values
    "nested load": (tile(Store(Broadcast(OUT, (4,)), Load(Broadcast(X, (4,))))), "Load must be bound by a Let"),
    "load inside expression": (tile(let("y", Binary(BinOp.ADD, x4, Load(Broadcast(X, (4,)))))),
                               "Load must be bound by a Let, not used inside Binary"),
    "nested collective": (tile(let("y", Unary(UnOp.NEG, SimdReduce(ReduceOp.SUM, f32(1.0))))),
                          "SimdReduce must be bound by a Let"),
    "shared alloc in loop": (tile(loop([let("buf", SharedAlloc((8,), F32))])), "shared_alloc must be at kernel top"),
    "shuffle of a tile": (tile(let("y", SimdShuffleXor(x4, i32(1)))), "simd_shuffle_xor: the value must be a"),
    # names and scopes
    "use before definition": (tile(let("y", Binary(BinOp.ADD, Var("z", x4.type), x4)), let("z", x4)),
                              "%z is used before it is defined"),
    "use outside scope": (tile(loop([let("inner", x4)]), let("y", Var("inner", x4.type))),
                          "%inner is used outside the body that binds it"),
    "bound twice": (tile(let("x4", x4)), "%x4 is bound twice"),
    "param name reused": (tile(let("N", x4)), "%N is bound twice"),
    "wrong use type": (tile(let("y", Var("x4", TileType(F16, (4,))))), "%x4 is used as tile<4xf16> but bound as"),
    "unknown param": (tile(let("y", Param("Z", 9, TileType(I32)))), "%Z is not a parameter of this kernel"),
    "let type": (tile(Let(Var("y", TileType(F16, (4,))), x4)), "%y is declared tile<4xf16> but its value is"),
    "not an identifier": (tile(let("2x", x4)), "'2x' is not an identifier"),
    # control flow
    "for bound type": (tile(loop(start=Const(0, DType.I16))), "for: start is i16 but the index is i32"),
    "for yields count": (tile(loop([], [s], [f32(0.0)], [], [Var("r", s.type)])),
                         "For: 1 carried values but 0 yields"),
    "for yields type": (tile(loop([], [s], [f32(0.0)], [i32(0)], [Var("r", s.type)])),
                        "For: yields[0] is i32 but the carried values[0] is f32"),
    "for init type": (tile(loop([], [s], [i32(0)], [s], [Var("r", s.type)])), "For: inits[0] is i32"),
    "num_stages": (tile(loop(num_stages=0)), "num_stages must be a positive integer"),
    "if condition": (tile(If(Compare(CmpOp.LT, i4, i4), [Barrier()])), "if: the condition must be a scalar bool"),
    "if yields": (tile(If(Const(True, BOOL), [], [], [f32(0.0)], [i32(0)], [Var("r", s.type)])),
                  "If: else-yields[0] is i32 but the results[0] is f32"),
    "while condition": (tile(While([], [], [], i32(1), [], [], [])), "while: the condition must be a scalar bool"),
    "role range": (tile(SimdgroupRole(2, 2, 0, [])), "simdgroup_role 2 of 2, sgs 0: out of range"),
    # stages
    "metal node in tile": (tile(let("t", Builtin(BuiltinKind.THREAD_POSITION_IN_GRID))),
                           "Builtin is a Metal IR node, not allowed in a tile kernel"),
    "tile node in metal": (metal(let("r", Arange(0, 4))), "Arange is a Tile IR node, not allowed in a metal kernel"),
    "tile statement in metal": (metal(SimdgroupRole(0, 2, 0, [])), "SimdgroupRole is a Tile IR statement"),
    "tile shape in metal": (metal(let("t", Full((4,), f32(0.0)))), "Full is a Tile IR node"),
    "tile type in metal": (metal(Let(Var("t", TileType(F32, (4,))), Var("t0", TileType(F32, (4,))))),
                           "Metal IR values are per-thread scalars, vectors or matrices"),
    "vector in tile": (tile(Let(Var("v", VectorType(F32, 4)), Var("w", VectorType(F32, 4)))),
                       "vector types are Metal IR only"),
    "floordiv in metal": (metal(let("q", Binary(BinOp.FLOORDIV, N, i32(2)))), "floordiv has no single MSL operator"),
    "vector width": (metal(let("v", VecLoad(X, 8))), "vload: vectors have 2, 3 or 4 lanes, not 8"),
    "extract lane": (metal(let("v", VecLoad(X, 4)), let("e", Extract(Var("v", VectorType(F32, 4)), 4))),
                     "extract: lane 4 is out of range"),
    "matrix dtypes": (metal(let("d", MatrixMultiplyAccumulate(MatrixFill(f32(0.0)), MatrixFill(Const(0.0, F16)),
                                                               MatrixFill(f32(0.0))))), "matrix_mac: a and b"),
    "matrix of ints": (metal(Let(Var("m", MatrixType(I32)), MatrixFill(i32(0)))), "simdgroup matrices hold f32"),
    # kernel
    "param index": (Kernel("k", Stage.TILE, (X, Param("Out", 0, OUT.type)), [], {}),
                    "parameter %Out has index 0 but is parameter 1"),
    "param space": (Kernel("k", Stage.TILE, (Param("T", 0, PtrType(F32, (), AddressSpace.THREADGROUP)),), [], {}),
                    "neither a scalar nor a device/constant pointer"),
    "meta value": (tile(BLOCK="64"), "meta['BLOCK'] = '64' is not an integer"),
    "statement as value": (tile(Store(OUT, Barrier())), "Store: expected a value, not Barrier"),
    "value as statement": (Kernel("k", Stage.TILE, PARAMS, [x4], {}), "expected a statement, not Var"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_verifier_catches(case):
    k, message = CASES[case]
    with pytest.raises(VerifyError) as info:
        verify(k, after="my_pass")
    assert message in info.value.message
    assert info.value.message.startswith("invalid IR after my_pass: ")
    assert info.value.after == "my_pass"


def test_error_is_a_metile_error_at_the_node_location():
    bad = Binary(BinOp.ADD, x4, i4, loc=HERE)
    with pytest.raises(MetileError) as info:
        verify(tile(let("y", bad, loc=Loc("kernel.py", 11, 4))), after="canonicalize")
    err = info.value
    assert err.loc == HERE and err.node == bad
    assert str(err).startswith("kernel.py:12:9: error: invalid IR after canonicalize: add: operand types differ")


def test_error_falls_back_to_the_statement_location():
    with pytest.raises(VerifyError) as info:
        verify(tile(let("y", Binary(BinOp.ADD, x4, i4), loc=HERE)))
    assert info.value.loc == HERE
    assert "after construction" in info.value.message


def test_valid_kernels_pass_and_are_returned():
    for make in EXAMPLES.values():
        k = make()
        assert verify(k, after="test") is k


def test_simt_stage_admits_both_levels():
    k = Kernel("k", Stage.SIMT, (X, OUT, N), [let("t", Cast(Builtin(BuiltinKind.THREAD_INDEX_IN_SIMDGROUP), I32)),
                                         let("r", Arange(0, 4)), let("p", ProgramId(0))], {})
    verify(k, after="tile_to_simt")
