"""Read one value operation, `<op> <operands> : <type>`, as `metile.ir.printer` writes it.

Fields the printed type determines are read from it (the dtype of `const` and `cast`, the shape of
`full`, `broadcast` and `reshape`, the width of `vload` and `splat`, the dtype of `shared_alloc`); the
node's computed type must then equal the printed one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from metile.ir.metal import (
    Builtin,
    Extract,
    MakeVector,
    MatrixFill,
    MatrixLoad,
    MatrixMultiplyAccumulate,
    MatrixOf,
    Splat,
    VecLoad,
)
from metile.ir.ops import AtomicOp, BinOp, BuiltinKind, CmpOp, ReduceOp, UnOp
from metile.ir.simt import RingBuffer, Scratch
from metile.ir.tile import (
    AllActive,
    Arange,
    ArgReduce,
    Broadcast,
    ConvertLayout,
    Dot,
    ExpandDims,
    Full,
    Gather,
    Join,
    MmaEngine,
    MmaPlan,
    NumPrograms,
    Permute,
    ProgramId,
    Reduce,
    Reshape,
    Scan,
    SimdgroupId,
    SimdLaneId,
    Take,
    ThreadId,
    Transpose,
)
from metile.ir.types import DType, PtrType, TileType, Type, VectorType
from metile.ir.values import (
    AddPtr,
    AtomicRMW,
    Binary,
    Bitcast,
    Cast,
    Compare,
    Const,
    Fma,
    IntToPtr,
    Load,
    SharedAlloc,
    SimdBroadcast,
    SimdReduce,
    SimdShuffleXor,
    Unary,
    Value,
    Where,
)

if TYPE_CHECKING:
    from metile.ir.parser import Parser

_BINOPS = {o.value: o for o in BinOp}
_UNOPS = {o.value: o for o in UnOp}
_CMPOPS = {o.value: o for o in CmpOp}
_REDUCE = {o.value: o for o in ReduceOp}
_BUILTINS = {b.value: b for b in BuiltinKind}
_NULLARY = {"thread_id": ThreadId, "simd_lane_id": SimdLaneId, "simdgroup_id": SimdgroupId}


def parse_op(p: Parser) -> Value:
    at = p.i
    mnemonic = p.ident()
    node, printed = _op(p, mnemonic, at)
    try:
        computed = node.type
    except Exception as e:
        p.fail(f"{mnemonic}: these operands do not fit together ({type(e).__name__}: {e})", at)
    if computed != printed:
        p.fail(f"type mismatch: {mnemonic} of these operands has type {computed}, the text says {printed}", at)
    return node


def _colon_type(p: Parser) -> Type:
    p.expect(":")
    return p.type()


def _mma_plan(p: Parser) -> MmaPlan:
    """`, pad [A, B]`, `, serpentine`, `, preload`, `, hoist [0|1, 0|1]`, `, split S`, `, direct [0|1, 0|1]`,
    `, chunk C`, `, simdgroups [M, N]`, `, engine E` after a `dot`'s operands (each optional, in that order)."""
    pad = _pair(p) if _option(p, "pad") else (0, 0)
    serpentine = _option(p, "serpentine")
    preload = _option(p, "preload")
    hoist = tuple(bool(x) for x in _pair(p)) if _option(p, "hoist") else (False, False)
    split = p.int() if _option(p, "split") else 1
    direct = tuple(bool(x) for x in _pair(p)) if _option(p, "direct") else (False, False)
    chunk = p.int() if _option(p, "chunk") else None
    simdgroups = _pair(p) if _option(p, "simdgroups") else None
    engine = MmaEngine.SIMDGROUP_MATRIX
    if _option(p, "engine"):
        at = p.i
        try:
            engine = MmaEngine(p.ident())
        except ValueError:
            p.fail(f"expected an engine ({', '.join(e.value for e in MmaEngine)})", at)
    return MmaPlan(pad, serpentine, preload, hoist, split, direct, simdgroups, engine, chunk)


def _size(p: Parser) -> int:
    p.expect("[")
    n = p.int()
    p.expect("]")
    return n


def _pair(p: Parser) -> tuple[int, int]:
    p.expect("[")
    a = p.int()
    p.expect(",")
    b = p.int()
    p.expect("]")
    return a, b


