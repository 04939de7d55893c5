"""The local typing rules of each value node and each type, for the verifier.

`check_value(n, stage)` and `check_type(t, stage)` return an error message, or None when the node
(whose children are already checked) or the type is well formed at that stage. They never raise on
malformed input of the expected classes; the verifier reports anything else as malformed.
"""

from __future__ import annotations

import math

from metile.ir.layouts import Blocked, Shared
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
from metile.ir.ops import AtomicOp, BinOp, BuiltinKind, CmpOp, ReduceOp, Stage, UnOp
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
from metile.ir.types import (
    ATOMIC_DTYPES,
    AddressSpace,
    DType,
    MatrixType,
    PtrType,
    TileType,
    VectorType,
    broadcast_shapes,
    fits,
)
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
    Param,
    SharedAlloc,
    SimdBroadcast,
    SimdReduce,
    SimdShuffleXor,
    Unary,
    Var,
    Where,
)

_BITWISE = (BinOp.AND, BinOp.OR, BinOp.XOR)
_SHIFTS = (BinOp.SHL, BinOp.SHR, BinOp.MULHI)
_FLOAT_ONLY = (BinOp.DIV, BinOp.POW, BinOp.ATAN2)
_MATRIX_DTYPES = (DType.F32, DType.F16, DType.BF16)


def check_type(t: object, stage: Stage) -> str | None:
    match t:
        case TileType(dtype, shape) | PtrType(dtype, shape, _):
            if not isinstance(dtype, DType):
                return f"{t!r}: the element type is not a DType"
            if isinstance(t, PtrType) and not isinstance(t.space, AddressSpace):
                return f"{t!r}: the address space is not an AddressSpace"
            if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
                return f"{t}: dimensions must be positive integers"
            if stage is Stage.METAL and shape:
                return f"{t}: Metal IR values are per-thread scalars, vectors or matrices, not tiles"
        case VectorType(dtype, width):
            if stage is Stage.TILE:
                return f"{t}: vector types are Metal IR only"
            if width not in (2, 3, 4):
                return f"{t}: vectors have 2, 3 or 4 lanes"
        case MatrixType(dtype):
            if stage is Stage.TILE:
                return f"{t}: simdgroup matrix types are Metal IR only"
            if dtype not in _MATRIX_DTYPES:
                return f"{t}: simdgroup matrices hold f32, f16 or bf16"
        case _:
            return f"{t!r} is not a type"
    return None


def _is_elementwise(t) -> bool:
    return isinstance(t, (TileType, VectorType))


def _is_int_scalar(t) -> bool:
    return isinstance(t, TileType) and t.is_scalar and t.dtype.is_int


def _is_scalar_ptr(t) -> bool:
    return isinstance(t, PtrType) and t.is_scalar


def _per_thread(t) -> bool:
    """A value one thread holds: a scalar or a vector."""
    return (isinstance(t, TileType) and t.is_scalar) or isinstance(t, VectorType)


def _binop_dtype(op: BinOp, dt: DType, stage: Stage) -> str | None:
    if dt.storage_only:
        return _STORAGE_ONLY.format(what=op.value, dt=dt)
    if stage is Stage.METAL and op in (BinOp.FLOORDIV, BinOp.MOD):
        return f"{op.value} has no single MSL operator: lower it to truncdiv/rem before Metal IR"
    if op in _BITWISE:
        return None if dt.is_int or dt is DType.BOOL else f"{op.value} needs integer or bool operands, not {dt}"
    if op in _SHIFTS:
        return None if dt.is_int else f"{op.value} needs integer operands, not {dt}"
    if op in _FLOAT_ONLY:
        return None if dt.is_float else f"{op.value} needs float operands, not {dt} (cast first, or use floordiv)"
    return f"{op.value} is not defined on bool (cast to an integer first)" if dt is DType.BOOL else None


_STORAGE_ONLY = "{what} is not defined on {dt}, which holds values for storage: convert to f16 or f32 first"


