"""IR nodes and types: construction and converters, equality and hashing without locations, `match`,
the type of every value node, constants, enums and the stage tables."""

from __future__ import annotations

import copy
import gc
import math
import pickle
import weakref

import attrs
import numpy as np
import pytest
from pyrsistent import PMap, PVector, pmap, pvector

from metile.ir import (
    LET_ONLY,
    STMT_CLASSES,
    VALUE_CLASSES,
    AddPtr,
    AddressSpace,
    AllActive,
    Arange,
    ArgReduce,
    AtomicOp,
    AtomicRMW,
    Barrier,
    Binary,
    BinOp,
    Bitcast,
    Broadcast,
    Builtin,
    BuiltinKind,
    Cast,
    CmpOp,
    Compare,
    Const,
    ConvertLayout,
    Dot,
    DType,
    ExpandDims,
    Extract,
    Fence,
    Fma,
    For,
    Full,
    Gather,
    If,
    IntToPtr,
    Join,
    Kernel,
    Let,
    Load,
    Loc,
    MakeVector,
    MatrixFill,
    MatrixLoad,
    MatrixMultiplyAccumulate,
    MatrixOf,
    MatrixType,
    NumPrograms,
    Param,
    Permute,
    ProgramId,
    PtrType,
    Reduce,
    ReduceOp,
    Reshape,
    RingBuffer,
    Scan,
    Scratch,
    SharedAlloc,
    SimdBroadcast,
    SimdgroupId,
    SimdLaneId,
    SimdReduce,
    SimdShuffleXor,
    Splat,
    Stage,
    Take,
    ThreadId,
    TileType,
    Transpose,
    Unary,
    UnOp,
    Var,
    VecLoad,
    VectorType,
    Where,
    admits,
    map_children,
    parse_type,
)
from metile.ir.layouts import Blocked, Shared
from metile.ir.node import evolve_node, type_error
from metile.ir.stages import ADMITTED
from metile.ir.types import broadcast_shapes, fits
from metile.ir.verify import VerifyError, verify

F32, F16, I32, U32, BOOL = DType.F32, DType.F16, DType.I32, DType.U32, DType.BOOL
X = Param("X", 0, PtrType(F32, (), AddressSpace.DEVICE))
T8 = TileType(F32, (8,))
x8 = Var("x", T8)
i8 = Var("i", TileType(I32, (8,)))
m8 = Var("m", TileType(BOOL, (8,)))
s = Var("s", TileType(F32))
n = Var("n", TileType(I32))
v4 = Var("v", VectorType(F32, 4))
mat = Var("a", MatrixType(F16))
acc = Var("c", MatrixType(F32))


# ---- construction, equality, hashing


def test_loc_is_keyword_only_and_outside_equality_hash_repr():
    a = Binary(BinOp.ADD, x8, x8, loc=Loc("a.py", 1, 0))
    b = Binary(BinOp.ADD, x8, x8, loc=Loc("b.py", 9, 3))
    assert a == b and hash(a) == hash(b)
    assert "loc" not in repr(a)
    assert Binary.__match_args__ == ("op", "lhs", "rhs")
    with pytest.raises(TypeError):
        Binary(BinOp.ADD, x8, x8, Loc("a.py", 1, 0))


def test_structural_equality_distinguishes_fields():
    assert Binary(BinOp.ADD, x8, x8) != Binary(BinOp.SUB, x8, x8)
    assert Var("x", T8) != Var("x", TileType(F16, (8,)))
    assert Arange(0, 4) == Arange(0, 4) and Arange(0, 4) != Arange(1, 5)
    assert ThreadId() == ThreadId() and ThreadId() != SimdLaneId()


def test_converters_make_tuples_pvectors_and_pmaps():
    k = Kernel("k", Stage.TILE, [X], [Barrier()], {"B": 4})
    assert isinstance(k.params, tuple) and isinstance(k.body, PVector) and isinstance(k.meta, PMap)
    assert k == Kernel("k", Stage.TILE, (X,), pvector([Barrier()]), {"B": 4})
    loop = For(n, Const(0, I32), n, Const(1, I32), [s], [Const(0.0, F32)], [], [s], [s])
    assert isinstance(loop.carried, tuple) and isinstance(loop.body, PVector)
    assert If(Compare(CmpOp.LT, n, n), [Barrier()]).orelse == pvector()
    assert SharedAlloc([4, 2], F32).shape == (4, 2)
    assert Full([2], Const(0.0, F32)) == Full((2,), Const(0.0, F32))


