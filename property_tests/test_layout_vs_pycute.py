"""metile's layout algebra against NVIDIA's reference Python CuTe (``pycute``, shipped in the ``nvidia-cutlass``
wheel, installed by the ``dev`` extra on Linux): the same hypothesis-generated layouts go to both, and the results
must be equal, or differ only in the ways documented here.

Where the two disagree, the test does not simply allow it: it checks that metile's answer is right (``R(i) ==
A(B(i))``, or the operation's law) and that pycute's is wrong or that pycute asserts. The known, deliberate
differences, each counted with ``hypothesis.event``:

* composition: pycute asserts strict stride divisibility, so it refuses a B mode whose stride does not divide a
  mode of A even when the mode ends inside it (``(3,4):(1,10) o 2:2 == 2:2``); metile accepts that as CuTe's C++
  does. pycute checks no shape divisibility (``(3,4):(1,10) o 4:1`` gives ``3:1``), and it does not check that
  B's modes distribute (``(6,2):(0,1) o (2,3):(3,2)``); metile refuses both. pycute coalesces A with ``coalesce``,
  dropping a trailing size-1 mode and so changing A past its size; metile keeps it (CuTe's C++ ``coalesce_x``).
* complement: pycute does not check that sorted modes start at multiples of the extent before them and then
  leaves holes (``complement((2,2):(1,3), 12)``); metile refuses. Its default cotarget is 1, metile's is
  ``cosize(filter(L))``, so the test always passes one.
* right_inverse of a non-injective layout: pycute follows the chain of strides on the flat modes without
  coalescing and stops at the first stride that does not continue it (a stride-0 mode, a repeated stride);
  CuTe's C++ and metile coalesce first and skip such strides, so the two inverses can differ (both are right
  inverses, metile's at least as long).
* logical_product with an int tiler: pycute calls ``logical_divide`` there (a slip); the test passes ``n:1``.
* blocked_product, raked_product and the flat forms are not in pycute; their oracle is CuTe's C++ definition
  applied to pycute's ``logical_product`` / ``zipped_*`` (zip the two modes, or unpack them).
"""

from __future__ import annotations

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from layout_strategies import bounded, compact_layouts, injective_layouts, layouts, pow2_tilers, rank2_compact

from metile.layout import (
    Layout,
    blocked_product,
    coalesce,
    complement,
    composition,
    cosize,
    crd2idx,
    filter,
    flat_divide,
    flat_product,
    idx2crd,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    raked_product,
    right_inverse,
    size,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)
from metile.layout.inttuple import leaves

pycute = pytest.importorskip(
    "pycute", reason="pycute (in the nvidia-cutlass wheel, `pip install -e .[dev]` on Linux) is not installed"
)


# ------------------------------------------------------------------------------------------------- plumbing


def to_py(x):
    """A metile layout or tiler as pycute's: layouts by shape and stride, tuples mode by mode, ints and None."""
    if isinstance(x, Layout):
        return pycute.Layout(x.shape, x.stride)
    if isinstance(x, tuple):
        return tuple(to_py(e) for e in x)
    return x


def from_py(p) -> Layout:
    return Layout._raw(p.shape, p.stride)


def py_call(fn, *args):
    """pycute's result, or None where it asserts (its way to refuse) or fails on a value it cannot handle."""
    try:
        return fn(*args)
    except (AssertionError, ZeroDivisionError, IndexError, TypeError):
        return None


def mt_call(fn, *args):
    """metile's result, or None where it refuses (every refusal of the algebra is a ValueError)."""
    try:
        return fn(*args)
    except ValueError:
        return None


def unit_strides_zeroed(shape, stride):
    if isinstance(shape, tuple):
        return tuple(unit_strides_zeroed(s, d) for s, d in zip(shape, stride, strict=True))
    return 0 if shape == 1 else stride


def same(m: Layout, p, *, units: bool = False) -> bool:
    """Equal shapes and strides. With ``units``, the stride of a size-1 mode (never multiplied by anything
    but 0) does not count: metile gives a size-1 leaf of B the stride 0 in a composition, pycute ``A``'s."""
    if m.shape != p.shape:
        return False
    if units:
        return unit_strides_zeroed(m.shape, m.stride) == unit_strides_zeroed(p.shape, p.stride)
    return m.stride == p.stride


