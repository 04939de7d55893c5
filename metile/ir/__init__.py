"""Tile IR and Metal IR: nodes, types, locations, errors, printer, parser and verifier.

Modules: `node` (the `@node` base and traversal), `types` (dtypes and value types), `ops` (operation
kinds, stages, fences, builtins), `values` and `stmts` (nodes every level shares), `tile` (Tile IR
only), `metal` (Metal IR only), `simt` (SIMT IR only: threadgroup memory not placed yet),
`stages` (which nodes each stage admits), `printer`, `scanner`,
`parser` and `parse_ops` (the text form), `names` (what names a value), `typecheck` and `verify` (the verifier),
`errors` (`Loc`, `MetileError`).

The text form (`pretty`, `parse`, `parse_type`, `ParseError`) is loaded when one of them is first read from this
package (PEP 562's module `__getattr__`): compiling a kernel neither prints nor parses IR.
"""

from __future__ import annotations

from metile.ir.errors import Loc, MetileError, render_diagnostic
from metile.ir.metal import (
    Builtin,
    Extract,
    MakeVector,
    MatrixFill,
    MatrixLoad,
    MatrixMultiplyAccumulate,
    MatrixOf,
    MatrixStore,
    Splat,
    TensorHold,
    TensorMatmul,
    TensorRelease,
    VecLoad,
    VecStore,
)
from metile.ir.node import Node, children, map_children, node, walk
from metile.ir.ops import AtomicOp, BinOp, BuiltinKind, CmpOp, Fence, ReduceOp, Stage, UnOp
from metile.ir.simt import RingBarrier, RingBuffer, Scratch
from metile.ir.stages import LET_ONLY, STMT_CLASSES, VALUE_CLASSES, admits
from metile.ir.stmts import (
    AtomicAdd,
    Barrier,
    CompileOptions,
    DeviceAssert,
    DevicePrint,
    For,
    If,
    Kernel,
    LaunchPlan,
    Let,
    RoleSpan,
    Schedule,
    Store,
    While,
)
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
    SimdgroupRole,
    SimdLaneId,
    Take,
    ThreadId,
    Transpose,
    dot_dtype,
)
from metile.ir.types import AddressSpace, DType, MatrixType, PtrType, TileType, Type, VectorType
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
    Stmt,
    Unary,
    Value,
    Var,
    Where,
)
from metile.ir.verify import VerifyError, verify

_TEXT_FORM = {"pretty": "metile.ir.printer", "parse": "metile.ir.parser", "parse_type": "metile.ir.parser",
              "ParseError": "metile.ir.scanner"}


def __getattr__(name: str):
    module = _TEXT_FORM.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = globals()[name] = getattr(importlib.import_module(module), name)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_TEXT_FORM})


__all__ = [
    "AddPtr", "AddressSpace", "AllActive", "Arange", "ArgReduce", "AtomicAdd", "AtomicOp", "AtomicRMW", "Barrier",
    "Binary", "BinOp", "Bitcast", "Broadcast", "Builtin", "BuiltinKind", "Cast", "CmpOp", "Compare", "CompileOptions",
    "Const", "ConvertLayout", "DeviceAssert", "DevicePrint", "Dot", "DType", "ExpandDims", "Extract", "Fence", "Fma",
    "For", "Full", "Gather", "If", "IntToPtr", "Join", "Kernel", "LaunchPlan", "Let", "LET_ONLY", "Load", "Loc",
    "MakeVector",
    "MatrixFill", "MatrixLoad", "MatrixMultiplyAccumulate", "MatrixOf", "MatrixStore", "MatrixType",
    "MetileError", "TensorHold", "TensorMatmul", "TensorRelease",
    "Node", "NumPrograms", "Param", "ParseError", "Permute", "ProgramId", "PtrType", "Reduce", "ReduceOp", "Reshape",
    "RingBarrier", "RingBuffer", "RoleSpan", "Scan", "Schedule", "Scratch", "SharedAlloc", "SimdBroadcast",
    "SimdgroupId", "SimdgroupRole", "SimdLaneId", "SimdReduce", "SimdShuffleXor", "Splat", "Stage", "Stmt",
    "STMT_CLASSES", "Store", "Take", "ThreadId", "TileType", "Transpose", "Type", "Unary", "UnOp", "Value",
    "VALUE_CLASSES", "Var", "VecLoad", "VecStore", "VectorType", "VerifyError", "Where", "While", "admits",
    "children", "dot_dtype", "map_children", "node", "parse", "parse_type", "pretty", "render_diagnostic",
    "verify", "walk",
]