def test_nodes_are_frozen():
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        x8.name = "y"


def test_a_built_node_is_of_its_frozen_class():
    """`__new__` sets the fields on the node as an instance of a mutable twin of its class; what it returns, or a node
    whose construction raised (seen from the traceback), is of the class itself and frozen."""
    b = Binary(BinOp.ADD, x8, x8)
    assert b.__class__ is Binary and type(b).__setattr__ is Binary.__setattr__
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        b.lhs = n
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        del b.rhs
    with pytest.raises(TypeError, match="unhashable") as raised:
        Binary([BinOp.ADD], x8, x8)   # the hash of a list fails after the fields are set
    tb = raised.tb
    while tb.tb_next is not None and "self" not in tb.tb_frame.f_locals:
        tb = tb.tb_next
    half = tb.tb_frame.f_locals["self"]
    assert half.__class__ is Binary and half.lhs is x8
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        half.lhs = n


def test_a_node_class_keeps_object_init():
    """A node is built by its class's generated `__new__` alone (`object.__init__` ignores the arguments then), by
    position, by keyword and with defaults, and equal nodes built either way hash alike."""
    assert Binary.__init__ is object.__init__
    by_kw = Binary(op=BinOp.ADD, lhs=x8, rhs=x8, loc=None)
    assert by_kw == Binary(BinOp.ADD, x8, x8) and hash(by_kw) == hash(Binary(BinOp.ADD, x8, x8))
    assert Load(x8).mask is None and Load(x8) == Load(x8, None, None, False)
    with pytest.raises(TypeError):
        Binary(BinOp.ADD, x8)
    with pytest.raises(TypeError):
        Binary(BinOp.ADD, x8, x8, x8)


class _Tagged(Binary):
    """A subclass of a node class without `@node` (so without a generated `__new__` of its own)."""

    __slots__ = ("tag",)


def test_a_subclass_built_by_its_base_init_keeps_its_class():
    t = _Tagged(BinOp.ADD, x8, x8)
    assert t.__class__ is _Tagged and t == t and t.type == x8.type and hash(t) == t._h
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        t.lhs = n


def test_match_on_nodes():
    def fold_add_zero(e):
        match e:
            case Binary(BinOp.ADD, x, Const(0)) | Binary(BinOp.ADD, Const(0), x):
                return x
        return None

    assert fold_add_zero(Binary(BinOp.ADD, n, Const(0, I32))) is n
    assert fold_add_zero(Binary(BinOp.ADD, Const(0.0, F32), s)) is s
    assert fold_add_zero(Binary(BinOp.MUL, n, Const(0, I32))) is None
    match Load(AddPtr(X, n), None, None):
        case Load(AddPtr(Param("X"), off), None, None):
            assert off is n
        case _:
            pytest.fail("no match")


def test_map_children_rebuilds_only_on_change():
    loop = For(n, Const(0, I32), n, Const(1, I32), [s], [Const(0.0, F32)], [Let(Var("t", TileType(F32)), s)], [s], [s])
    assert map_children(lambda c: c, loop) is loop
    swapped = map_children(lambda c: Const(2, I32) if c == Const(1, I32) else c, loop)
    assert swapped.step == Const(2, I32) and swapped.body == loop.body and swapped.index is loop.index


def test_evolve_node_is_attrs_evolve_keeping_the_other_fields_objects():
    k = Kernel("k", Stage.TILE, [X], [Barrier()], {"B": 4}, loc=Loc("f.py", 1, 2))
    out = evolve_node(k, stage=Stage.SIMT)
    assert out == attrs.evolve(k, stage=Stage.SIMT) and out.stage is Stage.SIMT and out != k
    assert out.body is k.body and out.params is k.params and out.meta is k.meta and out.loc == k.loc
    assert hash(out) == hash(attrs.evolve(k, stage=Stage.SIMT))
    y = evolve_node(Binary(BinOp.ADD, x8, x8), rhs=Const(1.0, F32))
    assert y == Binary(BinOp.ADD, x8, Const(1.0, F32)) and y.lhs is x8