def tally(what: str) -> None:
    """Count a case in hypothesis's statistics (``--hypothesis-show-statistics``); a no-op outside ``@given``."""
    try:
        event(what)
    except InvalidArgument:
        pass


def image(layout: Layout) -> list[int]:
    return [layout(i) for i in range(size(layout))]


def well_formed(p) -> bool:
    return all(isinstance(s, int) and s >= 1 for s in leaves(p.shape)) and len(leaves(p.shape)) == len(
        leaves(p.stride)
    )


# -------------------------------------------------------------------------------------------- oracle checks


def composes(r: Layout, a: Layout, b) -> bool:
    """``r`` is ``A o B``: for a layout B, ``r(i) == A(B(i))`` on B's domain (A past its size keeps counting)."""
    if isinstance(b, int):
        b = Layout(b, 1)
    if isinstance(b, tuple):
        return all(composes(r[i], a[i], t) for i, t in enumerate(b) if t is not None)
    return size(r) == size(b) and image(r) == [a(b(i)) for i in range(size(b))]


def ends_in_unit_mode(a: Layout, b) -> bool:
    """A (or a mode of A that a tuple tiler composes with) ends in a size-1 mode, which pycute's ``coalesce``
    drops, changing A past its size; CuTe's C++ and metile keep it (``coalesce_x``)."""
    if isinstance(b, tuple):
        return any(ends_in_unit_mode(a[i], t) for i, t in enumerate(b) if t is not None)
    return leaves(a.shape)[-1] == 1


def check_composition(a: Layout, b) -> tuple[Layout | None, bool]:
    """Compare ``composition(a, b)``; return metile's result (None when it refuses) and whether pycute agrees."""
    m = mt_call(composition, a, b)
    p = py_call(pycute.composition, to_py(a), to_py(b))
    if p is not None and not well_formed(p):
        p = None
    if m is not None:
        assert composes(m, a, b), f"metile's {a} o {b} = {m} is wrong"
    if m is not None and p is not None:
        if same(m, p, units=True):
            tally("composition: equal")
            return m, True
        else:
            assert not composes(from_py(p), a, b), f"{a} o {b}: metile {m}, pycute {p}, both right"
            assert ends_in_unit_mode(a, b), f"{a} o {b}: metile {m}, pycute {p}"
            tally("composition: pycute wrong past A's size (coalesce drops A's last size-1 mode)")
    elif m is not None:
        tally("composition: pycute asserts, metile accepts (leaf ends inside a mode of A, as CuTe C++)")
    elif p is not None:
        assert not composes(from_py(p), a, b), f"metile refuses {a} o {b} but pycute's {p} is right"
        tally("composition: metile refuses where pycute is wrong")
    else:
        tally("composition: both refuse")
        return m, True
    return m, False


def is_complement(r: Layout, layout: Layout, cotarget: int) -> bool:
    """Complement's law: ``r`` is ordered and ``(filter(L), r)`` is a bijection onto ``[0, N)``, ``N >= M``."""
    if not all(isinstance(s, int) and s >= 1 for s in leaves(r.shape)):
        return False
    img = image(r)
    if any(x >= y for x, y in zip(img, img[1:], strict=False)):
        return False
    both = image(make_layout(filter(layout), r))
    return sorted(both) == list(range(len(both))) and len(both) >= cotarget


def check_complement(layout: Layout, cotarget: int) -> Layout | None:
    m = mt_call(complement, layout, cotarget)
    p = py_call(pycute.complement, to_py(layout), cotarget)
    if m is not None:
        assert is_complement(m, layout, cotarget)
    if m is not None and p is not None:
        assert same(m, p), f"complement({layout}, {cotarget}): metile {m}, pycute {p}"
        tally("complement: equal")
    elif m is not None:
        raise AssertionError(f"pycute refuses complement({layout}, {cotarget}) that metile gives as {m}")
    elif p is not None:
        assert not is_complement(from_py(p), layout, cotarget), f"metile refuses, pycute's {p} is right"
        tally("complement: metile refuses where pycute leaves holes")
    else:
        tally("complement: both refuse")
    return m


