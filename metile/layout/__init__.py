"""CuTe-style layout algebra on integers and nested integer tuples (a leaf: imports nothing from metile).

A ``Layout`` is a function from coordinates to offsets; the algebra (``coalesce``, ``composition``,
``complement``, divides, products, inverses) builds layouts from layouts with CuTe's semantics and names.
``Swizzle`` and ``ComposedLayout`` describe bank-conflict-free threadgroup tiles, ``bank_conflicts`` scores an
access, and ``print_layout`` / ``layout_svg`` draw one.
"""

from __future__ import annotations

from .banks import access_conflicts, bank_conflicts
from .compose import composition, format_tiler
from .divide import flat_divide, logical_divide, tiled_divide, unzip_tiles, zipped_divide
from .inttuple import (
    IntTuple,
    ceil_div,
    compatible,
    congruent,
    crd2idx,
    format_int_tuple,
    idx2crd,
    prefix_product,
    product,
    round_up,
    shape_div,
    suffix_product,
    unflatten,
)
from .inverse import complement, left_inverse, right_inverse
from .layout import (
    Layout,
    append,
    coalesce,
    col_major,
    cosize,
    depth,
    filter,
    flatten,
    make_layout,
    modes,
    prepend,
    rank,
    row_major,
    select,
    shape,
    size,
    stride,
)
from .products import (
    blocked_product,
    flat_product,
    logical_product,
    raked_product,
    tiled_product,
    zipped_product,
)
from .render import DEFAULT_PALETTE, format_layout, layout_svg, print_layout
from .swizzle import ComposedLayout, Swizzle

__all__ = [
    "DEFAULT_PALETTE",
    "ComposedLayout",
    "IntTuple",
    "Layout",
    "Swizzle",
    "append",
    "access_conflicts",
    "bank_conflicts",
    "blocked_product",
    "ceil_div",
    "coalesce",
    "col_major",
    "compatible",
    "complement",
    "composition",
    "congruent",
    "cosize",
    "crd2idx",
    "depth",
    "filter",
    "flat_divide",
    "flat_product",
    "flatten",
    "format_int_tuple",
    "format_layout",
    "format_tiler",
    "idx2crd",
    "layout_svg",
    "left_inverse",
    "logical_divide",
    "logical_product",
    "make_layout",
    "modes",
    "prefix_product",
    "prepend",
    "print_layout",
    "product",
    "raked_product",
    "rank",
    "right_inverse",
    "round_up",
    "row_major",
    "select",
    "shape",
    "shape_div",
    "size",
    "stride",
    "suffix_product",
    "tiled_divide",
    "tiled_product",
    "unflatten",
    "unzip_tiles",
    "zipped_divide",
    "zipped_product",
]
