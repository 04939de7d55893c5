"""Tile IR only: whole-tile values (ranges, fills, shape changes, reductions, `Dot`), program and
thread identities, and the `SimdgroupRole` region.

A tile value is the whole tile of one program (one threadgroup); which thread holds which element
is decided by lowering. `ThreadId`, `SimdLaneId` and `SimdgroupId` are per-thread scalars, for the
thread-level constructs of the language (`thread_id()`, `shared`, `simd_shuffle_xor`); they are `i32`
here (Metal's builtins are `u32`; lowering converts).
"""

from __future__ import annotations

import enum
from functools import cached_property

import attrs
from pyrsistent import pvector
from pyrsistent.typing import PVector

from metile.ir.layouts import TileLayout
from metile.ir.node import as_tuple, node
from metile.ir.ops import ReduceOp
from metile.ir.types import SCALAR_TYPES, DType, TileType, Type, tile_type
from metile.ir.values import Const, Stmt, Value, Var

_I32 = SCALAR_TYPES[DType.I32]   # the type of the identities below
_I32_DTYPE = DType.I32   # read as a global: an enum class's attribute read goes through its metaclass's hook


@node
class ProgramId(Value):
    """This program's index along grid `axis` (0, 1 or 2)."""

    axis: int

    @cached_property
    def type(self) -> TileType:
        return _I32


@node
class NumPrograms(Value):
    """The number of programs along grid `axis`."""

    axis: int

    @cached_property
    def type(self) -> TileType:
        return _I32


@node
class Arange(Value):
    """The `i32` tile `[start, start + 1, ..., stop - 1]`."""

    start: int
    stop: int

    @cached_property
    def type(self) -> TileType:
        return tile_type(_I32_DTYPE, (self.stop - self.start,))


@node
class Full(Value):
    """A tile of `shape` with every element `value`."""

    shape: tuple[int, ...] = attrs.field(converter=as_tuple)
    value: Const

    @cached_property
    def type(self) -> TileType:
        return tile_type(self.value.dtype, self.shape)


@node
class Broadcast(Value):
    """`x` (a tile or a scalar, of values or pointers) broadcast to `shape` by numpy's rules."""

    x: Value
    shape: tuple[int, ...] = attrs.field(converter=as_tuple)

    @cached_property
    def type(self) -> Type:
        return self.x.type.with_shape(self.shape)


@node
class ExpandDims(Value):
    """`x` with a new dimension of size 1 inserted before dimension `axis` (`x[:, None]` is axis 1)."""

    x: Value
    axis: int

    @cached_property
    def type(self) -> Type:
        shape = self.x.type.shape
        return self.x.type.with_shape(shape[: self.axis] + (1,) + shape[self.axis:])


@node
class Reshape(Value):
    """`x` with the same elements in row-major order and a new `shape` of the same size."""

    x: Value
    shape: tuple[int, ...] = attrs.field(converter=as_tuple)

    @cached_property
    def type(self) -> Type:
        return self.x.type.with_shape(self.shape)


@node
class Transpose(Value):
    """The 2-D tile `x` with its two dimensions swapped: element `[i, j]` is `x[j, i]`."""

    x: Value

    @cached_property
    def type(self) -> Type:
        rows, cols = self.x.type.shape
        return self.x.type.with_shape((cols, rows))


@node
class AllActive(Value):
    """`x` with every element active (docs/language.md 5.3): where `x` is inactive it reads 0, as it does
    element-wise, but the element is active. `dot(a, b, acc)` reads its accumulator as `AllActive(acc)`, since
    a dot's result is active everywhere while `acc + dot(a, b)` keeps `acc`'s inactivity. `skip_inactive`
    removes it: it is `x` to every later pass."""

    x: Value

    @cached_property
    def type(self) -> Type:
        return self.x.type


@node
class Permute(Value):
    """`x` with its dimensions reordered: dimension `i` of the result is dimension `order[i]` of `x` (numpy's
    `transpose(x, order)`), so element `c` of the result is element `d` of `x` with `d[order[i]] = c[i]`."""

    x: Value
    order: tuple[int, ...] = attrs.field(converter=as_tuple)

    @cached_property
    def type(self) -> Type:
        shape = self.x.type.shape
        return self.x.type.with_shape(tuple(shape[i] for i in self.order))


@node
class Join(Value):
    """`a` and `b` (of one type) stacked along a new last dimension of size 2: element `[..., 0]` is `a[...]`,
    `[..., 1]` is `b[...]`."""

    a: Value
    b: Value

    @cached_property
    def type(self) -> Type:
        return self.a.type.with_shape(self.a.type.shape + (2,))