# ------------------------------------------------------------------------------------------------- strategies


@st.composite
def tilers(draw, a: Layout):
    """A composition tiler for ``a``: a layout, an int, or a tuple of those and None, at most ``rank(a)`` long."""

    def leaf():
        return st.one_of(
            layouts(max_size=32, max_stride=12, max_modes=3), st.integers(1, 12), compact_layouts(max_size=24)
        )

    if draw(st.integers(0, 2)) or len(a) == 1:
        return draw(leaf())
    k = draw(st.integers(1, len(a)))
    return tuple(draw(st.one_of(st.none(), leaf())) for _ in range(k))


# ---------------------------------------------------------------------------------------------- composition


@given(layouts(max_size=64), st.data())
@bounded(1000)
def test_composition_matches_pycute(a, data):
    check_composition(a, data.draw(tilers(a)))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (Layout((3, 2, 4), (24, 12, 1)), Layout(2, 1), "2:24"),
        (Layout((3, 4), (1, 10)), Layout(2, 2), "2:2"),  # pycute asserts; CuTe's C++ accepts
        (Layout((3, 4), (1, 10)), Layout(4, 1), None),  # pycute: 3:1, of size 3
        (Layout((3, 4), (1, 10)), Layout(4, 2), None),  # CuTe's C++: (2,2):(2,10), but A(4) == 11
        (Layout((6, 2), (0, 1)), Layout((2, 3), (3, 2)), None),  # pycute: (2,3):(0,0), but A(7) == 1
    ],
)
def test_composition_examples(a, b, expected):
    m, _ = check_composition(a, b)
    assert (None if m is None else str(m)) == expected


# ------------------------------------------------------------------------------------- complement, inverses


@given(layouts(max_size=64, max_stride=16), st.integers(1, 200))
@example(Layout((2, 2), (1, 3)), 12)
@bounded(1000)
def test_complement_matches_pycute(layout, cotarget):
    check_complement(layout, cotarget)


@given(injective_layouts(zeros=True), st.integers(1, 300))
@bounded(500)
def test_complement_of_complementable_layouts_matches_pycute(layout, cotarget):
    assert check_complement(layout, cotarget) is not None


@given(layouts(max_size=64, max_stride=16))
@example(Layout((2, 4), (0, 1)))
@example(Layout((2, 2, 3), (1, 1, 2)))
@bounded(1000)
def test_right_inverse_matches_pycute(layout):
    m = right_inverse(layout)
    p = from_py(pycute.right_inverse(to_py(layout)))
    assert [layout(m(i)) for i in range(size(m))] == list(range(size(m)))
    if same(m, p):
        tally("right_inverse: equal")
        return
    # Only a non-injective layout has a choice: pycute follows the chain on the flat modes without coalescing
    # and stops at the first stride that does not continue it; CuTe's C++ and metile coalesce first and skip
    # such a stride. Both answers must then be right inverses, metile's at least as long.
    assert [layout(p(i)) for i in range(size(p))] == list(range(size(p)))
    assert size(m) >= size(p)
    assert len(set(image(layout))) < size(layout), f"right_inverse({layout}): metile {m}, pycute {p}"
    tally("right_inverse: a non-injective layout, pycute's chain differs (both right inverses)")


@given(injective_layouts())
@bounded(1000)
def test_left_inverse_matches_pycute(layout):
    m = left_inverse(layout)
    p = pycute.left_inverse(to_py(layout))
    assert same(m, p), f"left_inverse({layout}): metile {m}, pycute {p}"
    assert [m(layout(i)) for i in range(size(layout))] == list(range(size(layout)))


# ------------------------------------------------------------------------------- coalesce, filter, evaluation


@given(layouts(max_size=128, max_stride=24))
@bounded(1000)
def test_coalesce_filter_size_cosize_match_pycute(layout):
    p = to_py(layout)
    assert same(coalesce(layout), pycute.coalesce(p))
    assert same(filter(layout), pycute.filter(p))
    assert size(layout) == pycute.size(p)
    assert cosize(layout) == pycute.cosize(p)


