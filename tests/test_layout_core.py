"""Layouts as values and functions: construction, printing, coordinates, modes, coalesce and filter.

Expected values are the worked examples of CuTe's layout documentation (``01_layout.md`` and the coalesce
section of ``02_layout_algebra.md``).
"""

from __future__ import annotations

import numpy as np
import pytest

from metile.layout import (
    Layout,
    append,
    coalesce,
    col_major,
    compatible,
    congruent,
    cosize,
    crd2idx,
    depth,
    filter,
    flatten,
    idx2crd,
    make_layout,
    prefix_product,
    prepend,
    rank,
    row_major,
    select,
    shape,
    shape_div,
    size,
    stride,
    suffix_product,
)


def test_str_is_cute_notation():
    assert str(Layout((4, (2, 2)), (1, (8, 4)))) == "(4,(2,2)):(1,(8,4))"
    assert str(Layout(8, 2)) == "8:2"
    assert str(Layout(((4, 2),), ((2, 1),))) == "((4,2)):((2,1))"
    assert repr(Layout((2, 3), (1, 2))) == "Layout((2, 3), (1, 2))"


def test_default_stride_is_column_major():
    assert Layout(8) == Layout(8, 1)
    assert Layout((2, 4)).stride == (1, 2)
    assert Layout((2, (2, 2))).stride == (1, (2, 4))


def test_row_and_column_major_ignore_the_hierarchy():
    # CuTe's LayoutRight/LayoutLeft: s2xh4 = (2,(2,2)):(4,(2,1)) and s2xh4_col = (2,(2,2)):(1,(2,4))
    assert row_major((2, (2, 2))) == Layout((2, (2, 2)), (4, (2, 1)))
    assert col_major((2, (2, 2))) == Layout((2, (2, 2)), (1, (2, 4)))
    assert row_major((2, 4)) == Layout((2, 4), (4, 1))


def test_layouts_are_immutable_and_hashable():
    a = Layout((2, 4), (4, 1))
    assert a == Layout([2, 4], [4, 1]) and hash(a) == hash(Layout((2, 4), (4, 1)))
    assert len({a, Layout((2, 4), (4, 1)), Layout((2, 4))}) == 2
    with pytest.raises(AttributeError):
        a.shape = (4, 2)


def test_numpy_integers_are_accepted():
    a = Layout((np.int64(4), np.int32(2)), (np.int64(2), 1))
    assert a == Layout((4, 2), (2, 1)) and type(a.shape[0]) is int
    assert a(np.int64(3)) == a(3) == 6 and a(np.int64(1), np.int32(1)) == 3
    with pytest.raises(ValueError, match="negative index"):
        a(np.int64(-1))


def test_call_by_index_and_coordinate():
    # 01_layout.md, the (3,(2,3)):(3,(12,1)) index mapping table
    a = Layout((3, (2, 3)), (3, (12, 1)))
    assert a(16) == 17
    assert a(1, 5) == a((1, 5)) == 17
    assert a((1, (1, 2))) == 17
    assert [a(i) for i in range(6)] == [0, 3, 6, 12, 15, 18]
    s2xh4 = Layout((2, (2, 2)), (4, (2, 1)))
    assert [s2xh4(i) for i in range(8)] == [0, 4, 2, 6, 1, 5, 3, 7]
    assert [[s2xh4(m, n) for n in range(4)] for m in range(2)] == [[0, 2, 1, 3], [4, 6, 5, 7]]
    assert [Layout((2, 4), (12, 1))(i) for i in range(8)] == [0, 12, 1, 13, 2, 14, 3, 15]


def test_index_past_the_end_continues_in_the_last_mode():
    a = Layout((4, 2), (1, 10))
    assert a(8) == 20 and a(13) == 1 + 30 and a(40) == 100


def test_idx2crd_and_crd2idx():
    s = (3, (2, 3))
    assert idx2crd(16, s) == (1, (1, 2))
    assert idx2crd((1, 5), s) == (1, (1, 2))
    assert idx2crd((1, (1, 2)), s) == (1, (1, 2))
    d = (3, (12, 1))
    assert crd2idx(16, s, d) == crd2idx((1, 5), s, d) == crd2idx((1, (1, 2)), s, d) == 17
    assert crd2idx((1, (1, 2)), s) == 1 + 3 * 1 + 6 * 2