@node
class Take(Value):
    """Element `index` of `x` along dimension `axis`, which disappears: `x[..., index, ...]` (one half of a
    split is `Take(x, last, 0)` or `1`)."""

    x: Value
    axis: int
    index: int

    @cached_property
    def type(self) -> Type:
        shape = self.x.type.shape
        return self.x.type.with_shape(shape[: self.axis] + shape[self.axis + 1:])


@node
class ConvertLayout(Value):
    """`x`, moved from the layout `src` it is held in to the layout `dst` a statement reads it in
    (`convert_layout %x #blocked<128, 4> -> #shared`): the same elements, held elsewhere. `insert_conversions` puts
    one wherever a tile held in registers is read at elements other threads hold (a broadcast of a loaded row, a
    transpose or a taken index of a register tile, a reduction's result read along another axis); the lowering
    carries it out by one exchange through threadgroup memory."""

    x: Value
    src: TileLayout
    dst: TileLayout

    @cached_property
    def type(self) -> Type:
        return self.x.type


@node
class Gather(Value):
    """Elements of `x` picked along dimension `axis` by the integer tile `index` (Triton's `gather`): `index` has
    `x`'s rank and its extents but along `axis`, and element `[..., i, ...]` of the result (shaped like `index`) is
    `x[..., index[..., i, ...], ...]`. An index outside `[0, extent)` picks element `index mod extent` (the extent
    is a power of two where Triton's tiles are; for others it is clamped into range)."""

    x: Value
    index: Value
    axis: int

    @cached_property
    def type(self) -> Type:
        return self.x.type.with_shape(self.index.type.shape)


@node
class Reduce(Value):
    """`op` over dimension `axis` of `x`, which disappears (a 1-D tile reduces to a scalar). The result
    keeps `x`'s dtype; a full reduction of an n-D tile is a `Reshape` to 1-D then a `Reduce`."""

    op: ReduceOp
    x: Value
    axis: int

    @cached_property
    def type(self) -> TileType:
        shape = self.x.type.shape
        return tile_type(self.x.type.dtype, shape[: self.axis] + shape[self.axis + 1:])


@node
class ArgReduce(Value):
    """The index along dimension `axis` of `x`'s largest (`op` MAX) or smallest (MIN) element, the first on
    ties; the dimension disappears and the result is `i32`. Where the bool tile `valid` (of `x`'s shape) is
    false an element is skipped; when a whole line is skipped, its index is 0."""

    op: ReduceOp
    x: Value
    axis: int
    valid: Value | None = None

    @cached_property
    def type(self) -> TileType:
        shape = self.x.type.shape
        return tile_type(_I32_DTYPE, shape[: self.axis] + shape[self.axis + 1:])


@node
class Scan(Value):
    """The inclusive scan of `x` along dimension `axis` by `op` (`SUM`: cumulative sum, `PROD`: product,
    `MAX`/`MIN`): element `i` combines elements `0..i` of its line (`i..n-1` when `reverse`). Same type as
    `x`; narrow integers and 16-bit floats combine in 32 bits and round back, as `Reduce` does."""

    op: ReduceOp
    x: Value
    axis: int
    reverse: bool = False

    @cached_property
    def type(self) -> Type:
        return self.x.type


def dot_dtype(dtype: DType) -> DType:
    """The accumulator type of `Dot`: f32 for float inputs (f16 and bf16 accumulate in f32), i32 for
    integers."""
    return DType.F32 if dtype.is_float else DType.I32


class MmaEngine(enum.Enum):
    """What multiplies a `Dot`'s operands: Apple's 8x8 simdgroup matrices (every GPU family), or Metal 4's tensor
    operation `matmul2d` (targets with `tensor_ops`, the M5 on), each simdgroup its own block of the result
    (`execution_simdgroup`) or the whole threadgroup the whole product (`execution_simdgroups<N>`)."""

    SIMDGROUP_MATRIX = "simdgroup_matrix"
    MATMUL2D_SIMDGROUP = "matmul2d_simdgroup"
    MATMUL2D_THREADGROUP = "matmul2d_threadgroup"


