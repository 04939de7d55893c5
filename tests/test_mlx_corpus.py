"""The MLX kernel corpus as tests: each of MLX's Metal kernels, compiled as shipped from the mlx-metal wheel
(fetched once into metile's cache) or from the source checkout named by METILE_MLX_SOURCE, dispatched on the
CPU device as MLX's host code does and compared with numpy. A case skips, with the reason, when the wheel
cannot be fetched or the source checkout it needs is absent."""

from __future__ import annotations

import os

import numpy as np
import pytest

import metile
from benchmarks.mlx_kernels import CASES, CorpusUnavailable

pytestmark = pytest.mark.mlx_corpus


@pytest.fixture(scope="module")
def dev():
    return metile.device("cpu")


def _ci_profile_skips(cases) -> set[str]:
    """The NAX cases CI leaves out (each a C++20 build of MLX's tensor-op headers, some 8 s on two cores): every
    kernel of them (the name up to `_nax`) still runs once, its further shapes and dtypes only outside CI."""
    seen, skipped = set(), set()
    for c in cases:
        if "nax" not in c.family:
            continue
        kernel = c.name.split("_nax")[0]
        if kernel in seen:
            skipped.add(c.name)
        seen.add(kernel)
    return skipped


CI_SKIPS = _ci_profile_skips(CASES) if os.environ.get("CI") else set()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mlx_kernel(dev, case):
    if case.name in CI_SKIPS:
        pytest.skip("CI profile: another case of this NAX kernel runs in CI; this shape runs outside CI")
    try:
        result = case.run(dev)
    except CorpusUnavailable as e:
        pytest.skip(str(e))
    assert result.max_error <= result.tolerance


def test_fp_qmm_n_nax_kernels_are_refused_as_the_header_does_not_compile_them(dev):
    """fp_quantized_nax.h's fp_qmm_n_nax and fp_gather_qmm_n_nax call fp_qmm_n_impl with one argument more than it
    takes: compiling them fails with the error at the call's line, and nothing runs."""
    from benchmarks.mlx_kernels.cases_nax_quantized import REFUSED

    for case, where in REFUSED:
        try:
            with pytest.raises(metile.MSLCompileError, match="no matching function for call to .fp_qmm_n_impl") as info:
                case.run(dev)
        except CorpusUnavailable as e:
            pytest.skip(str(e))
        assert where in str(info.value), (case.name, str(info.value))


def test_gather_qmm_rhs_nax_with_k_off_the_tile_reads_past_its_scales(dev):
    """Dispatched as MLX does with K not a multiple of 64, gather_qmm_rhs_nax dequantizes a whole tile in its last K
    step and reads past the end of the scales; the CPU device stops there, naming the line and the buffer."""
    from benchmarks.mlx_kernels.cases_nax_quantized import FAULTS

    for case, where in FAULTS:
        try:
            with pytest.raises(metile.DeviceFault, match=r"past the end of buffer 2 \(`scales`") as info:
                case.run(dev)
        except CorpusUnavailable as e:
            pytest.skip(str(e))
        assert where in str(info.value), (case.name, str(info.value))


def test_corpus_names_are_unique_and_cover_the_families():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    quantized = {n.split("_float")[0].split("_bfloat")[0] for n in names if n.startswith("affine_")}
    assert quantized >= {f"affine_{k}" for k in ("qmv", "qmv_fast", "qmv_quad", "qvm", "qvm_split_k", "qmm_t",
                                                  "qmm_n", "quantize", "dequantize")}, quantized
    families = {c.family for c in CASES}
    for family in ("softmax", "layer_norm", "rms_norm", "unary", "binary", "reduce", "arg_reduce", "scan", "sort",
                   "fp8", "quantized"):
        assert family in families, family


def test_the_comparison_names_the_worst_element_and_takes_nan_for_nan():
    from benchmarks.mlx_kernels.common import Mismatch, check_close, check_equal

    want = np.array([[1.0, 2.0], [np.nan, 4.0]])
    assert check_close(want + 1e-7, want, 1e-6, 0.0).max_error <= 1e-7 * 1.0001
    with pytest.raises(Mismatch, match=r"worst at \(1, 1\): got .*4\.1.*want .*4\.0"):
        check_close(np.array([[1.0, 2.0], [np.nan, 4.1]]), want, 1e-3, 0.0)
    with pytest.raises(Mismatch, match="1/4 elements beyond"):
        check_close(np.array([[1.0, 2.0], [0.0, 4.0]]), want, 1e-3, 0.0)     # a number where numpy has NaN
    with pytest.raises(Mismatch, match="shape"):
        check_equal(np.zeros(3), np.zeros(4))


def test_a_kernel_dispatched_unlike_mlx_fails_its_comparison(dev):
    """The corpus would catch a wrong result: softmax told its rows are one element shorter than they are."""
    from benchmarks.mlx_kernels import cases_rows
    from benchmarks.mlx_kernels.common import Mismatch, check_close

    try:
        fn = cases_rows.library(dev, "softmax.metal", ("softmax.h",), cases_rows._SOFTMAX).function(
            "block_softmax_float32")
    except CorpusUnavailable as e:
        pytest.skip(str(e))
    x = np.random.default_rng(0).uniform(-4, 4, (2, 100)).astype(np.float32)
    out = np.zeros_like(x)
    dev.dispatch_threads(fn, (2 * 32, 1, 1), (32, 1, 1), [x, out, np.int32(99)])
    e = np.exp(x - x.max(axis=1, keepdims=True))
    with pytest.raises(Mismatch):
        check_close(out, e / e.sum(axis=1, keepdims=True), 1e-5, 1e-9)


def test_the_ci_profile_keeps_one_case_of_every_nax_kernel():
    skipped = _ci_profile_skips(CASES)
    nax = [c.name for c in CASES if "nax" in c.family]
    kept = [n for n in nax if n not in skipped]
    assert skipped and set(skipped) < set(nax)
    assert {n.split("_nax")[0] for n in kept} == {n.split("_nax")[0] for n in nax}
    assert len(kept) == len({n.split("_nax")[0] for n in nax})
