"""Triton's block pointers and tensor descriptors in a `@triton.jit` kernel: `tl.make_block_ptr`, `tl.advance`,
`tl.load`/`tl.store` of a block pointer (`boundary_check`, `padding_option`), `tl.make_tensor_descriptor` and its
`.load`/`.store` (`tl.load_tensor_descriptor`, `tl.store_tensor_descriptor`).

Both are compile-time objects holding traced values (`BlockPointer`, `TensorDescriptor`), which runtime loops carry
part by part (`metile.frontend.composites`). A load or store of one becomes metile's load or store of a tile of
pointers, `base + sum((offsets[d] + arange(block_shape[d])) * strides[d])` computed in int64 as Triton computes it,
masked where `boundary_check` asks (`0 <= index < shape` along each checked dimension). A checked load's padding is
0 (`"zero"`), NaN (`"nan"`, floats only) or, without `padding_option`, metile's inactive elements (values Triton
leaves undefined). A descriptor checks every dimension and pads with zeros, as Triton's tensor memory accesses do.
"""

from __future__ import annotations

import attrs

from metile import language as L
from metile.frontend import semantic as sem
from metile.frontend.builtins import BUILTINS, static_int
from metile.frontend.errors import KernelArgumentError, KernelTypeError, ShapeMismatchError
from metile.frontend.exprs import Method
from metile.ir.errors import Loc
from metile.ir.types import PtrType
from metile.ir.values import Value
from metile.triton import semantic as ts
from metile.triton.impl_tiles import expand_dims
from metile.triton.language import core as C
from metile.triton.language.types import block_type, pointer_type, triton_dtype

_PADDINGS = ("", None, "zero", "nan")


@attrs.frozen
class BlockPointer:
    """`tl.make_block_ptr(base, shape, strides, offsets, block_shape, order)`: a `block_shape` window at `offsets` of
    the tensor `base` of `shape` and `strides`. `shape` and `strides` are int64 values, `offsets` int32 ones."""

    base: Value
    shape: tuple
    strides: tuple
    offsets: tuple
    block_shape: tuple[int, ...]
    order: tuple[int, ...]

    def __metile_parts__(self) -> tuple:
        return (self.base, *self.shape, *self.strides, *self.offsets)

    def __metile_with_parts__(self, parts: tuple) -> BlockPointer:
        n = len(self.block_shape)
        return attrs.evolve(self, base=parts[0], shape=parts[1:1 + n], strides=parts[1 + n:1 + 2 * n],
                            offsets=parts[1 + 2 * n:])

    def __metile_key__(self) -> tuple:
        return (self.block_shape, self.order, self.base.type.dtype)

    @property
    def type(self) -> pointer_type:
        return pointer_type(block_type(triton_dtype(self.base.type.dtype), self.block_shape))

    @property
    def dtype(self) -> pointer_type:
        return self.type


@attrs.frozen
class TensorDescriptor(C.tensor_descriptor):
    """`tl.make_tensor_descriptor(base, shape, strides, block_shape)`: blocks of `block_shape` of the tensor `base`,
    loaded and stored at offsets given to `.load` and `.store`, every dimension bounds-checked."""

    base: Value
    shape: tuple
    strides: tuple
    block_shape: tuple[int, ...]

    def __metile_parts__(self) -> tuple:
        return (self.base, *self.shape, *self.strides)

    def __metile_with_parts__(self, parts: tuple) -> TensorDescriptor:
        n = len(self.block_shape)
        return attrs.evolve(self, base=parts[0], shape=parts[1:1 + n], strides=parts[1 + n:])

    def __metile_key__(self) -> tuple:
        return (self.block_shape, self.base.type.dtype)

    @property
    def dtype(self):
        return triton_dtype(self.base.type.dtype)

    @property
    def block_type(self) -> block_type:
        return block_type(self.dtype, self.block_shape)

    @property
    def load(self) -> Method:
        return Method(C.load_tensor_descriptor, self)

    @property
    def store(self) -> Method:
        return Method(C.store_tensor_descriptor, self)


def _scalar_pointer(base, what: str, loc: Loc) -> Value:
    if not (isinstance(base, Value) and isinstance(base.type, PtrType) and not base.type.shape):
        raise KernelTypeError(f"{what}: the base must be one pointer (a pointer argument), not "
                              f"{base.type if isinstance(base, Value) else type(base).__name__}", loc)
    return base


