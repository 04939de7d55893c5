"""Laws of tiling (divides and products), of swizzles and of the bank model."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st
from layout_strategies import (
    bounded,
    compact_flat,
    compact_layouts,
    injective_layouts,
    layouts,
    nested,
    pow2_tilers,
    prefix_strides,
    rank2_compact,
    swizzles,
)

from metile.layout import (
    ComposedLayout,
    Layout,
    bank_conflicts,
    blocked_product,
    complement,
    composition,
    cosize,
    flat_divide,
    logical_divide,
    logical_product,
    make_layout,
    modes,
    raked_product,
    size,
    tiled_divide,
    zipped_divide,
)


def image(layout, n=None):
    return [layout(i) for i in range(size(layout) if n is None else n)]


# ---------------------------------------------------------------------------------------------------- divide


@st.composite
def divide_pairs(draw):
    a = draw(compact_layouts(pow2=True))
    return a, draw(pow2_tilers(a))


@st.composite
def rank2_divide_pairs(draw):
    a = draw(rank2_compact())
    return a, (draw(pow2_tilers(a[0])), draw(pow2_tilers(a[1])))


@given(divide_pairs())
@example((Layout((4, 2, 3), (2, 1, 8)), Layout(4, 2)))
@example((Layout(10, 1), Layout(4, 1)))
@bounded(250)
def test_logical_divide_is_composition_with_tile_and_rest(pair):
    a, b = pair
    d = logical_divide(a, b)
    full = make_layout(b, complement(b, size(a)))
    assert d == composition(a, full)
    assert d[0] == composition(a, b)
    assert image(d) == [a(full(i)) for i in range(size(full))]
    if size(d) == size(a):
        assert sorted(image(d)) == sorted(image(a)), "the tiles partition A"


@given(layouts(max_size=64), injective_layouts(max_modes=2))
@example(Layout((6, 2), (0, 1)), Layout(2, 3))
@bounded(300)
def test_logical_divide_raises_or_is_right(a, b):
    try:
        d = logical_divide(a, b)
    except ValueError as e:
        assert str(e).startswith("logical_divide(")
        return
    full = make_layout(b, complement(b, size(a)))
    assert image(d) == [a(full(i)) for i in range(size(full))]


@given(rank2_divide_pairs())
@example((Layout((9, (4, 8)), (59, (13, 1))), (Layout(3, 3), Layout((2, 4), (1, 8)))))
@bounded(100)
def test_zipped_tiled_flat_divide_rearrange_logical_divide(pair):
    a, tiler = pair
    ld = logical_divide(a, tiler)
    z = zipped_divide(a, tiler)
    assert z[0] == make_layout(ld[0][0], ld[1][0]) == make_layout(*modes(composition(a, tiler)))
    assert z[1] == make_layout(ld[0][1], ld[1][1])
    assert tiled_divide(a, tiler) == make_layout(z[0], *modes(z[1]))
    assert flat_divide(a, tiler) == make_layout(*modes(z[0]), *modes(z[1]))
    assert sorted(image(z)) == sorted(image(ld))


# --------------------------------------------------------------------------------------------------- product


@given(injective_layouts(pow2=True, max_modes=3), injective_layouts(pow2=True, max_modes=2, zeros=True))
@example(Layout((2, 2), (4, 1)), Layout(6, 1))
@example(Layout((2, 2), (4, 1)), Layout((4, 2), (2, 1)))
@bounded(250)
def test_logical_product_is_block_and_its_repetitions(a, b):
    p = logical_product(a, b)
    rest = complement(a, size(a) * cosize(b))
    assert p == make_layout(a, composition(rest, b))
    assert p[0] == a
    assert [p[1](j) for j in range(size(b))] == [rest(b(j)) for j in range(size(b))]
    if len(set(image(b))) == size(b):
        assert len(set(image(p))) == size(p), "a product of injective layouts is injective"


@given(rank2_compact(), rank2_compact())
@example(Layout((2, 5), (5, 1)), Layout((3, 4), (1, 3)))
@bounded(150)
def test_blocked_and_raked_products(a, b):
    p = logical_product(a, b)
    blocked = blocked_product(a, b)
    raked = raked_product(a, b)
    for i in range(2):
        assert size(blocked, i) == size(raked, i) == size(a, i) * size(b, i)
        assert image(blocked[i]) == image(make_layout(p[0][i], p[1][i]))
        assert image(raked[i]) == image(make_layout(p[1][i], p[0][i]))
    assert sorted(image(blocked)) == sorted(image(raked)) == list(range(size(a) * size(b)))


# --------------------------------------------------------------------------------------------------- swizzle


@given(swizzles())
@bounded(500)
def test_swizzle_is_an_involution_on_aligned_blocks(sw):
    top = max(sw.yyy_msk, sw.zzz_msk, 1).bit_length() + 1
    block = 1 << top
    for k in range(2):
        xs = range(k * block, (k + 1) * block)
        assert sorted(sw(x) for x in xs) == list(xs)
        assert all(sw(sw(x)) == x for x in xs)


@given(swizzles(), st.data())
@bounded(150)
def test_swizzled_compact_layout_is_a_bijection(sw, data):
    top = max(sw.yyy_msk, sw.zzz_msk, 1).bit_length()
    sizes, strides = data.draw(compact_flat(pow2=True, max_size=1 << 12))
    n = 1
    for s in sizes:
        n *= s
    if n < (1 << top):
        sizes, strides = [*sizes, (1 << top) // n * 2], [*strides, n]
    inner = Layout(tuple(sizes), tuple(strides))
    c = composition(sw, inner)
    assert isinstance(c, ComposedLayout)
    assert sorted(image(c)) == list(range(size(inner)))


# ------------------------------------------------------------------------------------------------ bank model


@st.composite
def lane_permutations(draw, lanes_log2: int = 5):
    """Compact layouts of exactly ``2**lanes_log2`` elements: one word per bank, in some order."""
    exps, left = [], lanes_log2
    while left:
        e = draw(st.integers(1, left))
        exps.append(e)
        left -= e
    sizes = [1 << e for e in exps]
    order = list(draw(st.permutations(range(len(sizes)))))
    return draw(nested(sizes, prefix_strides(sizes, order)))


@given(lane_permutations())
@bounded(300)
def test_a_permutation_of_one_row_of_banks_is_conflict_free(a):
    assert size(a) == 32
    assert bank_conflicts(a) == 0


@given(layouts(max_stride=64), st.sampled_from([1, 2, 4, 8]))
@bounded(500)
def test_bank_conflicts_are_bounded(a, element_bytes):
    lanes = min(32, size(a))
    words_per_lane = max(1, element_bytes // 4)
    assert 0 <= bank_conflicts(a, element_bytes=element_bytes) <= lanes * words_per_lane - 1
