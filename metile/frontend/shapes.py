"""The tile functions of `metile.language` that change a tile's shape: `reshape`, `ravel`, `permute`, `trans`,
`expand_dims`, `broadcast_to`, `join`, `split` and `interleave` (`SHAPES`, keyed like `BUILTINS`), and `cat` for
Triton's `tl.cat`.

Each builds one Tile IR node that says where every element of the result comes from: `Reshape` (the same elements
in row-major order), `Permute`/`Transpose` (dimensions reordered), `ExpandDims`, `Broadcast`, `Join` (two tiles
stacked along a new last dimension of 2) and `Take` (one index of a dimension). The lowering reads the element a
result needs at the point the node maps it to: a reshape or a new dimension keeps each element's flat index, so a
tile in registers stays where it is; a permutation or an interleave reads other threads' elements, through
threadgroup scratch once per statement (`metile.rewrite.lower.values`).
"""

from __future__ import annotations

import math

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.builtins import static_int, static_shape
from metile.frontend.errors import KernelTypeError, ShapeMismatchError
from metile.ir.errors import Loc
from metile.ir.tile import ExpandDims, Join, Permute, Reshape, Take, Transpose
from metile.ir.types import PtrType
from metile.ir.values import Value


def tile(x, what: str, loc: Loc, scalar: bool = False) -> Value:
    """`x` as a traced tile (a scalar too where `scalar` allows), or a `KernelTypeError` naming `what`."""
    if not isinstance(x, Value) or (not scalar and not x.type.shape):
        kind = x.type if isinstance(x, Value) else type(x).__name__
        raise KernelTypeError(f"{what} takes a tile, not {kind}", loc)
    return x


def dims_of(dims, what: str, loc: Loc) -> tuple[int, ...]:
    """Compile-time ints given as one tuple or list, or one by one (`permute(x, 2, 0, 1)`)."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    return tuple(static_int(d, what, loc) for d in dims)


def reshape(x: Value, shape: tuple[int, ...], loc: Loc) -> Value:
    """`x`'s elements in row-major order, in a tile of `shape` with as many elements."""
    if x.type.size != math.prod(shape):
        raise ShapeMismatchError(f"reshape: a tile of shape {list(x.type.shape)} ({x.type.size} elements) cannot "
                                 f"become shape {list(shape)} ({math.prod(shape)} elements)", loc)
    return x if tuple(shape) == x.type.shape else Reshape(x, shape, loc=loc)


def permute(x: Value, order: tuple[int, ...], loc: Loc) -> Value:
    """`x` with dimension `i` of the result dimension `order[i]` of `x`."""
    n = len(x.type.shape)
    if len(order) != n or sorted(order) != list(range(n)):
        raise ShapeMismatchError(f"permute: the dimensions {list(order)} are not a permutation of 0 .. {n - 1} "
                                 f"(the tile has shape {list(x.type.shape)})", loc)
    if tuple(order) == tuple(range(n)):
        return x
    return Transpose(x, loc=loc) if n == 2 else Permute(x, order, loc=loc)


def swap_last(x: Value, what: str, loc: Loc) -> Value:
    """`x` with its last two dimensions swapped (a transpose of each matrix of a batch)."""
    n = len(x.type.shape)
    if n < 2:
        raise ShapeMismatchError(f"{what} of a tile of shape {list(x.type.shape)}: it needs two dimensions or more "
                                 "(or the dimensions to permute)", loc)
    return permute(x, (*range(n - 2), n - 1, n - 2), loc)


def expand_dims(x: Value, axes: tuple[int, ...], loc: Loc) -> Value:
    """`x` with a dimension of 1 inserted at each of `axes` (positions in the result; negative ones count from its
    end)."""
    ndim = len(x.type.shape) + len(axes)
    norm = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ShapeMismatchError(f"expand_dims: axis {a} is out of range for a result of {ndim} dimensions", loc)
        norm.append(a % ndim)
    if len(set(norm)) != len(norm):
        raise ShapeMismatchError(f"expand_dims: the axes {list(axes)} repeat a dimension", loc)
    for a in sorted(norm):
        x = ExpandDims(x, a, loc=loc)
    return x