# ---- types of values


TYPES = [
    (Scratch(1, 0, F32, 64), PtrType(F32, (), AddressSpace.THREADGROUP)),
    (RingBuffer(Var("stage", TileType(DType.I32)), 1, 0, F16, 64, 2), PtrType(F16, (), AddressSpace.THREADGROUP)),
    (Const(1.5, F32), TileType(F32)),
    (X, PtrType(F32, (), AddressSpace.DEVICE)),
    (x8, T8),
    (Binary(BinOp.MUL, x8, x8), T8),
    (Unary(UnOp.EXP, s), TileType(F32)),
    (Compare(CmpOp.LT, i8, i8), TileType(BOOL, (8,))),
    (Compare(CmpOp.EQ, v4, v4), VectorType(BOOL, 4)),
    (Where(m8, x8, x8), T8),
    (Cast(i8, F16), TileType(F16, (8,))),
    (Cast(v4, DType.I32), VectorType(I32, 4)),
    (AddPtr(Broadcast(X, (8,)), i8), PtrType(F32, (8,), AddressSpace.DEVICE)),
    (Load(Broadcast(X, (8,)), m8), T8),
    (SharedAlloc((4, 8), F16), PtrType(F16, (), AddressSpace.THREADGROUP)),
    (SimdShuffleXor(s, n), TileType(F32)),
    (SimdBroadcast(n, n), TileType(I32)),
    (SimdReduce(ReduceOp.SUM, s), TileType(F32)),
    (ProgramId(1), TileType(I32)),
    (NumPrograms(0), TileType(I32)),
    (Arange(4, 12), TileType(I32, (8,))),
    (Full((2, 3), Const(True, BOOL)), TileType(BOOL, (2, 3))),
    (Broadcast(s, (4, 8)), TileType(F32, (4, 8))),
    (ExpandDims(x8, 0), TileType(F32, (1, 8))),
    (ExpandDims(x8, 1), TileType(F32, (8, 1))),
    (Reshape(x8, (2, 4)), TileType(F32, (2, 4))),
    (Reduce(ReduceOp.MAX, Broadcast(s, (4, 8)), 0), T8),
    (Reduce(ReduceOp.SUM, x8, 0), TileType(F32)),
    (ArgReduce(ReduceOp.MAX, Broadcast(s, (4, 8)), 1), TileType(I32, (4,))),
    (Scan(ReduceOp.PROD, x8, 0, reverse=True), T8),
    (Bitcast(x8, U32), TileType(U32, (8,))),
    (IntToPtr(Var("a", TileType(DType.I64, (8,))), F16), PtrType(F16, (8,), AddressSpace.DEVICE)),
    (AtomicRMW(AtomicOp.CAS, X, Const(1.0, F32), None, Const(0.0, F32)), TileType(F32)),
    (Fma(x8, x8, x8), T8),
    (Transpose(Broadcast(s, (4, 8))), TileType(F32, (8, 4))),
    (AllActive(x8), T8),
    (ConvertLayout(x8, Blocked(32, 1), Shared()), T8),
    (Permute(Broadcast(s, (2, 3, 4)), (2, 0, 1)), TileType(F32, (4, 2, 3))),
    (Join(x8, x8), TileType(F32, (8, 2))),
    (Join(s, s), TileType(F32, (2,))),
    (Take(Broadcast(s, (2, 3, 4)), 1, 2), TileType(F32, (2, 4))),
    (Take(Join(s, s), 0, 1), TileType(F32)),
    (Dot(Var("a", TileType(F16, (3, 5, 7))), Var("b", TileType(F16, (3, 7, 2)))), TileType(F32, (3, 5, 2))),
    (Gather(Broadcast(s, (4, 8)), Broadcast(Const(0, I32), (4, 2)), 1), TileType(F32, (4, 2))),
    (Dot(Var("a", TileType(F16, (16, 8))), Var("b", TileType(F16, (8, 32)))), TileType(F32, (16, 32))),
    (Dot(Var("a", TileType(DType.I8, (8, 8))), Var("b", TileType(DType.I8, (8, 8)))), TileType(I32, (8, 8))),
    (ThreadId(), TileType(I32)),
    (SimdLaneId(), TileType(I32)),
    (SimdgroupId(), TileType(I32)),
    (Builtin(BuiltinKind.THREAD_POSITION_IN_GRID, 1), TileType(U32)),
    (VecLoad(X, 4), VectorType(F32, 4)),
    (Extract(v4, 3), TileType(F32)),
    (MakeVector([s, s]), VectorType(F32, 2)),
    (Splat(n, 3), VectorType(I32, 3)),
    (MatrixFill(Const(0.0, F32)), MatrixType(F32)),
    (MatrixOf(Const(0.0, F16), Const(1.0, F16)), MatrixType(F16)),
    (MatrixLoad(X, n), MatrixType(F32)),
    (MatrixMultiplyAccumulate(mat, mat, acc), MatrixType(F32)),
]