def _ints(values, n: int | None, what: str, loc: Loc, dtype) -> tuple:
    """`values` (a tuple or list of ints and traced integer scalars) as traced scalars of `dtype`."""
    if not isinstance(values, (tuple, list)):
        raise KernelArgumentError(f"{what} must be a tuple or list, not {type(values).__name__}", loc)
    if n is not None and len(values) != n:
        raise KernelArgumentError(f"{what} must have {n} values (one per dimension of the block), not "
                                  f"{len(values)}", loc)
    out = []
    for v in values:
        t = ts.to_tensor(v, loc)
        if isinstance(t.type, PtrType) or t.type.shape or not t.type.dtype.is_int:
            raise KernelTypeError(f"{what} must be integer scalars, not {t.type}", loc)
        out.append(ts.cast(t, dtype, False, loc))
    return tuple(out)


def _block_shape(block_shape, what: str, loc: Loc) -> tuple[int, ...]:
    if not isinstance(block_shape, (tuple, list)) or not block_shape:
        raise KernelArgumentError(f"{what}: block_shape must be a non-empty tuple of compile-time ints", loc)
    dims = tuple(static_int(b, f"{what}'s block_shape", loc) for b in block_shape)
    for b in dims:
        if b <= 0 or b & (b - 1):
            raise ShapeMismatchError(f"{what}: each dimension of block_shape must be a power of 2, not {b}", loc)
    return dims


def make_block_ptr(tr, loc, base, shape, strides, offsets, block_shape, order):
    base = _scalar_pointer(base, "tl.make_block_ptr", loc)
    dims = _block_shape(block_shape, "tl.make_block_ptr", loc)
    n = len(dims)
    order = tuple(static_int(o, "tl.make_block_ptr's order", loc) for o in order)
    if sorted(order) != list(range(n)):
        raise KernelArgumentError(f"tl.make_block_ptr: order must be a permutation of {list(range(n))}, not "
                                  f"{list(order)}", loc)
    return BlockPointer(base, _ints(shape, n, "tl.make_block_ptr's shape", loc, ts.I64),
                        _ints(strides, n, "tl.make_block_ptr's strides", loc, ts.I64),
                        _ints(offsets, n, "tl.make_block_ptr's offsets", loc, ts.I32), dims, order)


def advance(tr, loc, base, offsets):
    if not isinstance(base, BlockPointer):
        raise KernelTypeError("tl.advance takes a block pointer (tl.make_block_ptr)", loc)
    delta = _ints(offsets, len(base.block_shape), "tl.advance's offsets", loc, ts.I32)
    return attrs.evolve(base, offsets=tuple(ts.binary("add", o, d, loc) for o, d in zip(base.offsets, delta)))


def _addresses(tr, loc, base: Value, shape, strides, offsets, dims, checked) -> tuple[Value, Value | None]:
    """The pointer tile of the block at `offsets`, and the mask of its elements inside `shape` along the dimensions
    `checked` (None when none is checked)."""
    n = len(dims)
    total, mask = None, None
    for d, size in enumerate(dims):
        idx = BUILTINS[L.arange](tr, loc, 0, size)
        for a in range(n):
            if a != d:
                idx = expand_dims(tr, loc, idx, a)   # in increasing order: `size` ends at position d
        idx = ts.binary("add", ts.cast(offsets[d], ts.I64, False, loc), ts.cast(idx, ts.I64, False, loc), loc)
        term = ts.binary("mul", idx, strides[d], loc)
        total = term if total is None else ts.binary("add", total, term, loc)
        if d in checked:
            inside = ts.binary("and", ts.compare("ge", idx, 0, loc), ts.compare("lt", idx, shape[d], loc), loc)
            mask = inside if mask is None else ts.binary("and", mask, inside, loc)
    ptrs = ts.binary("add", base, ts.cast(total, ts.I64, False, loc), loc)
    return sem.broadcast_to(ptrs, dims, loc), None if mask is None else sem.broadcast_to(mask, dims, loc)