def join(a, b, loc: Loc) -> Value:
    """`a` and `b`, broadcast to one shape, stacked along a new last dimension of 2 (two scalars give shape
    `(2,)`). They must have one element type (a Python number takes the other's)."""
    if not isinstance(a, Value) and not isinstance(b, Value):
        raise KernelTypeError("join takes traced values, not two Python numbers", loc)
    a = sem.coerce(a, b.type.dtype, (), loc) if not isinstance(a, Value) else a
    b = sem.coerce(b, a.type.dtype, (), loc) if not isinstance(b, Value) else b
    for v in (a, b):
        if isinstance(v.type, PtrType):
            raise KernelTypeError(f"join takes values, not pointers ({v.type})", loc)
    if a.type.dtype is not b.type.dtype:
        raise KernelTypeError(f"join: the tiles have different element types, {a.type.dtype} and {b.type.dtype}: "
                              "convert one first (x.to(...))", loc)
    shape = sem.broadcast_shape(a.type.shape, b.type.shape, "join", loc)
    sem.check_tile_size((*shape, 2), loc)
    return Join(sem.broadcast_to(a, shape, loc), sem.broadcast_to(b, shape, loc), loc=loc)


def split(x: Value, loc: Loc) -> tuple[Value, Value]:
    """The two halves of `x` along its last dimension, which must be 2: `x[..., 0]` and `x[..., 1]` (scalars from a
    tile of shape `(2,)`)."""
    shape = x.type.shape
    if not shape or shape[-1] != 2:
        raise ShapeMismatchError(f"split: the last dimension must be 2, not {shape[-1] if shape else 'absent'} "
                                 f"(shape {list(shape)})", loc)
    axis = len(shape) - 1
    return Take(x, axis, 0, loc=loc), Take(x, axis, 1, loc=loc)


def interleave(a, b, loc: Loc) -> Value:
    """The elements of `a` and `b` alternating along their last dimension: `join(a, b)` reshaped to twice that
    dimension."""
    c = join(a, b, loc)
    if len(c.type.shape) == 1:
        return c
    *lead, n, _ = c.type.shape
    return reshape(c, (*lead, 2 * n), loc)


def cat(a: Value, b: Value, loc: Loc) -> Value:
    """`a` then `b` along their first dimension (tiles of one shape and element type): `join` them, move the new
    dimension first and merge it with the first."""
    if a.type.shape != b.type.shape or not a.type.shape:
        raise ShapeMismatchError(f"cat takes two tiles of one shape, not {list(a.type.shape)} and "
                                 f"{list(b.type.shape)}", loc)
    j = join(a, b, loc)
    n = len(a.type.shape)
    first, *rest = a.type.shape
    return reshape(permute(j, (n, *range(n)), loc), (2 * first, *rest), loc)


# ---- metile.language's functions


def _reshape(tr, loc, x, shape, can_reorder):
    """`can_reorder=True` lets the compiler put the elements in any order; metile keeps row-major order."""
    return reshape(tile(x, "metile.reshape", loc), static_shape(shape, "the shape of reshape", loc), loc)


def _ravel(tr, loc, x):
    x = tile(x, "metile.ravel", loc)
    return reshape(x, (x.type.size,), loc)


def _permute(tr, loc, x, dims):
    return permute(tile(x, "metile.permute", loc), dims_of((dims,), "a dimension of permute", loc), loc)


def _trans(tr, loc, x, dims):
    x = tile(x, "metile.trans", loc)
    if dims is None:
        return swap_last(x, "metile.trans", loc)
    return permute(x, dims_of((dims,), "a dimension of trans", loc), loc)


def _expand_dims(tr, loc, x, axis):
    x = tile(x, "metile.expand_dims", loc, scalar=True)
    return expand_dims(x, dims_of((axis,), "the axis of expand_dims", loc), loc)


def _broadcast_to(tr, loc, x, shape):
    x = tile(x, "metile.broadcast_to", loc, scalar=True)
    return sem.broadcast_to(x, static_shape(shape, "the shape of broadcast_to", loc), loc)


def _join(tr, loc, a, b):
    return join(a, b, loc)


def _split(tr, loc, x):
    return split(tile(x, "metile.split", loc), loc)


def _interleave(tr, loc, a, b):
    return interleave(a, b, loc)


SHAPES = {
    L.reshape: _reshape, L.ravel: _ravel, L.permute: _permute, L.trans: _trans, L.expand_dims: _expand_dims,
    L.broadcast_to: _broadcast_to, L.join: _join, L.split: _split, L.interleave: _interleave,
}

__all__ = ["SHAPES", "cat", "dims_of", "expand_dims", "interleave", "join", "permute", "reshape", "split", "swap_last",
           "tile"]
