"""The original meTile's FFT kernels (`tests/acceptance_kernels/metile_fft.py`) run as meTile wrote them, their
elements kept in Python lists of traced values, and match numpy's FFT for every size meTile's dispatch takes
(powers of two from 2 to 2048: one element per thread up to 1024, two per thread at 2048) and several batches."""

from __future__ import annotations

import numpy as np
import pytest

from tests.acceptance_kernels import metile_fft

pytestmark = pytest.mark.usefixtures("on_cpu")


def complex_rows(rows: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, n)) + 1j * rng.standard_normal((rows, n))).astype(np.complex64)


@pytest.mark.parametrize("n", metile_fft.SIZES)
def test_fft_matches_numpy(n):
    x = complex_rows(3, n, n)
    y = metile_fft.fft(x)
    want = np.fft.fft(x.astype(np.complex128), axis=1)
    scale = np.abs(want).max()
    np.testing.assert_allclose(y, want, rtol=0, atol=2e-6 * scale * np.log2(n))


@pytest.mark.parametrize("rows", [1, 5])
def test_fft_2048_batches(rows):
    x = complex_rows(rows, 2048, rows)
    np.testing.assert_allclose(metile_fft.fft(x), np.fft.fft(x.astype(np.complex128), axis=1), rtol=0,
                               atol=1e-4 * np.sqrt(2048))


def test_sizes_choose_meTiles_kernels():
    names = [metile_fft.launch(n)[0].__name__ for n in (2, 1024, 2048)]
    assert names == ["fft_kernel", "fft_kernel", "fft_kernel_large"]
    assert [metile_fft.launch(n)[1] for n in (2, 1024, 2048)] == [2, 1024, 1024]
