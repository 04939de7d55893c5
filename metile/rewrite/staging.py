"""Where tiles sit in threadgroup memory: the row padding of `dot` operands staged for `simdgroup_load`, chosen
with the bank model of `metile.layout.banks`, the order in which a tile read from device memory is staged, and
the layout of simdgroup matrices copied out to scratch.

Apple GPUs serve threadgroup memory from 32 banks of 4 bytes (the model `metile.profile` counts with); a
simdgroup access whose lanes touch different words of one bank takes a pass per word.
"""

from __future__ import annotations

import functools

from metile.ir.values import Load, Value
from metile.layout import Layout, access_conflicts
from metile.rewrite import metal_ops as mo
from metile.rewrite.axis_info import AxisAnalysis


def columns_first(v: Value, shape: tuple[int, ...], axes: AxisAnalysis) -> bool:
    """`v` is a 2-D tile of `shape` read from device memory (a `Load` not yet in registers) whose addresses go up
    by one element down its columns but not along its rows: staged column by column, consecutive threads read
    consecutive addresses and the loads coalesce."""
    if len(shape) != 2 or 1 in shape or not isinstance(v, Load) or v.ptr.type.shape != tuple(shape):
        return False
    st = axes.strides(v.ptr)
    return st is not None and st[0] == 1 and st[1] != 1


def mma_lanes(ld: int) -> Layout:
    """Where each lane of a simdgroup reads element 0 of its pair in an 8x8 `simdgroup_load` from a row-major
    array with row stride `ld` (Apple's layout: lane l holds row (l/16)*4 + (l/2)%4, columns
    ((l/8)%2)*4 + (l%2)*2 and the one after): lane = l0 + 2 l1 + 8 l2 + 16 l3 -> 2 l0 + ld l1 + 4 l2 + 4 ld l3."""
    return Layout((2, 4, 2, 2), (2, ld, 4, 4 * ld))


# (row, column) of each lane's element 0, read off `mma_lanes` once (columns stay below 8, rows 64 apart)
_LANE_ROW_COL = tuple(divmod(mma_lanes(64)(lane), 64) for lane in range(32))


def lane_rows_cols() -> tuple[Layout, Layout]:
    """lane -> the row, and lane -> the column, of the lane's element 0 in an 8x8 simdgroup matrix (element 1 is
    the next column): `mma_lanes` with each stride split into its rows and columns."""
    lanes = mma_lanes(64)
    split = [divmod(s, 64) for s in lanes.stride]
    return Layout(lanes.shape, tuple(r for r, _ in split)), Layout(lanes.shape, tuple(c for _, c in split))


def lane_column_bits() -> tuple[int, ...]:
    """The bits of a lane's index that choose the columns of its elements in an 8x8 simdgroup matrix, one per mode of
    `lane_rows_cols`'s column layout with a non-zero stride (its extents are powers of two, so each mode's
    coordinate is a field of bits of the lane index, and these modes have extent 2): flipping one moves the lane to
    another column of the same row, and the lanes holding column 0 are those with all of them clear."""
    _, cols = lane_rows_cols()
    bits, at = [], 0
    for extent, stride in zip(cols.shape, cols.stride):
        if stride != 0:
            if extent != 2:
                raise ValueError(f"a column mode of extent {extent} in {cols}: not one bit of the lane index")
            bits.append(1 << at)
        at += extent.bit_length() - 1
    return tuple(bits)


@functools.cache   # a pure function of two numbers, asked for each staged operand of every compile
def staging_pad(n: int, itemsize: int) -> int:
    """Elements to pad a staged row of `n` elements by: among the pads that keep rows 16-byte aligned (up to two
    16-byte steps), the smallest whose 8x8 simdgroup loads meet the fewest bank conflicts (`metile.layout.banks`,
    both elements of each lane's pair); any pad of up to 32 bytes when no row length can be aligned."""
    step = max(1, 16 // itemsize)
    aligned = [p for p in range(0, 2 * step + 1) if (n + p) * itemsize % 16 == 0]
    candidates = aligned or list(range(0, 2 * step + 1))

    def conflicts(pad: int) -> int:
        ld = n + pad
        if itemsize not in (2, 4) or ld * itemsize % 4:
            return sum(access_conflicts([c + ld * r + e for r, c in _LANE_ROW_COL], element_bytes=itemsize)
                       for e in (0, 1))
        # 2- and 4-byte elements, rows a whole number of words long: the 32 lanes touch 32 different words (a
        # lane's pair starts at an even column of its own row, rows at least 8 elements apart), so a bank's
        # passes are the lanes that map to it; the second elements of the pairs are the same words (2 bytes) or
        # every word moved one bank on (4 bytes), which costs as many passes as the first
        lanes = [0] * 32
        for r, c in _LANE_ROW_COL:
            lanes[(c + ld * r) * itemsize // 4 % 32] += 1
        return 2 * (max(lanes) - 1)

    best, fewest = candidates[0], None
    for pad in candidates:   # in increasing order: the first conflict-free pad ends the search
        c = conflicts(pad)
        if fewest is None or c < fewest:
            best, fewest = pad, c
        if c == 0:
            break
    return best


def staging_row_spacing(rows: int, n: int, ld: int, itemsize: int, width: int, lanes: int = 32) -> int:
    """How far apart the rows a simdgroup writes at once should be, when it stages a `[rows, n]` tile into rows `ld`
    elements apart in runs of `width` elements (each lane one run, a simdgroup `lanes * width / n` rows): the
    smallest power of two `g` (rows `0, g, 2g, ...`, then the next group) whose stores meet the fewest bank
    conflicts (`metile.layout.banks`); 1, consecutive rows, when nothing is gained or the rows do not divide."""
    per_row = n // width
    if n % width or lanes % per_row:
        return 1
    group = lanes // per_row
    words = -(-lanes * width * itemsize // 4)
    floor = -(-words // 32) - 1   # what the fewest passes give: no conflict
    best, fewest, g = 1, None, 1
    while group * g <= rows and rows % (group * g) == 0:
        runs = [((lane // per_row) * g * ld + (lane % per_row) * width) // width for lane in range(lanes)]
        c = access_conflicts(runs, element_bytes=width * itemsize)
        if fewest is None or c < fewest:
            best, fewest = g, c
        if c == floor:
            break
        g *= 2
    return best


def mma_row_stride(n: int) -> int:
    """The row stride of a `[m, n]` f32 matrix copied to scratch: `n`, plus one when `n` is even, so that lanes
    reading down a column (a row reduction, one row per lane) meet 32 different banks rather than a few."""
    return n + 1 if n % 2 == 0 else n


def mma_scratch_offset(flat: Value, n: int) -> Value:
    """Where element `flat` (row-major in `[m, n]`) of a matrix copied by `mma_in_scratch` sits."""
    pad = mma_row_stride(n) - n
    return flat if pad == 0 else mo.add(flat, mo.mul(mo.div(flat, n), mo.const(pad)))


__all__ = ["columns_first", "lane_column_bits", "lane_rows_cols", "mma_lanes", "mma_row_stride", "mma_scratch_offset",
           "staging_pad", "staging_row_spacing"]