@pytest.mark.parametrize(("value", "expected"), TYPES, ids=lambda v: type(v).__name__)
def test_value_types(value, expected):
    assert value.type == expected


def test_every_value_class_has_a_type_case():
    assert {type(v) for v, _ in TYPES} == set(VALUE_CLASSES)


def test_type_is_cached_and_not_a_field():
    b = Binary(BinOp.ADD, x8, x8)
    assert b.type is b.type
    assert "type" not in {a.name for a in attrs.fields(Binary)}
    assert attrs.evolve(b, lhs=Var("y", TileType(F16, (8,)))).type == TileType(F16, (8,))


def test_type_is_computed_at_construction_unless_the_node_is_malformed():
    b = Binary(BinOp.ADD, x8, x8)
    slot = next(k.__dict__["type"] for k in Binary.__mro__ if "type" in k.__dict__)
    assert slot.__get__(b, Binary) is x8.type  # already in the slot: no `__getattr__` on the first read
    bad = Dot(x8, x8)  # 1-D operands: built without error, for the verifier to report
    with pytest.raises(AttributeError):
        bad.type  # noqa: B018 - the read raises: the slot is empty
    assert isinstance(type_error(bad), IndexError)  # what computing it raises
    assert type_error(b) is None


def test_an_elementwise_value_takes_its_operand_type_without_calling_its_type_function():
    """A type function `return self.f.type` is read inline by the generated `__new__` (no Python call per node); any
    other is called. Either way the type, and the malformed node's missing type, are the type function's."""
    for cls, field in ((Binary, "lhs"), (Unary, "x"), (Where, "x"), (AddPtr, "ptr")):
        Binary(BinOp.ADD, x8, x8), Unary(UnOp.NEG, x8), Where(m8, x8, x8), AddPtr(X, n)   # make the methods
        names = cls.__new__.__code__.co_names
        assert "_type_of" not in names and field in names, cls
    Compare(CmpOp.LT, x8, x8)
    assert "_type_of" in Compare.__new__.__code__.co_names   # `lhs.type.with_dtype(BOOL)`: called
    assert Binary(BinOp.ADD, x8, x8).type is T8 and AddPtr(X, n).type is X.type
    bad = Binary(BinOp.ADD, 3, 4)
    with pytest.raises(AttributeError):
        bad.type  # noqa: B018 - the read raises: the slot is empty
    assert isinstance(type_error(bad), AttributeError)


def test_values_read_their_fields_without_a_lookup_hook():
    """No value class has a `__getattr__` (attrs adds one to compute a slotted class's cached properties): with one,
    every attribute read of every value goes through Python's slower lookup hook."""
    for cls in VALUE_CLASSES:
        assert all("__getattr__" not in k.__dict__ for k in cls.__mro__), cls


def test_the_verifier_reports_why_a_value_has_no_type():
    """What computing the type raised, not that the slot is empty."""
    k = Kernel("k", Stage.TILE, [], [Let(Var("d", TileType(F32, (8,))), Binary(BinOp.ADD, 3, 4))])
    with pytest.raises(VerifyError, match="malformed Binary: AttributeError: 'int' object has no attribute 'type'"):
        verify(k)


def test_equal_subtrees_that_are_distinct_objects_compare_equal():
    def chain(depth):
        v = x8
        for i in range(depth):
            v = Binary(BinOp.ADD, v, Const(i, I32))
        return v
    a, b = chain(200), chain(200)
    assert a is not b and a == b and hash(a) == hash(b)
    assert a != chain(199) and Binary(BinOp.ADD, a, a) == Binary(BinOp.ADD, a, b)


