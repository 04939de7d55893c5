"""`tl.reduce` and `tl.associative_scan` with `@triton.jit` combine functions (tuples of tensors, any axis,
`keep_dims`, `axis=None`, `reverse`), `tl.xor_sum`, `tl.reduce_or` and `tl.gather` on metile give what Triton's own
interpreter gives (`TRITON_INTERPRET=1`, in a process of its own without metile), and their misuses are refused as
Triton refuses them."""

from __future__ import annotations

import numpy as np
import pytest

from metile.frontend.errors import KernelTypeError
from tests.triton_kernels import interpreted as run_interpreted
from tests.triton_kernels import kernel_from_source, on_metile

pytestmark = pytest.mark.usefixtures("on_cpu")


@pytest.fixture(scope="module")
def combine():
    return on_metile("combine")


@pytest.fixture(scope="module")
def interpreted():
    return run_interpreted("combine")


def test_combine_functions_match_triton_s_interpreter(combine, interpreted):
    mine = combine.run("cpu")
    assert mine.keys() == interpreted.keys()
    for name, want in interpreted.items():
        if want.dtype.kind == "f":    # the interpreter folds in index order, metile in a tree: rounding differs
            np.testing.assert_allclose(mine[name], want, rtol=1e-5, atol=1e-5, err_msg=name)
        else:
            np.testing.assert_array_equal(mine[name], want, err_msg=name)


def _module(tmp_path, body: str):
    return kernel_from_source(tmp_path, "combine_refused",
                              "import metile.triton as triton\nimport metile.triton.language as tl\n\n\n"
                              "@triton.jit\ndef to_f32(a, b):\n    return (a + b).to(tl.float32)\n\n\n"
                              "@triton.jit\ndef two(a, b):\n    return a, b\n\n\n"
                              "@triton.jit\ndef kernel(X):\n    x = tl.load(X + tl.arange(0, 8))\n" + body)


@pytest.mark.parametrize("body, match", [
    ("    y = tl.reduce(x.to(tl.int32), 0, to_f32)\n", "returns fp32|returns f32"),
    ("    y = tl.reduce(x, 0, two)\n", "returns 2 values for 1 tiles"),
    ("    y = tl.reduce(x, 0, max)\n", "combine function must be"),
    ("    y = tl.xor_sum(x, 0)\n", "xor_sum only supported for integers"),
    ("    y = tl.associative_scan(x, 1, two)\n", "axis 1 is out of range"),
    ("    y = tl.gather(x, tl.arange(0, 8).to(tl.float32), 0)\n", "integer"),
])
def test_misuses_are_refused_at_the_line(tmp_path, body, match):
    kernel = _module(tmp_path, body)
    with pytest.raises(KernelTypeError, match=match) as e:
        kernel.kernel.trace(np.zeros(8, np.float32))
    assert e.value.loc.line == 18
