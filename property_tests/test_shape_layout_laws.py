"""The layouts of shape changes (`metile.rewrite.shape_layouts`) are numpy's permutations and takes, element for
element, and coalesced (no more modes than dimensions, none of size 1)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from metile.layout import size
from metile.layout.layout import flat_modes
from metile.rewrite.shape_layouts import permute_layout, take_layout

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


@given(shapes, st.data())
def test_permute_layout_is_numpys_transpose(shape, data):
    order = tuple(data.draw(st.permutations(range(len(shape)))))
    lay = permute_layout(shape, order)
    want = np.arange(int(np.prod(shape))).reshape(shape).transpose(order).ravel()
    assert size(lay) == want.size and [lay(i) for i in range(want.size)] == list(want)
    assert len(flat_modes(lay)[0]) <= len(shape)


@given(shapes, st.data())
def test_take_layout_is_numpys_take(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    k = data.draw(st.integers(0, shape[axis] - 1))
    lay, stride = take_layout(shape, axis)
    want = np.arange(int(np.prod(shape))).reshape(shape).take(k, axis).ravel()
    assert [lay(i) + k * stride for i in range(want.size)] == list(want)