def _unop_dtype(op: UnOp, dt: DType) -> str | None:
    if dt.storage_only:
        return _STORAGE_ONLY.format(what=op.value, dt=dt)
    if op is UnOp.NOT:
        return None if dt.is_int or dt is DType.BOOL else f"not needs an integer or bool operand, not {dt}"
    if op in (UnOp.NEG, UnOp.ABS):
        return f"{op.value} is not defined on bool" if dt is DType.BOOL else None
    return None if dt.is_float else f"{op.value} needs a float operand, not {dt}"


def _same_operands(op: BinOp | CmpOp, lhs, rhs) -> str | None:
    lt, rt = lhs.type, rhs.type
    if not _is_elementwise(lt):
        return f"{op.value}: operands must be values, not {lt}"
    if lt is not rt and lt != rt:
        return f"{op.value}: operand types differ: {lt} and {rt}"
    return None


def _where(cond, x, y) -> str | None:
    if x.type != y.type:
        return f"where: the two sides differ: {x.type} and {y.type}"
    ct, xt = cond.type, x.type
    if ct.dtype is not DType.BOOL or not isinstance(ct, (TileType, VectorType)):
        return f"where: the condition must be bool, not {ct}"
    if isinstance(xt, VectorType):
        ok = ct == TileType(DType.BOOL) or ct == VectorType(DType.BOOL, xt.width)
    elif isinstance(xt, (TileType, PtrType)):
        ok = isinstance(ct, TileType) and ct.shape == xt.shape
    else:
        ok = False
    return None if ok else f"where: condition {ct} does not match the values {xt}"


def _memory(ptr, mask, other) -> str | None:
    pt = ptr.type
    if not isinstance(pt, PtrType):
        return f"load: the address must be a pointer, not {pt}"
    if mask is not None and mask.type != TileType(DType.BOOL, pt.shape):
        return f"load: the mask must be {TileType(DType.BOOL, pt.shape)} (the pointer's shape), not {mask.type}"
    if other is not None and other.type != TileType(pt.dtype, pt.shape):
        return f"load: 'other' must be {TileType(pt.dtype, pt.shape)}, not {other.type}"
    return None


def _atomic(op, ptr, value, mask, compare) -> str | None:
    pt = ptr.type
    if not isinstance(pt, PtrType) or pt.space is AddressSpace.CONSTANT:
        return f"atomic_rmw: the address must point to device or threadgroup memory, not {pt}"
    if value.type != TileType(pt.dtype, pt.shape) or (compare is not None and compare.type != value.type):
        return f"atomic_rmw: the operands must be {TileType(pt.dtype, pt.shape)} to match {pt}"
    if mask is not None and mask.type != TileType(DType.BOOL, pt.shape):
        return f"atomic_rmw: the mask must be {TileType(DType.BOOL, pt.shape)}, not {mask.type}"
    if (compare is None) != (op is not AtomicOp.CAS):
        return "atomic_rmw: a compare operand goes with cas, and only with it"
    if pt.dtype not in ATOMIC_DTYPES[op]:
        return f"atomic_rmw {op.value}: Metal's atomics do not take {pt.dtype}"
    if pt.dtype.bits == 16 and pt.space is not AddressSpace.DEVICE:
        return f"atomic_rmw {op.value}: atomics on {pt.dtype} work on device memory only, not {pt}"
    return None


def _simd(x, lane, what: str) -> str | None:
    if not _per_thread(x.type):
        return f"{what}: the value must be a per-thread scalar or vector, not {x.type}"
    if lane is not None and not _is_int_scalar(lane.type):
        return f"{what}: the lane operand must be an integer scalar, not {lane.type}"
    return None


