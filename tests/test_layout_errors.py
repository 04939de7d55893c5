"""Inadmissible inputs raise ``ValueError`` (``TypeError`` for the wrong kind of value) saying what failed."""

from __future__ import annotations

import re

import pytest

from metile.layout import (
    Layout,
    Swizzle,
    bank_conflicts,
    blocked_product,
    coalesce,
    complement,
    composition,
    format_layout,
    layout_svg,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    shape_div,
    zipped_divide,
)


def raises(exc, *fragments):
    """``pytest.raises`` that also checks every fragment appears in the message."""
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


def test_malformed_layouts():
    with raises(ValueError, "not congruent", "(1)", "(2,3)"):
        Layout((2, 3), (1,))
    with raises(ValueError, "size 0"):
        Layout((4, 0))
    with raises(ValueError, "empty tuple"):
        Layout(())
    with raises(TypeError, "nested tuple of ints", "2.5"):
        Layout(2.5)
    with raises(TypeError, "nested tuple of ints"):
        Layout(True)
    with raises(TypeError, "make_layout takes Layouts"):
        make_layout((4, 2))


def test_bad_coordinates():
    a = Layout((4, (2, 2)), (1, (8, 4)))
    with raises(ValueError, "negative index -1"):
        a(-1)
    with raises(ValueError, "coordinate (1,2,3) does not match the shape (4,(2,2))"):
        a(1, 2, 3)


def test_composition_stride_divisibility():
    with raises(ValueError, "inadmissible", "stride divisibility", "4:5", "remaining stride 5", "size 6"):
        composition(Layout((6, 2), (8, 2)), Layout(4, 5))


def test_composition_stride_divisibility_past_the_mode():
    # CuTe asserts when the stride is larger than a mode and not a multiple of it
    with raises(ValueError, "inadmissible", "stride divisibility", "remaining stride 4", "larger than", "size 3"):
        composition(Layout((3, 4), (1, 10)), Layout(2, 4))
    # CuTe's weak check accepts this and gives (2,2):(2,10), but A(B(2)) == A(4) == 11
    with raises(ValueError, "stride divisibility", "4:2", "does not divide", "carry"):
        composition(Layout((3, 4), (1, 10)), Layout(4, 2))


def test_composition_shape_divisibility():
    with raises(ValueError, "inadmissible", "shape divisibility", "remaining size 8", "strided size 6"):
        composition(Layout((6, 2), (2, 1)), Layout(8, 1))
    with raises(ValueError, "shape divisibility", "remaining size 4", "strided size 3"):
        composition(Layout((6, 2), (2, 1)), Layout(4, 2))


def test_composition_leaf_ending_inside_a_mode_needs_no_divisibility():
    # as in CuTe: B's leaf stays inside A's first mode, so the sizes need not divide
    assert composition(Layout((3, 2, 4), (24, 12, 1)), Layout(2, 1)) == Layout(2, 24)
    assert composition(Layout((6, 2), (2, 1)), Layout(4, 1)) == Layout(4, 2)
    assert composition(Layout((6, 2), (2, 1)), Layout(2, 2)) == Layout(2, 4)
    assert composition(Layout((3, 4), (1, 10)), Layout(2, 2)) == Layout(2, 2)
    assert composition(Layout((3, 4), (1, 10)), Layout((2, 3), (2, 3))) == Layout((2, 3), (2, 10))


def test_composition_distributivity():
    # CuTe's algorithm would give (2,3):(0,0), but A(B(1,2)) == A(7) == 1.
    a, b = Layout((6, 2), (0, 1)), Layout((2, 3), (3, 2))
    with raises(ValueError, "inadmissible", "overlap in mode 0", "2:3, 3:2", "add up to 7 >= 6"):
        composition(a, b)
    with raises(ValueError, "carry"):
        composition(Layout((2, 2), (0, 1)), Layout((2, 2), (1, 1)))


def test_composition_other_misuse():
    with raises(ValueError, "negative stride", "4:-1"):
        composition(Layout(8, 1), Layout(4, -1))
    with raises(ValueError, "tiler has 3 modes", "only 2"):
        composition(Layout((4, 4)), (2, 2, 2))
    with raises(ValueError, "must be >= 1"):
        composition(Layout(8, 1), 0)
    with raises(TypeError, "a tiler is"):
        composition(Layout(8, 1), "4")
    with raises(TypeError, "needs a Layout on the right"):
        composition(Swizzle(2, 0, 2), (4, 4))


def test_complement_conditions():
    with raises(ValueError, "inadmissible", "not injective", "mode 2:3 starts at 3", "extent 4"):
        complement(Layout((2, 2), (2, 3)))
    with raises(ValueError, "not injective", "mode 2:1 starts at 1"):
        complement(Layout((2, 2), (1, 1)), 8)
    with raises(ValueError, "inadmissible", "multiple of the extent 4", "4 does not divide 6"):
        complement(Layout((4, 6), (1, 6)))
    with raises(ValueError, "negative stride"):
        complement(Layout(4, -1), 8)
    with raises(ValueError, "cotarget must be >= 1"):
        complement(Layout(4, 1), 0)


def test_inverse_conditions():
    with raises(ValueError, "left_inverse", "not injective", "4:0"):
        left_inverse(Layout((2, 4), (1, 0)))
    with raises(ValueError, "left_inverse", "needs the complement", "3 does not divide"):
        left_inverse(Layout((3, 2), (1, 4)))


def test_divide_and_product_errors_name_the_operation():
    with raises(ValueError, "logical_divide(", "complement(", "not injective"):
        logical_divide(Layout(16, 1), Layout((2, 2), (1, 1)))
    with raises(ValueError, "logical_divide(", "composition(", "stride divisibility"):
        logical_divide(Layout((6, 2), (8, 2)), Layout(2, 5))
    with raises(ValueError, "tiler has 3 modes"):
        zipped_divide(Layout((4, 4)), (2, 2, 2))
    with raises(ValueError, "logical_product(", "complement("):
        logical_product(Layout((2, 2), (1, 1)), Layout(2, 1))
    with raises(TypeError, "two Layouts"):
        blocked_product(Layout(4, 1), (2, 2))


def test_misc_errors():
    with raises(ValueError, "divisibility condition", "4", "6"):
        shape_div(4, 6)
    with raises(ValueError, "more modes"):
        coalesce(Layout((4, 4)), (1, 1, 1))
    with raises(ValueError, "abs(shift) must be >= bits"):
        Swizzle(3, 0, 2)
    with raises(ValueError, "bits and base must be >= 0"):
        Swizzle(-1, 0, 2)
    with raises(ValueError, "rank-2", "rank 1"):
        format_layout(Layout(8, 1))
    with raises(ValueError, "color_by"):
        layout_svg(Layout((2, 2)), color_by="bank")
    with raises(ValueError, "needs tile="):
        layout_svg(Layout((32, 2), (2, 1)), color_by="thread")
    with raises(ValueError, "maps (T1,V0) to offset 2", "not an offset of the tile"):
        layout_svg(Layout((4, 1), (2, 0)), color_by="thread", tile=(2, 1))
    with raises(ValueError, "banks must be >= 1"):
        bank_conflicts(Layout(32, 1), banks=0)
    with raises(ValueError, "negative offset"):
        bank_conflicts(Layout(32, -1))