def test_nan_in_a_plain_field_equals_itself_as_attrs_compares():
    nan = float("nan")
    assert Var("n", TileType(F32)) == Var("n", TileType(F32))
    assert For(Var("i", TileType(I32)), n, n, n, (), (), [], (), (), num_stages=nan) == \
        For(Var("i", TileType(I32)), n, n, n, (), (), [], (), (), num_stages=nan)


def test_copies_and_pickles_are_rebuilt_equal():
    k = Kernel("k", Stage.TILE, (n,), [Let(Var("y", T8), Binary(BinOp.ADD, x8, x8, loc=Loc("f.py", 3, 4)))],
               {"BLOCK": 8}, loc=Loc("f.py", 1))
    for c in (pickle.loads(pickle.dumps(k)), copy.deepcopy(k), copy.copy(k)):
        assert c == k and hash(c) == hash(k) and c.loc == k.loc and c.body[0].value.loc == Loc("f.py", 3, 4)
        assert c.body[0].value.type is T8 and c.params[0].type is n.type


def test_converters_keep_arguments_of_the_right_class():
    body, meta = pvector([Barrier()]), pmap({"BLOCK": 4})
    k = Kernel("k", Stage.TILE, (), body, meta)
    assert k.body is body and k.meta is meta
    assert k == Kernel("k", Stage.TILE, [], [Barrier()], {"BLOCK": 4})
    assert hash(k) == hash(Kernel("k", Stage.TILE, [], [Barrier()], {"BLOCK": 4}))
    assert isinstance(Kernel("k", Stage.TILE, (), []).meta, PMap)
    assert If(Const(True, BOOL), []).orelse == pvector() and If(Const(True, BOOL), []).orelse is not None


# ---- constants


def test_constants_are_normalised_to_their_dtype():
    assert Const(1, F32).value == 1.0 and isinstance(Const(1, F32).value, float)
    assert isinstance(Const(3.0, I32).value, int)
    assert Const(1, BOOL).value is True
    assert isinstance(Const(np.int32(7), I32).value, int) and isinstance(Const(np.float16(2), F16).value, float)
    assert Const(2.5, I32).value == 2.5  # kept, for the verifier to report


def test_constant_equality_handles_nan_and_signed_zero():
    assert Const(float("nan"), F32) == Const(math.nan, F32)
    assert hash(Const(float("nan"), F32)) == hash(Const(math.nan, F32))
    assert Const(-0.0, F32) != Const(0.0, F32)
    assert Const(1, I32) != Const(1, DType.I16)


def test_fits():
    assert fits(127, DType.I8) and not fits(128, DType.I8)
    assert fits(0xFFFFFFFF, U32) and not fits(-1, U32)
    assert fits(1.5, F16) and not fits(1, F32) and not fits(1, BOOL) and not fits(True, I32)


# ---- types


@pytest.mark.parametrize(("t", "text"), [
    (TileType(F32), "f32"),
    (TileType(DType.BF16, (64, 32)), "tile<64x32xbf16>"),
    (PtrType(F16, (), AddressSpace.CONSTANT), "ptr<f16, constant>"),
    (PtrType(F32, (128,), AddressSpace.THREADGROUP), "tile<128xptr<f32, threadgroup>>"),
    (VectorType(DType.U8, 4), "vec<4xu8>"),
    (MatrixType(F16), "simdgroup_matrix<8x8xf16>"),
])
def test_type_text_round_trips(t, text):
    assert str(t) == text
    assert parse_type(text) == t
    assert hash(parse_type(text)) == hash(t)


