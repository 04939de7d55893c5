"""The original meTile's FFT kernels run as meTile wrote them, their elements kept in Python lists of traced
values, and match numpy's FFT for every size meTile's dispatch takes (powers of two from 2 to 2048) and several
batches: `kernels/fft.py` (`tests/acceptance_kernels/metile_fft.py`; one element per thread up to 1024, two per
thread at 2048) and the newer `kernels/src/metile_kernels/fft.py` (`metile_fft_tuned.py`), in the configurations
meTile tunes over (elements per thread, bit-reversed gather with `metile.reverse_bits`, twiddles in threadgroup
memory): every configuration at some sizes, the first, last and a gathering one at the others."""

from __future__ import annotations

import numpy as np
import pytest

from tests.acceptance_kernels import metile_fft, metile_fft_tuned

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


def tuned_cases():
    for n in metile_fft.SIZES:
        found = metile_fft_tuned.configs(n)
        chosen = found if n in (2, 16, 64, 2048) else [found[0], found[-1], found[len(found) // 2 + 1]]
        for c in chosen:
            yield pytest.param(n, c, id=f"{n}-{c['ELEMS_PER_THREAD']}x{c['BLOCK']}"
                                        f"{'-gather' if c['BIT_REVERSE_GATHER'] else ''}"
                                        f"{'-tw' if c['TWIDDLE_SHARED'] else ''}")


@pytest.mark.parametrize(("n", "config"), list(tuned_cases()))
def test_tuned_fft_matches_numpy(n, config):
    x = complex_rows(2, n, n + 1)
    want = np.fft.fft(x.astype(np.complex128), axis=1)
    np.testing.assert_allclose(metile_fft_tuned.fft(x, config), want, rtol=0,
                               atol=2e-6 * np.abs(want).max() * np.log2(n))


def test_tuned_configurations_are_meTiles():
    assert len(metile_fft_tuned.configs(2048)) == 10 and len(metile_fft_tuned.configs(8)) == 4
    assert {c["ELEMS_PER_THREAD"] for c in metile_fft_tuned.configs(2048)} == {2, 4, 8, 16, 32}
