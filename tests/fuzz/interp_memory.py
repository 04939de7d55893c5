"""Memory in the model: pointers as element offsets into an array, masked loads (inactive elements hold 0, 5.3),
stores converted to the memory's type, and `tile_load`/`tile_store` with `bounds=` or clipped to their array
(5.4). Reads and writes outside an array, and two values for one address, are generator bugs: `ModelError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import numpy as np

from tests.fuzz import model as M
from tests.fuzz.dtypes import TYPES
from tests.fuzz.prog import Call, Num, Py

if TYPE_CHECKING:
    from tests.fuzz.interp import Interp


class ModelError(Exception):
    """The program is not valid by the documentation (a generator bug), or the model cannot decide it."""


class Undecidable(Exception):
    """A loop bound or branch condition the model cannot know exactly: the section is not checked."""


@attrs.frozen(eq=False)
class Ptr:
    buf: str
    t: str
    off: np.ndarray          # int64 element offsets


@attrs.define
class Memory:
    arrays: dict             # name -> flat numpy array
    errs: dict               # name -> float64 error bound per element (outputs)

    def copy(self) -> Memory:
        return Memory({k: v.copy() for k, v in self.arrays.items()}, {k: v.copy() for k, v in self.errs.items()})


def mask_of(it: Interp, e, shape, m=None):
    if e is None:
        return np.ones(shape, bool)
    m = it.ev(e) if m is None else m
    if isinstance(m, Py) or isinstance(m, Num):
        return np.full(shape, bool(m.value))
    if m.err.max(initial=0) > 0:
        raise Undecidable("a mask the model cannot decide")
    return np.broadcast_to(m.v if m.t == "bool" else m.v != 0, shape)

def read(it: Interp, p: Ptr, where: np.ndarray) -> np.ndarray:
    arr = it.mem.arrays[p.buf]
    idx = p.off[where]
    if it.probe:                          # finding a loop's types: the first iteration may not run
        return arr[np.clip(idx, 0, arr.size - 1)]
    if idx.size and (idx.min() < 0 or idx.max() >= arr.size):
        raise ModelError(f"read of {p.buf} out of bounds: {idx.min()}..{idx.max()} of {arr.size}")
    return arr[idx]

def load(it: Interp, p: Ptr, mask_e, other_e) -> M.MVal:
    m = None if mask_e is None else it.ev(mask_e)
    shape = np.broadcast_shapes(p.off.shape, m.shape if isinstance(m, M.MVal) else ())
    off = np.broadcast_to(p.off, shape)
    mask = mask_of(it, mask_e, shape, m)
    v = np.zeros(shape, TYPES[p.t].np)
    v[mask] = read(it, Ptr(p.buf, p.t, off), mask)
    err = np.zeros(shape)
    if other_e is None:
        return M.MVal(p.t, v, mask.copy(), err)
    o = it.ev(other_e)
    o = M.literal(o.value, p.t) if isinstance(o, Num) else M.cast(o, p.t)
    o = M.bcast(o, shape)
    v = np.where(mask, v, o.v)
    # where the mask is false the element is other's, with its activity, as where's (5.2; a number is active)
    return M.MVal(p.t, v, mask | o.act, np.where(mask, 0.0, o.err))

def write(it: Interp, p: Ptr, val: M.MVal, mask: np.ndarray) -> None:
    arr, errs = it.mem.arrays[p.buf], it.mem.errs[p.buf]
    val = M.cast(val, p.t) if isinstance(val, M.MVal) else M.literal(val.value, p.t)
    shape = p.off.shape
    if np.broadcast_shapes(shape, val.shape, mask.shape) != shape:
        raise ModelError("a store's value or mask is larger than its addresses")
    val, mask = M.bcast(val, shape), np.broadcast_to(mask, shape)
    idx = p.off[mask]
    if idx.size and (idx.min() < 0 or idx.max() >= arr.size):
        raise ModelError(f"write to {p.buf} out of bounds: {idx.min()}..{idx.max()} of {arr.size}")
    if it.probe:
        return
    if len(np.unique(idx)) != idx.size:
        raise ModelError("a store with two elements at one address")
    arr[idx] = val.v[mask]
    errs[idx] = val.err[mask]

def store(it: Interp, c: Call) -> None:
    p = it.ev(c.args[0])
    val = it.ev(c.args[1])
    mask_e = c.kw("mask")
    mask = mask_of(it, mask_e, p.off.shape) if mask_e is not None else np.ones(p.off.shape, bool)
    write(it, p, val, mask)

def _tile_ptr(it: Interp, c: Call, shape_arg, bounds_e):
    p = it.ev(c.args[0])
    r0, c0, stride = (it.ev(a) for a in c.args[1:4])
    r0, c0, stride = (int(x.value) if isinstance(x, Num) else int(x.i()) for x in (r0, c0, stride))
    R_, C_ = shape_arg.value
    rows = r0 + np.arange(R_)[:, None]
    cols = c0 + np.arange(C_)[None, :]
    off = rows * stride + cols
    # without bounds=, the tile is clipped to the array, seen from the pointer as rows of `stride` (5.4)
    length = it.mem.arrays[p.buf].size
    if bounds_e is None:
        nrows = (length - int(p.off)) // stride if stride > 0 else 0
        inside = (rows >= 0) & (rows < nrows) & (cols >= 0) & (cols < stride)
    else:
        nr, nc = (it.ev(b) for b in bounds_e.items)
        nr, nc = (int(x.value) if isinstance(x, Num) else int(x.i()) for x in (nr, nc))
        inside = (rows >= 0) & (rows < nr) & (cols >= 0) & (cols < nc)
    return Ptr(p.buf, p.t, p.off + off), inside

def tile_load(it: Interp, c: Call) -> M.MVal:
    p, inside = _tile_ptr(it, c, c.args[4], c.kw("bounds"))
    v = np.zeros(inside.shape, TYPES[p.t].np)
    v[inside] = read(it, p, inside)
    return M.MVal(p.t, v, inside.copy(), np.zeros(inside.shape))

def tile_store(it: Interp, c: Call) -> None:
    p, inside = _tile_ptr(it, c, c.args[5], c.kw("bounds"))
    write(it, p, it.ev(c.args[4]), inside)