def test_size_rank_depth_cosize():
    a = Layout((2, (2, 2)), (4, (1, 2)))
    assert (size(a), rank(a), depth(a), cosize(a)) == (8, 2, 2, 8)
    assert size(a, 1) == 4 and rank(a, 1) == 2 and shape(a, 1) == (2, 2) and stride(a, 1, 0) == 1
    assert size((3, (6, 2), 8)) == 288 and rank(6) == 1 and depth(6) == 0 and depth(((2,),)) == 2
    assert cosize(Layout((4, 3), (1, 0))) == 4
    assert cosize(Layout(4, -2)) == 7


def test_sublayouts_and_select():
    a = Layout((4, (3, 6)))
    assert str(a) == "(4,(3,6)):(1,(4,12))"
    assert a[0] == Layout(4, 1) and a[1] == Layout((3, 6), (4, 12)) and a[1][0] == Layout(3, 4)
    b = Layout((2, 3, 5, 7))
    assert str(select(b, 1, 3)) == "(3,7):(2,30)"
    assert str(select(b, 0, 1, 3)) == "(2,3,7):(1,2,30)"
    assert str(select(b, 2)) == "(5):(6)"
    assert list(Layout(4, 1)) == [Layout(4, 1)] and len(b) == 4


def test_concatenation():
    a, b = Layout(3, 1), Layout(4, 3)
    assert str(make_layout(a, b)) == "(3,4):(1,3)"
    assert str(make_layout(b, a)) == "(4,3):(3,1)"
    assert str(make_layout(make_layout(a, b), make_layout(b, a))) == "((3,4),(4,3)):((1,3),(3,1))"
    assert str(make_layout(a)) == "(3):(1)"
    assert str(make_layout(make_layout(a))) == "((3)):((1))"
    assert str(make_layout(a, make_layout(a), a)) == "(3,(3),3):(1,(1),1)"
    ab = append(a, b)
    assert str(ab) == "(3,4):(1,3)" and str(prepend(a, b)) == "(4,3):(3,1)"
    assert str(append(ab, ab)) == "(3,4,(3,4)):(1,3,(1,3))"
    assert str(append(a, upto=3)) == "(3,1,1):(1,0,0)" and str(prepend(a, upto=2)) == "(1,3):(0,1)"


def test_flatten():
    assert str(flatten(Layout(((4, 3), 1), ((3, 1), 0)))) == "(4,3,1):(3,1,0)"
    assert flatten((2, (3, (4,)))) == (2, 3, 4) and flatten(5) == 5


def test_int_tuple_helpers():
    assert prefix_product((4, (2, 2))) == (1, (4, 8))
    assert suffix_product((4, (2, 2))) == (4, (2, 1))
    assert shape_div((4, 5, 6), 40) == (1, 1, 3)
    assert shape_div(6, 12) == 1 and shape_div(12, 6) == 2
    assert congruent((1, (2, 3)), (4, (5, 6))) and not congruent((1, 2), (1, (2, 3)))
    # 01_layout.md compatibility examples
    assert not compatible(24, 32)
    assert compatible(24, (4, 6)) and compatible((4, 6), ((2, 2), 6))
    assert compatible(((2, 2), 6), ((2, 2), (3, 2))) and compatible(24, ((2, 3), 4))
    assert not compatible(((2, 3), 4), ((2, 2), (3, 2))) and not compatible((24,), 24)
    assert compatible(24, (24,)) and not compatible((24,), (4, 6))


def test_coalesce_examples():
    assert str(coalesce(Layout((2, (1, 6)), (1, (6, 2))))) == "12:1"
    assert str(coalesce(Layout((2, (1, 6)), (1, (6, 2))), (1, 1))) == "(2,6):(1,2)"
    assert str(coalesce(Layout((2, 4), (1, 2)))) == "8:1"
    assert str(coalesce(Layout((4, 1), (1, 0)))) == "4:1"
    assert str(coalesce(Layout((1, 1), (3, 5)))) == "1:0"
    assert str(coalesce(Layout((2, 3), (0, 0)))) == "6:0"
    assert str(coalesce(Layout(((4, 2),), ((1, 4),)))) == "8:1"
    assert str(coalesce(Layout((4, 2, 3), (2, 1, 8)))) == "(4,2,3):(2,1,8)"


def test_filter_examples():
    assert str(filter(Layout((4, 2), (0, 1)))) == "2:1"
    assert str(filter(Layout((2, 4, 8), (8, 1, 0)))) == "(2,4):(8,1)"
    assert str(filter(Layout((4, 2), (0, 0)))) == "1:0"
    assert str(filter(Layout((4, (2, 3)), (0, (1, 2))), (1, 1))) == "(1,6):(0,1)"