@given(layouts(max_size=128, max_stride=24))
@bounded(1000)
def test_by_mode_coalesce_and_filter_match_pycute(layout):
    prof = tuple(1 for _ in range(len(layout))) if isinstance(layout.shape, tuple) else None
    assert same(coalesce(layout, prof), pycute.coalesce(to_py(layout), prof))
    assert same(filter(layout, prof), pycute.filter(to_py(layout), prof))


@given(layouts(max_size=128, max_stride=24), st.data())
@bounded(1000)
def test_crd2idx_and_idx2crd_match_pycute(layout, data):
    i = data.draw(st.integers(0, 2 * size(layout)))
    assert layout(i) == pycute.crd2idx(i, layout.shape, layout.stride)
    assert crd2idx(i, layout.shape, layout.stride) == pycute.crd2idx(i, layout.shape, layout.stride)
    j = i % size(layout)
    crd = idx2crd(j, layout.shape)
    assert crd == pycute.idx2crd(j, layout.shape)
    assert layout(crd) == pycute.crd2idx(crd, layout.shape, layout.stride) == layout(j)
    assert crd2idx(crd, layout.shape) == pycute.crd2idx(crd, layout.shape) == j


# ------------------------------------------------------------------------------------------------- divides


def check_divide(a: Layout, tiler) -> None:
    """logical_divide by its parts (complement and composition), then the zipped and tiled forms."""
    parts = list(zip(a, tiler, strict=False)) if isinstance(tiler, tuple) else [(a, tiler)]
    agree = True
    for ai, bi in parts:
        if bi is None:
            continue
        bi = Layout(bi, 1) if isinstance(bi, int) else bi
        rest = check_complement(bi, size(ai))
        if rest is not None:
            agree &= check_composition(ai, make_layout(bi, rest))[1]
    m = mt_call(logical_divide, a, tiler)
    p = py_call(pycute.logical_divide, to_py(a), to_py(tiler))
    if not agree:
        tally("logical_divide: pycute's composition is wrong (checked by parts above)")
        return
    if m is None or p is None:
        tally(f"logical_divide: {'metile' if m is None else 'pycute'} refuses (checked by parts above)")
        return
    assert same(m, p, units=True), f"logical_divide({a}, {tiler}): metile {m}, pycute {p}"
    tally("logical_divide: equal")
    zp = pycute.zipped_divide(to_py(a), to_py(tiler))
    assert same(zipped_divide(a, tiler), zp, units=True)
    assert same(tiled_divide(a, tiler), pycute.tiled_divide(to_py(a), to_py(tiler)), units=True)
    # flat_divide is not in pycute: CuTe's C++ unpacks both modes of zipped_divide
    flat_modes = [zp[0][i] for i in range(len(zp[0]))] + [zp[1][i] for i in range(len(zp[1]))]
    assert same(flat_divide(a, tiler), pycute.make_layout(*flat_modes), units=True)


@given(st.data())
@bounded(1000)
def test_logical_zipped_tiled_flat_divide_match_pycute(data):
    a = data.draw(layouts(max_size=64))
    kind = data.draw(st.integers(0, 2))
    if kind == 0:
        tiler = data.draw(pow2_tilers(a))
    elif kind == 1:
        tiler = data.draw(st.one_of(layouts(max_size=16, max_stride=8, max_modes=2), st.integers(1, 8)))
    else:
        k = data.draw(st.integers(1, len(a)))
        tiler = tuple(data.draw(st.one_of(st.none(), pow2_tilers(a[i]), st.integers(1, 8))) for i in range(k))
    check_divide(a, tiler)


@given(compact_layouts(max_size=64), st.data())
@bounded(500)
def test_divide_of_compact_layouts_by_pow2_tiles_matches_pycute(a, data):
    check_divide(a, data.draw(pow2_tilers(a)))


# ------------------------------------------------------------------------------------------------ products