def test_types_are_interned():
    t = TileType(F32, (4, 8))
    assert TileType(F32, [4, 8]) is t and TileType(dtype=F32, shape=(4, 8)) is t and t.with_shape((4, 8)) is t
    assert t.with_shape([4, 8]) is t and TileType(F16, (4, 8)).with_dtype(F32) is t
    assert TileType(F32) is TileType(F32, ()) and TileType(F32).is_scalar and t.size == 32 and not t.is_scalar
    assert pickle.loads(pickle.dumps(t)) is t and copy.copy(t) is t and copy.deepcopy(t) is t
    assert attrs.evolve(t, shape=(8,)) is TileType(F32, (8,))
    assert PtrType(F16, (2,), AddressSpace.DEVICE) is PtrType(F16, (2,), AddressSpace.DEVICE)
    assert VectorType(F16, 4) is VectorType(F16, 4) and MatrixType(F32) is MatrixType(F32)
    assert TileType(F32, (4, 8)) != TileType(F16, (4, 8)) and TileType(F32) != PtrType(F32, (), AddressSpace.DEVICE)
    assert repr(t) == "TileType(dtype=<DType.F32: 'f32'>, shape=(4, 8))"
    assert TileType.__match_args__ == ("dtype", "shape")


def test_types_that_no_longer_exist_are_rebuilt():
    ref = weakref.ref(TileType(DType.I8, (3, 5, 7)))
    for i in range(1100):  # more types than the recently made ones kept alive
        TileType(DType.U16, (100_000 + i,))
    gc.collect()
    assert ref() is None
    again = TileType(DType.I8, (3, 5, 7))
    assert again.shape == (3, 5, 7) and again.size == 105 and TileType(DType.I8, [3, 5, 7]) is again


def test_broadcast_shapes_follows_numpy():
    for src, dst in [((), (4, 8)), ((8,), (4, 8)), ((1, 8), (4, 8)), ((4, 1), (4, 8)), ((4, 8), (4, 8))]:
        assert broadcast_shapes(src, dst)
        assert np.broadcast_shapes(src, dst) == dst
    assert not broadcast_shapes((4,), (4, 8)) and not broadcast_shapes((2, 4, 8), (4, 8))


# ---- enums and stages


def test_op_mnemonics_are_distinct():
    words = [o.value for o in BinOp] + [o.value for o in UnOp] + [o.value for o in CmpOp]
    ops = {"const", "program_id", "num_programs", "arange", "full", "broadcast", "expand_dims", "reshape",
           "where", "cast", "addptr", "load", "shared_alloc", "reduce", "dot", "thread_id", "simd_lane_id",
           "simdgroup_id", "simd_shuffle_xor", "simd_broadcast", "simd_reduce", "builtin", "vload", "extract",
           "vector", "splat", "matrix_fill", "matrix_load", "matrix_mac"}
    assert len(words) == len(set(words)) and not set(words) & ops


def test_dtype_facts_are_plain_attributes_and_enums_hash_by_identity():
    assert DType.F16.bits == 16 and DType.BF16.itemsize == 2 and DType.BOOL.itemsize == 1 and DType.BOOL.bits == 1
    assert DType.U8.is_int and not DType.U8.is_signed and DType.F32.is_signed and not DType.BOOL.is_int
    assert DType.F32.msl == "float" and DType.BF16.numpy is None and DType.I16.numpy == np.dtype(np.int16)
    assert [d for d in DType if d.is_float] == [F32, F16, DType.BF16, DType.F8E4M3, DType.F8E5M2]
    assert [d for d in DType if d.storage_only] == [DType.F8E4M3, DType.F8E5M2] and DType.F8E5M2.msl == "uchar"
    for e in (F32, BinOp.ADD, Stage.TILE, BuiltinKind.THREADS_PER_GRID, AddressSpace.DEVICE):
        assert hash(e) == object.__hash__(e) and {e: 1}[e] == 1
        assert pickle.loads(pickle.dumps(e)) is e


def test_builtin_axes():
    assert BuiltinKind.THREADGROUP_POSITION_IN_GRID.has_axes
    assert not BuiltinKind.THREAD_INDEX_IN_SIMDGROUP.has_axes


def test_stage_tables():
    assert admits(Stage.TILE, Dot) and not admits(Stage.TILE, VecLoad)
    assert admits(Stage.METAL, MatrixLoad) and not admits(Stage.METAL, Arange)
    assert ADMITTED[Stage.SIMT] == set(VALUE_CLASSES + STMT_CLASSES)
    shared = ADMITTED[Stage.TILE] & ADMITTED[Stage.METAL]
    assert {Load, Let, For, If, Binary, Const, Var, Param, SimdReduce, Barrier} <= shared
    assert LET_ONLY <= set(VALUE_CLASSES)
    assert {f.value for f in Fence} == {"none", "device", "threadgroup", "device_and_threadgroup"}


