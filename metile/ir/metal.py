"""Metal IR only: per-thread values and statements for Apple primitives, each with one MSL rendering.

A Metal IR kernel (`Stage.METAL`) holds the shared nodes of `values`/`stmts` on per-thread scalars
(`TileType` of shape `()`), scalar pointers, `VectorType`s and `MatrixType`s, plus these nodes:

| node                                 | MSL                                                          |
|--------------------------------------|--------------------------------------------------------------|
| `Builtin(kind, axis)`                | a `[[kind]]` kernel argument (`.x/.y/.z` for `axis`), `uint` |
| `VecLoad(ptr, width)`                | `*(device const float4*)(ptr)`                               |
| `VecStore(ptr, value)`               | `*(device float4*)(ptr) = value;`                            |
| `Extract(vec, lane)`                 | `vec[lane]`                                                  |
| `MakeVector(elems)`                  | `float4(a, b, c, d)`                                         |
| `Splat(x, width)`                    | `float4(x)`                                                  |
| `MatrixFill(value)`                  | `make_filled_simdgroup_matrix<float, 8, 8>(value)`           |
| `MatrixOf(x, y)`                     | `mt_matrix_of(x, y)`: this thread's two elements             |
| `MatrixLoad(ptr, stride, transpose)` | `simdgroup_load(m, ptr, stride, 0, transpose)`               |
| `MatrixMultiplyAccumulate(a, b, c)`  | `simdgroup_multiply_accumulate(d, a, b, c)`                  |
| `MatrixStore(value, ptr, stride, t)` | `simdgroup_store(value, ptr, stride, 0, t)`                  |
| `TensorMatmul(a, lda, b, ldb, c, ...)`| Metal 4 `matmul2d` over tensors of row-major memory (below)  |
| `TensorHold(name, shape, ...)`       | a zeroed cooperative destination tensor of a `matmul2d`      |
| `TensorRelease(name, ptr, ld, ...)`  | `name.store(tensor)`: a held destination to row-major memory |

Shared nodes render as: `Binary` an operator or `max`/`min`/`pow`, `Unary` `-`/`~`/`!` or a function,
`Compare` an operator, `Where` `c ? x : y` (`select` for vectors), `Cast` `static_cast<T>`, `AddPtr`
`ptr + offset`, `Load` `ptr[0]` (`mask ? ptr[0] : other` when masked), `Store`/`AtomicAdd` an
assignment or `atomic_fetch_add_explicit` (inside `if (mask)` when masked), `SharedAlloc` a
`threadgroup T name[size];` declaration, `Simd*` the `simd_*` function, `Barrier` `threadgroup_barrier`.

Vector and matrix loads, and matrix multiply-accumulate (a simdgroup collective), are only ever the
value of a `Let`, as loads and collectives are at every level.
"""

from __future__ import annotations

from functools import cached_property

import attrs

from metile.ir.node import as_tuple, node
from metile.ir.ops import BuiltinKind
from metile.ir.types import MATRIX_TYPES, SCALAR_TYPES, DType, MatrixType, TileType, VectorType, vector_type
from metile.ir.values import Stmt, Value

_U32 = SCALAR_TYPES[DType.U32]


@node
class Builtin(Value):
    """A thread-position builtin (a `uint`); `axis` picks `.x/.y/.z` of the `uint3` kinds, else 0."""

    kind: BuiltinKind
    axis: int = 0

    @cached_property
    def type(self) -> TileType:
        return _U32


@node
class VecLoad(Value):
    """Read `width` consecutive elements at `ptr` (which must be aligned to the vector size)."""

    ptr: Value
    width: int

    @cached_property
    def type(self) -> VectorType:
        return vector_type(self.ptr.type.dtype, self.width)


@node
class VecStore(Stmt):
    """Write the lanes of `value` to consecutive elements at `ptr` (aligned to the vector size)."""

    ptr: Value
    value: Value


@node
class Extract(Value):
    """Lane `lane` of the vector `vec`; of a simdgroup matrix, this thread's element `lane` (0 or 1) of the two it
    holds (`thread_elements()[lane]`: with lane l of the simdgroup, row `l / 16 * 4 + l / 2 % 4` and column
    `l / 8 % 2 * 4 + l % 2 * 2 + lane`, `metile.rewrite.staging.mma_lanes`)."""

    vec: Value
    lane: int

    @cached_property
    def type(self) -> TileType:
        dtype = self.vec.type.dtype
        return SCALAR_TYPES.get(dtype) or TileType(dtype)


@node
class MakeVector(Value):
    """The vector whose lanes are the scalars `elems`."""

    elems: tuple[Value, ...] = attrs.field(converter=as_tuple)

    @cached_property
    def type(self) -> VectorType:
        return vector_type(self.elems[0].type.dtype, len(self.elems))


@node
class Splat(Value):
    """The vector with all `width` lanes equal to the scalar `x`."""

    x: Value
    width: int

    @cached_property
    def type(self) -> VectorType:
        return vector_type(self.x.type.dtype, self.width)