def _option(p: Parser, word: str) -> bool:
    """Consume `, word` when it comes next."""
    at = p.i
    if p.accept(",") and p.accept(word):
        return True
    p.i = at
    return False


def _enum(p: Parser, table: dict, what: str):
    at = p.i
    word = p.ident()
    if word not in table:
        p.fail(f"expected {what}", at)
    return table[word]


def _const(p: Parser, text: str, ty: Type, at: int) -> Const:
    if not (isinstance(ty, TileType) and ty.is_scalar):
        p.fail("a constant has a scalar type", at)
    dt = ty.dtype
    if dt is DType.BOOL:
        if text not in ("true", "false"):
            p.fail("a bool constant is true or false", at)
        return Const(text == "true", dt)
    if dt.is_float and text not in ("true", "false"):
        return Const(float(text), dt)
    if dt.is_int and text.lstrip("+-").isdigit():
        return Const(int(text), dt)
    p.fail(f"'{text}' is not a {dt} constant", at)


def _shaped(p: Parser, ty: Type, what: str, at: int) -> tuple[int, ...]:
    if not isinstance(ty, (TileType, PtrType)):
        p.fail(f"{what} gives a tile type", at)
    return ty.shape


def _width(p: Parser, ty: Type, what: str, at: int) -> int:
    if not isinstance(ty, VectorType):
        p.fail(f"{what} gives a vector type", at)
    return ty.width