def _checked(boundary_check, n: int, loc: Loc) -> frozenset[int]:
    dims = boundary_check if isinstance(boundary_check, (tuple, list)) else (
        () if boundary_check is None else (boundary_check,))
    out = set()
    for d in dims:
        d = static_int(d, "boundary_check", loc)
        if not 0 <= d < n:
            raise KernelArgumentError(f"boundary_check: dimension {d} is out of range for a block of {n} "
                                      "dimensions", loc)
        out.add(d)
    return frozenset(out)


def _padding(padding_option, dtype, loc: Loc):
    if padding_option not in _PADDINGS:
        raise KernelArgumentError(f"padding_option must be 'zero', 'nan' or '', not {padding_option!r}", loc)
    if padding_option == "nan":
        if not dtype.is_float:
            raise KernelTypeError("Padding option `nan` is not supported for integer block pointers", loc)
        return float("nan")
    return 0 if padding_option == "zero" else None


def load_block(tr, loc, bp: BlockPointer, mask, other, boundary_check, padding_option, volatile):
    if mask is not None or other is not None:
        raise KernelArgumentError("`mask` and `other` arguments cannot be specified for loading block pointers", loc)
    checked = _checked(boundary_check, len(bp.block_shape), loc)
    pad = _padding(padding_option, bp.base.type.dtype, loc)
    ptrs, m = _addresses(tr, loc, bp.base, bp.shape, bp.strides, bp.offsets, bp.block_shape, checked)
    other = None if m is None or pad is None else ts.to_tensor(pad, loc)
    return BUILTINS[L.load](tr, loc, ptrs, m, other, "", "", bool(volatile))


def store_block(tr, loc, bp: BlockPointer, value, boundary_check):
    checked = _checked(boundary_check, len(bp.block_shape), loc)
    ptrs, m = _addresses(tr, loc, bp.base, bp.shape, bp.strides, bp.offsets, bp.block_shape, checked)
    v = ts.to_tensor(value, loc)
    if v.type.shape and len(v.type.shape) != len(bp.block_shape):
        raise ShapeMismatchError(f"Block shape({list(bp.block_shape)}) and value shape({list(v.type.shape)}) "
                                 "mismatch", loc)
    BUILTINS[L.store](tr, loc, ptrs, v, m, "", "")


def make_tensor_descriptor(tr, loc, base, shape, strides, block_shape):
    base = _scalar_pointer(base, "tl.make_tensor_descriptor", loc)
    dims = _block_shape(block_shape, "tl.make_tensor_descriptor", loc)
    n = len(dims)
    return TensorDescriptor(base, _ints(shape, n, "tl.make_tensor_descriptor's shape", loc, ts.I64),
                            _ints(strides, n, "tl.make_tensor_descriptor's strides", loc, ts.I64), dims)


def _descriptor(desc, what: str, loc: Loc) -> TensorDescriptor:
    if not isinstance(desc, TensorDescriptor):
        raise KernelTypeError(f"{what} takes a tensor descriptor (tl.make_tensor_descriptor), not "
                              f"{type(desc).__name__}", loc)
    return desc


def load_tensor_descriptor(tr, loc, desc, offsets):
    d = _descriptor(desc, "tl.load_tensor_descriptor", loc)
    n = len(d.block_shape)
    offs = _ints(offsets, n, "the offsets of a descriptor load", loc, ts.I32)
    ptrs, m = _addresses(tr, loc, d.base, d.shape, d.strides, offs, d.block_shape, frozenset(range(n)))
    return BUILTINS[L.load](tr, loc, ptrs, m, ts.to_tensor(0, loc), "", "", False)


def store_tensor_descriptor(tr, loc, desc, offsets, value):
    d = _descriptor(desc, "tl.store_tensor_descriptor", loc)
    n = len(d.block_shape)
    offs = _ints(offsets, n, "the offsets of a descriptor store", loc, ts.I32)
    ptrs, m = _addresses(tr, loc, d.base, d.shape, d.strides, offs, d.block_shape, frozenset(range(n)))
    BUILTINS[L.store](tr, loc, ptrs, ts.to_tensor(value, loc), m, "", "")


BLOCKS = {C.make_block_ptr: make_block_ptr, C.advance: advance, C.make_tensor_descriptor: make_tensor_descriptor,
          C.load_tensor_descriptor: load_tensor_descriptor, C.store_tensor_descriptor: store_tensor_descriptor}

__all__ = ["BLOCKS", "BlockPointer", "TensorDescriptor", "load_block", "store_block"]
