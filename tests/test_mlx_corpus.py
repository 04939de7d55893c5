"""The MLX kernel corpus as tests: each of MLX's Metal kernels, compiled as shipped from the mlx-metal wheel
(fetched once into metile's cache) or from the source checkout named by METILE_MLX_SOURCE, dispatched on the
CPU device as MLX's host code does and compared with numpy. A case skips, with the reason, when the wheel
cannot be fetched or the source checkout it needs is absent."""

from __future__ import annotations

import pytest

import metile
from benchmarks.mlx_kernels import CASES, CorpusUnavailable

pytestmark = pytest.mark.mlx_corpus


@pytest.fixture(scope="module")
def dev():
    return metile.device("cpu")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mlx_kernel(dev, case):
    try:
        result = case.run(dev)
    except CorpusUnavailable as e:
        pytest.skip(str(e))
    assert result.max_error <= result.tolerance


def test_corpus_names_are_unique_and_cover_the_families():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    families = {c.family for c in CASES}
    for family in ("softmax", "layer_norm", "rms_norm", "unary", "binary", "reduce", "arg_reduce", "scan", "sort",
                   "fp8"):
        assert family in families, family
