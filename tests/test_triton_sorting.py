"""`tl.sort`, `tl.topk`, `tl.bitonic_merge`, `tl.flip` and `tl.histogram` on metile give what Triton's own
interpreter gives (`TRITON_INTERPRET=1`, in a process of its own without metile), their misuses are refused as Triton
refuses them, and metile's own `metile.sort`, `metile.topk`, `metile.flip` and `metile.histogram` agree with numpy."""

from __future__ import annotations

import numpy as np
import pytest

import metile
from metile.frontend.errors import KernelTypeError, ShapeMismatchError
from tests.triton_kernels import interpreted as run_interpreted
from tests.triton_kernels import kernel_from_source, on_metile

pytestmark = pytest.mark.usefixtures("on_cpu")


@pytest.fixture(scope="module")
def sorting():
    return on_metile("sorting")


@pytest.fixture(scope="module")
def interpreted():
    return run_interpreted("sorting")


def test_sorting_matches_triton_s_interpreter(sorting, interpreted):
    mine = sorting.run("cpu")
    assert mine.keys() == interpreted.keys()
    for name, want in interpreted.items():
        np.testing.assert_array_equal(mine[name], want, err_msg=name)


def _module(tmp_path, body: str):
    return kernel_from_source(tmp_path, "sort_refused",
                              "import metile.triton as triton\nimport metile.triton.language as tl\n\n\n"
                              "@triton.jit\ndef kernel(X):\n"
                              "    x = tl.load(X + tl.arange(0, 8)[:, None] * 8 + tl.arange(0, 8)[None, :])\n" + body)


@pytest.mark.parametrize("body, error, match", [
    ("    y = tl.sort(x, 0)\n", KernelTypeError, "only minor dimension is currently supported"),
    ("    y = tl.topk(x, 3)\n", KernelTypeError, "k must be a power of two"),
    ("    y = tl.histogram(x, 4)\n", ShapeMismatchError, "only supports 1D input"),
    ("    y = tl.histogram(tl.sum(x, 0), 4)\n", KernelTypeError, "only supports 32-bit integer input"),
])
def test_misuses_are_refused_at_the_line(tmp_path, body, error, match):
    kernel = _module(tmp_path, body)
    with pytest.raises(error, match=match) as e:
        kernel.kernel.trace(np.zeros(64, np.float32))
    assert e.value.loc.line == 8


@metile.kernel
def own(X, H, Asc, Top, Flip, Hist, N: metile.constexpr, K: metile.constexpr, B: metile.constexpr):
    offs = metile.arange(0, N)
    x = metile.load(X + offs)
    metile.store(Asc + offs, metile.sort(x))
    metile.store(Top + metile.arange(0, K), metile.topk(x, K, descending=False))
    metile.store(Flip + offs, metile.flip(x))
    h = metile.load(H + offs)
    metile.store(Hist + metile.arange(0, B), metile.histogram(h, B, mask=h != 2))


@pytest.mark.parametrize("n, sgs", [(16, 1), (256, 4)])
def test_metile_sort_topk_flip_histogram(n, sgs):
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    h = rng.integers(-2, 12, n).astype(np.int32)
    asc, top, flip, hist = np.zeros(n, np.float32), np.zeros(4, np.float32), np.zeros(n, np.float32), \
        np.zeros(8, np.int32)
    own[(1,)](x, h, asc, top, flip, hist, N=n, K=4, B=8, num_simdgroups=sgs)
    np.testing.assert_array_equal(asc, np.sort(x))
    np.testing.assert_array_equal(top, np.sort(x)[:4])     # the 4 smallest, smallest first
    np.testing.assert_array_equal(flip, x[::-1])
    kept = h[(h >= 0) & (h < 8) & (h != 2)]
    np.testing.assert_array_equal(hist, np.bincount(kept, minlength=8)[:8])