@node
class MatrixFill(Value):
    """An 8x8 simdgroup matrix with every element the scalar `value`."""

    value: Value

    @cached_property
    def type(self) -> MatrixType:
        return MATRIX_TYPES.get(d := self.value.type.dtype) or MatrixType(d)


@node
class MatrixOf(Value):
    """The 8x8 simdgroup matrix of which this thread holds `x` and `y`, its elements 0 and 1 (`Extract` of a matrix
    says which elements those are): each lane gives its own two."""

    x: Value
    y: Value

    @cached_property
    def type(self) -> MatrixType:
        return MATRIX_TYPES.get(d := self.x.type.dtype) or MatrixType(d)


@node
class MatrixLoad(Value):
    """Load an 8x8 simdgroup matrix whose element (r, c) is `ptr[r * stride + c]` (`ptr[c * stride + r]`
    when `transpose`). A simdgroup collective."""

    ptr: Value
    stride: Value
    transpose: bool = False

    @cached_property
    def type(self) -> MatrixType:
        return MATRIX_TYPES.get(d := self.ptr.type.dtype) or MatrixType(d)


@node
class MatrixMultiplyAccumulate(Value):
    """`a @ b + c` on 8x8 simdgroup matrices (`a` and `b` of one dtype; the result has `c`'s dtype).
    A simdgroup collective."""

    a: Value
    b: Value
    c: Value

    @cached_property
    def type(self) -> MatrixType:
        return MATRIX_TYPES.get(d := self.c.type.dtype) or MatrixType(d)


@node
class MatrixStore(Stmt):
    """Store the 8x8 simdgroup matrix `value` with element (r, c) at `ptr[r * stride + c]` (transposed:
    `ptr[c * stride + r]`). A simdgroup collective."""

    value: Value
    ptr: Value
    stride: Value
    transpose: bool = False


@node
class TensorMatmul(Stmt):
    """`c (+)= a @ b` by MetalPerformancePrimitives' `matmul2d` (Metal 4 tensor operations): `a` points at the
    first element of an `m x k` row-major matrix with row stride `lda`, `b` of a `k x n` one (`ldb`), `c` of the
    `m x n` f32 destination (`ldc`), each seen as a `tensor` of its address space; `shape` is `(m, n, k)`.
    `accumulate` adds the product to `c` (`multiply_accumulate`), else overwrites it; `relaxed` lets f32 inputs be
    multiplied at reduced precision (`relaxed_precision`, TF32 on the M5). `simdgroups` 0: each simdgroup runs its
    own (`execution_simdgroup`), behind a `simdgroup_barrier` on each side so that its lanes' writes of `c` before and
    reads after are ordered with the operation's; N: the N simdgroups of the threadgroup run one
    (`execution_simdgroups<N>`), between threadgroup barriers the lowering places. A collective.
    With `held` (the name of a `TensorHold`), the destination is that cooperative tensor, in registers, `c` and `ldc`
    are None and the operation always accumulates (no fence: the lanes do not touch the destination's memory)."""

    a: Value
    lda: Value
    b: Value
    ldb: Value
    c: Value | None
    ldc: Value | None
    shape: tuple[int, int, int] = attrs.field(converter=as_tuple)
    accumulate: bool = True
    relaxed: bool = False
    simdgroups: int = 0
    held: str = ""


@node
class TensorHold(Stmt):
    """Declares `name`, the cooperative destination tensor (f32, in registers) of the `matmul2d` of `shape`
    `(m, n, k)` over `dtype` operands in threadgroup memory (`relaxed` and `simdgroups` as in `TensorMatmul`), with
    every element zero. The `TensorMatmul`s that name it as `held` accumulate into it in place, across the iterations
    of a loop, until a `TensorRelease` writes it out."""

    name: str
    shape: tuple[int, int, int] = attrs.field(converter=as_tuple)
    dtype: DType
    relaxed: bool = False
    simdgroups: int = 0


@node
class TensorRelease(Stmt):
    """Stores the held destination `name` (`TensorHold`), `shape` `(m, n)`, to the row-major f32 memory at `ptr`
    (row stride `ld`). `simdgroups` 0 (a simdgroup's own tensor): behind a `simdgroup_barrier` on each side, so that
    its lanes' earlier reads of that memory and later ones are ordered with the store; N (the threadgroup's): between
    threadgroup barriers the lowering places."""

    name: str
    ptr: Value
    ld: Value
    shape: tuple[int, int] = attrs.field(converter=as_tuple)
    simdgroups: int = 0


METAL_VALUES: tuple[type[Value], ...] = (
    Builtin, VecLoad, Extract, MakeVector, Splat, MatrixFill, MatrixOf, MatrixLoad, MatrixMultiplyAccumulate,
)
METAL_STMTS: tuple[type[Stmt], ...] = (VecStore, MatrixStore, TensorMatmul, TensorHold, TensorRelease)

__all__ = [
    "METAL_STMTS", "METAL_VALUES", "Builtin", "Extract", "MakeVector", "MatrixFill", "MatrixLoad", "MatrixOf",
    "MatrixMultiplyAccumulate", "MatrixStore", "Splat", "TensorHold", "TensorMatmul", "TensorRelease", "VecLoad",
    "VecStore",
]