def test_a_node_class_makes_its_methods_when_its_first_instance_is_built():
    """Importing the IR compiles no node code: each class gets its generated `__new__`, `__eq__` and child getter
    when its first instance is built, by one thread while others building the same class wait."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import sys, threading
from metile.ir import BinOp, Binary, Const, DType, Fma, children
node = sys.modules["metile.ir.node"]
assert Binary.__new__ is node._first_new and Fma.__new__ is node._first_new
one, two = Const(1, DType.I32), Const(2, DType.I32)
built, start = [], threading.Barrier(8)
def build():
    start.wait()
    built.append(Binary(BinOp.ADD, one, two))
threads = [threading.Thread(target=build) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
assert len(built) == 8 and all(b == built[0] and hash(b) == hash(built[0]) for b in built)
assert Binary.__new__ is not node._first_new and Binary.__new__.__qualname__ == "Binary.__new__"
assert children(built[0]) == [one, two] and Fma.__new__ is node._first_new
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_a_node_repr_is_the_one_attrs_writes():
    """`@node` writes each class's `__repr__` itself, on its first instance, in attrs' form (fields with `repr=False`,
    such as `loc`, left out)."""
    b = Binary(BinOp.ADD, Const(1, I32), Var("x", TileType(I32)))
    assert repr(b) == ("Binary(op=<BinOp.ADD: 'add'>, lhs=Const(value=1, dtype=<DType.I32: 'i32'>), "
                       "rhs=Var(name='x', type=TileType(dtype=<DType.I32: 'i32'>, shape=())))")
    assert type(b).__repr__.__qualname__ == "Binary.__repr__"


def test_a_node_field_its_generated_init_cannot_set_is_refused_at_definition():
    from metile.ir.node import node
    from metile.ir.values import Value

    with pytest.raises(TypeError, match="field 'x' needs"):
        @node
        class Checked(Value):
            x: int = attrs.field(validator=attrs.validators.instance_of(int))


def test_a_kernel_hashes_its_meta_by_its_items():
    """A node's hash takes a persistent map field as the set of its items (not pyrsistent's own first hash, which is
    slow): maps built in either order give equal kernels and equal hashes, and other items another kernel."""
    X = Param("X", 0, PtrType(F32, (), AddressSpace.DEVICE))
    a = Kernel("k", Stage.TILE, [X], [Barrier()], {"A": 1, "B": 2})
    b = Kernel("k", Stage.TILE, [X], [Barrier()], pmap({"B": 2}).set("A", 1))
    assert a == b and hash(a) == hash(b)
    assert a != Kernel("k", Stage.TILE, [X], [Barrier()], {"A": 1, "B": 3})


def test_classes_without_child_fields_share_one_children_function():
    """`children_getter` gives the one `no_children` function exactly for the classes of the example kernels whose
    instances hold no node (what walks skip calling), and those instances' children by reflection are none too."""
    from test_ir_examples import EXAMPLES

    from metile.ir.node import _generic_children, children_getter, no_children, walk

    seen: dict[type, list] = {}
    for make in EXAMPLES.values():
        for n in walk(make()):
            seen.setdefault(type(n), []).append(n)
    leaves = {cls for cls in seen if children_getter(cls) is no_children}
    assert {Const, Var, Param} <= leaves
    for cls, nodes in seen.items():
        if cls in leaves:
            assert all(_generic_children(n) == [] for n in nodes), cls
        else:
            assert attrs.fields(cls) and any(_generic_children(n) for n in nodes), cls