def check_value(n: object, stage: Stage) -> str | None:  # noqa: C901 - one case per node kind
    # The cases go from the most frequent node kinds (in Metal IR, which every compile verifies) to the
    # rarest, since a match tries them in turn; the classes are disjoint, so the order changes nothing else.
    match n:
        case Const(value, dtype):
            return None if fits(value, dtype) else f"constant {value!r} does not fit {dtype}"
        case Param() | Var():
            return None
        case Binary(op, lhs, rhs) if isinstance(op, BinOp):
            return _same_operands(op, lhs, rhs) or _binop_dtype(op, lhs.type.dtype, stage)
        case AddPtr(ptr, offset):
            pt, ot = ptr.type, offset.type
            if not isinstance(pt, PtrType):
                return f"addptr: the base must be a pointer, not {pt}"
            if not (isinstance(ot, TileType) and ot.dtype.is_int and ot.shape == pt.shape):
                return f"addptr: the offset must be an integer tile of shape {pt.shape}, not {ot}"
        case Load(ptr, mask, other):
            return _memory(ptr, mask, other)
        case AtomicRMW(op, ptr, value, mask, compare):
            return _atomic(op, ptr, value, mask, compare)
        case Compare(op, lhs, rhs) if isinstance(op, CmpOp):
            err = _same_operands(op, lhs, rhs)
            storage = lhs.type.dtype.storage_only if err is None else False
            return err or (_STORAGE_ONLY.format(what=op.value, dt=lhs.type.dtype) if storage else None)
        case Cast(x, dtype) if isinstance(dtype, DType):
            return None if _is_elementwise(x.type) else f"cast: the operand must be a value, not {x.type}"
        case Bitcast(x, dtype) if isinstance(dtype, DType):
            if not _is_elementwise(x.type):
                return f"bitcast: the operand must be a value, not {x.type}"
            xd = x.type.dtype
            if DType.BOOL in (xd, dtype) or xd.bits != dtype.bits:
                return f"bitcast: {xd} and {dtype} do not have the same width"
        case IntToPtr(x, dtype) if isinstance(dtype, DType):
            if not isinstance(x.type, TileType) or x.type.dtype not in (DType.I64, DType.U64):
                return f"inttoptr: the operand must be a 64-bit integer value, not {x.type}"
        case Fma(a, b, c):
            return _same_operands(BinOp.MUL, a, b) or _same_operands(BinOp.ADD, a, c) or (
                None if a.type.dtype.is_float else f"fma needs float operands, not {a.type.dtype}")
        case Where(cond, x, y):
            return _where(cond, x, y)
        case Unary(op, x) if isinstance(op, UnOp):
            if not _is_elementwise(x.type):
                return f"{op.value}: the operand must be a value, not {x.type}"
            return _unop_dtype(op, x.type.dtype)
        case Builtin(kind, axis) if isinstance(kind, BuiltinKind):
            allowed = (0, 1, 2) if kind.has_axes else (0,)
            return None if axis in allowed else f"builtin {kind.value}: axis {axis} is not one of {allowed}"
        case Extract(vec, lane):
            vt = vec.type
            if isinstance(vt, MatrixType):
                if lane not in (0, 1):
                    return f"extract: a thread holds elements 0 and 1 of {vt}, not {lane}"
            elif not isinstance(vt, VectorType) or not 0 <= lane < vt.width:
                return f"extract: lane {lane} is out of range for {vt}"
        case VecLoad(ptr, width):
            if not _is_scalar_ptr(ptr.type):
                return f"vload: the address must be a scalar pointer, not {ptr.type}"
            if width not in (2, 3, 4):
                return f"vload: vectors have 2, 3 or 4 lanes, not {width}"
        case MakeVector(elems):
            if not 2 <= len(elems) <= 4:
                return f"vector: needs 2 to 4 lanes, not {len(elems)}"
            t0 = elems[0].type
            if not (isinstance(t0, TileType) and t0.is_scalar) or any(e.type != t0 for e in elems):
                return "vector: lanes must be scalars of one type"
        case Splat(x, width):
            if not (isinstance(x.type, TileType) and x.type.is_scalar):
                return f"splat: the value must be a scalar, not {x.type}"
            if width not in (2, 3, 4):
                return f"splat: vectors have 2, 3 or 4 lanes, not {width}"
        case MatrixOf(x, y):
            if not (isinstance(x.type, TileType) and x.type.is_scalar and x.type == y.type):
                return f"matrix_of: the elements must be two scalars of one type, not {x.type} and {y.type}"
        case MatrixFill(value):
            if not (isinstance(value.type, TileType) and value.type.is_scalar):
                return f"matrix_fill: the value must be a scalar, not {value.type}"
        case MatrixLoad(ptr, stride, _):
            pt = ptr.type
            if not _is_scalar_ptr(pt) or pt.space is AddressSpace.CONSTANT:
                return f"matrix_load: the address must be a device or threadgroup pointer, not {pt}"
            if not _is_int_scalar(stride.type):
                return f"matrix_load: the stride must be an integer scalar, not {stride.type}"
        case MatrixMultiplyAccumulate(a, b, c):
            ts = (a.type, b.type, c.type)
            if not all(isinstance(t, MatrixType) for t in ts):
                return f"matrix_mac: needs three simdgroup matrices, not {', '.join(map(str, ts))}"
            if ts[0].dtype != ts[1].dtype:
                return f"matrix_mac: a and b must have one dtype, not {ts[0].dtype} and {ts[1].dtype}"
        case Broadcast(x, shape):
            xt = x.type
            if not isinstance(xt, (TileType, PtrType)) or not broadcast_shapes(xt.shape, tuple(shape)):
                return f"broadcast: cannot broadcast {xt} to shape {tuple(shape)}"
        case ProgramId(axis) | NumPrograms(axis):
            return None if axis in (0, 1, 2) else f"the grid axis must be 0, 1 or 2, not {axis}"
        case Arange(start, stop):
            if not (isinstance(start, int) and isinstance(stop, int) and start < stop):
                return f"arange {start}, {stop}: needs integers with start < stop"
            if not (fits(start, DType.I32) and fits(stop - 1, DType.I32)):
                return f"arange {start}, {stop}: out of i32 range"
        case Full(shape, value):
            if not isinstance(value, Const):
                return f"full: the fill value must be a Const, not {type(value).__name__}"
        case ExpandDims(x, axis):
            xt = x.type
            if not isinstance(xt, (TileType, PtrType)) or not 0 <= axis <= len(xt.shape):
                return f"expand_dims: axis {axis} is out of range for {xt}"
        case Gather(x, index, axis):
            xt, it = x.type, index.type
            if not (isinstance(xt, TileType) and isinstance(it, TileType) and it.dtype.is_int
                    and len(xt.shape) == len(it.shape) and 0 <= axis < len(xt.shape)
                    and all(a == b for d, (a, b) in enumerate(zip(xt.shape, it.shape)) if d != axis)):
                return f"gather: needs an integer index tile shaped like {xt} but along axis {axis}, not {it}"
        case Transpose(x):
            xt = x.type
            if not isinstance(xt, (TileType, PtrType)) or len(xt.shape) != 2:
                return f"transpose: needs a 2-D tile, not {xt}"
        case AllActive(x):
            if not isinstance(x.type, TileType):
                return f"all_active: needs a number tile, not {x.type}"
        case ConvertLayout(x, src, dst):
            if not isinstance(x.type, TileType) or not x.type.shape:
                return f"convert_layout: needs a number tile, not {x.type}"
            if not (isinstance(src, Blocked) and isinstance(dst, Shared)):
                return f"convert_layout: moves a tile from a blocked layout to shared, not {src!r} to {dst!r}"
        case Permute(x, order):
            xt = x.type
            if not isinstance(xt, (TileType, PtrType)) or sorted(order) != list(range(len(xt.shape))) \
                    or not xt.shape:
                return f"permute: {list(order)} is not a permutation of the dimensions of {xt}"
        case Join(a, b):
            at, bt = a.type, b.type
            if not isinstance(at, (TileType, PtrType)) or at != bt:
                return f"join: needs two tiles of one type, not {at} and {bt}"
        case Take(x, axis, index):
            xt = x.type
            if not isinstance(xt, (TileType, PtrType)) or not 0 <= axis < len(xt.shape) \
                    or not 0 <= index < xt.shape[axis]:
                return f"take: element {index} of axis {axis} is out of range for {xt}"
        case Reshape(x, shape):
            xt = x.type
            if not isinstance(xt, (TileType, PtrType)) or xt.size != math.prod(shape):
                return f"reshape: cannot reshape {xt} to shape {tuple(shape)}"
        case Reduce(op, x, axis) if isinstance(op, ReduceOp):
            xt = x.type
            if not isinstance(xt, TileType) or not 0 <= axis < len(xt.shape):
                return f"reduce {op.value}: axis {axis} is out of range for {xt}"
            if xt.dtype is DType.BOOL:
                return f"reduce {op.value} is not defined on bool"
            if xt.dtype.storage_only:
                return _STORAGE_ONLY.format(what=f"reduce {op.value}", dt=xt.dtype)
        case ArgReduce(op, x, axis, valid) if op in (ReduceOp.MAX, ReduceOp.MIN):
            xt = x.type
            if not isinstance(xt, TileType) or not 0 <= axis < len(xt.shape) or xt.dtype is DType.BOOL \
                    or xt.dtype.storage_only:
                return f"argreduce {op.value}: needs a numeric tile with axis {axis}, not {xt}"
            if valid is not None and valid.type != xt.with_dtype(DType.BOOL):
                return f"argreduce {op.value}: valid must be a bool tile of shape {xt.shape}, not {valid.type}"
        case Scan(op, x, axis, reverse) if isinstance(op, ReduceOp) and isinstance(reverse, bool):
            xt = x.type
            if not isinstance(xt, TileType) or not 0 <= axis < len(xt.shape) or xt.dtype is DType.BOOL \
                    or xt.dtype.storage_only:
                return f"scan {op.value}: needs a numeric tile with axis {axis}, not {xt}"
        case Dot(a, b):
            at, bt = a.type, b.type
            if not (isinstance(at, TileType) and isinstance(bt, TileType) and len(at.shape) == len(bt.shape)
                    and len(at.shape) in (2, 3)):
                return f"dot: needs two 2-D or two 3-D tiles, not {at} and {bt}"
            if at.shape[-1] != bt.shape[-2] or at.shape[:-2] != bt.shape[:-2]:
                return f"dot: inner dimensions differ: {list(at.shape)} x {list(bt.shape)}"
            if at.dtype != bt.dtype or at.dtype is DType.BOOL or at.dtype.storage_only:
                return f"dot: operands must have one numeric dtype, not {at.dtype} and {bt.dtype}"
        case ThreadId() | SimdLaneId() | SimdgroupId():
            return None
        case SharedAlloc(shape, dtype):
            if not shape or not all(isinstance(d, int) and d > 0 for d in shape):
                return f"shared_alloc: the shape {shape} must be non-empty with positive dimensions"
        case Scratch(use, part, dtype, size):
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in (use, part, size)) or size <= 0 \
                    or use < 0 or part < 0 or not isinstance(dtype, DType):
                return f"scratch: use {use!r}, part {part!r} and size {size!r} must be ints (size positive)"
        case RingBuffer(stage, use, part, dtype, size, buffers):
            if not (isinstance(stage, Var) and stage.type.is_scalar and stage.type.dtype.is_int):
                return "ring: the stage must be an integer variable"
            if not all(isinstance(x, int) and x > 0 for x in (size, buffers)) or part < 0 or use < 0:
                return f"ring: size {size!r} and buffers {buffers!r} must be positive"
        case SimdShuffleXor(x, mask):
            return _simd(x, mask, "simd_shuffle_xor")
        case SimdBroadcast(x, lane):
            return _simd(x, lane, "simd_broadcast")
        case SimdReduce(op, x) if isinstance(op, ReduceOp):
            err = _simd(x, None, f"simd_reduce {op.value}")
            return err or (f"simd_reduce {op.value} is not defined on bool" if x.type.dtype is DType.BOOL else None)
        case _:
            return f"{type(n).__name__} is not a well-formed value node"
    return None


__all__ = ["check_type", "check_value"]
