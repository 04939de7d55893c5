"""Tile IR and Metal IR: nodes, types, locations, errors, printer, parser and verifier.

Modules: `node` (the `@node` base and traversal), `types` (dtypes and value types), `ops` (operation
kinds, stages, fences, builtins), `values` and `stmts` (nodes every level shares), `tile` (Tile IR
only), `metal` (Metal IR only), `simt` (SIMT IR only: threadgroup memory not placed yet),
`stages` (which nodes each stage admits), `printer`, `scanner`,
`parser` and `parse_ops` (the text form), `typecheck` and `verify` (the verifier), `errors` (`Loc`,
`MetileError`).
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
    VecLoad,
    VecStore,
)
from metile.ir.node import Node, children, map_children, node, walk
from metile.ir.ops import BinOp, BuiltinKind, CmpOp, Fence, ReduceOp, Stage, UnOp
from metile.ir.parser import ParseError, parse, parse_type
from metile.ir.printer import pretty
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
    Arange,
    ArgReduce,
    Broadcast,
    Dot,
    ExpandDims,
    Full,
    Gather,
    NumPrograms,
    ProgramId,
    Reduce,
    Reshape,
    Scan,
    SimdgroupId,
    SimdgroupRole,
    SimdLaneId,
    ThreadId,
    Transpose,
    dot_dtype,
)
from metile.ir.types import AddressSpace, DType, MatrixType, PtrType, TileType, Type, VectorType
from metile.ir.values import (
    AddPtr,
    Binary,
    Bitcast,
    Cast,
    Compare,
    Const,
    Fma,
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

__all__ = [
    "LET_ONLY", "STMT_CLASSES", "VALUE_CLASSES", "AddPtr", "AddressSpace", "Arange", "ArgReduce", "AtomicAdd",
    "Barrier", "BinOp", "Binary", "Bitcast", "Broadcast", "Builtin", "BuiltinKind", "Cast", "CmpOp", "Compare",
    "CompileOptions", "DeviceAssert", "DevicePrint", "Schedule", "Const", "DType",
    "Dot", "ExpandDims", "Extract", "Fence", "Fma", "For", "Full", "If", "Kernel", "LaunchPlan", "Let", "Load", "Loc",
    "MakeVector", "MatrixFill", "MatrixLoad", "MatrixOf", "MatrixMultiplyAccumulate", "MatrixStore", "MatrixType",
    "MetileError", "Node", "NumPrograms", "Param", "ParseError", "ProgramId", "PtrType", "Reduce", "ReduceOp",
    "Gather", "Reshape", "RingBarrier", "RingBuffer", "RoleSpan", "Scan",
    "Scratch", "SharedAlloc", "SimdBroadcast", "SimdLaneId", "SimdReduce", "SimdShuffleXor",
    "SimdgroupId",
    "SimdgroupRole", "Splat", "Stage", "Stmt", "Store", "ThreadId", "TileType", "Transpose", "Type", "UnOp", "Unary",
    "Value", "Var", "VecLoad", "VecStore", "VectorType", "VerifyError", "Where", "While", "admits",
    "children", "dot_dtype", "map_children", "node", "parse", "parse_type", "pretty", "render_diagnostic",
    "verify", "walk",
]
