"""The layout algebra on CuTe's worked examples (``02_layout_algebra.md``) and on GEMM-tile layouts."""

from __future__ import annotations

import pytest

from metile.layout import (
    Layout,
    blocked_product,
    coalesce,
    complement,
    composition,
    flat_divide,
    flat_product,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    raked_product,
    right_inverse,
    row_major,
    size,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)


def image(layout):
    return [layout(i) for i in range(size(layout))]


# ----------------------------------------------------------------------------------------------- composition


@pytest.mark.parametrize(
    "a,b,expected",
    [
        (Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1)), "((2,2),3):((24,2),8)"),
        (Layout(20, 2), Layout((5, 4), (4, 1)), "(5,4):(8,2)"),
        (Layout((10, 2), (16, 4)), Layout((5, 4), (1, 5)), "(5,(2,2)):(16,(80,4))"),
        (Layout(20, 2), Layout((4, 5), (1, 4)), "(4,5):(2,8)"),
        (Layout((4, 2), (1, 10)), Layout(16, 1), "(4,4):(1,10)"),
        (Layout((6, 2), (8, 2)), Layout(4, 3), "(2,2):(24,2)"),
        (Layout((6, 2), (8, 2)), Layout(3, 1), "3:8"),
        (Layout((4, 8), (8, 1)), Layout(1, 5), "1:0"),
        (Layout((4, 8), (8, 1)), Layout(6, 0), "6:0"),
    ],
)
def test_composition_examples(a, b, expected):
    r = composition(a, b)
    assert str(r) == expected
    assert all(r(i) == a(b(i)) for i in range(size(b)))


def test_composition_walkthrough_r_values():
    # The table R(0..11) of the first worked example.
    r = composition(Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1)))
    assert image(r) == [0, 24, 2, 26, 8, 32, 10, 34, 16, 40, 18, 42]


def test_composition_with_tilers():
    a = Layout((12, (4, 8)), (59, (13, 1)))
    assert str(composition(a, (Layout(3, 4), Layout(8, 2)))) == "(3,(2,4)):(236,(26,1))"
    assert str(composition(a, (3, 8))) == "(3,(4,2)):(59,(13,1))"
    assert composition(a, (None, 8)) == make_layout(a[0], composition(a[1], 8))
    assert composition(a, 6) == composition(a, Layout(6, 1)) == Layout(6, 59)
    assert composition(a, None) == a


# ------------------------------------------------------------------------------------------------ complement


@pytest.mark.parametrize(
    "a,cotarget,expected",
    [
        (Layout(4, 1), 24, "6:4"),
        (Layout(6, 4), 24, "4:1"),
        (Layout((4, 6), (1, 4)), 24, "1:0"),
        (Layout(4, 2), 24, "(2,3):(1,8)"),
        (Layout((2, 4), (1, 6)), 24, "3:2"),
        (Layout((2, 2), (1, 6)), 24, "(3,2):(2,12)"),
        (Layout(1, 0), 5, "5:1"),
        (Layout(4, 0), 8, "8:1"),
        (Layout(4, 2), 19, "(2,3):(1,8)"),
        (Layout((2, 4, 8), (8, 1, 0)), 460, "(2,29):(4,16)"),
        (Layout(64, 1), (32, 4, 4), "8:64"),
    ],
)
def test_complement_examples(a, cotarget, expected):
    assert str(complement(a, cotarget)) == expected


def test_complement_default_cotarget():
    assert complement(Layout(4, 2)) == Layout(2, 1)
    assert complement(Layout((2, 4), (1, 6))) == Layout(3, 2)
    assert complement(Layout((4, 8), (8, 1))) == Layout(1, 0)


# ---------------------------------------------------------------------------------------------------- divide


def test_logical_divide_1d():
    a = Layout((4, 2, 3), (2, 1, 8))
    b = Layout(4, 2)
    assert str(complement(b, size(a))) == "(2,3):(1,8)"
    assert str(logical_divide(a, b)) == "((2,2),(2,3)):((4,1),(2,8))"


