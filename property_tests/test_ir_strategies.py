"""Hypothesis strategies that build well-typed kernels directly (no filtering): `tile_kernels()` and
`metal_kernels()` (`test_ir_roundtrip.py` checks that together they reach every node class).

A generator asks for a value of a given type and picks among the nodes that can produce it, with
operands of the types that node needs; names in scope are tracked as statements are built, so every
kernel is valid by construction (the round-trip properties also verify each one).
"""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

from metile.ir import (
    AddPtr,
    AddressSpace,
    AllActive,
    Arange,
    ArgReduce,
    AtomicAdd,
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
    DeviceAssert,
    DevicePrint,
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
    MakeVector,
    MatrixFill,
    MatrixLoad,
    MatrixMultiplyAccumulate,
    MatrixOf,
    MatrixStore,
    MatrixType,
    NumPrograms,
    Param,
    Permute,
    ProgramId,
    PtrType,
    Reduce,
    ReduceOp,
    Reshape,
    RingBarrier,
    RingBuffer,
    Scan,
    Scratch,
    SharedAlloc,
    SimdBroadcast,
    SimdgroupId,
    SimdgroupRole,
    SimdLaneId,
    SimdReduce,
    SimdShuffleXor,
    Splat,
    Stage,
    Store,
    Take,
    TensorHold,
    TensorMatmul,
    TensorRelease,
    ThreadId,
    TileType,
    Transpose,
    Unary,
    UnOp,
    Var,
    VecLoad,
    VecStore,
    VectorType,
    Where,
    While,
    layouts,
)
from metile.ir.types import ATOMIC_DTYPES

DTYPES = [d for d in DType if not d.storage_only]  # 8-bit floats have no constants: tests of their own
NUMERIC = [d for d in DTYPES if d is not DType.BOOL]
FLOATS = [DType.F32, DType.F16, DType.BF16]
SHAPES = [(), (2,), (4,), (2, 4), (4, 1), (1, 2, 2)]
I32 = TileType(DType.I32)
BOOL = TileType(DType.BOOL)


def binops(dt: DType, stage: Stage) -> list[BinOp]:
    if dt is DType.BOOL:
        return [BinOp.AND, BinOp.OR, BinOp.XOR]
    ops = [BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MAX, BinOp.MIN, BinOp.TRUNCDIV, BinOp.REM]
    ops += [] if stage is Stage.METAL else [BinOp.FLOORDIV, BinOp.MOD]
    ops += [BinOp.DIV, BinOp.POW] if dt.is_float else [BinOp.AND, BinOp.OR, BinOp.XOR, BinOp.SHL, BinOp.SHR,
                                                        BinOp.MULHI]
    return ops


def unops(dt: DType) -> list[UnOp]:
    if dt is DType.BOOL:
        return [UnOp.NOT]
    if dt.is_int:
        return [UnOp.NEG, UnOp.ABS, UnOp.NOT]
    return [op for op in UnOp if op is not UnOp.NOT]