@attrs.frozen
class MmaPlan:
    """How a `Dot` is computed on simdgroup matrices, as the optimisation passes chose (not an IR node; a kernel's
    `Schedule` holds one per product):
    - `pad`: elements added to each staged row of `a` and of `b` in threadgroup memory (`pad_staging`);
    - `serpentine`: the 8x8 products of a step run in serpentine order, every other row of pieces walked
      backwards, so that consecutive products share an operand (`serpentine_mma`);
    - `preload`: the operands of the next 8-wide step of k are loaded before the products of this one
      (`preload_fragments`);
    - `hoist`: for `a` and for `b`, whether the operand is the same in every iteration of the loop whose body
      computes the product, so that it is staged once, before the loop (`hoist_staging`);
    - `split`: the k dimension is cut into that many slices, each computed by its own simdgroups, whose partial
      sums are then added (`split_k`), so that a product with few 8x8 pieces keeps every simdgroup busy;
    - `direct`: for `a` and for `b`, whether the operand may be read straight from device memory into simdgroup
      matrices, without staging (`direct_operands`: an unmasked load, row-major with unit column stride);
    - `simdgroups`: `(sg_m, sg_n)`, how the simdgroups computing the product (those of one slice of k) are arranged
      over its grid of 8x8 pieces, as `assign_layouts` chose from the layout of the pieces (None: the lowering
      chooses). It applies where the product runs on `sg_m * sg_n * split` simdgroups;
    - `engine`: what multiplies the staged operands (`MmaEngine`; `use_tensor_ops` chooses `matmul2d` where the
      target has tensor operations);
    - `chunk`: the columns of `a` (rows of `b`) staged in threadgroup memory at a time, a multiple of 8 dividing k
      and short of it, each chunk multiplied before the next overwrites it (`plan_staging`, from the target's
      threadgroup memory and what the kernel's other scratch takes); None: staged whole."""

    pad: tuple[int, int] = (0, 0)
    serpentine: bool = False
    preload: bool = False
    hoist: tuple[bool, bool] = (False, False)
    split: int = 1
    direct: tuple[bool, bool] = (False, False)
    simdgroups: tuple[int, int] | None = None
    engine: MmaEngine = MmaEngine.SIMDGROUP_MATRIX
    chunk: int | None = None


@node
class Dot(Value):
    """The matrix product of `a` (`[M, K]`) and `b` (`[K, N]`), `[M, N]` in `dot_dtype(a.dtype)`; with a leading batch
    dimension (`[B, M, K]` and `[B, K, N]`), the `B` products `[B, M, N]`.
    `dot(a, b, acc)` in the language is `Binary(ADD, acc, Dot(a, b))`. How the optimisation passes chose to
    compute it is the kernel's `schedule.dots[dot]` (`MmaPlan()`, the plain way, when absent).
    `tf32`: f32 operands may be multiplied at TF32's precision (10 mantissa bits; Triton's
    `input_precision="tf32"`), which lets a target's tensor operations compute it; otherwise they are exact."""

    a: Value
    b: Value
    tf32: bool = attrs.field(default=False, kw_only=True)

    @cached_property
    def type(self) -> TileType:
        a, b = self.a.type.shape, self.b.type.shape
        return tile_type(dot_dtype(self.a.type.dtype), (*a[:-2], a[-2], b[-1]))


@node
class ThreadId(Value):
    """The index of this thread in its threadgroup."""

    @cached_property
    def type(self) -> TileType:
        return _I32


@node
class SimdLaneId(Value):
    """The index of this thread in its simdgroup (0 to 31)."""

    @cached_property
    def type(self) -> TileType:
        return _I32


@node
class SimdgroupId(Value):
    """The index of this thread's simdgroup in the threadgroup."""

    @cached_property
    def type(self) -> TileType:
        return _I32


@node
class SimdgroupRole(Stmt):
    """`with simdgroup_role(role, num_roles, num_sgs)`: `body` runs only on the simdgroups of role
    `role` (`num_sgs` simdgroups per role, or an even split among `num_roles` when 0). Values computed
    inside reach later statements only as `results` (one per `yields` entry, evaluated at the end of
    `body` by the role's simdgroups), like an `If`'s; other names are not visible after it. It orders
    nothing with respect to other roles."""

    role: int
    num_roles: int
    num_sgs: int
    body: PVector[Stmt] = attrs.field(converter=pvector)
    yields: tuple[Value, ...] = attrs.field(default=(), converter=as_tuple)
    results: tuple[Var, ...] = attrs.field(default=(), converter=as_tuple)


TILE_VALUES: tuple[type[Value], ...] = (
    ProgramId, NumPrograms, Arange, Full, Broadcast, ExpandDims, Reshape, Transpose, Permute, Join, Take, AllActive,
    ConvertLayout, Gather, Reduce, ArgReduce, Scan, Dot, ThreadId, SimdLaneId, SimdgroupId,
)
TILE_STMTS: tuple[type[Stmt], ...] = (SimdgroupRole,)

__all__ = [
    "AllActive", "Arange", "ArgReduce", "Broadcast", "ConvertLayout", "Dot", "ExpandDims", "Full", "Gather", "Join",
    "MmaEngine", "NumPrograms", "Permute", "ProgramId", "Reduce", "Reshape", "Scan", "SimdgroupId", "SimdgroupRole",
    "SimdLaneId", "Take",
    "ThreadId", "TILE_STMTS", "TILE_VALUES", "Transpose", "dot_dtype",
]