def test_logical_divide_2d_and_the_zipped_forms():
    a = Layout((9, (4, 8)), (59, (13, 1)))
    tiler = (Layout(3, 3), Layout((2, 4), (1, 8)))
    ld = logical_divide(a, tiler)
    assert str(ld) == "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))"
    assert make_layout(ld[0][0], ld[1][0]) == composition(a, tiler)
    assert str(composition(a, tiler)) == "(3,(2,4)):(177,(13,2))"
    zd = zipped_divide(a, tiler)
    assert str(zd) == "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"
    assert size(zd, 0) == 24 and size(zd, 1) == 12
    assert str(tiled_divide(a, tiler)) == "((3,(2,4)),3,(2,2)):((177,(13,2)),59,(26,1))"
    assert str(flat_divide(a, tiler)) == "(3,(2,4),3,(2,2)):(177,(13,2),59,(26,1))"
    # the offset of tile k is zd(0, k)
    assert zd(0, 7) == ld((0, 7 % 3), (0, 7 // 3))


def test_divide_a_64x64_row_major_tile():
    tile = row_major((64, 64))
    blocks = zipped_divide(tile, (8, 8))
    assert str(blocks) == "((8,8),(8,8)):((64,1),(512,8))"
    assert blocks(9, 1) == 1 * 64 + 1 + 512
    simd = zipped_divide(tile, (32, 32))
    assert str(simd) == "((32,32),(2,2)):((64,1),(2048,32))"
    assert sorted(image(simd)) == list(range(64 * 64))


def test_divide_that_does_not_fit_runs_past_the_end():
    d = logical_divide(Layout(10, 1), Layout(4, 1))
    assert str(d) == "(4,3):(1,4)"
    assert d(11) == 11


# --------------------------------------------------------------------------------------------------- product


def test_logical_product_1d():
    a = Layout((2, 2), (4, 1))
    assert str(complement(a, 6 * 4)) == "(2,3):(2,8)"
    assert str(logical_product(a, Layout(6, 1))) == "((2,2),(2,3)):((4,1),(2,8))"
    assert str(logical_product(a, Layout((4, 2), (2, 1)))) == "((2,2),(4,2)):((4,1),(8,2))"
    assert logical_product(a, 6) == logical_product(a, Layout(6, 1))


def test_blocked_and_raked_products_2d():
    block = Layout((2, 5), (5, 1))
    tiler = Layout((3, 4), (1, 3))
    blocked = blocked_product(block, tiler)
    assert str(blocked) == "((2,3),(5,4)):((5,10),(1,30))"  # CuTe's result, not coalesced
    # row 0 is the first row of block 0, then block (0,1) starts 3 blocks of 10 later
    assert [blocked(0, n) for n in range(6)] == [0, 1, 2, 3, 4, 30]
    raked = raked_product(block, tiler)
    assert str(raked) == "((3,2),(4,5)):((10,5),(30,1))"
    assert [raked(m, 0) for m in range(6)] == [0, 10, 20, 5, 15, 25]
    assert sorted(image(blocked)) == sorted(image(raked)) == list(range(120))


def test_product_by_mode_and_zipped_forms():
    a = Layout((2, 5), (5, 1))
    tiler = (Layout(3, 1), Layout(4, 1))
    # By mode, each mode is multiplied on its own (the docs call this "not the recommended approach"):
    # complement(2:5, 6) == 5:1, so mode 0 repeats at stride 1 and overlaps mode 1.
    lp = logical_product(a, tiler)
    assert str(lp) == "((2,3),(5,4)):((5,1),(1,5))"
    assert lp[0] == logical_product(a[0], tiler[0]) and lp[1] == logical_product(a[1], tiler[1])
    assert str(zipped_product(a, tiler)) == "((2,5),(3,4)):((5,1),(1,5))"
    assert str(tiled_product(a, tiler)) == "((2,5),3,4):((5,1),1,5)"
    assert str(flat_product(a, tiler)) == "(2,5,3,4):(5,1,1,5)"


def test_rank1_products_keep_rank_1():
    # CuTe: rank(result) == max(rank(block), rank(tiler)); a rank-1 result's one mode is the (block, tiler) pair
    assert blocked_product(Layout(4, 1), Layout(3, 1)) == Layout(((4, 3),), ((1, 4),))
    assert raked_product(Layout(4, 1), Layout(3, 1)) == Layout(((3, 4),), ((4, 1),))
    assert str(blocked_product(Layout(4, 2), Layout(2, 1))) == "((4,2)):((2,1))"
    assert str(blocked_product(Layout(4, 1), Layout((3, 2), (1, 3)))) == "((4,3),(1,2)):((1,4),(0,12))"


# -------------------------------------------------------------------------------------------------- inverses


def test_right_inverse():
    a = Layout((4, 8), (8, 1))
    r = right_inverse(a)
    assert str(r) == "(8,4):(4,1)"
    assert [a(r(i)) for i in range(size(r))] == list(range(32))
    assert right_inverse(Layout(4, 2)) == Layout(1, 0)
    assert right_inverse(Layout((2, 4), (1, 4))) == Layout(2, 1)
    assert right_inverse(Layout((4, 2), (0, 1))) == Layout(2, 4)


def test_left_inverse():
    a = Layout((4, 2), (2, 16))
    li = left_inverse(a)
    assert [li(a(i)) for i in range(8)] == list(range(8))
    assert left_inverse(Layout((4, 8), (8, 1))) == Layout((8, 4), (4, 1))


def test_thread_value_layout_over_a_tile():
    # 32 lanes x 2 values: lane t owns elements 2t and 2t+1 of a 64-element row-major 8x8 tile
    tv = Layout((32, 2), (2, 1))
    tile = row_major((8, 8))
    placed = composition(tile, tv)
    assert [placed(t, v) for t in range(2) for v in range(2)] == [tile(0), tile(1), tile(2), tile(3)]
    assert sorted(image(placed)) == list(range(64))
    assert all(placed(t, v) == tile(2 * t + v) for t in range(32) for v in range(2))
    assert coalesce(placed) == Layout((4, 16), (16, 1))
