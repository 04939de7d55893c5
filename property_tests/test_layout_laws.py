"""Laws of the layout algebra: coordinates, coalesce, filter, composition, complement and the inverses."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st
from layout_strategies import (
    bounded,
    compact_flat,
    compact_layouts,
    composable_pairs,
    injective_layouts,
    layouts,
    refine,
)

from metile.layout import (
    Layout,
    coalesce,
    compatible,
    complement,
    composition,
    cosize,
    crd2idx,
    depth,
    filter,
    flatten,
    idx2crd,
    left_inverse,
    make_layout,
    modes,
    right_inverse,
    round_up,
    size,
)


def flat(t):
    return flatten(t) if isinstance(t, tuple) else (t,)


def image(layout, n=None):
    return [layout(i) for i in range(size(layout) if n is None else n)]


# ----------------------------------------------------------------------------------------------- coordinates


@given(layouts())
@example(Layout((3, (2, 3)), (3, (12, 1))))
@bounded(300)
def test_idx2crd_crd2idx_round_trip(a):
    for i in range(size(a)):
        c = idx2crd(i, a.shape)
        assert crd2idx(c, a.shape) == i
        assert idx2crd(crd2idx(c, a.shape), a.shape) == c
        assert a(c) == a(i) == crd2idx(i, a.shape, a.stride)


@given(layouts(), st.integers(0, 10**6))
@example(Layout((3, (2, 3))), 5)
def test_idx2crd_maps_a_tuple_index_mode_by_mode(a, k):
    """Mode ``m`` of a tuple index is a 1-D index into mode ``m`` alone (this once used the whole shape's
    strides: ``idx2crd((1, 5), (3, (2, 3)))`` must be ``(1, (1, 2))``)."""
    a = a if isinstance(a.shape, tuple) else make_layout(a)
    ms = modes(a)
    index = tuple(k % size(m) for m in ms)
    crd = idx2crd(index, tuple(m.shape for m in ms))
    assert crd == tuple(idx2crd(i, m.shape) for i, m in zip(index, ms, strict=True))
    assert a(crd) == sum(m(i) for i, m in zip(index, ms, strict=True))


# -------------------------------------------------------------------------------------------------- coalesce


@given(layouts())
@example(Layout((2, (1, 6)), (1, (6, 2))))
@example(Layout((4, 1), (1, 0)))
@example(Layout((2, 3), (0, 0)))
@bounded(500)
def test_coalesce_preserves_the_function_and_is_idempotent(a):
    c = coalesce(a)
    assert size(c) == size(a)
    assert depth(c) <= 1
    assert image(c) == image(a)
    assert coalesce(c) == c


@given(st.data())
@bounded(200)
def test_coalesce_is_canonical_on_compact_layouts(data):
    """Two layouts with the same function on their domain (refinements of one compact flat layout) coalesce
    to the same layout."""
    sizes, strides = data.draw(compact_flat())
    a = data.draw(refine(sizes, strides))
    b = data.draw(refine(sizes, strides))
    assert image(a) == image(b)
    assert coalesce(a) == coalesce(b)


@given(layouts(), st.data())
@bounded(300)
def test_by_mode_coalesce_keeps_each_mode(a, data):
    n = len(a)
    prof = tuple(1 for _ in range(data.draw(st.integers(1, n))))
    c = coalesce(a, prof)
    assert len(c) == n
    for i in range(n):
        assert image(c[i]) == image(a[i])


@given(layouts())
@example(Layout((4, 2), (0, 1)))
@bounded(500)
def test_filter_keeps_the_image_without_broadcasts(a):
    f = filter(a)
    assert set(image(f)) == set(image(a))
    assert f == Layout(1, 0) or all(d != 0 for d in flat(f.stride))


# ----------------------------------------------------------------------------------------------- composition


@given(composable_pairs())
@example((Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))))
@example((Layout(20, 2), Layout((5, 4), (4, 1))))
@example((Layout((10, 2), (16, 4)), Layout((5, 4), (1, 5))))
@example((Layout((4, 2), (1, 10)), Layout(16, 1)))
@example((Layout((4, 1), (1, 0)), Layout(8, 1)))
@example((Layout((6, 2), (0, 1)), Layout((2, 3), (6, 2))))
@bounded(400)
def test_composition_is_function_composition(pair):
    a, b = pair
    r = composition(a, b)
    assert compatible(b.shape, r.shape)
    for i in range(size(b)):
        assert r(i) == a(b(i))
        c = idx2crd(i, b.shape)
        assert r(c) == a(b(c))


@given(layouts(max_size=64), layouts(max_size=32, max_stride=12))
@example(Layout((6, 2), (8, 2)), Layout(4, 5))
@example(Layout((6, 2), (2, 1)), Layout(4, 1))
@example(Layout((1, 2, 1, 2), (0, 0, 0, 1)), Layout((((2, 2),),), (((1, 1),),)))
@example(Layout((6, 2), (0, 1)), Layout((2, 3), (3, 2)))
@bounded(400)
def test_composition_raises_or_is_right(a, b):
    """On arbitrary pairs, composition either reports an inadmissible pair or returns A o B exactly."""
    try:
        r = composition(a, b)
    except ValueError as e:
        assert "inadmissible" in str(e)
        return
    assert compatible(b.shape, r.shape)
    assert image(r) == [a(b(i)) for i in range(size(b))]


@given(st.data())
@bounded(100)
def test_composition_with_a_tiler_works_mode_by_mode(data):
    a0, b0 = data.draw(composable_pairs())
    a1, b1 = data.draw(composable_pairs())
    a = make_layout(a0, a1, Layout(3, 7))
    r = composition(a, (b0, b1))
    assert r[0] == composition(a0, b0) and r[1] == composition(a1, b1) and r[2] == Layout(3, 7)
    for i in range(size(b1)):
        assert r(0, i, 0) == a(0, b1(i), 0)


@given(st.data())
@bounded(300)
def test_a_leaf_ending_inside_a_mode_of_a_composes_whatever_the_sizes(data):
    """As in CuTe, B's leaf ``n:r`` that stays inside one mode ``s:d`` of A (``r * (n - 1) < s`` after the
    stride is divided through A's earlier modes) composes to ``n:(r*d)``; the sizes need not divide."""
    sizes = data.draw(st.lists(st.integers(2, 7), min_size=2, max_size=4))
    strides = [data.draw(st.integers(1, 50)) for _ in sizes]
    a = Layout(tuple(sizes), tuple(strides))
    k = data.draw(st.integers(0, len(sizes) - 2))
    before = 1
    for s in sizes[:k]:
        before *= s
    r = data.draw(st.integers(1, sizes[k] - 1))
    n = data.draw(st.integers(2, max(2, -(-sizes[k] // r))))
    if r * (n - 1) >= sizes[k]:
        n = 1
    b = Layout(n, before * r)
    result = composition(a, b)
    assert image(result) == [a(b(i)) for i in range(n)]
    if n > 1 and coalesce(a) == a:
        assert result == Layout(n, r * strides[k])


# ------------------------------------------------------------------------------------------------ complement


def check_complement(a, m, c):
    f = filter(a)
    values = image(c)
    assert all(x < y for x, y in zip(values, values[1:], strict=False)), "ordered"
    assert set(values) & set(image(a)) <= {0}, "disjoint"
    extent = (
        1 if f == Layout(1, 0) else max(s * d for s, d in zip(flat(f.shape), flat(f.stride), strict=True))
    )
    assert size(f) * size(c) == round_up(m, extent) >= m
    both = sorted(image(make_layout(f, c)))
    assert both == list(range(size(f) * size(c))), "(filter(A), complement) is a bijection"
    assert cosize(make_layout(a, c)) >= m


@given(injective_layouts(zeros=True), st.integers(1, 300))
@example(Layout(4, 1), 24)
@example(Layout(4, 2), 19)
@example(Layout((2, 2), (1, 6)), 24)
@example(Layout((4, 6), (1, 4)), 24)
@example(Layout(1, 0), 5)
@example(Layout((2, 4, 8), (8, 1, 0)), 460)
@bounded(400)
def test_complement_laws(a, m):
    check_complement(a, m, complement(a, m))


@given(injective_layouts())
@bounded(300)
def test_complement_default_cotarget_leaves_nothing_over(a):
    c = complement(a)
    check_complement(a, cosize(filter(a)), c)
    assert size(complement(make_layout(a, c))) == 1


@given(layouts(max_size=64), st.integers(1, 200))
@example(Layout((2, 2), (2, 3)), 19)
@example(Layout((4, 6), (1, 6)), 36)
@example(Layout((2, 2), (1, 1)), 8)
@bounded(400)
def test_complement_raises_or_is_right(a, m):
    try:
        c = complement(a, m)
    except ValueError as e:
        assert "inadmissible" in str(e)
        return
    check_complement(a, m, c)


# -------------------------------------------------------------------------------------------------- inverses


@given(layouts())
@example(Layout((4, 8), (8, 1)))
@example(Layout((2, 2), (1, 1)))
@example(Layout(4, 0))
@bounded(500)
def test_right_inverse(a):
    r = right_inverse(a)
    for i in range(size(r)):
        assert a(r(i)) == i


@given(compact_layouts())
@bounded(300)
def test_right_inverse_of_a_bijection_is_total(a):
    r = right_inverse(a)
    assert size(r) == size(a)
    assert [r(a(i)) for i in range(size(a))] == list(range(size(a)))


@given(injective_layouts())
@example(Layout((4, 8), (8, 1)))
@example(Layout((2, 3), (3, 1)))
@example(Layout(4, 2))
@bounded(300)
def test_left_inverse(a):
    li = left_inverse(a)
    for i in range(size(a)):
        assert li(a(i)) == i


@given(layouts(max_size=64))
@example(Layout((2, 2), (1, 3)))
@example(Layout((4, 2), (1, 0)))
@bounded(400)
def test_left_inverse_raises_or_is_right(a):
    try:
        li = left_inverse(a)
    except ValueError as e:
        assert "left_inverse" in str(e)
        return
    assert [li(a(i)) for i in range(size(a))] == list(range(size(a)))


@given(compact_layouts())
@bounded(200)
def test_compact_layouts_are_bijections(a):
    assert sorted(image(a)) == list(range(size(a)))