def _op(p: Parser, mn: str, at: int) -> tuple[Value, Type]:
    if mn in _BINOPS or mn in _CMPOPS:
        a, b = p.refs_n(2)
        ty = _colon_type(p)
        return (Binary(_BINOPS[mn], a, b) if mn in _BINOPS else Compare(_CMPOPS[mn], a, b)), ty
    if mn in _UNOPS:
        x = p.ref()
        return Unary(_UNOPS[mn], x), _colon_type(p)
    if mn in _NULLARY:
        return _NULLARY[mn](), _colon_type(p)
    match mn:
        case "const":
            text = p.literal()
            ty = _colon_type(p)
            return _const(p, text, ty, at), ty
        case "program_id" | "num_programs":
            axis = p.int()
            return (ProgramId(axis) if mn == "program_id" else NumPrograms(axis)), _colon_type(p)
        case "arange":
            start = p.int()
            p.expect(",")
            return Arange(start, p.int()), _colon_type(p)
        case "full":
            value = p.ref()
            ty = _colon_type(p)
            return Full(_shaped(p, ty, mn, at), value), ty
        case "broadcast" | "reshape":
            x = p.ref()
            ty = _colon_type(p)
            shape = _shaped(p, ty, mn, at)
            return (Broadcast(x, shape) if mn == "broadcast" else Reshape(x, shape)), ty
        case "transpose":
            return Transpose(p.ref()), _colon_type(p)
        case "all_active":
            return AllActive(p.ref()), _colon_type(p)
        case "convert_layout":
            x = p.ref()
            p.expect("#")
            src = p.layout()
            p.expect("->")
            p.expect("#")
            return ConvertLayout(x, src, p.layout()), _colon_type(p)
        case "permute":
            x = p.ref()
            p.expect(",")
            p.expect("[")
            order = [p.int()]
            while p.accept(","):
                order.append(p.int())
            p.expect("]")
            return Permute(x, tuple(order)), _colon_type(p)
        case "join":
            a = p.ref()
            p.expect(",")
            return Join(a, p.ref()), _colon_type(p)
        case "take":
            x = p.ref()
            p.expect(",")
            axis = p.int()
            p.expect(",")
            return Take(x, axis, p.int()), _colon_type(p)
        case "gather":
            x, index = p.refs_n(2)
            p.expect(",")
            return Gather(x, index, p.int()), _colon_type(p)
        case "expand_dims":
            x = p.ref()
            p.expect(",")
            return ExpandDims(x, p.int()), _colon_type(p)
        case "where":
            c, x, y = p.refs_n(3)
            return Where(c, x, y), _colon_type(p)
        case "cast" | "bitcast":
            x = p.ref()
            ty = _colon_type(p)
            return (Cast(x, ty.dtype) if mn == "cast" else Bitcast(x, ty.dtype)), ty
        case "inttoptr":
            x = p.ref()
            ty = _colon_type(p)
            return IntToPtr(x, ty.dtype), ty
        case "fma":
            a, b, c = p.refs_n(3)
            return Fma(a, b, c), _colon_type(p)
        case "addptr":
            ptr, offset = p.refs_n(2)
            return AddPtr(ptr, offset), _colon_type(p)
        case "atomic_rmw":
            op = AtomicOp(p.ident())
            ptr, value = p.refs_n(2, more=("mask", "compare"))
            mask = p.ref() if p.accept("mask") else None
            if mask is not None and p.accept(","):
                p.expect("compare")
                compare = p.ref()
            else:
                compare = p.ref() if p.accept("compare") else None
            return AtomicRMW(op, ptr, value, mask, compare), _colon_type(p)
        case "load":
            ptr = p.ref()
            mask = other = None
            volatile = False
            while p.accept(","):
                if p.accept("mask"):
                    mask = p.ref()
                elif p.accept("other"):
                    other = p.ref()
                else:
                    p.expect("volatile")
                    volatile = True
            return Load(ptr, mask, other, volatile), _colon_type(p)
        case "shared_alloc":
            p.expect("[")
            dims = [] if p.at("]") else [p.int()]
            while p.accept(","):
                dims.append(p.int())
            p.expect("]")
            ty = _colon_type(p)
            return SharedAlloc(dims, ty.dtype), ty
        case "scratch":
            use = p.int()
            p.expect(".")
            part = p.int()
            size = _size(p)
            ty = _colon_type(p)
            return Scratch(use, part, ty.dtype, size), ty
        case "ring":
            stage = p.ref()
            use = p.int()
            p.expect(".")
            part = p.int()
            size = _size(p)
            p.expect("x")
            buffers = p.int()
            ty = _colon_type(p)
            return RingBuffer(stage, use, part, ty.dtype, size, buffers), ty
        case "reduce" | "simd_reduce":
            op = _enum(p, _REDUCE, "a reduction (sum, max, min)")
            x = p.ref()
            if mn == "simd_reduce":
                return SimdReduce(op, x), _colon_type(p)
            p.expect(",")
            return Reduce(op, x, p.int()), _colon_type(p)
        case "argreduce" | "scan":
            op = _enum(p, _REDUCE, "a reduction (sum, prod, max, min)")
            x = p.ref()
            p.expect(",")
            axis = p.int()
            word = "reverse" if mn == "scan" else "valid"
            given = p.accept(",")
            if given:
                p.expect(word)
            if mn == "scan":
                return Scan(op, x, axis, given), _colon_type(p)
            return ArgReduce(op, x, axis, p.ref() if given else None), _colon_type(p)
        case "dot":
            a, b = p.refs_n(2)
            d = Dot(a, b, tf32=_option(p, "tf32"))
            how = _mma_plan(p)
            if how != MmaPlan():
                p.dot_plans[d] = how
            return d, _colon_type(p)
        case "simd_shuffle_xor" | "simd_broadcast":
            x, y = p.refs_n(2)
            return (SimdShuffleXor(x, y) if mn == "simd_shuffle_xor" else SimdBroadcast(x, y)), _colon_type(p)
        case "builtin":
            kind = _enum(p, _BUILTINS, "a Metal builtin (thread_position_in_grid, ...)")
            p.expect(",")
            return Builtin(kind, p.int()), _colon_type(p)
        case "vload" | "splat":
            x = p.ref()
            ty = _colon_type(p)
            width = _width(p, ty, mn, at)
            return (VecLoad(x, width) if mn == "vload" else Splat(x, width)), ty
        case "extract":
            v = p.ref()
            p.expect(",")
            return Extract(v, p.int()), _colon_type(p)
        case "vector":
            return MakeVector(p.refs()), _colon_type(p)
        case "matrix_of":
            x, y = p.refs_n(2)
            return MatrixOf(x, y), _colon_type(p)
        case "matrix_fill":
            return MatrixFill(p.ref()), _colon_type(p)
        case "matrix_load":
            ptr, stride = p.refs_n(2, more=("transpose",))
            return MatrixLoad(ptr, stride, p.accept("transpose")), _colon_type(p)
        case "matrix_mac":
            a, b, c = p.refs_n(3)
            return MatrixMultiplyAccumulate(a, b, c), _colon_type(p)
    p.fail(f"unknown operation '{mn}'", at)