class Gen:
    """Draws IR for one kernel at `stage`; `env` lists the Params and Vars in scope."""

    def __init__(self, draw, stage: Stage):
        self.draw = draw
        self.stage = stage
        self.tile = stage is Stage.TILE
        self.names = itertools.count()

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def coin(self) -> bool:
        return self.draw(st.booleans())

    def fresh(self, ty) -> Var:
        return Var(self.pick(["v", "x", "acc_"]) + str(next(self.names)), ty)

    # ---- types and leaves

    def value_type(self):
        dt = self.pick(DTYPES)
        if self.tile:
            return TileType(dt, self.pick(SHAPES))
        kind = self.pick(["scalar", "scalar", "vector", "matrix"])
        if kind == "vector":
            return VectorType(dt, self.pick([2, 3, 4]))
        return MatrixType(self.pick(FLOATS)) if kind == "matrix" else TileType(dt)

    def const(self, dt: DType) -> Const:
        if dt is DType.BOOL:
            return Const(self.coin(), dt)
        if dt.is_float:
            return Const(self.draw(st.floats()), dt)
        bits = dt.bits
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dt.is_signed else (0, (1 << bits) - 1)
        return Const(self.draw(st.one_of(st.integers(max(lo, -4), min(hi, 4)), st.sampled_from([lo, hi]))), dt)

    def leaf(self, ty, env):
        options = [v for v in env if v.type == ty]
        match ty:
            case TileType(dt, ()):
                options.append(self.const(dt))
                if dt is DType.I32 and self.tile:
                    options += [ProgramId(self.pick([0, 1, 2])), NumPrograms(self.pick([0, 1, 2])), ThreadId(),
                                SimdLaneId(), SimdgroupId()]
                if dt is DType.U32 and not self.tile:
                    kind = self.pick(list(BuiltinKind))
                    options.append(Builtin(kind, self.pick([0, 1, 2]) if kind.has_axes else 0))
            case TileType(dt, shape):
                options.append(Full(shape, self.const(dt)))
                if dt is DType.I32 and len(shape) == 1:
                    start = self.draw(st.integers(-8, 8))
                    options.append(Arange(start, start + shape[0]))
            case VectorType(dt, width):
                options.append(Splat(self.const(dt), width))
                options.append(MakeVector([self.const(dt) for _ in range(width)]))
            case MatrixType(dt):
                options.append(MatrixFill(self.const(dt)))
                options.append(MatrixOf(self.const(dt), self.const(dt)))
        return self.pick(options)

    # ---- values

    def value(self, ty, env, depth: int = 2):
        if depth <= 0 or isinstance(ty, MatrixType) or self.draw(st.integers(0, 3)) == 0:
            return self.leaf(ty, env)
        d = depth - 1
        dt = ty.dtype
        builders = ["binary", "unary", "where", "cast"]
        builders += ["bitcast"] if dt is not DType.BOOL else []
        builders += ["fma"] if dt.is_float else []
        builders += ["compare"] if dt is DType.BOOL else []
        if self.tile and ty.shape:
            builders += ["broadcast", "reshape"] + (["expand_dims"] if 1 in ty.shape else [])
            builders += ["transpose"] if len(ty.shape) == 2 else []
            builders += ["all_active", "convert_layout"] if dt is not DType.BOOL else []
            builders += ["permute", "take"]
            builders += ["join"] if ty.shape[-1] == 2 else []
            builders += ["gather"]
        if self.tile and dt is not DType.BOOL:
            builders += ["reduce", "scan"]
        if self.tile and dt is DType.I32:
            builders.append("argreduce")
        if self.tile and len(ty.shape) == 2 and dt in (DType.F32, DType.I32):
            builders.append("dot")
        if not self.tile and isinstance(ty, TileType):
            builders.append("extract")
        match self.pick(builders):
            case "binary":
                return Binary(self.pick(binops(dt, self.stage)), self.value(ty, env, d), self.value(ty, env, d))
            case "unary":
                return Unary(self.pick(unops(dt)), self.value(ty, env, d))
            case "compare":
                src = self.same_kind(ty, self.pick(DTYPES))
                return Compare(self.pick(list(CmpOp)), self.value(src, env, d), self.value(src, env, d))
            case "where":
                cond_ty = self.same_kind(ty, DType.BOOL)
                if isinstance(ty, VectorType) and self.coin():
                    cond_ty = BOOL
                return Where(self.value(cond_ty, env, d), self.value(ty, env, d), self.value(ty, env, d))
            case "cast":
                return Cast(self.value(self.same_kind(ty, self.pick(DTYPES)), env, d), dt)
            case "bitcast":
                same = [x for x in DTYPES if x is not DType.BOOL and x.bits == dt.bits]
                return Bitcast(self.value(self.same_kind(ty, self.pick(same)), env, d), dt)
            case "fma":
                return Fma(self.value(ty, env, d), self.value(ty, env, d), self.value(ty, env, d))
            case "broadcast":
                src = tuple(self.pick([n, 1]) for n in ty.shape)[self.draw(st.integers(0, len(ty.shape))):]
                return Broadcast(self.value(TileType(dt, src), env, d), ty.shape)
            case "reshape":
                return Reshape(self.value(TileType(dt, self.pick([(ty.size,), ty.shape[::-1]])), env, d), ty.shape)
            case "transpose":
                return Transpose(self.value(TileType(dt, ty.shape[::-1]), env, d))
            case "all_active":
                return AllActive(self.value(ty, env, d))
            case "convert_layout":
                held = layouts.Blocked(self.pick([32, 64, 128]), self.pick([1, 2, 4]), self.pick([0, 1]))
                return ConvertLayout(self.value(ty, env, d), held, layouts.Shared())
            case "permute":
                order = tuple(self.draw(st.permutations(range(len(ty.shape)))))
                src = [0] * len(order)
                for i, o in enumerate(order):
                    src[o] = ty.shape[i]
                return Permute(self.value(TileType(dt, tuple(src)), env, d), order)
            case "take":
                axis = self.draw(st.integers(0, len(ty.shape)))
                extent = self.pick([2, 4])
                src = TileType(dt, ty.shape[:axis] + (extent,) + ty.shape[axis:])
                return Take(self.value(src, env, d), axis, self.draw(st.integers(0, extent - 1)))
            case "join":
                half = TileType(dt, ty.shape[:-1])
                return Join(self.value(half, env, d), self.value(half, env, d))
            case "gather":
                axis = self.draw(st.integers(0, len(ty.shape) - 1))
                src = ty.shape[:axis] + (self.pick([2, 4]),) + ty.shape[axis + 1:]
                index = self.value(TileType(self.pick([DType.I32, DType.U32]), ty.shape), env, d)
                return Gather(self.value(TileType(dt, src), env, d), index, axis)
            case "expand_dims":
                axis = ty.shape.index(1)
                return ExpandDims(self.value(TileType(dt, ty.shape[:axis] + ty.shape[axis + 1:]), env, d), axis)
            case "reduce":
                axis = self.draw(st.integers(0, len(ty.shape)))
                src = TileType(dt, ty.shape[:axis] + (self.pick([2, 4]),) + ty.shape[axis:])
                return Reduce(self.pick(list(ReduceOp)), self.value(src, env, d), axis)
            case "scan":
                if not ty.shape:
                    return self.leaf(ty, env)
                axis = self.draw(st.integers(0, len(ty.shape) - 1))
                return Scan(self.pick(list(ReduceOp)), self.value(ty, env, d), axis, self.coin())
            case "argreduce":
                axis = self.draw(st.integers(0, len(ty.shape)))
                src = self.pick([x for x in DTYPES if x is not DType.BOOL])
                shape = ty.shape[:axis] + (self.pick([2, 4]),) + ty.shape[axis:]
                valid = self.value(TileType(DType.BOOL, shape), env, d) if self.coin() else None
                op = self.pick([ReduceOp.MAX, ReduceOp.MIN])
                return ArgReduce(op, self.value(TileType(src, shape), env, d), axis, valid)
            case "dot":
                (m, n), k = ty.shape, self.pick([1, 2, 4])
                src = self.pick(FLOATS if dt.is_float else [DType.I8, DType.U8, DType.I16, DType.I32])
                return Dot(self.value(TileType(src, (m, k)), env, d), self.value(TileType(src, (k, n)), env, d),
                           tf32=src is DType.F32 and self.coin())
            case "extract":
                width = self.pick([2, 3, 4])
                return Extract(self.value(VectorType(dt, width), env, d), self.draw(st.integers(0, width - 1)))
        raise AssertionError("unreachable")

    @staticmethod
    def same_kind(ty, dt: DType):
        return VectorType(dt, ty.width) if isinstance(ty, VectorType) else TileType(dt, ty.shape)

    def bases(self, env, *, writable=False, dtypes=None):
        """Scalar pointers in scope (kernel buffers, threadgroup arrays, pointer Lets)."""
        return [v for v in env if isinstance(v.type, PtrType) and not v.type.shape
                and not (writable and v.type.space is AddressSpace.CONSTANT)
                and (dtypes is None or v.type.dtype in dtypes)]

    def pointer(self, base, shape, env):
        """A pointer expression of `shape` starting from the scalar pointer `base`."""
        p = base
        if self.coin():
            p = AddPtr(p, self.value(I32, env, 1))
        if shape:
            p = Broadcast(p, shape)
            if self.coin():
                p = AddPtr(p, self.value(TileType(self.pick([DType.I32, DType.U16]), shape), env, 1))
        return p

    # ---- statements

    def block(self, env, depth: int) -> tuple[list, list]:
        """Statements, and the names in scope after them."""
        env, out = list(env), []
        kinds = ["let", "let", "load", "store", "simd", "barrier", "atomic", "address", "print", "assert"]
        kinds += ["for", "if", "while"] + (["role"] if self.tile else []) if depth < 2 else []
        kinds += ["shared"] if depth == 0 else []
        kinds += [] if self.tile else ["vector", "matrix"]
        kinds += ["scratch"] if self.stage is Stage.SIMT else []
        for _ in range(self.draw(st.integers(0 if depth else 1, 4))):
            out += self.stmt(self.pick(kinds), env, depth)
        return out, env

    def let(self, value, env) -> list:
        var = self.fresh(value.type)
        env.append(var)
        return [Let(var, value)]

    def stmt(self, kind: str, env, depth: int) -> list:  # noqa: C901 - one case per statement kind
        shape = self.pick(SHAPES) if self.tile else ()
        match kind:
            case "let":
                if self.bases(env) and self.coin():
                    return self.let(self.pointer(self.pick(self.bases(env)), (), env), env)
                return self.let(self.value(self.value_type(), env), env)
            case "load" if self.bases(env):
                base = self.pick(self.bases(env))
                ty = TileType(base.type.dtype, shape)
                mask = self.value(ty.with_dtype(DType.BOOL), env, 1) if self.coin() else None
                other = self.value(ty, env, 1) if self.coin() else None
                return self.let(Load(self.pointer(base, shape, env), mask, other, self.coin()), env)
            case "store" if self.bases(env, writable=True):
                base = self.pick(self.bases(env, writable=True))
                ty = TileType(base.type.dtype, shape)
                mask = self.value(ty.with_dtype(DType.BOOL), env, 1) if self.coin() else None
                return [Store(self.pointer(base, shape, env), self.value(ty, env), mask)]
            case "atomic" if self.bases(env, writable=True, dtypes=(DType.I32, DType.U32, DType.F32)):
                base = self.pick(self.bases(env, writable=True, dtypes=(DType.I32, DType.U32, DType.F32)))
                ops = [op for op in AtomicOp if base.type.dtype in ATOMIC_DTYPES[op] and op is not AtomicOp.CAS]
                if self.coin():   # the old values bound to a name
                    op = self.pick([*ops, AtomicOp.CAS] if base.type.dtype in ATOMIC_DTYPES[AtomicOp.CAS] else ops)
                    ty = TileType(base.type.dtype, shape)
                    mask = self.value(ty.with_dtype(DType.BOOL), env, 1) if self.coin() else None
                    compare = self.value(ty, env, 1) if op is AtomicOp.CAS else None
                    return self.let(AtomicRMW(op, self.pointer(base, shape, env), self.value(ty, env), mask, compare),
                                    env)
                ty = TileType(base.type.dtype, shape)
                mask = self.value(ty.with_dtype(DType.BOOL), env, 1) if self.coin() else None
                return [AtomicAdd(self.pointer(base, shape, env), self.value(ty, env), mask, self.pick(ops))]
            case "address":
                return self.let(IntToPtr(self.value(TileType(self.pick([DType.I64, DType.U64])), env, 1),
                                         self.pick(DTYPES)), env)
            case "simd":
                dt = self.pick(NUMERIC)
                x = self.value(TileType(dt) if self.tile or self.coin() else VectorType(dt, 4), env)
                lane = self.value(TileType(self.pick([DType.I32, DType.U32])), env, 1)
                return self.let(self.pick([SimdShuffleXor(x, lane), SimdBroadcast(x, lane),
                                           SimdReduce(self.pick(list(ReduceOp)), x)]), env)
            case "barrier":
                return [Barrier(self.pick(list(Fence)))]
            case "print":
                values = [self.value(TileType(self.pick(NUMERIC), shape), env, 1) for _ in range(self.pick([0, 1, 2]))]
                index = [] if self.tile else [self.value(TileType(DType.I32), env, 1) for _ in range(3)]
                mask = None if self.tile or self.coin() else self.value(BOOL, env, 1)
                text = self.draw(st.text(max_size=6))
                return [DevicePrint(text, values, self.coin(), index, mask)]
            case "assert":
                mask = None if self.tile or self.coin() else self.value(BOOL, env, 1)
                return [DeviceAssert(self.value(TileType(DType.BOOL, shape), env, 1), self.draw(st.text(max_size=6)),
                                     mask)]
            case "shared":
                dims = self.pick([(4,), (2, 8), (16,)])
                return self.let(SharedAlloc(dims, self.pick(DTYPES)), env)
            case "vector" if self.bases(env):
                base = self.pick(self.bases(env))
                width = self.pick([2, 3, 4])
                if base.type.space is AddressSpace.CONSTANT or self.coin():
                    return self.let(VecLoad(self.pointer(base, (), env), width), env)
                return [VecStore(self.pointer(base, (), env), self.value(VectorType(base.type.dtype, width), env))]
            case "matrix":
                return self.matrix(env)
            case "scratch":
                return self.scratch(env)
            case "for":
                return self.for_stmt(env, depth)
            case "if":
                return self.if_stmt(env, depth)
            case "while":
                return self.while_stmt(env, depth)
            case "role":
                num_roles = self.pick([1, 2, 4])
                body, _ = self.block(env, depth + 1)
                return [SimdgroupRole(self.draw(st.integers(0, num_roles - 1)), num_roles, self.pick([0, 1, 2]), body)]
        return []

    def matrix(self, env) -> list:
        """A simdgroup-matrix load, store or product, or a Metal 4 matmul2d over f32 memory (its destination in
        memory, or held in registers: declared, run into, stored), each kind about as likely as the others."""
        bases = [b for b in self.bases(env, dtypes=FLOATS) if b.type.space is not AddressSpace.CONSTANT]
        dt = self.pick(FLOATS)
        stride = self.value(TileType(self.pick([DType.I32, DType.U32])), env, 1)
        f32 = [b for b in bases if b.type.dtype is DType.F32]
        kinds = ["product"] + (["memory"] if bases else []) + (["matmul2d", "held"] if f32 else [])
        match self.pick(kinds):
            case "memory":
                base = self.pick(bases)
                if self.coin():
                    return self.let(MatrixLoad(self.pointer(base, (), env), stride, self.coin()), env)
                value = self.value(MatrixType(base.type.dtype), env)
                return [MatrixStore(value, self.pointer(base, (), env), stride, self.coin())]
            case "matmul2d" | "held" as kind:
                a, b, c = (self.pointer(self.pick(f32), (), env) for _ in range(3))
                lda, ldb, ldc = (self.value(TileType(DType.I32), env, 1) for _ in range(3))
                if kind == "held":
                    m, n, k = (self.pick([16, 32]) for _ in range(3))
                    name, relaxed, sgs = f"tacc{next(self.names)}", self.coin(), self.pick([0, 2, 4])
                    return [TensorHold(name, (m, n, k), DType.F32, relaxed, sgs),
                            TensorMatmul(a, lda, b, ldb, None, None, (m, n, k), True, relaxed, sgs, name),
                            TensorRelease(name, c, ldc, (m, n), sgs)]
                shape = tuple(self.pick([8, 16, 32]) for _ in range(3))
                return [TensorMatmul(a, lda, b, ldb, c, ldc, shape, self.coin(), self.coin(), self.pick([0, 2, 4]))]
        a, b = self.value(MatrixType(dt), env), self.value(MatrixType(dt), env)
        return self.let(MatrixMultiplyAccumulate(a, b, self.value(MatrixType(self.pick(FLOATS)), env)), env)

    def scratch(self, env) -> list:
        """A region of scratch or of a ring (with an integer variable in scope for its stage), or a ring barrier."""
        dt, size = self.pick(DTYPES), self.pick([4, 64])
        stages = [v for v in env if isinstance(v, Var) and v.type == I32]
        use, part = self.draw(st.integers(0, 3)), self.draw(st.integers(0, 2))
        if stages and self.coin():
            return self.let(RingBuffer(self.pick(stages), use, part, dt, size, self.pick([2, 3])), env)
        if self.coin():
            return [RingBarrier(self.pick(["stage", "stage_1"]), self.coin())]
        return self.let(Scratch(use, part, dt, size), env)

    def carried(self, env):
        tys = [self.value_type() for _ in range(self.draw(st.integers(0, 2)))]
        return [self.fresh(t) for t in tys], [self.value(t, env) for t in tys]

    def results(self, carried, env) -> list[Var]:
        out = [self.fresh(c.type) for c in carried]
        env.extend(out)
        return out

    def for_stmt(self, env, depth: int) -> list:
        index = self.fresh(self.pick([I32, TileType(DType.U32)]) if not self.tile else I32)
        bounds = [self.value(index.type, env, 1) for _ in range(3)]
        carried, inits = self.carried(env)
        body, inner = self.block(env + [index, *carried], depth + 1)
        yields = [self.value(c.type, inner) for c in carried]
        stages = self.pick([1, 2, 3])
        return [For(index, *bounds, carried, inits, body, yields, self.results(carried, env), stages)]

    def if_stmt(self, env, depth: int) -> list:
        cond = self.value(BOOL, env)
        tys = [self.value_type() for _ in range(self.draw(st.integers(0, 2)))]
        then, then_env = self.block(env, depth + 1)
        orelse, else_env = self.block(env, depth + 1) if tys or self.coin() else ([], env)
        then_yields = [self.value(t, then_env) for t in tys]
        else_yields = [self.value(t, else_env) for t in tys]
        results = [self.fresh(t) for t in tys]
        env.extend(results)
        return [If(cond, then, orelse, then_yields, else_yields, results)]

    def while_stmt(self, env, depth: int) -> list:
        carried, inits = self.carried(env)
        cond_body, cond_env = self.block(env + carried, depth + 1)
        cond = self.value(BOOL, cond_env)
        body, body_env = self.block(cond_env, depth + 1)
        yields = [self.value(c.type, body_env) for c in carried]
        return [While(carried, inits, cond_body, cond, body, yields, self.results(carried, env))]

    def params(self) -> list[Param]:
        params = []
        spaces = [AddressSpace.DEVICE, AddressSpace.DEVICE, AddressSpace.CONSTANT]
        for _ in range(self.draw(st.integers(1, 3))):
            params.append(PtrType(self.pick(DTYPES), (), self.pick(spaces)))
        for _ in range(self.draw(st.integers(0, 2))):
            params.append(TileType(self.pick([DType.I32, DType.F32, DType.U32])))
        return [Param(f"P{i}", i, t) for i, t in enumerate(params)]


def kernels(stage: Stage):
    @st.composite
    def build(draw):
        g = Gen(draw, stage)
        params = g.params()
        body, _ = g.block(params, 0)
        meta = draw(st.dictionaries(st.sampled_from(["BLOCK", "num_warps", "threads_per_threadgroup"]),
                                    st.integers(-(1 << 40), 1 << 40), max_size=2))
        return Kernel(draw(st.sampled_from(["k", "add", "matmul_2"])), stage, params, body, meta)

    return build()


def tile_kernels():
    return kernels(Stage.TILE)


def metal_kernels():
    return kernels(Stage.METAL)


def simt_kernels():
    return kernels(Stage.SIMT)


def any_kernels():
    return st.one_of(tile_kernels(), metal_kernels(), simt_kernels())