def test_equal_bodies_made_of_other_objects_hash_alike_and_odd_items_still_hash():
    """A node's hash reads the cached hashes of the nodes in a tuple or vector field: equal sequences of distinct but
    equal nodes give equal hashes, and a sequence holding something else (a malformed node, for the verifier) is
    hashed as it is instead of failing."""
    from metile.ir.node import evolve_node

    def body():
        x = Var("x", TileType(DType.I32))
        return [Let(x, Const(1, DType.I32)), Let(Var("y", TileType(DType.I32)), x)]

    i = Var("i", TileType(DType.I32))
    a = For(i, Const(0, DType.I32), Const(4, DType.I32), Const(1, DType.I32), [], [], body(), [], [])
    b = For(i, Const(0, DType.I32), Const(4, DType.I32), Const(1, DType.I32), (), (), pvector(body()), (), ())
    assert a == b and hash(a) == hash(b) and a.body[0] is not b.body[0]
    assert hash(evolve_node(a, body=body()[:1])) != hash(a)
    odd = For(i, Const(0, DType.I32), Const(4, DType.I32), Const(1, DType.I32), [], [], [1, (2,)], [], [])
    assert hash(odd) == hash(For(i, Const(0, DType.I32), Const(4, DType.I32), Const(1, DType.I32), [], [], [1, (2,)],
                                 [], []))


def test_a_node_holding_a_non_node_where_a_node_is_declared_is_built_and_hashed():
    """A malformed node (for the verifier to report) is hashed from the values it holds, equal to an equal one; a node
    whose declared-optional child is None is hashed as one holding nothing there."""
    bad = Binary(BinOp.ADD, 3, x8)
    assert bad == Binary(BinOp.ADD, 3, x8) and hash(bad) == hash(Binary(BinOp.ADD, 3, x8))
    assert hash(bad) != hash(Binary(BinOp.ADD, 4, x8))
    ptr = AddPtr(X, Const(0, I32))
    assert hash(Load(ptr, None, None)) == hash(Load(ptr, None, None)) != hash(Load(ptr, Const(True, BOOL), None))


def _identity_enums():
    from metile.ir.ops import IdentityEnum

    found, todo = [], [IdentityEnum]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_identity_enum_classes_read_their_attributes_as_type_does():
    """The IR enums' metaclass reads a class's own attributes with `object.__getattribute__` (in C) and the rest as
    `type` does: members, own methods and properties, inherited methods and missing names all read as before, and no
    IR enum holds a class or static method of its own (which the two lookups would return differently)."""
    import enum

    for cls in _identity_enums():
        for name, value in vars(cls).items():
            assert not isinstance(value, (classmethod, staticmethod)), (cls, name)
            assert getattr(cls, name) is type.__getattribute__(cls, name), (cls, name)
        for member in cls:
            assert getattr(cls, member.name) is member and cls(member.value) is member
        assert cls._missing_ == type.__getattribute__(cls, "_missing_")
        assert cls.__members__ == type.__getattribute__(cls, "__members__")
        with pytest.raises(AttributeError):
            cls.NO_SUCH_MEMBER  # noqa: B018 - the read raises
    assert isinstance(DType, enum.EnumMeta) and DType("f32") is DType.F32 and DType["F16"] is DType.F16
    with pytest.raises(ValueError, match="not a valid DType"):
        DType("f99")
    assert pickle.loads(pickle.dumps(BinOp.ADD)) is BinOp.ADD and copy.deepcopy(DType.I8) is DType.I8


def test_a_kernel_is_hashed_by_its_first_hash_not_by_its_construction():
    """`Kernel` is `lazy_hash`: building one hashes nothing (passes rebuild the kernel and none hashes it); its first
    `hash` or `==` computes the hash of its fields, which equal kernels share and which stays the same."""
    from metile.ir.node import Node, lazy_hash, node
    from metile.ir.values import Stmt, Value

    body = [Let(Var("i", T8), x8)]
    a, b = Kernel("k", Stage.TILE, [], body), Kernel("k", Stage.TILE, (), pvector(body))
    slot = Node.__dict__["_h"]
    with pytest.raises(AttributeError):
        slot.__get__(a, Kernel)   # nothing computed yet
    assert a == b and hash(a) == hash(b) == a._h == slot.__get__(a, Kernel) and hash(a) == hash(a)
    assert evolve_node(a, name="j") != a and {a: 1}[b] == 1
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        a._h = 0
    assert pickle.loads(pickle.dumps(a)) == a and copy.copy(a) == a

    @node
    class Pair(Stmt):
        first: Value
        second: Value

    Pair(x8, x8)   # built: its `__new__` hashes, too late for `lazy_hash`
    with pytest.raises(TypeError, match="above @node"):
        lazy_hash(Pair)