def check_product(block: Layout, tiler: Layout) -> Layout | None:
    """logical_product by its parts, then the zipped, tiled and flat forms; returns pycute's product."""
    rest = check_complement(block, size(block) * cosize(tiler))
    if rest is not None and not check_composition(rest, tiler)[1]:
        tally("logical_product: pycute's composition is wrong (checked by parts above)")
        return None
    m = mt_call(logical_product, block, tiler)
    p = py_call(pycute.logical_product, to_py(block), to_py(tiler))
    if m is None or p is None:
        tally(f"logical_product: {'metile' if m is None else 'pycute'} refuses (checked by parts above)")
        return None
    assert same(m, p, units=True), f"logical_product({block}, {tiler}): metile {m}, pycute {p}"
    tally("logical_product: equal")
    zp = pycute.zipped_product(to_py(block), to_py(tiler))
    assert same(zipped_product(block, tiler), zp, units=True)
    assert same(tiled_product(block, tiler), pycute.tiled_product(to_py(block), to_py(tiler)), units=True)
    flat_modes = [zp[0][i] for i in range(len(zp[0]))] + [zp[1][i] for i in range(len(zp[1]))]
    assert same(flat_product(block, tiler), pycute.make_layout(*flat_modes), units=True)
    return p


def py_pad(layout, r: int):
    """CuTe's ``append<R>``: pad with ``1:0`` modes to rank ``r`` (a rank-1 layout stays as it is at r == 1)."""
    if r == len(layout):
        return layout
    ms = [layout[i] for i in range(len(layout))] + [pycute.Layout(1, 0)] * (r - len(layout))
    return pycute.make_layout(*ms)


def py_zip(x, y):
    """CuTe's ``zip(x, y)`` of two layouts: mode i is (x_i, y_i); an int-shaped x makes the pair one mode."""
    if not isinstance(x.shape, tuple):
        return pycute.Layout(((x.shape, y.shape),), ((x.stride, y.stride),))
    modes_ = []
    for i in range(len(x.shape)):
        yi = y[i] if isinstance(y.shape, tuple) else y
        modes_.append(pycute.make_layout(x[i], yi))
    return pycute.make_layout(*modes_)


def check_blocked_raked(block: Layout, tiler: Layout) -> None:
    """blocked/raked products against CuTe's C++ definition on pycute's logical_product of the padded pair."""
    r = max(len(block), len(tiler))
    p = py_call(pycute.logical_product, py_pad(to_py(block), r), py_pad(to_py(tiler), r))
    mb = mt_call(blocked_product, block, tiler)
    mr = mt_call(raked_product, block, tiler)
    assert (mb is None) == (mr is None)
    if mb is None or p is None:
        return
    tally("blocked/raked: compared")
    assert same(mb, py_zip(p[0], p[1]), units=True), f"blocked_product({block}, {tiler}) = {mb}"
    assert same(mr, py_zip(p[1], p[0]), units=True), f"raked_product({block}, {tiler}) = {mr}"
    assert len(mb) == len(mr) == r


@given(injective_layouts(max_modes=3, zeros=True), layouts(max_size=32, max_stride=8, max_modes=3))
@example(Layout((2, 2), (4, 1)), Layout(6, 1))
@example(Layout((2, 5), (5, 1)), Layout((3, 4), (1, 3)))
@bounded(1000)
def test_logical_zipped_tiled_flat_product_match_pycute(block, tiler):
    check_product(block, tiler)


@given(
    st.one_of(compact_layouts(max_size=32, max_modes=3), rank2_compact()),
    st.one_of(compact_layouts(max_size=24, max_modes=3), injective_layouts(max_modes=2)),
)
@example(Layout(4, 1), Layout(3, 1))
@example(Layout((2, 5), (5, 1)), Layout((3, 4), (1, 3)))
@bounded(1000)
def test_blocked_and_raked_products_match_cute(block, tiler):
    check_blocked_raked(block, tiler)


def test_rank1_blocked_and_raked_products_are_rank1():
    assert str(blocked_product(Layout(4, 1), Layout(3, 1))) == "((4,3)):((1,4))"
    assert str(raked_product(Layout(4, 1), Layout(3, 1))) == "((3,4)):((4,1))"
    check_blocked_raked(Layout(4, 1), Layout(3, 1))
    check_blocked_raked(Layout(4, 2), Layout(2, 1))
